"""The staging rules of CUDA kernels for Hopper: `warp-specialization` (producer/consumer warp
roles -> one schedule for every warp) and `tma-bulk-copy` (TMA bulk copies -> cp.async, which
`cp-async-pipeline` then makes synchronous). Each on the gemm expert and on a kernel written in
another style and with other names, the exact round trip, the de-optimized states compiling
with NVRTC for sm_90a (the static tier), and refusals with the precondition that failed."""
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

# consumers in the then-branch (warp index by a shift), one producer warp in the else-branch
# whose cp.async copies arrive on the stage's mbarrier; each role keeps its own ring position
# under the same names as the other's
ROLES_KERNEL = r"""
#define RING 2
__device__ __forceinline__ void wait_parity(unsigned int bar, unsigned int parity) {
  unsigned int ok = 0;
  do {
    asm volatile("{\n.reg .pred q;\nmbarrier.try_wait.parity.shared::cta.b64 q, [%1], %2;\nselp.u32 %0, 1, 0, q;\n}\n"
                 : "=r"(ok) : "r"(bar), "r"(parity) : "memory");
  } while (!ok);
}
__device__ __forceinline__ void copy_chunk(unsigned int to, const void* from) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 16;" ::"r"(to), "l"(from) : "memory");
}

extern "C" __global__ void __launch_bounds__(160) scale_rows(const float4* in, float* out, int rows, float alpha) {
  __shared__ __align__(16) float4 ring[RING][32];
  __shared__ __align__(8) unsigned long long filled[RING], drained[RING];
  const unsigned int warp_id = threadIdx.x >> 5;
  const unsigned int ring_base = static_cast<unsigned int>(__cvta_generic_to_shared(&ring[0][0]));
  const unsigned int full0 = static_cast<unsigned int>(__cvta_generic_to_shared(&filled[0]));
  const unsigned int empty0 = static_cast<unsigned int>(__cvta_generic_to_shared(&drained[0]));
  if (threadIdx.x == 0) {
    for (int r = 0; r < RING; ++r) {
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 32;" ::"r"(full0 + 8 * r) : "memory");
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 128;" ::"r"(empty0 + 8 * r) : "memory");
    }
  }
  __syncthreads();
  if (warp_id < 4) {
    const float gain = alpha;
    int slot = 0;
    unsigned int phase = 0;
    for (int row = blockIdx.x; row < rows; row += gridDim.x) {
      wait_parity(full0 + 8 * slot, phase);
      const float v = reinterpret_cast<const float*>(&ring[slot][0])[threadIdx.x];
      out[row * 128 + threadIdx.x] = gain * v;
      asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(empty0 + 8 * slot) : "memory");
      if (++slot == RING) { slot = 0; phase ^= 1; }
    }
  } else {
    const unsigned int lane = threadIdx.x & 31;
    int slot = 0;
    unsigned int phase = 0;
    int issued = 0;
    for (int row = blockIdx.x; row < rows; row += gridDim.x) {
      if (issued >= RING) wait_parity(empty0 + 8 * slot, phase ^ 1);
      copy_chunk(ring_base + 16 * (slot * 32 + lane), in + row * 32 + lane);
      asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(full0 + 8 * slot) : "memory");
      ++issued;
      if (++slot == RING) { slot = 0; phase ^= 1; }
    }
  }
}
"""

