"""Gate jobs on a Ray cluster (`--executor ray`; the `ray` extra: pip install 'klineage[ray]').

Each job the verdict cache cannot answer becomes one Ray task: device-tier tasks ask for one
GPU (`gpus_per_job`) and a CPU, static and interpret-tier tasks a CPU only. Ray hands a task
its GPU through `CUDA_VISIBLE_DEVICES`, and the task runs the job exactly as `gate.check` does
on one machine (`gate.check.evaluate`): a fresh worker process that takes the GPU's lock
(`gate.gpulock`, which holds per node) and times the reference in the same process as the
candidate. The task returns the verdict and the platform it ran on; the caller caches it under
the key of that platform, so a cluster of mixed GPUs never answers one GPU's job with
another's verdict. Before sending, the caller looks the job up under the platform of the
cluster (asked once per tier from a probe task).

Tasks are never retried by Ray (`max_retries=0`): a worker or node that dies, a task that is
cancelled or killed for memory, gives that job a `gate_fault` verdict (not cached), and the
other jobs go on; submitting the job again retries it.

Every node needs this package (the same version) and the case: built-in cases go by name, a
case given by path must be at that path on every node, as must a candidate's own folder if
its module imports files beside it.
"""
from __future__ import annotations

import logging
import os
import socket
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any, ClassVar

import ray
import ray.exceptions

from gate.cache import VerdictCache
from gate.cases import EXPERTS_DIR, load_case
from gate.check import CheckRequest, Prepared, cacheable, evaluate, platform_of, prepare
from gate.executor_base import Executor
from gate.verdict import FailureKind, Tier, Verdict, reject
from kir.errors import BadInputError

# Environment the caller's gate settings live in, passed on to the cluster's workers (the
# cache is the caller's: its folder is not).
_FORWARD_PREFIX = "KLINEAGE_"
_NOT_FORWARDED = {"KLINEAGE_CACHE_DIR"}
_RESOURCES_TTL_S = 10.0


def run_job(payload: dict[str, Any]) -> dict[str, Any]:
    """Body of a gate task on a cluster worker: the job as `RayExecutor._payload` packed it,
    run by `gate.check.evaluate`. Returns {"verdict": JSON, "platform": [toolchain, device],
    "node": host name}."""
    # The task's process may run its next task on another GPU (or none): no worker is started
    # ahead of a job in it (`gate.runner.Standby`).
    os.environ["KLINEAGE_GATE_STANDBY"] = "0"
    case = load_case(payload["case"])
    if case.digest() != payload["case_digest"]:
        raise BadInputError(f"case {case.name} at {case.path} on {socket.gethostname()} differs "
                            f"from the caller's (install the same version on every node)")
    if payload.get("variants"):
        case = case.with_variants(payload["variants"])
    job = Prepared(payload["source"], payload["language"], case, Tier(payload["tier"]),
                   tuple(payload["flags"]), payload["stem"], payload["host_text"],
                   Path(payload["path"]) if payload["path"] else None, float(payload["timeout"]))
    verdict = evaluate(job)
    return {"verdict": verdict.to_json(), "platform": list(platform_of(job.tier)),
            "node": socket.gethostname()}


def probe_platform(tier: str) -> list[str]:
    """Body of the probe task: `platform_of(tier)` on a cluster worker."""
    return list(platform_of(Tier(tier)))


