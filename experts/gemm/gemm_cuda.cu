// Expert CUDA C++ GEMM: C (M x N) = A (M x K) @ B (K x N), row-major, bf16 or fp16 in and out,
// fp32 accumulation. Compiled at run time with NVRTC (no CUDA headers needed) by gemm_cuda.py.
//
// Two kernels:
// - gemm_wgmma_{bf16,fp16} (Hopper, sm_90a): warp-specialized. One producer warpgroup issues
//   TMA tile copies (cp.async.bulk.tensor, 128-byte swizzle) into a STAGES-deep shared-memory
//   ring guarded by mbarriers; two consumer warpgroups run wgmma (64x256x16 per instruction)
//   straight from shared memory and release each stage once its wgmma group has retired.
//   setmaxnreg moves registers from the producer to the consumers' 128-float accumulators.
//   Launched with one block per SM, each block walks several tiles (persistent), so the
//   producer fills the next tile's stages while the consumers store this one.
//   WG_EPILOGUE picks how the consumers write C: from registers (0), or staged through
//   swizzled shared memory and written by TMA stores (1) or coalesced 16-byte stores (2).
// - gemm_mma_{bf16,fp16} (sm_80+, any shape with K, N multiples of 8): cp.async multi-stage
//   pipeline with 128-bit copies into padded shared tiles, ldmatrix fragment loads and
//   mma.sync m16n8k16 tensor-core instructions.
// Both walk the output tiles in GROUP_M-swizzled order (TILE_RASTER picks along M or N) so
// neighbouring blocks share A/B in L2.

typedef unsigned short u16;             // raw 16-bit element (bf16 or fp16 bit pattern)
typedef unsigned int u32;
typedef unsigned long long u64;

#ifndef GROUP_M
#define GROUP_M 16  // with WG_EPILOGUE 2: 0.962x of cuBLAS, 0.901x with 8 (H200, bench/cuda_gemm_sweep.py)
#endif
// Tile order: 0 = GROUP_M row-tiles sweep the column-tiles together; 1 = the transpose,
// GROUP_M column-tiles sweep the row-tiles (B's panels stay in L2 instead of A's).
#ifndef TILE_RASTER
#define TILE_RASTER 0
#endif

// ---------------------------------------------------------------------------------------------
// Small PTX helpers
// ---------------------------------------------------------------------------------------------
__device__ __forceinline__ u32 smem_addr(const void* p) {
  return static_cast<u32>(__cvta_generic_to_shared(p));
}

// Two fp32 values to one packed 16-bit pair (round to nearest even); lo lands in the low half.
template <bool BF16>
__device__ __forceinline__ u32 pack2(float lo, float hi) {
  u32 r;
  if (BF16) {
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  } else {
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  }
  return r;
}

// Grouped (swizzled) tile order: GROUP_M consecutive row-tiles sweep the column-tiles together.
__device__ __forceinline__ void grouped_coords(int pid, int num_major, int num_minor, int& major, int& minor) {
  int in_group = GROUP_M * num_minor;
  int group = pid / in_group;
  int first = group * GROUP_M;
  int size = min(num_major - first, GROUP_M);
  major = first + (pid % in_group) % size;
  minor = (pid % in_group) / size;
}
__device__ __forceinline__ void tile_coords(int pid, int num_m, int num_n, int& tm, int& tn) {
#if TILE_RASTER
  grouped_coords(pid, num_n, num_m, tn, tm);
#else
  grouped_coords(pid, num_m, num_n, tm, tn);
#endif
}

