#!/usr/bin/env bash
# The device checks of a change to the gate or the search, in one call on a two-GPU machine:
#
#   OUT=DIR bash bench/device_checks.sh [STYLES]
#
# GPU 0: the style operators STYLES (comma list; default the weakest against their vendor
# library) under the search with the shipped library, budget 12 (bench/heldout.py, records and
# lineages under OUT/styles), then the CUDA nw_* styles' rules at the device tier
# (bench/cuda_roles.py, OUT/nw-device). GPU 1: the gate's GPU tests (tests/test_gate_device.py,
# tests/test_gate_exploits.py), the exploits at the device tier (OUT/exploits-device.md), the
# persistent-split probe (OUT/persist) and the honest kernels at the device tier
# (OUT/honest-device.{json,md}). Each step has its own time box (seconds, env: STYLES_BOX,
# ROLES_BOX, TESTS_BOX, EXPLOITS_BOX, PROBE_BOX, HONEST_BOX); the whole fits a 10-minute call.
# Wheels missing on the machine are installed from .whl/ first (bench/wheels.sh). PARTS (env, comma
# list of styles, roles, tests, exploits, probe, honest; default all) picks the steps. Everything is
# written under a work folder and packed into OUT/device-checks.tar.gz at the end, since a device
# call brings back at most eight files.
set -u
OUT=${OUT:?set OUT to the output folder}
PACK=$OUT
OUT=${WORK:-/tmp/device-checks}
PARTS=,${PARTS:-styles,roles,tests,exploits,probe,honest},
want() { [[ $PARTS == *",$1,"* ]]; }
STYLES=${1:-nw_attn_flat_ptrs,nw_mm_dispatch,nw_mm_range_stages,nw_mm_group_cols}
export PYTHONUNBUFFERED=1 KLINEAGE_CACHE_DIR=${KLINEAGE_CACHE_DIR:-/tmp/klineage-cache}
. bench/wheels.sh
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
jobs=$(awk -F, '{print NF}' <<<"$STYLES")
# step NAME BOX LOG COMMAND...: runs COMMAND in its time box when PARTS names NAME, its output and
# its exit status in LOG.
step() {
  local name=$1 box=$2 log=$3; shift 3
  want "$name" || return 0
  timeout "$box" "$@" > "$log" 2>&1
  echo "$name rc=$?" >> "$log"
}
(
  export CUDA_VISIBLE_DEVICES=0
  step styles "${STYLES_BOX:-330}" "$OUT/styles.log" python3 bench/heldout.py bench/styles --tier device \
    --budget-steps 12 --box 240 --jobs "$jobs" --wall 290 --only "$STYLES" --out "$OUT/styles" \
    --results "$OUT/styles/styles"
  step roles "${ROLES_BOX:-220}" "$OUT/nw-device.log" python3 bench/cuda_roles.py bench/styles/cuda/nw_* \
    --tier device --jobs 2 \
    --rules row-cache,row-registers,warp-shuffle-reduce,cp-async-pipeline,vectorize-global,launch-threads,launch-bounds,pragma-unroll,mma-micro-kernel,gemm-schedule \
    --out "$OUT/nw-device"
) &
(
  export CUDA_VISIBLE_DEVICES=1
  step tests "${TESTS_BOX:-170}" "$OUT/gate-tests.log" python3 -m pytest -v -m gpu -p no:cacheprovider \
    tests/test_gate_device.py tests/test_gate_exploits.py
  step exploits "${EXPLOITS_BOX:-260}" "$OUT/exploits.log" python3 bench/gate_exploits.py --tier device \
    --out "$OUT/exploits-device.md"
  step probe "${PROBE_BOX:-100}" "$OUT/persist.log" python3 bench/persist_split_loops.py "$OUT/persist"
  step honest "${HONEST_BOX:-150}" "$OUT/honest.log" python3 bench/gate_honest.py --tier device \
    --out "$OUT/honest-device.json" --md "$OUT/honest-device.md" --jobs 6 --box 110
) &
wait
tail -n 3 "$OUT"/*.log
tar -czf "$PACK/device-checks.tar.gz" -C "$OUT" .
cp "$OUT/gpu.txt" "$PACK/"
