"""Parse + anchor-index throughput, query latency and diff latency (one CPU core).

    .venv/bin/python bench/bench_parse.py [DIR ...] [--out DIR]

Without DIRs the corpus is tests/data/kernels/, experts/ and, when installed, the real Triton
modules of the venv (triton/language, torch/_inductor/kernel) and the CUDA headers shipped in
torch/include (ATen .cuh files). Writes parse.json and parse.md to --out (default
bench/results).
Goals: >= 1 MB/s CUDA, >= 0.5 MB/s Triton, query over a 2,000-line file < 5 ms, diff of two
500-line kernels < 100 ms.
"""
from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import sysconfig
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import anchors  # noqa: E402
import kir  # noqa: E402
from kir.errors import BadInputError  # noqa: E402
from kir.parse import SUFFIXES  # noqa: E402

QUERY = "kernel >> loop > call[name~=load|dot]@hit"
SITE = Path(sysconfig.get_paths()["purelib"])


def default_dirs() -> list[Path]:
    dirs = [ROOT / "tests/data/kernels", ROOT / "experts"]
    for rel in ("triton/language", "torch/_inductor/kernel", "torch/include/ATen/cuda",
                "torch/include/ATen/native/cuda"):
        if (SITE / rel).is_dir():
            dirs.append(SITE / rel)
    return dirs


def corpus(dirs: list[Path]) -> dict[str, list[tuple[Path, str]]]:
    out: dict[str, list[tuple[Path, str]]] = {"cuda": [], "triton": []}
    for d in dirs:
        for p in sorted(d.rglob("*")):
            if not p.is_file() or p.suffix not in SUFFIXES:
                continue
            try:
                text = p.read_text(encoding="utf-8")
            except (UnicodeDecodeError, OSError):
                continue
            if text.strip():
                out[SUFFIXES[p.suffix].value].append((p, text))
    return out


def throughput(files: list[tuple[Path, str]], lang: str, runs: int = 3) -> dict[str, object]:
    """Parse + anchor-index MB/s over the corpus: the median of `runs` passes (each pass's
    figure is kept in `mb_per_s_runs`)."""
    total = 0
    anchors_n = 0
    skipped = 0
    times: list[float] = []
    for _ in range(runs):
        t0 = time.process_time()
        total = anchors_n = skipped = 0
        for path, text in files:
            try:
                ir = kir.parse(text, language=lang, path=path)
            except BadInputError:
                skipped += 1
                continue
            anchors_n += len(anchors.build_index(ir))
            total += len(ir.source)
        times.append(time.process_time() - t0)
    median = statistics.median(times)
    return {"files": len(files) - skipped, "skipped_unparsable": skipped, "bytes": total,
            "anchors": anchors_n, "seconds": round(median, 4),
            "mb_per_s": round(total / 1e6 / median, 3) if median else None,
            "mb_per_s_runs": [round(total / 1e6 / t, 3) if t else None for t in times]}


def parse_floors(files: list[tuple[Path, str]]) -> dict[str, float]:
    """MB/s of the parsers alone on the same files (best of 3, GC off): Python's `ast.parse`,
    which `kir.parse` builds the Triton IR from, and libcst's `parse_module`, which it was
    built from before (kept in `kir.triton_cst` as the reference and fallback)."""
    import ast
    import gc

    import libcst

    texts = [t for _, t in files]
    total = sum(len(t.encode()) for t in texts)
    parsers = {"ast_parse_only_mb_per_s": (ast.parse, SyntaxError),
               "libcst_parse_only_mb_per_s": (libcst.parse_module, libcst.ParserSyntaxError)}
    out: dict[str, float] = {}
    for key, (parse, error) in parsers.items():
        best = float("inf")
        for _ in range(3):
            gc.disable()
            try:
                t0 = time.process_time()
                for t in texts:
                    try:
                        parse(t)
                    except error:
                        continue
                best = min(best, time.process_time() - t0)
            finally:
                gc.enable()
        out[key] = round(total / 1e6 / best, 3)
    return out


def timed(fn, repeat: int = 20, setup=None) -> float:  # type: ignore[no-untyped-def]
    """Median CPU milliseconds of `fn(*setup())` (CPU time: the machine may be shared)."""
    times = []
    for _ in range(repeat):
        args = setup() if setup is not None else ()
        t0 = time.process_time()
        fn(*args)
        times.append(time.process_time() - t0)
    return statistics.median(times) * 1e3


def synthetic_triton(n_kernels: int, variant: int = 0) -> str:
    """A Triton module of `n_kernels` matmul-like kernels (about 25 lines each)."""
    parts = ["import triton\nimport triton.language as tl\n"]
    for i in range(n_kernels):
        step = "acc += tl.dot(a, b)" if (i + variant) % 3 else "acc = tl.dot(a, b, acc)"
        parts.append(f'''

@triton.jit
def kernel_{i}(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
               BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_ptr + offs_m[:, None] * K + (k + offs_k)[None, :],
                    mask=offs_m[:, None] < M, other=0.0)
        b = tl.load(b_ptr + (k + offs_k)[:, None] * N + offs_n[None, :],
                    mask=offs_n[None, :] < N, other=0.0)
        {step}
        if k > {i + variant}:
            acc = acc * {1 + (i + variant) % 2}
    c = acc.to(tl.float16)
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    tl.store(c_ptr + offs_m[:, None] * N + offs_n[None, :], c, mask=mask)
''')
    return "".join(parts)


