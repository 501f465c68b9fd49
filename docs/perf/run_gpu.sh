#!/usr/bin/env bash
# The GPU figures of the performance write-up, one part per call (each meant to end inside 10 minutes):
#
#   bash docs/perf/run_gpu.sh check        # correctness on the GPU: kernels, fp32 equality, bf16, CUDA graphs
#   bash docs/perf/run_gpu.sh floor        # decode step vs memory floor (graphs on/off, torch attention), profile
#   bash docs/perf/run_gpu.sh anyscale     # anyscale workload: continuous, static, dynamic, hf-generate
#   bash docs/perf/run_gpu.sh anyscale-cb  # the same workload: continuous beside hf-cb (at its KV memory)
#   bash docs/perf/run_gpu.sh nano         # nano-vllm workload, Qwen3-0.6B shape
#   bash docs/perf/run_gpu.sh lanes        # two lanes on one GPU: decode step alone and together
#
# Results (JSON and logs) go to $OUT (default docs/perf). Models are random-weight folders with the
# real shapes (engine/model/files/random_model.py), built on first use. Tunables, with their defaults:
# DEVICE=cuda DTYPE=bfloat16 ATTN=triton QWEN25=random:Qwen2.5-0.5B-Instruct QWEN3=random:Qwen3-0.6B
# BATCHES=1,16,64,256 CONTEXT=512 SCALE=0.2 (anyscale's share of its 1000 requests) NANO_SCALE=1
# MAX_SEQS=256 STATIC_BATCH=32 BUDGET=8192 (tokens per step) KV_GB=16 (the same KV memory for every lane)
set -uo pipefail
OUT=${OUT:-docs/perf}
DEVICE=${DEVICE:-cuda} DTYPE=${DTYPE:-bfloat16} ATTN=${ATTN:-triton}
QWEN25=${QWEN25:-random:Qwen2.5-0.5B-Instruct} QWEN3=${QWEN3:-random:Qwen3-0.6B}
BATCHES=${BATCHES:-1,16,64,256} CONTEXT=${CONTEXT:-512} SCALE=${SCALE:-0.2} NANO_SCALE=${NANO_SCALE:-1}
MAX_SEQS=${MAX_SEQS:-256} STATIC_BATCH=${STATIC_BATCH:-32} BUDGET=${BUDGET:-8192} KV_GB=${KV_GB:-16}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
mkdir -p "$OUT"
py=${PYTHON:-python3}
engine=(--device "$DEVICE" --dtype "$DTYPE" --attention-backend "$ATTN")
rc=0
run() {  # run "log name" command...: output to the terminal and $OUT/<log>.log; a failure does not stop the part
  local log=$1; shift
  "$@" 2>&1 | tee -a "$OUT/$log.log" || rc=1
}
anyscale() {  # anyscale json-name strategies
  run "$1" "$py" -m engine.bench --model "$QWEN25" "${engine[@]}" --workload anyscale --scale "$SCALE" \
    --strategies "$2" --max-num-seqs "$MAX_SEQS" --static-batch-size "$STATIC_BATCH" \
    --max-num-batched-tokens "$BUDGET" --kv-memory-gb "$KV_GB" --no-progress --json "$OUT/$1.json"
}

case "${1:-}" in
check)
  run check "$py" -c "import shutil, torch, triton, transformers; print(torch.__version__, triton.__version__, \
transformers.__version__, torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no CUDA', \
'C compiler (Triton builds its launcher):', shutil.which('gcc') or shutil.which('cc') or 'none')"
  run check "$py" -m pytest -q -p no:cacheprovider tests/test_triton_attention.py tests/test_bf16_near_greedy.py \
    tests/test_random_model.py tests/test_decode_floor.py tests/test_step_profile.py tests/test_engine_equality.py
  ;;
floor)
  for graphs in on off; do
    run floor "$py" -m engine.bench.decode_floor --model "$QWEN25" "${engine[@]}" --cuda-graphs "$graphs" \
      --batches "$BATCHES" --context "$CONTEXT" --json "$OUT/decode_floor_${ATTN}_graphs_$graphs.json"
  done
  run floor "$py" -m engine.bench.decode_floor --model "$QWEN25" --device "$DEVICE" --dtype "$DTYPE" \
    --attention-backend torch --cuda-graphs off --batches "$BATCHES" --context "$CONTEXT" \
    --json "$OUT/decode_floor_torch.json"
  run floor "$py" -m engine.bench.step_profile --model "$QWEN25" "${engine[@]}" --cuda-graphs off --batches 1,64 \
    --contexts "$CONTEXT" --json "$OUT/step_profile.json"
  ;;
anyscale) anyscale anyscale continuous,static,dynamic,hf-generate ;;
anyscale-cb) anyscale anyscale_cb continuous,hf-cb ;;
nano)
  run nano "$py" -m engine.bench --model "$QWEN3" "${engine[@]}" --workload nano-vllm --scale "$NANO_SCALE" \
    --strategies continuous --max-num-seqs 512 --max-num-batched-tokens 16384 --kv-memory-gb "$KV_GB" \
    --no-progress --json "$OUT/nano_vllm.json"
  ;;
lanes)
  run lanes "$py" -m engine.bench.lanes_together --model "$QWEN25" "${engine[@]}" --batch 32 --tokens 64 \
    --json "$OUT/lanes_together.json"
  ;;
*)
  sed -n '2,16p' "$0"; exit 2 ;;
esac
exit $rc
