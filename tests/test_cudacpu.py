"""The CPU emulation of CUDA kernels (`gate.cudacpu`): kernels checked against torch, races and
missing waits the emulator must expose, refusals, faults, and real host modules run through it."""
from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path

import pytest
import torch

from gate.cudacpu import host
from gate.cudacpu.library import BuildError, EmulationError, build

ROOT = Path(__file__).resolve().parents[1]
KERNELS = Path(__file__).parent / "data" / "cudacpu" / "kernels.cu"


@pytest.fixture(scope="module")
def lib():
    return build(KERNELS.read_text(), name=KERNELS.name)


def _sum(lib, kernel: str, x: torch.Tensor) -> float:
    out = torch.zeros(1)
    lib.launch(kernel, 6, 256, 0, [x, out, x.numel()])
    return out.item()


def test_shared_memory_tree_reduction(lib):
    x = torch.randn(3000, generator=torch.Generator().manual_seed(0))
    assert _sum(lib, "tree_sum", x) == pytest.approx(x.sum().item(), rel=1e-4, abs=1e-3)


def test_a_missing_barrier_in_the_tree_is_exposed(lib):
    x = torch.rand(3000, generator=torch.Generator().manual_seed(1)) + 0.5
    assert abs(_sum(lib, "tree_sum_racy", x) - x.sum().item()) > 1.0


def test_warp_shuffle_softmax(lib):
    x = torch.randn(37, 70, generator=torch.Generator().manual_seed(2))
    y = torch.empty_like(x)
    lib.launch("softmax_rows", 10, 128, 0, [x, y, 37, 70])  # 40 warps, 3 without a row
    torch.testing.assert_close(y, torch.softmax(x, dim=1), rtol=1e-5, atol=1e-6)


def test_votes(lib):
    x = torch.randn(128, generator=torch.Generator().manual_seed(3))
    x[64:96] = x[64:96].abs() + 0.1
    count, any_, all_ = (torch.zeros(4, dtype=torch.int32) for _ in range(3))
    lib.launch("votes", 2, 64, 0, [x, count, any_, all_])
    pos = (x > 0).view(4, 32)
    assert count.tolist() == pos.sum(1).tolist()
    assert any_.tolist() == pos.any(1).int().tolist() and all_.tolist() == pos.all(1).int().tolist()
    assert all_.tolist()[2] == 1


def test_atomics(lib):
    g = torch.Generator().manual_seed(4)
    x = torch.randint(0, 1000, (5000,), generator=g, dtype=torch.int32)
    f = torch.randn(5000, generator=g)
    bins = torch.zeros(16, dtype=torch.int32)
    maxv = torch.full((1,), -1, dtype=torch.int32)
    fmax = torch.full((1,), -1e30)
    lib.launch("histogram", 4, 128, 0, [x, f, 5000, bins, maxv, fmax])
    assert bins.tolist() == torch.bincount(x & 15, minlength=16).tolist()
    assert maxv.item() == x.max().item() and fmax.item() == f.max().item()


