"""Gate every honest kernel of the repository and count the rejections: false rejections.

    python3 bench/gate_honest.py --tier device|interpret --out FILE.json [--md FILE.md]
        [--jobs N] [--box SECONDS] [--only-cases a,b] [--limit N] [--shard I/N]
        [--skip-passed EARLIER.json]
    python3 bench/gate_honest.py --merge SHARD.json [SHARD.json ...] --out FILE.json [--md FILE.md]

Honest kernels, in this order (each labelled with where it came from):

- `expert`: each case's experts (experts/*/case.py EXPERTS);
- `start`: the start kernel of every held-out case under bench/heldout (case folders and
  KernelBench problem files alike, `gate.cases.find_cases`);
- `lineage`: every state with a source in bench/results/lineages/*/*/lineage.json, against its
  node's case (else the lineage's folder name);
- `heldout`: every state with a source in bench/results/heldout/*/ops/*/optimize/lineage.json,
  against its node's case (a path relative to the repository).

A kernel is gated once per (case ref, sha256 of its source): the same source reached from
several places (a held-out start kernel is the root of its operator's lineages) is one record
whose `places` lists them all. A lineage's CUDA state is launched by the host module beside the
lineage's expert (`graph.experts`), as induction gated it; one whose expert is not here is
skipped (counted as such); a kernel whose case does not load here is recorded with failure kind
`error` and is not counted as a rejection.

Gates run in batches of --jobs through `gate.check_many` (device-tier gates time one at a time
under the GPU lock; the rest of their work overlaps), each a fresh measurement (`cache=False`).
With --box, no batch starts after that many seconds: the kernels left are counted as not
reached. The JSON (run settings, counts, one record per gated kernel) is rewritten after every
batch, so a killed run keeps what it did; --md writes a table per case (gated, passed, rejected
by failure kind) and every rejection with its reason; the same summary is printed at the end.

--shard I/N gates the kernels whose position in the deduplicated list is I modulo N (one shard
per GPU: `CUDA_VISIBLE_DEVICES=I ... --shard I/N`); --merge joins the shards' JSON files into
one record and summary (kernels no shard reached are counted as not reached).
--skip-passed leaves out the kernels an earlier run of this script passed (same label, case and
source: records carry the source's sha256; an older record without one is taken only for a
lineage state, whose label is its content hash; give it only a run of the same gate version);
their records are carried into this run's file, marked `carried_from`, so its counts cover them.
"""
from __future__ import annotations

import argparse
import collections
import hashlib
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import gate  # noqa: E402
from gate.cases import find_cases  # noqa: E402

ORIGINS = ("expert", "start", "lineage", "heldout")
"""Where an honest kernel comes from, in the order they are gated."""
LINEAGES = "bench/results/lineages/*/*/lineage.json"
HELDOUT_CASES = "bench/heldout"
HELDOUT_LINEAGES = "bench/results/heldout/*/ops/*/optimize/lineage.json"
REASON_CHARS = 200


@dataclass(slots=True)
class Kernel:
    """One honest kernel to gate: its source against a case (`case` None where the case does not
    load here; `load_error` then says why), and every place the same source was found."""

    label: str
    origin: str
    case_ref: str
    case: Any
    language: str
    source: str
    host: str | None
    load_error: str | None = None
    places: list[str] = field(default_factory=list)

    @property
    def key(self) -> tuple[str, str]:
        return self.case_ref, hashlib.sha256(self.source.encode()).hexdigest()


class _Cases:
    """`gate.load_case` once per reference; a case that does not load gives (None, reason)."""

    def __init__(self) -> None:
        self._loaded: dict[str, tuple[Any, str | None]] = {}

    def get(self, ref: str | Path) -> tuple[Any, str | None]:
        k = str(ref)
        if k not in self._loaded:
            try:
                self._loaded[k] = gate.load_case(ref), None
            except Exception as exc:  # noqa: BLE001 — a case that does not load is recorded
                self._loaded[k] = None, f"{type(exc).__name__}: {exc}"
        return self._loaded[k]


