"""The CUDA row rules (`row-cache`, `row-registers`, `warp-shuffle-reduce`, `vectorize-global`,
`launch-threads`) on row kernels written in further styles (tests/data/cuda_rows: each a folder
with its `.cu`, its host module and its case): online softmax, Welford LayerNorm over a
struct, half2 RMSNorm whose tree ends in shuffles, a templated tree with a volatile last warp,
cooperative groups, one warp per row, a column reduction, a fixed grid walking the rows, a
block sized by a constexpr with Spanish names, four rows per 2-D block, softmax trees as
while loops sharing one stride variable, a tree per row of a (64, 4) block, log-sum-exp and
softmax merging (max, rescaled sum) pairs in a tree or across a warp, a sum through shared
atomics, a tree stepping with a cooperative-groups block's sync(), Welford triples merged in
a tree, the classic unrolled reduction with steps under `if (BLOCK >= k)`. A rule that acts
compiles with NVRTC for sm_90a and, through the kernel's own host module on the CPU
(`gate.cudacpu`), matches the case's reference at its small shape; what a rule cannot rewrite
soundly it refuses, and says why."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

import kir
from cuda_style_helpers import context, emulated_error, rule_output, start
from nvrtc_helpers import ptx_for_sm90a
from passes import Applied, PassContext, get_all_passes, get_pass
from passes.cuda import recognize as R
from passes.cuda._tree import Scope
from passes.cuda.atomic_fold import atomic_folds
from passes.cuda.launch_threads import assumed_threads

torch = pytest.importorskip("torch")
cudacpu = pytest.importorskip("gate.cudacpu")

import gate  # noqa: E402

ROWS = Path(__file__).resolve().parent / "data" / "cuda_rows"


def _start(folder: str) -> tuple[Path, Path]:
    return start(ROWS / folder)


def _rule_output(folder: str, rule: str, **options: object) -> tuple[str, int, list[str]]:
    return rule_output(ROWS / folder, rule, **options)


def _emulated_error(folder: str, source: str) -> tuple[float, float]:
    return emulated_error(ROWS / folder, source)


@pytest.fixture(autouse=True)
def _no_nvrtc_in_the_host(monkeypatch: pytest.MonkeyPatch) -> None:
    # NVRTC compiles each output once below (ptx_for_sm90a); the emulated host need not again.
    monkeypatch.setenv("KLINEAGE_CUDACPU_NVRTC", "0")


MARKS = {"warp-shuffle-reduce": "shfl.sync.", "row-cache": "cp.async",
         "row-registers": ".v4.", "vectorize-global": ".v4.", "launch-threads": None}
# (kernel folder, rule, options, sites it acts at)
ACTS = [
    ("rw_constexpr_sum", "vectorize-global", {}, 1),  # a comment in Spanish before the loop
    ("rw_constexpr_sum", "warp-shuffle-reduce", {}, 1),  # `paso /= 2` over a constexpr block
    ("rw_cg_l2norm", "row-cache", {}, 1),  # `i = blk.thread_rank(); i += blk.size()`
    ("rw_welford_ln", "row-cache", {}, 1),  # beside a shared array of a struct
    ("rw_welford_ln", "row-registers", {}, 1),  # a per-thread count, merged with shuffles
    ("rw_online_softmax", "row-registers", {}, 1),  # the online max / sum pass, then the write
    ("rw_gridstride_rms", "warp-shuffle-reduce", {}, 1),  # the tree inside `r += gridDim.x`
    ("rw_warp_logsoftmax", "vectorize-global", {}, 1),  # lanes stepping by 32
    ("rw_rms_half2_tail", "launch-threads", {"threads": 64}, 1),  # the tail's `t + 32` holds
    ("rw_amax_volatile", "warp-shuffle-reduce", {}, 1),  # `if (BLOCK >= 64)` steps of a tail
    ("rw_while_softmax", "warp-shuffle-reduce", {}, 2),  # two while trees, one stride variable
    ("rw_while_softmax", "row-registers", {}, 1),
    ("rw_rows2d_mean", "warp-shuffle-reduce", {}, 1),  # one warp per row of part[4][32]
    ("rw_rows2d_softmax", "warp-shuffle-reduce", {}, 2),  # two warps per row of red[ty][tx]
    ("rw_online_softmax", "warp-shuffle-reduce", {}, 1),  # (max, rescaled sum) pairs merged
    ("rw_online_lse", "warp-shuffle-reduce", {}, 1),  # sums scaled in place, exp2f, a ternary max
    ("rw_online_warp", "vectorize-global", {}, 1),  # lanes stepping by a macro of 32
    ("rw_atomic_mean", "warp-shuffle-reduce", {}, 1),  # atomicAdd into a shared float
    ("rw_cg_tree_rms", "warp-shuffle-reduce", {}, 1),  # block.thread_rank(), block.sync()
    ("rw_cg_tree_rms", "row-registers", {}, 1),
    ("rw_welford_tree", "row-registers", {}, 1),  # counts go to the tree before any use
    ("rw_classic_unrolled", "warp-shuffle-reduce", {}, 1),  # `if (BLOCK >= 512) { ... }` steps
]


@pytest.mark.parametrize("folder,rule,options,count", ACTS,
                         ids=[f"{f}-{r}" for f, r, _o, _c in ACTS])
def test_the_rule_acts_on_the_row_kernel_and_keeps_its_answer(folder: str, rule: str,
                                                              options: dict, count: int) -> None:
    out, applied, refusals = _rule_output(folder, rule, **options)
    assert applied == count, refusals
    ptx = ptx_for_sm90a(out)
    if MARKS[rule]:
        assert MARKS[rule] in ptx
    err, tol = _emulated_error(folder, out)
    assert err <= tol, f"{rule} on {folder}: error {err:.3g} over {tol}"


REFUSED_TREES = {
    # Chan's merge of (count, mean, M2) triples: three arrays folded jointly
    "rw_welford_tree": "nor a merge of a maximum and a sum: the step writes 3 arrays",
    # the tree folds along threadIdx.y: its slots are not the lanes of a warp
    "rw_colsum": "differ in the last index only (one tree per row of threads; a tree along "
                 "threadIdx.y is not told)",
    "rw_rms_half2_tail": "stops at s >= 64",
}


@pytest.mark.parametrize("folder", sorted(REFUSED_TREES))
def test_trees_no_shuffle_can_replace_are_refused_with_a_reason(folder: str) -> None:
    ir = kir.parse_file(_start(folder)[0])
    trees, refusals = R.reduction_trees(ir)
    assert trees == []
    assert any(REFUSED_TREES[folder] in r.reason for r in refusals), [r.reason for r in refusals]
    p = get_pass("warp-shuffle-reduce")()
    assert [s for s in p.sites(ir) if not s.present] == []


UNROLLED = r"""
extern "C" __global__ void rowsum(const float* x, float* y, int n)
{
    __shared__ float sd[256];
    unsigned int tid = threadIdx.x;
    float s = 0.f;
    for (int i = tid; i < n; i += blockDim.x) s += x[(size_t)blockIdx.x * n + i];
    sd[tid] = s;
    __syncthreads();
    if (tid < 128) sd[tid] += sd[tid + 128];
    __syncthreads();
    if (tid < 64) sd[tid] += sd[tid + 64];
    __syncthreads();
    if (tid < 32) warp_tail(sd, tid);
    if (tid == 0) y[blockIdx.x] = sd[0];
}
"""
WARP_TAIL = r"""
__device__ void warp_tail(volatile float* v, unsigned int t)
{
    v[t] += v[t + 32]; v[t] += v[t + 16]; v[t] += v[t + 8];
    v[t] += v[t + 4]; v[t] += v[t + 2]; v[t] += v[t + 1];
}
"""
HOST_256 = """
from experts import cudahost
def run(x):
    y = x.new_empty(x.shape[0])
    cudahost.launch(cudahost.get_function(cudahost.compile_source(SRC), "rowsum"), x.shape[0],
                    256, 0, (x, y, x.shape[1]))
    return y