def main(argv: list[str]) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dirs", nargs="*", type=Path, help="corpus folders (default: see above)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results", help="results folder")
    args = ap.parse_args(argv)
    missing = [str(d) for d in args.dirs if not d.is_dir()]
    if missing:
        ap.error(f"not a folder: {', '.join(missing)}")
    try:
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core, as the goal says
    except (AttributeError, OSError):
        pass
    dirs = list(args.dirs) or default_dirs()
    files = corpus(dirs)
    results: dict[str, object] = {
        "command": "python bench/bench_parse.py " + " ".join(argv),
        "python": platform.python_version(), "machine": platform.processor() or platform.machine(),
        "dirs": [str(d) for d in dirs],
    }
    results["cuda"] = throughput(files["cuda"], "cuda")
    results["triton"] = throughput(files["triton"], "triton")
    results["triton"].update(parse_floors(files["triton"]))  # type: ignore[union-attr]

    big = synthetic_triton(92)  # ~2,000 lines
    ir_big = kir.parse(big, "triton")
    idx_big = anchors.build_index(ir_big)
    n_matches = len(idx_big.query(QUERY))
    from anchors.query import run_query
    results["query"] = {"lines": big.count("\n"), "anchors": len(idx_big), "query": QUERY,
                        "matches": n_matches,
                        "ms_median": round(timed(lambda: run_query(idx_big, QUERY)), 3)}

    old_src, new_src = synthetic_triton(23, 0), synthetic_triton(23, 1)  # ~500 lines each
    old_ir, new_ir = kir.parse(old_src, "triton"), kir.parse(new_src, "triton")

    def fresh() -> tuple[kir.KernelIR, kir.KernelIR]:  # nothing cached between repeats
        return kir.parse(old_src, "triton"), kir.parse(new_src, "triton")

    results["diff"] = {"lines": [old_src.count("\n"), new_src.count("\n")],
                       "actions": len(anchors.diff(old_ir, new_ir)),
                       "ms_median": round(timed(anchors.diff, 7, setup=fresh), 2),
                       "note": "both sources parsed beforehand; includes both anchor indexes"}
    goals = {
        "cuda_mb_per_s>=1": (results["cuda"]["mb_per_s"] or 0) >= 1.0,  # type: ignore[index]
        "triton_mb_per_s>=0.5": (results["triton"]["mb_per_s"] or 0) >= 0.5,  # type: ignore[index]
        "query_ms<5": results["query"]["ms_median"] < 5,  # type: ignore[index]
        "diff_ms<100": results["diff"]["ms_median"] < 100,  # type: ignore[index]
    }
    results["goals_met"] = goals
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    (out / "parse.json").write_text(json.dumps(results, indent=1) + "\n")
    c, t, q, d = results["cuda"], results["triton"], results["query"], results["diff"]
    md = f"""# Parse / anchor / query / diff benchmark

Command: `.venv/bin/python {results['command'].removeprefix('python ').strip()}` (pinned to one
CPU core; CPU time, so other load on the machine does not count; throughput is the median of
3 passes over the corpus, query and diff are medians). Python {results['python']}.

| measure | value | goal | met |
|---|---|---|---|
| CUDA parse + anchor index | {c['mb_per_s']} MB/s ({c['files']} files, {c['bytes']} B, {c['anchors']} anchors) | >= 1 MB/s | {goals['cuda_mb_per_s>=1']} |
| Triton parse + anchor index | {t['mb_per_s']} MB/s ({t['files']} files, {t['bytes']} B, {t['anchors']} anchors; passes: {', '.join(map(str, t['mb_per_s_runs']))}) | >= 0.5 MB/s | {goals['triton_mb_per_s>=0.5']} |
| (Python `ast.parse` alone, same files) | {t['ast_parse_only_mb_per_s']} MB/s | | |
| (libcst `parse_module` alone, same files) | {t['libcst_parse_only_mb_per_s']} MB/s | | |
| query `{q['query']}` over {q['lines']} lines ({q['anchors']} anchors, {q['matches']} matches) | {q['ms_median']} ms | < 5 ms | {goals['query_ms<5']} |
| diff of two {d['lines'][0]}-line kernels ({d['actions']} actions; parsed beforehand) | {d['ms_median']} ms | < 100 ms | {goals['diff_ms<100']} |

Corpus: {', '.join(results['dirs'])}

Triton note: the IR is built from Python's `ast` ({t['ast_parse_only_mb_per_s']} MB/s for the parse alone)
plus the source bytes, giving the same node table as libcst's concrete syntax tree (libcst's
parser alone runs at {t['libcst_parse_only_mb_per_s']} MB/s on these files, below the goal before any IR is
built); the full pipeline (parse, IR table, anchor index) gives {t['mb_per_s']} MB/s.
"""
    (out / "parse.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
