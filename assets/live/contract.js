// The event contract as the engine states it (engine/events.py wire_contract(), handed over in the
// component's data): turned into index constants once, so no view hard-codes a step entry's layout.

defineLive("Contract", [], () => {
  const ENTRY_NAMES = { rid: "request_id", phase: "phase", tokens: "num_tokens", ctx: "context_len", slot: "slot",
                        cached: "cached_tokens" };
  // fields recordings made before them lack: their index is -1 there, and reading one gives undefined
  const LATER_ENTRY_NAMES = { drafted: "drafted", accepted: "accepted" };
  const PHASE_NAMES = { prefill: "prefill", decode: "decode", padding: "padding" };
  // each event's type name, by its class in engine/events.py (recordings made before the contract sent
  // them: these)
  const TYPES = { step: "StepMessage", request: "RequestEvent", finished: "FinishedEvent", status: "StatusEvent",
                  waits: "WaitsEvent", gpu: "GpuEvent", lanes: "LanesEvent", remoteMetrics: "RemoteMetricsEvent" };
  const TYPE_NAMES = { step: "step", request: "request", finished: "finished", status: "status", waits: "waits",
                       gpu: "gpu", lanes: "lanes", remoteMetrics: "remote_metrics" };

  // -> { entry: { rid, phase, tokens, ctx, slot, cached, drafted, accepted } (indexes into an entry list), phase: { prefill,
  // decode, padding } (names), type: { step, request, ... } (event type names), remote (a remote lane's
  // strategy), waits (wait reasons' phrasing), status (status event names), swap (swap directions), parts (a disaggregated lane's halves) }. Throws if the engine's
  // contract lacks a field the views read.
  function fromWire(wire) {
    const fields = (wire && wire.entry_fields) || [];
    const phases = (wire && wire.phases) || [];
    const entry = {}, phase = {};
    for (const [key, name] of Object.entries(ENTRY_NAMES)) {
      entry[key] = fields.indexOf(name);
      if (entry[key] < 0) throw new Error(`event contract: step entries have no "${name}"`);
    }
    for (const [key, name] of Object.entries(LATER_ENTRY_NAMES)) entry[key] = fields.indexOf(name);
    // a plain decode row's short entry, [request_id, context_len] (recordings made before it: none)
    const short = (wire && wire.short_entry) || null;
    if (short && (short.length !== 2 || short[0] !== ENTRY_NAMES.rid || short[1] !== ENTRY_NAMES.ctx)) {
      throw new Error(`event contract: short entries are not [request_id, context_len]`);
    }
    const width = fields.length;
    for (const [key, name] of Object.entries(PHASE_NAMES)) {
      if (!phases.includes(name)) throw new Error(`event contract: no phase "${name}"`);
      phase[key] = name;
    }
    const remote = (wire && wire.remote_strategy) || "remote";  // the strategy a remote lane's events carry
    // why requests wait: the phrasing of each reason (engine/scheduler/waits.py)
    const waits = Object.freeze({ templates: (wire && wire.wait_reasons) || {},
                                  launchAt: (wire && wire.launch_at) || "launches in {s} s" });
    // the service's status events the views act on (recordings made before the contract named them: these)
    const status = Object.freeze({ paused: "paused", resumed: "resumed", run_started: "run_started",
                                   ...((wire && wire.status) || {}) });
    // swap preemption's directions in a step's `swaps` (recordings made before swap preemption: these)
    const swap = Object.freeze({ out: "out", in: "in", ...((wire && wire.swap) || {}) });
    // a disaggregated lane's halves, a step's `part` (recordings made before disaggregation: these)
    const parts = Object.freeze({ prefill: "prefill", decode: "decode", ...((wire && wire.parts) || {}) });
    const sent = (wire && wire.types) || {};
    const type = Object.fromEntries(Object.entries(TYPES).map(([key, cls]) => [key, sent[cls] || TYPE_NAMES[key]]));
    return Object.freeze({ entry: Object.freeze(entry), phase: Object.freeze(phase), type: Object.freeze(type), remote,
                           waits, status, swap, parts, shortEntries: !!short, entryWidth: width });
  }

  // A step's entries, each a list in entry_fields order: a short one (a plain decode row: one decode token,
  // its slot its place in the list, nothing cached, drafted or accepted) written out.
  function fullEntries(contract, entries) {
    if (!contract.shortEntries || !entries || !entries.some((e) => e.length === 2)) return entries;
    const E = contract.entry;
    return entries.map((e, i) => {
      if (e.length !== 2) return e;
      const full = new Array(contract.entryWidth).fill(0);
      full[E.rid] = e[0]; full[E.phase] = contract.phase.decode; full[E.tokens] = 1;
      full[E.ctx] = e[1]; full[E.slot] = i;
      return full;
    });
  }

  // A step entry's request id and context, whether whole or short ([request id, context]). E: contract.entry.
  const entryRid = (E, e) => (e.length === 2 ? e[0] : e[E.rid]);
  const entryCtx = (E, e) => (e.length === 2 ? e[1] : e[E.ctx]);

  // A step's entries as sent whole: its `cont` runs ([at, from, n]: entries at..at+n-1 are the previous step's
  // of its pool from..from+n-1, each a token further, sent short) written out between its own entries. prev:
  // that previous step's entries as this returned them. Runs past prev's rows are cut, and no more of prev's
  // rows go on than prev holds (engine/events.py with_continued_rows).
  function continuedRows(contract, prev, cont, entries) {
    const out = [], E = contract.entry;
    let k = 0, room = prev.length;
    for (const run of cont) {
      if (!Array.isArray(run)) continue;
      const [at, start, n] = run.map((x) => Math.max(0, Number(x) || 0));
      const take = Math.min(Math.max(0, at - out.length), entries.length - k);
      for (let i = 0; i < take; i++) out.push(entries[k++]);
      const from = start, to = Math.min(prev.length, from + Math.min(n, room));
      for (let j = from; j < to; j++, room--) {
        out.push([entryRid(E, prev[j]), entryCtx(E, prev[j]) + 1]);
      }
    }
    while (k < entries.length) out.push(entries[k++]);
    return out;
  }

  return { fromWire, fullEntries, entryRid, entryCtx, continuedRows };
});
