"""CUDA kernels written the way people write them before they know KLineage, in several styles
(names, loop spellings, block sizes, staging forms), for the role and rule tests. None of them
is a state of any lineage."""
from __future__ import annotations

# -- reductions: one block per row, the row folded into a register, then a shared tree ----------

# RMSNorm: the stride halved with `>>= 1` from blockDim.x / 2, an unsigned stride
RMS = r"""
__global__ void rms_norm(const float* __restrict__ x, float* __restrict__ y, int n, float eps) {
  __shared__ float red[1024];
  int t = threadIdx.x;
  const float* row = x + (size_t)blockIdx.x * n;
  float ss = 0.f;
  for (int i = t; i < n; i += blockDim.x) { float v = row[i]; ss += v * v; }
  red[t] = ss;
  __syncthreads();
  for (unsigned int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (t < s) red[t] += red[t + s];
    __syncthreads();
  }
  float inv = rsqrtf(red[0] / n + eps);
  for (int i = t; i < n; i += blockDim.x) y[(size_t)blockIdx.x * n + i] = row[i] * inv;
}
"""

# softmax: a max tree (`/= 2`, a comparison ternary) and a sum tree (`s = s >> 1`), 128 threads
# as a constant extent
SOFTMAX = r"""
#define THREADS 128
__global__ void row_softmax(const float* in, float* out, int cols) {
  __shared__ float scratch[THREADS];
  const int lane_id = threadIdx.x;
  const float* src = in + blockIdx.x * cols;
  float m = -3.0e38f;
  for (int c = lane_id; c < cols; c += THREADS) m = fmaxf(m, src[c]);
  scratch[lane_id] = m;
  __syncthreads();
  for (int stride = THREADS / 2; stride > 0; stride /= 2) {
    if (lane_id < stride) {
      scratch[lane_id] = scratch[lane_id] > scratch[lane_id + stride] ? scratch[lane_id] : scratch[lane_id + stride];
    }
    __syncthreads();
  }
  const float row_max = scratch[0];
  __syncthreads();
  float total = 0.f;
  for (int c = lane_id; c < cols; c += THREADS) total += __expf(src[c] - row_max);
  scratch[lane_id] = total;
  __syncthreads();
  for (int s = 64; s >= 1; s = s >> 1) {
    if (lane_id < s) scratch[lane_id] = scratch[lane_id] + scratch[lane_id + s];
    __syncthreads();
  }
  const float denom = scratch[0];
  for (int c = lane_id; c < cols; c += THREADS) out[blockIdx.x * cols + c] = __expf(src[c] - row_max) / denom;
}
"""

# a max with the steps unrolled at constant strides (128 threads)
UNROLLED_MAX = r"""
__global__ void block_max(const float* x, float* out, int n) {
  __shared__ float m[128];
  unsigned tid = threadIdx.x;
  float best = -1e30f;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) best = fmaxf(best, x[i]);
  m[tid] = best;
  __syncthreads();
  if (tid < 64) m[tid] = fmaxf(m[tid], m[tid + 64]); __syncthreads();
  if (tid < 32) m[tid] = fmaxf(m[tid], m[tid + 32]); __syncthreads();
  if (tid < 16) m[tid] = fmaxf(m[tid], m[tid + 16]); __syncthreads();
  if (tid < 8) m[tid] = fmaxf(m[tid], m[tid + 8]); __syncthreads();
  if (tid < 4) m[tid] = fmaxf(m[tid], m[tid + 4]); __syncthreads();
  if (tid < 2) m[tid] = fmaxf(m[tid], m[tid + 2]); __syncthreads();
  if (tid < 1) m[tid] = fmaxf(m[tid], m[tid + 1]); __syncthreads();
  if (tid == 0) out[blockIdx.x] = m[0];
}
"""

# the stride doubled (interleaved addressing), a min, 256 threads as a constant extent
DOUBLING_MIN = r"""
__global__ void seg_min(const float* data, float* result) {
  __shared__ float acc[256];
  int me = threadIdx.x;
  acc[me] = data[blockIdx.x * 256 + me];
  __syncthreads();
  for (int step = 1; step < 256; step *= 2) {
    if (me % (2 * step) == 0) acc[me] = fminf(acc[me], acc[me + step]);
    __syncthreads();
  }
  if (me == 0) result[blockIdx.x] = acc[0];
}
"""

