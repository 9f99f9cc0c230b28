"""y = relu(x @ w + b), w is (K, N); fp32 accumulation in tl.dot, bias + relu fused."""
import torch
import triton
import triton.language as tl


@triton.jit
def linear_relu_kernel(x_ptr, w_ptr, b_ptr, y_ptr, M, N, K,
                       sxm, sxk, swk, swn, sym, syn,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    om = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    on = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ok = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        xt = tl.load(x_ptr + om[:, None] * sxm + (k + ok)[None, :] * sxk,
                     mask=(om[:, None] < M) & ((k + ok)[None, :] < K), other=0.0)
        wt = tl.load(w_ptr + (k + ok)[:, None] * swk + on[None, :] * swn,
                     mask=((k + ok)[:, None] < K) & (on[None, :] < N), other=0.0)
        acc = tl.dot(xt, wt, acc, out_dtype=tl.float32)
    bias = tl.load(b_ptr + on, mask=on < N, other=0.0).to(tl.float32)
    out = tl.maximum(acc + bias[None, :], 0.0)
    tl.store(y_ptr + om[:, None] * sym + on[None, :] * syn, out.to(y_ptr.dtype.element_ty),
             mask=(om[:, None] < M) & (on[None, :] < N))


def run(x, w, b):
    M, K = x.shape
    N = w.shape[1]
    y = torch.empty((M, N), device=x.device, dtype=x.dtype)
    grid = (triton.cdiv(M, 32), triton.cdiv(N, 32))
    linear_relu_kernel[grid](x, w, b, y, M, N, K,
                             x.stride(0), x.stride(1), w.stride(0), w.stride(1),
                             y.stride(0), y.stride(1),
                             BLOCK_M=32, BLOCK_N=32, BLOCK_K=32, num_warps=4)
    return y
