"""Gate the chain of compute de-optimizations of a CUDA expert at one tier.

    python bench/cuda_deopt_device.py KERNEL CASE TIER OUT.json [PASS ...]

Removes PASS after PASS (default: wgmma, mma-intrinsics) from KERNEL with the deterministic
rules and gates every state (the expert first) against CASE at TIER; writes one record per
state (pass removed, verdict ok/stage/reason, candidate and reference ms).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import gate
import kir
from passes import get_pass


def main(argv: list[str]) -> int:
    kernel, case, tier, out = argv[:4]
    names = argv[4:] or ["wgmma", "mma-intrinsics"]
    ir = kir.parse_file(kernel)
    rows = []
    for name in [None, *names]:
        if name is not None:
            p = get_pass(name)()
            site = next(s for s in p.sites(ir) if s.present)
            ir = p.deoptimize(ir, site).ir
        v = gate.check(ir.text, "cuda", case, tier=tier, path=kernel, cache=False)
        t = v.timing
        rows.append({"removed": name, "ok": v.ok, "tier": str(getattr(v.tier, "value", v.tier)),
                     "stage": str(v.stage), "reason": (v.reason or "")[:2000],
                     "candidate_ms": getattr(t, "candidate_ms", None) if t else None,
                     "reference_ms": getattr(t, "reference_ms", None) if t else None})
        print(json.dumps(rows[-1]), flush=True)
    Path(out).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
