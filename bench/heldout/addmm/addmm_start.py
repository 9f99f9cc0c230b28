import torch
import triton
import triton.language as tl


@triton.jit
def addmm_kernel(bias, a, b, out, m, n, k, lda, ldb, ldo,
                 bm: tl.constexpr, bn: tl.constexpr, bk: tl.constexpr):
    i = tl.program_id(0)
    j = tl.program_id(1)
    ri = i * bm + tl.arange(0, bm)
    rj = j * bn + tl.arange(0, bn)
    acc = tl.zeros((bm, bn), dtype=tl.float32)
    for kb in range(0, k, bk):
        rk = kb + tl.arange(0, bk)
        x = tl.load(a + ri[:, None] * lda + rk[None, :], mask=(ri[:, None] < m) & (rk[None, :] < k), other=0.)
        y = tl.load(b + rk[:, None] * ldb + rj[None, :], mask=(rk[:, None] < k) & (rj[None, :] < n), other=0.)
        acc += tl.dot(x, y, out_dtype=tl.float32)
    bias_row = tl.load(bias + rj, mask=rj < n, other=0.).to(tl.float32)
    acc = acc + bias_row[None, :]
    tl.store(out + ri[:, None] * ldo + rj[None, :], acc.to(out.dtype.element_ty),
             mask=(ri[:, None] < m) & (rj[None, :] < n))


def run(bias, a, b):
    a = a.contiguous()
    b = b.contiguous()
    m, k = a.shape
    n = b.shape[1]
    out = torch.empty((m, n), dtype=a.dtype, device=a.device)
    bm, bn, bk = 32, 32, 32
    addmm_kernel[(triton.cdiv(m, bm), triton.cdiv(n, bn))](
        bias, a, b, out, m, n, k, a.stride(0), b.stride(0), out.stride(0), bm=bm, bn=bn, bk=bk)
    return out
