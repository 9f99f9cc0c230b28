"""TMA bulk copies (`cp.async.bulk`) <-> 16-byte `cp.async` copies by the issuing thread.

De-optimization rewrites every bulk copy of a translation unit:
- global -> shared, completing on an mbarrier (`cp.async.bulk.shared::{cluster,cta}.global
  .mbarrier::complete_tx::bytes [dst], [src], size, [bar]`): the issuing thread copies the
  same bytes with `cp.async.cg ... 16`, waits for them, fences them towards the async proxy
  (wgmma and TMA stores read shared memory through it) and then performs the bulk copy's
  completion itself, `mbarrier.complete_tx [bar], size`, after a release fence. The barrier's
  expected transaction count (`mbarrier.arrive.expect_tx`) is untouched, so its phase completes
  exactly when it did: every byte has landed and every arrival happened. The copies are then
  `cp-async-pipeline`'s to make synchronous (TMA -> cp.async -> synchronous staging);
- shared -> global (`cp.async.bulk.global.shared::cta.bulk_group [dst], [src], size`): 16-byte
  shared loads and global stores by the issuing thread; `cp.async.bulk.commit_group` /
  `wait_group` become compiler barriers (the store is complete when the thread moves on);
- L2 prefetches (`cp.async.bulk.prefetch...`) are dropped: they only hint.

Tensor copies (`cp.async.bulk.tensor`) are found and refused: their global address, strides,
box and swizzle live in a tensor map (`CUtensorMap`) encoded on the host, which the kernel
cannot read, so no per-thread copy can stand in for them. Multicast, cluster-to-cluster and
reducing bulk copies are refused too.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

from kir.cuda import asm_mnemonics
from passes.base import Category
from passes.cuda._asm import COMPILER_BARRIER, AsmRewrite, AsmRule
from passes.cuda._c import CSource, asm_constrained_operands
from passes.cuda.annotations import CUDA

BULK_HELPERS = r"""__device__ __forceinline__ void kl_bulk_load_as_cp_async(unsigned int dst,
                                                         const void* src, unsigned int bytes,
                                                         unsigned int bar) {
  // a TMA bulk copy (global -> shared) issued as 16-byte cp.async copies by the issuing thread,
  // then completed on its mbarrier as the bulk copy would (sizes and addresses are multiples of
  // 16 bytes, as the bulk copy requires)
  const char* from = static_cast<const char*>(src);
  for (unsigned int off = 0; off < bytes; off += 16)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;"
                 ::"r"(dst + off), "l"(from + off) : "memory");
  asm volatile("cp.async.wait_all;" ::: "memory");
  // visible to the async proxy (wgmma, TMA stores) and released to the barrier's waiters
  asm volatile("fence.proxy.async.shared::cta;\n\tfence.acq_rel.cta;" ::: "memory");
  asm volatile("mbarrier.complete_tx.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void kl_bulk_store_sync(void* dst, unsigned int src,
                                                   unsigned int bytes) {
  // a TMA bulk store (shared -> global) as 16-byte loads and stores by the issuing thread
  char* to = static_cast<char*>(dst);
  for (unsigned int off = 0; off < bytes; off += 16) {
    unsigned int a, b, c, d;
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(a), "=r"(b), "=r"(c), "=r"(d) : "r"(src + off) : "memory");
    asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};"
                 ::"l"(to + off), "r"(a), "r"(b), "r"(c), "r"(d) : "memory");
  }
}
"""

_OPERAND = r"\[\s*(%\d+)\s*\]"
_SIZE = r"(%\d+|\d+)"
_LOAD = re.compile(r"^cp\.async\.bulk\.shared::(?:cluster|cta)\.global"
                   r"\.mbarrier::complete_tx::bytes(\.L2::cache_hint)?\s+"
                   rf"{_OPERAND}\s*,\s*{_OPERAND}\s*,\s*{_SIZE}\s*,\s*{_OPERAND}"
                   r"\s*(?:,\s*%\d+\s*)?;?\s*$")
_STORE = re.compile(r"^cp\.async\.bulk\.global\.shared::cta\.bulk_group(\.L2::cache_hint)?\s+"
                    rf"{_OPERAND}\s*,\s*{_OPERAND}\s*,\s*{_SIZE}\s*(?:,\s*%\d+\s*)?;?\s*$")
_GROUP = re.compile(r"^cp\.async\.bulk\.(?:commit_group|wait_group(?:\.read)?)\b")
_PREFETCH = re.compile(r"^cp\.async\.bulk\.prefetch\.")
_TENSOR = re.compile(r"\b(?:cp|cp\.reduce)\.async\.bulk\.tensor\b")  # prefetches are not copies
_BULK = re.compile(r"\b(?:cp|cp\.reduce)\.async\.bulk\b")
_DROPPED = "static_cast<void>(0)"


def _instructions(template: str) -> list[str]:
    """The PTX instructions of an asm template (braces, `.reg` lines and labels left out)."""
    return [s.strip() for s in re.split(r"[;\n{}]|\\n", template)
            if s.strip() and asm_mnemonics(s.strip())]


@dataclass(frozen=True, slots=True)
class TmaBulkCopy(AsmRule):
    """TMA bulk copies completed on mbarriers <-> 16-byte cp.async copies by the issuing
    thread, completed on the same mbarriers."""

    pairs: str = ""
    """JSON list of [original, replacement] texts in source order (recorded by a
    de-optimization; the inserted helpers first); restoring them re-derives the bulk copies."""

    name: ClassVar[str] = "tma-bulk-copy"
    category: ClassVar[Category] = Category.STAGING
    summary: ClassVar[str] = "TMA bulk copies (cp.async.bulk, mbarrier tx) <-> per-thread cp.async"
    # the de-optimized copies are cp.async ones: the pipeline is removed after this pass
    requires: ClassVar[tuple[str, ...]] = ("pipelined",)
    provides: ClassVar[tuple[str, ...]] = ("tma",)
    languages: ClassVar[tuple[str, ...]] = CUDA
    platforms: ClassVar[tuple[str, ...]] = ("cuda",)
    preconditions: ClassVar[tuple[str, ...]] = ("arch >= sm_90",)
    helpers: ClassVar[str] = BULK_HELPERS
    marker: ClassVar[str] = "kl_bulk_load_as_cp_async"
    forward_needs: ClassVar[str] = "which copies one thread may issue as one bulk copy is " \
                                   "kernel-specific"

    def rewrites(self, src: CSource) -> list[AsmRewrite]:
        found = AsmRule.rewrites(self, src)
        # group commits/waits are this rule's only while a bulk copy is left to rewrite
        return found if any(r.why != "group" for r in found) else []

    def match(self, src: CSource, open_at: int, template: str) -> tuple[str | None, str] | None:
        if not _BULK.search(template):
            return None
        if _TENSOR.search(template):
            return None, ("cp.async.bulk.tensor reads a tensor map encoded on the host: its "
                          "global address, strides, box and swizzle are not in the kernel, so "
                          "no per-thread copy can replace it")
        instructions = _instructions(template)
        if len(instructions) != 1:
            return None, "a bulk copy shares its asm statement with other instructions"
        inst = instructions[0]
        if _GROUP.match(inst):
            return COMPILER_BARRIER, "group"
        if _PREFETCH.match(inst):
            return _DROPPED, ""
        if ".multicast::cluster" in inst or inst.startswith("cp.reduce"):
            return None, "a multicast or reducing bulk copy is not rewritten"
        ops = asm_constrained_operands(src, open_at)

        def operand(token: str) -> str | None:
            if token.isdigit():
                return token
            i = int(token[1:])
            return f"({ops[i][1]})" if i < len(ops) else None

        load, store = _LOAD.match(inst), _STORE.match(inst)
        if load is not None:
            dst, srcp, size, bar = (operand(load.group(i)) for i in (2, 3, 4, 5))
            if None in (dst, srcp, size, bar):
                return None, "bulk copy operands not understood"
            return (f"kl_bulk_load_as_cp_async((unsigned int){dst}, (const void*){srcp}, "
                    f"(unsigned int){size}, (unsigned int){bar})"), ""
        if store is not None:
            dst, srcp, size = (operand(store.group(i)) for i in (2, 3, 4))
            if None in (dst, srcp, size):
                return None, "bulk store operands not understood"
            return (f"kl_bulk_store_sync((void*){dst}, (unsigned int){srcp}, "
                    f"(unsigned int){size})"), ""
        return None, f"a bulk copy form the rule does not handle: {inst.split()[0]}"
