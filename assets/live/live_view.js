// Inflight live views: one Streamlit v2 component that follows the engine's /engine/ws event stream
// and draws it on canvas: Gantt, batch slots and utilization (timeline), roofline, KV blocks, block table, text.
// Every mark comes from an engine event; nothing is simulated or interpolated.
//
// Lifecycle: Streamlit runs this module's default export on mount and again on every data change.
// The socket, the event state and the plots live in a per-element instance (keyed by parentElement),
// so a re-run only applies the new configuration. The returned cleanup closes everything on unmount
// (once the element has left the page: see `unmounted`).
// The instance is what the views share, handed to each of them: the config, the contract, the event
// state (state.js), the pick (sel), the layout and the few services they call (changed, offscreen,
// observe, pick, tip, markDirty). What one part owns sits in its own object: the socket's link, what the
// server said, the badges (status_view.js) and each view's state, made by its module's build() and
// passed to its draw(): the columns' cells, the timeline (with its zoom), the roofline (layout.js).

const STORE_KEY = "__inflightLiveViews";
const STATUS_POLL_MS = 2000;  // status refresh (paused, queue, last step ms, clock sync)
const REREPORT_S = 4;  // a change reported to the page is asked for again after this, while the page draws another
const VIEW_NAMES = ["gantt", "slots", "kv", "util", "text"];
// The modules this entry point uses (assets/live/modules.js), made when the view first mounts.
const NEEDS = ["Common", "Contract", "FrameLoop", "KvDetail", "KvMap", "Layout", "LiveSocket", "LiveState", "RooflineView",
               "StatusView", "TextView", "Timeline"];
const views = () => ({ timeline: Timeline, status: StatusView, kv: KvMap, text: TextView, detail: KvDetail,
                       roofline: RooflineView });

function store() {
  if (!window[STORE_KEY]) window[STORE_KEY] = new WeakMap();
  return window[STORE_KEY];
}

function createInstance(root, owner) {
  const q = (s) => root.querySelector(s);
  const inst = {
    root, owner, cfg: null, contract: null, state: null, scale: 1,
    // the socket to /engine/ws and where it stands (owned by the connection code below)
    link: { socket: null, conn: "connecting", accepting: false, subRef: null, refSeq: 0 },
    // what the service last said of itself (its status; `rev` counts the changes the views redraw on)
    server: { status: null, rev: 0, clockOffset: null, limits: "", role: null },
    reported: { running: null, controls: null },  // what this view last told the page it follows
    badges: StatusView.badges(root), body: q(".ifl-body"),
    // the layout: each view's own state (Layout.build)
    cols: new Map(), timeline: null, roofline: null,
    tip: Common.tooltip(root, q(".ifl-tip")), sizes: new WeakMap(), onscreen: new WeakMap(),
    sel: null, lastDataSel: undefined, closed: false, timers: {},
    setStateValue: () => {}, loop: FrameLoop.create(() => drawFrame(inst), (s) => showFps(inst, s)),
    resizeObs: null, viewObs: null,
    // what the views call back into
    markDirty: () => inst.loop.markDirty(),
    changed: (node, sig) => inst.loop.changed(node, sig),
    offscreen: (node) => inst.onscreen.get(node) === false,
    observe: (node) => { inst.resizeObs.observe(node); inst.viewObs.observe(node); },
    observeSize: (node) => inst.resizeObs.observe(node),
    pick: (rid) => pick(inst, rid),
    // the presenter's button on a lane waiting for a full batch: launch what waits now
    launch: (lane) => inst.link.socket && inst.link.socket.send({ cmd: "launch", ref: "launch", lanes: [lane] }),
    laneConfig: (name) => laneConfig(inst, name),
    serviceClock: () => (inst.server.clockOffset != null ? Common.perfNow() + inst.server.clockOffset : null),
    // for the console and the browser tests
    applyEvents: (events) => applyEvents(inst, { skipped: 0, events }),
    following: () => Timeline.following(inst, inst.timeline),  // the time axis follows "now" (some lane computes)
    cleanup: () => destroyInstance(inst),
    // What Streamlit is handed to call on unmount. It also calls it for a run whose data a newer run
    // superseded while the module loaded, and that call can come after the newer run took this instance
    // (a live view once stayed closed so): so it closes only a view whose element has left the page.
    unmounted: () => { if (!root.isConnected) destroyInstance(inst); },
  };
  // Views scrolled out of sight are not drawn (the same engine may be sharing this CPU).
  inst.viewObs = new IntersectionObserver((entries) => {
    for (const e of entries) inst.onscreen.set(e.target, e.isIntersecting);
    inst.markDirty();
  });
  inst.resizeObs = new ResizeObserver((entries) => {
    for (const e of entries) {
      const box = e.borderBoxSize && e.borderBoxSize[0];
      inst.sizes.set(e.target, { w: e.contentRect.width, h: e.contentRect.height, outerH: box ? box.blockSize : null });
    }
    inst.markDirty();
  });
  inst.onWindowResize = () => inst.markDirty();  // fit mode follows the window's height
  window.addEventListener("resize", inst.onWindowResize);
  inst.onKey = (e) => { if (e.key === "Escape" && inst.sel != null) pick(inst, null); };  // Escape: no pick
  document.addEventListener("keydown", inst.onKey);
  inst.timers.status = setInterval(() => (root.isConnected ? requestStatus(inst) : destroyInstance(inst)),
                                   STATUS_POLL_MS);  // (and a view left behind by an unmount closes)
  inst.timers.follow = setInterval(() => { if (inst.state && inst.following()) inst.markDirty(); },
                                   1000 / FrameLoop.MAX_FPS);
  root.inflight = inst;  // reachable from the console and the browser tests
  return inst;
}

