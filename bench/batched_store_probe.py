"""How a batched product's structure pays: the persistent grid over rank-3 operand descriptors.

    python3 bench/batched_store_probe.py OUT.json        (on a GPU machine)

A 16 x 1024^3 bf16 batched product, timed with `triton.testing.do_bench` (median, L2 flushed)
beside cuBLAS (`torch.bmm`) in this process, twice: the masked pointer kernel of the held-out
start (at its best tile, 128x256x64, 8 warps, 3 and 4 stages), and a persistent kernel whose
operands are read through one rank-3 descriptor each over the whole tensor (built once per
program), with the output tile stored through a descriptor or through pointers (`DESC_STORE`),
the tile loop flattened into the K loop or not (`FLAT`), tiles grouped by 8 or not (`GROUP_M`).
It measured what the `tma-descriptors` rule's batch lift and the pair slack were built on:
flattening is what pays (0.0590 ms against 0.0632 unflattened, 3 stages), and the descriptor
store's shared-memory tile leaves no room for a 4th stage (out of resources), where the pointer
store reaches 0.0571 ms (cuBLAS 0.0541; results: bench/results/heldout/probe/).
The kernels here are measurement fixtures written for this probe, not the project's rewrites:
`bench/gemm_probe.py --variants plain,persistent-flat` times what the rules themselves write.
"""
import torch, triton, triton.language as tl, json, sys
from triton.testing import do_bench

def alloc(size, alignment, stream):
    return torch.empty(size, dtype=torch.int8, device="cuda")
triton.set_allocator(alloc)

@triton.jit
def bmm_p3(a_ptr, b_ptr, c_ptr, NB, M, N, K, sab, sam, sak, sbb, sbk, sbn, scb, scm, scn,
           BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr,
           DESC_STORE: tl.constexpr, FLAT: tl.constexpr):
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[NB, M, K], strides=[sab, sam, sak], block_shape=[1, BM, BK])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[NB, K, N], strides=[sbb, sbk, sbn], block_shape=[1, BK, BN])
    if DESC_STORE:
        c_desc = tl.make_tensor_descriptor(c_ptr, shape=[NB, M, N], strides=[scb, scm, scn], block_shape=[1, BM, BN])
    num_pid_m = tl.cdiv(M, BM)
    num_pid_n = tl.cdiv(N, BN)
    per = num_pid_m * num_pid_n
    k_tiles = tl.cdiv(K, BK)
    num_pid_in_group = GROUP_M * num_pid_n
    for tile in tl.range(tl.program_id(0), per * NB, tl.num_programs(0), flatten=FLAT):
        batch = tile // per
        pid = tile % per
        group_id = pid // num_pid_in_group
        first_pid_m = group_id * GROUP_M
        group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
        pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
        pid_n = (pid % num_pid_in_group) // group_size_m
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(k_tiles):
            a = a_desc.load([batch, pid_m * BM, k * BK]).reshape(BM, BK)
            b = b_desc.load([batch, k * BK, pid_n * BN]).reshape(BK, BN)
            acc = tl.dot(a, b, acc)
        if DESC_STORE:
            c_desc.store([batch, pid_m * BM, pid_n * BN], acc.to(tl.bfloat16).reshape(1, BM, BN))
        else:
            offs_m = pid_m * BM + tl.arange(0, BM)
            offs_n = pid_n * BN + tl.arange(0, BN)
            tl.store(c_ptr + batch * scb + offs_m[:, None] * scm + offs_n[None, :] * scn, acc.to(tl.bfloat16),
                     mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))

@triton.jit
def bmm_masked(a_ptr, b_ptr, c_ptr, M, N, K, sab, sam, sak, sbb, sbk, sbn, scb, scm, scn,
               BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    batch = tl.program_id(2)
    offs_m = tl.program_id(0) * BM + tl.arange(0, BM)
    offs_n = tl.program_id(1) * BN + tl.arange(0, BN)
    offs_k = tl.arange(0, BK)
    a_base = a_ptr + batch * sab
    b_base = b_ptr + batch * sbb
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        kk = k * BK + offs_k
        a = tl.load(a_base + offs_m[:, None] * sam + kk[None, :] * sak, mask=(offs_m[:, None] < M) & (kk[None, :] < K), other=0.0)
        b = tl.load(b_base + kk[:, None] * sbk + offs_n[None, :] * sbn, mask=(kk[:, None] < K) & (offs_n[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    c_ptrs = c_ptr + batch * scb + offs_m[:, None] * scm + offs_n[None, :] * scn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))

SMS = torch.cuda.get_device_properties(0).multi_processor_count
res = []
def bench(name, fn, ref, cfg):
    try:
        out = fn()
    except Exception as exc:
        print(name, cfg, type(exc).__name__, flush=True); return
    err = float((out.float() - ref.float()).abs().max())
    ms = do_bench(fn, warmup=25, rep=200, return_mode="median")
    res.append({"name": name, "cfg": cfg, "ms": ms, "err": err})
    print(f"{name:34s} {cfg} {ms:.4f} err {err:.3g}", flush=True)

nb, M, N, K = 16, 1024, 1024, 1024
a = torch.randn(nb, M, K, device="cuda").bfloat16(); b = torch.randn(nb, K, N, device="cuda").bfloat16()
ref = torch.bmm(a, b)
c = torch.empty_like(ref)
for rep in range(2):
    rms = do_bench(lambda: torch.bmm(a, b), warmup=25, rep=200, return_mode="median")
    res.append({"name": "cublas", "ms": rms}); print("cublas", rms, flush=True)
    for cfg in [(128, 256, 64, 8, 3), (128, 256, 64, 8, 4)]:
        BM, BN, BK, w, s = cfg
        g = (M // BM, N // BN, nb)
        bench("ptr", lambda: (bmm_masked[g](a, b, c, M, N, K, *a.stride(), *b.stride(), *c.stride(), BM=BM, BN=BN, BK=BK, num_warps=w, num_stages=s), c)[1], ref, cfg)
        for DS in (True, False):
            for FLAT in (True, False):
                for GM in (8, 1):
                    np_ = min(SMS, (M // BM) * (N // BN) * nb)
                    bench(f"p3 ds={DS} flat={FLAT} gm={GM}", lambda: (bmm_p3[(np_,)](a, b, c, nb, M, N, K, *a.stride(), *b.stride(), *c.stride(), BM=BM, BN=BN, BK=BK, GROUP_M=GM, DESC_STORE=DS, FLAT=FLAT, num_warps=w, num_stages=s), c)[1], ref, cfg)
json.dump(res, open(sys.argv[1], "w"), indent=1)
