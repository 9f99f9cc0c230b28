"""Benchmark the conv2d Triton expert against cuDNN (torch.nn.functional.conv2d, channels-last).

Standalone (needs only torch, triton and this repository on disk); run on a CUDA machine:

    python3 bench/bench_conv2d.py --json bench/results/conv2d.json --md bench/results/conv2d.md

It checks correctness first (3 seeds, against an fp32 convolution of the same fp16 inputs, for
the expert and for cuDNN alike), then times with triton.testing.do_bench (median, L2 flushed
before every repetition) the expert and the reference in this one process, reports every
autotuned config's time, and the two floors: FLOPs over the measured bf16 matrix rate and bytes
over the measured device-to-device copy bandwidth.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

import torch
import torch.nn.functional as F
import triton
from triton.testing import do_bench

from kernel_time import graph_ms

ROOT = Path(__file__).resolve().parents[1]
CASE_DIR = ROOT / "experts" / "conv2d"


def load_module(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def median_ms(fn) -> float:
    return float(do_bench(fn, warmup=50, rep=300, return_mode="median"))


def back_to_back_us(fn, calls: int = 300) -> float:
    """Wall time per call of `calls` calls issued back to back: the host's launch cost per call
    when it exceeds the GPU time (do_bench hides host time only up to its L2-flush time)."""
    fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls * 1e6


def time_variant(fn) -> dict[str, float | None]:
    """`graph_ms`: one call captured in a CUDA graph, its replay timed as `median_ms` times
    (bench/kernel_time.py): the GPU time with the host's launch work out of the picture; None
    where `fn` cannot be captured."""
    try:
        graph = graph_ms(fn, calls=1, warmup=50, rep=300)
    except Exception:  # noqa: BLE001 - capture is a diagnostic; any failure means "not capturable"
        graph = None
    return {"ms": median_ms(fn), "graph_ms": graph, "back_to_back_us": back_to_back_us(fn)}


def measure_ceilings() -> dict[str, float]:
    """Copy bandwidth (bytes read + written per second) and bf16 dense matrix rate, measured."""
    src = torch.empty(1 << 28, dtype=torch.float32, device="cuda").normal_()
    dst = torch.empty_like(src)
    copy_ms = median_ms(lambda: dst.copy_(src))
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
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


def emit(result: dict, lines: list[str], json_path: Path | None, md_path: Path | None) -> None:
    """Print the markdown report and write it and the JSON result where asked."""
    text = "\n".join(lines) + "\n"
    print(text)
    for path, content in ((json_path, json.dumps(result, indent=2) + "\n"), (md_path, text)):
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content)


# Source-level variants of the expert timed beside it (exploration: kept only if they win).
A_LOAD = "a = tl.load(a_ptrs, mask=row_ok[:, None], other=0.0)"
B_LOAD = "b = tl.load(b_ptrs)"
VARIANTS = {
    "a_via_l1": [(A_LOAD, A_LOAD[:-1] + ', cache_modifier=".ca")')],
    "ab_via_l1": [(A_LOAD, A_LOAD[:-1] + ', cache_modifier=".ca")'), (B_LOAD, B_LOAD[:-1] + ', cache_modifier=".ca")')],
}


def load_variant(source: str, edits: list[tuple[str, str]], folder: Path, name: str) -> ModuleType:
    for old, new in edits:
        if old not in source:
            raise ValueError(f"variant {name}: {old!r} not in the expert")
        source = source.replace(old, new)
    path = folder / f"conv2d_{name}.py"
    path.write_text(source)
    return load_module(path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, help="write the results here")
    ap.add_argument("--md", type=Path, help="write a markdown table here")
    ap.add_argument("--no-variants", action="store_true", help="time the expert only")
    args = ap.parse_args(argv)

    case = load_module(CASE_DIR / "case.py")
    expert_path = CASE_DIR / "conv2d_triton.py"
    modules = {"triton_expert": load_module(expert_path)}
    scratch = Path(tempfile.mkdtemp(prefix="bench_conv2d_"))
    if not args.no_variants:
        for name, edits in VARIANTS.items():
            modules[f"triton_{name}"] = load_variant(expert_path.read_text(), edits, scratch, name)
    shape = case.SHAPES["default"]
    tol = case.TOLERANCE[shape["dtype"]]

    # The exact reference is a true fp32 convolution, not TF32 (cuDNN's default for fp32).
    torch.backends.cudnn.allow_tf32 = False
    checks = []
    for seed in (0, 1, 2):
        x, w = case.make_inputs(shape, seed, "cuda")
        exact = F.conv2d(x.float(), w.float(), padding=(w.shape[2] // 2, w.shape[3] // 2))
        ref = case.reference(x, w)
        for name, module in modules.items():
            out = module.run(x, w)
            checks.append({"seed": seed, "variant": name, "err": rel_err(out, exact),
                           "cudnn_err": rel_err(ref, exact), "shape_ok": tuple(out.shape) == tuple(ref.shape)})
    correct = all(c["shape_ok"] and c["err"] <= tol for c in checks)

    x, w = case.make_inputs(shape, 0, "cuda")
    pad = (w.shape[2] // 2, w.shape[3] // 2)
    timings: dict[str, dict] = {}
    torch.backends.cudnn.benchmark = False
    timings["cudnn_nhwc_default"] = time_variant(lambda: case.reference(x, w))
    torch.backends.cudnn.benchmark = True
    timings["cudnn_nhwc_benchmark"] = time_variant(lambda: case.reference(x, w))
    xn, wn = x.contiguous(), w.contiguous()
    timings["cudnn_nchw_benchmark"] = time_variant(lambda: F.conv2d(xn, wn, padding=pad))
    torch.backends.cudnn.benchmark = False
    for name, module in modules.items():
        timings[name] = time_variant(lambda module=module: module.run(x, w))
    timings["triton_expert_repeat"] = time_variant(lambda: modules["triton_expert"].run(x, w))
    reference_ms = min(timings["cudnn_nhwc_default"]["ms"], timings["cudnn_nhwc_benchmark"]["ms"])
    expert_ms = timings["triton_expert"]["ms"]

    ceilings = measure_ceilings()
    flop_floor_ms = case.flops(shape) / ceilings["matrix_flop_per_s"] * 1e3
    byte_floor_ms = case.bytes_moved(shape) / ceilings["copy_bytes_per_s"] * 1e3
    floor_ms = max(flop_floor_ms, byte_floor_ms)
    kernel = modules["triton_expert"].conv2d_nhwc_kernel
    result = {
        "case": "conv2d",
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "command": "python3 bench/bench_conv2d.py " + " ".join(sys.argv[1:]),
        "shape": shape,
        "correct": correct,
        "checks": checks,
        "timings": timings,
        "reference_ms": reference_ms,
        "expert_ms": expert_ms,
        "speedup": reference_ms / expert_ms,
        "ceilings": ceilings,
        "flop_floor_ms": flop_floor_ms,
        "byte_floor_ms": byte_floor_ms,
        "fraction_of_floor": floor_ms / expert_ms,
        "best_config": str(getattr(kernel, "best_config", None)),
        "configs": {name: config_timings(m.conv2d_nhwc_kernel) for name, m in modules.items()},
    }

    lines = [
        f"# conv2d on {result['gpu']} (torch {result['torch']}, triton {result['triton']})",
        "",
        f"`{result['command']}`; shape {shape}. ms: do_bench median, L2 flushed; graph ms: the same",
        "replayed from a CUDA graph (GPU time only); b2b us: wall time per call issued back to back.",
        "",
        "| variant | ms | vs best cuDNN | graph ms | b2b us |",
        "|---|---|---|---|---|",
    ]
    for name, t in timings.items():
        g = "-" if t["graph_ms"] is None else f"{t['graph_ms']:.4f}"
        lines.append(f"| {name} | {t['ms']:.4f} | {reference_ms / t['ms']:.2f}x | {g} | {t['back_to_back_us']:.1f} |")
    lines += [
        "",
        f"correct: {correct} (max expert err {max(c['err'] for c in checks):.2e}, "
        f"cuDNN err {max(c['cudnn_err'] for c in checks):.2e}, tolerance {tol})",
        f"floors: FLOPs {flop_floor_ms * 1e3:.2f} us at {ceilings['matrix_flop_per_s'] / 1e12:.0f} TFLOP/s; "
        f"bytes {byte_floor_ms * 1e3:.2f} us at {ceilings['copy_bytes_per_s'] / 1e12:.2f} TB/s; "
        f"expert at {result['fraction_of_floor']:.2f} of the floor",
        f"best config: {result['best_config']}",
    ]
    for name, rows in result["configs"].items():
        lines += ["", f"| {name} config | ms |", "|---|---|"]
        lines += [f"| {r['config']} | {r['ms']:.4f} |" for r in rows]
    emit(result, lines, args.json, args.md)
    return 0 if correct else 1


if __name__ == "__main__":
    sys.exit(main())
