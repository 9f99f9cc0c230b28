// CUDA C++ GEMM written the tutorial way and put on tensor cores: C = A @ B, row-major, bf16 or
// fp16 in and out, fp32 accumulation. Each 256-thread block owns a 128x128 tile of C and steps
// through K in 32-wide slices staged in padded shared tiles (16-byte vector loads where a row
// chunk is whole and aligned, element loads at the edges); each thread's 8x8 register tile is
// its share of the product, written through bounds checks at the end.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

// ---- tensor-core steps over shared tiles (mma.sync m16n8k16 / m16n8k8, fp32 accumulation) ----
// D += A (16 x KS) * B (KS x 8); KS 8 uses a[0..1] and b[0]
template <bool BF16, int KS>
__device__ __forceinline__ void kl_tc_mma(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
  if (KS == 16 && BF16)
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  else if (KS == 16)
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  else if (BF16)
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5}, {%6}, {%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]) : "r"(a[0]), "r"(a[1]), "r"(b[0]));
  else
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5}, {%6}, {%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]) : "r"(a[0]), "r"(a[1]), "r"(b[0]));
}
// two fp32 values (exactly representable in the 16-bit type) packed low-first
template <bool BF16>
__device__ __forceinline__ unsigned kl_tc_pack(float lo, float hi) {
  unsigned r;
  if (BF16)
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  else
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
// the elements p[0] and p[step], the first in the low half (LOAD 1: one load of both, step 1)
template <bool BF16, int LOAD>
__device__ __forceinline__ unsigned kl_tc_pair(const unsigned short* p, int step) {
  if (LOAD == 1) return *reinterpret_cast<const unsigned*>(p);
  return (unsigned)p[0] | ((unsigned)p[step] << 16);
}
template <bool BF16, int LOAD>
__device__ __forceinline__ unsigned kl_tc_pair(const float* p, int step) {
  if (LOAD == 1) {
    const float2 v = *reinterpret_cast<const float2*>(p);
    return kl_tc_pack<BF16>(v.x, v.y);
  }
  return kl_tc_pack<BF16>(p[0], p[step]);
}
__device__ __forceinline__ unsigned kl_tc_smem(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
// A fragment (rows r0..r0+15, k k0..k0+KS-1) of a tile whose element (r, k) is t[r * SR + k * SK].
// MODE 0: element loads, 1: paired loads (k contiguous), 2: ldmatrix (k contiguous, 16-bit),
// 3: ldmatrix.trans (r contiguous, 16-bit)
template <bool BF16, int KS, int MODE, int SR, int SK, typename T>
__device__ __forceinline__ void kl_tc_frag_a(unsigned (&f)[4], const T* t, int lane, int r0, int k0) {
  if (MODE >= 2) {
    const int j = lane >> 3, i = lane & 7;
    const int r = r0 + 8 * (j & 1) + (MODE == 2 ? i : 0);
    const int k = k0 + 8 * (j >> 1) + (MODE == 3 ? i : 0);
    const unsigned addr = kl_tc_smem(t + r * SR + k * SK);
    if (KS == 16 && MODE == 2)
      asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                   : "=r"(f[0]), "=r"(f[1]), "=r"(f[2]), "=r"(f[3]) : "r"(addr));
    else if (KS == 16)
      asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                   : "=r"(f[0]), "=r"(f[1]), "=r"(f[2]), "=r"(f[3]) : "r"(addr));
    else if (MODE == 2)
      asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];"
                   : "=r"(f[0]), "=r"(f[1]) : "r"(addr));
    else
      asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];"
                   : "=r"(f[0]), "=r"(f[1]) : "r"(addr));
    return;
  }
  const int g = lane >> 2, q = lane & 3;
  const T* p = t + (r0 + g) * SR + (k0 + 2 * q) * SK;
  f[0] = kl_tc_pair<BF16, MODE>(p, SK);
  f[1] = kl_tc_pair<BF16, MODE>(p + 8 * SR, SK);
  if (KS == 16) {
    f[2] = kl_tc_pair<BF16, MODE>(p + 8 * SK, SK);
    f[3] = kl_tc_pair<BF16, MODE>(p + 8 * SR + 8 * SK, SK);
  }
}
// B fragment (k k0..k0+KS-1, columns n0..n0+7) of a tile whose element (k, n) is t[k * SK + n * SN].
// MODE 0: element loads, 1: paired loads (k contiguous), 2: ldmatrix (k contiguous, 16-bit),
// 3: ldmatrix.trans (n contiguous, 16-bit)
template <bool BF16, int KS, int MODE, int SK, int SN, typename T>
__device__ __forceinline__ void kl_tc_frag_b(unsigned (&f)[2], const T* t, int lane, int k0, int n0) {
  if (MODE >= 2) {
    const int j = (lane >> 3) & 1, i = lane & 7;
    const int n = n0 + (MODE == 2 ? i : 0);
    const int k = k0 + 8 * j + (MODE == 3 ? i : 0);
    const unsigned addr = kl_tc_smem(t + k * SK + n * SN);
    if (KS == 16 && MODE == 2)
      asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];"
                   : "=r"(f[0]), "=r"(f[1]) : "r"(addr));
    else if (KS == 16)
      asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];"
                   : "=r"(f[0]), "=r"(f[1]) : "r"(addr));
    else if (MODE == 2)
      asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];" : "=r"(f[0]) : "r"(addr));
    else
      asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];" : "=r"(f[0]) : "r"(addr));
    return;
  }
  const int g = lane >> 2, q = lane & 3;
  const T* p = t + (k0 + 2 * q) * SK + (n0 + g) * SN;
  f[0] = kl_tc_pair<BF16, MODE>(p, SK);
  if (KS == 16) f[1] = kl_tc_pair<BF16, MODE>(p + 8 * SK, SK);
}
// two B fragments side by side (columns n0..n0+7 into f, n0+8..n0+15 into g) with one ldmatrix
template <bool BF16, int KS, int MODE, int SK, int SN, typename T>
__device__ __forceinline__ void kl_tc_frag_b2(unsigned (&f)[2], unsigned (&g)[2], const T* t, int lane, int k0, int n0) {
  if (MODE < 2) {
    kl_tc_frag_b<BF16, KS, MODE, SK, SN>(f, t, lane, k0, n0);
    kl_tc_frag_b<BF16, KS, MODE, SK, SN>(g, t, lane, k0, n0 + 8);
    return;
  }
  const int j = lane >> 3, i = lane & 7;
  const int kb = KS == 16 ? (j & 1) : 0, nb = KS == 16 ? (j >> 1) : (j & 1);
  const int n = n0 + 8 * nb + (MODE == 2 ? i : 0);
  const int k = k0 + 8 * kb + (MODE == 3 ? i : 0);
  const unsigned addr = kl_tc_smem(t + k * SK + n * SN);
  if (KS == 16 && MODE == 2)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(f[0]), "=r"(f[1]), "=r"(g[0]), "=r"(g[1]) : "r"(addr));
  else if (KS == 16)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(f[0]), "=r"(f[1]), "=r"(g[0]), "=r"(g[1]) : "r"(addr));
  else if (MODE == 2)
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];" : "=r"(f[0]), "=r"(g[0]) : "r"(addr));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];" : "=r"(f[0]), "=r"(g[0]) : "r"(addr));
}
#define TILE_M 128
#define TILE_N 128
#define TILE_K 32
#define PAD 8
#define THREADS 256
#define RM 8
#define RN 8

