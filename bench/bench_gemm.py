"""Benchmark of the gemm experts against cuBLAS (torch.matmul) on the current GPU.

Standalone (needs torch with CUDA, triton, cuda-python); run from the repository root:

    python3 bench/bench_gemm.py --out bench/results/gemm.json

For every variant it checks correctness against an fp32 product of the same inputs at the
case shape (3 seeds) and at a ragged shape (tile edges), then times it with
`triton.testing.do_bench` (median) in the same process as cuBLAS. It also measures the two
ceilings (bf16 matrix rate through cuBLAS at 8192^3, device-to-device copy bandwidth) and
reports each variant's floor and fraction of floor. Prints a table; writes JSON to --out.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from pathlib import Path
from typing import Callable

import torch
import triton
import triton.testing

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from experts.gemm import case, gemm_cuda, gemm_triton  # noqa: E402
from lineage.commands.bench import measure_ceilings  # noqa: E402

Fn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.float() - ref).norm() / ref.norm())


def check(fn: Fn, shape: dict, seeds: tuple[int, ...]) -> float:
    """Worst relative error over seeds; raises if the output has the wrong shape or NaNs."""
    worst = 0.0
    for seed in seeds:
        a, b = case.make_inputs(shape, seed, "cuda")
        ref = a.float() @ b.float()
        out = fn(a, b)
        torch.cuda.synchronize()
        if out.shape != ref.shape:
            raise RuntimeError(f"shape {tuple(out.shape)} != {tuple(ref.shape)}")
        err = rel_err(out, ref)
        if err != err:
            raise RuntimeError("NaN in output")
        worst = max(worst, err)
    return worst


def markdown(result: dict) -> str:
    """The results as markdown: GPU, command, ceilings, floors and one row per variant."""
    c = result["ceilings"]
    shape = result["shape"]
    lines = [
        f"# gemm: experts vs cuBLAS on {result['gpu']}", "",
        f"Command: `{result['command']}` (torch {result['torch']}, triton {result['triton']}).", "",
        f"Shape M={shape['M']} N={shape['N']} K={shape['K']} {shape['dtype']}. Measured ceilings: bf16 matrix "
        f"{c['matrix_tflops']:.0f} TFLOP/s (cuBLAS 8192^3), copy {c['copy_tbs']:.2f} TB/s. "
        f"Floor = max(FLOPs / matrix rate, bytes / copy bandwidth) = {result['floor_ms']:.4f} ms "
        "(the FLOP term; the byte term is ~0.024 ms).", "",
        "Errors are ||out - ref|| / ||ref|| against an fp32 product of the same inputs (worst of 3 seeds; "
        "`ragged` is M=1000 N=1032 K=520 bf16). Times are `do_bench` medians, two runs.", "",
        "| variant | err | err ragged | ms | ms (again) | TFLOP/s | x cuBLAS | fraction of floor |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, row in result["variants"].items():
        if "error" in row:
            lines.append(f"| {name} | error: {row['error'][:100]} | | | | | | |")
            continue
        lines.append(f"| {name} | {row['err']:.2e} | {row['err_ragged']:.2e} | {row.get('ms', float('nan')):.4f} | "
                     f"{row.get('ms_repeat', float('nan')):.4f} | {row.get('tflops', float('nan')):.1f} | "
                     f"{row.get('speedup', float('nan')):.3f} | {row.get('fraction_of_floor', float('nan')):.3f} |")
    lines += ["", f"Triton autotune picks: {result.get('triton_best_configs')}", "",
              f"CUDA kernels (ptxas): {result.get('cuda_resources')}", ""]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="bench/results/gemm.json")
    parser.add_argument("--only", default="", help="comma-separated variants (cublas always runs)")
    parser.add_argument("--once", default="", help="run this variant once at the case shape and exit (profilers)")
    parser.add_argument("--cubin", default="", help="write the CUDA expert's cubin here")
    parser.add_argument("--wgmma-defines", default="", help="NAME=VALUE,... for gemm_cuda.cu")
    parser.add_argument("--render", default="", help="write the markdown of an existing JSON result and exit")
    args = parser.parse_args()
    if args.render:
        src = Path(args.render)
        src.with_suffix(".md").write_text(markdown(json.loads(src.read_text())))
        return 0
    torch.backends.cuda.matmul.allow_tf32 = False
    defines = dict(kv.split("=", 1) for kv in args.wgmma_defines.split(",") if kv)

    shape = case.SHAPES["default"]
    ragged = {"M": 1000, "N": 1032, "K": 520, "dtype": "bf16"}
    ragged16 = {"M": 200, "N": 264, "K": 136, "dtype": "fp16"}
    tol = case.TOLERANCE[shape["dtype"]]
    variants: dict[str, Fn] = {
        "cublas": torch.matmul,
        "triton": gemm_triton.run,
        # Ordered so that a kernel that faults (and poisons the CUDA context) runs last.
        "cuda_mma": lambda a, b: gemm_cuda.matmul(a, b, "mma"),
        "cuda_wgmma": lambda a, b: gemm_cuda.matmul(a, b, "wgmma", defines or None),
        "cuda_wgmma_per_tile": lambda a, b: gemm_cuda.matmul(a, b, "wgmma", defines or None, persistent=False),
        "cuda_wgmma_depth0": lambda a, b: gemm_cuda.matmul(a, b, "wgmma", {"WG_WAIT_DEPTH": 0}),
        "cuda_wgmma_stages3": lambda a, b: gemm_cuda.matmul(a, b, "wgmma", {"WG_STAGES": 3}),
    }
    # Alternative B-descriptor offsets, checked only for correctness diagnostics.
    alt = {"WG_B_LBO": 1024, "WG_B_SBO": 64 * 128}
    if "cuda_wgmma_swapped" in args.only:
        variants["cuda_wgmma_swapped"] = lambda a, b: gemm_cuda.matmul(a, b, "wgmma", alt)

    if args.cubin:
        compiled = gemm_cuda.compile_kernels(defines=defines or None)
        Path(args.cubin).write_bytes(compiled.cubin or b"")
    if args.once:
        a, b = case.make_inputs(shape, 0, "cuda")
        variants[args.once](a, b)
        torch.cuda.synchronize()
        return 0
    if args.only:
        keep = {"cublas", *args.only.split(",")}
        variants = {k: v for k, v in variants.items() if k in keep}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    props = torch.cuda.get_device_properties(0)
    result: dict = {
        "gpu": torch.cuda.get_device_name(0), "sms": props.multi_processor_count,
        "torch": torch.__version__, "triton": triton.__version__,
        "command": "python3 " + " ".join(sys.argv), "case": case.NAME, "shape": shape,
        "ceilings": measure_ceilings(), "variants": {},
    }
    flops, nbytes = case.flops(shape), case.bytes_moved(shape)
    ceil = result["ceilings"]
    floor_ms = max(flops / (ceil["matrix_tflops"] * 1e12), nbytes / (ceil["copy_tbs"] * 1e12)) * 1e3
    result["floor_ms"] = floor_ms
    a, b = case.make_inputs(shape, 0, "cuda")

    for name, fn in variants.items():
        row: dict = {}
        t0 = time.time()
        try:
            row["err"] = check(fn, shape, (0, 1, 2))
            row["err_ragged"] = check(fn, ragged, (3,))
            row["err_ragged_fp16"] = check(fn, ragged16, (4,))
            row["correct"] = row["err"] <= tol and row["err_ragged"] <= tol and \
                row["err_ragged_fp16"] <= case.TOLERANCE["fp16"]
            if row["correct"] or name == "cublas":
                row["ms"] = triton.testing.do_bench(lambda: fn(a, b), warmup=50, rep=300, return_mode="median")
                row["ms_repeat"] = triton.testing.do_bench(lambda: fn(a, b), warmup=10, rep=300, return_mode="median")
                row["tflops"] = flops / (row["ms"] * 1e-3) / 1e12
        except Exception as exc:  # one broken variant must not hide the others' numbers
            row["error"] = f"{type(exc).__name__}: {exc}"
            row["traceback"] = traceback.format_exc()[-2000:]
            torch.cuda.synchronize()
        row["seconds"] = time.time() - t0
        result["variants"][name] = row
        # Written after every variant: a kernel that hangs still leaves the others' numbers.
        out.write_text(json.dumps(result, indent=2))
        print(f"done {name}: {({k: v for k, v in row.items() if k != 'traceback'})}", flush=True)

    ref_ms = result["variants"]["cublas"].get("ms")
    for name, row in result["variants"].items():
        if ref_ms and row.get("ms"):
            row["speedup"] = ref_ms / row["ms"]
            row["fraction_of_floor"] = floor_ms / row["ms"]
    kern = gemm_triton.matmul_kernel_tma_persistent
    result.setdefault("triton_best_configs", {})["matmul_kernel_tma_persistent"] = \
        str(getattr(kern, "best_config", None))
    try:
        compiled = gemm_cuda.compile_kernels()
        result["cuda_resources"] = compiled.resources()
    except Exception as exc:
        result["cuda_resources"] = f"{exc}"

    out.write_text(json.dumps(result, indent=2))
    out.with_suffix(".md").write_text(markdown(result))
    print(f"GPU {result['gpu']}  matrix {ceil['matrix_tflops']:.0f} TFLOP/s  copy {ceil['copy_tbs']:.2f} TB/s"
          f"  floor {floor_ms:.4f} ms")
    print(f"{'variant':24} {'err':>9} {'ragged':>9} {'ms':>8} {'ms2':>8} {'TFLOP/s':>8} {'x cuBLAS':>8}")
    for name, row in result["variants"].items():
        if "error" in row:
            print(f"{name:24} ERROR {row['error'][:150]}")
            continue
        print(f"{name:24} {row['err']:9.2e} {row['err_ragged']:9.2e} {row.get('ms', float('nan')):8.4f} "
              f"{row.get('ms_repeat', float('nan')):8.4f} {row.get('tflops', float('nan')):8.1f} "
              f"{row.get('speedup', float('nan')):8.3f}")
    print("best configs:", result["triton_best_configs"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
