"""Expert Triton kernel for `conv2d`: implicit-GEMM convolution over channels-last tensors.

The convolution is the GEMM  Y[M, F] = A[M, K] @ B[K, F]  with M = N*H*W output pixels,
K = R*S*C filter taps times input channels, where the im2col matrix A is never built: each
K-step loads one (tap, channel block) slab of the NHWC input directly. Because the input is
channels-last, a row of that slab is BLOCK_K contiguous channels of one input pixel (a
16-byte-vectorizable load); the weight, channels-last too, is F rows of R*S*C contiguous values.

Expert decisions, each a plain Triton construct:
- autotuned tile sizes (BLOCK_M/BLOCK_N/BLOCK_K), warps and pipeline depth (num_stages);
- grouped program ordering (GROUP_M) so neighbouring programs share input rows in L2;
- tensor-core tl.dot with an fp32 accumulator;
- masks only where needed: the spatial mask implements the zero padding at the image border;
  the channel, pixel and filter masks are compiled out when the divisibility heuristics
  (EVEN_C, EVEN_M, EVEN_F) hold, which they do at the real shape.
"""
from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

_INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"


def _first_config_when_interpreted(configs: list[triton.Config], named_args: dict,
                                   **kwargs) -> list[triton.Config]:
    """The CPU interpreter tries only the first (best-measured) config, so it runs exactly the
    config a pinned (de-autotuned) kernel runs on the device; the device tries them all."""
    return configs[:1] if _INTERPRET else configs


# Best-measured config first (bench/results/conv2d.md, H200, the case's real shape).
@triton.heuristics(
    {
        "EVEN_C": lambda a: a["C"] % a["BLOCK_K"] == 0,
        "EVEN_M": lambda a: (a["N"] * a["H"] * a["W"]) % a["BLOCK_M"] == 0,
        "EVEN_F": lambda a: a["F"] % a["BLOCK_N"] == 0,
    }
)
@triton.jit
def conv2d_nhwc_kernel(
    x_ptr, w_ptr, y_ptr,
    N, C, H, W, F,
    R: tl.constexpr, S: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    EVEN_C: tl.constexpr, EVEN_M: tl.constexpr, EVEN_F: tl.constexpr,
):
    # Dense channels-last operands: x is [N, H, W, C], w is [F, R, S, C], y is [N, H, W, F]
    # (stride 1, padding R//2 and S//2, so the output has the input's H x W). Strides follow
    # from the shape, which keeps the launch short and lets the compiler prove alignment.
    PAD_H: tl.constexpr = R // 2
    PAD_W: tl.constexpr = S // 2
    M = N * H * W
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(F, BLOCK_N)
    # Grouped ordering: GROUP_M row-blocks are swept for every filter block before moving on,
    # so the input pixels of a group stay in L2 while all filter blocks consume them.
    pid_m = pid // num_pid_n
    pid_n = pid % num_pid_n

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_f = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    # Output pixel (n, h, w) of each GEMM row; tap (r, s) reads input pixel (h + r - PAD_H, w + s - PAD_W).
    n_idx = offs_m // (H * W)
    hw = offs_m % (H * W)
    ih0 = hw // W - PAD_H
    iw0 = hw % W - PAD_W
    x_img = x_ptr + n_idx * (H * W * C)
    w_col = w_ptr + offs_f * (R * S * C)

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    c_blocks = tl.cdiv(C, BLOCK_K)
    for kk in range(0, R * S * c_blocks):
        rs = kk // c_blocks
        c0 = (kk % c_blocks) * BLOCK_K
        r = rs // S
        s = rs % S
        ih = ih0 + r
        iw = iw0 + s
        # The zero padding: rows whose input pixel lies outside the image read zeros.
        row_ok = (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
        if not EVEN_M:
            row_ok = row_ok & (offs_m < M)
        offs_c = c0 + offs_k
        a_ptrs = (x_img + (ih * W + iw) * C)[:, None] + offs_c[None, :]
        b_ptrs = w_col[None, :] + (rs * C) + offs_c[:, None]
        if EVEN_C:
            a = tl.load(a_ptrs, mask=row_ok[:, None], other=0.0)
        else:
            a = tl.load(a_ptrs, mask=row_ok[:, None] & (offs_c[None, :] < C), other=0.0)
        if EVEN_C & EVEN_F:
            b = tl.load(b_ptrs)
        else:
            b = tl.load(b_ptrs, mask=(offs_c[:, None] < C) & (offs_f[None, :] < F), other=0.0)
        acc = acc + tl.sum(a.to(tl.float32)[:, :, None] * b.to(tl.float32)[None, :, :], axis=1)

    y = acc.to(y_ptr.dtype.element_ty)
    # Row m of the GEMM is output pixel m of the [N*H*W, F] channels-last output.
    y_ptrs = y_ptr + offs_m[:, None] * F + offs_f[None, :]
    if EVEN_M & EVEN_F:
        tl.store(y_ptrs, y)
    else:
        tl.store(y_ptrs, y, mask=(offs_m[:, None] < M) & (offs_f[None, :] < F))


def run(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """conv2d(x, w, stride=1, padding=(R//2, S//2)) for odd R, S; returns (N, F, H, W) in
    channels-last memory. Inputs in another layout are first copied to channels-last."""
    n, c, h, wd = x.shape
    f, c_w, r, s = w.shape
    if c_w != c or r % 2 == 0 or s % 2 == 0:
        raise ValueError(
            f"need matching channels and an odd filter, got x {tuple(x.shape)}, w {tuple(w.shape)}")
    # No-ops for the case's inputs, which are channels-last already.
    x = x.contiguous(memory_format=torch.channels_last)
    w = w.contiguous(memory_format=torch.channels_last)
    y = torch.empty((n, h, wd, f), device=x.device, dtype=x.dtype)
    m = n * h * wd

    def grid(meta: dict) -> tuple[int]:
        return (triton.cdiv(m, meta["BLOCK_M"]) * triton.cdiv(f, meta["BLOCK_N"]),)

    conv2d_nhwc_kernel[grid](x, w, y, n, c, h, wd, f, R=r, S=s, BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, GROUP_M=8, num_warps=4, num_stages=1)
    # [N, H, W, F] memory seen as an (N, F, H, W) tensor: exactly torch's channels-last layout.
    return y.permute(0, 3, 1, 2)
