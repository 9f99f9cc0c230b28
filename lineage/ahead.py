"""Builds ahead of their gates: a CUDA host's `load_inline` extension takes tens of seconds of
CPU to build against seconds of GPU in its gate, so the optimize loop (`lineage.optimize`) starts
building, on spare cores, the candidates its policy is likely to gate next (`gate.prebuild`); each
one's own gate then finds its build. The gates themselves are unchanged: a build ahead that does
not match the candidate's own source is rebuilt by its gate (`gate.extbuild`).

- `Builds`: the run's builds ahead (the function that starts one, and the texts it started), and
  the note the run's result gets on how its gates found their extensions;
- `build_ahead(run, taken, made, ...)`: after the policy took `taken` and made `made`, the texts to
  build next, in the order they will likely be gated.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from lineage.outcome import extension_note

if TYPE_CHECKING:
    from lineage.moves import Materialized

# The loop's run, options and states (`lineage.optimize`, which imports this module): here by
# the attributes read (run: ahead, ranked, rewriter; option: kind, done, stream, held).
_Run = _Option = _State = Any

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


def build_ahead(run: _Run, taken: _Option, made: Materialized, kept: _State | None,
                stream: Callable[[_Option, _Run], Iterator[Materialized]],
                option_on: Callable[[_State, _Option], _Option]) -> None:
    """Start building, on spare cores, what the policy is likely to gate next. A CUDA host's
    `load_inline` extension takes tens of seconds of CPU to build against seconds of GPU in its
    gate: built while the gate before it runs, its own gate finds the build (`gate.prebuild`;
    the gate itself is unchanged; `made`'s own gate starts its build as it starts). For `taken`
    and the best-ranked other options of the last choice, in that order: the option's next
    candidate (held on it until pulled: the verdict on `made` is not in yet) and its first
    candidate on `made`'s text (`kept`: `made` as the state it would be if kept, whose moves
    are these cards on its text, `option_on(kept, option)`; nothing is held there, the same
    deterministic rewrite makes the same text again). `stream(option, run)`: an option's
    candidates.
    Only deterministic moves are taken ahead (an LLM's candidate costs its call either way)."""
    if run.ahead is None:
        return
    from passes.rewriter import DeterministicRewriter  # noqa: PLC0415

    texts: list[str] = []
    for option in [taken, *(o for o in run.ranked if o is not taken)][:AHEAD_OPTIONS]:
        if option.kind == "card" and not isinstance(run.rewriter, DeterministicRewriter):
            continue
        if not option.done:
            if option.stream is None:
                option.stream = stream(option, run)
            if not option.held and (nxt := next(option.stream, None)) is not None:
                option.held.append(nxt)
            if option.held and option.held[0].ok and option.held[0].ir is not None:
                texts.append(option.held[0].ir.unparse())
        if kept is not None:
            first = next(stream(option_on(kept, option), run), None)
            if first is not None and first.ok and first.ir is not None:
                texts.append(first.ir.unparse())
    for text in dict.fromkeys(texts):
        run.ahead(text)
