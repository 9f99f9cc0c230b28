"""Summarize lineage directories as the per-expert table (depth, rejections, speedup).

    python bench/lineage_table.py OUT.md DIR [DIR ...]

Each DIR holds a lineage.json (from `klineage induce`). For each: accepted transitions, rejected
attempts, whether the walk reached a naive root, the passes removed, and (device tier) the time
of the expert, of the most simplified state reached and their ratio. Writes OUT.md and OUT.json.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from lineage.graph import Lineage


def summarize(directory: Path) -> dict:
    lin = Lineage.load(directory)
    experts = lin.roles("expert")
    expert = experts[0] if experts else None
    frontier = [s for s in lin.frontier() if s != expert] or ([expert] if expert else [])
    deepest = max(frontier, key=lambda s: len(lin.path_to_expert(s)) if expert else 0)
    path = lin.path_to_expert(deepest) if expert and deepest != expert else [deepest]
    passes = [lin.node(n)["pass"] for n in path if lin.node(n)["type"] == "transition"]

    def ms(sid: str | None) -> float | None:
        return (lin.node(sid).get("timing") or {}).get("candidate_ms") if sid else None

    root_ms, expert_ms = ms(deepest), ms(expert)
    regressions = sum(1 for t in lin.transitions() if (lin.node(t).get("dst_verdict") or {}).get("profile_regression"))
    runs = lin.graph.graph["runs"]
    return {
        "dir": str(directory),
        "case": ", ".join(lin.graph.graph["cases"]),
        "tier": lin.node(expert)["tier"] if expert else None,
        "transitions": len(lin.transitions()),
        "depth": len(passes),
        "rejected": len(lin.graph.graph["rejected"]),
        "termination": runs[-1]["termination"] if runs else "interrupted (time box)",
        "naive": "naive" in lin.node(deepest).get("roles", []),
        "passes": passes,
        "expert_ms": expert_ms,
        "root_ms": root_ms,
        "speedup_root_to_expert": (root_ms / expert_ms) if root_ms and expert_ms else None,
        "profile_regressions": regressions,
    }


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(argv[1])
    rows = [summarize(Path(d)) for d in argv[2:]]
    lines = ["| case | tier | accepted transitions (depth) | rejected | termination | expert ms | "
             "root ms | root -> expert | passes removed (expert first) |",
             "|---|---|---:|---:|---|---:|---:|---:|---|"]
    for r in rows:
        fmt = lambda v: f"{v:.4f}" if isinstance(v, float) else "-"  # noqa: E731
        sp = f"{r['speedup_root_to_expert']:.1f}x" if r["speedup_root_to_expert"] else "-"
        lines.append(f"| {r['case']} | {r['tier']} | {r['transitions']} ({r['depth']}) | {r['rejected']} | "
                     f"{r['termination']} | {fmt(r['expert_ms'])} | {fmt(r['root_ms'])} | {sp} | "
                     f"{', '.join(reversed(r['passes']))} |")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    out.with_suffix(".json").write_text(json.dumps(rows, indent=1) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
