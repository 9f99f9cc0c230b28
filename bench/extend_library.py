"""Add one lineage's cards to admitted libraries, admitting only the new cards, in shards.

    python3 bench/extend_library.py split LINEAGE OUT [--shards 4] [--base LIB]
    python3 bench/extend_library.py merge SHARD [SHARD ...] --into LIB [--into LIB ...]

`split` lifts LINEAGE (`lineage.skills.lift`) and writes its cards that --base does not
already hold as hypotheses into OUT/shard-<i>, round robin: each shard is a library of its own,
so the shards can be admitted side by side, one GPU each
(`klineage skills OUT/shard-<i> --admit ... --tier device`). `merge` copies the cards of the
admitted shards into each --into library (a card of the same id there is merged with it, as
`klineage skills --add` does) and records in LIB/admission.json which cards came from which
shard, with the shard's own admission report. Progress and the counts go to stderr.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from lineage.graph import Lineage  # noqa: E402
from lineage.skills import Library, lift  # noqa: E402


def split(lineage: str, out: str, shards: int, base: str | None) -> int:
    held = set(Library.open(base).ids()) if base else set()
    cards = [c for c in lift(Lineage.load(lineage)) if c.id not in held]
    for i in range(shards):
        lib = Library.open(Path(out) / f"shard-{i}", create=True)
        for card in cards[i::shards]:
            lib.add(card)
    print(f"split: {len(cards)} new card(s) of {lineage} into {shards} shard(s) under {out}",
          file=sys.stderr)
    return 0


def merge(shards: list[str], into: list[str]) -> int:
    for dest in into:
        lib = Library.open(dest)
        report_path = Path(dest) / "admission.json"
        report = json.loads(report_path.read_text()) if report_path.is_file() else {}
        added: dict[str, list[str]] = report.setdefault("extended_from", {})
        for shard in shards:
            src = Library.open(shard)
            ids = []
            for card in src.cards():
                lib.add(card)
                ids.append(card.id)
            shard_report = Path(shard) / "admission.json"
            added[str(shard)] = ids
            if shard_report.is_file():
                report.setdefault("extension_admissions", {})[str(shard)] = json.loads(
                    shard_report.read_text())
        report_path.write_text(json.dumps(report, indent=1) + "\n")
        n = sum(len(v) for v in added.values())
        print(f"merge: {dest} now holds {len(lib.ids())} card(s) ({n} from shards, "
              f"{sum(c.admitted for c in lib.cards())} admitted)", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    sp = sub.add_parser("split")
    sp.add_argument("lineage")
    sp.add_argument("out")
    sp.add_argument("--shards", type=int, default=4)
    sp.add_argument("--base", default=None)
    mp = sub.add_parser("merge")
    mp.add_argument("shards", nargs="+")
    mp.add_argument("--into", action="append", required=True)
    args = ap.parse_args(argv)
    if args.command == "split":
        if args.shards < 1:
            print("extend_library: --shards must be >= 1", file=sys.stderr)
            return 2
        return split(args.lineage, args.out, args.shards, args.base)
    return merge(args.shards, args.into)


if __name__ == "__main__":
    sys.exit(main())
