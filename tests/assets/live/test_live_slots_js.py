"""The batch slots band (assets/live/slots.js) at a GPU's pace, run in node: 256 rows over 300 iterations
narrower than a pixel paint what each cell says, as runs (tests/js/slots_test.js)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from engine.events import wire_contract
from repo_paths import TESTS

NODE = shutil.which("node")

if NODE is None:
    if os.environ.get("CI"):  # CI must run it (.ci/run installs node)
        raise RuntimeError("the slots test needs node (apt-get install nodejs)")
    pytest.skip("needs node", allow_module_level=True)


def test_slots_at_256_rows_paint_every_cell_as_runs(tmp_path):
    contract = tmp_path / "contract.json"
    contract.write_text(json.dumps(wire_contract()))
    run = subprocess.run([NODE, str(TESTS / "js" / "slots_test.js"), str(contract)], capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.startswith("ok - "), run.stdout
