"""The batch slots band (assets/live/slots.js), run in node: a rectangle per run of a request in a slot paints
what a rectangle per cell would, pixel for pixel, at 256 rows, zoomed in and out, with idle time, on both axes
(tests/js/slots_test.js)."""
from __future__ import annotations

import json

from engine.events import wire_contract
from node_js import require_node, run_node

require_node("the slots test")


def test_slots_paint_runs_as_a_rectangle_per_cell_would(tmp_path):
    contract = tmp_path / "contract.json"
    contract.write_text(json.dumps(wire_contract()))
    out = run_node("slots_test.js", contract)
    assert out.startswith("ok - "), out
