"""16-byte staging: a global -> shared copy of 2-byte elements (bf16 / fp16 / 16-bit integers),
one element per thread per iteration of a staging loop of its own, rewritten into copies of 8
elements (16 bytes) per thread, so that fewer, wider loads fill the tile and `cp.async` (which
moves 4, 8 or 16 bytes) can take the copy.

Found by role (`recognize.stagings`), by what the copy does, never by names. The copy must:
- move bytes (no conversion), read one global element through a subscript and write one shared
  element, and be the only thing its loop does (besides declaring the locals it reads);
- run in a `for (v = v0; v < E; v += S)` loop (or `v <= E`, `v + P < E`, `v + P <= E`; `++v`)
  of constant trip count (the same for every thread)
  in a block whose size the launch gives (the host, `<<< >>>`) or, for a GEMM micro-kernel, the
  block its thread map needs (`gemm_eval.find_gemm_tiles`); the block's thread count is a
  multiple of 8;
- write the element `c0 + t + T * i` of the shared array for the thread of linear index `t` in
  iteration `i` (T threads), so that the T * I elements the loop writes are contiguous, and read
  global elements that are consecutive for 8 consecutive threads of one iteration starting at a
  multiple of 8 (checked by evaluating the element expressions, the locals they read expanded,
  at sample points of the thread, the iteration and the run-time values).

The loop becomes a loop over 8-element chunks (chunk `c` of the thread `t` is
`t, t + T, ...`): the chunk's first element is the one thread `8c % T` copied in iteration
`8c / T`, its element `j` the one of thread `8c % T + j`; the user's element expressions (locals
expanded, the thread index and the loop variable replaced) say where each element comes from.
A chunk is copied with one 16-byte load and store where all 8 guards hold and the global address
is 16-byte aligned (checked at run time); otherwise element by element with the user's guards
and fill (ragged edges, misaligned rows). The shared array gets `__align__(16)`.

Preconditions the rewrite does not check: the kernel's other statements do not depend on which
thread copied which element (the loop is followed by a barrier before the tile is read, which
`recognize.stagings` requires of a staging).
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass

from kir import KernelIR
from passes.base import Skipped
from passes.cuda._tree import children, declared_names, subtree, text
from passes.cuda.recognize import (Staging, Unit, element_bytes, expand_locals, for_parts,
                                   loop_var, stagings, written_names)

CHUNK = 8
"""Elements per 16-byte copy (2-byte elements)."""
_PROBES = 48
_NAME = re.compile(r"(?<![.\w])[A-Za-z_]\w*(?:\s*\.\s*[xyz])?")
_TRIVIA = ("comment", "{", "}")


@dataclass(frozen=True, slots=True)
class VectorStaging:
    """A staging loop the rewrite can take: `loop` its span, `threads` the block's (x, y),
    `count` the elements the loop writes, `offset` the first (`c0`), `trips` its iterations."""

    staging: Staging
    loop: tuple[int, int]
    var: str
    start: str
    step: str
    block: tuple[int, int]
    count: int
    offset: int
    trips: int
    locals_: tuple[tuple[str, str], ...] = ()
    """The loop body's own locals the copy reads (name, initializer), innermost last."""

    @property
    def threads(self) -> int:
        return self.block[0] * self.block[1]


def staging_loops(ir: KernelIR, block: tuple[int, int] | None = None
                  ) -> list[tuple[Staging, VectorStaging | Skipped]]:
    """Every 2-byte staging of `ir` with its plan, or why the rewrite cannot take it."""
    unit = Unit(ir)
    found, _refused = stagings(unit)
    out: list[tuple[Staging, VectorStaging | Skipped]] = []
    for st in found:
        if element_bytes(st.element) != 2 or st.width != 1:
            continue
        out.append((st, _plan(unit, st, block)))
    return out


def _node(ir: KernelIR, span: tuple[int, int], types: tuple[str, ...]) -> int | None:
    for nid in range(len(ir)):
        s = ir.span_of(nid)
        if (s.start, s.end) == tuple(span) and ir.grammar_type_of(nid) in types:
            return nid
    return None


