"""`gemm-schedule`: a recognized tiled GEMM kernel keeps its signature, launch and epilogue and
gets an expert schedule for its main loop.

What the kernel computes is read in two steps: `passes.cuda.gemm_eval` finds the K loop's inner
region (the shared tiles, the block tile BM x BN x BK, which output cell each of a thread's
accumulators holds) and `passes.cuda.gemm_global` traces the staging of the tiles back to global
memory (the two operands' pointers, row- or column-major layouts, leading dimensions, the M / N /
K parameters that bound them, which blockIdx component steps rows and columns). With that the
kernel's body becomes:

- a persistent loop over 128 x 128 output tiles (grouped for L2 reuse) that works with whatever
  grid the user's host launches (blockIdx / gridDim linearized; a block beyond the tile count
  does nothing);
- per tile, a K loop over 32-deep slices staged by `cp.async` in 16-byte chunks (zero-filled
  past M, N and K; element copies where a leading dimension or base is not 16-byte aligned) into
  a ring of padded shared tiles, read with `ldmatrix` into `mma.sync m16n8k16` on warp tiles of
  several mma tiles (fp32 accumulation);
- per user-sized block the tile covers, the user's own body with `blockIdx` replaced by that
  block's coordinates and the K loop replaced by an exchange of the accumulator fragments
  (through shared memory) into the user's accumulators, so the user's epilogue (alpha / beta,
  bias, activation, bounds, conversion) writes the output as before.

Options: `wgmma` (sm_90a: 64- / 128-byte swizzled slices read by `wgmma.mma_async m64nNk16`
per warpgroup), `wide` (with wgmma: 128x256 tiles), `bk` (16: shallower slices and more slots
for the mma.sync form), `overlap` (with wgmma: one K step's MMAs in flight while the next is
issued), `block` (the launch's block where no host tells it), `deep` with `stages` (64-deep
slices in 3 to 6 slots of dynamic shared memory: 128-byte swizzled for wgmma, which then always
keeps one K step in flight; the kernel's `<<<grid, block>>>` launches in the same source are
edited to pass the bytes and to raise the kernel's limit first, or the Python host module that
launches it is asked to by a host-launch line: `passes.cuda.gemm_launch`, `kir.hostlaunch`; either
launches no more blocks than the device holds at once, the persistent loop taking the rest),
`specialize` (deep wgmma: warps that only fill the ring and warpgroups that only multiply,
each slot handed over by a full and an empty mbarrier), `producer` (deep wgmma: the launch's
block grows by one warpgroup that only fills the ring, its copies landing on the slots' full
mbarriers by `cp.async.mbarrier.arrive`, running ahead into the next tile while the launch's own
warpgroups, which only multiply, write this one through an exchange of its own shared memory;
registers move from the added warpgroup to the others with `setmaxnreg`; refused where the
kernel's own `__launch_bounds__` fix its block or the body it keeps waits at a block barrier),
`tma` (producer form: one thread of the added warpgroup fills each slot with TMA tensor copies
from maps the edited launches build on the host and pass as a `__grid_constant__` parameter;
where the host cannot encode them, the warpgroup's cp.async fills the ring), `consumers`
(producer form: 4 warpgroups multiply where the launch's block has two: the block grows by two
more warpgroups besides the producer, the tile's MMAs are split over the four, and each half of
them runs the kernel's body for the user-sized blocks of its half of the tile as a block of the
launch's own size, `threadIdx` read within its half, the halves taking one exchange of whole
blocks in turn where it fits beside the ring, else each an exchange of its own in row chunks),
`pingpong` (producer form on 128x128 tiles, the body run once per cell: each of the two
multiplying warpgroups holds a whole tile and they take the block's tiles in turn, so that one
writes its tile while the other multiplies the next; a named barrier pair orders their main
loops, the ring's slices arriving in the order they are taken).

Virtual threads: where a deep form does not take the launch's block as it is (a block of 1024
threads has no room for a producer warpgroup, 64 threads make no warpgroup), or where the body
can only run so (the K loop reads global memory or sits in a branch), the form launches its own
block (`dim3(threads, 1, 1)`: 256 threads that multiply, 384 with fillers, `consumers`
warpgroups and the producer) and runs the user's body for the user's threads as virtual
threads: per chunk of whole user-block rows of the tile the fragments go to shared memory once,
then the multiplying threads take (user block, user thread) pairs in turn, each running the
body with blockIdx / gridDim / blockDim / threadIdx those of that user thread and the K loop
replaced by reads of its cells' products (`virtual_tail`); the static forms keep the launch's
block (their tables must take it). Where each user thread holds one output and the block's
threads map one to one onto its cells (`passes.cuda.gemm_cells`), there is no exchange: each
multiplying thread runs the body once per cell of its own fragments, for the user thread owning
that cell, the accumulator read from the register (option `exchange` keeps the exchange);
the deep forms that keep the launch's block read such a kernel's cells so as well (the body's
threadIdx then that of the cell's owner). In the producer forms each warp first puts its
fragments into a slab of shared memory of its own beside the ring (where one fits; option
`registers` keeps the registers), and its lanes run the body for the slab's cells in row order:
a fragment's cells are eight rows by a pair of columns a warp instruction, so the user's store
of one output a cell would otherwise reach eight rows at once.
A body that waits at a block barrier, works across a warp or keeps shared memory of its own
cannot run so and is refused. Kernels without shared tiles whose
K loop multiplies elements read straight from global memory (a naive GEMM) are read by
`passes.cuda.gemm_direct` into the same `GlobalGemm` and always take the virtual form.

Preconditions (each refusal says which): the kernel is a GEMM micro-kernel `gemm_eval` reads and
whose staging `gemm_global` traces, or one over global operands `gemm_direct` reads; bf16 / fp16
global operands; `float` accumulators (a sum kept in fp16 / bf16 or in double is refused: the
tensor cores' fp32 accumulation would change it); operands that blockIdx.z moves only as a
batch (each z one GEMM, its operands a product of integer parameters apart: the persistent loop
runs over one plane's tiles, the operands moved by z, and the body sees blockIdx.z as launched;
not with `tma`, whose maps hold one matrix); the block size is known (the host's launch, the `block` fact or option,
`__launch_bounds__`) and is 4, 8, 16 or 32 warps (any, where the form launches its own block);
the user's block tile divides 128 x 128; a shared-tiled body has no `return` (a block leaving the
persistent loop early would strand the others at its barriers); static shared memory fits 48 KiB (the
user's launch passes no dynamic shared memory for it), or, in the deep form, the ring fits the
architecture's dynamic shared memory and the unit or its Python host module holds the kernel's
launches in a form they can be edited in; `arch >= sm_80`. Deterministic. The
de-optimization turns the rule's output back into a plain tiled kernel with synchronous scalar
staging and scalar multiply-adds into the same accumulators (`scalar_form`), which the rule
reads again to give the same output, so the rule can stand in a lineage.

Positions are byte offsets of `KernelIR.source`. No GPU library is imported here.
"""
from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar

from passes._source import ByteEdit, finish, make_site
from passes.base import Category, Pass, PassContext, PassResult, Site, Skipped
from passes.cuda._asm import helper_insert_at
from passes.cuda._c import CSource, Function, functions
from passes.cuda._tree import Scope, children
from passes.cuda.annotations import CUDA
from kir.hostlaunch import Directive
from passes.cuda._gemm_text import (BARRIER_HELPERS, DEEP_HELPERS, HELPERS, MARK, PERSIST_HOST,
                                    PREFIX, TMA_DEVICE_HELPERS, TMA_HELPERS, TMA_PARAMETER,
                                    written as _written)
from passes.cuda.gemm_launch import (launch_edits, launched_here, limit_lines, parameter_bytes,
                                     host_edits)
from passes.cuda.gemm_eval import (ASYNC_COPY, ASYNC_FENCE, GemmTile, Refusal, find_gemm_tiles,
                                   _Kernel, _TRIVIA as _TRIVIA_KINDS)
from passes.cuda.gemm_cells import (cell_products, cell_threads, cells_tail, stage_bytes,
                                    stage_width)
from passes.cuda.gemm_direct import find_direct, may_be_direct
from passes.cuda.gemm_global import GlobalGemm, Operand, trace
from passes.cuda.gemm_scalar import form_options, scalar_edits
from passes.cuda.mma_tile import HELPERS as MMA_HELPERS, _block_option, bit_sum_text

if TYPE_CHECKING:
    from anchors import AnchorIndex
    from kir import KernelIR

STATIC_SHARED_LIMIT = 48 * 1024
DYNAMIC_SHARED_LIMIT = {"sm_90": 227 * 1024, "sm_80": 163 * 1024}
"""Shared memory a block may opt in to, by architecture (99 KiB on the others of sm_80+)."""
TILE_M, TILE_N, TILE_K = 128, 128, 32
DEEP_K = 64
"""The slice depth of the deep form (128-byte rows: the 128-byte swizzle for wgmma)."""
ALIGN_SLACK = 1024
"""Bytes the deep form asks beyond its ring, to start the ring at a 1024-byte boundary."""
PAD = 8
"""Elements of padding per shared row (16 bytes: ldmatrix rows fall in distinct bank groups)."""
_WARPS = {4: (2, 2), 8: (2, 4), 16: (4, 4), 32: (4, 8)}
_GROUPS = {128: (1, 1), 256: (2, 1), 512: (2, 2), 1024: (2, 2)}
_WIDE_GROUPS = {256: (2, 1), 512: (2, 2)}
_SPECIALIZED_GROUPS = {False: {256: (1, 1), 384: (2, 1), 512: (2, 1)}, True: {384: (2, 1), 512: (2, 1)}}
"""Warpgroups that multiply in the specialized form, by tile (wide or not) and block size (the
other warpgroups fill the ring)."""
"""Warpgroup grids of the wgmma schedule by block size (each warpgroup 64 rows x 128 / gn); a
block of eight warpgroups runs the MMAs on four of them (all eight stage and exchange)."""
PRODUCER = 128
"""Threads of the warpgroup the `producer` form adds to the launch's block to fill the ring."""
_PRODUCER_GROUPS = {False: {128: (1, 1), 256: (2, 1), 512: (2, 2)},
                    True: {256: (2, 1), 512: (2, 2)}}
"""Warpgroup grids of the `producer` form by tile (wide or not) and the launch's own block size:
the launch's warps multiply, the added warpgroup fills the ring."""
PRODUCER_REGS = 40
"""Registers a thread of the added warpgroup keeps (`setmaxnreg.dec`); the multiplying
warpgroups take what it gives back (`setmaxnreg.inc`)."""



