"""Text from outside (a recording's model name, a file name) shown inside Streamlit markdown as the
characters it holds: every markdown and HTML character is escaped, so it cannot become a link, an
image or markup on anyone's page."""
from __future__ import annotations

import re

_SPECIAL = re.compile(r"([\\`*_{}\[\]()#!|<>~$&:])")  # ':' stops links (http://) and Streamlit's :color[]


def plain(text: str) -> str:
    return _SPECIAL.sub(r"\\\1", " ".join(str(text).split()))
