"""Benchmark jobs placed on the GPUs of one machine by the device memory their gates hold.

Each GPU is one pool of `total` bytes. A job states what its gates hold on the device
(`GateMemory`): `least`, what a gate holds when it keeps the fewest input sets it ever keeps
(`gate.memplan.least_bytes`: the rest wait in host memory), and `most`, when it keeps every
set it asks for (`gate.memplan.gate_bytes`), and what it then holds in host memory (`host`
at its least, `gate.memplan.host_bytes`; none at its most; `parked` / `parked_host` for a
plan in between that keeps its first sets and parks fewer). `Admission.place` puts a job on
the GPU with the most room where its `least` fits and grants it its `most` where the `least`
of the job next in line still fits beside it, else its `least`; where the machine's host
memory (`host_total`, one pool for all GPUs) bounds what jobs park: of the plans that fit
both (`least`, `parked`, `most`), a job is granted the one taking the smaller share of the room
left on the devices and on the host (`Admission._share`), else it waits. The job's processes then plan for at most
the grant (`gate.memplan.CAP_ENV`) and run on that GPU alone (`CUDA_VISIBLE_DEVICES`): a gate
granted less than it asks for keeps fewer sets instead of running out of memory, and jobs
whose grants fit together never make one another short. A job larger than a whole GPU runs
there alone, granted all of it.

`schedule` runs a queue in order, `jobs` at once at most: the first job that fits starts, so
a job waiting for room lets later, smaller ones start meanwhile (a queue of the largest first
runs them side by side and fills the room around them with the small ones). It stops starting
jobs once its `stop()` says so. Pure bookkeeping: tested on the CPU with made-up sizes.
"""
from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any

CAP_ENV = "KLINEAGE_GATE_MEMORY"
"""`gate.memplan.CAP_ENV` (named here so the placement needs no gate import)."""
LOCK_ENV = "KLINEAGE_GPU_LOCK"
"""`gate.gpulock`'s lock path: where a run sets one path, each GPU gets its own beside it."""


@dataclasses.dataclass(frozen=True, slots=True)
class GateMemory:
    """A job's device bytes: the least its gates run with, and the most they would keep; the
    host bytes its gates hold when granted the least (their sets waiting there)."""

    least: float
    most: float
    host: float = 0.0
    parked: float | None = None
    parked_host: float = 0.0

    def host_at(self, granted: float) -> float:
        """Host bytes the job's gates park when granted `granted` device bytes."""
        if granted >= self.most:
            return 0.0
        if self.parked is not None and granted >= self.parked:
            return self.parked_host
        return self.host


@dataclasses.dataclass(frozen=True, slots=True)
class Slot:
    """Where a job runs: `gpu` (a `CUDA_VISIBLE_DEVICES` entry; None: not pinned), the pool's
    index, the bytes granted (None: no bound) and the host bytes counted for it."""

    gpu: str | None
    index: int
    grant: float | None
    host: float = 0.0


class Admission:
    """One pool of `total` bytes per GPU of `gpus` (None: no memory bound; jobs then go to the
    GPU running the fewest) and one of `host_total` bytes of host memory for the machine (None:
    no bound)."""

    def __init__(self, gpus: Sequence[str | None], total: float | None,
                 host_total: float | None = None) -> None:
        if not gpus:
            raise ValueError("no GPU to place jobs on")
        self.gpus = list(gpus)
        self.total = total
        self.host_total = host_total
        self.used = [0.0] * len(gpus)
        self.running = [0] * len(gpus)
        self.host_used = 0.0

    def place(self, need: GateMemory, after: GateMemory | None = None) -> Slot | None:
        """The slot of a job needing `need` (`after`: the job next in line), or None when no
        GPU has room for it now."""
        if self.total is None:
            i = min(range(len(self.gpus)), key=lambda k: self.running[k])
            return self._take(i, None)
        rooms = [self.total - u for u in self.used]
        fits = [i for i in range(len(self.gpus)) if need.least <= rooms[i]]
        if not fits:  # larger than what any GPU has left: alone on an idle one, granted it all
            idle = [i for i in range(len(self.gpus)) if self.running[i] == 0]
            if not idle or need.least <= self.total or not self._host_fits(need.host_at(self.total)):
                return None
            return self._take(idle[0], self.total, need.host_at(self.total))
        for i in sorted(fits, key=lambda k: -rooms[k]):
            granted = grant(need, rooms[i], after)
            if granted >= need.most:  # every set on the device: nothing parked
                return self._take(i, granted, 0.0)
            levels = [g for g in (need.least, need.parked, need.most)
                      if g is not None and g <= rooms[i] and self._host_fits(need.host_at(g))]
            if levels:
                granted = min(levels, key=lambda g: self._share(g, need.host_at(g), sum(rooms)))
                return self._take(i, granted, need.host_at(granted))
        return None

    def _share(self, device: float, host: float, device_room: float) -> float:
        """The larger of the shares a grant takes of the device room left on the machine and of
        the host room left (the plan that leaves both most room for the jobs after it), the
        device's share first where they are equal."""
        if self.host_total is None:
            return device / max(device_room, 1.0)
        host_room = max(self.host_total - self.host_used, 1.0)
        return max(device / max(device_room, 1.0), host / host_room) + device * 1e-18

    def _host_fits(self, host: float) -> bool:
        """`host` bytes fit beside what the running jobs park, or no job runs (a job larger than
        the machine's host memory runs alone)."""
        return self.host_total is None or self.host_used + host <= self.host_total \
            or sum(self.running) == 0

    def _take(self, i: int, granted: float | None, host: float = 0.0) -> Slot:
        self.used[i] += granted or 0.0
        self.running[i] += 1
        self.host_used += host
        return Slot(self.gpus[i], i, granted, host)

    def release(self, slot: Slot) -> None:
        self.used[slot.index] -= slot.grant or 0.0
        self.running[slot.index] -= 1
        self.host_used -= slot.host


