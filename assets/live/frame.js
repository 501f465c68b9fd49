// The frame loop: redraw at most MAX_FPS times a second, only when something changed, and only the
// views whose inputs changed (each view passes a signature of its inputs to changed()).

defineLive("FrameLoop", [], () => {
  const MAX_FPS = 30;       // redraws per second at most: smooth, and the engine keeps its CPU
  const FRAME_SHARE = 0.5;  // a slow machine: drawing takes at most this share of the main thread

  // draw(): paints a frame. onSecond({ fps, frames, frameMs }) once a second (counters for the page).
  function create(draw, onSecond) {
    const loop = { dirty: false, raf: 0, timer: null, nextAt: 0, closed: false, drew: false,
                   drawn: new WeakMap(), frames: 0, count: 0, ms: 0, tick: null };

    function markDirty() {
      loop.dirty = true;
      request();
    }

    function request() {
      if (!loop.raf && !loop.closed) loop.raf = requestAnimationFrame(frame);
    }

    function frame() {
      loop.raf = 0;
      if (!loop.dirty || loop.closed) return;
      const wait = loop.nextAt - performance.now();
      if (wait > 0) {
        if (!loop.timer) loop.timer = setTimeout(() => { loop.timer = null; request(); }, wait);
        return;
      }
      loop.dirty = false;
      loop.drew = false;
      const t0 = performance.now();
      draw();
      const d = performance.now() - t0;
      loop.nextAt = t0 + Math.max(1000 / MAX_FPS, d / FRAME_SHARE) - 4;  // 4 ms: animation-frame jitter
      if (loop.drew) {
        loop.frames++;
        loop.count++;
        loop.ms += d;
      }
    }

    // True (and remembered) when node's inputs differ from its last draw: draw it.
    function changed(node, sig) {
      if (loop.drawn.get(node) === sig) return false;
      loop.drawn.set(node, sig);
      loop.drew = true;
      return true;
    }

    loop.tick = setInterval(() => {
      onSecond({ fps: loop.count, frames: loop.frames, frameMs: loop.count ? loop.ms / loop.count : 0 });
      loop.count = 0;
      loop.ms = 0;
    }, 1000);

    function close() {
      loop.closed = true;
      clearInterval(loop.tick);
      clearTimeout(loop.timer);
      if (loop.raf) cancelAnimationFrame(loop.raf);
    }

    return { markDirty, changed, close };
  }

  return { MAX_FPS, create };
});