def _function(ir: KernelIR, nid: int) -> int:
    return next(a for a in ir.ancestors(nid) if ir.grammar_type_of(a) == "function_definition")


def _block(unit: Unit, st: Staging, block: tuple[int, int] | None) -> tuple[int, int] | str:
    if block is not None:
        return block
    launch = unit.launch_block()
    if launch.dims is not None:
        if launch.dims[2] != 1:
            return "the launch's block is 3-D"
        return launch.dims[0], launch.dims[1]
    from passes.cuda.gemm_eval import find_gemm_tiles  # noqa: PLC0415  (heavy; only here)

    tiles, _ = find_gemm_tiles(unit.ir, kernels=frozenset({st.kernel}))
    if len(tiles) == 1:
        return tiles[0].block
    return f"the block size is not known ({launch.reason})"


def _plan(unit: Unit, st: Staging, block: tuple[int, int] | None) -> VectorStaging | Skipped:
    ir = unit.ir
    if st.converted:
        return Skipped("the copy converts what it reads", {})
    if st.loop is None:
        return Skipped("the copy is in no loop", {})
    loop = _node(ir, st.loop, ("for_statement",))
    if loop is None:
        return Skipped("the copy's loop is not a for loop", {})
    fn = _function(ir, loop)
    var = loop_var(ir, loop)
    init, cond, update = for_parts(ir, loop)
    if var is None or init is None or cond is None or update is None:
        return Skipped("the copy's loop is not `for (v = a; v < b; v += s)`", {})
    body = children(ir, loop)[-1]
    if any(text(ir, n).startswith("__syncthreads") for n in subtree(ir, body)
           if ir.grammar_type_of(n) == "call_expression"):
        return Skipped("the copy runs in the K loop, not in a staging loop of its own", {})
    mine = set(st.parts) | {st.store}
    own: list[tuple[str, str]] = []
    statements = [c for c in children(ir, body) if ir.grammar_type_of(c) not in _TRIVIA] \
        if ir.grammar_type_of(body) == "compound_statement" else [body]
    for stmt in statements:
        span = (ir.span_of(stmt).start, ir.span_of(stmt).end)
        if span in mine:
            continue
        if ir.grammar_type_of(stmt) != "declaration" or "=" not in text(ir, stmt):
            return Skipped("the staging loop does more than the copy", {})
        for name, _ident, value in declared_names(ir, stmt):
            if value is None:
                return Skipped("the staging loop declares a local without a value", {})
            own.append((name, text(ir, value)))
    if var in written_names(ir, body):
        return Skipped("the loop body writes the loop variable", {})
    m_init = re.fullmatch(rf"\s*(?:[\w:]+\s+)*{re.escape(var)}\s*=\s*(.+?);?\s*",
                          text(ir, init), re.S)
    m_cond = re.fullmatch(rf"\s*{re.escape(var)}\s*(?:\+\s*(?P<plus>[^<]+?)\s*)?(?P<op><=?)\s*(.+?)\s*",
                          text(ir, cond), re.S)
    m_step = re.fullmatch(rf"\s*{re.escape(var)}\s*\+=\s*(.+?)\s*", text(ir, update), re.S)
    increment = re.fullmatch(rf"\s*(?:\+\+\s*{re.escape(var)}|{re.escape(var)}\s*\+\+)\s*",
                             text(ir, update))
    if m_init is None or m_cond is None or (m_step is None and increment is None):
        return Skipped("the copy's loop is not `for (v = a; v < b; v += s)`", {})
    start = expand_locals(unit, fn, m_init.group(1))
    step_text = m_step.group(1) if m_step is not None else "1"
    step = unit.value(expand_locals(unit, fn, step_text))
    # v + p < b  <=>  v < b - p;  v + p <= b  <=>  v < b - p + 1
    bound = unit.value(expand_locals(unit, fn, f"({m_cond.group(3)}) - ({m_cond.group('plus') or 0})"
                                     f" + {int(m_cond.group('op') == '<=')}"))
    if step is None or step <= 0 or bound is None:
        return Skipped("the staging loop's bound and step are not compile-time constants", {})
    shape = _block(unit, st, block)
    if isinstance(shape, str):
        return Skipped(shape, {})
    threads = shape[0] * shape[1]
    if threads % CHUNK:
        return Skipped(f"the block's {threads} threads are not a multiple of {CHUNK}", {})
    arr = unit.shared_arrays(fn).get(st.array) or unit.shared_arrays().get(st.array)
    dst = _flat_index(st.dst, arr.extents if arr is not None else ())
    src = re.fullmatch(r"\s*[A-Za-z_]\w*\s*\[(.+)\]\s*", st.src, re.S)
    if dst is None or src is None or arr is None or arr.dynamic:
        return Skipped("the element expressions are not subscripts of a static shared array "
                       "and a global pointer", {})
    expand = lambda e: expand_locals(unit, fn, _inline(e, own))  # noqa: E731
    exprs = {"d": expand(dst), "g": expand(src.group(1)), "v0": start}
    # every name left after expansion must be the same for all threads: a chunk is copied by
    # another thread than the one whose expressions these are
    left = {n for e in (*exprs.values(), expand(st.guard or ""), expand(st.fill or ""))
            for n in re.findall(r"(?<![.\w])[A-Za-z_]\w*", e)} - {var}
    varying = sorted(left & _thread_locals(unit, fn))
    if varying:
        return Skipped(f"the copy reads {', '.join(varying)}, set per thread in a way not "
                       "expanded (several assignments)", {})
    found = _fit(unit, st, exprs, var, step, bound, shape, (ir.span_of(loop).start,
                                                              ir.span_of(loop).end), step_text)
    if isinstance(found, VectorStaging):
        return VectorStaging(**{f: getattr(found, f) for f in found.__dataclass_fields__
                                if f != "locals_"}, locals_=tuple(own))
    return found


