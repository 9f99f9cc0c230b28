#!/usr/bin/env bash
# The loop on a CPU (interpret tier): cards lifted from the gemm and fmha device lineages, admitted
# at the interpret tier on their held-out lineages (structural effect + correctness: no timing),
# then applied to conv2d's naive root (a case neither lineage came from).
#   bash bench/interpret_transfer.sh OUT [KLINEAGE]
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: interpret_transfer.sh OUT [KLINEAGE]}
K=${2:-.venv/bin/klineage}
rm -rf "$OUT" && mkdir -p "$OUT"
"$K" skills "$OUT/lib" --add bench/results/lineages/device/gemm --add bench/results/lineages/device/fmha --json > "$OUT/lift.json"
"$K" skills "$OUT/lib" --admit bench/results/lineages/device/gemm --admit bench/results/lineages/device/fmha \
  --held-out bench/results/lineages/heldout/gemm --held-out bench/results/lineages/heldout/fmha \
  --tier interpret --json > "$OUT/admission.json"
.venv/bin/python - "$OUT" <<'PY'
import sys
from lineage.graph import Lineage
lin = Lineage.load("bench/results/lineages/device/conv2d/lineage.json")
root = next(s for s in lin.states() if "root" in (lin.node(s).get("roles") or []))
open(f"{sys.argv[1]}/conv2d_root.py", "w").write(lin.node(root)["source"])
PY
"$K" optimize "$OUT/conv2d_root.py" --case conv2d --library "$OUT/lib" --tier interpret --budget-steps 4 \
  --out "$OUT/optimize" --json > "$OUT/optimize.json"
python3 -c "import json,sys; d=json.load(open('$OUT/optimize.json')); print('applied:', [(a['card'], a['rewriter']) for a in d['applied']])"
