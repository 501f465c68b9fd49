// Shared look and small DOM / canvas helpers of the live views (no state, no socket; loads in node for the
// tests: the DOM is touched only when a helper is called).

defineLive("Common", [], () => {
  // Qualitative palette indexed by request id: neighbouring ids differ strongly in hue. Red and grey
  // are kept out of it: red means preempted, grey means padding / free.
  const PALETTE = ["#38BDF8", "#FB923C", "#A3E635", "#F472B6", "#FDE047",
                   "#A78BFA", "#34D399", "#FDA4AF", "#5EEAD4", "#818CF8"];
  const C = {
    bg: "#0B0F17", plot: "#0F1522", grid: "#232C3D", axis: "#46516A", text: "#E8ECF3", muted: "#9AA4B5",
    free: "#252C39", idle: "#171D2A", held: "#4B5563", heldDim: "#262C37", preempt: "#F43F5E",
    swapped: "#E879F9",  // preempted with its KV swapped to the host pool (fuchsia: not a request's color)
    transfer: "#22D3EE",  // a disaggregated lane's KV hand-off, prefill engine -> decode engine (cyan)
    cached: "#94A3B8",  // cached-evictable KV blocks (slate: no request's color, brighter than free)
    stall: "#FBBF24",  // an iteration whose decoding rows waited for a prefill (amber, as waits)
    white: "#FFFFFF",
  };
  // A stall's words, for the Gantt and the batch slots (state.js finds them).
  function stallTip(st) {
    const s = st.stall;
    return [`iteration ${st.it} · ${fmt(st.t1 - st.t0, 2)} s: a stall`,
            `${s.rows} decoding row${s.rows === 1 ? "" : "s"} waited ${fmt(s.waited, 2)} s more than a usual `
              + `iteration (${fmt(s.usual, 2)} s) for their next token,`,
            `while ${s.prefill.toLocaleString()} prompt tokens were prefilled in the same iteration`];
  }

  // Amber over an iteration that stalled: its x span [xa, xb] and the band's height; labelled where it fits.
  function drawStall(ctx, k, xa, xb, y, h, label) {
    ctx.fillStyle = rgba(C.stall, 0.16);
    ctx.fillRect(xa, y, Math.max(xb - xa, 2), h);
    ctx.fillStyle = C.stall;
    ctx.fillRect(xa, y, Math.max(xb - xa, 2), Math.max(2, 2 * k));
    if (!label || xb - xa < 6 + 6 * k) return;  // (no room for a letter: at a GPU's pace, most are this narrow)
    ctx.font = `600 ${Math.round(11 * k)}px ${FONT}`;
    if (ctx.measureText(label).width + 6 > xb - xa) return;
    ctx.textBaseline = "top";
    ctx.textAlign = "left";
    ctx.fillText(label, xa + 3, y + 3 * k);
  }

  const FONT = "Inter, 'Source Sans Pro', 'Segoe UI', Roboto, Helvetica, Arial, sans-serif";

  const paletteIndex = (rid) => ((rid % PALETTE.length) + PALETTE.length) % PALETTE.length;
  const reqColor = (rid) => PALETTE[paletteIndex(rid)];  // the same request id: the same color, everywhere
  const clamp = (x, a, b) => Math.min(b, Math.max(a, x));
  const perfNow = () => performance.now() / 1000;
  const sameList = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);
  const fmt = (x, d = 2) => (x == null || !Number.isFinite(x) ? "–" : x.toFixed(d));
  const pct = (a, b) => (b ? (100 * a) / b : 0);
  // At most n characters (code points: an emoji is not cut in half), an ellipsis marking the cut.
  function clip(text, n) {
    const chars = Array.from(text);
    return chars.length <= n ? text : chars.slice(0, n - 1).join("") + "…";
  }
  // A request as the views name it: "#12", or "#12 Ada" when a participant sent it (max: name length).
  const reqLabel = (R, max = 14) => (R && R.name ? `#${R.rid} ${clip(R.name, max)}` : `#${R.rid}`);

  function rgb(hex) {
    const n = parseInt(hex.slice(1), 16);
    return [(n >> 16) & 255, (n >> 8) & 255, n & 255];
  }
  function rgba(hex, a) {
    const [r, g, b] = rgb(hex);
    return `rgba(${r},${g},${b},${a})`;
  }
  const mixCache = new Map();  // a few dozen colors, asked for on every frame
  function mix(hexA, hexB, t) {  // t = share of B
    const key = `${hexA}${hexB}${t}`;
    let out = mixCache.get(key);
    if (out === undefined) {
      const a = rgb(hexA), b = rgb(hexB);
      out = "#" + a.map((v, i) => Math.round(v + (b[i] - v) * t).toString(16).padStart(2, "0")).join("");
      mixCache.set(key, out);
    }
    return out;
  }
  function el(tag, cls, text) {  // DOM node; text goes in with textContent only
    const n = document.createElement(tag);
    if (cls) n.className = cls;
    if (text != null) n.textContent = text;
    return n;
  }
  function setText(node, text) {
    if (node.textContent !== text) node.textContent = text;
  }

  const hatchCache = new Map();
  function hatchPattern(ctx, color, k) {
    const key = `${color}|${k}`;
    let p = hatchCache.get(key);
    if (p) return p;
    const size = Math.round(6 * k);
    const c = document.createElement("canvas");
    c.width = c.height = size;
    const g = c.getContext("2d");
    g.strokeStyle = color;
    g.lineWidth = 1.6 * k;
    g.beginPath();
    g.moveTo(-1, size + 1);
    g.lineTo(size + 1, -1);
    g.moveTo(size - 1, size + 1);
    g.lineTo(size + 1, size - 1);
    g.moveTo(-1, 1);
    g.lineTo(1, -1);
    g.stroke();
    p = ctx.createPattern(c, "repeat");
    hatchCache.set(key, p);
    return p;
  }

  // A canvas sized to its wrapper's observed box (device pixels), or null before it has a size.
  function canvasContext(sizes, view) {
    const size = sizes.get(view.wrap);
    if (!size || size.w < 10 || size.h < 10) return null;
    const dpr = window.devicePixelRatio || 1;
    const W = Math.floor(size.w), H = Math.floor(size.h);
    if (view.canvas.width !== W * dpr || view.canvas.height !== H * dpr) {
      view.canvas.width = W * dpr;
      view.canvas.height = H * dpr;
      view.canvas.style.width = `${W}px`;
      view.canvas.style.height = `${H}px`;
    }
    const ctx = view.canvas.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    return { ctx, W, H };
  }

  // The tooltip: lines of text (never HTML) near the pointer, bordered in the thing's color.
  function tooltip(root, tip) {
    return {
      show(e, lines, color) {
        tip.textContent = "";
        lines.forEach((line, i) => tip.appendChild(el("div", i === 0 ? "ifl-tip-head" : null, line)));
        tip.style.borderColor = color;
        const r = root.getBoundingClientRect();
        tip.hidden = false;
        const x = e.clientX - r.left + 14, y = e.clientY - r.top + 14;
        tip.style.left = `${Math.min(x, r.width - tip.offsetWidth - 8)}px`;
        tip.style.top = `${y}px`;
      },
      hide() {
        tip.hidden = true;
      },
    };
  }

  return { PALETTE, C, FONT, stallTip, drawStall, reqColor, clamp, perfNow, sameList, fmt, pct, reqLabel, rgb, rgba, mix,
           el, setText, hatchPattern,
           canvasContext, tooltip };
});
