// A layer of pixels over a rectangle of a canvas, for marks that are many and small. At a GPU's pace the batch
// slots hold thousands of runs about a pixel tall and the KV map tens of thousands of block cells: a software
// canvas (a laptop without GPU raster, headless chromium) rasterizes each fillRect on the page's main thread at
// the commit, about a microsecond apiece (docs/room.md). Here a mark is a few spans of a typed array, and the
// canvas gets the layer as one image. Axis-aligned rectangles only, each drawn over what the layer holds as a
// canvas would draw it at that opacity (an opaque one replaces it, a translucent one blends over it); the layer
// is drawn over the canvas. A rectangle's edges are rounded to device pixels, so rectangles that tile (slots
// under a pixel tall) give each pixel to exactly one of them, and one narrower than a pixel may get none.

defineLive("Raster", ["Common"], () => {
  const { rgb } = Common;
  const buffers = new Map();  // "WxH" -> ImageData, reused frame to frame (a layer is drawn before the next)
  let scratch = null;  // the canvas a layer's pixels go through on their way to the view's canvas
  const word = new Uint32Array(1), bytes = new Uint8Array(word.buffer);  // RGBA as the platform stores it
  const packed = new Map();

  function color(hex, alpha) {
    const key = alpha === 1 ? hex : `${hex}/${alpha}`;
    let w = packed.get(key);
    if (w === undefined) {
      bytes.set([...rgb(hex), Math.round(255 * alpha)]);
      packed.set(key, (w = word[0]));
    }
    return w;
  }

  // [a, b): the device pixels from v to v + len (its edges rounded), within [0, n).
  function span(v, len, k, origin, n) {
    return [Math.max(0, Math.round(v * k) - origin), Math.min(n, Math.round((v + len) * k) - origin)];
  }

  function imageData(W, H) {
    const key = `${W}x${H}`;
    let img = buffers.get(key);
    if (!img) {
      if (buffers.size > 8) buffers.clear();  // sizes of a resized page
      buffers.set(key, (img = new ImageData(W, H)));
    } else new Uint32Array(img.data.buffer).fill(0);
    return img;
  }

  // A layer over (x, y, w, h) in the context's user space (CSS pixels; its scale: device pixels).
  function layer(ctx, x, y, w, h) {
    const k = ctx.getTransform().a;
    const ox = Math.round(x * k), oy = Math.round(y * k);
    const W = Math.max(0, Math.round((x + w) * k) - ox), H = Math.max(0, Math.round((y + h) * k) - oy);
    const img = W && H ? imageData(W, H) : null;
    const px = img ? new Uint32Array(img.data.buffer) : null, data = img ? img.data : null;

    // Pixel i <- the color at opacity a over it (source-over, unpremultiplied as ImageData is).
    function blender(hex, a) {
      const [r, g, b] = rgb(hex);
      return (i) => {
        const j = 4 * i, da = (data[j + 3] / 255) * (1 - a), out = a + da;
        data[j] = (r * a + data[j] * da) / out;
        data[j + 1] = (g * a + data[j + 1] * da) / out;
        data[j + 2] = (b * a + data[j + 2] * da) / out;
        data[j + 3] = 255 * out;
      };
    }

    // Each pixel of the rectangle where keep(column, row) holds (device pixels of the canvas): the color at
    // opacity alpha.
    function paint(rx, ry, rw, rh, hex, alpha, keep) {
      if (!img) return;
      const [xa, xb] = span(rx, rw, k, ox, W), [ya, yb] = span(ry, rh, k, oy, H);
      if (xa >= xb || ya >= yb) return;  // (off the layer)
      const c = color(hex, alpha), blend = alpha < 1 ? blender(hex, alpha) : null;
      for (let r = ya; r < yb; r++) {
        const a = r * W + xa, b = r * W + xb;
        if (blend) for (let i = a, col = xa; col < xb; i++, col++) { if (!keep || keep(ox + col, oy + r)) blend(i); }
        else if (keep) for (let i = a, col = xa; col < xb; i++, col++) { if (keep(ox + col, oy + r)) px[i] = c; }
        else if (b - a > 16) px.fill(c, a, b);
        else for (let i = a; i < b; i++) px[i] = c;  // (narrower than a call to fill is worth)
      }
    }

    return {
      rect(rx, ry, rw, rh, hex, alpha = 1) {
        paint(rx, ry, rw, rh, hex, alpha, null);
      },
      // Diagonal hatching (bottom left to top right, lines 1.6 px across, as Common.hatchPattern draws it),
      // anchored to the canvas.
      hatch(rx, ry, rw, rh, hex, scale, alpha = 1) {
        const period = Math.max(3, Math.round(6 * scale * k));
        const width = Math.max(1, Math.round(1.6 * Math.SQRT2 * scale * k));  // (a row's share of a line 1.6 across)
        paint(rx, ry, rw, rh, hex, alpha, (c, r) => (((c + r) % period) + period) % period < width);
      },
      // Onto the canvas, over what it has, at (x, y).
      draw() {
        if (!img) return;
        scratch = scratch || document.createElement("canvas");
        if (scratch.width < W || scratch.height < H) {
          scratch.width = Math.max(scratch.width, W);
          scratch.height = Math.max(scratch.height, H);
        }
        scratch.getContext("2d").putImageData(img, 0, 0);
        ctx.save();
        ctx.setTransform(1, 0, 0, 1, 0, 0);
        ctx.globalAlpha = 1;
        ctx.drawImage(scratch, 0, 0, W, H, ox, oy, W, H);
        ctx.restore();
      },
    };
  }

  return { layer };
});
