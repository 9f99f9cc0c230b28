"""Which config an expert's autotuner picks in a fresh process, and what `run` then measures.

    python3 bench/autotune_probe.py CASE SEED      # on a GPU machine; run it in several processes

Imports the case's Triton expert, calls its `run` once on the case's device inputs (the
autotuner tunes there), then prints the chosen config of every autotuned kernel, the three
fastest configs as the autotuner timed them, and `do_bench`'s median of `run` (L2 flushed).
Comparing the lines of several processes shows whether the expert's measured time depends on
the process rather than on the kernel.
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    case_name, seed = argv[0], int(argv[1])
    import torch
    import triton.testing

    from gate.cases import import_case_module, load_case

    case = load_case(case_name)
    module = case.module()
    expert = next(p for p, lang in case.expert_paths() if lang == "triton")
    kernel = import_case_module(expert)  # any module by path, under a private name
    variant = next(iter(module.SHAPES))
    inputs = module.make_inputs(dict(module.SHAPES[variant]), seed, "cuda")
    kernel.run(*inputs)
    torch.cuda.synchronize()
    for name, obj in vars(kernel).items():
        if hasattr(obj, "configs_timings") and getattr(obj, "best_config", None) is not None:
            timings = sorted((float(v[0] if isinstance(v, (list, tuple)) else v), str(k))
                             for k, v in (obj.configs_timings or {}).items())
            print(f"{name}: chose {obj.best_config}")
            for ms, cfg in timings[:3]:
                print(f"    tuned {ms:.4f} ms  {cfg}")
    ms = triton.testing.do_bench(lambda: kernel.run(*inputs), return_mode="median")
    print(f"{case_name}/{variant} seed {seed}: run() median {ms:.4f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
