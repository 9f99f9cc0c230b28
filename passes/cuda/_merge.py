"""A reduction step that merges a (max, rescaled sum) pair: the online softmax / log-sum-exp merge.

A tree's step may fold two arrays at once as the pair a streaming softmax keeps per thread, a
running maximum `M` and a sum `S` of exponentials taken relative to it:

    M' = max(M_own, M_partner)
    S' = S_own * E(M_own - M') + S_partner * E(M_partner - M')

with `E` an exponential (`exp`, `expf`, `__expf`, `exp2`, `exp2f`), its argument possibly scaled
by a value every thread sees alike (`E((M - M') * c)`: a constant, a kernel's parameter). The
pair stands for the sum of `E(x - M')` over the values folded, so the merge is commutative and
associative and the tree may be reordered (the shuffles' pairing); only the rounding changes,
as it does for a sum.

`online_merge` reads the step from what each array's own slot holds after it, as expressions
over the slots before it (placeholders `klO_<array>` for the own slot, `klP_<array>` for the
partner's: `recognize` writes them, locals of the step inlined), and gives back the merge as
a statement over those placeholders. The statement takes `E(0)` where an operand's maximum
equals the merged one: the same value for every finite maximum, and no NaN from `-inf - -inf`
where both maxima are the same infinity (two threads that saw no value yet; the original tree
meets such a pair only for some pairings, the shuffles for others). No GPU library is
imported here.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from passes.cuda._tree import callee, children, text

_TRIVIA = frozenset({"comment", "preproc_call"})
_EXP = re.compile(r"^(?:(?:std|::)?:*(?:exp|expf|exp2|exp2f)|__expf|hexp|hexp2|h2exp)$")
PLACEHOLDER = re.compile(r"\bkl([OP])_(\w+)\b")
"""An own (`O`) or partner (`P`) slot of an array in `online_merge`'s expressions."""


def _parsed(expr: str):  # noqa: ANN202 — a (KernelIR, node) pair
    from kir import parse  # noqa: PLC0415 — kir is below passes; parsed only for this form

    ir = parse(f"void kl_f() {{ kl_x = {expr}; }}", "cuda")
    stmt = next(n for n in range(len(ir)) if ir.grammar_type_of(n) == "assignment_expression")
    return ir, children(ir, stmt)[-1]


def _kids(ir, nid: int) -> list[int]:  # noqa: ANN001
    return [c for c in children(ir, nid) if ir.grammar_type_of(c) not in _TRIVIA]


def _bare(ir, nid: int) -> int:  # noqa: ANN001
    """`nid` without enclosing parentheses."""
    while ir.grammar_type_of(nid) == "parenthesized_expression" and _kids(ir, nid):
        nid = _kids(ir, nid)[0]
    return nid


def _flat(ir, nid: int) -> str:  # noqa: ANN001
    return re.sub(r"\s+", "", text(ir, _bare(ir, nid)))


def _slot(ir, nid: int) -> tuple[str, str] | None:  # noqa: ANN001
    """(O | P, array) of a placeholder, seen through parentheses (a cast is another value)."""
    m = PLACEHOLDER.fullmatch(text(ir, _bare(ir, nid)).strip())
    return (m.group(1), m.group(2)) if m else None


def _maximum(ir, nid: int, kind: Callable[[str], str | None]) -> tuple[str, str] | None:  # noqa: ANN001
    """The array whose own and partner slots `nid` takes the maximum of, with `O`/`P` order."""
    nid = _bare(ir, nid)
    gtype = ir.grammar_type_of(nid)
    if gtype == "call_expression" and kind(callee(ir, nid)) == "max":
        args = _kids(ir, _kids(ir, nid)[-1])
        slots = [_slot(ir, a) for a in args]
    elif gtype == "conditional_expression":
        cond, yes, no = _kids(ir, nid)
        cond = _bare(ir, cond)
        if ir.grammar_type_of(cond) != "binary_expression" or \
                ir.name_of(cond) not in (">", ">=", "<", "<="):
            return None
        c = _kids(ir, cond)
        if {_flat(ir, c[0]), _flat(ir, c[-1])} != {_flat(ir, yes), _flat(ir, no)}:
            return None
        greater = ir.name_of(cond) in (">", ">=")
        if (_flat(ir, yes) == _flat(ir, c[0])) != greater:
            return None  # a minimum
        slots = [_slot(ir, yes), _slot(ir, no)]
    else:
        return None
    if len(slots) != 2 or None in slots or {s[0] for s in slots} != {"O", "P"} or \
            slots[0][1] != slots[1][1]:  # type: ignore[index]
        return None
    return slots[0][1], "".join(s[0] for s in slots)  # type: ignore[index]