def _kernel(cases: _Cases, label: str, origin: str, ref: str | Path, language: str, source: str,
            host: str | None) -> Kernel:
    case, error = cases.get(ref)
    case_ref = case.ref if case is not None else str(ref)
    return Kernel(label, origin, case_ref, case, language, source, host, error, [label])


def _states(lineage: Path) -> list[dict[str, Any]]:
    data = json.loads(lineage.read_text())
    return [n for n in data.get("nodes", [])
            if str(n.get("type", "state")).lower() == "state" and n.get("source")]


def kernels(root: Path = ROOT) -> tuple[list[Kernel], int]:
    """Every honest kernel under `root` (module docstring), deduplicated by (case ref, sha256
    of the source) in first-seen order, and the number of CUDA lineage states skipped."""
    cases = _Cases()
    found: list[Kernel] = []
    skipped = 0
    for name in gate.list_cases():
        case, _ = cases.get(name)
        if case is None:
            continue
        for path, lang in case.expert_paths():
            host = path.with_suffix(".py").read_text() if lang == "cuda" else None
            found.append(_kernel(cases, f"expert {name}/{path.name}", "expert", name, lang,
                                 path.read_text(), host))
    for path in find_cases([root / HELDOUT_CASES]) if (root / HELDOUT_CASES).is_dir() else []:
        case, error = cases.get(path)
        start = case.start_path() if case is not None else None
        if start is None or not start.is_file():
            continue
        lang = "cuda" if start.suffix == ".cu" else "triton"
        host = start.with_suffix(".py").read_text() if lang == "cuda" else None
        found.append(_kernel(cases, f"start {_rel(start, root)}", "start", path, lang,
                             start.read_text(), host))
    for origin, pattern in (("lineage", LINEAGES), ("heldout", HELDOUT_LINEAGES)):
        for lineage in sorted(root.glob(pattern)):
            # The parts of the path the pattern's wildcards matched: run and operator.
            rel = lineage.relative_to(root).parts
            where = "/".join(part for part, pat in zip(rel, pattern.split("/")) if "*" in pat)
            host_of = _cuda_host(lineage, root)
            for node in _states(lineage):
                lang = node.get("language", "triton")
                host = None
                if lang == "cuda":
                    host = host_of
                    if host is None:
                        skipped += 1  # no expert with a host module beside it to launch it
                        continue
                raw = node.get("case") or lineage.parent.name
                # A held-out node names its case by a path relative to the repository.
                ref: str | Path = root / raw if (root / raw).exists() else raw
                found.append(_kernel(cases, f"{origin} {where} {node.get('id', '?')}", origin,
                                     ref, lang, node["source"], host))
    return dedup(found), skipped


def _cuda_host(lineage: Path, root: Path) -> str | None:
    """The host module that launches a CUDA lineage's states: the one beside the lineage's
    expert (`graph.experts`, a path relative to the repository), as induction gated them; None
    when the lineage names no such expert here."""
    data = json.loads(lineage.read_text())
    for expert in (data.get("graph") or {}).get("experts") or ():
        path = Path(expert)
        path = path if path.is_absolute() else root / path
        if path.suffix == ".cu" and path.with_suffix(".py").is_file():
            return path.with_suffix(".py").read_text()
    return None


def dedup(found: list[Kernel]) -> list[Kernel]:
    """One kernel per (case ref, sha256 of the source), the first seen, with every place."""
    unique: dict[tuple[str, str], Kernel] = {}
    for k in found:
        if k.key in unique:
            unique[k.key].places.append(k.label)
        else:
            unique[k.key] = k
    return list(unique.values())


def _rel(path: Path, root: Path) -> str:
    return str(path.relative_to(root)) if path.is_relative_to(root) else str(path)


