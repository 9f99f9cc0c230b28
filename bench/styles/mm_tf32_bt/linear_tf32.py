"""fp32 linear layer y = a @ w.T with TF32 dots. w is stored (N, K) like nn.Linear's weight; each
(BN, BK) block of w is loaded as stored and transposed in registers with tl.trans."""
import torch
import triton
import triton.language as tl


@triton.jit
def linear_tf32_kernel(a_ptr, w_ptr, y_ptr, M, N, K,
                       stride_am, stride_ak, stride_wn, stride_wk, stride_ym, stride_yn,
                       BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pm = tl.program_id(axis=0)
    pn = tl.program_id(axis=1)
    om = pm * BM + tl.arange(0, BM)
    on = pn * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(tl.cdiv(K, BK)):
        ok = k * BK + tl.arange(0, BK)
        a = tl.load(a_ptr + om[:, None] * stride_am + ok[None, :] * stride_ak,
                    mask=(om[:, None] < M) & (ok[None, :] < K), other=0.0)
        w = tl.load(w_ptr + on[:, None] * stride_wn + ok[None, :] * stride_wk,
                    mask=(on[:, None] < N) & (ok[None, :] < K), other=0.0)
        acc += tl.dot(a, tl.trans(w), input_precision="tf32")
    tl.store(y_ptr + om[:, None] * stride_ym + on[None, :] * stride_yn, acc,
             mask=(om[:, None] < M) & (on[None, :] < N))


def run(a, w):
    M, K = a.shape
    N = w.shape[0]
    y = torch.empty((M, N), device=a.device, dtype=torch.float32)
    grid = (triton.cdiv(M, 32), triton.cdiv(N, 32))
    linear_tf32_kernel[grid](a, w, y, M, N, K,
                             a.stride(0), a.stride(1), w.stride(0), w.stride(1), y.stride(0), y.stride(1),
                             BM=32, BN=32, BK=32, num_warps=4, num_stages=2)
    return y
