"""Conv2d, stride 1, no padding, no bias, NCHW: direct convolution. A program computes a block
of output pixels of one image for a block of output channels, looping over input channels and
the kernel window with an outer product of an input row vector and a weight column."""
import torch
import triton
import triton.language as tl


@triton.jit
def conv2d_direct(x_ptr, w_ptr, y_ptr, C_in, H, W, C_out, OH, OW,
                  KS: tl.constexpr, BLOCK_P: tl.constexpr, BLOCK_CO: tl.constexpr):
    pid_p = tl.program_id(0)
    pid_co = tl.program_id(1)
    n = tl.program_id(2).to(tl.int64)
    p = pid_p * BLOCK_P + tl.arange(0, BLOCK_P)
    co = pid_co * BLOCK_CO + tl.arange(0, BLOCK_CO)
    oh = p // OW
    ow = p % OW
    p_ok = p < OH * OW
    co_ok = co < C_out
    acc = tl.zeros((BLOCK_CO, BLOCK_P), dtype=tl.float32)
    x_img = x_ptr + n * C_in * H * W
    for ci in range(0, C_in):
        for kh in tl.static_range(KS):
            for kw in tl.static_range(KS):
                xv = tl.load(x_img + ci * H * W + (oh + kh) * W + (ow + kw), mask=p_ok, other=0.0)
                wv = tl.load(w_ptr + ((co * C_in + ci) * KS + kh) * KS + kw, mask=co_ok, other=0.0)
                acc += wv[:, None] * xv[None, :]
    y_img = y_ptr + n * C_out * OH * OW
    tl.store(y_img + co[:, None] * (OH * OW) + p[None, :], acc, mask=co_ok[:, None] & p_ok[None, :])


def run(x, weight):
    x = x.contiguous()
    n, c_in, h, w = x.shape
    c_out, _, ks, _ = weight.shape
    oh, ow = h - ks + 1, w - ks + 1
    y = torch.empty((n, c_out, oh, ow), device=x.device, dtype=x.dtype)
    grid = (triton.cdiv(oh * ow, 64), triton.cdiv(c_out, 32), n)
    conv2d_direct[grid](x, weight.contiguous(), y, c_in, h, w, c_out, oh, ow,
                        KS=ks, BLOCK_P=64, BLOCK_CO=32)
    return y
