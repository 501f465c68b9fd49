"""A primer a newcomer takes in a minute, on the playground itself: what the views show and why, with
the first thing to do. Open when the playground opens; folded by hand, it stays folded while the page runs
again (its `expanded` never changes within a session, so the browser keeps what the reader chose: a
value that changed on the page's second run folded it by itself the moment the model finished loading or
a prompt was sent)."""
from __future__ import annotations

import streamlit as st

TEXT = """
**Start here: run the Straggler scenario** (*Run scenario* below, with *Straggler* chosen under **Compare**;
it is the default). Sixteen prompts go to two engines on the same model: one batches them as they come
(**continuous**), one waits for full batches of eight (**static**). Watch the *Requests* chart.

- **Prefill and decode.** A model first reads the whole prompt in one pass (*prefill*, a light bar), then
  writes its answer one token per pass (*decode*, a solid bar). Every pass over the model is an
  **iteration**: the charts' x axis.
- **The KV cache.** While it reads and writes, the model keeps two vectors (a *key* and a *value*) for
  every token it has seen, in every layer, so the next token does not recompute the whole text: that
  memory is the KV cache. It grows by one token per decode step, and it is handed out in fixed-size
  **blocks**, like pages of memory (the *KV cache* map shows who holds which block).
- **Why batching helps.** Each iteration reads all the model's weights once, whatever the batch size, so
  ten requests decoded together cost little more than one. Static batching keeps a batch until its
  longest answer ends (finished rows are still computed: grey *padding*); continuous batching gives a
  finished row's slot to the next request at the very next iteration.
- **Why a request waits.** Hover a thin bar (a wait): the scheduler says why, e.g. *waiting for a full
  batch: 1 of 8*.
"""


def primer() -> None:
    with st.expander("New here? What you are looking at, in one minute", expanded=True,
                     icon=":material/school:"):
        st.markdown(TEXT)
