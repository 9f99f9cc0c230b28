#!/usr/bin/env python3
"""Build the shipped SkillCard library (`lineage/shipped_library.json`) with its provenance.

    # on a GPU machine: lift the experts' device lineages, admit the cards at the device tier on
    # their held-out lineages, record GPU, commit, lineages and command in the index
    python3 bench/build_library.py rebuild --out DIR [--tier device] [--jobs N] [--bundle FILE]
    # put admitted libraries together (each part's GPU, commit and date as they were admitted)
    python3 bench/build_library.py assemble --out DIR --part LIB GPU COMMIT DATE [--part ...]
        [--bundle FILE]

`rebuild` reads the lineages under bench/results/lineages: `device/*` (Triton) and
`device-cuda/*` (CUDA) are lifted; `heldout/*` and `heldout-cuda/*` are the held-out contexts of
admission (`klineage skills --admit ... --held-out ...`). It runs the `klineage` of this
repository (`python3 -m lineage`). DIR is a library folder; `--bundle
lineage/shipped_library.json` also writes its admitted cards and provenance as the bundle the
package ships (bump `VERSION` below when the cards change). `assemble` copies the admitted cards of each LIB and records, per part, the
lineages its cards were lifted from (the lineage folder of each card's source expert).
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

VERSION = "1"
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
    for p in (rb, asm):
        p.add_argument("--bundle", type=Path, default=None,
                       help="also write the admitted cards and provenance as this bundle file")
    args = ap.parse_args(argv)
    if args.out.exists() and any(args.out.iterdir()):
        print(f"build_library: {args.out} is not empty; name a new folder", file=sys.stderr)
        return 2
    provenance = (rebuild(args.out, args.tier, args.jobs) if args.cmd == "rebuild"
                  else assemble(args.out, args.part))
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