// ---------------------------------------------------------------------------------------------
// Hopper: TMA + mbarrier pipeline + wgmma, warp-specialized
// ---------------------------------------------------------------------------------------------
#define WG_BM 128
#define WG_BN 256
#define WG_BK 64
#ifndef WG_STAGES
#define WG_STAGES 4
#endif
// wgmma groups left in flight before a consumer releases a stage (1: overlap the next k-tile's
// issue with this one's tensor-core work; 0: release as soon as the stage is consumed).
#ifndef WG_WAIT_DEPTH
#define WG_WAIT_DEPTH 1
#endif
#define WG_CONSUMERS 2
#define WG_THREADS (128 * (WG_CONSUMERS + 1))
#define WG_A_BYTES (WG_BM * WG_BK * 2)                 // 16 KiB
#define WG_B_BYTES (WG_BK * WG_BN * 2)                 // 32 KiB
#define WG_STAGE_BYTES (WG_A_BYTES + WG_B_BYTES)
#define WG_B_ATOM 64                                   // N-columns per 128-byte swizzle atom
// How the consumers write their accumulators to C:
// 0: straight from registers, one 4-byte pair per thread per store (8 rows x 16 B per warp);
// 1: through shared memory (a 128-byte-swizzled 64x64 chunk per consumer, double-buffered),
//    written by a TMA store (cp.async.bulk.tensor shared->global) that runs on while the
//    consumer starts its next tile; the copy engine clips the ragged edges;
// 2: through the same shared chunks, read back as 16-byte vectors and written with coalesced
//    16-byte global stores (8 threads per 128-byte row), edges checked per vector.
#ifndef WG_EPILOGUE
#define WG_EPILOGUE 2  // the fastest measured: 0.848x -> 0.962x of cuBLAS at 4096^3 bf16 on an H200
#endif
#define WG_C_COLS 64                                   // C chunk: 64 rows x 64 cols (128 B rows)
#define WG_C_CHUNK_BYTES (64 * WG_C_COLS * 2)          // 8 KiB
#define WG_C_BYTES (WG_EPILOGUE ? WG_CONSUMERS * 2 * WG_C_CHUNK_BYTES : 0)
// Dynamic shared memory (the host computes the same sum): the stage ring, the C chunks, the
// 2*STAGES mbarriers, and slack to align the ring to 1024 B (the 128-byte swizzle pattern
// repeats every 1024 B and TMA/wgmma assume that alignment).
#define WG_SMEM_BYTES (WG_STAGES * WG_STAGE_BYTES + WG_C_BYTES + 2 * WG_STAGES * 8 + 1024)

// B's descriptor offsets (N-major, 128-byte swizzle): the leading offset steps between 64-wide
// N atoms (WG_BK rows of 128 B each), the stride offset between groups of 8 K-rows.
#ifndef WG_B_LBO
#define WG_B_LBO (WG_BK * 128)
#endif
#ifndef WG_B_SBO
#define WG_B_SBO 1024
#endif

// The CUtensorMap the host encodes: 128 opaque bytes, passed by value as a grid constant.
struct __align__(64) TmaMap {
  u64 opaque[16];
};

__device__ __forceinline__ void mbar_init(u32 bar, u32 count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(u32 bar, u32 bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(u32 bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait(u32 bar, u32 parity) {
  u32 done = 0;
  while (!done) {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done) : "r"(bar), "r"(parity) : "memory");
  }
}

// TMA: copy the box at (c0 innermost, c1) of the tensor map into shared memory at dst,
// completing `bytes` on the mbarrier. Out-of-range elements arrive as zeros.
__device__ __forceinline__ void tma_load_2d(u32 dst, const TmaMap* map, int c0, int c1, u32 bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
      ::"r"(dst), "l"(reinterpret_cast<u64>(map)), "r"(c0), "r"(c1), "r"(bar) : "memory");
}

// TMA store of the box at (c0 innermost, c1) from shared memory at src; elements outside the
// tensor are not written. Tracked by the issuing thread's bulk groups.
__device__ __forceinline__ void tma_store_2d(const TmaMap* map, u32 src, int c0, int c1) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];"
               ::"l"(reinterpret_cast<u64>(map)), "r"(c0), "r"(c1), "r"(src) : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
