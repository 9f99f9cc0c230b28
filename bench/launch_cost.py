"""Where an end-to-end call of a Triton GEMM spends its time beyond its kernel, launch path by
launch path, beside cuBLAS.

    python3 bench/launch_cost.py OUT_DIR [--only mm1024,bmm,bmm_small] [--calls 200] [--json]

Operators (fp16 / bf16 inputs drawn once): `mm1024` C = A @ B at 1024^3 fp16, `bmm` 16
products of 1024^3 bf16, `bmm_small` 32 products of 128^3 fp16. For each, one tiled Triton
kernel (masked loads, one output tile per program) at one configuration (`PINS`: the one the
held-out search's autotuner picked), called the ways a host module can call it:

| path | the call |
|---|---|
| `torch` | `torch.matmul` / `torch.bmm` (cuBLAS) |
| `autotune8` | `@triton.autotune` over 8 configurations (cached; its cache then holds the pinned one for every key, so every path runs the same binary) with a grid `lambda meta: ...` |
| `autotune1` | `@triton.autotune` over the pinned configuration alone |
| `jit-lambda` | plain `@triton.jit`, constexprs, `num_warps` and `num_stages` passed at the call, grid `lambda meta: ...` |
| `jit` | the same with the grid computed on the host as a tuple |
| `compiled` | the `CompiledKernel` the JIT returned, launched directly, one per specialization key (each pointer's 16-byte alignment, each integer's `== 1`, `% 16 == 0` and 32/64-bit range, as Triton specializes): right for any inputs, but past `JITFunction.run`, where the gate counts launches |
| `graph` | a CUDA graph of one `jit` call replayed (the same buffers only: a floor, not a path) |

Columns (microseconds per call):
- `host`: the host's time to issue one call while the GPU is kept busy (`torch.cuda._sleep`),
  so that no launch waits for the GPU: the launch path's own cost;
- `e2e`: `triton.testing.do_bench` median (L2 flushed before each call) as Triton ships it;
- `lead`: the same with the GPU kept busy after each flush for a few times `host`
  (`gate.worker._Runner.gpu_lead`): the host's time falls outside the events;
- `lead+log`: `lead` inside the gate's CUDA-activity session (`gate.guards.KernelLog`), as the
  gate times a candidate (the reference is timed outside one);
- `kernel`: GPU time per call of the operator's kernels as that session records them (the
  gate's verdict `kernels`; do_bench's warm-up calls, without flush, included);
- `b2b`: calls issued back to back (no flush, warm L2) between two events, per call.

`e2e - lead` is host time the events enclosed; `lead+log - lead` what the activity session adds;
`lead - kernel` what the GPU spends per call around the kernel itself (launch, events).
Writes OUT/launch_cost.json and OUT/launch_cost.md (the table, then these differences per
operator), prints the table (`--json`: the record).
Needs a CUDA GPU (exit 2 without one, or for bad arguments). Triton 3.6 to 3.9.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

# (BM, BN, BK, num_warps, num_stages) each operator runs: the held-out search's picks.
PINS = {"mm1024": (64, 128, 64, 4, 4), "bmm": (128, 256, 64, 8, 3), "bmm_small": (64, 64, 32, 4, 3)}
# The 8-entry list of the autotune8 path (each pin among them).
EIGHT = ((128, 256, 64, 8, 3), (32, 32, 32, 4, 1), (128, 256, 64, 8, 4), (256, 128, 64, 8, 4),
         (64, 128, 64, 4, 4), (64, 256, 64, 8, 3), (128, 128, 64, 8, 3), (64, 64, 32, 4, 3))
SHAPES = {"mm1024": (None, 1024, 1024, 1024, torch.float16),
          "bmm": (16, 1024, 1024, 1024, torch.bfloat16),
          "bmm_small": (32, 128, 128, 128, torch.float16)}
COLUMNS = ("host", "e2e", "lead", "lead+log", "kernel", "b2b")


@triton.jit
def mm_kernel(a_ptr, b_ptr, c_ptr, M, N, K, sab, sam, sak, sbb, sbk, sbn, scb, scm, scn,
              BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """C[z] = A[z] @ B[z] for z = program_id(2): one BM x BN tile per program, K in BK steps."""
    z = tl.program_id(2)
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a_base = a_ptr + z * sab
    b_base = b_ptr + z * sbb
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        kk = k0 + rk
        a = tl.load(a_base + rm[:, None] * sam + kk[None, :] * sak,
                    mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        b = tl.load(b_base + kk[:, None] * sbk + rn[None, :] * sbn,
                    mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    tl.store(c_ptr + z * scb + rm[:, None] * scm + rn[None, :] * scn,
             acc.to(c_ptr.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))


def _config(entry: tuple[int, int, int, int, int]) -> Any:
    bm, bn, bk, w, s = entry
    return triton.Config({"BM": bm, "BN": bn, "BK": bk}, num_warps=w, num_stages=s)


def _args(a: Any, b: Any, c: Any) -> tuple[Any, ...]:
    """The kernel's runtime arguments for a 2-D or 3-D product (a batch of one for 2-D)."""
    if a.dim() == 2:
        (m, k), n = a.shape, b.shape[1]
        return (a, b, c, m, n, k, 0, a.stride(0), a.stride(1), 0, b.stride(0), b.stride(1),
                0, c.stride(0), c.stride(1))
    (_, m, k), n = a.shape, b.shape[2]
    return (a, b, c, m, n, k, *a.stride(), *b.stride(), *c.stride())


