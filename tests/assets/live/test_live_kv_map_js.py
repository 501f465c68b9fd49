"""The KV map (assets/live/kv_map.js), run in node: through its layer of pixels every block's cell shows what the
legend says, read from the pool itself (free, cached, held up to its tokens, reserved, shared, picked and dimmed;
grouped blocks by their main holder), at 1 and 2 device pixels a pixel (tests/js/kv_map_test.js)."""
from __future__ import annotations

from node_js import require_node, run_node

require_node("the KV map test")


def test_every_cell_of_the_kv_map_shows_what_the_legend_says():
    out = run_node("kv_map_test.js")
    assert out.startswith("ok - "), out