class RayExecutor(Executor):
    """Gate jobs as Ray tasks (module docstring). `address`: the cluster (default
    `$RAY_ADDRESS`; with neither, a cluster is started on this machine and shut down by
    `close`). An already initialized Ray (`ray.init` in this process) is used as it is."""

    name: ClassVar[str] = "ray"
    speculate: ClassVar[bool] = True

    def __init__(self, address: str | None = None, *, gpus_per_job: float = 1.0) -> None:
        self.gpus_per_job = gpus_per_job
        self._owns = False
        if not ray.is_initialized():
            target = address or os.environ.get("RAY_ADDRESS") or None
            env = {k: v for k, v in os.environ.items()
                   if k.startswith(_FORWARD_PREFIX) and k not in _NOT_FORWARDED}
            options: dict[str, Any] = {"runtime_env": {"env_vars": env}, "log_to_driver": False,
                                       "logging_level": logging.WARNING}
            if target is None:
                options["include_dashboard"] = False
            try:
                ray.init(address=target, **options)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                raise BadInputError(f"cannot reach the Ray cluster at {target}: {first}") from None
            self._owns = target is None
        self.address = str(ray.get_runtime_context().gcs_address)
        """The cluster's address (also of one this executor started): other processes join it."""
        self._run = ray.remote(max_retries=0)(run_job)
        self._probe = ray.remote(max_retries=0)(probe_platform)
        self._platforms: dict[Tier, tuple[str, str]] = {}
        self._lock = threading.Lock()
        self._seen: tuple[float, dict[str, float]] | None = None

    # -- the cluster ----------------------------------------------------------------------
    def _resources(self) -> dict[str, float]:
        """The cluster's resources (asked again after `_RESOURCES_TTL_S`: a cluster may grow)."""
        now = time.monotonic()
        with self._lock:
            if self._seen is None or now - self._seen[0] > _RESOURCES_TTL_S:
                self._seen = (now, dict(ray.cluster_resources()))
            return self._seen[1]

    def gpu_available(self) -> bool:
        if os.environ.get("KLINEAGE_GATE_NO_GPU") == "1":
            return False
        return self._resources().get("GPU", 0.0) >= self.gpus_per_job

    def width(self, tier: Tier | str) -> int:
        res = self._resources()
        if Tier(tier) is Tier.DEVICE:
            return int(res.get("GPU", 0.0) // self.gpus_per_job) if self.gpus_per_job > 0 else 1
        return max(1, int(res.get("CPU", 1.0)))

    def _platform(self, tier: Tier) -> tuple[str, str]:
        """The cluster's (toolchain, device) at `tier`, asked once of a probe task."""
        with self._lock:
            known = self._platforms.get(tier)
        if known is not None:
            return known
        found = ray.get(self._probe.options(**self._resources_of(tier)).remote(tier.value))
        platform = (str(found[0]), str(found[1]))
        with self._lock:
            self._platforms[tier] = platform
        return platform

    def _resources_of(self, tier: Tier) -> dict[str, float]:
        return {"num_cpus": 1, "num_gpus": self.gpus_per_job if tier is Tier.DEVICE else 0}

    def close(self) -> None:
        if self._owns and ray.is_initialized():
            ray.shutdown()
        self._owns = False

    # -- jobs -------------------------------------------------------------------------------
    def submit(self, request: CheckRequest) -> Future[Verdict]:
        done: Future[Verdict] = Future()
        job = prepare(request.source, request.language, request.case, request.tier,
                      path=request.path, host=request.host, timeout=request.timeout,
                      gpu=self.gpu_available())
        if job.tier is Tier.DEVICE and not self.gpu_available():
            done.set_result(reject(job.tier, "device", FailureKind.UNSUPPORTED,
                                   f"the Ray cluster ({self.address}) has no GPU"))
            return done
        if request.cache:
            try:
                hit = VerdictCache().get(job.key(self._platform(job.tier)))
            except ray.exceptions.RayError as exc:
                done.set_result(_fault(job, exc))
                return done
            if hit is not None:
                done.set_result(hit)
                return done
        ref = self._run.options(**self._resources_of(job.tier)).remote(_payload(job))

        def settle(task: Future[Any]) -> None:
            try:
                done.set_result(self._settle(job, task, request.cache))
            except BaseException as exc:  # never leave the caller waiting
                done.set_exception(exc)

        ref.future().add_done_callback(settle)
        return done

    def _settle(self, job: Prepared, task: Future[Any], cache: bool) -> Verdict:
        try:
            out = task.result()
        except (ray.exceptions.RayError, ConnectionError) as exc:
            return _fault(job, exc)
        verdict = Verdict.from_json(out["verdict"])
        if cache:
            VerdictCache().record(job.key((str(out["platform"][0]), str(out["platform"][1]))),
                                  verdict, cacheable(verdict))
        return verdict


def _payload(job: Prepared) -> dict[str, Any]:
    builtin = job.case.path.parent.parent == EXPERTS_DIR
    return {"source": job.source, "language": job.language,
            "case": job.case.name if builtin else str(job.case.path),
            "case_digest": job.case.digest(), "variants": list(job.case.variants),
            "tier": job.tier.value, "flags": list(job.flags),
            "stem": job.stem, "host_text": job.host_text,
            "path": str(job.src_path) if job.src_path is not None else None,
            "timeout": job.timeout}


def _fault(job: Prepared, exc: BaseException) -> Verdict:
    """The `gate_fault` verdict of a job its Ray task failed."""
    if isinstance(exc, ray.exceptions.WorkerCrashedError):
        why = "the Ray worker running the gate died (killed, preempted or out of memory)"
    elif isinstance(exc, ray.exceptions.NodeDiedError):
        why = "the Ray node running the gate died"
    elif isinstance(exc, ray.exceptions.TaskCancelledError):
        why = "the gate's Ray task was cancelled"
    elif isinstance(exc, ray.exceptions.OutOfMemoryError):
        why = "Ray killed the gate's worker for memory"
    elif isinstance(exc, ray.exceptions.RayTaskError):
        cause = exc.cause if getattr(exc, "cause", None) is not None else exc
        text = str(cause).strip().splitlines()
        why = f"the gate failed on its Ray worker: {type(cause).__name__}: {text[-1] if text else ''}"
    else:
        text = str(exc).strip().splitlines()
        why = f"{type(exc).__name__}: {text[0] if text else ''}"
    return reject(job.tier, "gate", FailureKind.GATE_FAULT, f"{why}; the job may be retried")


__all__ = ["RayExecutor", "probe_platform", "run_job"]
