"""inflight COMMAND [ARGS]: one command for every tool of the project (`inflight --help` lists them).

Each command runs the module it names with the same arguments (`inflight bench --workload quick` is
`python -m engine.bench --workload quick`); those module paths keep working.
"""
from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

# command -> (module whose main(argv) runs it, arguments put before the user's, what it does)
COMMANDS = {
    "app": (None, (), "the playground: streamlit run app.py (more arguments go to streamlit)"),
    "generate": ("engine.__main__", (), "stream one answer, one line per engine iteration"),
    "bench": ("engine.bench.__main__", (), "run lanes of our engine and peers on one workload and compare them"),
    "scenario": ("engine.workshop.scenarios.headless", (), "run a shipped scenario headless: metrics and claims"),
    "record": ("engine.workshop.recording.__main__", ("record",), "record a scenario's run to a file"),
    "info": ("engine.workshop.recording.__main__", ("info",), "what a recording holds"),
    "html": ("engine.workshop.recording.__main__", ("html",), "a recording as one offline web page"),
    "soak": ("engine.harness.soak", (), "room traffic, faults and fuzzed input against a server: what was lost or leaked"),
    "step-profile": ("engine.bench.step_profile", (), "where one engine step's time goes"),
    "host-pieces": ("engine.bench.host_pieces", (), "a decode-only step's host work, piece by piece"),
    "decode-floor": ("engine.bench.decode_floor", (), "a decode step's time against its memory floor"),
    "gc-pauses": ("engine.bench.gc_pauses", (), "Python's full collections while an engine serves"),
    "lanes-together": ("engine.bench.lanes_together", (), "two lanes stepping on the same cores"),
    "ui-cost": ("engine.harness.ui_cost", (), "what the live views cost the browser"),
    "peers": ("engine.bench.peers", (), "the peers the benchmark compares against, alone"),
    "roofline": ("engine.telemetry.roofline_report", (), "the model's roofline numbers on this device"),
    "measure-prompts": ("engine.workshop.scenarios.measure_prompts", (), "measure the bundled prompts' answers"),
    "random-model": ("engine.model.files.random_model", (), "save a randomly initialised model of a config"),
}
APP = Path(__file__).resolve().parents[1] / "app.py"


def usage() -> str:
    width = max(map(len, COMMANDS))
    return "usage: inflight COMMAND [ARGS]\n\ncommands:\n" + "\n".join(
        f"  {name:<{width}}  {what}" for name, (_, _, what) in COMMANDS.items()) + \
        "\n\n`inflight COMMAND --help` for a command's own arguments."


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"inflight: no command {name!r}\n\n{usage()}", file=sys.stderr)
        return 2
    module, before, _ = COMMANDS[name]
    if module is None:
        return run_app(rest)
    code = importlib.import_module(module).main([*before, *rest])
    return code if isinstance(code, int) else 0


def run_app(args: list[str]) -> int:
    """The playground, from the checkout this package was installed from (its pages live beside app.py)."""
    if not APP.is_file():
        print(f"inflight app: {APP} is missing: the playground runs from a checkout of the project "
              "(pip install -e . there)", file=sys.stderr)
        return 2
    os.execvp(sys.executable, [sys.executable, "-m", "streamlit", "run", str(APP), *args])
    return 0  # not reached


if __name__ == "__main__":
    raise SystemExit(main())
