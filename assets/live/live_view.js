// Inflight live views: one Streamlit v2 component that follows the engine's /engine/ws event stream
// and draws it on canvas: Gantt, batch slots and utilization (timeline.js), KV blocks, block table.
// Every mark comes from an engine event; nothing is simulated or interpolated.
//
// Lifecycle: Streamlit runs this module's default export on mount and again on every data change.
// The socket, the event state and the plots live in a per-element store (keyed by parentElement),
// so a re-run only applies the new configuration. The returned cleanup closes everything on unmount.

/* ================================ constants ================================ */

const STORE_KEY = "__inflightLiveViews";
const MAX_STEPS = 300;          // iterations kept per strategy (slots grid, utilization)
const MAX_REQS = 160;           // requests kept per strategy; finished ones past the window go first
const MAX_SEGS = 64;            // segments kept per request before old ones are trimmed
const MAX_ROWS = 26;            // Gantt rows: the newest requests that touch the visible window
const MIN_ROWS = 8;             // Gantt rows are never taller than 1/MIN_ROWS of the plot
const MAX_CARDS = 24;           // generated-text cards per strategy
const WINDOW_S = 20;            // sliding window on the time axis (s)
const WINDOW_IT = 90;           // sliding window on the iteration axis
const RATE_WINDOW_S = 1.0;      // tokens/s: rolling window over step events
const MAX_GPU_SAMPLES = 600;    // NVML samples kept (5 min at the monitor's 2 per second)
const STATUS_POLL_MS = 2000;    // status refresh (paused, queue, last step ms, clock sync)
const MAX_FPS = 30;             // redraws per second at most: smooth, and the engine keeps its CPU
const FRAME_SHARE = 0.5;        // a slow machine: drawing takes at most this share of the main thread
const VIEWS = ["gantt", "slots", "kv", "util", "text"];
const VIEW_HEIGHT = { gantt: 400, slots: 240, kv: 300, util: 220, text: 360, detail: 340 };
const VIEW_TITLE = {
  gantt: "Requests", slots: "Batch slots", kv: "KV cache — physical blocks", util: "Utilization",
  text: "Generated text", detail: "One request's KV: logical blocks → block table → physical pool",
};

// Qualitative palette indexed by request id: neighbouring ids differ strongly in hue. Red and grey
// are kept out of it: red means preempted, grey means padding / free.
const PALETTE = ["#38BDF8", "#FB923C", "#A3E635", "#F472B6", "#FDE047",
                 "#A78BFA", "#34D399", "#FDA4AF", "#5EEAD4", "#818CF8"];
const C = {
  bg: "#0B0F17", plot: "#0F1522", grid: "#232C3D", axis: "#46516A", text: "#E8ECF3", muted: "#9AA4B5",
  free: "#252C39", idle: "#171D2A", held: "#4B5563", heldDim: "#262C37", preempt: "#F43F5E",
  white: "#FFFFFF",
};
const FONT = "Inter, 'Source Sans Pro', 'Segoe UI', Roboto, Helvetica, Arial, sans-serif";

/* ================================ small helpers ================================ */

const paletteIndex = (rid) => ((rid % PALETTE.length) + PALETTE.length) % PALETTE.length;
const reqColor = (rid) => PALETTE[paletteIndex(rid)];  // the same request id: the same color, everywhere
const clamp = (x, a, b) => Math.min(b, Math.max(a, x));
const perfNow = () => performance.now() / 1000;
const sameList = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);
const fmt = (x, d = 2) => (x == null || !Number.isFinite(x) ? "–" : x.toFixed(d));
const pct = (a, b) => (b ? (100 * a) / b : 0);

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

/* ================================ state module ================================ */
// Per strategy: a bounded list of step summaries, the requests (with Gantt segments and text),
// and the latest KV snapshot. Events are folded in as they arrive; nothing is kept raw.

function newState(strategies) {
  return { by: new Map(strategies.map((s) => [s, newStrategy(s)])), coalesced: 0, latestT: null,
           progress: null, gpu: [], gpuRev: 0 };
}

function newStrategy(name) {
  return { name, steps: [], reqs: new Map(), kv: null, kvRev: 0, kvCache: null, rev: 0, textRev: 0,
           lastIt: -1, lastT: null, lastStepMs: null, lastEvent: null };
}

function eventTime(ev) {
  if (ev.type === "step") return ev.t_start;
  if (ev.type === "request") return ev.arrival_s;
  if (ev.type === "finished") return ev.finish_s ?? ev.arrival_s;
  return typeof ev.t === "number" ? ev.t : null;
}

// Fold one event into the state; returns true if something visible changed.
function ingest(inst, ev) {
  const st = inst.state;
  const t = eventTime(ev);
  if (t != null && t < clearAfter(inst)) return false;
  if (ev.type === "status") return ingestStatus(inst, ev);
  if (ev.type === "gpu") return ingestGpu(st, ev);
  const S = st.by.get(ev.strategy);
  if (!S) return false;
  if (ev.type === "step") onStep(S, ev);
  else if (ev.type === "request") onRequest(S, ev);
  else if (ev.type === "finished") onFinished(S, ev);
  else return false;
  const tEnd = ev.type === "step" ? ev.t_end : t;
  if (tEnd != null) st.latestT = st.latestT == null ? tEnd : Math.max(st.latestT, tEnd);
  S.rev++;
  return true;
}

// The "clear" time, in service-clock seconds. A restarted service restarts its clock: a clear time
// from the old clock (ahead of the new "now") would hide everything, so it is ignored.
function clearAfter(inst) {
  const c = inst.cfg.clearAfter;
  if (c == null) return -Infinity;
  const now = inst.clockOffset != null ? perfNow() + inst.clockOffset : Infinity;
  return c <= now + 5 ? c : -Infinity;
}

function requestRecord(S, rid) {
  let R = S.reqs.get(rid);
  if (!R) {
    R = { rid, tag: null, prompt: null, nPrompt: null, maxTokens: null, arrival: null,
          state: "queued", segs: [], open: null, text: "", textRev: 0, nOut: 0, preemptions: 0,
          finishT: null, finishX: null, reason: null, error: null, done: false, endT: null,
          lastIt: null, lastKind: null, ctx: 0 };
    S.reqs.set(rid, R);
  }
  return R;
}

function promptText(ev) {
  if (typeof ev.prompt === "string") return ev.prompt;
  if (Array.isArray(ev.messages)) {
    const users = ev.messages.filter((m) => m && m.role === "user");
    const m = users[users.length - 1] || ev.messages[ev.messages.length - 1];
    if (m) return typeof m.content === "string" ? m.content : JSON.stringify(m.content);
  }
  if (Array.isArray(ev.prompt)) return `[${ev.prompt.length} token ids]`;
  return null;
}

function onRequest(S, ev) {
  const R = requestRecord(S, ev.request_id);
  R.tag = ev.tag ?? null;
  R.prompt = promptText(ev);
  R.nPrompt = ev.num_prompt_tokens ?? R.nPrompt;
  R.maxTokens = ev.max_tokens ?? R.maxTokens;
  R.arrival = ev.arrival_s;
  R.endT = Math.max(R.endT ?? -Infinity, ev.arrival_s);
  // Waiting from arrival until first scheduled: an open segment, closed by the first step.
  if (!R.segs.length && !R.done && !R.open) R.open = { kind: "queued", t0: ev.arrival_s, x0: S.lastIt + 0.5 };
}

// Entries of one step grouped per request: static rows carry a prefill entry plus a padding entry.
function groupEntries(entries) {
  const by = new Map();
  for (const [rid, phase, tokens, ctx, slot] of entries || []) {
    let g = by.get(rid);
    if (!g) by.set(rid, (g = { rid, real: 0, pad: 0, prefill: false, decode: false, slot, ctx }));
    if (phase === "padding") g.pad += tokens;
    else {
      g.real += tokens;
      if (phase === "prefill") g.prefill = true;
      if (phase === "decode") g.decode = true;
    }
    g.ctx = Math.max(g.ctx, ctx);
  }
  return by;
}

