"""Benchmark the gdn Triton expert against flash-linear-attention's chunk_gated_delta_rule.

Standalone (needs torch, triton and this repository on disk; fla when installed); on a CUDA
machine:

    python3 bench/bench_gdn.py --json bench/results/gdn.json --md bench/results/gdn.md

It checks correctness first (3 seeds, against the fp32 PyTorch chunked reference, for the expert
and for fla alike), then times with triton.testing.do_bench (median, L2 flushed before every
repetition) the expert, fla (when importable; otherwise the ratio is against the PyTorch chunked
reference and is no vendor comparison) and the PyTorch chunked reference in this one process,
breaks each down into its kernels (torch.profiler, 10 calls, L2 warm: bench/kernel_time.py),
and reports the two floors: FLOPs over the measured bf16 matrix rate and bytes over the
measured copy bandwidth.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import triton

ROOT = Path(__file__).resolve().parents[1]
CASE_DIR = ROOT / "experts" / "gdn"
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_fmha import (  # noqa: E402  (the sibling script holds the shared timing helpers)
    config_timings, load_module, measure_ceilings, median_ms, rel_err)
from kernel_time import kernel_rows_ms  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, help="write the results here")
    ap.add_argument("--md", type=Path, help="write a markdown table here")
    args = ap.parse_args(argv)

    case = load_module(CASE_DIR / "case.py")
    expert = load_module(CASE_DIR / "gdn_triton.py")
    shape = case.SHAPES["default"]
    fla, fla_error = case._fla_chunk_gated_delta_rule(), None
    if fla is not None:
        try:  # fla's own kernels must run on this Triton before it can be the reference
            fla(*case.make_inputs(dict(shape, T=128), 0, "cuda"))
        except Exception as exc:  # noqa: BLE001 - any failure demotes fla to "absent"
            fla, fla_error = None, repr(exc)[:500]
    tol = case.TOLERANCE[shape["dtype"]]

    checks = []
    for seed in (0, 1, 2):
        inputs = case.make_inputs(shape, seed, "cuda")
        exact = case.chunked_reference(*inputs)
        out = expert.run(*inputs)
        row = {"seed": seed, "expert_vs_fp32": rel_err(out, exact),
               "finite": bool(torch.isfinite(out).all()),
               "shape_ok": tuple(out.shape) == tuple(exact.shape)}
        if fla is not None:
            ref = case.reference(*inputs)
            row["fla_vs_fp32"] = rel_err(ref, exact)
            row["expert_vs_fla"] = rel_err(out, ref)
        checks.append(row)
    correct = all(c["shape_ok"] and c["finite"] and c["expert_vs_fp32"] <= tol for c in checks)

    inputs = case.make_inputs(shape, 0, "cuda")
    timings: dict[str, float] = {}
    breakdown: dict[str, dict[str, float]] = {}
    if fla is not None:
        timings["fla_chunk_gated_delta_rule"] = median_ms(lambda: case.reference(*inputs))
    timings["triton_expert"] = median_ms(lambda: expert.run(*inputs))
    if fla is not None:
        timings["fla_repeat"] = median_ms(lambda: case.reference(*inputs))
    timings["triton_expert_repeat"] = median_ms(lambda: expert.run(*inputs))
    timings["pytorch_chunked_fp32"] = median_ms(lambda: case.chunked_reference(*inputs))
    breakdown["triton_expert"] = kernel_rows_ms(lambda: expert.run(*inputs), 10)
    if fla is not None:
        breakdown["fla"] = kernel_rows_ms(lambda: case.reference(*inputs), 10)
        reference_name = "fla chunk_gated_delta_rule"
        reference_ms = min(timings["fla_chunk_gated_delta_rule"], timings["fla_repeat"])
    else:
        reference_name = "PyTorch chunked fp32 (not a vendor comparison)"
        reference_ms = timings["pytorch_chunked_fp32"]
    expert_ms = min(timings["triton_expert"], timings["triton_expert_repeat"])

    ceilings = measure_ceilings(torch.bfloat16)
    flop_floor_ms = case.flops(shape) / ceilings["matrix_flop_per_s"] * 1e3
    byte_floor_ms = case.bytes_moved(shape) / ceilings["copy_bytes_per_s"] * 1e3
    kernels = {"kkt_solve": expert._gdn_kkt_solve_kernel, "wy": expert._gdn_wy_kernel,
               "state": expert._gdn_state_kernel,
               "output": expert._gdn_output_kernel}
    result = {
        "case": "gdn", "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
        "triton": triton.__version__,
        "fla": getattr(sys.modules.get("fla"), "__version__", None), "fla_error": fla_error,
        "command": "python3 bench/bench_gdn.py " + " ".join(sys.argv[1:]),
        "shape": shape, "correct": correct, "checks": checks, "timings_ms": timings,
        "reference": reference_name, "reference_ms": reference_ms, "expert_ms": expert_ms,
        "speedup": reference_ms / expert_ms, "kernel_breakdown_ms": breakdown,
        "ceilings": ceilings, "flop_floor_ms": flop_floor_ms, "byte_floor_ms": byte_floor_ms,
        "fraction_of_floor": max(flop_floor_ms, byte_floor_ms) / expert_ms,
        "best_configs": {n: str(getattr(k, "best_config", None)) for n, k in kernels.items()},
        "configs": {n: config_timings(k) for n, k in kernels.items()},
    }

    lines = [
        f"# gdn on {result['gpu']} (torch {result['torch']}, triton {result['triton']}, "
        f"fla {result['fla']})",
        "",
        f"`{result['command']}`; shape {shape}; do_bench median, L2 flushed; reference: "
        f"{reference_name}.",
        "",
        "| variant | ms | vs reference |",
        "|---|---|---|",
    ]
    lines += [f"| {k} | {v:.4f} | {reference_ms / v:.2f}x |" for k, v in timings.items()]
    errs = {key: max(c[key] for c in checks) for key in checks[0] if key.endswith(("fp32", "fla"))}
    lines += [
        "",
        f"correct: {correct} (max errors {', '.join(f'{k} {v:.2e}' for k, v in errs.items())}; "
        f"tolerance {tol})",
        f"floors: FLOPs {flop_floor_ms * 1e3:.1f} us at "
        f"{ceilings['matrix_flop_per_s'] / 1e12:.0f} TFLOP/s; bytes {byte_floor_ms * 1e3:.1f} us "
        f"at {ceilings['copy_bytes_per_s'] / 1e12:.2f} TB/s; expert at "
        f"{result['fraction_of_floor']:.2f} of the floor",
    ]
    for who, rows in breakdown.items():
        lines += ["", f"## kernels of {who} (ms per call)", "", "| kernel | ms |", "|---|---|"]
        lines += [f"| {name} | {ms:.4f} |" for name, ms in rows.items()]
    for name, rows in result["configs"].items():
        lines += ["", f"## {name} kernel: best {result['best_configs'][name]}", "",
                  "| config | ms |", "|---|---|"]
        lines += [f"| {r['config']} | {r['ms']:.4f} |" for r in rows]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    if args.md:
        args.md.parent.mkdir(parents=True, exist_ok=True)
        args.md.write_text(text)
    return 0 if correct else 1


if __name__ == "__main__":
    sys.exit(main())
