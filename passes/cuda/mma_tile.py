"""`mma-micro-kernel`: a fp16 / bf16 GEMM micro-kernel of scalar multiply-adds over shared
tiles -> warp-level tensor cores (`mma.sync m16n8k16`, fp32 accumulators).

What the kernel computes is read by `passes.cuda.gemm_eval` (the K loop's inner region run
symbolically for every thread): the two shared tiles with their layouts, the block tile
BM x BN x BK, the block size and which output cell each of a thread's accumulators holds.
The rewrite keeps everything else of the user's kernel — staging, barriers, epilogue, bounds,
alpha / beta, activations — and changes three places:

1. before the K loop: the warps' fp32 accumulator fragments, zeroed;
2. in the K loop, the inner region becomes, per 16-wide k slice, fragment loads from the
   user's shared tiles (`ldmatrix` where a tile is k- or mn-contiguous with 16-byte rows,
   `.trans` for the mn-contiguous one; 32-bit or 16-bit shared loads otherwise) and
   `mma.sync` on each warp's WTM x WTN part of the block tile;
3. after the K loop: the fragments pass through a shared-memory exchange (in row chunks that
   fit beside the kernel's own shared memory) into the thread's own accumulators, which the
   user's epilogue then stores as before. The accumulators are added to (`+=`), so an
   accumulator that starts at a bias keeps it.

fp32 tiles that hold only values of one 16-bit type (converted on the way in) are kept as that
type (`passes.cuda.tile_narrow`: stores convert, the kernel's other reads convert back), so
ldmatrix reads them; one that cannot be kept so stays fp32 and each fragment is packed from it.

Preconditions (each refusal says which): element type fp16 / bf16 in both tiles; `float`
accumulators (a sum kept in fp16 / bf16 or double would change under fp32 accumulation); BK a multiple
of 16; the block a whole number of warps; the block tile split into one warp tile per warp
with WTM a multiple of 16 and WTN of 8; shared memory left for the exchange; `arch >= sm_80`.
The rule is deterministic. Its de-optimization turns the rule's own output back into scalar
multiply-adds over the same tiles into the same accumulators (`scalar_edits`); the rule applied
to that gives the output again, so a kernel in this form can stand in a lineage.

Positions are byte offsets of `KernelIR.source`. No GPU library is imported here.
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from passes._source import ByteEdit, finish, make_site
from passes.base import Category, Pass, PassContext, PassResult, Site, Skipped
from passes.cuda._asm import helper_insert_at
from passes.cuda._c import CSource, Function, functions
from passes.cuda.annotations import CUDA
from passes.cuda.gemm_eval import BitSum, GemmTile, Tile, find_gemm_tiles
from passes.cuda.tile_narrow import (HALF_OF, NARROW_HELPERS, Narrowing, exact_kind,
                                     narrow_edits, narrowed, narrowing, widening_edits)

if TYPE_CHECKING:
    from anchors import AnchorIndex
    from kir import KernelIR

PREFIX = "kl_tc_"
STATIC_SHARED_LIMIT = 48 * 1024
# the exchange's share beside a dynamic shared buffer whose size only the host knows
DYNAMIC_EXCHANGE_LIMIT = 8 * 1024
_SHARED_MARGIN = 512

HELPERS = r"""// ---- tensor-core steps over shared tiles (mma.sync m16n8k16 / m16n8k8, fp32 accumulation) ----
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
"""


WGMMA_HELPERS = r"""// ---- warpgroup MMA steps over canonical copies of shared tiles (wgmma, sm_90a) ----
// a shared-memory matrix descriptor: K-major, no swizzle, 8x8 core matrices of 16-byte rows
// `lbo` bytes apart along K and `sbo` bytes apart along M / N
__device__ __forceinline__ unsigned long long kl_tc_desc(const void* p, unsigned lbo, unsigned sbo) {
  const unsigned long long a = static_cast<unsigned>(__cvta_generic_to_shared(p));
  return ((a & 0x3FFFFull) >> 4) | ((unsigned long long)(lbo >> 4) << 16) |
         ((unsigned long long)(sbo >> 4) << 32);
}
// the 16-bit pattern of an element (a 16-bit element as it is; an fp32 one rounded, exact for
// values that came from the 16-bit type)
template <bool BF16>
__device__ __forceinline__ unsigned short kl_tc_bits(unsigned short v) { return v; }
template <bool BF16>
__device__ __forceinline__ unsigned short kl_tc_bits(float v) {
  unsigned short r;
  if (BF16)
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r) : "f"(v));
  else
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r) : "f"(v));
  return r;
}
"""


@dataclass(frozen=True, slots=True)
class Plan:
    """How the block tile is split and read: a WM x WN grid of warps, each owning a WTM x WTN
    warp tile of MI x NI mma tiles of depth `ks` (16 or 8) on `dtype` (bf16 | fp16) operands;
    the operand load modes; the exchange's row chunk and row pitch."""

    warps_m: int
    warps_n: int
    mi: int
    ni: int
    ks: int
    dtype: str
    mode_a: int
    mode_b: int
    chunk: int
    ldc: int
    warps: int
    """The block's warps (those past warps_m * warps_n take no part in the mma)."""
    wgmma: bool = False
    """Warpgroups of 4 warps issue wgmma m64n(8 ni)k16 (warps_m = 4 x groups, warps_n = 1)."""

    @property
    def guard(self) -> str:
        """The condition a warp of the mma meets ("" when every warp takes part)."""
        used = self.warps_m * self.warps_n
        return "" if used == self.warps else f"{PREFIX}warp < {used}"

    @property
    def wtm(self) -> int:
        return 16 * self.mi

    @property
    def wtn(self) -> int:
        return 8 * self.ni


