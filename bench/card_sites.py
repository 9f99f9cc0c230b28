"""Which cards of a library act on which kernels, and why the others do not.

    python3 bench/card_sites.py KERNEL [KERNEL ...] [--library DIR] [--case NAME] [--json]

For each Triton or CUDA KERNEL and each card of the library (the cards of lineage CASE only,
with --case), materializes the card the way the optimize loop does with its rule alone
(`lineage.moves.materializations`: no configuration sweep, no transplant, no LLM) and prints
the site it acts at, or the reasons it does not: "no site for PASS" where the pass finds no
construct of its kind, else each refusal of the rule at the sites it tried. Nothing is gated
and nothing is written. A kernel or library that cannot be read is a one-line error, exit 2.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))



def card_rows(kernel: Path, cards: list[Any]) -> list[dict[str, Any]]:
    """One row per card: {"card", "pass", "site" (anchor or None), "refusals"}."""
    from kir import parse_file
    from lineage.moves import materializations
    from passes.rewriter import DeterministicRewriter

    ir = parse_file(kernel)
    rows = []
    for card in cards:
        made = list(materializations(card, ir, DeterministicRewriter(), None, sweeps=False,
                                     transplants=False))
        ok = next((m for m in made if m.ok), None)
        rows.append({"card": card.id, "pass": card.pass_name,
                     "site": str(ok.site.anchor) if ok is not None and ok.site else None,
                     "refusals": [] if ok is not None else list(dict.fromkeys(made[-1].refusals))})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kernels", nargs="+", type=Path)
    parser.add_argument("--library", type=Path, default=None,
                        help="a SkillCard library folder (default: the shipped library)")
    parser.add_argument("--case", default="", help="only the cards lifted from this case's lineage")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    from kir.errors import KLineageError
    from lineage.shipped import open_library

    try:
        cards = [c for c in open_library(args.library)[0].cards()
                 if not args.case or any(s.get("case") == args.case for s in c.sources)]
        missing = [str(k) for k in args.kernels if not k.is_file()]
        if missing:
            raise FileNotFoundError(f"no such kernel: {', '.join(missing)}")
        table = {}
        for kernel in args.kernels:
            print(f"card_sites: {kernel}", file=sys.stderr)
            table[str(kernel)] = card_rows(kernel, cards)
    except (KLineageError, OSError, SyntaxError) as exc:
        print(f"card_sites: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(table, indent=1))
        return 0
    for kernel, rows in table.items():
        print(kernel)
        for row in rows:
            where = row["site"] or "; ".join(row["refusals"])
            print(f"  {'site' if row['site'] else 'none'}  {row['card']:40s} {where[:200]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
