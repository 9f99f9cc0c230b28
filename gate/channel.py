"""What the gate's worker shares with the tiers it runs: the job, the channel to the parent,
and how candidate code is imported and its exceptions are named.

The lowest floor of the worker side: `gate.static` (the static tier) and `gate.worker` (the
interpret and device tiers, and the process entry point) both build on it; it imports neither.
"""
from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gate.verdict import FailureKind


@dataclass(frozen=True, slots=True)
class Job:
    """What one worker does. Paths are absolute; `module_path` is the candidate (Triton) or the
    CUDA host module, copied into the scratch folder `scratch` beside `cu_path`."""

    tier: str
    language: str
    module_path: str
    cu_path: str | None
    scratch: str
    origin_dir: str | None
    case_path: str
    seeds: tuple[int, ...]
    extra_seed: int
    reverify_seed: int
    repeat_calls: int = 2
    refill_seed: int = 0  # seeds the crossovers of the refill pools (`gate.refill`)
    refill_sets: int = 4  # input sets per variant the refilled calls rotate through
    env: tuple[tuple[str, str], ...] = ()  # the caller's environment when it asked for the run
    variants: tuple[str, ...] = ()  # device tier: the variants run (`Case.variants`); () = SHAPES
    sealed_seed: int = 0  # inputs of the sealed call (`gate.guards.Seal`); 0: reverify_seed + 1
    config_seed: int = 0  # names the autotune configuration calls' set; 0: reverify_seed + 2


class Stop(Exception):
    """Ends the worker with a rejection already sent."""


# How long a worker waits for the parent's go-ahead before timing anyway (the parent answers
# as soon as it has judged what it was sent; it kills a worker that overruns its time limit).
QUIET_WAIT_S = 120.0


class Channel:
    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.quiet_s = 0.0
        """Seconds spent waiting for the parent's go-ahead (`wait_quiet`)."""

    def send(self, *msg: Any) -> None:
        from gate.transport import send  # noqa: PLC0415

        send(self.conn, msg)  # large tensors as sealed memory files (`gate.transport.Sealed`)

    def wait_quiet(self) -> None:
        """Ask the parent to finish judging the outputs sent so far and wait for its answer:
        its comparisons are CPU work (torch on every core) that would slow a timed kernel's
        launches. A parent that does not answer (an older one) is waited for at most
        `QUIET_WAIT_S`."""
        import time  # noqa: PLC0415

        t0 = time.perf_counter()
        self.send("quiet")
        if self.conn.poll(QUIET_WAIT_S):
            self.conn.recv()
        self.quiet_s += time.perf_counter() - t0

    def answer(self, kind: str) -> tuple[Any, ...]:
        """The parent's answer of `kind` to the message just sent (a late "go" of `wait_quiet`
        is passed over); a parent that does not answer within `QUIET_WAIT_S` ends the run."""
        while self.conn.poll(QUIET_WAIT_S):
            msg = self.conn.recv()
            if isinstance(msg, tuple) and msg and msg[0] == kind:
                return msg
            if msg != ("go",):
                break
        raise Stop

    def reject(self, kind: FailureKind, stage: str, reason: str) -> None:
        self.send("reject", kind.value, stage, reason)
        raise Stop


def classify(exc: BaseException) -> FailureKind:
    """Failure kind of an exception raised by candidate code or by the device (an operation
    the gate refused, `gate.guards.GateRefusal`, is tampering)."""
    if any(getattr(e, "gate_refusal", False) is True for e in exception_chain(exc)):
        return FailureKind.TAMPERING
    text = f"{type(exc).__name__}: {exc}".lower()
    if isinstance(exc, MemoryError) or "out of memory" in text or "outofmemory" in text \
            or "can't allocate memory" in text or "cannot allocate memory" in text:
        return FailureKind.OUT_OF_MEMORY
    if "illegal memory access" in text or "illegal_address" in text or "misaligned address" in text \
            or "illegal address" in text:
        return FailureKind.ILLEGAL_ADDRESS
    if "compilationerror" in text or "compiletimeassertion" in text or "ptxas" in text \
            or any(getattr(e, "compile_refusal", False) is True for e in exception_chain(exc)):
        return FailureKind.COMPILE_ERROR
    return FailureKind.RUNTIME_ERROR


def exception_chain(exc: BaseException) -> list[BaseException]:
    """`exc` and the exceptions it was raised from, outermost first (`__cause__`, else the
    `__context__` it does not suppress; each once)."""
    chain, seen = [exc], {id(exc)}
    while True:
        nxt = chain[-1].__cause__ or (None if chain[-1].__suppress_context__
                                      else chain[-1].__context__)
        if nxt is None or id(nxt) in seen:
            return chain
        seen.add(id(nxt))
        chain.append(nxt)


def describe(exc: BaseException, limit: int = 600) -> str:
    """`Type: message` of `exc`, at most about `limit` characters. When it was raised from
    another exception, the innermost one is appended ("caused by ..."): Triton's
    CompilationError of a nested call names only the call site, its cause says what failed."""
    msg = f"{type(exc).__name__}: {exc}"
    root = exception_chain(exc)[-1]
    if root is exc:
        return msg if len(msg) <= limit else msg[:limit] + "..."
    cause = f"{type(root).__name__}: {root}"
    cause = cause if len(cause) <= limit // 2 else cause[:limit // 2] + "..."
    room = max(120, limit - len(cause))
    head = msg if len(msg) <= room else msg[:room] + "..."
    return f"{head}\ncaused by {cause}"


def import_candidate(chan: Channel, job: Job, stage: str = "import") -> Any:
    """Import the candidate module from the scratch folder; reject on failure. A module that
    defines a `ModelNew` class instead of `run` gets a `run` that calls it
    (`gate.hostforms.entry`)."""
    scratch = str(Path(job.scratch).resolve())
    sys.path.insert(0, scratch)
    if job.origin_dir:
        sys.path.append(job.origin_dir)
    name = "klineage_candidate_" + Path(job.module_path).stem
    spec = importlib.util.spec_from_file_location(name, job.module_path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except SystemExit as exc:
        chan.reject(FailureKind.IMPORT_ERROR, stage, f"the module called sys.exit({exc.code}) on import")
    except BaseException as exc:
        kind = classify(exc)
        chan.reject(FailureKind.IMPORT_ERROR if kind is FailureKind.RUNTIME_ERROR else kind, stage,
                    f"importing the candidate raised {describe(exc)}")
    from gate.hostforms import entry  # noqa: PLC0415

    try:
        run = entry(module, job.case_path)
    except Exception as exc:  # the host's model class does not build
        chan.reject(FailureKind.IMPORT_ERROR, stage,
                    f"building the module's ModelNew raised {describe(exc)}")
    if run is None:
        chan.reject(FailureKind.IMPORT_ERROR, stage,
                    "the module defines no callable `run` (nor a `ModelNew` class)")
    module.run = run
    return module
