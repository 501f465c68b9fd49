"""The playground's inputs: answer length and temperature, the one-click scenario, one bundled prompt, the
load generator, and the prompt box. On a projector they fold into one line (the scenario and the prompt
box), the rest in a popover, so the first screen shows the views."""
from __future__ import annotations

import random

import streamlit as st

from engine import SamplingParams
from engine.workshop import loadgen
from engine.workshop.prompts import load_prompts

from .polled import polled
from .scenario_button import scenario_button

PROMPT_PLACEHOLDER = "Type a prompt; it goes to every lane shown"
IDLE_POLL_S = 5.0  # how soon a tab shows a generator another tab started


@st.cache_data
def bundled_prompts() -> list[str]:
    return [p["prompt"] for p in load_prompts()]


def submit(svc, client, text: str, max_tokens: int, temperature: float) -> None:
    params = SamplingParams(max_tokens=max_tokens, temperature=temperature)
    try:
        svc.submit(messages=[{"role": "user", "content": text}], params=params, tag="ui", client=client)
    except (ValueError, TimeoutError) as e:
        st.error(str(e))


def inputs(svc, client, compare: str) -> None:
    """Everything in a bordered panel (the page's usual layout)."""
    with st.container(border=True):
        c_params, c_loads, c_gen = st.columns([1.2, 1, 1.6])
        with c_params:
            _sampling()
        with c_loads:
            st.markdown("**One click**")
            scenario_button(svc, client, compare)
            if st.button("1 prompt", width="stretch"):
                _one_prompt(svc, client)
        with c_gen:
            _load_generator(svc, client)
        # Inline (inside the container), not pinned to the page bottom: a pinned chat box makes Streamlit
        # keep the page scrolled to its end, which would pull the view away from the charts.
        _prompt_box(svc, client)


def compact_inputs(svc, client, compare: str, toggle) -> None:
    """One line for a projector: the scenario button, the prompt box, the rest in a popover, and
    toggle() (presentation mode's own switch) at the end."""
    c_run, c_box, c_more, c_mode = st.columns([1.3, 3.6, 0.8, 1.6], vertical_alignment="center")  # the toggle's
    # label whole at 1280 px
    with c_run:
        scenario_button(svc, client, compare, caption=False)
    with c_box:
        _prompt_box(svc, client)
    with c_more, st.popover("More", icon=":material/tune:", width="stretch"):
        _sampling()
        if st.button("1 prompt", width="stretch"):
            _one_prompt(svc, client)
        _load_generator(svc, client)
    with c_mode:
        toggle()


def _sampling() -> None:
    st.slider("Max new tokens", 1, 512, 96, key="max_tokens")
    st.slider("Temperature", 0.0, 1.5, 0.0, 0.05, key="temperature")


def _params() -> tuple[int, float]:
    return st.session_state.get("max_tokens", 96), st.session_state.get("temperature", 0.0)


def _one_prompt(svc, client) -> None:
    submit(svc, client, random.choice(bundled_prompts()), *_params())


def _prompt_box(svc, client) -> None:
    prompt = st.chat_input(PROMPT_PLACEHOLDER)
    if prompt:
        submit(svc, client, prompt, *_params())


def _load_generator(svc, client) -> None:
    st.markdown("**Load generator** (Poisson arrivals of bundled prompts)")
    if not client.presenter:
        st.caption("The load generator is for the presenter.")
    st.slider("Arrival rate (requests/s)", 0.1, 8.0, 1.0, 0.1, key="lg_rate", on_change=_retune)
    st.slider("Output length (tokens): mean", 8, 256, 64, key="lg_mean", on_change=_retune)
    st.slider("± spread", 0, 248, 48, key="lg_spread", on_change=_retune)
    gen = loadgen.running()
    # one key whatever the label: a click is never lost to a label that changed since the page was drawn
    st.button("Stop generator" if gen else "Start generator", key="lg_toggle", on_click=_toggle, args=(svc,),
              icon=":material/stop:" if gen else ":material/play_arrow:", width="stretch",
              type="primary" if gen else "secondary", disabled=not client.presenter)
    _generator_status()


def _settings() -> tuple[float, int, int]:
    s = st.session_state
    mean = s.get("lg_mean", 64)
    return s.get("lg_rate", 1.0), mean, min(s.get("lg_spread", 48), mean - 1)


def _retune() -> None:
    loadgen.retune(*_settings())


def _toggle(svc) -> None:
    if loadgen.running():
        loadgen.stop()
    else:
        loadgen.start(svc, *_settings())


def _generator_status() -> None:
    """What the generator (running or last run) has sent, and why its refusals were refused: refreshed every
    second while one runs, every IDLE_POLL_S while none does (every open tab shows it, a room's phones too: each
    reran it every second for nothing). A generator started or stopped, here or from another tab, reruns the
    page at the other pace."""
    gen = loadgen.latest()
    polling = gen is not None and gen.is_alive()

    @polled(1.0 if polling else IDLE_POLL_S)
    def status() -> None:
        gen = loadgen.latest()
        if gen is None:
            st.caption("No generator has run yet.")  # (a line, not an empty fragment's gap)
        else:
            # stopping: told to stop, a submission still under way (it may still count)
            state = "running" if gen is loadgen.running() else "stopping" if gen.is_alive() else "stopped"
            line = f"Generator {state}: {gen.submitted} sent"
            if gen.refused:
                st.warning(f"{line}, {gen.refused} refused. Last refusal: {gen.errors[-1]}")
            else:
                st.caption(line)
        if (gen is not None and gen.is_alive()) != polling:
            st.rerun()  # (the page's next run polls at the other pace; a stopped one's last count drawn whole)
    status()
