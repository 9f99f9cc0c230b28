#!/usr/bin/env bash
# One session on a GPU machine: the GPU test suite, the expert benchmark against the vendor
# libraries, and device-tier lineages of the experts, all in one call.
#
#   bash bench/device_session.sh OUTDIR [STAGES] [CASES]
#
# STAGES is a comma list of gpu-test,bench,lineages,heldout,roundtrip (default: the first three); CASES the experts whose
# lineages to induce (default: gemm,conv2d,topk,fmha,gdn); GPUS (env, default 0) the GPUs the
# lineages are spread over, e.g. GPUS=0,1. Lineages go to OUTDIR/lineages.tgz,
# the benchmark to OUTDIR/experts.{json,md}, the test log to OUTDIR/gpu-tests.log. Each stage has
# its own time box so that one slow stage cannot starve the others; the GPU tests run last. Where Python packages are
# missing on the machine, wheels in .whl/ are installed into /tmp/site first. RESUME (env) names
# a folder of earlier lineages (RESUME/<case>/lineage.json): a case found there continues that
# lineage (klineage induce --resume) instead of starting from the expert. The heldout stage
# induces each case's held-out lineage for admission: the orders that start with the expert's
# 2nd, 3rd, ... optimization (--first-branch 1, up to HELDOUT_WIDTH of them, HELDOUT_STEPS steps
# each), to OUTDIR/heldout.tgz; give them to bench/roundtrip.py --held-out. The roundtrip stage
# runs `bench/roundtrip.py --out $RT $ROUNDTRIP_ARGS` (RT, env: a folder carried from call to
# call, default .rt/device; ROUNDTRIP_BOX seconds at most, default 540) and packs RT without its gate caches to OUTDIR/roundtrip.tgz.
set -u
OUTDIR=${1:?usage: device_session.sh OUTDIR [STAGES] [CASES]}
STAGES=${2:-gpu-test,bench,lineages}
CASES=${3:-gemm,conv2d,topk,fmha,gdn}
LINEAGE_BOX=${LINEAGE_BOX:-150}   # seconds per expert lineage
MAX_STEPS=${MAX_STEPS:-16}
mkdir -p "$OUTDIR"
export PYTHONUNBUFFERED=1 KLINEAGE_CACHE_DIR=${KLINEAGE_CACHE_DIR:-/tmp/klineage-cache}
. bench/wheels.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader | tee "$OUTDIR/gpu.txt"
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)' | tee -a "$OUTDIR/gpu.txt"

has() { case ",$STAGES," in *",$1,"*) return 0;; esac; return 1; }

if has bench; then
  echo "== expert benchmark"
  timeout 300 python3 -m lineage bench --case all --fresh --shapes gate --out "$OUTDIR" 2>&1 | tail -30
  # Benchmark-only shapes (the paper's workloads) in a box of their own; rows join the table.
  timeout 200 python3 -m lineage bench --case all --shapes bench --out "$OUTDIR" 2>&1 | tail -30
fi

