"""The batch slots band (assets/live/slots.js) at a GPU's pace, run in node: 256 rows over 300 iterations
narrower than a pixel paint what each cell says, as runs (tests/js/slots_test.js)."""
from __future__ import annotations

import json

from engine.events import wire_contract
from node_js import require_node, run_node

require_node("the slots test")


def test_slots_at_256_rows_paint_every_cell_as_runs(tmp_path):
    contract = tmp_path / "contract.json"
    contract.write_text(json.dumps(wire_contract()))
    out = run_node("slots_test.js", contract)
    assert out.startswith("ok - "), out
