// CUDA C++ GEMM written the tutorial way and put on the expert schedule of `gemm-schedule`:
// C = A @ B, row-major, bf16 or fp16 in and out, fp32 accumulation. The kernels' own bodies (a
// 128x128 block tile per 256 threads, 8x8 outputs per thread, written through bounds checks)
// run once per block of a persistent loop over 128x128 tiles whose K loop stages 32-deep slices
// with cp.async and multiplies them on tensor cores.
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
// ---- 16-byte asynchronous staging of 128-wide, 32-deep GEMM slices (cp.async, zero fill) ----
__device__ __forceinline__ void kl_gs_cp16(void* dst, const void* src, int bytes) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" :: "r"(d), "l"(src), "r"(bytes));
}
__device__ __forceinline__ void kl_gs_commit() { asm volatile("cp.async.commit_group;"); }
template <int N>
__device__ __forceinline__ void kl_gs_wait() { asm volatile("cp.async.wait_group %0;" :: "n"(N)); }
// one operand's slice into a shared tile: KC (k contiguous in memory) keeps it as rows of k per
// mn from g[mn * ld + k], else as rows of mn per k from g[k * ld + mn]; elements past mn_end /
// k_end are zero; VEC: 16-byte copies (ld a multiple of 8, g 16-byte aligned). SW 0: rows of
// PITCH elements; SW 1: K-major rows of BK = 32 elements, 64-byte swizzle; SW 2: MN-major atoms of
// 64 elements x BK rows, 128-byte swizzle (the wgmma canonical layouts)
template <bool KC, int MN, int BK, int PITCH, int NT, int SW>
__device__ __forceinline__ void kl_gs_load(unsigned short* tile, const unsigned short* g, long ld,
                                           int mn0, int k0, int mn_end, int k_end, bool vec, int tid) {
  constexpr int CH = KC ? BK / 8 : MN / 8;
  constexpr int ROWS = KC ? MN : BK;
  for (int c = tid; c < ROWS * CH; c += NT) {
    const int r = c / CH, e = (c % CH) * 8;
    const int mn = KC ? mn0 + r : mn0 + e, k = KC ? k0 + e : k0 + r;
    int valid;
    long at;
    if (KC) {
      valid = mn < mn_end ? min(max(k_end - k, 0), 8) : 0;
      at = (long)mn * ld + k;
    } else {
      valid = k < k_end ? min(max(mn_end - mn, 0), 8) : 0;
      at = (long)k * ld + mn;
    }
    int off = r * PITCH + e;
    if (SW == 1) {
      const int b = r * BK * 2 + e * 2;
      off = (b ^ (((b >> 7) & 3) << 4)) / 2;
    } else if (SW == 2) {
      const int b = (e / 64) * BK * 128 + r * 128 + (e % 64) * 2;
      off = (b ^ (((b >> 7) & 7) << 4)) / 2;
    }
    unsigned short* dst = tile + off;
    if (vec) {
      kl_gs_cp16(dst, valid > 0 ? g + at : g, valid * 2);
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i) dst[i] = i < valid ? g[at + i] : (unsigned short)0;
    }
  }
}
// a wgmma shared-memory descriptor: start, leading / stride byte offsets, swizzle mode
// (1: 128-byte, 2: 64-byte)
__device__ __forceinline__ unsigned long long kl_gs_desc(const void* p, unsigned lbo, unsigned sbo,
                                                         unsigned mode) {
  const unsigned long long a = static_cast<unsigned>(__cvta_generic_to_shared(p));
  return ((a & 0x3FFFFull) >> 4) | ((unsigned long long)(lbo >> 4) << 16) |
         ((unsigned long long)(sbo >> 4) << 32) | ((unsigned long long)mode << 62);
}
#define TILE_M 128
#define TILE_N 128
#define TILE_K 16
#define RM 8
#define RN 8
#define THREADS 256

