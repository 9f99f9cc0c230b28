"""In one process: call a case's Triton expert once (its autotuner picks a config), then
report the config chosen, the autotuner's timings of every config, and `do_bench` of the
expert's `run()` three times (median, L2 flushed, plain do_bench: no gate).

    python3 bench/autotune_choice.py CASE      # one JSON line; run it in several processes

Used to tell apart two explanations of the expert times that changed from gate to gate
(bench/results/timing/README.md): a different autotuner choice per process, or host time
inside do_bench's measurement of a few-microsecond kernel. Needs a CUDA GPU.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def main(case_name: str) -> dict:
    import torch
    import triton.testing
    from triton.runtime.autotuner import Autotuner

    from gate.cases import import_case_module, load_case

    case = load_case(case_name)
    module = case.module()
    shape = dict(next(iter(module.SHAPES.values())))
    inputs = tuple(module.make_inputs(shape, 1234, "cuda"))
    expert = import_case_module(next(p for p, lang in case.expert_paths() if lang == "triton"))
    expert.run(*inputs)
    torch.cuda.synchronize()
    record = {"case": case_name,
              "run_ms": [triton.testing.do_bench(lambda: expert.run(*inputs), return_mode="median")
                         for _ in range(3)],
              "tuners": []}
    for tuner in (v for v in vars(expert).values() if isinstance(v, Autotuner)):
        record["tuners"].append({
            "best": str(tuner.best_config),
            "timings": {str(c): [round(x, 4) for x in v]
                        for c, v in (tuner.configs_timings or {}).items()}})
    return record


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: python3 bench/autotune_choice.py CASE", file=sys.stderr)
        sys.exit(2)
    print(json.dumps(main(sys.argv[1])))
