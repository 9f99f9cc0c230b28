"""A user's shared-memory tiled GEMM before and after `mma-micro-kernel`, against cuBLAS, in one
process on one GPU.

    python3 bench/mma_micro_kernel.py --out OUT_DIR                 # on a GPU (sm_80+)
    python3 bench/mma_micro_kernel.py --out OUT_DIR --dry           # rewrite + compile only

The start kernel (default: tests/data/microkernels/blocktile_bf16.cu, a tutorial-style 2-D
block-tiling GEMM with scalar FMAs) takes `(M, N, K, alpha, A, B, beta, C)` and is launched on
a (N / BN, M / BM) grid of the block the rule reports. The rule's output is compiled with NVRTC
beside it; both are checked against an fp32 product at the timed shape and at a ragged one, then
cuBLAS (torch.matmul), the start, the rewrite and experts/gemm/gemm_cuda_tiles (a tutorial-style
GEMM with 16-byte staging in the rule's form) are timed with
`triton.testing.do_bench(..., return_mode="median")` (cuBLAS first and again last). On sm_90a
the rule's wgmma form (`+wgmma`) is timed beside its mma.sync form (`+mma`). `+stage16` is the
start with its 2-byte staging loops copying 16 bytes per thread (`passes.cuda.stage_vector`),
timed alone and under the rule (`+stage16+mma`, `+stage16+wgmma`) and, where
cp-async-pipeline takes that, pipelined (`+stage16+mma+cp.async`; its refusal is recorded). `--bk N`
also times the start and its rewrite with the start's BK macro set to N (what a tile-size move
would add). Writes result.json, result.md and the rewritten sources into --out.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import kir  # noqa: E402
from experts import cudahost  # noqa: E402
from passes import PassContext, get_pass  # noqa: E402
from passes.cuda.stage_vector import vectorize_all  # noqa: E402

START = ROOT / "tests" / "data" / "microkernels" / "blocktile_bf16.cu"


def rewrite(source: str, arch: str, wgmma: bool = False) -> tuple[str, dict[str, Any]] | str:
    """The rule's output for `source` and the site it used, or the rule's refusal."""
    return apply(source, get_pass("mma-micro-kernel").from_options({"wgmma": wgmma}), arch)


def apply(source: str, rule: Any, arch: str) -> tuple[str, dict[str, Any]] | str:
    """`rule`'s output at its first open site of `source` and the site's detail, or why not."""
    ir = kir.parse(source, "cuda")
    sites = [s for s in rule.sites(ir) if not s.present]
    if not sites:
        return f"{rule.name} finds no site in the kernel"
    result = rule.optimize(ir, sites[0], PassContext(facts={"arch": arch}))
    if not result.ok:
        return f"{rule.name} refused: {getattr(result, 'reason', result)}"
    return result.ir.text, dict(sites[0].detail)


def variants(start: str, bks: list[int]) -> dict[str, str]:
    out = {"start": start}
    for bk in bks:
        text, n = re.subn(r"(#define\s+BK\s+)\d+", rf"\g<1>{bk}", start)
        if n != 1:
            raise SystemExit("--bk needs a start kernel with one `#define BK` line")
        out[f"start_bk{bk}"] = text
    return out


def tensor_core_forms(out: Path, name: str, text: str,
                      kernels: dict[str, tuple[str, dict[str, Any]]], refused: dict[str, str],
                      arch: str, ctx_arch: str) -> dict[str, Any] | None:
    """`name+mma` (and `name+wgmma` on sm_90) of `text` into `kernels` (files NAME.FORM.cu in
    `out`, `+` written `.`), refusals into `refused`; the detail of the site the rule used."""
    site = None
    for form, wgmma in (("mma", False), ("wgmma", True)):
        if wgmma and not arch.startswith("sm_90"):
            continue
        got = rewrite(text, ctx_arch, wgmma)
        if isinstance(got, str):
            refused[f"{name}+{form}"] = got
            print(f"{name}+{form}: {got}", flush=True)
            continue
        (out / f"{name.replace('+', '.')}.{form}.cu").write_text(got[0])
        kernels[f"{name}+{form}"] = got
        site = site or got[1]
    return site


def staged_variants(out: Path, name: str, kernels: dict[str, tuple[str, dict[str, Any]]],
                    refused: dict[str, str], arch: str, ctx_arch: str) -> None:
    """`name+stage16` (passes.cuda.stage_vector: 16-byte staging copies, on the block the
    mma rule reported), then its mma / wgmma rewrites and, on the mma.sync form,
    cp-async-pipeline; what refuses is recorded in `refused`."""
    text, detail = kernels[name]
    staged, why = vectorize_all(kir.parse(text, "cuda"), tuple(detail["block"]))
    if staged == text:
        refused[f"{name}+stage16"] = "; ".join(why) or "no 2-byte staging loop"
        print(f"{name}+stage16: {refused[f'{name}+stage16']}", flush=True)
        return
    (out / f"{name}.stage16.cu").write_text(staged)
    kernels[f"{name}+stage16"] = (staged, detail)
    tensor_core_forms(out, f"{name}+stage16", staged, kernels, refused, arch, ctx_arch)
    if f"{name}+stage16+mma" in kernels:
        piped = apply(kernels[f"{name}+stage16+mma"][0], get_pass("cp-async-pipeline")(), ctx_arch)
        if isinstance(piped, str):
            refused[f"{name}+stage16+mma+cp.async"] = piped
            print(f"{name}+stage16+mma+cp.async: {piped}", flush=True)
        else:
            (out / f"{name}.stage16.mma.cp_async.cu").write_text(piped[0])
            kernels[f"{name}+stage16+mma+cp.async"] = (piped[0], detail)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--start", type=Path, default=START)
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--bk", type=int, action="append", default=[])
    ap.add_argument("--dry", action="store_true", help="rewrite and compile only (no GPU)")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    arch = "sm_90a" if args.dry else cudahost.default_arch()
    kernels: dict[str, tuple[str, dict[str, Any]]] = {}
    refused: dict[str, str] = {}
    ctx_arch = "sm_90" if arch.startswith("sm_9") else arch.split("a")[0]
    for name, text in variants(args.start.read_text(), args.bk).items():
        (args.out / f"{name}.cu").write_text(text)
        site = tensor_core_forms(args.out, name, text, kernels, refused, arch, ctx_arch)
        if site is not None:
            kernels[name] = (text, site)
        if name in kernels:
            staged_variants(args.out, name, kernels, refused, arch, ctx_arch)
    compiled = {}
    for name, (text, _) in kernels.items():
        c = cudahost.compile_source(text, name=f"{name}.cu", arch=arch)
        compiled[name] = c
        print(f"compiled {name}: {c.resources()}", flush=True)
    record: dict[str, Any] = {"start": str(args.start), "size": args.size, "arch": arch,
                              "kernels": {n: d for n, (_, d) in kernels.items()},
                              "refused": refused}
    if args.dry:
        (args.out / "result.json").write_text(json.dumps(record, indent=2))
        print("dry run: every variant compiled")
        return 0
    return _measure(args, kernels, compiled, record)


def _measure(args: argparse.Namespace, kernels: dict[str, tuple[str, dict[str, Any]]],
             compiled: dict[str, Any], record: dict[str, Any]) -> int:
    import torch
    from triton.testing import do_bench

    torch.manual_seed(0)
    stream = torch.cuda.current_stream()

    def launcher(name: str) -> Any:
        detail = kernels[name][1]
        bm, bn, _ = detail["block_tile"]
        func = cudahost.get_function(compiled[name], detail["kernel"])

        def run(a: Any, b: Any, c: Any) -> Any:
            m, k = a.shape
            n = b.shape[1]
            grid = ((n + bn - 1) // bn, (m + bm - 1) // bm)
            cudahost.launch(func, grid, tuple(detail["block"]), 0,
                            [m, n, k, 1.0, a, b, 0.0, c], stream)
            return c
        return run

    checks: dict[str, Any] = {}
    for name in kernels:
        run = launcher(name)
        errs = []
        for m, n, k in ((args.size, args.size, args.size), (1000, 1032, 520)):
            a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
            c = torch.zeros(m, n, device="cuda", dtype=torch.bfloat16)
            want = a.float() @ b.float()
            got = run(a, b, c).float()
            errs.append(((got - want).abs().max() / want.abs().max()).item())
        checks[name] = errs
        print(f"check {name}: max rel err {max(errs):.2e}", flush=True)
    s = args.size
    a = torch.randn(s, s, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(s, s, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(s, s, device="cuda", dtype=torch.bfloat16)
    times: dict[str, float] = {}
    times["cublas"] = do_bench(lambda: torch.matmul(a, b), return_mode="median")
    for name in kernels:
        run = launcher(name)
        try:
            times[name] = do_bench(lambda: run(a, b, c), return_mode="median")
        except Exception:  # noqa: BLE001 — one variant failing must not lose the others
            traceback.print_exc()
            times[name] = float("nan")
    # the tutorial-style expert in the rule's form (16-byte staging, padded 128x128x32 tiles)
    from experts.gemm import gemm_cuda_tiles  # noqa: PLC0415

    want = a.float() @ b.float()
    checks["gemm_cuda_tiles"] = [((gemm_cuda_tiles.run(a, b).float() - want).abs().max()
                                  / want.abs().max()).item()]
    times["gemm_cuda_tiles"] = do_bench(lambda: gemm_cuda_tiles.run(a, b), return_mode="median")
    times["cublas_again"] = do_bench(lambda: torch.matmul(a, b), return_mode="median")
    cublas = min(times["cublas"], times["cublas_again"])
    flops = 2.0 * s ** 3
    record.update({"device": torch.cuda.get_device_name(), "checks": checks, "ms": times,
                   "vs_cublas": {n: cublas / t for n, t in times.items()},
                   "tflops": {n: flops / t / 1e9 for n, t in times.items()},
                   "when": time.strftime("%Y-%m-%d %H:%M:%S")})
    (args.out / "result.json").write_text(json.dumps(record, indent=2))
    lines = [f"# {args.start.name} at {s}^3 bf16 on {record['device']}", "",
             "| kernel | ms | TFLOP/s | vs cuBLAS | max rel err |", "|---|---:|---:|---:|---:|"]
    for name, t in times.items():
        err = max(checks[name]) if name in checks else 0.0
        lines.append(f"| {name} | {t:.3f} | {flops / t / 1e9:.0f} | {cublas / t:.3f} | {err:.1e} |")
    (args.out / "result.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