def _out(a: Any, b: Any) -> Any:
    return torch.empty((*a.shape[:-1], b.shape[-1]), device=a.device, dtype=a.dtype)


def _spec(x: Any) -> Any:
    """What Triton specializes a runtime argument on (a key at least as fine as its own)."""
    if isinstance(x, torch.Tensor):
        return (x.dtype, x.data_ptr() % 16 == 0)
    if isinstance(x, bool):
        return ("b", x)
    if isinstance(x, int):
        return (x == 1, x % 16 == 0, -2**31 <= x < 2**31, x < 2**63)
    return type(x)


def paths(op: str) -> dict[str, Callable[[Any, Any], Any]]:
    """Path name -> run(a, b) for `op` (module docstring)."""
    bm, bn, bk, w, s = PINS[op]
    pin = _config(PINS[op])
    eight = [pin if e == PINS[op] else _config(e) for e in EIGHT]
    tuned8 = triton.autotune(configs=eight, key=["M", "N", "K"])(mm_kernel)
    tuned1 = triton.autotune(configs=[pin], key=["M", "N", "K"])(mm_kernel)
    compiled: dict[Any, Any] = {}

    def grid_meta(a: Any, b: Any) -> Callable[[Any], tuple[int, int, int]]:
        m, n, z = a.shape[-2], b.shape[-1], (a.shape[0] if a.dim() == 3 else 1)
        return lambda meta: (triton.cdiv(m, meta["BM"]), triton.cdiv(n, meta["BN"]), z)

    def grid(a: Any, b: Any) -> tuple[int, int, int]:
        return (triton.cdiv(a.shape[-2], bm), triton.cdiv(b.shape[-1], bn),
                a.shape[0] if a.dim() == 3 else 1)

    def run_tuned(tuner: Any) -> Callable[[Any, Any], Any]:
        def run(a: Any, b: Any) -> Any:
            c = _out(a, b)
            tuner[grid_meta(a, b)](*_args(a, b, c))
            return c
        return run

    def run_jit_lambda(a: Any, b: Any) -> Any:
        c = _out(a, b)
        mm_kernel[grid_meta(a, b)](*_args(a, b, c), BM=bm, BN=bn, BK=bk, num_warps=w, num_stages=s)
        return c

    def run_jit(a: Any, b: Any) -> Any:
        c = _out(a, b)
        mm_kernel[grid(a, b)](*_args(a, b, c), BM=bm, BN=bn, BK=bk, num_warps=w, num_stages=s)
        return c

    def run_compiled(a: Any, b: Any) -> Any:
        c = _out(a, b)
        args, g = _args(a, b, c), grid(a, b)
        key = (tuple(map(_spec, args)), g)
        runner = compiled.get(key)
        if runner is None:  # the JIT compiles (or finds) the kernel for this specialization
            kernel = mm_kernel[g](*args, BM=bm, BN=bn, BK=bk, num_warps=w, num_stages=s)
            launch = kernel[g]
            # the launcher takes every parameter where the compiled signature lists constexprs
            # (it skips them), else the runtime ones alone
            signature = getattr(getattr(kernel, "src", None), "signature", {}) or {}
            takes_all = "constexpr" in map(str, dict(signature).values())
            compiled[key] = (lambda *xs: launch(*xs, bm, bn, bk)) if takes_all else launch
        else:
            runner(*args)
        return c

    torch_fn = torch.matmul if SHAPES[op][0] is None else torch.bmm
    return {"torch": torch_fn, "autotune8": run_tuned(tuned8), "autotune1": run_tuned(tuned1),
            "jit-lambda": run_jit_lambda, "jit": run_jit, "compiled": run_compiled,
            "_tuner8": tuned8}  # type: ignore[dict-item]


