"""Executors: where gate jobs run. One interface (`gate.executor_base.Executor`, re-exported
here), two implementations.

- `LocalExecutor`: this machine, each job in a fresh worker process (`gate.check`), several
  at once in threads; device-tier jobs share the GPU through `gate.gpulock`.
- `RayExecutor` (`gate.ray_executor`, needs the `ray` extra): every job is a Ray task on a
  cluster, one GPU per device-tier job as a Ray resource, CPU only for the static and
  interpret tiers. Inside its task a job runs exactly as `gate.check` runs it here (the GPU
  lock, the reference timed in the same worker as the candidate).

Either way the caller's verdict cache is the single source of truth: a job whose verdict is
cached is answered from it and not sent, and a fresh verdict is cached by the caller. A job
whose executor fails it (a Ray worker or node that died, a cancelled task) gets a verdict of
kind `gate_fault`, which is never cached: submitting the job again retries it.

`check_many` gates a batch through one. `open_executor("local" | "ray", address=...)` makes
one; `add_executor_arguments` / `executor_from_args` give an argparse script the same
`--executor` / `--ray-address` options as the `klineage` commands.
"""
from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, ClassVar

from gate.cases import Case
from gate.check import CheckRequest, check
from gate.executor_base import Executor
from gate.verdict import Tier, Verdict
from kir.errors import BadInputError

EXECUTORS = ("local", "ray")
RAY_MISSING = "the ray executor needs Ray: pip install 'klineage[ray]'"


class LocalExecutor(Executor):
    """This machine: `check` runs the job in the calling thread, `submit` in a pool of `jobs`
    threads (each job in its own worker process)."""

    name: ClassVar[str] = "local"

    def __init__(self, jobs: int | None = None) -> None:
        self.jobs = max(1, jobs or os.cpu_count() or 1)
        self._pool: ThreadPoolExecutor | None = None

    def submit(self, request: CheckRequest) -> Future[Verdict]:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.jobs, thread_name_prefix="klineage-gate")
        return self._pool.submit(_check_request, request)

    def check(self, source: str, language: Any, case: Case | str | Path,
              tier: Tier | str = Tier.AUTO, **kwargs: Any) -> Verdict:
        return check(source, language, case, tier, **kwargs)

    def gpu_available(self) -> bool:
        from gate.check import gpu_available  # noqa: PLC0415

        return gpu_available()

    def width(self, tier: Tier | str) -> int:
        return self.jobs

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


def _check_request(r: CheckRequest) -> Verdict:
    return check(r.source, r.language, r.case, r.tier, path=r.path, host=r.host,
                 timeout=r.timeout, cache=r.cache)


def check_many(requests: Sequence[CheckRequest], jobs: int | None = None,
               executor: Any = None) -> list[Verdict]:
    """Gate independent candidates concurrently (each in its own worker), in request order:
    through `executor` (an `Executor`, e.g. a Ray cluster) when given, else on
    this machine with `jobs` at once (default: one per CPU)."""
    if executor is not None:
        return executor.check_many(requests)
    with LocalExecutor(jobs or max(1, min(len(requests), os.cpu_count() or 1))) as local:
        return local.check_many(requests)


def require_executor(name: str, address: str | None = None) -> None:
    """Check, before any work, that executor `name` can be opened here (known name, `ray`
    importable, an address only with ray): `BadInputError` otherwise. Starts nothing."""
    if name == "local":
        if address:
            raise BadInputError("--ray-address needs --executor ray")
        return
    if name != "ray":
        raise BadInputError(f"unknown executor '{name}' ({', '.join(EXECUTORS)})")
    try:
        import ray  # noqa: F401, PLC0415
    except ImportError:
        raise BadInputError(RAY_MISSING) from None


def open_executor(name: str = "local", *, address: str | None = None,
                  jobs: int | None = None) -> Executor:
    """An executor by name: "local" (`jobs` at once in `submit`/`check_many`) or "ray" (the
    cluster at `address`, else `$RAY_ADDRESS`, else a cluster started on this machine and shut
    down by `close`). `BadInputError` for an unknown name, a missing `ray` package (one line:
    how to install it) or a cluster that cannot be reached."""
    if name == "local":
        if address:
            raise BadInputError("--ray-address needs --executor ray")
        return LocalExecutor(jobs)
    if name == "ray":
        try:
            from gate.ray_executor import RayExecutor  # noqa: PLC0415
        except ImportError as exc:
            if (exc.name or "").split(".")[0] == "ray":
                raise BadInputError(RAY_MISSING) from None
            raise
        return RayExecutor(address=address)
    raise BadInputError(f"unknown executor '{name}' ({', '.join(EXECUTORS)})")


def add_executor_arguments(parser: argparse.ArgumentParser) -> None:
    """`--executor local|ray` and `--ray-address ADDRESS` on an argparse parser."""
    parser.add_argument("--executor", choices=EXECUTORS, default="local",
                        help="where gate jobs run: this machine, or a Ray cluster (one GPU per "
                             "device-tier job; needs pip install 'klineage[ray]')")
    parser.add_argument("--ray-address", default=None,
                        help="with --executor ray: the cluster (default $RAY_ADDRESS, else a "
                             "cluster started on this machine)")


def executor_from_args(args: argparse.Namespace, jobs: int | None = None) -> Executor:
    """The executor `add_executor_arguments`' options name; on a bad choice (no Ray, no
    cluster) one line on stderr and exit code 2."""
    try:
        return open_executor(args.executor, address=args.ray_address, jobs=jobs)
    except BadInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


__all__ = ["EXECUTORS", "Executor", "LocalExecutor", "RAY_MISSING", "add_executor_arguments",
           "check_many", "executor_from_args", "open_executor"]
