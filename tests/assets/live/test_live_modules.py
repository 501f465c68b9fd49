"""The live views' JS modules declare what they need (assets/live/modules.js): each file defines one
module, its declared needs are exactly the modules its code uses, and every need is defined by a file,
so the bundle works in any order (the page joins the files in name order)."""
from __future__ import annotations

import re

from engine.paths import LIVE_VIEW

DEFINE = re.compile(r'^defineLive\("(\w+)", \[([^\]]*)\]', re.M)
ENTRY_NEEDS = re.compile(r"^const NEEDS = \[([^\]]*)\]", re.M)


def names(listed: str) -> set[str]:
    return set(re.findall(r'"(\w+)"', listed))


def code_of(text: str) -> str:
    """The code without its comments and quoted strings (a name in prose is not a use; template strings
    stay: their ${...} is code)."""
    return re.sub(r"//[^\n]*|/\*.*?\*/|\"[^\"\n]*\"", "", text, flags=re.S)


def modules() -> dict[str, tuple[str, set[str], str]]:
    """module name -> (file, declared needs, code)."""
    out = {}
    for path in sorted(LIVE_VIEW.glob("*.js")):
        text = path.read_text(encoding="utf-8")
        found = DEFINE.findall(text)
        if path.name in ("modules.js", "live_view.js"):
            assert not found, f"{path.name} is not a module"
            continue
        assert len(found) == 1, f"{path.name} must define exactly one module"
        (name, needs), = found
        assert name not in out, f"{name} is defined twice"
        out[name] = (path.name, names(needs), code_of(text))
    return out


def uses(code: str, among: set[str]) -> set[str]:
    return {n for n in among if re.search(rf"\b{n}\b", code)}


def test_every_module_declares_exactly_what_it_uses():
    mods = modules()
    for name, (file, needs, code) in mods.items():
        assert needs <= set(mods), f"{file}: needs {sorted(needs - set(mods))}, which no file defines"
        assert uses(code, set(mods) - {name}) == needs, f"{file}: declared {sorted(needs)}"


def test_the_entry_point_declares_what_it_uses():
    mods = modules()
    text = (LIVE_VIEW / "live_view.js").read_text(encoding="utf-8")
    (declared,) = ENTRY_NEEDS.findall(text)
    assert names(declared) <= set(mods)
    assert uses(code_of(text.replace(declared, "")), set(mods)) == names(declared)
