"""Gated delta net forward in Triton: the expert kernel for the `gdn` case.

`run(q, k, v, g, beta)` takes the layout of experts/gdn/case.py (q, k: (B, T, H, K); v:
(B, T, HV, V); g, beta: (B, T, HV)) and returns o, (B, T, HV, V) in v's dtype. It is the chunked
phase decomposition with chunk 64, in four kernels:
  1. `_gdn_kkt_solve_kernel`, one program per (chunk, value head): in-chunk cumulative log
     decay gc (base 2: log2(e) is folded in so every decay is an exp2), A = beta K K^T * decay
     (strictly lower), and X = (I + A)^-1 by 16x16 diagonal blocks (forward substitution in
     registers) merged by block products.
  2. `_gdn_wy_kernel`, same grid: the WY factors w = X (beta 2^gc K), u = X (beta V).
  3. `_gdn_state_kernel`, one program per (value head, V tile), walking the chunks in order:
     delta = u - w S, S <- 2^{gc_last} S + K^T (2^{gc_last - gc} delta); it stores each
     chunk's entry state S and delta.
  4. `_gdn_output_kernel`, one program per (chunk, value head, V tile):
     o = scale (Q S 2^gc + (Q K^T * decay, causal) delta).
Every matrix product is `tl.dot` with an fp32 accumulator; tiles, warps and pipeline depth are
autotuned constexprs.
"""
from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

_INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
CHUNK = 64
LOG2E: tl.constexpr = tl.constexpr(1.4426950408889634)


def _prune(configs: list[triton.Config], named_args: dict, **kwargs) -> list[triton.Config]:
    # The interpreter runs the first config only: exactly what a pinned kernel runs on the device.
    return configs[:1] if _INTERPRET else configs


@triton.jit
def _solve_unit_lower4(a0, a1, a2, a3, BC: tl.constexpr):
    """(I + a)^-1 for four strictly lower-triangular BC x BC tiles, by forward substitution.

    Row i of (I + a)^-1 is e_i - a[i, :] X once rows < i are final. The four solves share one
    loop so their reduction chains overlap; rows 0 and 1 equal those of I - a, so the
    substitution starts at row 2.
    """
    o = tl.arange(0, BC)
    eye = tl.where(o[:, None] == o[None, :], 1.0, 0.0)
    x0, x1, x2, x3 = eye - a0, eye - a1, eye - a2, eye - a3
    for i in range(2, BC):
        row = o[:, None] == i
        e_i = tl.where(o == i, 1.0, 0.0)
        r0 = e_i - tl.sum(tl.sum(tl.where(row, a0, 0.0), 0)[:, None] * x0, 0)
        r1 = e_i - tl.sum(tl.sum(tl.where(row, a1, 0.0), 0)[:, None] * x1, 0)
        r2 = e_i - tl.sum(tl.sum(tl.where(row, a2, 0.0), 0)[:, None] * x2, 0)
        r3 = e_i - tl.sum(tl.sum(tl.where(row, a3, 0.0), 0)[:, None] * x3, 0)
        x0 = tl.where(row, r0[None, :], x0)
        x1 = tl.where(row, r1[None, :], x1)
        x2 = tl.where(row, r2[None, :], x2)
        x3 = tl.where(row, r3[None, :], x3)
    return x0, x1, x2, x3


@triton.jit
def _gate_block(a, beta_i, gc_i, gc_j, DIAGONAL: tl.constexpr, BC: tl.constexpr):
    """A block from its K K^T block: beta_i (k_i . k_j) 2^(gc_i - gc_j), strictly lower in-chunk."""
    a = a * beta_i[:, None]
    gap = gc_i[:, None] - gc_j[None, :]
    if DIAGONAL:
        o = tl.arange(0, BC)
        lower = o[:, None] > o[None, :]
        return tl.where(lower, a * tl.math.exp2(tl.where(lower, gap, 0.0)), 0.0)
    return a * tl.math.exp2(gap)


@triton.jit
def _store_block(base, row0, col0, T, stride_t, x):
    rows = row0 + tl.arange(0, 16)
    cols = col0 + tl.arange(0, 16)
    tl.store(base + rows[:, None] * stride_t + cols[None, :], x.to(base.dtype.element_ty),
             mask=rows[:, None] < T)


