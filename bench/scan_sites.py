"""Count where the passes find their constructs in kernel code nobody here wrote.

    python bench/scan_sites.py DIR [DIR ...] [--out bench/results] [--jobs N]

Scans every Triton module (a `.py` file with a `@triton.jit` function) and every CUDA file
(`.cu`, `.cuh`) under the folders, runs `sites` of every pass of the file's language and
writes `sites.json` and `sites.md` into `--out`: per pass, how many sites are present
(de-optimizable) and applicable, in how many files, and per folder the files scanned. A file
that does not parse is counted, not fatal. The folders are read only; nothing is copied.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter, defaultdict
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def kernel_files(folder: Path) -> list[tuple[Path, str]]:
    """(path, language) of the Triton modules and CUDA files under `folder`."""
    found = []
    for path in sorted(folder.rglob("*")):
        if not path.is_file():
            continue
        if path.suffix in (".cu", ".cuh"):
            found.append((path, "cuda"))
        elif path.suffix == ".py":
            try:
                text = path.read_text(errors="replace")
            except OSError:
                continue
            if "triton.jit" in text or "@jit" in text and "triton" in text:
                found.append((path, "triton"))
    return found


def scan_file(job: tuple[str, str, int]) -> dict[str, Any]:
    """Sites of every pass in one file: {"file", "language", "error"?, "sites": {pass:
    [present, applicable]}, "roundtrip": {pass: {outcome: count}}, "seconds"}. With
    `trips` > 0, the first `trips` present sites of each deterministic pass are de-optimized
    and re-optimized (outcomes: same, different, refused, failed, no-site)."""
    import anchors
    import kir
    from passes.registry import all_pass_classes
    from passes.roundtrip import roundtrip

    path, language, trips = job
    start = time.perf_counter()
    out: dict[str, Any] = {"file": path, "language": language, "sites": {}}
    try:
        ir = kir.parse_file(path, language=language)
        index = anchors.build_index(ir)
    except Exception as exc:  # noqa: BLE001 — third-party code: report, do not stop
        out["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
        return out
    for cls in all_pass_classes():
        if language not in cls.languages:
            continue
        try:
            sites = cls().sites(ir, index)
        except Exception as exc:  # noqa: BLE001 — a detector bug on foreign code is a finding
            out.setdefault("pass_errors", {})[cls.name] = f"{type(exc).__name__}: {exc}"[:200]
            continue
        present = sum(s.present for s in sites)
        if sites:
            out["sites"][cls.name] = [present, len(sites) - present]
        if trips and cls.deterministic:
            outcomes: Counter = Counter()
            for site in [s for s in sites if s.present][:trips]:
                try:
                    trip = roundtrip(cls(), ir, site)
                except Exception as exc:  # noqa: BLE001
                    outcomes["crashed"] += 1
                    out.setdefault("pass_errors", {})[cls.name] = f"{type(exc).__name__}: {exc}"[:200]
                    continue
                if not trip.backward.ok:
                    outcomes["refused" if hasattr(trip.backward, "reason") else "failed"] += 1
                elif trip.forward is None or not trip.forward.ok:
                    outcomes["no-site" if trip.forward is not None and hasattr(trip.forward, "reason")
                             and "no optimization site" in trip.forward.reason else "forward-refused"] += 1
                else:
                    outcomes["same" if trip.same else "different"] += 1
            if outcomes:
                out.setdefault("roundtrip", {})[cls.name] = dict(outcomes)
    out["seconds"] = round(time.perf_counter() - start, 3)
    return out


def summarize(results: list[dict[str, Any]], roots: dict[str, str]) -> dict[str, Any]:
    per_pass: dict[str, Counter] = defaultdict(Counter)
    per_root: dict[str, Counter] = defaultdict(Counter)
    errors = []
    for r in results:
        root = roots[r["file"]]
        per_root[root]["files"] += 1
        per_root[root][r["language"]] += 1
        if "error" in r:
            per_root[root]["unparsed"] += 1
            errors.append({"file": r["file"], "error": r["error"]})
            continue
        for name, outcomes in r.get("roundtrip", {}).items():
            for outcome, n in outcomes.items():
                per_pass[name][f"trip:{outcome}"] += n
        for name, (present, applicable) in r["sites"].items():
            c = per_pass[name]
            c["present"] += present
            c["applicable"] += applicable
            c["files_present"] += present > 0
            c[f"present:{root}"] += present
    from passes.registry import all_pass_classes

    passes = []
    for cls in all_pass_classes():
        c = per_pass.get(cls.name, Counter())
        passes.append({"pass": cls.name, "languages": list(cls.languages),
                       "deterministic": cls.deterministic, "present": c["present"],
                       "applicable": c["applicable"], "files_present": c["files_present"],
                       "roundtrip": {k[5:]: v for k, v in sorted(c.items()) if k.startswith("trip:")},
                       "present_by_source": {root: c[f"present:{root}"] for root in sorted(per_root)}})
    return {"sources": {root: dict(c) for root, c in sorted(per_root.items())},
            "passes": passes, "unparsed": errors,
            "pass_errors": [{"file": r["file"], **{"errors": r["pass_errors"]}}
                            for r in results if r.get("pass_errors")]}


def markdown(summary: dict[str, Any], command: str) -> str:
    roots = list(summary["sources"])
    lines = ["# Pass sites found in third-party kernel code", "",
             f"Measured by `{command}` ({summary['elapsed_s']} s with {summary['jobs']} "
             "worker(s)).", *([summary["note"]] if summary["note"] else []), "",
             "| source | files | triton | cuda | unparsed |", "|---|---:|---:|---:|---:|"]
    for root, c in summary["sources"].items():
        lines.append(f"| {root} | {c.get('files', 0)} | {c.get('triton', 0)} | {c.get('cuda', 0)} "
                     f"| {c.get('unparsed', 0)} |")
    lines += ["", "Present = the optimization is there (a de-optimization site); applicable = "
              "the pass could apply it there (for the LLM-only intents: every kernel without "
              "the construct).", "",
              "| pass | lang | rule | present | in files | applicable | " + " | ".join(roots) + " |",
              "|---|---|---|---:|---:|---:|" + "---:|" * len(roots)]
    for p in summary["passes"]:
        by = " | ".join(str(p["present_by_source"].get(r, 0)) for r in roots)
        lines.append(f"| {p['pass']} | {','.join(p['languages'])} | "
                     f"{'yes' if p['deterministic'] else 'llm'} | {p['present']} | "
                     f"{p['files_present']} | {p['applicable']} | {by} |")
    trips = [p for p in summary["passes"] if p["roundtrip"]]
    if trips:
        lines += ["", "Round trips (`optimize(deoptimize(K)) == K` up to formatting) on the first "
                  f"{summary['trips']} present site(s) of each pass in each file:", "",
                  "| pass | tried | same | different | refused (Skipped, with why) | other |",
                  "|---|---:|---:|---:|---:|---:|"]
        for p in trips:
            r = p["roundtrip"]
            other = sum(v for k, v in r.items() if k not in ("same", "different", "refused"))
            lines.append(f"| {p['pass']} | {sum(r.values())} | {r.get('same', 0)} | "
                         f"{r.get('different', 0)} | {r.get('refused', 0)} | {other} |")
    if summary["pass_errors"]:
        lines += ["", f"Detector errors on {len(summary['pass_errors'])} file(s) (see sites.json)."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2)))
    parser.add_argument("--note", default="", help="A line for the report (e.g. package versions).")
    parser.add_argument("--roundtrip", type=int, default=0, metavar="N",
                        help="Also round-trip the first N present sites of each pass per file.")
    args = parser.parse_args(argv)
    jobs: list[tuple[str, str, int]] = []
    roots: dict[str, str] = {}
    for folder in args.folders:
        if not folder.is_dir():
            parser.error(f"{folder} is not a folder")
        label = folder.name  # the name given (a link's own name, e.g. liger-kernel)
        for path, lang in kernel_files(folder):
            jobs.append((str(path), lang, args.roundtrip))
            roots[str(path)] = label
    started = time.perf_counter()
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        results = list(pool.map(scan_file, jobs, chunksize=4))
    summary = summarize(results, roots)
    summary["elapsed_s"] = round(time.perf_counter() - started, 1)
    summary["jobs"] = args.jobs
    summary["trips"] = args.roundtrip
    summary["note"] = args.note
    summary["files"] = [{"file": r["file"], "source": roots[r["file"]], "sites": r["sites"],
                         **({"error": r["error"]} if "error" in r else {})} for r in results]
    command = "python bench/scan_sites.py " + " ".join(str(f) for f in args.folders) + (
        f" --roundtrip {args.roundtrip}" if args.roundtrip else "")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "sites.json").write_text(json.dumps({"command": command, **summary}, indent=1))
    (args.out / "sites.md").write_text(markdown(summary, command))
    print(markdown(summary, command))
    return 0


if __name__ == "__main__":
    sys.exit(main())
