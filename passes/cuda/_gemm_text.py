"""The names, comment marks and device helpers the `gemm-schedule` rule writes into a kernel
and its de-optimization (`passes.cuda.gemm_scalar`) reads back: both import them from here.

No GPU library is imported here.
"""
from __future__ import annotations

import re

PREFIX = "kl_gs_"
"""The prefix of every name the rule declares."""
MARK = "// gemm-schedule: "
"""The comment that opens each region the rule writes."""

HELPERS = r"""// ---- 16-byte asynchronous staging of 128-wide, 32-deep GEMM slices (cp.async, zero fill) ----
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
"""

DEEP_HELPERS = r"""// ---- 64-deep slices with the 128-byte swizzle (wgmma's canonical layouts), copies unrolled by four ----
// one 16-byte chunk: `valid` elements from g + at, zeros after them (cp.async where VEC)
__device__ __forceinline__ void kl_gs_chunk(unsigned short* dst, const unsigned short* g, long at,
                                            int valid, bool vec) {
  if (vec) {
    kl_gs_cp16(dst, valid > 0 ? g + at : g, valid * 2);
  } else {
#pragma unroll
    for (int i = 0; i < 8; ++i) dst[i] = i < valid ? g[at + i] : (unsigned short)0;
  }
}
// K-major: rows of 64 k per mn from g[mn * ld + k] (128 bytes a row), chunk c of row r at chunk
// c ^ (r % 8); elements past mn_end / k_end are zero
template <int MN, int NT>
__device__ __forceinline__ void kl_gs_load_k128(unsigned short* tile, const unsigned short* g, long ld,
                                                int mn0, int k0, int mn_end, int k_end, bool vec, int tid) {
  static_assert(MN * 8 % NT == 0, "whole rounds of chunks");
#pragma unroll 4
  for (int i = 0; i < MN * 8 / NT; ++i) {
    const int c = tid + i * NT, r = c / 8, e = (c % 8) * 8;
    const int mn = mn0 + r, k = k0 + e;
    kl_gs_chunk(tile + r * 64 + ((c % 8) ^ (r % 8)) * 8, g, (long)mn * ld + k,
                mn < mn_end ? min(max(k_end - k, 0), 8) : 0, vec);
  }
}
// MN-major: atoms of 64 mn x 64 k rows from g[k * ld + mn] (8 KiB each, a row 128 bytes), chunk
// c of row r at chunk c ^ (r % 8) of its atom
template <int MN, int NT>
__device__ __forceinline__ void kl_gs_load_mn128(unsigned short* tile, const unsigned short* g, long ld,
                                                 int mn0, int k0, int mn_end, int k_end, bool vec, int tid) {
  static_assert(64 * MN / 8 % NT == 0, "whole rounds of chunks");
#pragma unroll 4
  for (int i = 0; i < 64 * MN / 8 / NT; ++i) {
    const int c = tid + i * NT, r = c / (MN / 8), e = (c % (MN / 8)) * 8;
    const int k = k0 + r, mn = mn0 + e;
    kl_gs_chunk(tile + (e / 64) * 4096 + r * 64 + (((e % 64) / 8) ^ (r % 8)) * 8, g,
                (long)k * ld + mn, k < k_end ? min(max(mn_end - mn, 0), 8) : 0, vec);
  }
}
"""

BARRIER_HELPERS = r"""// ---- mbarriers handing ring slots between the warps that fill them and those that multiply ----
__device__ __forceinline__ void kl_gs_bar_init(unsigned long long* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;"
               :: "r"(static_cast<unsigned>(__cvta_generic_to_shared(bar))), "r"(count) : "memory");
}
__device__ __forceinline__ void kl_gs_bar_arrive(unsigned long long* bar) {
  asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];"
               :: "r"(static_cast<unsigned>(__cvta_generic_to_shared(bar))) : "memory");
}
// an arrive-on `bar` once the thread's earlier cp.async copies have landed, counted against the
// barrier's expected arrivals (the thread goes on at once)
__device__ __forceinline__ void kl_gs_cp_arrive(unsigned long long* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];"
               :: "r"(static_cast<unsigned>(__cvta_generic_to_shared(bar))) : "memory");
}
// until the phase of `parity` has completed
__device__ __forceinline__ void kl_gs_bar_wait(unsigned long long* bar, unsigned parity) {
  const unsigned b = static_cast<unsigned>(__cvta_generic_to_shared(bar));
  unsigned done = 0;
  while (!done) {
    asm volatile("{\n.reg .pred q;\nmbarrier.try_wait.parity.acquire.cta.shared::cta.b64 q, [%1], %2;\n"
                 "selp.u32 %0, 1, 0, q;\n}\n" : "=r"(done) : "r"(b), "r"(parity) : "memory");
  }
}
"""


def written(code: str, names: set[str]) -> list[str]:
    """The names of `names` that `code` assigns or steps."""
    out = []
    for n in sorted(names):
        e = re.escape(n)
        if re.search(rf"(?<![\w.>]){e}\s*(?:[-+*/%&|^]|<<|>>)?=(?!=)|(?:\+\+|--)\s*{e}\b|"
                     rf"(?<![\w.>]){e}\s*(?:\+\+|--)", code):
            out.append(n)
    return out
