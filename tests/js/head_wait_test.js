// The status line's "what the queue waits for" (StatusView.headWait): the head's reason, never that of a
// request merely behind it, whether that one has its exact place ("behind") or stands further back
// ("queued"). Run by tests/assets/live/test_live_head_wait_js.py: node tests/js/head_wait_test.js
"use strict";
const assert = require("node:assert/strict");

require("./live_modules.js");
const { StatusView } = globalThis;

const lane = (waits) => ({ reqs: new Map(waits.map((wait, i) => [i + 1, { rid: i + 1, done: false, wait }])) });
const head = { why: "batch_full", running: 4, max: 4 };
const behind = (rank) => ({ why: "behind", head: 3, rank, of: 40, order: "arrival" });
const queued = { why: "queued", ahead: 16, order: "arrival" };

// in any order of arrival: queued ones first, the head last, exact places between
assert.deepEqual(StatusView.headWait(lane([queued, queued, behind(2), behind(16), head])), head);
assert.deepEqual(StatusView.headWait(lane([queued, behind(5), queued])), behind(5));  // (head already gone)
assert.deepEqual(StatusView.headWait(lane([queued])), queued);
assert.equal(StatusView.headWait(lane([])), null);
console.log("ok - the head's reason, over those behind it and those further back");