# LayerNorm statistics: two arrays combined in the same steps (a sum and a sum of squares)
MOMENTS = r"""
__global__ void moments(const float* x, float* mean, float* var, int n) {
  __shared__ float s1[512];
  __shared__ float s2[512];
  const int i = threadIdx.x;
  float a = 0.f, b = 0.f;
  for (int j = i; j < n; j += blockDim.x) { const float v = x[blockIdx.x * n + j]; a += v; b += v * v; }
  s1[i] = a;
  s2[i] = b;
  __syncthreads();
  for (int o = blockDim.x >> 1; o > 0; o >>= 1) {
    if (i < o) { s1[i] += s1[i + o]; s2[i] += s2[i + o]; }
    __syncthreads();
  }
  if (i == 0) { const float mu = s1[0] / n; mean[blockIdx.x] = mu; var[blockIdx.x] = s2[0] / n - mu * mu; }
}
"""

# the tree stops at stride 32 and the first warp finishes it through a volatile alias
WARP_TAIL = r"""
__global__ void old_style_sum(const float* x, float* out) {
  __shared__ float sdata[256];
  unsigned tid = threadIdx.x;
  sdata[tid] = x[blockIdx.x * 256 + tid];
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 32; s >>= 1) {
    if (tid < s) sdata[tid] += sdata[tid + s];
    __syncthreads();
  }
  if (tid < 32) {
    volatile float* v = sdata;
    v[tid] += v[tid + 32]; v[tid] += v[tid + 16]; v[tid] += v[tid + 8];
    v[tid] += v[tid + 4]; v[tid] += v[tid + 2]; v[tid] += v[tid + 1];
  }
  if (tid == 0) out[blockIdx.x] = sdata[0];
}
"""

# -- GEMMs: tiles staged in shared memory, a K loop of scalar multiply-adds --------------------

# the tutorial tiled GEMM, A staged through a guarded temporary, B through a ternary
TILED = r"""
#define TILE 16
__global__ void matmul_tiled(const float* A, const float* B, float* C, int M, int N, int K) {
  __shared__ float As[TILE][TILE];
  __shared__ float Bs[TILE][TILE];
  int tx = threadIdx.x, ty = threadIdx.y;
  int row = blockIdx.y * TILE + ty, col = blockIdx.x * TILE + tx;
  float acc = 0.f;
  for (int t = 0; t < K; t += TILE) {
    float a = 0.f;
    if (row < M && t + tx < K) a = A[row * K + t + tx];
    As[ty][tx] = a;
    Bs[ty][tx] = (t + ty < K && col < N) ? B[(t + ty) * N + col] : 0.f;
    __syncthreads();
    for (int k = 0; k < TILE; ++k) acc += As[ty][k] * Bs[k][tx];
    __syncthreads();
  }
  if (row < M && col < N) C[row * N + col] = acc;
}
"""

# 4x4 register blocking, bf16 operands, A stored K-major in shared memory, B flattened, a
# constexpr tile, a 1-D block of 256 threads
BLOCKED_BF16 = r"""
#include <cuda_bf16.h>
constexpr int BM = 64, BN = 64, BK = 16, TM = 4, TN = 4;
__global__ void gemm_rb(const __nv_bfloat16* __restrict__ a, const __nv_bfloat16* __restrict__ b,
                        __nv_bfloat16* c, int M, int N, int K) {
  __shared__ __nv_bfloat16 sa[BK][BM];
  __shared__ __nv_bfloat16 sb[BK * BN];
  const int tid = threadIdx.x;
  const int trow = tid / (BN / TN), tcol = tid % (BN / TN);
  float out[TM][TN] = {};
  float ra[TM], rb[TN];
  for (int k0 = 0; k0 < K; k0 += BK) {
    for (int e = tid; e < BM * BK; e += 256) {
      int r = e / BK, kk = e % BK;
      int gr = blockIdx.y * BM + r, gk = k0 + kk;
      sa[kk][r] = (gr < M && gk < K) ? a[(size_t)gr * K + gk] : __float2bfloat16(0.f);
    }
    for (int e = tid; e < BK * BN; e += 256) {
      int kk = e / BN, cc = e % BN;
      __nv_bfloat16 v = __float2bfloat16(0.f);
      if (k0 + kk < K && blockIdx.x * BN + cc < N) v = b[(size_t)(k0 + kk) * N + blockIdx.x * BN + cc];
      sb[kk * BN + cc] = v;
    }
    __syncthreads();
    for (int kk = 0; kk < BK; ++kk) {
      for (int i = 0; i < TM; ++i) ra[i] = __bfloat162float(sa[kk][trow * TM + i]);
      for (int j = 0; j < TN; ++j) rb[j] = __bfloat162float(sb[kk * BN + tcol * TN + j]);
      for (int i = 0; i < TM; ++i)
        for (int j = 0; j < TN; ++j)
          out[i][j] += ra[i] * rb[j];
    }
    __syncthreads();
  }
  for (int i = 0; i < TM; ++i)
    for (int j = 0; j < TN; ++j) {
      int r = blockIdx.y * BM + trow * TM + i, col = blockIdx.x * BN + tcol * TN + j;
      if (r < M && col < N) c[(size_t)r * N + col] = __float2bfloat16(out[i][j]);
    }
}
"""

