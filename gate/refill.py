"""Fresh values in the same input buffers between a candidate's calls (worker side; imports torch).

The gate calls a candidate repeatedly (the interpret tier's repeated calls, the device tier's
timed calls) on one set of input tensors, and between calls it copies another input set into
those same tensors: same addresses, shapes and strides, new values. A candidate that keeps an
answer keyed on its inputs' identity (`data_ptr`, `id()`, shape, a checksum of a few elements)
and returns it again then returns the answer to other inputs; the outputs of the calls are
checked against the reference of the values each call saw.

A pool holds a variant's timed input set and `size - 1` *crossovers* of it: the timed set with
a random 1/64 of the elements of each floating-point tensor replaced by the element at the same
place of another input set (drawn by the case's `make_inputs`, so each element keeps its
distribution; integer tensors and scalars stay). Crossovers differ from each other in a few
elements everywhere, so a checksum over a few places sees the same inputs while the answers
differ. A crossover whose reference fails or is not finite where the timed set's is, and every
crossover of a case that sets `REFILL = "fresh"` (float inputs with constraints between elements,
e.g. a symmetric matrix), is replaced by a fresh `make_inputs` draw.
"""
from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

CROSSOVER_RATE = 1.0 / 64.0
MIX_CHUNK = 1 << 24
"""Elements a crossover of a contiguous tensor draws its mask for at a time."""
_INT_OF_SIZE = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def crossover(base: tuple[Any, ...], donor: tuple[Any, ...], seed: int,
              rate: float = CROSSOVER_RATE) -> tuple[Any, ...] | None:
    """`base` with about `rate` of the elements of each floating-point tensor taken from
    `donor` (same places); None when no tensor can be mixed (no float tensor, shapes differ).
    Works on the raw bits (any float dtype, any strides); at least one element changes."""
    gens: dict[str, torch.Generator] = {}
    out: list[Any] = []
    mixed = False
    for b, d in zip(base, donor):
        if not (isinstance(b, torch.Tensor) and isinstance(d, torch.Tensor)) or not b.is_floating_point() \
                or b.shape != d.shape or b.dtype != d.dtype or b.numel() == 0 \
                or b.element_size() not in _INT_OF_SIZE:
            out.append(b.clone() if isinstance(b, torch.Tensor) else b)
            continue
        device = str(b.device)
        gen = gens.get(device)
        if gen is None:
            gen = gens[device] = torch.Generator(device=b.device).manual_seed(seed)
        bits = _INT_OF_SIZE[b.element_size()]
        x = b.clone()
        if x.is_contiguous() and d.is_contiguous():
            _mix_chunks(x.view(bits).view(-1), d.view(bits).view(-1), gen, rate)
        else:
            mask = torch.rand(b.shape, generator=gen, device=b.device) < rate
            if not bool(mask.any()):
                flat = int(torch.randint(0, b.numel(), (1,), generator=gen, device=b.device))
                mask.view(-1)[flat] = True
            xv = x.view(bits)
            xv.copy_(torch.where(mask, d.view(bits), xv))
        out.append(x)
        mixed = True
    return tuple(out) if mixed else None


def _mix_chunks(x: torch.Tensor, d: torch.Tensor, gen: torch.Generator, rate: float) -> None:
    """`x` (flat raw bits) takes the elements of `d` at about `rate` of its places, drawn a
    chunk of `MIX_CHUNK` elements at a time (the mask and the choice of a gigabyte tensor are
    a chunk's size, not the tensor's); at least one place is taken."""
    taken = torch.zeros((), dtype=torch.int64, device=x.device)
    for start in range(0, x.numel(), MIX_CHUNK):
        seg = x[start:start + MIX_CHUNK]
        mask = torch.rand(seg.numel(), generator=gen, device=x.device) < rate
        taken += mask.sum()
        seg.copy_(torch.where(mask, d[start:start + MIX_CHUNK], seg))
        del mask
    if not int(taken):
        flat = int(torch.randint(0, x.numel(), (1,), generator=gen, device=x.device))
        x[flat] = d[flat]


@dataclass(slots=True)
class Pool:
    """One variant's input sets for refilled calls: (seed, inputs) each, the timed set first."""

    sets: list[tuple[int, tuple[Any, ...]]]

    def seed(self, index: int) -> int:
        return self.sets[index][0]

    def inputs(self, index: int) -> tuple[Any, ...]:
        return self.sets[index][1]


