#!/usr/bin/env bash
# The GPU figures of docs/PERFORMANCE.md. `all` runs every part in one go of at most $DEADLINE_S seconds
# (default 530), each part under its own time cap, and packs what they wrote into one archive, $OUT.tar.gz:
#
#   bash docs/perf/run_gpu.sh all          # $PARTS (default: check to nano below), in order, then the archive
#   bash docs/perf/run_gpu.sh check        # versions, then the GPU tests (kernels, warm-up, fp32 equality, bf16)
#   bash docs/perf/run_gpu.sh floor        # decode step vs memory floor (graphs compiled or not; overlap on and off)
#   bash docs/perf/run_gpu.sh profile      # where a decode step's time goes: host phases vs GPU busy time, timelines
#   bash docs/perf/run_gpu.sh anyscale     # anyscale workload: continuous, static, hf-generate (each warm)
#   bash docs/perf/run_gpu.sh anyscale-cb  # the same workload: continuous beside hf-cb (same KV memory, warm)
#   bash docs/perf/run_gpu.sh nano         # nano-vllm's workload, Qwen3-0.6B's shape (torch.compile, overlap on/off)
#   bash docs/perf/run_gpu.sh socket       # the socket at the GPU's pace: what clients get and cost, a recording
#   bash docs/perf/run_gpu.sh floor-base   # the floor part on another commit's tree ($BASE), on the same machine
#   bash docs/perf/run_gpu.sh lanes        # two lanes on one GPU: decode step alone and together (not in all)
#
# Results (JSON and logs) go to $OUT (default docs/perf/gpu-run). Models are random-weight folders with the
# real shapes (engine/model/files/random_model.py), built on first use. Where the machine's transformers
# is not the version requirements.txt pins, a wheel of it in .whl/ is installed under /tmp/site first
# (../shared/NOTES.md, "The GPU machine"), as is every other wheel there the machine lacks (the socket part
# needs starlette, uvicorn, websockets and theirs: `pip download --no-deps --only-binary=:all:` of the versions
# requirements.txt pins, with anyio, sniffio, idna, h11 and click). Tunables, with their defaults:
# DEVICE=cuda DTYPE=bfloat16 ATTN=auto QWEN25=random:Qwen2.5-0.5B-Instruct QWEN3=random:Qwen3-0.6B
# BATCHES=1,16,64,256 CONTEXT=512 SCALE=0.1 (anyscale's share of its 1000 requests) NANO_SCALE=1
# MAX_SEQS=256 STATIC_BATCH=32 BUDGET=8192 (tokens per step) KV_GB=16 (the same KV memory for every lane)
# COMPILE="on off" (the floor's and nano's torch.compile, in order) OVERLAP=on,off (the floor's and the profile's
# engines, side by side) NANO_OVERLAP="on" (nano's runs for each compile setting, in order) BASE= (floor-base's
# tree: `git archive C engine assets/model_configs` of a commit C, unpacked) SOCKET_KV_GB=24 (each socket lane's
# KV pool)
# DEADLINE_S=530, and each part's cap: CAP_CHECK=150 CAP_FLOOR=150 CAP_PROFILE=180 CAP_ANYSCALE=140
# CAP_ANYSCALE_CB=120 CAP_NANO=240 CAP_SOCKET=150 CAP_FLOOR_BASE=100 (seconds; a part never runs past the
# deadline less PACK_S=10; an engine that compiles spends part of its start in torch.compile: its status gives
# the seconds).
# PARTS="check floor nano" runs only those: all the parts take longer than one 10-minute call, so run them in
# two (then PARTS="profile anyscale anyscale-cb").
set -uo pipefail
OUT=${OUT:-docs/perf/gpu-run}
DEVICE=${DEVICE:-cuda} DTYPE=${DTYPE:-bfloat16} ATTN=${ATTN:-auto}
QWEN25=${QWEN25:-random:Qwen2.5-0.5B-Instruct} QWEN3=${QWEN3:-random:Qwen3-0.6B}
BATCHES=${BATCHES:-1,16,64,256} CONTEXT=${CONTEXT:-512} SCALE=${SCALE:-0.1} NANO_SCALE=${NANO_SCALE:-1}
MAX_SEQS=${MAX_SEQS:-256} STATIC_BATCH=${STATIC_BATCH:-32} BUDGET=${BUDGET:-8192} KV_GB=${KV_GB:-16}
DEADLINE_S=${DEADLINE_S:-530} PACK_S=${PACK_S:-10} PARTS=${PARTS:-check floor profile anyscale anyscale-cb nano}
COMPILE=${COMPILE:-on off} BASE=${BASE:-} OVERLAP=${OVERLAP:-on,off} NANO_OVERLAP=${NANO_OVERLAP:-on}
TESTS=${TESTS:-tests/engine/model/test_triton_attention.py tests/engine/test_attention_choice.py tests/engine/test_bf16_near_greedy.py \
tests/engine/model/test_sampler.py tests/engine/model/test_host_ints.py tests/engine/model/test_packed_linear.py \
tests/engine/bench/test_decode_floor.py tests/engine/bench/test_step_profile.py tests/engine/test_overlap.py \
tests/engine/kv/test_kv_sizing.py}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
mkdir -p "$OUT"
OUT_ABS=$(cd "$OUT" && pwd)  # (a part that runs in another tree writes here)
py=${PYTHON:-python3}
engine=(--device "$DEVICE" --dtype "$DTYPE" --attention-backend "$ATTN")
rc=0
end=$((SECONDS + DEADLINE_S))