function segmentKind(R, g) {
  if (g.decode) return "decode";
  if (g.prefill) return R.preemptions > 0 ? "recompute" : "prefill";
  return "held";  // padding only: a finished row that still occupies its slot (static)
}

function onStep(S, ev) {
  const it = S.lastIt + 1;  // published iterations, consecutive (empty polling steps are not published)
  const t0 = ev.t_start, t1 = ev.t_end;
  for (const rid of ev.preempted || []) preempt(S, rid, t0, it);
  const groups = groupEntries(ev.entries);
  const cells = [];
  let real = 0, pad = 0, busy = 0;
  for (const g of groups.values()) {
    const R = requestRecord(S, g.rid);
    const kind = segmentKind(R, g);
    closeOpen(R, t0, it - 0.5);
    addSegment(R, kind, t0, t1, it, ev.step);
    if (R.lost && kind !== "held") {  // it was only preempted, not finished: back to live
      R.lost = R.done = false;
      R.state = kind;
      R.reason = null;
    }
    R.lastKind = kind;
    R.lastIt = it;
    R.ctx = g.ctx;
    R.endT = t1;
    if (R.state !== "finished") R.state = kind;
    real += g.real;
    pad += g.pad;
    if (g.real > 0) busy++;
    cells.push({ rid: g.rid, slot: g.slot, kind, real: g.real, pad: g.pad, ctx: g.ctx });
  }
  for (const rid of ev.finished || []) markFinished(S, rid, t1, it + 0.5);
  for (const rid of Object.keys(ev.sampled || {})) requestRecord(S, +rid).nOut++;
  for (const [rid, text] of Object.entries(ev.deltas || {})) appendText(S, +rid, text);
  const kv = ev.kv || {};
  const summary = { it, step: ev.step, t0, t1, cells, real, pad, busy, rows: groups.size,
                    used: ev.tokens_used, budget: ev.token_budget, kvUsed: kv.used, kvBlocks: kv.num_blocks,
                    waiting: ev.num_waiting, running: ev.num_running, tps: 0 };
  summary.tps = rollingRate(S.steps, summary);
  S.steps.push(summary);
  if (S.steps.length > MAX_STEPS) S.steps.splice(0, S.steps.length - MAX_STEPS);
  if (ev.kv) {
    S.kv = ev.kv;
    S.kvRev++;
  }
  S.lastIt = it;
  S.lastT = t1;
  S.lastStepMs = 1000 * (t1 - t0);
  reconcile(S, ev, groups);
}

// Every running request is in each step (scheduled, or holding KV); a finished one has had its
// "finished" event by the next step. A request that is neither was ended by events we never saw
// (coalesced): end it as lost. After a gap, only the newest num_waiting waiting requests still wait.
function reconcile(S, ev, groups) {
  const holders = new Set(Object.keys((ev.kv && ev.kv.block_tables) || {}).map(Number));
  const waiting = [];
  for (const R of S.reqs.values()) {
    if (R.done) continue;
    if (R.open) waiting.push(R);
    else if (!holders.has(R.rid) && !groups.has(R.rid)) markLost(S, R, ev.t_start);
    else if (R.lastKind === "held") markLost(S, R, ev.t_start);  // padding only: it finished unseen
  }
  if (!S.gapPending) return;
  S.gapPending = false;
  waiting.sort((a, b) => b.rid - a.rid);
  waiting.slice(Math.max(0, ev.num_waiting ?? waiting.length)).forEach((R) => markLost(S, R, ev.t_start));
}

function markLost(S, R, t) {
  closeOpen(R, t, S.lastIt + 0.5);
  R.state = "finished";
  R.done = true;
  R.lost = true;
  R.reason = R.reason ?? "unknown (events coalesced)";  // no finish marker: its time is unknown
}

// Decode and held runs over consecutive iterations merge into one bar; each prefill chunk is its own.
function addSegment(R, kind, t0, t1, it, step) {
  const last = R.segs[R.segs.length - 1];
  const merge = last && last.kind === kind && (kind === "decode" || kind === "held") && last.it1 === it - 1;
  if (merge) {
    last.t1 = t1;
    last.it1 = it;
    last.x1 = it + 0.5;
    last.step1 = step;
    last.n++;
  } else {
    R.segs.push({ kind, t0, t1, it0: it, it1: it, x0: it - 0.5, x1: it + 0.5, step0: step, step1: step, n: 1 });
    if (R.segs.length > MAX_SEGS) R.segs.splice(0, R.segs.length - MAX_SEGS);
  }
}

function closeOpen(R, t, x) {
  if (!R.open) return;
  R.segs.push({ kind: R.open.kind, t0: R.open.t0, t1: t, x0: R.open.x0, x1: x, it0: null, it1: null, n: 0 });
  R.open = null;
}

function preempt(S, rid, t, it) {
  const R = requestRecord(S, rid);
  R.preemptions++;
  R.state = "preempted";
  R.open = { kind: "preempted", t0: t, x0: it - 0.5 };
}

function markFinished(S, rid, t, x) {
  const R = requestRecord(S, rid);
  R.state = "finished";
  if (R.finishT == null) {
    R.finishT = t;
    R.finishX = x;
  }
}

function onFinished(S, ev) {
  const R = requestRecord(S, ev.request_id);
  R.reason = ev.finish_reason ?? null;
  R.error = ev.error ?? null;
  if (R.nPrompt == null) R.nPrompt = ev.num_prompt_tokens ?? null;
  if (typeof ev.num_output_tokens === "number") R.nOut = ev.num_output_tokens;
  if (R.arrival == null && ev.arrival_s != null) R.arrival = ev.arrival_s;
  if (typeof ev.text === "string") R.text = ev.text;  // authoritative (covers deltas lost to coalescing)
  R.textRev++;
  S.textRev++;
  const t = ev.finish_s ?? S.lastT;
  closeOpen(R, t, S.lastIt + 0.5);  // aborted while queued or preempted
  if (R.finishT == null) {
    R.finishT = t;
    R.finishX = S.lastIt + 0.5;
  }
  R.state = "finished";
  R.done = true;
  R.endT = Math.max(R.endT ?? -Infinity, t ?? -Infinity);
}

function appendText(S, rid, text) {
  if (!text) return;
  const R = requestRecord(S, rid);
  R.text += text;
  R.textRev++;
  S.textRev++;
}

// Real (prefill + decode) tokens per second over the last RATE_WINDOW_S of step events.
function rollingRate(steps, cur) {
  const from = cur.t1 - RATE_WINDOW_S;
  let tokens = cur.real, start = cur.t0;
  for (let k = steps.length - 1; k >= 0 && steps[k].t1 > from; k--) {
    tokens += steps[k].real;
    start = steps[k].t0;
  }
  const span = cur.t1 - Math.max(from, start);
  return span > 1e-6 ? tokens / span : 0;
}

// Flat memory: drop finished requests that ended before the retained window, then cap the count.
function prune(S) {
  const oldest = S.steps.length ? S.steps[0].t0 : -Infinity;
  for (const [rid, R] of S.reqs) {
    if (R.done && (R.endT ?? -Infinity) < oldest) S.reqs.delete(rid);
  }
  if (S.reqs.size <= MAX_REQS) return;
  const ids = [...S.reqs.keys()].sort((a, b) => a - b);
  for (const rid of ids) {  // oldest finished first, then oldest of all
    if (S.reqs.size <= MAX_REQS) return;
    if (S.reqs.get(rid).done) S.reqs.delete(rid);
  }
  for (const rid of ids) {
    if (S.reqs.size <= MAX_REQS * 4) return;
    S.reqs.delete(rid);
  }
}

