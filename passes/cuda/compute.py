"""Tensor-core compute passes of CUDA kernels, as rules over inline PTX.

- `wgmma` (Hopper warpgroup MMA) <-> the same product issued as warp-level `mma.sync`: every
  `wgmma.mma_async ... m64nNk16` whose A and B come from shared-memory descriptors becomes a
  call that decodes the descriptors (start address, leading/stride byte offsets, swizzle mode)
  and has each warp of the warpgroup issue `mma.sync m16n8k16` on its 16 rows. The warpgroup
  accumulator layout of m64nNk16 is the m16n8 C fragment repeated N/8 times per warp, so the
  accumulators keep their meaning. `wgmma.fence / commit_group / wait_group` become compiler
  memory barriers (the product is now synchronous).
- `mma-intrinsics` (`mma.sync m16n8k16` + `ldmatrix`) <-> scalar FMA over the same staged
  tiles: each `mma.sync` becomes a call that gathers its row of A and column of B from the
  warp's fragments with `__shfl_sync` and accumulates in fp32; each `ldmatrix` becomes shared
  loads of the element pair the fragment layout assigns to the lane (row addresses exchanged
  with `__shfl_sync`, as the instruction itself takes them from the lanes).

The replacements call helper functions that the de-optimization inserts once, after the file's
leading comments and includes; the helpers use only built-in types and intrinsics (no headers).
Each de-optimization records `[original, replacement]` pairs (the inserted helpers first), and
`optimize` restores them: re-deriving a forward step is exact. Without a record there is no
forward rule (which fragment layout and which stage ring feed a tensor-core instruction are
kernel-specific); the edit-script transplant or the LLM rewriter perform it then.

Forms handled: `wgmma.mma_async.sync.aligned.m64nNk16.f32.{bf16,f16}.{bf16,f16}` with both
operands as descriptors (K- or MN-major, no swizzle or 32/64/128-byte swizzle, base offset 0),
scale-d as an immediate or a predicate set from an operand, immediate scale/transpose flags;
`mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.{bf16,f16}.f32`; `ldmatrix.sync.aligned.m8n8
.x{1,2,4}[.trans].shared.b16`. Other forms are reported as present and refused with the reason.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

from passes.base import Category
from passes.cuda._asm import COMPILER_BARRIER, AsmRewrite, AsmRule
from passes.cuda._c import CSource, asm_constrained_operands, find_iter
from passes.cuda.annotations import CUDA

_SIDE_EFFECT = re.compile(r"\+\+|--|(?<![=!<>])=(?!=)")

# ---------------------------------------------------------------------------------------------
# helpers the replacements call (inserted once by the de-optimization that needs them)

MMA_HELPERS = r"""__device__ __forceinline__ float kl_half_bits_to_float(unsigned int bits, bool bf16) {
  // one 16-bit value (bf16 or fp16 bit pattern in the low half) widened to fp32
  if (bf16) return __uint_as_float((bits & 0xFFFFu) << 16);
  float f;
  const unsigned short h = (unsigned short)(bits & 0xFFFFu);
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
__device__ __forceinline__ float kl_dot2(unsigned int a, unsigned int b, bool bf16) {
  return kl_half_bits_to_float(a, bf16) * kl_half_bits_to_float(b, bf16) +
         kl_half_bits_to_float(a >> 16, bf16) * kl_half_bits_to_float(b >> 16, bf16);
}
__device__ __forceinline__ void kl_mma_m16n8k16(bool bf16, float& d0, float& d1, float& d2, float& d3,
                                                unsigned int a0, unsigned int a1, unsigned int a2, unsigned int a3,
                                                unsigned int b0, unsigned int b1,
                                                float c0, float c1, float c2, float c3) {
  // mma.sync m16n8k16 (row.col, fp32 accumulation) with scalar FMA. Lane 4r+q holds A row r
  // (and r+8) at k = 2q, 2q+1 (a0, a1) and k = 2q+8, 2q+9 (a2, a3), and B column r at the same
  // k (b0, b1); lane 4g+t owns C rows g, g+8 at columns 2t, 2t+1.
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  float acc0 = c0, acc1 = c1, acc2 = c2, acc3 = c3;
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const unsigned int ra = __shfl_sync(0xffffffffu, a0, 4 * g + q);
    const unsigned int rb = __shfl_sync(0xffffffffu, a1, 4 * g + q);
    const unsigned int rc = __shfl_sync(0xffffffffu, a2, 4 * g + q);
    const unsigned int rd = __shfl_sync(0xffffffffu, a3, 4 * g + q);
    const unsigned int b00 = __shfl_sync(0xffffffffu, b0, 8 * t + q);
    const unsigned int b01 = __shfl_sync(0xffffffffu, b1, 8 * t + q);
    const unsigned int b10 = __shfl_sync(0xffffffffu, b0, 8 * t + 4 + q);
    const unsigned int b11 = __shfl_sync(0xffffffffu, b1, 8 * t + 4 + q);
    acc0 += kl_dot2(ra, b00, bf16) + kl_dot2(rc, b01, bf16);
    acc1 += kl_dot2(ra, b10, bf16) + kl_dot2(rc, b11, bf16);
    acc2 += kl_dot2(rb, b00, bf16) + kl_dot2(rd, b01, bf16);
    acc3 += kl_dot2(rb, b10, bf16) + kl_dot2(rd, b11, bf16);
  }
  d0 = acc0;
  d1 = acc1;
  d2 = acc2;
  d3 = acc3;
}
__device__ __forceinline__ unsigned int kl_ldmatrix_reg(unsigned int addr, int j, bool trans) {
  // register j of ldmatrix .m8n8 .b16: matrix j's row addresses come from lanes 8j..8j+7;
  // the lane gets (row lane/4, cols 2(lane%4), +1), or with .trans (rows 2(lane%4), +1, col lane/4)
  const int lane = threadIdx.x & 31;
  if (!trans) {
    const unsigned int row = __shfl_sync(0xffffffffu, addr, 8 * j + (lane >> 2));
    unsigned int v;
    asm volatile("ld.shared.b32 %0, [%1];" : "=r"(v) : "r"(row + 4u * (lane & 3)) : "memory");
    return v;
  }
  const unsigned int r0 = __shfl_sync(0xffffffffu, addr, 8 * j + 2 * (lane & 3));
  const unsigned int r1 = __shfl_sync(0xffffffffu, addr, 8 * j + 2 * (lane & 3) + 1);
  unsigned short lo, hi;
  asm volatile("ld.shared.u16 %0, [%1];" : "=h"(lo) : "r"(r0 + 2u * (lane >> 2)) : "memory");
  asm volatile("ld.shared.u16 %0, [%1];" : "=h"(hi) : "r"(r1 + 2u * (lane >> 2)) : "memory");
  return (unsigned int)lo | ((unsigned int)hi << 16);
}
"""

WGMMA_HELPERS = r"""__device__ __forceinline__ unsigned int kl_desc_element(unsigned long long desc, int mn, int k, int mn_major) {
  // the 16-bit element (mn, k) of a wgmma shared-memory matrix descriptor's operand: start
  // address, leading / stride byte offsets and swizzle mode (0 none, 1 128 B, 2 64 B, 3 32 B)
  const unsigned int start = (unsigned int)(desc & 0x3FFFull) << 4;
  const unsigned int lbo = (unsigned int)((desc >> 16) & 0x3FFFull) << 4;
  const unsigned int sbo = (unsigned int)((desc >> 32) & 0x3FFFull) << 4;
  const unsigned int mode = (unsigned int)(desc >> 62) & 3u;
  const unsigned int bits = mode == 1u ? 3u : mode == 2u ? 2u : mode == 3u ? 1u : 0u;
  const unsigned int m = (unsigned int)mn, kk = (unsigned int)k;
  unsigned int addr;
  if (bits == 0u) {  // 8x8 core matrices of 16 B rows
    addr = mn_major ? start + (m >> 3) * sbo + (m & 7u) * 2u + (kk >> 3) * lbo + (kk & 7u) * 16u
                    : start + (m >> 3) * sbo + (m & 7u) * 16u + (kk >> 3) * lbo + (kk & 7u) * 2u;
  } else {  // 8-row atoms of (16 << bits)-byte rows, 16-byte chunks XOR-swizzled by row
    const unsigned int row = 16u << bits, per_row = row / 2u;
    addr = mn_major ? start + (m / per_row) * lbo + (m % per_row) * 2u + (kk >> 3) * sbo + (kk & 7u) * row
                    : start + (m >> 3) * sbo + (m & 7u) * row + kk * 2u;
    addr ^= ((addr >> 7) & ((1u << bits) - 1u)) << 4;
  }
  unsigned short v;
  asm volatile("ld.shared.u16 %0, [%1];" : "=h"(v) : "r"(addr) : "memory");
  return v;
}
template <int N>
__device__ __forceinline__ void kl_wgmma_as_mma(bool bf16, float* d, unsigned long long desc_a,
                                                unsigned long long desc_b, bool accumulate, int scale_a,
                                                int scale_b, int trans_a, int trans_b) {
  // wgmma m64nNk16 from descriptors, issued by each warp of the warpgroup as mma.sync m16n8k16
  // on its 16 rows: the warpgroup's accumulator layout is the m16n8 C fragment, N/8 times.
  const int lane = threadIdx.x & 31, warp = (threadIdx.x >> 5) & 3;
  const int r = 16 * warp + (lane >> 2), c = 2 * (lane & 3);
  const unsigned int neg_a = scale_a < 0 ? 0x80008000u : 0u, neg_b = scale_b < 0 ? 0x80008000u : 0u;
  unsigned int a[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int row = r + 8 * (i & 1), col = c + 8 * (i >> 1);
    a[i] = (kl_desc_element(desc_a, row, col, trans_a) | (kl_desc_element(desc_a, row, col + 1, trans_a) << 16)) ^ neg_a;
  }
#pragma unroll
  for (int j = 0; j < N / 8; ++j) {
    const int n = 8 * j + (lane >> 2);
    unsigned int b[2];
#pragma unroll
    for (int i = 0; i < 2; ++i)
      b[i] = (kl_desc_element(desc_b, n, c + 8 * i, trans_b) | (kl_desc_element(desc_b, n, c + 8 * i + 1, trans_b) << 16)) ^ neg_b;
    float* acc = d + 4 * j;
    if (!accumulate) {
      acc[0] = 0.0f;
      acc[1] = 0.0f;
      acc[2] = 0.0f;
      acc[3] = 0.0f;
    }
    if (bf16) {
      asm volatile(
          "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
          : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    } else {
      asm volatile(
          "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
          : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    }
  }
}
"""


def _type_expr(token: str) -> str | None:
    """The C++ bool saying 'bf16' for a PTX type token (a literal or a pasted macro parameter)."""
    if token == "bf16":
        return "true"
    if token == "f16":
        return "false"
    m = re.fullmatch(r"\$\$(\w+)\$\$", token)
    return f"({m.group(1)}[0] == 'b')" if m else None


def _pure(expr: str) -> bool:
    return not _SIDE_EFFECT.search(expr)


_WGMMA = re.compile(
    r"wgmma\.mma_async\.sync\.aligned\.m64n(\d+)k(\d+)\.(\w+)\.(\S+?)\.(\S+?)\s*"
    r"\{([^}]*)\}\s*,\s*(\{[^}]*\}|%\d+)\s*,\s*(%\d+)\s*,\s*(\w+|%\d+)"
    r"(?:\s*,\s*(-?\d+|%\d+)\s*,\s*(-?\d+|%\d+)(?:\s*,\s*(\d+|%\d+)\s*,\s*(\d+|%\d+))?)?\s*;")
_WGMMA_SYNC = re.compile(r"^\s*wgmma\.(?:fence|commit_group|wait_group)\.sync\.aligned\b")


@dataclass(frozen=True, slots=True)
class Wgmma(AsmRule):
    """Hopper warpgroup MMA (`wgmma.mma_async` from shared-memory descriptors) <-> the same
    product as warp-level `mma.sync m16n8k16`, operands read through the descriptors."""

    pairs: str = ""
    """JSON list of [original, replacement] texts in source order (recorded by a
    de-optimization; the inserted helpers first); restoring them re-derives the wgmma."""

    name: ClassVar[str] = "wgmma"
    category: ClassVar[Category] = Category.COMPUTE
    summary: ClassVar[str] = "warpgroup async MMA (wgmma) <-> warp-level mma.sync from the same tiles"
    # replaces the warp-level mma.sync of a kernel's main loop
    conflicts: ClassVar[tuple[str, ...]] = ("mma-intrinsics",)
    requires: ClassVar[tuple[str, ...]] = ("smem-staged",)
    provides: ClassVar[tuple[str, ...]] = ("tensor-core",)
    languages: ClassVar[tuple[str, ...]] = CUDA
    platforms: ClassVar[tuple[str, ...]] = ("cuda",)
    preconditions: ClassVar[tuple[str, ...]] = ("arch >= sm_90",)
    helpers: ClassVar[str] = WGMMA_HELPERS
    marker: ClassVar[str] = "kl_wgmma_as_mma"
    forward_needs: ClassVar[str] = "the fragment layout and operand staging are kernel-specific"

    def rewrites(self, src: CSource) -> list[AsmRewrite]:
        found = AsmRule.rewrites(self, src)
        # the fences/commits/waits are this rule's only while a wgmma is left to rewrite
        return found if any(r.why != "sync" for r in found) else []

    def match(self, src: CSource, open_at: int, template: str) -> tuple[str | None, str] | None:
        if _WGMMA_SYNC.search(template):
            return COMPILER_BARRIER, "sync"
        if "wgmma.mma_async" not in template:
            return None
        m = _WGMMA.search(template)
        if m is None:
            return None, "a wgmma form the rule does not parse"
        n, k, dtype, ta, tb = m.group(1), m.group(2), m.group(3), m.group(4), m.group(5)
        if k != "16" or dtype != "f32" or ta != tb or _type_expr(ta) is None:
            return None, f"wgmma .k{k}.{dtype}.{ta}.{tb}: only k16 with fp32 accumulation of bf16/f16"
        if m.group(7).startswith("{"):
            return None, "wgmma with A in registers (only descriptor operands are rewritten)"
        ops = asm_constrained_operands(src, open_at)

        def operand(token: str) -> str | None:
            if token.startswith("%"):
                i = int(token[1:])
                return f"({ops[i][1]})" if i < len(ops) and _pure(ops[i][1]) else None
            return token

        d_ids = [t.strip() for t in m.group(6).split(",")]
        bases = set()
        for i, t in enumerate(d_ids):
            j = int(t[1:]) if re.fullmatch(r"%\d+", t) else -1
            if j < 0 or j >= len(ops) or "+" not in ops[j][0]:
                return None, "wgmma accumulators are not read-write operands"
            e = re.fullmatch(r"(.+?)\s*\[\s*(\d+)\s*\]", ops[j][1])
            if e is None or int(e.group(2)) != i:
                return None, "wgmma accumulators are not one array in order"
            bases.add(e.group(1))
        if len(bases) != 1 or len(d_ids) * 2 != int(n):
            return None, "wgmma accumulators are not one array of N/2 values"
        scale = m.group(9)
        if re.fullmatch(r"\d+", scale):
            accumulate = "true" if scale != "0" else "false"
        else:
            setp = re.search(rf"setp\.ne\.[bsu]32\s+{re.escape(scale)}\s*,\s*(%\d+)\s*,\s*0\s*;", template)
            value = operand(setp.group(1)) if setp else None
            if value is None:
                return None, "wgmma scale-d is not an immediate or a predicate set from an operand"
            accumulate = f"({value} != 0)"
        imms = [m.group(i) or default for i, default in ((10, "1"), (11, "1"), (12, "0"), (13, "0"))]
        imm_values = [operand(t) for t in imms]
        da, db = operand(m.group(7)), operand(m.group(8))
        if None in imm_values or da is None or db is None:
            return None, "wgmma operands with side effects"
        base = bases.pop()
        return (f"kl_wgmma_as_mma<{n}>({_type_expr(ta)}, &({base})[0], {da}, {db}, {accumulate}, "
                + ", ".join(imm_values) + ")"), ""


_MMA = re.compile(r"mma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.(\S+?)\.(\S+?)\.f32\s*"
                  r"\{([^}]*)\}\s*,\s*\{([^}]*)\}\s*,\s*\{([^}]*)\}\s*,\s*\{([^}]*)\}\s*;")
_LDMATRIX = re.compile(r"ldmatrix\.sync\.aligned\.m8n8\.x([124])(\.trans)?\.shared(?:::cta)?\.b16\s*"
                       r"\{([^}]*)\}\s*,\s*\[\s*(%\d+)\s*\]\s*;")
_MMA_ANY = re.compile(r"\b(?:mma\.sync|ldmatrix\.sync)\b")
_WMMA_API = re.compile(r"\bwmma::(?:mma_sync|load_matrix_sync)\s*\(")


@dataclass(frozen=True, slots=True)
class MmaIntrinsics(AsmRule):
    """Tensor-core `mma.sync m16n8k16` with `ldmatrix` fragment loads <-> scalar FMA over the
    same staged tiles (fragments exchanged with warp shuffles)."""

    pairs: str = ""
    """JSON list of [original, replacement] texts in source order (recorded by a
    de-optimization; the inserted helpers first); restoring them re-derives the MMA."""

    name: ClassVar[str] = "mma-intrinsics"
    category: ClassVar[Category] = Category.COMPUTE
    summary: ClassVar[str] = "mma.sync m16n8k16 + ldmatrix <-> scalar FMA over the staged tiles"
    requires: ClassVar[tuple[str, ...]] = ("smem-staged",)
    provides: ClassVar[tuple[str, ...]] = ("tensor-core",)
    languages: ClassVar[tuple[str, ...]] = CUDA
    platforms: ClassVar[tuple[str, ...]] = ("cuda",)
    preconditions: ClassVar[tuple[str, ...]] = ("arch >= sm_80", "dtype in {fp16, bf16}")
    helpers: ClassVar[str] = MMA_HELPERS
    marker: ClassVar[str] = "kl_mma_m16n8k16"
    forward_needs: ClassVar[str] = "the fragment layout and operand staging are kernel-specific"

    def rewrites(self, src: CSource) -> list[AsmRewrite]:
        found = AsmRule.rewrites(self, src)
        found += [AsmRewrite(m.start(), src.close(m.end() - 1), None,
                           "the WMMA API (fragments are opaque types) is not rewritten")
                  for m in find_iter(_WMMA_API, src)]
        return sorted(found, key=lambda r: r.start)

    def match(self, src: CSource, open_at: int, template: str) -> tuple[str | None, str] | None:
        if not _MMA_ANY.search(template) or "wgmma" in template:
            return None
        ops = asm_constrained_operands(src, open_at)

        def exprs(group: str, want: int) -> list[str] | None:
            ids = [t.strip() for t in group.split(",")]
            if len(ids) != want or not all(re.fullmatch(r"%\d+", t) for t in ids):
                return None
            out = [ops[int(t[1:])][1] for t in ids if int(t[1:]) < len(ops)]
            return out if len(out) == want and all(map(_pure, out)) else None

        mma = _MMA.search(template)
        if mma is not None:
            ta, tb = mma.group(1), mma.group(2)
            d, a, b, c = (exprs(mma.group(3), 4), exprs(mma.group(4), 4), exprs(mma.group(5), 2),
                          exprs(mma.group(6), 4))
            if ta != tb or _type_expr(ta) is None or None in (d, a, b, c):
                return None, f"an mma.sync form the rule does not handle (.{ta}.{tb})"
            args = [_type_expr(ta), *d, *a, *b, *c]
            return "kl_mma_m16n8k16(" + ", ".join(args) + ")", ""
        ld = _LDMATRIX.search(template)
        if ld is not None:
            count, trans = int(ld.group(1)), "true" if ld.group(2) else "false"
            regs = exprs(ld.group(3), count)
            addr = exprs(ld.group(4), 1)
            if regs is None or addr is None:
                return None, "ldmatrix operands not understood"
            return "static_cast<void>(" + ", ".join(f"{r} = kl_ldmatrix_reg({addr[0]}, {j}, {trans})"
                                                    for j, r in enumerate(regs)) + ")", ""
        return None, "an mma.sync/ldmatrix form the rule does not handle"
