"""The utilization band's stepped lines (assets/live/util_view.js), run in node: iterations less than a pixel
apart share one vertical stroke, and the line still passes within a pixel of every iteration's value, breaks
where the series does, and stays a few vertices a pixel (tests/js/util_lines_test.js)."""
from __future__ import annotations

from node_js import require_node, run_node

require_node("the utilization lines test")


def test_stepped_lines_keep_every_iteration_within_a_pixel_in_a_few_vertices_a_pixel():
    out = run_node("util_lines_test.js")
    assert out.startswith("ok - "), out
