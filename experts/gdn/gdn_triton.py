"""Gated delta net forward in Triton: the expert kernel for the `gdn` case.

`run(q, k, v, g, beta)` takes the layout of experts/gdn/case.py (q, k: (B, T, H, K); v:
(B, T, HV, V); g, beta: (B, T, HV)) and returns o, (B, T, HV, V) in v's dtype. It is the chunked
phase decomposition with chunk 64, in three kernels:
  1. `_gdn_wy_kernel`, one program per (chunk, value head): in-chunk cumulative log decay,
     A = beta K K^T * decay (strictly lower), (I + A)^-1 by 16x16 diagonal blocks (forward
     substitution) merged by block products, and the WY factors w = (I + A)^-1 (beta e^g K),
     u = (I + A)^-1 (beta V).
  2. `_gdn_state_kernel`, one program per (value head, V tile), walking the chunks in order:
     delta = u - w S, S <- e^{g_last} S + (K e^{g_last - g})^T delta; it stores each chunk's
     entry state S and delta.
  3. `_gdn_output_kernel`, one program per (chunk, value head, V tile):
     o = scale (Q S e^g + (Q K^T * decay, causal) delta).
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


def _wy_configs() -> list[triton.Config]:
    if _INTERPRET:
        return [triton.Config({}, num_warps=4, num_stages=1)]
    return [triton.Config({}, num_warps=w, num_stages=1) for w in (4, 8)]


def _state_configs() -> list[triton.Config]:
    if _INTERPRET:
        return [triton.Config({"BV": 16}, num_warps=4, num_stages=1)]
    shapes = [(32, 4, 1), (32, 4, 2), (64, 4, 2), (64, 8, 2), (32, 4, 3)]
    return [triton.Config({"BV": bv}, num_warps=w, num_stages=s) for bv, w, s in shapes]


def _output_configs() -> list[triton.Config]:
    if _INTERPRET:
        return [triton.Config({"BV": 16}, num_warps=4, num_stages=1)]
    shapes = [(32, 4, 2), (64, 4, 2), (64, 8, 2), (128, 8, 2), (128, 8, 1)]
    return [triton.Config({"BV": bv}, num_warps=w, num_stages=s) for bv, w, s in shapes]


@triton.jit
def _solve_unit_lower(a, BC: tl.constexpr):
    """(I + a)^-1 for a strictly lower-triangular BC x BC tile, by forward substitution."""
    o = tl.arange(0, BC)
    x = tl.where(o[:, None] == o[None, :], 1.0, 0.0)
    for i in range(1, BC):
        a_i = tl.sum(tl.where(o[:, None] == i, a, 0.0), 0)
        x_i = tl.where(o == i, 1.0, 0.0) - tl.sum(a_i[:, None] * x, 0)
        x = tl.where(o[:, None] == i, x_i[None, :], x)
    return x


@triton.jit
def _kkt_block(k_i, k_j, gbeta_i, gc_i, gc_j, DIAGONAL: tl.constexpr, BC: tl.constexpr):
    """One BC x BC block of A = beta_i (k_i . k_j) exp(gc_i - gc_j), strictly lower in-chunk."""
    a = tl.dot(k_i, tl.trans(k_j)) * gbeta_i[:, None]
    gap = gc_i[:, None] - gc_j[None, :]
    if DIAGONAL:
        o = tl.arange(0, BC)
        lower = o[:, None] > o[None, :]
        return tl.where(lower, a * tl.exp(tl.where(lower, gap, 0.0)), 0.0)
    return a * tl.exp(gap)


@triton.jit
def _load_rows(base, t0, T, stride_t, offs_d, D):
    rows = t0 + tl.arange(0, 16)
    mask = (rows[:, None] < T) & (offs_d[None, :] < D)
    return tl.load(base + rows[:, None] * stride_t + offs_d[None, :], mask=mask, other=0.0)


@triton.jit
def _store_rows(base, t0, T, stride_t, offs_d, D, x):
    rows = t0 + tl.arange(0, 16)
    mask = (rows[:, None] < T) & (offs_d[None, :] < D)
    tl.store(base + rows[:, None] * stride_t + offs_d[None, :], x.to(base.dtype.element_ty),
             mask=mask)


@triton.jit
def _load_gates(g_ptr, beta_ptr, t0, T, stride_t):
    rows = t0 + tl.arange(0, 16)
    g = tl.load(g_ptr + rows * stride_t, mask=rows < T, other=0.0).to(tl.float32)
    beta = tl.load(beta_ptr + rows * stride_t, mask=rows < T, other=0.0).to(tl.float32)
    return g, beta


@triton.autotune(configs=_wy_configs(), key=["K", "V", "HV"])
@triton.jit
def _gdn_wy_kernel(k_ptr, v_ptr, g_ptr, beta_ptr, w_ptr, u_ptr, gc_ptr, T,
                   H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
                   BK: tl.constexpr, BVW: tl.constexpr, BC: tl.constexpr):
    i_t = tl.program_id(0)
    i_bh = tl.program_id(1)
    i_b, i_hv = i_bh // HV, i_bh % HV
    i_h = i_hv // (HV // H)
    t0 = i_t * 4 * BC
    offs_k = tl.arange(0, BK)
    offs_v = tl.arange(0, BVW)
    k_base = k_ptr + i_b * T * H * K + i_h * K
    v_base = v_ptr + i_b * T * HV * V + i_hv * V
    w_base = w_ptr + i_b * T * HV * K + i_hv * K
    u_base = u_ptr + i_b * T * HV * V + i_hv * V
    gate = i_b * T * HV + i_hv

    # The chunk of 64 tokens as four 16-row sub-blocks: 16 x 16 diagonal blocks of A are inverted
    # in registers, then merged by block products (I + A is block lower triangular).
    k0 = _load_rows(k_base, t0, T, H * K, offs_k, K)
    k1 = _load_rows(k_base, t0 + BC, T, H * K, offs_k, K)
    k2 = _load_rows(k_base, t0 + 2 * BC, T, H * K, offs_k, K)
    k3 = _load_rows(k_base, t0 + 3 * BC, T, H * K, offs_k, K)
    g0, b0 = _load_gates(g_ptr + gate, beta_ptr + gate, t0, T, HV)
    g1, b1 = _load_gates(g_ptr + gate, beta_ptr + gate, t0 + BC, T, HV)
    g2, b2 = _load_gates(g_ptr + gate, beta_ptr + gate, t0 + 2 * BC, T, HV)
    g3, b3 = _load_gates(g_ptr + gate, beta_ptr + gate, t0 + 3 * BC, T, HV)
    # In-chunk cumulative log decay; padded tokens carry g = 0, so the tail stays flat.
    c0 = tl.cumsum(g0, 0)
    c1 = tl.cumsum(g1, 0) + tl.sum(g0, 0)
    c2 = tl.cumsum(g2, 0) + tl.sum(g0, 0) + tl.sum(g1, 0)
    c3 = tl.cumsum(g3, 0) + tl.sum(g0, 0) + tl.sum(g1, 0) + tl.sum(g2, 0)
    rows = t0 + tl.arange(0, BC)
    tl.store(gc_ptr + gate + rows * HV, c0, mask=rows < T)
    tl.store(gc_ptr + gate + (rows + BC) * HV, c1, mask=rows + BC < T)
    tl.store(gc_ptr + gate + (rows + 2 * BC) * HV, c2, mask=rows + 2 * BC < T)
    tl.store(gc_ptr + gate + (rows + 3 * BC) * HV, c3, mask=rows + 3 * BC < T)

    x00 = _solve_unit_lower(_kkt_block(k0, k0, b0, c0, c0, True, BC), BC)
    x11 = _solve_unit_lower(_kkt_block(k1, k1, b1, c1, c1, True, BC), BC)
    x22 = _solve_unit_lower(_kkt_block(k2, k2, b2, c2, c2, True, BC), BC)
    x33 = _solve_unit_lower(_kkt_block(k3, k3, b3, c3, c3, True, BC), BC)
    a10 = _kkt_block(k1, k0, b1, c1, c0, False, BC)
    a20 = _kkt_block(k2, k0, b2, c2, c0, False, BC)
    a21 = _kkt_block(k2, k1, b2, c2, c1, False, BC)
    a30 = _kkt_block(k3, k0, b3, c3, c0, False, BC)
    a31 = _kkt_block(k3, k1, b3, c3, c1, False, BC)
    a32 = _kkt_block(k3, k2, b3, c3, c2, False, BC)
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

    # w = X (beta e^gc K): tensor-core products in the input dtype, fp32 accumulation.
    dt = k0.dtype
    kb0 = (k0 * (b0 * tl.exp(c0))[:, None]).to(dt)
    kb1 = (k1 * (b1 * tl.exp(c1))[:, None]).to(dt)
    kb2 = (k2 * (b2 * tl.exp(c2))[:, None]).to(dt)
    kb3 = (k3 * (b3 * tl.exp(c3))[:, None]).to(dt)
    w0 = tl.dot(x00.to(dt), kb0)
    w1 = tl.dot(x11.to(dt), kb1, tl.dot(x10.to(dt), kb0))
    w2 = tl.dot(x22.to(dt), kb2, tl.dot(x21.to(dt), kb1, tl.dot(x20.to(dt), kb0)))
    w3 = tl.dot(x33.to(dt), kb3, tl.dot(x32.to(dt), kb2,
                                       tl.dot(x31.to(dt), kb1, tl.dot(x30.to(dt), kb0))))
    _store_rows(w_base, t0, T, HV * K, offs_k, K, w0)
    _store_rows(w_base, t0 + BC, T, HV * K, offs_k, K, w1)
    _store_rows(w_base, t0 + 2 * BC, T, HV * K, offs_k, K, w2)
    _store_rows(w_base, t0 + 3 * BC, T, HV * K, offs_k, K, w3)

    # u = X (beta V).
    vb0 = (_load_rows(v_base, t0, T, HV * V, offs_v, V) * b0[:, None]).to(dt)
    vb1 = (_load_rows(v_base, t0 + BC, T, HV * V, offs_v, V) * b1[:, None]).to(dt)
    vb2 = (_load_rows(v_base, t0 + 2 * BC, T, HV * V, offs_v, V) * b2[:, None]).to(dt)
    vb3 = (_load_rows(v_base, t0 + 3 * BC, T, HV * V, offs_v, V) * b3[:, None]).to(dt)
    u0 = tl.dot(x00.to(dt), vb0)
    u1 = tl.dot(x11.to(dt), vb1, tl.dot(x10.to(dt), vb0))
    u2 = tl.dot(x22.to(dt), vb2, tl.dot(x21.to(dt), vb1, tl.dot(x20.to(dt), vb0)))
    u3 = tl.dot(x33.to(dt), vb3, tl.dot(x32.to(dt), vb2,
                                       tl.dot(x31.to(dt), vb1, tl.dot(x30.to(dt), vb0))))
    _store_rows(u_base, t0, T, HV * V, offs_v, V, u0)
    _store_rows(u_base, t0 + BC, T, HV * V, offs_v, V, u1)
    _store_rows(u_base, t0 + 2 * BC, T, HV * V, offs_v, V, u2)
    _store_rows(u_base, t0 + 3 * BC, T, HV * V, offs_v, V, u3)


@triton.autotune(configs=_state_configs(), key=["K", "V", "HV"])
@triton.jit
def _gdn_state_kernel(k_ptr, w_ptr, u_ptr, gc_ptr, h_ptr, d_ptr, T, NT,
                      H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
                      BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr):
    i_v = tl.program_id(0)
    i_bh = tl.program_id(1)
    i_b, i_hv = i_bh // HV, i_bh % HV
    i_h = i_hv // (HV // H)
    offs_t = tl.arange(0, BT)
    offs_k = tl.arange(0, BK)
    offs_v = i_v * BV + tl.arange(0, BV)
    mask_k = offs_k < K
    mask_v = offs_v < V
    k_base = k_ptr + i_b * T * H * K + i_h * K
    w_base = w_ptr + i_b * T * HV * K + i_hv * K
    u_base = u_ptr + i_b * T * HV * V + i_hv * V
    d_base = d_ptr + i_b * T * HV * V + i_hv * V
    gc_base = gc_ptr + i_b * T * HV + i_hv
    h_base = h_ptr + (i_b * NT * HV + i_hv) * K * V
    h_tile = offs_k[:, None] * V + offs_v[None, :]
    mask_h = mask_k[:, None] & mask_v[None, :]

    state = tl.zeros([BK, BV], dtype=tl.float32)
    for i_t in tl.range(0, NT):
        rows = i_t * BT + offs_t
        mask_t = rows < T
        # Entry state of this chunk, for the output kernel.
        tl.store(h_base + i_t * HV * K * V + h_tile, state.to(h_ptr.dtype.element_ty), mask=mask_h)
        w = tl.load(w_base + rows[:, None] * HV * K + offs_k[None, :],
                    mask=mask_t[:, None] & mask_k[None, :], other=0.0)
        u = tl.load(u_base + rows[:, None] * HV * V + offs_v[None, :],
                    mask=mask_t[:, None] & mask_v[None, :], other=0.0)
        delta = u.to(tl.float32) - tl.dot(w, state.to(w.dtype))
        tl.store(d_base + rows[:, None] * HV * V + offs_v[None, :],
                 delta.to(d_ptr.dtype.element_ty), mask=mask_t[:, None] & mask_v[None, :])
        gc = tl.load(gc_base + rows * HV, mask=mask_t, other=0.0)
        g_last = tl.load(gc_base + (tl.minimum(i_t * BT + BT, T) - 1) * HV)
        k = tl.load(k_base + rows[:, None] * H * K + offs_k[None, :],
                    mask=mask_t[:, None] & mask_k[None, :], other=0.0)
        k = (k * tl.exp(g_last - gc)[:, None]).to(w.dtype)
        state = state * tl.exp(g_last) + tl.dot(tl.trans(k), delta.to(w.dtype))


@triton.autotune(configs=_output_configs(), key=["K", "V", "HV"])
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

    out = tl.dot(q, h) * tl.exp(gc)[:, None]
    causal = offs_t[:, None] >= offs_t[None, :]
    gap = tl.where(causal, gc[:, None] - gc[None, :], 0.0)
    attn = tl.where(causal, tl.dot(q, tl.trans(k)) * tl.exp(gap), 0.0)
    out = tl.dot(attn.to(delta.dtype), delta, out)
    tl.store(o_ptr + vo_off, (out * scale).to(o_ptr.dtype.element_ty), mask=mask_tv)


def run(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
        beta: torch.Tensor) -> torch.Tensor:
    """Chunked gated delta rule forward; o has v's shape and dtype."""
    batch, seq, heads, dk = q.shape
    heads_v, dv = v.shape[2], v.shape[3]
    q, k, v, g, beta = (t.contiguous() for t in (q, k, v, g, beta))
    nt = triton.cdiv(seq, CHUNK)
    bk = triton.next_power_of_2(max(dk, 16))
    bvw = triton.next_power_of_2(max(dv, 16))
    w = torch.empty(batch, seq, heads_v, dk, device=q.device, dtype=k.dtype)
    u = torch.empty(batch, seq, heads_v, dv, device=q.device, dtype=k.dtype)
    gc = torch.empty(batch, seq, heads_v, device=q.device, dtype=torch.float32)
    h = torch.empty(batch, nt, heads_v, dk, dv, device=q.device, dtype=k.dtype)
    delta = torch.empty_like(u)
    o = torch.empty_like(v)
    dims = dict(H=heads, HV=heads_v, K=dk, V=dv)
    _gdn_wy_kernel[(nt, batch * heads_v)](k, v, g, beta, w, u, gc, seq, **dims,
                                          BK=bk, BVW=bvw, BC=CHUNK // 4)
    _gdn_state_kernel[lambda m: (triton.cdiv(dv, m["BV"]), batch * heads_v)](
        k, w, u, gc, h, delta, seq, nt, **dims, BT=CHUNK, BK=bk)
    _gdn_output_kernel[lambda m: (triton.cdiv(dv, m["BV"]), nt, batch * heads_v)](
        q, k, gc, h, delta, o, seq, nt, dk ** -0.5, **dims, BT=CHUNK, BK=bk)
    return o