function destroyInstance(inst) {
  if (inst.closed) return;
  inst.closed = true;
  for (const t of Object.values(inst.timers)) clearInterval(t);
  inst.loop.close();
  if (inst.link.socket) inst.link.socket.close();
  inst.resizeObs.disconnect();
  inst.viewObs.disconnect();
  window.removeEventListener("resize", inst.onWindowResize);
  document.removeEventListener("keydown", inst.onKey);
  store().delete(inst.owner);
}

function showFps(inst, { fps, frames, frameMs }) {
  inst.root.dataset.fps = String(fps);
  inst.root.dataset.frames = String(frames);
  inst.root.dataset.frameMs = frameMs.toFixed(1);
  Common.setText(inst.badges.fps, `${fps} fps`);
}

/* ---- the socket's messages ---- */

function connect(inst) {
  inst.link.socket = LiveSocket.connect({
    onOpen: () => subscribe(inst),
    onMessage: (msg) => onMessage(inst, msg),
    onConn: (conn) => {
      inst.link.conn = conn;
      if (conn !== "live") inst.link.accepting = false;
      inst.markDirty();
    },
  });
}

// (Re)build the picture from what the ring buffer still holds. Events that arrive before the
// subscribe reply come from the old cursor and are dropped, so nothing is counted twice.
function subscribe(inst) {
  inst.state = LiveState.newState(inst.cfg.lanes, inst.contract);
  inst.link.accepting = false;
  inst.link.subRef = `sub-${++inst.link.refSeq}`;
  inst.link.socket.send({ cmd: "subscribe", ref: inst.link.subRef, lanes: inst.cfg.lanes, requests: null, kv: true,
                     from_seq: "oldest" });
  inst.markDirty();
}

function requestStatus(inst) {
  if (inst.link.socket) inst.link.socket.send({ cmd: "status", ref: "status" });
}

function onMessage(inst, msg) {
  if (msg.type === "events") {
    if (inst.link.accepting) applyEvents(inst, msg);
    return;
  }
  if (msg.type === "reply" && msg.ref === inst.link.subRef) inst.link.accepting = true;
  if (typeof msg.role === "string") inst.server.role = msg.role;  // hello, and every control command's reply
  if (msg.type === "hello" || msg.type === "reply") applyServiceStatus(inst, msg.status);
  inst.markDirty();
}

