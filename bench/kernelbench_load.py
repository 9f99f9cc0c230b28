"""Load counts of a KernelBench checkout: how many problem files load as cases (static and
device tiers), and how many of those also get interpret-tier sizes, per level.

    python bench/kernelbench_load.py --kernelbench DIR [--levels 1,2,3] [--json]

DIR is the checkout's root (holding KernelBench/level1 ...) or the folder of the levels
itself; $KERNELBENCH_DIR is used when --kernelbench is not given. Each file that does not
load, or loads without interpret-tier sizes, is listed with its one-line reason (on stderr,
as it is found). Exit 2 when DIR holds no level folder.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kir.errors import BadInputError  # noqa: E402


def level_dirs(root: Path, levels: list[int]) -> dict[int, Path]:
    """The folder of each level under a checkout (`KernelBench/levelN` or `levelN`)."""
    found: dict[int, Path] = {}
    for level in levels:
        for folder in (root / "KernelBench" / f"level{level}", root / f"level{level}"):
            if folder.is_dir():
                found[level] = folder
                break
    return found


def count_level(folder: Path, level: int) -> dict[str, object]:
    """Loads of one level's files: device (the case loads), interpret (small sizes found),
    and the reasons of the others."""
    import gate

    files = sorted(p for p in folder.glob("*.py") if p.name != "__init__.py")
    device = interpret = 0
    refused: list[dict[str, str]] = []
    no_small: list[dict[str, str]] = []
    t0 = time.perf_counter()
    for i, path in enumerate(files, 1):
        try:
            case = gate.load_case(path)
        except BadInputError as exc:
            refused.append({"file": path.name, "reason": str(exc)})
            print(f"level{level} [{i}/{len(files)}] refused: {exc}", file=sys.stderr, flush=True)
            continue
        device += 1
        reason = case.small_shapes.reason() if hasattr(case.small_shapes, "reason") else None
        if reason is None:
            interpret += 1
        else:
            no_small.append({"file": path.name, "reason": reason})
            print(f"level{level} [{i}/{len(files)}] no interpret sizes: {reason}",
                  file=sys.stderr, flush=True)
    return {"level": level, "files": len(files), "device": device, "interpret": interpret,
            "refused": refused, "no_interpret_sizes": no_small,
            "seconds": round(time.perf_counter() - t0, 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kernelbench", default=os.environ.get("KERNELBENCH_DIR"),
                        help="the KernelBench checkout (default: $KERNELBENCH_DIR)")
    parser.add_argument("--levels", default="1,2,3", help="comma-separated levels (default 1,2,3)")
    parser.add_argument("--json", action="store_true", help="print the counts as JSON")
    args = parser.parse_args(argv)
    if not args.kernelbench:
        print("kernelbench_load: give --kernelbench DIR or set KERNELBENCH_DIR", file=sys.stderr)
        return 2
    try:
        levels = [int(x) for x in args.levels.split(",") if x.strip()]
    except ValueError:
        print(f"kernelbench_load: --levels {args.levels!r} is not a list of numbers", file=sys.stderr)
        return 2
    folders = level_dirs(Path(args.kernelbench).expanduser(), levels)
    if not folders:
        print(f"kernelbench_load: {args.kernelbench}: no level folder (KernelBench/levelN) in it",
              file=sys.stderr)
        return 2
    rows = [count_level(folder, level) for level, folder in sorted(folders.items())]
    if args.json:
        print(json.dumps({"levels": rows}, indent=2))
        return 0
    print("| level | files | device tier loads | interpret-tier sizes | seconds |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['level']} | {r['files']} | {r['device']} | {r['interpret']} | {r['seconds']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
