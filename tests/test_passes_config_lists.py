"""Value edits inside an autotune list's configurations (read by the list, not by names)."""
from __future__ import annotations

import kir


def test_a_stage_edit_that_repeats_another_autotune_entry_is_refused() -> None:
    """Setting the second configuration's stages to 3 would give the list the third one twice
    (it would only time it twice): refused with the reason; to 4, a new entry, applied."""
    from passes import get_pass
    from passes.base import Applied, Skipped

    text = '''import torch
import triton
import triton.language as tl


@triton.autotune(
    configs=[
        triton.Config({"BLOCK": 128}, num_warps=8, num_stages=2),
        triton.Config({"BLOCK": 128}, num_warps=8, num_stages=1),
        triton.Config({"BLOCK": 128}, num_warps=8, num_stages=3),
    ],
    key=["n"],
)
@triton.jit
def row_sum(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    acc = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, n, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.store(y_ptr, tl.sum(acc))


def run(x):
    y = torch.empty(1, device=x.device, dtype=torch.float32)
    row_sum[(1,)](x, y, x.numel())
    return y
'''
    ir = kir.parse(text, language="triton")
    second = text.index("num_stages=1") + len("num_stages=")
    for stages, done in ((3, False), (4, True)):
        p = get_pass("software-pipelining")(stages=stages)
        site = next(s for s in p.sites(ir) if tuple(s.detail.get("value_span", ())) == (second, second + 1))
        made = p.optimize(ir, site)
        if done:
            assert isinstance(made, Applied) and 'num_warps=8, num_stages=4)' in made.ir.text
        else:
            assert isinstance(made, Skipped) and "already in the autotune list" in made.reason, made
