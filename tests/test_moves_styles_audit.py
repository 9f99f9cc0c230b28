"""Moves of the search (`lineage.moves`: shipped cards materialized at their sites, rules
offered with a prior, sweeps) on kernels written the way users write them
(`tests/data/moves_styles`, one case folder each under `cases/`). Every candidate a move makes
must compute what its start computes on shapes the case's gate does not run."""
from __future__ import annotations

import importlib.util
import os
from functools import cache
from pathlib import Path

import pytest

import kir
from lineage.moves import materializations
from passes.rewriter import DeterministicRewriter

torch = pytest.importorskip("torch")

DATA = Path(__file__).resolve().parent / "data" / "moves_styles"


@cache
def _cards(pass_name: str) -> tuple:
    from lineage.shipped import open_library

    return tuple(c for c in open_library(None)[0].cards(admitted_only=True)
                 if c.pass_name == pass_name and c.language == "triton")


def _module(text: str, tmp_path: Path, stem: str):
    path = tmp_path / f"{stem}.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(f"moves_audit_{stem}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _made(kernel: str, pass_name: str) -> list[str]:
    """The text of every candidate the shipped cards of `pass_name` make on `kernel` through
    the loop's card move (rule, then recorded step; no sweep)."""
    ir = kir.parse_file(DATA / f"{kernel}.py")
    out: list[str] = []
    for card in _cards(pass_name):
        for made in materializations(card, ir, DeterministicRewriter(), None, sweeps=False):
            if made.ir is not None and made.ir.unparse() not in out:
                out.append(made.ir.unparse())
    return out


def test_a_recorded_tile_size_never_grows_a_block_the_kernel_does_not_bounds_check(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`w8mm_group` loads its K tiles unmasked (K is a multiple of its 32 in every call) and
    reads one scale row per K step (`k // GROUP`, GROUP=32). A tile-sizes card's recorded
    BLOCK_K=64 was written there: the value a card recorded skipped the check that a tile
    the kernel never compares with a size only shrinks to a divisor of its value. It read a
    scale row for 64 rows of K (a relative error of 0.5) and, on K=96, K rows past the end."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    made = _made("w8mm_group", "tile-sizes")
    assert made  # the M and N tiles are checked: the cards still resize them
    assert all("BK=32)" in text for text in made), [t for t in made if "BK=32)" not in t]
    case = _module((DATA / "cases" / "w8mm" / "case.py").read_text(), tmp_path, "case")
    shape = {"M": 21, "N": 37, "K": 96, "dtype": "fp32"}
    inputs = case.make_inputs({**shape, "dtype": "fp16"}, 3, "cpu")
    want = case.reference(*inputs).float()
    for i, text in enumerate(made[:2]):
        got = _module(text, tmp_path, f"cand{i}").run(*inputs).float()
        assert ((got - want).norm() / want.norm()).item() < 5e-3
