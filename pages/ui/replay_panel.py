"""Recordings on the playground: the banner that marks a replay, the presenter's recorder and replay
controls (speed, pause, seek), and the lanes a replay shows."""
from __future__ import annotations

import tempfile
import time
from pathlib import Path

import streamlit as st

from engine.workshop.recording import (SHIPPED, SPEED_STEPS, load, play_file, recorded_lanes, start_recording,
                                       stop_recording, stop_replay)
from engine.workshop.recording.web_page import web_page
from engine.untrusted import markdown_text

_DIR = Path(tempfile.gettempdir()) / "inflight-recordings"


def banner(replay) -> None:
    """Says, above the views, that they show a recording and not the engines."""
    landing = replay.until is not None
    st.warning(f"**{replay.recording.describe(markdown_text)}.** "
               + ("The engines are still loading the model: the live views switch to them when they are ready."
                  if landing else "A replay, not the engines: the presenter's controls are in the sidebar."),
               icon=":material/movie:")


def view_lanes(replay) -> tuple[list[str], dict[str, list[str]]]:
    """The recording's lanes and their header labels."""
    return recorded_lanes(replay.recording)


def recorder(svc) -> None:
    """Record every event of every lane to a file, then download it."""
    st.sidebar.header("Record")
    rec = svc.recorder
    if rec is None:
        if st.sidebar.button("Start recording", icon=":material/fiber_manual_record:", width="stretch"):
            _DIR.mkdir(exist_ok=True)
            start_recording(svc, _DIR / f"inflight-{time.strftime('%Y%m%d-%H%M%S')}.jsonl.gz")
            st.rerun()
    elif st.sidebar.button(f"Stop recording ({rec.events} events{', full' if rec.full else ''})",
                           icon=":material/stop:", type="primary", width="stretch",
                           key="recording_stop"):  # keyed: its label counts events
        st.session_state.recording_file = stop_recording(svc)
        st.rerun()
    done = st.session_state.get("recording_file")
    if rec is None and done is not None and done.exists():
        st.sidebar.download_button("Download the recording", done.read_bytes(), done.name,
                                   mime="application/gzip", icon=":material/download:", width="stretch")
        web_page_button(load(done), done.name.removesuffix(".jsonl.gz") + ".html")


def replay_controls(svc) -> None:
    """Play a recording (the shipped one or an uploaded one) in the views; speed, pause, seek, back to live."""
    st.sidebar.header("Replay")
    r = svc.replay
    if r is None:
        if svc.replay_error:
            st.sidebar.error(markdown_text(svc.replay_error), icon=":material/error:")
        upload = st.sidebar.file_uploader("A recording (.jsonl.gz)", type=["gz"], key="replay_upload")
        label = "Play the uploaded recording" if upload else "Play the shipped recording"
        if st.sidebar.button(label, icon=":material/movie:", width="stretch"):
            _start(svc, upload)
        return
    _playing(svc, r)


def _start(svc, upload) -> None:
    """Play the upload (checked whole against the event contract first) or the shipped recording; a
    file that cannot be played leaves the engines live and says why."""
    problem = play_file(svc, SHIPPED, SHIPPED.name) if upload is None else play_file(svc, upload.getvalue(),
                                                                                      upload.name)
    if problem:
        st.sidebar.error(markdown_text(problem), icon=":material/error:")
        return
    st.rerun()


def _playing(svc, r) -> None:
    """The controls of the replay that plays (the position slider shows the playhead as of this run)."""
    c1, c2 = st.sidebar.columns(2)
    c1.button("Play replay" if r.paused else "Pause replay", width="stretch", key="replay_pause",
              icon=":material/play_arrow:" if r.paused else ":material/pause:", on_click=r.resume if r.paused else r.pause)
    if c2.button("Go live", icon=":material/sensors:", width="stretch"):
        stop_replay(svc)
        st.rerun()
    st.session_state.replay_speed = r.speed
    st.sidebar.select_slider("Replay speed", SPEED_STEPS, key="replay_speed", format_func=lambda s: f"{s:g}x",
                             on_change=lambda: r.set_speed(st.session_state.replay_speed))
    st.session_state.replay_at = round(r.position() - r.recording.start, 1)
    st.sidebar.slider("Position (s)", 0.0, round(r.recording.end - r.recording.start, 1), step=0.1, key="replay_at",
                      on_change=lambda: r.seek(r.recording.start + st.session_state.replay_at))
    web_page_button(r.recording, "inflight-replay.html", "Download this replay as a web page")


def web_page_button(recording, name: str, label: str = "Download as a web page") -> None:
    """The recording as one web page that plays it anywhere, offline (built when clicked)."""
    st.sidebar.download_button(label, lambda: web_page(recording), name, mime="text/html",
                               icon=":material/public:", width="stretch", key=f"web_page_{name}")
