"""`gemm-schedule`: users' tiled GEMM kernels (renamed, restyled: 2-D and flattened tiles, pointer
bumps, transposed operands, fp32 shared tiles of 16-bit data, explicit leading dimensions, alpha /
beta / bias / relu epilogues) are read in global terms and put on the persistent cp.async +
ldmatrix + mma.sync schedule; every output compiles with NVRTC for sm_90a and, on the CPU
emulator at ragged small shapes, matches torch; refusals say why."""
from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any, Callable

import pytest

import kir
from passes import PassContext, Skipped, get_pass
from nvrtc_helpers import ptx_for_sm90a

ROOT = Path(__file__).resolve().parents[1]
MICRO = ROOT / "tests" / "data" / "microkernels"
STYLES = ROOT / "bench" / "styles" / "cuda"
CTX = PassContext(facts={"arch": "sm_90"})

# A stored K x M (column-major A), flattened 16x16 tiles, fp16, renamed throughout
COLUMN_MAJOR_A = r"""
#include <cuda_fp16.h>
#define S 16
extern "C" __global__ void tn_gemm(const __half* at, const __half* b, __half* c, int rows,
                                   int cols, int depth) {
  __shared__ __half ta[S * S];
  __shared__ __half tb[S * S];
  int lx = threadIdx.x, ly = threadIdx.y;
  int m = blockIdx.y * S + ly, n = blockIdx.x * S + lx;
  float s = 0.f;
  for (int k0 = 0; k0 < depth; k0 += S) {
    __half v = __float2half(0.f);
    if (k0 + ly < depth && blockIdx.y * S + lx < rows)
      v = at[(size_t)(k0 + ly) * rows + blockIdx.y * S + lx];
    ta[ly * S + lx] = v;
    tb[ly * S + lx] = (k0 + ly < depth && n < cols) ? b[(size_t)(k0 + ly) * cols + n]
                                                    : __float2half(0.f);
    __syncthreads();
    for (int kk = 0; kk < S; ++kk) s += __half2float(ta[kk * S + ly]) * __half2float(tb[kk * S + lx]);
    __syncthreads();
  }
  if (m < rows && n < cols) c[(size_t)m * cols + n] = __float2half(s);
}
"""

# explicit leading dimensions, 64x64 tile on 128 threads, fmaf, alpha / beta / bias / relu
LEADING_DIMS = r"""
#include <cuda_bf16.h>
extern "C" __global__ void gemm_ld(int m, int n, int k, const __nv_bfloat16* A, int lda,
                                   const __nv_bfloat16* B, int ldb, float* C, int ldc,
                                   float alpha, float beta, const float* bias) {
  __shared__ __nv_bfloat16 As[64][16];
  __shared__ __nv_bfloat16 Bs[16][64];
  const int tid = threadIdx.x, tr = tid / 8, tc = tid % 8;
  const int bm = blockIdx.y * 64, bn = blockIdx.x * 64;
  float acc[4][8];
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 8; ++j) acc[i][j] = 0.f;
  for (int kb = 0; kb < k; kb += 16) {
    for (int e = tid; e < 64 * 16; e += 128) {
      int r = e / 16, q = e % 16;
      As[r][q] = (bm + r < m && kb + q < k) ? A[(size_t)(bm + r) * lda + kb + q] : __float2bfloat16(0.f);
    }
    for (int e = tid; e < 16 * 64; e += 128) {
      int r = e / 64, q = e % 64;
      Bs[r][q] = (kb + r < k && bn + q < n) ? B[(size_t)(kb + r) * ldb + bn + q] : __float2bfloat16(0.f);
    }
    __syncthreads();
    for (int kk = 0; kk < 16; ++kk)
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 8; ++j)
          acc[i][j] = fmaf(__bfloat162float(As[tr * 4 + i][kk]), __bfloat162float(Bs[kk][tc * 8 + j]), acc[i][j]);
    __syncthreads();
  }
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 8; ++j) {
      const int r = bm + tr * 4 + i, q = bn + tc * 8 + j;
      if (r < m && q < n) {
        const float v = alpha * acc[i][j] + beta * C[(size_t)r * ldc + q] + bias[q];
        C[(size_t)r * ldc + q] = v > 0.f ? v : 0.f;
      }
    }
}
"""


# 16-byte staging through float4 where a row chunk is whole, element copies at the edges
VECTOR_STAGING = r"""
#include <cuda_fp16.h>
extern "C" __global__ void hgemm_vec(const half* __restrict__ A, const half* __restrict__ B,
                                     half* __restrict__ C, int M, int N, int K) {
  __shared__ __align__(16) half sA[64][32];
  __shared__ __align__(16) half sB[32][64];
  const int t = threadIdx.x;
  const int bm = blockIdx.y * 64, bn = blockIdx.x * 64;
  const int ty = t / 8, tx = t % 8;
  float acc[4][8] = {};
  for (int k0 = 0; k0 < K; k0 += 32) {
    for (int c = t; c < 256; c += 128) {
      const int r = c / 4, col = (c % 4) * 8;
      if (bm + r < M && k0 + col + 8 <= K) {
        *reinterpret_cast<float4*>(&sA[r][col]) =
            *reinterpret_cast<const float4*>(&A[(size_t)(bm + r) * K + k0 + col]);
      } else {
        for (int e = 0; e < 8; ++e)
          sA[r][col + e] = (bm + r < M && k0 + col + e < K) ? A[(size_t)(bm + r) * K + k0 + col + e]
                                                           : __float2half(0.f);
      }
    }
    for (int c = t; c < 256; c += 128) {
      const int r = c / 8, col = (c % 8) * 8;
      float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
      if (k0 + r < K && bn + col + 8 <= N) {
        v = reinterpret_cast<const float4*>(B + (size_t)(k0 + r) * N + bn + col)[0];
        reinterpret_cast<float4*>(&sB[r][col])[0] = v;
      } else {
        for (int e = 0; e < 8; ++e)
          sB[r][col + e] = (k0 + r < K && bn + col + e < N) ? B[(size_t)(k0 + r) * N + bn + col + e]
                                                           : __float2half(0.f);
      }
    }
    __syncthreads();
    for (int kk = 0; kk < 32; ++kk)
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 8; ++j)
          acc[i][j] += __half2float(sA[ty * 4 + i][kk]) * __half2float(sB[kk][tx * 8 + j]);
    __syncthreads();
  }
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 8; ++j) {
      const int r = bm + ty * 4 + i, c = bn + tx * 8 + j;
      if (r < M && c < N) C[(size_t)r * N + c] = __float2half(acc[i][j]);
    }
}
"""


# a 1-D grid: blockIdx.x counts the output blocks row by row (or, with the two lines swapped,
# column by column); 64x32 tiles, 128 threads, each a 4x4 register tile
LINEAR_GRID = r"""
#include <cuda_bf16.h>
#define TM 64
#define TN 32
#define TK 16
extern "C" __global__ void mm_linear(const __nv_bfloat16* a, const __nv_bfloat16* b,
                                     __nv_bfloat16* c, int m, int n, int k) {
  __shared__ __nv_bfloat16 ta[TM][TK];
  __shared__ __nv_bfloat16 tb[TK][TN];
  const int tiles_n = (n + TN - 1) / TN;
  const int br = blockIdx.x / tiles_n, bc = blockIdx.x % tiles_n;
  const int r0 = br * TM, c0 = bc * TN;
  const int tid = threadIdx.x, tr = tid / 8, tc = tid % 8;
  float acc[4][4] = {};
  for (int k0 = 0; k0 < k; k0 += TK) {
    for (int e = tid; e < TM * TK; e += 128) {
      const int i = e / TK, j = e % TK;
      ta[i][j] = (r0 + i < m && k0 + j < k) ? a[(size_t)(r0 + i) * k + k0 + j] : __float2bfloat16(0.0f);
    }
    for (int e = tid; e < TK * TN; e += 128) {
      const int i = e / TN, j = e % TN;
      tb[i][j] = (k0 + i < k && c0 + j < n) ? b[(size_t)(k0 + i) * n + c0 + j] : __float2bfloat16(0.0f);
    }
    __syncthreads();
    for (int kk = 0; kk < TK; ++kk)
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j)
          acc[i][j] += __bfloat162float(ta[tr * 4 + i][kk]) * __bfloat162float(tb[kk][tc * 4 + j]);
    __syncthreads();
  }
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j)
      if (r0 + tr * 4 + i < m && c0 + tc * 4 + j < n)
        c[(size_t)(r0 + tr * 4 + i) * n + c0 + tc * 4 + j] = __float2bfloat16(acc[i][j]);
}
"""
LINEAR_GRID_COLUMNS = LINEAR_GRID.replace(
    "  const int tiles_n = (n + TN - 1) / TN;\n  const int br = blockIdx.x / tiles_n, bc = blockIdx.x % tiles_n;",
    "  const int tiles_m = (m + TM - 1) / TM;\n  const int br = blockIdx.x % tiles_m, bc = blockIdx.x / tiles_m;")


def _linear(lib: Any, m: int, n: int, k: int) -> tuple[Any, Any]:
    a, b = _ab(m, n, k, torch.bfloat16)
    c = torch.zeros(m, n, dtype=torch.bfloat16)
    lib.launch(lib.kernels[0], (_cdiv(m, 64) * _cdiv(n, 32), 1), 128, 0, [a, b, c, m, n, k])
    return c.float(), a.float() @ b.float()


def _stage16_tutorial() -> str:
    """The tutorial kernel after `passes.cuda.stage_vector` (16-byte staging copies where a
    chunk is whole and aligned, element copies elsewhere)."""
    from passes.cuda.stage_vector import vectorize_all

    text, _ = vectorize_all(kir.parse((MICRO / "blocktile_bf16.cu").read_text(), "cuda"), (256, 1))
    assert "reinterpret_cast<uint4*>" in text
    return text


def _embedded(path: Path) -> str:
    """The CUDA source a host module holds as a string (its device half)."""
    from gate.hostforms import device_source

    tree = ast.parse(path.read_text())
    text = next(n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)
                and isinstance(n.value, str) and "__global__" in n.value)
    return device_source(text)


def _rewrite(source: str, block: str, ctx: PassContext = CTX, wgmma: bool = False
             ) -> tuple[Any, Any]:
    ir = kir.parse(source, "cuda")
    rule = get_pass("gemm-schedule").from_options({"block": block, "wgmma": wgmma})
    sites = [s for s in rule.sites(ir) if not s.present]
    assert len(sites) == 1 and "refused" not in sites[0].detail, sites
    return sites[0], rule.optimize(ir, sites[0], ctx)


torch = pytest.importorskip("torch")


