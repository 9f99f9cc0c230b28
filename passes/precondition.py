"""The precondition language: parse and evaluate `K % BLOCK_K == 0 and dtype in {bf16, fp16}`.

The grammar is `grammars/precondition.lark`. Evaluation is three-valued: a fact the table does
not hold makes the sub-expression *unknown* (`None`), and `and` / `or` / `not` follow Kleene's
logic, so `unknown and false` is false and `unknown or true` is true. A result carries the
facts that decided it: for `a and b` with `a` false, only `a`'s facts.

Values: integers and floats, strings, symbols (bare names in a set literal, and dtype names
where no fact has that name), booleans and arch levels. `sm_80` is the arch level 80 (`sm_90a`
is 90); a fact named `arch` (or any fact whose value looks like `sm_NN`) compares as a level.

An unparsable precondition, an unknown function or an operation on values of the wrong kind
raises `kir.errors.QueryError`.
"""
from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from kir.errors import QueryError

_GRAMMAR = Path(__file__).resolve().parent.parent / "grammars" / "precondition.lark"

# Names that mean themselves when no fact is called so (dtype names of the cases and Triton).
DTYPE_SYMBOLS = frozenset({
    "fp8", "fp8e4m3", "fp8e5m2", "fp16", "bf16", "tf32", "fp32", "fp64",
    "int8", "uint8", "int16", "int32", "int64", "bool",
})

_ARCH = re.compile(r"^sm_(\d+)[a-z]?$")


@dataclass(frozen=True, slots=True)
class Arch:
    """An arch level (`sm_80` -> 80); compares with arch levels and integers."""

    level: int

    def __str__(self) -> str:
        return f"sm_{self.level}"


