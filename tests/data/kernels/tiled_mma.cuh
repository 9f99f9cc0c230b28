// CUTLASS-style tiled tensor-core GEMM building blocks (SM80): cp.async staging into shared
// memory, ldmatrix fragment loads and mma.sync, written for KLineage's parser tests.
#pragma once

#include <cuda_fp16.h>
#include <cstdint>

namespace klt {
namespace gemm {

template <int M, int N, int K>
struct GemmShape {
  static constexpr int kM = M;
  static constexpr int kN = N;
  static constexpr int kK = K;
  static constexpr int kCount = M * N * K;
};

/// Copies 16 bytes global -> shared without staging through registers.
__device__ __forceinline__ void cp_async_16(void* smem_ptr, const void* gmem_ptr, bool pred) {
  unsigned smem_int = static_cast<unsigned>(__cvta_generic_to_shared(smem_ptr));
  asm volatile(
      "{\n"
      "  .reg .pred p;\n"
      "  setp.ne.b32 p, %2, 0;\n"
      "  @p cp.async.cg.shared.global [%0], [%1], 16;\n"
      "}\n" ::"r"(smem_int),
      "l"(gmem_ptr), "r"((int)pred));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&frag)[4], const void* smem_ptr) {
  unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(smem_ptr));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(frag[0]), "=r"(frag[1]), "=r"(frag[2]), "=r"(frag[3])
               : "r"(addr));
}

__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4],
                                             const uint32_t (&b)[2], const float (&c)[4]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]),
        "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
}

template <typename Shape, int Stages, typename Element = half>
struct MmaPipelined {
  using ElementA = Element;
  static constexpr int kStages = Stages;

  struct SharedStorage {
    ElementA a[Stages][Shape::kM * Shape::kK];
    ElementA b[Stages][Shape::kK * Shape::kN];
  };

  __device__ void operator()(int k_tiles, const ElementA* __restrict__ gA,
                             const ElementA* __restrict__ gB, float (&accum)[4],
                             SharedStorage& smem) const {
    int lane = threadIdx.x % 32;
#pragma unroll
    for (int s = 0; s < Stages - 1; ++s) {
      cp_async_16(&smem.a[s][lane * 8], gA + s * Shape::kK + lane * 8, s < k_tiles);
      cp_async_16(&smem.b[s][lane * 8], gB + s * Shape::kK * Shape::kN + lane * 8, s < k_tiles);
      cp_async_commit();
    }
    for (int k = 0; k < k_tiles; ++k) {
      cp_async_wait<Stages - 2>();
      __syncthreads();
      uint32_t a_frag[4];
      uint32_t b_frag[2];
      ldmatrix_x4(a_frag, &smem.a[k % Stages][lane * 8]);
      b_frag[0] = reinterpret_cast<const uint32_t*>(&smem.b[k % Stages][lane * 4])[0];
      b_frag[1] = reinterpret_cast<const uint32_t*>(&smem.b[k % Stages][lane * 4])[1];
      mma_m16n8k16(accum, a_frag, b_frag, accum);
      int next = k + Stages - 1;
      if (next < k_tiles) {
        cp_async_16(&smem.a[next % Stages][lane * 8], gA + next * Shape::kK + lane * 8, true);
        cp_async_16(&smem.b[next % Stages][lane * 8], gB + next * Shape::kK * Shape::kN,
                    true);
      }
      cp_async_commit();
    }
  }
};

template <typename Shape, int Stages>
__global__ void __launch_bounds__(128, 2)
    gemm_kernel(const half* __restrict__ A, const half* __restrict__ B, float* __restrict__ C,
                int m, int n, int k) {
  extern __shared__ __align__(16) char smem_raw[];
  using Mma = MmaPipelined<Shape, Stages>;
  auto& smem = *reinterpret_cast<typename Mma::SharedStorage*>(smem_raw);
  __shared__ float epilogue[Shape::kM][Shape::kN + 4];
  float accum[4] = {0.f, 0.f, 0.f, 0.f};
  const half* gA = A + blockIdx.y * Shape::kM * k;
  const half* gB = B + blockIdx.x * Shape::kN;
  Mma()(k / Shape::kK, gA, gB, accum, smem);
#pragma unroll 4
  for (int i = 0; i < 4; ++i) {
    epilogue[threadIdx.x / 4][(threadIdx.x % 4) * 4 + i] = accum[i];
  }
  __syncthreads();
  int row = blockIdx.y * Shape::kM + threadIdx.x / 4;
  if (row < m) {
    C[row * n + blockIdx.x * Shape::kN + threadIdx.x % 4] = epilogue[threadIdx.x / 4][0];
  }
}

}  // namespace gemm
}  // namespace klt

inline void launch_gemm(const half* A, const half* B, float* C, int m, int n, int k,
                        cudaStream_t stream) {
  using Shape = klt::gemm::GemmShape<64, 64, 32>;
  dim3 grid(n / Shape::kN, m / Shape::kM);
  size_t smem = sizeof(klt::gemm::MmaPipelined<Shape, 3>::SharedStorage);
  klt::gemm::gemm_kernel<Shape, 3><<<grid, 128, smem, stream>>>(A, B, C, m, n, k);
}
