#!/usr/bin/env python3
"""Build the shipped SkillCard library (`lineage/shipped_library.json`) with its provenance.

    # on a GPU machine: lift the experts' device lineages, admit the cards at the device tier on
    # their held-out lineages, record GPU, commit, lineages and command in the index
    python3 bench/build_library.py rebuild --out DIR [--tier device] [--jobs N] [--bundle FILE]
    # put admitted libraries together (each part's GPU, commit and date as they were admitted)
    python3 bench/build_library.py assemble --out DIR --part LIB GPU COMMIT DATE [--part ...]
        [--bundle FILE]
    # add the admitted cards of LIB to an existing bundle as one more part, admitted at TIER
    # (e.g. emulate: CUDA run on the CPU, no GPU and no timing)
    python3 bench/build_library.py extend --out DIR --from-bundle lineage/shipped_library.json
        --part LIB --tier emulate --commit COMMIT --date DATE [--held-out DIR ...] [--bundle FILE]

`rebuild` reads the lineages under bench/results/lineages: `device/*` (Triton) and
`device-cuda/*` (CUDA) are lifted; `heldout/*` and `heldout-cuda/*` are the held-out contexts of
admission (`klineage skills --admit ... --held-out ...`). It runs the `klineage` of this
repository (`python3 -m lineage`). DIR is a library folder; `--bundle
lineage/shipped_library.json` also writes its admitted cards and provenance as the bundle the
package ships (bump `VERSION` below when the cards change). `assemble` copies the admitted cards of each LIB and records, per part, the
lineages its cards were lifted from (the lineage folder of each card's source expert). `extend`
keeps every card and part of the bundle and adds LIB's admitted cards whose ids the bundle does
not hold (a card of the same id keeps the evidence and admission it shipped with; the skipped
ids are recorded), as a part with LIB's own tier, GPU ("no GPU" below the device tier),
commit and date, and the lineages its cards were lifted from (--lineage).
"""
from __future__ import annotations

import argparse
import datetime
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lineage.shipped import write_bundle  # noqa: E402
from lineage.skills import Library  # noqa: E402

VERSION = "2"
LINEAGES = ROOT / "bench" / "results" / "lineages"
# language -> (lineages lifted, held-out lineages of admission), globs under LINEAGES
SOURCES = {"triton": ("device/*/lineage.json", "heldout/*/lineage.json"),
           "cuda": ("device-cuda/*/lineage.json", "heldout-cuda/*/lineage.json")}


def _git_commit() -> str:
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                          text=True).stdout.strip() or "?"


def _gpu_name() -> str:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        out = ""
    return out.splitlines()[0] if out else "no GPU"


def _rel(path: Path) -> str:
    return str(path.resolve().relative_to(ROOT))


def _klineage(*args: str) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-m", "lineage", *args, "--json"], cwd=ROOT,
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"build_library: klineage {' '.join(args)} failed: {done.stderr.strip()}")
    return json.loads(done.stdout)


def _lineage_of(source: dict[str, Any]) -> Path | None:
    """The lineage folder a card's source expert was induced into."""
    expert = Path(str(source.get("expert", "")))
    case = str(source.get("case", ""))
    folder = LINEAGES / ("device-cuda" if expert.suffix == ".cu" else "device") / (
        f"{case}_cuda" if expert.suffix == ".cu" else case)
    return folder if (folder / "lineage.json").is_file() else None


def rebuild(out: Path, tier: str, jobs: int | None) -> dict[str, Any]:
    parts = []
    for language, (lifted, held) in SOURCES.items():
        sources = sorted(LINEAGES.glob(lifted))
        held_out = sorted(LINEAGES.glob(held))
        if not sources:
            continue
        add = [a for s in sources for a in ("--add", str(s))]
        _klineage("skills", str(out), *add)
        admit = [a for s in sources for a in ("--admit", str(s))]
        admit += [a for s in held_out for a in ("--held-out", str(s))]
        result = _klineage("skills", str(out), *admit, "--tier", tier,
                           *(["--jobs", str(jobs)] if jobs else []))
        cards = [c for c in Library.open(out).cards() if c.language == language]
        parts.append({"language": language, "tier": tier, "gpu": _gpu_name(),
                      "commit": _git_commit(),
                      "date": datetime.date.today().isoformat(),
                      "lineages": [_rel(s.parent) for s in sources],
                      "held_out": [_rel(s.parent) for s in held_out],
                      "cards": sum(c.admitted for c in cards), "hypotheses": len(cards),
                      "admission": {k: len(v) if isinstance(v, list) else v
                                    for k, v in (result.get("admission") or {}).items()}})
    return {"parts": parts}


