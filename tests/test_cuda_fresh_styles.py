"""The CUDA rules on kernels written in styles the repository's own kernels do not use
(tests/data/cuda_fresh: each a folder with its `.cu`, its host module and its case): a
`while` loop halving the stride, a tree sized by a template parameter (unrolled, in dynamic
shared memory), trees over a pointer into dynamic shared memory, staging through `__ldg` with a
named zero, a GEMM indexed through macros and `__device__` helpers, vector loads scattered
lane by lane. Each rule that acts finds its site as the user wrote it (and renamed), its output
compiles with NVRTC for sm_90a and, run through the kernel's own host module on the CPU
(`gate.cudacpu`), matches the case's reference at its small, ragged shapes. What a rule cannot
rewrite soundly it refuses, and says why."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

import kir
from cuda_style_helpers import emulated_error, rule_output, start
from nvrtc_helpers import ptx_for_sm90a
from passes import Applied, PassContext, get_pass
from passes.cuda import recognize as R

from test_cuda_role_rules import CTX, _apply_all, _gen, _lib

torch = pytest.importorskip("torch")
cudacpu = pytest.importorskip("gate.cudacpu")

import gate  # noqa: E402

FRESH = Path(__file__).resolve().parent / "data" / "cuda_fresh"


@pytest.fixture(autouse=True)
def _no_nvrtc_in_the_host(monkeypatch: pytest.MonkeyPatch) -> None:
    # NVRTC compiles each output once below (ptx_for_sm90a); the emulated host need not again.
    monkeypatch.setenv("KLINEAGE_CUDACPU_NVRTC", "0")


# (kernel folder, rule, sites it acts at): each was refused or had no site before its role
# was told in the spelling the kernel uses
ACTS = [
    ("fr_while_absmax", "warp-shuffle-reduce", 1),  # `T s = n >> 1; while (s > 0) {...; s >>= 1;}`
    ("fr_tmpl_l2", "warp-shuffle-reduce", 1),  # extent a template parameter, `#pragma unroll`
    ("fr_dot_atomic", "warp-shuffle-reduce", 1),  # `unsigned` stride, `s >= 1`, atomicAdd after
    ("fr_softmax_dyn", "warp-shuffle-reduce", 2),  # over `float* red = smem + cols`
    ("fr_rms_bf162", "warp-shuffle-reduce", 1),
    ("fr_tmpl_l2", "row-cache", 1),  # passes in a `__device__` helper every thread calls alike
    ("fr_tmpl_l2", "vectorize-global", 1),  # stepping by the template's BLOCK = the launch's
    ("fr_dot_atomic", "vectorize-global", 1),  # `i += BS * gridDim.x`: a grid-stride loop
    ("fr_gemm_ldg", "cp-async-pipeline", 1),  # `c ? __ldg(&A[i]) : zero`, zero a named constant
    ("fr_gemm_ldg", "gemm-schedule", 1),
    ("fr_gemm_macros", "gemm-schedule", 1),  # tiles indexed through `__device__` helpers
    ("fr_gemm_macros", "mma-micro-kernel", 1),
]


@pytest.mark.parametrize("folder,rule,count", ACTS, ids=[f"{f}-{r}" for f, r, _ in ACTS])
def test_the_rule_acts_on_the_fresh_kernel_and_keeps_its_answer(folder: str, rule: str,
                                                                  count: int) -> None:
    out, applied, refusals = rule_output(FRESH / folder, rule)
    assert applied == count, refusals
    ptx = ptx_for_sm90a(out)
    marks = {"warp-shuffle-reduce": "shfl.sync.down", "cp-async-pipeline": "cp.async",
             "mma-micro-kernel": "mma.sync", "gemm-schedule": "mma.sync",
             "row-cache": "cp.async", "vectorize-global": ".v4."}
    assert marks[rule] in ptx
    err, tol = emulated_error(FRESH / folder, out)
    assert err <= tol, f"{rule} on {folder}: error {err:.3g} over {tol}"


def _renamed(text: str) -> str:
    """Every name the source declares given another one; CUDA's, C++'s and the math
    library's names (and any starting with `__`) stay."""
    keep = {"threadIdx", "blockIdx", "blockDim", "gridDim", "warpSize", "x", "y", "z", "w",
            "float", "int", "unsigned", "long", "const", "size_t", "for", "while", "if",
            "else", "return", "void", "include", "define", "pragma", "unroll", "template",
            "extern", "C", "h", "cuda_fp16", "cuda_bf16", "float2", "float4", "half", "half2",
            "reinterpret_cast", "make_float4", "fmaxf", "fabsf", "sqrtf", "rsqrtf", "max",
            "atomicAdd"}
    names = sorted({n for n in re.findall(r"\b[A-Za-z_]\w*\b", text)
                    if n not in keep and not n.startswith("__")})
    table = {n: f"u{i}_{n[::-1].lower()}" for i, n in enumerate(names)}
    code = re.sub(r"//[^\n]*|/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r"\b[A-Za-z_]\w*\b", lambda m: table.get(m.group(0), m.group(0)), code)


@pytest.mark.parametrize("rename", [False, True], ids=["as-written", "renamed"])
def test_roles_of_the_fresh_kernels_in_their_spelling(rename: bool) -> None:
    def roles(folder: str) -> dict:
        text = start(FRESH / folder)[0].read_text()
        return R.roles(kir.parse(_renamed(text) if rename else text, "cuda"))

    trees = {"fr_while_absmax": [("halving", 128, ["max"])],
             "fr_tmpl_l2": [("halving", 256, ["sum"])],  # the one instantiation's BLOCK
             "fr_dot_atomic": [("halving", 128, ["sum"])],
             "fr_softmax_dyn": [("halving", None, ["max"]), ("halving", None, ["sum"])]}
    for folder, want in trees.items():
        got = [(t["form"], t["extent_value"], [c["op"] for c in t["combines"]])
               for t in roles(folder)["reduction_trees"]]
        assert got == want, folder
    forms = {"fr_gemm_ldg": ["ternary", "ternary"], "fr_gemm_macros": ["temporary", "temporary"],
             "fr_gemm_bt_float4": ["ternary", "ternary"]}
    for folder, want in forms.items():
        assert [s["form"] for s in roles(folder)["stagings"]] == want, folder
    ldg = roles("fr_gemm_ldg")["stagings"]
    assert all(re.fullmatch(r"__float2bfloat16\(0\.0f\)", s["fill"]) for s in ldg)
    macro = roles("fr_gemm_macros")["stagings"][0]
    assert "[" in macro["src"] and "(" not in macro["src"].split("[")[0]  # the expansion
    micro = roles("fr_gemm_macros")["micro_kernels"]
    assert [(m["block_tile"], m["thread_tile"]) for m in micro] == [([64, 64, 16], [4, 4])]


# -- refusals --------------------------------------------------------------------------------
_TREE = r"""
extern "C" __global__ void k(const float* in, float* out) {
  __shared__ float sh[256];
  const int t = threadIdx.x;
  sh[t] = in[blockIdx.x * 256 + t];
  __syncthreads();
  BODY
  if (t == 0) out[blockIdx.x] = TAIL;
}
"""


def _tree(body: str, tail: str = "sh[0]") -> str:
    return _TREE.replace("BODY", body).replace("TAIL", tail)


REFUSED_TREES = {
    # a difference: the order of the combines decides the result
    "difference": (_tree("for (int s = 128; s > 0; s >>= 1) { if (t < s) sh[t] = sh[t] - sh[t + s]; "
                         "__syncthreads(); }"), "not a sum, max or min"),
    "average": (_tree("for (int s = 128; s > 0; s >>= 1) { if (t < s) sh[t] = 0.5f * (sh[t] + "
                      "sh[t + s]); __syncthreads(); }"), "not a sum, max or min"),
    "stride used after": (_tree("unsigned s = 128; while (s > 0) { if (t < s) sh[t] += sh[t + s]; "
                                "__syncthreads(); s >>= 1; }", "sh[0] + s"),
                          "the stride s is read outside the tree (out[blockIdx.x] = sh[0] + s;)"),
    "stride written twice": (_tree("int s = 128; while (s > 0) { if (t < s) { sh[t] += sh[t + s]; "
                                   "s -= 0; } __syncthreads(); s /= 2; }"),
                             "writes its stride s besides"),
    "slot 1 read after": (_tree("unsigned s = 128; while (s > 1) { if (t < s) sh[t] += sh[t + s]; "
                                "__syncthreads(); s >>= 1; }", "sh[0] + sh[1]"), "stops at"),
}


@pytest.mark.parametrize("name", sorted(REFUSED_TREES))
def test_trees_the_rule_cannot_rewrite_are_refused_with_a_reason(name: str) -> None:
    source, why = REFUSED_TREES[name]
    trees, refusals = R.reduction_trees(kir.parse(source, "cuda"))
    assert trees == []
    assert any(why in r.reason for r in refusals), [r.reason for r in refusals]
    p = get_pass("warp-shuffle-reduce")()
    assert [s for s in p.sites(kir.parse(source, "cuda")) if not s.present] == []


def test_loops_that_are_not_trees_are_no_site() -> None:
    scan = _tree("for (int o = 1; o < 256; o *= 2) { float v = t >= o ? sh[t - o] : 0.f; "
                 "__syncthreads(); sh[t] += v; __syncthreads(); }", "sh[255]")
    shrink = _tree("for (int s = 224; s > 0; s -= 32) { if (t < s) sh[t] += sh[t + 32]; "
                   "__syncthreads(); }")
    reassigned = _tree("float* r = sh; r = sh + 1; for (int s = 128; s > 0; s >>= 1) { "
                       "if (t < s) r[t] += r[t + s]; __syncthreads(); }")
    p = get_pass("warp-shuffle-reduce")()
    for source in (scan, shrink, reassigned):
        ir = kir.parse(source, "cuda")
        assert R.reduction_trees(ir)[0] == []
        assert [s for s in p.sites(ir) if not s.present] == []


TWO_BLOCKS = r"""
template <int BLOCK>
__device__ float block_sum(const float* x, int n) {
  __shared__ float part[BLOCK];
  float s = 0.f;
  for (int i = threadIdx.x; i < n; i += BLOCK) s += x[i];
  part[threadIdx.x] = s;
  __syncthreads();
#pragma unroll
  for (int h = BLOCK / 2; h > 0; h >>= 1) {
    if (threadIdx.x < h) part[threadIdx.x] += part[threadIdx.x + h];
    __syncthreads();
  }
  return part[0];
}
extern "C" __global__ void sums_128(const float* x, float* out, int n) {
  float v = block_sum<128>(x + (size_t)blockIdx.x * n, n);
  if (threadIdx.x == 0) out[blockIdx.x] = v;
}
extern "C" __global__ void sums_64(const float* x, float* out, int n) {
  float v = block_sum<64>(x + (size_t)blockIdx.x * n, n);
  if (threadIdx.x == 0) out[blockIdx.x] = v;
}
"""


def test_a_tree_sized_by_a_template_of_several_instantiations_checks_it_at_run_time() -> None:
    out, results = _apply_all("warp-shuffle-reduce", TWO_BLOCKS)
    assert [type(r) for r in results] == [Applied]
    assert "blockDim.x == (BLOCK) && ((BLOCK) & 31) == 0" in out
    ptx_for_sm90a(out)
    lib = _lib(out, "two_blocks.cu")
    x = torch.randn(3, 555, generator=_gen(21))
    for kernel, block in (("sums_128", 128), ("sums_64", 64)):
        got = torch.zeros(3)
        lib.launch(kernel, 3, block, 0, [x, got, 555])
        assert torch.allclose(got, x.sum(1), rtol=1e-5, atol=1e-4), (kernel, block)


STAGING = r"""
#define T 16
extern "C" __global__ void mm(const float* A, const float* B, float* C, int M, int N, int K) {
  __shared__ float As[T][T];
  __shared__ float Bs[T][T];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int row = blockIdx.y * T + ty, col = blockIdx.x * T + tx;
  FILL
  float acc = 0.f;
  for (int t = 0; t < K; t += T) {
    As[ty][tx] = AVALUE;
    Bs[ty][tx] = (t + ty < K && col < N) ? __ldg(&B[(t + ty) * N + col]) : 0.f;
    __syncthreads();
    for (int k = 0; k < T; ++k) acc += As[ty][k] * Bs[k][tx];
    __syncthreads();
  }
  if (row < M && col < N) C[row * N + col] = acc;
}
"""


def _staging(fill: str, value: str) -> str:
    return STAGING.replace("FILL", fill).replace("AVALUE", value)


def test_a_staging_that_is_not_a_plain_copy_or_fills_other_than_zero_is_refused() -> None:
    p = get_pass("cp-async-pipeline")()
    plain = _staging("const float nothing = 0.f;",
                     "(row < M && t + tx < K) ? __ldg(&A[row * K + t + tx]) : nothing")
    ones = _staging("const float one = 1.f;",
                    "(row < M && t + tx < K) ? __ldg(&A[row * K + t + tx]) : one")
    scaled = _staging("", "(row < M && t + tx < K) ? 2.f * A[row * K + t + tx] : 0.f")
    ir = kir.parse(plain, "cuda")
    assert [s["form"] for s in R.roles(ir)["stagings"]] == ["ternary", "ternary"]
    site = next(s for s in p.sites(ir) if not s.present)
    result = p.optimize(ir, site, PassContext(facts={"arch": "sm_90", "block_threads": 256}))
    assert isinstance(result, Applied), result
    ptx_for_sm90a(result.ir.text)
    lib = _lib(result.ir.text, "staging_ldg.cu")
    a, b = torch.randn(21, 35, generator=_gen(22)), torch.randn(35, 19, generator=_gen(23))
    c = torch.zeros(21, 19)
    lib.launch("mm", (2, 2), (16, 16), 0, [a, b, c, 21, 19, 35])
    assert torch.allclose(c, a @ b, atol=1e-4)

    ir = kir.parse(ones, "cuda")
    site = next(s for s in p.sites(ir) if not s.present)
    why = p.optimize(ir, site, CTX)
    assert not isinstance(why, Applied) and "fills 1.f, not zero" in why.reason
    ir = kir.parse(scaled, "cuda")
    roles = R.roles(ir)
    assert [s["array"] for s in roles["stagings"]] == ["Bs"]  # A is scaled: not a copy
    assert any("As" in r["reason"] or "2.f" in r["reason"] for r in roles["refusals"])
    results = [p.optimize(ir, s, CTX) for s in p.sites(ir) if not s.present]
    assert results and not any(isinstance(r, Applied) for r in results)


def test_an_index_helper_of_more_than_one_return_is_not_inlined() -> None:
    text = (FRESH / "fr_gemm_macros" / "hgemm_macros.cu").read_text()
    helper = "__device__ __forceinline__ int patch_row(int t) { return t / (BN / TN); }"
    assert helper in text
    text = text.replace(helper, "__device__ __forceinline__ int patch_row(int t) { "
                                "int r = t / (BN / TN); return r; }")
    _out, results = _apply_all("mma-micro-kernel", text)
    assert results and not any(isinstance(r, Applied) for r in results)
    assert any("a call of patch_row" in r.reason for r in results)


_ROWS = r"""
extern "C" __global__ void k(const float* in, float* out, int n) {
  __shared__ float sh[1024];
  int tid = threadIdx.x;
  float v = 0.f;
  for (int i = tid; i < n; i += blockDim.x) v += in[blockIdx.x * n + i];
  sh[tid] = v;
  __syncthreads();
  BODY
  if (tid == 0) out[blockIdx.x] = sh[0];
}
"""
SPELLINGS = {
    "slot copies in locals": "for (int s = blockDim.x / 2; s > 0; s >>= 1) { if (tid < s) { "
                             "float a = sh[tid]; float b = sh[tid + s]; sh[tid] = a + b; } "
                             "__syncthreads(); }",
    "a redundant bound": "for (int s = blockDim.x / 2; s > 0; s >>= 1) { if (tid < s && tid + s < "
                         "blockDim.x) sh[tid] += sh[tid + s]; __syncthreads(); }",
    "the block in a local": "const int nt = blockDim.x; for (int s = nt / 2; s > 0; s >>= 1) { "
                            "if (tid < s) sh[tid] += sh[tid + s]; __syncthreads(); }",
}


@pytest.mark.parametrize("name", sorted(SPELLINGS))
def test_tree_spellings_become_shuffles_that_keep_the_sums(name: str) -> None:
    source = _ROWS.replace("BODY", SPELLINGS[name])
    out, results = _apply_all("warp-shuffle-reduce", source)
    assert [type(r) for r in results] == [Applied], results
    ptx_for_sm90a(out)
    lib, start = _lib(out, "spelling.cu"), _lib(source, "spelling_start.cu")
    x = torch.randn(4, 300, generator=_gen(31))
    for block in (256, 64, 96):
        got, want = torch.zeros(4), torch.zeros(4)
        lib.launch("k", 4, block, 0, [x, got, 300])
        start.launch("k", 4, block, 0, [x, want, 300])
        if block == 96:  # not a power of two: the user's tree runs, with what it gives
            assert torch.equal(got, want), name
        else:
            assert torch.allclose(got, x.sum(1), rtol=1e-5, atol=1e-4), (name, block)


def test_a_bound_other_than_the_extent_is_refused() -> None:
    source = _ROWS.replace("BODY", "for (int s = blockDim.x / 2; s > 0; s >>= 1) { if (tid < s && "
                                   "tid + s < n) sh[tid] += sh[tid + s]; __syncthreads(); }")
    trees, refusals = R.reduction_trees(kir.parse(source, "cuda"))
    assert trees == [] and ["a bound other than the tree's extent" in r.reason
                            for r in refusals] == [True]


TEMPLATE_KERNEL = r"""
template <int BS>
__global__ void rowsum(const float* __restrict__ x, float* __restrict__ y, int n) {
  __shared__ float sh[BS];
  float s = 0.f;
  for (int i = threadIdx.x; i < n; i += BS) s += x[(size_t)blockIdx.x * n + i];
  sh[threadIdx.x] = s;
  __syncthreads();
  for (int k = BS / 2; k > 0; k >>= 1) {
    if (threadIdx.x < k) sh[threadIdx.x] += sh[threadIdx.x + k];
    __syncthreads();
  }
  if (threadIdx.x == 0) y[blockIdx.x] = sh[0];
}

void row_sums(const float* x, float* y, int m, int n) { rowsum<256><<<m, 256>>>(x, y, n); }
"""


def _instantiated(text: str) -> str:
    """The kernel as its one instantiation, callable by name (the host launch dropped)."""
    text = text.replace("template <int BS>\n__global__", 'constexpr int BS = 256;\nextern "C" __global__')
    return text[:text.index("void row_sums")]


def test_a_template_kernel_launched_with_chevrons_reads_its_instantiation() -> None:
    ir = kir.parse(TEMPLATE_KERNEL, "cuda")
    assert R.launch_block(ir).dims == (256, 1, 1)  # `rowsum<256><<<m, 256>>>`
    assert [s.kind for s in R.stride_loops(ir)] == ["block"]  # `i += BS`, BS = 256 = the block
    assert [(t.extent, t.extent_value) for t in R.reduction_trees(ir)[0]] == [("BS", 256)]
    x = torch.randn(3, 1001, generator=_gen(41))
    for rule in ("vectorize-global", "warp-shuffle-reduce"):
        out, results = _apply_all(rule, TEMPLATE_KERNEL)
        assert [type(r) for r in results] == [Applied], (rule, results)
        assert "blockDim.x ==" not in out  # the launch proves the block: no run-time check
        text = _instantiated(out)
        ptx_for_sm90a(text)
        got = torch.zeros(3)
        _lib(text, f"template_{rule}.cu").launch("rowsum", 3, 256, 0, [x, got, 1001])
        assert torch.allclose(got, x.sum(1), rtol=1e-5, atol=1e-4), rule


HELPER_ROWS = r"""
__device__ void scale_row(const float* src, float* dst, int n) {
  __shared__ float part[128];
  float s = 0.f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) s += src[i] * src[i];
  part[threadIdx.x] = s;
  __syncthreads();
  for (int h = 64; h > 0; h >>= 1) {
    if (threadIdx.x < h) part[threadIdx.x] += part[threadIdx.x + h];
    __syncthreads();
  }
  for (int i = threadIdx.x; i < n; i += blockDim.x) dst[i] = src[i] * part[0];
}
extern "C" __global__ void rows(const float* x, float* y, int n) {
  CALL
}
"""


def test_loops_of_a_helper_count_only_where_every_thread_calls_it_alike() -> None:
    alike = "scale_row(x + (size_t)blockIdx.x * n, y + (size_t)blockIdx.x * n, n);"
    branched = "if (threadIdx.x < 64) " + alike
    per_thread = "scale_row(x + (size_t)threadIdx.x * n, y + (size_t)blockIdx.x * n, n);"
    after_return = "if (blockIdx.x >= 4) return; " + alike
    kinds = {}
    for name, call in (("alike", alike), ("branched", branched), ("per thread", per_thread),
                       ("after a return", after_return)):
        ir = kir.parse(HELPER_ROWS.replace("CALL", call), "cuda")
        kinds[name] = [s.kind for s in R.stride_loops(ir)]
    assert kinds == {"alike": ["block", "block"], "branched": [], "per thread": [],
                     "after a return": []}
    out, results = _apply_all("row-cache", HELPER_ROWS.replace("CALL", alike))
    assert [type(r) for r in results] == [Applied]
    ptx_for_sm90a(out)
    x = torch.randn(3, 333, generator=_gen(51))
    got = torch.zeros_like(x)
    _lib(out, "helper_rows.cu").launch("rows", 3, 128, 0, [x, got, 333])
    assert torch.allclose(got, x * (x * x).sum(1, keepdim=True), rtol=1e-5, atol=1e-3)


PAIR_STAGED = r"""
#include <cuda_bf16.h>
extern "C" __global__ void pairs(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C,
                                 int M, int N, int K) {
  __shared__ float As[16][16];
  __shared__ float Bs[16][16];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int row = blockIdx.y * 16 + ty, col = blockIdx.x * 16 + tx;
  float acc = 0.f;
  for (int t = 0; t < K; t += 16) {
    if (tx < 8) {
      const PAIR p = *reinterpret_cast<const PAIR*>(&A[row * K + t + 2 * tx]);
      As[ty][2 * tx] = CONV(p.x);
      As[ty][2 * tx + 1] = CONV(p.y);
    }
    Bs[ty][tx] = __bfloat162float(B[(t + ty) * N + col]);
    __syncthreads();
    for (int k = 0; k < 16; ++k) acc += As[ty][k] * Bs[k][tx];
    __syncthreads();
  }
  C[row * N + col] = __float2bfloat16(acc);
}
"""


def test_fp32_tiles_filled_from_lanes_of_16_bit_pairs_take_tensor_cores() -> None:
    ctx = PassContext(facts={"arch": "sm_90", "block_threads": 256})
    p = get_pass("mma-micro-kernel")()
    packed = kir.parse(PAIR_STAGED.replace("PAIR", "uint2").replace("CONV", "float"), "cuda")
    why = [p.optimize(packed, s, ctx) for s in p.sites(packed) if not s.present]
    assert why and "lanes of p, a vector of bf16 elements read whole" in why[0].reason
    text = PAIR_STAGED.replace("PAIR", "__nv_bfloat162").replace("CONV", "__bfloat162float")
    ir = kir.parse(text, "cuda")
    result = p.optimize(ir, next(s for s in p.sites(ir) if not s.present), ctx)
    assert isinstance(result, Applied), result
    assert "mma.sync" in ptx_for_sm90a(result.ir.text)
    a = torch.randn(32, 64, generator=_gen(61)).bfloat16()
    b = torch.randn(64, 48, generator=_gen(62)).bfloat16()
    c = torch.zeros(32, 48, dtype=torch.bfloat16)
    _lib(result.ir.text, "pairs.cu").launch("pairs", (3, 2), (16, 16), 0, [a, b, c, 32, 48, 64])
    want = a.float() @ b.float()
    assert torch.allclose(c.float(), want, rtol=2e-2, atol=5e-2)