def select(todo: list[Kernel], only: set[str]) -> list[Kernel]:
    """The kernels whose case is named (case name or ref) in `only`; raises SystemExit(2) with
    one line naming any entry that matches no kernel."""
    def names(k: Kernel) -> set[str]:
        return {k.case_ref} | ({k.case.name} if k.case is not None else set())

    kept = [k for k in todo if names(k) & only]
    missing = only - set().union(*(names(k) for k in kept)) if kept else only
    if missing:
        raise _bad(f"no honest kernel of case {', '.join(sorted(missing))}")
    return kept


def _bad(message: str) -> SystemExit:
    print(f"gate_honest: {message}", file=sys.stderr)
    return SystemExit(2)


def _record(k: Kernel, verdict: Any | None, error: str | None, batch: int,
            batch_s: float) -> dict[str, Any]:
    rec: dict[str, Any] = {"kernel": k.label, "origin": k.origin, "case": k.case_ref,
                           "language": k.language, "places": len(k.places), "sha256": k.key[1]}
    if len(k.places) > 1:
        rec["also"] = k.places[1:]
    if verdict is None:
        rec.update(ok=None, failure_kind="error", reason=(error or "")[:400])
    else:
        timing = verdict.timing
        rec.update(ok=verdict.ok, tier=verdict.tier.value, stage=verdict.stage,
                   failure_kind=verdict.failure_kind.value if verdict.failure_kind else None,
                   reason=(verdict.reason or "")[:400],
                   ms=timing.candidate_ms if timing else None,
                   reference_ms=timing.reference_ms if timing else None,
                   phases={name: round(sec, 2) for name, sec in verdict.phases})
    rec.update(batch=batch, batch_seconds=round(batch_s, 2))
    return rec


def gate_batch(batch: list[Kernel], tier: str, jobs: int) -> list[tuple[Any | None, str | None]]:
    """(verdict, None) or (None, error) per kernel, in order: every gateable kernel of the batch
    through one `gate.check_many`; one that the gate refuses as bad input gets its error."""
    from gate.check import prepare  # noqa: PLC0415 — validates a request without running it

    out: list[tuple[Any | None, str | None]] = [(None, k.load_error) for k in batch]
    requests: list[tuple[int, gate.CheckRequest]] = []
    for i, k in enumerate(batch):
        if k.case is None:
            continue
        try:
            prepare(k.source, k.language, k.case, tier, host=k.host)
        except Exception as exc:  # noqa: BLE001 — recorded, the rest of the batch still runs
            out[i] = None, f"{type(exc).__name__}: {exc}"
            continue
        requests.append((i, gate.CheckRequest(k.source, k.language, k.case, tier, host=k.host,
                                              cache=False)))
    if requests:
        try:
            verdicts = gate.check_many([r for _, r in requests], jobs=jobs)
            for (i, _), v in zip(requests, verdicts):
                out[i] = v, None
        except Exception:  # noqa: BLE001 — one request failed the batch: gate them one by one
            for i, r in requests:
                try:
                    out[i] = gate.check(r.source, r.language, r.case, r.tier, host=r.host,
                                        cache=False), None
                except Exception as exc:  # noqa: BLE001
                    out[i] = None, f"{type(exc).__name__}: {exc}"
    return out


def tally(todo: list[Kernel], reached: int) -> dict[str, Any]:
    """Per case: the kernels not reached, and where its kernels came from (places by origin)."""
    origins: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for k in todo:
        for place in k.places:
            origins[k.case_ref][place.split(" ", 1)[0]] += 1
    return {"not_reached_by_case": dict(collections.Counter(k.case_ref for k in todo[reached:])),
            "origins_by_case": {case: dict(c) for case, c in origins.items()}}