def assemble(out: Path, specs: list[list[str]]) -> dict[str, Any]:
    lib = Library.open(out, create=True)
    parts = []
    for source_dir, gpu, commit, date in specs:
        source = Library.open(source_dir)
        cards = [c for c in source.cards() if c.admitted]
        for card in cards:
            lib.put(card)
        lineages = sorted({_rel(p) for c in cards for s in c.sources
                           if (p := _lineage_of(s)) is not None})
        parts.append({"language": ",".join(sorted({c.language for c in cards})),
                      "tier": "device", "gpu": gpu, "commit": commit, "date": date,
                      "lineages": lineages, "cards": len(cards),
                      "from": source_dir})
    return {"parts": parts}


def _source_lineages(cards: list[Any]) -> list[str]:
    """The device lineage folder of each card's source expert (where one exists)."""
    return sorted({_rel(p) for c in cards for s in c.sources if (p := _lineage_of(s)) is not None})


def extend(out: Path, bundle: Path, source_dir: str, tier: str, commit: str, date: str,
           lineages: list[str], held_out: list[str], admitted_by: str = "") -> dict[str, Any]:
    from lineage.skills import SkillCard  # noqa: PLC0415

    data = json.loads(bundle.read_text(encoding="utf-8"))
    lib = Library.open(out, create=True)
    for card in data["cards"]:
        lib.put(SkillCard.from_json(card))
    shipped = set(lib.ids())
    cards = [c for c in Library.open(source_dir).cards() if c.admitted]
    new = [c for c in cards if c.id not in shipped]
    for card in new:
        lib.put(card)
    parts = list((data.get("provenance") or {}).get("parts") or [])
    parts.append({"language": ",".join(sorted({c.language for c in new})) or "none",
                  "tier": tier, "gpu": _gpu_name() if tier == "device" else "no GPU",
                  "commit": commit, "date": date,
                  "lineages": lineages or _source_lineages(new),
                  "held_out": held_out, "cards": len(new), "from": source_dir,
                  **({"admitted_by": admitted_by} if admitted_by else {}),
                  "ids": sorted(c.id for c in new),
                  "already_shipped": sorted(c.id for c in cards if c.id in shipped)})
    return {"parts": parts, "extended_from": str(bundle)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    rb = sub.add_parser("rebuild", help="lift and admit from the lineages (GPU machine)")
    rb.add_argument("--out", type=Path, required=True)
    rb.add_argument("--tier", default="device", choices=["device", "interpret", "static"])
    rb.add_argument("--jobs", type=int, default=None)
    asm = sub.add_parser("assemble", help="put admitted libraries together")
    asm.add_argument("--out", type=Path, required=True)
    asm.add_argument("--part", nargs=4, action="append", required=True,
                     metavar=("LIB", "GPU", "COMMIT", "DATE"))
    ext = sub.add_parser("extend", help="add an admitted library to a bundle as one more part")
    ext.add_argument("--out", type=Path, required=True)
    ext.add_argument("--from-bundle", type=Path, required=True,
                     help="the bundle whose cards and parts are kept")
    ext.add_argument("--part", required=True, metavar="LIB", help="the admitted library added")
    ext.add_argument("--tier", required=True, choices=["device", "emulate", "interpret", "static"],
                     help="the gate tier LIB's cards were admitted at")
    ext.add_argument("--commit", required=True, help="the commit LIB was admitted at")
    ext.add_argument("--date", required=True, help="the date LIB was admitted (YYYY-MM-DD)")
    ext.add_argument("--lineage", action="append", default=[],
                     help="a lineage folder LIB's cards were lifted from (repeatable; default: "
                          "read from the cards)")
    ext.add_argument("--held-out", action="append", default=[],
                     help="a held-out lineage folder of LIB's admission (repeatable)")
    ext.add_argument("--admitted-by", default="",
                     help="the command that admitted LIB's cards (recorded in the part)")
    for p in (rb, asm, ext):
        p.add_argument("--bundle", type=Path, default=None,
                       help="also write the admitted cards and provenance as this bundle file")
    args = ap.parse_args(argv)
    if args.out.exists() and any(args.out.iterdir()):
        print(f"build_library: {args.out} is not empty; name a new folder", file=sys.stderr)
        return 2
    if args.cmd == "extend":
        if not args.from_bundle.is_file():
            print(f"build_library: no bundle at {args.from_bundle}", file=sys.stderr)
            return 2
        provenance = extend(args.out, args.from_bundle, args.part, args.tier, args.commit,
                            args.date, args.lineage, args.held_out, args.admitted_by)
    elif args.cmd == "rebuild":
        provenance = rebuild(args.out, args.tier, args.jobs)
    else:
        provenance = assemble(args.out, args.part)
    lib = Library.open(args.out, create=True)
    lib.set_provenance({"version": VERSION, "commit": _git_commit(),
                        "built": datetime.date.today().isoformat(),
                        "command": "python3 bench/build_library.py " + " ".join(
                            sys.argv[1:] if argv is None else argv),
                        **provenance})
    if args.bundle is not None:
        write_bundle(lib, args.bundle, lib.provenance or {})
    print(json.dumps(lib.provenance, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
