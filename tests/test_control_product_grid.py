"""The generic autotune list (`lineage.control`) of a kernel whose host grid counts blocks of a
size the kernel compares as a product (`cdiv(nb * ho * wo, 128)` for offsets checked against
`B * OH * OW`): the grid is rewritten to read each tuned tile, whatever order its axes take;
a divisor of a product holding anything but the tile's sizes is not taken for the tile's copy."""
from __future__ import annotations

import re

import pytest

from lineage.control import autotune_control

# a direct convolution written elsewhere: NHWC, pixels of every image flattened onto grid axis 1,
# output channels on axis 0
NHWC_CONV = '''import torch
import triton
import triton.language as tl


@triton.jit
def nhwc_conv(src, filt, dst, B, H, W, CI, K, OH, OW, R: tl.constexpr,
              TK: tl.constexpr, TPIX: tl.constexpr):
    kk = tl.program_id(0) * TK + tl.arange(0, TK)
    pix = tl.program_id(1) * TPIX + tl.arange(0, TPIX)
    live = pix < B * OH * OW
    img = pix // (OH * OW)
    oy = (pix // OW) % OH
    ox = pix % OW
    acc = tl.zeros((TPIX, TK), dtype=tl.float32)
    for c in range(0, CI):
        for dy in tl.static_range(R):
            for dx in tl.static_range(R):
                a = tl.load(src + ((img * H + oy + dy) * W + ox + dx) * CI + c, mask=live, other=0.0)
                f = tl.load(filt + ((kk * R + dy) * R + dx) * CI + c, mask=kk < K, other=0.0)
                acc += a[:, None] * f[None, :]
    tl.store(dst + pix[:, None] * K + kk[None, :], acc, mask=live[:, None] & (kk[None, :] < K))


def run(x, w):
    nb, h, wd, ci = x.shape
    k, r = w.shape[0], w.shape[1]
    ho, wo = h - r + 1, wd - r + 1
    y = torch.empty((nb, ho, wo, k), device=x.device, dtype=torch.float32)
    nhwc_conv[(triton.cdiv(k, 16), triton.cdiv(nb * ho * wo, 128))](
        x, w, y, nb, h, wd, ci, k, ho, wo, R=r, TK=16, TPIX=128)
    return y
'''


def test_a_grid_over_a_product_of_sizes_reads_the_tuned_tiles() -> None:
    control = autotune_control(NHWC_CONV)
    assert "@triton.autotune(" in control and "TK=16" not in control and "TPIX=128" not in control
    assert 'triton.cdiv(k, meta["TK"])' in control
    assert 'triton.cdiv(nb * ho * wo, meta["TPIX"])' in control
    configs = re.findall(r'triton\.Config\(\{([^}]*)\}', control)
    assert configs and all('"TK"' in c and '"TPIX"' in c for c in configs)
    compile(control, "control.py", "exec")


@pytest.mark.parametrize("grid", ["triton.cdiv(nb * ho * 7, 128)", "triton.cdiv(nb * ci * wo, 128)"])
def test_a_product_with_another_factor_is_not_the_tiles_copy(grid: str) -> None:
    # the grid's 128 divides something the pixel tile does not tile: the tile cannot be swept
    # by rewriting it, so the grid is not rewritten for it and the tile keeps its 128 (the
    # channel tile is still swept)
    source = NHWC_CONV.replace("triton.cdiv(nb * ho * wo, 128)", grid)
    control = autotune_control(source)
    assert f'triton.cdiv(k, meta["TK"]), {grid})' in control and "TPIX=128)" in control
    configs = re.findall(r'triton\.Config\(\{([^}]*)\}', control)
    assert configs and all('"TPIX"' not in c for c in configs), configs
