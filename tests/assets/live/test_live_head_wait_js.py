"""The status line names the head's reason for a lane's queue, never that of a request behind it
(tests/js/head_wait_test.js, in node)."""
from __future__ import annotations

from node_js import require_node, run_node

require_node("the head-wait test")


def test_the_status_line_says_what_the_head_of_the_queue_waits_for():
    out = run_node("head_wait_test.js")
    assert out.startswith("ok - "), out
