"""A candidate that only reorders, repeats or drops its state's config-list entries is the
same kernel to an autotuner, or one choosing among fewer of its configurations (`passes.triton.autotune.configured_alike`): the search refuses it
without a gate (`lineage.moves.move_candidates`)."""
from __future__ import annotations

from types import SimpleNamespace

import kir
from lineage.moves import Materialized, _configured_as
from lineage.skills import SkillCard
from passes.triton.autotune import configured_alike

KERNEL = '''import triton
import triton.language as tl


@triton.autotune(configs=[
    triton.Config({"BLOCK": 64}, num_warps=4, num_stages=3),
    triton.Config({"BLOCK": 128}, num_warps=8, num_stages=3),
    triton.Config({"BLOCK": 256}, num_warps=8, num_stages=4),
], key=["n"])
@triton.jit
def scale(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    keep = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=keep) * 2.0, mask=keep)
'''
REORDERED = KERNEL.replace(
    '    triton.Config({"BLOCK": 64}, num_warps=4, num_stages=3),\n'
    '    triton.Config({"BLOCK": 128}, num_warps=8, num_stages=3),\n',
    '    triton.Config({"BLOCK": 128}, num_warps=8, num_stages=3),\n'
    '    triton.Config({"BLOCK": 64}, num_warps=4, num_stages=3),\n'
    '    triton.Config({"BLOCK": 128}, num_warps=8, num_stages=3),\n')
NEW_ENTRY = KERNEL.replace('{"BLOCK": 256}, num_warps=8, num_stages=4',
                           '{"BLOCK": 256}, num_warps=8, num_stages=5')
NEW_BODY = KERNEL.replace("* 2.0", "* 3.0")
FEWER = KERNEL.replace('    triton.Config({"BLOCK": 64}, num_warps=4, num_stages=3),\n', "")
ENTRY_MADE_A_COPY = KERNEL.replace('{"BLOCK": 64}, num_warps=4', '{"BLOCK": 128}, num_warps=8')


def test_reordered_or_repeated_entries_are_alike_and_any_other_change_is_not() -> None:
    assert REORDERED != KERNEL and configured_alike(REORDERED, KERNEL)
    assert not configured_alike(NEW_ENTRY, KERNEL)
    assert not configured_alike(NEW_BODY, KERNEL)
    assert not configured_alike("def (", KERNEL) and configured_alike("def (", "def (")
    # some of the state's entries (one dropped, one turned into a copy of another): never faster
    assert FEWER != KERNEL and configured_alike(FEWER, KERNEL) and not configured_alike(KERNEL, FEWER)
    assert configured_alike(ENTRY_MADE_A_COPY, KERNEL)


def test_a_candidate_configured_as_its_state_is_refused_and_another_is_kept() -> None:
    card = SkillCard(id="tile-sizes.triton.t", intent="t", pass_name="tile-sizes",
                     category="tiling", language="triton", locus="kernel")
    state = SimpleNamespace(ir=kir.parse(KERNEL, "triton"))
    site = SimpleNamespace(anchor="triton:scale")
    same = Materialized(card, kir.parse(REORDERED, "triton"), site)
    other = Materialized(card, kir.parse(NEW_ENTRY, "triton"), site)
    assert _configured_as(same, state) and not _configured_as(other, state)
    assert not _configured_as(Materialized(card, None, None), state)
