"""Direct convolution as an implicit GEMM: rows are output pixels (n, p, q), columns are
output channels, the reduction runs over (r, s) taps and input-channel blocks."""
import torch
import triton
import triton.language as tl


@triton.jit
def conv2d_fwd(x, w, y, N, C, H, W, F, P, Q, stride, pad,
               R: tl.constexpr, S: tl.constexpr,
               BLOCK_PIX: tl.constexpr, BLOCK_F: tl.constexpr, BLOCK_C: tl.constexpr):
    pix = tl.program_id(0) * BLOCK_PIX + tl.arange(0, BLOCK_PIX)
    fo = tl.program_id(1) * BLOCK_F + tl.arange(0, BLOCK_F)
    n = pix // (P * Q)
    pq = pix % (P * Q)
    p = pq // Q
    q = pq % Q
    pix_ok = pix < N * P * Q
    f_ok = fo < F
    acc = tl.zeros((BLOCK_PIX, BLOCK_F), dtype=tl.float32)
    for r in tl.static_range(R):
        for s in tl.static_range(S):
            hi = p * stride - pad + r
            wi = q * stride - pad + s
            in_img = pix_ok & (hi >= 0) & (hi < H) & (wi >= 0) & (wi < W)
            for c0 in range(0, C, BLOCK_C):
                cc = c0 + tl.arange(0, BLOCK_C)
                c_ok = cc < C
                x_off = ((n[:, None] * C + cc[None, :]) * H + hi[:, None]) * W + wi[:, None]
                xt = tl.load(x + x_off, mask=in_img[:, None] & c_ok[None, :], other=0.0)
                w_off = ((fo[None, :] * C + cc[:, None]) * R + r) * S + s
                wt = tl.load(w + w_off, mask=c_ok[:, None] & f_ok[None, :], other=0.0)
                acc += tl.dot(xt, wt)
    y_off = ((n[:, None] * F + fo[None, :]) * P + p[:, None]) * Q + q[:, None]
    tl.store(y + y_off, acc.to(y.dtype.element_ty), mask=pix_ok[:, None] & f_ok[None, :])


def run(x, w, stride, pad):
    x = x.contiguous()
    w = w.contiguous()
    N, C, H, W = x.shape
    F, _, R, S = w.shape
    P = (H + 2 * pad - R) // stride + 1
    Q = (W + 2 * pad - S) // stride + 1
    y = torch.empty((N, F, P, Q), dtype=x.dtype, device=x.device)
    grid = (triton.cdiv(N * P * Q, 32), triton.cdiv(F, 32))
    conv2d_fwd[grid](x, w, y, N, C, H, W, F, P, Q, stride, pad, R=R, S=S,
                     BLOCK_PIX=32, BLOCK_F=32, BLOCK_C=16, num_warps=4)
    return y
