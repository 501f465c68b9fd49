// The live view's event reducer (assets/live/state.js) replayed on events recorded from a real run
// (tests/js/record_events.py). Run by tests/assets/live/test_live_state_js.py: node tests/js/state_test.js RECORDING
"use strict";
const assert = require("node:assert/strict");
const fs = require("node:fs");

require("./live_modules.js");
const { Contract, LiveState, KvBlocks, Common, Gantt } = globalThis;

const rec = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
const contract = Contract.fromWire(rec.contract);
const E = contract.entry, P = contract.phase;

// What the live view folds in: the "events" messages after its subscribe reply (ref "sub").
function acceptedBatches(messages) {
  const subReply = messages.findIndex((m) => m.type === "reply" && m.ref === "sub");
  assert.ok(subReply >= 0, "the recording has the subscribe reply");
  return messages.slice(subReply + 1).filter((m) => m.type === "events");
}

function replay(batches, clearAfter) {
  const st = LiveState.newState(rec.lanes, contract);
  for (const b of batches) LiveState.applyBatch(st, b, clearAfter);
  return st;
}

// what the engine stepped: each step's entries written out (the socket sends the rows that go on from the
// pool's previous step as runs, `cont`, and plain decode rows short; short: those left short, as the reducer
// reads them)
function allEvents(batches, short = false) {
  const last = new Map();
  return batches.flatMap((b) => b.events).map((e) => {
    if (e.type !== "step") return e;
    const pool = `${e.lane}/${e.part || ""}`;
    const sent = e.cont ? Contract.continuedRows(contract, last.get(pool), e.cont, e.entries) : e.entries;
    last.set(pool, sent);
    return { ...e, entries: short ? sent : Contract.fullEntries(contract, sent), cont: undefined };
  });
}
const ofType = (events, type, lane) => events.filter((e) => e.type === type && e.lane === lane);
const sum = (xs) => xs.reduce((a, x) => a + x, 0);

// Each step event with its kv whole, folded from what the socket sent (KvBlocks.fold, per lane and half).
function foldedSteps(batches) {
  const last = new Map();
  return allEvents(batches, true).filter((e) => e.type === "step").map((ev) => {
    const pool = `${ev.lane}/${ev.part || ""}`;
    const kv = KvBlocks.fold(last.get(pool), ev.kv, ev.entries, E);
    last.set(pool, kv);
    return { ...ev, kv };
  });
}

// Shared blocks counted straight from a snapshot's tables: block -> holders.
function holdersOf(kv) {
  const out = new Map();
  for (const [rid, table] of Object.entries(kv.block_tables)) {
    for (const b of table) out.set(b, [...(out.get(b) || []), Number(rid)]);
  }
  return out;
}

// Each lane's settings, as the service's hello reports them (the live view reads them there too).
const configs = Object.fromEntries(Object.entries(rec.messages.find((m) => m.type === "hello").status.engines)
  .map(([name, eng]) => [name, eng.config]));
const prefixLanes = () => rec.lanes.filter((n) => configs[n].enable_prefix_caching);