// Wait until at most N of this thread's bulk groups still read their shared-memory source.
template <int N>
__device__ __forceinline__ void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}
__device__ __forceinline__ void bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }
// Barrier over one warpgroup (ids 1.. ; 0 is __syncthreads).
__device__ __forceinline__ void warpgroup_bar(int id) {
  asm volatile("bar.sync %0, 128;" ::"r"(id) : "memory");
}

// wgmma shared-memory matrix descriptor with 128-byte swizzle.
__device__ __forceinline__ u64 wgmma_desc(u32 addr, u32 lbo, u32 sbo) {
  u64 d = 0;
  d |= static_cast<u64>((addr & 0x3FFFF) >> 4);
  d |= static_cast<u64>((lbo & 0x3FFFF) >> 4) << 16;
  d |= static_cast<u64>((sbo & 0x3FFFF) >> 4) << 32;
  d |= 1ull << 62;
  return d;
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
// Keeps the compiler from moving accumulator reads or writes across the asynchronous wgmma.
__device__ __forceinline__ void fence_operand(float& x) { asm volatile("" : "+f"(x)::"memory"); }

#define GEMM_WGMMA_64x256x16(TYPE, d, desc_a, desc_b, scale_d)                                                                   \
  asm volatile(                                                                                                         \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"                                                                        \
      "wgmma.mma_async.sync.aligned.m64n256k16.f32." TYPE "." TYPE " {"                                                 \
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"                                           \
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"                                 \
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"                                 \
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63,"                                 \
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79,"                                 \
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95,"                                 \
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111,"                     \
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"                  \
      "}, %128, %129, p, 1, 1, 0, 1;\n}\n"                                                                              \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),                 \
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),           \
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),         \
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),         \
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),         \
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),         \
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),         \
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),         \
        "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),         \
        "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),         \
        "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),         \
        "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),         \
        "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),     \
        "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), \
        "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), \
        "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])  \
      : "l"(desc_a), "l"(desc_b), "r"(scale_d))

template <bool BF16>
__device__ __forceinline__ void wgmma_64x256x16(float* d, u64 desc_a, u64 desc_b, u32 scale_d) {
  if (BF16) {
    GEMM_WGMMA_64x256x16("bf16", d, desc_a, desc_b, scale_d);
  } else {
    GEMM_WGMMA_64x256x16("f16", d, desc_a, desc_b, scale_d);
  }
}

