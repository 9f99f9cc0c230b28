"""CUDA roles found by what code does (`passes.cuda.recognize`), on kernels written in several
styles (tests/cuda_role_sources.py) and on the same kernels with every name changed: the roles
do not depend on names, and constructs that look like a role but cannot be told are refused
with the reason."""
from __future__ import annotations

import re

import pytest

import kir
from passes.cuda import recognize as R

import cuda_role_sources as S


def _renamed(text: str) -> str:
    """Every identifier the kernel declares (variables, parameters, shared arrays, macros,
    the kernel itself) given another name; CUDA's own names and types stay."""
    keep = {"threadIdx", "blockIdx", "blockDim", "gridDim", "x", "y", "z", "float", "int",
            "unsigned", "const", "size_t", "for", "if", "else", "return", "void", "include",
            "define", "constexpr", "volatile", "__global__", "__device__", "__shared__", "__restrict__",
            "__syncthreads", "fmaxf", "fminf", "fmaf", "rsqrtf", "__expf", "cuda_bf16", "h",
            "__nv_bfloat16", "__float2bfloat16", "__bfloat162float", "f", "__shfl_down_sync",
            "warpSize", "extern", "C"}
    names = sorted(set(re.findall(r"\b[A-Za-z_]\w*\b", text)) - keep)
    table = {n: f"q{i}_{n[::-1].lower()}" for i, n in enumerate(names)}
    return re.sub(r"\b[A-Za-z_]\w*\b", lambda m: table.get(m.group(0), m.group(0)), text)


def _roles(text: str) -> dict:
    return R.roles(kir.parse(text, "cuda"))


@pytest.mark.parametrize("rename", [False, True], ids=["as-written", "renamed"])
def test_reduction_trees_in_every_spelling(rename: bool) -> None:
    cases = {  # source -> [(form, extent value, ops)]
        S.RMS: [("halving", None, ["sum"])],
        S.SOFTMAX: [("halving", 128, ["max"]), ("halving", 128, ["sum"])],
        S.UNROLLED_MAX: [("unrolled", 128, ["max"])],
        S.DOUBLING_MIN: [("doubling", 256, ["min"])],
        S.MOMENTS: [("halving", None, ["sum", "sum"])],
        S.ROW_SUM: [("halving", None, ["sum"])],
    }
    for source, want in cases.items():
        text = _renamed(source) if rename else source
        trees = _roles(text)["reduction_trees"]
        got = [(t["form"], t["extent_value"], [c["op"] for c in t["combines"]]) for t in trees]
        assert got == want, text
        assert all(t["values"] for t in trees)  # the values stored before the tree were found


@pytest.mark.parametrize("rename", [False, True], ids=["as-written", "renamed"])
def test_a_tree_finished_by_the_first_warp(rename: bool) -> None:
    for source in (S.WARP_TAIL, S.WARP_TAIL_CALL):
        roles = _roles(_renamed(source) if rename else source)
        assert [(t["form"], t["extent"]) for t in roles["reduction_trees"]] == \
            [("halving", "blockDim.x")]


def test_a_first_warp_stage_that_is_not_told_is_refused_with_the_reason() -> None:
    roles = _roles(S.WARP_TAIL_CALL.replace(" buf[lane] += buf[lane + 1];", ""))
    assert roles["reduction_trees"] == []
    assert [r["reason"] for r in roles["refusals"] if r["role"] == "reduction-tree"] == [
        "the tree stops at s > 32 and ends with a warp-synchronous stage that is not told: "
        "the first warp's strides are [32, 16, 8, 4, 2], not 32 down to 1"]


def test_a_tree_whose_other_slots_are_read_later_is_refused() -> None:
    text = S.ROW_SUM.replace("if (tid == 0) out[blockIdx.x] = buf[0];",
                             "out[blockIdx.x * 256 + tid] = buf[tid];")
    roles = _roles(text)
    assert roles["reduction_trees"] == []
    assert any(r["reason"].startswith("a slot other than 0 is read after the tree (buf[tid])")
               for r in roles["refusals"])