def plan(ir: KernelIR, tile: GemmTile) -> Plan | str:
    """The split of `tile` onto warps and tensor-core tiles, or why there is none."""
    dtype = operand_type(ir, tile)
    if dtype not in ("bf16", "fp16"):
        return dtype
    threads = tile.block[0] * tile.block[1]
    if tile.bk % 8:
        return f"the K step BK={tile.bk} is not a multiple of 8 (mma.sync m16n8k8 / m16n8k16)"
    if threads % 32:
        return f"the block of {threads} threads is not a whole number of warps"
    warps = threads // 32
    # as many warps as the tile has 16x8 warp tiles for (a small tile leaves some warps out of
    # the mma), then the squarest warp tile: it reads the fewest fragments per mma
    splits = [(wm, wn) for wm in range(1, warps + 1) for wn in range(1, warps // wm + 1)
              if tile.bm % (16 * wm) == 0 and tile.bn % (8 * wn) == 0]
    if not splits:
        return (f"the {tile.bm}x{tile.bn} block tile does not split into warp tiles of multiples "
                "of 16x8")
    wm, wn = min(splits, key=lambda s: (-s[0] * s[1], tile.bm // s[0] + tile.bn // s[1],
                                        -(tile.bm // s[0])))
    ldc = tile.bn + 4
    room = STATIC_SHARED_LIMIT - tile.shared_bytes - _SHARED_MARGIN
    if tile.dynamic:  # the host's dynamic share counts against the same 48 KiB without opt-in
        room = min(room, DYNAMIC_EXCHANGE_LIMIT)
    chunk = tile.bm
    while chunk > 1 and (chunk * ldc * 4 > room or tile.bm % chunk):
        chunk //= 2
    if chunk * ldc * 4 > room:
        return "no static shared memory is left for the accumulator exchange"
    return Plan(wm, wn, tile.bm // wm // 16, tile.bn // wn // 8, 16 if tile.bk % 16 == 0 else 8,
                dtype, _mode(tile.a), _mode(tile.b), chunk, ldc, warps)


def plan_wgmma(ir: KernelIR, tile: GemmTile) -> Plan | str:
    """The split of `tile` onto warpgroups that each issue wgmma m64nBNk16 on 64 of its rows,
    or why there is none."""
    dtype = operand_type(ir, tile)
    if dtype not in ("bf16", "fp16"):
        return dtype
    threads = tile.block[0] * tile.block[1]
    if tile.bk % 16:
        return f"the K step BK={tile.bk} is not a multiple of 16 (wgmma k16)"
    if threads % 128:
        return f"the block of {threads} threads is not a whole number of warpgroups"
    if tile.bm % 64 or tile.bm // 64 > threads // 128:
        return f"the block tile's {tile.bm} rows are not 64 rows per warpgroup of the block"
    if tile.bn % 8 or tile.bn > 256:
        return f"the block tile's {tile.bn} columns are not a wgmma N (a multiple of 8 up to 256)"
    copies = (tile.bm + tile.bn) * tile.bk * 2
    base = plan(ir, dataclasses.replace(tile, shared_bytes=tile.shared_bytes + copies + 128))
    if isinstance(base, str):
        return base
    return dataclasses.replace(base, warps_m=4 * (tile.bm // 64), warps_n=1, mi=1,
                               ni=tile.bn // 8, ks=16, wgmma=True)


def _mode(t: Tile) -> int:
    """How a tile's fragments are read: 2 ldmatrix (k contiguous, 16-byte rows), 3
    ldmatrix.trans (mn contiguous), 1 paired loads (k contiguous, even offsets), 0 single."""
    if not t.alignable:
        return 0
    sixteen = t.dtype in ("bf16", "fp16")
    if sixteen and t.s_k == 1 and t.s_mn > 0 and t.s_mn % 8 == 0 and t.base % 8 == 0:
        return 2
    if sixteen and t.s_mn == 1 and t.s_k > 0 and t.s_k % 8 == 0 and t.base % 8 == 0:
        return 3
    if t.s_k == 1 and t.s_mn % 2 == 0 and t.base % 2 == 0:
        return 1
    return 0


def operand_type(ir: KernelIR, tile: GemmTile) -> str:
    """bf16 | fp16: the type both tiles' values have exactly (a 16-bit tile holds it; an fp32
    tile holds it when `tile_narrow.exact_kind` proves every value stored into it exact in
    that type), else why neither."""
    kinds = []
    for t in (tile.a, tile.b):
        if t.dtype in ("bf16", "fp16"):
            kinds.append(t.dtype)
        elif t.dtype == "f32":
            staged = exact_kind(ir, tile.kernel, t.array, tile.region)
            if staged not in ("bf16", "fp16"):
                return staged
            kinds.append(staged)
        else:
            return (f"the shared tile {t.array} holds {t.dtype} (fp16 / bf16, or fp32 staged from "
                    "them, expected)")
    if kinds[0] != kinds[1]:
        return f"the tiles hold {kinds[0]} and {kinds[1]} values (one type expected)"
    return kinds[0]


def narrowed_tile(ir: KernelIR, tile: GemmTile) -> tuple[GemmTile, list[ByteEdit], str]:
    """`tile` with each fp32 tile that can be kept as the 16-bit type it holds exactly kept
    so (the edits that do it; the others stay fp32), and why the others stay fp32 ("" where
    none does). Values that are not exact leave both fp32, with why."""
    fp32 = [t for t in (tile.a, tile.b) if t.dtype == "f32"]
    if not fp32:
        return tile, [], ""
    kind = operand_type(ir, tile)
    if kind not in ("bf16", "fp16"):
        return tile, [], kind
    plans: list[Narrowing] = []
    why = []
    for t in fp32:
        if any(p.array == t.array for p in plans):
            continue
        got = narrowing(ir, tile.kernel, t.array, kind, tile.region)
        if isinstance(got, str):
            why.append(got)
        else:
            plans.append(got)
    while plans:  # an array declared beside one left fp32 stays fp32 too
        edits = narrow_edits(ir, plans)
        if not isinstance(edits, str):
            break
        why.append(edits)
        plans = [p for p in plans if not edits.startswith(f"the tile {p.array} ")]
    if not plans:
        return tile, [], "; ".join(why)
    arrays = {p.array: p for p in plans}
    a, b = (dataclasses.replace(t, dtype=kind) if t.array in arrays else t for t in (tile.a, tile.b))
    saved = sum(p.saved for p in plans)
    return (dataclasses.replace(tile, a=a, b=b, shared_bytes=tile.shared_bytes - saved), edits,
            "; ".join(why))


# ---------------------------------------------------------------------------------------------
# the generated code


def _pointer_type(t: Tile) -> str:
    return "float" if t.dtype == "f32" else "unsigned short"


def _tid(tile: GemmTile) -> str:
    if tile.block[1] == 1:
        return "(int)threadIdx.x"
    return f"((int)threadIdx.x + {tile.block[0]} * (int)threadIdx.y)"


def bit_sum_text(f: BitSum) -> str:
    """C text of a `BitSum` over threadIdx.x / threadIdx.y: runs of bits whose weights double
    become one shifted, masked field."""
    terms = [str(f.const)] if f.const else []
    for axis, weights in enumerate(f.weights):
        var = "(int)threadIdx." + "xy"[axis]
        b = 0
        while b < len(weights):
            if weights[b] == 0:
                b += 1
                continue
            hi = b
            while hi + 1 < len(weights) and weights[hi + 1] == 2 * weights[hi]:
                hi += 1
            field = var if b == 0 else f"({var} >> {b})"
            if hi + 1 < len(weights):
                field = f"({field} & {(1 << (hi - b + 1)) - 1})"
            terms.append(field if weights[b] == 1 else f"{field} * {weights[b]}")
            b = hi + 1
    return " + ".join(terms) if terms else "0"


def _warp_setup(tile: GemmTile, p: Plan, pad: str) -> list[str]:
    tid = _tid(tile)
    return [f"{pad}const int {PREFIX}lane = {tid} % 32, {PREFIX}warp = {tid} / 32;",
            f"{pad}const int {PREFIX}wm = {PREFIX}warp / {p.warps_n} * {p.wtm}, "
            f"{PREFIX}wn = {PREFIX}warp % {p.warps_n} * {p.wtn};"]


def accumulators(p: Plan, pad: str) -> str:
    return (f"{pad}// mma-micro-kernel: each warp's fp32 accumulator fragments\n"
            f"{pad}float {PREFIX}acc[{p.mi}][{p.ni}][4] = {{}};\n")


def _loops(pad: str, headers: list[str], body: list[str]) -> list[str]:
    """`body` inside unrolled loops `headers` (outermost first), each with braces."""
    out = []
    for depth, header in enumerate(headers):
        out += ["#pragma unroll", f"{pad}{'  ' * depth}{header} {{"]
    inner = pad + "  " * len(headers)
    out += [inner + line for line in body]
    out += [f"{pad}{'  ' * d}}}" for d in reversed(range(len(headers)))]
    return out


def _guarded(p: Plan, pad: str, lines: list[str]) -> list[str]:
    if not p.guard:
        return lines
    return [f"{pad}if ({p.guard}) {{", *(("  " + ln) if not ln.startswith("#") else ln
                                       for ln in lines), f"{pad}}}"]


def k_step(tile: GemmTile, p: Plan, pad: str) -> str:
    if p.wgmma:
        return _k_step_wgmma(tile, p, pad)
    bf16 = "true" if p.dtype == "bf16" else "false"
    ta, tb = (_pointer_type(t) for t in (tile.a, tile.b))
    i1, i2 = pad + "  ", pad + "    "
    i, j = f"{PREFIX}i", f"{PREFIX}j"
    body = [f"unsigned {PREFIX}fa[{p.mi}][4], {PREFIX}fb[{p.ni}][2];",
            *(ln[len(i2):] if not ln.startswith("#") else ln for ln in _loops(i2, [
                f"for (int {i} = 0; {i} < {p.mi}; ++{i})"],
                [f"{PREFIX}frag_a<{bf16}, {p.ks}, {p.mode_a}, {tile.a.s_mn}, {tile.a.s_k}>({PREFIX}fa[{i}], "
                 f"{PREFIX}pa, {PREFIX}lane, {PREFIX}wm + 16 * {i}, {PREFIX}k);"])),
            *(ln[len(i2):] if not ln.startswith("#") else ln for ln in _loops(i2, [
                f"for (int {j} = 0; {j} < {p.ni}; {j} += {2 if p.ni % 2 == 0 else 1})"],
                [f"{PREFIX}frag_b2<{bf16}, {p.ks}, {p.mode_b}, {tile.b.s_k}, {tile.b.s_mn}>({PREFIX}fb[{j}], "
                 f"{PREFIX}fb[{j} + 1], {PREFIX}pb, {PREFIX}lane, {PREFIX}k, {PREFIX}wn + 8 * {j});"]
                if p.ni % 2 == 0 else [
                f"{PREFIX}frag_b<{bf16}, {p.ks}, {p.mode_b}, {tile.b.s_k}, {tile.b.s_mn}>({PREFIX}fb[{j}], "
                 f"{PREFIX}pb, {PREFIX}lane, {PREFIX}k, {PREFIX}wn + 8 * {j});"])),
            *(ln[len(i2):] if not ln.startswith("#") else ln for ln in _loops(i2, [
                f"for (int {i} = 0; {i} < {p.mi}; ++{i})", f"for (int {j} = 0; {j} < {p.ni}; ++{j})"],
                [f"{PREFIX}mma<{bf16}, {p.ks}>({PREFIX}acc[{i}][{j}], {PREFIX}fa[{i}], {PREFIX}fb[{j}]);"]))]
    loop = _loops(i1, [f"for (int {PREFIX}k = 0; {PREFIX}k < {tile.bk}; {PREFIX}k += {p.ks})"], body)
    lines = [f"{pad}{{  // mma-micro-kernel: this K step on tensor cores (mma.sync m16n8k{p.ks})",
             *_warp_setup(tile, p, i1),
             f"{i1}const {ta}* {PREFIX}pa = reinterpret_cast<const {ta}*>({tile.a.array}) + "
             f"{tile.a.base};",
             f"{i1}const {tb}* {PREFIX}pb = reinterpret_cast<const {tb}*>({tile.b.array}) + "
             f"{tile.b.base};",
             *_guarded(p, i1, loop),
             f"{pad}}}"]
    return "\n".join(lines)


def _k_step_wgmma(tile: GemmTile, p: Plan, pad: str) -> str:
    """Copy this K step's tiles into K-major canonical buffers, then each warpgroup issues
    wgmma m64n(BN)k16 per 16-wide k slice on its 64 rows."""
    bf16 = "true" if p.dtype == "bf16" else "false"
    ptx_type = "bf16" if p.dtype == "bf16" else "f16"
    ta, tb = (_pointer_type(t) for t in (tile.a, tile.b))
    bm, bn, bk = tile.bm, tile.bn, tile.bk
    threads = tile.block[0] * tile.block[1]
    i1, i2, i3 = pad + "  ", pad + "    ", pad + "      "
    regs = ", ".join(f"%{r}" for r in range(bn // 2))
    outs = ", ".join(f'"+f"({PREFIX}acc[0][{j}][{r}])' for j in range(bn // 8) for r in range(4))

    def canonical(rows: str, k: str) -> str:
        return f"(({rows}) >> 3) * {bk * 8} + (({k}) >> 3) * 64 + (({rows}) & 7) * 8 + (({k}) & 7)"

    lines = [f"{pad}{{  // mma-micro-kernel: this K step on tensor cores (wgmma m64n{bn}k16)",
             f"{i1}__shared__ __align__(128) unsigned short {PREFIX}ca[{bm * bk}];",
             f"{i1}__shared__ __align__(128) unsigned short {PREFIX}cb[{bn * bk}];",
             f"{i1}const int {PREFIX}tid = {_tid(tile)}, {PREFIX}warp = {PREFIX}tid / 32;",
             f"{i1}const {ta}* {PREFIX}pa = reinterpret_cast<const {ta}*>({tile.a.array}) + "
             f"{tile.a.base};",
             f"{i1}const {tb}* {PREFIX}pb = reinterpret_cast<const {tb}*>({tile.b.array}) + "
             f"{tile.b.base};",
             f"{i1}for (int e = {PREFIX}tid; e < {bm * bk}; e += {threads}) {{",
             f"{i2}const int r = e / {bk}, k = e % {bk};",
             f"{i2}{PREFIX}ca[{canonical('r', 'k')}] = {PREFIX}bits<{bf16}>({PREFIX}pa[r * "
             f"{tile.a.s_mn} + k * {tile.a.s_k}]);",
             f"{i1}}}",
             f"{i1}for (int e = {PREFIX}tid; e < {bn * bk}; e += {threads}) {{",
             f"{i2}const int n = e / {bk}, k = e % {bk};",
             f"{i2}{PREFIX}cb[{canonical('n', 'k')}] = {PREFIX}bits<{bf16}>({PREFIX}pb[k * "
             f"{tile.b.s_k} + n * {tile.b.s_mn}]);",
             f"{i1}}}",
             f'{i1}asm volatile("fence.proxy.async.shared::cta;" ::: "memory");',
             f"{i1}__syncthreads();",
             f"{i1}if ({PREFIX}warp < {p.warps_m}) {{",
             f"{i2}const unsigned short* {PREFIX}ga = {PREFIX}ca + {PREFIX}warp / 4 * {64 * bk};",
             f'{i2}asm volatile("wgmma.fence.sync.aligned;" ::: "memory");',
             "#pragma unroll",
             f"{i2}for (int {PREFIX}k = 0; {PREFIX}k < {bk}; {PREFIX}k += 16) {{",
             f"{i3}const unsigned long long da = {PREFIX}desc({PREFIX}ga + {PREFIX}k * 8, 128, "
             f"{bk * 16});",
             f"{i3}const unsigned long long db = {PREFIX}desc({PREFIX}cb + {PREFIX}k * 8, 128, "
             f"{bk * 16});",
             f'{i3}asm volatile("wgmma.mma_async.sync.aligned.m64n{bn}k16.f32.{ptx_type}.{ptx_type} '
             f'{{{regs}}}, %{bn // 2}, %{bn // 2 + 1}, 1, 1, 1, 0, 0;"',
             f"{i3}             : {outs}",
             f'{i3}             : "l"(da), "l"(db));',
             f"{i2}}}",
             f'{i2}asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");',
             f'{i2}asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");',
             f"{i1}}}",
             f"{pad}}}"]
    return "\n".join(lines)


def exchange(tile: GemmTile, p: Plan, pad: str) -> str:
    """The fragments -> the thread's own accumulators, `p.chunk` rows of the tile at a time."""
    i1, i2, i3 = pad + "  ", pad + "    ", pad + "      "
    c = p.chunk
    i, j, h = f"{PREFIX}i", f"{PREFIX}j", f"{PREFIX}h"
    write = _loops(i2, [f"for (int {i} = 0; {i} < {p.mi}; ++{i})",
                        f"for (int {j} = 0; {j} < {p.ni}; ++{j})",
                        f"for (int {h} = 0; {h} < 2; ++{h})"],
                   [f"const int r = {PREFIX}wm + 16 * {i} + {PREFIX}lane / 4 + 8 * {h} - {PREFIX}c0;",
                    f"if (r >= 0 && r < {c}) {{",
                    f"  float* o = {PREFIX}cs + r * {p.ldc} + {PREFIX}wn + 8 * {j} + "
                    f"2 * ({PREFIX}lane % 4);",
                    f"  o[0] = {PREFIX}acc[{i}][{j}][2 * {h}];",
                    f"  o[1] = {PREFIX}acc[{i}][{j}][2 * {h} + 1];",
                    "}"])
    lines = [f"{pad}{{  // mma-micro-kernel: the fragments into this thread's accumulators, "
             "through shared memory",
             f"{i1}__shared__ float {PREFIX}cs[{c * p.ldc}];",
             *_warp_setup(tile, p, i1),
             f"{i1}const int {PREFIX}row = {bit_sum_text(tile.row)}, "
             f"{PREFIX}col = {bit_sum_text(tile.col)};",
             "#pragma unroll 1",
             f"{i1}for (int {PREFIX}c0 = 0; {PREFIX}c0 < {tile.bm}; {PREFIX}c0 += {c}) {{",
             f"{i2}__syncthreads();",
             *_guarded(p, i2, write),
             f"{i2}__syncthreads();"]
    by_row: dict[int, list] = {}
    for e in tile.elements:
        by_row.setdefault(e.dm, []).append(e)
    for dm, group in sorted(by_row.items()):
        r = f"{PREFIX}row + {dm} - {PREFIX}c0" if dm else f"{PREFIX}row - {PREFIX}c0"
        lines.append(f"{i2}if ((unsigned)({r}) < {c}u) {{")
        lines.append(f"{i3}const float* s = {PREFIX}cs + ({r}) * {p.ldc} + {PREFIX}col;")
        lines += [f"{i3}{e.lvalue} += s[{e.dn}];" for e in group]
        lines.append(f"{i2}}}")
    lines += [f"{i1}}}", f"{i1}__syncthreads();", f"{pad}}}"]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# the pass


def _block_option(spec: str, ctx: PassContext | None, ir: KernelIR | None = None
                  ) -> tuple[int, int] | None | str:
    """The launch's block (x, y) from the option, else the context's `block` fact, else the
    block the host's launches use (`recognize.launch_block`: the host module beside the
    kernel's file, `<<<grid, block>>>`); None where none is told."""
    value: Any = spec or (ctx.facts.get("block") if ctx is not None else None)
    if value in (None, "", 0) and ir is not None:
        from passes.cuda.recognize import launch_block  # noqa: PLC0415

        try:
            value = launch_block(ir).dims
        except (OSError, ValueError, SyntaxError):
            value = None
    if value in (None, "", 0):
        return None
    if isinstance(value, int):
        return (value, 1)
    if isinstance(value, (list, tuple)):
        dims = [int(v) for v in value] + [1, 1]
    else:
        parts = re.split(r"[x,\s]+", str(value).strip())
        if not all(p.isdigit() for p in parts):
            return f"block '{value}' is not N or NxM"
        dims = [int(v) for v in parts] + [1, 1]
    if dims[2] != 1:
        return "a three-dimensional block"
    return (dims[0], dims[1])


def _fixed_tiles(tiles: list[GemmTile], reasons: list[str]) -> tuple[list[GemmTile], list[str]]:
    """The tiles that lie at one place every K step, and a reason for each ring of buffers (the
    fragments are read from the tiles' one place)."""
    ring = [f"{t.kernel}: the K loop reads its tiles from a ring of buffers chosen by "
            f"{', '.join(t.ring)} (gemm-schedule replaces the whole loop)" for t in tiles if t.ring]
    return [t for t in tiles if not t.ring], ring + reasons


@dataclass(frozen=True, slots=True)
class MmaMicroKernel(Pass):
    """A scalar-FMA GEMM micro-kernel over fp16/bf16 shared tiles -> warp-level mma.sync."""

    block: str = ""
    """The launch's block size, `N` or `NxM` (empty: the `block` fact of the context, the
    kernel's `__launch_bounds__`, else the largest block that covers the tile exactly once)."""
    wgmma: bool = False
    """Issue the K step as Hopper warpgroup MMA (wgmma m64nBNk16, sm_90a) from K-major copies
    of the tiles made each step, instead of warp-level mma.sync."""

    name: ClassVar[str] = "mma-micro-kernel"
    category: ClassVar[Category] = Category.COMPUTE
    summary: ClassVar[str] = ("scalar FMA micro-kernel over fp16/bf16 shared tiles -> "
                              "mma.sync m16n8k16 through the user's epilogue")
    # its output is mma.sync / ldmatrix inline PTX, which mma-intrinsics may in turn read
    provides: ClassVar[tuple[str, ...]] = ("tensor-core",)
    languages: ClassVar[tuple[str, ...]] = CUDA
    platforms: ClassVar[tuple[str, ...]] = ("cuda",)
    preconditions: ClassVar[tuple[str, ...]] = ("arch >= sm_80",)

    def sites(self, ir: KernelIR, index: AnchorIndex | None = None) -> list[Site]:
        whole = (0, len(ir.source))
        src = CSource(ir)
        out, plain = [], []
        for f in _kernels(src):
            at = src.text.find(_STEP_MARK, f.body_start, f.body_end)
            if at >= 0:
                out.append(make_site(self.name, ir, index, whole, True, {"kernel": f.name},
                                     src.bspan(at, at + len(_STEP_MARK))))
            else:
                plain.append(f.name)
        if not plain or "__shared__" not in src.code or "__syncthreads" not in src.code:
            return out
        dims = _block_option(self.block, None, ir)
        tiles, reasons = _fixed_tiles(*find_gemm_tiles(ir, dims if isinstance(dims, tuple)
                                                       else None, frozenset(plain)))
        out += [make_site(self.name, ir, index, whole, False, _site_detail(ir, t), t.loop)
                for t in tiles]
        if not tiles and reasons:
            out.append(make_site(self.name, ir, index, whole, False, {"refused": reasons[0]}))
        return out

    def deoptimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        kernel = site.detail.get("kernel")
        edits = scalar_edits(ir, kernel)
        if isinstance(edits, str):
            return Skipped(edits)
        src = CSource(ir)
        body = next((ir.text[f.body_start:f.body_end] for f in _kernels(src) if f.name == kernel), "")
        return finish(ir, site, edits, options={"wgmma": _WGMMA_STEP in body})

    def optimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        results, skip = self.check(ctx)
        if skip:
            return skip
        src = CSource(ir)
        mine = [f for f in _kernels(src) if src.text.find(_STEP_MARK, f.body_start, f.body_end) >= 0]
        if PREFIX in _outside(src, mine):
            return Skipped(f"the kernel already uses names starting {PREFIX}")
        dims = _block_option(self.block, ctx, ir)
        if isinstance(dims, str):
            return Skipped(dims)
        plain = frozenset(f.name for f in _kernels(src)) - {f.name for f in mine}
        tiles, reasons = _fixed_tiles(*find_gemm_tiles(ir, dims, plain))
        if not tiles:
            return Skipped(reasons[0] if reasons else "no GEMM micro-kernel over shared tiles")
        wanted = site.detail.get("kernel")
        tile = next((t for t in tiles if wanted in (None, t.kernel)), None)
        if tile is None:
            return Skipped(f"no GEMM micro-kernel in {wanted}")
        if self.wgmma and ctx is not None and str(ctx.facts.get("arch", "sm_90")) < "sm_90":
            return Skipped("wgmma needs sm_90a")
        # fp32 tiles whose values are exact in the 16-bit type are kept as that type (half
        # the shared memory, ldmatrix); where that cannot be done they stay fp32 and each
        # fragment is packed from them
        read, narrow, _ = narrowed_tile(ir, tile)
        p = plan_wgmma(ir, read) if self.wgmma else plan(ir, read)
        if isinstance(p, str) and narrow:
            read, narrow = tile, []
            p = plan_wgmma(ir, tile) if self.wgmma else plan(ir, tile)
        if isinstance(p, str):
            return Skipped(p, tile.to_json())
        return finish(ir, site, rewrite_edits(ir, read, p, narrow), preconditions=results)


def _site_detail(ir: KernelIR, tile: GemmTile) -> dict[str, Any]:
    """The tile's JSON, with (for fp32 tiles) the arrays kept as 16-bit and why others are not."""
    detail = tile.to_json()
    if "f32" in (tile.a.dtype, tile.b.dtype):
        narrow, _, why = narrowed_tile(ir, tile)
        detail["narrowed"] = sorted({t.array for t, n in ((tile.a, narrow.a), (tile.b, narrow.b))
                                     if t.dtype != n.dtype})
        if why:
            detail["kept_fp32"] = why
    return detail


def _kernels(src: CSource) -> list[Function]:
    return [f for f in functions(src) if f.is_kernel]


def _outside(src: CSource, kernels: list[Function]) -> str:
    """The code view without the inserted helpers and the bodies of `kernels`."""
    code = src.code
    cuts = sorted([(f.body_start, f.body_end) for f in kernels])
    for helpers in (HELPERS, WGMMA_HELPERS, NARROW_HELPERS):
        at = src.text.find(helpers)
        if at >= 0:
            cuts = sorted(cuts + [(at, at + len(helpers))])
    out, pos = [], 0
    for a, b in cuts:
        out.append(code[pos:a])
        pos = max(pos, b)
    return "".join(out) + code[pos:]


def rewrite_edits(ir: KernelIR, tile: GemmTile, p: Plan,
                  narrow: list[ByteEdit] | None = None) -> list[ByteEdit]:
    """The byte edits that put `tile`'s K step on tensor cores with the split `p`, with the
    `narrow` edits of `narrowed_tile` (its fp32 tiles kept as 16-bit: `tile` reads them so)."""
    source = ir.source
    edits: list[ByteEdit] = []
    # helpers another kernel of the unit already has are not inserted again
    wanted = "".join(h for h, needed in ((HELPERS, True), (WGMMA_HELPERS, p.wgmma),
                                         (NARROW_HELPERS, bool(narrow)))
                     if needed and h not in ir.text)
    edits += narrow or []
    if wanted:
        at = CSource(ir).b(helper_insert_at(CSource(ir)))
        if HELPERS in ir.text:  # after them: the narrowing helpers call kl_tc_pack
            at = ir.source.find(HELPERS.encode()) + len(HELPERS.encode())
        edits.append(ByteEdit(at, at, wanted))
    aligning = set()
    for t, mode in ((tile.a, p.mode_a), (tile.b, p.mode_b)):
        if mode >= 1 and not t.aligned and t.decl not in aligning:
            aligning.add(t.decl)
            decl = source[t.decl[0]:t.decl[1]]
            k = decl.find(b"__shared__")
            pos = t.decl[0] + k + len(b"__shared__")
            edits.append(ByteEdit(pos, pos, " __align__(16)"))
    loop_line = source.rfind(b"\n", 0, tile.loop[0]) + 1
    pad = _indent(source, tile.loop[0])
    edits.append(ByteEdit(loop_line, loop_line, accumulators(p, pad)))
    first = True
    for start, end in tile.region:
        line = source.rfind(b"\n", 0, start) + 1
        whole_line = not source[line:start].strip()
        nl = source.find(b"\n", end)
        tail_blank = nl >= 0 and not source[end:nl].strip()
        s = line if whole_line else start
        e = nl + 1 if (whole_line and tail_blank) else end
        if first:
            text = k_step(tile, p, _indent(source, start)) + ("\n" if e > end else "")
            edits.append(ByteEdit(s, e, text))
            first = False
        else:
            edits.append(ByteEdit(s, e, ""))
    after = source.find(b"\n", tile.loop[1])
    after = len(source) if after < 0 else after + 1
    edits.append(ByteEdit(after, after, exchange(tile, p, pad) + "\n"))
    edits.sort(key=lambda e: (e.start, e.end))
    return edits


def _indent(source: bytes, pos: int) -> str:
    line = source.rfind(b"\n", 0, pos) + 1
    end = line
    while end < len(source) and source[end:end + 1] in (b" ", b"\t"):
        end += 1
    return source[line:end].decode()


# ---------------------------------------------------------------------------------------------
# the de-optimization: the rule's tensor-core form -> scalar multiply-adds over the same tiles

_STEP_MARK = f"{{  // mma-micro-kernel: this K step"
_EXCHANGE_MARK = f"{{  // mma-micro-kernel: the fragments into"
_ACC_DECL = re.compile(r"[ \t]*// mma-micro-kernel: each warp's fp32 accumulator fragments\n"
                       rf"[ \t]*float {PREFIX}acc\[\d+\]\[\d+\]\[4\] = \{{\}};\n")
_OPERAND = re.compile(rf"{PREFIX}p([ab]) = reinterpret_cast<const [\w ]+\*>\((\w+)\) \+ (-?\d+);")
_FRAG = re.compile(rf"{PREFIX}frag_([ab])2?<\w+, \d+, \d+, (-?\d+), (-?\d+)>")
_WGMMA_STEP = "on tensor cores (wgmma m64n"
_COPY = re.compile(rf"{PREFIX}p([ab])\[(?:r|k) \* (-?\d+) \+ (?:k|n) \* (-?\d+)\]")
_DEPTH = re.compile(rf"{PREFIX}k < (\d+); {PREFIX}k \+= \d+")
_MAP = re.compile(rf"const int {PREFIX}row = (.+?), {PREFIX}col = (.+?);\n")
_GROUP = re.compile(rf"if \(\(unsigned\)\({PREFIX}row(?: \+ (-?\d+))? - {PREFIX}c0\) < \d+u\) \{{\n"
                    r"[^\n]*\n((?:[ \t]*[^\n]+ \+= s\[\d+\];\n)+)")
_ADD = re.compile(r"[ \t]*(.+?) \+= s\[(\d+)\];")
_TO_FLOAT = {"bf16": "__bfloat162float", "fp16": "__half2float", "f32": ""}


def scalar_edits(ir: KernelIR, kernel: str | None = None) -> list[ByteEdit] | str:
    """Edits that turn the rule's output in `kernel` (the unit's only such kernel where None)
    back into scalar multiply-adds over the same shared tiles into the same accumulators (its
    fragments and exchange removed; the helpers too when no other kernel calls them), or why
    the kernel is not in the rule's form. The rule applied to the result gives it back."""
    from passes.cuda.gemm_eval import shared_dims  # noqa: PLC0415

    text = ir.text
    src = CSource(ir)
    mine = [f for f in _kernels(src) if text.find(_STEP_MARK, f.body_start, f.body_end) >= 0]
    target = [f for f in mine if kernel in (None, f.name)]
    if len(target) != 1:
        return "the kernel is not in the form mma-micro-kernel writes"
    fn = target[0]
    step_at = text.find(_STEP_MARK, fn.body_start, fn.body_end)
    swap_at = text.find(_EXCHANGE_MARK, fn.body_start, fn.body_end)
    helpers_at = text.find(HELPERS)
    acc = _ACC_DECL.search(text, fn.body_start, fn.body_end)
    if min(step_at, swap_at, helpers_at) < 0 or acc is None or \
            text.count(_STEP_MARK, fn.body_start, fn.body_end) != 1:
        return "the kernel is not in the form mma-micro-kernel writes"
    step = text[step_at:src.close(step_at)]
    swap_end = src.close(swap_at)
    swap = text[swap_at:swap_end]
    operands = {m.group(1): (m.group(2), int(m.group(3))) for m in _OPERAND.finditer(step)}
    strides = {m.group(1): (int(m.group(2)), int(m.group(3))) for m in _FRAG.finditer(step)}
    wgmma = _WGMMA_STEP in step
    if wgmma:  # the copies into the canonical buffers read each tile at its strides
        strides = {m.group(1): (int(m.group(2)), int(m.group(3))) for m in _COPY.finditer(step)}
    depth, where = _DEPTH.search(step), _MAP.search(swap)
    groups = list(_GROUP.finditer(swap))
    if set(operands) != {"a", "b"} or set(strides) != {"a", "b"} or not depth or not where \
            or not groups:
        return "the kernel's tensor-core step is not one mma-micro-kernel wrote"
    dims = shared_dims(ir, fn.name)
    (arr_a, base_a), (arr_b, base_b) = operands["a"], operands["b"]
    if arr_a not in dims or arr_b not in dims:
        return "the tensor-core step's tiles are not shared arrays of its kernel"
    (sa_m, sa_k), (sb_k, sb_n) = strides["a"], strides["b"]
    pad = _indent(ir.source, src.b(step_at))
    inner = pad + "    "

    # tiles the rule kept as 16-bit are fp32 again once the narrowing is undone
    widened = {n for n in dims if re.search(rf"\b{HALF_OF}<[^;]*\b{re.escape(n)}\b",
                                            src.code[fn.body_start:fn.body_end])}

    def read(arr: str, flat: str) -> str:
        kind, extents = dims[arr]
        return f"{_TO_FLOAT['f32' if arr in widened else kind]}({_subscript(arr, flat, extents)})"

    lines = [f"{{  // scalar multiply-adds over the shared tiles",
             f"{pad}  const int kl_fma_row = {where.group(1)}, kl_fma_col = {where.group(2)};",
             f"{pad}  for (int kl_fma_k = 0; kl_fma_k < {depth.group(1)}; ++kl_fma_k) {{"]
    for g in groups:
        dm = int(g.group(1) or 0)
        for add in _ADD.finditer(g.group(2)):
            dn = int(add.group(2))
            fa = _affine(base_a, [("kl_fma_row", dm, sa_m), ("kl_fma_k", 0, sa_k)])
            fb = _affine(base_b, [("kl_fma_k", 0, sb_k), ("kl_fma_col", dn, sb_n)])
            lines.append(f"{inner}{add.group(1)} += {read(arr_a, fa)} * {read(arr_b, fb)};")
    lines += [f"{pad}  }}", f"{pad}}}"]
    edits = [ByteEdit(*src.bspan(helpers_at, helpers_at + len(HELPERS)), "")] if len(mine) == 1 \
        else []
    narrow_at = text.find(NARROW_HELPERS)
    if widened and narrow_at >= 0 and sum(narrowed(src.code, f.body_start, f.body_end)
                                          for f in mine) == 1:
        edits.append(ByteEdit(*src.bspan(narrow_at, narrow_at + len(NARROW_HELPERS)), ""))
    edits += widening_edits(src, fn.body_start, fn.body_end)
    wg_at = text.find(WGMMA_HELPERS)
    if wgmma and wg_at >= 0 and sum(_WGMMA_STEP in text[f.body_start:f.body_end] for f in mine) == 1:
        edits.append(ByteEdit(*src.bspan(wg_at, wg_at + len(WGMMA_HELPERS)), ""))
    edits += [ByteEdit(*src.bspan(acc.start(), acc.end()), ""),
             ByteEdit(*src.bspan(step_at, step_at + len(step)), "\n".join(lines))]
    line_end = text.find("\n", swap_end)
    edits.append(ByteEdit(*src.bspan(src.line_start(swap_at), line_end + 1 if line_end >= 0
                                     else len(text)), ""))
    return sorted(edits, key=lambda e: e.start)


def _affine(base: int, terms: list[tuple[str, int, int]]) -> str:
    """`base + sum((var + offset) * stride)` as C text, zero terms left out."""
    parts = [str(base)] if base else []
    for var, offset, stride in terms:
        if stride == 0:
            continue
        v = f"({var} + {offset})" if offset else var
        parts.append(v if stride == 1 else f"{v} * {stride}")
    return " + ".join(parts) or "0"


def _subscript(arr: str, flat: str, extents: tuple[int, ...]) -> str:
    """`arr` indexed at the flattened element `flat` through its declared extents."""
    if len(extents) == 1:
        return f"{arr}[{flat}]"
    out = []
    for i, d in enumerate(extents):
        size = 1
        for e in extents[i + 1:]:
            size *= e
        index = f"({flat})" if size == 1 else f"({flat}) / {size}"
        out.append(index if i == 0 else f"{index} % {d}")
    return arr + "".join(f"[{x}]" for x in out)