# 1-D TMA: a bulk load into a two-slot ring completing on mbarriers, an L2 prefetch, and a bulk
# store of the result with its commit/wait
BULK_KERNEL = r"""
extern "C" __global__ void copy_rows(const float* __restrict__ src, float* dst, int rows) {
  __shared__ __align__(128) float slots[2][256];
  __shared__ __align__(128) float result[256];
  __shared__ __align__(8) unsigned long long ready[2];
  const unsigned int base = static_cast<unsigned int>(__cvta_generic_to_shared(&slots[0][0]));
  const unsigned int flags = static_cast<unsigned int>(__cvta_generic_to_shared(&ready[0]));
  const unsigned int out = static_cast<unsigned int>(__cvta_generic_to_shared(&result[0]));
  if (threadIdx.x == 0) {
    for (int i = 0; i < 2; ++i)
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(flags + 8 * i) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  for (int r = 0; r < rows; ++r) {
    const int k = r & 1;
    if (threadIdx.x == 0) {
      asm volatile("cp.async.bulk.prefetch.L2.global [%0], 1024;" ::"l"(src + 256 * (r + 1)) : "memory");
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(flags + 8 * k), "r"(1024) : "memory");
      asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], 1024, [%2];"
                   ::"r"(base + 1024 * k), "l"(src + 256 * r), "r"(flags + 8 * k) : "memory");
    }
    unsigned int done = 0;
    while (!done)
      asm volatile("{\n.reg .pred q;\nmbarrier.try_wait.parity.shared::cta.b64 q, [%1], %2;\nselp.u32 %0, 1, 0, q;\n}\n"
                   : "=r"(done) : "r"(flags + 8 * k), "r"((r >> 1) & 1) : "memory");
    result[threadIdx.x] = 2.0f * slots[k][threadIdx.x];
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    if (threadIdx.x == 0) {
      asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;"
                   ::"l"(dst + 256 * r), "r"(out), "r"(1024) : "memory");
      asm volatile("cp.async.bulk.commit_group;" ::: "memory");
      asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
    }
    __syncthreads();
  }
}
"""


def _deopt(name: str, ir: kir.KernelIR) -> kir.KernelIR:
    """De-optimize the pass's one present site; the recorded forward step restores `ir`."""
    p = get_pass(name)()
    sites = [s for s in p.sites(ir) if s.present]
    assert len(sites) == 1, sites
    trip = roundtrip(p, ir, sites[0], CTX)
    assert trip.backward.ok, trip.backward
    assert trip.same, trip.forward
    return trip.backward.ir


def _refusal(name: str, text: str) -> Skipped:
    ir = kir.parse(text, "cuda")
    p = get_pass(name)()
    site = next(s for s in p.sites(ir) if s.present)
    result = p.deoptimize(ir, site, CTX)
    assert isinstance(result, Skipped), result
    return result


def _body(text: str, loop_head: str) -> str:
    """The text of the loop starting with `loop_head`, braces balanced."""
    at = text.index(loop_head)
    depth, i = 0, text.index("{", at)
    while True:
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[at:i + 1]
        i += 1


def test_roles_of_the_gemm_expert_become_one_schedule_that_compiles() -> None:
    ir = kir.parse_file(EXPERTS / "gemm" / "gemm_cuda.cu")
    out = _deopt("warp-specialization", ir)
    assert "asm volatile(\"setmaxnreg" not in out.text and "if (wg == 0)" not in out.text
    # one tile loop and one k loop walked by every warp: producer step, barrier, consumer step
    assert out.text.count("for (int tile = blockIdx.x;") == ir.text.count("for (int tile = blockIdx.x;") - 1
    step = _body(out.text, "for (int kt = 0; kt < k_tiles; ++kt, ++it)")
    assert re.search(r"if \(\(wg == 0\) && \(tid == 0\)\) \{.*tma_load_2d.*\}\s*__syncthreads\(\);"
                     r"\s*if \(!\(wg == 0\)\) \{.*wgmma_commit.*\}\s*__syncthreads\(\);\s*\}$", step, re.S)
    ptx = ptx_for_sm90a(out.text)
    assert "setmaxnreg" not in ptx and "cp.async.bulk.tensor" in ptx and "wgmma.mma_async" in ptx
    # what is left is the forward site, and no second split
    assert [s.present for s in get_pass("warp-specialization")().sites(out)] == [False]


def test_roles_of_another_style_collapse_with_their_own_variables_and_compile() -> None:
    ir = kir.parse(ROLES_KERNEL, "cuda")
    out = _deopt("warp-specialization", ir)
    step = _body(out.text, "for (int row = blockIdx.x;")
    # the producer runs first although it is the else-branch; each role keeps its ring position
    producer, consumer = step.index("copy_chunk("), step.index("wait_parity(full0")
    assert producer < consumer and step.count("__syncthreads();") == 2
    assert "if (!(warp_id < 4)) {" in step and "if (warp_id < 4) {" in step
    assert re.search(r"slot_producer = 0; phase_producer \^= 1;", step)
    assert re.search(r"slot_consumer = 0; phase_consumer \^= 1;", step)
    assert "int issued = 0;" in out.text  # hoisted: only the producer has it, no rename
    ptx_for_sm90a(out.text)