# -- timing -----------------------------------------------------------------------------------------
class Clock:
    """`torch.cuda._sleep` cycles per microsecond, measured once."""

    def __init__(self) -> None:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(100_000)
        start.record()
        torch.cuda._sleep(2_000_000)
        end.record()
        end.synchronize()
        self.per_us = 2_000_000 / max(start.elapsed_time(end) * 1000.0, 1.0)

    def busy(self, us: float) -> None:
        torch.cuda._sleep(max(1, int(us * self.per_us)))


def host_us(fn: Callable[[], Any], clock: Clock, calls: int) -> float:
    """Host microseconds to issue one call while the GPU is busy (no launch waits)."""
    torch.cuda.synchronize()
    clock.busy(calls * 200.0)
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / calls * 1e6


def bench_us(fn: Callable[[], Any], clock: Clock | None = None, lead_us: float = 0.0) -> float:
    """do_bench median in microseconds; with `clock`, the GPU sleeps `lead_us` after each flush."""
    from triton import runtime  # noqa: PLC0415

    if clock is None:
        return float(triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")) * 1000.0
    driver = runtime.driver.active
    flush, had = driver.clear_cache, "clear_cache" in vars(driver)

    def clear_cache(cache: Any) -> None:
        flush(cache)
        clock.busy(lead_us)

    driver.clear_cache = clear_cache
    try:
        return float(triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")) * 1000.0
    finally:
        if had:
            driver.clear_cache = flush
        else:
            del driver.clear_cache


def b2b_us(fn: Callable[[], Any], clock: Clock, calls: int) -> float:
    """GPU microseconds per call of `calls` calls issued back to back (warm L2)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    fn()
    torch.cuda.synchronize()
    clock.busy(calls * 200.0)  # the host issues every call before the GPU reaches the first
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1000.0 / calls


def logged(fn: Callable[[], Any], clock: Clock, lead_us: float, own: set[str]) -> tuple[Any, Any]:
    """(`lead` median inside the gate's CUDA-activity session, GPU us per call of the kernels
    not in `own` (the flush's and the sleep's)); (None, why) where the session cannot start."""
    try:
        from gate.guards import KernelLog  # noqa: PLC0415
    except Exception as exc:  # noqa: BLE001
        return None, f"gate.guards: {type(exc).__name__}: {exc}"
    log = KernelLog(torch.cuda.synchronize)
    if not log.available:
        return None, log.reason
    log.warm_up()
    count = [0]

    def counted() -> None:
        fn()
        count[0] += 1

    with log.window():
        ms = bench_us(counted, clock, lead_us)
    if not log.available:
        return None, log.reason
    ns = sum(v for k, v in log.time_ns.items() if k not in own)
    return ms, ns / 1e3 / max(count[0], 1)


def gate_kernels(clock: Clock) -> set[str]:
    """Names of the kernels a flush and a sleep launch (left out of `kernel`)."""
    try:
        from gate.guards import KernelLog  # noqa: PLC0415
        from triton import runtime  # noqa: PLC0415
    except Exception:  # noqa: BLE001
        return set()
    log = KernelLog(torch.cuda.synchronize)
    if not log.available:
        return set()
    log.warm_up()
    driver = runtime.driver.active
    cache = driver.get_empty_cache_for_benchmark()
    with log.window():
        for _ in range(3):
            driver.clear_cache(cache)
            clock.busy(10.0)
    return set(log.time_ns)


def measure(op: str, calls: int, clock: Clock, own: set[str], say: Callable[[str], None]) -> list[dict[str, Any]]:
    z, m, n, k, dtype = SHAPES[op]
    g = torch.Generator(device="cuda").manual_seed(0)
    lead_shape = (m, k) if z is None else (z, m, k)
    a = torch.randn(lead_shape, generator=g, device="cuda").to(dtype)
    b = torch.randn((k, n) if z is None else (z, k, n), generator=g, device="cuda").to(dtype)
    want = (a.float() @ b.float())
    table = paths(op)
    tuner8 = table.pop("_tuner8")
    rows: list[dict[str, Any]] = []
    for name, run in table.items():
        say(f"{op}: {name}")
        row: dict[str, Any] = {"op": op, "path": name, "note": ""}
        try:
            _measure_path(row, run, a, b, want, clock, calls, own, tuner8 if name == "autotune8" else None)
        except Exception as exc:  # noqa: BLE001 — one path failing leaves the others
            row["ok"], row["note"] = False, f"{row['note']}; raised {type(exc).__name__}: {exc}"[:400]
        rows.append(row)
    rows.append(_graph_row(op, table["jit"], a, b, want, clock, calls))
    return rows


def _measure_path(row: dict[str, Any], run: Callable[[Any, Any], Any], a: Any, b: Any, want: Any,
                  clock: Clock, calls: int, own: set[str], tuner8: Any) -> None:
    """Fill `row`'s columns for one path (module docstring)."""
    op = row["op"]
    out = run(a, b)  # compiles; the 8-entry autotuner times its list here
    if tuner8 is not None:
        picked = getattr(tuner8, "best_config", None)
        row["note"] = f"tuned pick {picked}"
        cache = getattr(tuner8, "cache", None)
        if isinstance(cache, dict):  # every key runs the pinned configuration
            pin = next(c for c in tuner8.configs if (c.kwargs["BM"], c.kwargs["BN"], c.kwargs["BK"],
                                                     c.num_warps, c.num_stages) == PINS[op])
            for key in cache:
                cache[key] = pin
            row["note"] += "; pinned to the common configuration"
    out = run(a, b)
    torch.cuda.synchronize()
    err = ((out.float() - want).abs().max() / want.abs().max()).item()
    row["rel_err"] = err
    row["ok"] = bool(err < 1e-2)
    fn = (lambda run=run: run(a, b))
    row["host"] = host_us(fn, clock, calls)
    lead = min(max(100.0, 3.0 * row["host"]), 2000.0)
    row["e2e"] = bench_us(fn)
    row["lead"] = bench_us(fn, clock, lead)
    row["lead+log"], row["kernel"] = logged(fn, clock, lead, own)
    if row["lead+log"] is None:
        row["note"] += f"; no activity session: {row['kernel']}"
        row["kernel"] = None
    row["b2b"] = b2b_us(fn, clock, calls)


def _graph_row(op: str, run: Callable[[Any, Any], Any], a: Any, b: Any, want: Any, clock: Clock,
               calls: int) -> dict[str, Any]:
    """One `jit` call captured in a CUDA graph, replayed (its output buffer is the graph's)."""
    row: dict[str, Any] = {"op": op, "path": "graph", "note": "same buffers only: a floor"}
    try:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            run(a, b)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = run(a, b)
        graph.replay()
        torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001
        row["note"] = f"no graph: {type(exc).__name__}: {exc}"
        return row
    err = ((out.float() - want).abs().max() / want.abs().max()).item()
    row["rel_err"], row["ok"] = err, bool(err < 1e-2)
    fn = graph.replay
    row["host"] = host_us(fn, clock, calls)
    row["e2e"] = bench_us(fn)
    row["lead"] = bench_us(fn, clock, min(max(100.0, 3.0 * row["host"]), 2000.0))
    row["b2b"] = b2b_us(fn, clock, calls)
    return row


def readings(rows: list[dict[str, Any]]) -> list[str]:
    """Per operator, the differences the columns exist for (module docstring)."""
    out = []
    for op in dict.fromkeys(r["op"] for r in rows):
        by = {r["path"]: r for r in rows if r["op"] == op}

        def get(path: str, col: str) -> float:
            value = by.get(path, {}).get(col)
            return float(value) if isinstance(value, float) else math.nan

        out.append(
            f"- {op}: host per call autotune8 {get('autotune8', 'host'):.1f}, autotune1 "
            f"{get('autotune1', 'host'):.1f}, jit {get('jit', 'host'):.1f}, compiled "
            f"{get('compiled', 'host'):.1f} us; GPU time around the kernel (lead+log - kernel) torch "
            f"{get('torch', 'lead+log') - get('torch', 'kernel'):.1f}, jit "
            f"{get('jit', 'lead+log') - get('jit', 'kernel'):.1f} us; the activity session adds "
            f"(lead+log - lead) torch {get('torch', 'lead+log') - get('torch', 'lead'):.1f}, jit "
            f"{get('jit', 'lead+log') - get('jit', 'lead'):.1f} us; as the gate compares them (jit "
            f"lead+log over torch lead) {get('torch', 'lead') / get('jit', 'lead+log'):.3f}x, both "
            f"outside the session {get('torch', 'lead') / get('jit', 'lead'):.3f}x, kernels alone "
            f"{get('torch', 'kernel') / get('jit', 'kernel'):.3f}x")
    return out


def render(record: dict[str, Any]) -> str:
    head = "| op | path | " + " | ".join(f"{c} us" for c in COLUMNS) + " | ok | note |"
    lines = [f"# Launch cost of a Triton GEMM by launch path ({record['gpu']}, torch "
             f"{record['torch']}, triton {record['triton']})", "", head,
             "|" + "---|" * (len(COLUMNS) + 4)]
    for r in record["rows"]:
        cells = [f"{r[c]:.2f}" if isinstance(r.get(c), float) and math.isfinite(r[c]) else "-"
                 for c in COLUMNS]
        lines.append(f"| {r['op']} | {r['path']} | " + " | ".join(cells)
                     + f" | {'yes' if r.get('ok') else 'NO'} | {r.get('note', '')} |")
    return "\n".join(lines + ["", *readings(record["rows"])]) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", help="folder for launch_cost.json and launch_cost.md")
    parser.add_argument("--only", default=",".join(SHAPES), help="operators, comma-separated")
    parser.add_argument("--calls", type=int, default=200, help="calls per host / b2b measurement")
    parser.add_argument("--json", action="store_true", help="print the record as JSON")
    args = parser.parse_args(argv)
    ops = [o for o in args.only.split(",") if o]
    bad = [o for o in ops if o not in SHAPES]
    if bad or not ops or not 1 <= args.calls <= 1000:
        print(f"error: unknown operator(s) {', '.join(bad)} (known: {', '.join(SHAPES)})" if bad
              else "error: --only names no operator" if not ops
              else "error: --calls must be 1..1000", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("error: launch_cost needs a CUDA GPU; none is visible", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    def say(text: str) -> None:
        print(f"launch_cost: {text}", file=sys.stderr, flush=True)

    clock = Clock()
    own = gate_kernels(clock)
    rows = [row for op in ops for row in measure(op, args.calls, clock, own, say)]
    record = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
              "triton": triton.__version__, "calls": args.calls, "left_out_kernels": sorted(own),
              "configurations": {op: dict(zip(("BM", "BN", "BK", "num_warps", "num_stages"), PINS[op]))
                                 for op in ops},
              "rows": rows}
    (out / "launch_cost.json").write_text(json.dumps(record, indent=1) + "\n")
    (out / "launch_cost.md").write_text(render(record))
    print(json.dumps(record, indent=1) if args.json else render(record))
    return 0 if all(r.get("ok") for r in rows if "ok" in r) else 1


if __name__ == "__main__":
    sys.exit(main())
