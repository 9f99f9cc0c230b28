"""Benchmark the fmha Triton expert against scaled_dot_product_attention's flash back-end.

Standalone (needs only torch, triton and this repository on disk); run on a CUDA machine:

    python3 bench/bench_fmha.py --json bench/results/fmha.json --md bench/results/fmha.md

For each variant (causal, noncausal) it checks correctness first (3 seeds against flash SDPA,
and on one batch element against an fp32 math-path SDPA for the expert and flash alike), then
times with triton.testing.do_bench (median, L2 flushed before every repetition) the expert and
the reference in this one process, reports every autotuned config's time, and the two floors:
FLOPs over the measured fp16 matrix rate and bytes over the measured copy bandwidth.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import torch
import torch.nn.functional as F
import triton
from torch.nn.attention import SDPBackend, sdpa_kernel
from triton.testing import do_bench

ROOT = Path(__file__).resolve().parents[1]
CASE_DIR = ROOT / "experts" / "fmha"


def load_module(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def median_ms(fn) -> float:
    return float(do_bench(fn, warmup=50, rep=300, return_mode="median"))


def measure_ceilings(dtype: torch.dtype = torch.float16) -> dict[str, float]:
    """Copy bandwidth (bytes read + written per second) and dense matrix rate in `dtype`."""
    src = torch.empty(1 << 28, dtype=torch.float32, device="cuda").normal_()
    dst = torch.empty_like(src)
    copy_ms = median_ms(lambda: dst.copy_(src))
    a = torch.randn(8192, 8192, device="cuda", dtype=dtype)
    b = torch.randn(8192, 8192, device="cuda", dtype=dtype)
    mm_ms = median_ms(lambda: a @ b)
    return {
        "copy_bytes_per_s": 2 * src.numel() * 4 / (copy_ms * 1e-3),
        "matrix_flop_per_s": 2 * 8192**3 / (mm_ms * 1e-3),
    }


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.double() - ref.double()).norm() / ref.double().norm())


def config_timings(kernel) -> list[dict]:
    """Every autotuned config with its median time (ms), fastest first."""
    rows = []
    for cfg, t in getattr(kernel, "configs_timings", {}).items():
        ms = t[0] if isinstance(t, (list, tuple)) else t
        rows.append({"config": str(cfg), "ms": float(ms)})
    return sorted(rows, key=lambda r: r["ms"])


def bench_variant(case: ModuleType, expert: ModuleType, variant: str, ceilings: dict) -> dict:
    shape = case.SHAPES[variant]
    tol = case.TOLERANCE[shape["dtype"]]
    checks = []
    for seed in (0, 1, 2):
        q, k, v, causal = case.make_inputs(shape, seed, "cuda")
        out = expert.run(q, k, v, causal)
        ref = case.reference(q, k, v, causal)
        with sdpa_kernel(SDPBackend.MATH):
            exact = F.scaled_dot_product_attention(q[:1].float(), k[:1].float(), v[:1].float(),
                                                   is_causal=causal)
        checks.append({"seed": seed, "expert_vs_flash": rel_err(out, ref),
                       "expert_vs_fp32": rel_err(out[:1], exact),
                       "flash_vs_fp32": rel_err(ref[:1], exact),
                       "finite": bool(torch.isfinite(out).all()),
                       "shape_ok": tuple(out.shape) == tuple(ref.shape)})
    correct = all(c["shape_ok"] and c["finite"] and c["expert_vs_flash"] <= tol for c in checks)

    q, k, v, causal = case.make_inputs(shape, 0, "cuda")
    timings = {
        "flash_sdpa": median_ms(lambda: case.reference(q, k, v, causal)),
        "triton_expert": median_ms(lambda: expert.run(q, k, v, causal)),
    }
    timings["flash_sdpa_repeat"] = median_ms(lambda: case.reference(q, k, v, causal))
    timings["triton_expert_repeat"] = median_ms(lambda: expert.run(q, k, v, causal))
    reference_ms = min(timings["flash_sdpa"], timings["flash_sdpa_repeat"])
    expert_ms = min(timings["triton_expert"], timings["triton_expert_repeat"])
    flop_floor_ms = case.flops(shape) / ceilings["matrix_flop_per_s"] * 1e3
    byte_floor_ms = case.bytes_moved(shape) / ceilings["copy_bytes_per_s"] * 1e3
    return {
        "variant": variant, "shape": shape, "correct": correct, "checks": checks,
        "timings_ms": timings, "reference_ms": reference_ms, "expert_ms": expert_ms,
        "speedup": reference_ms / expert_ms,
        "expert_tflops": case.flops(shape) / expert_ms * 1e-9,
        "reference_tflops": case.flops(shape) / reference_ms * 1e-9,
        "flop_floor_ms": flop_floor_ms, "byte_floor_ms": byte_floor_ms,
        "fraction_of_floor": max(flop_floor_ms, byte_floor_ms) / expert_ms,
        "best_config": str(getattr(expert._attn_fwd, "best_config", None)),
        "configs": config_timings(expert._attn_fwd),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, help="write the results here")
    ap.add_argument("--md", type=Path, help="write a markdown table here")
    args = ap.parse_args(argv)

    case = load_module(CASE_DIR / "case.py")
    expert = load_module(CASE_DIR / "fmha_triton.py")
    ceilings = measure_ceilings()
    variants = [bench_variant(case, expert, name, ceilings) for name in case.SHAPES]
    result = {
        "case": "fmha", "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
        "triton": triton.__version__,
        "command": "python3 bench/bench_fmha.py " + " ".join(sys.argv[1:]),
        "ceilings": ceilings, "variants": variants,
    }
    lines = [
        f"# fmha on {result['gpu']} (torch {result['torch']}, triton {result['triton']})",
        "",
        f"`{result['command']}`; do_bench median (best of two runs each), L2 flushed; "
        f"ceilings measured: {ceilings['matrix_flop_per_s'] / 1e12:.0f} TFLOP/s fp16, "
        f"{ceilings['copy_bytes_per_s'] / 1e12:.2f} TB/s copy.",
        "",
        "| variant | expert ms | flash SDPA ms | speedup | expert TFLOP/s | SDPA TFLOP/s "
        "| FLOP floor ms | byte floor ms | fraction of floor | correct (max err vs flash) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in variants:
        err = max(c["expert_vs_flash"] for c in r["checks"])
        lines.append(
            f"| {r['variant']} | {r['expert_ms']:.3f} | {r['reference_ms']:.3f} | "
            f"{r['speedup']:.3f}x | {r['expert_tflops']:.0f} | {r['reference_tflops']:.0f} | "
            f"{r['flop_floor_ms']:.3f} | {r['byte_floor_ms']:.3f} | {r['fraction_of_floor']:.2f} | "
            f"{r['correct']} ({err:.1e}) |")
    for r in variants:
        c = r["checks"][0]
        lines += ["", f"## {r['variant']}: best config {r['best_config']}",
                  f"fp32 check (batch 0): expert {c['expert_vs_fp32']:.2e}, "
                  f"flash {c['flash_vs_fp32']:.2e}", "", "| config | ms |", "|---|---|"]
        lines += [f"| {x['config']} | {x['ms']:.4f} |" for x in r["configs"]]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    if args.md:
        args.md.parent.mkdir(parents=True, exist_ok=True)
        args.md.write_text(text)
    return 0 if all(r["correct"] for r in variants) else 1


if __name__ == "__main__":
    sys.exit(main())