@pytest.mark.parametrize("M,N,K", [(40, 24, 50), (16, 16, 16)])
def test_tiled_gemm_with_shared_tiles(lib, M, N, K):
    g = torch.Generator().manual_seed(M)
    a, b = torch.randn(M, K, generator=g), torch.randn(K, N, generator=g)
    c = torch.empty(M, N)
    lib.launch("gemm_tiled", ((N + 15) // 16, (M + 15) // 16), (16, 16), 0, [a, b, c, M, N, K])
    torch.testing.assert_close(c, a @ b, rtol=1e-4, atol=1e-4)


def test_a_tile_overwritten_before_it_is_read_is_exposed(lib):
    g = torch.Generator().manual_seed(5)
    a, b = torch.randn(32, 48, generator=g), torch.randn(48, 32, generator=g)
    c = torch.empty(32, 32)
    lib.launch("gemm_tiled_racy", (2, 2), (16, 16), 0, [a, b, c, 32, 32, 48])
    assert not torch.allclose(c, a @ b, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("kernel,dtype", [("mma_tile_f16", torch.float16), ("mma_tile_bf16", torch.bfloat16)])
def test_ldmatrix_and_mma_sync_match_torch_matmul(lib, kernel, dtype):
    g = torch.Generator().manual_seed(6)
    a, b = torch.randn(16, 16, generator=g).to(dtype), torch.randn(16, 8, generator=g).to(dtype)
    c = torch.empty(16, 8)
    lib.launch(kernel, 1, 32, 0, [a, b, c])
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-5, atol=1e-5)


def _staged(n: int, src: torch.Tensor) -> torch.Tensor:
    """What stage_copy writes: element i takes the float4 mirrored within its 128-stage,
    components reversed; zeros where the mirror lies past n."""
    out = torch.empty(n, 4)
    for i in range(n):
        stage, t = divmod(i, 128)
        j = stage * 128 + 127 - t
        out[i] = src[j].flip(0) if j < n else 0.0
    return out


def test_cp_async_staging_with_zero_fill(lib):
    n = 300
    src = torch.randn(n, 4, generator=torch.Generator().manual_seed(7))
    dst = torch.full((n, 4), -7.0)
    lib.launch("stage_copy", 2, 128, 0, [src, dst, n, 1])
    torch.testing.assert_close(dst, _staged(n, src))


def test_cp_async_read_before_its_wait_is_exposed(lib):
    n = 256
    src = torch.randn(n, 4, generator=torch.Generator().manual_seed(8))
    dst = torch.zeros(n, 4)
    lib.launch("stage_copy", 1, 128, 0, [src, dst, n, 0])
    # Threads read copies that have not landed: the staging buffer's poison (NaN) shows.
    assert torch.isnan(dst).any()
    assert not torch.allclose(torch.nan_to_num(dst), _staged(n, src))


def test_half_and_bfloat16_conversions_round_like_torch(lib):
    x = torch.tensor([0.0, -0.0, 1.0, 1.0009765625 + 2**-12, 3.14159, -2.5e-5, 6e-8, 2.9e-8, 65504.0, 65519.0,
                      65520.0, 1e5, -1e38, 3.0e38, float("inf"), float("-inf"), 1.00390625, 0.1, 7e-39])
    x = torch.cat([x, torch.randn(200, generator=torch.Generator().manual_seed(9)) * 100])
    n = x.numel()
    h, b, h2 = torch.empty(n), torch.empty(n), torch.empty(n)
    hb, bb = torch.empty(n, dtype=torch.int16), torch.empty(n, dtype=torch.int16)
    packed = torch.empty(n, dtype=torch.int32)
    lib.launch("convert", (n + 63) // 64, 64, 0, [x, h, b, hb, bb, h2, packed, n])
    assert hb.tolist() == x.half().view(torch.int16).tolist()
    assert bb.tolist() == x.bfloat16().view(torch.int16).tolist()
    torch.testing.assert_close(h, x.half().float(), rtol=0, atol=0)
    torch.testing.assert_close(b, x.bfloat16().float(), rtol=0, atol=0)
    finite = x.abs() < 6e4
    expect = (x.half() + x.half()).float() + torch.full_like(x, 3.0)
    torch.testing.assert_close(h2[finite], expect[finite], rtol=0, atol=0)
    lo = (packed & 0xFFFF).to(torch.int16)
    hi = ((packed >> 16) & 0xFFFF).to(torch.int16)
    assert hi.tolist() == x.bfloat16().view(torch.int16).tolist()
    assert lo.tolist() == (-x).bfloat16().view(torch.int16).tolist()


def test_nan_converts_to_the_canonical_nans(lib):
    # float -> half / bfloat16 (cvt.rn): 0x7fff whatever the sign and payload; half -> float
    # (cvt.f32.f16): the canonical f32 NaN 0x7fffffff, as the CUDA headers model the device
    x = torch.tensor([0x7FC00000, 0xFFC00000 - (1 << 32), 0x7F800001], dtype=torch.int32).view(torch.float32)
    n = x.numel()
    h, b, h2 = torch.empty(n), torch.empty(n), torch.empty(n)
    hb, bb = torch.empty(n, dtype=torch.int16), torch.empty(n, dtype=torch.int16)
    packed = torch.empty(n, dtype=torch.int32)
    lib.launch("convert", 1, 64, 0, [x, h, b, hb, bb, h2, packed, n])
    assert hb.tolist() == bb.tolist() == [0x7FFF] * n
    assert packed.tolist() == [0x7FFF7FFF] * n
    assert h.view(torch.int32).tolist() == h2.view(torch.int32).tolist() == [0x7FFFFFFF] * n
    assert torch.isnan(b).all()


def test_a_shuffle_against_a_block_barrier_is_a_deadlock(lib):
    with pytest.raises(EmulationError, match="deadlock.*__shfl_sync.*__syncthreads"):
        lib.launch("divergent", 1, 32, 0, [torch.zeros(32)])


def test_faults_and_traps_end_the_launch_not_the_process(lib):
    with pytest.raises(EmulationError, match="illegal memory access"):
        lib.launch("bad_address", 1, 32, 0, [torch.zeros(32)])
    with pytest.raises(EmulationError, match="__trap"):
        lib.launch("traps", 1, 32, 0, [torch.zeros(32)])
    x = torch.ones(512)
    assert _sum(lib, "tree_sum", x) == 512.0  # the library still runs after both


def test_launch_errors_name_the_problem(lib):
    with pytest.raises(EmulationError, match="no kernel 'nope'"):
        lib.launch("nope", 1, 32, 0, [])
    with pytest.raises(EmulationError, match="without opting in"):
        lib.launch("tree_sum", 1, 256, 64 * 1024, [torch.zeros(4), torch.zeros(1), 4])
    with pytest.raises(EmulationError, match="invalid block size"):
        lib.launch("tree_sum", 1, 2048, 0, [torch.zeros(4), torch.zeros(1), 4])


@pytest.mark.parametrize("asm,what", [
    ('asm volatile("tcgen05.fence::before_thread_sync;" ::: "memory");', "tcgen05"),
    ('asm volatile("red.global.add.u32 [%0], %1;" :: "l"(p), "r"(v));', "red"),
    ('asm volatile("brev.b32 %0, %0;" : "+r"(v));', "brev.b32"),
])
def test_unsupported_inline_ptx_is_refused_with_its_name(asm, what):
    src = (f'extern "C" __global__ void k(unsigned* p) {{ unsigned v = p[0]; if (p[1]) {{ {asm} }} p[0] = v; }}')
    lib = build(src, name="refused.cu")
    assert len(lib.refused) == 1 and what in lib.refused[0]
    p = torch.tensor([5, 0], dtype=torch.int32)
    lib.launch("k", 1, 32, 0, [p])  # a launch that does not reach it runs
    p[1] = 1
    with pytest.raises(EmulationError, match=what) as err:
        lib.launch("k", 1, 32, 0, [p])
    assert "not emulated" in str(err.value) and "\n" not in str(err.value)


def test_a_compile_error_is_a_build_error():
    with pytest.raises(BuildError, match="does not compile for the emulator"):
        build('extern "C" __global__ void k(float* p) { p[0] = undefined_name; }', name="broken.cu")


def _import_host(path: Path):
    spec = importlib.util.spec_from_file_location(f"cudacpu_host_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_topk_expert_runs_through_its_own_host_module():
    with host.emulated():
        topk = _import_host(ROOT / "experts" / "topk" / "topk_cuda.py")
        x = torch.randn(3, 300, generator=torch.Generator().manual_seed(10))
        values, indices = host.host_call(topk.run, x, 37)
    ref_values, _ = torch.topk(x, 37)
    assert type(values) is torch.Tensor and values.device.type == "cpu"
    torch.testing.assert_close(values, ref_values, rtol=0, atol=0)
    assert torch.equal(torch.gather(x, 1, indices), values)


DIRECT_HOST = '''
import ctypes
from pathlib import Path

import numpy as np
import torch
from cuda.bindings import driver, nvrtc

SOURCE = Path(__file__).with_suffix(".cu").read_text()


def _build():
    err, prog = nvrtc.nvrtcCreateProgram(SOURCE.encode(), b"k.cu", 0, [], [])
    opts = [b"--gpu-architecture=sm_90", b"-DBLOCK=256"]
    (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
    assert err == nvrtc.nvrtcResult.NVRTC_SUCCESS, err
    err, size = nvrtc.nvrtcGetCUBINSize(prog)
    image = b" " * size
    (err,) = nvrtc.nvrtcGetCUBIN(prog, image)
    driver.cuInit(0)
    err, module = driver.cuModuleLoadData(image)
    err, func = driver.cuModuleGetFunction(module, b"row_sum")
    assert err == driver.CUresult.CUDA_SUCCESS, err
    return func


def run(x):
    func = _build()
    rows, cols = x.shape
    out = torch.empty(rows, device=x.device, dtype=x.dtype)
    args = ((x.data_ptr(), out.data_ptr(), cols), (None, None, ctypes.c_int))
    (err,) = driver.cuLaunchKernel(func, rows, 1, 1, 256, 1, 1, 0, 0, args, 0)
    assert err == driver.CUresult.CUDA_SUCCESS, err
    return out
'''
ROW_SUM = '''
extern "C" __global__ void row_sum(const float* x, float* out, int cols) {
    __shared__ float part[BLOCK / 32];
    const float* row = x + (size_t)blockIdx.x * cols;
    float v = 0.f;
    for (int c = threadIdx.x; c < cols; c += BLOCK) v += row[c];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x / 32] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        float s = 0.f;
        for (int w = 0; w < BLOCK / 32; ++w) s += part[w];
        out[blockIdx.x] = s;
    }
}
'''


def test_a_host_calling_the_cuda_bindings_directly(tmp_path):
    (tmp_path / "direct.cu").write_text(ROW_SUM)
    (tmp_path / "direct.py").write_text(DIRECT_HOST)
    x = torch.randn(5, 1000, generator=torch.Generator().manual_seed(11))
    with host.emulated():
        module = _import_host(tmp_path / "direct.py")
        out = host.host_call(module.run, x)
    torch.testing.assert_close(out, x.sum(1), rtol=1e-5, atol=1e-4)


def test_gemm_expert_mma_kernel_runs_through_its_own_host_module():
    """The expert's cp.async + ldmatrix + mma.sync kernel (the one its host picks below compute
    capability 9.0), written and checked on GPUs, agrees with torch under the emulator: an
    independent check of the fragment layouts."""
    with host.emulated():
        gemm = _import_host(ROOT / "experts" / "gemm" / "gemm_cuda.py")
        g = torch.Generator().manual_seed(12)
        a, b = torch.randn(136, 64, generator=g).half(), torch.randn(64, 200, generator=g).half()
        c = host.host_call(lambda x, y: gemm.matmul(x, y, kernel="mma"), a, b)
    torch.testing.assert_close(c.float(), (a.float() @ b.float()).half().float(), rtol=0, atol=0)


def test_run_host_runs_a_rewritten_source_through_a_host_module():
    from gate.cudacpu import run_host

    x = torch.randn(4, 700, generator=torch.Generator().manual_seed(13))
    out = run_host(ROW_SUM, DIRECT_HOST, x, stem="direct")
    torch.testing.assert_close(out, x.sum(1), rtol=1e-5, atol=1e-4)
    broken = ROW_SUM.replace("__syncthreads();", "")
    assert not torch.allclose(run_host(broken, DIRECT_HOST, x, stem="direct"), x.sum(1), rtol=1e-3, atol=1e-3)


def test_cooperative_groups_tiles_and_reduce(lib):
    x = torch.randn(1000, generator=torch.Generator().manual_seed(14))
    out, groups = torch.zeros(1), torch.zeros(125)
    lib.launch("cg_sum", 4, 256, 0, [x, out, groups, 1000])
    assert out.item() == pytest.approx(x.sum().item(), rel=1e-4, abs=1e-3)
    torch.testing.assert_close(groups, x.view(125, 8).sum(1), rtol=1e-5, atol=1e-5)


def test_warp_synchronous_volatile_steps_run_in_lockstep(lib):
    x = torch.randn(3000, generator=torch.Generator().manual_seed(15))
    out = torch.zeros(1)
    lib.launch("tree_sum_warp_sync", 6, 256, 0, [x, out, x.numel()])
    assert out.item() == pytest.approx(x.sum().item(), rel=1e-4, abs=1e-3)


def _agreement_cases():
    """(kernel, grid, block, args(device), exact): kernels whose every tensor argument must
    come out the same on the GPU and on the emulator (exact: bit for bit)."""
    g = torch.Generator().manual_seed(16)
    x70 = torch.randn(37, 70, generator=g)
    a, b = torch.randn(40, 50, generator=g), torch.randn(50, 24, generator=g)
    h16, h8 = torch.randn(16, 16, generator=g), torch.randn(16, 8, generator=g)
    src = torch.randn(300, 4, generator=g)
    conv = torch.cat([torch.tensor([0.0, 6e-8, 65519.0, 65520.0, 1e38, float("inf"), float("nan")]),
                      torch.randn(57, generator=g) * 100])
    ints, floats = torch.randint(0, 1000, (3000,), generator=g, dtype=torch.int32), torch.randn(3000, generator=g)
    sums = torch.randn(3000, generator=g)
    return [
        ("softmax_rows", 10, 128, lambda d: [x70.to(d), torch.empty(37, 70, device=d), 37, 70], False),
        ("gemm_tiled", (2, 3), (16, 16), lambda d: [a.to(d), b.to(d), torch.empty(40, 24, device=d), 40, 24, 50], False),
        ("mma_tile_f16", 1, 32, lambda d: [h16.half().to(d), h8.half().to(d), torch.empty(16, 8, device=d)], False),
        ("mma_tile_bf16", 1, 32, lambda d: [h16.bfloat16().to(d), h8.bfloat16().to(d), torch.empty(16, 8, device=d)], False),
        ("stage_copy", 2, 128, lambda d: [src.to(d), torch.zeros(300, 4, device=d), 300, 1], True),
        ("convert", 1, 64, lambda d: [conv.to(d), *(torch.empty(64, device=d) for _ in range(2)),
                                      *(torch.empty(64, dtype=torch.int16, device=d) for _ in range(2)),
                                      torch.empty(64, device=d), torch.empty(64, dtype=torch.int32, device=d), 64], True),
        ("votes", 2, 64, lambda d: [sums[:128].to(d), *(torch.zeros(4, dtype=torch.int32, device=d) for _ in range(3))], True),
        ("histogram", 4, 128, lambda d: [ints.to(d), floats.to(d), 3000, torch.zeros(16, dtype=torch.int32, device=d),
                                         torch.full((1,), -1, dtype=torch.int32, device=d),
                                         torch.full((1,), -1e30, device=d)], True),
        ("tree_sum", 6, 256, lambda d: [sums.to(d), torch.zeros(1, device=d), 3000], False),
        ("tree_sum_warp_sync", 6, 256, lambda d: [sums.to(d), torch.zeros(1, device=d), 3000], False),
        ("cg_sum", 4, 256, lambda d: [sums[:1000].to(d), torch.zeros(1, device=d), torch.zeros(125, device=d), 1000], False),
        ("named_handoff", 1, 128, lambda d: [sums[:64].to(d), torch.empty(192, device=d), 1], True),
        ("bulk_stage", 3, 256, lambda d: [torch.randn(3, 256, 4, generator=torch.Generator().manual_seed(18)).to(d),
                                          torch.empty(3, 256, device=d)], True),
    ]


@pytest.mark.gpu
@pytest.mark.parametrize("case", _agreement_cases(), ids=lambda c: c[0])
def test_the_emulator_agrees_with_the_gpu(lib, case):
    """The same kernels, compiled by NVRTC and run on the GPU: every output equals the
    emulator's (bit for bit where the kernel's arithmetic order is fixed)."""
    from experts import cudahost

    if not torch.cuda.is_available():
        pytest.skip("no GPU")
    kernel, grid, block, make, exact = case
    func = cudahost.get_function(cudahost.compile_source(KERNELS.read_text(), name=KERNELS.name), kernel)
    on_gpu, on_cpu = make("cuda"), make("cpu")
    cudahost.launch(func, grid, block, 0, on_gpu, torch.cuda.current_stream())
    torch.cuda.synchronize()
    lib.launch(kernel, grid, block, 0, on_cpu)
    for i, (g, c) in enumerate(zip(on_gpu, on_cpu)):
        if isinstance(g, torch.Tensor):
            if exact:
                assert torch.equal(g.cpu().view(torch.uint8), c.view(torch.uint8)), (kernel, i)
            else:
                torch.testing.assert_close(g.cpu().float(), c.float(), rtol=1e-4, atol=1e-4, msg=f"{kernel} arg {i}")


def test_bulk_copy_completing_on_an_mbarrier(lib):
    src = torch.randn(3, 256, 4, generator=torch.Generator().manual_seed(17))
    dst = torch.empty(3, 256)
    lib.launch("bulk_stage", 3, 256, 0, [src, dst])
    torch.testing.assert_close(dst, src.flip(1).sum(2))


def test_named_barriers_hand_a_tile_between_warps(lib):
    x = torch.randn(64, generator=torch.Generator().manual_seed(19))
    want = torch.stack([2 * x[r * 32:(r + 1) * 32].flip(0) + w for r in range(2) for w in (1, 2, 3)]).view(-1)
    y = torch.empty(192)
    lib.launch("named_handoff", 1, 128, 0, [x, y, 1])
    torch.testing.assert_close(y, want)
    y.zero_()
    lib.launch("named_handoff", 1, 128, 0, [x, y, 0])  # the producer refills the tile too early
    assert not torch.allclose(y, want)
    torch.testing.assert_close(y[96:], want[96:])


def test_cp_async_copies_arrive_on_an_mbarrier_when_they_land(lib):
    # the producer polls the empty barrier while the consumers meet at a named barrier of their
    # own: the named barrier completes all the same
    x = torch.randn(5 * 32, generator=torch.Generator().manual_seed(23))
    want = torch.stack([x[r * 32:(r + 1) * 32].flip(0) + w for r in range(5) for w in (1, 2)]).view(-1)
    y = torch.zeros(5 * 64)
    lib.launch("cp_arrive_ring", 1, 96, 0, [x, y, 5, 1])
    torch.testing.assert_close(y, want)
    # without .noinc the copies' arrival is balanced by its own increment: nothing completes
    with pytest.raises(EmulationError, match="deadlock"):
        lib.launch("cp_arrive_ring", 1, 96, 0, [x, y, 5, 0])


@pytest.mark.parametrize("epilogue,dtype", [(1, torch.bfloat16), (2, torch.float16)])
def test_gemm_expert_wgmma_kernel_runs_through_its_own_host_module(epilogue, dtype):
    """The expert's Hopper kernel (TMA tensor copies with 128-byte swizzle on mbarriers, a
    producer warpgroup and two consumer warpgroups, wgmma from shared-memory descriptors, named
    barriers, a TMA-store or a shared-memory epilogue), written and checked on GPUs, agrees
    with torch bit for bit at a ragged shape: the descriptor and swizzle layouts are the GPU's."""
    with host.emulated():
        gemm = _import_host(ROOT / "experts" / "gemm" / "gemm_cuda.py")
        g = torch.Generator().manual_seed(20)
        a, b = torch.randn(200, 72, generator=g).to(dtype), torch.randn(72, 264, generator=g).to(dtype)
        c = host.host_call(lambda x, y: gemm.matmul(x, y, kernel="wgmma", defines={"WG_EPILOGUE": epilogue}), a, b)
    assert torch.equal(c, (a.float() @ b.float()).to(dtype))


def test_a_wait_that_no_thread_completes_is_a_deadlock(lib):
    with pytest.raises(EmulationError, match="deadlock.*never|deadlock.*no thread completes"):
        lib.launch("stuck_wait", 1, 64, 0, [torch.zeros(64)])


GLOBALS_SOURCE = '''
__constant__ float weights[4];
__device__ int launches = 0;
extern "C" __global__ void weighted(const float* x, float* y, float* scratch, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        scratch[i] = x[i] * weights[i % 4];
        y[i] = scratch[i] + (float)launches;
    }
}
'''
GLOBALS_HOST = '''
import ctypes
from pathlib import Path

import numpy as np
import torch
from cuda.bindings import driver, nvrtc


def run(x):
    err, prog = nvrtc.nvrtcCreateProgram(Path(__file__).with_suffix(".cu").read_bytes(), b"g.cu", 0, [], [])
    (err,) = nvrtc.nvrtcCompileProgram(prog, 0, [])
    err, size = nvrtc.nvrtcGetPTXSize(prog)
    ptx = b" " * size
    nvrtc.nvrtcGetPTX(prog, ptx)
    err, module = driver.cuModuleLoadData(ptx)
    err, func = driver.cuModuleGetFunction(module, b"weighted")
    err, wptr, wsize = driver.cuModuleGetGlobal(module, b"weights")
    assert wsize == 16
    driver.cuMemcpyHtoD(wptr, np.array([1, 2, 3, 4], dtype=np.float32), 16)
    err, lptr, _ = driver.cuModuleGetGlobal(module, b"launches")
    driver.cuMemsetD32(lptr, 5, 1)
    n = x.numel()
    err, scratch = driver.cuMemAlloc(4 * n)
    y = torch.empty_like(x)
    args = ((x.data_ptr(), y.data_ptr(), int(scratch), n), (None, None, None, ctypes.c_int))
    (err,) = driver.cuLaunchKernel(func, (n + 63) // 64, 1, 1, 64, 1, 1, 0, 0, args, 0)
    back = np.zeros(n, dtype=np.float32)
    driver.cuMemcpyDtoH(back, scratch, 4 * n)
    driver.cuMemFree(scratch)
    return y, torch.from_numpy(back)
'''


def test_device_globals_and_driver_memory_calls():
    from gate.cudacpu import run_host

    x = torch.randn(100, generator=torch.Generator().manual_seed(21))
    y, scratch = run_host(GLOBALS_SOURCE, GLOBALS_HOST, x, stem="globals")
    w = torch.tensor([1.0, 2.0, 3.0, 4.0]).repeat(25)
    torch.testing.assert_close(scratch, x * w)
    torch.testing.assert_close(y, x * w + 5.0)


def test_builds_read_the_emulation_header_precompiled_once_and_compute_the_same(tmp_path, monkeypatch):
    from gate.cudacpu import library

    monkeypatch.setenv("KLINEAGE_CUDACPU_CACHE", str(tmp_path / "cache"))
    x = torch.randn(3000, generator=torch.Generator().manual_seed(9))
    sums = {}
    for pch in ("1", "0"):
        monkeypatch.setenv("KLINEAGE_CUDACPU_PCH", pch)
        library._precompiled.cache_clear()
        built = build(KERNELS.read_text() + "\n// " + pch, name=KERNELS.name)
        sums[pch] = _sum(built, "tree_sum", x)
        folders = list((tmp_path / "cache").glob("pch-*"))
        assert len(folders) == 1 and (folders[0] / "cudacpu.h.gch").is_file(), folders
        # a second source finds the precompiled header built by the first
        assert library._precompiled.cache_info().currsize == 1
    library._precompiled.cache_clear()
    # GCC reads it (`-H` marks a precompiled header it uses with "!") under the build's flags
    cxx, _ = library._compiler()
    flags = [*library.COMPILE_FLAGS, f"-I{library._stub_dir()}", f"-I{library.HERE}"]
    used = subprocess.run([cxx, *flags, "-include", str(folders[0] / "cudacpu.h"), "-H",
                           "-fsyntax-only", "-x", "c++", "-"], input="int main() { return 0; }\n",
                          capture_output=True, text=True)
    assert used.returncode == 0 and f"! {folders[0] / 'cudacpu.h.gch'}" in used.stderr, used.stderr[:2000]
    assert sums["1"] == sums["0"] == pytest.approx(x.sum().item(), rel=1e-4, abs=1e-3)


def test_dynamic_shared_memory_past_the_launchs_bytes_faults():
    # a kernel that stages 32 KiB in dynamic shared memory: run with the bytes it needs it is
    # correct; a launch that asks for fewer (a host that forgot to pass them) must fail as on the GPU
    src = ('extern "C" __global__ void stage(const float* x, float* y, int n) {\n'
           '  extern __shared__ float buf[];\n'
           '  for (int i = threadIdx.x; i < n; i += blockDim.x) buf[i] = x[i] * 2.0f;\n'
           '  __syncthreads();\n'
           '  for (int i = threadIdx.x; i < n; i += blockDim.x) y[i] = buf[n - 1 - i];\n'
           '}\n')
    lib = build(src, name="dynamic_stage.cu")
    n = 8192
    x = torch.arange(n, dtype=torch.float32)
    y = torch.zeros(n)
    lib.launch("stage", 1, 256, n * 4, [x, y, n])
    assert torch.equal(y, (x * 2).flip(0))
    with pytest.raises(EmulationError, match="past the 0 bytes the launch of stage asked for"):
        lib.launch("stage", 1, 256, 0, [x, y, n])
    with pytest.raises(EmulationError, match="past the 8192 bytes"):
        lib.launch("stage", 1, 256, 8192, [x, y, n])
    lib.launch("stage", 1, 256, n * 4, [x, y, n])  # the window is whole again afterwards
    assert torch.equal(y, (x * 2).flip(0))


def test_a_kernels_handle_is_one_per_kernel_and_never_reused():
    """`cuModuleGetFunction` answers one handle per kernel of a loaded module, as a real
    driver does, and no other kernel gets it after its object is collected (the gate's launch
    monitor names kernels by handle)."""
    import gc

    handles: dict[int, str] = {}
    with host.emulated():
        from experts import cudahost

        module = cudahost.compile_source(KERNELS.read_text(), name=KERNELS.name)
        for _ in range(50):  # objects made and dropped: an id-based handle would come back
            for kernel in ("tree_sum", "softmax_rows"):
                func = cudahost.get_function(module, kernel)
                assert handles.setdefault(int(func), kernel) == kernel
                del func
            gc.collect()
    assert sorted(handles.values()) == ["softmax_rows", "tree_sum"]
