"""Sharing one GPU between gates that run at the same time (device tier).

Gates are processes, and several may run on one GPU at once (admission trials and optimize
runs in parallel: compilation is CPU work, and most of a gate is compilation). Their timings
must not overlap other work on that GPU, so the worker takes a readers-writer lock per GPU:

- *shared* around each untimed kernel run (the case's inputs and reference outputs, every
  call of the candidate but its first): any number of gates at once. The candidate's first
  call compiles it (seconds of CPU, an autotuner's configurations too) and holds no lock, so
  a gate waiting to time is not held up by another gate's compiler;
- *exclusive* around every timed measurement (`do_bench` of the reference and of the
  candidate, and the candidate's autotuner timing each of its compiled configurations):
  no other gate's kernels run meanwhile.

The lock is two `flock` files. A writer queues on the turnstile file and keeps it while it
waits for the exclusive lock, so readers that arrive later wait behind it (writer preference:
a steady stream of correctness runs cannot starve a measurement). A reader never waits for
the turnstile while it holds its shared lock (`exclusive()` drops the shared lock first), so
two gates cannot deadlock. `flock` locks go with their file descriptors: a worker that dies
releases its locks.

The path is `KLINEAGE_GPU_LOCK` when set (``off`` disables the lock), else one per physical
GPU in the temporary folder (the device's UUID, so two processes with different
`CUDA_VISIBLE_DEVICES` that name the same GPU share it).
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path


class GpuLock:
    """A readers-writer lock over `path` (+ ``.turn`` and ``.rw``); re-entrant per mode."""

    def __init__(self, path: str | Path) -> None:
        base = Path(path)
        base.parent.mkdir(parents=True, exist_ok=True)
        self.path = base
        self._turn = os.open(f"{base}.turn", os.O_RDWR | os.O_CREAT, 0o666)
        self._rw = os.open(f"{base}.rw", os.O_RDWR | os.O_CREAT, 0o666)
        self._shared = 0
        self._exclusive = 0
        self.waited_s = 0.0
        """Seconds spent waiting for the lock (either mode)."""

    def _acquire(self, mode: int) -> None:
        """Through the turnstile to the `rw` lock in `mode` (LOCK_SH or LOCK_EX)."""
        t0 = time.perf_counter()
        fcntl.flock(self._turn, fcntl.LOCK_EX)
        try:
            fcntl.flock(self._rw, mode)
        finally:
            fcntl.flock(self._turn, fcntl.LOCK_UN)
        self.waited_s += time.perf_counter() - t0

    def _reader_acquire(self) -> None:
        self._acquire(fcntl.LOCK_SH)

    def _writer_acquire(self) -> None:
        self._acquire(fcntl.LOCK_EX)

    @contextlib.contextmanager
    def shared(self) -> Iterator[None]:
        if self._shared or self._exclusive:
            self._shared += 1
            try:
                yield
            finally:
                self._shared -= 1
            return
        self._reader_acquire()
        self._shared = 1
        try:
            yield
        finally:
            self._shared = 0
            if not self._exclusive:
                fcntl.flock(self._rw, fcntl.LOCK_UN)

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        if self._exclusive:
            self._exclusive += 1
            try:
                yield
            finally:
                self._exclusive -= 1
            return
        held_shared = self._shared > 0
        if held_shared:  # drop it before queueing (see the module docstring)
            fcntl.flock(self._rw, fcntl.LOCK_UN)
        self._writer_acquire()
        self._exclusive = 1
        try:
            yield
        finally:
            self._exclusive = 0
            fcntl.flock(self._rw, fcntl.LOCK_UN)
            if held_shared:
                self._reader_acquire()

    def close(self) -> None:
        for fd in (self._turn, self._rw):
            with contextlib.suppress(OSError):
                os.close(fd)


class NoLock:
    """Stands in where no lock is wanted (interpret tier, or KLINEAGE_GPU_LOCK=off)."""

    waited_s = 0.0

    @contextlib.contextmanager
    def shared(self) -> Iterator[None]:
        yield

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        yield

    def close(self) -> None:
        pass


def lock_path(device_id: str) -> Path | None:
    """Where the lock of GPU `device_id` lives (None: disabled by KLINEAGE_GPU_LOCK=off)."""
    chosen = os.environ.get("KLINEAGE_GPU_LOCK", "").strip()
    if chosen.lower() == "off":
        return None
    if chosen:
        return Path(chosen)
    safe = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in device_id) or "0"
    return Path(tempfile.gettempdir()) / f"klineage-gpu-{safe}.lock"


def for_current_device(torch: object) -> GpuLock | NoLock:
    """The lock of the GPU that `torch` currently uses."""
    cuda = torch.cuda  # type: ignore[attr-defined]
    index = cuda.current_device()
    try:
        device_id = str(cuda.get_device_properties(index).uuid)
    except (AttributeError, RuntimeError):
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")
        device_id = visible[index] if index < len(visible) and visible[index] else str(index)
    path = lock_path(device_id)
    return GpuLock(path) if path is not None else NoLock()


__all__ = ["GpuLock", "NoLock", "for_current_device", "lock_path"]
