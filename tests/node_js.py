"""The live view's JavaScript tests (tests/js/) run in node: CI must run them (.ci/run installs node);
elsewhere a module of them is skipped where node is missing."""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from repo_paths import TESTS

NODE = shutil.which("node")


def require_node(what: str) -> None:
    """At a test module's top: skip it without node, except on CI."""
    if NODE is None:
        if os.environ.get("CI"):
            raise RuntimeError(f"{what} needs node (apt-get install nodejs)")
        pytest.skip("needs node", allow_module_level=True)


def run_node(script: str, *args) -> str:
    """Run tests/js/<script> with args; its output, once it exits 0."""
    run = subprocess.run([NODE, str(TESTS / "js" / script), *map(str, args)], capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    return run.stdout