def _thread_locals(unit: Unit, fn: int) -> set[str]:
    """The locals of `fn` some declaration or assignment of which reads the thread index."""
    ir = unit.ir
    out: set[str] = set()
    for nid in subtree(ir, fn):
        kind = ir.grammar_type_of(nid)
        if kind == "declaration":
            for name, _ident, value in declared_names(ir, nid):
                if value is not None and "threadIdx" in expand_locals(unit, fn, text(ir, value)):
                    out.add(name)
        elif kind == "assignment_expression":
            lhs, rhs = children(ir, nid)[0], children(ir, nid)[-1]
            if "threadIdx" in expand_locals(unit, fn, text(ir, rhs)):
                out.add(text(ir, lhs).split("[")[0].strip())
    return out


def _inline(expr: str, own: list[tuple[str, str]]) -> str:
    """`expr` with the loop body's locals replaced by their initializers (later ones first:
    an initializer may read an earlier local)."""
    for name, init in reversed(own):
        expr = re.sub(rf"(?<![.\w]){re.escape(name)}(?![\w(])", f"({init})", expr)
    return expr


def _flat_index(dst: str, extents: tuple[int | None, ...]) -> str | None:
    m = re.fullmatch(r"\s*([A-Za-z_]\w*)\s*((?:\[[^\[\]]+\]\s*)+)", dst)
    if m is None:
        return None
    idx = re.findall(r"\[([^\[\]]+)\]", m.group(2))
    if len(idx) != len(extents) or any(e is None for e in extents[1:]):
        return None
    flat = f"({idx[0]})"
    for i, ext in zip(idx[1:], extents[1:]):
        flat = f"({flat}) * {ext} + ({i})"
    return flat


def _thread_env(t: int, block: tuple[int, int]) -> dict[str, int]:
    return {"threadIdx.x": t % block[0], "threadIdx.y": t // block[0], "threadIdx.z": 0,
            "blockDim.x": block[0], "blockDim.y": block[1], "blockDim.z": 1}