@pytest.mark.parametrize("change, reason", [
    (("warp_id < 4", "threadIdx.x < 100"), "does not split whole warps"),
    (("row < rows; row += gridDim.x) {\n      wait", "row < rows; row += 2 * gridDim.x) {\n      wait"),
     "do not walk the same loop nest"),
    (("++issued;", "if (++issued > 8) break;"), "producer jumps out with `break`"),
    (("int issued = 0;\n    for (int row = blockIdx.x; row < rows; row += gridDim.x) {",
      "int issued = 0;\n    for (int row = blockIdx.x; row < rows; row += gridDim.x) {\n      row += 0;"),
     "a role changes `row` of the shared loop"),
])
def test_roles_refuse_with_the_failed_precondition(change: tuple[str, str], reason: str) -> None:
    text = ROLES_KERNEL.replace(*change)
    assert text != ROLES_KERNEL
    assert reason in _refusal("warp-specialization", text).reason


def test_bulk_copies_become_cp_async_then_synchronous_copies_that_compile() -> None:
    ir = kir.parse(BULK_KERNEL, "cuda")
    step1 = _deopt("tma-bulk-copy", ir)
    assert "kl_bulk_load_as_cp_async((unsigned int)(base + 1024 * k), (const void*)(src + 256 * r), " \
           "(unsigned int)1024, (unsigned int)(flags + 8 * k))" in step1.text
    ptx = ptx_for_sm90a(step1.text)
    assert "cp.async.bulk" not in ptx and "cp.async.cg.shared.global" in ptx
    assert "mbarrier.complete_tx" in ptx  # the barrier still counts the bytes it expects
    step2 = _deopt("cp-async-pipeline", step1)
    ptx = ptx_for_sm90a(step2.text)
    assert not re.search(r"\bcp\.async\b", ptx) and "mbarrier.complete_tx" in ptx


def test_tensor_copies_of_the_gemm_expert_are_refused_with_the_reason() -> None:
    ir = kir.parse_file(EXPERTS / "gemm" / "gemm_cuda.cu")
    p = get_pass("tma-bulk-copy")()
    site = next(s for s in p.sites(ir) if s.present)
    result = p.deoptimize(ir, site, CTX)
    assert isinstance(result, Skipped) and "tensor map encoded on the host" in result.reason
    # the same refusal on a bulk tensor copy of another kernel
    tensor = BULK_KERNEL.replace(
        '"cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], 1024, [%2];"\n'
        '                   ::"r"(base + 1024 * k), "l"(src + 256 * r), "r"(flags + 8 * k)',
        '"cp.async.bulk.tensor.1d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2}], [%3];"\n'
        '                   ::"r"(base + 1024 * k), "l"(src), "r"(256 * r), "r"(flags + 8 * k)')
    assert tensor != BULK_KERNEL
    assert "tensor map" in _refusal("tma-bulk-copy", tensor).reason


def test_forward_rules_need_the_record() -> None:
    ir = kir.parse(ROLES_KERNEL, "cuda")
    out = _deopt("warp-specialization", ir)
    p = get_pass("warp-specialization")()
    site = next(s for s in p.sites(out) if not s.present)
    assert "recorded split" in p.optimize(out, site, CTX).reason


def test_a_consumer_that_bulk_stores_its_results_is_still_the_consumer() -> None:
    # gemm_cuda.cu's consumers may TMA-store C (WG_EPILOGUE 1): the split is still found
    ir = kir.parse_file(EXPERTS / "gemm" / "gemm_cuda.cu")
    sites = [s for s in get_pass("warp-specialization")().sites(ir) if s.present]
    assert len(sites) == 1 and "cp.async.bulk.tensor.2d.global.shared::cta" in ir.text