function applyEvents(inst, msg) {
  const { changed, status } = LiveState.applyBatch(inst.state, msg, clearAfter(inst));
  if (status === "paused" || status === "resumed") {
    if (inst.server.status) inst.server.status.paused = status === "paused";
  }
  if (status) requestStatus(inst);  // the reply carries the fresh engine states and config
  if (changed) inst.markDirty();
}

// The "clear" time, in service-clock seconds. A restarted service restarts its clock: a clear time
// from the old clock (ahead of the new "now") would hide everything, so it is ignored.
function clearAfter(inst) {
  const c = inst.cfg.clearAfter;
  if (c == null) return -Infinity;
  const now = inst.serviceClock() ?? Infinity;
  return c <= now + 5 ? c : -Infinity;
}

function applyServiceStatus(inst, status) {
  if (!status || typeof status !== "object") return;
  inst.server.status = status;
  if (typeof status.t === "number") inst.server.clockOffset = status.t - Common.perfNow();
  const limits = inst.cfg.lanes.map((n) => {  // what the charts depend on
    const c = laneConfig(inst, n) || {};
    return `${c.strategy}|${c.max_num_seqs}|${c.static_batch_size}|${c.enable_prefix_caching}`;
  }).join(",");
  if (limits !== inst.server.limits) {
    inst.server.limits = limits;
    inst.server.rev++;
  }
  followLanes(inst, Object.keys(status.engines || {}));
  followControls(inst, status);
}

// The presenter's controls changed since the page was drawn (a key, another tab, the socket): report
// them, which reruns the page, so its Pause button and slow-motion slider show what runs.
function followControls(inst, status) {
  const drawn = inst.cfg.controls;
  if (!drawn) return;
  const now = { paused: !!status.paused, slow_motion_s: Number(status.slow_motion_s) || 0,
                auto_slow_motion: !!status.auto_slow_motion };
  reportIf(inst, "controls", now, !Object.keys(now).every((k) => now[k] === drawn[k]));
}

// The lanes running changed since the page was drawn (another tab, a socket client): report them,
// which reruns the page with the lanes that run now.
function followLanes(inst, names) {
  reportIf(inst, "running", names, !Common.sameList(names, inst.cfg.running));
}

// Report `value` while the page shows something else: once per change, and again while the page still
// differs (a rerun may have drawn the state of a moment before, e.g. a pause undone and redone within one
// rerun), after REREPORT_S, then twice as long each time (a slow rerun is not restarted over and over).
// Nothing is remembered once the page shows what runs.
function reportIf(inst, name, value, differs) {
  if (!differs) {
    inst.reported[name] = null;
    return;
  }
  const key = JSON.stringify(value), last = inst.reported[name], t = Common.perfNow();
  const again = last && last.key === key;
  if (again && t - last.at < REREPORT_S * 2 ** last.tries) return;
  inst.reported[name] = { key, at: t, tries: again ? last.tries + 1 : 0 };
  try {
    inst.setStateValue(name, value);
  } catch (e) {
    console.warn(`inflight: could not report the ${name}`, e);
  }
}

// The settings a lane runs, from the latest service status (null before the first one).
function laneConfig(inst, name) {
  const eng = inst.server.status && inst.server.status.engines ? inst.server.status.engines[name] : null;
  return eng && eng.config ? eng.config : null;
}

/* ---- configuration ---- */

