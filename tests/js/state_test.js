// The live view's event reducer (assets/live/state.js) replayed on events recorded from a real run
// (tests/js/record_events.py). Run by tests/test_live_state_js.py: node tests/js/state_test.js RECORDING
"use strict";
const assert = require("node:assert/strict");
const fs = require("node:fs");
const path = require("node:path");

const ASSETS = path.join(__dirname, "..", "..", "assets", "live");
const Contract = require(path.join(ASSETS, "contract.js"));
const LiveState = require(path.join(ASSETS, "state.js"));

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

const allEvents = (batches) => batches.flatMap((b) => b.events);
const ofType = (events, type, lane) => events.filter((e) => e.type === type && e.lane === lane);

const tests = {
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

  "rows, phases and tokens per step match the step events"() {
    const batches = acceptedBatches(rec.messages);
    const st = replay(batches);
    for (const name of rec.lanes) {
      const steps = ofType(allEvents(batches), "step", name);
      const S = st.by.get(name);
      assert.equal(S.steps.length, steps.length);
      steps.forEach((ev, i) => {
        const sum = S.steps[i];
        const rids = new Set(ev.entries.map((e) => e[E.rid]));
        assert.equal(sum.step, ev.step);
        assert.equal(sum.rows, rids.size, `${name} step ${ev.step}: rows`);
        const tokens = (pred) => ev.entries.filter(pred).reduce((a, e) => a + e[E.tokens], 0);
        assert.equal(sum.pad, tokens((e) => e[E.phase] === P.padding));
        assert.equal(sum.real, tokens((e) => e[E.phase] !== P.padding));
        for (const cell of sum.cells) {
          const phases = new Set(ev.entries.filter((e) => e[E.rid] === cell.rid).map((e) => e[E.phase]));
          const expected = phases.has(P.decode) ? ["decode"] : phases.has(P.prefill) ? ["prefill", "recompute"] : ["held"];
          assert.ok(expected.includes(cell.kind), `${name} step ${ev.step} #${cell.rid}: ${cell.kind} for ${[...phases]}`);
          assert.equal(sum.bySlot[cell.slot], cell);
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
      assert.deepEqual(S.steps.map((s) => s.step), later.map((e) => e.step), `${name}: only newer steps`);
      for (const ev of ofType(events, "request", name)) {
        const R = S.reqs.get(ev.request_id);
        if (ev.arrival_s < clear) assert.ok(!R || R.tag === null, `${name} #${ev.request_id}: older request ignored`);
        else assert.equal(R.tag, ev.tag);
      }
    }
  },
};

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