template <bool BF16>
__device__ __forceinline__ void gemm_wgmma_body(const TmaMap* map_a, const TmaMap* map_b, const TmaMap* map_c,
                                                u16* __restrict__ C, int M, int N, int K) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const u32 raw = smem_addr(smem_raw);
  const u32 base = (raw + 1023u) & ~1023u;  // stage ring starts 1024-aligned
  const u32 cbufs = base + WG_STAGES * WG_STAGE_BYTES;  // C chunks, 1024-aligned (WG_EPILOGUE)
  const u32 bars = cbufs + WG_C_BYTES;
  // full[s] at bars + 8s (TMA landed), empty[s] at bars + 8(STAGES + s) (consumers done)
  const int wg = threadIdx.x / 128;
  const int tid = threadIdx.x % 128;

  const int num_m = (M + WG_BM - 1) / WG_BM, num_n = (N + WG_BN - 1) / WG_BN;
  const int num_tiles = num_m * num_n;
  const int k_tiles = (K + WG_BK - 1) / WG_BK;

  if (threadIdx.x == 0) {
#pragma unroll
    for (int s = 0; s < WG_STAGES; ++s) {
      mbar_init(bars + 8 * s, 1);
      mbar_init(bars + 8 * (WG_STAGES + s), WG_CONSUMERS * 4);  // one arrive per consumer warp
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();

  // Tiles are dealt round-robin over the grid: a grid of one block per tile is the classic
  // launch; a grid of one block per SM is persistent, and the producer then prefetches the
  // next tile's first stages while the consumers run this tile's epilogue. The ring position
  // `it` (stage it % STAGES, phase (it / STAGES) & 1) runs on across tiles.
  if (wg == 0) {
    // Producer warpgroup: needs few registers; give them to the consumers.
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
    if (tid == 0) {
      int it = 0;
      for (int tile = blockIdx.x; tile < num_tiles; tile += gridDim.x) {
        int tm, tn;
        tile_coords(tile, num_m, num_n, tm, tn);
        const int m0 = tm * WG_BM, n0 = tn * WG_BN;
        for (int kt = 0; kt < k_tiles; ++kt, ++it) {
          const int s = it % WG_STAGES;
          if (it >= WG_STAGES) mbar_wait(bars + 8 * (WG_STAGES + s), ((it / WG_STAGES) + 1) & 1);
          const u32 full = bars + 8 * s;
          const u32 sa = base + s * WG_STAGE_BYTES;
          const u32 sb = sa + WG_A_BYTES;
          mbar_expect_tx(full, WG_STAGE_BYTES);
          tma_load_2d(sa, map_a, kt * WG_BK, m0, full);
#pragma unroll
          for (int a = 0; a < WG_BN / WG_B_ATOM; ++a) {
            tma_load_2d(sb + a * (WG_BK * 128), map_b, n0 + a * WG_B_ATOM, kt * WG_BK, full);
          }
        }
      }
    }
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
    const int cw = wg - 1;  // consumer index: rows cw*64 .. cw*64+63 of the tile
    const int warp = tid / 32, lane = tid % 32;
    // No zero fill: the first wgmma of a tile runs with scale-d = 0 (D = A*B), so no ordinary
    // instruction writes the accumulators inside the wgmma pipeline (that would serialize it).
    float acc[128];
    int it = 0;
    for (int tile = blockIdx.x; tile < num_tiles; tile += gridDim.x) {
      int tm, tn;
      tile_coords(tile, num_m, num_n, tm, tn);
      const int m0 = tm * WG_BM, n0 = tn * WG_BN;
      for (int kt = 0; kt < k_tiles; ++kt, ++it) {
        const int s = it % WG_STAGES;
        mbar_wait(bars + 8 * s, (it / WG_STAGES) & 1);
        const u32 sa = base + s * WG_STAGE_BYTES + cw * (64 * 128);
        const u32 sb = base + s * WG_STAGE_BYTES + WG_A_BYTES;
#pragma unroll
        for (int i = 0; i < 128; ++i) fence_operand(acc[i]);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < WG_BK / 16; ++kk) {
          // A (K-major): a k16 step is 32 bytes along the swizzled 128-byte row.
          // B (N-major): a k16 step is 16 rows of 128 bytes.
          const u64 da = wgmma_desc(sa + kk * 32, 16, 1024);
          const u64 db = wgmma_desc(sb + kk * 16 * 128, WG_B_LBO, WG_B_SBO);
          wgmma_64x256x16<BF16>(acc, da, db, (kt > 0 || kk > 0) ? 1u : 0u);
        }
        wgmma_commit();
#pragma unroll
        for (int i = 0; i < 128; ++i) fence_operand(acc[i]);
        // Keep WG_WAIT_DEPTH groups in flight; older groups have retired, so their stage is free.
        wgmma_wait<WG_WAIT_DEPTH>();
        if (kt >= WG_WAIT_DEPTH && lane == 0)
          mbar_arrive(bars + 8 * (WG_STAGES + (it - WG_WAIT_DEPTH) % WG_STAGES));
      }
      wgmma_wait<0>();
#pragma unroll
      for (int i = 0; i < 128; ++i) fence_operand(acc[i]);
      // Release the stages still held by the last WG_WAIT_DEPTH groups of this tile.
#pragma unroll
      for (int d = WG_WAIT_DEPTH; d > 0; --d)
        if (k_tiles >= d && lane == 0) mbar_arrive(bars + 8 * (WG_STAGES + (it - d) % WG_STAGES));

      // Accumulator layout of m64nNk16: warp w owns rows 16w..16w+15; value 4j+{0,1} sits at
      // (row lane/4, cols 8j + 2(lane%4) + {0,1}), value 4j+{2,3} eight rows further down.
#if WG_EPILOGUE
      const u32 cbuf = cbufs + cw * (2 * WG_C_CHUNK_BYTES);
      const int r_lo = warp * 16 + lane / 4;  // row within this consumer's 64
#pragma unroll
      for (int q = 0; q < WG_BN / WG_C_COLS; ++q) {
        const u32 buf = cbuf + (q & 1) * WG_C_CHUNK_BYTES;
#if WG_EPILOGUE == 1
        // The store issued two chunks ago read this buffer; it must be done before we refill it.
        if (tid == 0) bulk_wait_read<1>();
        warpgroup_bar(1 + cw);
#endif
        // 128-byte swizzle (the TMA's layout): the 16-byte column chunk c of row r sits at
        // chunk c ^ (r % 8), so a warp's 8 rows x 16 B land in distinct banks.
#pragma unroll
        for (int jj = 0; jj < WG_C_COLS / 8; ++jj) {
          const int j = q * (WG_C_COLS / 8) + jj;
          const u32 lo = buf + r_lo * 128 + ((jj ^ (r_lo & 7)) << 4) + 4 * (lane % 4);
          const u32 hi = lo + 8 * 128;  // row r_lo + 8: same r % 8, same swizzle
          asm volatile("st.shared.u32 [%0], %1;" ::"r"(lo), "r"(pack2<BF16>(acc[4 * j], acc[4 * j + 1])) : "memory");
          asm volatile("st.shared.u32 [%0], %1;" ::"r"(hi), "r"(pack2<BF16>(acc[4 * j + 2], acc[4 * j + 3])) : "memory");
        }
#if WG_EPILOGUE == 1
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // st.shared -> copy engine
        warpgroup_bar(1 + cw);
        if (tid == 0) {
          tma_store_2d(map_c, buf, n0 + q * WG_C_COLS, m0 + cw * 64);
          bulk_commit();
        }
#else
        // Two buffers and one barrier per chunk: passing chunk q+1's barrier means every
        // thread has finished reading chunk q, so chunk q+2 may overwrite its buffer.
        warpgroup_bar(1 + cw);
#pragma unroll
        for (int p = 0; p < 64 / 16; ++p) {
          const int r = p * 16 + tid / 8, ch = tid % 8;
          u32 v0, v1, v2, v3;
          asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                       : "=r"(v0), "=r"(v1), "=r"(v2), "=r"(v3) : "r"(buf + r * 128 + ((ch ^ (r & 7)) << 4)) : "memory");
          const int grow = m0 + cw * 64 + r, gcol = n0 + q * WG_C_COLS + 8 * ch;
          if (grow < M && gcol < N)  // N % 8 == 0: a 16-byte vector is wholly in or out
            asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};"
                         ::"l"(C + static_cast<long long>(grow) * N + gcol), "r"(v0), "r"(v1), "r"(v2), "r"(v3) : "memory");
        }
#endif
      }
