"""Edit-script transplant: a recorded forward step performed on kernels whose anchors play the
same roles under other names and layout (CUDA and Triton), and refused with the anchor that
does not map."""
from __future__ import annotations

import kir
from anchors.transplant import transplant

CUDA_BEFORE = """
__global__ void scale_rows(const float* x, float* y, int n, float alpha) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  float acc = 0.0f;
  for (int k = 0; k < 8; ++k) {
    acc += x[i * 8 + k];
  }
  y[i] = alpha * acc;
}
"""
CUDA_AFTER = """
__global__ void __launch_bounds__(256) scale_rows(const float* __restrict__ x, float* __restrict__ y, int n, float alpha) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  float acc = 0.0f;
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    acc += __ldg(&x[i * 8 + k]);
  }
  y[i] = alpha * acc;
}
"""
# the same roles, other names and layout
CUDA_TARGET = """// row sums
__global__ void rowsum_kernel(const float* input,
                              float* output, int count, float factor)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    float total = 0.0f;
    for (int j = 0; j < 8; ++j)
    {
        total += input[idx * 8 + j];
    }
    output[idx] = factor * total;
}
"""

TRITON_BEFORE = '''
import triton
import triton.language as tl


@triton.jit
def mm(a_ptr, b_ptr, c_ptr, K, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK, BLOCK), dtype=tl.float32)
    for k in range(0, K, BLOCK):
        a = tl.load(a_ptr + offs[:, None] * K + k + offs[None, :])
        b = tl.load(b_ptr + (k + offs[:, None]) * BLOCK + offs[None, :])
        acc += tl.sum(a[:, :, None] * b[None, :, :], axis=1)
    tl.store(c_ptr + offs[:, None] * BLOCK + offs[None, :], acc)
'''
TRITON_AFTER = TRITON_BEFORE.replace(
    "acc += tl.sum(a[:, :, None] * b[None, :, :], axis=1)", "acc += tl.dot(a, b)")
TRITON_TARGET = '''
import triton
import triton.language as tl


@triton.jit
def product_kernel(x_ptr, y_ptr, out_ptr, depth, TILE: tl.constexpr):
    r = tl.arange(0, TILE)
    running = tl.zeros((TILE, TILE), dtype=tl.float32)
    for step in range(0, depth, TILE):
        lhs = tl.load(x_ptr + r[:, None] * depth + step + r[None, :])
        rhs = tl.load(y_ptr + (step + r[:, None]) * TILE + r[None, :])
        running += tl.sum(lhs[:, :, None] * rhs[None, :, :], axis=1)
    tl.store(out_ptr + r[:, None] * TILE + r[None, :], running)
'''


def _tp(before: str, after: str, target: str, lang: str):
    return transplant(kir.parse(before, lang), kir.parse(after, lang), kir.parse(target, lang))


def test_cuda_step_lands_on_renamed_and_reformatted_kernel() -> None:
    result = _tp(CUDA_BEFORE, CUDA_AFTER, CUDA_TARGET, "cuda")
    assert result.ok, result.reason
    text = result.text
    assert "__launch_bounds__(256) rowsum_kernel(const float* __restrict__ input" in text
    assert "float* __restrict__ output" in text
    assert "#pragma unroll\n    for (int j = 0; j < 8; ++j)" in text
    assert "total += __ldg(&input[idx * 8 + j]);" in text
    assert result.renamed["x"] == "input" and result.renamed["k"] == "j"
    assert "scale_rows" not in text and "// row sums" in text
    assert not kir.parse(text, "cuda").error_nodes


def test_triton_step_lands_on_renamed_kernel() -> None:
    result = _tp(TRITON_BEFORE, TRITON_AFTER, TRITON_TARGET, "triton")
    assert result.ok, result.reason
    assert "running += tl.dot(lhs, rhs)" in result.text
    assert "tl.sum" not in result.text
    compile(result.text, "<transplanted>", "exec")


def test_refused_where_the_anchor_has_no_counterpart() -> None:
    # the target has no loop: the pragma/ldg edits have nowhere to land
    flat = """
__global__ void copy_kernel(const float* src, float* dst) {
  int t = threadIdx.x;
  dst[t] = src[t] * 2.0f;
}
"""
    result = _tp(CUDA_BEFORE, CUDA_AFTER, flat, "cuda")
    assert not result.ok and result.text is None
    assert "no counterpart" in result.reason or "no aligned counterpart" in result.reason
    assert result.unmapped