// NVML samples of the device the engines share (only on a GPU).
function ingestGpu(st, ev) {
  st.gpu.push({ t: ev.t, util: ev.util_pct, mem: pct(ev.mem_used_mb, ev.mem_total_mb),
                usedMb: ev.mem_used_mb, totalMb: ev.mem_total_mb });
  if (st.gpu.length > MAX_GPU_SAMPLES) st.gpu.splice(0, st.gpu.length - MAX_GPU_SAMPLES);
  st.gpuRev++;
  return true;
}

function ingestStatus(inst, ev) {
  const st = inst.state;
  if (ev.event === "progress") {
    st.progress = { message: String(ev.message ?? ""), t: ev.t };
    return true;
  }
  const S = ev.strategy ? st.by.get(ev.strategy) : null;
  if (S) S.lastEvent = { event: ev.event, error: ev.error ?? null };
  if (inst.service && (ev.event === "paused" || ev.event === "resumed")) inst.service.paused = ev.event === "paused";
  requestStatus(inst);  // the reply carries the fresh engine states and config
  return true;
}

function applyServiceStatus(inst, status) {
  if (!status || typeof status !== "object") return;
  inst.service = status;
  if (typeof status.t === "number") inst.clockOffset = status.t - perfNow();
  const c = status.config || {};
  const limits = `${c.max_num_seqs}|${c.static_batch_size}`;  // what the charts depend on
  if (limits !== inst.limits) {
    inst.limits = limits;
    inst.statusRev++;
  }
}

/* ================================ socket module ================================ */

function socketUrl() {
  const proto = window.location.protocol === "https:" ? "wss:" : "ws:";
  return `${proto}//${window.location.host}/engine/ws`;
}

function openSocket(inst) {
  if (inst.closed) return;
  clearTimeout(inst.timers.reconnect);
  inst.timers.reconnect = null;
  let ws;
  try {
    ws = new WebSocket(socketUrl());
  } catch (e) {
    scheduleReconnect(inst);
    return;
  }
  inst.ws = ws;
  inst.conn = inst.retries ? "reconnecting" : "connecting";
  ws.onopen = () => {
    inst.retries = 0;
    inst.conn = "live";
    subscribe(inst);
  };
  ws.onmessage = (m) => onMessage(inst, m.data);
  ws.onerror = () => {};  // onclose follows and handles it
  ws.onclose = () => {
    if (inst.ws !== ws) return;
    inst.ws = null;
    if (!inst.closed) scheduleReconnect(inst);
  };
}

// Exponential backoff with jitter: 0.5 s, 1 s, 2 s ... capped at 8 s.
function scheduleReconnect(inst) {
  inst.conn = "reconnecting";
  inst.accepting = false;
  const delay = Math.min(8000, 500 * 2 ** Math.min(inst.retries, 5)) * (0.8 + 0.4 * Math.random());
  inst.retries++;
  inst.timers.reconnect = setTimeout(() => openSocket(inst), delay);
  markDirty(inst);
}

function send(inst, msg) {
  const ws = inst.ws;
  if (ws && ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify(msg));
}

// (Re)build the picture from what the ring buffer still holds. Events that arrive before the
// subscribe reply come from the old cursor and are dropped, so nothing is counted twice.
function subscribe(inst) {
  inst.state = newState(inst.cfg.strategies);
  inst.accepting = false;
  inst.subRef = `sub-${++inst.refSeq}`;
  send(inst, { cmd: "subscribe", ref: inst.subRef, strategies: inst.cfg.strategies, requests: null, kv: true,
               from_seq: "oldest" });
  markDirty(inst);
}

function requestStatus(inst) {
  send(inst, { cmd: "status", ref: "status" });
}

function onMessage(inst, raw) {
  let msg;
  try {
    msg = JSON.parse(raw);
  } catch (e) {
    return;
  }
  if (msg.type === "events") {
    if (!inst.accepting) return;
    if (msg.skipped > 0) {
      inst.state.coalesced += msg.skipped;
      for (const S of inst.state.by.values()) S.gapPending = true;
    }
    applyEvents(inst, msg.events || [], msg.skipped > 0);
  } else if (msg.type === "hello") {
    applyServiceStatus(inst, msg.status);
    markDirty(inst);
  } else if (msg.type === "reply") {
    if (msg.ref === inst.subRef) inst.accepting = true;
    if (msg.status) applyServiceStatus(inst, msg.status);
    markDirty(inst);
  } else if (msg.type === "error") {
    console.warn("inflight /engine/ws:", msg.message);
  }
}

function applyEvents(inst, events, changed = false) {
  for (const ev of events) changed = ingest(inst, ev) || changed;
  if (changed) {
    for (const S of inst.state.by.values()) prune(S);
    markDirty(inst);
  }
}

/* ================================ instance lifecycle ================================ */

function store() {
  if (!window[STORE_KEY]) window[STORE_KEY] = new WeakMap();
  return window[STORE_KEY];
}

function createInstance(root) {
  const q = (s) => root.querySelector(s);
  const inst = {
    root, cfg: null, state: null, service: null, statusRev: 0, clockOffset: null,
    el: { banner: q(".ifl-banner"), conn: q(".ifl-conn"), follow: q(".ifl-follow"), note: q(".ifl-note"), gpu: q(".ifl-gpu"),
          fps: q(".ifl-fps"), body: q(".ifl-body"), tip: q(".ifl-tip") },
    cols: new Map(), sizes: new WeakMap(), drawn: new WeakMap(), nextFrameAt: 0,
    ws: null, conn: "connecting", retries: 0, accepting: false, subRef: null, refSeq: 0, closed: false,
    sel: null, lastDataSel: undefined, zoom: {}, raf: 0, frames: 0, fpsCount: 0, frameMs: 0, drewThisFrame: false,
    timers: {}, setStateValue: () => {},
  };
  inst.cleanup = () => destroyInstance(inst);
  root.inflight = inst;  // reachable from the console and the browser tests
  inst.applyEvents = (events) => applyEvents(inst, events);
  // Views scrolled out of sight are not drawn (the same engine may be sharing this CPU).
  inst.onscreen = new WeakMap();
  inst.viewObs = new IntersectionObserver((entries) => {
    for (const e of entries) inst.onscreen.set(e.target, e.isIntersecting);
    markDirty(inst);
  });
  inst.resizeObs = new ResizeObserver((entries) => {
    for (const e of entries) {
      const box = e.borderBoxSize && e.borderBoxSize[0];
      inst.sizes.set(e.target, { w: e.contentRect.width, h: e.contentRect.height, outerH: box ? box.blockSize : null });
    }
    markDirty(inst);
  });
  inst.timers.fps = setInterval(() => tickFps(inst), 1000);
  inst.timers.status = setInterval(() => requestStatus(inst), STATUS_POLL_MS);
  inst.timers.open = setInterval(() => { if (following(inst)) markDirty(inst); }, 1000 / MAX_FPS);
  return inst;
}

function destroyInstance(inst) {
  if (inst.closed) return;
  inst.closed = true;
  for (const t of Object.values(inst.timers)) { clearInterval(t); clearTimeout(t); }
  if (inst.raf) cancelAnimationFrame(inst.raf);
  if (inst.ws) {
    const ws = inst.ws;
    inst.ws = null;
    ws.onclose = ws.onmessage = ws.onopen = null;
    ws.close();
  }
  inst.resizeObs.disconnect();
  inst.viewObs.disconnect();
  if (inst.owner) store().delete(inst.owner);
}

function tickFps(inst) {
  inst.root.dataset.fps = String(inst.fpsCount);
  inst.root.dataset.frames = String(inst.frames);
  inst.root.dataset.frameMs = inst.fpsCount ? (inst.frameMs / inst.fpsCount).toFixed(1) : "0";
  inst.frameMs = 0;
  setText(inst.el.fps, `${inst.fpsCount} fps`);
  inst.fpsCount = 0;
}

