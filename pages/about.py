"""About: what each picture shows, in a few sentences per view."""
import streamlit as st

st.title("What you are looking at")
st.markdown("""
Inflight runs a real Hugging Face model in PyTorch. Each **iteration** (one step of the engine) is one
forward pass over a batch of requests. What the views show comes from the engine's own record of each
iteration: nothing is simulated or interpolated.

**Strategies.**
*Continuous batching* schedules at every iteration. Finished requests leave at once, and waiting
requests join while there is a free batch slot, token budget and KV memory. Long prompts are processed
in chunks so they do not stall requests that are already generating.
*Static batching* waits until it has a full batch and pads every prompt to the longest one. It then
runs until the longest request is done and lets nobody join in the meantime. *Dynamic batching* does
the same, but also starts a batch once the oldest request has waited long enough.
In both, rows that have finished keep their place in the batch and are still computed.

**Lanes.** A lane is a name plus a full set of engine settings (the strategy is one of them). The
views show two lanes side by side on the same request stream, each column headed by how its settings
differ from the other's ("block 128" beside "block 16"). **Compare** in the sidebar picks a scenario
(its lanes, a one-click request stream that shows their difference, a line on what to watch, and a
narration of notable iterations under the views), custom lanes, or a single lane.

**Gantt.** One row per request, along the time axis (or iterations). *Queued* is the time spent
waiting. *Prefill* covers the prompt, one segment per chunk. *Decode* produces one token per
iteration. *Preempted* means its KV blocks were taken back and it waits to be *recomputed*.
*Finished but held* is a static row that is done but still sits in its batch. The marker is the
moment it finished.

**Batch slots.** One column per iteration and one row per batch slot, coloured by the request in that
slot. Continuous batching refills a slot as soon as it frees up. Static batching leaves grey padding
until the whole batch is done.

**KV block map.** The physical KV cache: a pool of fixed-size blocks, one cell per block, coloured by
the request that owns it. The fill shows how many token slots hold a token. Continuous batching takes
blocks as a request grows, so only the last block of a request is partly empty. Static batching
reserves room for prompt + max_tokens up front; the hatching is memory reserved but never used.

**Prefix cache.** With prefix caching on, requests that start with the same tokens (a shared system
prompt) point their block tables at the same physical blocks. On the KV map a *shared* block is
striped in its holders' colours with its count (×2); a *cached* block, outlined, holds a finished
request's tokens and waits for the next request that starts the same way, until the pool needs it
(least recently used first). In the Gantt the hatched part of a request's first bar is the prompt it
took from the cache instead of computing it.

**Utilization.** Per iteration: how full the batch is, how much of the token budget was used, how
much of the KV pool is held, the prefix cache's hit rate (when a lane caches prefixes), and tokens
per second. Two more lines place each iteration against the device: the memory bandwidth and the
FLOP/s it achieved, as shares of the peaks measured on this machine. On an NVIDIA GPU, the device's
own utilization and memory (NVML, sampled twice a second beside the engines) are drawn on the same
time axis and shown in the badge at the top.

**Roofline.** Recent iterations as points: FLOPs per byte moved (across) against FLOP/s achieved (up),
under the device's roof. Left of the dotted ridge an iteration is limited by memory (reading the
weights once per iteration), so more rows cost little; right of it, by arithmetic.

**Remote lanes.** A lane can be a real serving cluster (any OpenAI-compatible server). Its rows are
timed here, at the client: sent, first token, each token, done. A remote server does not expose its
batch slots or KV blocks, so those views say so; its own running, waiting and KV usage, when it
publishes them, are drawn in the utilization view.

**Recordings.** A recording replays a real run in these views with no engine involved, marked as a
recording in the banner. A fresh machine plays one while it loads the model.

**Reading the charts.** Hover any bar, slot cell or block for its numbers. Click one to pick its
request: it is highlighted in every view, its text card included, and the KV cache page follows it.
Drag across a chart to zoom in on a stretch of time; double-click to follow "now" again.

**Metric cards.** They use the same definitions as the benchmark. Throughput is output tokens per
second of finished requests. TTFT is time to first token, queueing included. TPOT is the time per
output token after the first. Padding waste is the share of computed token slots that were thrown
away. KV waste is the share of allocated KV slots that hold no token. The longest token wait is the
longest iteration that carried decode rows. With two lanes, each card gives the ratio to the other lane.

**Pause, step, slow motion.** Pause stops every engine between iterations, and Step runs exactly one
iteration, so you can follow a schedule decision by decision. Slow motion makes each iteration last
at least the time you set.

**Talk to it from outside.** Any OpenAI client pointed at `http://<host>:8501/v1` sends requests that
show up in these views, tagged `openai`. docs/api.md has the details, including the `/engine/ws`
event protocol the views are built on.
""")