def _constant(token: str, uniform: Callable[[str], bool]) -> bool:
    return re.fullmatch(r"[0-9.]+(?:[eE][-+]?[0-9]+)?[fF]?", token) is not None or uniform(token)


def _term(ir, nid: int, maximum: str, uniform: Callable[[str], bool]  # noqa: ANN001
          ) -> tuple[tuple[str, str], tuple[str, str], int] | None:
    """(sum slot, maximum slot, node of the merged maximum) of a term `S_x * E(M_y - M')`
    (factors in either order; `E`'s argument possibly times a constant)."""
    nid = _bare(ir, nid)
    if ir.grammar_type_of(nid) != "binary_expression" or ir.name_of(nid) != "*":
        return None
    a, b = _kids(ir, nid)[0], _kids(ir, nid)[-1]
    for s, e in ((a, b), (b, a)):
        slot, call = _slot(ir, s), _bare(ir, e)
        if slot is None or ir.grammar_type_of(call) != "call_expression" or \
                not _EXP.match(callee(ir, call)):
            continue
        args = _kids(ir, _kids(ir, call)[-1])
        if len(args) != 1:
            return None
        arg = _bare(ir, args[0])
        if ir.grammar_type_of(arg) == "binary_expression" and ir.name_of(arg) == "*":
            x, y = _kids(ir, arg)[0], _kids(ir, arg)[-1]
            if _constant(_flat(ir, y), uniform):
                arg = _bare(ir, x)
            elif _constant(_flat(ir, x), uniform):
                arg = _bare(ir, y)
            else:
                return None
        if ir.grammar_type_of(arg) != "binary_expression" or ir.name_of(arg) != "-":
            return None
        left, right = _kids(ir, arg)[0], _kids(ir, arg)[-1]
        scaled = _slot(ir, left)
        if scaled is None or _flat(ir, right) != maximum:
            return None
        return slot, scaled, _bare(ir, right)
    return None


def online_merge(after: Mapping[str, str], kind: Callable[[str], str | None],
                 uniform: Callable[[str], bool]) -> tuple[str, str, str] | str:
    """(maximum's array, sum's array, merge statement) of a step whose own slots hold `after`
    (array -> expression over the placeholders) once it ran, or why it is not the merge.
    `kind` names a callee's fold ("max", ...); `uniform` tells a name every thread and every
    step sees alike (a constant, a parameter never written), which may scale `E`'s argument.

    The statement, over the placeholders, writes the merged pair into the own ones:
    `{ const auto kl_mx = M'; klO_S = ...; klO_M = kl_mx; }`."""
    if len(after) != 2:
        return f"the step writes {len(after)} arrays, not a maximum and a sum"
    for m_array, s_array in (tuple(after), tuple(after)[::-1]):
        ir_m, m_node = _parsed(after[m_array])
        found = _maximum(ir_m, m_node, kind)
        if found is None or found[0] != m_array:
            continue
        maximum = _flat(ir_m, m_node)
        ir_s, s_node = _parsed(after[s_array])
        s_node = _bare(ir_s, s_node)
        if ir_s.grammar_type_of(s_node) != "binary_expression" or ir_s.name_of(s_node) != "+":
            return (f"{s_array} is not the sum of two exponentially rescaled terms beside "
                    f"the maximum {m_array}")
        nodes = [_kids(ir_s, s_node)[0], _kids(ir_s, s_node)[-1]]
        terms = [_term(ir_s, k, maximum, uniform) for k in nodes]
        if None in terms or {t[0] for t in terms} != {("O", s_array), ("P", s_array)} or \
                any(t[1] != (t[0][0], m_array) for t in terms):  # type: ignore[index]
            return (f"{s_array}'s terms are not {s_array} of each side times an exponential "
                    f"of that side's {m_array} less the merged maximum")
        guarded = [f"(kl{t[0][0]}_{m_array} == kl_mx ? kl{t[0][0]}_{s_array} : "  # type: ignore[index]
                   f"{_replaced(ir_s, k, t[2])})" for k, t in zip(nodes, terms)]  # type: ignore[index]
        return m_array, s_array, (f"{{ const auto kl_mx = {after[m_array]}; klO_{s_array} = "
                                  f"{guarded[0]} + {guarded[1]}; klO_{m_array} = kl_mx; }}")
    return "no array of the step is the maximum of its own and its partner's slots"


def _replaced(ir, term: int, m_node: int) -> str:  # noqa: ANN001
    """`term`'s text with the merged maximum inside it (node `m_node`) named `kl_mx`."""
    src = ir.source
    t0, t1 = ir.span_of(term).start, ir.span_of(term).end
    m0, m1 = ir.span_of(m_node).start, ir.span_of(m_node).end
    return (src[t0:m0] + b"kl_mx" + src[m1:t1]).decode()