#else
      const int row0 = m0 + cw * 64 + warp * 16 + lane / 4;
      const int col0 = n0 + 2 * (lane % 4);
#pragma unroll
      for (int j = 0; j < WG_BN / 8; ++j) {
        const int col = col0 + 8 * j;
        if (col < N) {
          if (row0 < M)
            *reinterpret_cast<u32*>(C + static_cast<long long>(row0) * N + col) = pack2<BF16>(acc[4 * j], acc[4 * j + 1]);
          if (row0 + 8 < M)
            *reinterpret_cast<u32*>(C + static_cast<long long>(row0 + 8) * N + col) = pack2<BF16>(acc[4 * j + 2], acc[4 * j + 3]);
        }
      }
#endif
    }
#if WG_EPILOGUE == 1
    if (tid == 0) bulk_wait_all();  // shared memory must outlive the last stores' reads
#endif
  }
}

// The C tensor map is a parameter only where the TMA store uses it (WG_EPILOGUE 1): the host
// passes it exactly when the kernel declares it.
#if WG_EPILOGUE == 1
#define WG_C_MAP_PARAM const __grid_constant__ TmaMap map_c,
#define WG_C_MAP_ARG &map_c
#else
#define WG_C_MAP_PARAM
#define WG_C_MAP_ARG nullptr
#endif