const tests = {
  "rows that go on are written out from the previous step's, and never more of them than it held"() {
    const prev = [[3, 7], new Array(contract.entryWidth).fill(0)];
    prev[1][E.rid] = 4; prev[1][E.phase] = P.prefill; prev[1][E.ctx] = 9;
    assert.deepEqual(Contract.continuedRows(contract, prev, [[1, 0, 1]], [[8, 2]]), [[8, 2], [3, 8]]);
    assert.deepEqual(Contract.continuedRows(contract, prev, [[0, 1, 9], [1, 0, 9]], []), [[4, 10], [3, 8]]);
    assert.equal(Contract.continuedRows(contract, prev, Array(1000).fill([0, 0, 2]), []).length, 2);
    assert.deepEqual(Contract.continuedRows(contract, prev, [5, null, [-3, -1, 1]], []), [[3, 8]]);  // (hostile runs)
    // a step whose rows go on from a step this view never had goes on without rows, until the pool's next whole one
    const st = LiveState.newState(["a"], contract);
    const step = (n, entries, cont) => ({ type: "step", lane: "a", strategy: "continuous", step: n, t_start: n,
                                          t_end: n + 0.5, entries, cont, admitted: [], finished: [], preempted: [],
                                          num_waiting: 0, num_running: entries.length, sampled: [], unsampled: [],
                                          deltas: {}, waits: {} });
    LiveState.applyBatch(st, { skipped: 0, events: [step(1, [], [[0, 0, 2]]), step(2, [[5, 3], [6, 4]]),
                                                    step(3, [], [[0, 0, 2]])] });
    const S = st.by.get("a");
    assert.equal(S.steps.length, 3);
    assert.deepEqual(S.steps.map((x) => x.rows), [0, 2, 2]);
    assert.deepEqual([...S.reqs.keys()].sort(), [5, 6]);
  },

  "a lane keeps its newest steps, only the newest with a cell a row, and a run from a step gone is still found"() {
    const rows = 6, lim = { steps: 50, cells: rows * 10, chunk: 7, check: 4 };
    const st = LiveState.newState(["a"], contract, lim);
    const S = st.by.get("a");
    const entry = (rid, slot) => { const e = new Array(contract.entryWidth).fill(0); e[E.rid] = rid;
      e[E.phase] = P.decode; e[E.tokens] = 1; e[E.ctx] = 10; e[E.slot] = slot; return e; };
    for (let n = 1; n <= 400; n++) {
      // slot 0 holds request 1 throughout; from step 101 the others come, and change hands every 13 steps
      const changing = Array.from({ length: rows - 1 }, (_, s) => entry(100 * (1 + Math.floor(n / 13)) + s, s + 1));
      const entries = [entry(1, 0), ...(n > 100 ? changing : [])];
      LiveState.applyBatch(st, { skipped: 0, events: [
        { type: "step", lane: "a", strategy: "continuous", step: n, t_start: n, t_end: n + 0.5, entries,
          admitted: [], finished: n > 100 && (n + 1) % 13 === 0 ? changing.map((e) => e[E.rid]) : [], preempted: [],
          num_waiting: 0, num_running: rows, sampled: [], deltas: {}, waits: {} }] });
      assert.ok(S.steps.length < lim.steps + lim.chunk, `${S.steps.length} steps kept after ${n}`);
      const detailed = S.steps.filter((x) => x.cells);
      const kept = detailed.reduce((a, x) => a + x.cells.length, 0);
      assert.ok(kept <= lim.cells && detailed.length >= 1);
      if (n > 120) assert.ok(kept > lim.cells - rows, `step ${n}: ${kept} cells kept, the budget is ${lim.cells}`);
      assert.equal(detailed[0], S.steps[S.steps.length - detailed.length], "the newest keep their cells");
    }
    assert.equal(S.steps[0].it, 400 - S.steps.length + 1);
    const sweep = LiveState.runSweep(S.steps);
    for (const x of S.steps) {
      const runs = [], fresh = LiveState.runSweep(S.steps).at(x);  // (from its nearest step that knows its runs)
      for (const cell of sweep.at(x)) runs[cell.slot] = cell;
      assert.deepEqual(fresh.map((c) => c.rid).sort(), runs.filter(Boolean).map((c) => c.rid).sort());
      assert.deepEqual([runs[0].rid, runs[0].run.from], [1, 1], `iteration ${x.it}: slot 0 since the first`);
      for (let s = 1; s < rows; s++) assert.equal(runs[s].rid, 100 * (1 + Math.floor(x.it / 13)) + s - 1);
      if (x.bySlot) assert.deepEqual(runs.map((c) => c.rid), x.bySlot.map((c) => c.rid));
    }
    // what a lane keeps by default: the time axis's 20 s of a GPU's 300 steps a second, 256 rows a step in detail
    assert.ok(LiveState.LIMITS.steps >= 20 * 300 && LiveState.LIMITS.cells >= 300 * 256);
  },

  "a continuous lane's request keeps its seat while it runs, through steps that leave it out"() {
    const st = LiveState.newState(["c"], contract);
    const S = st.by.get("c");
    const row = (rid, i) => { const e = new Array(contract.entryWidth).fill(0); e[E.rid] = rid; e[E.phase] = P.decode;
      e[E.tokens] = 1; e[E.ctx] = 10; e[E.slot] = i; return e; };
    const step = (n, rids, finished = [], preempted = []) => ({ type: "step", lane: "c", strategy: "continuous", step: n,
      t_start: n, t_end: n + 0.5, entries: rids.map(row), admitted: [], finished, preempted, num_waiting: 0,
      num_running: rids.length, sampled: [], deltas: {}, waits: {} });
    LiveState.applyBatch(st, { skipped: 0, events: [
      step(1, [1, 2, 3]), step(2, [1, 3]),  // #2 left out (its budget went to others): still running
      step(3, [1, 3, 4], [1]),              // #4 joins: not #2's seat; #1 finishes
      step(4, [4, 5], [], [3]),             // #5 takes #1's seat; #3 is preempted (its seat freed)...
      step(5, [2, 4, 5, 6]),                // ...and #6 takes its seat; #2 comes back to its own
    ] });
    const seats = S.steps.map((x) => Object.fromEntries(x.cells.map((c) => [c.rid, c.slot])));
    assert.deepEqual(seats, [{ 1: 0, 2: 1, 3: 2 }, { 1: 0, 3: 2 }, { 1: 0, 3: 2, 4: 3 }, { 4: 3, 5: 0 },
                             { 2: 1, 4: 3, 5: 0, 6: 2 }]);
    // #2 then ends without this view hearing of it: its seat is held a while, then goes to the next to join
    const later = (from, n, rids) => Array.from({ length: n }, (_, k) => step(from + k, rids));
    LiveState.applyBatch(st, { skipped: 0, events: [...later(6, 10, [4, 5, 6]), step(16, [4, 5, 6, 7])] });
    assert.equal(S.steps[S.steps.length - 1].bySlot.findIndex((c) => c && c.rid === 7), 4, "#2's seat still held");
    LiveState.applyBatch(st, { skipped: 0, events: [...later(17, 80, [4, 5, 6, 7]), step(97, [4, 5, 6, 7, 8])] });
    assert.equal(S.steps[S.steps.length - 1].bySlot.findIndex((c) => c && c.rid === 8), 1, "#2's seat, stale, reused");
  },

  "a queue of a thousand behind 256 rows: the running requests keep their records, and the Gantt shows them"() {
    const st = LiveState.newState(["a"], contract);
    const S = st.by.get("a");
    LiveState.applyBatch(st, { skipped: 0, events: Array.from({ length: 1024 }, (_, r) => ({ type: "request", lane: "a",
      strategy: "continuous", request_id: r, tag: "t", prompt: "x", num_prompt_tokens: 16, max_tokens: 128,
      arrival_s: 0 })) });
    for (let n = 1; n <= 20; n++) {
      const entries = Array.from({ length: 256 }, (_, s) => { const e = new Array(contract.entryWidth).fill(0);
        e[E.rid] = s; e[E.phase] = n === 1 ? P.prefill : P.decode; e[E.tokens] = n === 1 ? 16 : 1; e[E.ctx] = 16 + n;
        e[E.slot] = s; return e; });
      LiveState.applyBatch(st, { skipped: 0, events: [{ type: "step", lane: "a", strategy: "continuous", step: n,
        t_start: n / 100, t_end: (n + 1) / 100, entries, admitted: [], finished: [], preempted: [], num_waiting: 768,
        num_running: 256, sampled: {}, deltas: {}, waits: {} }] });
    }
    const running = [...Array(256).keys()].map((r) => S.reqs.get(r));
    assert.ok(running.every((R) => R && R.arrival === 0 && R.segs.length >= 2), "each running request as it ran");
    assert.ok(S.reqs.size <= 640, `${S.reqs.size} records`);
    assert.deepEqual(Gantt.rows([S], [0, 0.21], "time", { axis: "time", now: 0.21 }).slice(0, 3), [255, 254, 253]);
  },

  "every request ends with the finished event's state and text"() {
    const batches = acceptedBatches(rec.messages);
    const st = replay(batches);
    const events = allEvents(batches);
    for (const name of rec.lanes) {
      const S = st.by.get(name);
      const finished = ofType(events, "finished", name);
      assert.ok(finished.length >= 6, `${name}: the recording finishes requests`);
      for (const ev of finished) {
        const R = S.reqs.get(ev.request_id);
        assert.ok(R, `${name} #${ev.request_id} is shown`);
        assert.equal(R.state, "finished");
        assert.ok(R.done && !R.lost, `${name} #${ev.request_id} ended normally`);
        assert.equal(R.text, ev.text, `${name} #${ev.request_id} text`);
        assert.equal(R.reason, ev.finish_reason);
        assert.equal(R.nOut, ev.num_output_tokens);
      }
      for (const ev of ofType(events, "request", name)) {
        const R = S.reqs.get(ev.request_id);
        assert.ok(R && R.tag === ev.tag && R.nPrompt === ev.num_prompt_tokens, `${name} #${ev.request_id} request`);
      }
      assert.ok(finished.some((ev) => ev.finish_reason === "abort"), `${name}: the recording aborts one`);
      assert.deepEqual([...S.reqs.values()].filter((R) => !R.done).map((R) => R.rid), [], `${name}: none left running`);
    }
  },

  "text streamed from step deltas equals the final text"() {
    const batches = acceptedBatches(rec.messages);
    const events = allEvents(batches);
    const recorded = events.filter((e) => e.type !== "finished");  // deltas only
    const st = replay([{ skipped: 0, events: recorded }]);
    for (const name of rec.lanes) {
      const requested = new Set(ofType(events, "request", name).map((e) => e.request_id));
      for (const ev of ofType(events, "finished", name)) {
        // an abort ends without a last step: its final text comes only in the finished event
        if (!requested.has(ev.request_id) || ev.finish_reason === "abort") continue;
        assert.equal(st.by.get(name).reqs.get(ev.request_id).text, ev.text, `${name} #${ev.request_id}`);
      }
    }
  },

  "a request's token count follows the steps that sampled for it, before its finished event says it"() {
    const batches = acceptedBatches(rec.messages);
    const raw = batches.flatMap((b) => b.events);  // as sent: plain decode rows short, sampled relative to them
    const st = replay([{ skipped: 0, events: raw.filter((e) => e.type !== "finished") }]);
    for (const name of rec.lanes) {
      const requested = new Set(ofType(raw, "request", name).map((e) => e.request_id));  // (seen from its start)
      for (const ev of ofType(raw, "finished", name)) {
        if (!requested.has(ev.request_id) || ev.finish_reason === "abort") continue;  // (an abort may end between steps)
        assert.equal(st.by.get(name).reqs.get(ev.request_id).nOut, ev.num_output_tokens,
                     `${name} #${ev.request_id}`);
      }
    }
  },

  "rows, phases and tokens per step match the step events"() {
    const batches = acceptedBatches(rec.messages);
    const st = replay(batches);
    for (const name of rec.lanes) {
      const steps = ofType(allEvents(batches), "step", name);
      const S = st.by.get(name);
      assert.equal(S.steps.length, steps.length);
      const sent = batches.flatMap((b) => b.events).filter((e) => e.type === "step" && e.lane === name);
      assert.ok(sent.some((ev) => ev.entries.some((e) => e.length === 2)), `${name}: plain decode rows went short`);
      assert.ok(sent.some((ev) => ev.cont && ev.cont.length), `${name}: rows that went on went as runs`);
      const seats = new Map();  // a continuous lane's seats: engine part -> the previous step's request -> seat
      steps.forEach((ev, i) => {
        const sum = S.steps[i];
        const rids = new Set(ev.entries.map((e) => e[E.rid]));
        if (ev.strategy === "continuous") checkSeats(seats, sum, ev, `${name} step ${ev.step}`);
        assert.equal(sum.it, ev.step);  // one iteration number: the engine's
        assert.equal(sum.rows, rids.size, `${name} step ${ev.step}: rows`);
        const tokens = (pred) => ev.entries.filter(pred).reduce((a, e) => a + e[E.tokens], 0);
        assert.equal(sum.pad, tokens((e) => e[E.phase] === P.padding));
        assert.equal(sum.real, tokens((e) => e[E.phase] !== P.padding));
        for (const cell of sum.cells) {
          const phases = new Set(ev.entries.filter((e) => e[E.rid] === cell.rid).map((e) => e[E.phase]));
          const expected = phases.has(P.decode) ? ["decode"] : phases.has(P.prefill) ? ["prefill", "recompute"] : ["held"];
          assert.ok(expected.includes(cell.kind), `${name} step ${ev.step} #${cell.rid}: ${cell.kind} for ${[...phases]}`);
          assert.equal(sum.bySlot[cell.slot], cell);
          const own = ev.entries.filter((e) => e[E.rid] === cell.rid);
          assert.equal(cell.ctx, Math.max(...own.map((e) => e[E.ctx])), `${name} step ${ev.step} #${cell.rid}: context`);
          if (ev.strategy !== "continuous") assert.equal(cell.slot, own[0][E.slot], `${name} step ${ev.step}: slot`);
        }
      });
      const preempted = steps.flatMap((ev) => ev.preempted);
      for (const rid of new Set(preempted)) {
        assert.equal(S.reqs.get(rid).preemptions, preempted.filter((r) => r === rid).length, `${name} #${rid}`);
      }
    }
  },

  "events the hub skipped are counted, and requests whose end was skipped still end"() {
    const batches = acceptedBatches(rec.messages).map((b) => ({ ...b }));
    const recorded = batches.reduce((a, b) => a + b.skipped, 0);
    assert.ok(recorded > 0, "the recording starts with skipped events (a late subscriber)");
    // Coalesce more mid-run: drop the batch holding the first finished event after the submissions.
    const k = batches.findIndex((b, i) => i > 2 && b.events.some((e) => e.type === "finished"));
    const dropped = batches[k].events;
    batches[k + 1].skipped += dropped.length;
    // as the socket does after a gap: each lane's next step with its KV tables whole
    const keyed = new Set();
    for (const b of batches.slice(k + 1)) {
      b.events = b.events.map((e) => {
        if (e.type !== "step" || keyed.has(e.lane)) return e;
        keyed.add(e.lane);
        return { ...e, kv: rec.kv_whole[`${e.lane}/${e.part || ""}/${e.step}`] };
      });
    }
    const kept = batches.filter((_, i) => i !== k);
    const st = replay(kept);
    assert.equal(st.coalesced, recorded + dropped.length);
    for (const name of rec.lanes) {
      const S = st.by.get(name);
      assert.ok(!S.gapPending, `${name}: the gap was reconciled`);
      assert.deepEqual([...S.reqs.values()].filter((R) => !R.done).map((R) => R.rid), [], `${name}: none left running`);
      for (const ev of ofType(dropped, "finished", name)) {
        const R = S.reqs.get(ev.request_id);
        assert.ok(R.lost && R.state === "finished", `${name} #${ev.request_id}: ended unseen`);
      }
      for (const ev of ofType(allEvents(kept), "finished", name)) {
        assert.equal(S.reqs.get(ev.request_id).text, ev.text, `${name} #${ev.request_id}`);
      }
    }
  },

  "each lane's batch limit comes from its own settings, whatever its name"() {
    const st = replay(acceptedBatches(rec.messages));
    const [a, b] = rec.lanes;
    const cfg = { max_num_seqs: 6, static_batch_size: 3 };
    assert.equal(LiveState.maxBatch(st.by.get(a), { ...cfg, strategy: "continuous" }), 6);
    assert.equal(LiveState.maxBatch(st.by.get(b), { ...cfg, strategy: "static" }), 3);
  },

  "the KV changes the socket sent fold into the engine's tables, step after step"() {
    const steps = foldedSteps(acceptedBatches(rec.messages));
    let changes = 0;
    for (const ev of allEvents(acceptedBatches(rec.messages)).filter((e) => e.type === "step")) {
      if (!ev.kv.block_tables) changes++;
    }
    assert.ok(changes > steps.length / 2, `most steps send changes only (${changes} of ${steps.length})`);
    for (const ev of steps) {
      const whole = rec.kv_whole[`${ev.lane}/${ev.part || ""}/${ev.step}`];
      assert.ok(whole, `the engine's tables of ${ev.lane} step ${ev.step}`);
      assert.deepEqual(ev.kv, whole, `${ev.lane} step ${ev.step}`);
    }
    // and the reducer's own snapshot is the last one
    const st = replay(acceptedBatches(rec.messages));
    for (const lane of rec.lanes) {
      const last = steps.filter((e) => e.lane === lane).at(-1);
      assert.deepEqual(st.by.get(lane).kv.block_tables, last.kv.block_tables, lane);
    }
  },

  "steps without their KV (a replay's, until its lane's next key frame) end nobody as lost"() {
    // request 2 holds KV but is not scheduled in step 2 (a chunked prefill that got no budget): a step
    // with its KV says so; one without says nothing, so request 2 runs on
    const entry = (rid, ctx) => {
      const e = [];
      Object.entries({ rid, phase: P.decode, tokens: 1, ctx, slot: rid, cached: 0 }).forEach(([k, v]) => { e[E[k]] = v; });
      return e;
    };
    const kv = { num_blocks: 8, block_size: 4, used: 2, block_tables: { 1: [0], 2: [1] }, kv_tokens: { 1: 3, 2: 3 } };
    const step = (n, entries, more) => ({ type: "step", lane: "r", strategy: "continuous", step: n, t_start: n,
                                          t_end: n + 0.5, entries, sampled: {}, admitted: [], finished: [],
                                          preempted: [], tokens_used: 1, token_budget: 64, num_waiting: 0,
                                          num_running: 2, ...more });
    const request = (rid) => ({ type: "request", lane: "r", strategy: "continuous", request_id: rid, tag: "t",
                                prompt: "x", num_prompt_tokens: 2, max_tokens: 8, arrival_s: 0 });
    for (const withKv of [true, false]) {
      const st = LiveState.newState(["r"], contract);
      const second = withKv ? { kv: { ...kv, kv_tokens: { 1: 4, 2: 3 } } } : {};
      LiveState.applyBatch(st, { skipped: 0, events: [request(1), request(2), step(1, [entry(1, 3), entry(2, 3)], { kv }),
                                                       step(2, [entry(1, 4)], second)] });
      assert.equal(st.by.get("r").reqs.get(2).lost, false, `with its KV: ${withKv}`);
    }
  },

  "after a gap, KV changes wait for their pool's next key frame"() {
    const st = LiveState.newState(["r"], contract);
    const step = (n, kv) => ({ type: "step", lane: "r", strategy: "continuous", step: n, t_start: n, t_end: n + 0.5,
                               entries: [], sampled: {}, admitted: [], finished: [], preempted: [], tokens_used: 0,
                               token_budget: 64, num_waiting: 0, num_running: 0, kv });
    const pool = { num_blocks: 8, block_size: 4, used: 1 };
    LiveState.applyBatch(st, { skipped: 0, events: [step(1, { ...pool, block_tables: { 1: [0] }, kv_tokens: { 1: 3 } })] });
    LiveState.applyBatch(st, { skipped: 3, events: [step(5, { ...pool, tables: { 2: [0, 5] }, kv_tokens: { 2: 4 } })] });
    const S = st.by.get("r");
    assert.deepEqual(S.kv.block_tables, { 1: [0] }, "changes after a gap are not folded onto what came before it");
    LiveState.applyBatch(st, { skipped: 0, events: [
      step(6, { ...pool, block_tables: { 2: [5], 3: [6] }, kv_tokens: { 2: 4, 3: 1 } }),
      step(7, { ...pool, tables: { 3: [1, 7] }, kv_tokens: { 3: 5 } })] });
    assert.deepEqual(S.kv.block_tables, { 2: [5], 3: [6, 7] });
    assert.deepEqual(S.kv.kv_tokens, { 2: 4, 3: 5 });
  },

  "shared and cached blocks of every KV snapshot: what the tables and the cached list say"() {
    let shared = 0, cached = 0;
    for (const ev of foldedSteps(acceptedBatches(rec.messages))) {
      const kb = KvBlocks.of(ev.kv), holders = holdersOf(ev.kv);
      const expected = [...holders].filter(([, h]) => h.length > 1);
      assert.deepEqual([...kb.sharers.keys()].sort((a, b) => a - b), expected.map(([b]) => b).sort((a, b) => a - b));
      for (const [b, h] of expected) {
        assert.deepEqual(kb.sharers.get(b).map((s) => s.rid).sort(), h.slice().sort(), `step ${ev.step} block ${b}`);
        assert.equal(kb.refs[b], h.length);
        for (const s of kb.sharers.get(b)) assert.equal(ev.kv.block_tables[s.rid][s.logical], b);
      }
      assert.equal(kb.cached, ev.kv.cached.length);
      const either = expected.length > 0 || kb.cached > 0;
      assert.equal(KvBlocks.sharesOrCaches({ ...ev.kv }), either, `step ${ev.step}: from the tables alone`);
      assert.equal(KvBlocks.sharesOrCaches(ev.kv), either, `step ${ev.step}: from of()'s arrays`);
      ev.kv.cached.forEach((b, i) => assert.equal(kb.lru[b], i, `step ${ev.step}: block ${b} evicted ${i}th`));
      shared += expected.length;
      cached += kb.cached;
      if (!prefixLanes().includes(ev.lane)) assert.ok(!expected.length && !kb.cached, `${ev.lane} caches nothing`);
    }
    assert.ok(shared > 0 && cached > 0, "the recording has shared and cached blocks");
  },

  "per-block arrays handed from a snapshot to the one folded from it: what a fresh pass over each makes"() {
    const last = new Map(), seen = [];
    const same = (a, b, what) => {
      for (const key of ["owner", "logical", "tokens", "refs", "lru"]) assert.deepEqual(a[key], b[key], `${what}: ${key}`);
      assert.deepEqual([a.cached, a.held, a.slots, [...a.sharers]], [b.cached, b.held, b.slots, [...b.sharers]], what);
    };
    let handed = 0;
    const asked = new Map(), keyFrame = new Map();  // pool -> the arrays it last asked for; a key frame since
    allEvents(acceptedBatches(rec.messages)).filter((e) => e.type === "step").forEach((ev, i) => {
      const pool = `${ev.lane}/${ev.part || ""}`;
      const kv = KvBlocks.fold(last.get(pool), ev.kv, ev.entries, E);
      last.set(pool, kv);
      seen.push(kv);
      if (ev.kv.block_tables) keyFrame.set(pool, true);  // (whole: folded from nothing)
      if (i % 3) return;  // the KV map asks once a frame, a few steps apart: the arrays go on from the last asked
      const before = asked.get(pool), arrays = before && before.owner, kb = KvBlocks.of(kv);
      if (before && !keyFrame.get(pool)) {
        assert.equal(kb.owner, arrays, `step ${ev.step} of ${pool}: the arrays of the snapshot asked before`);
        assert.equal(before.owner, null, `step ${ev.step} of ${pool}: the one that gave them has none left`);
        handed++;
      }
      same(kb, KvBlocks.of({ ...kv }), `step ${ev.step} of ${pool}`);
      asked.set(pool, kb);
      keyFrame.set(pool, false);
    });
    assert.ok(handed > 0, "some snapshot took its arrays over from the one before");
    for (const kv of seen.slice(0, 20)) same(KvBlocks.of(kv), KvBlocks.of({ ...kv }), "an earlier snapshot asked again");
  },

  "a prefix hit: the tokens it skipped on the request and its admission bar"() {
    const batches = acceptedBatches(rec.messages);
    const st = replay(batches);
    const latest = new Map();  // request -> tokens from the cache at its latest admission
    for (const ev of allEvents(batches).filter((e) => e.type === "step")) {
      for (const e of ev.entries.filter((x) => x[E.cached] > 0)) {
        const R = st.by.get(ev.lane).reqs.get(e[E.rid]);
        const seg = R.segs.find((s) => s.it0 === ev.step && s.cached);
        assert.ok(seg, `${ev.lane} #${R.rid}: its admission bar at step ${ev.step} shows the hit`);
        assert.equal(seg.cached, e[E.cached]);
        assert.equal(seg.computed, e[E.tokens]);
        // a request resumed after preemption hits its own blocks; with all but its last token cached,
        // its row is a decode
        const kinds = e[E.phase] === P.decode ? ["decode"] : ["prefill", "recompute"];
        assert.ok(kinds.includes(seg.kind) && seg.it0 === seg.it1, `${seg.kind} over ${seg.n} iterations`);
        latest.set(R, e[E.cached]);
      }
    }
    for (const [R, cached] of latest) assert.equal(R.cached, cached, `#${R.rid}`);
    assert.ok(latest.size >= 2, "the recording has prefix hits");
  },

  "prefix cache hit rate per lane: cumulative and over the recent window"() {
    const batches = acceptedBatches(rec.messages);
    const st = replay(batches);
    for (const name of rec.lanes) {
      const S = st.by.get(name), steps = ofType(allEvents(batches), "step", name);
      const on = prefixLanes().includes(name);
      assert.equal(LiveState.prefixOn(S, configs[name]), on);
      assert.equal(S.prefix.queries, sum(steps.map((e) => e.prefix_queries)));
      assert.equal(S.prefix.hits, sum(steps.map((e) => e.prefix_hits)));
      assert.equal(S.prefix.hits > 0, on, `${name}: hits only where prefix caching is on`);
      steps.forEach((ev, i) => {
        const upTo = steps.slice(0, i + 1), recent = upTo.filter((e) => e.t_end > ev.t_end - LiveState.HIT_WINDOW_S);
        const rate = (xs) => (sum(xs.map((e) => e.prefix_queries)) ? sum(xs.map((e) => e.prefix_hits))
          / sum(xs.map((e) => e.prefix_queries)) : null);
        assert.equal(S.steps[i].hitAll, rate(upTo), `${name} step ${ev.step}: cumulative`);
        assert.equal(S.steps[i].hitRecent, rate(recent), `${name} step ${ev.step}: recent`);
      });
    }
  },

  "the recent hit rate counts the lookups of the last HIT_WINDOW_S only, over a run many windows long"() {
    const st = LiveState.newState(["p"], contract);
    const S = st.by.get("p");
    const evs = [];
    let t = 0, seed = 7;
    const rnd = () => ((seed = (seed * 16807) % 2147483647) / 2147483647);
    for (let n = 1; n <= 400; n++) {
      const queries = rnd() < 0.3 ? Math.floor(64 * rnd()) : 0, hits = Math.floor(queries * rnd());
      const dur = rnd() < 0.05 ? 3 : 0.05;  // now and then a long iteration (the window empties)
      evs.push({ type: "step", lane: "p", strategy: "continuous", step: n, t_start: t, t_end: t + dur, entries: [],
                 admitted: [], finished: [], preempted: [], num_waiting: 0, num_running: 0, sampled: {}, deltas: {},
                 waits: {}, prefix_queries: queries, prefix_hits: hits });
      t += dur;
    }
    LiveState.applyBatch(st, { skipped: 0, events: evs });
    assert.ok(t > 10 * LiveState.HIT_WINDOW_S);
    evs.forEach((ev, i) => {
      const recent = evs.slice(0, i + 1).filter((e) => e.t_end > ev.t_end - LiveState.HIT_WINDOW_S);
      const q = sum(recent.map((e) => e.prefix_queries)), h = sum(recent.map((e) => e.prefix_hits));
      assert.equal(S.steps[i].hitRecent, q ? h / q : null, `step ${ev.step}`);
    });
  },

  "a participant's name: on its request, as sent (text), and in its label"() {
    const batches = acceptedBatches(rec.messages);
    const st = replay(batches);
    const named = allEvents(batches).filter((e) => e.type === "request" && e.name);
    assert.ok(named.length >= 1, "the recording has a named request");
    for (const ev of named) {
      const R = st.by.get(ev.lane).reqs.get(ev.request_id);
      assert.equal(R.name, ev.name);
      assert.equal(R.tag, ev.tag);
      assert.equal(Common.reqLabel(R, 40), `#${R.rid} ${ev.name}`);
      assert.equal(Common.reqLabel(R, 5), `#${R.rid} ${Array.from(ev.name).slice(0, 4).join("")}…`);
    }
    assert.equal(st.named, named.length);
    for (const S of st.by.values()) {
      for (const R of S.reqs.values()) if (!named.some((e) => e.lane === S.name && e.request_id === R.rid)) {
        assert.equal(R.name, null);
        assert.equal(Common.reqLabel(R), `#${R.rid}`);
      }
    }
  },

  "roofline numbers per iteration and the device's peaks, as the steps carry them"() {
    const batches = acceptedBatches(rec.messages);
    const st = replay(batches);
    for (const name of rec.lanes) {
      const steps = ofType(allEvents(batches), "step", name), S = st.by.get(name);
      assert.ok(steps.every((e) => e.roofline && e.roofline.peak_bytes_per_s > 0), `${name}: every step has peaks`);
      steps.forEach((ev, i) => {
        const p = S.steps[i].roof, r = ev.roofline;
        assert.deepEqual(p, { intensity: r.intensity, flopsPerS: r.flops_per_s, bytesPerS: r.bytes_per_s,
                              mem: r.mem_util, compute: r.compute_util }, `${name} step ${ev.step}`);
        assert.ok(Math.abs(p.mem * r.peak_bytes_per_s - p.bytesPerS) < 1e-6 * p.bytesPerS);
      });
      const last = steps[steps.length - 1].roofline;
      assert.deepEqual(S.peaks, { bytesPerS: last.peak_bytes_per_s, flopsPerS: last.peak_flops_per_s });
    }
    // a step without peaks (not measured): a point without utilization; without roofline: none
    const step = ofType(allEvents(batches), "step", rec.lanes[0])[0];
    const bare = LiveState.newState(rec.lanes, contract);
    LiveState.applyBatch(bare, { skipped: 0, events: [
      { ...step, roofline: { intensity: 2, flops_per_s: 10, bytes_per_s: 5, flops: 1, bytes: 1 } },
      { ...step, step: step.step + 1, roofline: undefined }] });
    const [a, b] = bare.by.get(rec.lanes[0]).steps;
    assert.deepEqual(a.roof, { intensity: 2, flopsPerS: 10, bytesPerS: 5, mem: null, compute: null });
    assert.equal(b.roof, null);
    assert.equal(bare.by.get(rec.lanes[0]).peaks, null);
  },

  "speculative decoding: a row's drafts and the tokens they gained; rows of older recordings read as none"() {
    const st = LiveState.newState(["spec"], contract);
    const entry = (rid, phase, tokens, ctx, slot, drafted, accepted) => {
      const e = [];
      Object.entries({ rid, phase, tokens, ctx, slot, cached: 0, drafted, accepted }).forEach(([k, v]) => {
        if (E[k] >= 0) e[E[k]] = v;
      });
      return e;
    };
    const step = (n, entries, sampled) => ({ type: "step", lane: "spec", strategy: "continuous", step: n,
                                             t_start: n, t_end: n + 0.5, entries, sampled, admitted: [], finished: [],
                                             preempted: [], tokens_used: 0, token_budget: 64 });
    LiveState.applyBatch(st, { skipped: 0, events: [
      { type: "request", lane: "spec", strategy: "continuous", request_id: 1, arrival_s: 0, num_prompt_tokens: 4 },
      step(1, [entry(1, P.prefill, 4, 4, 0, 0, 0)], { 1: 9 }),
      step(2, [entry(1, P.decode, 5, 8, 0, 4, 3)], [1]),  // sampled as sent now: ids (older recordings: id -> token)
      step(3, [entry(1, P.decode, 3, 9, 0, 2, 0).slice(0, 6)], { 1: 9 })] });  // an older recording's row
    const S = st.by.get("spec"), R = S.reqs.get(1);
    assert.equal(R.nOut, 1 + 4 + 1, "each step's own token, and the accepted drafts");
    assert.deepEqual([S.steps[1].cells[0].drafted, S.steps[1].cells[0].accepted], [4, 3]);
    assert.deepEqual([S.steps[2].cells[0].drafted, S.steps[2].cells[0].accepted], [0, 0]);
    assert.equal(S.drafted, 4);
    const bar = R.segs.find((g) => g.kind === "decode");
    assert.deepEqual([bar.tokens, bar.n, bar.drafted, bar.accepted], [5, 2, 4, 3], "the decode bar's tokens per step");
  },

  "swap preemption: a swapped-out wait of its own, no recompute after it, the host pool kept"() {
    const st = LiveState.newState(["swap"], contract);
    const entry = (rid, phase, tokens, ctx) => {
      const e = [];
      Object.entries({ rid, phase, tokens, ctx, slot: 0, cached: 0 }).forEach(([k, v]) => { e[E[k]] = v; });
      return e;
    };
    const kv = { num_blocks: 8, block_size: 4, used: 2, block_tables: {}, kv_tokens: {} };
    const step = (n, entries, more) => ({ type: "step", lane: "swap", strategy: "continuous", step: n, t_start: n,
                                          t_end: n + 0.5, entries, sampled: {}, admitted: [], finished: [],
                                          preempted: [], tokens_used: 0, token_budget: 64, kv,
                                          host: { num_blocks: 4, block_tables: {} }, ...more });
    const swapped = { why: "preempted_for_blocks", by: 2, whom: "#2", kv: "its KV swapped out to the host pool" };
    LiveState.applyBatch(st, { skipped: 0, events: [
      { type: "request", lane: "swap", strategy: "continuous", request_id: 1, arrival_s: 0, num_prompt_tokens: 12 },
      { type: "request", lane: "swap", strategy: "continuous", request_id: 3, arrival_s: 0, num_prompt_tokens: 4 },
      step(1, [entry(1, P.prefill, 8, 8), entry(3, P.prefill, 4, 4)], { admitted: [1, 3] }),
      step(2, [], { preempted: [1, 3], swaps: [[1, "out", 2]], swap_bytes: 4096, swap_s: 0.001,
                    waits: { 1: swapped, 3: { why: "preempted_for_blocks", by: 2, whom: "#2", kv: "its KV dropped" } },
                    host: { num_blocks: 4, block_tables: { 1: [0, 1] } } }),
      step(3, [entry(1, P.prefill, 4, 12), entry(3, P.prefill, 4, 4)], { admitted: [1, 3], swaps: [[1, "in", 2]],
                                                                         swap_bytes: 4096, swap_s: 0.001 })] });
    const S = st.by.get("swap"), kinds = (rid) => S.reqs.get(rid).segs.map((g) => g.kind);
    assert.deepEqual(kinds(1), ["queued", "prefill", "swapped", "prefill"], "back where it was: not a recompute");
    assert.deepEqual(kinds(3), ["queued", "prefill", "preempted", "recompute"]);
    assert.equal(S.swapBytes, 8192);
    assert.deepEqual(S.swaps, [[1, "in", 2]], "the latest iteration's copies");
    assert.deepEqual(S.host, { num_blocks: 4, block_tables: {} }, "the latest step's host pool");
    assert.equal(globalThis.Waits.say(contract, swapped),
                 "preempted to free KV blocks for #2; its KV swapped out to the host pool");
  },

  "a remote lane: its server's polled gauges, and it says it is remote"() {
    const lanes = ["local", "far"];
    const st = LiveState.newState(lanes, contract);
    const gauges = (t, running, waiting, kv) => ({ type: "remote_metrics", lane: "far", strategy: contract.remote, t,
                                                   num_running: running, num_waiting: waiting, kv_usage: kv });
    const events = [gauges(1, 3, 0, 0.25), gauges(2, 5, 2, 0.5), gauges(3, null, null, null)];
    const { changed } = LiveState.applyBatch(st, { skipped: 0, events });
    assert.ok(changed);
    const far = st.by.get("far"), local = st.by.get("local");
    assert.deepEqual(far.server, [{ t: 1, running: 3, waiting: 0, kv: 25 }, { t: 2, running: 5, waiting: 2, kv: 50 },
                                  { t: 3, running: null, waiting: null, kv: null }]);
    assert.equal(st.latestT, 3);
    assert.ok(LiveState.isRemote(far, null) && !LiveState.isRemote(local, null), "from the events' strategy");
    assert.ok(LiveState.isRemote(local, { source: "remote" }) && !LiveState.isRemote(far, { strategy: "continuous" }),
              "the lane's configuration decides once known");
    assert.deepEqual(local.server, []);
    const many = Array.from({ length: 400 }, (_, i) => gauges(10 + i, i, 0, 0.1));
    LiveState.applyBatch(st, { skipped: 0, events: many });
    assert.equal(far.server.length, 300, "bounded");
    assert.equal(far.server[far.server.length - 1].t, 409);
  },

  "every wait says why, from the scheduler's reasons, and a request that runs or ends waits no more"() {
    const batches = acceptedBatches(rec.messages);
    const st = replay(batches);
    const events = allEvents(batches);
    const reasons = new Set(events.flatMap((e) => Object.values(e.waits || {}).filter(Boolean).map((w) => w.why)));
    assert.ok(reasons.has("batch_filling") || reasons.has("batch_running"), "the static lane waits for batches");
    assert.ok(reasons.has("preempted_for_blocks"), "the small pool preempts, and says for whom");
    let explained = 0;
    for (const S of st.by.values()) {
      for (const R of S.reqs.values()) {
        if (R.done) assert.equal(R.wait, null, `${S.name} #${R.rid}: finished, so not waiting`);
        for (const sg of R.segs.filter((g) => g.kind === "preempted")) {
          assert.ok(sg.whys && sg.whys[0].w.why === "preempted_for_blocks", `${S.name} #${R.rid}: preempted, why`);
          explained++;
        }
        explained += R.segs.filter((g) => g.kind === "queued" && g.whys).length;
      }
    }
    assert.ok(explained > 0, "some wait carries its reasons");
    const W = globalThis.Waits;
    assert.equal(W.say(contract, { why: "batch_filling", have: 1, size: 8 }), "waiting for a full batch: 1 of 8");
    assert.equal(W.say(contract, { why: "batch_filling", have: 1, size: 4, launch_at_s: 10.5 }, 10.2),
                 "waiting for a full batch: 1 of 4 (launches in 0.3 s at the latest)");
  },

  "the service's pauses: opened and closed by its status events, a zero-length one dropped"() {
    const st = LiveState.newState(rec.lanes, contract);
    const status = (event, t) => ({ type: "status", event, t });
    const names = contract.status;
    assert.ok(names && names.paused && names.resumed, "the contract names the pause events");
    LiveState.applyBatch(st, { events: [status(names.paused, 2), status(names.paused, 3), status(names.resumed, 5),
                                        status(names.paused, 7), status(names.resumed, 7), status(names.paused, 9)] });
    assert.deepEqual(st.pauses, [{ t0: 2, t1: 5 }, { t0: 9, t1: null }]);
  },

  "clear_after_s hides everything older"() {
    const batches = acceptedBatches(rec.messages);
    const events = allEvents(batches);
    const steps = events.filter((e) => e.type === "step");
    const clear = steps[Math.floor(steps.length / 2)].t_start;
    const st = replay(batches, clear);
    for (const name of rec.lanes) {
      const S = st.by.get(name);
      const later = ofType(events, "step", name).filter((e) => e.t_start >= clear);
      assert.ok(later.length > 0 && later.length < ofType(events, "step", name).length);
      assert.deepEqual(S.steps.map((s) => s.it), later.map((e) => e.step), `${name}: only newer steps`);
      for (const ev of ofType(events, "request", name)) {
        const R = S.reqs.get(ev.request_id);
        if (ev.arrival_s < clear) assert.ok(!R || R.tag === null, `${name} #${ev.request_id}: older request ignored`);
        else assert.equal(R.tag, ev.tag);
      }
    }
  },

  "a disaggregated lane: the hand-off is its own stretch with its copy, each half's pool is kept, nobody is lost"() {
    const lane = rec.lanes[0], T = contract.type, parts = contract.parts;
    const entry = (rid, phase, tokens, ctx) => {
      const e = [];
      Object.entries({ rid, phase, tokens, ctx, slot: 0, cached: 0, drafted: 0, accepted: 0 })
        .forEach(([k, v]) => { if (E[k] >= 0) e[E[k]] = v; });
      return e;
    };
    const kv = (tables) => ({ num_blocks: 8, block_size: 4, used: Object.values(tables).flat().length, block_tables: tables });
    const step = (n, part, t0, t1, entries, tables, more = {}) => ({ type: T.step, lane, step: n, t_start: t0, t_end: t1,
      entries, num_waiting: 0, num_running: entries.length, kv: kv(tables), part, ...more });
    const st = LiveState.newState(rec.lanes, contract);
    LiveState.applyBatch(st, { events: [
      { type: T.request, lane, request_id: 1, num_prompt_tokens: 6, max_tokens: 4, arrival_s: 0 },
      { type: T.request, lane, request_id: 2, num_prompt_tokens: 2, max_tokens: 4, arrival_s: 0 },
      step(1, parts.prefill, 0.0, 0.1, [entry(1, P.prefill, 6, 6)], { 1: [0, 1] }, { handed_off: [1] }),
      step(2, parts.decode, 0.15, 0.2, [entry(1, P.decode, 1, 7)], { 1: [4, 5] }, { handoffs: [[1, 2, 4096, 0.002]] }),
    ] });
    assert.deepEqual(st.by.get(lane).pools[parts.prefill].block_tables, {}, "request 1's prefill blocks went back after the copy");
    LiveState.applyBatch(st, { events: [
      step(3, parts.prefill, 0.2, 0.3, [entry(2, P.prefill, 2, 2)], { 2: [0] }),  // request 1 is on the decode half
    ] });
    const S = st.by.get(lane), R = S.reqs.get(1);
    const transfer = R.segs.find((g) => g.kind === LiveState.KIND.transfer);
    assert.ok(transfer, "the hand-off is a stretch of its own");
    assert.deepEqual([transfer.t0, transfer.t1], [0.1, 0.15]);
    assert.deepEqual(transfer.copy, { blocks: 2, bytes: 4096, s: 0.002 });
    assert.ok(!R.done && !R.lost, "a prefill step without it does not end a request on the decode half");
    assert.equal(R.part, parts.decode);
    assert.deepEqual(Object.keys(S.pools).sort(), [parts.decode, parts.prefill].sort());
    assert.deepEqual(S.kv.block_tables, { 1: [4, 5] }, "the main pool is the decode engine's");
    assert.equal(S.handoffBytes, 4096);
    assert.deepEqual(S.steps.map((x) => x.part), [parts.prefill, parts.decode, parts.prefill]);
    // reconfigured into a lane of one engine: its own pool again
    LiveState.applyBatch(st, { events: [step(4, undefined, 0.4, 0.5, [entry(2, P.prefill, 1, 3)], { 2: [3] })] });
    assert.equal(S.pools, null);
    assert.deepEqual(S.kv.block_tables, { 2: [3] });
  },

  "event type names come from the contract the engine sends (older recordings: today's names)"() {
    assert.equal(Contract.fromWire({ ...rec.contract, types: undefined }).type.step, "step");  // named no types
    const renamed = { ...rec.contract, types: { StepMessage: "iteration", RequestEvent: "arrival" } };
    const c = Contract.fromWire(renamed);
    assert.equal(c.type.step, "iteration");
    assert.equal(c.type.request, "arrival");
    assert.equal(c.type.finished, "finished");
    const st = LiveState.newState(rec.lanes, c);
    const batches = acceptedBatches(rec.messages);
    const rename = { step: "iteration", request: "arrival" };
    for (const b of batches) {
      LiveState.applyBatch(st, { ...b, events: b.events.map((e) => ({ ...e, type: rename[e.type] || e.type })) });
    }
    const same = replay(batches);
    for (const [lane, S] of same.by) assert.equal(st.by.get(lane).steps.length, S.steps.length, lane);
  },

  "an ended run spans every lane's iterations on one range, from the run's start to its last event"() {
    const st = replay(acceptedBatches(rec.messages));
    const ext = LiveState.runExtent(st);
    const lanes = [...st.by.values()].filter((S) => S.steps.length);
    assert.ok(ext && lanes.length >= 2);
    assert.equal(ext.it1, Math.max(...lanes.map((S) => S.lastIt)));  // the longer lane's last iteration
    assert.equal(ext.it0, Math.min(...lanes.map((S) => S.steps[0].it)));
    assert.equal(ext.t1, st.latestT);
    const arrivals = lanes.flatMap((S) => [...S.reqs.values()].map((R) => R.arrival)).filter((t) => t != null);
    assert.equal(ext.t0, Math.min(...arrivals));
    // a scenario's run_started: the run begins there, each lane at its next iteration
    const started = { type: "status", event: contract.status.run_started, t: st.latestT + 1 };
    LiveState.applyBatch(st, { skipped: 0, events: [started] });
    assert.equal(st.run.t0, started.t);
    for (const S of lanes) assert.equal(st.run.it0.get(S.name), S.lastIt + 1);
    assert.equal(LiveState.runExtent(new LiveState.newState(rec.lanes, contract)), null);
  },

  "a stall: decoding rows that waited for a prefill in their iteration, measured against the lane's usual"() {
    const lane = rec.lanes[0];
    const entry = (rid, phase, tokens, slot) => {
      const e = [];
      for (const [k, i] of Object.entries(E)) e[i] = { rid, phase, tokens, slot, ctx: 10 }[k] ?? 0;
      return e;
    };
    let t = 0, step = 0;
    const stepEv = (dur, entries) => {
      const ev = { type: "step", lane, step: ++step, t_start: t, t_end: t + dur, entries, preempted: [], finished: [],
                   admitted: [], sampled: {}, deltas: {}, waits: {} };
      t += dur;
      return ev;
    };
    const decodes = [entry(1, P.decode, 1, 0), entry(2, P.decode, 1, 1)];
    const events = [{ type: "request", lane, request_id: 1, arrival_s: 0, max_tokens: 50 },
                    { type: "request", lane, request_id: 2, arrival_s: 0, max_tokens: 50 },
                    { type: "request", lane, request_id: 3, arrival_s: 0, max_tokens: 50 },
                    stepEv(0.1, decodes), stepEv(0.1, decodes), stepEv(0.12, decodes), stepEv(0.1, decodes),
                    stepEv(0.2, [...decodes, entry(3, P.prefill, 64, 2)]),    // a short chunk: not a stall
                    stepEv(1.0, [...decodes, entry(3, P.prefill, 900, 2)])];  // the whole prompt at once: a stall
    const st = LiveState.newState([lane], contract);
    LiveState.applyBatch(st, { skipped: 0, events });
    const S = st.by.get(lane);
    assert.deepEqual(S.steps.map((x) => !!x.stall), [false, false, false, false, false, true]);
    const stall = S.steps[5].stall;
    assert.equal(stall.rows, 2);
    assert.equal(stall.prefill, 900);
    assert.ok(Math.abs(stall.usual - 0.1) < 1e-9 && Math.abs(stall.waited - 0.9) < 1e-9, JSON.stringify(stall));
    assert.equal(S.stalls, 1);
    assert.match(Common.stallTip(S.steps[5]).join(" "), /2 decoding rows waited 0\.90 s more .* 900 prompt tokens/);
  },

  "where the model ended its answer under ignore_eos: from the step that sampled its end, or the finished event"() {
    const lane = rec.lanes[0];
    const entry = (rid) => {
      const e = [];
      for (const [k, i] of Object.entries(E)) e[i] = { rid, phase: P.decode, tokens: 1, slot: rid, ctx: 10 }[k] ?? 0;
      return e;
    };
    const stepEv = (n, more) => ({ type: "step", lane, step: n, t_start: n / 10, t_end: n / 10 + 0.05,
                                   entries: [entry(1), entry(2)], preempted: [], finished: [], admitted: [],
                                   sampled: { 1: 7, 2: 7 }, waits: {}, ...more });
    const st = LiveState.newState([lane], contract);
    LiveState.applyBatch(st, { skipped: 0, events: [
      { type: "request", lane, request_id: 1, arrival_s: 0, max_tokens: 8 },
      { type: "request", lane, request_id: 2, arrival_s: 0, max_tokens: 8 },
      stepEv(1, { deltas: { 1: "Hi ✨", 2: "Yes" } }),
      stepEv(2, { deltas: { 2: "." }, answer_ends: { 1: 4 } }),
      stepEv(3, { deltas: { 1: "\nsystem", 2: "!" }, answer_ends: { 1: 99 } }),  // reported once: the first holds
    ] });
    const S = st.by.get(lane);
    assert.equal(S.reqs.get(1).answerEnd, 4);
    assert.equal(Array.from(S.reqs.get(1).text).slice(0, 4).join(""), "Hi ✨", "counted in characters");
    assert.equal(S.reqs.get(2).answerEnd, null);
    // a client that missed the step (skipped events) learns it from the finished event
    LiveState.applyBatch(st, { skipped: 1, events: [
      { type: "finished", lane, request_id: 2, finish_reason: "length", text: "Yes.!\nuser", answer_end: 5,
        num_prompt_tokens: 3, num_output_tokens: 8, arrival_s: 0, first_token_s: 0.1, finish_s: 0.4 },
      { type: "finished", lane, request_id: 1, finish_reason: "length", text: "Hi ✨\nsystem", answer_end: -1,
        num_prompt_tokens: 3, num_output_tokens: 8, arrival_s: 0, first_token_s: 0.1, finish_s: 0.4 },
    ] });
    assert.equal(S.reqs.get(2).answerEnd, 5);
    assert.equal(S.reqs.get(1).answerEnd, 4, "a bad value is ignored");
  },
};

