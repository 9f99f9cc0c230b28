"""Input sets drawn again on the device where they are used, in place of a copy waiting in host
memory (worker side; imports torch).

A gate whose input sets do not all fit on the device beside its calls lets some wait between
their uses (`gate.memplan`). A copy in host memory costs the set's bytes twice over the bus per
use (out once, back at every use) and as much host memory: seconds a set at a problem's real
size. Most sets are a function of their seed alone: the case's `make_inputs` draws them from
its seeded generators, and a refill crossover (`gate.refill.crossover`) is a function of its two
sets and its own seed. Such a set can be dropped and drawn again on the device at its next use,
in milliseconds.

What keeps that sound:

- *The same values, or no run.* Whether `make_inputs` draws the same set twice is measured
  once per variant before a set is dropped (`redraws`: the set drawn a second time while the
  first is still there, and the two digests compared). Each set's digest (`digest`: two
  weighted sums of every tensor's bytes, its dtype, shape and strides, the other values'
  text) is kept with its recipe (`Recipe`), and a set drawn again is used only where its
  digest is the kept one; a difference is the worker's to reject (candidate code loaded in
  between may have changed how the case draws).
- *Only where it is cheaper.* The probe's draw is timed: a case that draws on the host (a CPU
  generator, then a copy to the device) can take seconds a set, more than copying the set in
  from host memory. A set is drawn again only where the probe's draw and digest took no longer
  than one copy in at `COPY_IN_BYTES_PER_S` (`worth_drawing_again`; a small set's below
  `COPY_IN_FLOOR_S`).
- *A held reference computed again, where that is cheaper than its copy.* A set drawn again
  (not a crossover) has its held reference dropped too and computed again on the device at
  each comparison, masked under the parent's current key only once the candidate's call is
  over (`gate.worker`), where the case's reference computes the same bytes twice (a second
  computation on the first set, its digest against the first's: `computes_again`) and that
  computation with the draw takes no longer than the reference's copy in and back out at the
  copy rate measured on this process (`worth_computing_again`). Each computation is checked
  against the digest of the first (its bytes, before candidate code loaded).
- *Not the sealed set.* It is drawn with a secret seed and kept masked (`gate.worker`), so
  that candidate code can neither draw it again nor read it before its call; it waits as a
  copy in host memory, or whole on the device where the plan leaves room
  (`gate.memplan.room_beyond`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

Key = tuple[str, str, int]
COPY_IN_BYTES_PER_S = 12e9
"""The rate a set waiting in host memory comes back to the device at (pinned staging over
PCIe, `gate.hoststage`), against which a draw is judged worth making again."""
COPY_IN_FLOOR_S = 0.05
"""What a copy in costs at the least, whatever its size (the synchronizations around it): a
small set's draw is worth making again below it."""


@dataclass(frozen=True, slots=True)
class Recipe:
    """How to draw an input set again: `make_inputs` under `seed`, or, with `base` and `donor`
    (the keys of two sets), their crossover under `seed`; `digest` is the set's as first drawn
    and `nbytes` its tensors' bytes."""

    seed: int
    digest: str
    nbytes: int
    base: Key | None = None
    donor: Key | None = None

    @property
    def crossed(self) -> bool:
        return self.base is not None


def tensor_digest(t: torch.Tensor) -> str:
    """Two weighted sums of the bytes of `t` (in its logical order), its dtype, shape and
    strides: equal tensors give equal digests, different ones almost never do."""
    from gate.heldcompare import digest_bytes  # noqa: PLC0415

    return f"{t.dtype}{tuple(t.shape)}{tuple(t.stride())}:{digest_bytes(t.detach())}"


def digest(inputs: tuple[Any, ...]) -> str:
    """The digest of an input set: each tensor's `tensor_digest`, each other value's repr."""
    parts = [tensor_digest(x) if isinstance(x, torch.Tensor) else f"{type(x).__name__}:{x!r}"
             for x in inputs]
    return "|".join(parts)


def nbytes(inputs: tuple[Any, ...]) -> int:
    return sum(x.numel() * x.element_size() for x in inputs if isinstance(x, torch.Tensor))


def worth_drawing_again(seconds: float, set_bytes: int) -> bool:
    """Whether drawing a set of `set_bytes` again (its draw and digest measured at `seconds`)
    costs no more than copying it in from host memory at `COPY_IN_BYTES_PER_S` (and
    `COPY_IN_FLOOR_S` at the least)."""
    return seconds <= max(set_bytes / COPY_IN_BYTES_PER_S, COPY_IN_FLOOR_S)


def worth_computing_again(draw_s: float, compute_s: float, out_bytes: int,
                          copy_bytes_per_s: float) -> bool:
    """Whether a held reference of `out_bytes` is computed again at each comparison (its set
    drawn again, `draw_s`, and the reference computed on it, `compute_s`, both measured warm)
    rather than waiting in host memory, where each comparison copies it in and, masked anew,
    back out at `copy_bytes_per_s` (`COPY_IN_FLOOR_S` at the least)."""
    if copy_bytes_per_s <= 0:
        return False
    return draw_s + compute_s <= max(2 * out_bytes / copy_bytes_per_s, COPY_IN_FLOOR_S)


def computes_again(first: str, again: str) -> bool:
    """Whether a reference's second computation (digest `again`) has the bytes of its first
    (`first`): a reference that does not (an order of floating-point sums that varies between
    runs) keeps its held copy."""
    return bool(first) and first == again


def redraws(first: str, again: tuple[Any, ...]) -> bool:
    """Whether a second draw (`again`) of the set whose digest is `first` gives the same set."""
    return digest(again) == first


__all__ = ["COPY_IN_BYTES_PER_S", "COPY_IN_FLOOR_S", "Key", "Recipe", "computes_again", "digest", "nbytes",
           "redraws", "tensor_digest", "worth_computing_again", "worth_drawing_again"]