if has lineages; then
  mkdir -p "$OUTDIR/lin"
  IFS=, read -ra list <<<"$CASES"
  IFS=, read -ra gpus <<<"${GPUS:-0}"
  # One queue per GPU (round-robin over the cases), the queues run side by side: each
  # induction has its GPU to itself, so its timings are as clean as on a one-GPU machine.
  induce_one() {
    local case=$1 gpu=$2 kernel box_var box start rc resume=()
    kernel=$(ls experts/$case/${case}_triton.py)
    if [ -n "${RESUME:-}" ] && [ -f "$RESUME/$case/lineage.json" ]; then
      mkdir -p "$OUTDIR/lin/$case" && cp "$RESUME/$case/lineage.json" "$OUTDIR/lin/$case/"
      resume=(--resume)
    fi
    box_var="LINEAGE_BOX_$case"; box=${!box_var:-$LINEAGE_BOX}   # e.g. LINEAGE_BOX_gemm=200
    start=$(date +%s)
    CUDA_VISIBLE_DEVICES=$gpu KLINEAGE_CACHE_DIR=$KLINEAGE_CACHE_DIR/gpu$gpu \
      timeout "$box" python3 -m lineage induce "$kernel" --case "$case" --tier device \
      --max-steps "$MAX_STEPS" --out "$OUTDIR/lin/$case" "${resume[@]}" --json > "$OUTDIR/lin/$case.json" \
      2> "$OUTDIR/lin/$case.log"
    rc=$?
    echo "== device lineage $case (gpu $gpu): rc=$rc in $(( $(date +%s) - start )) s"
    tail -c 600 "$OUTDIR/lin/$case.json"; echo
    if [ $rc -ne 0 ]; then tail -5 "$OUTDIR/lin/$case.log"; fi
  }
  for g in "${!gpus[@]}"; do
    (
      for i in "${!list[@]}"; do
        if [ $(( i % ${#gpus[@]} )) -eq "$g" ]; then induce_one "${list[$i]}" "${gpus[$g]}"; fi
      done
    ) &
  done
  wait
  tar czf "$OUTDIR/lineages.tgz" -C "$OUTDIR" lin && rm -rf "$OUTDIR/lin"
fi

if has heldout; then
  mkdir -p "$OUTDIR/heldout"
  IFS=, read -ra list <<<"$CASES"
  for case in "${list[@]}"; do
    box_var="HELDOUT_BOX_$case"; box=${!box_var:-${HELDOUT_BOX:-240}}
    start=$(date +%s)
    timeout "$box" python3 -m lineage induce "experts/$case/${case}_triton.py" --case "$case" \
      --tier device --first-branch 1 --width "${HELDOUT_WIDTH:-16}" --max-steps "${HELDOUT_STEPS:-1}" \
      --out "$OUTDIR/heldout/$case" --json > "$OUTDIR/heldout/$case.json" 2> "$OUTDIR/heldout/$case.log"
    echo "== held-out lineage $case: rc=$? in $(( $(date +%s) - start )) s"
    tail -c 400 "$OUTDIR/heldout/$case.json"; echo
  done
  tar czf "$OUTDIR/heldout.tgz" -C "$OUTDIR" heldout && rm -rf "$OUTDIR/heldout"
fi

if has roundtrip; then
  RT=${RT:-.rt/device}
  mkdir -p "$RT"
  echo "== roundtrip: bench/roundtrip.py --out $RT ${ROUNDTRIP_ARGS:-}"
  # shellcheck disable=SC2086  # ROUNDTRIP_ARGS is a list of options
  # No pipe: gate workers that outlive a killed run must not hold this script's output open.
  timeout -k 10 "${ROUNDTRIP_BOX:-540}" python3 bench/roundtrip.py --out "$RT" ${ROUNDTRIP_ARGS:-} \
    > "$OUTDIR/roundtrip.out" 2> "$OUTDIR/roundtrip.log" < /dev/null
  echo "roundtrip rc=$?"
  tail -60 "$OUTDIR/roundtrip.out"
  grep -E "library|admitted|start |done " "$OUTDIR/roundtrip.log" | tail -60
  tar czf "$OUTDIR/roundtrip.tgz" --exclude='*/cache' --exclude='*/admission-cache' --exclude='*/optimize/best*' \
    --exclude='*/runs/*/expert.py' --exclude='*/runs/*/start.py' -C "$(dirname "$RT")" "$(basename "$RT")"
fi

if has gpu-test; then
  echo "== gpu tests"
  timeout "${GPU_TEST_BOX:-300}" python3 -m pytest -q -m gpu -p no:cacheprovider --timeout=90 ${GPU_TESTS:-} 2>&1 \
    | tee "$OUTDIR/gpu-tests.log" | tail -25
fi