def _emulated(source: str) -> Any:
    library = pytest.importorskip("gate.cudacpu.library")
    try:
        return library.build(source)
    except library.BuildError as exc:  # pragma: no cover - the failure message is the point
        if "g++" in str(exc) and "not found" in str(exc):
            pytest.skip(str(exc))
        raise


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _ab(m: int, n: int, k: int, dtype: Any, bt: bool = False) -> tuple[Any, Any]:
    a = torch.randn(m, k).to(dtype)
    b = (torch.randn(n, k) if bt else torch.randn(k, n)).to(dtype)
    return a, b


def _blocktile(lib: Any, m: int, n: int, k: int) -> tuple[Any, Any]:
    a, b = _ab(m, n, k, torch.bfloat16)
    c = torch.randn(m, n).to(torch.bfloat16)
    want = 0.5 * (a.float() @ b.float()) + 2.0 * c.float()
    lib.launch(lib.kernels[0], (_cdiv(n, 128), _cdiv(m, 128)), 256, 0, [m, n, k, 0.5, a, b, 2.0, c])
    return c.float(), want


def _square(tile: int, block: Any, dtype: Any) -> Callable[..., tuple[Any, Any]]:
    def run(lib: Any, m: int, n: int, k: int) -> tuple[Any, Any]:
        a, b = _ab(m, n, k, dtype)
        c = torch.zeros(m, n, dtype=dtype)
        lib.launch(lib.kernels[0], (_cdiv(n, tile), _cdiv(m, tile)), block, 0, [a, b, c, m, n, k])
        return c.float(), a.float() @ b.float()
    return run


def _linear_bt(lib: Any, m: int, n: int, k: int) -> tuple[Any, Any]:
    x, w = _ab(m, n, k, torch.bfloat16, bt=True)
    y = torch.zeros(m, n, dtype=torch.bfloat16)
    lib.launch(lib.kernels[0], (_cdiv(n, 16), _cdiv(m, 16)), (16, 16), 0, [x, w, y, m, n, k])
    return y.float(), x.float() @ w.float().T


def _linear_relu(lib: Any, m: int, n: int, k: int) -> tuple[Any, Any]:
    x, w = _ab(m, n, k, torch.bfloat16, bt=True)
    bias = torch.randn(n)
    out = torch.zeros(m, n, dtype=torch.bfloat16)
    lib.launch(lib.kernels[0], (_cdiv(n, 128), _cdiv(m, 64)), 128, 0, [x, w, bias, out, m, n, k])
    return out.float(), torch.relu(x.float() @ w.float().T + bias)


def _column_major_a(lib: Any, m: int, n: int, k: int) -> tuple[Any, Any]:
    at = torch.randn(k, m).to(torch.float16)
    b = torch.randn(k, n).to(torch.float16)
    c = torch.zeros(m, n, dtype=torch.float16)
    lib.launch(lib.kernels[0], (_cdiv(n, 16), _cdiv(m, 16)), (16, 16), 0, [at, b, c, m, n, k])
    return c.float(), at.float().T @ b.float()


def _leading_dims(pad: int) -> Callable[..., tuple[Any, Any]]:
    def run(lib: Any, m: int, n: int, k: int) -> tuple[Any, Any]:
        lda, ldb, ldc = k + pad, n + pad, n + 2 * pad
        a = torch.randn(m, lda).to(torch.bfloat16)
        b = torch.randn(k, ldb).to(torch.bfloat16)
        c = torch.randn(m, ldc)
        bias = torch.randn(n)
        want = c.clone()
        want[:, :n] = torch.relu(0.5 * (a[:, :k].float() @ b[:, :n].float()) + 2.0 * c[:, :n] + bias)
        lib.launch(lib.kernels[0], (_cdiv(n, 64), _cdiv(m, 64)), 128, 0,
                   [m, n, k, a, lda, b, ldb, c, ldc, 0.5, 2.0, bias])
        return c, want
    return run


CASES: dict[str, tuple[Callable[[], str], str, Callable[..., tuple[Any, Any]], float]] = {
    "tutorial 2-D blocktiling, pointer bumps, alpha/beta":
        (lambda: (MICRO / "blocktile_bf16.cu").read_text(), "256", _blocktile, 2e-2),
    "textbook 32x32 tiles, guarded temporaries, 1024 threads":
        (lambda: (STYLES / "cu_mm_smem_tiled" / "mm_tiled.cu").read_text(), "32x32",
         _square(32, (32, 32), torch.bfloat16), 2e-2),
    "transposed B (linear layer), padded fp32 tiles":
        (lambda: (STYLES / "cu_mm_bt" / "linear_bt.cu").read_text(), "16x16", _linear_bt, 2e-2),
    "fp32 shared tiles, A transposed in shared memory, load_inline":
        (lambda: _embedded(STYLES / "cu_mm_reg2d" / "mm_reg2d.py"), "256",
         _square(128, 256, torch.bfloat16), 2e-2),
    "1-D register blocking, CuPy RawKernel, 512 threads":
        (lambda: _embedded(STYLES / "cu_mm_reg1d" / "mm_reg1d.py"), "512",
         _square(64, 512, torch.float16), 4e-3),
    "column-major A, flattened tiles":
        (lambda: COLUMN_MAJOR_A, "16x16", _column_major_a, 4e-3),
    "explicit leading dimensions (16-byte rows), bias + relu":
        (lambda: LEADING_DIMS, "128", _leading_dims(8), 2e-2),
    "explicit leading dimensions (unaligned rows: element copies)":
        (lambda: LEADING_DIMS, "128", _leading_dims(3), 2e-2),
    "16-byte vector staging (float4) with element copies at the edges":
        (lambda: VECTOR_STAGING, "128", _square(64, 128, torch.float16), 4e-3),
    "tutorial after 16-byte staging (stage_vector)":
        (_stage16_tutorial, "256", _blocktile, 2e-2),
    "linear layer x @ w^T + bias, relu, 64x128 tiles":
        (lambda: (MICRO / "nt_bias_relu_bf16.cu").read_text(), "128", _linear_relu, 2e-2),
    "1-D grid counting blocks row-major":
        (lambda: LINEAR_GRID, "128", _linear, 2e-2),
    "1-D grid counting blocks column-major":
        (lambda: LINEAR_GRID_COLUMNS, "128", _linear, 2e-2),
}


@pytest.mark.parametrize("name", list(CASES))
def test_the_rewrite_compiles_for_sm90a_and_matches_torch_on_the_emulator(name: str) -> None:
    source, block, run, tol = CASES[name]
    _, result = _rewrite(source(), block)
    assert result.ok, result
    text = result.ir.text
    ptx = ptx_for_sm90a(text)
    assert "mma.sync.aligned.m16n8k16" in ptx and "cp.async" in ptx and "ldmatrix" in ptx
    lib = _emulated(text)
    torch.manual_seed(0)
    # ragged in M, N and K: partial tiles, zero fill, several tiles per block for small user tiles
    for m, n, k in ((72, 136, 40), (130, 40, 45)):
        got, want = run(lib, m, n, k)
        assert torch.allclose(got, want, atol=tol * want.abs().max().item(), rtol=tol), \
            (m, n, k, (got - want).abs().max())


WGMMA_CASES = list(CASES)


@pytest.mark.parametrize("name", WGMMA_CASES)
def test_the_wgmma_form_compiles_for_sm90a_and_matches_torch_on_the_emulator(name: str) -> None:
    source, block, run, tol = CASES[name]
    _, result = _rewrite(source(), block, wgmma=True)
    assert result.ok, result
    text = result.ir.text
    ptx = ptx_for_sm90a(text)
    assert "wgmma.mma_async" in ptx and "cp.async" in ptx and "mma.sync" not in ptx
    lib = _emulated(text)
    torch.manual_seed(0)
    for m, n, k in ((72, 136, 40), (130, 40, 45)):
        got, want = run(lib, m, n, k)
        assert torch.allclose(got, want, atol=tol * want.abs().max().item(), rtol=tol), \
            (m, n, k, (got - want).abs().max())


@pytest.mark.parametrize("name", ["tutorial 2-D blocktiling, pointer bumps, alpha/beta",
                                  "transposed B (linear layer), padded fp32 tiles",
                                  "1-D register blocking, CuPy RawKernel, 512 threads"])
def test_the_wide_wgmma_form_matches_torch_on_the_emulator(name: str) -> None:
    source, block, run, tol = CASES[name]
    ir = kir.parse(source(), "cuda")
    rule = get_pass("gemm-schedule").from_options({"block": block, "wgmma": True, "wide": True})
    result = rule.optimize(ir, next(s for s in rule.sites(ir) if not s.present), CTX)
    assert result.ok, result
    assert "m64n256k16" in result.ir.text or "m64n128k16" in result.ir.text
    ptx_for_sm90a(result.ir.text)
    lib = _emulated(result.ir.text)
    torch.manual_seed(5)
    for m, n, k in ((72, 300, 40), (130, 136, 45)):
        got, want = run(lib, m, n, k)
        assert torch.allclose(got, want, atol=tol * want.abs().max().item(), rtol=tol), \
            (m, n, k, (got - want).abs().max())
    # the wide tile is a wgmma schedule only
    narrow = get_pass("gemm-schedule").from_options({"block": block, "wide": True})
    refused = narrow.optimize(ir, next(s for s in narrow.sites(ir) if not s.present), CTX)
    assert isinstance(refused, Skipped) and "wgmma schedule" in refused.reason


@pytest.mark.parametrize("name", ["tutorial 2-D blocktiling, pointer bumps, alpha/beta",
                                  "column-major A, flattened tiles"])
def test_sixteen_deep_slices_match_torch_on_the_emulator(name: str) -> None:
    source, block, run, tol = CASES[name]
    ir = kir.parse(source(), "cuda")
    rule = get_pass("gemm-schedule").from_options({"block": block, "bk": 16})
    site = next(s for s in rule.sites(ir) if not s.present)
    result = rule.optimize(ir, site, CTX)
    assert result.ok, result
    assert '"bk": 16' in result.ir.text
    lib = _emulated(result.ir.text)
    torch.manual_seed(6)
    for m, n, k in ((72, 136, 40), (130, 40, 45)):
        got, want = run(lib, m, n, k)
        assert torch.allclose(got, want, atol=tol * want.abs().max().item(), rtol=tol)
    from passes.roundtrip import roundtrip

    done = next(s for s in rule.sites(result.ir) if s.present)
    assert rule.deoptimize(result.ir, done, CTX).options == {"wgmma": False, "bk": 16}
    assert roundtrip(rule, result.ir, done, CTX).same
    wg = get_pass("gemm-schedule").from_options({"block": block, "bk": 16, "wgmma": True})
    refused = wg.optimize(ir, site, CTX)
    assert isinstance(refused, Skipped) and "32 deep" in refused.reason


