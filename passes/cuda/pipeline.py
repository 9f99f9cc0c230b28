"""`cp.async` multi-stage pipelines <-> synchronous shared-memory staging.

De-optimization turns every asynchronous copy of a translation unit into a synchronous one at
the point where it was issued, and the commit/wait operations into compiler memory barriers.
This keeps the program's meaning: a pipeline never reads a stage between issuing its copy and
waiting for it, so the data simply arrives earlier; the stage ring stays as it is. Handled
forms: inline PTX `cp.async.{ca,cg}.shared.global [dst], [src], N[, src_size]`,
`cp.async.commit_group`, `cp.async.wait_group N` / `wait_all`, and the CUDA pipeline
primitives `__pipeline_memcpy_async`, `__pipeline_commit`, `__pipeline_wait_prior`.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from passes._source import ByteEdit, finish, make_site
from passes.base import Category, Pass, PassContext, PassResult, Site, Skipped
from passes.cuda._c import CSource, asm_operands, find_iter
from passes.cuda.annotations import CUDA

if TYPE_CHECKING:
    from anchors import AnchorIndex
    from kir import KernelIR

_ASM = re.compile(r"\basm\s*(?:volatile\s*|__volatile__\s*)?\(")
_COPY = re.compile(r"cp\.async\.(?:ca|cg)\.shared(?:::cta)?\.global(?:\.L2::\w+)?\s*\[\s*%(\d+)\s*\]\s*,"
                   r"\s*\[\s*%(\d+)\s*\]\s*,\s*(\d+)\s*(?:,\s*%(\d+))?\s*;")
_SYNC_ONLY = re.compile(r"cp\.async\.(?:commit_group|wait_group|wait_all)\b")
_PRIMS = re.compile(r"\b__pipeline_(memcpy_async|commit|wait_prior)\s*\(")
_BARRIER = 'asm volatile("" ::: "memory");'


def _byte_copy(dst_shared: str | None, dst_ptr: str | None, src: str, size: str, valid: str) -> str:
    """A synchronous copy of `size` bytes (bytes at or past `valid` are zero-filled)."""
    load = (f"const unsigned char* kl_src = reinterpret_cast<const unsigned char*>({src}); "
            f"for (int kl_i = 0; kl_i < ({size}); ++kl_i) {{ "
            f"unsigned int kl_b = kl_i < (int)({valid}) ? kl_src[kl_i] : 0u; ")
    if dst_shared is not None:
        store = (f'asm volatile("st.shared.u8 [%0], %1;" :: "r"((unsigned)({dst_shared}) + kl_i), '
                 f'"r"(kl_b) : "memory"); }}')
    else:
        store = f"reinterpret_cast<unsigned char*>({dst_ptr})[kl_i] = (unsigned char)kl_b; }}"
    return "{ " + load + store + " }"


@dataclass(frozen=True, slots=True)
class _Op:
    start: int
    end: int
    replacement: str | None  # None: a form the rule cannot make synchronous
    why: str = ""


@dataclass(frozen=True, slots=True)
class CpAsyncPipeline(Pass):
    """Asynchronous multi-stage `cp.async` staging <-> synchronous copies."""

    pairs: str = ""
    """JSON list of [original, replacement] texts in source order (recorded by a
    de-optimization); restoring them re-derives the pipeline."""

    name: ClassVar[str] = "cp-async-pipeline"
    category: ClassVar[Category] = Category.STAGING
    summary: ClassVar[str] = "cp.async multi-stage global->shared pipeline <-> synchronous staging"
    requires: ClassVar[tuple[str, ...]] = ("smem-staged",)
    provides: ClassVar[tuple[str, ...]] = ("pipelined",)
    languages: ClassVar[tuple[str, ...]] = CUDA
    platforms: ClassVar[tuple[str, ...]] = ("cuda",)
    preconditions: ClassVar[tuple[str, ...]] = ("arch >= sm_80",)

    def _ops(self, src: CSource) -> list[_Op]:
        ops = []
        for m in find_iter(_ASM, src):
            end = src.close(m.end() - 1)
            stmt_end = end + 1 if src.code[end:end + 1] == ";" else end
            body = src.text[m.end():end - 1]
            template = "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', body.split(":")[0]))
            copy = _COPY.search(template)
            if copy:
                operands = asm_operands(src, m.end() - 1)
                dst, srcp, size, valid = copy.group(1), copy.group(2), copy.group(3), copy.group(4)
                try:
                    d, s = operands[int(dst)], operands[int(srcp)]
                    v = operands[int(valid)] if valid is not None else size
                except (IndexError, ValueError):
                    ops.append(_Op(m.start(), stmt_end, None, "cp.async operands not understood"))
                    continue
                ops.append(_Op(m.start(), stmt_end, _byte_copy(d, None, s, size, v)))
            elif _SYNC_ONLY.search(template):
                ops.append(_Op(m.start(), stmt_end, _BARRIER))
            elif "cp.async" in template and "bulk" not in template:
                ops.append(_Op(m.start(), stmt_end, None, "an unhandled cp.async form"))
        for m in find_iter(_PRIMS, src):
            end = src.close(m.end() - 1)
            stmt_end = end + 1 if src.code[end:end + 1] == ";" else end
            if m.group(1) == "memcpy_async":
                args = [src.text[a:b].strip() for a, b in src.args(m.end() - 1)]
                if len(args) < 3:
                    ops.append(_Op(m.start(), stmt_end, None, "__pipeline_memcpy_async arity"))
                    continue
                valid = f"({args[2]}) - ({args[3]})" if len(args) > 3 else args[2]
                ops.append(_Op(m.start(), stmt_end, _byte_copy(None, args[0], args[1], args[2], valid)))
            else:
                ops.append(_Op(m.start(), stmt_end, _BARRIER))
        return sorted(ops, key=lambda o: o.start)

    def sites(self, ir: KernelIR, index: AnchorIndex | None = None) -> list[Site]:
        src = CSource(ir)
        ops = self._ops(src)
        out = []
        if any(o.replacement != _BARRIER for o in ops):
            span = src.bspan(ops[0].start, ops[-1].end)
            out.append(make_site(self.name, ir, index, span, True,
                                 {"copies": sum(o.replacement != _BARRIER for o in ops),
                                  "ops": len(ops)}, src.bspan(ops[0].start, ops[0].end)))
        copies = [m.start() for m in re.finditer(r"const unsigned char\* kl_src = ", src.text)]
        if copies:
            out.append(make_site(self.name, ir, index, (0, len(ir.source)), False,
                                 {"copies": len(copies)}, src.bspan(copies[0], copies[0] + 10)))
        return out

    def deoptimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        src = CSource(ir)
        ops = self._ops(src)
        if not ops or src.bspan(ops[0].start, ops[-1].end) != tuple(site.span):
            return Skipped("no cp.async pipeline at the site", {"site": site.anchor})
        bad = [o for o in ops if o.replacement is None]
        if bad:
            return Skipped(bad[0].why, {"line": src.text.count("\n", 0, bad[0].start) + 1})
        edits = [src.edit(o.start, o.end, o.replacement) for o in ops]
        pairs = [[src.text[o.start:o.end], o.replacement] for o in ops]
        return finish(ir, site, edits, options={"pairs": json.dumps(pairs)})

    def optimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        if not self.pairs:
            return Skipped("restoring a cp.async pipeline needs the recorded copies", {})
        results, skip = self.check(ctx)
        if skip:
            return skip
        pairs = json.loads(self.pairs)
        text = ir.source
        pos, edits = site.span[0], []
        for before, after in pairs:
            needle = after.encode("utf-8")
            at = text.find(needle, pos, site.span[1])
            if at < 0:
                return Skipped("the recorded synchronous copies are not in the kernel", {})
            edits.append(ByteEdit(at, at + len(needle), before))
            pos = at + len(needle)
        return finish(ir, site, edits, preconditions=results)
