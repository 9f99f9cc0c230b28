"""Sweep of the CUDA gemm expert's tuning macros against cuBLAS, in one process on one GPU.

    python3 bench/cuda_gemm_sweep.py --out OUT_DIR          # on a Hopper GPU
    python3 bench/cuda_gemm_sweep.py --out OUT_DIR --dry    # compile every variant, no GPU

Each variant is a `defines` dict for experts/gemm/gemm_cuda.cu (the macros it overrides). On
the GPU: cuBLAS (torch.matmul) is timed first and again last, each variant between, all with
`triton.testing.do_bench(..., return_mode="median")`; every variant's output is checked against
an fp32 product at the timed shape and at ragged bf16/fp16 shapes (tile edges). `--dry` only
compiles (NVRTC, sm_90a) and reports ptxas registers/spills and the shared memory each variant
asks for. Writes sweep.json and sweep.md into --out.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from experts.gemm import gemm_cuda  # noqa: E402

# Hopper's per-block opt-in shared-memory limit (227 KiB); a variant above it cannot launch.
SMEM_LIMIT = 232448

# The space: one defines dict per variant; {} is the .cu's current default.
VARIANTS: dict[str, dict[str, int]] = {
    "default": {},
    "registers_group8": {"WG_EPILOGUE": 0, "GROUP_M": 8},  # the default before this sweep
    "epi_tma": {"WG_EPILOGUE": 1},
    "epi_v16": {"WG_EPILOGUE": 2},
    "stages3": {"WG_STAGES": 3},
    "stages5": {"WG_STAGES": 5},
    "depth0": {"WG_WAIT_DEPTH": 0},
    "group4": {"GROUP_M": 4},
    "group16": {"GROUP_M": 16},
    "raster_n": {"TILE_RASTER": 1},
    "raster_n_group16": {"TILE_RASTER": 1, "GROUP_M": 16},
    "epi_tma_stages3": {"WG_EPILOGUE": 1, "WG_STAGES": 3},
    "epi_tma_depth0": {"WG_EPILOGUE": 1, "WG_WAIT_DEPTH": 0},
    "epi_tma_group16": {"WG_EPILOGUE": 1, "GROUP_M": 16},
    "epi_tma_raster_n": {"WG_EPILOGUE": 1, "TILE_RASTER": 1},
    "epi_v16_group16": {"WG_EPILOGUE": 2, "GROUP_M": 16},
}
RAGGED = ((1000, 1032, 520, torch.bfloat16), (200, 264, 136, torch.float16))
MAX_ERR = 1e-2  # bf16 output rounding gives ~2e-3 at K=4096


def compile_report(defines: dict[str, int]) -> dict[str, Any]:
    """Shared memory, and the wgmma kernels' ptxas resources and warnings, for one variant."""
    compiled = gemm_cuda.compile_kernels(arch="sm_90a", defines=defines or None)
    resources = {k: v for k, v in compiled.resources().items() if k.startswith("gemm_wgmma")}
    warnings = sorted({w for w in ("C7508", "C7515", "C7510") if w in compiled.log})
    smem = gemm_cuda.wgmma_smem_bytes(defines)
    return {"defines": defines, "smem": smem, "fits": smem <= SMEM_LIMIT,
            "resources": resources, "warnings": warnings}


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.float() - ref).norm() / ref.norm())


def check(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
          shapes: tuple[tuple[int, int, int, torch.dtype], ...]) -> list[float]:
    errs = []
    for m, n, k, dtype in shapes:
        gen = torch.Generator(device="cuda").manual_seed(m + n + k)
        a = torch.randn(m, k, device="cuda", dtype=dtype, generator=gen)
        b = torch.randn(k, n, device="cuda", dtype=dtype, generator=gen)
        errs.append(rel_err(fn(a, b), a.float() @ b.float()))
    return errs


