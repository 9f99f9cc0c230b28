"""What refilling the inputs between timed calls and attributing the GPU's kernels cost a device gate.

    python bench/gate_refill.py --out refill.json [--cases gemm,topk,conv2d] [--repeat 2]

Run with the `gate` package to measure on PYTHONPATH (this script adds nothing to the path, so
the same file measures an older gate). For each expert kernel of each case (real shapes):

- `do_bench_ms`: `triton.testing.do_bench(run, warmup=25, rep=100, return_mode="median")` of the
  expert on one input set, in this process, median of 3 (the plain figure the gate must stay
  within 10% of);
- `do_bench_graph_ms`: the same calls replayed from a CUDA graph
  (`triton.testing.do_bench_cudagraph`), i.e. the GPU's time alone, and `host_us`: the host's
  time to issue one call (no synchronization). Where `host_us` exceeds the GPU's time per call,
  plain `do_bench` times the host: the gate (which keeps the GPU a few calls' issue time ahead,
  `gate.worker.Worker.gpu_lead`) is then compared with the graph figure;
- per gate (`gate.check_file(..., "device", cache=False)`, `--repeat` times): its verdict,
  `candidate_ms`, the wall seconds, the seconds spent in timed runs, and the overhead (wall
  minus timed), with the worker's phases.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import gate


def plain_do_bench(case: gate.Case, path: Path) -> dict[str, float | None]:
    import importlib.util

    import torch
    import triton.testing

    spec = importlib.util.spec_from_file_location(f"bench_{case.name}_{path.stem}", path.with_suffix(".py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    plain, graph, host = [], [], []
    for shape in case.shapes.values():
        inputs = case.module().make_inputs(dict(shape), 12345, "cuda")
        module.run(*inputs)
        torch.cuda.synchronize()
        times = [triton.testing.do_bench(lambda: module.run(*inputs), warmup=25, rep=100,
                                         return_mode="median") for _ in range(3)]
        plain.append(statistics.median(times))
        t0 = time.perf_counter()
        for _ in range(20):
            module.run(*inputs)
        host.append((time.perf_counter() - t0) / 20 * 1e6)
        torch.cuda.synchronize()
        try:
            with torch.cuda.stream(torch.cuda.Stream()):
                graph.append(triton.testing.do_bench_cudagraph(lambda: module.run(*inputs), rep=100,
                                                               return_mode="median"))
        except Exception as exc:  # noqa: BLE001 - a run that cannot be captured (host syncs)
            print(f"{path.name}: no CUDA graph: {type(exc).__name__}: {exc}"[:300], file=sys.stderr)
            graph.append(None)
    return {"do_bench_ms": sum(plain),
            "do_bench_graph_ms": None if None in graph else sum(graph),  # type: ignore[arg-type]
            "host_us": round(sum(host), 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--cases", default="gemm,topk,conv2d")
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    records = []
    gate.check_file(Path(gate.load_case("gemm").folder / "gemm_triton.py"), "gemm", "static",
                    cache=False)  # starts the fork server: not part of any measure
    for name in args.cases.split(","):
        case = gate.load_case(name)
        for path, lang in case.expert_paths():
            rec = {"case": name, "kernel": path.name, "gate_version": sys.modules["gate.check"].GATE_VERSION,
                   **plain_do_bench(case, path), "gates": []}
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                v = gate.check_file(path, case, "device", cache=False)
                wall = time.perf_counter() - t0
                timed = v.timing.timed_s if v.timing else 0.0
                rec["gates"].append({
                    "ok": v.ok, "failure_kind": v.failure_kind.value if v.failure_kind else None,
                    "reason": (v.reason or "")[:500], "flags": list(v.flags),
                    "candidate_ms": v.timing.candidate_ms if v.timing else None,
                    "wall_s": round(wall, 3), "timed_s": round(timed, 3),
                    "overhead_s": round(wall - timed, 3),
                    "phases": {k: round(s, 3) for k, s in v.phases}})
            ms = [g["candidate_ms"] for g in rec["gates"] if g["candidate_ms"]]
            rec["gate_ms"] = statistics.median(ms) if ms else None
            rec["gate_vs_do_bench"] = round(rec["gate_ms"] / rec["do_bench_ms"], 3) if ms else None
            rec["gate_vs_graph"] = (round(rec["gate_ms"] / rec["do_bench_graph_ms"], 3)
                                    if ms and rec["do_bench_graph_ms"] else None)
            rec["overhead_s"] = statistics.median(g["overhead_s"] for g in rec["gates"])
            records.append(rec)
            print(json.dumps(rec), flush=True)
            Path(args.out).write_text(json.dumps(records, indent=1))


if __name__ == "__main__":
    main()