function normalizeConfig(d) {
  d = d || {};
  const strategies = Array.isArray(d.strategies) && d.strategies.length ? d.strategies.map(String) : ["continuous"];
  const views = (Array.isArray(d.views) ? d.views : VIEWS).filter((v) => VIEWS.includes(v));
  return {
    strategies, views,
    axis: d.axis === "iterations" ? "iterations" : "time",
    large: !!d.large_text,
    clearAfter: typeof d.clear_after_s === "number" ? d.clear_after_s : null,
    selected: Number.isInteger(d.selected) ? d.selected : null,
    height: typeof d.height === "number" && d.height > 0 ? d.height : null,
    mode: d.mode === "kv_detail" ? "kv_detail" : "live",
  };
}

// A re-run: apply the new configuration; rebuild the layout or the state only when needed.
function applyConfig(inst, cfg) {
  const prev = inst.cfg;
  inst.cfg = cfg;
  inst.scale = cfg.large ? 1.5 : 1;
  inst.root.classList.toggle("ifl-large", cfg.large);
  inst.root.style.height = cfg.height ? `${cfg.height}px` : "";
  if (cfg.selected !== inst.lastDataSel) {  // a pick made from Python
    inst.lastDataSel = cfg.selected;
    inst.sel = cfg.selected;
  }
  if (prev && prev.axis !== cfg.axis) inst.zoom = {};
  const layoutChanged = !prev || prev.mode !== cfg.mode || !sameList(prev.strategies, cfg.strategies)
    || !sameList(prev.views, cfg.views) || prev.large !== cfg.large || prev.height !== cfg.height;
  const resetNeeded = !prev || !sameList(prev.strategies, cfg.strategies) || prev.clearAfter !== cfg.clearAfter;
  if (layoutChanged) buildLayout(inst);
  if (resetNeeded) {
    if (inst.ws && inst.ws.readyState === WebSocket.OPEN) subscribe(inst);
    else {
      inst.state = newState(cfg.strategies);
      if (!inst.ws && !inst.timers.reconnect) openSocket(inst);
    }
  }
  markDirty(inst);
}

function pick(inst, rid) {
  inst.sel = rid == null || inst.sel === rid ? null : rid;
  try {
    inst.setStateValue("selected", inst.sel);
  } catch (e) {
    console.warn("inflight: could not report the pick", e);
  }
  markDirty(inst);
}

/* ================================ layout ================================ */
// Status row, then one canvas for every time-based view (Gantt, batch slots, utilization: one
// column per strategy, sharing the time axis; timeline.js), then the KV maps and the text.

function buildLayout(inst) {
  inst.timeline = null;
  inst.cols = new Map();
  const body = inst.el.body;
  body.textContent = "";
  const cfg = inst.cfg;
  body.style.setProperty("--ifl-cols", String(cfg.strategies.length));
  const cols = new Map(cfg.strategies.map((n) => [n, { name: n }]));
  const statusGrid = el("div", "ifl-grid ifl-status-row");
  for (const col of cols.values()) {
    col.status = buildStatus(col.name);
    statusGrid.appendChild(col.status.node);
  }
  body.appendChild(statusGrid);
  inst.cols = cols;
  if (cfg.mode === "kv_detail") {
    buildSection(inst, "detail");
    if (cfg.views.includes("kv")) buildSection(inst, "kv");
    return;
  }
  const tviews = cfg.views.filter((v) => TIMELINE_VIEWS.includes(v));
  if (tviews.length) buildTimeline(inst, tviews);
  for (const v of cfg.views) if (!TIMELINE_VIEWS.includes(v)) buildSection(inst, v);
}

function sectionHead(v) {
  const head = el("div", "ifl-section-head");
  head.append(el("div", "ifl-title", VIEW_TITLE[v]), buildLegend(v));
  return head;
}

function observeView(inst, node) {
  inst.resizeObs.observe(node);
  inst.viewObs.observe(node);
}

const offscreen = (inst, node) => inst.onscreen.get(node) === false;

function buildSection(inst, v) {
  const sec = el("section", `ifl-section ifl-sec-${v}`);
  sec.appendChild(sectionHead(v));
  const grid = el("div", "ifl-grid ifl-view-grid");
  if (inst.cfg.height) sec.style.flex = `${VIEW_HEIGHT[v]} 1 ${Math.round(40 * inst.scale)}px`;
  else if (v !== "detail") grid.style.height = `${Math.round(VIEW_HEIGHT[v] * (inst.cfg.large ? 1.15 : 1))}px`;
  for (const col of inst.cols.values()) {
    const cell = el("div", `ifl-cell ifl-cell-${v}`);
    grid.appendChild(cell);
    col[v] = buildViewCell(inst, v, cell, col.name);
  }
  sec.appendChild(grid);
  inst.el.body.appendChild(sec);
}

function buildStatus(name) {
  const node = el("div", "ifl-status");
  const nameEl = el("span", "ifl-sname", name);
  const pill = el("span", "ifl-pill", "…");
  const facts = el("span", "ifl-facts", "");
  node.append(nameEl, pill, facts);
  return { node, pill, facts, sig: "" };
}

function buildViewCell(inst, v, cell, name) {
  if (v === "kv") {
    const caption = el("div", "ifl-caption", "");
    const wrap = el("div", "ifl-canvas-wrap");
    const canvas = el("canvas", "ifl-canvas");
    wrap.appendChild(canvas);
    cell.append(caption, wrap);
    observeView(inst, wrap);
    const view = { cell, caption, wrap, canvas, geom: null };
    canvas.onmousemove = (e) => kvHover(inst, name, view, e);
    canvas.onmouseleave = () => hideTip(inst);
    canvas.onclick = (e) => kvClick(inst, name, view, e);
    return view;
  }
  if (v === "text") {
    const list = el("div", "ifl-cards");
    cell.appendChild(list);
    return { cell, list, cards: new Map(), order: "" };
  }
  if (v === "detail") {
    const head = el("div", "ifl-detail-head");
    const wrap = el("div", "ifl-canvas-wrap ifl-detail-canvas");
    wrap.style.height = `${Math.round(230 * inst.scale)}px`;
    const canvas = el("canvas", "ifl-canvas");
    wrap.appendChild(canvas);
    const stats = el("div", "ifl-detail-stats");
    cell.append(head, wrap, stats);
    observeView(inst, wrap);
    return { cell, head, wrap, canvas, stats };
  }
  return { cell };
}

// Legends explain every color and shading used by a view.
const LEGENDS = {
  gantt: [["queued", "queued (arrival → first scheduled)"], ["prefill", "prefill chunk (one bar per iteration)"],
          ["decode", "decode"], ["preempted", "preempted"], ["recompute", "recomputed prefill"],
          ["held", "padding: finished, still held in the batch"], ["finish", "finished"], ["abort", "aborted / error"]],
  slots: [["prefill-cell", "prefill"], ["decode", "decode"], ["held-cell", "padding: finished row still computed"],
          ["idle", "empty slot"]],
  kv: [["kvfull", "tokens held (fill = tokens / block size)"], ["kvpart", "allocated, not yet written"],
       ["reserved", "reserved, unused (static reserves prompt + max_tokens)"], ["free", "free block"]],
  util: [["l-busy", "busy slots ÷ max batch"], ["l-budget", "tokens computed ÷ token budget"],
         ["l-kv", "KV blocks used ÷ pool"], ["l-gpu", "GPU utilization (NVML)"], ["l-gpumem", "GPU memory used"],
         ["l-tps", "tokens/s, prefill + decode (1 s rolling; lower band)"]],
  text: [["decode", "border color = request (the same in every view)"]],
  detail: [["kvfull", "tokens held"], ["kvpart", "slots allocated, empty"], ["reserved", "reserved, unused"],
           ["free", "free"]],
};