@dataclass(frozen=True, slots=True)
class Symbol:
    """A bare name used as a value (`bf16` in `{bf16, fp16}`); equal to the same string."""

    name: str

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True, slots=True)
class PreconditionResult:
    """`value` is True, False or None (unknown: a fact was missing); `facts` are the facts
    that decided it (name -> value as found in the table; missing ones listed in `missing`)."""

    expr: str
    value: bool | None
    facts: Mapping[str, Any]
    missing: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The `{"expr", "value", "facts"}` record lineage transitions store."""
        return {"expr": self.expr, "value": self.value, "facts": _jsonable(dict(self.facts)),
                **({"missing": list(self.missing)} if self.missing else {})}


@functools.lru_cache(maxsize=1)
def _parser() -> Any:
    import lark  # noqa: PLC0415 — only needed when a precondition is parsed

    return lark.Lark(_GRAMMAR.read_text(), parser="lalr", start="start",
                     propagate_positions=False, maybe_placeholders=False)


@functools.lru_cache(maxsize=512)
def parse(expr: str) -> Any:
    """The parse tree of `expr`; raises QueryError when it does not parse."""
    import lark  # noqa: PLC0415

    if not isinstance(expr, str) or not expr.strip():
        raise QueryError("empty precondition")
    try:
        return _parser().parse(expr)
    except lark.exceptions.LarkError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise QueryError(f"bad precondition {expr!r}: {first}") from None


def validate(expr: str) -> None:
    """Raise QueryError if `expr` does not parse or calls an unknown function."""
    tree = parse(expr)
    for call in tree.find_data("call"):
        fname = str(call.children[0])
        if fname not in _FUNCTIONS:
            raise QueryError(f"bad precondition {expr!r}: unknown function '{fname}' "
                             f"(known: {', '.join(sorted(_FUNCTIONS))})")


def names(expr: str) -> set[str]:
    """The fact names `expr` may look up (identifiers outside set literals)."""
    return {str(node.children[0]) for node in parse(expr).find_data("name")}


def evaluate(expr: str, facts: Mapping[str, Any]) -> PreconditionResult:
    """Evaluate `expr` against `facts`. Raises QueryError if it does not parse or cannot be
    evaluated (wrong kinds of values, unknown function)."""
    validate(expr)
    evaluator = _Evaluator(facts, expr)
    value, used, missing = evaluator.eval(parse(expr))
    if value is not None and not isinstance(value, bool):
        raise QueryError(f"precondition {expr!r} is not a truth value (it gives {value!r})")
    return PreconditionResult(expr, value, MappingProxyType({k: facts[k] for k in sorted(used)}),
                              tuple(sorted(missing)))


def evaluate_all(exprs: list[str] | tuple[str, ...], facts: Mapping[str, Any]
                 ) -> list[PreconditionResult]:
    """`evaluate` for each expression, in order."""
    return [evaluate(expr, facts) for expr in exprs]


def _is_pow2(x: Any) -> bool:
    return isinstance(x, int) and x > 0 and x & (x - 1) == 0


_FUNCTIONS: dict[str, Any] = {
    "min": min,
    "max": max,
    "abs": abs,
    "pow2": _is_pow2,
    "log2": lambda x: math.log2(x),
    "cdiv": lambda a, b: -(-a // b),
}

_Result = tuple[Any, frozenset[str], frozenset[str]]
_NONE: frozenset[str] = frozenset()


class _Evaluator:
    def __init__(self, facts: Mapping[str, Any], expr: str) -> None:
        self.facts = facts
        self.expr = expr

    def fail(self, why: str) -> QueryError:
        return QueryError(f"precondition {self.expr!r} cannot be evaluated: {why}")

    def eval(self, tree: Any) -> _Result:
        from lark import Token  # noqa: PLC0415

        if isinstance(tree, Token):  # a bare token (only reached through `?` inlining)
            return self.eval_token(tree)
        method = getattr(self, "op_" + tree.data.rstrip("_"), None)
        if method is None:
            raise self.fail(f"unsupported construct {tree.data}")
        return method(tree.children)

    def eval_token(self, token: Any) -> _Result:
        if token.type == "NUMBER":
            return self.op_number([token])
        if token.type == "ARCH":
            return self.op_arch([token])
        if token.type == "STRING":
            return self.op_string([token])
        return self.op_name([token])

    # literals and names
    def op_number(self, ch: list[Any]) -> _Result:
        text = str(ch[0])
        value: Any = int(text, 16) if text.startswith("0x") else (
            float(text) if any(c in text for c in ".eE") else int(text))
        return value, _NONE, _NONE

    def op_arch(self, ch: list[Any]) -> _Result:
        return Arch(int(_ARCH.match(str(ch[0])).group(1))), _NONE, _NONE

    def op_string(self, ch: list[Any]) -> _Result:
        return str(ch[0])[1:-1], _NONE, _NONE

    def op_symbol(self, ch: list[Any]) -> _Result:
        return Symbol(str(ch[0])), _NONE, _NONE

    def op_true(self, ch: list[Any]) -> _Result:
        return True, _NONE, _NONE

    def op_false(self, ch: list[Any]) -> _Result:
        return False, _NONE, _NONE

    def op_name(self, ch: list[Any]) -> _Result:
        key = str(ch[0])
        if key in self.facts:
            return _normalize_fact(key, self.facts[key]), frozenset({key}), _NONE
        if key in DTYPE_SYMBOLS:
            return Symbol(key), _NONE, _NONE
        return None, _NONE, frozenset({key})

    # logic (Kleene)
    def op_not(self, ch: list[Any]) -> _Result:
        value, used, missing = self.eval(ch[0])
        return (None if value is None else not self.truth(value)), used, missing

    def op_and(self, ch: list[Any]) -> _Result:
        return self.connective(ch, decisive=False)

    def op_or(self, ch: list[Any]) -> _Result:
        return self.connective(ch, decisive=True)

    def connective(self, ch: list[Any], decisive: bool) -> _Result:
        """`and` (decisive value False) / `or` (decisive value True): the first operand with
        the decisive value decides alone; otherwise every operand's facts count."""
        used: set[str] = set()
        missing: set[str] = set()
        unknown = False
        for child in ch:
            value, u, m = self.eval(child)
            if value is None:
                unknown = True
                missing |= m
                used |= u
                continue
            if self.truth(value) is decisive:
                return decisive, u, m
            used |= u
        return (None if unknown else not decisive), frozenset(used), frozenset(missing)

    def truth(self, value: Any) -> bool:
        if isinstance(value, bool):
            return value
        raise self.fail(f"{value!r} is not a truth value")

    # comparisons and sets
    def op_compare(self, ch: list[Any]) -> _Result:
        (left, lu, lm), op, (right, ru, rm) = self.eval(ch[0]), str(ch[1]), self.eval(ch[2])
        used, missing = lu | ru, lm | rm
        if left is None or right is None:
            return None, used, missing
        a, b = _comparable(left), _comparable(right)
        if op in ("==", "!="):
            equal = a == b
            return (equal if op == "==" else not equal), used, missing
        if isinstance(a, str) != isinstance(b, str) or isinstance(a, bool) or isinstance(b, bool):
            raise self.fail(f"cannot order {left!s} and {right!s}")
        ordered = {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]
        return ordered, used, missing

    def op_in(self, ch: list[Any]) -> _Result:
        value, used, missing = self.eval(ch[0])
        members = [self.eval(child)[0] for child in ch[1].children]
        if value is None:
            return None, used, missing
        key = _comparable(value)
        return any(key == _comparable(m) for m in members), used, missing

    def op_not_in(self, ch: list[Any]) -> _Result:
        value, used, missing = self.op_in(ch)
        return (None if value is None else not value), used, missing

    # arithmetic
    def arith(self, ch: list[Any], fn: Any, what: str) -> _Result:
        (a, au, am), (b, bu, bm) = self.eval(ch[0]), self.eval(ch[1])
        used, missing = au | bu, am | bm
        if a is None or b is None:
            return None, used, missing
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (a, b)):
            raise self.fail(f"{what} needs numbers, got {a!s} and {b!s}")
        try:
            return fn(a, b), used, missing
        except ZeroDivisionError:
            raise self.fail(f"{what} by zero ({', '.join(sorted(used)) or 'literal'})") from None

    def op_add(self, ch: list[Any]) -> _Result:
        return self.arith(ch, lambda a, b: a + b, "+")

    def op_sub(self, ch: list[Any]) -> _Result:
        return self.arith(ch, lambda a, b: a - b, "-")

    def op_mul(self, ch: list[Any]) -> _Result:
        return self.arith(ch, lambda a, b: a * b, "*")

    def op_div(self, ch: list[Any]) -> _Result:
        return self.arith(ch, lambda a, b: a / b, "/")

    def op_floordiv(self, ch: list[Any]) -> _Result:
        return self.arith(ch, lambda a, b: a // b, "//")

    def op_mod(self, ch: list[Any]) -> _Result:
        return self.arith(ch, lambda a, b: a % b, "%")

    def op_neg(self, ch: list[Any]) -> _Result:
        value, used, missing = self.eval(ch[0])
        if value is None:
            return None, used, missing
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise self.fail(f"cannot negate {value!s}")
        return -value, used, missing

    def op_call(self, ch: list[Any]) -> _Result:
        fname = str(ch[0])
        fn = _FUNCTIONS.get(fname)
        if fn is None:
            raise self.fail(f"unknown function '{fname}'")
        args, used, missing = [], set(), set()
        for child in ch[1:]:
            if child is None:
                continue
            value, u, m = self.eval(child)
            args.append(value)
            used |= u
            missing |= m
        if any(a is None for a in args):
            return None, frozenset(used), frozenset(missing)
        try:
            return fn(*args), frozenset(used), frozenset(missing)
        except (TypeError, ValueError) as exc:
            raise self.fail(f"{fname}: {exc}") from None


def _normalize_fact(key: str, value: Any) -> Any:
    """Facts as the language sees them: arch strings become levels, dtype strings symbols."""
    if isinstance(value, str):
        match = _ARCH.match(value)
        if match:
            return Arch(int(match.group(1)))
        if key == "arch" and value.isdigit():
            return Arch(int(value))
    if key == "arch" and isinstance(value, int) and not isinstance(value, bool):
        return Arch(value)
    return value


def _comparable(value: Any) -> Any:
    if isinstance(value, Arch):
        return value.level
    if isinstance(value, Symbol):
        return value.name
    return value


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)
