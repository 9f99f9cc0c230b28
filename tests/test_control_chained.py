"""The generic list of a loop of two chained products (attention: S = Q K^T, then P V) over a
fixed output width: the query tiles and key steps an attention kernel is written with, where
the GEMM list, with no column tile to set, collapsed to its (m, k) pairs and never wrote a
128-wide key step beside a 128-row tile."""
from __future__ import annotations

import kir
from lineage.control import autotune_control, generic_configs
from passes.triton.roles import joint_config

# A loop whose step is both the column count of one product and the contraction of the next;
# the head dimension W is the problem's (read whole, unmasked), so no column tile is tunable.
CHAINED = '''import torch
import triton
import triton.language as tl


@triton.jit
def fused_rows(a_ptr, b_ptr, c_ptr, o_ptr, n_cols, W: tl.constexpr,
               TR: tl.constexpr, TC: tl.constexpr):
    r = tl.program_id(0) * TR + tl.arange(0, TR)
    w = tl.arange(0, W)
    a = tl.load(a_ptr + r[:, None] * W + w[None, :], mask=r[:, None] < n_cols, other=0.0)
    acc = tl.zeros((TR, W), dtype=tl.float32)
    for j0 in range(0, n_cols, TC):
        j = j0 + tl.arange(0, TC)
        bt = tl.load(b_ptr + j[None, :] * W + w[:, None], mask=j[None, :] < n_cols, other=0.0)
        t = tl.exp(tl.dot(a, bt))
        c = tl.load(c_ptr + j[:, None] * W + w[None, :], mask=j[:, None] < n_cols, other=0.0)
        acc += tl.dot(t.to(tl.float16), c)
    tl.store(o_ptr + r[:, None] * W + w[None, :], acc.to(tl.float16), mask=r[:, None] < n_cols)


def run(a, b, c):
    n, width = a.shape
    o = torch.empty_like(a)
    fused_rows[(triton.cdiv(n, 32),)](a, b, c, o, n, W=width, TR=32, TC=32)
    return o
'''

# A product of the finished accumulator: one product per step (rows times a block of
# columns), the second after the loop; the loop's step is a plain reduction depth.
AFTER_LOOP = '''import torch
import triton
import triton.language as tl


@triton.jit
def fused_rows(a_ptr, c_ptr, d_ptr, o_ptr, n_cols, W: tl.constexpr,
               TR: tl.constexpr, TC: tl.constexpr):
    r = tl.program_id(0) * TR + tl.arange(0, TR)
    w = tl.arange(0, W)
    acc = tl.zeros((TR, W), dtype=tl.float32)
    for j0 in range(0, n_cols, TC):
        j = j0 + tl.arange(0, TC)
        a = tl.load(a_ptr + r[:, None] * n_cols + j[None, :], mask=j[None, :] < n_cols, other=0.0)
        c = tl.load(c_ptr + j[:, None] * W + w[None, :], mask=j[:, None] < n_cols, other=0.0)
        acc += tl.dot(a, c)
    d = tl.load(d_ptr + w[:, None] * W + w[None, :])
    out = tl.dot(acc.to(tl.float16), d)
    tl.store(o_ptr + r[:, None] * W + w[None, :], out.to(tl.float16))


def run(a, c, d):
    o = torch.empty((a.shape[0], c.shape[1]), dtype=a.dtype, device=a.device)
    fused_rows[(triton.cdiv(a.shape[0], 32),)](a, c, d, o, a.shape[1], W=c.shape[1], TR=32, TC=32)
    return o
'''

# Both products inside a jit helper that holds the loop, as flash-attention kernels write it.
HELPER = CHAINED.replace(
    "    acc = tl.zeros((TR, W), dtype=tl.float32)\n"
    "    for j0 in range(0, n_cols, TC):\n",
    "    acc = tl.zeros((TR, W), dtype=tl.float32)\n"
    "    acc = _walk(acc, a, b_ptr, c_ptr, n_cols, W, TC)\n"
    "    tl.store(o_ptr + r[:, None] * W + w[None, :], acc.to(tl.float16), mask=r[:, None] < n_cols)\n"
    "\n\n@triton.jit\ndef _walk(acc, a, b_ptr, c_ptr, n_cols, W: tl.constexpr, TC: tl.constexpr):\n"
    "    w = tl.arange(0, W)\n"
    "    for j0 in range(0, n_cols, TC):\n").replace(
    "        acc += tl.dot(t.to(tl.float16), c)\n"
    "    tl.store(o_ptr + r[:, None] * W + w[None, :], acc.to(tl.float16), mask=r[:, None] < n_cols)\n",
    "        acc += tl.dot(t.to(tl.float16), c)\n    return acc\n")


def _config(text: str):
    return joint_config(kir.parse(text, language="triton"))["fused_rows"]


def test_a_chained_loop_is_listed_with_wide_key_steps() -> None:
    cfg = _config(CHAINED)
    assert cfg.dot and cfg.chained
    assert {p.name: (p.role, p.value) for p in cfg.params} == {
        "TR": ("m", 32), "W": ("n", None), "TC": ("k", 32)}
    listed = generic_configs(cfg)
    assert listed[0] == {"m": 128, "k": 128, "num_warps": 8, "num_stages": 3}
    assert {"m": 64, "k": 64, "num_warps": 4, "num_stages": 4} in listed
    assert {c["k"] for c in listed} == {32, 64, 128}
    out = autotune_control(CHAINED)
    assert 'triton.Config({"TR": 128, "TC": 128}, num_warps=8, num_stages=3)' in out
    compile(out, "control.py", "exec")


def test_a_product_of_the_finished_accumulator_keeps_the_gemm_list() -> None:
    cfg = _config(AFTER_LOOP)
    assert cfg.dot and not cfg.chained
    listed = generic_configs(cfg)
    assert {"m": 128, "k": 128, "num_warps": 8, "num_stages": 3} not in listed
    assert listed[0] == {"m": 128, "k": 64, "num_warps": 8, "num_stages": 3}


def test_products_chained_inside_a_helper_count() -> None:
    cfg = _config(HELPER)
    assert cfg.dot and cfg.chained
    assert generic_configs(cfg)[0] == {"m": 128, "k": 128, "num_warps": 8, "num_stages": 3}