extern "C" __global__ void __launch_bounds__(WG_THREADS, 1)
gemm_wgmma_bf16(const __grid_constant__ TmaMap map_a, const __grid_constant__ TmaMap map_b,
                WG_C_MAP_PARAM u16* __restrict__ C, int M, int N, int K) {
  gemm_wgmma_body<true>(&map_a, &map_b, WG_C_MAP_ARG, C, M, N, K);
}

extern "C" __global__ void __launch_bounds__(WG_THREADS, 1)
gemm_wgmma_fp16(const __grid_constant__ TmaMap map_a, const __grid_constant__ TmaMap map_b,
                WG_C_MAP_PARAM u16* __restrict__ C, int M, int N, int K) {
  gemm_wgmma_body<false>(&map_a, &map_b, WG_C_MAP_ARG, C, M, N, K);
}

// ---------------------------------------------------------------------------------------------
// Portable tensor-core path: cp.async multi-stage pipeline + ldmatrix + mma.sync
// ---------------------------------------------------------------------------------------------
#define MS_BM 128
#define MS_BN 128
#define MS_BK 32
#define MS_STAGES 4
#define MS_THREADS 256                     // 8 warps: 2 along M x 4 along N, 64x32 each
#define MS_A_LD (MS_BK + 8)                // +16 B per row: ldmatrix rows hit distinct banks
#define MS_B_LD (MS_BN + 8)
#define MS_A_ELEMS (MS_BM * MS_A_LD)
#define MS_B_ELEMS (MS_BK * MS_B_LD)
#define MS_SMEM_BYTES (MS_STAGES * (MS_A_ELEMS + MS_B_ELEMS) * 2)

// 16-byte global->shared copy that bypasses L1; src_bytes = 0 fills the 16 bytes with zeros.
__device__ __forceinline__ void cp_async_16(u32 dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

__device__ __forceinline__ void ldmatrix_x4(u32 addr, u32& r0, u32& r1, u32& r2, u32& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(u32 addr, u32& r0, u32& r1, u32& r2, u32& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr));
}

template <bool BF16>
__device__ __forceinline__ void mma_16816(float* d, const u32* a, const u32* b) {
  if (BF16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
}

// Issue the cp.async copies of k-tile kt into one stage: A 128x32 and B 32x128, each 512
// 16-byte chunks, two per thread. Chunks past the matrix edge are zero-filled.
__device__ __forceinline__ void ms_load_tile(const u16* __restrict__ A, const u16* __restrict__ B,
                                             u16* sa, u16* sb, int m0, int n0, int kt, int M, int N, int K) {
  const int k0 = kt * MS_BK;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int chunk = threadIdx.x + i * MS_THREADS;
    const int r = chunk / (MS_BK / 8), c = (chunk % (MS_BK / 8)) * 8;
    const int gm = m0 + r, gk = k0 + c;
    const bool ok = gm < M && gk < K;
    cp_async_16(smem_addr(sa + r * MS_A_LD + c), ok ? A + static_cast<long long>(gm) * K + gk : A, ok ? 16 : 0);
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int chunk = threadIdx.x + i * MS_THREADS;
    const int r = chunk / (MS_BN / 8), c = (chunk % (MS_BN / 8)) * 8;
    const int gk = k0 + r, gn = n0 + c;
    const bool ok = gk < K && gn < N;
    cp_async_16(smem_addr(sb + r * MS_B_LD + c), ok ? B + static_cast<long long>(gk) * N + gn : B, ok ? 16 : 0);
  }
}

