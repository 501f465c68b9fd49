// The browser's canvas as far as a Raster layer (assets/live/raster.js) uses it, for the tests in node: a layer
// reaches the view's canvas as one image through a scratch canvas; the context keeps each image drawn, with
// where it went, and the names of its own drawing calls. k: the device pixels a CSS pixel (the context's scale).
"use strict";

globalThis.ImageData = class {
  constructor(w, h) {
    Object.assign(this, { width: w, height: h, data: new Uint8ClampedArray(4 * w * h) });
  }
};
globalThis.document = {
  createElement: () => {
    const c = { width: 0, height: 0, img: null, getContext: () => ({ putImageData: (img) => { c.img = img; } }) };
    return c;
  },
};

function recordingContext(k) {
  const images = [], calls = [];  // calls: the names of the drawing calls made on the canvas itself
  const ctx = { fillStyle: "", globalAlpha: 1, font: "", textAlign: "", textBaseline: "",
                getTransform: () => ({ a: k }), save() {}, restore() {}, setTransform() {},
                fillRect: () => calls.push("fillRect"), clearRect: () => calls.push("clearRect"),
                strokeRect: () => calls.push("strokeRect"), fillText: () => calls.push("fillText"),
                measureText: () => ({ width: 0 }),
                drawImage(src, sx, sy, w, h, x, y) {
                  images.push({ bytes: src.img.data.slice(), x, y, w, h });
                } };
  return { ctx, images, calls };
}

module.exports = { recordingContext };
