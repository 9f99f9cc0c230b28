"""Benchmark the topk experts (Triton and CUDA C++) against torch.topk.

Standalone (torch, triton, cuda-python and this repository on disk); run on a CUDA machine:

    python3 bench/bench_topk.py --json bench/results/topk.json --md bench/results/topk.md

Correctness first, under the case's own rule (`case.compare`: values equal position by
position, indices point at them, no repeats), on 3 random seeds and on a row full of ties; then
do_bench medians (L2 flushed before every repetition) of torch.topk and of every expert variant
(the CUDA kernel at several block sizes, every autotuned Triton config), in this one process,
with the two floors (bytes over the measured copy bandwidth; selection has no matrix work).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import triton

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_conv2d import config_timings, emit, load_module, measure_ceilings, time_variant  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CASE_DIR = ROOT / "experts" / "topk"
CUDA_BLOCKS = (256, 512, 1024)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, help="write the results here")
    ap.add_argument("--md", type=Path, help="write a markdown table here")
    args = ap.parse_args(argv)

    sys.path.insert(0, str(ROOT))  # the CUDA host module imports experts.cudahost
    case = load_module(CASE_DIR / "case.py")
    triton_expert = load_module(CASE_DIR / "topk_triton.py")
    cuda_expert = load_module(CASE_DIR / "topk_cuda.py")
    shape = case.SHAPES["default"]
    tol = case.TOLERANCE[shape["dtype"]]

    def cuda_variant(threads: int, **switches: bool):
        return lambda x, k: cuda_expert.launch(x, k, threads, **switches)

    variants = {"triton_expert": triton_expert.run, "cuda_expert": cuda_expert.run}
    for threads in CUDA_BLOCKS:
        variants[f"cuda_{threads}_threads"] = cuda_variant(threads)
    # Each compile-time switch of the CUDA kernel turned off alone, then all of them.
    for name in cuda_expert.SWITCHES:
        variants[f"cuda_512_no_{name}"] = cuda_variant(512, **{name: False})
    variants["cuda_512_no_switches"] = cuda_variant(512, **{name: False for name in cuda_expert.SWITCHES})

    checks = []
    inputs = [("seed0", case.make_inputs(shape, 0, "cuda")), ("seed1", case.make_inputs(shape, 1, "cuda")),
              ("seed2", case.make_inputs(shape, 2, "cuda")),
              ("ties", case.make_inputs(dict(shape, distinct=8), 3, "cuda"))]
    for label, inp in inputs:
        ref = case.reference(*inp)
        for name, fn in variants.items():
            checks.append({"input": label, "variant": name, "err": case.compare(fn(*inp), ref, inp)})
    bad = [c for c in checks if not c["err"] <= tol]
    correct = not bad

    x, k = case.make_inputs(shape, 0, "cuda")
    timings: dict[str, dict] = {
        "torch_topk_sorted": time_variant(lambda: torch.topk(x, k, dim=-1, sorted=True)),
        "torch_topk_unsorted": time_variant(lambda: torch.topk(x, k, dim=-1, sorted=False)),
    }
    for name, fn in variants.items():
        timings[name] = time_variant(lambda fn=fn: fn(x, k))
    timings["triton_expert_repeat"] = time_variant(lambda: triton_expert.run(x, k))
    timings["cuda_expert_repeat"] = time_variant(lambda: cuda_expert.run(x, k))
    reference_ms = timings["torch_topk_sorted"]["ms"]

    ceilings = measure_ceilings()
    byte_floor_ms = case.bytes_moved(shape) / ceilings["copy_bytes_per_s"] * 1e3
    experts = {name: {"ms": timings[name]["ms"], "speedup": reference_ms / timings[name]["ms"],
                      "fraction_of_floor": byte_floor_ms / timings[name]["ms"]}
               for name in ("triton_expert", "cuda_expert")}
    result = {
        "case": "topk",
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "command": "python3 bench/bench_topk.py " + " ".join(sys.argv[1:]),
        "shape": shape,
        "correct": correct,
        "failed_checks": bad,
        "checks": checks,
        "timings": timings,
        "reference_ms": reference_ms,
        "experts": experts,
        "ceilings": ceilings,
        "byte_floor_ms": byte_floor_ms,
        "best_config": str(getattr(triton_expert.topk_radix_kernel, "best_config", None)),
        "configs": config_timings(triton_expert.topk_radix_kernel),
    }

    lines = [
        f"# topk on {result['gpu']} (torch {result['torch']}, triton {result['triton']})",
        "",
        f"`{result['command']}`; shape {shape}. ms: do_bench median, L2 flushed; graph ms: the same",
        "replayed from a CUDA graph (GPU time only); b2b us: wall time per call issued back to back.",
        "",
        "| variant | ms | vs torch.topk | graph ms | b2b us |",
        "|---|---|---|---|---|",
    ]
    for name, t in timings.items():
        g = "-" if t["graph_ms"] is None else f"{t['graph_ms']:.4f}"
        lines.append(f"| {name} | {t['ms']:.4f} | {reference_ms / t['ms']:.2f}x | {g} | {t['back_to_back_us']:.1f} |")
    lines += [
        "",
        f"correct: {correct} ({len(checks)} checks under case.compare, tolerance {tol}; failed: {bad})",
        f"byte floor {byte_floor_ms * 1e3:.2f} us at {ceilings['copy_bytes_per_s'] / 1e12:.2f} TB/s "
        "(no matrix work: the FLOP floor is nil)",
        f"Triton best config: {result['best_config']}",
        "",
        "| Triton config | ms |",
        "|---|---|",
    ]
    lines += [f"| {r['config']} | {r['ms']:.4f} |" for r in result["configs"]]
    emit(result, lines, args.json, args.md)
    return 0 if correct else 1


if __name__ == "__main__":
    sys.exit(main())
