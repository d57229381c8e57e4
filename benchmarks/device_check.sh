#!/usr/bin/env bash
# One prepared device run (an NVIDIA GPU with cupy, torch, numpy, pytest, hypothesis installed;
# nothing is installed from the network). Runs every package's tests on the cuda backend and the
# cuda column of the parity matrix, an end-to-end AE training bit-equality check, and prints a
# short table last. Usage: OUT=<dir> bash benchmarks/device_check.sh
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/device_check}
mkdir -p "$OUT"
export PYTHONPATH=packages/gtensor/src:packages/gtape/src:packages/gopt/src:packages/gdemos/src
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
run gtensor-cuda 240 $G/test_parity.py $G/test_oracles.py $G/test_errors.py $G/test_registry.py
for pkg in gtape gopt gdemos; do
    [ -d "packages/$pkg/tests" ] && run "$pkg-cuda" 150 "packages/$pkg/tests"
done
run parity-matrix-cuda 120 tests-integration

if [ -f packages/gdemos/src/gdemos/ae.py ]; then
    start=$SECONDS
    timeout 150 python benchmarks/device_ae_parity.py > "$OUT/ae_parity.log" 2>&1
    printf '%-28s rc=%-3s %4ss  %s\n' "ae-train-cuda-vs-numpy" "$?" "$((SECONDS - start))" \
        "$(tail -1 "$OUT/ae_parity.log")" >> "$SUMMARY"
fi

echo "==== device check summary ===="
cat "$SUMMARY"
