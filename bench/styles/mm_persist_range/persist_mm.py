"""C = A @ B with as many programs as the device has multiprocessors: each program walks the
output tiles `tl.range(first, num_tiles, NUM_SMS)`, in groups of GROUP tile rows."""
import torch
import triton
import triton.language as tl


@triton.jit
def persistent_mm(a_ptr, b_ptr, c_ptr, M, N, K, sa0, sa1, sb0, sb1, sc0, sc1,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                  GROUP: tl.constexpr, NUM_SMS: tl.constexpr):
    first = tl.program_id(axis=0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    num_tiles = tiles_m * tiles_n
    per_group = GROUP * tiles_n
    offs_k = tl.arange(0, BLOCK_K)
    for tile in tl.range(first, num_tiles, NUM_SMS):
        group = tile // per_group
        first_m = group * GROUP
        rows = min(tiles_m - first_m, GROUP)
        tm = first_m + (tile % per_group) % rows
        tn = (tile % per_group) // rows
        offs_m = tm * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = tn * BLOCK_N + tl.arange(0, BLOCK_N)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for kk in range(0, tl.cdiv(K, BLOCK_K)):
            ks = kk * BLOCK_K + offs_k
            a = tl.load(a_ptr + offs_m[:, None] * sa0 + ks[None, :] * sa1,
                        mask=(offs_m[:, None] < M) & (ks[None, :] < K), other=0.0)
            b = tl.load(b_ptr + ks[:, None] * sb0 + offs_n[None, :] * sb1,
                        mask=(ks[:, None] < K) & (offs_n[None, :] < N), other=0.0)
            acc = tl.dot(a, b, acc)
        tl.store(c_ptr + offs_m[:, None] * sc0 + offs_n[None, :] * sc1, acc.to(tl.float16),
                 mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def _multiprocessors(device):
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4


def run(a, b):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    sms = _multiprocessors(a.device)
    bm, bn = 64, 64
    programs = min(sms, triton.cdiv(M, bm) * triton.cdiv(N, bn))
    persistent_mm[(programs,)](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0),
                               b.stride(1), c.stride(0), c.stride(1), BLOCK_M=bm, BLOCK_N=bn,
                               BLOCK_K=32, GROUP=8, NUM_SMS=sms, num_warps=4)
    return c