def grant(need: GateMemory, room: float, after: GateMemory | None = None) -> float:
    """Bytes granted to a job needing `need` where `room` is free (`need.least` <= `room`): its
    `most` where that leaves the next job's `least` free beside it, else its `least` (a grant
    in between would keep the next job from a GPU it will fit on once another job ends)."""
    keep = after.least if after is not None else 0.0
    return need.most if need.most + keep <= room else need.least


def visible_gpus(count: int | None, environ: Mapping[str, str] | None = None,
                 detected: Callable[[], int] | None = None) -> list[str]:
    """The GPUs to spread jobs over: the first `count` entries of `CUDA_VISIBLE_DEVICES` where
    set, else indices 0..count-1; without `count`, every visible one (`detected()`: the
    device count, e.g. `torch.cuda.device_count`; at least one)."""
    env = os.environ if environ is None else environ
    listed = [g.strip() for g in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if g.strip()]
    if count is None:
        count = len(listed) if listed else max(1, detected() if detected else 1)
    if listed and count > len(listed):
        raise ValueError(f"--gpus {count}: CUDA_VISIBLE_DEVICES names {len(listed)}")
    return listed[:count] if listed else [str(i) for i in range(count)]


def slot_env(slot: Slot, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a job's process in `slot`: pinned to its GPU, its gates planning for
    at most its grant, and, where the run names one GPU lock path, that GPU's own lock."""
    env = dict(os.environ if environ is None else environ)
    if slot.gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = slot.gpu
        lock = env.get(LOCK_ENV, "").strip()
        if lock and lock.lower() != "off":
            env[LOCK_ENV] = f"{lock}.gpu{slot.gpu}"
    if slot.grant is not None:
        env[CAP_ENV] = str(int(slot.grant))
    else:
        env.pop(CAP_ENV, None)
    return env


def schedule(queue: Sequence[Any], need: Callable[[Any], GateMemory], admission: Admission,
             run: Callable[[Any, Slot], None], jobs: int,
             stop: Callable[[], bool] = lambda: False) -> list[Any]:
    """Run `run(item, slot)` for the items of `queue`, each once `admission` places it and fewer
    than `jobs` run, the first in order that fits first; none starts once `stop()` is true. The items left unstarted
    (in order). An exception of `run` propagates after the running ones end."""
    pending = list(queue)
    running: dict[Future[None], Slot] = {}
    errors: list[BaseException] = []
    jobs = max(1, jobs)
    with ThreadPoolExecutor(jobs) as pool:
        while pending or running:
            while pending and len(running) < jobs and not stop():
                placed = _first_placed(pending, need, admission)
                if placed is None:  # an idle machine places any job: something runs and will end
                    break
                i, slot = placed
                running[pool.submit(run, pending.pop(i), slot)] = slot
            if not running:
                break
            done, _ = wait(list(running), timeout=5.0, return_when=FIRST_COMPLETED)
            for future in done:
                admission.release(running.pop(future))
                if future.exception() is not None:
                    errors.append(future.exception())
    if errors:
        raise errors[0]
    return pending


def _first_placed(pending: Sequence[Any], need: Callable[[Any], GateMemory],
                  admission: Admission) -> tuple[int, Slot] | None:
    """(index, slot) of the first pending job `admission` places now (the job after it is
    the next in line), or None."""
    for i, item in enumerate(pending):
        slot = admission.place(need(item), need(pending[i + 1]) if i + 1 < len(pending) else None)
        if slot is not None:
            return i, slot
    return None


__all__ = ["Admission", "CAP_ENV", "GateMemory", "Slot", "grant", "schedule", "slot_env",
           "visible_gpus"]
