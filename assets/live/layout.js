// The page structure: a status row, then one canvas for every time-based view (Gantt, batch slots,
// utilization: one column per lane sharing the time axis; under it the roofline, one chart for all
// lanes), then the per-lane sections (KV map, text, or the KV detail), each with a title and a legend.

defineLive("Layout", ["Common"], () => {
  const { PALETTE, el } = Common;
  const TIMELINE_VIEWS = ["gantt", "slots", "util"];
  const VIEW_HEIGHT = { gantt: 400, slots: 240, kv: 300, util: 220, text: 360, detail: 340, roofline: 300 };
  const VIEW_TITLE = {
    gantt: "Requests", slots: "Batch slots", kv: "KV cache — physical blocks", util: "Utilization",
    text: "Generated text", detail: "One request's KV: logical blocks → block table → physical pool",
    roofline: "Roofline — recent iterations (log-log; one color per lane)",
  };
  // Legends explain every color and shading used by a view. A third element names a group shown only
  // when the page has it (the root's class ifl-has-<group>): GPU samples, prefix caching, speculative decoding,
  // swap preemption, a disaggregated lane (split).
  const LEGENDS = {
    gantt: [["queued", "queued (arrival → first scheduled)"], ["prefill", "prefill chunk (one bar per iteration)"],
            ["decode", "decode"], ["preempted", "preempted"], ["recompute", "recomputed prefill"],
            ["swapped", "swapped out: preempted, its KV in the host pool (resumes where it was)", "swap"],
            ["transfer", "KV hand-off: first token made on the prefill engine → KV copied to the decode engine", "split"],
            ["held", "padding: finished, still held in the batch"], ["finish", "finished"], ["abort", "aborted / error"],
            ["fromcache", "from cache: the prefill a prefix hit skipped (token share of the admission bar)", "prefix"],
            ["paused", "paused (the cards leave this time out of latencies)", "paused"],
            ["stall", "stall: an iteration whose decoding rows waited for a prefill", "stall"]],
    slots: [["prefill-cell", "prefill"], ["decode", "decode"], ["held-cell", "padding: finished row still computed"],
            ["idle", "empty slot"], ["draft-ok", "draft token accepted (speculative decoding)", "spec"],
            ["draft-no", "draft token rejected", "spec"],
            ["slotsender", "prefill engine's slots p0, p1… (under its line; the decode engine's above)", "split"],
            ["stall", "stall: decoding rows waited for a prefill in this iteration", "stall"]],
    kv: [["kvfull", "tokens held (fill = tokens / block size)"], ["kvpart", "allocated, not yet written"],
         ["reserved", "reserved, unused (static reserves prompt + max_tokens)"], ["free", "free block"],
         ["kvshared", "shared by several requests (stripes: their colors; ×count)", "prefix"],
         ["kvcached", "cached, evictable: no holder, reused on a prefix hit, evicted LRU first", "prefix"],
         ["kvhost", "host pool (under its line): a swapped-out request's blocks", "swap"],
         ["kvsender", "prefill engine's pool (under its line; the decode engine's above)", "split"]],
    util: [["l-busy", "busy slots ÷ max batch"], ["l-budget", "tokens computed ÷ token budget"],
           ["l-kv", "KV blocks used ÷ pool"], ["l-gpu", "GPU utilization (NVML)", "gpu"],
           ["l-gpumem", "GPU memory used", "gpu"], ["l-hit", "prefix cache hit rate (tokens, last 5 s)", "prefix"],
           ["l-mem", "memory bandwidth ÷ measured peak (roofline)", "roofline"],
           ["l-compute", "FLOP/s ÷ measured peak (roofline)", "roofline"],
           ["l-busy", "remote server: requests running (polled from its /metrics)", "remote"],
           ["l-budget", "remote server: requests waiting", "remote"],
           ["l-kvarea", "remote server: KV cache usage (scale on the right)", "remote"],
           ["l-tps", "tokens/s, prefill + decode (1 s rolling; lower band)"]],
    roofline: [["l-roof", "the device's roof: min(peak bandwidth × intensity, peak FLOP/s), dotted at the ridge"],
               ["rooflast", "a lane's latest iteration (older ones fade)"]],
    text: [["decode", "border color = request (the same in every view)"]],
    detail: [["kvfull", "tokens held"], ["kvpart", "slots allocated, empty"], ["reserved", "reserved, unused"],
             ["free", "free"], ["fromcache-block", "from the prefix cache at admission", "prefix"],
             ["kvshared", "shared block (×holders)", "prefix"], ["kvcached", "cached, evictable", "prefix"]],
  };

  // views: { timeline, status, <view name>: module with build(inst, cell, lane) }; prevTimeline: the
  // timeline this layout replaces (its zoom carries over), or null. Returns each view's own state:
  // { cols: Map(lane -> { name, status, <view>: view state }), timeline, roofline }.
  function build(inst, views, prevTimeline) {
    const body = inst.body, cfg = inst.cfg;
    body.textContent = "";
    body.style.setProperty("--ifl-cols", String(cfg.lanes.length));
    const cols = new Map(cfg.lanes.map((n) => [n, { name: n, status: null, kv: null, text: null, detail: null }]));
    const statusGrid = el("div", "ifl-grid ifl-status-row");
    for (const col of cols.values()) {
      col.status = views.status.build(col.name, cfg.headers[col.name] || [], inst);
      statusGrid.appendChild(col.status.node);
    }
    body.appendChild(statusGrid);
    const out = { cols, timeline: null, roofline: null };
    if (cfg.mode === "kv_detail") {
      section(inst, cols, views, "detail");
      if (cfg.views.includes("kv")) section(inst, cols, views, "kv");
      return out;
    }
    const tviews = cfg.views.filter((v) => TIMELINE_VIEWS.includes(v));
    if (tviews.length) out.timeline = views.timeline.build(inst, tviews, prevTimeline);
    if (tviews.includes("util")) out.roofline = section(inst, new Map([["", {}]]), views, "roofline")[0];  // one cell: every lane
    for (const v of cfg.views) if (!TIMELINE_VIEWS.includes(v)) section(inst, cols, views, v);
    return out;
  }

  // A titled section with one cell per column, built by views[v]; returns the cells' view states.
  function section(inst, cols, views, v) {
    const sec = el("section", `ifl-section ifl-sec-${v}`);
    sec.appendChild(sectionHead(v));
    const grid = el("div", "ifl-grid ifl-view-grid");
    if (inst.cfg.height) sec.style.flex = `${VIEW_HEIGHT[v]} 1 ${Math.round(40 * inst.scale)}px`;
    else if (v !== "detail") grid.style.height = `${Math.round(VIEW_HEIGHT[v] * (inst.cfg.large ? 1.15 : 1))}px`;
    if (cols.size === 1) grid.style.setProperty("--ifl-cols", "1");
    for (const col of cols.values()) {
      const cell = el("div", `ifl-cell ifl-cell-${v}`);
      grid.appendChild(cell);
      col[v] = views[v].build(inst, cell, col.name);
    }
    sec.appendChild(grid);
    inst.body.appendChild(sec);
    return [...cols.values()].map((col) => col[v]);
  }

  function sectionHead(v) {
    const head = el("div", "ifl-section-head");
    head.append(el("div", "ifl-title", VIEW_TITLE[v]), legend(v));
    return head;
  }

  function legend(v) {
    const box = el("div", "ifl-legend");
    if (v === "gantt" || v === "slots" || v === "kv") {
      const chips = el("span", "ifl-legend-item ifl-legend-palette");
      for (const c of PALETTE.slice(0, 5)) {
        const sw = el("span", "ifl-sw ifl-sw-dot");
        sw.style.background = c;
        chips.appendChild(sw);
      }
      chips.appendChild(el("span", null, "request"));
      box.appendChild(chips);
    }
    for (const [kind, label, group] of LEGENDS[v] || []) {
      const item = el("span", group ? `ifl-legend-item ifl-legend-${group}` : "ifl-legend-item");
      item.append(el("span", `ifl-sw ifl-sw-${kind}`), el("span", null, label));
      box.appendChild(item);
    }
    return box;
  }

  return { VIEW_HEIGHT, build, sectionHead };
});
