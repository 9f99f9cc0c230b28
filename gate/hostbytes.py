"""What host code puts into the buffers a launch of the candidate's is given, on the CPU tiers.

There the inputs are host memory: host code can read their values without a copy the op trace
sees (`x.numpy()`), tell the sealed call apart by its poison, and pick its kernel's path by
what it writes into a buffer of its own (a flag) while every launch keeps its kernel, grid and
scalars. What it cannot hide is that buffer: it holds one thing in the correctness calls and
another in the sealed call. An honest candidate's host code fills its buffers from shapes
(tables, offsets, descriptors, a zeroed workspace), never from its inputs' values, so on
inputs of the same integers they hold the same values in the sealed call as in the correctness
calls, wherever they held the same values in every correctness call (`odd_contents`).

What a kernel of the candidate's wrote is no part of that: it is computed from the inputs'
real values in the sealed call as in the others (a count one launch leaves for the next), and
what a buffer kept across calls holds from the call before depends on which call that was
(another variant's). So each launch's buffers are read before and after it (`HostBytes`); an
element that still holds what the candidate's kernels last left there, where one of them once
changed it, is theirs; every other one (written by host code, or made by an allocation that
the op trace filled with poison) is the host's. A difference in elements that were the
kernels' in every one of those calls is let be.

Read: Triton launches on the host (the CUDA emulator's launches pass raw pointers), storages of
at most `READ_LIMIT` bytes, the call's inputs left out; a call keeps what its launches were
given up to `GIVEN_LIMIT` bytes (small storages always). Integers the size of an address
(64-bit integers of at least 2**40, on both sides) are let differ, as `guards.launch_detail`
lets a scalar one: a table of pointers moves with its tensors. Imported by `gate.guards`
before candidate code loads: the ctypes and torch functions it calls are bound here then
(NumPy's are under the tamper watch).
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

_string_at = ctypes.string_at
_frombuffer = np.frombuffer
_array_equal = np.array_equal
_untyped_storage = torch.Tensor.untyped_storage
_storage_ptr = torch.UntypedStorage.data_ptr
_storage_nbytes = torch.UntypedStorage.nbytes
_tensor = torch.Tensor
_WIDE = frozenset({torch.int64, torch.uint64}) if hasattr(torch, "uint64") else frozenset({torch.int64})

READ_LIMIT = 1 << 24
"""A storage larger than this (bytes) is not read: the interpreted cases' buffers are far
smaller, and reading one costs a copy before and after each launch."""
KEPT_LIMIT = 1 << 28
"""What `HostBytes` keeps at most of what the kernels left (bytes), the oldest storages
dropped first (a storage let go of and not seen since)."""
GIVEN_LIMIT = 1 << 26
"""What one call's launches keep of what they were given (bytes, for `odd_contents`): past it,
a storage larger than `SMALL` is not kept for the call's later launches (the correctness calls'
are held until the sealed call)."""
SMALL = 1 << 12
ADDRESS = 1 << 40
Key = tuple[int, int]  # a storage: its address and size


@dataclass(frozen=True, slots=True)
class Given:
    """One buffer (its whole storage) as a launch was given it: its bytes, which of them are
    the host's (`HostBytes`), and whether it is viewed as 64-bit integers (which may hold
    addresses)."""

    values: np.ndarray  # uint8
    host: np.ndarray  # bool, one per byte
    item: int  # the size of an element of the tensor passed (bytes)
    wide: bool


def _read(ptr: int, size: int) -> np.ndarray:
    return _frombuffer(_string_at(ptr, size), dtype=np.uint8)


class HostBytes:
    """Per storage (address, size): the bytes the candidate's kernels left there at the last
    launch given it, and which bytes any launch has changed since it was first seen.
    `before` reads a launch's buffers as it gets them; `after` notes what the launch left."""

    def __init__(self) -> None:
        self.left: dict[Key, tuple[np.ndarray, np.ndarray]] = {}
        self.skip: frozenset[int] = frozenset()
        """Storages not read (by address): the call's inputs, whose values are the gate's."""
        self.kept = 0
        """Bytes the call's launches kept so far (`GIVEN_LIMIT`)."""

    def skipping(self, inputs: Any) -> None:
        """A new call on `inputs`: their storages are not read."""
        self.skip = frozenset(_storage_ptr(_untyped_storage(x)) for x in inputs
                              if type(x) is _tensor and x.numel())
        self.kept = 0

    def before(self, values: Any) -> tuple[tuple[Given | None, ...], dict[Key, tuple[np.ndarray, int]]]:
        """Each of a launch's arguments as given (None: not a tensor of host memory read
        here), and the bytes read (by storage, with the size of the elements it is first
        passed as) for `after`."""
        given: list[Given | None] = []
        read: dict[Key, tuple[np.ndarray, int]] = {}
        for v in values:
            if type(v) is not _tensor or v.device.type != "cpu" or not v.numel():
                given.append(None)
                continue
            storage = _untyped_storage(v)
            key = (_storage_ptr(storage), _storage_nbytes(storage))
            if key[0] in self.skip or not 0 < key[1] <= READ_LIMIT:
                given.append(None)
                continue
            if key not in read:
                read[key] = (_read(*key), v.element_size())
            now = read[key][0]
            if key[1] > SMALL and self.kept + 2 * key[1] > GIVEN_LIMIT:
                given.append(None)  # read for `after` alone
                continue
            self.kept += 2 * key[1]
            last = self.left.get(key)
            host = np.ones(now.size, dtype=bool) if last is None else ~(last[1] & (now == last[0]))
            given.append(Given(now, host, v.element_size(), v.dtype in _WIDE))
        return tuple(given), read

    def after(self, read: dict[Key, tuple[np.ndarray, int]]) -> None:
        """What the launch left in each storage `before` read, and which elements it changed
        (a kernel that writes an element writes its every byte, the ones it left as they were
        too)."""
        for key, (was, item) in read.items():
            now = _read(*key)
            last = self.left.pop(key, None)
            changed = now != was
            if item > 1 and changed.size % item == 0:
                changed = np.repeat(changed.reshape(-1, item).any(axis=1), item)
            self.left[key] = (now, changed if last is None else changed | last[1])
        total = sum(k[1] for k in self.left)
        while total > KEPT_LIMIT and len(self.left) > 1:
            oldest = next(iter(self.left))
            total -= oldest[1]
            del self.left[oldest]

    def state(self) -> dict[Key, tuple[np.ndarray, np.ndarray]]:
        """What it knows now, for `restore` (its entries are replaced, never changed)."""
        return dict(self.left)

    def restore(self, state: dict[Key, tuple[np.ndarray, np.ndarray]]) -> None:
        """Back to `state`: a call whose writes the gate undid (`guards.Seal`'s `again`)."""
        self.left = dict(state)