def test_a_step_that_changes_nothing_is_refused() -> None:
    result = _tp(CUDA_BEFORE, CUDA_BEFORE, CUDA_TARGET, "cuda")
    assert not result.ok and "changes nothing" in result.reason


def test_recorded_compute_steps_of_the_cuda_gemm_land_on_a_renamed_copy() -> None:
    """The forward wgmma and mma-intrinsics steps of the expert (their recorded states) land on
    a copy whose functions, macros and variables are renamed and whose indentation differs,
    giving the renamed expert token for token."""
    import re
    from pathlib import Path

    from passes import get_pass
    from passes.roundtrip import normalized

    expert = kir.parse_file(Path(__file__).parent.parent / "experts" / "gemm" / "gemm_cuda.cu")
    names = {"gemm_mma_body": "mm_body", "acc": "accum", "lane": "ln", "mma_16816": "tc_mma",
             "GEMM_WGMMA_64x256x16": "WG_MMA", "desc_a": "lhs_desc", "wgmma_fence": "wg_fence"}

    def renamed(text: str) -> str:
        return re.sub(r"\b(" + "|".join(names) + r")\b", lambda m: names[m.group(1)], text)

    for pass_name in ("wgmma", "mma-intrinsics"):
        p = get_pass(pass_name)()
        site = next(s for s in p.sites(expert) if s.present)
        before = p.deoptimize(expert, site).ir
        target = kir.parse(renamed(before.text).replace("    ", "  "), "cuda")
        result = transplant(before, expert, target)
        assert result.ok, (pass_name, result.reason)
        assert normalized(result.text, "cuda") == normalized(renamed(expert.text), "cuda")


def test_members_and_builtins_are_not_renamed() -> None:
    """The target calls its input `x`'s counterpart `src`; the step's `threadIdx.x` is a
    member, not that parameter, and stays `threadIdx.x`."""
    before = "__global__ void k(const float* x, float* y) {\n  y[threadIdx.x] = x[0];\n}\n"
    after = ("__global__ void k(const float* x, float* y) {\n  y[threadIdx.x] = x[0];\n"
             "  y[threadIdx.x + blockDim.x] = x[1];\n}\n")
    target = "__global__ void g(const float* src, float* dst) {\n  dst[threadIdx.x] = src[0];\n}\n"
    result = _tp(before, after, target, "cuda")
    assert result.ok, result.reason
    assert "  dst[threadIdx.x + blockDim.x] = src[1];\n" in result.text
    assert result.renamed["x"] == "src" and result.renamed["y"] == "dst"


def test_a_deletion_at_the_end_of_a_python_line_keeps_the_line_break() -> None:
    before = TRITON_BEFORE.replace("acc += tl.sum(a[:, :, None] * b[None, :, :], axis=1)",
                                   "acc += tl.sum(a[:, :, None] * b[None, :, :], axis=1) * 1.0")
    result = _tp(before, TRITON_BEFORE, TRITON_TARGET.replace(
        "axis=1)\n", "axis=1) * 1.0\n"), "triton")
    assert result.ok, result.reason
    assert result.text == TRITON_TARGET
    compile(result.text, "<transplanted>", "exec")


def test_a_recorded_step_replays_exactly_even_when_it_reindents() -> None:
    from anchors.transplant import record, replay, transplant_record

    after = TRITON_BEFORE.replace(
        "    tl.store(c_ptr", "    if K > 0:\n        tl.store(c_ptr")
    step = record(TRITON_BEFORE, after, "triton", ["triton:mm/call:tl.store[0]"])
    b, a = replay(step)
    assert (b.text, a.text) == (TRITON_BEFORE, after)
    assert step["anchors"] == ["triton:mm/call:tl.store[0]"]
    cuda = transplant_record(step, kir.parse(CUDA_TARGET, "cuda"))
    assert not cuda.ok and "the step is triton, the target cuda" in cuda.reason
    broken = transplant_record({**step, "hunks": [[0, 10**6, ""]]},
                               kir.parse(TRITON_TARGET, "triton"))
    assert not broken.ok and "cannot be replayed" in broken.reason