run() {  # run "log name" command...: output to the terminal and $OUT/<log>.log; a failure does not stop the rest
  local log=$1; shift
  echo "\$ $*" >>"$OUT/$log.log"
  "$@" 2>&1 | tee -a "$OUT/$log.log"
  local code=${PIPESTATUS[0]}
  ((code == 0)) || { rc=1; echo "[$log: exit $code]" | tee -a "$OUT/$log.log"; }
}

capped() {  # capped part seconds: run the part under min(seconds, what the deadline leaves), say how long it took
  local name=$1 cap=$2 left=$((end - SECONDS - PACK_S)) t0=$SECONDS
  ((cap > left)) && cap=$left
  if ((cap <= 0)); then
    echo "[$name: skipped, the deadline has passed]" | tee -a "$OUT/parts.log"; rc=1; return
  fi
  echo "== $name (cap ${cap}s)" | tee -a "$OUT/parts.log"
  CAP=$cap timeout --kill-after=5 "$cap" bash "$0" "$name"
  local code=$?
  ((code == 124 || code == 137)) && echo "[$name: stopped at its cap]" | tee -a "$OUT/parts.log"
  ((code != 0)) && rc=1
  echo "[$name: exit $code after $((SECONDS - t0))s]" | tee -a "$OUT/parts.log"
}

