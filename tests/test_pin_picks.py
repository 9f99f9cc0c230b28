"""A state's autotuner picks pinned in place of its list (`passes.triton.autotune.pin_picked`,
`lineage.moves.pinned_picks`): the rewrites pass the interpret gate on the 1024-cube product's
case (its small shapes: partial tiles in M, N and K), each refusal says why, and the search
gates the pinned state as a move of its best and keeps it only where it times faster."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

import gate
import kir
from gate import Tier, Timing, Verdict
from gate.verdict import VariantTiming
from lineage.moves import pin_offered, pinned_picks
from lineage.optimize import optimize
from lineage.skills import Library
from passes.base import Applied, Skipped
from passes.rewriter import DeterministicRewriter
from passes.triton.autotune import pin_picked
from skill_helpers import ROOT, ScriptedGate

CASE = ROOT / "bench/heldout/mm1024"

# A product in another hand than the case's start: block-size names, a META grid, the pointers
# advanced along K, a tuned grouping constant that is not a tile, a list of three entries.
TUNED = '''import torch
import triton
import triton.language as tl


# tiles tried on the device
@triton.autotune(
    configs=[
        triton.Config({"BLOCK_M": 32, "BLOCK_N": 64, "BLOCK_K": 32, "SPLIT": 1}, num_warps=4, num_stages=2),
        triton.Config({"BLOCK_M": 64, "BLOCK_N": 32, "BLOCK_K": 16, "SPLIT": 1}, num_warps=2),
        triton.Config({"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16, "SPLIT": 1}, num_warps=1, num_stages=1),
    ],
    key=["M", "N", "K"],
)
@triton.jit
def gemm(A, B, C, M, N, K, sam, sak, sbk, sbn, scm, scn,
         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SPLIT: tl.constexpr):
    pm = tl.program_id(0)
    pn = tl.program_id(1)
    om = pm * BLOCK_M + tl.arange(0, BLOCK_M)
    on = pn * BLOCK_N + tl.arange(0, BLOCK_N)
    ok = tl.arange(0, BLOCK_K)
    a_ptrs = A + om[:, None] * sam + ok[None, :] * sak
    b_ptrs = B + ok[:, None] * sbk + on[None, :] * sbn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K * SPLIT)):
        left = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=(om[:, None] < M) & (ok[None, :] < left), other=0.0)
        b = tl.load(b_ptrs, mask=(ok[:, None] < left) & (on[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
        a_ptrs += BLOCK_K * sak
        b_ptrs += BLOCK_K * sbk
    tl.store(C + om[:, None] * scm + on[None, :] * scn, acc.to(C.dtype.element_ty),
             mask=(om[:, None] < M) & (on[None, :] < N))


def run(a, b):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    grid = lambda META: (triton.cdiv(M, META["BLOCK_M"]), triton.cdiv(N, META["BLOCK_N"]))
    gemm[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
               c.stride(0), c.stride(1))
    return c
'''
SECOND = {"BLOCK_M": 64, "BLOCK_N": 32, "BLOCK_K": 16, "SPLIT": 1, "num_warps": 2, "num_stages": 3}


def _ir(text: str) -> kir.KernelIR:
    return kir.parse(text, "triton")


def _gated(text: str) -> None:
    case = gate.load_case(CASE)
    verdict = gate.check(text, "triton", case, "interpret", path=case.start_path(), cache=False)
    assert verdict.ok, verdict.reason


def _verdict(**variants: dict[str, int]) -> Verdict:
    """A device verdict whose variant NAME picked the configuration given for kernel `gemm`."""
    timed = tuple(VariantTiming(name, 1.0, 1.0, (), (("gemm", tuple(pick.items())),))
                  for name, pick in variants.items())
    return Verdict(True, Tier.DEVICE, "timing", timing=Timing(float(len(timed)), 1.0, timed))


def test_the_picked_entry_is_passed_at_the_launch_and_the_autotuner_goes() -> None:
    """The second entry (its stages left to Config's default, 3) is the pick: the decorator
    and the comment above it go, the launch passes the entry's values, the META grid reads
    them from the launch; the kernel passes the interpret gate."""
    made = pin_picked(_ir(TUNED), "gemm", SECOND)
    assert isinstance(made, Applied), made
    out = made.ir.unparse()
    kir.parse(out, "triton")
    assert "triton.autotune" not in out and "# tiles tried" not in out
    assert ("c.stride(0), c.stride(1), BLOCK_M=64, BLOCK_N=32, BLOCK_K=16, SPLIT=1, num_warps=2)"
            in out)
    assert made.options["pick"] == "BLOCK_M=64 BLOCK_N=32 BLOCK_K=16 SPLIT=1 num_warps=2 num_stages=3"
    _gated(out)


def test_where_the_host_reads_the_autotuner_the_list_is_cut_to_the_picked_entry() -> None:
    """The host reads `gemm.best_config` after the launch: the autotuner stays, over the picked
    entry alone (a list of one is never timed); the kernel passes the interpret gate."""
    text = TUNED.replace("    return c\n", "    assert gemm.best_config.num_warps >= 1\n    return c\n")
    made = pin_picked(_ir(text), "gemm", SECOND)
    assert isinstance(made, Applied), made
    out = made.ir.unparse()
    assert made.options["pinned"] == "single"
    configs = re.findall(r"triton\.Config\(.*\)", out)
    assert configs == ['triton.Config({"BLOCK_M": 64, "BLOCK_N": 32, "BLOCK_K": 16, "SPLIT": 1}, '
                       'num_warps=2)']
    _gated(out)


@pytest.mark.parametrize("text, pick, reason", [
    (TUNED, {**SECOND, "num_stages": 4}, "0 entries of its list match the pick"),
    (TUNED.replace('"SPLIT": 1}, num_warps=2)',
                   '"SPLIT": 1}, num_warps=2),\n        triton.Config({"BLOCK_M": 64, "BLOCK_N": 32, '
                   '"BLOCK_K": 16, "SPLIT": 1}, num_warps=2, maxnreg=128)'),
     SECOND, "2 entries of its list match the pick"),
    (re.sub(r"configs=\[.*?\n    \],", "configs=CONFIGS,", TUNED, flags=re.S),
     SECOND, "its configurations are computed"),
    ((ROOT / "bench/heldout/mm1024/mm_naive.py").read_text(), SECOND, "the kernel is not autotuned"),
])
def test_a_pick_that_names_no_single_entry_is_refused_saying_why(text: str, pick: dict, reason: str) -> None:
    """A pick no entry runs (stages 4), two entries that both run it (one with a register
    cap), a list built by code, a kernel without an autotuner: refused, the reason says which."""
    made = pin_picked(_ir(text), "gemm" if "def gemm" in text else "matmul_kernel", pick)
    assert isinstance(made, Skipped), made
    assert made.reason.startswith(reason), made.reason


def test_variants_that_picked_differently_are_left_autotuned() -> None:
    """Two timed variants whose autotuner picked different entries: one pin would run one of
    them on both shapes, so the kernel keeps its list and the move says so; where they agree
    the move pins that entry, recorded in its options."""
    ir = _ir(TUNED)
    first = {"BLOCK_M": 32, "BLOCK_N": 64, "BLOCK_K": 32, "SPLIT": 1, "num_warps": 4, "num_stages": 2}
    split = _verdict(small=first, large=SECOND)
    assert pin_offered(ir, split)
    made = pinned_picks(ir, split)
    assert made.ir is None
    assert made.refusals == ("pin gemm: its timed variants picked different configurations "
                             "(large: BLOCK_M=64 BLOCK_N=32 BLOCK_K=16 SPLIT=1 num_warps=2 num_stages=3; "
                             "small: BLOCK_M=32 BLOCK_N=64 BLOCK_K=32 SPLIT=1 num_warps=4 num_stages=2)",)
    agreed = pinned_picks(ir, _verdict(small=SECOND, large=SECOND))
    assert agreed.ok and agreed.options == {"pin": {"gemm": SECOND}}
    assert agreed.card.id == "sweep.pin" and "triton.autotune" not in agreed.ir.unparse()
    untimed = Verdict(True, Tier.INTERPRET, "correctness")
    assert not pin_offered(ir, untimed)
    assert pinned_picks(ir, untimed).refusals == (
        "pin: no autotuner pick recorded (the device tier records them)",)


class _Device:
    """A scripted device for the case's start under the plain sweep: an autotuned kernel times
    11 us and picks the first entry of its list, the same kernel pinned `pinned` us, the start
    (no list, no pin) 25 us."""

    ENTRY = re.compile(r'triton\.Config\(\{"BM": (\d+), "BN": (\d+), "BK": (\d+)\}, '
                       r'num_warps=(\d+), num_stages=(\d+)\)')

    def __init__(self, pinned: float) -> None:
        self.pinned = pinned

    def ms(self, source: str) -> float:
        if "triton.autotune" in source:
            return 11.0
        return self.pinned if "num_stages=" in source else 25.0

    def picks(self, source: str) -> dict[str, dict[str, int]]:
        found = self.ENTRY.search(source)
        if "triton.autotune" not in source or found is None:
            return {}
        bm, bn, bk, w, s = map(int, found.groups())
        return {"matmul_kernel": {"BM": bm, "BN": bn, "BK": bk, "num_warps": w, "num_stages": s}}


@pytest.mark.parametrize("pinned, kept", [(10.0, True), (11.0, False)])
def test_the_search_gates_the_pin_of_its_best_and_keeps_it_only_if_faster(
        tmp_path: Path, pinned: float, kept: bool) -> None:
    """An empty library: the start's plain sweep (the control) becomes the best; the pin of its
    pick is a move of that best, gated within the budget, kept where it times faster and a
    passing state otherwise (the best stays the autotuned kernel)."""
    target = tmp_path / "mm_naive.py"
    target.write_text((CASE / "mm_naive.py").read_text())
    device = _Device(pinned)
    events: list[tuple[str, dict]] = []
    result = optimize(target, str(CASE), Library.open(tmp_path / "lib", create=True),
                      tier="device", out=tmp_path / "out", rewriter=DeterministicRewriter(),
                      check_fn=ScriptedGate(ms=device.ms, picks=device.picks), budget_steps=6,
                      progress=lambda kind, data: events.append((kind, dict(data))))
    assert "sweep.pin" in [data["card"] for kind, data in events if kind == "gate"]
    assert result.best_ms == pytest.approx(10.0 if kept else 11.0)
    assert ("sweep.pin" in [step.card for step in result.applied]) is kept