function buildLegend(v) {
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
  for (const [kind, label] of LEGENDS[v] || []) {
    const item = el("span", kind.startsWith("l-gpu") ? "ifl-legend-item ifl-legend-gpu" : "ifl-legend-item");
    item.append(el("span", `ifl-sw ifl-sw-${kind}`), el("span", null, label));
    box.appendChild(item);
  }
  return box;
}

/* ================================ frame loop ================================ */

function markDirty(inst) {
  inst.dirty = true;
  requestFrame(inst);
}

function requestFrame(inst) {
  if (!inst.raf && !inst.closed) inst.raf = requestAnimationFrame(() => frame(inst));
}

// At most MAX_FPS redraws a second, and only of what changed since the last one.
function frame(inst) {
  inst.raf = 0;
  if (!inst.dirty || !inst.state || inst.closed) return;
  const wait = inst.nextFrameAt - performance.now();
  if (wait > 0) return deferFrame(inst, wait);
  inst.dirty = false;
  inst.drewThisFrame = false;
  const t0 = performance.now();
  drawBadges(inst);
  const fc = frameContext(inst);
  for (const col of inst.cols.values()) {
    const S = inst.state.by.get(col.name);
    if (!S) continue;
    drawStatus(inst, S, col);
    if (col.kv) drawKV(inst, S, col.kv);
    if (col.text) drawText(inst, S, col.text);
    if (col.detail) drawDetail(inst, S, col.detail);
  }
  if (inst.timeline) drawTimeline(inst, fc);
  const d = performance.now() - t0;
  inst.nextFrameAt = t0 + Math.max(1000 / MAX_FPS, d / FRAME_SHARE) - 4;  // 4 ms: animation-frame jitter
  if (inst.drewThisFrame) {
    inst.frames++;
    inst.fpsCount++;
    inst.frameMs += d;
  }
}

function deferFrame(inst, ms) {
  if (!inst.timers.frame) inst.timers.frame = setTimeout(() => { inst.timers.frame = null; requestFrame(inst); }, ms);
}

// The time axis follows "now" while requests are in flight: the window scrolls at MAX_FPS.
function following(inst) {
  return inst.cfg.axis === "time" && !inst.zoom.time && hasOpenWork(inst);
}

// Only redraw a view when its inputs changed (signature differs from the last draw).
function changed(inst, node, sig) {
  if (inst.drawn.get(node) === sig) return false;
  inst.drawn.set(node, sig);
  inst.drewThisFrame = true;
  return true;
}

function connected(inst) {
  return inst.conn === "live" && inst.clockOffset != null;
}

// The service clock "now": known from the last status (clock sync) while connected, else the
// latest event time. Used only to extend bars of requests that are still waiting.
function serviceNow(inst) {
  const latest = inst.state.latestT;
  if (!connected(inst)) return latest;
  const now = perfNow() + inst.clockOffset;
  return latest == null ? now : Math.max(latest, now);
}

function hasOpenWork(inst) {
  if (!inst.state) return false;
  for (const S of inst.state.by.values()) {
    for (const R of S.reqs.values()) if (R.open || !R.done) return true;
  }
  return false;
}

function frameContext(inst) {
  const axis = inst.cfg.axis;
  const open = hasOpenWork(inst);
  const now = open ? serviceNow(inst) : inst.state.latestT;
  const fc = { axis, now, open, time: null, it: new Map(), rows: new Map() };
  if (axis === "time") {
    const right = now == null ? (inst.clockOffset != null ? perfNow() + inst.clockOffset : WINDOW_S) : now;
    const left = Math.max(-0.3, right - WINDOW_S * 0.96);  // the service clock starts at 0
    const follow = [left, left + WINDOW_S];
    fc.time = inst.zoom.time || follow;
    const rows = ganttRows([...inst.state.by.values()], fc.time, "time", fc);
    for (const name of inst.state.by.keys()) fc.rows.set(name, rows);
  } else {
    for (const S of inst.state.by.values()) {
      const right = S.lastIt + 1;
      const left = Math.max(-0.5, right - WINDOW_IT * 0.96);
      const follow = [left, left + WINDOW_IT];
      const range = inst.zoom[`it:${S.name}`] || follow;
      fc.it.set(S.name, range);
      fc.rows.set(S.name, ganttRows([S], range, "iterations", fc));
    }
  }
  return fc;
}

function xRange(fc, S) {
  return fc.axis === "time" ? fc.time : fc.it.get(S.name);
}

// Extent of a request on the x axis, open waits extended to "now" (time) / the latest iteration.
function reqExtent(R, axis, fc, S) {
  const first = R.segs[0];
  if (axis === "time") {
    const a = R.arrival ?? first?.t0 ?? R.open?.t0;
    const b = R.open ? fc.now : Math.max(R.endT ?? -Infinity, R.finishT ?? -Infinity);
    return [a, b];
  }
  const a = first ? first.x0 : R.open?.x0;
  const b = R.open ? S.lastIt + 0.5 : Math.max(R.segs.length ? R.segs[R.segs.length - 1].x1 : -Infinity,
                                              R.finishX ?? -Infinity);
  return [a, b];
}

// Rows: the newest requests that touch the window (shared by both columns on the time axis, so a
// request sits at the same height on both sides). Rows are request ids: a row never moves.
function ganttRows(strategies, range, axis, fc) {
  const ids = new Set();
  for (const S of strategies) {
    for (const R of S.reqs.values()) {
      const [a, b] = reqExtent(R, axis, fc, S);
      if (a == null || b == null) continue;
      if (b >= range[0] && a <= range[1]) ids.add(R.rid);
    }
  }
  return [...ids].sort((a, b) => b - a).slice(0, MAX_ROWS);
}

/* ================================ view: KV block map (canvas) ================================ */

// Per-block owner, logical index and tokens held, recomputed once per KV snapshot.
function kvCells(S) {
  if (S.kvCache && S.kvCache.rev === S.kvRev) return S.kvCache;
  const kv = S.kv;
  const n = kv.num_blocks, bs = kv.block_size;
  const owner = new Int32Array(n).fill(-1);  // the block tables' inverse (the wire carries only tables)
  const logical = new Int32Array(n).fill(-1);
  const tokens = new Int32Array(n);
  let held = 0, slots = 0;
  for (const [key, table] of Object.entries(kv.block_tables || {})) {
    const kvTok = (kv.kv_tokens || {})[key] ?? 0;
    held += kvTok;
    slots += table.length * bs;
    table.forEach((b, i) => {
      if (b < 0 || b >= n) return;
      owner[b] = Number(key);
      logical[b] = i;
      tokens[b] = clamp(kvTok - i * bs, 0, bs);
    });
  }
  S.kvCache = { rev: S.kvRev, n, bs, owner, logical, tokens, held, slots, used: kv.used,
                reservedUnused: kv.reserved_unused_slots, tables: kv.block_tables || {} };
  return S.kvCache;
}