pinned_wheels() {  # each wheel in .whl/ whose version the machine lacks (transformers: the one requirements.txt pins)
  local wheel dist want have missing=()
  for wheel in .whl/*.whl; do
    [[ -e $wheel ]] || continue
    dist=$(basename "$wheel" | cut -d- -f1) want=$(basename "$wheel" | cut -d- -f2)
    have=$("$py" -c "import importlib.metadata as m; print(m.version('$dist'))" 2>/dev/null)
    [[ "$have" != "$want" ]] && missing+=("$wheel")
  done
  if ((${#missing[@]})); then
    "$py" -m pip install -q --upgrade --no-index --no-deps --no-compile --target /tmp/site "${missing[@]}" \
      && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
  fi
  export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
}

decode_floor() {  # decode_floor log compiled json-path [tree]: the floor at 1..256 rows, from this tree or another
  local tree=${4:-$PWD} overlap=(--overlap "$OVERLAP")
  [[ -n ${4:-} ]] && overlap=()  # (another commit's tree may not know it)
  run "$1" env PYTHONPATH="${PYTHONPATH:+${PYTHONPATH/"$PWD"/"$tree"}}" bash -c 'cd "$0" && exec "$@"' "$tree" \
    "$py" -m engine.bench.decode_floor --model "$QWEN25" "${engine[@]}" --cuda-graphs on \
    --torch-compile "$2" "${overlap[@]}" --batches "$BATCHES" --context "$CONTEXT" --json "$3"
}

anyscale() {  # anyscale json-name strategies
  run "$1" "$py" -m engine.bench --model "$QWEN25" "${engine[@]}" --workload anyscale --scale "$SCALE" \
    --strategies "$2" --max-num-seqs "$MAX_SEQS" --static-batch-size "$STATIC_BATCH" \
    --max-num-batched-tokens "$BUDGET" --kv-memory-gb "$KV_GB" --no-progress --json "$OUT/$1.json"
}

[[ -n "${CAP:-}" ]] || pinned_wheels  # (a part run by `all` inherits it)

case "${1:-}" in
all)
  { date -u; nvidia-smi -L 2>/dev/null; } >"$OUT/parts.log"
  # the models are built (on the CPU, once) while the tests run
  for m in "$QWEN25" "$QWEN3"; do
    [[ $m == random:* ]] && { "$py" -m engine.model.files.random_model "${m#random:}" >>"$OUT/models.log" 2>&1 & }
  done
  declare -A caps=([check]=${CAP_CHECK:-150} [floor]=${CAP_FLOOR:-150} [profile]=${CAP_PROFILE:-180}
                    [anyscale]=${CAP_ANYSCALE:-140} [anyscale-cb]=${CAP_ANYSCALE_CB:-120} [nano]=${CAP_NANO:-240}
                    [socket]=${CAP_SOCKET:-150} [floor-base]=${CAP_FLOOR_BASE:-100})
  for part in $PARTS; do
    [[ $part == check ]] || wait  # the models, built meanwhile (while the tests ran, where they run first)
    capped "$part" "${caps[$part]:-120}"  # (lanes: 120 s)
  done
  wait
  echo "[all: exit $rc after ${SECONDS}s]" | tee -a "$OUT/parts.log"
  tar -czf "$OUT.tar.gz" -C "$(dirname "$OUT")" "$(basename "$OUT")" && echo "packed $OUT.tar.gz"
  ;;
check)
  run check "$py" -c "import shutil, torch, triton, transformers; print(torch.__version__, triton.__version__, \
transformers.__version__, torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no CUDA', \
'C compiler (Triton builds its launcher):', shutil.which('gcc') or shutil.which('cc') or 'none')"
  # shellcheck disable=SC2086
  run check "$py" -m pytest -q -p no:cacheprovider --junitxml="$OUT/check.xml" $TESTS
  ;;
floor)  # CUDA graphs with their forward compiled (the default), then without torch.compile
  for compiled in $COMPILE; do decode_floor floor "$compiled" "$OUT_ABS/decode_floor_compile_$compiled.json"; done
  ;;
floor-base)  # the same on $BASE, a tree of another commit (git archive), on the same machine
  [[ -d "$BASE/engine" && -d "$BASE/assets/model_configs" ]] || {
    echo "floor-base: BASE must be another commit's engine/ and assets/model_configs/"; exit 2; }
  for compiled in $COMPILE; do
    decode_floor floor_base "$compiled" "$OUT_ABS/decode_floor_base_compile_$compiled.json" "$BASE"
  done
  ;;
profile)
  run profile "$py" -m engine.bench.step_profile --model "$QWEN25" "${engine[@]}" --batches 1,64,256 \
    --contexts "$CONTEXT" --overlap "$OVERLAP" --json "$OUT/step_profile.json" --trace "$OUT/step_traces"
  ;;
anyscale) anyscale anyscale continuous,static,hf-generate ;;
anyscale-cb) anyscale anyscale_cb continuous,hf-cb ;;
nano)  # compiled (the default), then without torch.compile; each with overlap on, then off (NANO_OVERLAP)
  for compiled in $COMPILE; do
    for overlap in $NANO_OVERLAP; do
      run nano "$py" -m engine.bench --model "$QWEN3" "${engine[@]}" --workload nano-vllm --scale "$NANO_SCALE" \
        --strategies continuous --max-num-seqs 512 --max-num-batched-tokens 16384 --kv-memory-gb "$KV_GB" \
        --torch-compile "$compiled" --overlap "$overlap" --no-progress \
        --json "$OUT/nano_vllm_compile_${compiled}_overlap_$overlap.json"
    done
  done
  ;;
socket)  # the app's socket over two lanes of 256 rows, 2 clients beside none, the first round recorded
  run socket "$py" -m engine.harness.gpu_socket --model "$QWEN25" --device "$DEVICE" --dtype "$DTYPE" --rows 256 \
    --kv-memory-gb "${SOCKET_KV_GB:-24}" --requests 512 --max-tokens 128 --clients 2 --rounds 2 \
    --record "$OUT/gpu_socket.jsonl.gz" --json "$OUT/gpu_socket.json"
  ;;
lanes)
  run lanes "$py" -m engine.bench.lanes_together --model "$QWEN25" "${engine[@]}" --batch 32 --tokens 64 \
    --json "$OUT/lanes_together.json"
  ;;
*)
  sed -n '2,34p' "$0"; exit 2 ;;
esac
exit $rc
