"""Device memory the gates sharing one GPU have planned and not yet allocated.

A device gate sizes its input sets from the memory free when it starts (`gate.memplan`). Two
gates starting together on one GPU would both see the same free memory and together plan more
than there is; a gate's working memory (its calls' temporaries) is also allocated only later,
when another gate may have counted it as free. So each gate's worker writes what it has
planned and not yet allocated into a folder beside the GPU's lock (`gate.gpulock`), a file per
worker process holding a byte count, and a worker planning its sets subtracts the other live
workers' counts from the free memory it reads. Reading the counts, planning and writing one's
own happen under an exclusive lock on the folder, so two plans never read the same free
memory. A file whose process has ended counts nothing (and is removed): a worker ended by a
signal leaves no debt.

Best effort by design: where the folder cannot be used, a gate plans as if it were alone.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path


class Ledger:
    """The planned-memory files of one GPU (`folder`), as seen by process `pid`."""

    def __init__(self, folder: str | Path, pid: int | None = None) -> None:
        self.folder = Path(folder)
        self.pid = os.getpid() if pid is None else pid
        self.folder.mkdir(parents=True, exist_ok=True)

    @classmethod
    def beside(cls, lock_path: str | Path | None) -> Ledger | None:
        """The ledger of the GPU whose lock is at `lock_path`; None where there is no lock
        (`KLINEAGE_GPU_LOCK=off`) or the folder cannot be made."""
        if not lock_path:
            return None
        try:
            return cls(f"{lock_path}.mem")
        except OSError:
            return None

    @contextlib.contextmanager
    def planning(self) -> Iterator[None]:
        """Exclusive among the workers of this GPU: read the others' counts, plan, write.
        (Without the lock where it cannot be taken.)"""
        try:
            fd = os.open(self.folder / ".lock", os.O_RDWR | os.O_CREAT, 0o666)
        except OSError:
            yield
            return
        try:
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the lock

    def others(self) -> int:
        """Bytes the other live workers have planned and not yet allocated."""
        total = 0
        for entry in self.folder.iterdir():
            if not entry.name.isdigit() or int(entry.name) == self.pid:
                continue
            if not _alive(int(entry.name)):
                with contextlib.suppress(OSError):
                    entry.unlink()
                continue
            with contextlib.suppress(OSError, ValueError):
                total += max(0, int(entry.read_text().strip() or 0))
        return total

    def reserve(self, nbytes: int) -> None:
        """Say that this worker will still allocate `nbytes` (replaces what it said before)."""
        tmp = self.folder / f".{self.pid}.tmp"
        tmp.write_text(str(max(0, int(nbytes))))
        os.replace(tmp, self.folder / str(self.pid))

    def release(self) -> None:
        with contextlib.suppress(OSError):
            (self.folder / str(self.pid)).unlink()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


__all__ = ["Ledger"]