@dataclass(slots=True)
class Rotation:
    """Live input buffers refilled from a pool; `current` is the set they hold now.

    `refill_next()` copies a different set (chosen at random) into the buffers with `copy_`
    (captured before candidate code loaded). Only tensors are refilled; other inputs are the
    same in every set of a pool. Sets `hold_back` names are not chosen until `bring_in`
    refills one (`gate.visits`: first visits at places of the gate's choosing); while one set
    alone may be chosen, `refill_next` copies it again (the same work between calls)."""

    pool: Pool
    buffers: tuple[Any, ...]
    copy_: Callable[..., Any]
    current: int = 0
    rng: random.Random = field(default_factory=random.SystemRandom)
    held_back: set[int] = field(default_factory=set)

    def refill(self, index: int) -> None:
        for dst, src in zip(self.buffers, self.pool.inputs(index)):
            if isinstance(dst, torch.Tensor):
                self.copy_(dst, src)
        self.current = index

    def refill_next(self) -> None:
        n = len(self.pool.sets)
        if self.held_back:
            choices = [i for i in range(n) if i not in self.held_back and i != self.current]
            self.refill(self.rng.choice(choices) if choices else self.current)
        elif n > 1:
            self.refill((self.current + self.rng.randrange(1, n)) % n)

    def hold_back(self, indices: set[int]) -> None:
        """Keep the sets `indices` out of `refill_next`'s choice (never the current one)."""
        self.held_back = {i for i in indices if 0 <= i < len(self.pool.sets) and i != self.current}

    def bring_in(self, index: int) -> None:
        """Refill a held-back set (it is chosen as any other from now on)."""
        self.held_back.discard(index)
        self.refill(index)


@dataclass(slots=True)
class Reservoir:
    """A uniform sample of `size` of the calls offered, decided as each call is offered (after
    it ran) with a system random source: a candidate cannot know which calls are checked.
    Each kept item is a copy of the call's outputs made when kept."""

    size: int
    snapshot: Callable[[Any], Any]
    offered: int = 0
    kept: list[tuple[int, Any]] = field(default_factory=list)
    rng: random.Random = field(default_factory=random.SystemRandom)

    def offer(self, index: int, outputs: Any) -> None:
        self.offered += 1
        if len(self.kept) < self.size:
            self.kept.append((index, self.snapshot(outputs)))
            return
        slot = self.rng.randrange(self.offered)
        if slot < self.size:
            self.kept[slot] = (index, None)  # the replaced copy goes before the new one is made
            self.kept[slot] = (index, self.snapshot(outputs))


@dataclass(slots=True)
class SetSample:
    """A sample of `size` calls spread over the pool's sets: `size` of the `sets` sets (all,
    where there are no more) drawn at random with a system random source when the sample is
    made, and a uniform sample (`Reservoir`) of the calls on each drawn set, the `size` places
    shared among them. A cache keyed on part of its inputs answers some set with another set's
    output whichever set it saw first; a uniform sample over all the calls falls on the calls
    of one set alone, the set it answered right, one time in eight with two sets and two
    places, while this one, its sets distinct, checks a call of some other set whenever it
    draws two sets or more."""

    size: int
    sets: int
    snapshot: Callable[[Any], Any]
    rng: random.Random = field(default_factory=random.SystemRandom)
    parts: dict[int, Reservoir] = field(default_factory=dict)
    among: tuple[int, ...] = ()
    """The sets the calls will run on, where not all `sets` of the pool (none: all)."""

    def __post_init__(self) -> None:
        names = list(self.among) or list(range(max(1, self.sets)))
        drawn = self.rng.sample(names, min(self.size, len(names)))
        for i, index in enumerate(drawn):
            places = self.size // len(drawn) + (1 if i < self.size % len(drawn) else 0)
            self.parts[index] = Reservoir(places, self.snapshot, rng=self.rng)

    def offer(self, index: int, outputs: Any) -> None:
        part = self.parts.get(index)
        if part is not None:
            part.offer(index, outputs)

    @property
    def kept(self) -> list[tuple[int, Any]]:
        return [item for part in self.parts.values() for item in part.kept]