# the same blocking in fp32 with B given transposed (N x K, so both tiles are K-contiguous),
# `fmaf` updates, a 2x2 thread tile, macros written in lower case, a 256-thread block
BLOCKED_NT = r"""
#define bm 32
#define bn 32
#define bk 8
__global__ void gemm_nt(const float* lhs, const float* rhs_t, float* dst, int m, int n, int k) {
  __shared__ float tile_l[bm][bk];
  __shared__ float tile_r[bn][bk];
  const int id = threadIdx.x;
  const int ty = id / 16, tx = id % 16;
  float c00 = 0.f;
  float res[2][2] = {{0.f, 0.f}, {0.f, 0.f}};
  for (int kb = 0; kb < k; kb += bk) {
    for (int e = id; e < bm * bk; e += 256) {
      const int r = e / bk, q = e % bk;
      float v = 0.f;
      if (blockIdx.y * bm + r < m && kb + q < k) v = lhs[(blockIdx.y * bm + r) * k + kb + q];
      tile_l[r][q] = v;
      float w = 0.f;
      if (blockIdx.x * bn + r < n && kb + q < k) w = rhs_t[(blockIdx.x * bn + r) * k + kb + q];
      tile_r[r][q] = w;
    }
    __syncthreads();
    for (int q = 0; q < bk; q++)
      for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++)
          res[i][j] = fmaf(tile_l[ty * 2 + i][q], tile_r[tx * 2 + j][q], res[i][j]);
    __syncthreads();
  }
  c00 = 1.f;
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 2; j++) {
      const int r = blockIdx.y * bm + ty * 2 + i, cc = blockIdx.x * bn + tx * 2 + j;
      if (r < m && cc < n) dst[r * n + cc] = res[i][j] * c00;
    }
}
"""

# -- elementwise and row loops ----------------------------------------------------------------

SAXPY = r"""
__global__ void axpb(const float* xs, float* ys, float alpha, int count) {
  for (int idx = blockIdx.x * blockDim.x + threadIdx.x; idx < count; idx += blockDim.x * gridDim.x) {
    float v = xs[idx];
    ys[idx] = alpha * v + 1.0f;
  }
}
"""

ROW_SUM = r"""
__global__ void row_sum(const float* __restrict__ x, float* out, int cols) {
  __shared__ float buf[256];
  int tid = threadIdx.x;
  float s = 0.f;
  for (int c = tid; c < cols; c += blockDim.x) s += x[blockIdx.x * cols + c];
  buf[tid] = s;
  __syncthreads();
  for (int h = blockDim.x >> 1; h > 0; h >>= 1) { if (tid < h) buf[tid] += buf[tid + h]; __syncthreads(); }
  if (tid == 0) out[blockIdx.x] = buf[0];
}
"""

# -- host modules in the forms users write ------------------------------------------------------

HOST_CUDAHOST = """
import experts.cudahost as host
THREADS = 256
def run(x):
    host.launch(func, x.shape[0], THREADS, 0, [x])
"""

HOST_DRIVER = """
from cuda.bindings import driver
def run(x):
    BX, BY = 32, 4
    driver.cuLaunchKernel(kernel, 10, 1, 1, BX, BY, 1, 0, 0, args, 0)
"""

HOST_CUPY = """
import cupy as cp
kernel = cp.RawKernel(open("k.cu").read(), "row_sum")
def run(x):
    block = (128,)
    kernel((x.shape[0],), block, (x, out, x.shape[1]))
"""

HOST_LOAD_INLINE = '''
from torch.utils.cpp_extension import load_inline
cuda_src = """
torch::Tensor launch(torch::Tensor x) {
  const int threads = 512;
  row_sum<<<x.size(0), threads>>>(x.data_ptr<float>(), out.data_ptr<float>(), x.size(1));
  return out;
}
"""
'''

# a block sum in a `__device__` helper reducing through a pointer parameter that every call
# passes a shared array for, `/= 2` from a macro
HELPER_SUM = r"""
#define NT 256
__device__ float block_sum(float v, float* buf) {
  buf[threadIdx.x] = v;
  __syncthreads();
  for (int s = NT / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) buf[threadIdx.x] += buf[threadIdx.x + s];
    __syncthreads();
  }
  float total = buf[0];
  __syncthreads();
  return total;
}
__global__ void center(const float* x, float* y, int n) {
  __shared__ float scratch[NT];
  float s = 0.f;
  for (int i = threadIdx.x; i < n; i += NT) s += x[blockIdx.x * n + i];
  const float mean = block_sum(s, scratch) / n;
  for (int i = threadIdx.x; i < n; i += NT) y[blockIdx.x * n + i] = x[blockIdx.x * n + i] - mean;
}
"""