@triton.jit
def _load_rows(base, t0, T, stride_t, offs_d, D):
    rows = t0 + tl.arange(0, 16)
    mask = (rows[:, None] < T) & (offs_d[None, :] < D)
    return tl.load(base + rows[:, None] * stride_t + offs_d[None, :], mask=mask, other=0.0)


@triton.jit
def _load_gates(g_ptr, beta_ptr, t0, T, stride_t):
    rows = t0 + tl.arange(0, 16)
    g = tl.load(g_ptr + rows * stride_t, mask=rows < T, other=0.0).to(tl.float32)
    beta = tl.load(beta_ptr + rows * stride_t, mask=rows < T, other=0.0).to(tl.float32)
    return g, beta


# Configs measured on an H200 (bench/results/gdn.md), best first, for every kernel below.
# BD: width of the K column slices of K K^T; 16 x 16 substitutions favour few warps.
@triton.autotune(configs=[
    triton.Config({"BD": 32}, num_warps=1, num_stages=1),
    triton.Config({"BD": 64}, num_warps=2, num_stages=1),
    triton.Config({"BD": 32}, num_warps=2, num_stages=1),
    triton.Config({"BD": 32}, num_warps=4, num_stages=1),
], key=["K", "HV"], prune_configs_by={"early_config_prune": _prune})
@triton.jit
def _gdn_kkt_solve_kernel(k_ptr, g_ptr, beta_ptr, gc_ptr, x_ptr, T,
                          H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr,
                          BC: tl.constexpr, BD: tl.constexpr):
    """gc (cumulative log2 decay) and X = (I + A)^-1, one chunk of one value head per program."""
    i_t = tl.program_id(0)
    i_bh = tl.program_id(1)
    i_b, i_hv = i_bh // HV, i_bh % HV
    i_h = i_hv // (HV // H)
    t0 = i_t * 4 * BC
    k_base = k_ptr + i_b * T * H * K + i_h * K
    gate = i_b * T * HV + i_hv

    # The chunk of 64 tokens as four 16-row sub-blocks: the 16 x 16 diagonal blocks of A are
    # inverted in registers, then merged by block products (I + A is block lower triangular).
    g0, b0 = _load_gates(g_ptr + gate, beta_ptr + gate, t0, T, HV)
    g1, b1 = _load_gates(g_ptr + gate, beta_ptr + gate, t0 + BC, T, HV)
    g2, b2 = _load_gates(g_ptr + gate, beta_ptr + gate, t0 + 2 * BC, T, HV)
    g3, b3 = _load_gates(g_ptr + gate, beta_ptr + gate, t0 + 3 * BC, T, HV)
    # In-chunk cumulative log decay in base 2 (log2(e) folded in, every decay is an exp2);
    # padded tokens carry g = 0, so the tail stays flat.
    g0, g1, g2, g3 = g0 * LOG2E, g1 * LOG2E, g2 * LOG2E, g3 * LOG2E
    c0 = tl.cumsum(g0, 0)
    c1 = tl.cumsum(g1, 0) + tl.sum(g0, 0)
    c2 = tl.cumsum(g2, 0) + tl.sum(g0, 0) + tl.sum(g1, 0)
    c3 = tl.cumsum(g3, 0) + tl.sum(g0, 0) + tl.sum(g1, 0) + tl.sum(g2, 0)
    rows = t0 + tl.arange(0, BC)
    tl.store(gc_ptr + gate + rows * HV, c0, mask=rows < T)
    tl.store(gc_ptr + gate + (rows + BC) * HV, c1, mask=rows + BC < T)
    tl.store(gc_ptr + gate + (rows + 2 * BC) * HV, c2, mask=rows + 2 * BC < T)
    tl.store(gc_ptr + gate + (rows + 3 * BC) * HV, c3, mask=rows + 3 * BC < T)

    # K K^T, accumulated over BD-wide column slices so only slices of K are ever live.
    a00 = tl.zeros([BC, BC], dtype=tl.float32)
    a10 = tl.zeros([BC, BC], dtype=tl.float32)
    a11 = tl.zeros([BC, BC], dtype=tl.float32)
    a20 = tl.zeros([BC, BC], dtype=tl.float32)
    a21 = tl.zeros([BC, BC], dtype=tl.float32)
    a22 = tl.zeros([BC, BC], dtype=tl.float32)
    a30 = tl.zeros([BC, BC], dtype=tl.float32)
    a31 = tl.zeros([BC, BC], dtype=tl.float32)
    a32 = tl.zeros([BC, BC], dtype=tl.float32)
    a33 = tl.zeros([BC, BC], dtype=tl.float32)
    for d0 in range(0, K, BD):
        offs = d0 + tl.arange(0, BD)
        k0 = _load_rows(k_base, t0, T, H * K, offs, K)
        k1 = _load_rows(k_base, t0 + BC, T, H * K, offs, K)
        k2 = _load_rows(k_base, t0 + 2 * BC, T, H * K, offs, K)
        k3 = _load_rows(k_base, t0 + 3 * BC, T, H * K, offs, K)
        a00 = tl.dot(k0, tl.trans(k0), a00)
        a10 = tl.dot(k1, tl.trans(k0), a10)
        a11 = tl.dot(k1, tl.trans(k1), a11)
        a20 = tl.dot(k2, tl.trans(k0), a20)
        a21 = tl.dot(k2, tl.trans(k1), a21)
        a22 = tl.dot(k2, tl.trans(k2), a22)
        a30 = tl.dot(k3, tl.trans(k0), a30)
        a31 = tl.dot(k3, tl.trans(k1), a31)
        a32 = tl.dot(k3, tl.trans(k2), a32)
        a33 = tl.dot(k3, tl.trans(k3), a33)
    x00, x11, x22, x33 = _solve_unit_lower4(_gate_block(a00, b0, c0, c0, True, BC),
                                            _gate_block(a11, b1, c1, c1, True, BC),
                                            _gate_block(a22, b2, c2, c2, True, BC),
                                            _gate_block(a33, b3, c3, c3, True, BC), BC)
    a10 = _gate_block(a10, b1, c1, c0, False, BC)
    a20 = _gate_block(a20, b2, c2, c0, False, BC)
    a21 = _gate_block(a21, b2, c2, c1, False, BC)
    a30 = _gate_block(a30, b3, c3, c0, False, BC)
    a31 = _gate_block(a31, b3, c3, c1, False, BC)
    a32 = _gate_block(a32, b3, c3, c2, False, BC)
    # X_ij = -X_ii sum_{j <= m < i} A_im X_mj, in fp32 (the inverse feeds every later product).
    x10 = -tl.dot(x11, tl.dot(a10, x00, input_precision="ieee"), input_precision="ieee")
    x21 = -tl.dot(x22, tl.dot(a21, x11, input_precision="ieee"), input_precision="ieee")
    x20 = -tl.dot(x22, tl.dot(a20, x00, input_precision="ieee")
                  + tl.dot(a21, x10, input_precision="ieee"), input_precision="ieee")
    x32 = -tl.dot(x33, tl.dot(a32, x22, input_precision="ieee"), input_precision="ieee")
    x31 = -tl.dot(x33, tl.dot(a31, x11, input_precision="ieee")
                  + tl.dot(a32, x21, input_precision="ieee"), input_precision="ieee")
    x30 = -tl.dot(x33, tl.dot(a30, x00, input_precision="ieee")
                  + tl.dot(a31, x10, input_precision="ieee")
                  + tl.dot(a32, x20, input_precision="ieee"), input_precision="ieee")
    # Store X = (I + A)^-1 as 64 x 64 per chunk; blocks above the diagonal are never stored.
    x_base = x_ptr + i_b * T * HV * 4 * BC + i_hv * 4 * BC
    _store_block(x_base, t0, 0, T, HV * 4 * BC, x00)
    _store_block(x_base, t0 + BC, 0, T, HV * 4 * BC, x10)
    _store_block(x_base, t0 + BC, BC, T, HV * 4 * BC, x11)
    _store_block(x_base, t0 + 2 * BC, 0, T, HV * 4 * BC, x20)
    _store_block(x_base, t0 + 2 * BC, BC, T, HV * 4 * BC, x21)
    _store_block(x_base, t0 + 2 * BC, 2 * BC, T, HV * 4 * BC, x22)
    _store_block(x_base, t0 + 3 * BC, 0, T, HV * 4 * BC, x30)
    _store_block(x_base, t0 + 3 * BC, BC, T, HV * 4 * BC, x31)
    _store_block(x_base, t0 + 3 * BC, 2 * BC, T, HV * 4 * BC, x32)
    _store_block(x_base, t0 + 3 * BC, 3 * BC, T, HV * 4 * BC, x33)


