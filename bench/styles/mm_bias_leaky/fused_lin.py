"""out = leaky_relu(x @ w + bias). The epilogue adds the bias row and applies the slope with
tl.where; the three tile sizes are passed positionally at the launch."""
import torch
import triton
import triton.language as tl


@triton.jit
def fused_linear_leaky(x, w, bias, out, M, N, K, slope,
                       x_s0, x_s1, w_s0, w_s1, o_s0, o_s1,
                       BLK_R: tl.constexpr, BLK_C: tl.constexpr, BLK_D: tl.constexpr):
    r = tl.program_id(0) * BLK_R + tl.arange(0, BLK_R)
    c = tl.program_id(1) * BLK_C + tl.arange(0, BLK_C)
    d = tl.arange(0, BLK_D)
    total = tl.zeros((BLK_R, BLK_C), dtype=tl.float32)
    for d0 in range(0, K, BLK_D):
        xt = tl.load(x + r[:, None] * x_s0 + (d0 + d)[None, :] * x_s1,
                     mask=(r[:, None] < M) & ((d0 + d)[None, :] < K), other=0.0)
        wt = tl.load(w + (d0 + d)[:, None] * w_s0 + c[None, :] * w_s1,
                     mask=((d0 + d)[:, None] < K) & (c[None, :] < N), other=0.0)
        total += tl.dot(xt, wt, out_dtype=tl.float32)
    bvec = tl.load(bias + c, mask=c < N, other=0.0).to(tl.float32)
    total = total + bvec[None, :]
    total = tl.where(total >= 0, total, total * slope)
    tl.store(out + r[:, None] * o_s0 + c[None, :] * o_s1, total.to(out.dtype.element_ty),
             mask=(r[:, None] < M) & (c[None, :] < N))


def run(x, w, bias, slope):
    M, K = x.shape
    N = w.shape[1]
    out = torch.empty((M, N), device=x.device, dtype=x.dtype)
    grid = (triton.cdiv(M, 32), triton.cdiv(N, 32))
    fused_linear_leaky[grid](x, w, bias, out, M, N, K, slope,
                             x.stride(0), x.stride(1), w.stride(0), w.stride(1), out.stride(0), out.stride(1),
                             32, 32, 32)
    return out
