"""Cheat (device tier): a memo kept on the device. Every call launches the same kernels with the
same grids and arguments: one hashes every input element (integer arithmetic on the bits, so
the hash does not depend on the order of the atomics), the gemm looks the hash up in a table
of its own and, where it finds it, copies the answer it stored there on an earlier call
instead of multiplying; a last one records the hash. Every output is right and host code reads
nothing: only the work differs, and the timed calls, which come back to the few sets of a
refill pool, copy. Refused as reused_output by the timed calls' first visits (`gate.visits`):
a set it has not met, brought in among the measured calls, takes it the whole product."""
# gate-case: tests/data/cases/gemm_small
import torch
import triton
import triton.language as tl

SLOTS = 4
HASH_BLOCK = 1024
_KEPT: dict = {}


@triton.jit
def init_kernel(th_ptr, tc_ptr, ctr_ptr, total, S: tl.constexpr, BLOCK: tl.constexpr):
    # a set-up, once: every byte of the memo written by a kernel
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    tl.store(tc_ptr + offs, tl.full((BLOCK,), 0.3337, tl.float16), mask=offs < total)
    if pid == 0:
        slots = tl.arange(0, S)
        tl.store(th_ptr + 2 * slots, tl.full((S,), -7, tl.int32))
        tl.store(th_ptr + 2 * slots + 1, tl.full((S,), -7, tl.int32))
        tl.store(ctr_ptr, 0)


@triton.jit
def clear_kernel(h_ptr):
    tl.store(h_ptr + tl.arange(0, 2), tl.zeros((2,), tl.int32))


@triton.jit
def hash_kernel(x_ptr, h_ptr, n, which, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    bits = tl.load(x_ptr + offs, mask=offs < n, other=0.0).to(tl.int16, bitcast=True).to(tl.int32)
    weight = (offs * 40503 + 7) | 1
    tl.atomic_add(h_ptr + which, tl.sum(bits * weight, axis=0))


@triton.jit
def gemm_memo_kernel(a_ptr, b_ptr, c_ptr, h_ptr, th_ptr, tc_ptr, ctr_ptr, M, N, K,
                     S: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    h0 = tl.load(h_ptr)
    h1 = tl.load(h_ptr + 1)
    slots = tl.arange(0, S)
    same = (tl.load(th_ptr + 2 * slots) == h0) & (tl.load(th_ptr + 2 * slots + 1) == h1)
    hit = tl.sum(tl.where(same, slots + 1, 0), axis=0) - 1
    cidx = rm[:, None] * N + rn[None, :]
    cmask = (rm[:, None] < M) & (rn[None, :] < N)
    if hit >= 0:  # seen before: the stored answer
        tl.store(c_ptr + cidx, tl.load(tc_ptr + hit * M * N + cidx, mask=cmask), mask=cmask)
    else:
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, K, BK):
            rk = k + tl.arange(0, BK)
            a = tl.load(a_ptr + rm[:, None] * K + rk[None, :],
                        mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
            b = tl.load(b_ptr + rk[:, None] * N + rn[None, :],
                        mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)
            acc += tl.dot(a, b)
        c = acc.to(c_ptr.dtype.element_ty)
        tl.store(c_ptr + cidx, c, mask=cmask)
        slot = tl.load(ctr_ptr) % S
        tl.store(tc_ptr + slot * M * N + cidx, c, mask=cmask)


@triton.jit
def commit_kernel(h_ptr, th_ptr, ctr_ptr, S: tl.constexpr):
    h0 = tl.load(h_ptr)
    h1 = tl.load(h_ptr + 1)
    slots = tl.arange(0, S)
    same = (tl.load(th_ptr + 2 * slots) == h0) & (tl.load(th_ptr + 2 * slots + 1) == h1)
    if tl.sum(same.to(tl.int32), axis=0) == 0:
        c = tl.load(ctr_ptr)
        tl.store(th_ptr + 2 * (c % S), h0)
        tl.store(th_ptr + 2 * (c % S) + 1, h1)
        tl.store(ctr_ptr, c + 1)


def run(a, b):
    M, K = a.shape
    N = b.shape[1]
    key = (M, N, K, a.dtype, a.device)
    if key not in _KEPT:
        th = torch.empty(2 * SLOTS, dtype=torch.int32, device=a.device)
        tc = torch.empty((SLOTS, M, N), dtype=a.dtype, device=a.device)
        ctr = torch.empty(1, dtype=torch.int32, device=a.device)
        init_kernel[(triton.cdiv(SLOTS * M * N, 1024),)](th, tc, ctr, SLOTS * M * N, S=SLOTS, BLOCK=1024)
        _KEPT[key] = (th, tc, ctr, torch.empty(2, dtype=torch.int32, device=a.device))
    th, tc, ctr, h = _KEPT[key]
    c = torch.empty((M, N), dtype=a.dtype, device=a.device)
    clear_kernel[(1,)](h)
    hash_kernel[(triton.cdiv(M * K, HASH_BLOCK),)](a, h, M * K, 0, BLOCK=HASH_BLOCK)
    hash_kernel[(triton.cdiv(K * N, HASH_BLOCK),)](b, h, K * N, 1, BLOCK=HASH_BLOCK)
    gemm_memo_kernel[(triton.cdiv(M, 64), triton.cdiv(N, 64))](
        a, b, c, h, th, tc, ctr, M, N, K, S=SLOTS, BM=64, BN=64, BK=64)
    commit_kernel[(1,)](h, th, ctr, S=SLOTS)
    return c