__device__ __forceinline__ bool tile_chunk_ok(const void* base, long offset, int left) {
  return left >= 8 && ((reinterpret_cast<unsigned long long>(base) + 2 * offset) & 15) == 0;
}

extern "C" __global__ void __launch_bounds__(THREADS) gemm_tiles_bf16(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C,
                                                                   int M, int N, int K) {
  __shared__ __align__(16) __nv_bfloat16 As[TILE_M][TILE_K + PAD];
  __shared__ __align__(16) __nv_bfloat16 Bs[TILE_K][TILE_N + PAD];
  const int tid = threadIdx.x;
  const int tr = tid / (TILE_N / RN), tc = tid % (TILE_N / RN);
  const int m0 = blockIdx.y * TILE_M, n0 = blockIdx.x * TILE_N;
  float acc[RM][RN];
  for (int i = 0; i < RM; ++i)
    for (int j = 0; j < RN; ++j) acc[i][j] = 0.0f;
  // mma-micro-kernel: each warp's fp32 accumulator fragments
  float kl_tc_acc[4][4][4] = {};
  for (int k0 = 0; k0 < K; k0 += TILE_K) {
    // A tile: 128 rows x 32 columns, 8-element chunks
    for (int c = tid; c < TILE_M * TILE_K / 8; c += THREADS) {
      const int r = c / (TILE_K / 8), kk = (c % (TILE_K / 8)) * 8;
      const long at = (long)(m0 + r) * K + k0 + kk;
      if (m0 + r < M && tile_chunk_ok(A, at, K - k0 - kk)) {
        *reinterpret_cast<uint4*>(&As[r][kk]) = *reinterpret_cast<const uint4*>(A + at);
      } else {
        for (int e = 0; e < 8; ++e)
          As[r][kk + e] = (m0 + r < M && k0 + kk + e < K) ? A[at + e] : __float2bfloat16(0.0f);
      }
    }
    // B tile: 32 rows x 128 columns, 8-element chunks
    for (int c = tid; c < TILE_K * TILE_N / 8; c += THREADS) {
      const int kk = c / (TILE_N / 8), n = (c % (TILE_N / 8)) * 8;
      const long at = (long)(k0 + kk) * N + n0 + n;
      if (k0 + kk < K && tile_chunk_ok(B, at, N - n0 - n)) {
        *reinterpret_cast<uint4*>(&Bs[kk][n]) = *reinterpret_cast<const uint4*>(B + at);
      } else {
        for (int e = 0; e < 8; ++e)
          Bs[kk][n + e] = (k0 + kk < K && n0 + n + e < N) ? B[at + e] : __float2bfloat16(0.0f);
      }
    }
    __syncthreads();
    {  // mma-micro-kernel: this K step on tensor cores (mma.sync m16n8k16)
      const int kl_tc_lane = (int)threadIdx.x % 32, kl_tc_warp = (int)threadIdx.x / 32;
      const int kl_tc_wm = kl_tc_warp / 4 * 64, kl_tc_wn = kl_tc_warp % 4 * 32;
      const unsigned short* kl_tc_pa = reinterpret_cast<const unsigned short*>(As) + 0;
      const unsigned short* kl_tc_pb = reinterpret_cast<const unsigned short*>(Bs) + 0;
#pragma unroll
      for (int kl_tc_k = 0; kl_tc_k < 32; kl_tc_k += 16) {
        unsigned kl_tc_fa[4][4], kl_tc_fb[4][2];
        #pragma unroll
        for (int kl_tc_i = 0; kl_tc_i < 4; ++kl_tc_i) {
          kl_tc_frag_a<true, 16, 2, 40, 1>(kl_tc_fa[kl_tc_i], kl_tc_pa, kl_tc_lane, kl_tc_wm + 16 * kl_tc_i, kl_tc_k);
        }
        #pragma unroll
        for (int kl_tc_j = 0; kl_tc_j < 4; kl_tc_j += 2) {
          kl_tc_frag_b2<true, 16, 3, 136, 1>(kl_tc_fb[kl_tc_j], kl_tc_fb[kl_tc_j + 1], kl_tc_pb, kl_tc_lane, kl_tc_k, kl_tc_wn + 8 * kl_tc_j);
        }
        #pragma unroll
        for (int kl_tc_i = 0; kl_tc_i < 4; ++kl_tc_i) {
        #pragma unroll
          for (int kl_tc_j = 0; kl_tc_j < 4; ++kl_tc_j) {
            kl_tc_mma<true, 16>(kl_tc_acc[kl_tc_i][kl_tc_j], kl_tc_fa[kl_tc_i], kl_tc_fb[kl_tc_j]);
          }
        }
      }
    }
    __syncthreads();
  }
  {  // mma-micro-kernel: the fragments into this thread's accumulators, through shared memory
    __shared__ float kl_tc_cs[4224];
    const int kl_tc_lane = (int)threadIdx.x % 32, kl_tc_warp = (int)threadIdx.x / 32;
    const int kl_tc_wm = kl_tc_warp / 4 * 64, kl_tc_wn = kl_tc_warp % 4 * 32;
    const int kl_tc_row = ((int)threadIdx.x >> 4) * 8, kl_tc_col = ((int)threadIdx.x & 15) * 8;
#pragma unroll 1
    for (int kl_tc_c0 = 0; kl_tc_c0 < 128; kl_tc_c0 += 32) {
      __syncthreads();
#pragma unroll
      for (int kl_tc_i = 0; kl_tc_i < 4; ++kl_tc_i) {
#pragma unroll
        for (int kl_tc_j = 0; kl_tc_j < 4; ++kl_tc_j) {
#pragma unroll
          for (int kl_tc_h = 0; kl_tc_h < 2; ++kl_tc_h) {
            const int r = kl_tc_wm + 16 * kl_tc_i + kl_tc_lane / 4 + 8 * kl_tc_h - kl_tc_c0;
            if (r >= 0 && r < 32) {
              float* o = kl_tc_cs + r * 132 + kl_tc_wn + 8 * kl_tc_j + 2 * (kl_tc_lane % 4);
              o[0] = kl_tc_acc[kl_tc_i][kl_tc_j][2 * kl_tc_h];
              o[1] = kl_tc_acc[kl_tc_i][kl_tc_j][2 * kl_tc_h + 1];
            }
          }
        }
      }
      __syncthreads();
      if ((unsigned)(kl_tc_row - kl_tc_c0) < 32u) {
        const float* s = kl_tc_cs + (kl_tc_row - kl_tc_c0) * 132 + kl_tc_col;
        acc[0][0] += s[0];
        acc[0][1] += s[1];
        acc[0][2] += s[2];
        acc[0][3] += s[3];
        acc[0][4] += s[4];
        acc[0][5] += s[5];
        acc[0][6] += s[6];
        acc[0][7] += s[7];
      }
      if ((unsigned)(kl_tc_row + 1 - kl_tc_c0) < 32u) {
        const float* s = kl_tc_cs + (kl_tc_row + 1 - kl_tc_c0) * 132 + kl_tc_col;
        acc[1][0] += s[0];
        acc[1][1] += s[1];
        acc[1][2] += s[2];
        acc[1][3] += s[3];
        acc[1][4] += s[4];
        acc[1][5] += s[5];
        acc[1][6] += s[6];
        acc[1][7] += s[7];
      }
      if ((unsigned)(kl_tc_row + 2 - kl_tc_c0) < 32u) {
        const float* s = kl_tc_cs + (kl_tc_row + 2 - kl_tc_c0) * 132 + kl_tc_col;
        acc[2][0] += s[0];
        acc[2][1] += s[1];
        acc[2][2] += s[2];
        acc[2][3] += s[3];
        acc[2][4] += s[4];
        acc[2][5] += s[5];
        acc[2][6] += s[6];
        acc[2][7] += s[7];
      }
      if ((unsigned)(kl_tc_row + 3 - kl_tc_c0) < 32u) {
        const float* s = kl_tc_cs + (kl_tc_row + 3 - kl_tc_c0) * 132 + kl_tc_col;
        acc[3][0] += s[0];
        acc[3][1] += s[1];
        acc[3][2] += s[2];
        acc[3][3] += s[3];
        acc[3][4] += s[4];
        acc[3][5] += s[5];
        acc[3][6] += s[6];
        acc[3][7] += s[7];
      }
      if ((unsigned)(kl_tc_row + 4 - kl_tc_c0) < 32u) {
        const float* s = kl_tc_cs + (kl_tc_row + 4 - kl_tc_c0) * 132 + kl_tc_col;
        acc[4][0] += s[0];
        acc[4][1] += s[1];
        acc[4][2] += s[2];
        acc[4][3] += s[3];
        acc[4][4] += s[4];
        acc[4][5] += s[5];
        acc[4][6] += s[6];
        acc[4][7] += s[7];
      }
      if ((unsigned)(kl_tc_row + 5 - kl_tc_c0) < 32u) {
        const float* s = kl_tc_cs + (kl_tc_row + 5 - kl_tc_c0) * 132 + kl_tc_col;
        acc[5][0] += s[0];
        acc[5][1] += s[1];
        acc[5][2] += s[2];
        acc[5][3] += s[3];
        acc[5][4] += s[4];
        acc[5][5] += s[5];
        acc[5][6] += s[6];
        acc[5][7] += s[7];
      }
      if ((unsigned)(kl_tc_row + 6 - kl_tc_c0) < 32u) {
        const float* s = kl_tc_cs + (kl_tc_row + 6 - kl_tc_c0) * 132 + kl_tc_col;
        acc[6][0] += s[0];
        acc[6][1] += s[1];
        acc[6][2] += s[2];
        acc[6][3] += s[3];
        acc[6][4] += s[4];
        acc[6][5] += s[5];
        acc[6][6] += s[6];
        acc[6][7] += s[7];
      }
      if ((unsigned)(kl_tc_row + 7 - kl_tc_c0) < 32u) {
        const float* s = kl_tc_cs + (kl_tc_row + 7 - kl_tc_c0) * 132 + kl_tc_col;
        acc[7][0] += s[0];
        acc[7][1] += s[1];
        acc[7][2] += s[2];
        acc[7][3] += s[3];
        acc[7][4] += s[4];
        acc[7][5] += s[5];
        acc[7][6] += s[6];
        acc[7][7] += s[7];
      }
    }
    __syncthreads();
  }
  for (int i = 0; i < RM; ++i) {
    const int r = m0 + tr * RM + i;
    for (int j = 0; j < RN; ++j) {
      const int c = n0 + tc * RN + j;
      if (r < M && c < N) C[(long)r * N + c] = __float2bfloat16(acc[i][j]);
    }
  }
}