def odd_contents(calls: list[tuple[Any, ...]],
                 call: tuple[Any, ...]) -> tuple[int, int, int, str, str] | None:
    """Where `call` (per launch, its buffers as given: `HostBytes.before`) was given an element
    (of the dtype it was passed as, over its whole storage) that held one value in every one
    of `calls` (two at least: the correctness calls on inputs of the same integers) and holds
    another, unless it was the kernels' (`HostBytes`) in each of them and in `call` too, or is
    an address on both sides: (launch, argument, byte offset in its storage, their bytes, these
    bytes, in hex); else None. Elements, not bytes: a value that varies from call to call (a
    random seed drawn by host code) may hold one of its bytes by chance."""
    if len(calls) < 2:
        return None
    for j, launch in enumerate(call):
        for k, mine in enumerate(launch):
            if mine is None:
                continue
            theirs = [c[j][k] if j < len(c) and k < len(c[j]) else None for c in calls]
            if any(t is None or t.values.size != mine.values.size or t.item != mine.item
                   for t in theirs):
                continue
            first = theirs[0].values
            if _array_equal(mine.values, first):
                continue
            w = mine.item if mine.values.size % mine.item == 0 else 1
            held = np.ones(first.size // w, dtype=bool)
            for t in theirs[1:]:
                held &= (t.values == first).reshape(-1, w).all(axis=1)
            odd = held & (mine.values != first).reshape(-1, w).any(axis=1)
            kernels = ~mine.host
            for t in theirs:
                kernels &= ~t.host
            odd &= ~kernels.reshape(-1, w).all(axis=1)
            if mine.wide and w == 8 and odd.any():
                odd &= ~((np.abs(first.view("<i8")) >= ADDRESS) &
                         (np.abs(mine.values.view("<i8")) >= ADDRESS))
            if odd.any():
                at = int(np.argmax(odd)) * w
                return (j, k, at, first[at:at + w].tobytes().hex(),
                        mine.values[at:at + w].tobytes().hex())
    return None
