"""3x3 convolution (stride 1, pad 1) over NHWC as an implicit GEMM: one flattened loop walks the
nine filter taps (tap -> (dy, dx) by // and %), an inner loop walks input-channel chunks."""
import torch
import triton
import triton.language as tl


@triton.jit
def conv3x3_nhwc_kernel(x_ptr, w_ptr, y_ptr, NB, H, W, C, F,
                        BLOCK_P: tl.constexpr, BLOCK_F: tl.constexpr, BLOCK_C: tl.constexpr):
    p = tl.program_id(0) * BLOCK_P + tl.arange(0, BLOCK_P)
    f = tl.program_id(1) * BLOCK_F + tl.arange(0, BLOCK_F)
    n = p // (H * W)
    hw = p % (H * W)
    oh = hw // W
    ow = hw % W
    p_ok = p < NB * H * W
    f_ok = f < F
    acc = tl.zeros((BLOCK_P, BLOCK_F), dtype=tl.float32)
    for tap in range(9):
        ih = oh + tap // 3 - 1
        iw = ow + tap % 3 - 1
        ok = p_ok & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
        row = ((n * H + ih) * W + iw) * C
        for c0 in range(0, C, BLOCK_C):
            c = c0 + tl.arange(0, BLOCK_C)
            xt = tl.load(x_ptr + row[:, None] + c[None, :], mask=ok[:, None] & (c[None, :] < C), other=0.0)
            wt = tl.load(w_ptr + (tap * C + c[:, None]) * F + f[None, :],
                         mask=(c[:, None] < C) & f_ok[None, :], other=0.0)
            acc += tl.dot(xt, wt)
    tl.store(y_ptr + p[:, None] * F + f[None, :], acc.to(y_ptr.dtype.element_ty),
             mask=p_ok[:, None] & f_ok[None, :])


def run(x, w):
    x = x.contiguous()
    w = w.contiguous()
    NB, H, W, C = x.shape
    F = w.shape[3]
    y = torch.empty((NB, H, W, F), device=x.device, dtype=x.dtype)
    grid = (triton.cdiv(NB * H * W, 32), triton.cdiv(F, 32))
    conv3x3_nhwc_kernel[grid](x, w, y, NB, H, W, C, F, BLOCK_P=32, BLOCK_F=32, BLOCK_C=16, num_warps=4)
    return y
