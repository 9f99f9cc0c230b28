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


def _grouped_inputs(m: int, n: int, k: int, group: int = 32) -> tuple:
    """(a, w, s) of an int8 GEMM with one scale row per `group` rows of K, and A @ (W * s)."""
    g = torch.Generator().manual_seed(5)
    a = torch.randn(m, k, generator=g).half()
    w = torch.randint(-127, 128, (k, n), generator=g).to(torch.int8)
    s = (torch.rand(-(-k // group), n, generator=g) / 64).half()
    want = a.float() @ (w.float() * s.float().repeat_interleave(group, dim=0)[:k])
    return (a, w, s), want


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


def test_a_tile_whose_counter_is_divided_by_a_group_stays_a_divisor_of_the_group(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`w8mm_group_masked` masks its K loads, so its K tile is bounds-checked, yet it reads one
    scale row per K step (`k // GROUP`, GROUP=32): a K tile of 64 or 128 reads one row for a
    step that spans two or four groups. The plain sweep (`autotune_control`) and the own sweep
    (`config_candidates`) wrote BK=64 and BK=128 there; every BK they write must divide GROUP,
    and each configuration must compute the reference on a K that is odd and past GROUP. The
    shipped tile-sizes cards (rule, then recorded step) keep to the same divisors."""
    import re

    from lineage.control import autotune_control
    from lineage.transfer import config_candidates

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    ir = kir.parse_file(DATA / "w8mm_group_masked.py")
    texts = [autotune_control(ir.source)]
    texts += [new.unparse() for _, new, _ in config_candidates({}, ir, own=True, every=True)]
    assert len(texts) == 2 and all("triton.autotune" in t for t in texts)
    made = _made("w8mm_group_masked", "tile-sizes")
    assert made and all(re.search(r"BK=(1|2|4|8|16|32)\)", t) for t in made), \
        [re.findall(r"BK=\d+", t) for t in made]
    inputs, want = _grouped_inputs(19, 40, 75)  # three groups of 32, the last one short
    for i, text in enumerate(texts):
        bks = sorted({int(v) for v in re.findall(r'"BK": (\d+)', text)})
        assert bks and all(32 % bk == 0 for bk in bks), bks
        mod = _module(text, tmp_path, f"grouped{i}")
        for entry in mod.w8_mm.configs:  # each configuration, run alone
            mod.w8_mm.configs = [entry]
            mod.w8_mm.cache = {}
            got = mod.run(*inputs).float()
            assert ((got - want).norm() / want.norm()).item() < 5e-3, entry


@pytest.mark.parametrize("kernel,name", [("w8mm_group_while", "w8_while"),
                                         ("w8mm_group_quotient", "w8_quot")])
def test_a_group_counter_of_a_while_loop_or_a_tile_quotient_keeps_the_tile_a_divisor(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kernel: str, name: str) -> None:
    """Two more ways a K tile is tied to a group of GROUP=32 rows of K (`roles.grouped_caps`):
    a `while k < K` loop advanced by `k += BK` that reads the scale row `k // GROUP`, and a
    loop over tile steps that reads row `kb // (GROUP // BK)`. Neither was read as a group:
    the sweeps and the tile-sizes cards wrote BK=64 and BK=128 (one scale row for two or four
    groups; a quotient of 0 and a division by zero). Every BK written must divide GROUP, and
    each configuration must compute the reference on a K that is odd and past GROUP."""
    import re

    from lineage.control import autotune_control
    from lineage.transfer import config_candidates

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    ir = kir.parse_file(DATA / f"{kernel}.py")
    texts = [autotune_control(ir.source)]
    texts += [new.unparse() for _, new, _ in config_candidates({}, ir, own=True, every=True)]
    assert len(texts) == 2 and all("triton.autotune" in t for t in texts)
    made = _made(kernel, "tile-sizes")
    assert made and all(re.search(r"BK=(1|2|4|8|16|32)\)", t) for t in made), \
        [re.findall(r"BK=\d+", t) for t in made]
    inputs, want = _grouped_inputs(19, 40, 75)
    for i, text in enumerate(texts):
        bks = sorted({int(v) for v in re.findall(r'"BK": (\d+)', text)})
        assert bks and all(32 % bk == 0 for bk in bks), bks
        mod = _module(text, tmp_path, f"{kernel}{i}")
        tuned = getattr(mod, name)
        for entry in tuned.configs[:3] + tuned.configs[-1:]:  # the first ones and the last
            tuned.configs = [entry]
            tuned.cache = {}
            got = mod.run(*inputs).float()
            assert ((got - want).norm() / want.norm()).item() < 5e-3, entry


def test_a_persistent_walk_counts_the_tiles_a_grid_function_counts_before_its_return(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`mm_grid_def_statements` counts its tiles in `def grid(META)` as `nm = cdiv(M,
    META["BM"])`, `nn = ...`, `return (nm * nn,)`. The persistent-grid card passed the grid's
    own locals to the kernel as host values (`grid_nm=nm`): NameError at every launch. The
    walk now reads the count in the kernel's terms, through those bindings."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    made = _made("mm_grid_def_statements", "persistent-grid")
    assert made
    case = _module((DATA / "cases" / "mm" / "case.py").read_text(), tmp_path, "case_mm")
    inputs = case.make_inputs({"M": 70, "N": 37, "K": 45, "dtype": "fp16"}, 3, "cpu")
    want = case.reference(*inputs).float()
    for i, text in enumerate(made):
        assert "for pid in range(tl.program_id(0), " in text, text
        got = _module(text, tmp_path, f"persist{i}").run(*inputs).float()
        assert ((got - want).norm() / want.norm()).item() < 5e-3
