"""`row-cache` on row kernels written here in styles the repository's kernels do not use: the
row that several passes read is read once into shared memory, the output compiles with NVRTC
for sm_90a and, run on the CPU (`gate.cudacpu`), computes what the kernel as written computes
(odd row lengths, rows longer than the copy holds, misaligned rows after `vectorize-global`);
the de-optimization gives the kernel back; refusals say why."""
from __future__ import annotations

import re

import pytest
import torch

import kir
from nvrtc_helpers import ptx_for_sm90a
from passes import Applied, Skipped, get_pass
from passes.cuda.row_cache import RowPasses, row_passes

from test_cuda_role_rules import CTX, _apply_all, _gen, _lib

# fp16 softmax: warp-shuffle (xor) reductions, a stride kept in a local, the row's width a
# parameter named like a count, three passes (max, sum of exponentials, write)
HALF_SOFTMAX = r"""
#include <cuda_fp16.h>
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float warp_add(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__global__ void softmax_half(const __half* src, __half* dst, int count) {
  __shared__ float per_warp[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const int stride = blockDim.x;
  const __half* in_row = src + (long long)blockIdx.x * count;
  __half* out_row = dst + (long long)blockIdx.x * count;
  float best = __int_as_float(0xff800000);
  for (int j = threadIdx.x; j < count; j += stride) best = fmaxf(best, __half2float(in_row[j]));
  best = warp_max(best);
  if (lane == 0) per_warp[warp] = best;
  __syncthreads();
  best = per_warp[0];
  for (int w = 1; w < warps; ++w) best = fmaxf(best, per_warp[w]);
  __syncthreads();
  float acc = 0.f;
  for (int j = threadIdx.x; j < count; j += stride) acc += expf(__half2float(in_row[j]) - best);
  acc = warp_add(acc);
  if (lane == 0) per_warp[warp] = acc;
  __syncthreads();
  float total = 0.f;
  for (int w = 0; w < warps; ++w) total += per_warp[w];
  for (int j = threadIdx.x; j < count; j += stride)
    out_row[j] = __float2half(expf(__half2float(in_row[j]) - best) / total);
}
"""

# fp32 LayerNorm-style centring in a persistent kernel: a grid-stride loop over rows, the passes
# nested in it, `unsigned` loop variables, the bound held in a const local, a constant-size tree
PERSISTENT_CENTER = r"""
#define WIDTH 64
__global__ void center_rows(float* __restrict__ out, const float* __restrict__ in, unsigned rows,
                            unsigned dim) {
  __shared__ float partial[WIDTH];
  for (unsigned r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* p = in + (size_t)r * dim;
    const unsigned n = dim;
    float s = 0.f;
    for (unsigned k = threadIdx.x; k < n; k += blockDim.x) s += p[k];
    partial[threadIdx.x] = s;
    __syncthreads();
    for (unsigned h = WIDTH / 2; h > 0; h >>= 1) {
      if (threadIdx.x < h) partial[threadIdx.x] += partial[threadIdx.x + h];
      __syncthreads();
    }
    const float mean = partial[0] / n;
    __syncthreads();
    float q = 0.f;
    for (unsigned k = threadIdx.x; k < n; k += blockDim.x) { float d = p[k] - mean; q += d * d; }
    partial[threadIdx.x] = q;
    __syncthreads();
    for (unsigned h = WIDTH / 2; h > 0; h >>= 1) {
      if (threadIdx.x < h) partial[threadIdx.x] += partial[threadIdx.x + h];
      __syncthreads();
    }
    const float inv = rsqrtf(partial[0] / n + 1e-5f);
    __syncthreads();
    for (unsigned k = threadIdx.x; k < n; k += blockDim.x) out[(size_t)r * dim + k] = (p[k] - mean) * inv;
  }
}
"""


