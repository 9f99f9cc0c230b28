"""The per-GPU readers-writer lock that lets gates share a GPU (gate.gpulock)."""
from __future__ import annotations

import threading
import time

from gate.gpulock import GpuLock, NoLock, lock_path


def _started(fn):
    t = threading.Thread(target=fn, daemon=True)
    t.start()
    return t


def test_shared_holders_coexist(tmp_path):
    a, b = GpuLock(tmp_path / "g"), GpuLock(tmp_path / "g")
    with a.shared():
        entered = threading.Event()
        t = _started(lambda: (b.shared().__enter__(), entered.set()))
        assert entered.wait(5), "a second reader was kept out"
        t.join(5)


def test_exclusive_waits_for_readers_and_blocks_later_readers(tmp_path):
    reader, writer, late = (GpuLock(tmp_path / "g") for _ in range(3))
    events: list[str] = []
    reader_ctx = reader.shared()
    reader_ctx.__enter__()

    def write() -> None:
        with writer.exclusive():
            events.append("writer in")
            time.sleep(0.2)
            events.append("writer out")

    def read_late() -> None:
        with late.shared():
            events.append("late reader in")

    w = _started(write)
    time.sleep(0.3)
    assert events == [], "the writer got in while a reader held the lock"
    r = _started(read_late)
    time.sleep(0.3)
    assert events == [], "a reader that came after a waiting writer went first"
    reader_ctx.__exit__(None, None, None)
    w.join(5)
    r.join(5)
    assert events == ["writer in", "writer out", "late reader in"]


def test_exclusive_inside_shared_drops_and_retakes_the_shared_lock(tmp_path):
    mine, other = GpuLock(tmp_path / "g"), GpuLock(tmp_path / "g")
    events: list[str] = []

    def write() -> None:
        with other.exclusive():
            events.append("other in")
            time.sleep(0.3)
            events.append("other out")

    with mine.shared():
        with mine.exclusive():
            t = _started(write)
            time.sleep(0.3)
            assert events == [], "a second writer got in during a measurement"
            events.append("mine out")
        # Retaking the shared lock queues behind the writer that waited.
        events.append("mine shared again")
    t.join(5)
    assert events == ["mine out", "other in", "other out", "mine shared again"]
    assert mine.waited_s > 0.2


def test_lock_path_honours_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("KLINEAGE_GPU_LOCK", "off")
    assert lock_path("GPU-1") is None
    monkeypatch.setenv("KLINEAGE_GPU_LOCK", str(tmp_path / "x.lock"))
    assert lock_path("GPU-1") == tmp_path / "x.lock"
    monkeypatch.delenv("KLINEAGE_GPU_LOCK")
    assert lock_path("GPU-a/b").name == "klineage-gpu-GPU-a_b.lock"
    with NoLock().exclusive(), NoLock().shared():
        pass


def test_a_worker_times_only_once_its_parent_has_judged_what_it_sent() -> None:
    import multiprocessing
    import threading

    from gate.worker import Channel

    parent, child = multiprocessing.Pipe(duplex=True)
    chan = Channel(child)
    seen: list[tuple] = []

    def parent_side() -> None:
        while True:
            msg = parent.recv()
            seen.append(msg)
            if msg[0] == "quiet":
                time.sleep(0.2)  # still comparing what came before
                parent.send(("go",))
                return

    judge = threading.Thread(target=parent_side)
    judge.start()
    chan.send("out", 1)
    t0 = time.perf_counter()
    chan.wait_quiet()
    waited = time.perf_counter() - t0
    judge.join()
    assert seen == [("out", 1), ("quiet",)]
    assert waited >= 0.2 and chan.quiet_s >= 0.2
