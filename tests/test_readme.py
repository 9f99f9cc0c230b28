"""The README as a new user reads it: its first two commands, where `klineage` lives, and the
walk-through's figures, which must be those of the last recorded run in the results store
(`bench/walkthrough.py`, table `bench/results/walkthrough.md`)."""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _store():
    spec = importlib.util.spec_from_file_location("results_store", ROOT / "bench" / "store.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_first_two_commands_are_make_demo_and_make_test() -> None:
    block = re.search(r"```sh\n(.*?)```", README, re.S).group(1)
    commands = [line.split("#")[0].strip() for line in block.splitlines() if line.strip()]
    assert commands[:2] == ["make demo", "make test"]
    assert ".venv/bin/klineage" in README and "`.venv/bin/`" in README


def test_the_walkthrough_figures_are_the_last_recorded_run() -> None:
    rows = [r for r in _store().load() if r["benchmark"] == "walkthrough"]
    assert rows, "no walk-through run in bench/results/store.jsonl"
    last = max(r["date"] + r["source"] for r in rows)
    step = {r["operator"]: r["metrics"] for r in rows if r["date"] + r["source"] == last}
    m = re.search(r"the four commands took about (\d+) min; induction lifted (\d+) cards, "
                  r"admission admitted (\d+) \((\d+) rejected, (\d+) without a held-out "
                  r"context\), and optimize kept (\d+) on your kernel", " ".join(README.split()))
    assert m, "the walk-through's figures are not in the README's words"
    minutes, cards, admitted, rejected, untried, kept = map(int, m.groups())
    assert abs(minutes - step["total"]["seconds"] / 60) <= 1
    assert (cards, admitted, rejected, untried) == (
        step["induce"]["cards"], step["admit"]["admitted"], step["admit"]["rejected"],
        step["admit"]["untried"])
    assert kept == step["optimize"]["kept"]
    assert "bench/results/walkthrough.md" in README