extern "C" __global__ void __launch_bounds__(THREADS) gemm_sched_bf16(const __nv_bfloat16* A, const __nv_bfloat16* B,
                                                                   __nv_bfloat16* C, int M, int N, int K) {
  // gemm-schedule: {"A": {"block_axis": "y", "bound": "M", "layout": "mk", "ld": "K", "pointer": "A"}, "B": {"block_axis": "x", "bound": "N", "layout": "kn", "ld": "N", "pointer": "B"}, "K": "K", "block": [256, 1], "block_tile": [128, 128, 16], "dtype": "bf16", "kernel": "gemm_sched_bf16", "schedule": [128, 128, 32, 2], "wgmma": false}
  // a persistent loop over 128x128 tiles: cp.async 2-slot ring, ldmatrix + mma.sync m16n8k16,
  // then, per 128x128 block of the tile, the kernel's own body with the block's coordinates and its accumulators filled
  __shared__ __align__(1024) unsigned char kl_gs_smem[37888];
  const int kl_gs_M = M, kl_gs_N = N, kl_gs_K = K;
  const long kl_gs_lda = K, kl_gs_ldb = N;
  const unsigned short* kl_gs_ga = reinterpret_cast<const unsigned short*>(A);
  const unsigned short* kl_gs_gb = reinterpret_cast<const unsigned short*>(B);
  const bool kl_gs_veca = (kl_gs_lda % 8 == 0) && ((reinterpret_cast<unsigned long long>(kl_gs_ga) & 15) == 0);
  const bool kl_gs_vecb = (kl_gs_ldb % 8 == 0) && ((reinterpret_cast<unsigned long long>(kl_gs_gb) & 15) == 0);
  unsigned short* kl_gs_sa = reinterpret_cast<unsigned short*>(kl_gs_smem);
  unsigned short* kl_gs_sb = kl_gs_sa + 10240;
  const int kl_gs_tid = (int)threadIdx.x, kl_gs_lane = kl_gs_tid % 32, kl_gs_warp = kl_gs_tid / 32;
  const int kl_gs_wm = kl_gs_warp / 4 * 64, kl_gs_wn = kl_gs_warp % 4 * 32;
  const int kl_gs_tiles_m = (kl_gs_M + 127) / 128, kl_gs_tiles_n = (kl_gs_N + 127) / 128;
  const int kl_gs_blocks = (int)(gridDim.x * gridDim.y * gridDim.z);
  float kl_gs_acc[4][4][4];
  #pragma unroll 1
  for (int kl_gs_t = (int)(blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z)); kl_gs_t < kl_gs_tiles_m * kl_gs_tiles_n; kl_gs_t += kl_gs_blocks) {
    // grouped order: 8 tile rows at a time share the B slices in L2
    const int kl_gs_group = kl_gs_t / (8 * kl_gs_tiles_n), kl_gs_first = kl_gs_group * 8;
    const int kl_gs_rows = min(kl_gs_tiles_m - kl_gs_first, 8);
    const int kl_gs_tm = kl_gs_first + (kl_gs_t % (8 * kl_gs_tiles_n)) % kl_gs_rows;
    const int kl_gs_tn = (kl_gs_t % (8 * kl_gs_tiles_n)) / kl_gs_rows;
    const int kl_gs_m0 = kl_gs_tm * 128, kl_gs_n0 = kl_gs_tn * 128;
    #pragma unroll
    for (int kl_gs_i = 0; kl_gs_i < 4; ++kl_gs_i)
      for (int kl_gs_j = 0; kl_gs_j < 4; ++kl_gs_j)
        for (int kl_gs_h = 0; kl_gs_h < 4; ++kl_gs_h) kl_gs_acc[kl_gs_i][kl_gs_j][kl_gs_h] = 0.0f;
    const int kl_gs_kt = (kl_gs_K + 31) / 32;
    for (int kl_gs_s = 0; kl_gs_s < 1; ++kl_gs_s) {
      if (kl_gs_s < kl_gs_kt) { kl_gs_load<true, 128, 32, 40, 256, 0>(kl_gs_sa + (kl_gs_s) * 5120, kl_gs_ga, kl_gs_lda, kl_gs_m0, (kl_gs_s) * 32, kl_gs_M, kl_gs_K, kl_gs_veca, kl_gs_tid); kl_gs_load<false, 128, 32, 136, 256, 0>(kl_gs_sb + (kl_gs_s) * 4352, kl_gs_gb, kl_gs_ldb, kl_gs_n0, (kl_gs_s) * 32, kl_gs_N, kl_gs_K, kl_gs_vecb, kl_gs_tid); }
      kl_gs_commit();
    }
    #pragma unroll 1
    for (int kl_gs_k = 0; kl_gs_k < kl_gs_kt; ++kl_gs_k) {
      kl_gs_wait<0>();
      __syncthreads();
      {
        const int kl_gs_next = kl_gs_k + 1;
        if (kl_gs_next < kl_gs_kt) { kl_gs_load<true, 128, 32, 40, 256, 0>(kl_gs_sa + (kl_gs_next % 2) * 5120, kl_gs_ga, kl_gs_lda, kl_gs_m0, (kl_gs_next) * 32, kl_gs_M, kl_gs_K, kl_gs_veca, kl_gs_tid); kl_gs_load<false, 128, 32, 136, 256, 0>(kl_gs_sb + (kl_gs_next % 2) * 4352, kl_gs_gb, kl_gs_ldb, kl_gs_n0, (kl_gs_next) * 32, kl_gs_N, kl_gs_K, kl_gs_vecb, kl_gs_tid); }
        kl_gs_commit();
      }
      const unsigned short* kl_gs_ta = kl_gs_sa + (kl_gs_k % 2) * 5120;
      const unsigned short* kl_gs_tb = kl_gs_sb + (kl_gs_k % 2) * 4352;
#pragma unroll
      for (int kl_gs_kk = 0; kl_gs_kk < 32; kl_gs_kk += 16) {
        unsigned kl_gs_fa[4][4], kl_gs_fb[4][2];
#pragma unroll
        for (int kl_gs_i = 0; kl_gs_i < 4; ++kl_gs_i)
          kl_tc_frag_a<true, 16, 2, 40, 1>(kl_gs_fa[kl_gs_i], kl_gs_ta, kl_gs_lane, kl_gs_wm + 16 * kl_gs_i, kl_gs_kk);
#pragma unroll
        for (int kl_gs_j = 0; kl_gs_j < 4; kl_gs_j += 2)
          kl_tc_frag_b2<true, 16, 3, 136, 1>(kl_gs_fb[kl_gs_j], kl_gs_fb[kl_gs_j + 1], kl_gs_tb, kl_gs_lane, kl_gs_kk, kl_gs_wn + 8 * kl_gs_j);
#pragma unroll
        for (int kl_gs_i = 0; kl_gs_i < 4; ++kl_gs_i)
#pragma unroll
          for (int kl_gs_j = 0; kl_gs_j < 4; ++kl_gs_j)
            kl_tc_mma<true, 16>(kl_gs_acc[kl_gs_i][kl_gs_j], kl_gs_fa[kl_gs_i], kl_gs_fb[kl_gs_j]);
      }
    }
    kl_gs_wait<0>();
    __syncthreads();
    #pragma unroll 1
    for (int kl_gs_v = 0; kl_gs_v < 1; ++kl_gs_v) {
      const int kl_gs_sm = kl_gs_v / 1 * 128, kl_gs_sn = kl_gs_v % 1 * 128;
      if (kl_gs_m0 + kl_gs_sm >= kl_gs_M || kl_gs_n0 + kl_gs_sn >= kl_gs_N) continue;
      const uint3 kl_gs_vb = make_uint3((unsigned)(kl_gs_tn * 1 + kl_gs_v % 1), (unsigned)(kl_gs_tm * 1 + kl_gs_v / 1), 0u);
      const uint3 kl_gs_vg = make_uint3((unsigned)((kl_gs_N + 127) / 128), (unsigned)((kl_gs_M + 127) / 128), 1u);
      {  // gemm-schedule: the kernel's own body for this block

  const int tid = threadIdx.x;
  const int tr = tid / (TILE_N / RN), tc = tid % (TILE_N / RN);
  const int m0 = kl_gs_vb.y * TILE_M, n0 = kl_gs_vb.x * TILE_N;
  float acc[RM][RN];
  for (int i = 0; i < RM; ++i)
    for (int j = 0; j < RN; ++j) acc[i][j] = 0.0f;
  {  // gemm-schedule: the tile's fragments into this thread's accumulators
    float* kl_gs_x = reinterpret_cast<float*>(kl_gs_smem);
    const int kl_gs_row = ((int)threadIdx.x >> 4) * 8, kl_gs_col = ((int)threadIdx.x & 15) * 8;
    #pragma unroll 1
    for (int kl_gs_c0 = 0; kl_gs_c0 < 128; kl_gs_c0 += 64) {
      __syncthreads();
      #pragma unroll
      for (int kl_gs_i = 0; kl_gs_i < 4; ++kl_gs_i)
      #pragma unroll
        for (int kl_gs_j = 0; kl_gs_j < 4; ++kl_gs_j)
      #pragma unroll
          for (int kl_gs_h = 0; kl_gs_h < 2; ++kl_gs_h) {
          const int r = kl_gs_wm + 16 * kl_gs_i + kl_gs_lane / 4 + 8 * kl_gs_h - kl_gs_sm - kl_gs_c0;
          const int q = kl_gs_wn + 8 * kl_gs_j + 2 * (kl_gs_lane % 4) - kl_gs_sn;
          if ((unsigned)r < 64u && (unsigned)q < 128u) {
            kl_gs_x[r * 132 + q] = kl_gs_acc[kl_gs_i][kl_gs_j][2 * kl_gs_h];
            kl_gs_x[r * 132 + q + 1] = kl_gs_acc[kl_gs_i][kl_gs_j][2 * kl_gs_h + 1];
          }
          }
      __syncthreads();
      if ((unsigned)(kl_gs_row - kl_gs_c0) < 64u) {
        const float* x = kl_gs_x + (kl_gs_row - kl_gs_c0) * 132 + kl_gs_col;
        acc[0][0] += x[0];
        acc[0][1] += x[1];
        acc[0][2] += x[2];
        acc[0][3] += x[3];
        acc[0][4] += x[4];
        acc[0][5] += x[5];
        acc[0][6] += x[6];
        acc[0][7] += x[7];
      }
      if ((unsigned)(kl_gs_row + 1 - kl_gs_c0) < 64u) {
        const float* x = kl_gs_x + (kl_gs_row + 1 - kl_gs_c0) * 132 + kl_gs_col;
        acc[1][0] += x[0];
        acc[1][1] += x[1];
        acc[1][2] += x[2];
        acc[1][3] += x[3];
        acc[1][4] += x[4];
        acc[1][5] += x[5];
        acc[1][6] += x[6];
        acc[1][7] += x[7];
      }
      if ((unsigned)(kl_gs_row + 2 - kl_gs_c0) < 64u) {
        const float* x = kl_gs_x + (kl_gs_row + 2 - kl_gs_c0) * 132 + kl_gs_col;
        acc[2][0] += x[0];
        acc[2][1] += x[1];
        acc[2][2] += x[2];
        acc[2][3] += x[3];
        acc[2][4] += x[4];
        acc[2][5] += x[5];
        acc[2][6] += x[6];
        acc[2][7] += x[7];
      }
      if ((unsigned)(kl_gs_row + 3 - kl_gs_c0) < 64u) {
        const float* x = kl_gs_x + (kl_gs_row + 3 - kl_gs_c0) * 132 + kl_gs_col;
        acc[3][0] += x[0];
        acc[3][1] += x[1];
        acc[3][2] += x[2];
        acc[3][3] += x[3];
        acc[3][4] += x[4];
        acc[3][5] += x[5];
        acc[3][6] += x[6];
        acc[3][7] += x[7];
      }
      if ((unsigned)(kl_gs_row + 4 - kl_gs_c0) < 64u) {
        const float* x = kl_gs_x + (kl_gs_row + 4 - kl_gs_c0) * 132 + kl_gs_col;
        acc[4][0] += x[0];
        acc[4][1] += x[1];
        acc[4][2] += x[2];
        acc[4][3] += x[3];
        acc[4][4] += x[4];
        acc[4][5] += x[5];
        acc[4][6] += x[6];
        acc[4][7] += x[7];
      }
      if ((unsigned)(kl_gs_row + 5 - kl_gs_c0) < 64u) {
        const float* x = kl_gs_x + (kl_gs_row + 5 - kl_gs_c0) * 132 + kl_gs_col;
        acc[5][0] += x[0];
        acc[5][1] += x[1];
        acc[5][2] += x[2];
        acc[5][3] += x[3];
        acc[5][4] += x[4];
        acc[5][5] += x[5];
        acc[5][6] += x[6];
        acc[5][7] += x[7];
      }
      if ((unsigned)(kl_gs_row + 6 - kl_gs_c0) < 64u) {
        const float* x = kl_gs_x + (kl_gs_row + 6 - kl_gs_c0) * 132 + kl_gs_col;
        acc[6][0] += x[0];
        acc[6][1] += x[1];
        acc[6][2] += x[2];
        acc[6][3] += x[3];
        acc[6][4] += x[4];
        acc[6][5] += x[5];
        acc[6][6] += x[6];
        acc[6][7] += x[7];
      }
      if ((unsigned)(kl_gs_row + 7 - kl_gs_c0) < 64u) {
        const float* x = kl_gs_x + (kl_gs_row + 7 - kl_gs_c0) * 132 + kl_gs_col;
        acc[7][0] += x[0];
        acc[7][1] += x[1];
        acc[7][2] += x[2];
        acc[7][3] += x[3];
        acc[7][4] += x[4];
        acc[7][5] += x[5];
        acc[7][6] += x[6];
        acc[7][7] += x[7];
      }
    }
    __syncthreads();
  }
  for (int i = 0; i < RM; ++i)
    for (int j = 0; j < RN; ++j) {
      const int r = m0 + tr * RM + i, c = n0 + tc * RN + j;
      if (r < M && c < N) C[(long)r * N + c] = __float2bfloat16(acc[i][j]);
    }

      }
    }
  }
}