@pytest.mark.parametrize("rename", [False, True], ids=["as-written", "renamed"])
def test_staging_in_each_form(rename: bool) -> None:
    cases = {S.TILED: [("temporary", True), ("ternary", True)],
             S.BLOCKED_BF16: [("ternary", True), ("temporary", True)],
             S.BLOCKED_NT: [("temporary", True), ("temporary", True)],
             S.DOUBLING_MIN: [("direct", False)]}
    for source, want in cases.items():
        staged = _roles(_renamed(source) if rename else source)["stagings"]
        assert [(s["form"], s["guard"] is not None) for s in staged] == want
        assert all(s["fill"] in (None, "0.f", "__float2bfloat16(0.f)") or "0.f" in s["fill"]
                   for s in staged)


def test_a_vector_staging_copy_is_told() -> None:
    text = r"""
    __global__ void copy4(const float* src, float* dst) {
      __shared__ __align__(16) float tile[256];
      const int t = threadIdx.x;
      *reinterpret_cast<float4*>(&tile[4 * t]) = *reinterpret_cast<const float4*>(&src[blockIdx.x * 256 + 4 * t]);
      __syncthreads();
      dst[blockIdx.x * 256 + t] = tile[255 - t];
    }"""
    staged = _roles(text)["stagings"]
    assert [(s["form"], s["width"], s["vector"]) for s in staged] == [("vector", 4, "float4")]


@pytest.mark.parametrize("rename", [False, True], ids=["as-written", "renamed"])
def test_gemm_micro_kernels(rename: bool) -> None:
    cases = {  # source -> (block tile, thread tile, A layout, B layout, element bytes, fma)
        S.TILED: ((16, 16, 16), (1, 1), "k-contiguous", "k-strided", 4, "mul-add"),
        S.BLOCKED_BF16: ((64, 64, 16), (4, 4), "k-strided", "k-strided", 2, "mul-add"),
        S.BLOCKED_NT: ((32, 32, 8), (2, 2), "k-contiguous", "k-contiguous", 4, "fma"),
    }
    for source, (block, thread, la, lb, size, fma) in cases.items():
        mks = R.micro_kernels(kir.parse(_renamed(source) if rename else source, "cuda"))[0]
        assert len(mks) == 1
        mk = mks[0]
        assert (mk.block_tile, mk.thread_tile, mk.a.layout, mk.b.layout, mk.fma) == \
            (block, thread, la, lb, fma)
        assert R.element_bytes(mk.element) == size
        assert len(mk.stagings) == 2 and {s.array for s in mk.stagings} == {mk.a.array, mk.b.array}
        assert mk.epilogue and mk.output is not None
        assert mk.acc_type == "float"


def test_the_operands_follow_the_accumulator_not_the_order_of_the_factors() -> None:
    swapped = S.BLOCKED_BF16.replace("out[i][j] += ra[i] * rb[j];", "out[i][j] += rb[j] * ra[i];")
    mk = R.micro_kernels(kir.parse(swapped, "cuda"))[0][0]
    assert (mk.a.array, mk.b.array) == ("sa", "sb") and mk.acc_index == ("i", "j")


def test_a_product_of_shared_values_outside_a_staged_k_loop_is_refused() -> None:
    text = r"""
    __global__ void dots(const float* x, float* y) {
      __shared__ float u[64], w[64];
      u[threadIdx.x] = x[threadIdx.x]; w[threadIdx.x] = x[64 + threadIdx.x];
      __syncthreads();
      float acc = 0.f;
      for (int k = 0; k < 64; ++k) acc += u[k] * w[(k + threadIdx.x) % 64];
      y[threadIdx.x] = acc;
    }"""
    mks, refused = R.micro_kernels(kir.parse(text, "cuda"))
    assert mks == [] and [r.reason for r in refused] == [
        "the multiply-add is in no loop with a block barrier (no K loop over staged tiles)"]


def test_stride_loops_and_row_reductions() -> None:
    roles = _roles(S.SAXPY)
    assert [(s["kind"], s["var"]) for s in roles["stride_loops"]] == [("grid", "idx")]
    roles = _roles(_renamed(S.RMS))
    assert [s["kind"] for s in roles["stride_loops"]] == ["block", "block"]
    assert [(r["op"], r["combine"]) for r in roles["row_reductions"]] == [("sum", "tree")]
    roles = _roles(S.UNROLLED_MAX)
    assert [s["kind"] for s in roles["stride_loops"]] == ["grid"]