extern "C" __global__ void __launch_bounds__(THREADS) gemm_tiles_fp16(const __half* A, const __half* B, __half* C,
                                                                   int M, int N, int K) {
  __shared__ __align__(16) __half As[TILE_M][TILE_K + PAD];
  __shared__ __align__(16) __half Bs[TILE_K][TILE_N + PAD];
  const int tid = threadIdx.x;
  const int tr = tid / (TILE_N / RN), tc = tid % (TILE_N / RN);
  const int m0 = blockIdx.y * TILE_M, n0 = blockIdx.x * TILE_N;
  float acc[RM][RN];
  for (int i = 0; i < RM; ++i)
    for (int j = 0; j < RN; ++j) acc[i][j] = 0.0f;
  // mma-micro-kernel: each warp's fp32 accumulator fragments
  float kl_tc_acc[4][4][4] = {};
  for (int k0 = 0; k0 < K; k0 += TILE_K) {
    // A tile: 128 rows x 32 columns, 8-element chunks
    for (int c = tid; c < TILE_M * TILE_K / 8; c += THREADS) {
      const int r = c / (TILE_K / 8), kk = (c % (TILE_K / 8)) * 8;
      const long at = (long)(m0 + r) * K + k0 + kk;
      if (m0 + r < M && tile_chunk_ok(A, at, K - k0 - kk)) {
        *reinterpret_cast<uint4*>(&As[r][kk]) = *reinterpret_cast<const uint4*>(A + at);
      } else {
        for (int e = 0; e < 8; ++e)
          As[r][kk + e] = (m0 + r < M && k0 + kk + e < K) ? A[at + e] : __float2half(0.0f);
      }
    }
    // B tile: 32 rows x 128 columns, 8-element chunks
    for (int c = tid; c < TILE_K * TILE_N / 8; c += THREADS) {
      const int kk = c / (TILE_N / 8), n = (c % (TILE_N / 8)) * 8;
      const long at = (long)(k0 + kk) * N + n0 + n;
      if (k0 + kk < K && tile_chunk_ok(B, at, N - n0 - n)) {
        *reinterpret_cast<uint4*>(&Bs[kk][n]) = *reinterpret_cast<const uint4*>(B + at);
      } else {
        for (int e = 0; e < 8; ++e)
          Bs[kk][n + e] = (k0 + kk < K && n0 + n + e < N) ? B[at + e] : __float2half(0.0f);
      }
    }
    __syncthreads();
    {  // mma-micro-kernel: this K step on tensor cores (mma.sync m16n8k16)
      const int kl_tc_lane = (int)threadIdx.x % 32, kl_tc_warp = (int)threadIdx.x / 32;
      const int kl_tc_wm = kl_tc_warp / 4 * 64, kl_tc_wn = kl_tc_warp % 4 * 32;
      const unsigned short* kl_tc_pa = reinterpret_cast<const unsigned short*>(As) + 0;
      const unsigned short* kl_tc_pb = reinterpret_cast<const unsigned short*>(Bs) + 0;
#pragma unroll
      for (int kl_tc_k = 0; kl_tc_k < 32; kl_tc_k += 16) {
        unsigned kl_tc_fa[4][4], kl_tc_fb[4][2];
        #pragma unroll
        for (int kl_tc_i = 0; kl_tc_i < 4; ++kl_tc_i) {
          kl_tc_frag_a<false, 16, 2, 40, 1>(kl_tc_fa[kl_tc_i], kl_tc_pa, kl_tc_lane, kl_tc_wm + 16 * kl_tc_i, kl_tc_k);
        }
        #pragma unroll
        for (int kl_tc_j = 0; kl_tc_j < 4; kl_tc_j += 2) {
          kl_tc_frag_b2<false, 16, 3, 136, 1>(kl_tc_fb[kl_tc_j], kl_tc_fb[kl_tc_j + 1], kl_tc_pb, kl_tc_lane, kl_tc_k, kl_tc_wn + 8 * kl_tc_j);
        }
        #pragma unroll
        for (int kl_tc_i = 0; kl_tc_i < 4; ++kl_tc_i) {
        #pragma unroll
          for (int kl_tc_j = 0; kl_tc_j < 4; ++kl_tc_j) {
            kl_tc_mma<false, 16>(kl_tc_acc[kl_tc_i][kl_tc_j], kl_tc_fa[kl_tc_i], kl_tc_fb[kl_tc_j]);
          }
        }
      }
    }
    __syncthreads();
  }
  {  // mma-micro-kernel: the fragments into this thread's accumulators, through shared memory
    __shared__ float kl_tc_cs[4224];
    const int kl_tc_lane = (int)threadIdx.x % 32, kl_tc_warp = (int)threadIdx.x / 32;
    const int kl_tc_wm = kl_tc_warp / 4 * 64, kl_tc_wn = kl_tc_warp % 4 * 32;
    const int kl_tc_row = ((int)threadIdx.x >> 4) * 8, kl_tc_col = ((int)threadIdx.x & 15) * 8;
#pragma unroll 1
    for (int kl_tc_c0 = 0; kl_tc_c0 < 128; kl_tc_c0 += 32) {
      __syncthreads();
#pragma unroll
      for (int kl_tc_i = 0; kl_tc_i < 4; ++kl_tc_i) {
#pragma unroll
        for (int kl_tc_j = 0; kl_tc_j < 4; ++kl_tc_j) {
#pragma unroll
          for (int kl_tc_h = 0; kl_tc_h < 2; ++kl_tc_h) {
            const int r = kl_tc_wm + 16 * kl_tc_i + kl_tc_lane / 4 + 8 * kl_tc_h - kl_tc_c0;
            if (r >= 0 && r < 32) {
              float* o = kl_tc_cs + r * 132 + kl_tc_wn + 8 * kl_tc_j + 2 * (kl_tc_lane % 4);
              o[0] = kl_tc_acc[kl_tc_i][kl_tc_j][2 * kl_tc_h];
              o[1] = kl_tc_acc[kl_tc_i][kl_tc_j][2 * kl_tc_h + 1];
            }
          }
        }
      }
      __syncthreads();
      if ((unsigned)(kl_tc_row - kl_tc_c0) < 32u) {
        const float* s = kl_tc_cs + (kl_tc_row - kl_tc_c0) * 132 + kl_tc_col;
        acc[0][0] += s[0];
        acc[0][1] += s[1];
        acc[0][2] += s[2];
        acc[0][3] += s[3];
        acc[0][4] += s[4];
        acc[0][5] += s[5];
        acc[0][6] += s[6];
        acc[0][7] += s[7];
      }
      if ((unsigned)(kl_tc_row + 1 - kl_tc_c0) < 32u) {
        const float* s = kl_tc_cs + (kl_tc_row + 1 - kl_tc_c0) * 132 + kl_tc_col;
        acc[1][0] += s[0];
        acc[1][1] += s[1];
        acc[1][2] += s[2];
        acc[1][3] += s[3];
        acc[1][4] += s[4];
        acc[1][5] += s[5];
        acc[1][6] += s[6];
        acc[1][7] += s[7];
      }
      if ((unsigned)(kl_tc_row + 2 - kl_tc_c0) < 32u) {
        const float* s = kl_tc_cs + (kl_tc_row + 2 - kl_tc_c0) * 132 + kl_tc_col;
        acc[2][0] += s[0];
        acc[2][1] += s[1];
        acc[2][2] += s[2];
        acc[2][3] += s[3];
        acc[2][4] += s[4];
        acc[2][5] += s[5];
        acc[2][6] += s[6];
        acc[2][7] += s[7];
      }
      if ((unsigned)(kl_tc_row + 3 - kl_tc_c0) < 32u) {
        const float* s = kl_tc_cs + (kl_tc_row + 3 - kl_tc_c0) * 132 + kl_tc_col;
        acc[3][0] += s[0];
        acc[3][1] += s[1];
        acc[3][2] += s[2];
        acc[3][3] += s[3];
        acc[3][4] += s[4];
        acc[3][5] += s[5];
        acc[3][6] += s[6];
        acc[3][7] += s[7];
      }
      if ((unsigned)(kl_tc_row + 4 - kl_tc_c0) < 32u) {
        const float* s = kl_tc_cs + (kl_tc_row + 4 - kl_tc_c0) * 132 + kl_tc_col;
        acc[4][0] += s[0];
        acc[4][1] += s[1];
        acc[4][2] += s[2];
        acc[4][3] += s[3];
        acc[4][4] += s[4];
        acc[4][5] += s[5];
        acc[4][6] += s[6];
        acc[4][7] += s[7];
      }
      if ((unsigned)(kl_tc_row + 5 - kl_tc_c0) < 32u) {
        const float* s = kl_tc_cs + (kl_tc_row + 5 - kl_tc_c0) * 132 + kl_tc_col;
        acc[5][0] += s[0];
        acc[5][1] += s[1];
        acc[5][2] += s[2];
        acc[5][3] += s[3];
        acc[5][4] += s[4];
        acc[5][5] += s[5];
        acc[5][6] += s[6];
        acc[5][7] += s[7];
      }
      if ((unsigned)(kl_tc_row + 6 - kl_tc_c0) < 32u) {
        const float* s = kl_tc_cs + (kl_tc_row + 6 - kl_tc_c0) * 132 + kl_tc_col;
        acc[6][0] += s[0];
        acc[6][1] += s[1];
        acc[6][2] += s[2];
        acc[6][3] += s[3];
        acc[6][4] += s[4];
        acc[6][5] += s[5];
        acc[6][6] += s[6];
        acc[6][7] += s[7];
      }
      if ((unsigned)(kl_tc_row + 7 - kl_tc_c0) < 32u) {
        const float* s = kl_tc_cs + (kl_tc_row + 7 - kl_tc_c0) * 132 + kl_tc_col;
        acc[7][0] += s[0];
        acc[7][1] += s[1];
        acc[7][2] += s[2];
        acc[7][3] += s[3];
        acc[7][4] += s[4];
        acc[7][5] += s[5];
        acc[7][6] += s[6];
        acc[7][7] += s[7];
      }
    }
    __syncthreads();
  }
  for (int i = 0; i < RM; ++i) {
    const int r = m0 + tr * RM + i;
    for (int j = 0; j < RN; ++j) {
      const int c = n0 + tc * RN + j;
      if (r < M && c < N) C[(long)r * N + c] = __float2half(acc[i][j]);
    }
  }
}
