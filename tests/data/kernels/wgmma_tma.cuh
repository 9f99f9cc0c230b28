// SM90-style warp-specialized main loop: mbarrier-synchronized TMA producer, wgmma consumer.
// Inline PTX throughout, as in CUTLASS 3 / ThunderKittens style kernels.
#pragma once
#include <cuda.h>
#include <cstdint>

namespace klt::sm90 {

__device__ static inline void mbarrier_init(uint64_t* bar, int count) {
  uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(bar));
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(addr), "r"(count));
}

__device__ static inline void mbarrier_wait(uint64_t* bar, int phase) {
  uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(bar));
  asm volatile(
      "{\n"
      ".reg .pred P1;\n"
      "LAB_WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n"
      "@P1 bra.uni DONE;\n"
      "bra.uni LAB_WAIT;\n"
      "DONE:\n"
      "}\n" ::"r"(addr), "r"(phase));
}

__device__ static inline void tma_load_2d(void* dst, const CUtensorMap* map, uint64_t* bar,
                                          int c0, int c1) {
  uint32_t d = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  uint32_t b = static_cast<uint32_t>(__cvta_generic_to_shared(bar));
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %2}], [%4];"
      ::"r"(d), "l"(map), "r"(c0), "r"(c1), "r"(b)
      : "memory");
}

template <int ScaleD>
__device__ static inline void wgmma_m64n64k16(float (&d)[32], uint64_t desc_a, uint64_t desc_b) {
  asm volatile(
      "{\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, %10, 1, 1, 0, 0;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7])
      : "l"(desc_a), "l"(desc_b), "n"(ScaleD));
}

__device__ static inline void warpgroup_arrive() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ static inline void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }

template <int N>
__device__ static inline void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

template <int BM, int BN, int BK, int QSIZE>
__global__ void __launch_bounds__(384) __cluster_dims__(1, 1, 1)
    matmul_ws(int M, int N, int K, float* C, const __grid_constant__ CUtensorMap tmA,
              const __grid_constant__ CUtensorMap tmB) {
  __shared__ alignas(128) __nv_bfloat16 sA[QSIZE][BM * BK];
  __shared__ alignas(128) __nv_bfloat16 sB[QSIZE][BK * BN];
  __shared__ uint64_t full[QSIZE], empty[QSIZE];
  const int wg = threadIdx.x / 128;
  const int k_tiles = K / BK;
  if (threadIdx.x == 0) {
    for (int i = 0; i < QSIZE; ++i) {
      mbarrier_init(&full[i], 1);
      mbarrier_init(&empty[i], 256);
    }
  }
  __syncthreads();
  if (wg == 0) {
    // producer warpgroup: one thread issues TMA loads
    if (threadIdx.x == 0) {
      for (int k = 0, q = 0; k < k_tiles; ++k, q = (q + 1) % QSIZE) {
        mbarrier_wait(&empty[q], ((k / QSIZE) & 1) ^ 1);
        tma_load_2d(&sA[q][0], &tmA, &full[q], k * BK, blockIdx.y * BM);
        tma_load_2d(&sB[q][0], &tmB, &full[q], k * BK, blockIdx.x * BN);
      }
    }
  } else {
    float d[32];
#pragma unroll
    for (int i = 0; i < 32; ++i) d[i] = 0.f;
    for (int k = 0, q = 0; k < k_tiles; ++k, q = (q + 1) % QSIZE) {
      mbarrier_wait(&full[q], (k / QSIZE) & 1);
      warpgroup_arrive();
#pragma unroll
      for (int kk = 0; kk < BK / 16; ++kk) {
        wgmma_m64n64k16<1>(d, reinterpret_cast<uint64_t>(&sA[q][kk * 16]),
                           reinterpret_cast<uint64_t>(&sB[q][kk * 16]));
      }
      wgmma_commit();
      wgmma_wait<0>();
      if (threadIdx.x % 128 == 0) {
        asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n"
                     ::"r"(static_cast<uint32_t>(__cvta_generic_to_shared(&empty[q]))));
      }
    }
    int row = blockIdx.y * BM + (threadIdx.x % 128) / 4;
    for (int i = 0; i < 32; ++i) {
      C[row * N + blockIdx.x * BN + i] = d[i];
    }
  }
}

}  // namespace klt::sm90