def bench(fn: Callable[[], Any]) -> float:
    import triton.testing
    return float(triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median"))


def run_gpu(sizes: list[int], reports: dict[str, dict[str, Any]]) -> dict[str, Any]:
    torch.backends.cuda.matmul.allow_tf32 = False
    result: dict[str, Any] = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "sizes": {}}
    for size in sizes:
        gen = torch.Generator(device="cuda").manual_seed(0)
        a = torch.randn(size, size, device="cuda", dtype=torch.bfloat16, generator=gen)
        b = torch.randn(size, size, device="cuda", dtype=torch.bfloat16, generator=gen)
        ref = a.float() @ b.float()
        flops = 2.0 * size ** 3
        rows: dict[str, dict[str, Any]] = {}
        cublas_ms = bench(lambda: torch.matmul(a, b))
        rows["cublas"] = {"ms": cublas_ms, "err": rel_err(torch.matmul(a, b), ref)}
        for name, report in reports.items():
            row: dict[str, Any] = {"defines": report["defines"]}
            rows[name] = row
            if not report["fits"]:
                row["error"] = f"needs {report['smem']} B of shared memory > {SMEM_LIMIT}"
                continue
            defines = report["defines"] or None

            def fn(x: torch.Tensor, y: torch.Tensor, d: dict | None = defines) -> torch.Tensor:
                return gemm_cuda.matmul(x, y, "wgmma", d)
            try:
                row["err"] = rel_err(fn(a, b), ref)
                if size == sizes[0]:
                    row["err_ragged"] = max(check(fn, RAGGED))
                row["ms"] = bench(lambda: fn(a, b))
            except Exception as exc:  # a faulting variant poisons the context: stop here
                row["error"] = f"{type(exc).__name__}: {exc}"
                traceback.print_exc()
                break
        again = bench(lambda: torch.matmul(a, b))
        rows["cublas"]["ms_again"] = again
        base = min(cublas_ms, again)
        for row in rows.values():
            if "ms" in row:
                row["tflops"] = flops / row["ms"] / 1e9
                row["x_cublas"] = base / row["ms"]
                row["ok"] = row.get("err", 1.0) < MAX_ERR and row.get("err_ragged", 0.0) < MAX_ERR
        result["sizes"][str(size)] = rows
        del a, b, ref
        torch.cuda.empty_cache()
    return result


def markdown(result: dict[str, Any], reports: dict[str, dict[str, Any]]) -> str:
    lines = [f"# CUDA gemm expert sweep on {result.get('gpu', 'no GPU (--dry)')}", "",
             f"Command: `{result['command']}`. bf16, square sizes; `x cuBLAS` uses the faster of "
             "cuBLAS's two timings (first and last); errors are relative Frobenius norms against "
             f"an fp32 product; ok = both below {MAX_ERR}.", ""]
    lines += ["| variant | defines | smem B | regs | spills | warnings |", "|---|---|---:|---:|---:|---|"]
    for name, rep in reports.items():
        res = rep["resources"].get("gemm_wgmma_bf16", {})
        lines.append(f"| {name} | {rep['defines']} | {rep['smem']}{'' if rep['fits'] else ' (too big)'} | "
                     f"{res.get('registers', '?')} | {res.get('spill_stores', '?')} | {', '.join(rep['warnings'])} |")
    for size, rows in result.get("sizes", {}).items():
        lines += ["", f"## {size}^3", "", "| variant | err | err ragged | ms | TFLOP/s | x cuBLAS | ok |",
                  "|---|---:|---:|---:|---:|---:|---|"]
        for name, row in rows.items():
            if "error" in row:
                lines.append(f"| {name} | error: {row['error'][:120]} | | | | | |")
                continue
            ms = f"{row['ms']:.4f}" + (f" / {row['ms_again']:.4f}" if "ms_again" in row else "")
            lines.append(f"| {name} | {row.get('err', float('nan')):.2e} | {row.get('err_ragged', float('nan')):.2e} | "
                         f"{ms} | {row.get('tflops', float('nan')):.1f} | {row.get('x_cublas', float('nan')):.3f} | "
                         f"{row.get('ok', '')} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True, help="directory for sweep.json and sweep.md")
    parser.add_argument("--dry", action="store_true", help="only compile every variant (no GPU)")
    parser.add_argument("--big", action="store_true", help="also time 8192^3")
    parser.add_argument("--only", default="", help="comma-separated variant names")
    args = parser.parse_args()
    names = [n for n in args.only.split(",") if n] or list(VARIANTS)
    start = time.perf_counter()
    reports = {name: compile_report(VARIANTS[name]) for name in names}
    result: dict[str, Any] = {"command": "python3 " + " ".join(sys.argv), "compile_s": time.perf_counter() - start}
    if not args.dry:
        result.update(run_gpu([4096, 8192] if args.big else [4096], reports))
    result["reports"] = reports
    result["total_s"] = time.perf_counter() - start
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "sweep.json").write_text(json.dumps(result, indent=1))
    text = markdown(result, reports)
    (out / "sweep.md").write_text(text)
    print(text)
    print(f"total {result['total_s']:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