extern "C" __global__ void __launch_bounds__(THREADS) gemm_sched_fp16(const __half* A, const __half* B, __half* C,
                                                                   int M, int N, int K) {
  // gemm-schedule: {"A": {"block_axis": "y", "bound": "M", "layout": "mk", "ld": "K", "pointer": "A"}, "B": {"block_axis": "x", "bound": "N", "layout": "kn", "ld": "N", "pointer": "B"}, "K": "K", "block": [256, 1], "block_tile": [128, 128, 16], "dtype": "fp16", "kernel": "gemm_sched_fp16", "schedule": [128, 128, 32, 2], "wgmma": false}
  // a persistent loop over 128x128 tiles: cp.async 2-slot ring, ldmatrix + mma.sync m16n8k16,
  // then, per 128x128 block of the tile, the kernel's own body with the block's coordinates and its accumulators filled
  __shared__ __align__(1024) unsigned char kl_gs_smem[37888];
  const int kl_gs_M = M, kl_gs_N = N, kl_gs_K = K;
  const long kl_gs_lda = K, kl_gs_ldb = N;
  const unsigned short* kl_gs_ga = reinterpret_cast<const unsigned short*>(A);
  const unsigned short* kl_gs_gb = reinterpret_cast<const unsigned short*>(B);
  const bool kl_gs_veca = (kl_gs_lda % 8 == 0) && ((reinterpret_cast<unsigned long long>(kl_gs_ga) & 15) == 0);
  const bool kl_gs_vecb = (kl_gs_ldb % 8 == 0) && ((reinterpret_cast<unsigned long long>(kl_gs_gb) & 15) == 0);
  unsigned short* kl_gs_sa = reinterpret_cast<unsigned short*>(kl_gs_smem);
  unsigned short* kl_gs_sb = kl_gs_sa + 10240;
  const int kl_gs_tid = (int)threadIdx.x, kl_gs_lane = kl_gs_tid % 32, kl_gs_warp = kl_gs_tid / 32;
  const int kl_gs_wm = kl_gs_warp / 4 * 64, kl_gs_wn = kl_gs_warp % 4 * 32;
  const int kl_gs_tiles_m = (kl_gs_M + 127) / 128, kl_gs_tiles_n = (kl_gs_N + 127) / 128;
  const int kl_gs_blocks = (int)(gridDim.x * gridDim.y * gridDim.z);
  float kl_gs_acc[4][4][4];
  #pragma unroll 1
  for (int kl_gs_t = (int)(blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z)); kl_gs_t < kl_gs_tiles_m * kl_gs_tiles_n; kl_gs_t += kl_gs_blocks) {
    // grouped order: 8 tile rows at a time share the B slices in L2
    const int kl_gs_group = kl_gs_t / (8 * kl_gs_tiles_n), kl_gs_first = kl_gs_group * 8;
    const int kl_gs_rows = min(kl_gs_tiles_m - kl_gs_first, 8);
    const int kl_gs_tm = kl_gs_first + (kl_gs_t % (8 * kl_gs_tiles_n)) % kl_gs_rows;
    const int kl_gs_tn = (kl_gs_t % (8 * kl_gs_tiles_n)) / kl_gs_rows;
    const int kl_gs_m0 = kl_gs_tm * 128, kl_gs_n0 = kl_gs_tn * 128;
    #pragma unroll
    for (int kl_gs_i = 0; kl_gs_i < 4; ++kl_gs_i)
      for (int kl_gs_j = 0; kl_gs_j < 4; ++kl_gs_j)
        for (int kl_gs_h = 0; kl_gs_h < 4; ++kl_gs_h) kl_gs_acc[kl_gs_i][kl_gs_j][kl_gs_h] = 0.0f;
    const int kl_gs_kt = (kl_gs_K + 31) / 32;
    for (int kl_gs_s = 0; kl_gs_s < 1; ++kl_gs_s) {
      if (kl_gs_s < kl_gs_kt) { kl_gs_load<true, 128, 32, 40, 256, 0>(kl_gs_sa + (kl_gs_s) * 5120, kl_gs_ga, kl_gs_lda, kl_gs_m0, (kl_gs_s) * 32, kl_gs_M, kl_gs_K, kl_gs_veca, kl_gs_tid); kl_gs_load<false, 128, 32, 136, 256, 0>(kl_gs_sb + (kl_gs_s) * 4352, kl_gs_gb, kl_gs_ldb, kl_gs_n0, (kl_gs_s) * 32, kl_gs_N, kl_gs_K, kl_gs_vecb, kl_gs_tid); }
      kl_gs_commit();
    }
    #pragma unroll 1
    for (int kl_gs_k = 0; kl_gs_k < kl_gs_kt; ++kl_gs_k) {
      kl_gs_wait<0>();
      __syncthreads();
      {
        const int kl_gs_next = kl_gs_k + 1;
        if (kl_gs_next < kl_gs_kt) { kl_gs_load<true, 128, 32, 40, 256, 0>(kl_gs_sa + (kl_gs_next % 2) * 5120, kl_gs_ga, kl_gs_lda, kl_gs_m0, (kl_gs_next) * 32, kl_gs_M, kl_gs_K, kl_gs_veca, kl_gs_tid); kl_gs_load<false, 128, 32, 136, 256, 0>(kl_gs_sb + (kl_gs_next % 2) * 4352, kl_gs_gb, kl_gs_ldb, kl_gs_n0, (kl_gs_next) * 32, kl_gs_N, kl_gs_K, kl_gs_vecb, kl_gs_tid); }
        kl_gs_commit();
      }
      const unsigned short* kl_gs_ta = kl_gs_sa + (kl_gs_k % 2) * 5120;
      const unsigned short* kl_gs_tb = kl_gs_sb + (kl_gs_k % 2) * 4352;
#pragma unroll
      for (int kl_gs_kk = 0; kl_gs_kk < 32; kl_gs_kk += 16) {
        unsigned kl_gs_fa[4][4], kl_gs_fb[4][2];
#pragma unroll
        for (int kl_gs_i = 0; kl_gs_i < 4; ++kl_gs_i)
          kl_tc_frag_a<false, 16, 2, 40, 1>(kl_gs_fa[kl_gs_i], kl_gs_ta, kl_gs_lane, kl_gs_wm + 16 * kl_gs_i, kl_gs_kk);
#pragma unroll
        for (int kl_gs_j = 0; kl_gs_j < 4; kl_gs_j += 2)
          kl_tc_frag_b2<false, 16, 3, 136, 1>(kl_gs_fb[kl_gs_j], kl_gs_fb[kl_gs_j + 1], kl_gs_tb, kl_gs_lane, kl_gs_kk, kl_gs_wn + 8 * kl_gs_j);
#pragma unroll
        for (int kl_gs_i = 0; kl_gs_i < 4; ++kl_gs_i)
#pragma unroll
          for (int kl_gs_j = 0; kl_gs_j < 4; ++kl_gs_j)
            kl_tc_mma<false, 16>(kl_gs_acc[kl_gs_i][kl_gs_j], kl_gs_fa[kl_gs_i], kl_gs_fb[kl_gs_j]);
      }
    }
    kl_gs_wait<0>();
    __syncthreads();
    #pragma unroll 1
    for (int kl_gs_v = 0; kl_gs_v < 1; ++kl_gs_v) {
      const int kl_gs_sm = kl_gs_v / 1 * 128, kl_gs_sn = kl_gs_v % 1 * 128;
      if (kl_gs_m0 + kl_gs_sm >= kl_gs_M || kl_gs_n0 + kl_gs_sn >= kl_gs_N) continue;
      const uint3 kl_gs_vb = make_uint3((unsigned)(kl_gs_tn * 1 + kl_gs_v % 1), (unsigned)(kl_gs_tm * 1 + kl_gs_v / 1), 0u);
      const uint3 kl_gs_vg = make_uint3((unsigned)((kl_gs_N + 127) / 128), (unsigned)((kl_gs_M + 127) / 128), 1u);
      {  // gemm-schedule: the kernel's own body for this block

  const int tid = threadIdx.x;
  const int tr = tid / (TILE_N / RN), tc = tid % (TILE_N / RN);
  const int m0 = kl_gs_vb.y * TILE_M, n0 = kl_gs_vb.x * TILE_N;
  float acc[RM][RN];
  for (int i = 0; i < RM; ++i)
    for (int j = 0; j < RN; ++j) acc[i][j] = 0.0f;
  {  // gemm-schedule: the tile's fragments into this thread's accumulators
    float* kl_gs_x = reinterpret_cast<float*>(kl_gs_smem);
    const int kl_gs_row = ((int)threadIdx.x >> 4) * 8, kl_gs_col = ((int)threadIdx.x & 15) * 8;
    #pragma unroll 1
    for (int kl_gs_c0 = 0; kl_gs_c0 < 128; kl_gs_c0 += 64) {
      __syncthreads();
      #pragma unroll
      for (int kl_gs_i = 0; kl_gs_i < 4; ++kl_gs_i)
      #pragma unroll
        for (int kl_gs_j = 0; kl_gs_j < 4; ++kl_gs_j)
      #pragma unroll
          for (int kl_gs_h = 0; kl_gs_h < 2; ++kl_gs_h) {
          const int r = kl_gs_wm + 16 * kl_gs_i + kl_gs_lane / 4 + 8 * kl_gs_h - kl_gs_sm - kl_gs_c0;
          const int q = kl_gs_wn + 8 * kl_gs_j + 2 * (kl_gs_lane % 4) - kl_gs_sn;
          if ((unsigned)r < 64u && (unsigned)q < 128u) {
            kl_gs_x[r * 132 + q] = kl_gs_acc[kl_gs_i][kl_gs_j][2 * kl_gs_h];
            kl_gs_x[r * 132 + q + 1] = kl_gs_acc[kl_gs_i][kl_gs_j][2 * kl_gs_h + 1];
          }
          }
      __syncthreads();
      if ((unsigned)(kl_gs_row - kl_gs_c0) < 64u) {
        const float* x = kl_gs_x + (kl_gs_row - kl_gs_c0) * 132 + kl_gs_col;
        acc[0][0] += x[0];
        acc[0][1] += x[1];
        acc[0][2] += x[2];
        acc[0][3] += x[3];
        acc[0][4] += x[4];
        acc[0][5] += x[5];
        acc[0][6] += x[6];
        acc[0][7] += x[7];
      }
      if ((unsigned)(kl_gs_row + 1 - kl_gs_c0) < 64u) {
        const float* x = kl_gs_x + (kl_gs_row + 1 - kl_gs_c0) * 132 + kl_gs_col;
        acc[1][0] += x[0];
        acc[1][1] += x[1];
        acc[1][2] += x[2];
        acc[1][3] += x[3];
        acc[1][4] += x[4];
        acc[1][5] += x[5];
        acc[1][6] += x[6];
        acc[1][7] += x[7];
      }
      if ((unsigned)(kl_gs_row + 2 - kl_gs_c0) < 64u) {
        const float* x = kl_gs_x + (kl_gs_row + 2 - kl_gs_c0) * 132 + kl_gs_col;
        acc[2][0] += x[0];
        acc[2][1] += x[1];
        acc[2][2] += x[2];
        acc[2][3] += x[3];
        acc[2][4] += x[4];
        acc[2][5] += x[5];
        acc[2][6] += x[6];
        acc[2][7] += x[7];
      }
      if ((unsigned)(kl_gs_row + 3 - kl_gs_c0) < 64u) {
        const float* x = kl_gs_x + (kl_gs_row + 3 - kl_gs_c0) * 132 + kl_gs_col;
        acc[3][0] += x[0];
        acc[3][1] += x[1];
        acc[3][2] += x[2];
        acc[3][3] += x[3];
        acc[3][4] += x[4];
        acc[3][5] += x[5];
        acc[3][6] += x[6];
        acc[3][7] += x[7];
      }
      if ((unsigned)(kl_gs_row + 4 - kl_gs_c0) < 64u) {
        const float* x = kl_gs_x + (kl_gs_row + 4 - kl_gs_c0) * 132 + kl_gs_col;
        acc[4][0] += x[0];
        acc[4][1] += x[1];
        acc[4][2] += x[2];
        acc[4][3] += x[3];
        acc[4][4] += x[4];
        acc[4][5] += x[5];
        acc[4][6] += x[6];
        acc[4][7] += x[7];
      }
      if ((unsigned)(kl_gs_row + 5 - kl_gs_c0) < 64u) {
        const float* x = kl_gs_x + (kl_gs_row + 5 - kl_gs_c0) * 132 + kl_gs_col;
        acc[5][0] += x[0];
        acc[5][1] += x[1];
        acc[5][2] += x[2];
        acc[5][3] += x[3];
        acc[5][4] += x[4];
        acc[5][5] += x[5];
        acc[5][6] += x[6];
        acc[5][7] += x[7];
      }
      if ((unsigned)(kl_gs_row + 6 - kl_gs_c0) < 64u) {
        const float* x = kl_gs_x + (kl_gs_row + 6 - kl_gs_c0) * 132 + kl_gs_col;
        acc[6][0] += x[0];
        acc[6][1] += x[1];
        acc[6][2] += x[2];
        acc[6][3] += x[3];
        acc[6][4] += x[4];
        acc[6][5] += x[5];
        acc[6][6] += x[6];
        acc[6][7] += x[7];
      }
      if ((unsigned)(kl_gs_row + 7 - kl_gs_c0) < 64u) {
        const float* x = kl_gs_x + (kl_gs_row + 7 - kl_gs_c0) * 132 + kl_gs_col;
        acc[7][0] += x[0];
        acc[7][1] += x[1];
        acc[7][2] += x[2];
        acc[7][3] += x[3];
        acc[7][4] += x[4];
        acc[7][5] += x[5];
        acc[7][6] += x[6];
        acc[7][7] += x[7];
      }
    }
    __syncthreads();
  }
  for (int i = 0; i < RM; ++i)
    for (int j = 0; j < RN; ++j) {
      const int r = m0 + tr * RM + i, c = n0 + tc * RN + j;
      if (r < M && c < N) C[(long)r * N + c] = __float2half(acc[i][j]);
    }

      }
    }
  }
}