// A continuous lane's rows sit in seats (state.js seatRows): a request keeps its seat while it runs (until it
// finishes, is preempted or handed off; a step that leaves it out does not end it); one that joins takes the
// seat freed first, seats going free in the order their requests ended (the steps' finished lists; preempted
// ones after), else a new seat. seats: { ended: request -> the order it ended, and per engine part
// { of: request -> seat, free: [seats], next } }.
function checkSeats(seats, sum, ev, what) {
  const part = ev.part || null, ended = (seats.ended ||= new Map());
  const end = (rid) => { if (!ended.has(rid)) ended.set(rid, (seats.count = (seats.count || 0) + 1)); };
  if (!seats.has(part)) seats.set(part, { of: new Map(), free: [], next: 0 });
  const own = seats.get(part), here = new Set(sum.cells.map((c) => c.rid));
  for (const rid of ev.preempted || []) ended.set(rid, Infinity);
  for (const rid of ev.finished || []) if (!here.has(rid)) end(rid);  // (ended without a row in this step)
  const gone = [...own.of.keys()].filter((rid) => !here.has(rid) && ended.has(rid));
  for (const rid of gone.sort((a, b) => ended.get(a) - ended.get(b))) {
    own.free.push(own.of.get(rid));
    own.of.delete(rid);
  }
  for (const cell of sum.cells) {
    if (ended.get(cell.rid) === Infinity) ended.delete(cell.rid);  // (preempted, now back)
    if (!own.of.has(cell.rid)) own.of.set(cell.rid, own.free.length ? own.free.shift() : own.next++);
    assert.equal(cell.slot, own.of.get(cell.rid), `${what} #${cell.rid}: its seat`);
  }
  for (const rid of [...(ev.finished || []), ...(ev.handed_off || [])]) end(rid);
}

let failed = 0;
for (const [name, fn] of Object.entries(tests)) {
  try {
    fn();
    console.log(`ok - ${name}`);
  } catch (e) {
    failed++;
    console.log(`FAIL - ${name}\n${e.stack}`);
  }
}
process.exit(failed ? 1 : 0);
