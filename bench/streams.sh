#!/usr/bin/env bash
# Independent jobs side by side on a machine of several GPUs: one queue per GPU.
#
#   bash bench/streams.sh OUTDIR PLAN [SECONDS]
#
# PLAN is a text file, one job per line: `GPU NAME COMMAND...` (blank lines and # comments
# skipped). Jobs of one GPU run in order, the GPUs' queues at once; each job runs with
# CUDA_VISIBLE_DEVICES=GPU, its own KLINEAGE_CACHE_DIR, in a work folder
# W=OUTDIR/work/NAME (exported as W, with OUT=OUTDIR), its output in OUTDIR/work/NAME.log.
# SECONDS (default 560) bounds the whole plan: jobs still running then are stopped (their
# work folders keep what they wrote). At the end OUTDIR/work is packed into OUTDIR/streams.tgz
# (gate caches left out) and each job's exit status and last lines are printed. Python
# packages missing on the machine are installed from .whl/ first, as device_session.sh does.
# The queues share the host's CPUs: gates compile and compare outputs on the CPU, and four
# queues of parallel gates saturated a 64-core host (a gemm gate's output comparison took 64-78 s
# instead of 1.4 s, bench/results/gate/refill.md), so keep each queue's --jobs small and time
# what needs a quiet host (gate overheads) in a plan of its own.
set -u
OUTDIR=${1:?usage: streams.sh OUTDIR PLAN [SECONDS]}
PLAN=${2:?usage: streams.sh OUTDIR PLAN [SECONDS]}
LIMIT=${3:-560}
mkdir -p "$OUTDIR/work"
export PYTHONUNBUFFERED=1 OUT=$OUTDIR
# Each process's BLAS and OpenMP pools would otherwise start one thread per core of the host.
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1} MKL_NUM_THREADS=${MKL_NUM_THREADS:-1} \
  OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}
. bench/wheels.sh
nvidia-smi --query-gpu=index,name --format=csv,noheader
start=$(date +%s)
queue() {  # the jobs of one GPU, in plan order
  local gpu=$1 g name cmd
  while read -r g name cmd; do
    case "$g" in ''|'#'*) continue;; esac
    [ "$g" = "$gpu" ] || continue
    export W=$OUTDIR/work/$name
    mkdir -p "$W"
    local left=$(( LIMIT - ($(date +%s) - start) ))
    if [ "$left" -le 5 ]; then echo "== $name: not started (time is up)"; continue; fi
    echo "== $name (gpu $gpu) starts with ${left}s left"
    ( CUDA_VISIBLE_DEVICES=$gpu KLINEAGE_CACHE_DIR=/tmp/kc/$name \
        timeout -k 10 "$left" bash -c "$cmd" ) > "$OUTDIR/work/$name.log" 2>&1 < /dev/null
    echo "== $name (gpu $gpu) rc=$? after $(( $(date +%s) - start ))s"
  done < "$PLAN"
}
for gpu in $(grep -v '^\s*#' "$PLAN" | awk 'NF {print $1}' | sort -u); do
  queue "$gpu" &
done
wait
for log in "$OUTDIR"/work/*.log; do echo "--- $(basename "$log")"; tail -n 8 "$log"; done
tar czf "$OUTDIR/streams.tgz" --exclude='*/cache' --exclude='*/kc' -C "$OUTDIR" work && rm -rf "$OUTDIR/work"
