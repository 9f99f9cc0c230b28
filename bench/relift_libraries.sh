#!/usr/bin/env bash
# Re-lift the admitted roundtrip libraries (device run 7) from the committed device lineages into
# bench/results/heldout/libraries: the cards keep their admission and gain what lifting now
# records (joint launch configurations by role, operator signatures). loo-<case> leaves out
# that case's lineage.   bash bench/relift_libraries.sh [KLINEAGE]
set -euo pipefail
cd "$(dirname "$0")/.."
K=${1:-.venv/bin/klineage}
SRC=bench/results/roundtrip/device-7/libraries
DST=bench/results/heldout/libraries
rm -rf "$DST" && mkdir -p "$DST"
for lib in all loo-gemm loo-conv2d loo-fmha loo-gdn loo-topk; do
  cp -r "$SRC/$lib" "$DST/$lib"
  for f in bench/results/lineages/device/*/lineage.json; do
    case=$(basename "$(dirname "$f")")
    [ "$lib" = "loo-$case" ] && continue
    "$K" skills "$DST/$lib" --add "$f" --json > /dev/null
  done
done
echo "re-lifted: $(ls "$DST")"
