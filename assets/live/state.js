// The event reducer: folds /engine/ws events into per-lane state (keyed by `ev.lane`) the views draw from.
// Pure data (no DOM, no socket): it loads in node for the tests (tests/js/).
//
// Per lane: a bounded list of step summaries (with their roofline numbers), the requests (with Gantt
// segments and text), the latest KV snapshot, the prefix cache's token counts, the device's peaks and,
// for a remote lane, its server's polled gauges. Events are folded in as they arrive; nothing is kept raw.

defineLive("LiveState", ["Contract", "Waits", "KvBlocks"], () => {
  // Iterations kept per lane (slots grid, utilization): at a GPU's 150-300 a second, 40-80 s of them, so the
  // time axis's 20 s window is full; on a CPU's 20 a second, ten minutes (an ended run shown whole). Only the
  // newest keep a cell per row (hover, drafts); older ones keep their runs' starts (linkRuns, runSweep): 256
  // rows' cells are some 30 KB an iteration, a step without them well under 1 KB.
  // Steps past the bound go `chunk` at a time (a splice, not one a step); one step in `check` of an engine's
  // that gives its cells up keeps which runs held its slots (runSweep starts from the nearest).
  const LIMITS = { steps: 12000, cells: 300 * 256, chunk: 256, check: 256 };
  const MAX_REQS = 160;         // requests kept per lane; finished ones past the window go first
  const MAX_SEGS = 64;          // segments kept per request before old ones are trimmed
  const RATE_WINDOW_S = 1.0;    // tokens/s: rolling window over step events
  const MAX_GPU_SAMPLES = 600;  // NVML samples kept (5 min at the monitor's 2 per second)
  const MAX_REMOTE_SAMPLES = 300;  // a remote server's gauges kept (5 min at one poll a second)
  const STALE_IT = 64;          // a request not in a step for this many iterations holds no seat (seatRows)
  const HIT_WINDOW_S = 5.0;     // prefix cache hit rate, "recent": admissions over this window
  // A stall: an iteration with decoding rows and prefill work that took STALL_FACTOR x the lane's usual
  // decode-only iteration (the median of its last STALL_BASE), and at least STALL_MIN_S: its decoding rows
  // each waited that long for their next token, for someone's prefill.
  const STALL_FACTOR = 3, STALL_BASE = 32, STALL_MIN_S = 0.05;
  // What a request is doing, per segment and overall (views shade by these).
  const KIND = { queued: "queued", prefill: "prefill", recompute: "recompute", decode: "decode", held: "held",
                 preempted: "preempted", swapped: "swapped", transfer: "transfer", finished: "finished" };
  const RUNNING = new Set([KIND.prefill, KIND.recompute, KIND.decode, KIND.held]);  // (in a batch)

  // contract: Contract.fromWire(...) (the step entry layout and phase names).
  // limits: LIMITS's fields to change (the tests keep fewer).
  function newState(lanes, contract, limits = {}) {
    const lim = { ...LIMITS, ...limits };
    return { contract, by: new Map(lanes.map((name) => [name, newLane(name, lim)])), coalesced: 0, latestT: null,
             progress: null, gpu: [], gpuRev: 0, named: 0, pauses: [],
             run: null };  // the current scenario run: {t0, it0: lane -> its first iteration} (run_started)
  }

  function newLane(name, limits) {
    return { name, steps: [], limits, detailed: 0, detailCells: 0,  // (detailed: the first step with its cells)
             rowsSeen: 0, tails: new Map(), sinceCheck: new Map(), seats: new Map(), ends: 0,  // (keepStep, seatRows)
             hitWindow: { steps: [], queries: 0, hits: 0 },  // (prefixRates)
             reqs: new Map(), kv: null, kvWire: {}, rowsWire: {}, kvRev: 0, rev: 0, textRev: 0,
             lastIt: -1, lastT: null,
             lastStepMs: null, lastEvent: null, gapPending: false, prefix: { queries: 0, hits: 0 }, peaks: null,
             remote: false, server: [] };
  }

  function newRequest(rid) {
    return { rid, tag: null, name: null, prompt: null, nPrompt: null, maxTokens: null, arrival: null, state: KIND.queued,
             segs: [], open: null, text: "", textRev: 0, nOut: 0, preemptions: 0, cached: 0, finishT: null, finishX: null,
             reason: null, error: null, done: false, lost: false, endT: null, lastIt: null, lastKind: null, ctx: 0,
             wait: null,   // why it waits now (the scheduler's reason), null while it runs
             answerEnd: null,  // ignore_eos: where the model's own answer ended (characters of text)
             synthetic: false };  // its prompt was token ids (a benchmark's, an API caller's): no text to show
  }

  // One "events" message ({skipped, events}). clearAfter: events older than this (service seconds) are
  // ignored. Returns { changed, status }: status is the last status event's name (the caller refreshes
  // the service status on it), or null.
  function applyBatch(st, msg, clearAfter = -Infinity) {
    let changed = false, status = null;
    if (msg.skipped > 0) {  // the hub dropped events before we saw them
      st.coalesced += msg.skipped;
      for (const S of st.by.values()) {
        S.gapPending = true;
        S.kvWire = {};  // KV changes fold again from each pool's next key frame (the socket sends one next)
        S.rowsWire = {};  // and rows that go on from a step we did not see are written out from it too
      }
      changed = true;
    }
    for (const ev of msg.events || []) {
      if (!ingest(st, ev, clearAfter)) continue;
      changed = true;
      if (ev.type === st.contract.type.status) status = ev.event;
    }
    if (changed) for (const S of st.by.values()) prune(S);
    return { changed, status };
  }

  function eventTime(T, ev) {
    if (ev.type === T.step) return ev.t_start;
    if (ev.type === T.request) return ev.arrival_s;
    if (ev.type === T.finished) return ev.finish_s ?? ev.arrival_s;
    return typeof ev.t === "number" ? ev.t : null;
  }

  // Fold one event into the state; returns true if something visible changed.
  function ingest(st, ev, clearAfter = -Infinity) {
    const T = st.contract.type;
    if (ev.type === T.step) ev = withSampled(withContinuedRows(st, ev));
    if (ev.type === T.step && ev.kv) ev = foldKv(st, ev);  // (before the time filter: later changes build on it)
    const t = eventTime(T, ev);
    if (t != null && t < clearAfter) return false;
    if (ev.type === T.status) return ingestStatus(st, ev);
    if (ev.type === T.gpu) return ingestGpu(st, ev);
    const S = st.by.get(ev.lane);
    if (!S) return false;
    if (ev.strategy === st.contract.remote) S.remote = true;
    if (ev.type === T.step) onStep(st.contract, S, ev);
    else if (ev.type === T.request) onRequest(st, S, ev);
    else if (ev.type === T.finished) onFinished(S, ev);
    else if (ev.type === T.remoteMetrics) onServerGauges(S, ev);
    else if (ev.type === T.waits) applyWaits(S, ev.waits, ev.t);
    else return false;
    const tEnd = ev.type === T.step ? ev.t_end : t;
    if (tEnd != null) st.latestT = st.latestT == null ? tEnd : Math.max(st.latestT, tEnd);
    S.rev++;
    return true;
  }

  // A step event with the rows that go on from its pool's previous step (`cont`) written out among its entries
  // (Contract.continuedRows). Where that previous step is not known (a replay's step after a gap, until the
  // pool's next key frame: a live socket sends the first whole), its rows are not known either: the step goes
  // on without them (its text, admissions and finishes still count).
  function withContinuedRows(st, ev) {
    const S = st.by.get(ev.lane);
    if (!S) return ev;
    const part = ev.part || "";
    let entries = ev.entries || [];
    if (Array.isArray(ev.cont) && ev.cont.length) {
      const prev = S.rowsWire[part];
      if (!prev) return { ...ev, entries: [], cont: undefined };
      entries = Contract.continuedRows(st.contract, prev, ev.cont, entries);
    }
    S.rowsWire[part] = entries;
    return entries === ev.entries ? ev : { ...ev, entries, cont: undefined };
  }

  // A step event with the requests it sampled for listed whole (read against the entries as sent: short ones
  // are what `unsampled` refers to). Its entries stay as sent: their readers take a short one (a plain decode
  // row, contract.js fullEntries) as it is, where writing each out made an array a row a step.
  function withSampled(ev) {
    if (!Array.isArray(ev.unsampled)) return ev;
    return { ...ev, sampled: sampledIds(ev), unsampled: undefined };
  }

  // A step event with its kv whole: the wire sends each pool's tables whole now and then and, in between,
  // what changed since its previous step (KvBlocks.fold). Changes with nothing to fold onto (after a gap,
  // before the pool's next key frame) are dropped: the step goes on without its KV.
  function foldKv(st, ev) {
    const S = st.by.get(ev.lane);
    if (!S) return ev;
    const part = ev.part || "";
    if (!ev.kv.block_tables && !(part in S.kvWire)) {
      const { kv: _changes, ...rest } = ev;
      return rest;
    }
    const kv = (S.kvWire[part] = KvBlocks.fold(S.kvWire[part], ev.kv, ev.entries, st.contract.entry));
    return kv === ev.kv ? ev : { ...ev, kv };
  }

  function requestRecord(S, rid) {
    let R = S.reqs.get(rid);
    if (!R) S.reqs.set(rid, (R = newRequest(rid)));
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

  function onRequest(st, S, ev) {
    const R = requestRecord(S, ev.request_id);
    R.tag = ev.tag ?? null;
    R.name = typeof ev.name === "string" && ev.name ? ev.name : null;  // plain text: views draw it as text
    if (R.name) st.named++;
    R.prompt = promptText(ev);
    R.synthetic = ev.prompt == null && ev.messages == null;
    R.nPrompt = ev.num_prompt_tokens ?? R.nPrompt;
    R.maxTokens = ev.max_tokens ?? R.maxTokens;
    R.arrival = ev.arrival_s;
    R.endT = Math.max(R.endT ?? -Infinity, ev.arrival_s);
    // Waiting from arrival until first scheduled: an open segment, closed by the first step.
    if (!R.segs.length && !R.done && !R.open) R.open = { kind: KIND.queued, t0: ev.arrival_s, x0: S.lastIt + 0.5 };
  }

  // Entries of one step grouped per request: static rows carry a prefill entry plus a padding entry. A short
  // entry ([request id, context]) is one decode token in the slot of its place in the list.
  function groupEntries(contract, entries) {
    const E = contract.entry, P = contract.phase;
    const by = new Map();
    (entries || []).forEach((e, i) => {
      const short = e.length === 2, rid = Contract.entryRid(E, e), ctx = Contract.entryCtx(E, e);
      const phase = short ? P.decode : e[E.phase], tokens = short ? 1 : e[E.tokens];
      let g = by.get(rid);
      if (!g) by.set(rid, (g = { rid, real: 0, pad: 0, cached: 0, drafted: 0, accepted: 0, prefill: false, decode: false,
                                 slot: short ? i : e[E.slot], ctx }));
      if (!short) {
        g.cached += e[E.cached];  // tokens a prefix hit served at (re)admission
        g.drafted += e[E.drafted] || 0;  // speculative decoding: draft tokens, and those that became output
        g.accepted += e[E.accepted] || 0;
      }
      if (phase === P.padding) g.pad += tokens;
      else {
        g.real += tokens;
        if (phase === P.prefill) g.prefill = true;
        if (phase === P.decode) g.decode = true;
      }
      g.ctx = Math.max(g.ctx, ctx);
    });
    return by;
  }

  function segmentKind(R, g) {
    if (g.decode) return KIND.decode;
    if (g.prefill) return R.dropped ? KIND.recompute : KIND.prefill;  // after a swap: where it was, not again
    return KIND.held;  // padding only: a finished row that still occupies its slot (static)
  }

  // A continuous lane packs its rows in order, so a row's place moves up whenever one before it ends, and the
  // slots band would show every request below it move: the view gives each request a seat instead, held while
  // it runs in that engine (a step that leaves it out for want of budget does not take it away). One that joins
  // takes the seat freed first (seats go free in the order their requests ended), else a new one: a finished
  // request's seat goes to the next one admitted, as narration pairs them. (A static batch's rows keep the
  // engine's own slots.)
  function seatRows(S, part, groups, it) {
    const order = (rid) => S.reqs.get(rid)?.endSeq ?? Infinity;
    let own = S.seats.get(part);
    if (!own) S.seats.set(part, (own = { of: new Map(), free: [], next: 0 }));
    const gone = [...own.of.keys()]
      .filter((rid) => !(groups.get(rid)?.slot >= 0) && !runs(S.reqs.get(rid), part, it));
    for (const rid of gone.sort((a, b) => order(a) - order(b))) {
      own.free.push(own.of.get(rid));
      own.of.delete(rid);
    }
    for (const g of groups.values()) {
      if (g.slot < 0) continue;
      if (!own.of.has(g.rid)) own.of.set(g.rid, own.free.length ? own.free.shift() : own.next++);
      g.slot = own.of.get(g.rid);
    }
  }

  // Whether a request is in an engine's batch (part: a disaggregated lane's half, or null): it runs, and ran
  // within the last STALE_IT iterations (a step that leaves it out is one; an end never heard of, many).
  const runs = (R, part, it) => !!R && !R.done && RUNNING.has(R.state) && (!part || !R.part || R.part === part)
    && R.lastIt >= it - STALE_IT;

  function onStep(contract, S, ev) {
    // The lane's iteration number as the engine counts it (narration, headers and tooltips say the same);
    // never backwards (a recording played again starts from 1).
    const it = Math.max(ev.step, S.lastIt + 1);
    const t0 = ev.t_start, t1 = ev.t_end;
    const swappedOut = new Set((ev.swaps || []).filter((m) => m[1] === contract.swap.out).map((m) => m[0]));
    for (const rid of ev.preempted || []) preempt(S, rid, t0, it, swappedOut.has(rid));
    copied(S, ev.handoffs);
    const groups = groupEntries(contract, ev.entries);
    if (ev.strategy === "continuous") seatRows(S, ev.part || null, groups, it);
    const cells = [], bySlot = [];
    let real = 0, pad = 0, busy = 0, drafted = 0, accepted = 0;
    for (const g of groups.values()) {
      const kind = scheduled(S, g, it, ev);
      if (ev.part) S.reqs.get(g.rid).part = ev.part;
      real += g.real;
      pad += g.pad;
      if (g.real > 0) busy++;
      const cell = { rid: g.rid, slot: g.slot, kind, real: g.real, pad: g.pad, ctx: g.ctx, drafted: g.drafted,
                     accepted: g.accepted };
      drafted += g.drafted;
      accepted += g.accepted;
      cells.push(cell);
      if (g.slot >= 0) bySlot[g.slot] = cell;
    }
    for (const rid of ev.finished || []) markFinished(S, rid, t1, it + 0.5);
    for (const rid of ev.handed_off || []) handedOff(S, rid, t1, it, contract);
    for (const rid of sampledIds(ev)) requestRecord(S, rid).nOut += 1 + ((groups.get(rid) || {}).accepted || 0);
    for (const [rid, text] of Object.entries(ev.deltas || {})) appendText(S, +rid, text);
    for (const [rid, n] of Object.entries(ev.answer_ends || {})) markAnswerEnd(S, +rid, n);
    const kv = ev.kv || {};
    const summary = { it, t0, t1, cells, bySlot, slots: bySlot.length, real, pad, busy, rows: groups.size, drafted,
                      accepted,
                      used: ev.tokens_used, budget: ev.token_budget, kvUsed: kv.used, kvBlocks: kv.num_blocks,
                      waiting: ev.num_waiting, running: ev.num_running, tps: 0,
                      queries: ev.prefix_queries || 0, hits: ev.prefix_hits || 0, hitAll: null, hitRecent: null,
                      roof: roofPoint(S, ev.roofline), part: ev.part || null };
    linkRuns(S, summary);
    summary.tps = rollingRate(S.steps, summary);
    summary.stall = stall(S, cells, t1 - t0);
    if (summary.stall) S.stalls = (S.stalls || 0) + 1;  // the legend explains them from the first
    S.drafted = (S.drafted || 0) + drafted;  // speculative decoding: draft tokens over the lane's stream
    prefixRates(S, summary);
    keepStep(S, summary);
    if (ev.kv) {
      // a disaggregated lane: each half's pool (the decode engine's is the lane's main one, and its host
      // pool is the one shown); a lane of one engine (again, after a reconfigure): its pool
      S.pools = ev.part ? { ...S.pools, [ev.part]: ev.kv } : null;
      if (ev.part !== contract.parts.prefill) S.host = ev.host || null;  // swap preemption's host pool
      if (ev.part === contract.parts.decode) releaseSent(S, contract, ev);
      S.kv = S.pools ? S.pools[contract.parts.decode] || S.pools[contract.parts.prefill] : ev.kv;
      S.kvRev++;
    }
    S.swaps = ev.swaps || [];  // this iteration's copies: [request id, "out" | "in", blocks]
    if (S.swaps.length) {
      S.swapBytes = (S.swapBytes || 0) + (ev.swap_bytes || 0);
      S.swapS = (S.swapS || 0) + (ev.swap_s || 0);
    }
    if (ev.part) S.handoffs = ev.handoffs || [];  // this iteration's copies (none on a prefill step)
    S.lastIt = it;
    if (ev.part) (S.partIt ||= {})[ev.part] = it;
    S.lastT = t1;
    S.lastStepMs = 1000 * (t1 - t0);
    reconcile(S, ev, groups, contract);
    applyWaits(S, ev.waits, t1);
  }

  // This iteration's stall ({waited, usual, rows, prefill}: seconds beyond the usual decode iteration, that
  // usual length, the decoding rows that waited, the prefill tokens they waited for), or null. A decode-only
  // iteration adds to the lane's usual length instead.
  function stall(S, cells, dur) {
    let rows = 0, prefill = 0;
    for (const c of cells) {
      if (c.kind === KIND.decode) rows++;
      else if (c.kind === KIND.prefill || c.kind === KIND.recompute) prefill += c.real;
    }
    const base = (S.decodeS ||= []);
    if (!prefill) {
      if (rows) base.push(dur);
      if (base.length > STALL_BASE) base.shift();
      return null;
    }
    if (!rows || base.length < 3) return null;
    const usual = [...base].sort((a, b) => a - b)[base.length >> 1];
    return dur >= STALL_FACTOR * usual && dur - usual >= STALL_MIN_S ? { waited: dur - usual, usual, rows, prefill } : null;
  }

  // Why requests wait, as the scheduler decided (changes only: a request id -> its reason, or null once
  // it no longer waits). Each waiting stretch keeps its reasons for the hover.
  function applyWaits(S, changes, t) {
    for (const [key, w] of Object.entries(changes || {})) {
      const R = S.reqs.get(+key);
      if (!R) continue;
      R.wait = w || null;
      if (w) Waits.note(R.open, w, t);
    }
  }

  // A request's row in this step: extend its bar, bring it back if it was only thought lost.
  function scheduled(S, g, it, ev) {
    const R = requestRecord(S, g.rid);
    const kind = segmentKind(R, g);
    closeOpen(R, ev.t_start, it - 0.5);
    // the iteration before this one on the same engine (a disaggregated lane numbers both halves' together)
    const prev = ev.part ? (S.partIt || {})[ev.part] ?? -1 : it - 1;
    addSegment(R, kind, ev.t_start, ev.t_end, it, prev);
    if (kind === KIND.decode) gained(R.segs[R.segs.length - 1], g);
    if (g.cached > 0) {  // admitted with a prefix hit: its bar shows the prefill that was skipped
      R.cached = g.cached;
      Object.assign(R.segs[R.segs.length - 1], { cached: g.cached, computed: g.real });
    }
    if (R.lost && kind !== KIND.held) {  // it was only preempted, not finished: back to live
      R.lost = R.done = false;
      R.state = kind;
      R.reason = null;
    }
    R.lastKind = kind;
    R.lastIt = it;
    R.ctx = g.ctx;
    R.endT = ev.t_end;
    if (R.state !== KIND.finished) R.state = kind;
    return kind;
  }

  // Every running request is in each step (scheduled, or holding KV); a finished one has had its
  // "finished" event by the next step. A request that is neither was ended by events we never saw
  // (coalesced): end it as lost. After a gap, only the newest num_waiting waiting requests still wait.
  // A step without its KV (a replay's, until its lane's next key frame) says nothing of who holds KV.
  function reconcile(S, ev, groups, contract) {
    const tables = ev.kv && ev.kv.block_tables;
    const holders = new Set(Object.keys(tables || {}).map(Number));
    const waiting = [];
    for (const R of S.reqs.values()) {
      if (R.done || (ev.part && R.part && R.part !== ev.part)) continue;  // on the other half of the lane
      if (R.open) waiting.push(R);
      else if (tables && !holders.has(R.rid) && !groups.has(R.rid)) markLost(S, R, ev.t_start);
      else if (R.lastKind === KIND.held) markLost(S, R, ev.t_start);  // padding only: it finished unseen
    }
    if (!S.gapPending) return;
    S.gapPending = false;
    // a disaggregated lane's step counts only its half's waiting requests: those handed on wait on the
    // decode engine, the others on the prefill engine
    const onDecode = (R) => R.part === contract.parts.decode;
    const here = ev.part ? waiting.filter((R) => onDecode(R) === (ev.part === contract.parts.decode)) : waiting;
    here.sort((a, b) => b.rid - a.rid);
    here.slice(Math.max(0, ev.num_waiting ?? here.length)).forEach((R) => markLost(S, R, ev.t_start));
  }

  function markLost(S, R, t) {
    closeOpen(R, t, S.lastIt + 0.5);
    R.state = KIND.finished;
    R.done = true;
    R.lost = true;
    R.reason = R.reason ?? "unknown (events skipped: this view fell behind)";  // no finish marker: its time is unknown
  }

  // A decode bar's tokens: one per step, and with speculative decoding the drafts each step accepted.
  function gained(seg, g) {
    seg.tokens = (seg.tokens || 0) + 1 + g.accepted;
    seg.drafted = (seg.drafted || 0) + g.drafted;
    seg.accepted = (seg.accepted || 0) + g.accepted;
  }

  // Decode and held runs over consecutive iterations (of its engine: prev is the one before) merge into one
  // bar; each prefill chunk is its own, and so is an admission with a prefix hit (a resumed request's can be
  // a decode row).
  function addSegment(R, kind, t0, t1, it, prev) {
    const last = R.segs[R.segs.length - 1];
    const merge = last && last.kind === kind && (kind === KIND.decode || kind === KIND.held) && last.it1 === prev
      && !last.cached;
    if (merge) {
      last.t1 = t1;
      last.it1 = it;
      last.x1 = it + 0.5;
      last.n++;
    } else {
      R.segs.push(segment(kind, t0, t1, it - 0.5, it + 0.5, it, it, 1));
      if (R.segs.length > MAX_SEGS) R.segs.splice(0, R.segs.length - MAX_SEGS);
    }
  }

  // A bar: times, x positions on the iteration axis, the iterations it covers (null for a wait),
  // and how many iterations it merges.
  function segment(kind, t0, t1, x0, x1, it0, it1, n) {
    return { kind, t0, t1, x0, x1, it0, it1, n };
  }

  function closeOpen(R, t, x) {
    if (!R.open) return;
    const seg = segment(R.open.kind, R.open.t0, t, R.open.x0, x, null, null, 0);
    if (R.open.whys) seg.whys = R.open.whys;
    if (R.open.copy) seg.copy = R.open.copy;
    R.segs.push(seg);
    R.open = null;
  }

  // swapped: its KV went to the host pool (it resumes where it was); else dropped (it recomputes)
  function preempt(S, rid, t, it, swapped) {
    const R = requestRecord(S, rid);
    R.preemptions++;
    R.dropped = R.dropped || !swapped;
    const kind = swapped ? KIND.swapped : KIND.preempted;
    R.state = kind;
    R.open = { kind, t0: t, x0: it - 0.5 };
  }

  // A disaggregated lane: the prefill half handed the request on after its first token; it waits for the
  // decode half to copy its KV (an open "transfer" stretch, closed when the decode half schedules it).
  function handedOff(S, rid, t, it, contract) {
    const R = requestRecord(S, rid);
    if (R.done) return;
    R.part = contract.parts.decode;
    R.state = KIND.transfer;
    R.open = { kind: KIND.transfer, t0: t, x0: it + 0.5 };
  }

  // The decode half's copies this step, [request id, blocks, bytes, seconds]: kept on the transfer stretch
  // (measured per request) and summed per lane.
  function copied(S, handoffs) {
    for (const [rid, blocks, bytes, s] of handoffs || []) {
      const R = S.reqs.get(rid);
      if (R && R.open && R.open.kind === KIND.transfer) R.open.copy = { blocks, bytes, s };
      S.handoffBytes = (S.handoffBytes || 0) + bytes;
      S.handoffS = (S.handoffS || 0) + s;
      S.handoffN = (S.handoffN || 0) + 1;
    }
  }

  // The prefill engine frees a request's blocks once the decode engine copied them (or the request ended
  // there): the prefill pool's last snapshot, which may be older, shows them free from this step on.
  function releaseSent(S, contract, ev) {
    const pool = S.pools[contract.parts.prefill];
    const gone = [...(ev.handoffs || []).map((h) => h[0]), ...(ev.finished || [])]
      .filter((rid) => pool && pool.block_tables && pool.block_tables[rid]);
    if (!gone.length) return;
    const tables = { ...pool.block_tables };
    let used = pool.used;
    for (const rid of gone) {
      used -= tables[rid].length;
      delete tables[rid];
    }
    S.pools = { ...S.pools, [contract.parts.prefill]: { ...pool, block_tables: tables, used } };
  }

  function markFinished(S, rid, t, x) {
    const R = requestRecord(S, rid);
    R.state = KIND.finished;
    ended(S, R);
    if (R.finishT == null) {
      R.finishT = t;
      R.finishX = x;
    }
  }

  // The order requests ended (a step's finished list, or their finished events, whichever came first).
  function ended(S, R) {
    R.endSeq ??= ++S.ends;
  }

  function onFinished(S, ev) {
    const R = requestRecord(S, ev.request_id);
    ended(S, R);
    R.reason = ev.finish_reason ?? null;
    R.error = ev.error ?? null;
    if (R.nPrompt == null) R.nPrompt = ev.num_prompt_tokens ?? null;
    if (typeof ev.num_output_tokens === "number") R.nOut = ev.num_output_tokens;
    if (R.arrival == null && ev.arrival_s != null) R.arrival = ev.arrival_s;
    if (typeof ev.text === "string") R.text = ev.text;  // authoritative (covers deltas lost to coalescing)
    markAnswerEnd(S, ev.request_id, ev.answer_end);
    R.textRev++;
    S.textRev++;
    const t = ev.finish_s ?? S.lastT;
    closeOpen(R, t, S.lastIt + 0.5);  // aborted while queued or preempted
    if (R.finishT == null) {
      R.finishT = t;
      R.finishX = S.lastIt + 0.5;
    }
    R.state = KIND.finished;
    R.done = true;
    R.lost = false;
    R.wait = null;
    R.endT = Math.max(R.endT ?? -Infinity, t ?? -Infinity);
  }

  // The requests a step sampled for: its short entries' (plain decode rows, [request_id, context_len]) but
  // those `unsampled`, and those in `sampled`. Older recordings, without `unsampled`, list them all in
  // `sampled` (their ids, or an object of id -> token id).
  function sampledIds(ev) {
    const s = ev.sampled || [];
    const listed = Array.isArray(s) ? s : Object.keys(s).map(Number);
    if (!Array.isArray(ev.unsampled)) return listed;
    const skip = new Set(ev.unsampled);
    const ids = [];
    for (const e of ev.entries || []) if (e.length === 2 && !skip.has(e[0])) ids.push(e[0]);
    return ids.concat(listed);
  }

  // The model sampled its end-of-text token at character n of the text, and ignore_eos kept it going.
  function markAnswerEnd(S, rid, n) {
    const R = requestRecord(S, rid);
    if (R.answerEnd != null || !Number.isInteger(n) || n < 0) return;
    R.answerEnd = n;
    R.textRev++;
    S.textRev++;
  }

  function appendText(S, rid, text) {
    if (!text) return;
    const R = requestRecord(S, rid);
    R.text += text;
    R.textRev++;
    S.textRev++;
  }

  // A step's roofline numbers (engine/telemetry/roofline.py): utilizations are null where the device's peaks are
  // unknown; the peaks the step came with are kept on the lane (they draw the roof).
  function roofPoint(S, r) {
    if (!r) return null;
    if (r.peak_bytes_per_s > 0 && r.peak_flops_per_s > 0) S.peaks = { bytesPerS: r.peak_bytes_per_s, flopsPerS: r.peak_flops_per_s };
    return { intensity: r.intensity, flopsPerS: r.flops_per_s, bytesPerS: r.bytes_per_s,
             mem: r.mem_util ?? null, compute: r.compute_util ?? null };
  }

  // A remote lane's server's own gauges, polled from its /metrics (null: it does not export that one).
  function onServerGauges(S, ev) {
    S.server.push({ t: ev.t, running: ev.num_running ?? null, waiting: ev.num_waiting ?? null,
                    kv: ev.kv_usage == null ? null : 100 * ev.kv_usage });
    if (S.server.length > MAX_REMOTE_SAMPLES) S.server.splice(0, S.server.length - MAX_REMOTE_SAMPLES);
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

  // Prefix cache hit rate (tokens served from the cache ÷ tokens looked up) after this step: over the
  // lane's whole stream, and over admissions in the last HIT_WINDOW_S; null while nothing was looked up.
  function prefixRates(S, cur) {
    S.prefix.queries += cur.queries;
    S.prefix.hits += cur.hits;
    if (S.prefix.queries > 0) cur.hitAll = S.prefix.hits / S.prefix.queries;
    // the window: the steps that looked something up, summed as they come and go (not a walk back over 5 s of
    // steps at each one: 1,500 at a GPU's pace)
    const w = S.hitWindow;
    if (cur.queries || cur.hits) {
      w.steps.push(cur);
      w.queries += cur.queries;
      w.hits += cur.hits;
    }
    let gone = 0;
    for (; gone < w.steps.length && !(w.steps[gone].t1 > cur.t1 - HIT_WINDOW_S); gone++) {
      w.queries -= w.steps[gone].queries;
      w.hits -= w.steps[gone].hits;
    }
    if (gone) w.steps.splice(0, gone);
    if (w.queries > 0) cur.hitRecent = w.hits / w.queries;
  }

  // Runs of one request and phase in a slot, linked as the steps arrive: a cell that repeats its slot's
  // cell of the step before it (the same engine's, a disaggregated lane's half) joins that cell's run, else
  // starts one (st.starts). The batch slots band draws a run once, not a rectangle per cell (slots.js).
  // S.tails: each engine's last step's cells by slot (kept when that step gives its cells up).
  function linkRuns(S, st) {
    const before = S.tails.get(st.part);
    S.tails.set(st.part, st.bySlot);
    st.starts = [];
    st.bySlot.forEach((cell, s) => {
      const p = before && before[s];
      const joins = p && p.rid === cell.rid && p.kind === cell.kind;
      cell.run = joins ? p.run : { from: st.it, last: null, part: st.part, first: cell };
      if (!joins) st.starts.push(cell);
      cell.run.last = st;
    });
  }

  // The step joins the lane's kept ones; the oldest give their cells up past limits.cells and go past
  // limits.steps.
  function keepStep(S, st) {
    S.steps.push(st);
    S.rowsSeen = Math.max(S.rowsSeen, st.rows);
    S.detailCells += st.cells.length;
    while (S.detailCells > S.limits.cells && S.detailed < S.steps.length - 1) {
      const old = S.steps[S.detailed++];
      S.detailCells -= old.cells.length;
      const n = (S.sinceCheck.get(old.part) || 0) + 1;
      S.sinceCheck.set(old.part, n < S.limits.check ? n : 0);
      if (n >= S.limits.check) old.alive = runsOf(old.bySlot);
      old.cells = old.bySlot = null;
    }
    if (S.steps.length >= S.limits.steps + S.limits.chunk) dropOldest(S, S.steps.length - S.limits.steps);
  }

  // The n oldest steps go. A run they started that goes on past them is carried into the starts of its
  // engine's first step kept, so a sweep from there (runSweep) still finds it.
  function dropOldest(S, n) {
    const gone = S.steps.splice(0, n), first = new Map();
    for (const st of gone.slice(S.detailed)) S.detailCells -= st.cells.length;  // (gone with their cells)
    S.rowsSeen = S.steps.reduce((a, st) => Math.max(a, st.rows), 0);
    S.detailed = Math.max(0, S.detailed - n);
    for (const st of S.steps) if (!first.has(st.part)) first.set(st.part, st);
    for (const part of S.tails.keys()) if (!first.has(part)) S.tails.delete(part);  // (none of its steps kept)
    const edge = gone[gone.length - 1].it;
    for (const st of gone) {
      for (const cell of st.starts) {
        const to = cell.run.last.it > edge && first.get(cell.run.part);
        if (to) to.starts.push(cell);
      }
    }
  }

  // A walk through a grid's steps in order (an engine's, or a lane's whole), which says at each step it is
  // given (each of an engine at or after the one before) which runs hold a slot there: at(st) -> each such
  // run's first cell (rid, slot, kind, run), whether the step kept its cells or not. It starts from the
  // nearest step of that engine at or before the first asked that knows its runs: one that kept its cells, a
  // check (keepStep) or the engine's first kept (dropOldest carried its runs there); then each step's starts.
  function runSweep(steps) {
    const parts = new Map();  // engine part -> { slots: slot -> the last run started there, next: index }
    const known = (st) => !!(st.bySlot || st.alive);
    const start = (st) => {
      let k = indexOf(steps, st);
      for (let j = k - 1; j >= 0 && !known(steps[k]); j--) if (steps[j].part === st.part) k = j;
      const slots = new Map(), at = steps[k];
      if (!at) return { slots, next: 0 };  // (not one of these steps: from the first)
      const held = at.bySlot ? runsOf(at.bySlot) : at.alive || at.starts;
      for (const cell of held) slots.set(cell.slot, cell);
      return { slots, next: k + 1 };
    };
    return {
      at(st) {
        if (!parts.has(st.part)) parts.set(st.part, start(st));
        const p = parts.get(st.part);
        for (; p.next < steps.length && steps[p.next].it <= st.it; p.next++) {
          if (steps[p.next].part !== st.part) continue;
          for (const cell of steps[p.next].starts) p.slots.set(cell.slot, cell);
        }
        const out = [];
        for (const cell of p.slots.values()) if (cell.run.last.it >= st.it) out.push(cell);
        return out;
      },
    };
  }

  // The runs holding a step's slots, each as its first cell.
  const runsOf = (bySlot) => bySlot.filter(Boolean).map((cell) => cell.run.first);

  // The index of a step among steps in order (by iteration), -1 if it is not there.
  function indexOf(steps, st) {
    let lo = 0, hi = steps.length - 1;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (steps[mid].it < st.it) lo = mid + 1;
      else hi = mid;
    }
    return steps[lo] === st ? lo : -1;
  }

  // Flat memory: drop finished requests that ended before the retained window, then cap the count.
  function prune(S) {
    const oldest = S.steps.length ? S.steps[0].t0 : -Infinity;
    for (const [rid, R] of S.reqs) {
      if (R.done && (R.endT ?? -Infinity) < oldest) S.reqs.delete(rid);
    }
    if (S.reqs.size <= MAX_REQS) return;
    const ids = [...S.reqs.keys()].sort((a, b) => a - b);
    for (const rid of ids) {  // oldest finished first
      if (S.reqs.size <= MAX_REQS) return;
      if (S.reqs.get(rid).done) S.reqs.delete(rid);
    }
    // then, past MAX_REQS * 4, requests that have not run yet, the last to arrive first (the furthest from
    // running: one that runs later is known again from its first step, without its arrival). Never one that
    // runs: a GPU's 256 rows behind a queue of 1,000 had lost theirs to it, each message, Gantt bars and all.
    for (let k = ids.length - 1; k >= 0 && S.reqs.size > MAX_REQS * 4; k--) {
      if (S.reqs.get(ids[k])?.state === KIND.queued) S.reqs.delete(ids[k]);
    }
    for (const rid of ids) {  // and if that is not enough (ends this view never heard of), the oldest of all
      if (S.reqs.size <= MAX_REQS * 4) return;
      S.reqs.delete(rid);
    }
  }

  // NVML samples of the device the engines share (only on a GPU).
  function ingestGpu(st, ev) {
    st.gpu.push({ t: ev.t, util: ev.util_pct, mem: ev.mem_total_mb ? (100 * ev.mem_used_mb) / ev.mem_total_mb : 0,
                  usedMb: ev.mem_used_mb, totalMb: ev.mem_total_mb });
    if (st.gpu.length > MAX_GPU_SAMPLES) st.gpu.splice(0, st.gpu.length - MAX_GPU_SAMPLES);
    st.gpuRev++;
    return true;
  }

  function ingestStatus(st, ev) {
    if (ev.event === "progress") {
      st.progress = { message: String(ev.message ?? ""), t: ev.t };
      return true;
    }
    if (!ev.lane && typeof ev.t === "number") notePause(st, ev.event, ev.t);
    if (!ev.lane && ev.event === (st.contract.status || {}).run_started && typeof ev.t === "number") {
      st.run = { t0: ev.t, it0: new Map([...st.by.values()].map((S) => [S.name, S.lastIt + 1])) };
    }
    const S = ev.lane ? st.by.get(ev.lane) : null;
    if (S) S.lastEvent = { event: ev.event, error: ev.error ?? null };
    return true;
  }

  // The service's pauses, [{t0, t1}] (t1 null while paused): the time axis draws them, the metric cards
  // leave them out of latencies. A recording's pause (replayed events) spans no time and is dropped.
  function notePause(st, event, t) {
    const names = st.contract.status || {}, open = st.pauses[st.pauses.length - 1];
    if (event === names.paused && !(open && open.t1 == null)) st.pauses.push({ t0: t, t1: null });
    if (event === names.resumed && open && open.t1 == null) {
      if (t > open.t0) open.t1 = t;
      else st.pauses.pop();
    }
    if (st.pauses.length > 50) st.pauses.shift();
  }

  /* ---- queries the views share ---- */

  // Some lane computes: a request is in a batch (not only waiting for one, not finished). The time axis
  // follows "now" only then, so a lane that only waits (a static batch filling up) leaves the last run
  // on screen.
  function computing(st) {
    for (const S of st.by.values()) {
      for (const R of S.reqs.values()) if (!R.done && !R.open) return true;
    }
    return false;
  }

  // What the last run covers, for the axes to show whole once it has ended: {t0, t1} service seconds (from
  // the scenario's start, else the earliest arrival kept) and {it0, it1}, one iteration range for every
  // lane (from the first iteration of the run on any lane to the last on any). null before any step.
  function runExtent(st) {
    let t0 = st.run ? st.run.t0 : Infinity, it0 = Infinity, it1 = -Infinity;
    for (const S of st.by.values()) {
      if (!S.steps.length) continue;
      const first = st.run && st.run.it0.has(S.name) ? st.run.it0.get(S.name) : S.steps[0].it;
      it0 = Math.min(it0, Math.max(first, S.steps[0].it));
      it1 = Math.max(it1, S.lastIt);
      if (!st.run) for (const R of S.reqs.values()) if (R.arrival != null) t0 = Math.min(t0, R.arrival);
    }
    if (it1 < 0 || st.latestT == null) return null;
    return { t0: Math.min(t0, st.latestT), t1: st.latestT, it0: Math.min(it0, it1), it1 };
  }

  // The lane's batch limit. The service status reports the lane's configured value; if the engine kept
  // an older config (a failed reconfigure), the rows it really ran are the better bound.
  function maxBatch(S, config) {
    const configured = config ? (config.strategy === "continuous" ? config.max_num_seqs : config.static_batch_size) : 0;
    return Math.max(configured || 0, S.rowsSeen) || null;  // (rowsSeen: the most rows of a step kept)
  }

  // A lane's kept iterations per engine: [its own], or for a disaggregated lane [the decode engine's,
  // the prefill engine's].
  function engineSteps(S, contract) {
    if (!S.pools) return [S.steps];
    const prefill = (st) => st.part === contract.parts.prefill;
    return [S.steps.filter((st) => !prefill(st)), S.steps.filter(prefill)];
  }

  // Whether a lane caches prefixes: its configuration says so; before the first status, whether it
  // has looked anything up.
  function prefixOn(S, config) {
    return config ? !!config.enable_prefix_caching : S.prefix.queries > 0;
  }

  // Whether a lane is a remote server (no slots, no KV blocks to show): its configuration says so;
  // before the first status, its events' strategy.
  function isRemote(S, config) {
    return config ? config.source === "remote" : S.remote;
  }

  return { KIND, HIT_WINDOW_S, LIMITS, newState, runSweep, applyBatch, computing, runExtent, maxBatch, engineSteps,
           prefixOn, isRemote };
});