"""


def test_a_smaller_block_is_refused_where_shared_slots_assume_the_launch(tmp_path: Path) -> None:
    (tmp_path / "unrolled.cu").write_text(WARP_TAIL + UNROLLED)
    (tmp_path / "unrolled.py").write_text(HOST_256)
    ir = kir.parse_file(tmp_path / "unrolled.cu")
    unit = R.Unit(ir)
    assert assumed_threads(unit, "rowsum") == (256, "sd[tid + 128]")
    without_tail = kir.parse(UNROLLED.replace("if (tid < 32) warp_tail(sd, tid);", "")
                             .replace("sd[tid + 128]", "sd[tid + 32]").replace("sd[tid + 64]",
                                                                               "sd[tid + 16]"),
                             "cuda")
    assert assumed_threads(R.Unit(without_tail), "rowsum") == (64, "sd[tid + 32]")
    tail_only = kir.parse(WARP_TAIL + UNROLLED.replace("sd[tid + 128]", "sd[tid]")
                          .replace("sd[tid + 64]", "sd[tid]"), "cuda")
    assert assumed_threads(R.Unit(tail_only), "rowsum") == (64, "v[t + 32]")  # the helper's
    for threads in (64, 128):
        p = get_pass("launch-threads").from_options({"threads": threads})
        site = next(s for s in p.sites(ir) if not s.present)
        why = p.optimize(ir, site, PassContext(facts={"arch": "sm_90"}))
        assert not isinstance(why, Applied)
        assert "`sd[tid + 128]` addresses a shared slot that a block of fewer than 256" in why.reason
    _out, applied, refusals = _rule_output("rw_rms_half2_tail", "launch-threads", threads=32)
    assert applied == 0 and any("`acc[t + 32]`" in r for r in refusals), refusals


CG = r"""
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
extern "C" __global__ void k(const float* x, float* y, int n)
{
    cg::thread_block b = cg::this_thread_block();
    auto w = cg::tiled_partition<32>(b);
    float s = 0.f;
    for (int i = b.thread_rank(); i < n; i += b.size()) s += x[i];
    s = cg::reduce(w, s, cg::plus<float>());
    if (w.thread_rank() == 0) y[w.meta_group_rank()] = s;
}
"""


def test_cooperative_group_ranks_are_thread_dependent_and_a_1d_block_reads_them() -> None:
    ir = kir.parse(CG, "cuda")
    scope = Scope(ir)
    scope.enter(R.Unit(ir).kernels["k"])
    values = {ir.source[n.span.start:n.span.end].decode(): scope.threads(n.id) for n in ir.walk()
              if ir.grammar_type_of(n.id) == "call_expression"}
    assert values["cg::this_thread_block()"] == values["b.size()"] == 0  # uniform
    for call in ("b.thread_rank()", "w.thread_rank()", "w.meta_group_rank()",
                 "cg::reduce(w, s, cg::plus<float>())"):
        assert values[call] != 0, call
    assert R.stride_loops(ir) == []  # the block's shape unknown: its rank is not threadIdx.x
    launched = kir.parse(CG + "void go(const float* x, float* y, int n) { k<<<1, 128>>>(x, y, n); }",
                         "cuda")
    assert [(s.kind, s.step) for s in R.stride_loops(launched)] == [("block", "b.size()")]
    two_d = kir.parse(CG + "void go(const float* x, float* y, int n) { k<<<1, dim3(32, 4)>>>(x, y, n); }",
                      "cuda")
    assert R.stride_loops(two_d) == []


def test_a_struct_of_scalar_fields_has_its_compiled_size() -> None:
    unit = R.Unit(kir.parse("""
