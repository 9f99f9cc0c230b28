"""Warp-shuffle exchange (`__shfl_down_sync` & co.) <-> the same exchange through shared memory.

De-optimization rewrites one shuffle: every lane publishes its value to a shared array, the
warp synchronizes, the lane reads its partner's slot, and the warp synchronizes again before the
slot can be overwritten. Partner lanes follow the shuffle's definition (down: lane + delta when
it stays in the warp, else the lane itself; up: lane - delta when >= 0; xor: lane ^ mask;
indexed: the source lane), so a tree reduction or scan built from shuffles keeps its result.
Warps are formed from the linear thread index, which the shared slot is indexed by.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from passes._source import ByteEdit, finish, make_site
from passes.base import Category, Pass, PassContext, PassResult, Site, Skipped
from passes.cuda._c import CSource, find_iter
from passes.cuda.annotations import CUDA

if TYPE_CHECKING:
    from anchors import AnchorIndex
    from kir import KernelIR

_SHFL = re.compile(r"\b__shfl_(up_|down_|xor_|)sync\s*\(")
_LINEAR = "(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z))"
_PARTNER = {
    "down_": "((({t}) & 31u) + ({d}) < 32u ? ({t}) + ({d}) : ({t}))",
    "up_": "((({t}) & 31u) >= (unsigned)({d}) ? ({t}) - ({d}) : ({t}))",
    "xor_": "(({t}) ^ ({d}))",
    "": "((({t}) & ~31u) | (({d}) & 31u))",
}


@dataclass(frozen=True, slots=True)
class _Shuffle:
    call_start: int
    call_end: int
    kind: str
    mask: str
    value: str
    delta: str
    stmt_start: int
    stmt_end: int
    braced: bool  # the statement is the unbraced body of a loop/branch


@dataclass(frozen=True, slots=True)
class WarpShuffleReduce(Pass):
    """Warp shuffles (register exchange) <-> a shared-memory exchange per step."""

    before: str = ""
    """The exact statement to restore (recorded by a de-optimization)."""
    after: str = ""
    """What the de-optimization wrote in its place."""

    name: ClassVar[str] = "warp-shuffle-reduce"
    category: ClassVar[Category] = Category.COMPUTE
    summary: ClassVar[str] = "warp-shuffle reductions/scans <-> shared-memory exchange"
    languages: ClassVar[tuple[str, ...]] = CUDA
    platforms: ClassVar[tuple[str, ...]] = ("cuda",)
    preconditions: ClassVar[tuple[str, ...]] = ("arch >= sm_30",)

    def _shuffles(self, src: CSource) -> list[_Shuffle | tuple[int, int, str]]:
        out: list = []
        for m in find_iter(_SHFL, src):
            paren = m.end() - 1
            end = src.close(paren)
            args = [src.text[a:b].strip() for a, b in src.args(paren)]
            stmt_start = src.statement_start(m.start())
            stmt_end = src.statement_end(stmt_start)
            head = src.code[stmt_start:stmt_start + 8]
            if len(args) not in (3, 4) or (len(args) == 4 and args[3] not in ("32", "warpSize")):
                out.append((m.start(), end, "a shuffle over a sub-warp width"))
                continue
            if not re.fullmatch(r"[A-Za-z_][\w.]*(\[[^\]]+\])?", args[1]):
                out.append((m.start(), end, "the shuffled value is not a variable"))
                continue
            if re.match(r"(for|if|while|switch|return|do)\b", head):
                out.append((m.start(), end, "the shuffle sits in a condition or return"))
                continue
            before = src.code[:stmt_start].rstrip()
            braced = before.endswith(")") or re.search(r"\b(else|do)$", before) is not None
            out.append(_Shuffle(m.start(), end, m.group(1), args[0], args[1], args[2],
                                stmt_start, stmt_end, braced))
        return out

    def sites(self, ir: KernelIR, index: AnchorIndex | None = None) -> list[Site]:
        src = CSource(ir)
        out = []
        for s in self._shuffles(src):
            if isinstance(s, _Shuffle):
                out.append(make_site(self.name, ir, index, src.bspan(s.stmt_start, s.stmt_end),
                                     True, {"kind": s.kind.rstrip("_") or "idx", "value": s.value},
                                     src.bspan(s.call_start, s.call_end)))
        for m in re.finditer(r"__shared__ decltype\([^)]*\) (kl_shfl\d+)\[1024\];", src.text):
            start = m.start() - 2 if src.text[m.start() - 2:m.start()] == "{ " else m.start()
            fn = src.function_at(m.start())
            end = fn.body_end if fn is not None else len(src.text)
            out.append(make_site(self.name, ir, index, src.bspan(start, end), False,
                                 {"buffer": m.group(1)}, src.bspan(m.start(), m.end())))
        return out

    def deoptimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        src = CSource(ir)
        for s in self._shuffles(src):
            if isinstance(s, tuple) or src.bspan(s.stmt_start, s.stmt_end) != tuple(site.span):
                continue
            n = len(set(re.findall(r"kl_shfl(\d+)", src.text)))
            buf = f"kl_shfl{n}"
            t = f"kl_t{n}"
            partner = _PARTNER[s.kind].format(t=t, d=s.delta)
            stmt = (src.text[s.stmt_start:s.call_start] + f"{buf}[{partner}]"
                    + src.text[s.call_end:s.stmt_end])
            text = (f"__shared__ decltype({s.value}) {buf}[1024]; "
                    f"const unsigned {t} = {_LINEAR}; "
                    f"{buf}[{t}] = {s.value}; __syncwarp({s.mask}); {stmt} __syncwarp({s.mask});")
            if s.braced:
                text = "{ " + text + " }"
            return finish(ir, site, [src.edit(s.stmt_start, s.stmt_end, text)], options={
                "before": src.text[s.stmt_start:s.stmt_end], "after": text})
        for s in self._shuffles(src):
            if isinstance(s, tuple) and src.bspan(s[0], s[1])[0] >= site.span[0] \
                    and src.bspan(s[0], s[1])[1] <= site.span[1]:
                return Skipped(s[2], {"site": site.anchor})
        return Skipped("no warp shuffle at the site", {"site": site.anchor})

    def optimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        if not self.before:
            return Skipped("restoring a shuffle needs the recorded statement", {})
        results, skip = self.check(ctx)
        if skip:
            return skip
        region = ir.source[site.span[0]:site.span[1]]
        needle = self.after.encode("utf-8")
        if not needle or not region.startswith(needle):
            return Skipped("the recorded shared-memory exchange is not at the site", {})
        start = site.span[0]
        return finish(ir, site, [ByteEdit(start, start + len(needle), self.before)],
                      preconditions=results)