@pytest.mark.parametrize("name", ["tutorial 2-D blocktiling, pointer bumps, alpha/beta",
                                  "column-major A, flattened tiles",
                                  "explicit leading dimensions (unaligned rows: element copies)"])
def test_overlapping_wgmma_k_steps_match_torch_on_the_emulator(name: str) -> None:
    source, block, run, tol = CASES[name]
    ir = kir.parse(source(), "cuda")
    rule = get_pass("gemm-schedule").from_options({"block": block, "wgmma": True, "overlap": True})
    site = next(s for s in rule.sites(ir) if not s.present)
    result = rule.optimize(ir, site, CTX)
    assert result.ok, result
    text = result.ir.text
    assert "wgmma.wait_group.sync.aligned 1;" in text and '"overlap": true' in text
    ptx_for_sm90a(text)
    lib = _emulated(text)
    torch.manual_seed(7)
    for m, n, k in ((72, 136, 136), (130, 40, 45)):
        got, want = run(lib, m, n, k)
        assert torch.allclose(got, want, atol=tol * want.abs().max().item(), rtol=tol)
    from passes.roundtrip import roundtrip

    done = next(s for s in rule.sites(result.ir) if s.present)
    assert roundtrip(rule, result.ir, done, CTX).same
    # two slots cannot hold one slice in flight, one loading and one multiplied
    wide = get_pass("gemm-schedule").from_options(
        {"block": block, "wgmma": True, "overlap": True, "wide": True})
    refused = wide.optimize(ir, site, CTX)
    assert isinstance(refused, Skipped)
    threads = 1
    for dim in block.split("x"):
        threads *= int(dim)
    assert ("three slots" if threads >= 256 else "warpgroups") in refused.reason


def test_the_wgmma_form_refuses_blocks_that_are_not_warpgroups() -> None:
    textbook = (STYLES / "cu_mm_smem_tiled" / "mm_tiled.cu").read_text()
    small = textbook.replace("#define TILE 32", "#define TILE 8")
    ir = kir.parse(small, "cuda")
    rule = get_pass("gemm-schedule").from_options({"block": "8x8", "wgmma": True})
    result = rule.optimize(ir, next(s for s in rule.sites(ir) if not s.present), CTX)
    assert isinstance(result, Skipped) and "1, 2, 4 or 8 warpgroups" in result.reason
    # eight warpgroups run the MMA on four of them; the wide tile would need all eight
    ir = kir.parse(textbook, "cuda")
    rule = get_pass("gemm-schedule").from_options({"block": "32x32", "wgmma": True})
    result = rule.optimize(ir, next(s for s in rule.sites(ir) if not s.present), CTX)
    assert result.ok and "if (kl_gs_warp < 16) {" in result.ir.text
    wide = get_pass("gemm-schedule").from_options({"block": "32x32", "wgmma": True, "wide": True})
    result = wide.optimize(ir, next(s for s in wide.sites(ir) if not s.present), CTX)
    assert isinstance(result, Skipped) and "2 or 4 warpgroups" in result.reason
    ir = kir.parse((MICRO / "blocktile_bf16.cu").read_text(), "cuda")
    rule = get_pass("gemm-schedule").from_options({"block": "256", "wgmma": True})
    result = rule.optimize(ir, next(s for s in rule.sites(ir) if not s.present),
                           PassContext(facts={"arch": "sm_80"}))
    assert isinstance(result, Skipped) and "sm_90a" in result.reason


def test_the_site_reports_the_global_meaning() -> None:
    site, _ = _rewrite(COLUMN_MAJOR_A, "16x16")
    assert site.detail["A"] == {"pointer": "at", "layout": "km", "ld": "rows", "bound": "rows",
                                "block_axis": "y"}
    assert site.detail["B"] == {"pointer": "b", "layout": "kn", "ld": "cols", "bound": "cols",
                                "block_axis": "x"}
    assert site.detail["K"] == "depth"
    site, _ = _rewrite(LEADING_DIMS, "128")
    assert (site.detail["A"]["ld"], site.detail["B"]["ld"], site.detail["K"]) == ("lda", "ldb", "k")
    site, _ = _rewrite((STYLES / "cu_mm_bt" / "linear_bt.cu").read_text(), "16x16")
    assert site.detail["B"]["layout"] == "nk" and site.detail["B"]["ld"] == "K"
    assert "grid" not in site.detail
    assert _rewrite(LINEAR_GRID, "128")[0].detail["grid"] == "row"
    assert _rewrite(LINEAR_GRID_COLUMNS, "128")[0].detail["grid"] == "col"


