"""3x3 convolution (stride 1, pad 1) over NHWC activations and an HWIO filter as an implicit
GEMM: one unrolled loop over the nine taps (flattened), the input channels in chunks inside it."""
import torch
import triton
import triton.language as tl


@triton.jit
def conv_taps_kernel(src, filt, dst, batch, height, width, cin, cout,
                     TILE_M: tl.constexpr, TILE_N: tl.constexpr, TILE_K: tl.constexpr,
                     TAPS: tl.constexpr, KW: tl.constexpr):
    rows = tl.program_id(0) * TILE_M + tl.arange(0, TILE_M)
    cols = tl.program_id(1) * TILE_N + tl.arange(0, TILE_N)
    img = rows // (height * width)
    oy = (rows // width) % height
    ox = rows % width
    live = rows < batch * height * width
    chans = tl.arange(0, TILE_K)
    total = tl.zeros((TILE_M, TILE_N), dtype=tl.float32)
    for t in tl.static_range(TAPS):
        # the tap's input pixel and the filter slab it multiplies
        iy = oy + t // KW - 1
        ix = ox + t % KW - 1
        inside = live & (iy >= 0) & (iy < height) & (ix >= 0) & (ix < width)
        a_row = src + ((img * height + iy) * width + ix) * cin
        b_slab = filt + t * cin * cout
        for k in tl.range(0, cin,
                          TILE_K):
            kk = k + chans
            a = tl.load(a_row[:, None] + kk[None, :],
                        mask=inside[:, None] & (kk[None, :] < cin), other=0.0)
            b = tl.load(b_slab + kk[:, None] * cout + cols[None, :],
                        mask=(kk[:, None] < cin) & (cols[None, :] < cout), other=0.0)
            total = tl.dot(a, b, total)
    out = dst + rows[:, None] * cout + cols[None, :]
    tl.store(out, total.to(dst.dtype.element_ty), mask=live[:, None] & (cols[None, :] < cout))


def run(x, w):
    x = x.contiguous()
    w = w.contiguous()
    batch, height, width, cin = x.shape
    cout = w.shape[3]
    y = torch.empty((batch, height, width, cout), device=x.device, dtype=x.dtype)
    grid = (triton.cdiv(batch * height * width, 16), triton.cdiv(cout, 16))
    conv_taps_kernel[grid](x, w, y, batch, height, width, cin, cout,
                           TILE_M=16, TILE_N=16, TILE_K=16, TAPS=9, KW=3)
    return y