# a softmax whose max and sum are reduced with warp shuffles, a shared slot per warp and the
# first warp (lane / warp ids bound once; the partner in a temporary or inline)
SHUFFLE_SOFTMAX = r"""__global__ void softmax_warp(const float* in, float* out, int cols) {
  __shared__ float wmax[32];
  __shared__ float wsum[32];
  __shared__ float bcast[2];
  const int tid = threadIdx.x;
  const int lane = tid & 31, warp = tid >> 5;
  const float* row = in + blockIdx.x * cols;
  float m = -3.0e38f;
  for (int c = tid; c < cols; c += blockDim.x) m = fmaxf(m, row[c]);
  for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_down_sync(0xffffffff, m, off));
  if (lane == 0) wmax[warp] = m;
  __syncthreads();
  if (warp == 0) {
    m = lane < (blockDim.x >> 5) ? wmax[lane] : -3.0e38f;
    for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_down_sync(0xffffffff, m, off));
    if (lane == 0) bcast[0] = m;
  }
  __syncthreads();
  const float mx = bcast[0];
  float s = 0.f;
  for (int c = tid; c < cols; c += blockDim.x) s += __expf(row[c] - mx);
  for (int off = 16; off > 0; off >>= 1) {
    float other = __shfl_down_sync(0xffffffff, s, off);
    s += other;
  }
  if (lane == 0) wsum[warp] = s;
  __syncthreads();
  if (tid < 32) {
    s = lane < (blockDim.x >> 5) ? wsum[lane] : 0.f;
    for (int off = 16; off > 0; off >>= 1) {
      float other = __shfl_down_sync(0xffffffff, s, off);
      s += other;
    }
    if (tid == 0) { bcast[1] = s; }
  }
  __syncthreads();
  const float denom = bcast[1];
  for (int c = tid; c < cols; c += blockDim.x) out[blockIdx.x * cols + c] = __expf(row[c] - mx) / denom;
}
"""

# the textbook tiled GEMM in fp32 with both temporaries declared, then both guarded, then both
# stored (the copies' statements interleave), a tile count as the loop's bound
TILED_INTERLEAVED = r"""
#define TS 32
extern "C" __global__ void mm_two_temps(const float* __restrict__ lhs, const float* __restrict__ rhs,
                                        float* __restrict__ res, int rows, int cols, int depth) {
  __shared__ float tl[TS][TS], tr[TS][TS];
  const int c = threadIdx.x, r = threadIdx.y;
  const int gr = blockIdx.y * TS + r, gc = blockIdx.x * TS + c;
  float total = 0.0f;
  for (int step = 0; step < (depth + TS - 1) / TS; ++step) {
    const int kl = step * TS + c, kr = step * TS + r;
    float x0 = 0.0f;
    float y0 = 0.0f;
    if (gr < rows && kl < depth) x0 = lhs[(size_t)gr * depth + kl];
    if (kr < depth && gc < cols) y0 = rhs[(size_t)kr * cols + gc];
    tl[r][c] = x0;
    tr[r][c] = y0;
    __syncthreads();
    for (int q = 0; q < TS; ++q) total += tl[r][q] * tr[q][c];
    __syncthreads();
  }
  if (gr < rows && gc < cols) res[(size_t)gr * cols + gc] = total;
}
"""

# the same with the first warp's steps in a device function, and a tail the rule cannot tell
# (it stops at stride 2)
WARP_TAIL_CALL = r"""
__device__ void last_warp(volatile float* buf, unsigned lane) {
  buf[lane] += buf[lane + 32]; buf[lane] += buf[lane + 16]; buf[lane] += buf[lane + 8];
  buf[lane] += buf[lane + 4]; buf[lane] += buf[lane + 2]; buf[lane] += buf[lane + 1];
}
__global__ void sum_with_call(const float* x, float* out) {
  __shared__ float part[256];
  unsigned me = threadIdx.x;
  part[me] = x[blockIdx.x * 256 + me] + x[gridDim.x * 256 + blockIdx.x * 256 + me];
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 32; s >>= 1) {
    if (me < s) part[me] += part[me + s];
    __syncthreads();
  }
  if (me < 32) last_warp(part, me);
  if (me == 0) out[blockIdx.x] = part[0];
}
"""