@dataclass(frozen=True, slots=True)
class Schedule:
    """The expert schedule for one kernel: a warps_m x warps_n grid of warps (mma.sync) or of
    warpgroups (wgmma) over the 128 x 128 tile, each owning mi x ni accumulator fragments
    (16 x 8 each for mma.sync, 64-row blocks of n8 column groups for wgmma); `stages` slots of
    32-deep slices; the exchange's row chunk and row pitch."""

    threads: int
    warps_m: int
    warps_n: int
    stages: int
    chunk: int
    ldx: int
    smem: int
    """Bytes of the ring (the exchange reuses them)."""
    wgmma: bool = False
    tn: int = TILE_N
    """The tile's columns (128, or 256 for the wide wgmma tile)."""
    bk: int = TILE_K
    """The slice depth (32, or 16 for more, shallower slots)."""
    overlap: bool = False
    """wgmma: one K step's warpgroup MMAs stay in flight while the next is issued (the ring then
    runs one slice ahead instead of stages - 1)."""
    deep: bool = False
    """The ring lives in dynamic shared memory (64-deep slices; the launch passes `launch_bytes`)."""
    specialize: bool = False
    """Deep wgmma: the warps past the MMA's warpgroups fill the ring, the MMA's warpgroups only
    multiply, each slot handed over by a pair of mbarriers (full, empty)."""
    producer: bool = False
    """Deep wgmma: the launch's block grows by one warpgroup (`PRODUCER` threads, the last ones)
    that only fills the ring, tile after tile; the launch's own warps only multiply and run the
    kernel's body; the exchange has shared memory of its own (`xbytes`, after the ring), so the
    ring fills with the next tile's slices while the body writes this one's."""
    xbytes: int = 0
    """Bytes of the exchange's own shared memory (producer form), else 0 (it reuses the ring)."""
    tma: bool = False
    """Producer form: one thread of the added warpgroup fills each slot with TMA copies (tensor
    maps the launch passes), where the maps were encoded; else the warpgroup's cp.async."""
    split: int = 1
    """Producer form: how many blocks of the launch's size the multiplying warps make (2: the
    launch's warpgroups doubled; each half runs the kernel's body for the user blocks of its
    half of the tile, `half_tile` rows x columns, its warpgroups holding exactly those)."""
    turns: bool = False
    """With `split`: the halves take turns at one exchange of whole user blocks (`chunk` is the
    block's rows), so a thread's fragments are written out before its own accumulators are
    filled; else each half has an exchange of its own, in row chunks."""
    virtual: bool = False
    """The kernel's body runs for the launch's threads as virtual threads: per `chunk` rows of
    the tile (whole rows of user blocks) the fragments go to the exchange once, then the
    multiplying threads share out (user block, virtual thread) pairs, each running the body
    with blockIdx / gridDim / blockDim / threadIdx those of the user's thread; any number of
    user threads, the body free of block barriers."""
    own_block: bool = False
    """With `virtual`: the launch runs the schedule's own block (`threads` x 1 x 1), the edited
    launches passing it instead of the user's."""
    cells: bool = False
    """Each multiplying thread runs the body once per cell of its fragments, for the user
    thread owning the cell (threadIdx that thread's), its accumulator read from the register
    (`passes.cuda.gemm_cells`: one cell per user thread); no exchange. With `virtual`, or in a
    deep form on the launch's block."""
    pingpong: bool = False
    """Producer form: each of the two multiplying warpgroups holds a whole 128 x 128 tile and
    they take the block's tiles in turn (warpgroup w the tiles w, w + 2, ... of the block), one
    writing its tile while the other multiplies; their main loops are ordered by a pair of named
    barriers (a warpgroup waits on its slots only once the other has waited on all of its own:
    an mbarrier's parity tells phases one apart only)."""
    staged: int = 0
    """With `cells` in the producer form: each warp's fragments go through a slab of shared
    memory of its own (after the ring, `xbytes`), `staged` columns at a time, and its lanes run
    the body for the slab's cells in row order (consecutive lanes, consecutive output columns);
    0: the body runs for the cells of the thread's own fragment registers."""

    @property
    def launch_bytes(self) -> int:
        """Dynamic shared memory the launch passes (deep form), else 0."""
        return self.smem + self.xbytes + ALIGN_SLACK if self.deep else 0

    @property
    def consumer_threads(self) -> int:
        """Threads that multiply and run the kernel's body (all but the producer warpgroup)."""
        return self.threads - PRODUCER if self.producer else self.threads

    @property
    def user_threads(self) -> int:
        """Threads of the block as the kernel's own launch sets it."""
        return self.consumer_threads // self.split

    @property
    def half_tile(self) -> tuple[int, int]:
        """Rows and columns of the tile a group of `user_threads` multiplying threads holds (the
        whole tile unless `split`): the warpgroups are numbered down the tile's rows first, so a
        half is the tile's left or right half where it has two warpgroup columns or more, else
        its upper or lower half."""
        if self.split == 1:
            return TILE_M, self.tn
        if self.warps_n % 2 == 0:
            return TILE_M, self.tn // 2
        return TILE_M // 2, self.tn

    @property
    def launch_regs(self) -> int:
        """Registers a thread of the block starts with: the most `__launch_bounds__(threads, 1)`
        allows (what ptxas gives a kernel that moves registers with `setmaxnreg`)."""
        return min(65536 // self.threads, 255) // 8 * 8

    @property
    def consumer_regs(self) -> int:
        """Registers a multiplying thread raises its budget to in the producer form: its own and
        what the added warpgroup gives back, shared by the launch's threads (multiples of 8, at
        most 240). No more than it starts with: no registers move."""
        given = (self.launch_regs - PRODUCER_REGS) * PRODUCER // self.consumer_threads // 8 * 8
        return min(240, self.launch_regs + given)

    @property
    def moves_registers(self) -> bool:
        """Whether the producer form moves registers (`setmaxnreg`) to the multiplying threads."""
        return self.producer and self.consumer_regs > self.launch_regs

    @property
    def active(self) -> int:
        """Warps that hold accumulator fragments (the MMA's; the rest only stage and exchange)."""
        if self.wgmma:
            return 4 * self.warps_m * self.warps_n * (2 if self.pingpong else 1)
        return self.threads // 32

    @property
    def ahead(self) -> int:
        """Slices in flight ahead of the one being multiplied."""
        return self.stages - 2 if self.overlap else self.stages - 1

    @property
    def row_step(self) -> int:
        """Rows between a thread's fragment rows i and i + 1."""
        return 64 if self.wgmma else 16

    @property
    def mi(self) -> int:
        return TILE_M // self.warps_m // self.row_step

    @property
    def ni(self) -> int:
        return self.tn // self.warps_n // 8


def _slice_elems(op: Operand, mn: int, wgmma: bool = False, bk: int = TILE_K) -> int:
    """Elements of one operand's `bk`-deep slice of a `mn`-wide tile (padded rows for mma.sync,
    swizzled unpadded rows for wgmma)."""
    if wgmma:
        return mn * bk
    return mn * (bk + PAD) if op.k_contiguous else bk * (mn + PAD)


def dynamic_limit(arch: str) -> int:
    """The dynamic shared memory a block of `arch` ("sm_90", "sm_80", ...) may opt in to."""
    return DYNAMIC_SHARED_LIMIT.get(arch.rstrip("a"), 99 * 1024)


def plan(g: GlobalGemm, kept_shared: int, wgmma: bool = False, wide: bool = False,
         bk: int = TILE_K, overlap: bool = False, deep: bool = False, stages: int = 0,
         arch: str = "sm_90", specialize: bool = False, producer: bool = False,
         tma: bool = False, consumers: int = 0, virtual: bool = False,
         pingpong: bool = False) -> Schedule | str:
    """The schedule for `g`, or why there is none. `kept_shared`: bytes of the user's shared
    arrays the rewritten body still uses; `wide`: 128x256 tiles (wgmma only); `bk`: the slice
    depth (16 or 32); `deep`: 64-deep slices in `stages` slots (0: four, or as many as fit) of
    the dynamic shared memory `arch` allows; `producer`: the block grows by a warpgroup that fills
    the ring; `consumers`: the warpgroups that multiply beside it (0: the launch's own);
    `virtual`: the body runs for virtual threads (`_virtual_plan`); `pingpong`: the producer
    form's two warpgroups take whole 128x128 tiles in turn."""
    if pingpong and consumers:
        return "warpgroups taking tiles in turn are two (no consumer warpgroups beside them)"
    if virtual:
        return _virtual_plan(g, kept_shared, wgmma, wide, bk, overlap, deep, stages, arch,
                             specialize, producer, tma, consumers, pingpong)
    if pingpong and not producer:
        return "warpgroups taking tiles in turn are a form of the producer warpgroup"
    if tma and not producer:
        return "TMA copies are a form of the producer warpgroup (option producer)"
    if consumers and not producer:
        return "consumer warpgroups beside the launch's are a form of the producer warpgroup"
    if producer:
        s = _producer_plan(g, kept_shared, wide, bk, deep, wgmma, specialize, stages, arch,
                           consumers, pingpong)
        return replace(s, tma=True) if tma and isinstance(s, Schedule) else s
    if bk not in (16, 32):
        return f"a slice depth of {bk} (16 or 32)"
    if specialize and not (deep and wgmma):
        return "specialized warps are a form of the deep wgmma schedule"
    if deep:
        if bk != TILE_K:
            return f"the deep form's slices are {DEEP_K} deep"
        if stages and not 3 <= stages <= 6:
            return f"{stages} slots in the deep form (3 to 6)"
        bk, overlap = DEEP_K, overlap or wgmma
    elif stages:
        return "a slot count is an option of the deep form"
    if wgmma and bk not in (TILE_K, DEEP_K):
        return f"the wgmma slices are {TILE_K} deep (64-byte swizzled rows)"
    if overlap and not wgmma:
        return "overlapping K steps is a wgmma schedule"
    t = g.tile
    threads = t.block[0] * t.block[1]
    tn = 2 * TILE_N if wide else TILE_N
    if wide and not wgmma:
        return "the 128x256 tile is a wgmma schedule"
    if TILE_M % t.bm or tn % t.bn or t.bn % 2:
        return f"the {t.bm}x{t.bn} block tile does not divide the {TILE_M}x{tn} tile"
    if specialize:
        groups = _SPECIALIZED_GROUPS[wide]
        if threads not in groups:
            return (f"the block of {threads} threads has no warpgroup to fill the ring beside "
                    f"those multiplying the {TILE_M}x{tn} tile (specialized: "
                    f"{', '.join(str(n) for n in groups)} threads)")
        wm, wn = groups[threads]
    elif wgmma:
        groups = _WIDE_GROUPS if wide else _GROUPS
        if threads not in groups:
            return (f"the block of {threads} threads is not "
                    f"{'2 or 4' if wide else '1, 2, 4 or 8'} warpgroups (wgmma, {TILE_M}x{tn} tile)")
        wm, wn = groups[threads]
    else:
        if threads % 32 or threads // 32 not in _WARPS:
            return f"the block of {threads} threads is not 4, 8, 16 or 32 warps"
        wm, wn = _WARPS[threads // 32]
    per_stage = 2 * (_slice_elems(g.a, TILE_M, wgmma, bk) + _slice_elems(g.b, tn, wgmma, bk))
    if deep:
        room = dynamic_limit(arch) - kept_shared - ALIGN_SLACK - (16 * 6 if specialize else 0)
        fit = room // per_stage
        if fit < max(3, stages):
            return (f"no room for {max(3, stages)} slices of the {TILE_M}x{tn}x{bk} tile in "
                    f"{dynamic_limit(arch) // 1024} KiB of {arch}'s dynamic shared memory")
        stages = stages or min(4, fit)
    else:
        room = STATIC_SHARED_LIMIT - kept_shared
        stages = min(8, room // per_stage)
    if stages < 2:
        return "no room for two slices of the 128x128x32 tile in 48 KiB of static shared memory"
    if overlap and stages < 3:
        return "overlapping K steps needs three slots (one in flight, one loading, one multiplied)"
    smem = stages * per_stage
    ldx = t.bn + 4
    chunk = t.bm
    while chunk > 1 and chunk * ldx * 4 > smem:
        chunk //= 2
    return Schedule(threads, wm, wn, stages, chunk, ldx, smem, wgmma, tn, bk, overlap, deep,
                    specialize)


def _virtual_plan(g: GlobalGemm, kept_shared: int, wgmma: bool, wide: bool, bk: int,
                  overlap: bool, deep: bool, stages: int, arch: str, specialize: bool,
                  producer: bool, tma: bool, consumers: int, pingpong: bool = False
                  ) -> Schedule | str:
    """The schedule where the kernel's body runs for virtual threads: in the deep forms (whose
    launches are edited) the block is the form's own (256 threads that multiply, 384 with
    specialized fillers; with a producer, `consumers` warpgroups (2 or 4) and the producer),
    else the launch's block as the form's tables take it; the exchange holds the largest number
    of whole user-block rows of the tile (a divisor of its 128 rows) that fits in the ring
    (static forms) or beside it (producer form)."""
    t = g.tile
    if deep:
        if consumers and not producer:
            return "consumer warpgroups beside the launch's are a form of the producer warpgroup"
        if consumers not in (0, 2, 4):
            return f"{consumers} consumer warpgroups (2 or 4 where the schedule has its own block)"
        own = 128 * (consumers or 2) if producer else (384 if specialize else 256)
    else:
        if consumers:
            return "consumer warpgroups are a form of the deep producer schedule"
        own = t.block[0] * t.block[1]
    mine = replace(g, tile=replace(t, block=(own, 1) if deep else t.block))
    s = plan(mine, kept_shared, wgmma, wide, bk, overlap, deep, stages, arch, specialize,
             producer, tma, 0, pingpong=pingpong)
    if isinstance(s, str):
        return s
    ldx = s.tn + 4
    rows = [r for r in (128, 64, 32, 16, 8, 4, 2, 1) if r % t.bm == 0 and TILE_M % r == 0]
    if not s.producer:
        fit = [r for r in rows if r * ldx * 4 <= s.smem]
        if not fit:
            return (f"no room for {t.bm} rows of the {TILE_M}x{s.tn} tile's fp32 products in the "
                    f"ring's {s.smem} bytes")
        return replace(s, chunk=fit[0], ldx=ldx, virtual=True, own_block=deep)
    per_stage = s.smem // s.stages
    room = dynamic_limit(arch) - kept_shared - ALIGN_SLACK - 16 * 6
    for n in (stages,) if stages else (4, 3):
        fit = [r for r in rows if r * ldx * 4 <= room - n * per_stage]
        if fit:
            return replace(s, stages=n, smem=n * per_stage, chunk=fit[0], ldx=ldx,
                           xbytes=fit[0] * ldx * 4, virtual=True, own_block=True)
    return (f"no room for {stages or 3} slices of the {TILE_M}x{s.tn}x{DEEP_K} tile and {t.bm} "
            f"rows of its fp32 products in {dynamic_limit(arch) // 1024} KiB of {arch}'s dynamic "
            "shared memory")


def _pingpong_plan(g: GlobalGemm, kept_shared: int, wide: bool, stages: int, arch: str
                   ) -> Schedule | str:
    """The producer form whose two multiplying warpgroups take 128x128 tiles in turn: the
    launch's block is those two (256 threads), each holding a whole tile (two 64-row blocks of
    m64n128 accumulators), and `stages` (0: four) 64-deep slots of the 128x128 tile."""
    t = g.tile
    threads = t.block[0] * t.block[1]
    if wide:
        return ("warpgroups taking tiles in turn each hold a whole 128x128 tile (the 128x256 "
                "tile's accumulators do not fit one warpgroup's registers)")
    if threads != 256:
        return (f"the block of {threads} threads is not two warpgroups (warpgroups taking "
                "tiles in turn)")
    grown = grown_block(t.block)
    if isinstance(grown, str):
        return grown
    per_stage = 2 * (_slice_elems(g.a, TILE_M, True, DEEP_K) + _slice_elems(g.b, TILE_N, True,
                                                                               DEEP_K))
    room = dynamic_limit(arch) - kept_shared - ALIGN_SLACK - 16 * 6
    n = stages or 4
    if n * per_stage > room:
        return (f"no room for {n} slices of the {TILE_M}x{TILE_N}x{DEEP_K} tile in "
                f"{dynamic_limit(arch) // 1024} KiB of {arch}'s dynamic shared memory")
    return Schedule(threads + PRODUCER, 1, 1, n, t.bm, t.bn + 4, n * per_stage, True, TILE_N,
                    DEEP_K, True, True, False, True, 0, pingpong=True)


def grown_block(block: tuple[int, int], added: int = PRODUCER) -> tuple[int, int] | str:
    """The launch's block `block` (x, y) with `added` threads after its own (the added
    warpgroups' linear thread ids follow the launch's), or why it cannot be grown so."""
    bx, by = block
    if by == 1:
        return (bx + added, 1)
    if added % bx:
        return (f"the {bx}x{by} block cannot grow by {added // 128} warpgroup"
                f"{'s' if added > 128 else ''} of whole rows ({bx} does not divide {added})")
    return (bx, by + added // bx)


def _producer_plan(g: GlobalGemm, kept_shared: int, wide: bool, bk: int, deep: bool, wgmma: bool,
                   specialize: bool, stages: int, arch: str, consumers: int = 0,
                   pingpong: bool = False) -> Schedule | str:
    """The producer form's schedule: the launch's warpgroups multiply (each 64 rows or 128 rows
    of the tile), or, with `consumers`, twice as many (the launch's block then runs twice at
    once, each on its half of the tile), an added warpgroup fills `stages` (0: four, else
    three) 64-deep slots, and the exchange (one per half) gets the largest row chunk that fits
    beside the ring."""
    if not (deep and wgmma):
        return "a producer warpgroup is a form of the deep wgmma schedule"
    if specialize:
        return "a producer warpgroup and specialized warps of the launch's block are two forms"
    if bk != TILE_K:
        return f"the deep form's slices are {DEEP_K} deep"
    if stages and not 3 <= stages <= 6:
        return f"{stages} slots in the deep form (3 to 6)"
    t = g.tile
    threads = t.block[0] * t.block[1]
    tn = 2 * TILE_N if wide else TILE_N
    if TILE_M % t.bm or tn % t.bn or t.bn % 2:
        return f"the {t.bm}x{t.bn} block tile does not divide the {TILE_M}x{tn} tile"
    if pingpong:
        return _pingpong_plan(g, kept_shared, wide, stages, arch)
    groups = _PRODUCER_GROUPS[wide]
    split = 1
    if consumers:
        if consumers * 128 != 2 * threads:
            return (f"{consumers} consumer warpgroups for a block of {threads} threads (twice "
                    "the launch's warpgroups: the launch's block runs twice at once)")
        if 2 * threads not in groups:
            return (f"{consumers} warpgroups do not split the {TILE_M}x{tn} tile "
                    f"({', '.join(str(n // 128) for n in groups)} warpgroups do)")
        split = 2
    if threads not in groups and split == 1:
        sizes = [str(n) for n in groups]
        return (f"the block of {threads} threads is not {', '.join(sizes[:-1])} or {sizes[-1]} "
                f"threads (the warpgroups multiplying the {TILE_M}x{tn} tile beside a producer)")
    grown = grown_block(t.block, (split - 1) * threads + PRODUCER)
    if isinstance(grown, str):
        return grown
    wm, wn = groups[split * threads]
    if split > 1:
        half = (TILE_M, tn // 2) if wn % 2 == 0 else (TILE_M // 2, tn)
        if half[0] % t.bm or half[1] % t.bn:
            return (f"the {t.bm}x{t.bn} block tile does not divide the {half[0]}x{half[1]} half "
                    f"of the tile {consumers} warpgroups split it into")
    per_stage = 2 * (_slice_elems(g.a, TILE_M, True, DEEP_K) + _slice_elems(g.b, tn, True, DEEP_K))
    ldx = t.bn + 4
    room = dynamic_limit(arch) - kept_shared - ALIGN_SLACK - 16 * 6
    slots = (stages,) if stages else (4, 3)
    for n in slots if split > 1 else ():
        # the halves in turn through one exchange of whole user blocks: a thread's fragments are
        # gone before its own accumulators are filled (the 512 multiplying threads' registers
        # hold one set at a time)
        if t.bm * ldx * 4 <= room - n * per_stage:
            return Schedule(split * threads + PRODUCER, wm, wn, n, t.bm, ldx, n * per_stage,
                            True, tn, DEEP_K, True, True, False, True, t.bm * ldx * 4,
                            split=split, turns=True)
    for n in slots:
        chunk = t.bm
        while chunk > 1 and split * chunk * ldx * 4 > room - n * per_stage:
            chunk //= 2
        if split * chunk * ldx * 4 <= room - n * per_stage and chunk >= min(t.bm, 16):
            return Schedule(split * threads + PRODUCER, wm, wn, n, chunk, ldx, n * per_stage,
                            True, tn, DEEP_K, True, True, False, True, split * chunk * ldx * 4,
                            split=split)
    exchanges = "two exchanges" if split > 1 else "an exchange"
    return (f"no room for {stages or 3} slices of the {TILE_M}x{tn}x{DEEP_K} tile and "
            f"{exchanges} of 16 rows in {dynamic_limit(arch) // 1024} KiB of {arch}'s dynamic "
            "shared memory")


# ---------------------------------------------------------------------------------------------
# the emitted body


def _mode(op: Operand, rows: bool, bk: int = TILE_K) -> tuple[int, int, int]:
    """(ldmatrix mode, stride 1, stride 2) of the kl_tc fragment readers for one operand's
    slice: A (r, k) strides (SR, SK); B (k, n) strides (SK, SN)."""
    mn = TILE_M if rows else TILE_N
    if op.k_contiguous:
        pitch = bk + PAD
        return (2, pitch, 1) if rows else (2, 1, pitch)
    pitch = mn + PAD
    return (3, 1, pitch) if rows else (3, pitch, 1)


def _tid(t: GemmTile) -> str:
    if t.block[1] == 1:
        return "(int)threadIdx.x"
    return f"((int)threadIdx.x + {t.block[0]} * (int)threadIdx.y)"


def _loads(g: GlobalGemm, s: Schedule, threads: int = 0, tid: str = "") -> Any:
    """`load(slot, kt)`: the C statement staging K slice `kt` into ring slot `slot`, by the
    block's threads (or by `threads` of them numbered by `tid`)."""
    p = PREFIX
    nt, tid = threads or s.threads, tid or f"{p}tid"
    a_el, b_el = (_slice_elems(g.a, TILE_M, s.wgmma, s.bk), _slice_elems(g.b, s.tn, s.wgmma, s.bk))

    def one(op: Operand, mn: int, ring: str, elems: int, glob: str, ld: str, mn0: str,
            bound: str, vec: str, slot: str, kt: str) -> str:
        kc = "true" if op.k_contiguous else "false"
        pitch = s.bk + PAD if op.k_contiguous else mn + PAD
        sw = 0 if not s.wgmma else (1 if op.k_contiguous else 2)
        if sw and s.bk == DEEP_K:  # 128-byte rows: the 128-byte swizzle, unrolled copies
            return (f"kl_gs_load_{'k' if sw == 1 else 'mn'}128<{mn}, {nt}>({p}{ring} + "
                    f"({slot}) * {elems}, {p}{glob}, {p}{ld}, {p}{mn0}, ({kt}) * {s.bk}, "
                    f"{p}{bound}, {p}K, {p}{vec}, {tid});")
        return (f"kl_gs_load<{kc}, {mn}, {s.bk}, {pitch}, {nt}, {sw}>({p}{ring} + ({slot}) * "
                f"{elems}, {p}{glob}, {p}{ld}, {p}{mn0}, ({kt}) * {s.bk}, {p}{bound}, {p}K, "
                f"{p}{vec}, {tid});")

    def load(slot: str, kt: str) -> str:
        return (one(g.a, TILE_M, "sa", a_el, "ga", "lda", "m0", "M", "veca", slot, kt) + " " +
                one(g.b, s.tn, "sb", b_el, "gb", "ldb", "n0", "N", "vecb", slot, kt))
    return load


def main_loop(g: GlobalGemm, s: Schedule, pad: str) -> list[str]:
    """The tile's K loop: a cp.async ring, then ldmatrix + mma.sync (or wgmma) into
    `kl_gs_acc`. In the deep wgmma form a step's MMAs are issued before its slice is requested
    (the tensor cores work while the threads issue the copies)."""
    if s.specialize:
        return _specialized_loop(g, s, pad)
    if s.producer:
        return _consumer_loop(g, s, pad)
    p = PREFIX
    load = _loads(g, s)
    a_el, b_el = (_slice_elems(g.a, TILE_M, s.wgmma, s.bk), _slice_elems(g.b, s.tn, s.wgmma, s.bk))
    i = pad
    head = [
        *_zeroed(s, i),
        f"{i}for (int {p}s = 0; {p}s < {s.ahead}; ++{p}s) {{",
        f"{i}  if ({p}s < {p}kt) {{ {load(f'{p}s', f'{p}s')} }}",
        f"{i}  kl_gs_commit();",
        f"{i}}}",
        f"{i}#pragma unroll 1",
        f"{i}for (int {p}k = 0; {p}k < {p}kt; ++{p}k) {{",
        f"{i}  kl_gs_wait<{s.ahead - 1}>();",
        *([f'{i}  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");'] if s.wgmma else []),
        f"{i}  __syncthreads();",
    ]
    refill = [
        f"{i}  {{",
        f"{i}    const int {p}next = {p}k + {s.ahead};",
        f"{i}    if ({p}next < {p}kt) {{ {load(f'{p}next % {s.stages}', f'{p}next')} }}",
        f"{i}    kl_gs_commit();",
        f"{i}  }}",
    ]
    slot = [f"{i}  const unsigned short* {p}ta = {p}sa + ({p}k % {s.stages}) * {a_el};",
            f"{i}  const unsigned short* {p}tb = {p}sb + ({p}k % {s.stages}) * {b_el};"]
    tail = [f"{i}}}",
            *([f'{i}asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");']
              if s.overlap else []),
            f"{i}kl_gs_wait<0>();", f"{i}__syncthreads();"]
    if s.wgmma and s.deep:  # the slot refilled held step k - 2's slice, whose MMAs are done
        wait = f'{i}  asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");'
        return head + slot + _wgmma_step(g, s, i + "  ", wait=False) + refill + [wait] + tail
    return head + refill + slot + (_wgmma_step(g, s, i + "  ") if s.wgmma
                                   else _mma_step(g, s, i + "  ")) + tail


def _specialized_loop(g: GlobalGemm, s: Schedule, pad: str) -> list[str]:
    """The tile's K loop with specialized warps: the fillers copy slice k into slot
    (fill + k) % stages once the MMA's warpgroups released it (`kl_gs_bar[stages + slot]`) and
    mark it full (`kl_gs_bar[slot]`) once their copies landed, `stages - 2` slices behind the
    newest; the MMA's warpgroups wait for a slot to be full, issue its MMAs, and release the
    slot of the step before once those are done (one step in flight). `kl_gs_fill` counts the
    slices the block's ring has taken (the barriers' phases)."""
    p, n = PREFIX, s.stages
    lag = n - 2
    fillers = s.threads - 32 * s.active
    load = _loads(g, s, fillers, f"{p}ftid")
    a_el, b_el = (_slice_elems(g.a, TILE_M, True, s.bk), _slice_elems(g.b, s.tn, True, s.bk))
    fence = 'asm volatile("fence.proxy.async.shared::cta;" ::: "memory");'
    i, i1, i2 = pad, pad + "  ", pad + "    "
    return [
        *_zeroed(s, i),
        f"{i}if ({p}warp >= {s.active}) {{  // the fillers",
        f"{i1}const int {p}ftid = {p}tid - {32 * s.active};",
        f"{i1}#pragma unroll 1",
        f"{i1}for (int {p}k = 0; {p}k < {p}kt; ++{p}k) {{",
        f"{i2}const int {p}f = {p}fill + {p}k, {p}slot = {p}f % {n};",
        f"{i2}if ({p}f >= {n}) kl_gs_bar_wait({p}bar + {n} + {p}slot, ({p}f / {n} - 1) & 1);",
        f"{i2}{load(f'{p}slot', f'{p}k')}",
        f"{i2}kl_gs_commit();",
        f"{i2}if ({p}k >= {lag}) {{",
        f"{i2}  kl_gs_wait<{lag}>();",
        f"{i2}  {fence}",
        f"{i2}  kl_gs_bar_arrive({p}bar + ({p}f - {lag}) % {n});",
        f"{i2}}}",
        f"{i1}}}",
        f"{i1}kl_gs_wait<0>();",
        f"{i1}{fence}",
        f"{i1}for (int {p}k = max({p}kt - {lag}, 0); {p}k < {p}kt; ++{p}k) "
        f"kl_gs_bar_arrive({p}bar + ({p}fill + {p}k) % {n});",
        f"{i}}} else {{  // the MMA's warpgroups",
        f"{i1}#pragma unroll 1",
        f"{i1}for (int {p}k = 0; {p}k < {p}kt; ++{p}k) {{",
        f"{i2}const int {p}f = {p}fill + {p}k, {p}slot = {p}f % {n};",
        f"{i2}kl_gs_bar_wait({p}bar + {p}slot, ({p}f / {n}) & 1);",
        f"{i2}const unsigned short* {p}ta = {p}sa + {p}slot * {a_el};",
        f"{i2}const unsigned short* {p}tb = {p}sb + {p}slot * {b_el};",
        *_wgmma_issue(g, s, i2, wait=False),
        f'{i2}asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");',
        f"{i2}if ({p}k > 0) kl_gs_bar_arrive({p}bar + {n} + ({p}f - 1) % {n});",
        f"{i1}}}",
        f'{i1}asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");',
        f"{i1}if ({p}kt > 0) kl_gs_bar_arrive({p}bar + {n} + ({p}fill + {p}kt - 1) % {n});",
        f"{i}}}",
        f"{i}{p}fill += {p}kt;",
        f"{i}__syncthreads();",
    ]


def _producer_loop(g: GlobalGemm, s: Schedule, pad: str) -> list[str]:
    """The added warpgroup's whole work (producer form): it lowers its register budget, then,
    for each of the block's tiles in the order the MMA's warpgroups take them, copies slice k
    into slot (fill + k) % stages once that slot was released (`kl_gs_bar[stages + slot]`, by
    one arrival per multiplying warp) and has the slot's full barrier (`kl_gs_bar[slot]`) arrive
    when its copies land (`cp.async.mbarrier.arrive`: it never waits for its own copies; where an
    operand is copied element by element, it waits for its copies and arrives itself). It runs
    ahead into the next tile while the others write this one. It leaves the kernel at the end.
    TMA form, where the launch's maps were encoded: its first thread alone does this, each slot
    filled by `_tma_copies` (the full barrier then counts one arrival); the others leave."""
    p, n = PREFIX, s.stages
    load = _loads(g, s, PRODUCER, f"{p}ftid")
    i, i1, i2, i3 = pad, pad + "  ", pad + "    ", pad + "      "
    return [
        f"{i}if ({p}warp >= {s.active}) {{  // the added warpgroup: fills the ring",
        *([f'{i1}asm volatile("setmaxnreg.dec.sync.aligned.u32 {PRODUCER_REGS};");']
          if s.moves_registers else []),
        f"{i1}const int {p}ftid = {p}tid - {32 * s.active};",
        *([f"{i1}if ({p}tma.ok && {p}ftid != 0) return;  // TMA: one thread issues the copies"]
          if s.tma else []),
        f"{i1}#pragma unroll 1",
        f"{i1}for (int {p}t = {_first_tile(g)}; {p}t < {p}tiles_m * {p}tiles_n; {p}t += {p}blocks) {{",
        *_tile_origin(s, i2),
        f"{i2}const int {p}kt = ({p}K + {s.bk - 1}) / {s.bk};",
        f"{i2}#pragma unroll 1",
        f"{i2}for (int {p}k = 0; {p}k < {p}kt; ++{p}k) {{",
        f"{i3}const int {p}f = {p}fill + {p}k, {p}slot = {p}f % {n};",
        f"{i3}if ({p}f >= {n}) kl_gs_bar_wait({p}bar + {n} + {p}slot, ({p}f / {n} - 1) & 1);",
        *(_tma_copies(g, s, i3) if s.tma else []),
        f"{i3}{load(f'{p}slot', f'{p}k')}",
        f"{i3}if ({p}veca && {p}vecb) {{",
        f"{i3}  kl_gs_cp_arrive({p}bar + {p}slot);",
        f"{i3}}} else {{  // element copies: their stores are done before the arrival",
        f"{i3}  kl_gs_commit();",
        f"{i3}  kl_gs_wait<0>();",
        f"{i3}  kl_gs_bar_arrive({p}bar + {p}slot);",
        f"{i3}}}",
        f"{i2}}}",
        f"{i2}{p}fill += {p}kt;",
        f"{i1}}}",
        f"{i1}kl_gs_commit();",
        f"{i1}kl_gs_wait<0>();",
        f"{i1}return;",
        f"{i}}}",
        *([f'{i}asm volatile("setmaxnreg.inc.sync.aligned.u32 {s.consumer_regs};");']
          if s.moves_registers else []),
    ]


def _tma_copies(g: GlobalGemm, s: Schedule, i: str) -> list[str]:
    """The TMA form's copies of slice `kl_gs_k` into slot `kl_gs_slot` (one thread): the slot's
    full barrier expects the slice's bytes (boxes past M, N or K are zero-filled and count in
    full), then one box per operand (K-major: 64 k x the tile's rows) or per 64 columns of it
    (MN-major: 64 mn x 64 k, one 128-byte swizzled atom each)."""
    p = PREFIX
    a_el, b_el = (_slice_elems(g.a, TILE_M, True, s.bk), _slice_elems(g.b, s.tn, True, s.bk))

    def boxes(op: Operand, mn: int, ring: str, elems: int, mp: str, mn0: str) -> list[str]:
        dst = f"{p}{ring} + {p}slot * {elems}"
        if op.k_contiguous:
            return [f"kl_gs_tma_load({dst}, &{p}tma.{mp}, {p}bar + {p}slot, {p}k * {s.bk}, {p}{mn0});"]
        return [f"kl_gs_tma_load({dst} + {j * 64 * s.bk}, &{p}tma.{mp}, {p}bar + {p}slot, "
                f"{p}{mn0} + {64 * j}, {p}k * {s.bk});" for j in range(mn // 64)]
    copies = boxes(g.a, TILE_M, "sa", a_el, "a", "m0") + boxes(g.b, s.tn, "sb", b_el, "b", "n0")
    return [f"{i}if ({p}tma.ok) {{",
            f"{i}  kl_gs_bar_expect({p}bar + {p}slot, {2 * (a_el + b_el)}u);",
            *[f"{i}  {c}" for c in copies],
            f"{i}  continue;",
            f"{i}}}"]


def tma_maps(g: GlobalGemm, s: Schedule) -> list[list[Any]] | str:
    """The TMA form's two tensor maps (A, B), each `[pointer, ld, inner, outer, box]` in the
    kernel's parameters (a row-major outer x inner operand, boxes of 64 inner x `box` outer
    elements), or why an operand cannot be described so."""
    out = []
    for name, op, k_box in (("A", g.a, TILE_M), ("B", g.b, s.tn)):
        if op.batch:
            return (f"{name} is one of a batch along blockIdx.z (a tensor map holds one "
                    "matrix)")
        if any(not re.fullmatch(r"\w*", n) or n in g.fixed for n in (op.ld, op.bound, g.k)):
            return (f"{name}'s extents are not parameters (a struct's fields, integers read "
                    "from memory, template values: the host builds the maps from parameters)")
        if not op.bound:
            return (f"the staging of {name} checks no bound on its {'rows' if name == 'A' else 'columns'}"
                    " (a tensor map needs the operand's extent)")
        if re.fullmatch(r"\d+", op.ld) and int(op.ld) * 2 % 16:
            return f"{name}'s leading dimension {op.ld} is not a multiple of 16 bytes (TMA)"
        if op.k_contiguous:
            out.append([op.ptr, op.ld, g.k, op.bound, k_box])
        else:
            out.append([op.ptr, op.ld, op.bound, g.k, 64])
    return out


def tma_argument(ir: KernelIR, g: GlobalGemm, s: Schedule) -> Any:
    """`extra` for `launch_edits`: the launch's argument building both tensor maps on the host
    (`kl_gs_tma_maps`) from the launch's own arguments for the kernel's parameters."""
    from passes.cuda.recognize import _parameter_names  # noqa: PLC0415

    names = _parameter_names(ir, Scope(ir).functions[g.kernel])
    maps = tma_maps(g, s)

    def extra(args: list[str]) -> str:
        if isinstance(maps, str):
            return "!" + maps
        if len(args) != len(names):
            return (f"!a launch of {g.kernel} passes {len(args)} arguments for its "
                    f"{len(names)} parameters")
        bound = dict(zip(names, args))
        if any(re.search(r"\+\+|--|(?<![=!<>])=(?!=)", bound.get(n, ""))
               for m in maps for n in m[:4]):
            return (f"!a launch of {g.kernel} passes an argument with a side effect (the tensor "
                    "maps would evaluate it again)")

        def arg(n: str) -> str:
            return f"({bound[n]})" if n in bound else n
        half = "true" if g.dtype == "fp16" else "false"
        parts = [half]
        for ptr, ld, inner, outer, box in maps:
            parts += [f"(const void*){arg(ptr)}", f"(long long){arg(ld)}",
                      f"(long long){arg(inner)}", f"(long long){arg(outer)}", f"{box}u"]
        return f"{PREFIX}tma_maps({', '.join(parts)})"
    return extra


def _consumer_loop(g: GlobalGemm, s: Schedule, pad: str) -> list[str]:
    """The tile's K loop of the multiplying warpgroups (producer form): wait for slot
    (fill + k) % stages to be full, make the copies visible to the tensor cores' reads
    (`fence.proxy.async`; not where the TMA filled it: its copies and the tensor cores' reads are
    both of the async proxy, ordered by the mbarrier), issue its MMAs, and once the step before
    is done, release that step's slot (one arrival per warp, by its first lane); one step in
    flight."""
    p, n = PREFIX, s.stages
    fence = 'asm volatile("fence.proxy.async.shared::cta;" ::: "memory");'

    a_el, b_el = (_slice_elems(g.a, TILE_M, True, s.bk), _slice_elems(g.b, s.tn, True, s.bk))
    i, i1 = pad, pad + "  "
    release = f"{{ __syncwarp(); if ({p}lane == 0) kl_gs_bar_arrive({p}bar + {n} + "
    # ping-pong: a warpgroup's turn comes once the other has waited on all of its tile's slots
    # (named barriers 2 and 3, one a warpgroup: the other arrives, this one waits)
    turn = ([f"{i}if ({p}t != {_first_tile(g)}) "
             f'asm volatile("bar.sync %0, 256;" :: "r"(2 + {p}wg) : "memory");'] if s.pingpong
            else [])
    handed = ([f'{i}asm volatile("bar.arrive %0, 256;" :: "r"(3 - {p}wg) : "memory");']
              if s.pingpong else [])
    return [
        *_zeroed(s, i),
        *turn,
        f"{i}#pragma unroll 1",
        f"{i}for (int {p}k = 0; {p}k < {p}kt; ++{p}k) {{",
        f"{i1}const int {p}f = {p}fill + {p}k, {p}slot = {p}f % {n};",
        f"{i1}kl_gs_bar_wait({p}bar + {p}slot, ({p}f / {n}) & 1);",
        f"{i1}{f'if (!{p}tma.ok) ' if s.tma else ''}{fence}",
        f"{i1}const unsigned short* {p}ta = {p}sa + {p}slot * {a_el};",
        f"{i1}const unsigned short* {p}tb = {p}sb + {p}slot * {b_el};",
        *_wgmma_issue(g, s, i1, wait=False),
        f'{i1}asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");',
        f"{i1}if ({p}k > 0) {release}({p}f - 1) % {n}); }}",
        f"{i}}}",
        *handed,
        f'{i}asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");',
        f"{i}if ({p}kt > 0) {release}({p}fill + {p}kt - 1) % {n}); }}",
        f"{i}{p}fill += {'2 * ' if s.pingpong else ''}{p}kt;  "
        f"{'// (the other warpgroup takes the next tile)' if s.pingpong else ''}".rstrip(),
    ]


def _zeroed(s: Schedule, i: str) -> list[str]:
    """The accumulators set to zero and `kl_gs_kt`, the tile's K steps."""
    p = PREFIX
    return [f"{i}#pragma unroll",
            f"{i}for (int {p}i = 0; {p}i < {s.mi}; ++{p}i)",
            f"{i}  for (int {p}j = 0; {p}j < {s.ni}; ++{p}j)",
            f"{i}    for (int {p}h = 0; {p}h < 4; ++{p}h) {p}acc[{p}i][{p}j][{p}h] = 0.0f;",
            f"{i}const int {p}kt = ({p}K + {s.bk - 1}) / {s.bk};"]


def _first_tile(g: GlobalGemm) -> str:
    """The block's first tile: blocks counted over the grid, or over its plane where blockIdx.z
    is a batch (each plane's blocks loop over that GEMM's tiles)."""
    if _batched(g):
        return "(int)(blockIdx.x + gridDim.x * blockIdx.y)"
    return "(int)(blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z))"


def _blocks(g: GlobalGemm) -> str:
    """The blocks that loop over one GEMM's tiles (the grid's, or one plane's of a batch)."""
    return "(int)(gridDim.x * gridDim.y)" if _batched(g) else \
        "(int)(gridDim.x * gridDim.y * gridDim.z)"


def _batched(g: GlobalGemm) -> bool:
    return bool(g.a.batch or g.b.batch)


def _operand_base(op: Operand) -> str:
    """The operand's pointer for this block's GEMM (moved by blockIdx.z times its batch stride)."""
    if not op.batch:
        return op.ptr
    return f"{op.ptr} + (size_t)blockIdx.z * " + " * ".join(f"(size_t)({n})" for n in op.batch)


def _tile_origin(s: Schedule, pad: str) -> list[str]:
    """`kl_gs_tm` / `kl_gs_tn` / `kl_gs_m0` / `kl_gs_n0`: tile `kl_gs_t`'s place, in a grouped
    order (8 tile rows at a time, so that they share the B slices in L2)."""
    p, i2 = PREFIX, pad
    return [
        f"{i2}// grouped order: 8 tile rows at a time share the B slices in L2",
        f"{i2}const int {p}group = {p}t / (8 * {p}tiles_n), {p}first = {p}group * 8;",
        f"{i2}const int {p}rows = min({p}tiles_m - {p}first, 8);",
        f"{i2}const int {p}tm = {p}first + ({p}t % (8 * {p}tiles_n)) % {p}rows;",
        f"{i2}const int {p}tn = ({p}t % (8 * {p}tiles_n)) / {p}rows;",
        f"{i2}const int {p}m0 = {p}tm * {TILE_M}, {p}n0 = {p}tn * {s.tn};",
    ]


def _barriers(g: GlobalGemm, s: Schedule, pad: str) -> list[str]:
    """The specialized and producer forms' slot barriers (full, then empty, per slot), set up
    once: a slot is full once each filling thread arrived, and empty once each multiplying
    thread (specialized) or warp (producer) did."""
    if not (s.specialize or s.producer):
        return []
    p, n = PREFIX, s.stages
    empty = (4 if s.pingpong else s.active) if s.producer else 32 * s.active
    # (producer form: a block past the tile count leaves at once, before any barrier)
    leave = [f"{pad}if ({_first_tile(g)} >= (({p}M + {TILE_M - 1}) / {TILE_M}) * "
             f"(({p}N + {s.tn - 1}) / {s.tn})) return;"] if s.producer else []
    return [*leave,
            f"{pad}__shared__ __align__(8) unsigned long long {p}bar[{2 * n}];",
            f"{pad}if ({p}tid == 0) {{",
            f"{pad}  for (int {p}s = 0; {p}s < {n}; ++{p}s) {{",
            f"{pad}    kl_gs_bar_init({p}bar + {p}s, "
            f"{f'{p}tma.ok ? 1 : ' if s.tma else ''}{s.threads - 32 * s.active});",
            f"{pad}    kl_gs_bar_init({p}bar + {n} + {p}s, {empty});",
            f"{pad}  }}",
            f"{pad}}}",
            f"{pad}__syncthreads();",
            f"{pad}int {p}fill = 0;"]


def _mma_step(g: GlobalGemm, s: Schedule, i: str) -> list[str]:
    p = PREFIX
    bf16 = "true" if g.dtype == "bf16" else "false"
    ma, sa1, sa2 = _mode(g.a, True, s.bk)
    mb, sb1, sb2 = _mode(g.b, False, s.bk)
    return [
        "#pragma unroll",
        f"{i}for (int {p}kk = 0; {p}kk < {s.bk}; {p}kk += 16) {{",
        f"{i}  unsigned {p}fa[{s.mi}][4], {p}fb[{s.ni}][2];",
        "#pragma unroll",
        f"{i}  for (int {p}i = 0; {p}i < {s.mi}; ++{p}i)",
        f"{i}    kl_tc_frag_a<{bf16}, 16, {ma}, {sa1}, {sa2}>({p}fa[{p}i], {p}ta, {p}lane, "
        f"{p}wm + 16 * {p}i, {p}kk);",
        "#pragma unroll",
        f"{i}  for (int {p}j = 0; {p}j < {s.ni}; {p}j += 2)",
        f"{i}    kl_tc_frag_b2<{bf16}, 16, {mb}, {sb1}, {sb2}>({p}fb[{p}j], {p}fb[{p}j + 1], {p}tb, "
        f"{p}lane, {p}kk, {p}wn + 8 * {p}j);",
        "#pragma unroll",
        f"{i}  for (int {p}i = 0; {p}i < {s.mi}; ++{p}i)",
        "#pragma unroll",
        f"{i}    for (int {p}j = 0; {p}j < {s.ni}; ++{p}j)",
        f"{i}      kl_tc_mma<{bf16}, 16>({p}acc[{p}i][{p}j], {p}fa[{p}i], {p}fb[{p}j]);",
        f"{i}}}",
    ]


def _descriptor(op: Operand, rows: bool, base: str, kk: str, bk: int) -> str:
    """The descriptor of one operand's 64-row (A) or wgmma-N-column (B) block at `base` (its
    first mn, a multiple of 64 for MN-major slices) and k offset `kk` of the slot."""
    p = PREFIX
    ring = "ta" if rows else "tb"
    if op.k_contiguous:  # rows of bk k (64 / 128 bytes, so swizzled), 8-row groups apart
        mode = 1 if bk == DEEP_K else 2
        return f"kl_gs_desc({p}{ring} + ({base}) * {bk} + {kk}, 16, {8 * bk * 2}, {mode})"
    # atoms of 64 mn x bk k rows (128-byte swizzle), 8 k rows = 1024 bytes
    return f"kl_gs_desc({p}{ring} + ({base}) * {bk} + {kk} * 64, {64 * bk * 2}, 1024, 1)"


def _wgmma_step(g: GlobalGemm, s: Schedule, i: str, wait: bool = True) -> list[str]:
    """One K step's warpgroup MMAs, committed, then (`wait`) waited for down to the groups the
    schedule keeps in flight."""
    if s.active < s.threads // 32:  # the warpgroups past the MMA's only stage and exchange
        return [f"{i}if ({PREFIX}warp < {s.active}) {{",
                *_wgmma_issue(g, s, i + "  ", wait), f"{i}}}"]
    return _wgmma_issue(g, s, i, wait)


def _wgmma_issue(g: GlobalGemm, s: Schedule, i: str, wait: bool = True) -> list[str]:
    p = PREFIX
    n = s.tn // s.warps_n
    ptx = "bf16" if g.dtype == "bf16" else "f16"
    regs = ", ".join(f"%{r}" for r in range(n // 2))
    outs = ", ".join(f'"+f"({p}acc[{p}i][{j}][{r}])' for j in range(n // 8) for r in range(4))
    ta, tb = (0 if g.a.k_contiguous else 1), (0 if g.b.k_contiguous else 1)
    return [
        f'{i}asm volatile("wgmma.fence.sync.aligned;" ::: "memory");',
        "#pragma unroll",
        f"{i}for (int {p}i = 0; {p}i < {s.mi}; ++{p}i) {{",
        "#pragma unroll",
        f"{i}  for (int {p}kk = 0; {p}kk < {s.bk}; {p}kk += 16) {{",
        f"{i}    const unsigned long long da = {_descriptor(g.a, True, f'{p}gm0 + 64 * {p}i', f'{p}kk', s.bk)};",
        f"{i}    const unsigned long long db = {_descriptor(g.b, False, f'{p}gn0', f'{p}kk', s.bk)};",
        f'{i}    asm volatile("wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ptx}.{ptx} '
        f'{{{regs}}}, %{n // 2}, %{n // 2 + 1}, 1, 1, 1, {ta}, {tb};"',
        f"{i}                 : {outs}",
        f'{i}                 : "l"(da), "l"(db));',
        f"{i}  }}",
        f"{i}}}",
        f'{i}asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");',
        *([f'{i}asm volatile("wgmma.wait_group.sync.aligned {1 if s.overlap else 0};" ::: '
           '"memory");'] if wait else []),
    ]


def exchange(g: GlobalGemm, s: Schedule, pad: str) -> str:
    """The fragments of the user block at (`kl_gs_sm`, `kl_gs_sn`) of the tile into the thread's
    own accumulators, in row chunks through the ring's shared memory (added: `+=`). Where the
    halves of the multiplying threads take turns (`Schedule.turns`), each thread passes four
    barriers of all of them: the first half writes and reads between the first and the second,
    the second half between the third and the fourth."""
    p, t = PREFIX, g.tile
    guard = f" && {p}warp < {s.active}" if s.active < s.consumer_threads // 32 else ""
    c = s.chunk
    i1, i2, i3 = pad + "  ", pad + "    ", pad + "      "
    # the producer form: the exchange's own memory after the ring, a barrier of the launch's
    # threads only (the added warpgroup is filling the ring meanwhile)
    sync = (f'asm volatile("bar.sync 1, {s.user_threads};" ::: "memory");' if s.producer
            else "__syncthreads();")
    x = f"{p}smem + {s.smem}" if s.producer else f"{p}smem"
    if s.split > 1 and not s.turns:  # each half: a barrier and an exchange of its own
        sync = (f'asm volatile("bar.sync %0, {s.user_threads};" :: "r"(1 + {p}half) : '
                '"memory");')
        x = f"{p}smem + {s.smem} + {p}half * {s.xbytes // s.split}"
    elif s.turns:  # one exchange, the first half's turn, then the second's
        sync = f'asm volatile("bar.sync 1, {s.consumer_threads};" ::: "memory");'
    first, last = [], [f"{i1}{sync}"]
    if s.turns:
        first = [f"{i2}if ({p}half) {{ {sync} {sync} }}  // the first half's turn"]
        last = [f"{i1}if (!{p}half) {{ {sync} {sync} }}  // the second half's turn"]
    lines = [f"{{  {MARK}the tile's fragments into this thread's accumulators",
             f"{i1}float* {p}x = reinterpret_cast<float*>({x});",
             f"{i1}const int {p}row = {bit_sum_text(t.row)}, {p}col = {bit_sum_text(t.col)};",
             f"{i1}#pragma unroll 1",
             f"{i1}for (int {p}c0 = 0; {p}c0 < {t.bm}; {p}c0 += {c}) {{",
             *first,
             f"{i2}{sync}",
             f"{i2}#pragma unroll",
             f"{i2}for (int {p}i = 0; {p}i < {s.mi}; ++{p}i)",
             f"{i2}#pragma unroll",
             f"{i2}  for (int {p}j = 0; {p}j < {s.ni}; ++{p}j)",
             f"{i2}#pragma unroll",
             f"{i2}    for (int {p}h = 0; {p}h < 2; ++{p}h) {{",
             f"{i3}  const int r = {p}wm + {s.row_step} * {p}i + {p}lane / 4 + 8 * {p}h - {p}sm - {p}c0;",
             f"{i3}  const int q = {p}wn + 8 * {p}j + 2 * ({p}lane % 4) - {p}sn;",
             f"{i3}  if ((unsigned)r < {c}u && (unsigned)q < {t.bn}u{guard}) {{",
             f"{i3}    {p}x[r * {s.ldx} + q] = {p}acc[{p}i][{p}j][2 * {p}h];",
             f"{i3}    {p}x[r * {s.ldx} + q + 1] = {p}acc[{p}i][{p}j][2 * {p}h + 1];",
             f"{i3}  }}",
             f"{i2}    }}",
             f"{i2}{sync}"]
    by_row: dict[int, list] = {}
    for e in t.elements:
        by_row.setdefault(e.dm, []).append(e)
    for dm, group in sorted(by_row.items()):
        r = f"{p}row + {dm} - {p}c0" if dm else f"{p}row - {p}c0"
        lines.append(f"{i2}if ((unsigned)({r}) < {c}u) {{")
        lines.append(f"{i3}const float* x = {p}x + ({r}) * {s.ldx} + {p}col;")
        lines += [f"{i3}{e.lvalue} += x[{e.dn}];" for e in group]
        lines.append(f"{i2}}}")
    lines += [f"{i1}}}", *last, f"{pad}}}"]
    return "\n".join(lines)


_BUILTIN = re.compile(r"\b(blockIdx|gridDim)\b")
_BUILTIN_DIM = re.compile(r"\b(blockIdx|gridDim|blockDim)\b")
_BUILTIN_HALF = re.compile(r"\b(blockIdx|gridDim|blockDim|threadIdx)\b")
_PURE_CALL = re.compile(r"^(?:min|max|static_cast|reinterpret_cast|__float2bfloat16(?:_rn)?|"
                        r"__float2half(?:_rn)?|__bfloat162float|__half2float|float|int|"
                        r"unsigned|make_float2|make_float4)$")
_EFFECT = re.compile(r"\+\+|--|(?:[-+*/%&|^]|<<|>>)=")


def user_body(ir: KernelIR, g: GlobalGemm, s: Schedule, fn: Function,
              removed: list[tuple[int, int]]) -> str:
    """The user's body (inside its braces) with the K loop replaced by the exchange (the
    virtual form: by the reads of its products, `_products`), the dead declarations
    (`removed`, character spans of whole lines) cut and blockIdx / gridDim replaced by the
    virtual block's (and, in the producer form, blockDim; where the launch's block runs twice
    at once or its threads are virtual, threadIdx by the thread's index in its block)."""
    src = CSource(ir)
    text = ir.text
    loop = (src_char(ir, g.tile.loop[0]), src_char(ir, g.tile.loop[1]))
    pad = src.indent(loop[0])
    pieces, pos = [], fn.body_start + 1
    for a, b in sorted(removed):
        pieces.append(text[pos:a])
        pos = b
    pieces.append(text[pos:loop[0]])
    swap = (cell_products(g.tile, pad, bool(s.staged)) if s.cells else _products(g, s, pad) if s.virtual
            else exchange(g, s, pad))
    body = "".join(pieces) + swap + text[loop[1]:fn.body_end - 1]
    code = CSource.of_text(body).code
    out, pos = [], 0
    virtual = {"blockIdx": f"{PREFIX}vb", "gridDim": f"{PREFIX}vg", "blockDim": f"{PREFIX}vd",
               "threadIdx": f"{PREFIX}vt"}
    builtins = (_BUILTIN_HALF if s.split > 1 or s.virtual or s.cells
                else _BUILTIN_DIM if s.producer else _BUILTIN)
    for m in builtins.finditer(code):
        out.append(body[pos:m.start()])
        out.append(virtual[m.group(1)])
        pos = m.end()
    return "".join(out) + body[pos:]


def _products(g: GlobalGemm, s: Schedule, pad: str) -> str:
    """The virtual form's stand-in for the K loop: the thread's accumulators add the products
    the exchange holds at their cells (no barrier: the exchange was filled before)."""
    p, t = PREFIX, g.tile
    i1 = pad + "  "
    lines = [f"{{  {MARK}the tile's products into this thread's accumulators",
             f"{i1}const float* {p}y = {p}x + ({p}sm - {p}c0 + {bit_sum_text(t.row)}) * {s.ldx} + "
             f"{p}sn + {bit_sum_text(t.col)};"]
    lines += [f"{i1}{e.lvalue} += {p}y[{e.dm * s.ldx + e.dn}];" for e in t.elements]
    lines.append(f"{pad}}}")
    return "\n".join(lines)


def virtual_tail(ir: KernelIR, g: GlobalGemm, s: Schedule, fn: Function,
                 removed: list[tuple[int, int]], written: list[str],
                 grid: tuple[dict[str, str], dict[str, str]], pad: str) -> list[str]:
    """The virtual form after a tile's K loop: per `chunk` rows of the tile, the fragments into
    the exchange (a barrier of the multiplying threads before and after), then each
    multiplying thread takes (user block, virtual thread) pairs of those rows in turn and runs
    the kernel's body for them (`grid`: the virtual block's blockIdx / gridDim components).
    A body that returns runs as a lambda (its `return` leaves that pair's run)."""
    p, t = PREFIX, g.tile
    vb, vg = grid
    ct = s.consumer_threads
    bx, by = t.block
    if s.cells:
        body = user_body(ir, g, s, fn, removed)
        if re.search(r"\breturn\b", CSource.of_text(body).code):
            body = f"[&]() {{{body}}}();"
        frame = {"mi": s.mi, "ni": s.ni, "row_step": s.row_step, "active": s.active,
                 "warps": ct // 32, "stage": s.staged, "slab": f"{p}smem + {s.smem}"}
        return cells_tail(t, frame, body, grid, " ".join(f"{n} = {p}in_{n};" for n in written),
                          pad)
    users = bx * by
    per_row = s.tn // t.bn
    pairs = s.chunk // t.bm * per_row * users
    sync = (f'asm volatile("bar.sync 1, {ct};" ::: "memory");' if s.producer
            else "__syncthreads();")
    x = f"{p}smem + {s.smem}" if s.producer else f"{p}smem"
    guard = f" && {p}warp < {s.active}" if s.active < ct // 32 else ""
    vt = (f"make_uint3((unsigned){p}u, 0u, 0u)" if by == 1 else
          f"make_uint3((unsigned)({p}u % {bx}), (unsigned)({p}u / {bx}), 0u)")
    restore = " ".join(f"{n} = {p}in_{n};" for n in written)
    body = user_body(ir, g, s, fn, removed)
    if re.search(r"\breturn\b", CSource.of_text(body).code):
        body = f"[&]() {{{body}}}();"
    i1, i2, i3 = pad + "  ", pad + "    ", pad + "      "
    return [
        f"{pad}float* {p}x = reinterpret_cast<float*>({x});",
        f"{pad}#pragma unroll 1",
        f"{pad}for (int {p}c0 = 0; {p}c0 < {TILE_M}; {p}c0 += {s.chunk}) {{",
        f"{i1}{sync}",
        f"{i1}#pragma unroll",
        f"{i1}for (int {p}i = 0; {p}i < {s.mi}; ++{p}i)",
        f"{i1}#pragma unroll",
        f"{i1}  for (int {p}j = 0; {p}j < {s.ni}; ++{p}j)",
        f"{i1}#pragma unroll",
        f"{i1}    for (int {p}h = 0; {p}h < 2; ++{p}h) {{",
        f"{i3}  const int r = {p}wm + {s.row_step} * {p}i + {p}lane / 4 + 8 * {p}h - {p}c0;",
        f"{i3}  const int q = {p}wn + 8 * {p}j + 2 * ({p}lane % 4);",
        f"{i3}  if ((unsigned)r < {s.chunk}u{guard}) {{",
        f"{i3}    {p}x[r * {s.ldx} + q] = {p}acc[{p}i][{p}j][2 * {p}h];",
        f"{i3}    {p}x[r * {s.ldx} + q + 1] = {p}acc[{p}i][{p}j][2 * {p}h + 1];",
        f"{i3}  }}",
        f"{i1}    }}",
        f"{i1}{sync}",
        f"{i1}#pragma unroll 1",
        f"{i1}for (int {p}w = {p}tid; {p}w < {pairs}; {p}w += {ct}) {{  // (user block, thread) pairs",
        f"{i2}const int {p}v = {p}w / {users}, {p}u = {p}w % {users};",
        f"{i2}const int {p}sm = {p}c0 + {p}v / {per_row} * {t.bm}, {p}sn = {p}v % {per_row} * {t.bn};",
        f"{i2}if ({p}m0 + {p}sm >= {p}M || {p}n0 + {p}sn >= {p}N) continue;",
        f"{i2}const uint3 {p}vb = make_uint3({vb.get('x', '0u')}, {vb.get('y', '0u')}, {vb.get('z', '0u')});",
        f"{i2}const uint3 {p}vg = make_uint3({vg.get('x', '1u')}, {vg.get('y', '1u')}, {vg.get('z', '1u')});",
        f"{i2}const uint3 {p}vd = make_uint3({bx}u, {by}u, 1u), {p}vt = {vt};",
        *([f"{i2}{restore}"] if restore else []),
        f"{i2}{{  {MARK}the kernel's own body for this block and thread",
        body,
        f"{i2}}}",
        f"{i1}}}",
        f"{pad}}}",
        f"{pad}{sync}",
    ]


def _line(text: str, a: int, b: int) -> tuple[int, int]:
    """`[a, b)` widened to whole lines where only blanks share them."""
    start = text.rfind("\n", 0, a) + 1
    if text[start:a].strip():
        start = a
    end = text.find("\n", b)
    end = len(text) if end < 0 else end + 1
    if text[b:end].strip():
        end = b
    return start, end


def dead_declarations(ir: KernelIR, fn: Function, tile: GemmTile) -> list[tuple[int, int]]:
    """Character spans (whole lines) of the declarations before the K loop that nothing left
    reads once the loop is gone (the shared tiles, the staging's indices), latest first: a
    declaration without side effects whose names the rest of the body never mentions. Before
    them, a staging of the first K step ahead of the loop (`_prologue`: statements that only
    store the GEMM's shared tiles, and the barriers after them) where nothing else reads the
    tiles."""
    from passes.cuda._tree import block_items, children, declared_names  # noqa: PLC0415

    src = CSource(ir)
    scope = Scope(ir)
    body = children(ir, scope.functions[tile.kernel], "compound_statement")[0]
    items = block_items(ir, body)
    # the statement of the body that is the K loop or holds it (a loop inside a branch)
    at = next(i for i, it in enumerate(items) if it.start <= tile.loop[0] and tile.loop[1] <= it.end)
    code = src.code
    spans = [_line(ir.text, src_char(ir, ir.span_of(it.node).start),
                   src_char(ir, ir.span_of(it.node).end)) for it in items[:at]]
    tail = (code[src_char(ir, items[at].start):src_char(ir, tile.loop[0])] +
            code[src_char(ir, tile.loop[1]):fn.body_end])
    removed: list[int] = _prologue(ir, scope, items[:at], spans, tail, tile)
    for i in reversed(range(at)):
        node = items[i].node
        if ir.grammar_type_of(node) != "declaration" or i in removed:
            continue
        spelled = code[spans[i][0]:spans[i][1]]
        if _EFFECT.search(spelled) or any(not _PURE_CALL.match(m.group(1)) for m in
                                          re.finditer(r"(\w+)\s*\(", spelled)
                                          if m.group(1) != "__align__"):
            continue
        names = [n for n, _, _ in declared_names(ir, node)]
        rest = " ".join(code[a:b] for j, (a, b) in enumerate(spans)
                        if j != i and j not in removed) + tail
        if not any(re.search(rf"\b{re.escape(n)}\b", rest) for n in names):
            removed.append(i)
    return [spans[i] for i in removed]


def _prologue(ir: KernelIR, scope: Scope, items: list, spans: list[tuple[int, int]], tail: str,
              tile: GemmTile) -> list[int]:
    """Indices of `items` (the body's statements before the K loop) that stage the GEMM's
    shared tiles ahead of it and nothing else: each one writes only those tiles and names it
    declares, calls nothing but conversions and loads; the barriers that follow them, where no
    statement kept since the previous barrier touches shared memory. None where the rest of the
    body (`tail`: the code outside the K loop after them) names the tiles."""
    from passes.cuda._tree import declared_names, subtree  # noqa: PLC0415

    tiles = {tile.a.array, tile.b.array}
    code = CSource(ir).code

    def stages(node: int) -> bool:
        inner = {n for c in subtree(ir, node) if ir.grammar_type_of(c) == "declaration"
                 for n, _, _ in declared_names(ir, c)}
        wrote = False
        for c in subtree(ir, node):
            gtype = ir.grammar_type_of(c)
            callee = (ir.attrs_of(c).get("callee") or "").split("::")[-1]
            if gtype == "call_expression" and ASYNC_COPY.match(callee):
                # an asynchronous copy writes its first argument only
                args = [a for a in children(ir, children(ir, c, "argument_list")[0])
                        if ir.grammar_type_of(a) not in _TRIVIA_KINDS]
                if not args or not any(ir.grammar_type_of(x) == "identifier" and
                                       ir.name_of(x) in tiles for x in subtree(ir, args[0])):
                    return False
                wrote = True
                continue
            if gtype == "call_expression" and not (_STAGE_CALL.match(callee)
                                                   or ASYNC_FENCE.match(callee)):
                return False
            if any(ir.grammar_type_of(a) == "call_expression" and
                   ASYNC_COPY.match(ir.attrs_of(a).get("callee") or "") for a in ir.ancestors(c)):
                continue  # (inside the copy's arguments: read)
            names = scope.written(c)
            if gtype in ("assignment_expression", "update_expression") and not names:
                return False
            if any(n not in tiles | inner for n in names):
                return False
            wrote = wrote or any(n in tiles for n in names)
        return wrote

    out: list[int] = []
    touched = False  # a kept statement since the last barrier names shared memory
    arrays = _shared_names(ir, scope.functions[tile.kernel])
    shared = re.compile(r"\b(?:" + "|".join(map(re.escape, arrays or ["$^"])) + r")\b")
    for i, it in enumerate(items):
        gtype = ir.grammar_type_of(it.node)
        spelled = code[spans[i][0]:spans[i][1]]
        if gtype == "expression_statement" and re.fullmatch(r"\s*__syncthreads\s*\(\s*\)\s*;\s*",
                                                           spelled):
            if not touched and out and out[-1] == i - 1:
                out.append(i)
            touched = False
        elif gtype != "declaration" and stages(it.node):
            out.append(i)
        elif gtype != "declaration":  # (a declaration of a shared array writes nothing)
            touched = touched or bool(shared.search(spelled))
    if not any(ir.grammar_type_of(items[i].node) != "expression_statement" or
               "__syncthreads" not in code[spans[i][0]:spans[i][1]] for i in out):
        return []
    own = {j for j, it in enumerate(items) if ir.grammar_type_of(it.node) == "declaration"
           and tiles & {n for n, _, _ in declared_names(ir, it.node)}}
    rest = " ".join(code[a:b] for j, (a, b) in enumerate(spans) if j not in out and j not in own)
    if any(re.search(rf"\b{re.escape(n)}\b", rest + tail) for n in tiles):
        return []
    return out


_STAGE_CALL = re.compile(r"^(?:__float2bfloat16(?:_rn)?|__float2half(?:_rn)?|__bfloat162float|"
                         r"__half2float|__ldg|static_cast|reinterpret_cast|float|min|max|"
                         r"make_\w+)$")
"""Calls a staging ahead of the K loop may make (conversions, loads)."""


def _shared_names(ir: KernelIR, fn: int) -> list[str]:
    """The names the kernel `fn` declares `__shared__`."""
    from passes.cuda._tree import declared_names, subtree, text  # noqa: PLC0415

    return [n for c in subtree(ir, fn) if ir.grammar_type_of(c) == "declaration"
            and "__shared__" in text(ir, c) for n, _, _ in declared_names(ir, c)]


def src_char(ir: KernelIR, byte: int) -> int:
    """The character offset of byte `byte` of the source."""
    return len(ir.source[:byte].decode("utf-8", errors="replace"))


def _extent(op: Operand, block: int) -> str:
    """The output's extent along an operand's mn: its bounding parameter, or, for a staging
    without bounds checks (whole tiles only), the launch's blocks along that axis."""
    return op.bound or f"(int)gridDim.{op.axis} * {block}"


def _warp_origin(s: Schedule, pad: str) -> list[str]:
    """`kl_gs_wm` / `kl_gs_wn`: the warp's first fragment row and column in the tile (and, for
    wgmma, `kl_gs_gm0` / `kl_gs_gn0`: its warpgroup's)."""
    p = PREFIX
    if not s.wgmma:
        return [f"{pad}const int {p}wm = {p}warp / {s.warps_n} * {TILE_M // s.warps_m}, "
                f"{p}wn = {p}warp % {s.warps_n} * {TILE_N // s.warps_n};"]
    if s.pingpong:  # each warpgroup a whole tile of its own
        return [f"{pad}const int {p}wg = {p}warp / 4, {p}gm0 = 0, {p}gn0 = 0;",
                f"{pad}const int {p}wm = 16 * ({p}warp % 4), {p}wn = 0;"]
    if s.split > 1:  # down the rows first: each half of the warpgroups holds a half of the tile
        return [f"{pad}const int {p}gm0 = {p}warp / 4 % {s.warps_m} * {TILE_M // s.warps_m}, "
                f"{p}gn0 = {p}warp / 4 / {s.warps_m} * {s.tn // s.warps_n};",
                f"{pad}const int {p}wm = {p}gm0 + 16 * ({p}warp % 4), {p}wn = {p}gn0;"]
    return [f"{pad}const int {p}gm0 = {p}warp / 4 / {s.warps_n} * {TILE_M // s.warps_m}, "
            f"{p}gn0 = {p}warp / 4 % {s.warps_n} * {s.tn // s.warps_n};",
            f"{pad}const int {p}wm = {p}gm0 + 16 * ({p}warp % 4), {p}wn = {p}gn0;"]


def _ring_declaration(s: Schedule, pad: str) -> list[str]:
    """`kl_gs_smem`: the ring's shared memory (static, or the launch's dynamic shared memory
    from its first 1024-byte boundary)."""
    p = PREFIX
    if not s.deep:
        return [f"{pad}__shared__ __align__(1024) unsigned char {p}smem[{s.smem}];"]
    return [f"{pad}extern __shared__ __align__(1024) unsigned char {p}dyn[];",
            f"{pad}unsigned char* {p}smem = {p}dyn + ((1024u - ((unsigned)__cvta_generic_to_shared("
            f"{p}dyn) & 1023u)) & 1023u);"]


def new_body(ir: KernelIR, g: GlobalGemm, s: Schedule, fn: Function,
             removed: list[tuple[int, int]], written: list[str]) -> str:
    """The kernel's whole new body (with braces)."""
    p, t = PREFIX, g.tile
    a_el = _slice_elems(g.a, TILE_M, s.wgmma, s.bk)
    row_axis, col_axis = g.a.axis, g.b.axis
    tn = s.tn
    sub_m, sub_n = TILE_M // t.bm, tn // t.bn
    vm, vn = f"({p}tm * {sub_m} + {p}v / {sub_n})", f"({p}tn * {sub_n} + {p}v % {sub_n})"
    if s.split > 1 or s.virtual or s.cells:
        vm, vn = f"({p}tm * {sub_m} + {p}sm / {t.bm})", f"({p}tn * {sub_n} + {p}sn / {t.bn})"
    rows_u, cols_u = f"(({p}M + {t.bm - 1}) / {t.bm})", f"(({p}N + {t.bn - 1}) / {t.bn})"
    if g.order == "row":  # blockIdx.x counts the kernel's blocks row by row
        vb, vg = {"x": f"(unsigned)({vm} * {cols_u} + {vn})"}, {"x": f"(unsigned)({rows_u} * {cols_u})"}
    elif g.order == "col":
        vb, vg = {"x": f"(unsigned)({vn} * {rows_u} + {vm})"}, {"x": f"(unsigned)({rows_u} * {cols_u})"}
    else:
        vb = {row_axis: f"(unsigned){vm}", col_axis: f"(unsigned){vn}"}
        vg = {row_axis: f"(unsigned){rows_u}", col_axis: f"(unsigned){cols_u}"}
    if _batched(g):  # the user's body finds its GEMM of the batch by blockIdx.z
        vb["z"], vg["z"] = "blockIdx.z", "gridDim.z"
    facts = json.dumps({**g.to_json(), "schedule": [TILE_M, tn, s.bk, s.stages],
                        "wgmma": s.wgmma, **({"wide": True} if tn > TILE_N else {}),
                        **({"bk": s.bk} if s.bk not in (TILE_K, DEEP_K) else {}),
                        **({"deep": True} if s.deep else {}),
                        **({"specialize": True} if s.specialize else {}),
                        **({"producer": True} if s.producer else {}),
                        **({"pingpong": True} if s.pingpong else {}),
                        **({"tma": tma_maps(g, s)} if s.tma else {}),
                        **({"consumers": s.warps_m * s.warps_n} if s.split > 1 or (
                            s.virtual and s.producer and s.consumer_threads > 256) else {}),
                        **({"virtual": s.threads if s.own_block else True} if s.virtual else {}),
                        **({"cells": True} if s.cells else {}),
                        **({"staged": s.staged} if s.staged else {}),
                        **({"exchange": True} if s.virtual and not s.cells and
                           cell_threads(g.tile) else {}),
                        **({"bounds": _user_bounds(ir, fn)} if s.own_block else {}),
                        **({"overlap": True} if s.overlap else {})}, sort_keys=True)
    restore = " ".join(f"{n} = {p}in_{n};" for n in written)
    i1, i2, i3 = "  ", "    ", "      "
    lines = [
        "{",
        f"{i1}{MARK}{facts}",
        f"{i1}// a persistent loop over {TILE_M}x{tn} tiles: cp.async {s.stages}-slot ring, "
        "ldmatrix + mma.sync m16n8k16,",
        f"{i1}// then, per {t.bm}x{t.bn} block of the tile, the kernel's own body with the block's "
        "coordinates and its accumulators filled",
        *_ring_declaration(s, i1),
        *[f"{i1}const auto {p}in_{n} = {n};" for n in written],
        f"{i1}const int {p}M = {_extent(g.a, t.bm)}, {p}N = {_extent(g.b, t.bn)}, {p}K = {g.k};",
        f"{i1}const long {p}lda = {g.a.ld}, {p}ldb = {g.b.ld};",
        f"{i1}const unsigned short* {p}ga = reinterpret_cast<const unsigned short*>({_operand_base(g.a)});",
        f"{i1}const unsigned short* {p}gb = reinterpret_cast<const unsigned short*>({_operand_base(g.b)});",
        f"{i1}const bool {p}veca = ({p}lda % 8 == 0) && ((reinterpret_cast<unsigned long long>({p}ga) & 15) == 0);",
        f"{i1}const bool {p}vecb = ({p}ldb % 8 == 0) && ((reinterpret_cast<unsigned long long>({p}gb) & 15) == 0);",
        f"{i1}unsigned short* {p}sa = reinterpret_cast<unsigned short*>({p}smem);",
        f"{i1}unsigned short* {p}sb = {p}sa + {s.stages * a_el};",
        f"{i1}const int {p}tid = {'(int)threadIdx.x' if s.own_block else _tid(t)}, "
        f"{p}lane = {p}tid % 32, {p}warp = {p}tid / 32;",
        *_warp_origin(s, i1),
        *_barriers(g, s, i1),
        f"{i1}const int {p}tiles_m = ({p}M + {TILE_M - 1}) / {TILE_M}, "
        f"{p}tiles_n = ({p}N + {tn - 1}) / {tn};",
        f"{i1}const int {p}blocks = {_blocks(g)};",
        *(_producer_loop(g, s, i1) if s.producer else []),
        *_half(s, t, i1),
        f"{i1}float {p}acc[{s.mi}][{s.ni}][4];",
        *([f"{i1}{p}fill = {p}wg * (({p}K + {s.bk - 1}) / {s.bk});  // the slices before this "
           "warpgroup's first tile"] if s.pingpong else []),
        f"{i1}#pragma unroll 1",
        (f"{i1}for (int {p}t = {_first_tile(g)} + {p}wg * {p}blocks; {p}t < {p}tiles_m * "
         f"{p}tiles_n; {p}t += 2 * {p}blocks) {{  // the warpgroups' tiles in turn"
         if s.pingpong else
         f"{i1}for (int {p}t = {_first_tile(g)}; {p}t < {p}tiles_m * {p}tiles_n; {p}t += {p}blocks) {{"),
        *_tile_origin(s, i2),
        *main_loop(g, s, i2),
    ]
    if s.virtual or s.cells:
        lines += virtual_tail(ir, g, s, fn, removed, written, (vb, vg), i2)
        return "\n".join(lines + [f"{i1}}}", "}"])
    lines += [
        f"{i2}#pragma unroll 1",
        *_virtual_blocks(s, t, i2),
        f"{i3}if ({p}m0 + {p}sm >= {p}M || {p}n0 + {p}sn >= {p}N) {_skipped(s)}",
        f"{i3}const uint3 {p}vb = make_uint3({vb.get('x', '0u')}, {vb.get('y', '0u')}, {vb.get('z', '0u')});",
        f"{i3}const uint3 {p}vg = make_uint3({vg.get('x', '1u')}, {vg.get('y', '1u')}, {vg.get('z', '1u')});",
        *([f"{i3}const uint3 {p}vd = make_uint3({t.block[0]}u, {t.block[1]}u, 1u);"]
          if s.producer else []),
    ]
    if restore:
        lines.append(f"{i3}{restore}")
    lines += [f"{i3}{{  {MARK}the kernel's own body for this block",
              user_body(ir, g, s, fn, removed),
              f"{i3}}}",
              f"{i2}}}",
              f"{i1}}}",
              "}"]
    return "\n".join(lines)


def _user_bounds(ir: KernelIR, fn: Function) -> str:
    """The kernel's own `__launch_bounds__(...)` as written ("" where it has none): a form that
    launches its own block writes its bounds in their place, its de-optimization puts them back."""
    m = re.search(r"__launch_bounds__\s*\([^)]*\)", ir.text[fn.start:fn.body_start])
    return m.group(0) if m else ""


def _skipped(s: Schedule) -> str:
    """What a half does for a block past M or N where the halves take turns at the exchange:
    its four barriers, so that the other half's turn comes."""
    if not s.turns:
        return "continue;"
    sync = f'asm volatile("bar.sync 1, {s.consumer_threads};" ::: "memory");'
    return f"{{ {' '.join([sync] * 4)} continue; }}"


def _half(s: Schedule, t: GemmTile, pad: str) -> list[str]:
    """Where the launch's block runs twice at once: `kl_gs_half`, the thread's half of the
    multiplying threads, and `kl_gs_vt`, its threadIdx in a block of the launch's size."""
    if s.split == 1:
        return []
    p, bx = PREFIX, t.block[0]
    local = f"({p}tid - {p}half * {s.user_threads})"
    vt = (f"make_uint3((unsigned){local}, 0u, 0u)" if t.block[1] == 1 else
          f"make_uint3((unsigned)({local} % {bx}), (unsigned)({local} / {bx}), 0u)")
    return [f"{pad}const int {p}half = {p}tid / {s.user_threads};",
            f"{pad}const uint3 {p}vt = {vt};"]


def _virtual_blocks(s: Schedule, t: GemmTile, pad: str) -> list[str]:
    """The loop header over the tile's user-sized blocks and `kl_gs_sm` / `kl_gs_sn`, the
    block's origin in the tile: all of them, or, where the launch's block runs twice at once,
    those of the thread's half of the tile."""
    p = PREFIX
    hm, hn = s.half_tile
    rm, rn = hm // t.bm, hn // t.bn
    if s.split == 1:
        return [f"{pad}for (int {p}v = 0; {p}v < {rm * rn}; ++{p}v) {{",
                f"{pad}  const int {p}sm = {p}v / {rn} * {t.bm}, {p}sn = {p}v % {rn} * {t.bn};"]
    m0 = f"{p}half * {hm} + " if hm < TILE_M else ""
    n0 = f"{p}half * {hn} + " if hn < s.tn else ""
    return [f"{pad}for (int {p}v = 0; {p}v < {rm * rn}; ++{p}v) {{  // this half's blocks",
            f"{pad}  const int {p}sm = {m0}{p}v / {rn} * {t.bm}, {p}sn = {n0}{p}v % {rn} * {t.bn};"]


# ---------------------------------------------------------------------------------------------
# the analysis, shared by sites and optimize


@dataclass(frozen=True, slots=True)
class _Found:
    g: GlobalGemm
    fn: Function
    removed: list[tuple[int, int]]
    written: list[str]
    kept_shared: int
    rest: str = ""
    """The code of the body the rewrite keeps (outside the K loop and the dead declarations)."""
    virtual: str = ""
    """Why the body can only run for virtual threads (the K loop reads global memory, sits in
    a branch, or the body returns early), else ""."""
    drop_shared: bool = False
    """The kernel's dynamic shared buffer holds only the K loop's tiles and goes with it: the
    rewrite's launch needs none of the bytes the host passes for it."""


def analyse(ir: KernelIR, block: tuple[int, int] | None, kernels: frozenset[str]
            ) -> tuple[list[_Found], list[str]]:
    """Each plain kernel whose GEMM the rule can read, and a reason for each it cannot."""
    tiles, reasons = find_gemm_tiles(ir, block, kernels)
    direct, why_not = find_direct(ir, block, kernels - {t.kernel for t in tiles})
    reasons += why_not
    src = CSource(ir)
    by_name = {f.name: f for f in _kernels(src)}
    found: list[_Found] = []
    for t in tiles + [d.tile for d in direct]:
        fn = by_name.get(t.kernel)
        if fn is None:
            reasons.append(f"{t.kernel}: its definition is not found")
            continue
        if block is None and not _bounded(ir, fn):
            reasons.append(f"{t.kernel}: the block size is not known (give the host's launch or "
                           "the block fact)")
            continue
        body = src.code[fn.body_start:fn.body_end]
        own = next((d for d in direct if d.tile is t), None)
        virtual = ("the K loop reads its operands from global memory" if own is not None else
                   "the K loop is inside a branch" if not _top_level(ir, fn, t) else "")
        if re.search(r"\breturn\b", body) and own is None:
            reasons.append(f"{t.kernel}: the body returns early (a block would leave the "
                           "persistent loop and strand the others at its barriers)")
            continue
        dynamic = [m.start() for m in re.finditer(
            r"\b(?:extern\s+__shared__|__shared__\s+extern)\b", body)]
        try:
            g = own if own is not None else trace(ir, t)
        except Refusal as exc:
            reasons.append(f"{t.kernel}: {exc.args[0]}")
            continue
        scope = Scope(ir)
        k = _Kernel(ir, scope, scope.functions[t.kernel])
        removed = dead_declarations(ir, fn, t)
        if any(not any(a <= fn.body_start + at < b for a, b in removed) for at in dynamic):
            reasons.append(f"{t.kernel}: the kernel uses dynamic shared memory beyond the K "
                           "loop's tiles")
            continue
        loop = (src_char(ir, t.loop[0]), src_char(ir, t.loop[1]))
        kept_code = [src.code[fn.body_start:loop[0]], src.code[loop[1]:fn.body_end]]
        for a, b in removed:
            kept_code[0] = kept_code[0].replace(src.code[a:b], "", 1)
        rest = "".join(kept_code)
        kept = sum(sh.bytes for name, sh in k.shared.items()
                   if re.search(rf"\b{re.escape(name)}\b", rest))
        written = _written(rest, k.scope.params)
        found.append(_Found(g, fn, removed, written, kept, rest, virtual, bool(dynamic)))
    return found, reasons


def _top_level(ir: KernelIR, fn: Function, t: GemmTile) -> bool:
    """Whether the K loop is a statement of the kernel's body itself (every thread reaches it)."""
    from passes.cuda._tree import block_items  # noqa: PLC0415

    body = children(ir, Scope(ir).functions[t.kernel], "compound_statement")[0]
    return any((it.start, it.end) == t.loop for it in block_items(ir, body))


def _bounded(ir: KernelIR, fn: Function) -> bool:
    head = ir.text[fn.start:fn.body_start]
    return "__launch_bounds__" in head


def _kernels(src: CSource) -> list[Function]:
    return [f for f in functions(src) if f.is_kernel]


def _outside(src: CSource) -> str:
    """The code view without the inserted helpers and the bodies of the rule's own kernels."""
    cuts = [(f.body_start, f.body_end) for f in _kernels(src) if _present(src, f)]
    for helpers in (HELPERS, DEEP_HELPERS, BARRIER_HELPERS, TMA_HELPERS, TMA_DEVICE_HELPERS,
                    PERSIST_HOST):
        at = src.text.find(helpers)
        if at >= 0:
            cuts.append((at, at + len(helpers)))
    cuts += limit_lines(src.text)
    out, pos = [], 0
    for a, b in sorted(cuts):
        out.append(src.code[pos:a])
        pos = max(pos, b)
    return "".join(out) + src.code[pos:]


def _present(src: CSource, f: Function) -> bool:
    return src.text.find(MARK, f.body_start, f.body_end) >= 0


@dataclass(frozen=True, slots=True)
class GemmSchedule(Pass):
    """A recognized tiled GEMM kernel -> the same kernel on an expert main-loop schedule."""

    block: str = ""
    """The launch's block size, `N` or `NxM` (empty: the `block` fact of the context, the host's
    launch beside the kernel, `__launch_bounds__`)."""

    wgmma: bool = False
    """Issue the tile's K steps as Hopper warpgroup MMA (wgmma m64nNk16 from 64- / 128-byte
    swizzled slices, sm_90a) instead of ldmatrix + mma.sync."""

    bk: int = TILE_K
    """The depth of a staged slice: 32, or 16 (mma.sync only: twice the slots in the same shared
    memory)."""
    overlap: bool = False
    """With `wgmma`: keep one K step's MMAs in flight while the next is issued (the ring runs
    one slice ahead)."""
    wide: bool = False
    """With `wgmma`: 128x256 tiles (two 24 KiB slots; half the operand traffic per output of the
    128x128 tile) instead of 128x128."""
    deep: bool = False
    """64-deep slices in dynamic shared memory (128-byte swizzled for wgmma, one K step in
    flight), the kernel's launches in the same source edited to pass the bytes and raise the
    kernel's limit first, or, where a Python host module launches it, that host asked to
    (`kir.hostlaunch`); refused where neither can be edited."""
    stages: int = 0
    """With `deep`: the ring's slots, 3 to 6 (0: four, or as many as fit)."""
    specialize: bool = False
    """With `deep` and `wgmma`: one warpgroup (or two) fills the ring and the others only
    multiply, handing each slot over by mbarriers (blocks of 256 threads: one warpgroup
    multiplies the 128x128 tile; 384 or 512: two, 128x128 or 128x256 with `wide`)."""
    producer: bool = False
    """With `deep` and `wgmma`: the kernel's launches in the same source get one more warpgroup
    that only fills the ring (copies landing on mbarriers, running ahead across tiles), the
    launch's own warpgroups only multiply and run the kernel's body (128x256 with `wide`: two
    warpgroups of 64x256 at 256 threads), the registers moved from the one to the others."""
    tma: bool = False
    """With `producer`: one thread of the added warpgroup fills each slot with two-dimensional
    TMA copies (128-byte swizzled boxes, zero fill past M, N and K) from tensor maps the edited
    launches build on the host (`cuTensorMapEncodeTiled` through the runtime's driver entry
    point) and pass as a `__grid_constant__` parameter; where the host cannot encode them (a
    base or row pitch not 16-byte aligned) the warpgroup's cp.async fills the ring instead."""
    consumers: int = 0
    """With `producer`: the warpgroups that multiply (0: the launch's own). Twice the launch's
    (4 for a block of 256 threads): the launch grows by as many threads again besides the
    producer, the tile's MMAs are split over all of them (128x256 with `wide`: four of 64x128),
    and each half runs the kernel's body for the user blocks of its half of the tile, with
    threadIdx its index in the half: through one exchange of whole blocks the halves take in
    turn where it fits beside the ring (three slots for 128x128 user tiles), else through an
    exchange of row chunks per half; refused where the user's block tile does not divide the
    half."""

    exchange: bool = False
    """Where the body runs for virtual threads each holding one cell: pass the products through
    the exchange in shared memory (row chunks, barriers) instead of running the body once per
    cell of the thread's fragments (`Schedule.cells`, the default there)."""

    pingpong: bool = False
    """With `producer` on 128x128 tiles: the two warpgroups that multiply each hold a whole tile
    and take the block's tiles in turn, one writing its tile (the body run once per cell) while
    the other multiplies the next; refused where the body does not run once per cell (the
    exchange's barriers would hold both warpgroups) or the launch's block is not two
    warpgroups (its own block where its threads are virtual)."""

    registers: bool = False
    """Where the body runs once per cell in the producer form: run it for the cells of the
    thread's own fragment registers (a warp's stores then reach eight output rows at once)
    instead of staging each warp's fragments through a slab of shared memory and running it for
    the slab's cells in row order (`Schedule.staged`, the default where the slabs fit beside the
    ring)."""

    name: ClassVar[str] = "gemm-schedule"
    category: ClassVar[Category] = Category.COMPUTE
    summary: ClassVar[str] = ("tiled GEMM kernel -> persistent 128x128x32 cp.async + ldmatrix + "
                              "mma.sync schedule through the kernel's own epilogue")
    provides: ClassVar[tuple[str, ...]] = ("tensor-core", "async-copy")
    languages: ClassVar[tuple[str, ...]] = CUDA
    platforms: ClassVar[tuple[str, ...]] = ("cuda",)
    preconditions: ClassVar[tuple[str, ...]] = ("arch >= sm_80",)
    tunables: ClassVar[Mapping[str, tuple[Any, ...]]] = MappingProxyType({"stages": (3, 4, 5)})
    # measured on an H200 at 4096^3 (bench/gemm_schedule.py, persistent grid): the TMA-fed
    # producer form 0.69-0.72 of cuBLAS on 256-thread blocks (0.84-0.88 where the launch's 512
    # threads are four multiplying warpgroups), the deep wide form 0.40, the recorded 48 KB forms
    # 0.18-0.27; `consumers=4` on 256-thread blocks measured 0.62-0.64 on two kernels and 0.52
    # against 0.50 on a third, so it is an option the search may sweep, not a fullest form;
    # `pingpong` (128x128 tiles the two warpgroups take in turn, for one-output-a-thread bodies)
    # measured 0.756-0.797 of cuBLAS against the TMA wide form's 0.828-0.855 on the same three
    # starts (f830e43): an option the search may sweep, not a fullest form
    reach: ClassVar[tuple[Mapping[str, Any], ...]] = (
        MappingProxyType({"wgmma": True, "deep": True, "wide": True, "producer": True, "tma": True}),
        MappingProxyType({"wgmma": True, "deep": True, "wide": True}))

    def sites(self, ir: KernelIR, index: AnchorIndex | None = None) -> list[Site]:
        whole = (0, len(ir.source))
        src = CSource(ir)
        out, plain = [], []
        for f in _kernels(src):
            if _present(src, f):
                at = src.text.find(MARK, f.body_start, f.body_end)
                out.append(make_site(self.name, ir, index, whole, True, {"kernel": f.name},
                                     src.bspan(at, at + len(MARK))))
            else:
                plain.append(f.name)
        if not plain or not (("__shared__" in src.code and "__syncthreads" in src.code)
                             or may_be_direct(src.code)):
            return out
        dims = _block_option(self.block, None, ir)
        found, reasons = analyse(ir, dims if isinstance(dims, tuple) else None, frozenset(plain))
        out += [make_site(self.name, ir, index, whole, False, f.g.to_json(), f.g.tile.loop)
                for f in found]
        if not found and reasons:
            out.append(make_site(self.name, ir, index, whole, False, {"refused": reasons[0]}))
        return out

    def optimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        results, skip = self.check(ctx)
        if skip:
            return skip
        src = CSource(ir)
        if PREFIX in _outside(src):
            return Skipped(f"the kernel already uses names starting {PREFIX}")
        dims = _block_option(self.block, ctx, ir)
        if isinstance(dims, str):
            return Skipped(dims)
        plain = frozenset(f.name for f in _kernels(src) if not _present(src, f))
        found, reasons = analyse(ir, dims, plain)
        wanted = site.detail.get("kernel")
        f = next((x for x in found if wanted in (None, x.g.kernel)), None)
        if f is None:
            return Skipped(reasons[0] if reasons else "no tiled GEMM kernel the rule can read")
        if self.wgmma and ctx is not None and str(ctx.facts.get("arch", "sm_90")) < "sm_90":
            return Skipped("wgmma needs sm_90a")
        arch = str(ctx.facts.get("arch", "sm_90")) if ctx is not None else "sm_90"
        options = (f.g, f.kept_shared, self.wgmma, self.wide, int(self.bk), self.overlap,
                   self.deep, int(self.stages), arch, self.specialize, self.producer, self.tma,
                   int(self.consumers))
        s = plan(*options, virtual=bool(f.virtual), pingpong=self.pingpong)
        if isinstance(s, str) and not f.virtual and self.deep:
            # the form does not take the launch's block as it is: its own block, the body run
            # for the launch's threads as virtual threads
            own = plan(*options, virtual=True, pingpong=self.pingpong)
            s = own if isinstance(own, Schedule) and not _virtual_refusal(ir, f, own) else s
        if isinstance(s, str):
            return Skipped(s, f.g.to_json())
        why = _virtual_refusal(ir, f, s) if s.virtual else \
            _producer_refusal(ir, f, s.threads) if s.producer else ""
        if not self.exchange and cell_threads(f.g.tile) is not None and (
                s.virtual or (s.deep and s.split == 1)):
            # the body once per cell of the fragments: no exchange, on the form's own block or
            # on the launch's (a deep form: its multiplying threads are the launch's)
            s = replace(s, cells=True, xbytes=0)
            if s.producer and not self.registers:
                s = _staged(s, f.kept_shared, arch)
        if s.pingpong and not s.cells:
            return Skipped(f"{f.g.kernel}: warpgroups taking tiles in turn run the body once per "
                           "cell of their fragments (one output a user thread, no exchange: its "
                           "barriers would hold both warpgroups)", f.g.to_json())
        if why:
            return Skipped(why, f.g.to_json())
        here = not s.deep or launched_here(ir, f.g.kernel)
        edits = rewrite_edits(ir, f, s, host_launched=not here)
        if f.drop_shared and not s.deep:  # the launch's bytes sized the buffer the rewrite removes
            if launched_here(ir, f.g.kernel):
                return Skipped(f"{f.g.kernel}: its launch in this source passes dynamic shared "
                               "memory for the buffer the rewrite removes", f.g.to_json())
            bx, by = f.g.tile.block
            host = host_edits(ir, Directive(f.g.kernel, 0, (bx, by, 1), None, drop_shared=True),
                              len(_kernels(src)))
            if isinstance(host, str):
                return Skipped(host, f.g.to_json())
            edits = sorted(edits + host, key=lambda e: (e.start, e.end))
        if s.deep:
            block = None
            if s.own_block:
                block = f"dim3({s.threads}, 1, 1)"
            elif s.producer:
                bx, by = _grown(f, s)
                block = f"dim3({bx}, {by}, 1)"
            if here:
                host = launch_edits(ir, f.g.kernel, s.launch_bytes, block,
                                    tma_argument(ir, f.g, s) if s.tma else None,
                                    persist=s.threads)
            else:
                host = _host_directive(ir, f, s, len(_kernels(src)))
            if isinstance(host, str):
                return Skipped(host, f.g.to_json())
            edits = sorted(edits + host, key=lambda e: (e.start, e.end))
        return finish(ir, site, edits, preconditions=results)

    def deoptimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        edits = scalar_edits(ir, site.detail.get("kernel"))
        if isinstance(edits, str):
            return Skipped(edits)
        return finish(ir, site, edits, options=form_options(ir, site.detail.get("kernel")))


def _staged(s: Schedule, kept_shared: int, arch: str) -> Schedule:
    """`s` (a producer form whose body runs once per cell) with its warps' slabs beside the ring:
    the widest slab (`gemm_cells.stage_width`) whose slabs, one per warp holding fragments, fit
    in the dynamic shared memory `arch` leaves after the ring and the user's own shared arrays;
    `s` unchanged where none fits."""
    room = dynamic_limit(arch) - kept_shared - ALIGN_SLACK - 16 * 6 - s.smem
    width = stage_width(8 * s.ni, s.active, room)
    if not width:
        return s
    return replace(s, staged=width, xbytes=stage_bytes(width, s.active))


def _host_directive(ir: KernelIR, f: _Found, s: Schedule, kernels: int) -> list[ByteEdit] | str:
    """The deep form's launch for a kernel its Python host module launches: the host-launch
    line (`passes.cuda.gemm_launch.host_edits`) asking for the ring's bytes, the grown block
    (producer form), sm_90a (wgmma) and the operands' tensor maps (TMA form), or why the host's
    launches cannot be edited."""
    tma = None
    if s.tma:
        maps = tma_maps(f.g, s)
        if isinstance(maps, str):
            return maps
        tma = {"dtype": f.g.dtype, "params": parameter_bytes(ir, f.fn), "maps": maps}
    bx, by = f.g.tile.block
    grown = (s.threads, 1) if s.own_block else _grown(f, s) if s.producer else None
    directive = Directive(f.g.kernel, s.launch_bytes, (bx, by, 1),
                          (grown[0], grown[1], 1) if isinstance(grown, tuple) else None,
                          "sm_90a" if s.wgmma else None, tma, persist=True,
                          drop_shared=f.drop_shared)
    return host_edits(ir, directive, kernels)


def _grown(f: _Found, s: Schedule) -> tuple[int, int]:
    """The producer form's block: the launch's, grown to the schedule's threads."""
    own = f.g.tile.block[0] * f.g.tile.block[1]
    grown = grown_block(f.g.tile.block, s.threads - own)
    assert isinstance(grown, tuple), grown  # the plan refused the blocks that cannot grow
    return grown


def _producer_refusal(ir: KernelIR, f: _Found, grown: int) -> str:
    """Why the kernel's block cannot grow to `grown` threads (a producer warpgroup, and more
    multiplying ones where asked), or "": its own bounds fix the block (bounds of the grown
    block, as the rule's de-optimization leaves them, do not), or the body the rewrite keeps
    waits at a block barrier (the added warpgroups are not there to arrive)."""
    bounds = re.search(r"__launch_bounds__\s*\(\s*(\d+)", ir.text[f.fn.start:f.fn.body_start])
    if _bounded(ir, f.fn) and (bounds is None or int(bounds.group(1)) != grown) \
            and _own_block_bounds(ir, f) is None:
        return (f"{f.g.kernel}: its __launch_bounds__ fix the block at the launch's size (a "
                "producer warpgroup would exceed them)")
    if re.search(r"\b(?:__syncthreads\w*|__barrier_sync|bar\.sync|barrier\.sync)\b|"
                 r"\bthis_thread_block\b", CSource.of_text(f.rest).code):
        return (f"{f.g.kernel}: the body outside the K loop waits at a block barrier, which the "
                "added warpgroup does not reach")
    return ""


_WARP_LEVEL = re.compile(r"\b(?:__shfl\w*|__syncwarp|__ballot\w*|__any_sync|__all_sync|"
                         r"__activemask|__match\w*|__reduce\w*_sync|tiled_partition|"
                         r"this_thread_block|coalesced_threads)\b")


def _virtual_refusal(ir: KernelIR, f: _Found, s: Schedule) -> str:
    """Why the kernel's body cannot run for virtual threads, or "": it waits at a block
    barrier or works across a warp (its threads no longer run side by side), it keeps shared
    memory of its own, or an output extent is the launch's grid, which the form's own block
    and grid change."""
    code = _with_callees(ir, CSource.of_text(f.rest).code)
    name = f.g.kernel
    why = f" ({f.virtual})" if f.virtual else ""
    if re.search(r"\b(?:__syncthreads\w*|__barrier_sync|bar\.sync|barrier\.sync)\b", code):
        return (f"{name}: the body outside the K loop waits at a block barrier, which its threads "
                f"do not reach together when they run as virtual threads{why}")
    if _WARP_LEVEL.search(code):
        return (f"{name}: the body outside the K loop works across a warp, whose threads do not "
                f"run side by side as virtual threads{why}")
    if f.kept_shared:
        return f"{name}: the body outside the K loop uses shared memory of its own{why}"
    if s.own_block and "" in (f.g.a.bound, f.g.b.bound):
        return (f"{name}: an output extent is the launch's grid (no bounds check), which the "
                f"form's own launch changes{why}")
    return ""


def _with_callees(ir: KernelIR, code: str) -> str:
    """`code` and the code of every function of the unit it calls, directly or not."""
    scope = Scope(ir)
    seen: set[str] = set()
    out = [code]
    while True:
        called = {m.group(1) for part in out for m in re.finditer(r"\b(\w+)\s*\(", part)}
        new = sorted(n for n in called - seen if n in scope.functions)
        if not new:
            return "\n".join(out)
        seen.update(new)
        for n in new:
            span = ir.span_of(scope.functions[n])
            out.append(CSource.of_text(ir.source[span.start:span.end].decode("utf-8", "replace")).code)


def _own_block_bounds(ir: KernelIR, f: _Found) -> tuple[int, int] | None:
    """The span of the kernel's `__launch_bounds__(T)` or `(T, 1)` where T is the block its
    launch uses, or a block a producer form grows it to (bounds that say only the block's size,
    or the ones a producer form wrote and its de-optimization left: the producer form, which
    grows the launch's block, writes them for the grown block); else None."""
    head = ir.text[f.fn.start:f.fn.body_start]
    m = re.search(r"__launch_bounds__\s*\(\s*(\d+)\s*(?:,\s*1\s*)?\)", head)
    own = f.g.tile.block[0] * f.g.tile.block[1]
    if m is None or int(m.group(1)) not in (own, own + PRODUCER, 2 * own + PRODUCER):
        return None
    return f.fn.start + m.start(), f.fn.start + m.end()


def rewrite_edits(ir: KernelIR, f: _Found, s: Schedule, host_launched: bool = False
                  ) -> list[ByteEdit]:
    """The kernel's edits (helpers, bounds, the TMA parameter, the new body); `host_launched`:
    its launch is in a Python host module (the TMA form's helpers then leave the maps' encoding
    to the host)."""
    src = CSource(ir)
    edits: list[ByteEdit] = []
    wanted = ""
    if MMA_HELPERS not in ir.text:
        wanted += MMA_HELPERS
    if HELPERS not in ir.text:
        wanted += HELPERS
    if s.deep and s.wgmma and DEEP_HELPERS not in ir.text:
        wanted += DEEP_HELPERS
    if (s.specialize or s.producer) and BARRIER_HELPERS not in ir.text:
        wanted += BARRIER_HELPERS
    tma_helpers = TMA_DEVICE_HELPERS if host_launched else TMA_HELPERS
    if s.tma and tma_helpers not in ir.text:
        wanted += tma_helpers
    if s.deep and not host_launched and PERSIST_HOST not in ir.text:
        wanted += PERSIST_HOST
    if wanted:
        at = src.b(helper_insert_at(src))
        edits.append(ByteEdit(at, at, wanted))
    fn = f.fn
    own = _own_block_bounds(ir, f) if s.producer else None
    bounds = re.search(r"__launch_bounds__\s*\([^)]*\)", ir.text[fn.start:fn.body_start])
    if s.own_block and bounds is not None:  # the user's bounds were of the user's block
        edits.append(ByteEdit(src.b(fn.start + bounds.start()), src.b(fn.start + bounds.end()),
                              f"__launch_bounds__({s.threads}, 1)"))
    elif own is not None:  # bounds of the launch's block: now of the grown block
        edits.append(ByteEdit(src.b(own[0]), src.b(own[1]), f"__launch_bounds__({s.threads}, 1)"))
    elif not _bounded(ir, fn):
        at = src.b(fn.name_start)
        # (a second block per SM would need <= 128 registers a thread at 256 threads: the
        # exchange holds the fragments and the kernel's own accumulators at once and spills)
        limit = f"{s.threads}, 1" if s.producer else f"{s.threads}"
        edits.append(ByteEdit(at, at, f"__launch_bounds__({limit}) "))
    if s.tma:  # the tensor maps, by value in the kernel's parameter space
        close = src.code.rfind(")", fn.name_start, fn.body_start)
        empty = not src.code[src.code.find("(", fn.name_start) + 1:close].strip()
        at = src.b(close)
        edits.append(ByteEdit(at, at, ("" if empty else ", ") + TMA_PARAMETER))
    body = new_body(ir, f.g, s, fn, f.removed, f.written)
    edits.append(ByteEdit(src.b(fn.body_start), src.b(fn.body_end), body))
    return sorted(edits, key=lambda e: (e.start, e.end))