def summarize(records: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    """The markdown summary: per case, kernels gated, passed, rejected by failure kind, errors
    and not reached; then every rejection with its label and reason. `meta` holds the run's
    settings and `tally`'s counts."""
    not_reached = collections.Counter(meta["not_reached_by_case"])
    origins = meta["origins_by_case"]
    by_case: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for r in records:
        by_case[r["case"]].append(r)
    kinds = sorted({r["failure_kind"] for r in records if r["ok"] is False})
    rejected = [r for r in records if r["ok"] is False]
    own = [r for r in rejected if (r.get("static") or {}).get("ok") is False]
    errors = sum(1 for r in records if r["ok"] is None)
    carried = sum(1 for r in records if r.get("carried_from"))
    lines = [f"# Honest kernels through the gate ({meta['tier']} tier)", "",
             f"{meta['kernels']} kernels ({meta['places']} places, {meta['skipped']} CUDA lineage "
             f"states skipped), {len(records)} gated in {meta['elapsed_s']:.0f} s "
             f"(--jobs {meta['jobs']}, --box {meta['box'] or 'none'}"
             + (f"; {carried} of them passes carried from an earlier run" if carried else "")
             + f"): {sum(1 for r in records if r['ok'])} passed, {len(rejected)} rejected "
             + (f"({len(rejected) - len(own)} false rejections; {len(own)} the kernel's own: the "
                f"static tier rejects them too)" if own else "(false rejections)")
             + f", {errors} errors, {sum(not_reached.values())} not reached.", "",
             "| case | from | gated | passed | " + " | ".join(kinds + ["error", "not reached"])
             + " |", "|---|---|---:|---:|" + "---:|" * (len(kinds) + 2)]
    for case in sorted(set(by_case) | set(not_reached)):
        recs = by_case.get(case, [])
        count = collections.Counter(r["failure_kind"] for r in recs if r["ok"] is False)
        src = ", ".join(f"{o} {origins.get(case, {}).get(o)}" for o in ORIGINS
                        if origins.get(case, {}).get(o))
        cells = [str(count.get(kind, 0)) for kind in kinds]
        cells += [str(sum(1 for r in recs if r["ok"] is None)), str(not_reached.get(case, 0))]
        lines.append(f"| {case} | {src} | {len(recs)} | {sum(1 for r in recs if r['ok'])} | "
                     + " | ".join(cells) + " |")
    for title, rows in (("Rejections", rejected), ("Errors (not counted)",
                                                   [r for r in records if r["ok"] is None])):
        if not rows:
            continue
        lines += ["", f"## {title}", "", "| kernel | case | kind | reason | static tier |",
                  "|---|---|---|---|---|"]
        for r in rows:
            reason = " ".join((r["reason"] or "").split())[:REASON_CHARS].replace("|", "\\|")
            places = f" (+{r['places'] - 1} places)" if r["places"] > 1 else ""
            static = r.get("static")
            again = ("-" if static is None else "passes" if static["ok"] else
                     " ".join(f"{static.get('failure_kind') or 'not checked'}: "
                              f"{static['reason']}".split())[-REASON_CHARS:].replace("|", "\\|"))
            lines.append(f"| {r['kernel']}{places} | {r['case']} | {r['failure_kind']} | "
                         f"{reason} | {again} |")
    return "\n".join(lines) + "\n"


def passed_in(path: str) -> dict[tuple[str, str], dict[str, Any]]:
    """(label, case) -> record of each kernel an earlier run's file passed; SystemExit(2) with
    one line where the file cannot be read."""
    try:
        data = json.loads(Path(path).read_text())
        return {(r["kernel"], r["case"]): r for r in data["records"] if r.get("ok") is True}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise _bad(f"--skip-passed {path}: {exc}") from None


def _carried(k: Kernel, passed: dict[tuple[str, str], dict[str, Any]]) -> bool:
    """Whether an earlier run passed this very kernel: same label and case, and the same source
    (its sha256, where the earlier record has one; without it only a lineage state, whose label
    is its content hash, is taken for the same kernel)."""
    rec = passed.get((k.label, k.case_ref))
    if rec is None:
        return False
    if "sha256" in rec:
        return rec["sha256"] == k.key[1]
    return k.origin in ("lineage", "heldout")


def shard(text: str) -> tuple[int, int]:
    """(I, N) of an `I/N` shard; raises SystemExit(2) with one line unless 0 <= I < N."""
    try:
        index, count = (int(x) for x in text.split("/"))
    except ValueError:
        raise _bad(f"--shard {text}: expected I/N, e.g. 0/2") from None
    if not 0 <= index < count:
        raise _bad(f"--shard {text}: I must be in 0..N-1")
    return index, count


def recheck_static(records: list[dict[str, Any]], root: Path = ROOT) -> None:
    """Gate every rejected kernel of `records` again at the static tier (compiles for the GPU
    on this machine) and record the verdict under `"static"`. A rejection the static tier
    reproduces is the kernel's own (it does not compile for the GPU: a state kept at the
    interpret tier, whose interpreter has no tensor-size limit), not a false rejection."""
    rejected = [r for r in records if r.get("ok") is False and r.get("sha256")]
    if not rejected:
        return
    by_key = {k.key: k for k in kernels(root)[0]}
    for r in rejected:
        k = by_key.get((r["case"], r["sha256"]))
        if k is None or k.case is None:
            r["static"] = {"ok": None, "reason": "the kernel is no longer in the repository"}
            continue
        try:
            v = gate.check(k.source, k.language, k.case, "static", host=k.host, cache=False)
        except Exception as exc:  # noqa: BLE001 — recorded, the others are still checked
            r["static"] = {"ok": None, "reason": f"{type(exc).__name__}: {exc}"[:400]}
            continue
        # the end of a compiler's message holds its cause ("caused by ValueError: ...")
        r["static"] = {"ok": v.ok, "failure_kind": v.failure_kind.value if v.failure_kind else None,
                       "reason": (v.reason or "")[-400:]}


def merge(files: list[str], out: Path, md: str | None, recheck: bool = False) -> int:
    """One JSON and summary from shard files of one tier: records joined, counts summed; with
    `recheck`, the rejections gated again at the static tier (`recheck_static`)."""
    try:
        parts = [json.loads(Path(f).read_text()) for f in files]
    except (OSError, ValueError) as exc:
        print(f"gate_honest: --merge: {exc}", file=sys.stderr)
        return 2
    tiers = {p.get("tier") for p in parts}
    if len(tiers) != 1:
        print(f"gate_honest: --merge: shards of different tiers {sorted(map(str, tiers))}",
              file=sys.stderr)
        return 2
    records = [r for p in parts for r in p["records"]]
    if recheck:
        recheck_static(records)
    not_reached: collections.Counter[str] = collections.Counter()
    origins: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for p in parts:
        not_reached.update(p.get("not_reached_by_case", {}))
        for case, counts in p.get("origins_by_case", {}).items():
            origins[case].update(counts)
    meta: dict[str, Any] = {
        "tier": tiers.pop(), "jobs": max(p["jobs"] for p in parts), "box": max(p["box"] for p in parts),
        "shards": [p.get("shard") for p in parts], "kernels": sum(p["kernels"] for p in parts),
        "places": sum(p["places"] for p in parts), "skipped": max(p["skipped"] for p in parts),
        "elapsed_s": max(p["elapsed_s"] for p in parts), "gated": len(records),
        "not_reached": sum(not_reached.values()), "complete": all(p["complete"] for p in parts),
        "merged_from": files, "not_reached_by_case": dict(not_reached),
        "origins_by_case": {case: dict(c) for case, c in origins.items()}}
    out.write_text(json.dumps({**meta, "records": records}, indent=1))
    summary = summarize(records, meta)
    if md:
        Path(md).write_text(summary)
    print(summary, end="")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tier", default="interpret")
    ap.add_argument("--out", required=True, help="JSON file, rewritten after every batch")
    ap.add_argument("--md", help="markdown summary file")
    ap.add_argument("--jobs", type=int, default=1, help="kernels gated at once (one batch)")
    ap.add_argument("--box", type=float, default=0.0,
                    help="seconds after which no new batch starts (0: none)")
    ap.add_argument("--only-cases", default="", help="comma-separated case names or refs")
    ap.add_argument("--limit", type=int, default=0, help="gate at most N kernels (0: all)")
    ap.add_argument("--shard", default="", help="I/N: the kernels at positions I modulo N")
    ap.add_argument("--skip-passed", default=None, metavar="JSON",
                    help="an earlier run's file: the kernels it passed are carried, not gated")
    ap.add_argument("--merge", nargs="+", default=None, metavar="JSON",
                    help="join these shard files into --out (and --md); gates nothing")
    ap.add_argument("--recheck-static", action="store_true",
                    help="with --merge: gate each rejected kernel again at the static tier; a "
                         "rejection it reproduces is the kernel's own, not a false rejection")
    args = ap.parse_args(argv)
    if args.recheck_static and not args.merge:
        print("gate_honest: --recheck-static goes with --merge", file=sys.stderr)
        return 2
    if args.merge:
        return merge(args.merge, Path(args.out), args.md, args.recheck_static)
    try:
        if args.jobs < 1:
            raise _bad(f"--jobs must be at least 1, not {args.jobs}")
        if args.box < 0 or args.limit < 0:
            raise _bad("--box and --limit must not be negative")
        for given in (args.out, args.md):
            if given and not Path(given).resolve().parent.is_dir():
                raise _bad(f"{given}: its folder does not exist")
        try:
            gate.resolve_tier(args.tier, "triton", gpu=True)
        except Exception as exc:  # noqa: BLE001
            raise _bad(f"--tier {args.tier}: {exc}") from None
        todo, skipped = kernels()
        only = {c.strip() for c in args.only_cases.split(",") if c.strip()}
        if only:
            todo = select(todo, only)
        carried = passed_in(args.skip_passed) if args.skip_passed else {}
        if args.shard:
            index, count = shard(args.shard)
            todo = todo[index::count]
    except SystemExit as exc:
        return int(exc.code or 0)
    records: list[dict[str, Any]] = []
    if carried:
        done = [k for k in todo if _carried(k, carried)]
        records = [{**carried[(k.label, k.case_ref)], "carried_from": args.skip_passed}
                   for k in done]
        todo = done + [k for k in todo if not _carried(k, carried)]
    if args.limit:
        todo = todo[:args.limit + len(records)]
    meta: dict[str, Any] = {"tier": args.tier, "jobs": args.jobs, "box": args.box,
                            "only_cases": sorted(only), "shard": args.shard, "kernels": len(todo),
                            "places": sum(len(k.places) for k in todo), "skipped": skipped}
    out = Path(args.out)
    t0 = time.monotonic()
    reached = len(records)

    def write(done: bool) -> None:
        meta.update(gated=len(records), not_reached=len(todo) - reached, complete=done,
                    elapsed_s=round(time.monotonic() - t0, 1), **tally(todo, reached))
        out.write_text(json.dumps({**meta, "records": records}, indent=1))

    print(f"{len(todo)} kernels ({meta['places']} places, {skipped} CUDA lineage states "
          f"skipped), --jobs {args.jobs}", file=sys.stderr, flush=True)
    write(False)
    for number, start in enumerate(range(reached, len(todo), args.jobs)):
        if args.box and time.monotonic() - t0 >= args.box:
            break
        batch = todo[start:start + args.jobs]
        b0 = time.monotonic()
        results = gate_batch(batch, args.tier, args.jobs)
        seconds = time.monotonic() - b0
        for k, (verdict, error) in zip(batch, results):
            rec = _record(k, verdict, error, number, seconds)
            records.append(rec)
            print(json.dumps({f: rec.get(f) for f in ("kernel", "case", "ok", "failure_kind",
                                                      "reason")}), flush=True)
        reached = start + len(batch)
        write(False)
    write(reached == len(todo))
    summary = summarize(records, meta)
    if args.md:
        Path(args.md).write_text(summary)
    print(summary, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