function normalizeConfig(d) {
  d = d || {};
  const lanes = Array.isArray(d.lanes) && d.lanes.length ? d.lanes.map(String) : ["continuous"];
  const views = (Array.isArray(d.views) ? d.views : VIEW_NAMES).filter((v) => VIEW_NAMES.includes(v));
  const headers = {};  // lane -> labels of how it differs from the other lane (shown as text)
  for (const n of lanes) headers[n] = Array.isArray(d.headers && d.headers[n]) ? d.headers[n].map(String) : [];
  return {
    lanes, headers, views,
    running: Array.isArray(d.running) ? d.running.map(String) : lanes,
    axis: d.axis === "iterations" ? "iterations" : "time",
    large: !!d.large_text,
    clearAfter: typeof d.clear_after_s === "number" ? d.clear_after_s : null,
    selected: Number.isInteger(d.selected) ? d.selected : null,
    height: typeof d.height === "number" && d.height > 0 ? d.height : null,
    mode: d.mode === "kv_detail" ? "kv_detail" : "live",
    fit: !!d.fit_first_screen,  // the Gantt and slots fill the rest of the first screen (a projector)
    controls: d.controls && typeof d.controls === "object" ? d.controls : null,  // as the page drew them
  };
}

// A re-run: apply the new configuration; rebuild the layout or the state only when needed.
function applyConfig(inst, cfg) {
  const prev = inst.cfg, same = Common.sameList;
  inst.cfg = cfg;
  inst.scale = cfg.large ? 1.5 : 1;
  inst.root.classList.toggle("ifl-large", cfg.large);
  inst.root.classList.toggle("ifl-fit", cfg.fit);
  inst.root.style.height = cfg.height ? `${cfg.height}px` : "";
  if (cfg.selected !== inst.lastDataSel) {  // a pick made from Python
    inst.lastDataSel = cfg.selected;
    inst.sel = cfg.selected;
  }
  if (prev && prev.axis !== cfg.axis) Timeline.unzoom(inst.timeline);
  const layoutChanged = !prev || prev.mode !== cfg.mode || !same(prev.lanes, cfg.lanes)
    || JSON.stringify(prev.headers) !== JSON.stringify(cfg.headers)
    || !same(prev.views, cfg.views) || prev.large !== cfg.large || prev.height !== cfg.height || prev.fit !== cfg.fit;
  const resetNeeded = !prev || !same(prev.lanes, cfg.lanes) || prev.clearAfter !== cfg.clearAfter;
  if (layoutChanged) Object.assign(inst, Layout.build(inst, views(), inst.timeline));
  if (resetNeeded) {
    if (inst.link.socket && inst.link.socket.isOpen()) subscribe(inst);
    else inst.state = LiveState.newState(cfg.lanes, inst.contract);
  }
  if (!inst.link.socket) connect(inst);
  inst.markDirty();
}

function pick(inst, rid) {
  inst.sel = rid == null || inst.sel === rid ? null : rid;
  try {
    inst.setStateValue("selected", inst.sel);
  } catch (e) {
    console.warn("inflight: could not report the pick", e);
  }
  inst.markDirty();
}

/* ---- one frame ---- */

function drawFrame(inst) {
  if (!inst.state || inst.closed) return;
  StatusView.drawBadges(inst, inst.badges, Timeline.zoomed(inst.timeline));
  for (const col of inst.cols.values()) {
    const S = inst.state.by.get(col.name);
    if (!S) continue;
    StatusView.draw(inst, S, col.status);
    if (col.kv) KvMap.draw(inst, S, col.kv);
    if (col.text) TextView.draw(inst, S, col.text);
    if (col.detail) KvDetail.draw(inst, S, col.detail);
  }
  if (inst.timeline) Timeline.draw(inst, inst.timeline);
  if (inst.roofline) RooflineView.draw(inst, inst.roofline);
}

/* ---- entry point ---- */

export default function liveView(component) {
  for (const name of NEEDS) if (!globalThis[name]) throw new Error(`live view: no module ${name}`);  // made now
  const { parentElement, data, setStateValue } = component;
  const root = parentElement.querySelector(".ifl-root");
  if (!root) return undefined;
  let inst = store().get(parentElement);
  if (inst && inst.root !== root) {  // the skeleton was replaced: start over
    inst.cleanup();
    inst = null;
  }
  if (!inst) {
    inst = createInstance(root, parentElement);
    inst.contract = Contract.fromWire(data && data.contract);
    store().set(parentElement, inst);
  }
  inst.setStateValue = setStateValue;
  applyConfig(inst, normalizeConfig(data));
  return inst.unmounted;
}