struct A { float n, mean, m2; };
struct B { double d; float f; };
struct C { __half h; float f[3]; char c; };
struct D { float x; __device__ float twice() const { return 2 * x; } };
struct E { float4 v; int i; };
""", "cuda"))
    assert [R.struct_bytes(unit, n) for n in "ABCDE"] == [12, 16, 20, None, 32]


def _cuda_rules() -> list[str]:
    return sorted(name for name, load in get_all_passes().items()
                  if "cuda" in load().languages and not name.startswith(("gemm", "mma")))


@pytest.mark.parametrize("folder", sorted(p.name for p in ROWS.iterdir() if p.is_dir()))
def test_a_non_ascii_comment_changes_no_rule_output(folder: str) -> None:
    """Spans are byte offsets: text before a site in a multi-byte encoding shifts no edit."""
    cu, host = _start(folder)
    text = re.sub(r"[^\x00-\x7f]", "?", cu.read_text())
    ctx = context(kir.parse_file(cu), host)
    for rule in _cuda_rules():
        outputs = []
        for head in ("// plain words\n", "// ñandú, αβγ — üñí\n"):
            ir = kir.parse(head + text, "cuda")
            p = get_pass(rule)()
            sites = [s for s in p.sites(ir) if not s.present]
            result = p.optimize(ir, sites[0], ctx) if sites else None
            outputs.append(result.ir.text[len(head):] if isinstance(result, Applied)
                           else repr(result))
        assert outputs[0] == outputs[1], (folder, rule)


_AFTER = r"""
extern "C" __global__ void k(const float* x, float* out, int n) {
  __shared__ float sh[256];
  const unsigned tid = threadIdx.x;
  float acc = 0.f;
  for (int i = tid; i < n; i += blockDim.x) acc += x[(size_t)blockIdx.x * n + i];
  sh[tid] = acc;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (tid < s) sh[tid] += sh[tid + s];
    __syncthreads();
  }
  AFTER
}
"""
SLOTS_AFTER = {  # each reads a slot the tree left holding a partial sum (a shuffle would not)
    "a pointer bound to the array": "const float* q = sh; if (tid == 0) out[blockIdx.x] = q[2];",
    "an address taken": "if (tid == 0) out[blockIdx.x] = *(&sh[1]);",
    "a store of slot 0 first": "if (tid == 0) sh[0] = sh[0] / n; __syncthreads(); "
                               "if (tid == 0) out[blockIdx.x] = sh[0] + sh[1];",
    "a refill under a branch": "if (tid < 32) sh[tid] = 0.f; __syncthreads(); "
                               "if (tid == 0) out[blockIdx.x] = sh[40];",
}


@pytest.mark.parametrize("name", sorted(SLOTS_AFTER))
def test_a_tree_whose_other_slots_are_read_later_is_refused(name: str) -> None:
    ir = kir.parse(_AFTER.replace("AFTER", SLOTS_AFTER[name]), "cuda")
    trees, refusals = R.reduction_trees(ir)
    assert trees == [] and any("is read after the tree" in r.reason for r in refusals), \
        [r.reason for r in refusals]
    refilled = _AFTER.replace("AFTER", "const float total = sh[0]; __syncthreads(); "
                              "sh[tid] = acc * acc; __syncthreads(); "
                              "if (tid == 0) out[blockIdx.x] = total + sh[1];")
    assert len(R.reduction_trees(kir.parse(refilled, "cuda"))[0]) == 1  # every slot refilled


PER_THREAD = r"""
extern "C" __global__ void k(const float* x, float* y, int n) {
  __shared__ float red[256];
  const float* p = x + (size_t)blockIdx.x * n;
  float a = 0.f;
  int c = 0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) { a += p[i]; ++c; }
  FINISH
  red[threadIdx.x] = a;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
    __syncthreads();
  }
  for (int i = threadIdx.x; i < n; i += blockDim.x) y[(size_t)blockIdx.x * n + i] = p[i] - red[0];
}
void go(const float* x, float* y, int m, int n) { k<<<m, 256>>>(x, y, n); }
"""


def test_a_partial_computed_with_per_thread_keeps_each_thread_on_its_elements() -> None:
    """`a / (c + 1)` per thread depends on which elements the thread visited: vectors or a
    smaller block would change the result, not only the order of a sum."""
    mean_of_own = kir.parse(PER_THREAD.replace("FINISH", "a = a / (c + 1);"), "cuda")
    ctx = PassContext(facts={"arch": "sm_90", "block_threads": 256})
    for rule in ("row-registers", "launch-threads"):
        p = get_pass(rule)()
        results = [p.optimize(mean_of_own, s, ctx) for s in p.sites(mean_of_own) if not s.present]
        assert results and not any(isinstance(r, Applied) for r in results), rule
        assert any("`a = a / (c + 1);` computes with what a thread folded" in r.reason
                   for r in results), [r.reason for r in results]
    vectorized = _apply_all_text("vectorize-global", mean_of_own.text, ctx)
    assert vectorized.count("reinterpret_cast<const uint4*>") > 0  # the last loop only
    assert "{ a += p[i]; ++c; }" in vectorized
    last = kir.parse(PER_THREAD.replace("++c;", "c = (int)p[i];").replace("FINISH", "a -= c;"),
                     "cuda")
    assert "`a -= c;` computes" in get_pass("row-registers")().optimize(
        last, next(s for s in get_pass("row-registers")().sites(last) if not s.present), ctx).reason
    p = get_pass("row-registers")()
    for finish in ("", "c += __shfl_down_sync(0xffffffffu, c, 16);"):  # unused, or exchanged
        counted = kir.parse(PER_THREAD.replace("FINISH", finish), "cuda")
        assert any(isinstance(p.optimize(counted, s, ctx), Applied) for s in p.sites(counted)
                   if not s.present), finish


def _apply_all_text(rule: str, text: str, ctx: PassContext) -> str:
    ir = kir.parse(text, "cuda")
    p = get_pass(rule)()
    for _ in range(4):
        for site in [s for s in p.sites(ir) if not s.present]:
            result = p.optimize(ir, site, ctx)
            if isinstance(result, Applied):
                ir = result.ir
                break
        else:
            break
    return ir.text


def test_a_kernel_built_on_cub_is_refused_by_the_emulator_naming_the_header() -> None:
    """CUB is a library the emulator does not provide: the emulate tier says so in its verdict
    (the kernel's own static facts are NVRTC's), and no rule takes its block reduction."""
    folder = ROWS / "rw_cub_rowsum"
    verdict = gate.check_file(folder / "cub_rowsum.cu", folder, gate.Tier.EMULATE, cache=False)
    assert not verdict.ok
    assert "not emulated: the header <cub/block/block_reduce.cuh>" in verdict.reason
    ir = kir.parse_file(folder / "cub_rowsum.cu")
    for rule in ("warp-shuffle-reduce", "row-cache", "row-registers"):
        assert [s for s in get_pass(rule)().sites(ir) if not s.present] == [], rule


TYPED_TREE = r"""
#include <cuda_fp16.h>
__device__ __forceinline__ float larger(float a, float b) { return a < b ? b : a; }
__device__ __forceinline__ float apart(float a, float b) { return a - b; }
extern "C" __global__ void k(const float* x, float* out, int n) {
  DECL
  const unsigned tid = TID;
  const unsigned nt = blockDim.x * blockDim.y;
  float acc = 0.f, mx = -3.0e38f;
  for (int i = tid; i < n; i += nt) {
    const float e = x[(size_t)blockIdx.x * n + i];
    acc += e;
    mx = fmaxf(mx, e);
  }
  STORE
  __syncthreads();
  for (unsigned s = nt / 2; s > 0; s >>= 1) {
    if (tid < s) COMBINE;
    __syncthreads();
  }
  if (tid == 0) out[blockIdx.x] = READ;
}
"""
TYPED = {  # the block's count as a product of its dimensions, slots of other types
    "double": ("__shared__ double sh[256];", "threadIdx.x", "sh[tid] = acc;",
               "sh[tid] += sh[tid + s]", "(float)sh[0]"),
    "half max": ("__shared__ __half sh[256];", "threadIdx.x", "sh[tid] = __float2half(mx);",
                 "sh[tid] = __hmax(sh[tid], sh[tid + s])", "__half2float(sh[0])"),
    "linear index": ("__shared__ float sh[256];", "threadIdx.y * blockDim.x + threadIdx.x",
                     "sh[tid] = acc;", "sh[tid] += sh[tid + s]", "sh[0]"),
    "a helper's max": ("__shared__ float sh[256];", "threadIdx.x", "sh[tid] = mx;",
                       "sh[tid] = larger(sh[tid], sh[tid + s])", "sh[0]"),
}


@pytest.mark.parametrize("name", sorted(TYPED))
def test_trees_over_the_whole_block_and_other_slot_types_become_shuffles(name: str) -> None:
    decl, tid, store, combine, read = TYPED[name]
    source = (TYPED_TREE.replace("DECL", decl).replace("TID", tid).replace("STORE", store)
              .replace("COMBINE", combine).replace("READ", read))
    out = _apply_all_text("warp-shuffle-reduce", source, PassContext(facts={"arch": "sm_90"}))
    assert "__shfl_down_sync" in out and "blockDim.y == 1" in out  # checked at run time
    ptx_for_sm90a(out)
    x = torch.randn(5, 777, generator=torch.Generator().manual_seed(3))
    start, shuffles = (cudacpu.build(t, name=f"typed_{i}.cu") for i, t in enumerate((source, out)))
    two_d = ((32, 8),) if "threadIdx.y" in tid else ()  # (32, 8): the tree as written runs
    for block in ((256, 1), (128, 1), *two_d):
        want, got = torch.zeros(5), torch.zeros(5)
        start.launch("k", 5, block, 0, [x, want, 777])
        shuffles.launch("k", 5, block, 0, [x, got, 777])
        assert torch.allclose(got, want, rtol=1e-5, atol=1e-3), (name, block)


def test_a_tree_combining_through_a_helper_that_is_no_sum_max_or_min_is_refused() -> None:
    decl, tid, store, _combine, read = TYPED["a helper's max"]
    source = (TYPED_TREE.replace("DECL", decl).replace("TID", tid).replace("STORE", store)
              .replace("COMBINE", "sh[tid] = apart(sh[tid], sh[tid + s])").replace("READ", read))
    trees, refusals = R.reduction_trees(kir.parse(source, "cuda"))
    assert trees == [] and any("not a sum, max or min" in r.reason for r in refusals)


SCALE = r"""
extern "C" __global__ void k(const float* x, float* y, long long n) {
  for (INDEX i = threadIdx.x; i < n; i += blockDim.x)
    y[(size_t)blockIdx.x * n + i] = 2.f * x[(size_t)blockIdx.x * n + i];
}
"""


@pytest.mark.parametrize("index", ["size_t", "unsigned", "long long"])
def test_a_stride_loop_vectorized_keeps_its_index_type(index: str) -> None:
    out = _apply_all_text("vectorize-global", SCALE.replace("INDEX", index),
                          PassContext(facts={"arch": "sm_90", "block_threads": 128}))
    assert f"const {index} i = " in out
    ptx_for_sm90a(out)
    x = torch.randn(3, 301, generator=torch.Generator().manual_seed(4))
    y = torch.zeros_like(x)
    cudacpu.build(out, name=f"scale_{index.replace(' ', '_')}.cu").launch(
        "k", 3, 128, 0, [x, y, 301])
    assert torch.equal(y, 2 * x)


@pytest.mark.parametrize("guard,why", [
    ("BLOCK >= 128", "step of stride 32 runs only where the extent is 128"),
    ("OTHER >= 64", "step runs under OTHER >= 64"),
])
def test_a_warp_tail_step_under_another_guard_is_refused(guard: str, why: str) -> None:
    text = _start("rw_amax_volatile")[0].read_text()
    text = text.replace("if (BLOCK >= 64)", f"if ({guard})").replace(
        "template <unsigned int BLOCK>\n__device__ __forceinline__",
        "constexpr unsigned OTHER = 64;\ntemplate <unsigned int BLOCK>\n__device__ __forceinline__")
    trees, refusals = R.reduction_trees(kir.parse(text, "cuda"))
    assert trees == [] and any(why in r.reason for r in refusals), [r.reason for r in refusals]


def test_an_unrolled_tree_ending_in_a_volatile_warp_tail_becomes_shuffles() -> None:
    source = WARP_TAIL + UNROLLED
    out = _apply_all_text("warp-shuffle-reduce", source, PassContext(facts={"arch": "sm_90"}))
    assert "__shfl_down_sync" in out and "blockDim.x == 256" in out  # checked at run time
    ptx_for_sm90a(out)
    x = torch.randn(4, 999, generator=torch.Generator().manual_seed(6))
    start, shuffles = (cudacpu.build(t, name=f"unrolled_{i}.cu") for i, t in enumerate((source, out)))
    for block in (256, 128):  # 128: the tree as written runs (and reads unwritten slots)
        want, got = torch.zeros(4), torch.zeros(4)
        start.launch("rowsum", 4, block, 0, [x, want, 999])
        shuffles.launch("rowsum", 4, block, 0, [x, got, 999])
        assert torch.equal(got.nan_to_num(7.0), want.nan_to_num(7.0)) or \
            torch.allclose(got, want, rtol=1e-5, atol=1e-4), block
    got = torch.zeros(4)
    shuffles.launch("rowsum", 4, 256, 0, [x, got, 999])
    assert torch.allclose(got, x.sum(1), rtol=1e-5, atol=1e-3)


WHILE = _AFTER.replace("""  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (tid < s) sh[tid] += sh[tid + s];
    __syncthreads();
  }""", """  int s;
  s = blockDim.x / 2;
  while (s > 0) {
    if (tid < s) sh[tid] += sh[tid + s];
    STEP
  }""")


@pytest.mark.parametrize("step,after,why", [
    ("s >>= 1; __syncthreads();", "if (tid == 0) out[blockIdx.x] = sh[0];", None),
    ("__syncthreads(); s /= 2;", "if (tid == 0) out[blockIdx.x] = sh[0] + s;",
     "the stride s is read outside the tree (out[blockIdx.x] = sh[0] + s;)"),
    ("s >>= 1; __syncthreads(); if (tid < s) sh[tid] += 0.f;", "if (tid == 0) out[blockIdx.x] = sh[0];",
     "uses its stride s after updating it"),
    ("__syncthreads(); s >>= 1;", "s = 2; if (tid == 0) out[blockIdx.x] = sh[0] * s;", None),
])
def test_a_while_tree_over_a_stride_declared_earlier(step: str, after: str, why: str | None
                                                     ) -> None:
    """The stride may be declared anywhere, set right before the loop and updated anywhere in
    its body after its last use there; a read of the value the loop leaves in it refuses."""
    source = WHILE.replace("STEP", step).replace("AFTER", after)
    trees, refusals = R.reduction_trees(kir.parse(source, "cuda"))
    if why is not None:
        assert trees == [] and any(why in r.reason for r in refusals), [r.reason for r in refusals]
        return
    assert len(trees) == 1, [r.reason for r in refusals]
    out = _apply_all_text("warp-shuffle-reduce", source, PassContext(facts={"arch": "sm_90"}))
    assert "__shfl_down_sync" in out and "while" in out  # the loop kept as the fallback
    x = torch.randn(3, 555, generator=torch.Generator().manual_seed(8))
    start, shuffles = (cudacpu.build(t, name=f"while_{i}.cu") for i, t in enumerate((source, out)))
    for block in (256, 96):  # 96: not a power of two, the loop as written runs
        want, got = torch.zeros(3), torch.zeros(3)
        start.launch("k", 3, block, 0, [x, want, 555])
        shuffles.launch("k", 3, block, 0, [x, got, 555])
        assert torch.allclose(got, want, rtol=1e-5, atol=1e-4), block


ROWS_LOOP = r"""
extern "C" __global__ void k(const float* x, float* out, int m, int n) {
  __shared__ float sh[128];
  int s = 0;
  for (int r = blockIdx.x; r < m; r += gridDim.x) {
    float a = USE;
    for (int i = threadIdx.x; i < n; i += blockDim.x) a += x[(size_t)r * n + i];
    sh[threadIdx.x] = a;
    __syncthreads();
    s = blockDim.x / 2;
    while (s > 0) { if (threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s]; __syncthreads(); s >>= 1; }
    if (threadIdx.x == 0) out[r] = sh[0];
    __syncthreads();
  }
}
"""


def test_a_stride_read_before_the_tree_in_a_loop_around_it_is_refused() -> None:
    """The next row's pass reads what the previous row's tree left in the stride."""
    trees, refusals = R.reduction_trees(kir.parse(ROWS_LOOP.replace("USE", "(float)s"), "cuda"))
    assert trees == [] and any("the stride s is read outside the tree (float a = (float)s;)"
                               in r.reason for r in refusals), [r.reason for r in refusals]
    assert len(R.reduction_trees(kir.parse(ROWS_LOOP.replace("USE", "0.f"), "cuda"))[0]) == 1


def test_launch_threads_keeps_the_dynamic_shared_memory_the_host_sizes_for_its_block() -> None:
    # the buffer is read at the thread's own slot and by trees over the block: a smaller block
    # needs less than the host's bytes, which the host-launch line keeps
    out, applied, refusals = _rule_output("rw_while_softmax", "launch-threads", threads=128)
    assert applied == 1, refusals
    assert '"keep_shared": true' in out
    err, tol = _emulated_error("rw_while_softmax", out)
    assert err <= tol


ROW_TREES = r"""
extern "C" __global__ void k(const float* x, float* out, int m, int n) {
  __shared__ float sh[8][128];
  __shared__ float hi[8][128];
  const int ty = threadIdx.y;
  const int row = blockIdx.x * blockDim.y + ty;
  float a = 0.f, b = -3.0e38f;
  for (int i = threadIdx.x; i < n && row < m; i += blockDim.x) {
    a += x[(size_t)row * n + i];
    b = fmaxf(b, x[(size_t)row * n + i]);
  }
  sh[ROW][threadIdx.x] = a;
  hi[ROW][threadIdx.x] = b;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) {
      sh[ROW][threadIdx.x] += sh[ROW][threadIdx.x + s];
      hi[ROW][threadIdx.x] = fmaxf(hi[ROW][threadIdx.x], hi[ROW][threadIdx.x + s]);
    }
    __syncthreads();
  }
  if (threadIdx.x == 0 && row < m) out[row] = READ;
}
"""


def test_a_tree_per_row_of_threads_becomes_shuffles_under_a_run_time_check() -> None:
    source = ROW_TREES.replace("ROW", "ty").replace("READ", "sh[ty][0] * hi[threadIdx.y][0]")
    out = _apply_all_text("warp-shuffle-reduce", source, PassContext(facts={"arch": "sm_90"}))
    assert out.count("__shfl_down_sync") == 4 and "blockDim.z == 1" in out  # 2 arrays, 2 stages
    assert "blockDim.y == 1" not in out  # rows of threads stay
    ptx_for_sm90a(out)
    x = torch.randn(13, 300, generator=torch.Generator().manual_seed(9))
    start, shuffles = (cudacpu.build(t, name=f"rowtree_{i}.cu") for i, t in enumerate((source, out)))
    for bx, by in ((32, 4), (64, 2), (128, 8), (16, 8), (48, 2)):  # the last two: the loop as written
        want, got = torch.zeros(13), torch.zeros(13)
        grid = (13 + by - 1) // by
        start.launch("k", grid, (bx, by, 1), 0, [x, want, 13, 300])
        shuffles.launch("k", grid, (bx, by, 1), 0, [x, got, 13, 300])
        assert torch.allclose(got, want, rtol=1e-5, atol=1e-4), (bx, by)
    got = torch.zeros(13)
    shuffles.launch("k", 7, (64, 2, 1), 0, [x, got, 13, 300])
    assert torch.allclose(got, x.sum(1) * x.amax(1), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("row,read,why", [
    ("threadIdx.y", "sh[ty][1]", "a slot other than 0 is read after the tree (sh[ty][1])"),
    ("blockIdx.x % 4", "sh[0][0]", "the tree's rows [blockIdx.x % 4] are not picked by threadIdx.y"),
    ("ty", "*sh[ty]", "a slot other than 0 is read after the tree (sh[ty])"),
])
def test_a_tree_per_row_is_refused_where_its_rows_or_later_reads_are_not_told(
        row: str, read: str, why: str) -> None:
    source = ROW_TREES.replace("ROW", row).replace("READ", read)
    trees, refusals = R.reduction_trees(kir.parse(source, "cuda"))
    assert trees == [] and any(why in r.reason for r in refusals), [r.reason for r in refusals]


def _online(**swaps: str) -> str:
    text = _start("rw_online_softmax")[0].read_text()
    for old, new in swaps.items():
        assert old in text, old
        text = text.replace(old, new)
    return text


RESCALE = ("sm[threadIdx.x] = sm[threadIdx.x] * __expf(ma - mm) + sm[threadIdx.x + s] * "
           "__expf(mb - mm);")


def test_an_online_merge_of_empty_threads_stays_defined_where_the_tree_met_none() -> None:
    """Started at -inf, two threads that saw no element merge to NaN (inf - inf). At 200
    columns and 256 threads the tree as written never pairs two of them (t with t + 128);
    the shuffles pair lanes of the last warp, all empty, and their merge must not be NaN."""
    source = _online(**{"float m = -3.0e38f": "float m = __int_as_float(0xff800000)",
                        "mx[128]": "mx[256]", "sm[128]": "sm[256]"})
    out = _apply_all_text("warp-shuffle-reduce", source, PassContext(facts={"arch": "sm_90"}))
    assert out.count("__shfl_down_sync") == 4
    ptx_for_sm90a(out)
    x = 3.0 * torch.randn(3, 200, generator=torch.Generator().manual_seed(10))
    start, shuffles = (cudacpu.build(t, name=f"online_{i}.cu") for i, t in enumerate((source, out)))
    want, got = torch.zeros_like(x), torch.zeros_like(x)
    start.launch("online_softmax", 3, 256, 0, [x, want, 200])
    shuffles.launch("online_softmax", 3, 256, 0, [x, got, 200])
    assert not want.isnan().any() and not got.isnan().any()
    assert torch.allclose(got, torch.softmax(x, 1), rtol=1e-4, atol=1e-6)
    assert torch.allclose(got, want, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("step,why", [
    (RESCALE.replace("__expf(mb - mm);", "__expf(ma - mm);"),
     "are not sm of each side times an exponential of that side's mx"),
    ("sm[threadIdx.x] = sm[threadIdx.x] + sm[threadIdx.x + s] * __expf(mb - mm);",
     "are not sm of each side times an exponential"),
    (RESCALE.replace("__expf(mb - mm)", "__expf((mb - mm) * sm[threadIdx.x])"),
     "are not sm of each side times an exponential"),
    (RESCALE.replace("+ sm[", "- sm["), "sm is not the sum of two exponentially rescaled terms"),
])
def test_a_pair_merge_other_than_the_log_sum_exp_is_refused(step: str, why: str) -> None:
    trees, refusals = R.reduction_trees(kir.parse(_online(**{RESCALE: step}), "cuda"))
    assert trees == [] and any(why in r.reason for r in refusals), [r.reason for r in refusals]


@pytest.mark.parametrize("local,why", [
    ("float mm = fminf(ma, mb);", "no array of the step is the maximum"),
    ("int mm = fmaxf(ma, mb);", "a local of the step is a int, not the slots' float"),
])
def test_a_minimum_or_a_narrowed_maximum_with_a_rescaled_sum_is_refused(local: str, why: str
                                                                         ) -> None:
    source = _online(**{"float mm = fmaxf(ma, mb);": local})
    trees, refusals = R.reduction_trees(kir.parse(source, "cuda"))
    assert trees == [] and any(why in r.reason for r in refusals), [r.reason for r in refusals]


def test_rules_that_hand_threads_other_elements_leave_pairs_started_at_an_infinity() -> None:
    _out, applied, refusals = _rule_output("rw_online_lse", "launch-threads", threads=128)
    assert applied == 0 and any("`float m = __int_as_float(0xff800000);` starts one of the "
                                "partials" in r for r in refusals), refusals
    fold = "float nm = fmaxf(m, v);"
    ctx = PassContext(facts={"arch": "sm_90", "block_threads": 128})
    finite = _apply_all_text("vectorize-global", _start("rw_online_softmax")[0].read_text(), ctx)
    infinite = _apply_all_text("vectorize-global", _online(**{
        "float m = -3.0e38f": "float m = -INFINITY"}), ctx)
    assert finite.count(fold) > 1  # the folding loop vectorized (and kept as the fallback)
    assert infinite.count(fold) == 1 and "uint4" in infinite  # the writing loop only


ATOMICS = r"""
extern "C" __global__ void k(const int* x, int* top, float* total, int n) {
  __shared__ int best[4];
  const int w = threadIdx.x / 32;
  if (threadIdx.x < 4) best[threadIdx.x] = -2147483647;
  __syncthreads();
  int mine = -2147483647;
  float sum = 0.f;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    mine = max(mine, x[i]);
    sum += (float)x[i];
  }
  EARLY
  atomicMax(&best[w & 3], mine);
  atomicAdd(total + blockIdx.x % 2, sum);
  __syncthreads();
  if (threadIdx.x < 4) atomicMax(top + blockIdx.x % 4, best[threadIdx.x]);
}
"""


def test_atomics_whole_warps_reach_are_made_once_per_warp() -> None:
    """`atomicMax` into a slot picked by the warp and `atomicAdd` into a global picked by the
    block take a shuffle fold first (under the run-time check of whole warps); the atomic
    under `threadIdx.x < 4` is left as it is (its lanes do not reach it together)."""
    source = ATOMICS.replace("EARLY", "")
    folds, refusals = atomic_folds(kir.parse(source, "cuda"))
    assert [(f.call, f.op, f.element) for f in folds] == [("atomicMax", "max", "int"),
                                                          ("atomicAdd", "sum", "float")]
    assert any("whole warps may not reach it together (threadIdx.x < 4)" in r.reason
               for r in refusals), [r.reason for r in refusals]
    out = _apply_all_text("warp-shuffle-reduce", source, PassContext(facts={"arch": "sm_90"}))
    assert out.count("__shfl_xor_sync") == 2 and out.count("& 31u) == 0) {") == 2
    ptx_for_sm90a(out)
    x = torch.randint(-1000, 1000, (3000,), generator=torch.Generator().manual_seed(11),
                      dtype=torch.int32)
    start, folded = (cudacpu.build(t, name=f"atomics_{i}.cu") for i, t in enumerate((source, out)))
    for block in (128, 96, 40):  # 40: not whole warps, the atomics as written
        outs = []
        for lib in (start, folded):
            top, total = torch.full((4,), -2**31, dtype=torch.int32), torch.zeros(2)
            lib.launch("k", 5, block, 0, [x, top, total, 3000])
            outs.append((top, total))
        assert torch.equal(outs[0][0], outs[1][0]), block
        assert torch.allclose(outs[0][1], outs[1][1], rtol=1e-5), block
        assert float(outs[1][1].sum()) == pytest.approx(float(x.sum()), rel=1e-5)


@pytest.mark.parametrize("early,why", [
    ("if (threadIdx.x % 3 == 0) return;", "return; under threadIdx.x % 3 == 0"),
    ("if (blockIdx.x == 7) return;", None),
    ("for (int r = 0; r < 3; ++r) { atomicAdd(total, sum); if (threadIdx.x == r) break; }",
     "break; under threadIdx.x == r"),
    ("for (int r = 0; r < 3; ++r) { atomicAdd(total, sum); if (blockIdx.x == r) break; }", None),
])
def test_an_early_exit_some_lanes_take_leaves_the_atomics(early: str, why: str | None) -> None:
    folds, refusals = atomic_folds(kir.parse(ATOMICS.replace("EARLY", early), "cuda"))
    if why is None:
        assert len(folds) == 2 + early.count("atomicAdd")
    else:  # an exit inside a loop leaves the atomics after the loop to whole warps
        assert len(folds) == (2 if "for" in early else 0)
        assert any(why in r.reason for r in refusals), [r.reason for r in refusals]


def test_only_a_thread_blocks_sync_is_a_barrier_of_a_tree() -> None:
    """A tile's `sync()` waits for 32 threads: a tree stepping with it is no block tree."""
    cu, host = _start("rw_cg_tree_rms")
    ir = kir.parse_file(cu)
    assert len(R.reduction_trees(R.Unit(ir))[0]) == 1
    tiled = cu.read_text().replace(
        "    const unsigned rank", "    cg::thread_block_tile<32> tile = cg::tiled_partition<32>(block);\n"
        "    const unsigned rank").replace("        block.sync();\n    }", "        tile.sync();\n    }")
    assert "tile.sync();" in tiled
    assert R.reduction_trees(kir.parse(tiled, "cuda"))[0] == []
    whole = kir.parse(tiled.replace("tile.sync();", "cg::sync(cg::this_thread_block());"), "cuda")
    barriers = {whole.text[whole.span_of(n).start:whole.span_of(n).end]: R._is_sync(whole, n)
                for n in range(len(whole)) if whole.grammar_type_of(n) == "expression_statement"
                and "sync" in whole.text[whole.span_of(n).start:whole.span_of(n).end]}
    assert barriers == {"block.sync();": True, "cg::sync(cg::this_thread_block());": True}
    assert not any(R._is_sync(ir2, n) for ir2 in [kir.parse(tiled, "cuda")] for n in range(len(ir2))
                   if ir2.grammar_type_of(n) == "expression_statement" and
                   ir2.text[ir2.span_of(n).start:ir2.span_of(n).end] == "tile.sync();")


@pytest.mark.parametrize("old,new,why", [
    ("if (BLOCK >= 256) { if (tid < 128)", "if (BLOCK >= 512) { if (tid < 128)",
     "the step of stride 128 runs where the extent BLOCK does not reach its partners"),
    ("    row_sumsq<256>(x, out, n);\n", "    row_sumsq<256>(x, out, n);\n    row_sumsq<512>(x, out, n);\n",
     "the unrolled tree's extent BLOCK is not a power of two up to 512 that the unit tells"),
    ("if (BLOCK >= 128) { if (tid < 64)", "if (OTHER >= 128) { if (tid < 64)",
     "the unrolled tree's steps are guarded by ['BLOCK', 'OTHER']"),
])
def test_unrolled_steps_under_guards_that_do_not_follow_the_extent_are_refused(
        old: str, new: str, why: str) -> None:
    text = _start("rw_classic_unrolled")[0].read_text()
    assert old in text
    text = "constexpr unsigned OTHER = 256;\n" + text.replace(old, new)
    trees, refusals = R.reduction_trees(kir.parse(text, "cuda"))
    assert trees == [] and any(why in r.reason for r in refusals), [r.reason for r in refusals]
