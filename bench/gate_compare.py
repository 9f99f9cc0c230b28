"""The parent's share of a device gate: judging the outputs a worker sends, on the CPU alone.

    python bench/gate_compare.py [--sizes 4M,64M] [--dtypes fp16,bf16] [--repeat 3]

Run with the `gate` package to measure on PYTHONPATH (this script adds nothing to the path, so
the same file measures an older gate). For each size and dtype it feeds a `gate.runner._Judge`
the messages of one device gate of one variant, as the worker sends them: the references of 3
seeds, the timed and re-verification sets and 3 crossovers of the timed set; then the outputs of
the 3 seeded calls, the knockout call (poison: NaN), 6 refilled timed calls (2 sampled calls and
the last, traced and untraced) and the re-verification call. Each output is the reference plus
noise of about 1e-3 of its scale (every call passes). It prints the judge's `compare_s` (the
seconds `cmp.compare` took, the figure a verdict reports as "compare (parent)") and the wall
time of handling every message, the best of `--repeat` runs.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

_NUMPY = {"fp16": ("float16", np.float16), "fp32": ("float32", np.float32)}
_TOLERANCE = {"fp16": 5e-3, "bf16": 1e-2, "fp32": 1e-4}


def _size(text: str) -> int:
    scale = {"K": 1 << 10, "M": 1 << 20}.get(text[-1:].upper(), 1)
    return int(text.rstrip("kKmM")) * scale


def _encode(values: np.ndarray, dtype: str) -> list[tuple]:
    if dtype == "bf16":  # bfloat16 travels as its bits: the high half of a float32
        bits = (values.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
        return [("tensor", "bfloat16", values.shape, bits.tobytes())]
    name, np_dtype = _NUMPY[dtype]
    return [("tensor", name, values.shape, values.astype(np_dtype).tobytes())]


def messages(n: int, dtype: str, rng: np.random.Generator) -> list[tuple]:
    """The reference and output messages of one device gate of variant "v" (module docstring)."""
    from gate.worker import (PHASE_KNOCKOUT, PHASE_REFILL, PHASE_REVERIFY, PHASE_SEED,
                             PHASE_TIMED)

    keys = [(PHASE_SEED, s) for s in (1, 2, 3)] + [(PHASE_TIMED, 4), (PHASE_REVERIFY, 5)] + \
        [(PHASE_REFILL, s) for s in (11, 12, 13)]
    refs = {key: rng.standard_normal(n, dtype=np.float32) for key in keys}
    msgs: list[tuple] = [("ref", "v", phase, seed, _encode(r, dtype), None)
                         for (phase, seed), r in refs.items()]
    msgs.append(("refs_done",))

    def out(phase: str, seed: int, key: tuple[str, int]) -> tuple:
        noisy = refs[key] + rng.standard_normal(n, dtype=np.float32) * 1e-3
        return ("out", "v", phase, seed, _encode(noisy, dtype), 1)

    msgs += [out(PHASE_SEED, s, (PHASE_SEED, s)) for s in (1, 2, 3)]
    msgs.append(("out", "v", PHASE_KNOCKOUT, 1, _encode(np.full(n, np.nan, np.float32), dtype), 0))
    pool = [(PHASE_TIMED, 4)] + [(PHASE_REFILL, s) for s in (11, 12, 13)]
    for i in range(6):
        key = pool[int(rng.integers(len(pool)))] if i % 3 else pool[i % len(pool)]
        msgs.append(out(PHASE_REFILL, key[1], key))
    msgs.append(out(PHASE_REVERIFY, 5, (PHASE_REVERIFY, 5)))
    return msgs


def judge_once(msgs: list[tuple], dtype: str) -> tuple[float, float, int]:
    """(compare_s, wall seconds, results) of a fresh judge handling `msgs`."""
    from gate.cases import Case
    from gate.runner import _Judge
    from gate.verdict import Tier

    case = Case(name="bench", path=Path("bench.py"), description="", platform="cuda",
                reference_name="", shapes={"v": {"dtype": dtype}}, small_shapes={"v": {"dtype": dtype}},
                tolerance=_TOLERANCE, experts=(), has_compare=False)
    judge = _Judge(case, Tier.DEVICE)
    t0 = time.perf_counter()
    for msg in msgs:
        judge.handle(msg)
    wall = time.perf_counter() - t0
    if judge.verdict is not None:
        raise SystemExit(f"gate_compare: the judge rejected: {judge.verdict.reason}")
    return judge.compare_s, wall, len(judge.results)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="4M,64M", help="elements per output, comma-separated")
    ap.add_argument("--dtypes", default="fp16,bf16")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    print("| elements | dtype | outputs judged | compare_s | handle wall s |")
    print("|---:|---|---:|---:|---:|")
    for size in args.sizes.split(","):
        n = _size(size)
        for dtype in args.dtypes.split(","):
            msgs = messages(n, dtype, np.random.default_rng(0))
            runs = [judge_once(msgs, dtype) for _ in range(args.repeat)]
            compare_s = min(r[0] for r in runs)
            wall = min(r[1] for r in runs)
            print(f"| {size} | {dtype} | {runs[0][2]} | {compare_s:.3f} | {wall:.3f} |", flush=True)
            del msgs
    return 0


if __name__ == "__main__":
    sys.exit(main())