template <bool BF16>
__device__ __forceinline__ void gemm_mma_body(const u16* __restrict__ A, const u16* __restrict__ B,
                                              u16* __restrict__ C, int M, int N, int K) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  u16* smem_a = reinterpret_cast<u16*>(smem_raw);
  u16* smem_b = smem_a + MS_STAGES * MS_A_ELEMS;

  int tm, tn;
  tile_coords(blockIdx.x, (M + MS_BM - 1) / MS_BM, (N + MS_BN - 1) / MS_BN, tm, tn);
  const int m0 = tm * MS_BM, n0 = tn * MS_BN;
  const int k_tiles = (K + MS_BK - 1) / MS_BK;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wm = warp / 4, wn = warp % 4;  // warp tile origin: rows wm*64, cols wn*32

  float acc[4][4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int v = 0; v < 4; ++v) acc[i][j][v] = 0.0f;

  // Prologue: STAGES-1 tiles in flight before the first product.
#pragma unroll
  for (int s = 0; s < MS_STAGES - 1; ++s) {
    if (s < k_tiles) ms_load_tile(A, B, smem_a + s * MS_A_ELEMS, smem_b + s * MS_B_ELEMS, m0, n0, s, M, N, K);
    cp_async_commit();
  }

  for (int kt = 0; kt < k_tiles; ++kt) {
    cp_async_wait<MS_STAGES - 2>();  // tile kt has landed (for this thread's copies)
    __syncthreads();                 // ... for every thread's, and stage kt-1 is free again
    const int next = kt + MS_STAGES - 1;
    if (next < k_tiles) {
      const int ns = next % MS_STAGES;
      ms_load_tile(A, B, smem_a + ns * MS_A_ELEMS, smem_b + ns * MS_B_ELEMS, m0, n0, next, M, N, K);
    }
    cp_async_commit();

    const u16* sa = smem_a + (kt % MS_STAGES) * MS_A_ELEMS;
    const u16* sb = smem_b + (kt % MS_STAGES) * MS_B_ELEMS;
#pragma unroll
    for (int kk = 0; kk < MS_BK / 16; ++kk) {
      u32 af[4][4], bf[4][2];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int r = wm * 64 + i * 16 + (lane % 16);
        const int c = kk * 16 + (lane / 16) * 8;
        ldmatrix_x4(smem_addr(sa + r * MS_A_LD + c), af[i][0], af[i][1], af[i][2], af[i][3]);
      }
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int r = kk * 16 + (lane % 16);
        const int c = wn * 32 + j * 16 + (lane / 16) * 8;
        ldmatrix_x4_trans(smem_addr(sb + r * MS_B_LD + c), bf[2 * j][0], bf[2 * j][1], bf[2 * j + 1][0], bf[2 * j + 1][1]);
      }
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) mma_16816<BF16>(acc[i][j], af[i], bf[j]);
    }
  }
  cp_async_wait<0>();

  // mma.sync C fragment: values {0,1} at (row lane/4, cols 2(lane%4)+{0,1}), {2,3} 8 rows down.
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int row = m0 + wm * 64 + i * 16 + lane / 4;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int col = n0 + wn * 32 + j * 8 + 2 * (lane % 4);
      if (col < N) {
        if (row < M)
          *reinterpret_cast<u32*>(C + static_cast<long long>(row) * N + col) = pack2<BF16>(acc[i][j][0], acc[i][j][1]);
        if (row + 8 < M)
          *reinterpret_cast<u32*>(C + static_cast<long long>(row + 8) * N + col) = pack2<BF16>(acc[i][j][2], acc[i][j][3]);
      }
    }
  }
}

extern "C" __global__ void __launch_bounds__(MS_THREADS)
gemm_mma_bf16(const u16* __restrict__ A, const u16* __restrict__ B, u16* __restrict__ C, int M, int N, int K) {
  gemm_mma_body<true>(A, B, C, M, N, K);
}

extern "C" __global__ void __launch_bounds__(MS_THREADS)
gemm_mma_fp16(const u16* __restrict__ A, const u16* __restrict__ B, u16* __restrict__ C, int M, int N, int K) {
  gemm_mma_body<false>(A, B, C, M, N, K);
}
