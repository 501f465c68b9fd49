"""What a software canvas costs per mark, in this machine's chromium (docs/room.md, issue #42 item 3): one
1574 x 1072 canvas (the timeline's size at 1600 x 1000), drawn 15 times each way after 2 warm-up frames, each
frame's drawing timed alone (js_ms) and with the rasterization getImageData forces (with_raster_ms):
10,524 rectangles a slot tall (256 slots in 300 px, 60 colors: the batch slots at a GPU's pace) as a fillRect
each; the same through a layer of pixels (assets/live/raster.js's way: spans of a typed array, one putImageData
and one drawImage); a full-canvas clear, once and twice; a stepped line of 2,800 points.

    taskset -c 1 python docs/perf/2026-11-28-raster/canvas_marks.py [--chromium /usr/bin/chromium] > out.json
"""
from __future__ import annotations

import argparse
import json
import shutil

from playwright.sync_api import sync_playwright

JS = r"""
() => {
  const c = document.createElement('canvas'); c.width = 1574; c.height = 1072; document.body.appendChild(c);
  const ctx = c.getContext('2d', {alpha: false});
  let seed = 1; const rnd = () => (seed = (seed * 16807) % 2147483647) / 2147483647;
  const colors = [...Array(60)].map((_, i) => `hsl(${i * 37 % 360}, 70%, ${40 + i % 3 * 15}%)`);
  const rects = [];
  const slotH = 300 / 256;
  for (let s = 0; s < 256; s++) {
    for (let x = 60, w = 0; x < 760; x += w) {
      w = 5 + rnd() * 60;
      rects.push([x, 400 + s * slotH, Math.min(w, 760 - x), slotH, colors[Math.floor(rnd() * 60)]]);
    }
  }
  for (const r of [...rects]) rects.push([r[0] + 800, r[1], r[2], r[3], r[4]]);
  const scratch = document.createElement('canvas'); scratch.width = 700; scratch.height = 300;
  const scratchCtx = scratch.getContext('2d');
  const packed = new Map(colors.map((c) => {  // each color as the pixel word the canvas stores
    scratchCtx.fillStyle = c;
    scratchCtx.fillRect(0, 0, 1, 1);
    return [c, new Uint32Array(scratchCtx.getImageData(0, 0, 1, 1).data.buffer)[0]];
  }));
  const ways = {
    each: () => { for (const [x, y, w, h, f] of rects) { ctx.fillStyle = f; ctx.fillRect(x, y, w, h); } },
    pixels: () => {
      for (const x0 of [60, 860]) {
        const W = 700, H = 300, img = scratchCtx.createImageData(W, H), buf = new Uint32Array(img.data.buffer);
        for (const [x, y, w, h, f] of rects) {
          if (x < x0 || x >= x0 + W) continue;
          const c = packed.get(f), xa = Math.round(x - x0), xb = Math.min(W, Math.round(x - x0 + w));
          const ya = Math.round(y - 400), yb = Math.min(H, Math.round(y - 400 + h));
          for (let yy = ya; yy < yb; yy++) buf.fill(c, yy * W + xa, yy * W + xb);
        }
        scratchCtx.putImageData(img, 0, 0);
        ctx.drawImage(scratch, 0, 0, W, H, x0, 400, W, H);
      }
    },
    clear: () => { ctx.fillStyle = '#111'; ctx.fillRect(0, 0, 1574, 1072); },
    clear2: () => {
      for (const f of ['#111', '#222']) { ctx.fillStyle = f; ctx.fillRect(0, 0, 1574, 1072); }
    },
    lines: () => {
      ctx.strokeStyle = '#fff';
      ctx.lineWidth = 2.8;
      ctx.beginPath();
      let y = 300;
      ctx.moveTo(60, y);
      for (let x = 60; x < 760; x += 0.25) {
        ctx.lineTo(x, y);
        y = 100 + rnd() * 100;
        ctx.lineTo(x, y);
      }
      ctx.stroke();
    },
  };
  const out = {};
  for (const [name, f] of Object.entries(ways)) {
    const n = 15; let js = 0, all = 0;
    for (let i = 0; i < n + 2; i++) {
      const t0 = performance.now();
      f();
      const t1 = performance.now();
      ctx.getImageData(0, 0, 1, 1);  // (rasterizes what was recorded)
      const t2 = performance.now();
      if (i >= 2) { js += t1 - t0; all += t2 - t0; }
    }
    out[name] = { js_ms: +(js / n).toFixed(2), with_raster_ms: +(all / n).toFixed(2) };
  }
  out.rects = rects.length;
  return out;
}
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    args = ap.parse_args()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=args.chromium,
                                    args=["--headless", "--no-sandbox", "--disable-gpu"])
        page = browser.new_page()
        page.set_content("<html><body></body></html>")
        print(json.dumps(page.evaluate(JS), indent=1))
        browser.close()


if __name__ == "__main__":
    main()
