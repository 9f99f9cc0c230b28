"""Builds ahead of their gates: a CUDA host's `load_inline` extension takes tens of seconds of
CPU to build against seconds of GPU in its gate, so the optimize loop (`lineage.optimize`) starts
building, on spare cores, the candidates its policy is likely to gate next (`gate.prebuild`); each
one's own gate then finds its build. The gates themselves are unchanged: a build ahead that does
not match the candidate's own source is rebuilt by its gate (`gate.extbuild`).

- `Builds`: the run's builds ahead (the function that starts one, and the texts it started), and
  the note the run's result gets on how its gates found their extensions;
- `build_ahead(run, taken, made)`: after the policy took `taken` and made `made`, the texts to
  build next, in the order they will likely be gated.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from lineage.outcome import Step, extension_note

if TYPE_CHECKING:
    from lineage.moves import Materialized
    from lineage.optimize import _Option, _Run, _State

# Options whose next candidate is built ahead of its gate, the taken one first.
AHEAD_OPTIONS = 3


class Builds:
    """Starts a candidate text's build ahead of its gate with `prebuild` (`gate.prebuild`'s
    signature) for one run's case, tier and target path; keeps the texts it started."""

    def __init__(self, prebuild: Callable[..., Any], language: str, case: Any, tier: str,
                 path: Any) -> None:
        self.prebuild, self.language, self.case, self.tier, self.path = (
            prebuild, language, case, tier, path)
        self.started: list[str] = []

    def __call__(self, text: str) -> bool:
        began = bool(self.prebuild(text, self.language, self.case, self.tier, path=self.path))
        if began:
            self.started.append(text)
        return began

    def note(self, verdicts: Iterable[Any]) -> str | None:
        """How the run's gates had their extensions, and how many builds ahead it started."""
        return extension_note(list(verdicts), len(self.started))


def build_ahead(run: _Run, taken: _Option, made: Materialized) -> None:
    """Start building, on spare cores, what the policy is likely to gate next. A CUDA host's
    `load_inline` extension takes tens of seconds of CPU to build against seconds of GPU in its
    gate: built while the gate before it runs, its own gate finds the build (`gate.prebuild`;
    the gate itself is unchanged; `made`'s own gate starts its build as it starts). For `taken`
    and the best-ranked other options of the last choice, in that order: the option's next
    candidate (held on it until pulled: the verdict on `made` is not in yet) and its first
    candidate on `made`'s text (`kept_as`: were `made` kept, its moves are these cards on its
    text; nothing is held there, the same deterministic rewrite makes the same text again).
    Only deterministic moves are taken ahead (an LLM's candidate costs its call either way)."""
    if run.ahead is None:
        return
    from lineage.optimize import _Option, _stream  # noqa: PLC0415 (the loop imports this module)
    from passes.rewriter import DeterministicRewriter  # noqa: PLC0415

    texts: list[str] = []
    fits = made.ok and made.ir is not None and made.site is not None
    kept = kept_as(taken.state, made) if fits else None
    for option in [taken, *(o for o in run.ranked if o is not taken)][:AHEAD_OPTIONS]:
        if option.kind == "card" and not isinstance(run.rewriter, DeterministicRewriter):
            continue
        if not option.done:
            if option.stream is None:
                option.stream = _stream(option, run)
            if not option.held and (nxt := next(option.stream, None)) is not None:
                option.held.append(nxt)
            if option.held and option.held[0].ok and option.held[0].ir is not None:
                texts.append(option.held[0].ir.unparse())
        if kept is not None:
            first = next(_stream(_Option(kept, option.kind, option.card, option.rank), run), None)
            if first is not None and first.ok and first.ir is not None:
                texts.append(first.ir.unparse())
    for text in dict.fromkeys(texts):
        run.ahead(text)


def kept_as(state: _State, made: Materialized) -> _State:
    """`made` as the state it would be if kept, for what its moves would make (`build_ahead`):
    its path has the step, its profile is `state`'s until its own is measured."""
    from lineage.optimize import _State  # noqa: PLC0415
    kept = _State(made.ir.unparse(), made.ir, state.verdict, None, parent=state, card=made.card,
                  made=made)
    kept.path = (*state.path, Step(made.card.id, made.card.pass_name, made.site.anchor, True))
    return kept
