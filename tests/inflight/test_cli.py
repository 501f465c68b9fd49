"""One command for every tool: `inflight COMMAND` runs the module it names with the same arguments, and the
project installs as a package whose engine finds its shipped files without the checkout."""
from __future__ import annotations

import importlib
import os
import subprocess
import sys
import zipfile

import pytest

from inflight.cli import COMMANDS, main
from repo_paths import ROOT

ROOT = ROOT


@pytest.mark.parametrize("name", [n for n, (module, _, _) in COMMANDS.items() if module])
def test_every_command_reaches_its_module_s_own_arguments(name, capsys):
    module, before, _ = COMMANDS[name]
    assert callable(importlib.import_module(module).main)
    with pytest.raises(SystemExit) as e:
        main([name, "--help"])
    assert e.value.code == 0 and "usage:" in capsys.readouterr().out


def test_the_command_lists_its_commands_and_refuses_an_unknown_one(capsys):
    assert main([]) == 0
    listed = capsys.readouterr().out
    assert all(f"  {name} " in listed for name in COMMANDS)
    assert main(["benchmark"]) == 2
    assert "no command 'benchmark'" in capsys.readouterr().err


def test_a_command_runs_as_its_module_does(capsys):
    assert main(["info", str(ROOT / "assets/recordings/continuous_vs_static.jsonl.gz")]) == 0
    assert "lanes: continuous, static" in capsys.readouterr().out


def test_installed_from_its_wheel_the_engine_finds_its_shipped_files(tmp_path):
    """The wheel holds every engine package, every shipped file and the command; installed elsewhere (no
    checkout beside it), the scenarios and the live views' code load."""
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(tmp_path / "dist")], check=True, cwd=tmp_path, capture_output=True, timeout=300)
    (wheel,) = (tmp_path / "dist").glob("inflight-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {f"inflight/assets/{p.relative_to(ROOT / 'assets').as_posix()}" for p in (ROOT / "assets").rglob("*")
               if p.is_file() and "__pycache__" not in p.parts}
    assert shipped - names == set()
    packages = {f"{p.parent.relative_to(ROOT).as_posix()}/__init__.py" for p in (ROOT / "engine").rglob("__init__.py")}
    assert packages - names == set()
    assert any(n.endswith("entry_points.txt") for n in names)
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(tmp_path / "site"),
                    str(wheel)], check=True, capture_output=True, timeout=300)
    code = ("from engine.paths import ASSETS, live_view_script; from engine.workshop.scenarios.catalog import shipped; "
            "print(ASSETS, len(shipped()), len(live_view_script()) > 0)")
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site")}
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, cwd=tmp_path,
                         env=env, timeout=120).stdout.split()
    assert out == [str(tmp_path / "site" / "inflight" / "assets"), str(len(list((ROOT / "assets/scenarios").glob("*.toml")))), "True"]
