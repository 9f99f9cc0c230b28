"""The executor interface: where gate jobs run (`gate.executor` has the implementations and
`open_executor`; `gate.ray_executor` the cluster one). Kept apart from both so that each
implementation builds on it without importing the module that chooses between them."""
from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any, ClassVar

from gate.cases import Case
from gate.check import CheckRequest, resolve_tier
from gate.verdict import Tier, Verdict


class Executor:
    """Runs gate jobs (`CheckRequest`s) and returns their verdicts; thread-safe.

    `submit` is the primitive; `check` has `gate.check`'s signature (so it can stand in for
    it wherever a `check_fn` is taken) and `check_many` gates a batch in request order.
    Raises `BadInputError` where `gate.check` would (unknown case, tier, language)."""

    name: ClassVar[str] = ""
    speculate: ClassVar[bool] = False
    """Spare capacity is the norm (a cluster): a caller may send ahead jobs whose verdicts it
    may not need (a card's second materialization while its first is gated)."""

    def submit(self, request: CheckRequest) -> Future[Verdict]:
        raise NotImplementedError

    def gpu_available(self) -> bool:
        """Whether device-tier jobs can run (a GPU on this machine / in the cluster)."""
        raise NotImplementedError

    def width(self, tier: Tier | str) -> int:
        """How many jobs of `tier` it runs at once."""
        raise NotImplementedError

    def close(self) -> None:
        """Release what the executor holds (a cluster it started is shut down)."""

    def check(self, source: str, language: Any, case: Case | str | Path,
              tier: Tier | str = Tier.AUTO, *, path: str | Path | None = None,
              host: str | Path | None = None, timeout: float | None = None,
              cache: bool = True) -> Verdict:
        request = CheckRequest(source, str(getattr(language, "value", language)), case, tier,
                               str(path) if path is not None else None,
                               host if host is None or isinstance(host, str) else str(host),
                               timeout, cache)
        return self.submit(request).result()

    def check_many(self, requests: Sequence[CheckRequest]) -> list[Verdict]:
        futures = [self.submit(r) for r in requests]
        return [f.result() for f in futures]

    def concrete_tier(self, tier: str) -> str:
        """`tier` with `auto` made concrete for this executor's machines (device where they
        have a GPU, else interpret); other tiers as given."""
        return ("device" if self.gpu_available() else "interpret") if tier == "auto" else tier

    def resolve_tier(self, tier: Tier | str, language: str) -> str:
        """The tier a job of `language` runs at (`gate.resolve_tier` on this executor's machines)."""
        resolved, _ = resolve_tier(tier, language, self.gpu_available())
        return resolved.value

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["Executor"]