def _value(unit: Unit, expr: str, env: dict[str, int]) -> int | None:
    """An integer expression of `env`'s names and the unit's constants, or None."""
    expr = re.sub(r"\(\s*(?:const\s+)?(?:size_t|int|unsigned(?:\s+int)?|long(?:\s+long)?)\s*\)",
                  "", expr)
    expr = re.sub(r"static_cast\s*<[^<>]*>", "", expr)
    out = _NAME.sub(lambda m: str(env.get(re.sub(r"\s+", "", m.group(0)), m.group(0))), expr)
    return unit.value(out)


def _fit(unit: Unit, st: Staging, exprs: dict[str, str], var: str, step: int, bound: int,
         block: tuple[int, int], loop: tuple[int, int], step_text: str) -> VectorStaging | Skipped:
    threads = block[0] * block[1]
    names = {re.sub(r"\s+", "", n) for e in exprs.values() for n in _NAME.findall(e)}
    free = {n for n in names if unit.value(n) is None and n != var
            and not n.startswith(("threadIdx", "blockDim"))}
    rng = random.Random(0)

    def at(t: int, i: int, env: dict[str, int]) -> tuple[int | None, int | None]:
        e = env | _thread_env(t, block)
        v0 = _value(unit, exprs["v0"], e)
        if v0 is None:
            return None, None
        e[var] = v0 + i * step
        return _value(unit, exprs["d"], e), _value(unit, exprs["g"], e)

    trips = None
    for t in {0, threads - 1, *(rng.randrange(threads) for _ in range(8))}:
        v0 = _value(unit, exprs["v0"], _thread_env(t, block))
        if v0 is None:
            return Skipped("the loop's start is not integer arithmetic of the thread index", {})
        n = max(0, -(-(bound - v0) // step))
        if trips is not None and n != trips:
            return Skipped("the staging loop's trip count differs between threads", {})
        trips = n
    if not trips:
        return Skipped("the staging loop runs no iteration", {})
    count = threads * trips
    if count % CHUNK:
        return Skipped(f"the loop copies {count} elements, not a multiple of {CHUNK}", {})
    env0 = {n: rng.randrange(1, 512) for n in free}
    offset, _ = at(0, 0, env0)
    if offset is None:
        return Skipped("an element expression is not integer arithmetic", {})
    if offset % CHUNK:
        return Skipped("the tile's first element is not 16-byte aligned in shared memory", {})
    for _ in range(_PROBES):
        env = {n: rng.randrange(1, 512) for n in free}
        t0 = CHUNK * rng.randrange(threads // CHUNK)
        i = rng.randrange(trips)
        own = [at(t0 + j, i, env) for j in range(CHUNK)]
        if any(d is None or g is None for d, g in own):
            return Skipped("an element expression is not integer arithmetic", {})
        d0, g0 = own[0]
        if any(d != offset + t0 + j + threads * i for j, (d, _g) in enumerate(own)):
            return Skipped("the shared element is not `c0 + thread + threads * iteration`", {})
        if any(g != g0 + j for j, (_d, g) in enumerate(own)):
            return Skipped("8 consecutive threads do not read 8 consecutive global elements", {})
    return VectorStaging(st, loop, var, exprs["v0"], step_text, block, count, offset, trips)


# ---------------------------------------------------------------------------------------------
# the rewrite


def _lane(expr: str, plan: VectorStaging, lane: str) -> str:
    """`expr` (locals expanded) for the element `lane` of the chunk: the thread index is the
    chunk's thread plus `lane`, the loop variable its iteration's value."""
    t = f"(kl_sv_t + {lane})"
    bx = plan.block[0]
    out = re.sub(r"\bthreadIdx\s*\.\s*x\b", f"({t} % {bx})" if plan.block[1] > 1 else t, expr)
    out = re.sub(r"\bthreadIdx\s*\.\s*y\b", f"({t} / {bx})", out)
    out = re.sub(r"\bblockDim\s*\.\s*x\b", str(bx), out)
    out = re.sub(r"\bblockDim\s*\.\s*y\b", str(plan.block[1]), out)
    start = re.sub(r"\bthreadIdx\s*\.\s*x\b", f"({t} % {bx})" if plan.block[1] > 1 else t,
                   plan.start)
    start = re.sub(r"\bthreadIdx\s*\.\s*y\b", f"({t} / {bx})", start)
    return re.sub(rf"(?<![.\w]){re.escape(plan.var)}(?!\w)",
                  f"(({start}) + kl_sv_i * ({plan.step}))", out)


def vectorize(ir: KernelIR, plan: VectorStaging) -> str:
    """The source with the staging loop of `plan` copying 16 bytes per thread and chunk."""
    unit = Unit(ir)
    st = plan.staging
    loop = _node(ir, plan.loop, ("for_statement",))
    assert loop is not None
    fn = _function(ir, loop)
    expand = lambda e: expand_locals(unit, fn, _inline(e, list(plan.locals_)))  # noqa: E731
    dst, src = expand(st.dst), expand(st.src)
    guard = expand(st.guard) if st.guard else "true"
    value = (f"({_lane(guard, plan, 'kl_sv_e')}) ? {_lane(src, plan, 'kl_sv_e')} : "
             f"{expand(st.fill or '0')}" if st.guard else _lane(src, plan, "kl_sv_e"))
    linear = "threadIdx.x" if plan.block[1] == 1 else \
        f"(threadIdx.x + {plan.block[0]} * threadIdx.y)"
    pad = " " * (plan.loop[0] - ir.source.rfind(b"\n", 0, plan.loop[0]) - 1)
    lines = [
        f"for (int kl_sv_c = {linear}; kl_sv_c < {plan.count // CHUNK}; kl_sv_c += {plan.threads}) {{",
        f"  // 16-byte staging: {CHUNK} elements per copy; element j of chunk c is the one thread "
        f"(8c % {plan.threads}) + j copied in iteration 8c / {plan.threads}",
        f"  const int kl_sv_t = kl_sv_c * {CHUNK} % {plan.threads}, "
        f"kl_sv_i = kl_sv_c * {CHUNK} / {plan.threads};",
        "  bool kl_sv_whole = (reinterpret_cast<unsigned long long>(&("
        f"{_lane(src, plan, '0')})) & 15ull) == 0;",
        f"  for (int kl_sv_e = 0; kl_sv_e < {CHUNK}; ++kl_sv_e)",
        f"    kl_sv_whole = kl_sv_whole && ({_lane(guard, plan, 'kl_sv_e')});",
        "  if (kl_sv_whole) {",
        f"    *reinterpret_cast<uint4*>(&({_lane(dst, plan, '0')})) = "
        f"*reinterpret_cast<const uint4*>(&({_lane(src, plan, '0')}));",
        "  } else {",
        f"    for (int kl_sv_e = 0; kl_sv_e < {CHUNK}; ++kl_sv_e)",
        f"      {_lane(dst, plan, 'kl_sv_e')} = {value};",
        "  }",
        "}",
    ]
    new = ("\n" + pad).join(lines).encode("utf-8")
    rewritten = (ir.source[:plan.loop[0]] + new + ir.source[plan.loop[1]:]).decode("utf-8")
    return _aligned(rewritten, st.array)


def _aligned(source: str, array: str) -> str:
    """`source` with the declaration of shared `array` aligned to 16 bytes."""
    m = re.search(rf"__shared__(?P<mid>[^;]*?)\b{re.escape(array)}\s*\[", source)
    if m is None or "__align__" in m.group(0):
        return source
    return source[:m.start()] + "__shared__ __align__(16)" + source[m.start() + 10:]


def vectorize_all(ir: KernelIR, block: tuple[int, int] | None = None
                  ) -> tuple[str, list[str]]:
    """The source with every staging loop the rewrite can take copying 16 bytes per thread,
    and the reasons for the 2-byte stagings it left (one line each)."""
    import kir  # noqa: PLC0415

    reasons: list[str] = []
    current = ir
    while True:
        plans = staging_loops(current, block)
        todo = [p for _st, p in plans if isinstance(p, VectorStaging)]
        if not todo:
            reasons = [f"{st.array} <- {st.source}: {p.reason}" for st, p in plans
                       if isinstance(p, Skipped) and "kl_sv_" not in st.dst]
            return current.text, reasons
        current = kir.parse(vectorize(current, todo[0]), "cuda")
