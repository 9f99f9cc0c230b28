"""Weight-only int8 GEMM: int8 weight tiles are cast to fp16 before the dot, the per-column scale
is applied once in the epilogue. Launched with every argument by keyword; tiles named bm/bn/bk."""
import torch
import triton
import triton.language as tl


@triton.jit
def w8a16_gemm(act, qweight, scales, dst, m, n, k,
               act_rs, act_cs, qw_rs, qw_cs, dst_rs, dst_cs,
               bm: tl.constexpr, bn: tl.constexpr, bk: tl.constexpr):
    pid = tl.program_id(axis=0)
    blocks_n = tl.cdiv(n, bn)
    i = pid // blocks_n
    j = pid - i * blocks_n
    rows = i * bm + tl.arange(0, bm)
    cols = j * bn + tl.arange(0, bn)
    acc = tl.zeros((bm, bn), dtype=tl.float32)
    for kk in range(0, tl.cdiv(k, bk)):
        red = kk * bk + tl.arange(0, bk)
        a_blk = tl.load(act + rows[:, None] * act_rs + red[None, :] * act_cs,
                        mask=(rows[:, None] < m) & (red[None, :] < k), other=0.0)
        q_blk = tl.load(qweight + red[:, None] * qw_rs + cols[None, :] * qw_cs,
                        mask=(red[:, None] < k) & (cols[None, :] < n), other=0)
        acc = tl.dot(a_blk, q_blk.to(tl.float16), acc=acc)
    s = tl.load(scales + cols, mask=cols < n, other=0.0).to(tl.float32)
    acc = acc * s[None, :]
    tl.store(dst + rows[:, None] * dst_rs + cols[None, :] * dst_cs, acc.to(tl.float16),
             mask=(rows[:, None] < m) & (cols[None, :] < n))


def run(a, wq, scale):
    m, k = a.shape
    n = wq.shape[1]
    c = torch.empty((m, n), device=a.device, dtype=torch.float16)
    w8a16_gemm[(triton.cdiv(m, 32) * triton.cdiv(n, 32),)](
        act=a, qweight=wq, scales=scale, dst=c, m=m, n=n, k=k,
        act_rs=a.stride(0), act_cs=a.stride(1), qw_rs=wq.stride(0), qw_cs=wq.stride(1),
        dst_rs=c.stride(0), dst_cs=c.stride(1), bm=32, bn=32, bk=32, num_warps=4)
    return c
