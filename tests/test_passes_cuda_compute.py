"""The tensor-core compute rules of CUDA kernels (`wgmma`, `mma-intrinsics`): before/after on
kernels written in other styles and names than the experts, the exact round trip, refusals
with a reason, and every de-optimized state of the gemm expert compiling with NVRTC for
sm_90a (the static tier)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

import kir
from passes import PassContext, Skipped, get_pass
from passes.roundtrip import roundtrip
from nvrtc_helpers import ptx_for_sm90a

EXPERTS = Path(__file__).parent.parent / "experts"
CTX = PassContext(facts={"arch": "sm_90", "dtype": "bf16"})


def _wgmma_kernel(n: int = 64) -> str:
    """A warpgroup kernel in another style: literal f16 type, scale-d an immediate, separate
    accumulator names, no macros."""
    regs = ", ".join(f"%{i}" for i in range(n // 2))
    outs = ", ".join(f'"+f"(frag[{i}])' for i in range(n // 2))
    return f"""
extern "C" __global__ void tile_product(const unsigned long long* descs, float* out) {{
  float frag[{n // 2}];
  for (int i = 0; i < {n // 2}; ++i) frag[i] = 0.0f;
  unsigned long long lhs = descs[0], rhs = descs[1];
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
  asm volatile("wgmma.mma_async.sync.aligned.m64n{n}k16.f32.f16.f16 {{{regs}}}, %{n // 2}, %{n // 2 + 1}, 1, 1, 1, 0, 0;"
               : {outs} : "l"(lhs), "l"(rhs));
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
  for (int i = 0; i < {n // 2}; ++i) out[threadIdx.x * {n // 2} + i] = frag[i];
}}
"""


MMA_KERNEL = r"""
// separate C inputs, write-only D outputs, an x2 ldmatrix
extern "C" __global__ void warp_tile(const unsigned short* src, float* dst) {
  __shared__ __align__(16) unsigned short tile[16 * 16];
  for (int i = threadIdx.x; i < 256; i += 32) tile[i] = src[i];
  __syncthreads();
  unsigned int base = static_cast<unsigned int>(__cvta_generic_to_shared(tile + (threadIdx.x % 16) * 16));
  unsigned int x0, x1, x2, x3, y0, y1;
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(x0), "=r"(x1), "=r"(x2), "=r"(x3) : "r"(base));
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];"
               : "=r"(y0), "=r"(y1) : "r"(base));
  float o0, o1, o2, o3, z = 0.0f;
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};"
               : "=f"(o0), "=f"(o1), "=f"(o2), "=f"(o3)
               : "r"(x0), "r"(x1), "r"(x2), "r"(x3), "r"(y0), "r"(y1), "f"(z), "f"(z), "f"(z), "f"(z));
  dst[threadIdx.x * 4 + 0] = o0; dst[threadIdx.x * 4 + 1] = o1;
  dst[threadIdx.x * 4 + 2] = o2; dst[threadIdx.x * 4 + 3] = o3;
}
"""


def _deopt(name: str, ir: kir.KernelIR) -> tuple[kir.KernelIR, object]:
    p = get_pass(name)()
    sites = [s for s in p.sites(ir) if s.present]
    assert len(sites) == 1, sites
    result = p.deoptimize(ir, sites[0], CTX)
    assert result.ok, result
    trip = roundtrip(p, ir, sites[0], CTX)
    assert trip.same, trip.forward
    return result.ir, result


def test_wgmma_becomes_mma_sync_then_scalar_fma_and_each_state_compiles() -> None:
    ir = kir.parse(_wgmma_kernel(64), "cuda")
    step1, applied = _deopt("wgmma", ir)
    assert "wgmma." not in re.sub(r"kl_wgmma_as_mma", "", step1.text)
    assert "kl_wgmma_as_mma<64>(false, &(frag)[0], (lhs), (rhs), true, 1, 1, 0, 0)" in step1.text
    ptx = ptx_for_sm90a(step1.text)
    assert "wgmma" not in ptx and "mma.sync.aligned.m16n8k16" in ptx
    step2, _ = _deopt("mma-intrinsics", step1)
    ptx = ptx_for_sm90a(step2.text)
    assert "mma.sync" not in ptx and "fma.rn.f32" in ptx
    # the forward direction is the applicable site the de-optimization leaves
    assert [s.present for s in get_pass("wgmma")().sites(step1)] == [False]


def test_mma_sync_and_ldmatrix_of_another_style_become_fma_and_compile() -> None:
    ir = kir.parse(MMA_KERNEL, "cuda")
    out, _ = _deopt("mma-intrinsics", ir)
    assert "kl_mma_m16n8k16(true, o0, o1, o2, o3, x0, x1, x2, x3, y0, y1, z, z, z, z)" in out.text
    assert "y1 = kl_ldmatrix_reg(base, 1, true)" in out.text
    ptx = ptx_for_sm90a(out.text)
    assert "mma.sync" not in ptx and "ldmatrix" not in ptx


def test_unhandled_forms_are_present_and_refused_with_a_reason() -> None:
    wmma = r"""
#include <mma.h>
__global__ void k(const half* a, const half* b, float* c) {
  nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> acc;
  nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 16, half, nvcuda::wmma::row_major> fa;
  nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, 16, 16, 16, half, nvcuda::wmma::col_major> fb;
  nvcuda::wmma::mma_sync(acc, fa, fb, acc);
}
"""
    ir = kir.parse(wmma, "cuda")
    p = get_pass("mma-intrinsics")()
    site = next(s for s in p.sites(ir) if s.present)
    result = p.deoptimize(ir, site, CTX)
    assert isinstance(result, Skipped) and "WMMA" in result.reason
    regs = kir.parse(_wgmma_kernel(64).replace("}, %32, %33,", "}, {%32, %33, %34, %35}, %36,"),
                     "cuda")
    w = get_pass("wgmma")()
    site = next(s for s in w.sites(regs) if s.present)
    result = w.deoptimize(regs, site, CTX)
    assert isinstance(result, Skipped) and "registers" in result.reason


def test_forward_rule_removes_its_helpers_by_name_after_later_rewrites_inside_them() -> None:
    """A later de-optimization rewrote a warp shuffle inside the inserted scalar mma (as the gemm
    lineage's shuffle steps do); restoring the mma before that shuffle step is undone still gives
    back the original kernel exactly: the helpers are found by the names the record defines."""
    ir = kir.parse(MMA_KERNEL, "cuda")
    step1, applied = _deopt("mma-intrinsics", ir)
    shuffle = get_pass("warp-shuffle-reduce")()
    site = next(s for s in shuffle.sites(step1) if s.present)
    inside = shuffle.deoptimize(step1, site, CTX)
    assert inside.ok and "__shfl_sync" in step1.text
    step2 = inside.ir
    assert step2.text.count("__shfl_sync") < step1.text.count("__shfl_sync")
    forward = get_pass("mma-intrinsics").from_options(applied.options)
    site = next(s for s in forward.sites(step2) if not s.present)
    result = forward.optimize(step2, site, CTX)
    assert result.ok, result
    assert result.ir.text == ir.text
    # a helper defined twice is refused with the name, not guessed at
    twice = kir.parse(step2.text.replace("extern \"C\" __global__",
                                         "__device__ __forceinline__ float kl_dot2(unsigned int a, "
                                         "unsigned int b, bool bf16) { return 0.0f; }\n"
                                         "extern \"C\" __global__", 1), "cuda")
    site = next(s for s in forward.sites(twice) if not s.present)
    refused = forward.optimize(twice, site, CTX)
    assert isinstance(refused, Skipped) and "kl_dot2 is defined 2 times" in refused.reason


def test_forward_rule_needs_the_record_and_checks_the_arch() -> None:
    step1, applied = _deopt("wgmma", kir.parse(_wgmma_kernel(64), "cuda"))
    w = get_pass("wgmma")
    site = next(s for s in w().sites(step1) if not s.present)
    assert isinstance(w().optimize(step1, site, CTX), Skipped)
    old = PassContext(facts={"arch": "sm_80"})
    result = w.from_options(applied.options).optimize(step1, site, old)
    assert isinstance(result, Skipped) and "sm_90" in result.reason


@pytest.mark.slow
def test_each_compute_deoptimization_of_the_gemm_expert_compiles_for_sm90a() -> None:
    gate = pytest.importorskip("gate")
    path = EXPERTS / "gemm" / "gemm_cuda.cu"
    ir = kir.parse_file(path)
    for name in ("wgmma", "mma-intrinsics"):
        ir, _ = _deopt(name, ir)
        verdict = gate.check(ir.text, "cuda", "gemm", tier="static", path=str(path), cache=False)
        assert verdict.ok, (name, verdict.stage, verdict.reason)
    ptx = ptx_for_sm90a(ir.text)
    assert not re.search(r"\b(wgmma\.mma_async|mma\.sync|ldmatrix)", ptx)
