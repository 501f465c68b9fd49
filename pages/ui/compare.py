"""The sidebar's "Compare" control: which lanes run (a scenario's, custom lanes, or a single lane).

Only an explicit change applies (a widget's callback), so several open tabs never fight: a new tab
adopts what runs, a tab adopts a change of lanes made elsewhere (the live view reruns the page when
the running lanes change), and a viewer always shows the presenter's choice, disabled, with the reason.
Remote lanes (set through the socket's `lanes` command) are listed, not edited, and kept on Apply.
"""
from __future__ import annotations

import dataclasses
import zlib

import streamlit as st

from engine.config import MAX_MODEL_NAME_CHARS, MAX_SPECULATIVE_TOKENS, PREEMPTION_MODES, SPECULATIVE, STRATEGIES
from engine.serving.lanes import check_lane_name
from engine.serving.service import SETTLE_WAIT_S
from engine.workshop.scenarios.catalog import by_title, running_scenario, shipped


CUSTOM, SINGLE = "Custom", "Single lane"
CHOICES = [*(s.title for s in shipped()), CUSTOM, SINGLE]
LOCKED = "The presenter chooses the lanes"
BLOCK_SIZES = [1, 2, 4, 8, 16, 32, 64, 128, 256]
BUDGETS = [16, 32, 64, 128, 256, 512, 1024, 2048, 4096]


def running_choice(svc) -> str:
    """The choice that shows the lanes the service runs, or is changing to (a changed lane keeps its old
    settings while it drains: judged on those, a scenario's choice read as Custom)."""
    lanes = svc.wanted_lanes
    if len(lanes) == 1:
        return SINGLE
    s = running_scenario(lanes, svc.cfg)
    return s.title if s else CUSTOM


def _apply_choice(svc) -> None:
    choice = st.session_state.compare
    scenario = by_title(choice)
    try:
        if scenario is not None:
            svc.set_lanes(scenario.lanes)
        elif choice == SINGLE:
            name, cfg = next(iter(svc.lanes.items()))
            svc.set_lanes({name: cfg})
    except ValueError as e:
        st.session_state.lanes_error = str(e)


def compare_control(svc, presenter: bool) -> str:
    """The radio (scenarios, Custom, Single lane) and, for Custom and Single lane, the lane editor.
    Returns the choice shown."""
    running, wanted = running_choice(svc), repr(svc.wanted_lanes)
    if not presenter or st.session_state.get("compare_lanes", wanted) != wanted:
        st.session_state.compare = running  # follow what the presenter runs, or a change made elsewhere
    st.session_state.compare_lanes = wanted
    st.session_state.setdefault("compare", running)
    st.sidebar.header("Compare")
    choice = st.sidebar.radio("Lanes", CHOICES, key="compare", on_change=_apply_choice, args=(svc,),
                              disabled=not presenter, help=None if presenter else LOCKED,
                              label_visibility="collapsed")
    if not presenter:
        st.sidebar.caption(f"{LOCKED}.")
    error = st.session_state.pop("lanes_error", None)
    if error:
        st.sidebar.error(error)
    if presenter and choice in (CUSTOM, SINGLE):
        lane_editor(svc, 1 if choice == SINGLE else 2)
    return choice


def _remote(svc) -> dict:
    return {n: c for n, c in svc.lanes.items() if c.is_remote}


def _editable(svc, count: int) -> dict:
    """The running local lanes, cut or padded to `count` (a second lane starts as static)."""
    lanes = dict([(n, c) for n, c in svc.lanes.items() if not c.is_remote][:count])
    if len(lanes) < count:
        first = next(iter(lanes.values()), svc.cfg)
        lanes["static" if "static" not in lanes else "lane 2"] = dataclasses.replace(first, strategy="static")
    return lanes


def lane_editor(svc, count: int) -> None:
    """Each local lane's name and settings; Apply runs exactly these lanes and the remote ones
    (requests in flight finish)."""
    remote = _remote(svc)
    with st.sidebar.expander("Lane settings", expanded=True), st.form("lanes", border=False):
        edited = [_lane_fields(i, name, cfg) for i, (name, cfg) in enumerate(_editable(svc, count).items())]
        for name, cfg in remote.items():
            st.text(f"Remote lane {name}: {cfg.model} at {cfg.remote} (kept)")
        if st.form_submit_button("Apply lanes", type="primary", width="stretch"):
            _apply_lanes(svc, edited + list(remote.items()))


