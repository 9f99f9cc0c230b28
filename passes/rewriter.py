"""Rewriter back-ends: who performs the edit of a pass (or a SkillCard) at a site.

`Rewriter` is the protocol every back-end implements; the lineage engine and the
materialization loop only talk to it:

    rewrite(ir, site, card_or_pass, ctx, *, direction="optimize") -> PassResult

- `card_or_pass` is a `Pass` instance (its options are the fields), a pass class, or a
  SkillCard-like object with `pass_name: str` and `options: Mapping[str, Any]` (any object
  with those attributes; a card may also carry more, e.g. an intent text the LLM back-end uses).
- `direction` is `"optimize"` (apply the intent at an applicable site) or `"deoptimize"`
  (remove it at a present site).
- The result is the tagged `PassResult` of `passes.base`: `Applied(edits, ir, options)`,
  `Skipped(reason, facts)` or `Failed(error)`. A back-end never raises for a refusal; it
  raises `BadInputError` only for an unknown pass name or bad options.

`DeterministicRewriter` runs the pass's own rule. The LLM back-end (`passes.llm_rewriter`)
implements the same protocol for the passes whose `deterministic` is False and for cards no
rule covers. `ChainRewriter` tries back-ends in order and keeps the first `Applied`.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from passes.base import Applied, Pass, PassContext, PassResult, Site, Skipped

if TYPE_CHECKING:
    from kir import KernelIR

Direction = Literal["optimize", "deoptimize"]


@runtime_checkable
class CardLike(Protocol):
    """What a rewriter needs of a SkillCard: the pass it lifts and the options it recorded."""

    pass_name: str
    options: Mapping[str, Any]


@runtime_checkable
class Rewriter(Protocol):
    """A back-end that performs one pass/card at one site. `name` identifies it in lineage
    transitions (`rederived_by`: "deterministic" | "llm")."""

    name: str

    def rewrite(self, ir: KernelIR, site: Site, card_or_pass: Pass | type[Pass] | CardLike,
                ctx: PassContext | None = None, *, direction: Direction = "optimize"
                ) -> PassResult:
        ...


def resolve_pass(card_or_pass: Pass | type[Pass] | CardLike) -> Pass:
    """The pass instance a card, pass class or pass stands for (options applied).

    Raises BadInputError for an unknown pass name or bad options."""
    from passes.registry import get_pass  # noqa: PLC0415 — registry imports pass modules lazily

    if isinstance(card_or_pass, Pass):
        return card_or_pass
    if isinstance(card_or_pass, type) and issubclass(card_or_pass, Pass):
        return card_or_pass()
    name = getattr(card_or_pass, "pass_name", None)
    if not isinstance(name, str):
        from kir.errors import BadInputError  # noqa: PLC0415

        raise BadInputError(f"cannot rewrite with {type(card_or_pass).__name__}: "
                            "expected a pass or a card with pass_name and options")
    return get_pass(name).from_options(dict(getattr(card_or_pass, "options", None) or {}))


@dataclass(frozen=True, slots=True)
class DeterministicRewriter:
    """Runs the pass's deterministic rule; refuses (`Skipped`) for non-deterministic passes."""

    name: str = "deterministic"

    def rewrite(self, ir: KernelIR, site: Site, card_or_pass: Pass | type[Pass] | CardLike,
                ctx: PassContext | None = None, *, direction: Direction = "optimize"
                ) -> PassResult:
        the_pass = resolve_pass(card_or_pass)
        if not the_pass.deterministic:
            return Skipped("needs the LLM rewriter", {"pass": the_pass.name})
        if direction == "deoptimize":
            return the_pass.deoptimize(ir, site, ctx)
        return the_pass.optimize(ir, site, ctx)


@dataclass(frozen=True, slots=True)
class ChainRewriter:
    """Tries each back-end in order; returns the first `Applied`, else the last result."""

    backends: Sequence[Rewriter]
    name: str = "chain"

    def rewrite(self, ir: KernelIR, site: Site, card_or_pass: Pass | type[Pass] | CardLike,
                ctx: PassContext | None = None, *, direction: Direction = "optimize"
                ) -> PassResult:
        result: PassResult = Skipped("no rewriter back-end configured")
        for backend in self.backends:
            result = backend.rewrite(ir, site, card_or_pass, ctx, direction=direction)
            if isinstance(result, Applied):
                return result
        return result