@pytest.mark.parametrize("wgmma", [False, True])
def test_a_staging_without_bounds_checks_takes_whole_tiles_of_the_launch(wgmma: bool) -> None:
    # the warp-tiled kernel checks no bounds: M and N are the launch's whole tiles (gridDim), K
    # the parameter whose whole steps the K loop makes
    from passes.roundtrip import roundtrip

    site, result = _rewrite((MICRO / "warptile_bf16.cu").read_text(), "128", wgmma=wgmma)
    assert (site.detail["A"]["bound"], site.detail["B"]["bound"], site.detail["K"]) == ("", "", "K")
    assert result.ok, result
    assert "(int)gridDim.y * 128" in result.ir.text
    ptx_for_sm90a(result.ir.text)
    lib = _emulated(result.ir.text)
    torch.manual_seed(8)
    m, n, k = 128, 256, 48
    a, b = _ab(m, n, k, torch.bfloat16)
    c = torch.randn(m, n)
    want = 0.5 * (a.float() @ b.float()) + 2.0 * c
    lib.launch(lib.kernels[0], (n // 128, m // 128), 128, 0, [m, n, k, 0.5, a, b, 2.0, c])
    assert torch.allclose(c, want, atol=1e-3 * want.abs().max().item(), rtol=1e-3)
    rule = get_pass("gemm-schedule").from_options({"block": "128", "wgmma": wgmma})
    done = next(s for s in rule.sites(result.ir) if s.present)
    assert roundtrip(rule, result.ir, done, CTX).same


def test_the_rewrite_equals_the_start_on_the_emulator() -> None:
    source = (MICRO / "blocktile_bf16.cu").read_text()
    _, result = _rewrite(source, "256")
    outputs = []
    for text in (source, result.ir.text):
        torch.manual_seed(1)
        outputs.append(_blocktile(_emulated(text), 130, 136, 48)[0])
    assert torch.allclose(outputs[0], outputs[1], atol=1e-2, rtol=1e-2)


def test_the_rewrite_is_deterministic_and_present_afterwards() -> None:
    source = (MICRO / "blocktile_bf16.cu").read_text()
    _, first = _rewrite(source, "256")
    _, second = _rewrite(source, "256")
    assert first.ir.text == second.ir.text
    again = get_pass("gemm-schedule").from_options({"block": "256"}).sites(first.ir)
    assert [s.present for s in again] == [True]


# ---------------------------------------------------------------------------------------------
# refusals


def _refusal(source: str, block: str = "", ctx: PassContext = CTX) -> str:
    ir = kir.parse(source, "cuda")
    rule = get_pass("gemm-schedule").from_options({"block": block})
    sites = [s for s in rule.sites(ir) if not s.present]
    assert sites, "the candidate should be found"
    if "refused" in sites[0].detail:
        return sites[0].detail["refused"]
    result = rule.optimize(ir, sites[0], ctx)
    assert isinstance(result, Skipped), result
    return result.reason


def test_refusals_say_why() -> None:
    blocktile = (MICRO / "blocktile_bf16.cu").read_text()
    # staging without bounds checks under a 1-D grid: the output's extent cannot be told
    unguarded = LINEAR_GRID.replace("(r0 + i < m && k0 + j < k) ? ", "").replace(
        " : __float2bfloat16(0.0f);\n    }\n    for", ";\n    }\n    for", 1)
    assert "r0 + i < m" not in unguarded
    assert "1-D grid" in _refusal(unguarded, "128")
    # a staging that computes with what it loads is not a copy of the operand
    scaled = blocktile.replace("v = A[(innerRowA + loadOffset) * K + innerColA];",
                               "v = __float2bfloat16(2.0f * __bfloat162float(A[(innerRowA + loadOffset) * K + innerColA]));")
    assert "computes with a loaded element" in _refusal(scaled, "256")
    # an early return would strand the other blocks of the persistent loop at a barrier
    early = blocktile.replace("  const int cRow = blockIdx.y;",
                              "  if (blockIdx.y * BM >= M) return;\n  const int cRow = blockIdx.y;")
    assert "returns early" in _refusal(early, "256")
    # the block size must be known: no host launch, no option, no __launch_bounds__
    assert "block size is not known" in _refusal(blocktile)
    # fp32 operands in global memory
    widened = (MICRO / "f32tiles_k8_fp16.cu").read_text() \
        .replace("const __half* A, const __half* B", "const float* A, const float* B") \
        .replace("__half2float(A[", "(A[").replace("__half2float(B[", "(B[")
    assert "bf16 or fp16 both expected" in _refusal(widened, "256")
    # two warps cannot share a 128x128 tile the way the schedule splits it
    small = (STYLES / "cu_mm_smem_tiled" / "mm_tiled.cu").read_text().replace(
        "#define TILE 32", "#define TILE 8")
    assert "not 4, 8, 16 or 32 warps" in _refusal(small, "8x8")
    assert "sm_80" in _refusal(blocktile, "256", PassContext(facts={"arch": "sm_75"}))


def test_a_kernel_that_is_no_gemm_has_no_site() -> None:
    rows = (STYLES / "cu_sum_tree" / "row_sum.cu").read_text()
    assert get_pass("gemm-schedule").from_options({"block": "256"}).sites(
        kir.parse(rows, "cuda")) == []
    # a naive GEMM (no shared tiles) is one: its K loop reads global memory
    naive = (STYLES / "cu_mm_naive" / "mm_naive.cu").read_text()
    [site] = get_pass("gemm-schedule").from_options({"block": "16x16"}).sites(
        kir.parse(naive, "cuda"))
    assert site.detail["block_tile"] == [16, 16, 1]


# ---------------------------------------------------------------------------------------------
# the device


@pytest.mark.gpu
def test_on_the_gpu_the_rewrite_is_correct_and_faster_than_the_start() -> None:
    if not torch.cuda.is_available():
        pytest.skip("no GPU")
    cudahost = pytest.importorskip("experts.cudahost")
    from triton.testing import do_bench

    source = (MICRO / "blocktile_bf16.cu").read_text()
    texts = [("start", source), ("mma", _rewrite(source, "256")[1].ir.text)]
    if torch.cuda.get_device_capability() == (9, 0):
        texts.append(("wgmma", _rewrite(source, "256", wgmma=True)[1].ir.text))
    stream = torch.cuda.current_stream()
    funcs = [cudahost.get_function(cudahost.compile_source(text, name=f"{tag}.cu"), "sgemm_blocktile")
             for tag, text in texts]

    def run(func: Any, a: Any, b: Any, c: Any) -> Any:
        m, k = a.shape
        n = b.shape[1]
        cudahost.launch(func, (_cdiv(n, 128), _cdiv(m, 128)), 256, 0, [m, n, k, 1.0, a, b, 0.0, c],
                        stream)
        return c

    for m, n, k in ((1024, 1024, 1024), (1000, 1032, 520), (999, 1001, 517)):
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        want = a.float() @ b.float()
        for func in funcs[1:]:
            got = run(func, a, b, torch.zeros(m, n, device="cuda", dtype=torch.bfloat16)).float()
            assert (got - want).abs().max() <= 2e-2 * want.abs().max()
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(4096, 4096, device="cuda", dtype=torch.bfloat16)
    start, *rewritten = (do_bench(lambda f=f: run(f, a, b, c), return_mode="median") for f in funcs)
    assert all(ms * 3 < start for ms in rewritten), (start, rewritten)


# ---------------------------------------------------------------------------------------------
# the de-optimization: a plain tiled kernel the rule reads back to the same output


@pytest.mark.parametrize("name,wgmma", [("tutorial 2-D blocktiling, pointer bumps, alpha/beta", False),
                                        ("1-D grid counting blocks column-major", True),
                                        ("transposed B (linear layer), padded fp32 tiles", True),
                                        ("column-major A, flattened tiles", False),
                                        ("explicit leading dimensions (16-byte rows), bias + relu", True)])
def test_the_de_optimization_is_a_plain_tiled_kernel_and_the_round_trip_is_exact(
        name: str, wgmma: bool) -> None:
    from passes.roundtrip import roundtrip

    source, block, run, tol = CASES[name]
    _, result = _rewrite(source(), block, wgmma=wgmma)
    rule = get_pass("gemm-schedule").from_options({"block": block, "wgmma": wgmma})
    site = next(s for s in rule.sites(result.ir) if s.present)
    back = rule.deoptimize(result.ir, site, CTX)
    assert back.ok, back
    plain = back.ir.text
    assert "kl_gs_" not in plain and "mma" not in plain and "cp.async" not in plain
    assert "__syncthreads();" in plain and "blockIdx" in plain
    trip = roundtrip(rule, result.ir, site, CTX)
    assert trip.same, trip.forward
    # the plain form computes the product too
    lib = _emulated(plain)
    torch.manual_seed(3)
    got, want = run(lib, 72, 136, 40)
    assert torch.allclose(got, want, atol=tol * want.abs().max().item(), rtol=tol)


def test_the_experts_in_the_rules_form_restore_and_match_torch() -> None:
    # experts/gemm/gemm_cuda_sched{,_wgmma}.cu: a tutorial GEMM (bf16 and fp16 kernels) in the
    # rule's two forms; each kernel de-optimizes to the plain form and back
    for path, wgmma in (("gemm_cuda_sched.cu", False), ("gemm_cuda_sched_wgmma.cu", True)):
        text = (ROOT / "experts" / "gemm" / path).read_text()
        ir = kir.parse(text, "cuda")
        rule = get_pass("gemm-schedule").from_options({"wgmma": wgmma})
        sites = [s for s in rule.sites(ir) if s.present]
        assert sorted(s.detail["kernel"] for s in sites) == ["gemm_sched_bf16", "gemm_sched_fp16"]
        from passes.roundtrip import roundtrip

        assert all(roundtrip(rule, ir, s, CTX).same for s in sites)
        lib = _emulated(text)
        torch.manual_seed(4)
        for kernel, dtype in (("gemm_sched_bf16", torch.bfloat16), ("gemm_sched_fp16", torch.float16)):
            m, n, k = 72, 136, 40
            a, b = _ab(m, n, k, dtype)
            c = torch.zeros(m, n, dtype=dtype)
            lib.launch(kernel, (_cdiv(n, 128), _cdiv(m, 128)), 256, 0, [a, b, c, m, n, k])
            want = a.float() @ b.float()
            assert (c.float() - want).abs().max() <= 2e-2 * want.abs().max()


# ---------------------------------------------------------------------------------------------
# the deep form: dynamic shared memory, the launch in the same source edited


def _inline_source(path: Path) -> str:
    """The whole CUDA source a load_inline host holds (the C++ wrapper with its launch too)."""
    tree = ast.parse(path.read_text())
    return next(n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)
                and isinstance(n.value, str) and "__global__" in n.value)


def _with_launch(source: str, block: str) -> str:
    """`source` with a C++ wrapper after it that launches its kernel with `<<<grid, block>>>`
    on the kernel's own parameters (a load_inline source's host half)."""
    ir = kir.parse(source, "cuda")
    kernel = next(n for n in ir.walk() if n.kind == "kernel")
    params = source[source.index("(", source.index(kernel.name + "(")):]
    params = params[:params.index(")") + 1]
    names = [p.split()[-1].lstrip("*") for p in params[1:-1].split(",")]
    dims = ", ".join(block.split("x"))
    return (source + f"\nvoid host_launch(dim3 grid, {params[1:-1]}) {{\n"
            f"  {kernel.name}<<<grid, dim3({dims})>>>({', '.join(names)});\n}}\n")


DEEP_CASES: dict[str, tuple[Callable[[], str], str, Callable[..., tuple[Any, Any]], float]] = {
    "load_inline ModelNew (fp32 shared tiles, A transposed in shared memory)":
        (lambda: _inline_source(STYLES / "cu_mm_reg2d" / "mm_reg2d.py"), "256",
         _square(128, 256, torch.bfloat16), 2e-2),
    "transposed B (K-major B), wrapper launch":
        (lambda: _with_launch((STYLES / "cu_mm_bt" / "linear_bt.cu").read_text(), "16x16"),
         "16x16", _linear_bt, 2e-2),
    "column-major A (MN-major A), wrapper launch":
        (lambda: _with_launch(COLUMN_MAJOR_A, "16x16"), "16x16", _column_major_a, 4e-3),
}


def _deep(source: str, options: dict[str, Any], ctx: PassContext = CTX) -> Any:
    ir = kir.parse(source, "cuda")
    rule = get_pass("gemm-schedule").from_options(options)
    site = next(s for s in rule.sites(ir) if not s.present)
    return rule.optimize(ir, site, ctx)


def _launched_on_the_emulator(text: str, run: Callable[..., tuple[Any, Any]], tol: float,
                              shapes: tuple[tuple[int, int, int], ...],
                              block: tuple[int, int, int] | None = None) -> None:
    """The device half of `text` on the emulator, launched with the dynamic shared memory its
    edited `<<<...>>>` passes, after the limit its host half raises (read by gate.hostforms),
    and with `block` where the edited launch changed the block."""
    from gate.hostforms import chevron_launches, device_source, dynamic_shared_limits

    launches = [c for calls in chevron_launches(text).values() for c in calls]
    limits = dynamic_shared_limits(text)
    assert launches and all(c.shared_bytes and c.shared_bytes > 48 * 1024 for c in launches)
    assert {c.kernel for c in launches} == set(limits)
    assert all(limits[c.kernel] == c.shared_bytes for c in launches)
    # the limit is raised before the launch in the same function, once (a static)
    for c in launches:
        raise_at = text.index(f"cudaFuncSetAttribute({c.kernel},")
        assert "static const" in text[text.rfind("\n", 0, raise_at):raise_at]
        assert raise_at < text.index(f"{c.kernel}<<<")
    lib = _emulated(device_source(text))
    kernel, nbytes = launches[0].kernel, launches[0].shared_bytes

    class Launching:
        kernels = [kernel]

        @staticmethod
        def launch(name: str, grid: Any, own: Any, shared: int, args: Any) -> None:
            assert shared == 0  # the case's launcher passes what the start's launch passed
            lib.launch(name, grid, block or own, nbytes, args)

    with pytest.raises(Exception, match="dynamic shared memory"):  # no opt-in: refused
        run(Launching, *shapes[0])
    lib.opt_in[kernel] = limits[kernel]
    torch.manual_seed(9)
    for m, n, k in shapes:
        got, want = run(Launching, m, n, k)
        assert torch.allclose(got, want, atol=tol * want.abs().max().item(), rtol=tol), \
            (m, n, k, (got - want).abs().max())


_INLINE, _KMAJOR_B, _MNMAJOR_A = DEEP_CASES


# every form on the load_inline kernel (K-major A, MN-major B); the other operand layouts of
# the 128-byte swizzle on the wgmma forms
@pytest.mark.parametrize("name,options", [
    (_INLINE, {"wgmma": True, "deep": True}),
    (_INLINE, {"wgmma": True, "deep": True, "wide": True}),
    (_INLINE, {"wgmma": True, "deep": True, "stages": 3}),
    (_INLINE, {"deep": True, "stages": 5}),
    (_KMAJOR_B, {"wgmma": True, "deep": True, "wide": True}),
    (_MNMAJOR_A, {"wgmma": True, "deep": True, "stages": 5}),
    (_KMAJOR_B, {"wgmma": True, "deep": True, "specialize": True}),
], ids=["wgmma", "wgmma-wide", "wgmma-3-slots", "mma-5-slots", "k-major-b-wide",
        "mn-major-a-5-slots", "k-major-b-specialized"])
def test_the_deep_form_edits_the_launch_and_matches_torch_on_the_emulator(
        name: str, options: dict[str, Any]) -> None:
    from gate.hostforms import device_source

    source, block, run, tol = DEEP_CASES[name]
    result = _deep(source(), {"block": block, **options})
    assert result.ok, result
    text = result.ir.text
    assert "extern __shared__" in text and '"deep": true' in text
    if options.get("wgmma"):
        ptx = ptx_for_sm90a(device_source(text))
        assert "wgmma.mma_async" in ptx and "wgmma.wait_group.sync.aligned 1;" in ptx
        assert "mma.sync" not in ptx
    else:
        cudahost = pytest.importorskip("experts.cudahost")
        ptx = cudahost.compile_source(device_source(text), name="deep.cu", arch="sm_80").ptx
        assert "mma.sync.aligned.m16n8k16" in ptx and "cp.async" in ptx
    _launched_on_the_emulator(text, run, tol, ((72, 136, 136), (130, 40, 45)))


@pytest.mark.parametrize("stages", [3, 4])
def test_specialized_warps_hand_the_slots_over_by_mbarriers_across_tiles(stages: int) -> None:
    from gate.hostforms import chevron_launches, device_source, dynamic_shared_limits
    from passes.roundtrip import roundtrip

    options = {"wgmma": True, "deep": True, "specialize": True, "stages": stages}
    result = _deep(_inline_source(STYLES / "cu_mm_reg2d" / "mm_reg2d.py"), options)
    assert result.ok, result
    text = result.ir.text
    ptx = ptx_for_sm90a(device_source(text))
    assert "mbarrier.try_wait.parity" in ptx and "m64n128k16" in ptx and "bar.sync" in ptx
    lib = _emulated(device_source(text))
    kernel = lib.kernels[0]
    nbytes = chevron_launches(text)["gemm_bf16"][0].shared_bytes
    lib.opt_in[kernel] = dynamic_shared_limits(text)[kernel]
    torch.manual_seed(11)
    # fewer blocks than tiles: each block takes several tiles, the barriers' phases run on
    for grid, (m, n, k) in (((1, 1), (130, 300, 200)), ((2, 1), (257, 140, 333))):
        a, b = _ab(m, n, k, torch.bfloat16)
        c = torch.zeros(m, n, dtype=torch.bfloat16)
        lib.launch(kernel, grid, 256, nbytes, [a, b, c, m, n, k])
        want = a.float() @ b.float()
        assert (c.float() - want).abs().max() <= 2e-2 * want.abs().max(), (grid, m, n, k)
    rule = get_pass("gemm-schedule").from_options(options)
    done = next(s for s in rule.sites(result.ir) if s.present)
    assert rule.deoptimize(result.ir, done, CTX).options == {**options, "overlap": True}
    assert roundtrip(rule, result.ir, done, CTX).same
    # a block the table does not split into fillers and MMA warpgroups (1024 threads) runs as
    # virtual threads of the form's own block; the form outside the deep wgmma schedule
    big = _deep(LAUNCHES, options)
    assert big.ok and "dim3(384, 1, 1)" in big.ir.text and '"virtual": 384' in big.ir.text
    alone = _deep(LAUNCHES, {"deep": True, "specialize": True})
    assert isinstance(alone, Skipped) and "deep wgmma schedule" in alone.reason


def _launched_block(text: str, kernel: str) -> tuple[int, int, int]:
    """The block of the (edited) `<<<grid, dim3(x, y, z), ...>>>` launches of `kernel`."""
    from gate.hostforms import _split_top

    found = set()
    for m in re.finditer(rf"\b{kernel}<<<(.*?)>>>", text, re.S):
        block = re.fullmatch(r"dim3\((\d+), (\d+), (\d+)\)", _split_top(m.group(1))[1].strip())
        assert block is not None, m.group(1)
        found.add(tuple(int(v) for v in block.groups()))
    assert len(found) == 1, found
    return found.pop()


PRODUCER_CASES = {
    **DEEP_CASES,
    "tutorial 2-D blocktiling (alpha / beta, pointer bumps), wrapper launch":
        (lambda: _with_launch((MICRO / "blocktile_bf16.cu").read_text(), "256"), "256",
         _blocktile, 2e-2),
}
_TUTORIAL = list(PRODUCER_CASES)[-1]


# the producer form: the launch's block grows by a warpgroup that fills the ring
@pytest.mark.parametrize("name,options,grown", [
    (_TUTORIAL, {"wide": True}, (384, 1, 1)),
    (_INLINE, {"wide": True}, (384, 1, 1)),
    (_INLINE, {}, (384, 1, 1)),
    (_KMAJOR_B, {"wide": True}, (16, 24, 1)),
    (_MNMAJOR_A, {"stages": 3}, (16, 24, 1)),
], ids=["tutorial-wide", "wide", "128x128", "k-major-b-wide-2d-block", "mn-major-a-3-slots"])
def test_a_producer_warpgroup_grows_the_launch_and_matches_torch_on_the_emulator(
        name: str, options: dict[str, Any], grown: tuple[int, int, int]) -> None:
    from gate.hostforms import device_source

    source, block, run, tol = PRODUCER_CASES[name]
    options = {"wgmma": True, "deep": True, "producer": True, **options}
    result = _deep(source(), {"block": block, **options})
    assert result.ok, result
    text = result.ir.text
    kernel = next(n.name for n in kir.parse(text, "cuda").walk() if n.kind == "kernel")
    assert _launched_block(text, kernel) == grown
    assert f"__launch_bounds__({grown[0] * grown[1]}, 1)" in text
    ptx = ptx_for_sm90a(device_source(text))
    for needed in ("setmaxnreg.dec.sync.aligned.u32 40", "setmaxnreg.inc.sync.aligned.u32",
                   "cp.async.mbarrier.arrive.noinc.shared::cta.b64", "mbarrier.try_wait.parity",
                   "wgmma.mma_async"):
        assert needed in ptx, needed
    # the multiplying threads pass the exchange's barriers where a thread holds several outputs;
    # one output a thread (the 16x16 blocks): the body runs once per cell of the fragments
    cells = grown == (16, 24, 1)
    assert ('"cells": true' in text) == cells
    assert (f"bar.sync 1, {grown[0] * grown[1] - 128}" in ptx) != cells
    _launched_on_the_emulator(text, run, tol, ((72, 136, 136), (130, 40, 45)), grown)


def test_the_producer_runs_ahead_across_tiles_and_its_breakages_are_caught() -> None:
    from gate.cudacpu.library import EmulationError
    from gate.hostforms import chevron_launches, device_source, dynamic_shared_limits
    from passes.roundtrip import roundtrip

    source = _inline_source(STYLES / "cu_mm_reg2d" / "mm_reg2d.py")
    options = {"wgmma": True, "deep": True, "wide": True, "producer": True}
    result = _deep(source, {"block": "256", **options})
    assert result.ok, result
    text = result.ir.text
    nbytes = chevron_launches(text)["gemm_bf16"][0].shared_bytes
    # four 48 KiB slots, then the exchange's 64 rows of 132 floats, then the alignment slack
    assert nbytes == 4 * 49152 + 64 * 132 * 4 + 1024

    def launched(device: str, block: int, shapes: Any) -> None:
        lib = _emulated(device)
        kernel = lib.kernels[0]
        lib.opt_in[kernel] = dynamic_shared_limits(text)[kernel]
        torch.manual_seed(13)
        for grid, (m, n, k) in shapes:
            a, b = _ab(m, n, k, torch.bfloat16)
            c = torch.zeros(m, n, dtype=torch.bfloat16)
            lib.launch(kernel, grid, block, nbytes, [a, b, c, m, n, k])
            want = a.float() @ b.float()
            assert (c.float() - want).abs().max() <= 2e-2 * want.abs().max(), (grid, m, n, k)

    # fewer blocks than tiles, K steps not a multiple of the slots: the producer fills the next
    # tile's slices while the MMA's warpgroups write this one, the barriers' phases run on;
    # an odd K takes the element copies (the producer arrives itself)
    shapes = (((1, 1), (130, 300, 333)), ((2, 1), (257, 140, 200)), ((1, 1), (140, 260, 91)))
    launched(device_source(text), 384, shapes)
    # launched with its own block (no producer warpgroup), nothing fills the ring: caught
    with pytest.raises(EmulationError, match="deadlock"):
        launched(device_source(text), 256, shapes[:1])
    # multiplying a slot before it is full: caught
    wait = "kl_gs_bar_wait(kl_gs_bar + kl_gs_slot, (kl_gs_f / 4) & 1);"
    assert text.count(wait) == 1
    with pytest.raises((AssertionError, EmulationError)):
        launched(device_source(text.replace(wait, "")), 384, shapes[:1])
    # the de-optimization gives the launch its own block back; the rule gives this output again
    rule = get_pass("gemm-schedule").from_options(options)
    done = next(s for s in rule.sites(result.ir) if s.present)
    back = rule.deoptimize(result.ir, done, CTX)
    assert back.ok and back.options == {**options, "overlap": True, "stages": 4}
    assert "<<<grid, block>>>" in back.ir.text and "kl_gs_" not in back.ir.text
    assert roundtrip(rule, result.ir, done, CTX).same


def test_the_producer_form_refuses_what_it_cannot_grow() -> None:
    source = _inline_source(STYLES / "cu_mm_reg2d" / "mm_reg2d.py")
    producer = {"wgmma": True, "deep": True, "producer": True}
    # a block of 1024 threads has no room for another warpgroup: the form launches its own
    # block, the launch's threads virtual
    big = _deep(LAUNCHES, producer)
    assert big.ok and "dim3(384, 1, 1)" in big.ir.text and '"virtual": 384' in big.ir.text
    # the form belongs to the deep wgmma schedule, apart from the specialized warps
    assert "deep wgmma schedule" in _deep(source, {"block": "256", "producer": True}).reason
    both = _deep(source, {"block": "256", **producer, "specialize": True})
    assert isinstance(both, Skipped) and "two forms" in both.reason
    # the kernel's own bounds fix its block where they ask for more than the launch's size
    for bounds in ("256, 2", "512"):
        bounded = source.replace("__global__ void gemm_reg2d_kernel",
                                 f"__global__ void __launch_bounds__({bounds}) gemm_reg2d_kernel")
        refused = _deep(bounded, producer)
        assert isinstance(refused, Skipped) and "__launch_bounds__" in refused.reason, bounds
    # bounds that say only the launch's block size are written for the grown block
    for bounds in ("256", "256, 1"):
        bounded = source.replace("__global__ void gemm_reg2d_kernel",
                                 f"__global__ void __launch_bounds__({bounds}) gemm_reg2d_kernel")
        grown = _deep(bounded, producer)
        assert grown.ok, getattr(grown, "reason", "")
        assert grown.ir.text.count("__launch_bounds__") == 1
        assert "__launch_bounds__(384, 1) gemm_reg2d_kernel" in grown.ir.text
        assert "dim3(384, 1, 1)" in grown.ir.text
        from gate.hostforms import device_source

        ptx_for_sm90a(device_source(grown.ir.text))
    # a block barrier in the body the rewrite keeps would wait for the added warpgroup
    synced = source.replace("    for (int i = 0; i < TM; ++i) {\n        int gm",
                            "    __syncthreads();\n    for (int i = 0; i < TM; ++i) {\n        int gm")
    assert synced != source
    refused = _deep(synced, {"block": "256", **producer})
    assert isinstance(refused, Skipped) and "block barrier" in refused.reason


def test_the_producer_moves_no_more_registers_than_the_block_holds() -> None:
    from passes.cuda.gemm_schedule import PRODUCER, PRODUCER_REGS, Schedule

    def moved(own: int) -> tuple[int, int, bool]:
        s = Schedule(own + PRODUCER, 1, 1, 4, 1, 1, 1, True, producer=True)
        # what the multiplying threads take is at most what the added warpgroup gives back
        assert (s.consumer_regs - s.launch_regs) * own <= \
            (s.launch_regs - PRODUCER_REGS) * PRODUCER or not s.moves_registers
        return s.launch_regs, s.consumer_regs, s.moves_registers
    assert moved(256) == (168, 232, True)
    assert moved(512) == (96, 104, True)
    assert moved(128)[2] is False  # 248 registers a thread already: none moved


def test_the_deep_form_asks_a_host_module_of_its_own_for_the_launch_and_refuses_without_one(
        ) -> None:
    from kir import hostlaunch

    # NVRTC + cudahost host beside the kernel: the .cu asks the host for the launch
    start = STYLES / "cu_mm_smem_tiled" / "mm_tiled.cu"
    ir = kir.parse(start.read_text(), "cuda", path=str(start))
    rule = get_pass("gemm-schedule").from_options({"wgmma": True, "deep": True})
    site = next(s for s in rule.sites(ir) if not s.present)
    result = rule.optimize(ir, site, CTX)
    assert result.ok, result
    [asked] = hostlaunch.directives(result.ir.text)
    assert asked.kernel == "matmul_tiled" and asked.shared_bytes > 48 * 1024
    assert asked.block_from == (32, 32, 1) and asked.block is None
    # a CuPy RawKernel's source with no host beside it: refused, the static form still applies
    cupy = _embedded(STYLES / "cu_mm_reg1d" / "mm_reg1d.py")
    refused = _deep(cupy, {"block": "512", "deep": True})
    assert isinstance(refused, Skipped) and "not launched in this source" in refused.reason
    assert "no Python host module" in refused.reason and "\n" not in refused.reason
    assert _deep(cupy, {"block": "512"}).ok


LAUNCHES = r"""
#include <cuda_bf16.h>
__global__ void mm(const __nv_bfloat16* a, const __nv_bfloat16* b, __nv_bfloat16* c, int m, int n,
                   int k) {
  __shared__ __nv_bfloat16 ta[32][32];
  __shared__ __nv_bfloat16 tb[32][32];
  const int r = threadIdx.y, q = threadIdx.x;
  const int row = blockIdx.y * 32 + r, col = blockIdx.x * 32 + q;
  float s = 0.f;
  for (int k0 = 0; k0 < k; k0 += 32) {
    ta[r][q] = (row < m && k0 + q < k) ? a[(size_t)row * k + k0 + q] : __float2bfloat16(0.f);
    tb[r][q] = (k0 + r < k && col < n) ? b[(size_t)(k0 + r) * n + col] : __float2bfloat16(0.f);
    __syncthreads();
    for (int kk = 0; kk < 32; ++kk) s += __bfloat162float(ta[r][kk]) * __bfloat162float(tb[kk][q]);
    __syncthreads();
  }
  if (row < m && col < n) c[(size_t)row * n + col] = __float2bfloat16(s);
}

void square(const __nv_bfloat16* a, const __nv_bfloat16* b, __nv_bfloat16* c, int n,
            cudaStream_t stream) {
  dim3 grid((n + 31) / 32, (n + 31) / 32);
  if (n > 0) {
    mm<<<grid, dim3(32, 32), 0, stream>>>(a, b, c, n, n, n);
  }
  mm<<<grid,
       dim3(32, 32)>>>(a, b, c, n, n, n);
}
"""


def test_the_launch_edit_passes_the_bytes_raises_the_limit_once_and_is_undone() -> None:
    from gate.hostforms import chevron_launches, dynamic_shared_limits
    from passes.roundtrip import roundtrip

    result = _deep(LAUNCHES, {"wgmma": True, "deep": True, "stages": 5})
    assert result.ok, result
    text = result.ir.text
    nbytes = 5 * 2 * (128 * 64 * 2) + 1024
    assert chevron_launches(text) == {"square": [hostforms_chevron("mm", nbytes)] * 2}
    assert dynamic_shared_limits(text) == {"mm": nbytes}
    # each launch statement: the limit raised on the line before (a static: once), the stream kept
    persist = f"kl_gs_grid(reinterpret_cast<const void*>(mm), dim3(grid), 1024, {nbytes})"
    assert f"mm<<<{persist}, dim3(32, 32), {nbytes}, stream>>>(a, b, c, n, n, n);" in text
    assert f"mm<<<{persist}, dim3(32, 32), {nbytes}>>>(a, b, c, n, n, n);" in text
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if "mm<<<" in line:
            assert lines[i - 1].lstrip().startswith("{ static const cudaError_t kl_gs_limit = "
                                                    f"cudaFuncSetAttribute(mm, "
                                                    "cudaFuncAttributeMaxDynamicSharedMemorySize, "
                                                    f"{nbytes});")
            assert _indent(lines[i - 1]) == _indent(line)
    # the de-optimization gives the launches back as written; the rule gives this output again
    rule = get_pass("gemm-schedule").from_options({"wgmma": True, "deep": True, "stages": 5})
    done = next(s for s in rule.sites(result.ir) if s.present)
    back = rule.deoptimize(result.ir, done, CTX)
    assert back.ok and back.options == {"wgmma": True, "overlap": True, "deep": True, "stages": 5}
    plain = back.ir.text
    assert "mm<<<grid, dim3(32, 32), 0, stream>>>(a, b, c, n, n, n);" in plain
    assert "mm<<<grid,\n       dim3(32, 32)>>>(a, b, c, n, n, n);" in plain
    assert "cudaFuncSetAttribute" not in plain and "kl_gs_" not in plain
    assert roundtrip(rule, result.ir, done, CTX).same
    # a launch that already passes dynamic shared memory is not the rule's to change
    passing = LAUNCHES.replace("dim3(32, 32), 0, stream", "dim3(32, 32), 4096, stream")
    refused = _deep(passing, {"deep": True})
    assert isinstance(refused, Skipped) and "already passes dynamic shared memory" in refused.reason
    # a ring that does not fit the architecture's dynamic shared memory
    # (padded mma.sync slices: 35 KiB a slot)
    assert _deep(LAUNCHES, {"deep": True, "stages": 6}).ok
    big = _deep(LAUNCHES, {"deep": True, "stages": 5}, PassContext(facts={"arch": "sm_80"}))
    assert isinstance(big, Skipped) and "163 KiB" in big.reason
    small = _deep(LAUNCHES, {"deep": True}, PassContext(facts={"arch": "sm_86"}))
    assert isinstance(small, Skipped) and "3 slices" in small.reason and "99 KiB" in small.reason
    # a slot count is an option of the deep form only
    assert isinstance(_deep(LAUNCHES, {"stages": 4}), Skipped)


def hostforms_chevron(kernel: str, nbytes: int) -> Any:
    from gate.hostforms import Chevron

    return Chevron(kernel, nbytes)


def _indent(line: str) -> str:
    return line[:len(line) - len(line.lstrip())]


def test_the_bench_loads_a_cpp_kernel_by_its_plain_name_and_launches_it_as_its_source_does(
        ) -> None:
    # bench/gemm_schedule.py launches load_inline kernels itself: NVRTC mangles a C++ kernel's
    # name, so the bench gives it C linkage; a deep form runs with its launch's bytes
    import importlib.util

    from gate.cudacpu.host import emulated
    from gate.hostforms import device_source

    spec = importlib.util.spec_from_file_location("kl_bench_gemm_schedule",
                                                  ROOT / "bench" / "gemm_schedule.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    source = _inline_source(STYLES / "cu_mm_reg2d" / "mm_reg2d.py")
    kernel = "gemm_reg2d_kernel"
    assert f".entry {kernel}(" not in ptx_for_sm90a(device_source(source))
    assert f".entry {kernel}(" in ptx_for_sm90a(bench.direct_source(source, kernel))
    text, detail = bench.rewrite(source, (256, 1, 1), "sm_90", "wgmma_deep")
    assert detail["kernel"] == kernel
    torch.manual_seed(10)
    m, n, k = 130, 140, 72
    a, b = _ab(m, n, k, torch.bfloat16)
    c = torch.zeros(m, n, dtype=torch.bfloat16)
    with emulated():
        from experts import cudahost

        func, shared = bench._load_kernel(text, kernel, "deep", cudahost)
        assert shared == bench.host_launch(text, kernel)[0] > 48 * 1024
        cudahost.launch(func, (_cdiv(n, 128), _cdiv(m, 128)), 256, shared, [a, b, c, m, n, k])
    want = a.float() @ b.float()
    assert (c.float() - want).abs().max() <= 2e-2 * want.abs().max()
    # a producer form launches the block its edited launch passes (the start's and a warpgroup)
    assert bench.launched_block(text, kernel, (256, 1, 1)) == (256, 1, 1)
    text, _ = bench.rewrite(source, (256, 1, 1), "sm_90", "wgmma_deep_wide_p")
    block = bench.launched_block(text, kernel, (256, 1, 1))
    assert block == (384, 1, 1)
    c.zero_()
    with emulated():
        from experts import cudahost

        func, shared = bench._load_kernel(text, kernel, "producer", cudahost)
        cudahost.launch(func, (_cdiv(n, 128), _cdiv(m, 128)), block, shared, [a, b, c, m, n, k])
    assert (c.float() - want).abs().max() <= 2e-2 * want.abs().max()


@pytest.mark.gpu
def test_on_the_gpu_the_deep_forms_are_correct_through_their_own_launch() -> None:
    if not torch.cuda.is_available():
        pytest.skip("no GPU")
    cudahost = pytest.importorskip("experts.cudahost")
    from triton.testing import do_bench

    from gate.hostforms import chevron_launches, device_source, dynamic_shared_limits

    source = _with_launch((MICRO / "blocktile_bf16.cu").read_text(), "256")
    forms = [{"deep": True}]
    if torch.cuda.get_device_capability() == (9, 0):
        forms += [{"wgmma": True, "deep": True}, {"wgmma": True, "deep": True, "wide": True},
                  {"wgmma": True, "deep": True, "specialize": True},
                  {"wgmma": True, "deep": True, "wide": True, "producer": True},
                  {"wgmma": True, "deep": True, "producer": True}, TMA,
                  {**TMA, "consumers": 4}]
    stream = torch.cuda.current_stream()
    bench = _bench()
    loaded = []
    for options in [None, *forms]:
        text = source if options is None else _deep(source, {"block": "256", **options}).ir.text
        func = cudahost.get_function(cudahost.compile_source(device_source(text), name="deep.cu"),
                                     "sgemm_blocktile")
        shared = max((c.shared_bytes or 0 for calls in chevron_launches(text).values()
                      for c in calls), default=0)
        if shared:
            cudahost.set_dynamic_shared(func, dynamic_shared_limits(text)["sgemm_blocktile"])
        block = bench.launched_block(text, "sgemm_blocktile", (256, 1, 1))  # grown: producer
        loaded.append((func, shared, block, text))

    def arguments(at: tuple[Any, int, Any, str], a: Any, b: Any, c: Any) -> list[Any]:
        (m, k), n = a.shape, b.shape[1]
        # the TMA form's tensor maps as its own launch builds them (K = 517: cp.async instead)
        return bench.launch_args(at[3], "sgemm_blocktile", [m, n, k, 1.0, a, b, 0.0, c])

    def run(at: tuple[Any, int, Any, str], a: Any, b: Any, c: Any,
            args: list[Any] | None = None) -> Any:
        m, n = a.shape[0], b.shape[1]
        args = arguments(at, a, b, c) if args is None else args
        cudahost.launch(at[0], (_cdiv(n, 128), _cdiv(m, 128)), at[2], at[1], args, stream)
        return c

    for m, n, k in ((1024, 1024, 1024), (1000, 1032, 520), (999, 1001, 517)):
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        want = a.float() @ b.float()
        for at in loaded[1:]:
            got = run(at, a, b, torch.zeros(m, n, device="cuda", dtype=torch.bfloat16)).float()
            assert (got - want).abs().max() <= 2e-2 * want.abs().max()
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    c = torch.zeros(4096, 4096, device="cuda", dtype=torch.bfloat16)
    # timed as a user's launch runs: the maps encoded once (on the host), the kernel timed
    timed = [(at, arguments(at, a, b, c)) for at in loaded]
    start, *deep = (do_bench(lambda at=at, args=args: run(at, a, b, c, args), return_mode="median")
                    for at, args in timed)
    assert all(ms * 3 < start for ms in deep), (start, deep)


def test_the_slot_count_is_a_tunable_the_search_sweeps_around_a_recorded_deep_step() -> None:
    from lineage.moves import tuned

    rule = get_pass("gemm-schedule")
    assert dict(rule.tunables) == {"stages": (3, 4, 5)}
    recorded = {"wgmma": True, "overlap": True, "deep": True, "stages": 4}
    variants = tuned(rule, [recorded, {"wgmma": True}])
    # the rule's fullest forms on top of each recorded variant first, then the recorded ones
    tma = {"wide": True, "producer": True, "tma": True}
    wide = {"wgmma": True, "deep": True, "wide": True}
    assert variants[:6] == [{**recorded, **tma}, {**recorded, "wide": True}, {**wide, **tma},
                            wide, recorded, {"wgmma": True}]
    assert not any(v.get("pingpong") for v in variants)  # an option, not a fullest form
    assert [v["stages"] for v in variants[6:]] == [3, 5]
    assert all({**v, "stages": 4} == recorded for v in variants[6:])
    source = _inline_source(STYLES / "cu_mm_reg2d" / "mm_reg2d.py")
    texts = {v["stages"]: _deep(source, dict(v)).ir.text for v in variants if "stages" in v}
    assert len(set(texts.values())) == 3
    assert all(f'"schedule": [128, 128, 64, {n}]' in text for n, text in texts.items())


# ---------------------------------------------------------------------------------------------
# the TMA form: the producer warpgroup's slots filled by one thread's tensor copies


def _bench() -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location("kl_bench_gemm_schedule_tma",
                                                  ROOT / "bench" / "gemm_schedule.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


TMA = {"wgmma": True, "deep": True, "wide": True, "producer": True, "tma": True}


@pytest.mark.parametrize("stages", [3, 4])
def test_tma_copies_fill_the_producer_ring_and_match_torch_through_the_bench_launch(
        stages: int) -> None:
    import ctypes

    from gate.cudacpu.host import emulated
    from gate.hostforms import device_source

    bench = _bench()
    source = _inline_source(STYLES / "cu_mm_reg2d" / "mm_reg2d.py")
    kernel = "gemm_reg2d_kernel"
    form = "wgmma_deep_wide_tma" if stages == 4 else "wgmma_deep_wide_tma3"
    text, _ = bench.rewrite(source, (256, 1, 1), "sm_90", form)
    assert bench.FORMS[form] == {**TMA, **({"stages": 3} if stages == 3 else {})}
    # the kernel takes the maps by value; its own launch builds them from its own arguments
    assert "const __grid_constant__ kl_gs_maps kl_gs_tma)" in text
    assert re.search(r"M, N, K, kl_gs_tma_maps\(false, \(const void\*\)\(reinterpret_cast<const "
                     r"__nv_bfloat16\*>\(A\.data_ptr<at::BFloat16>\(\)\)\), \(long long\)\(K\), "
                     r"\(long long\)\(K\), \(long long\)\(M\), 128u, ", text)
    ptx = ptx_for_sm90a(device_source(text))
    assert ptx.count("cp.async.bulk.tensor.2d") == 5  # A: one 64x128 box; B (MN-major): four atoms
    assert "mbarrier.arrive.expect_tx" in ptx and "m64n256k16" in ptx
    block = bench.launched_block(text, kernel, (256, 1, 1))
    assert block == (384, 1, 1)
    torch.manual_seed(12)

    def launched(device_text: str, shapes: Any, own: Any = block) -> None:
        with emulated():
            from experts import cudahost

            func, shared = bench._load_kernel(device_text, kernel, form, cudahost)
            for grid, (m, n, k) in shapes:
                a, b = _ab(m, n, k, torch.bfloat16)
                c = torch.zeros(m, n, dtype=torch.bfloat16)
                args = bench.launch_args(device_text, kernel, [a, b, c, m, n, k])
                cudahost.launch(func, grid, own, shared, args)
                want = a.float() @ b.float()
                assert (c.float() - want).abs().max() <= 2e-2 * want.abs().max(), (grid, m, n, k)
    # ragged M, N and K (boxes past them zero-filled), fewer blocks than tiles (the ring runs
    # on across tiles); K = 91 rows of 182 bytes cannot be described: cp.async fills the ring
    shapes = (((1, 1), (130, 264, 200)), ((2, 1), (257, 136, 72)), ((1, 1), (72, 300, 91)))
    facts = bench.schedule_facts(text, kernel)
    assert facts["tma"] == [["A", "K", "K", "M", 128], ["B", "N", "N", "K", 64]]

    def encoded(m: int, n: int, k: int) -> bool:
        a, b = _ab(m, n, k, torch.bfloat16)
        with emulated():
            maps = bench.launch_args(text, kernel, [a, b, None, m, n, k])[-1]
        return ctypes.string_at(maps.getPtr() + 256, 4) != bytes(4)
    assert [encoded(*shape) for _, shape in shapes] == [True, True, False]
    launched(text, shapes)
    # a box landing where the one before it did: caught
    second = "kl_gs_sb + kl_gs_slot * 16384 + 4096, &kl_gs_tma.b"
    assert text.count(second) == 1
    with pytest.raises(AssertionError):
        launched(text.replace(second, "kl_gs_sb + kl_gs_slot * 16384 + 0, &kl_gs_tma.b"),
                 shapes[:1])


def test_the_tma_form_is_undone_with_its_parameter_and_launch_and_comes_back() -> None:
    from passes.roundtrip import roundtrip

    source = _inline_source(STYLES / "cu_mm_reg2d" / "mm_reg2d.py")
    result = _deep(source, {"block": "256", **TMA})
    assert result.ok, result
    rule = get_pass("gemm-schedule").from_options({"block": "256", **TMA})
    done = next(s for s in rule.sites(result.ir) if s.present)
    back = rule.deoptimize(result.ir, done, CTX)
    assert back.ok and back.options == {**TMA, "overlap": True, "stages": 4}
    plain = back.ir.text
    assert "kl_gs_" not in plain and "cudaGetDriverEntryPoint" not in plain
    assert "<<<grid, block>>>" in plain and "M, N, K);" in plain
    assert roundtrip(rule, result.ir, done, CTX).same


def test_the_tma_form_refuses_what_a_tensor_map_cannot_describe() -> None:
    source = _inline_source(STYLES / "cu_mm_reg2d" / "mm_reg2d.py")
    # a form of the producer warpgroup
    alone = _deep(source, {"block": "256", "wgmma": True, "deep": True, "tma": True})
    assert isinstance(alone, Skipped) and "producer warpgroup" in alone.reason
    # a staging that checks no bound has no extent for the map
    unbounded = _with_launch((MICRO / "warptile_bf16.cu").read_text()
                             .replace("__launch_bounds__(NUM_THREADS) ", ""), "128")
    refused = _deep(unbounded, {"block": "128", **TMA, "wide": False})
    assert isinstance(refused, Skipped) and "checks no bound" in refused.reason
    assert "\n" not in refused.reason
    assert _deep(unbounded, {"block": "128", **TMA, "wide": False, "tma": False}).ok
    # the maps would evaluate the launch's arguments again: one with a side effect is refused
    stepping = source.replace("M, N, K);", "M, N, K++);")
    assert stepping != source
    refused = _deep(stepping, {"block": "256", **TMA})
    assert isinstance(refused, Skipped) and "side effect" in refused.reason


def test_the_tma_forms_host_half_compiles_with_nvcc_where_the_toolkit_is_installed(
        tmp_path: Path) -> None:
    # the whole source as load_inline hands it to nvcc: the kernel and the wrapper whose launch
    # encodes the tensor maps through the runtime's driver entry point (no -lcuda)
    import os
    import shutil
    import subprocess

    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    nvcc = shutil.which("nvcc") or str(Path(home) / "bin" / "nvcc")
    if not Path(nvcc).is_file():
        pytest.skip("no CUDA toolkit (nvcc)")
    source = _with_launch((MICRO / "blocktile_bf16.cu").read_text(), "256")
    result = _deep(source, {"block": "256", **TMA})
    assert result.ok, result
    unit = tmp_path / "tma.cu"
    unit.write_text(result.ir.text)
    done = subprocess.run([nvcc, "-std=c++17", "-gencode", "arch=compute_90a,code=sm_90a", "-c",
                           str(unit), "-o", str(tmp_path / "tma.o")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    # the same source with the maps' helper broken does not: nvcc checks the host half
    broken = result.ir.text.replace("CU_TENSOR_MAP_SWIZZLE_128B", "CU_TENSOR_MAP_SWIZZLE_129B")
    unit.write_text(broken)
    assert subprocess.run([nvcc, "-std=c++17", "-gencode", "arch=compute_90a,code=sm_90a", "-c",
                           str(unit), "-o", str(tmp_path / "tma.o")], capture_output=True,
                          timeout=300).returncode != 0


# four consumer warpgroups on a block of two: the launch's block runs twice at once
C4 = {"wgmma": True, "deep": True, "wide": True, "producer": True, "consumers": 4}


@pytest.mark.parametrize("name,grown,stages", [
    (_TUTORIAL, (640, 1, 1), 0), (_INLINE, (640, 1, 1), 0), (_INLINE, (640, 1, 1), 4),
    (_KMAJOR_B, (16, 40, 1), 0)], ids=["tutorial", "reg2d", "reg2d-4-slots", "k-major-b-2d-block"])
def test_four_consumer_warpgroups_run_the_launch_block_twice_and_match_torch_on_the_emulator(
        name: str, grown: tuple[int, int, int], stages: int) -> None:
    from gate.hostforms import device_source

    source, block, run, tol = PRODUCER_CASES[name]
    result = _deep(source(), {"block": block, **C4, **({"stages": stages} if stages else {})})
    assert result.ok, result
    text = result.ir.text
    kernel = next(n.name for n in kir.parse(text, "cuda").walk() if n.kind == "kernel")
    assert _launched_block(text, kernel) == grown
    assert "__launch_bounds__(640, 1)" in text and '"consumers": 4' in text
    # every threadIdx of the kept body reads the thread's index in its half
    body = text[text.index("the kernel's own body for this block"):]
    assert "threadIdx" not in body and "kl_gs_vt" in body
    ptx = ptx_for_sm90a(device_source(text))
    for needed in ("setmaxnreg.dec.sync.aligned.u32 40", "setmaxnreg.inc.sync.aligned.u32 104",
                   "wgmma.mma_async.sync.aligned.m64n128k16", "mbarrier.try_wait.parity"):
        assert needed in ptx, needed
    assert "m64n256k16" not in ptx and "bar.sync 1, 256" not in ptx
    if stages == 4:  # no room for one exchange of whole blocks: one per half, in row chunks
        assert "kl_gs_half * 16896" in text and '"r"(1 + kl_gs_half)' in text
    else:  # three slots and one exchange of whole blocks the halves take in turn
        assert "bar.sync 1, 512" in ptx and "the second half's turn" in text
        slots = 4 if name == _KMAJOR_B else 3  # a 16x16 block's exchange fits beside four
        assert f'"schedule": [128, 256, 64, {slots}]' in text
    # N past 128: both halves of the tile hold user blocks; ragged M, N and K
    _launched_on_the_emulator(text, run, tol, ((72, 300, 136), (130, 40, 45)), grown)


def test_a_block_of_one_warpgroup_runs_twice_on_the_upper_and_lower_half_of_the_tile() -> None:
    from gate.hostforms import device_source

    # 128 threads, 64x64 user tiles (alpha / beta / bias / relu, explicit leading dimensions):
    # two warpgroups of 64x256 multiply, each half of the threads runs the user blocks of its
    # 64 rows of the tile
    options = {"block": "128", **C4, "consumers": 2}
    result = _deep(_with_launch(LEADING_DIMS, "128"), options)
    assert result.ok, result
    text = result.ir.text
    assert _launched_block(text, "gemm_ld") == (384, 1, 1)
    assert "kl_gs_sm = kl_gs_half * 64 + kl_gs_v / 4 * 64, kl_gs_sn = kl_gs_v % 4 * 64;" in text
    assert "m64n256k16" in ptx_for_sm90a(device_source(text))
    _launched_on_the_emulator(text, _leading_dims(8), 2e-2, ((72, 300, 136), (130, 40, 45)),
                              (384, 1, 1))


def test_four_consumer_warpgroups_run_on_across_tiles_with_tma_and_come_back() -> None:
    from gate.cudacpu.host import emulated
    from gate.cudacpu.library import EmulationError
    from gate.hostforms import device_source
    from passes.roundtrip import roundtrip

    bench = _bench()
    source = _inline_source(STYLES / "cu_mm_reg2d" / "mm_reg2d.py")
    kernel, form = "gemm_reg2d_kernel", "wgmma_deep_wide_tma_c4"
    assert bench.FORMS[form] == {**C4, "tma": True}
    text, _ = bench.rewrite(source, (256, 1, 1), "sm_90", form)
    assert bench.launched_block(text, kernel, (256, 1, 1)) == (640, 1, 1)
    ptx = ptx_for_sm90a(device_source(text))
    assert ptx.count("cp.async.bulk.tensor.2d") == 5 and "m64n128k16" in ptx
    torch.manual_seed(14)

    def launched(device_text: str, shapes: Any) -> None:
        with emulated():
            from experts import cudahost

            func, shared = bench._load_kernel(device_text, kernel, form, cudahost)
            # three 48 KiB slots, one exchange of 128 rows of 132 floats, the alignment slack
            assert shared == 3 * 49152 + 128 * 132 * 4 + 1024
            for grid, (m, n, k) in shapes:
                a, b = _ab(m, n, k, torch.bfloat16)
                c = torch.zeros(m, n, dtype=torch.bfloat16)
                args = bench.launch_args(device_text, kernel, [a, b, c, m, n, k])
                cudahost.launch(func, grid, (640, 1, 1), shared, args)
                want = a.float() @ b.float()
                assert (c.float() - want).abs().max() <= 2e-2 * want.abs().max(), (grid, m, n, k)
    # fewer blocks than tiles (the ring and both halves run on across tiles); K = 91 cannot be
    # described by a map: the added warpgroup's cp.async fills the ring
    launched(text, (((1, 1), (130, 300, 200)), ((2, 1), (140, 520, 72)), ((1, 1), (72, 260, 91))))
    # the second half reading the launch's thread ids instead of its own: caught
    local = "(unsigned)(kl_gs_tid - kl_gs_half * 256)"
    assert text.count(local) == 1
    with pytest.raises((AssertionError, EmulationError)):
        launched(text.replace(local, "(unsigned)kl_gs_tid"), (((1, 1), (72, 300, 64)),))
    # both halves writing the one exchange at once (no turns): caught
    turns = [line for line in text.splitlines() if "half's turn" in line]
    assert len(turns) == 2
    racing = text
    for line in turns:
        racing = racing.replace(line, "")
    with pytest.raises((AssertionError, EmulationError)):
        launched(racing, (((1, 1), (72, 300, 64)),))
    # the de-optimization gives the launch its own block back; the rule gives this output again
    ir = kir.parse(text, "cuda")
    rule = get_pass("gemm-schedule").from_options({**C4, "tma": True})
    done = next(s for s in rule.sites(ir) if s.present)
    back = rule.deoptimize(ir, done, CTX)
    assert back.ok and back.options == {**C4, "tma": True, "overlap": True, "stages": 3}
    assert "<<<grid, block>>>" in back.ir.text and "kl_gs_" not in back.ir.text
    assert roundtrip(rule, ir, done, CTX).same


def test_four_consumer_warpgroups_refuse_what_they_cannot_split() -> None:
    from passes.cuda.gemm_schedule import GemmSchedule

    source = _inline_source(STYLES / "cu_mm_reg2d" / "mm_reg2d.py")
    # a form of the producer warpgroup; twice the launch's warpgroups, no other count
    alone = _deep(source, {"block": "256", "wgmma": True, "deep": True, "consumers": 4})
    assert isinstance(alone, Skipped) and "form of the producer warpgroup" in alone.reason
    for count in (2, 8):
        odd = _deep(source, {"block": "256", **C4, "consumers": count})
        assert isinstance(odd, Skipped) and "twice the launch's warpgroups" in odd.reason, count
    # a block of 512 threads: eight warpgroups do not split the tile; four multiply in the
    # form's own block, the launch's 512 threads run as virtual threads
    reg1d = _embedded(STYLES / "cu_mm_reg1d" / "mm_reg1d.py")
    big = _deep(_with_launch(reg1d, "512"), {"block": "512", **C4, "consumers": 8})
    assert isinstance(big, Skipped) and "do not split" in big.reason
    c4 = _deep(_with_launch(reg1d, "512"), {"block": "512", **C4, "tma": True})
    assert c4.ok and '"virtual": 640' in c4.ir.text and "dim3(640, 1, 1)" in c4.ir.text
    # measured slower than two warpgroups on 256-thread blocks: not a fullest form
    assert all("consumers" not in form for form in GemmSchedule.reach)
    assert _deep(_with_launch(reg1d, "512"), {"block": "512", **dict(GemmSchedule.reach[0])}).ok
    # the 128x128 tile: four warpgroups of 64x64, halves of 128x64 the 128x128 user tile
    # does not fit in: the four multiply in the form's own block, the launch's threads virtual
    narrow = _deep(source, {"block": "256", **C4, "wide": False})
    assert narrow.ok and '"virtual": 640' in narrow.ir.text
    # the kernel's own bounds of the launch's block are written for the grown block; bounds
    # asking more fix it
    for bounds, ok in (("256", True), ("256, 2", False)):
        bounded = source.replace("__global__ void gemm_reg2d_kernel",
                                 f"__global__ void __launch_bounds__({bounds}) gemm_reg2d_kernel")
        out = _deep(bounded, {"block": "256", **C4})
        assert out.ok == ok, bounds
        if ok:
            assert "__launch_bounds__(640, 1) gemm_reg2d_kernel" in out.ir.text
            assert out.ir.text.count("__launch_bounds__") == 1
        else:
            assert "__launch_bounds__" in out.reason
    # a kernel de-optimized from one producer form keeps the grown block's bounds; the other
    # producer form writes its own in their place
    from passes.roundtrip import roundtrip

    three = {"wgmma": True, "deep": True, "wide": True, "producer": True}
    for first, then, bounds in ((three, C4, 640), (C4, three, 384)):
        out = _deep(source, {"block": "256", **first})
        rule = get_pass("gemm-schedule").from_options(first)
        done = next(s for s in rule.sites(out.ir) if s.present)
        plain = rule.deoptimize(out.ir, done, CTX).ir.text
        assert "__launch_bounds__" in plain and "kl_gs_" not in plain
        again = _deep(plain, {"block": "256", **then})
        assert again.ok, again
        assert again.ir.text.count(f"__launch_bounds__({bounds}, 1)") == 1
        assert again.ir.text.count("__launch_bounds__") == 1
        assert roundtrip(rule, out.ir, done, CTX).same