@triton.autotune(configs=[
    triton.Config({"BD": 128}, num_warps=8, num_stages=2),
    triton.Config({"BD": 64}, num_warps=4, num_stages=3),
    triton.Config({"BD": 32}, num_warps=4, num_stages=3),
    triton.Config({"BD": 64}, num_warps=8, num_stages=2),
    triton.Config({"BD": 32}, num_warps=4, num_stages=2),
], key=["K", "V", "HV"], prune_configs_by={"early_config_prune": _prune})
@triton.jit
def _gdn_wy_kernel(k_ptr, v_ptr, beta_ptr, gc_ptr, x_ptr, w_ptr, u_ptr, T,
                   H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
                   BT: tl.constexpr, BD: tl.constexpr):
    """w = X (beta 2^gc K) and u = X (beta V), one chunk of one value head per program."""
    i_t = tl.program_id(0)
    i_bh = tl.program_id(1)
    i_b, i_hv = i_bh // HV, i_bh % HV
    i_h = i_hv // (HV // H)
    offs_t = tl.arange(0, BT)
    rows = i_t * BT + offs_t
    mask_t = rows < T
    gate = i_b * T * HV + i_hv + rows * HV
    beta = tl.load(beta_ptr + gate, mask=mask_t, other=0.0).to(tl.float32)
    gc = tl.load(gc_ptr + gate, mask=mask_t, other=0.0)
    # Only the 16 x 16 blocks on and below the diagonal were written.
    stored = (offs_t[None, :] // 16) <= (offs_t[:, None] // 16)
    x = tl.load(x_ptr + (i_b * T * HV + i_hv) * BT + rows[:, None] * HV * BT + offs_t[None, :],
                mask=mask_t[:, None] & stored, other=0.0)
    k_rows = k_ptr + i_b * T * H * K + i_h * K + rows[:, None] * H * K
    w_rows = w_ptr + i_b * T * HV * K + i_hv * K + rows[:, None] * HV * K
    scale_k = beta * tl.math.exp2(gc)
    for d0 in tl.range(0, K, BD):
        offs = d0 + tl.arange(0, BD)
        mask = mask_t[:, None] & (offs[None, :] < K)
        kb = tl.load(k_rows + offs[None, :], mask=mask, other=0.0) * scale_k[:, None]
        w = tl.dot(x, kb.to(x.dtype))
        tl.store(w_rows + offs[None, :], w.to(w_ptr.dtype.element_ty), mask=mask)
    v_rows = v_ptr + i_b * T * HV * V + i_hv * V + rows[:, None] * HV * V
    u_rows = u_ptr + i_b * T * HV * V + i_hv * V + rows[:, None] * HV * V
    for d0 in tl.range(0, V, BD):
        offs = d0 + tl.arange(0, BD)
        mask = mask_t[:, None] & (offs[None, :] < V)
        vb = tl.load(v_rows + offs[None, :], mask=mask, other=0.0) * beta[:, None]
        u = tl.dot(x, vb.to(x.dtype))
        tl.store(u_rows + offs[None, :], u.to(u_ptr.dtype.element_ty), mask=mask)


@triton.autotune(configs=[
    triton.Config({"BV": 64}, num_warps=4, num_stages=4),
    triton.Config({"BV": 64}, num_warps=4, num_stages=3),
    triton.Config({"BV": 32}, num_warps=4, num_stages=3),
    triton.Config({"BV": 32}, num_warps=4, num_stages=4),
    triton.Config({"BV": 64}, num_warps=4, num_stages=2),
], key=["K", "V", "HV"], prune_configs_by={"early_config_prune": _prune})
@triton.jit
def _gdn_state_kernel(k_ptr, w_ptr, u_ptr, gc_ptr, h_ptr, d_ptr, T, NT,
                      H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
                      BT: tl.constexpr, BKH: tl.constexpr, BV: tl.constexpr):
    i_v = tl.program_id(0)
    i_bh = tl.program_id(1)
    i_b, i_hv = i_bh // HV, i_bh % HV
    i_h = i_hv // (HV // H)
    offs_t = tl.arange(0, BT)
    # The K x BV state is held as two BKH-row halves (the second only when K > BKH): each half
    # is one warpgroup-sized accumulator, which keeps the loop free of register spills.
    offs_k1 = tl.arange(0, BKH)
    offs_k2 = BKH + tl.arange(0, BKH)
    offs_v = i_v * BV + tl.arange(0, BV)
    mask_k1 = offs_k1 < K
    mask_k2 = offs_k2 < K
    mask_v = offs_v < V
    k_base = k_ptr + i_b * T * H * K + i_h * K
    w_base = w_ptr + i_b * T * HV * K + i_hv * K
    u_base = u_ptr + i_b * T * HV * V + i_hv * V
    d_base = d_ptr + i_b * T * HV * V + i_hv * V
    gc_base = gc_ptr + i_b * T * HV + i_hv
    h_base = h_ptr + (i_b * NT * HV + i_hv) * K * V

    state1 = tl.zeros([BKH, BV], dtype=tl.float32)
    state2 = tl.zeros([BKH, BV], dtype=tl.float32)
    for i_t in tl.range(0, NT):
        rows = i_t * BT + offs_t
        mask_t = rows < T
        h_chunk = h_base + i_t * HV * K * V
        # Entry state of this chunk, for the output kernel.
        tl.store(h_chunk + offs_k1[:, None] * V + offs_v[None, :],
                 state1.to(h_ptr.dtype.element_ty), mask=mask_k1[:, None] & mask_v[None, :])
        w1 = tl.load(w_base + rows[:, None] * HV * K + offs_k1[None, :],
                     mask=mask_t[:, None] & mask_k1[None, :], other=0.0)
        ws = tl.dot(w1, state1.to(w1.dtype))
        if K > BKH:
            tl.store(h_chunk + offs_k2[:, None] * V + offs_v[None, :],
                     state2.to(h_ptr.dtype.element_ty), mask=mask_k2[:, None] & mask_v[None, :])
            w2 = tl.load(w_base + rows[:, None] * HV * K + offs_k2[None, :],
                         mask=mask_t[:, None] & mask_k2[None, :], other=0.0)
            ws = tl.dot(w2, state2.to(w2.dtype), ws)
        u = tl.load(u_base + rows[:, None] * HV * V + offs_v[None, :],
                    mask=mask_t[:, None] & mask_v[None, :], other=0.0)
        delta = u.to(tl.float32) - ws
        tl.store(d_base + rows[:, None] * HV * V + offs_v[None, :],
                 delta.to(d_ptr.dtype.element_ty), mask=mask_t[:, None] & mask_v[None, :])
        gc = tl.load(gc_base + rows * HV, mask=mask_t, other=0.0)
        g_last = tl.load(gc_base + (tl.minimum(i_t * BT + BT, T) - 1) * HV)
        # The decay scales delta (BT x BV) rather than K; K^T comes straight from memory.
        delta = (delta * tl.math.exp2(g_last - gc)[:, None]).to(w1.dtype)
        decay = tl.math.exp2(g_last)
        k1 = tl.load(k_base + rows[None, :] * H * K + offs_k1[:, None],
                     mask=mask_k1[:, None] & mask_t[None, :], other=0.0)
        state1 = tl.dot(k1, delta, state1 * decay)
        if K > BKH:
            k2 = tl.load(k_base + rows[None, :] * H * K + offs_k2[:, None],
                         mask=mask_k2[:, None] & mask_t[None, :], other=0.0)
            state2 = tl.dot(k2, delta, state2 * decay)


@triton.autotune(configs=[
    triton.Config({"BV": 64}, num_warps=4, num_stages=3),
    triton.Config({"BV": 64}, num_warps=4, num_stages=2),
    triton.Config({"BV": 128}, num_warps=8, num_stages=3),
    triton.Config({"BV": 64}, num_warps=8, num_stages=2),
], key=["K", "V", "HV"], prune_configs_by={"early_config_prune": _prune})
@triton.jit
def _gdn_output_kernel(q_ptr, k_ptr, gc_ptr, h_ptr, d_ptr, o_ptr, T, NT, scale,
                       H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
                       BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr):
    i_v = tl.program_id(0)
    i_t = tl.program_id(1)
    i_bh = tl.program_id(2)
    i_b, i_hv = i_bh // HV, i_bh % HV
    i_h = i_hv // (HV // H)
    offs_t = tl.arange(0, BT)
    offs_k = tl.arange(0, BK)
    offs_v = i_v * BV + tl.arange(0, BV)
    rows = i_t * BT + offs_t
    mask_t = rows < T
    mask_k = offs_k < K
    mask_v = offs_v < V
    mask_tk = mask_t[:, None] & mask_k[None, :]
    mask_tv = mask_t[:, None] & mask_v[None, :]
    qk_off = i_b * T * H * K + i_h * K + rows[:, None] * H * K + offs_k[None, :]
    q = tl.load(q_ptr + qk_off, mask=mask_tk, other=0.0)
    k = tl.load(k_ptr + qk_off, mask=mask_tk, other=0.0)
    h = tl.load(h_ptr + (i_b * NT * HV + i_t * HV + i_hv) * K * V
                + offs_k[:, None] * V + offs_v[None, :],
                mask=mask_k[:, None] & mask_v[None, :], other=0.0)
    vo_off = i_b * T * HV * V + i_hv * V + rows[:, None] * HV * V + offs_v[None, :]
    delta = tl.load(d_ptr + vo_off, mask=mask_tv, other=0.0)
    gc = tl.load(gc_ptr + i_b * T * HV + i_hv + rows * HV, mask=mask_t, other=0.0)

    out = tl.dot(q, h) * tl.math.exp2(gc)[:, None]
    causal = offs_t[:, None] >= offs_t[None, :]
    gap = tl.where(causal, gc[:, None] - gc[None, :], 0.0)
    attn = tl.where(causal, tl.dot(q, tl.trans(k)) * tl.math.exp2(gap), 0.0)
    out = tl.dot(attn.to(delta.dtype), delta, out)
    tl.store(o_ptr + vo_off, (out * scale).to(o_ptr.dtype.element_ty), mask=mask_tv)


def run(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
        beta: torch.Tensor) -> torch.Tensor:
    """Chunked gated delta rule forward; o has v's shape and dtype.

    Raises ValueError when the shapes disagree with the case layout, when HV is not a multiple
    of H, or when K > 128.
    """
    batch, seq, heads, dk = q.shape
    heads_v, dv = v.shape[2], v.shape[3]
    if (k.shape != q.shape or v.shape[:2] != q.shape[:2] or heads_v % heads
            or g.shape != v.shape[:3] or beta.shape != v.shape[:3]):
        raise ValueError(f"shapes do not fit the gdn layout: q {q.shape}, k {k.shape}, "
                         f"v {v.shape}, g {g.shape}, beta {beta.shape}")
    q, k, v, g, beta = (t.contiguous() for t in (q, k, v, g, beta))
    nt = triton.cdiv(seq, CHUNK)
    if dk > 128:
        raise ValueError(f"head dim K={dk} > 128 is not supported (the state is two 64-row halves)")
    bk = triton.next_power_of_2(max(dk, 16))
    w = torch.empty(batch, seq, heads_v, dk, device=q.device, dtype=k.dtype)
    u = torch.empty(batch, seq, heads_v, dv, device=q.device, dtype=k.dtype)
    gc = torch.empty(batch, seq, heads_v, device=q.device, dtype=torch.float32)
    h = torch.empty(batch, nt, heads_v, dk, dv, device=q.device, dtype=k.dtype)
    delta = torch.empty_like(u)
    o = torch.empty_like(v)
    dims = dict(H=heads, HV=heads_v, K=dk, V=dv)
    x = torch.empty(batch, seq, heads_v, CHUNK, device=q.device, dtype=k.dtype)
    _gdn_kkt_solve_kernel[(nt, batch * heads_v)](k, g, beta, gc, x, seq, H=heads, HV=heads_v,
                                                 K=dk, BC=CHUNK // 4)
    _gdn_wy_kernel[(nt, batch * heads_v)](k, v, beta, gc, x, w, u, seq, **dims, BT=CHUNK)
    _gdn_state_kernel[lambda m: (triton.cdiv(dv, m["BV"]), batch * heads_v)](
        k, w, u, gc, h, delta, seq, nt, **dims, BT=CHUNK, BKH=min(bk, 64))
    _gdn_output_kernel[lambda m: (triton.cdiv(dv, m["BV"]), nt, batch * heads_v)](
        q, k, gc, h, delta, o, seq, nt, dk ** -0.5, **dims, BT=CHUNK, BK=bk)
    return o
