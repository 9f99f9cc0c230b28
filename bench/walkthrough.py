#!/usr/bin/env python3
"""Run the README's walk-through ("From an expert to an optimized kernel of your own") as a
user would, and record what each step gave and how long it took.

    python3 bench/walkthrough.py --out DIR [--klineage .venv/bin/klineage]
    python3 bench/store.py ingest DIR/walkthrough.json && python3 bench/store.py render

The kernel is the README's own (its first ```python block), the commands are the README's
(gate, induce, skills --admit, optimize at the interpret tier), each run with `--json` in DIR
with a fresh verdict cache. Writes DIR/walkthrough.json: {"command", "commit", "gpu": null,
"date", "steps": [{"step", "seconds", ...what the step's JSON says}]}; the README quotes these
figures as "about" and links the table the store renders from them.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def readme_kernel() -> str:
    """The walk-through's kernel: the first python block of README.md."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    m = re.search(r"```python\n(.*?)```", text, re.S)
    if m is None:
        raise SystemExit("walkthrough: README.md has no ```python block")
    return m.group(1)


def run_step(klineage: str, args: list[str], cwd: Path, env: dict[str, str]) -> tuple[dict, float]:
    started = time.monotonic()
    done = subprocess.run([klineage, *args, "--json"], cwd=cwd, env=env, capture_output=True,
                          text=True)
    seconds = time.monotonic() - started
    if done.returncode not in (0, 1):
        raise SystemExit(f"walkthrough: klineage {' '.join(args)} failed ({done.returncode}): "
                         f"{done.stderr.strip()[-500:]}")
    return json.loads(done.stdout), seconds


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--klineage", default=str(ROOT / ".venv" / "bin" / "klineage"))
    args = ap.parse_args(argv)
    out = args.out.resolve()
    if out.exists() and any(out.iterdir()):
        print(f"walkthrough: {out} is not empty; name a new folder", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    (out / "my_matmul.py").write_text(readme_kernel())
    env = {**os.environ, "KLINEAGE_CACHE_DIR": str(out / "cache")}
    repo = str(ROOT)
    steps: list[dict[str, Any]] = []

    data, s = run_step(args.klineage, ["gate", "my_matmul.py", "--case", "gemm", "--tier",
                                       "interpret"], out, env)
    steps.append({"step": "gate", "seconds": round(s, 1), "ok": data.get("ok")})
    data, s = run_step(args.klineage, ["induce", f"{repo}/experts/gemm/gemm_triton.py", "--case",
                                       "gemm", "--tier", "interpret", "--pass",
                                       "tile-sizes{floor=32}", "--out", "gemm", "--library", "lib"],
                       out, env)
    steps.append({"step": "induce", "seconds": round(s, 1), "states": data.get("states"),
                  "transitions": data.get("transitions"),
                  "cards": (data.get("library") or {}).get("cards")})
    data, s = run_step(args.klineage, ["skills", "lib", "--admit", "gemm", "--held-out",
                                       f"{repo}/bench/results/lineages/heldout/gemm", "--tier",
                                       "interpret"], out, env)
    adm = data.get("admission") or {}
    steps.append({"step": "admit", "seconds": round(s, 1),
                  **{k: len(adm.get(k, [])) for k in ("admitted", "rejected", "untried")}})
    data, s = run_step(args.klineage, ["optimize", "my_matmul.py", "--case", "gemm", "--library",
                                       "lib", "--tier", "interpret", "--out", "mine"], out, env)
    steps.append({"step": "optimize", "seconds": round(s, 1), "kept": len(data.get("applied", [])),
                  "cards_kept": ", ".join(a["pass"] for a in data.get("applied", [])),
                  "termination": data.get("termination"), "gated": data.get("gated")})
    steps.append({"step": "total", "seconds": round(sum(x["seconds"] for x in steps), 1)})
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                            capture_output=True, text=True).stdout.strip()
    record = {"command": "python3 bench/walkthrough.py --out DIR", "commit": commit or None,
              "gpu": None, "date": datetime.date.today().isoformat(),
              "machine": f"{os.cpu_count()} CPUs", "steps": steps}
    (out / "walkthrough.json").write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps(record, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
