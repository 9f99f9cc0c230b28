"""Seconds of one held comparison of a large fp32 output, torch ops against one pass.

    python3 bench/fused_compare.py [--gib 8] [--repeat 3] [--out DIR]

On the GPU, for an fp32 reference of --gib GiB and an output close to it: the seconds to hold
the reference (`gate.heldcompare.hold`, without the digest a seed's reference also gets), to
judge the output against it (`heldcompare.judge` with KernelBench's allclose), and the
precision probe's error (`gate.precision.relative_error`), each with torch ops
(`KLINEAGE_GATE_FUSED=0`) and in one pass (`gate.fusedcompare`), the median of --repeat. The
figures of both paths must agree (error to 1e-9, allclose misses exactly): exit 1 when they do
not, 2 without a GPU. OUT/fused_compare.json holds the seconds and the figures.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _seconds(fn: Any, repeat: int) -> tuple[float, Any]:
    import torch

    times, result = [], None
    for _ in range(repeat):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        result = fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), result


def measure(gib: float, repeat: int) -> dict[str, Any]:
    import torch

    from gate import heldcompare, precision
    from gate.compare import new_key

    n = int(gib * 2**30) // 4
    g = torch.Generator(device="cuda").manual_seed(0)
    ref = torch.randn(n, generator=g, device="cuda")
    out = ref + 1e-4 * torch.randn(n, generator=g, device="cuda")
    out[n // 3] += 1.0  # one element KernelBench's allclose rejects
    row: dict[str, Any] = {"elements": n, "gib": round(n * 4 / 2**30, 3)}
    for name, fused in (("torch", "0"), ("fused", "1")):
        os.environ["KLINEAGE_GATE_FUSED"] = fused
        if fused == "1":
            heldcompare.warm()
        key = new_key()
        hold_s, (held, _) = _seconds(lambda: heldcompare.hold(ref, key, digest=False), repeat)
        keys = [key]

        def judge() -> Any:
            fresh = new_key()
            figures = heldcompare.judge(out, held, keys[-1], fresh, [], (1e-2, 1e-2))
            keys.append(fresh)
            return figures

        judge_s, figures = _seconds(judge, repeat)
        probe_s, probe = _seconds(lambda: precision.relative_error(out, ref), repeat)
        row[name] = {"hold_s": round(hold_s, 4), "judge_s": round(judge_s, 4),
                     "probe_s": round(probe_s, 4), "err": figures["err"],
                     "misses": figures["misses"], "at": figures["at"], "probe_err": probe}
        del held
        torch.cuda.empty_cache()
    os.environ.pop("KLINEAGE_GATE_FUSED", None)
    a, b = row["torch"], row["fused"]
    row["agree"] = (a["misses"] == b["misses"] and abs(a["err"] - b["err"]) <= 1e-9 * abs(a["err"])
                    and abs(a["probe_err"] - b["probe_err"]) <= 1e-9 * abs(a["probe_err"]))
    row["judge_saved_s"] = round(a["judge_s"] - b["judge_s"], 4)
    row["hold_saved_s"] = round(a["hold_s"] - b["hold_s"], 4)
    row["probe_saved_s"] = round(a["probe_s"] - b["probe_s"], 4)
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gib", type=float, default=8.0, help="GiB of the fp32 reference")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=None, help="folder for fused_compare.json")
    args = ap.parse_args(argv)
    try:
        import torch
    except ImportError:
        torch = None
    if torch is None or not torch.cuda.is_available():
        print("fused_compare: needs a CUDA GPU", file=sys.stderr)
        return 2
    if args.gib <= 0 or args.repeat < 1:
        print("fused_compare: --gib and --repeat must be positive", file=sys.stderr)
        return 2
    row = measure(args.gib, args.repeat)
    row["gpu"] = torch.cuda.get_device_name()
    print(json.dumps(row, indent=1))
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "fused_compare.json").write_text(json.dumps(row, indent=1) + "\n")
    return 0 if row["agree"] else 1


if __name__ == "__main__":
    sys.exit(main())
