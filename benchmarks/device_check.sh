#!/usr/bin/env bash
# One prepared device run (an NVIDIA GPU with cupy, torch, numpy, pytest, hypothesis installed;
# nothing is installed from the network). Runs every package's tests on the cuda backend and the
# cuda columns of the parity matrix (eager tape, replay, fused), an end-to-end AE training
# bit-equality check, rungs 2 and 4 (the captured step replayed as one CUDA graph, and fused,
# bit-equal to the CPU tape), gemit's emitted CUDA, the replay/fusion benchmark, and prints a
# short table last (~10 minutes on an H200).
# Usage: OUT=<dir> bash benchmarks/device_check.sh
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/device_check}
mkdir -p "$OUT"
export PYTHONPATH=packages/gtensor/src:packages/gtape/src:packages/gopt/src:packages/ggpu-replay/src:packages/ggpu-fuse/src:packages/gemit/src:packages/gdemos/src
export GRAD_TEST_BACKEND=cuda HYPOTHESIS_PROFILE=ci PYTHONDONTWRITEBYTECODE=1
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"
nvidia-smi -L | tee -a "$OUT/env.txt"
python -c "import cupy, numpy; print('cupy', cupy.__version__, 'numpy', numpy.__version__)" \
    | tee -a "$OUT/env.txt"

run() {  # run NAME TIMEOUT pytest-args...
    local name=$1 limit=$2
    shift 2
    local start=$SECONDS
    timeout "$limit" python -m pytest -q -p no:cacheprovider "$@" > "$OUT/$name.log" 2>&1
    local rc=$?
    printf '%-28s rc=%-3s %4ss  %s\n' "$name" "$rc" "$((SECONDS - start))" \
        "$(grep -E '(passed|failed|error)' "$OUT/$name.log" | tail -1)" >> "$SUMMARY"
}

G=packages/gtensor/tests
run gtensor-cuda 150 $G/test_parity.py $G/test_oracles.py $G/test_errors.py $G/test_registry.py
run gtape-cuda 90 packages/gtape/tests
run parity-matrix-cuda 60 tests-integration
for dt in float64 float32; do
    start=$SECONDS
    timeout 60 python benchmarks/device_ae_parity.py --epochs 2 --dtype $dt > "$OUT/ae_$dt.log" 2>&1
    printf '%-28s rc=%-3s %4ss  %s\n' "ae-train-cuda-vs-numpy-$dt" "$?" "$((SECONDS - start))" \
        "$(tail -1 "$OUT/ae_$dt.log")" >> "$SUMMARY"
done
run gopt-cuda 90 packages/gopt/tests
run ggpu-replay-cuda 120 packages/ggpu-replay/tests
run ggpu-fuse-cuda 120 packages/ggpu-fuse/tests
run gemit-cuda 90 packages/gemit/tests/test_emit_cuda.py
run gdemos-cuda 120 packages/gdemos/tests
start=$SECONDS
timeout 120 python -m gdemos ae --engine replay --backend cuda --no-progress --no-bars \
    --out "$OUT/rung2" > "$OUT/rung2.log" 2>&1
printf '%-28s rc=%-3s %4ss  %s\n' "rung2-replay-cuda" "$?" "$((SECONDS - start))" \
    "$(grep -E 'weights==cpu tape|MSE' "$OUT/rung2.log" | tr '\n' ' ' | cut -c1-160)" >> "$SUMMARY"
start=$SECONDS
timeout 120 python -m gdemos ae --engine fused --backend cuda --no-progress --no-bars \
    --out "$OUT/rung4" > "$OUT/rung4.log" 2>&1
printf '%-28s rc=%-3s %4ss  %s\n' "rung4-fused-cuda" "$?" "$((SECONDS - start))" \
    "$(grep -E 'weights==cpu tape|MSE' "$OUT/rung4.log" | tr '\n' ' ' | cut -c1-160)" >> "$SUMMARY"
start=$SECONDS
timeout 180 python benchmarks/bench_replay_step.py --steps 300 --out "$OUT/replay_step.md" \
    > "$OUT/bench_replay.log" 2>&1
printf '%-28s rc=%-3s %4ss  %s\n' "bench-replay-step" "$?" "$((SECONDS - start))" \
    "see replay_step.md" >> "$SUMMARY"

echo "==== device check summary ===="
cat "$SUMMARY"
