"""1x1 convolution over NHWC: every pixel is a row of a (N*H*W, C) matrix, the weight (F, C) is read
transposed. Pixel indices are int64; the channel loop is the reduction; bias added in the epilogue."""
import torch
import triton
import triton.language as tl


@triton.jit
def conv1x1_nhwc_kernel(x_ptr, w_ptr, bias_ptr, y_ptr, n_pix, C, F,
                        PIX_TILE: tl.constexpr, F_TILE: tl.constexpr, C_TILE: tl.constexpr):
    pix = tl.program_id(0).to(tl.int64) * PIX_TILE + tl.arange(0, PIX_TILE)
    f = tl.program_id(1) * F_TILE + tl.arange(0, F_TILE)
    pix_ok = pix < n_pix
    f_ok = f < F
    acc = tl.zeros((PIX_TILE, F_TILE), dtype=tl.float32)
    for c0 in range(0, C, C_TILE):
        c = c0 + tl.arange(0, C_TILE)
        c_ok = c < C
        xt = tl.load(x_ptr + pix[:, None] * C + c[None, :], mask=pix_ok[:, None] & c_ok[None, :], other=0.0)
        wt = tl.load(w_ptr + f[None, :] * C + c[:, None], mask=c_ok[:, None] & f_ok[None, :], other=0.0)
        acc = tl.dot(xt, wt, acc)
    acc += tl.load(bias_ptr + f, mask=f_ok, other=0.0).to(tl.float32)[None, :]
    tl.store(y_ptr + pix[:, None] * F + f[None, :], acc.to(y_ptr.dtype.element_ty),
             mask=pix_ok[:, None] & f_ok[None, :])


def run(x, w, bias):
    x = x.contiguous()
    N, H, W, C = x.shape
    F = w.shape[0]
    y = torch.empty((N, H, W, F), device=x.device, dtype=x.dtype)
    n_pix = N * H * W
    grid = (triton.cdiv(n_pix, 64), triton.cdiv(F, 32))
    conv1x1_nhwc_kernel[grid](x, w.contiguous(), bias, y, n_pix, C, F,
                              PIX_TILE=64, F_TILE=32, C_TILE=32, num_warps=4)
    return y