function canvasContext(inst, view) {
  const size = inst.sizes.get(view.wrap);
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

// Square cells filling the box: the largest cell size that fits all blocks. A pool too big for
// 3 px cells is drawn with `group` consecutive blocks per cell (said in the caption).
function kvGeometry(n, W, H) {
  const MIN = 3;
  const group = Math.max(1, Math.ceil(n / (Math.floor(W / MIN) * Math.floor(H / MIN))));
  const cells = Math.ceil(n / group);
  let s = Math.max(MIN, Math.floor(Math.sqrt((W * H) / Math.max(cells, 1))));
  while (s > MIN && Math.floor(W / s) * Math.floor(H / s) < cells) s--;
  const cols = Math.max(1, Math.floor(W / s));
  return { s, cols, cells, group, gap: s >= 7 ? 1 : 0, ox: Math.floor((W - cols * s) / 2) };
}

// One cell's content: its block, or for a grouped cell the most common owner (the picked request
// wins) and the tokens held in the group.
function kvCell(kc, g, c, sel) {
  if (g.group === 1) return { owner: kc.owner[c], tokens: kc.tokens[c], cap: kc.bs, first: c, last: c };
  const first = c * g.group, last = Math.min(kc.n, first + g.group) - 1;
  const count = new Map();
  let tokens = 0, used = 0;
  for (let i = first; i <= last; i++) {
    const o = kc.owner[i];
    if (o < 0) continue;
    used++;
    tokens += kc.tokens[i];
    count.set(o, (count.get(o) || 0) + 1);
  }
  let owner = -1, best = 0;
  for (const [o, k] of count) if (k > best || o === sel) { owner = o; best = o === sel ? Infinity : k; }
  return { owner, tokens, cap: (last - first + 1) * kc.bs, first, last, used };
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

function drawKV(inst, S, view) {
  const size = inst.sizes.get(view.wrap);
  const sig = `${S.kvRev}|${inst.sel}|${size ? size.w + "x" + size.h : ""}`;
  if (!S.kv) {
    if (changed(inst, view.canvas, sig)) {
      const c = canvasContext(inst, view);
      if (c) c.ctx.clearRect(0, 0, c.W, c.H);
      setText(view.caption, "no KV snapshot yet (waiting for the first iteration)");
    }
    return;
  }
  if (offscreen(inst, view.wrap) || !changed(inst, view.canvas, sig)) return;
  const c = canvasContext(inst, view);
  if (!c) return;
  const { ctx, W, H } = c;
  const kc = kvCells(S);
  const g = kvGeometry(kc.n, W, H);
  view.geom = g;
  ctx.clearRect(0, 0, W, H);
  const inner = g.s - g.gap;
  for (let c = 0; c < g.cells; c++) {
    const x = g.ox + (c % g.cols) * g.s, y = Math.floor(c / g.cols) * g.s;
    const cell = kvCell(kc, g, c, inst.sel);
    drawBlock(ctx, inst, x, y, inner, cell.owner, cell.tokens, cell.cap);
  }
  setText(view.caption, `${kc.used} / ${kc.n} blocks used (${fmt(pct(kc.used, kc.n), 1)}%) · `
    + `${kc.held.toLocaleString()} tokens in ${kc.slots.toLocaleString()} slots`
    + (kc.slots ? ` (${fmt(pct(kc.held, kc.slots), 0)}% full)` : "") + ` · ${kc.bs} tokens/block`
    + (g.group > 1 ? ` · 1 cell = ${g.group} blocks` : ""));
}

function drawBlock(ctx, inst, x, y, s, owner, tokens, bs) {
  if (owner < 0) {
    ctx.fillStyle = C.free;
    ctx.fillRect(x, y, s, s);
    return;
  }
  const color = reqColor(owner);
  const dim = inst.sel != null && owner !== inst.sel;
  ctx.globalAlpha = dim ? 0.22 : 1;
  if (tokens <= 0) {  // reserved but holding nothing yet
    ctx.fillStyle = C.idle;
    ctx.fillRect(x, y, s, s);
    ctx.fillStyle = hatchPattern(ctx, color, inst.scale);
    ctx.fillRect(x, y, s, s);
  } else {
    ctx.fillStyle = rgba(color, 0.28);
    ctx.fillRect(x, y, s, s);
    const h = Math.max(1, Math.round((s * tokens) / bs));
    ctx.fillStyle = color;
    ctx.fillRect(x, y + s - h, s, h);
  }
  ctx.globalAlpha = 1;
  if (inst.sel === owner && s >= 5) {
    ctx.strokeStyle = C.white;
    ctx.lineWidth = 1;
    ctx.strokeRect(x + 0.5, y + 0.5, s - 1, s - 1);
  }
}

function kvBlockAt(inst, name, view, e) {
  const S = inst.state && inst.state.by.get(name);
  if (!S || !S.kv || !view.geom) return null;
  const r = view.canvas.getBoundingClientRect();
  const g = view.geom;
  const cx = Math.floor((e.clientX - r.left - g.ox) / g.s), cy = Math.floor((e.clientY - r.top) / g.s);
  if (cx < 0 || cx >= g.cols || cy < 0) return null;
  const c = cy * g.cols + cx;
  if (c >= g.cells) return null;
  const kc = kvCells(S);
  const cell = kvCell(kc, g, c, inst.sel);
  return { ...cell, i: cell.first, logical: kc.logical[cell.first], bs: kc.bs, group: g.group };
}

function kvHover(inst, name, view, e) {
  const b = kvBlockAt(inst, name, view, e);
  if (!b) return hideTip(inst);
  let lines;
  if (b.group > 1) {
    lines = [`blocks ${b.first}–${b.last}`, b.owner < 0 ? "all free"
      : `${b.used} used · mostly request #${b.owner}`, `${b.tokens} / ${b.cap} token slots held`];
  } else {
    lines = b.owner < 0 ? [`block ${b.i}`, "free"]
      : [`block ${b.i} · request #${b.owner}`, `logical block ${b.logical}`,
         b.tokens > 0 ? `${b.tokens} / ${b.bs} tokens held` : `0 / ${b.bs} tokens (reserved, unused)`];
  }
  showTip(inst, e, lines, b.owner >= 0 ? reqColor(b.owner) : C.muted);
}

function kvClick(inst, name, view, e) {
  const b = kvBlockAt(inst, name, view, e);
  if (b) pick(inst, b.owner >= 0 ? b.owner : null);
}

function showTip(inst, e, lines, color) {
  const tip = inst.el.tip;
  tip.textContent = "";
  lines.forEach((line, i) => tip.appendChild(el("div", i === 0 ? "ifl-tip-head" : null, line)));
  tip.style.borderColor = color;
  const r = inst.root.getBoundingClientRect();
  tip.hidden = false;
  const x = e.clientX - r.left + 14, y = e.clientY - r.top + 14;
  tip.style.left = `${Math.min(x, r.width - tip.offsetWidth - 8)}px`;
  tip.style.top = `${y}px`;
}

function hideTip(inst) {
  inst.el.tip.hidden = true;
}

/* ================================ view: generated text ================================ */

function reqStatusLabel(R, S) {
  if (R.lost) return "ended unseen (events coalesced)";
  if (R.reason === "abort") return "aborted";
  if (R.reason === "error") return "error";
  if (R.state === "finished") {
    const held = R.lastKind === "held" && R.lastIt === S.lastIt && S.kv && S.kv.block_tables
      && String(R.rid) in S.kv.block_tables;
    return `finished${R.reason ? ` · ${R.reason}` : ""}${held ? " · still held" : ""}`;
  }
  return { queued: "queued", prefill: "prefill", decode: "decoding", preempted: "preempted",
           recompute: "recomputing", held: "held" }[R.state] || R.state;
}

function drawText(inst, S, view) {
  const sig = `${S.rev}|${S.textRev}|${inst.sel}`;
  if (!changed(inst, view.list, sig)) return;
  const ids = [...S.reqs.keys()].sort((a, b) => b - a).slice(0, MAX_CARDS);
  const keep = new Set(ids);
  for (const [rid, card] of view.cards) {
    if (!keep.has(rid)) {
      card.node.remove();
      view.cards.delete(rid);
    }
  }
  const order = ids.join(",");
  ids.forEach((rid) => {
    const R = S.reqs.get(rid);
    let card = view.cards.get(rid);
    if (!card) view.cards.set(rid, (card = buildCard(inst, R)));
    updateCard(inst, S, R, card);
  });
  if (order !== view.order) {  // newest first; only touch the DOM order when it changed
    view.order = order;
    ids.forEach((rid) => view.list.appendChild(view.cards.get(rid).node));
  }
  if (!ids.length && !view.list.firstChild) view.list.appendChild(el("div", "ifl-empty", "no requests yet"));
  else if (ids.length) view.list.querySelectorAll(".ifl-empty").forEach((n) => n.remove());
}

function buildCard(inst, R) {
  const node = el("div", "ifl-card");
  const head = el("div", "ifl-card-head");
  const chip = el("span", "ifl-chip", `#${R.rid}`);
  chip.style.background = reqColor(R.rid);
  const tag = el("span", "ifl-tag", "");
  const state = el("span", "ifl-state", "");
  const count = el("span", "ifl-count", "");
  head.append(chip, tag, state, count);
  const prompt = el("div", "ifl-prompt", "");
  const out = el("div", "ifl-out", "");
  node.append(head, prompt, out);
  node.style.borderLeftColor = reqColor(R.rid);
  node.onclick = () => pick(inst, R.rid);
  return { node, tag, state, count, prompt, out, textRev: -1 };
}

function updateCard(inst, S, R, card) {
  setText(card.tag, R.tag ?? "");
  setText(card.state, reqStatusLabel(R, S));
  card.state.dataset.state = R.state;
  const counts = [];
  if (R.nPrompt != null) counts.push(`${R.nPrompt} prompt`);
  counts.push(`${R.nOut}${R.maxTokens ? `/${R.maxTokens}` : ""} out`);
  if (R.preemptions) counts.push(`${R.preemptions}× preempted`);
  setText(card.count, counts.join(" · "));
  setText(card.prompt, R.prompt ?? "");
  if (card.textRev !== R.textRev) {
    card.textRev = R.textRev;
    card.out.textContent = R.text || (R.done ? (R.error ? `(${R.error})` : "(no text)") : "…");
  }
  card.node.classList.toggle("ifl-dim", inst.sel != null && inst.sel !== R.rid);
  card.node.classList.toggle("ifl-sel", inst.sel === R.rid);
}

/* ================================ view: KV detail (one request) ================================ */

function detailRid(inst, S) {
  const tables = (S.kv && S.kv.block_tables) || {};
  if (inst.sel != null) return inst.sel;
  const live = Object.keys(tables).map(Number).filter((r) => tables[r].length);
  return live.length ? Math.max(...live) : null;
}

function drawDetail(inst, S, view) {
  const rid = detailRid(inst, S);
  const size = inst.sizes.get(view.wrap);
  const R = rid != null ? S.reqs.get(rid) : null;
  const sig = `${S.kvRev}|${rid}|${R ? R.state + R.maxTokens : ""}|${size ? size.w + "x" + size.h : ""}`;
  if (offscreen(inst, view.wrap) || !changed(inst, view.canvas, sig)) return;
  const c = canvasContext(inst, view);
  if (!c) return;
  c.ctx.clearRect(0, 0, c.W, c.H);
  view.head.textContent = "";
  view.stats.textContent = "";
  const table = rid != null && S.kv ? (S.kv.block_tables || {})[String(rid)] : null;
  if (rid == null || !table) {
    view.head.appendChild(el("span", "ifl-muted", rid == null
      ? "No request holds KV blocks right now. Submit one, or pick one in any view."
      : `Request #${rid} holds no KV blocks right now${R && R.done ? " (finished: its blocks were freed)" : ""}.`));
    return;
  }
  const kc = kvCells(S);
  const held = (S.kv.kv_tokens || {})[String(rid)] ?? 0;
  detailHead(view.head, rid, R, S);
  drawBlockTable(c, inst, kc, rid, table, held);
  detailStats(view.stats, kc, rid, R, table, held, S);
}

function detailHead(head, rid, R, S) {
  const chip = el("span", "ifl-chip", `#${rid}`);
  chip.style.background = reqColor(rid);
  head.append(chip, el("span", "ifl-state", R ? reqStatusLabel(R, S) : ""));
  if (R && R.prompt) head.appendChild(el("span", "ifl-detail-prompt", R.prompt));
}

// Three aligned rows: logical blocks (fill = tokens), the block table (physical ids), and the
// physical pool as a strip, with a line from each table entry to where its block really lives.
function drawBlockTable(c, inst, kc, rid, table, held) {
  const { ctx, W, H } = c;
  const k = inst.scale;
  const color = reqColor(rid);
  const L = Math.round(150 * k), R = 16, n = table.length, bs = kc.bs;
  const span = W - L - R;
  const w = Math.min(64 * k, span / Math.max(n, 1));
  const boxW = Math.max(2, w - (w > 10 ? 4 : 1));
  const rowH = Math.round(34 * k);
  const yA = Math.round(22 * k), yB = yA + rowH + Math.round(26 * k), yC = H - Math.round(58 * k);
  const poolH = Math.round(26 * k);
  ctx.font = `${Math.round(14 * k)}px ${FONT}`;
  ctx.textBaseline = "middle";
  ctx.fillStyle = C.muted;
  ctx.fillText("logical blocks", 0, yA + rowH / 2);
  ctx.fillText("block table", 0, yB + rowH / 2);
  ctx.fillText("physical pool", 0, yC + poolH / 2);
  const xOf = (i) => L + i * w;
  const physX = (b) => L + ((b + 0.5) / kc.n) * span;
  // links: logical -> table (straight), table -> pool (curves)
  ctx.strokeStyle = rgba(color, 0.55);
  ctx.lineWidth = 1.2 * k;
  for (let i = 0; i < n; i++) {
    const cx = xOf(i) + boxW / 2;
    ctx.beginPath();
    ctx.moveTo(cx, yA + rowH);
    ctx.lineTo(cx, yB);
    ctx.moveTo(cx, yB + rowH);
    const px = physX(table[i]);
    ctx.bezierCurveTo(cx, (yB + rowH + yC) / 2, px, (yB + rowH + yC) / 2, px, yC);
    ctx.stroke();
  }
  ctx.textAlign = "center";
  for (let i = 0; i < n; i++) {
    const x = xOf(i), tokens = clamp(held - i * bs, 0, bs);
    // logical block: fill level = tokens held
    if (tokens > 0) {
      ctx.fillStyle = rgba(color, 0.25);
      ctx.fillRect(x, yA, boxW, rowH);
      const h = Math.round((rowH * tokens) / bs);
      ctx.fillStyle = color;
      ctx.fillRect(x, yA + rowH - h, boxW, h);
    } else {
      ctx.fillStyle = C.idle;
      ctx.fillRect(x, yA, boxW, rowH);
      ctx.fillStyle = hatchPattern(ctx, color, k);
      ctx.fillRect(x, yA, boxW, rowH);
    }
    if (boxW >= 26 * k) {
      ctx.fillStyle = tokens > bs / 2 ? C.bg : C.text;
      ctx.fillText(`${tokens}`, x + boxW / 2, yA + rowH / 2);
    }
    // table entry: the physical block id
    ctx.fillStyle = "#1B2334";
    ctx.fillRect(x, yB, boxW, rowH);
    ctx.strokeStyle = color;
    ctx.lineWidth = 1.5 * k;
    ctx.strokeRect(x + 0.5, yB + 0.5, boxW - 1, rowH - 1);
    if (boxW >= 30 * k) {
      ctx.fillStyle = C.text;
      ctx.fillText(String(table[i]), x + boxW / 2, yB + rowH / 2);
    }
  }
  if (w >= 18 * k) {  // logical indices above the first row
    ctx.fillStyle = C.muted;
    ctx.font = `${Math.round(12 * k)}px ${FONT}`;
    for (let i = 0; i < n; i++) ctx.fillText(String(i), xOf(i) + boxW / 2, yA - 9 * k);
  }
  drawPoolStrip(ctx, inst, kc, rid, L, yC, span, poolH);
  ctx.textAlign = "left";
}

function drawPoolStrip(ctx, inst, kc, rid, L, y, span, h) {
  const color = reqColor(rid);
  const bw = span / kc.n;
  ctx.fillStyle = C.free;
  ctx.fillRect(L, y, span, h);
  for (let b = 0; b < kc.n; b++) {
    const o = kc.owner[b];
    if (o < 0) continue;
    ctx.fillStyle = o === rid ? color : rgba(reqColor(o), 0.35);
    ctx.fillRect(L + b * bw, y + (o === rid ? 0 : h * 0.3), Math.max(bw, o === rid ? 2 : 1), o === rid ? h : h * 0.7);
  }
  ctx.fillStyle = C.muted;
  ctx.font = `${Math.round(12 * inst.scale)}px ${FONT}`;
  ctx.textBaseline = "top";
  ctx.textAlign = "left";
  ctx.fillText("block 0", L, y + h + 6);
  ctx.textAlign = "right";
  ctx.fillText(`block ${kc.n - 1}`, L + span, y + h + 6);
  ctx.textBaseline = "middle";
}

// Fragmentation: tokens held vs slots allocated (paged) vs a contiguous prompt + max_tokens reservation.
function detailStats(box, kc, rid, R, table, held, S) {
  const bs = kc.bs, allocated = table.length * bs;
  const contiguous = R && R.nPrompt != null && R.maxTokens != null ? R.nPrompt + R.maxTokens : null;
  const rows = [
    ["tokens held", held, `${held.toLocaleString()} tokens in KV`, "held"],
    ["paged", allocated, `${table.length} blocks × ${bs} = ${allocated.toLocaleString()} slots · `
      + `${(allocated - held).toLocaleString()} unused (${fmt(pct(allocated - held, allocated), 1)}%)`
      + (allocated - held < bs ? " — only in the last block" : " — reserved ahead"), "paged"],
  ];
  if (contiguous != null) {
    rows.push(["contiguous", contiguous, `prompt ${R.nPrompt} + max_tokens ${R.maxTokens} = `
      + `${contiguous.toLocaleString()} slots · ${Math.max(0, contiguous - held).toLocaleString()} unused `
      + `(${fmt(pct(Math.max(0, contiguous - held), contiguous), 1)}%)`, "contig"]);
  }
  const top = Math.max(...rows.map((r) => r[1]), 1);
  for (const [label, value, note, kind] of rows) {
    const row = el("div", "ifl-frag-row");
    const bar = el("div", "ifl-frag-bar");
    const fillEl = el("div", `ifl-frag-fill ifl-frag-${kind}`);
    fillEl.style.width = `${(100 * value) / top}%`;
    fillEl.style.setProperty("--c", reqColor(rid));
    bar.appendChild(fillEl);
    row.append(el("div", "ifl-frag-label", label), bar, el("div", "ifl-frag-note", note));
    box.appendChild(row);
  }
  box.appendChild(poolTotals(kc, S));
}

function poolTotals(kc, S) {
  let contiguous = 0, known = 0, count = 0;
  for (const key of Object.keys(kc.tables)) {
    count++;
    const R = S.reqs.get(Number(key));
    if (R && R.nPrompt != null && R.maxTokens != null) {
      contiguous += R.nPrompt + R.maxTokens;
      known++;
    }
  }
  const text = `Whole pool (${S.name}, ${count} requests holding KV): ${kc.held.toLocaleString()} tokens held in `
    + `${kc.slots.toLocaleString()} paged slots (${fmt(pct(kc.slots - kc.held, kc.slots), 1)}% unused)`
    + (known === count && count ? ` · a contiguous prompt + max_tokens reservation would take `
      + `${contiguous.toLocaleString()} slots (${fmt(pct(Math.max(0, contiguous - kc.held), contiguous), 1)}% unused)` : "");
  return el("div", "ifl-frag-pool", text);
}

/* ================================ status line and badges ================================ */

function drawStatus(inst, S, col) {
  const svc = inst.service;
  const eng = svc && svc.engines ? svc.engines[S.name] : undefined;
  const queue = [...S.reqs.values()].filter((R) => R.state === "queued" || R.state === "preempted").length;
  let pill = "connecting", cls = "wait";
  if (svc && eng === undefined) { pill = "not running"; cls = "err"; }
  else if (eng && eng.error) { pill = "load error"; cls = "err"; }
  else if (eng && eng.reconfiguring) { pill = "restarting"; cls = "wait"; }
  else if (eng && !eng.ready) { pill = "loading model"; cls = "wait"; }
  else if (svc && svc.paused) { pill = "paused"; cls = "pause"; }
  else if (eng) { pill = "ready"; cls = "ok"; }
  const inBatch = S.kv && S.kv.block_tables ? Object.keys(S.kv.block_tables).length : 0;  // rows holding KV
  const facts = [
    `batch ${inBatch}${maxBatch(inst, S) ? `/${maxBatch(inst, S)}` : ""}`,
    `queue ${queue}`,
    `last step ${S.lastStepMs != null ? fmt(S.lastStepMs, 0) + " ms" : "–"}`,
    `iteration ${Math.max(S.lastIt, 0)}`,
  ];
  if (svc && svc.slow_motion_s) facts.push(`slow motion ${fmt(svc.slow_motion_s, 2)} s`);
  if (eng && eng.error) facts.push(eng.error);
  const ev = S.lastEvent;
  if (ev && ev.error && ev.event !== "ready" && ev.event !== "restarted") facts.push(`${ev.event.replace(/_/g, " ")}: ${ev.error}`);
  const sig = `${pill}|${facts.join("|")}`;
  if (col.status.sig === sig) return;
  col.status.sig = sig;
  setText(col.status.pill, pill);
  col.status.pill.dataset.kind = cls;
  setText(col.status.facts, facts.join("  ·  "));
}

function drawBadges(inst) {
  const st = inst.state;
  const conn = inst.conn === "live" ? "● live" : inst.conn === "reconnecting" ? "reconnecting…" : "connecting…";
  setText(inst.el.conn, conn);
  inst.el.conn.dataset.kind = inst.conn;
  const zoomed = Object.keys(inst.zoom).length > 0;
  inst.el.follow.hidden = !zoomed;
  setText(inst.el.follow, "zoomed · double-click a chart to follow now");
  const g = st && st.gpu.length ? st.gpu[st.gpu.length - 1] : null;
  inst.root.classList.toggle("ifl-has-gpu", !!g);
  inst.el.gpu.hidden = !g;
  if (g) setText(inst.el.gpu, `GPU ${fmt(g.util, 0)}% · ${fmt(g.usedMb / 1024, 1)} / ${fmt(g.totalMb / 1024, 1)} GiB`);
  inst.el.note.hidden = !(st && st.coalesced > 0);
  if (st && st.coalesced > 0) setText(inst.el.note, `${st.coalesced.toLocaleString()} events coalesced`);
  drawBanner(inst);
}

// Model download / first start: progress messages shown prominently until every engine is ready.
function drawBanner(inst) {
  const svc = inst.service, st = inst.state;
  const engines = svc && svc.engines ? Object.entries(svc.engines).filter(([n]) => inst.cfg.strategies.includes(n)) : [];
  const failed = engines.find(([, e]) => e.error);
  const loading = engines.some(([, e]) => !e.ready && !e.error);
  let text = "", kind = "";
  if (failed) { text = `Engine “${failed[0]}” failed to load: ${failed[1].error}`; kind = "err"; }
  else if (loading || (!svc && st && st.progress)) {
    text = `Loading the model… ${st && st.progress ? st.progress.message : ""}`;
    kind = "wait";
  }
  inst.el.banner.hidden = !text;
  setText(inst.el.banner, text);
  inst.el.banner.dataset.kind = kind;
}

/* ================================ entry point ================================ */

export default function liveView(component) {
  const { parentElement, data, setStateValue } = component;
  const root = parentElement.querySelector(".ifl-root");
  if (!root) return undefined;
  let inst = store().get(parentElement);
  if (inst && inst.root !== root) {  // the skeleton was replaced: start over
    inst.cleanup();
    inst = null;
  }
  if (!inst) {
    inst = createInstance(root);
    inst.owner = parentElement;
    store().set(parentElement, inst);
  }
  inst.setStateValue = setStateValue;
  applyConfig(inst, normalizeConfig(data));
  return inst.cleanup;
}
