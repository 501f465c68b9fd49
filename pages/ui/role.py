"""The role of the person at this browser: presenter (controls) or viewer (watch and submit)."""
from __future__ import annotations

import streamlit as st

from engine.room.access import PRESENTER_COOKIE, Client, client_key

VIEWER_NOTE = ("You are watching as a viewer: this server is shared with a room, so pausing, settings and "
               "the benchmark are for the presenter (who opens the presenter link from the server's console). "
               "You can still send prompts.")


def current_client(svc) -> Client:
    """From the presenter cookie set by /presenter (the token never sits in the page's URL)."""
    return svc.access.client(client_key(st.context.ip_address), st.context.cookies.get(PRESENTER_COOKIE))


def is_presenter(svc) -> bool:
    return current_client(svc).presenter
