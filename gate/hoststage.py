"""Copies between a GPU and host memory through two reused pinned buffers (worker side; imports
torch).

A gate whose sets or held references wait in host memory (`gate.memplan`) copies gigabytes
between the device and pageable host tensors at each use. A pageable copy runs through the
driver's own staging on one host thread, and into fresh host memory it also takes the page
faults one page at a time. Here a copy goes a chunk (`CHUNK_BYTES`) at a time through one of
two pinned buffers allocated once per process: the bus copy of one chunk (asynchronous, at the
bus's pinned rate) overlaps the host copy of the previous one between the pinned buffer and the
pageable tensor, which torch spreads over its host threads. The pageable tensors stay where
they are (no pinned memory grows with the problem's size).

Each buffer carries the event of the last bus copy that reads or writes it; a buffer is reused
only once that copy is done, so that copies issued back to back never overwrite a chunk still
in flight. Where no GPU is present (the interpret tier) or `KLINEAGE_GATE_STAGING=0`, the copies
are torch's plain ones.
"""
from __future__ import annotations

import os
from typing import Any

import torch

CHUNK_BYTES = 1 << 26
"""Bytes of each pinned buffer (two are kept): large enough that a chunk's bus copy is long
beside its launch, small enough that host and bus copies overlap over a set."""


class _Done:
    """The event of a copy that is done when issued (no GPU: host copies are synchronous)."""

    def synchronize(self) -> None:
        return None


class Stage:
    """Two pinned buffers of `chunk` bytes and the event of the last bus copy of each
    (`pinned=False`: plain host buffers and copies done when issued, for the CPU)."""

    def __init__(self, chunk: int = CHUNK_BYTES, *, pinned: bool = True) -> None:
        self.chunk = chunk
        self.pinned = pinned
        self.buffers: list[torch.Tensor] = []
        self.events: list[Any] = [None, None]
        self.turn = 0

    def _claim(self) -> tuple[torch.Tensor, int]:
        """The next buffer, once the last bus copy that used it is done."""
        if not self.buffers:
            self.buffers = [torch.empty(self.chunk, dtype=torch.uint8, pin_memory=self.pinned)
                            for _ in range(2)]
        k = self.turn
        self.turn = 1 - k
        if self.events[k] is not None:
            self.events[k].synchronize()
            self.events[k] = None
        return self.buffers[k], k

    def _mark(self, k: int) -> Any:
        event: Any = _Done()
        if self.pinned:
            event = torch.cuda.Event()
            event.record()
        self.events[k] = event
        return event

    def down(self, src: torch.Tensor, dst: torch.Tensor) -> None:
        """Copy the bytes of `src` (flat uint8, on a GPU) into `dst` (flat uint8, host memory,
        same size); returns once `dst` holds them."""
        n = src.numel()
        pending: tuple[int, int, int, Any] | None = None  # (buffer, begin, end, event)
        for b in range(0, n, self.chunk):
            e = min(n, b + self.chunk)
            buf, k = self._claim()
            buf[:e - b].copy_(src[b:e], non_blocking=True)
            event = self._mark(k)
            if pending is not None:
                self._land(pending, dst)
            pending = (k, b, e, event)
        if pending is not None:
            self._land(pending, dst)

    def _land(self, pending: tuple[int, int, int, Any], dst: torch.Tensor) -> None:
        k, b, e, event = pending
        event.synchronize()
        dst[b:e].copy_(self.buffers[k][:e - b])

    def up(self, src: torch.Tensor, dst: torch.Tensor) -> None:
        """Copy the bytes of `src` (flat uint8, host memory) into `dst` (flat uint8, on a GPU,
        same size), ordered on the current stream (later work on it sees them)."""
        n = src.numel()
        for b in range(0, n, self.chunk):
            e = min(n, b + self.chunk)
            buf, k = self._claim()
            buf[:e - b].copy_(src[b:e])
            dst[b:e].copy_(buf[:e - b], non_blocking=True)
            self._mark(k)


_STAGE: Stage | None = None
_RATE: dict[str, float] = {}
RATE_PROBE_BYTES = 2 * CHUNK_BYTES
"""Bytes of the copy out and back in that `copy_rate` times (two of the stage's chunks)."""


def _stage(device: Any) -> Stage | None:
    """The process's `Stage`, or None where copies stay torch's own (no GPU among the two
    sides, or `KLINEAGE_GATE_STAGING=0`)."""
    global _STAGE
    if torch.device(device).type != "cuda" or os.environ.get("KLINEAGE_GATE_STAGING") == "0":
        return None
    if _STAGE is None:
        _STAGE = Stage()
    return _STAGE


def _flat_bytes(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(-1).view(torch.uint8)


def to_host(t: torch.Tensor) -> torch.Tensor:
    """A copy of `t` in (pageable) host memory, same dtype, shape and strides (a tensor that
    is not contiguous takes torch's own copy)."""
    stage = _stage(t.device)
    if stage is None or t.numel() == 0 or not t.is_contiguous():
        return t.to("cpu", copy=True)
    src = t.detach()
    out = torch.empty(src.shape, dtype=src.dtype, device="cpu")
    stage.down(_flat_bytes(src), _flat_bytes(out))
    return out


def to_device(t: torch.Tensor, device: Any) -> torch.Tensor:
    """A copy of `t` (host memory) on `device`, same dtype, shape and strides (a tensor that
    is not contiguous takes torch's own copy)."""
    stage = _stage(device)
    if stage is None or t.numel() == 0 or t.device.type != "cpu" or not t.is_contiguous():
        return t.to(device)
    out = torch.empty(t.shape, dtype=t.dtype, device=device)
    stage.up(_flat_bytes(t), _flat_bytes(out))
    return out


def write_back(host: torch.Tensor, t: torch.Tensor) -> None:
    """`host` (a contiguous tensor in host memory) takes the values of `t` (same size)."""
    stage = _stage(t.device)
    if stage is None or host.device.type != "cpu" or not host.is_contiguous():
        host.copy_(t)
        return
    stage.down(_flat_bytes(t.detach().contiguous()), _flat_bytes(host))


def copy_rate(device: Any, nbytes: int = RATE_PROBE_BYTES) -> float:
    """Bytes a second a tensor on `device` goes to host memory and back through this module
    (`to_host`, then `write_back` and `to_device`: what a reference waiting in host memory
    costs at each comparison), timed once per process and device on `nbytes` (the copies warm
    first, on a piece of it)."""
    import time  # noqa: PLC0415

    name = str(torch.device(device))
    if name not in _RATE:
        src = torch.zeros(max(1, nbytes), dtype=torch.uint8, device=device)

        def once(t: torch.Tensor) -> float:
            t0 = time.perf_counter()
            host = to_host(t)
            write_back(host, t)
            back = to_device(host, device)
            if back.is_cuda:
                torch.cuda.synchronize(back.device)
            return time.perf_counter() - t0

        once(src[:min(src.numel(), CHUNK_BYTES)])
        seconds = once(src)
        _RATE[name] = 3 * src.numel() / max(seconds, 1e-9)
        del src
    return _RATE[name]


__all__ = ["CHUNK_BYTES", "RATE_PROBE_BYTES", "Stage", "copy_rate", "to_device", "to_host", "write_back"]