def _lane_fields(i: int, name: str, cfg) -> tuple[str, dict]:
    # Keys carry the lane's current settings: when another tab changes them, the fields start afresh.
    tag = f"lane{i}-{zlib.crc32(repr((name, cfg)).encode()):x}"
    st.markdown(f"**Lane {i + 1}**")
    new_name = st.text_input("Name", name, key=f"{tag}-name", max_chars=32)
    fields = dict(
        strategy=st.selectbox("Strategy", STRATEGIES, STRATEGIES.index(cfg.strategy), key=f"{tag}-strategy"),
        block_size=st.select_slider("KV block size (tokens)", BLOCK_SIZES, _nearest(BLOCK_SIZES, cfg.block_size),
                                    key=f"{tag}-block"),
        enable_chunked_prefill=st.toggle("Chunked prefill", cfg.enable_chunked_prefill, key=f"{tag}-chunked"),
        enable_prefix_caching=st.toggle("Prefix caching", cfg.enable_prefix_caching, key=f"{tag}-prefix",
                                        help="Share the KV blocks of prompt prefixes and keep them cached"),
        speculative=st.selectbox("Speculative decoding", SPECULATIVE, SPECULATIVE.index(cfg.speculative),
                                 key=f"{tag}-spec", help="ngram: decoding rows draft tokens from their own prompt and "
                                 "output; draft: a smaller model with the same tokenizer drafts them. Either way "
                                 "the drafts are verified in the same forward"),
        speculative_model=st.text_input("Draft model (speculative = draft)", cfg.speculative_model or "",
                                         key=f"{tag}-draft", max_chars=MAX_MODEL_NAME_CHARS,
                                         help="A hub id or a local directory"),
        num_speculative_tokens=st.slider("Draft tokens per step", 1, MAX_SPECULATIVE_TOKENS,
                                         cfg.num_speculative_tokens, key=f"{tag}-k"),
        preemption_mode=st.selectbox("Preemption", PREEMPTION_MODES, PREEMPTION_MODES.index(cfg.preemption_mode),
                                     key=f"{tag}-preempt", help="When the KV pool runs out (continuous): recompute "
                                     "drops the request's KV; swap copies it to a host pool and back"),
        disaggregated=st.toggle("Disaggregated prefill/decode", cfg.disaggregated, key=f"{tag}-disagg",
                                help="Continuous: prefill on one engine, decode on another, each with half the "
                                "lane's cores and KV memory; a request's KV is copied over after its first token"),
        max_num_batched_tokens=st.select_slider("Token budget per iteration", BUDGETS,
                                                _nearest(BUDGETS, cfg.max_num_batched_tokens), key=f"{tag}-budget"),
        max_num_seqs=st.slider("Max batch (sequences)", 1, 256, cfg.max_num_seqs, key=f"{tag}-seqs"),
        static_batch_size=st.slider("Static batch size", 1, 64, cfg.static_batch_size, key=f"{tag}-static"),
        static_max_wait_s=st.slider("Dynamic: max wait (s)", 0.0, 5.0, float(cfg.static_max_wait_s), 0.1,
                                    key=f"{tag}-wait"),
    )
    # the draft model is read only when the lane drafts with one (else the setting must be None)
    fields["speculative_model"] = (fields["speculative_model"].strip() or None) if fields["speculative"] == "draft" \
        else None
    fields["disaggregated"] = fields["disaggregated"] and fields["strategy"] == "continuous"
    return new_name.strip(), fields


def _apply_lanes(svc, edited: list[tuple[str, dict]]) -> None:
    try:
        names = [check_lane_name(name) for name, _ in edited]
        if len(set(names)) < len(names):
            raise ValueError("give each lane its own name")
        with st.spinner("Starting the lanes…"):
            settled = svc.set_lanes(dict(edited), wait_s=SETTLE_WAIT_S)
        st.toast("Lanes running." if settled else "Applying: lanes finish their in-flight requests, then restart.")
    except ValueError as e:  # a lane that could not start: every lane is back as it was
        st.error(str(e))


def _nearest(options: list[int], value: int) -> int:
    return min(options, key=lambda o: abs(o - value))
