"""The house's plan, read from the code: every import in engine/ runs down the layers (docs/internals.md, "How the
engine works"), the engine never imports Streamlit, and pages/ holds Streamlit code only."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Lowest first: a module may import its own layer and the layers before it, never one after.
LAYERS = ("core", "room", "telemetry", "serving", "workshop", "api", "bench", "harness")
LAYER_PACKAGES = set(LAYERS[1:])  # engine/<package> named after its layer; everything else is core


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in LAYER_PACKAGES else "core"


def imported(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module) for every import in the file, relative ones resolved."""
    package = module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[:len(package) - node.level + 1] + ([base] if base else []))
            out += [(node.lineno, f"{base}.{a.name}") for a in node.names]  # a name or a submodule
    return out


ENGINE = sorted((ROOT / "engine").rglob("*.py"))
PAGES = sorted((ROOT / "pages").rglob("*.py"))


def test_the_plan_covers_every_package():
    packages = {p.parent.relative_to(ROOT / "engine").parts[0] for p in ENGINE if p.parent != ROOT / "engine"}
    assert packages - {"scheduler", "kv", "model"} == LAYER_PACKAGES, "a new package needs its layer here"


@pytest.mark.parametrize("path", ENGINE, ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_run_down_the_layers(path):
    own = LAYERS.index(layer(module_name(path)))
    for line, name in imported(path):
        assert not name.startswith("streamlit"), f"{path.name}:{line}: the engine knows nothing of Streamlit"
        if name.startswith("engine."):
            assert LAYERS.index(layer(name)) <= own, (
                f"{path.relative_to(ROOT)}:{line} imports {name} from the {layer(name)} layer, above "
                f"{layer(module_name(path))}")


@pytest.mark.parametrize("path", [p for p in PAGES if p.name != "__init__.py"], ids=lambda p: p.name)
def test_pages_hold_streamlit_code_only(path):
    assert any(name.startswith("streamlit") for _, name in imported(path)), (
        f"{path.relative_to(ROOT)} never imports Streamlit: it belongs in engine/")


@pytest.mark.parametrize("path", [p for p in PAGES if p.name != "benchmark.py"], ids=lambda p: p.name)
def test_only_the_benchmark_page_imports_the_benchmark(path):
    """What the cards and the benchmark both compute lives below both (engine/telemetry/): a page other than
    the Benchmark page's job imports nothing from engine.bench."""
    bench = [(line, name) for line, name in imported(path) if name.startswith("engine.bench")]
    assert bench == [], f"{path.relative_to(ROOT)} imports {bench}"


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p.name)
def test_no_page_imports_the_harness(path):
    """The harness (engine/harness/: soak, fuzzer, app launcher, browser cost) drives the product; nothing the
    app runs imports it (in engine/, the layer order above says the same)."""
    assert not [name for _, name in imported(path) if name.startswith("engine.harness")], path.name