def _renamed(source: str) -> str:
    """Every name the kernels declare given another one (CUDA's own names and types stay)."""
    mine = sorted(set(re.findall(r"\b[a-z_]\w*\b", source)) & {
        "warp_max", "warp_add", "softmax_half", "src", "dst", "count", "per_warp", "lane", "warp",
        "warps", "stride", "in_row", "out_row", "best", "acc", "total", "j", "w", "o", "v"})
    table = {n: f"z{i}{n[::-1]}" for i, n in enumerate(mine)}
    return re.sub(r"\b[A-Za-z_]\w*\b", lambda m: table.get(m.group(0), m.group(0)), source)


def _half_softmax(lib, kernel: str, x: torch.Tensor, block: int) -> torch.Tensor:  # noqa: ANN001
    y = torch.zeros_like(x)
    lib.launch(kernel, x.shape[0], block, 0, [x, y, x.shape[1]])
    return y


def _centered(x: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.layer_norm(x, (x.shape[1],), eps=1e-5)


@pytest.mark.parametrize("rename", [False, True], ids=["as-written", "renamed"])
def test_a_softmax_row_is_read_once_and_computes_the_same(rename: bool) -> None:
    source = _renamed(HALF_SOFTMAX) if rename else HALF_SOFTMAX
    kernel = "softmax_half" if not rename else next(
        w for w in re.findall(r"\w+", source) if w.endswith("flah_xamtfos"))
    plans = row_passes(kir.parse(source, "cuda"), budget=1024)
    assert [type(p) for p in plans] == [RowPasses] and len(plans[0].loops) == 3
    assert plans[0].capacity == 512  # 1024 bytes of 2-byte elements
    out, results = _apply_all("row-cache", source, budget=1024)
    assert [type(r) for r in results] == [Applied]
    # the declaration, the copy (16 bytes per cp.async, the rest element by element), 3 passes
    assert out.count("kl_row0[") == 6 and out.count("cp.async.cg.shared.global") == 1
    ptx_for_sm90a(out)
    before, after = _lib(source, "softmax_half.cu"), _lib(out, "softmax_half_cached.cu")
    for cols in (37, 301, 512, 700):  # 700: longer than the copy holds, the passes as written
        x = (3 * torch.randn(3, cols, generator=_gen(cols))).half()
        want = _half_softmax(before, kernel, x, 64)
        got = _half_softmax(after, kernel, x, 64)
        assert torch.equal(got, want), cols
        assert torch.allclose(got.float(), torch.softmax(x.float(), 1), atol=2e-3)


def test_rows_of_a_persistent_kernel_with_the_rules_after_it() -> None:
    out, results = _apply_all("row-cache", PERSISTENT_CENTER, budget=2048)
    assert [type(r) for r in results] == [Applied]
    assert out.count("__syncthreads();") == PERSISTENT_CENTER.count("__syncthreads();") + 2
    both, vec = _apply_all("vectorize-global", out)
    # every pass at once (six: three on the copy, three as written), and the copy's own check
    assert isinstance(vec[0], Applied) and both.count("& 15ull) == 0") == 7
    trees, shuffles = _apply_all("warp-shuffle-reduce", both)
    assert sum(isinstance(r, Applied) for r in shuffles) == 2
    ptx_for_sm90a(trees)
    libs = [_lib(t, f"center_{i}.cu") for i, t in enumerate((PERSISTENT_CENTER, out, trees))]
    for dim in (1, 203, 512, 517, 900):  # 900 floats: more than the 2 KB copy holds
        x = torch.randn(7, dim, generator=_gen(dim))
        outs = []
        for lib in libs:
            y = torch.zeros_like(x)
            lib.launch("center_rows", 3, 64, 0, [y, x, 7, dim])  # 3 blocks walk 7 rows
            outs.append(y)
        assert torch.allclose(outs[0], _centered(x), atol=1e-4)
        assert torch.equal(outs[1], outs[0]), dim  # the same sums in the same order
        assert torch.allclose(outs[2], outs[0], atol=1e-5), dim


def test_the_de_optimization_gives_the_passes_back() -> None:
    p = get_pass("row-cache")()
    for source in (HALF_SOFTMAX, PERSISTENT_CENTER):
        ir = kir.parse(source, "cuda")
        site = next(s for s in p.sites(ir) if not s.present)
        cached = p.optimize(ir, site, CTX)
        assert isinstance(cached, Applied)
        present = [s for s in p.sites(cached.ir) if s.present]
        assert len(present) == 1 and not [s for s in p.sites(cached.ir) if not s.present]
        back = p.deoptimize(cached.ir, present[0], CTX)
        assert isinstance(back, Applied) and back.ir.text == source


def _refusal(source: str, **kw) -> str:  # noqa: ANN003
    plans = row_passes(kir.parse(source, "cuda"), **kw)
    assert len(plans) == 1 and isinstance(plans[0], Skipped), plans
    p = get_pass("row-cache").from_options(kw)
    assert [s for s in p.sites(kir.parse(source, "cuda")) if not s.present] == []
    return plans[0].reason


def test_refusals_say_why() -> None:
    inplace = HALF_SOFTMAX.replace("const __half* src", "__half* src").replace(
        "const __half* in_row", "__half* in_row").replace(
        "out_row[j] = __float2half", "in_row[j] = __float2half")
    assert _refusal(inplace).startswith("the kernel writes the row")
    between = PERSISTENT_CENTER.replace("float d = p[k] - mean;",
                                        "float d = p[k] - mean; out[(size_t)r * dim + k] = d;")
    assert _refusal(between).startswith("a global store runs between the passes")
    shifted = HALF_SOFTMAX.replace("acc += expf(__half2float(in_row[j])",
                                   "acc += expf(__half2float(in_row[j ^ 1])")
    assert "otherwise than at its loop variable" in _refusal(shifted)
    divergent = PERSISTENT_CENTER.replace("for (unsigned r = blockIdx.x; r < rows; r += gridDim.x)",
                                          "if (threadIdx.x < 48) for (unsigned r = blockIdx.x; "
                                          "r < rows; r += gridDim.x)")
    assert "differs between threads" in _refusal(divergent)
    early = HALF_SOFTMAX.replace("const int stride = blockDim.x;",
                                 "const int stride = blockDim.x;\n  if (threadIdx.x >= count) return;")
    assert "may return before the passes" in _refusal(early)
    full = PERSISTENT_CENTER.replace("__shared__ float partial[WIDTH];",
                                     "__shared__ float partial[WIDTH];\n  __shared__ float pad[12000];")
    assert _refusal(full).startswith("shared memory leaves room for")
    assert "leaves room for 128 elements" in _refusal(PERSISTENT_CENTER, budget=512)


# a row kept in shared memory by hand (no size check: rows of at most 2048), then scaled by the
# inverse of its largest magnitude
PLAIN_CACHE = r"""
__global__ void absmax_scale(const float* in, float* out, int n) {
  __shared__ float line[2048];
  __shared__ float red[256];
  const float* src = in + (size_t)blockIdx.x * n;
  for (int i = threadIdx.x; i < n; i += blockDim.x) line[i] = src[i];
  __syncthreads();
  float m = 0.f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) m = fmaxf(m, fabsf(line[i]));
  red[threadIdx.x] = m;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + s]);
    __syncthreads();
  }
  const float scale = red[0] > 0.f ? 1.f / red[0] : 0.f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) out[(size_t)blockIdx.x * n + i] = line[i] * scale;
}
"""


def test_a_row_cached_by_hand_is_walked_back_and_cached_again() -> None:
    p = get_pass("row-cache")()
    ir = kir.parse(PLAIN_CACHE, "cuda")
    present = [s for s in p.sites(ir) if s.present]
    assert len(present) == 1 and present[0].detail == {"array": "line", "reads": 2}
    back = p.deoptimize(ir, present[0], CTX)
    assert isinstance(back, Applied)
    assert "line" not in back.ir.text and back.ir.text.count("src[i]") == 2
    again = p.optimize(back.ir, next(s for s in p.sites(back.ir) if not s.present), CTX)
    assert isinstance(again, Applied)
    texts = (PLAIN_CACHE, back.ir.text, again.ir.text)
    for i, text in enumerate(texts):
        ptx_for_sm90a(text)
    libs = [_lib(t, f"absmax_{i}.cu") for i, t in enumerate(texts)]
    for n in (100, 333, 2048):
        x = torch.randn(4, n, generator=_gen(n))
        outs = []
        for lib in libs:
            y = torch.zeros_like(x)
            lib.launch("absmax_scale", 4, 256, 0, [x, y, n])
            outs.append(y)
        assert torch.allclose(outs[0], x / x.abs().amax(1, keepdim=True), atol=1e-6)
        assert torch.equal(outs[1], outs[0]) and torch.equal(outs[2], outs[0]), n
    # a read of the copy outside the passes keeps the role from being told: no site
    odd = PLAIN_CACHE.replace("const float scale = red[0]", "const float scale = line[0] * 0.f + red[0]")
    assert [s for s in p.sites(kir.parse(odd, "cuda")) if s.present] == []


@pytest.mark.gpu
def _extern_c(text: str) -> str:
    return text if 'extern "C"' in text else text.replace("__global__ void", 'extern "C" __global__ void')


def test_the_cached_rows_on_the_gpu() -> None:
    from experts import cudahost

    if not torch.cuda.is_available():
        pytest.skip("no GPU")
    cached, _ = _apply_all("row-cache", HALF_SOFTMAX)
    both, _ = _apply_all("vectorize-global", cached)
    g = torch.Generator("cuda").manual_seed(0)
    for text in (cached, both):
        # plain (unmangled) names for cuModuleGetFunction
        func = cudahost.get_function(cudahost.compile_source(_extern_c(text), name="softmax_half.cu"),
                                     "softmax_half")
        for cols in (301, 4096, 20000):  # 20000: longer than the copy holds
            x = (3 * torch.randn(5, cols, device="cuda", generator=g)).half()
            y = torch.zeros_like(x)
            cudahost.launch(func, 5, 256, 0, [x, y, cols])
            torch.cuda.synchronize()
            assert torch.allclose(y.float(), torch.softmax(x.float(), 1), atol=2e-3), cols
    warps, _ = _apply_all("vectorize-global", WARP_ROWS)
    func = cudahost.get_function(cudahost.compile_source(_extern_c(warps), name="warp_rows.cu"),
                                 "softmax_warp_rows")
    for n in (301, 4096):
        x = torch.randn(9, n, device="cuda", generator=g)
        y = torch.zeros_like(x)
        cudahost.launch(func, 3, 128, 0, [x, y, 9, n])
        torch.cuda.synchronize()
        assert torch.allclose(y, torch.softmax(x, 1), atol=1e-5), n


# no row pointer: every pass indexes the matrix at the row's offset plus its loop variable
FLAT_LOG_SOFTMAX = r"""
__global__ void log_softmax_flat(const float* logits, float* out, int vocab) {
  __shared__ float red[128];
  float hi = -3.0e38f;
  for (int v = threadIdx.x; v < vocab; v += blockDim.x) hi = fmaxf(hi, logits[(size_t)blockIdx.x * vocab + v]);
  red[threadIdx.x] = hi;
  __syncthreads();
  for (int s = blockDim.x >> 1; s > 0; s >>= 1) {
    if (threadIdx.x < s) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + s]);
    __syncthreads();
  }
  hi = red[0];
  __syncthreads();
  float z = 0.f;
  for (int v = threadIdx.x; v < vocab; v += blockDim.x) z += expf(logits[(size_t)blockIdx.x * vocab + v] - hi);
  red[threadIdx.x] = z;
  __syncthreads();
  for (int s = blockDim.x >> 1; s > 0; s >>= 1) {
    if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
    __syncthreads();
  }
  const float lse = hi + logf(red[0]);
  for (int v = threadIdx.x; v < vocab; v += blockDim.x)
    out[(size_t)blockIdx.x * vocab + v] = logits[(size_t)blockIdx.x * vocab + v] - lse;
}
"""


def test_passes_that_index_the_matrix_at_the_rows_offset() -> None:
    out, results = _apply_all("row-cache", FLAT_LOG_SOFTMAX, budget=2048)
    assert [type(r) for r in results] == [Applied]
    assert "kl_row0[v]" in out and out.count("logits[") == 2 + 3 + 1  # copy (2), passes as written
    ptx_for_sm90a(out)
    before, after = _lib(FLAT_LOG_SOFTMAX, "lsm.cu"), _lib(out, "lsm_cached.cu")
    for vocab in (77, 512, 513, 1000):  # 1000 floats: more than the 2 KB copy holds
        x = 3 * torch.randn(3, vocab, generator=_gen(vocab))
        want, got = torch.zeros_like(x), torch.zeros_like(x)
        before.launch("log_softmax_flat", 3, 128, 0, [x, want, vocab])
        after.launch("log_softmax_flat", 3, 128, 0, [x, got, vocab])
        assert torch.equal(got, want), vocab
        assert torch.allclose(got, torch.log_softmax(x, 1), atol=1e-4)
    second_pass = "z += expf(logits[(size_t)blockIdx.x * vocab + v]"
    for index, why in (("1 + v", "the passes read `logits` at different offsets"),
                       ("2 * v", "pass 2 uses `logits` otherwise than at its loop variable")):
        changed = FLAT_LOG_SOFTMAX.replace(second_pass, second_pass.replace("+ v]", f"+ {index}]"))
        assert _refusal(changed).startswith(why)
    # a read through a load intrinsic is read from the copy, a taken address is refused
    ldg = FLAT_LOG_SOFTMAX.replace(second_pass, "z += expf(__ldg(&logits[(size_t)blockIdx.x * vocab + v])")
    out, results = _apply_all("row-cache", ldg, budget=2048)
    assert [type(r) for r in results] == [Applied] and "expf(kl_row0[v] - hi)" in out
    x = torch.randn(2, 300, generator=_gen(5))
    want, got = torch.zeros_like(x), torch.zeros_like(x)
    before.launch("log_softmax_flat", 2, 128, 0, [x, want, 300])
    _lib(out, "lsm_ldg.cu").launch("log_softmax_flat", 2, 128, 0, [x, got, 300])
    assert torch.equal(got, want)
    taken = FLAT_LOG_SOFTMAX.replace(second_pass, "z += expf(*(&logits[(size_t)blockIdx.x * vocab + v])")
    assert _refusal(taken) == "pass 2 takes the address of an element of `logits`"


# one warp per row (several rows per block): lane-strided passes, xor-shuffle reductions
WARP_ROWS = r"""
__global__ void softmax_warp_rows(const float* __restrict__ x, float* __restrict__ y, int rows, int n) {
  const int lane = threadIdx.x & 31;
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= rows) return;
  const float* xr = x + (size_t)row * n;
  float m = -3.0e38f;
  for (int i = lane; i < n; i += 32) m = fmaxf(m, xr[i]);
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  float s = 0.f;
  for (int i = lane; i < n; i += 32) s += __expf(xr[i] - m);
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  for (int i = lane; i < n; i += 32) y[(size_t)row * n + i] = __expf(xr[i] - m) / s;
}
"""


def test_warp_strided_rows_move_sixteen_bytes_per_access() -> None:
    from passes.cuda.recognize import stride_loops

    assert [lp.kind for lp in stride_loops(kir.parse(WARP_ROWS, "cuda"))] == ["warp"] * 3
    out, results = _apply_all("vectorize-global", WARP_ROWS)
    assert [type(r) for r in results] == [Applied] and out.count("& 15ull) == 0") == 3
    ptx_for_sm90a(out)
    before, after = _lib(WARP_ROWS, "warp_rows.cu"), _lib(out, "warp_rows_vec.cu")
    for n in (29, 128, 301):  # 29 and 301: every other row misaligned, the loop as written
        x = 2 * torch.randn(7, n, generator=_gen(n))  # 7 rows: the last block has an idle warp
        want, got = torch.zeros_like(x), torch.zeros_like(x)
        before.launch("softmax_warp_rows", 2, 128, 0, [x, want, 7, n])
        after.launch("softmax_warp_rows", 2, 128, 0, [x, got, 7, n])
        assert torch.allclose(got, want, atol=1e-6) and torch.allclose(got, torch.softmax(x, 1), atol=1e-5)
    # a row pointer that differs between the lanes of a warp is not read 16 bytes at a time
    skewed = WARP_ROWS.replace("x + (size_t)row * n;", "x + (size_t)row * n + lane % 3;")
    sites = [s.detail for s in get_pass("vectorize-global")().sites(kir.parse(skewed, "cuda"))]
    assert sites == [{"loop": "warp", "pointers": ["y"], "lanes": 4}]


# the row read through a float4 view (the user vectorized the passes themselves)
RMS_FLOAT4 = r"""
__global__ void rms4(const float* __restrict__ x, float* __restrict__ y, int n, float eps) {
  __shared__ float red[32];
  const float4* xr = reinterpret_cast<const float4*>(x + (size_t)blockIdx.x * n);
  float4* yr = reinterpret_cast<float4*>(y + (size_t)blockIdx.x * n);
  const int n4 = n / 4;
  float ss = 0.f;
  for (int i = threadIdx.x; i < n4; i += blockDim.x) {
    float4 v = xr[i];
    ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
  }
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = ss;
  __syncthreads();
  float t = 0.f;
  for (int w = 0; w < (blockDim.x >> 5); ++w) t += red[w];
  const float r = rsqrtf(t / n + eps);
  for (int i = threadIdx.x; i < n4; i += blockDim.x) {
    float4 v = xr[i];
    v.x *= r; v.y *= r; v.z *= r; v.w *= r;
    yr[i] = v;
  }
}
"""


def test_a_row_read_through_a_vector_view_is_cached_by_vectors() -> None:
    out, results = _apply_all("row-cache", RMS_FLOAT4, budget=4096)
    assert [type(r) for r in results] == [Applied] and "float4 kl_row0[256]" in out
    ptx_for_sm90a(out)
    before, after = _lib(RMS_FLOAT4, "rms4.cu"), _lib(out, "rms4_cached.cu")
    for n in (1024, 2000):  # 2000 floats: 500 vectors, more than the copy's 256
        x = torch.randn(3, n, generator=_gen(n))
        want, got = torch.zeros_like(x), torch.zeros_like(x)
        before.launch("rms4", 3, 128, 0, [x, want, n, 1e-6])
        after.launch("rms4", 3, 128, 0, [x, got, n, 1e-6])
        assert torch.equal(got, want), n
        assert torch.allclose(got, x * torch.rsqrt(x.pow(2).mean(1, keepdim=True) + 1e-6), atol=1e-5)


def test_a_persistent_kernel_indexing_rows_by_its_loop_variable() -> None:
    flat = PERSISTENT_CENTER.replace("s += p[k];", "s += in[(size_t)r * dim + k];").replace(
        "float d = p[k] - mean;", "float d = in[(size_t)r * dim + k] - mean;").replace(
        "= (p[k] - mean) * inv;", "= (in[(size_t)r * dim + k] - mean) * inv;")
    assert "p[k]" not in flat
    # r changes between rows, never while the passes run: the copy is made again for each row
    out, results = _apply_all("row-cache", flat, budget=2048)
    assert [type(r) for r in results] == [Applied] and "in[(size_t)r * dim + (kl_i)]" in out
    before, after = _lib(flat, "center_flat.cu"), _lib(out, "center_flat_cached.cu")
    for dim in (203, 517, 900):
        x = torch.randn(7, dim, generator=_gen(dim))
        want, got = torch.zeros_like(x), torch.zeros_like(x)
        before.launch("center_rows", 3, 64, 0, [want, x, 7, dim])
        after.launch("center_rows", 3, 64, 0, [got, x, 7, dim])
        assert torch.equal(got, want), dim
    moved = flat.replace("const float mean = partial[0] / n;", "const float mean = partial[0] / n; r += 0;")
    assert _refusal(moved) == "the passes write `r`, which their header or the row's offset reads"