def test_register_blocks() -> None:
    blocks = _roles(S.BLOCKED_BF16)["register_blocks"]
    assert [(b["name"], b["extents"]) for b in blocks] == [("out", [4, 4]), ("ra", [4]), ("rb", [4])]


@pytest.mark.parametrize(("host", "block"), [
    (S.HOST_CUDAHOST, (256, 1, 1)), (S.HOST_DRIVER, (32, 4, 1)), (S.HOST_CUPY, (128, 1, 1)),
    (S.HOST_LOAD_INLINE, (512, 1, 1))], ids=["cudahost", "driver", "cupy", "load_inline"])
def test_the_launch_block_as_each_host_form_sets_it(host: str, block: tuple) -> None:
    found = R.launch_block(kir.parse(S.ROW_SUM, "cuda"), host=host)
    assert found.dims == block and found.threads == block[0] * block[1] * block[2]


def test_the_launch_block_beside_the_kernel_and_in_the_unit(tmp_path) -> None:  # noqa: ANN001
    (tmp_path / "k.cu").write_text(S.ROW_SUM)
    (tmp_path / "k.py").write_text(S.HOST_CUDAHOST)
    assert R.launch_block(kir.parse_file(tmp_path / "k.cu")).dims == (256, 1, 1)
    chevron = S.ROW_SUM + "\nvoid go(const float* x, float* o, int n) { dim3 blk(64, 2); " \
                          "row_sum<<<n, blk>>>(x, o, n); }\n"
    assert R.launch_block(kir.parse(chevron, "cuda")).dims == (64, 2, 1)


def test_a_launch_block_that_is_not_told_says_why() -> None:
    ir = kir.parse(S.ROW_SUM, "cuda")
    assert R.launch_block(ir).reason.startswith("no launch of the kernel was found")
    varying = "def run(x, threads):\n    host.launch(f, 1, threads, 0, [x])\n"
    assert R.launch_block(ir, host=varying).reason == "a launch's block is not a literal bound once"
    two = "def run(x):\n    host.launch(f, 1, 128, 0, [x])\n    host.launch(f, 1, 256, 0, [x])\n"
    assert "different blocks" in R.launch_block(ir, host=two).reason


def test_compile_time_trip_counts() -> None:
    text = r"""
    constexpr int items = 8;
    template <int Width> __device__ void f(float* r) {
      for (int i = 0; i < items; ++i) r[i] = 0.f;
      for (int j = 0; j < Width; j += 2) r[j] = 1.f;
      for (int k = 0; k < (int)r[0]; ++k) r[k] = 2.f;
    }"""
    ir = kir.parse(text, "cuda")
    unit = R.Unit(ir)
    loops = [n.id for n in ir.walk() if ir.grammar_type_of(n.id) == "for_statement"]
    got = [R.constant_trip(unit, lp) for lp in loops]
    assert [ok for ok, _ in got] == [True, True, False]
    assert got[2][1] == "the bound '(int)r[0]' is not a compile-time constant"


def test_a_same_width_vector_move_is_no_conversion() -> None:
    """A 16-byte copy through `reinterpret_cast<uint4*>` (the gemm expert's, and the form
    passes.cuda.stage_vector writes) moves bytes; a copy that converts its value (bf16 read
    into a float tile, a conversion call around the read) still converts."""
    from pathlib import Path

    from passes.cuda.stage_vector import vectorize_all

    root = Path(__file__).resolve().parents[1]
    expert = (root / "experts/gemm/gemm_cuda_tiles.cu").read_text()
    user = (root / "tests/data/microkernels/blocktile_bf16.cu").read_text()
    staged, _ = vectorize_all(kir.parse(user, "cuda"))
    assert "reinterpret_cast<uint4*>" in staged
    for text_ in (expert, staged):
        found, _ = R.stagings(kir.parse(text_, "cuda"))
        vectors = [s for s in found if s.vector == "uint4"]
        assert vectors and not any(s.converted for s in vectors)
        assert not any(s.converted for s in found)
    tile = ("__global__ void k(const __nv_bfloat16* a, float* o, int n) {\n"
            "  __shared__ float t[64];\n"
            "  t[threadIdx.x] = __bfloat162float(a[threadIdx.x]);\n"
            "  __syncthreads();\n  o[threadIdx.x] = t[threadIdx.x];\n}\n")
    found, _ = R.stagings(kir.parse(tile, "cuda"))
    assert found and all(s.converted for s in found)
