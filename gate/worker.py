"""The gate's worker: one fresh process per candidate and tier, supervised by `gate.runner`.

The worker reports to its parent over a pipe; the parent decides, comparing outputs itself or,
on the device tier, judging the figures of the worker's comparison against references held
masked under keys only the parent keeps (`gate.heldcompare`). Order inside
the worker matters: the case's inputs and reference outputs (and, on the device, the
reference's timing) are made and sent *before* any candidate code is imported; then the
launch hooks and the tamper snapshot go in, then the candidate loads. Messages (tuples):

    ("ready", info)                                   after imports (info: device, pid, the
                                                       GPU lock's path)
    ("quiet",)                                        before each timed measurement: the parent
                                                       answers ("go",) once it has judged every
                                                       output sent before (the one message the
                                                       parent sends)
    ("stage", name)                                   entering correctness / anti_cheat / timing
    ("mark", phase, seconds)                          a phase's duration (logged by the parent)
    ("ref", variant, phase, seed, outputs, inputs)    reference result (inputs only for cases
                                                       with their own compare); phase refill:
                                                       a crossover of the pool (`gate.refill`)
    ("seeds", variant, seeds)                         the correctness seeds kept for the
                                                       variant (the first of the job's; fewer
                                                       where the device's memory holds fewer
                                                       input sets, `gate.memplan`)
    ("precision", variant, seed, error)               the reference's error on the seed's inputs
                                                       rounded to TF32 (fp32 cases; `gate.precision`)
    ("seal_key", variant, key)                        the key the variant's sealed set is masked
                                                       under (`_mask_sealed`), then forgotten
    ("refs_done",)
    ("unseal", variant)                               a launch window of the sealed call: the
                                                       parent answers ("unsealed", key, fresh key)
                                                       (`guards.Seal.keys`)
    ("ref_ms", variant, ms, wall_ms, timed_s)         device tier (timed_s: seconds spent timing
                                                       so far in this worker)
    ("ref_tf32_ms", variant, ms, timed_s)             device tier, fp32 inputs: the reference
                                                       timed with TF32 allowed
    ("ref_compile_ms", variant, ms, timed_s)          device tier, KLINEAGE_GATE_COMPILE=1: the
                                                       reference under torch.compile, timed
    ("out", variant, phase, seed, outputs, launches)  a candidate call (with held references,
                                                       `gate.heldcompare`, outputs are headers
                                                       alone: the parent answers ("judge",
                                                       reference, key, fresh key, places,
                                                       allclose) and the worker sends
                                                       ("judged", variant, phase, seed,
                                                       figures), answered ("more", other sets'
                                                       keys) when it fails; then ("others",
                                                       ..., figures against each)); phase is seed |
                                                       knockout | fault | sealed | timed |
                                                       reverify | refill (a call on refilled
                                                       inputs; seed names the set of the
                                                       variant's pool)
    ("configs", n)                                    before the configuration calls: at most n
                                                       of their outputs follow
    ("cand_ms", variant, ms, wall_ms, timed_s)        device tier
    ("flag", text)                                    a finding that does not reject (among
                                                       them each warning raised at the case
                                                       module's own lines while its reference
                                                       runs, once)
    ("facts", [CompileFacts json])                    static tier
    ("reject", failure kind, stage, reason)
    ("done",)
"""
from __future__ import annotations

import contextlib
import functools
import os
import random
import statistics
import sys
import time
import traceback
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gate import static
from gate.channel import Channel, Job, Stop, classify, describe, exception_chain, import_candidate
from gate.verdict import FailureKind

__all__ = ["Channel", "Job", "Stop", "classify", "describe", "import_candidate", "main", "standby"]

PHASE_SEED, PHASE_KNOCKOUT, PHASE_FAULT, PHASE_TIMED, PHASE_REVERIFY, PHASE_REFILL = (
    "seed", "knockout", "fault", "timed", "reverify", "refill")
PHASE_SEALED = "sealed"  # inputs visible only while the candidate's kernels run (`guards.Seal`)
# A set of its own runs under each configuration of an autotuner in turn (`_Runner.configs`):
# the set is (variant, "config", seed); a call's phase reads "config <i> of <kernel> (<its
# values>)" and is judged against that set's reference.
PHASE_CONFIG = "config"
REFILL_SAMPLE = 2  # outputs of each timed run checked (drawn after the calls ran), besides its last
# An autotuner in the candidate times each configuration with at most this warm-up and this
# much of repetitions (ms; Triton's defaults are 25 and 100): a median over hundreds of calls
# for a kernel of 0.2 ms still, and a gemm expert's eight configurations cost 0.6 s less.
COMPILE_MODE = "max-autotune-no-cudagraphs"  # the torch.compile baseline (KLINEAGE_GATE_COMPILE=1)
POISON_PIECE_BYTES = 1 << 28  # cached memory poisoned a piece at a time where it is fragmented
TUNE_WARMUP_MS = 10
TUNE_REP_MS = 40
# Attributes of `_Runner` that change while candidate code runs (counters); the others keep
# their identity from the candidate's import on (`guards.TamperWatch.watch_instance`).
RUNNER_MUTABLE = frozenset({"calls", "timed_s", "tuning_s", "sleep_rate", "lead_marks"})


def main(conn: Any, job: Job) -> None:
    """Process entry point (multiprocessing target)."""
    # Candidate prints go to stderr: the parent's stdout may carry JSON (klineage gate --json).
    sys.stdout.flush()
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    try:
        os.setpgrp()  # own process group: the parent can end the candidate's children too
    except OSError:
        pass
    _environment(job.env, job.tier)
    if job.tier in ("interpret", "emulate"):
        _limit_memory()
        _one_thread()
    elif job.tier == "device":
        _limit_memory(device=True)
    chan = Channel(conn)
    try:
        if job.tier == "static":
            static.run_static(chan, job)
        else:
            _run(chan, job)
        chan.send("done")
    except Stop:
        pass
    except BaseException as exc:  # a fault of the gate or the case, not a candidate verdict
        try:
            chan.send("reject", FailureKind.INTERNAL.value, "internal",
                      describe(exc) + "\n" + traceback.format_exc(limit=8))
        except (OSError, ValueError):
            pass
    finally:
        sys.stderr.flush()  # the process ends with os._exit: nothing else flushes it
        conn.close()


def _environment(env: tuple[tuple[str, str], ...], tier: str) -> None:
    """The worker's environment: the caller's `env` (a fork-server child inherits the
    server's from when it started), with the tier alone deciding whether Triton interprets."""
    if env:
        os.environ.clear()
        os.environ.update(dict(env))
    os.environ.pop("TRITON_INTERPRET", None)
    # Floating-point fusion stays what Triton 3.6 (the GPU machine's) and 3.9 do by default,
    # on, unless the caller chose: 3.9 warns from every worker that its default will change,
    # and verdicts taken under two Triton versions should compute alike.
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    if tier == "interpret":
        os.environ["TRITON_INTERPRET"] = "1"
    if tier == "device":
        # A problem of gigabytes keeps sets of a few large tensors beside the calls' equally
        # large temporaries (`gate.memplan`): split cached blocks would leave gigabytes that
        # fit none of them (an H200 ran out with 6 GiB so reserved). Unless the caller chose.
        os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")


def standby(conn: Any, tier: str, env: tuple[tuple[str, str], ...],
            case_path: str | None = None) -> None:
    """Process entry point of a worker started before its job (`gate.runner.Standby`).

    While the previous gate runs it does the start-up every job of `tier` in `env` needs and
    that does not depend on the job: the gate's worker-side imports, Triton's, and on the
    device the CUDA context, the libraries' handles, Triton's driver helpers and the profiler's
    first session (none of which launches a kernel: another gate may be timing meanwhile), and
    with `case_path` the case a run's next gate most likely has (imported before any candidate
    code, as a job imports its case). Then it waits for ("job", Job) and runs it as
    `main` does. No candidate code has run in it before the job: the process is as fresh as
    one started for the job. It ends quietly when the parent closes the pipe first."""
    sys.stdout.flush()  # as in `main`: the parent's stdout may carry JSON
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    try:
        os.setpgrp()
    except OSError:
        pass
    try:
        _environment(env, tier)
        _warm(tier, case_path)
    except Exception:  # noqa: BLE001 — the job's own start-up says what is wrong
        pass
    try:
        conn.send(("warm",))
        msg = conn.recv()
    except (EOFError, OSError):
        return
    if isinstance(msg, tuple) and len(msg) == 2 and msg[0] == "job" and isinstance(msg[1], Job):
        main(conn, msg[1])


def _warm(tier: str, case_path: str | None = None) -> None:
    """The job-independent start-up of a worker of `tier` (`standby`)."""
    if tier == "static":
        return
    import torch  # noqa: PLC0415

    from gate import compare, foreign, gpulock, guards, heldcompare, hostforms, memplan, refill, transport, visits  # noqa: F401, PLC0415
    from gate.cases import import_case_module  # noqa: PLC0415

    if case_path:
        try:
            import_case_module(Path(case_path))
        except Exception:  # noqa: BLE001 — the job imports it again and says why
            pass

    if tier in ("device", "interpret"):  # the emulate tier imports Triton only if a host does
        import triton  # noqa: F401, PLC0415
        import triton.testing  # noqa: F401, PLC0415
    if tier != "device" or not torch.cuda.is_available():
        return
    # No kernel runs here (another gate may be timing): the context, the libraries' loading
    # and handles, Triton's driver helpers and the profiler's first session launch none.
    torch.empty(16, 16, device="cuda")
    torch.backends.cudnn.version()
    torch.cuda.current_blas_handle()
    try:
        from triton import runtime  # noqa: PLC0415

        runtime.driver.active.get_current_device()  # Triton's driver helpers (built once per cache)
    except Exception:  # noqa: BLE001 — the job's first launch builds them then
        pass
    _warm_gate_kernels()
    guards.KernelLog(torch.cuda.synchronize).warm_up()


def _warm_gate_kernels() -> None:
    """Compile the gate's own kernels (`gate.fusedcompare`: the comparison's, and the sealed
    inputs' masks, which every mode uses; from Triton's cache after a run's first worker)
    without launching them: before candidate code loads, and where a worker starts ahead of
    its job, outside the gate."""
    try:
        from gate import heldcompare  # noqa: PLC0415

        heldcompare.warm()
    except Exception:  # noqa: BLE001 — the first comparison compiles them then
        pass


INTERPRET_MEMORY_FRACTION = 0.5  # of the machine's memory, at most INTERPRET_MEMORY_MAX_GIB
INTERPRET_MEMORY_MAX_GIB = 16.0
# Device tier: what the worker may map beyond what it holds when it starts (torch imported), as
# a share of the machine's memory. Its sets and references live on the GPU, a lean plan's
# parked ones in host memory (`gate.memplan.host_bytes`): a plan that needed more than this
# share of the host would take the machine's memory from everything else on it anyway.
DEVICE_MEMORY_FRACTION = 0.75


def data_bytes() -> int:
    """Bytes of this process's data segment as the kernel counts it against RLIMIT_DATA
    (`VmData`: private writable mappings); 0 where /proc does not say."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmData:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


# Triton 3.6's interpreter (and older ones) turns NumPy arrays of one element into Python
# scalars, which NumPy 2.3 and later refuse: honest kernels then raise inside the interpreter
# (`tl.dot`, a grid's cdiv), and the verdict would blame the candidate. Triton 3.9 runs with
# NumPy 2.4; 3.7 and 3.8 are taken to be fixed as well.
INTERPRETER_NUMPY = ((3, 6), (2, 3))  # (last Triton with the old interpreter, first NumPy it fails)


def _version(package: str) -> str:
    from importlib import metadata  # noqa: PLC0415

    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return ""


def interpreter_unfit(triton_version: str, numpy_version: str) -> str | None:
    """Why the interpret tier cannot judge kernels with these Triton and NumPy versions (an
    interpreter that needs an older NumPy), or None."""
    def major_minor(version: str) -> tuple[int, ...]:
        parts = version.split(".")[:2]
        return tuple(int("".join(c for c in p if c.isdigit()) or 0) for p in parts)

    (triton_last, numpy_first), have = INTERPRETER_NUMPY, major_minor(numpy_version)
    if not triton_version or not numpy_version or major_minor(triton_version) > triton_last \
            or have < numpy_first:
        return None
    return (f"Triton {triton_version}'s interpreter needs NumPy below {numpy_first[0]}.{numpy_first[1]} "
            f"(this machine has {numpy_version}): install 'numpy<{numpy_first[0]}.{numpy_first[1]}' "
            "to gate at the interpret tier, or gate at the device tier")


def _limit_memory(device: bool = False) -> None:
    """Cap the worker's data segment (RLIMIT_DATA, soft and hard, so candidate code cannot
    lift it), so that a candidate that allocates without end (a huge buffer, a recursion with
    no bound) meets a MemoryError (`out_of_memory`) instead of taking the machine's memory from
    everything else on it. Interpret and emulate tiers: half the machine's memory, at most 16
    GiB. Device tier: what the process holds now (torch and the CUDA driver map large private
    regions of their own, counted in the segment) plus `DEVICE_MEMORY_FRACTION` of the
    machine's memory. On a host that overcommits (vm.overcommit_memory=1, as on the GPU
    machines here) nothing else stops a 16 TiB `bytearray`: it is granted and zeroed page by
    page until the kernel's OOM killer picks a process. `KLINEAGE_GATE_MEMORY_GIB` overrides
    the share (GiB beyond what the process holds on the device tier); 0 switches the cap off."""
    try:
        import resource  # noqa: PLC0415

        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        default = DEVICE_MEMORY_FRACTION * total / 2**30 if device else \
            min(INTERPRET_MEMORY_MAX_GIB, INTERPRET_MEMORY_FRACTION * total / 2**30)
        gib = float(os.environ.get("KLINEAGE_GATE_MEMORY_GIB", "") or default)
        if gib > 0:
            cap = int(gib * 2**30) + (data_bytes() if device else 0)
            _, hard = resource.getrlimit(resource.RLIMIT_DATA)
            if hard != resource.RLIM_INFINITY:
                cap = min(cap, hard)
            resource.setrlimit(resource.RLIMIT_DATA, (cap, cap))
    except (ImportError, ValueError, OSError):
        pass  # no cap where the platform has none: the OOM killer remains (out_of_memory)


def _one_thread() -> None:
    """Interpret and emulate tiers: torch's and NumPy's BLAS thread pools hold one thread. The
    kernels run in Python (Triton's interpreter: NumPy on one tile at a time) or in the
    emulator's fibers, on one thread either way; a pool's threads only split the small products
    of one tile and spin between them, against each other and against the gates beside this one
    (a gemm gate: 2.4 -> 1.6 s on two busy cores; one product of a tile: 0.7 -> 0.05 ms). The
    references are computed at the small shapes these tiers run. Without `threadpoolctl`
    installed, NumPy's pool stays as it is."""
    import torch  # noqa: PLC0415

    torch.set_num_threads(1)
    try:
        from threadpoolctl import threadpool_limits  # noqa: PLC0415
    except ImportError:
        return
    threadpool_limits(1, user_api="blas")


# ---------------------------------------------------------------------------------------------
# interpret / device tiers

class _Laps:
    """Adds (name, seconds since the previous lap) to a list, summing repeated names."""

    def __init__(self, into: list[tuple[str, float]]) -> None:
        import time  # noqa: PLC0415

        self.into, self.clock = into, time.perf_counter
        self.last = self.clock()

    def restart(self) -> None:
        """The next lap counts from now."""
        self.last = self.clock()

    def __call__(self, name: str) -> None:
        now = self.clock()
        for i, (seen, s) in enumerate(self.into):
            if seen == name:
                self.into[i] = (name, s + now - self.last)
                break
        else:
            self.into.append((name, now - self.last))
        self.last = now


class _Runner:
    """State of one interpret/device run inside the worker."""

    def __init__(self, chan: Channel, job: Job) -> None:
        self.startup: list[tuple[str, float]] = []  # (part of the start-up, seconds)
        lap = _Laps(self.startup)
        self.parts: list[tuple[str, float]] = []  # (part of the phase just run, seconds)
        self.lap = _Laps(self.parts)
        import torch

        from gate import gpulock, guards, refill, visits
        from gate.cases import import_case_module

        self.chan, self.job, self.torch, self.guards, self.refill = chan, job, torch, guards, refill
        self.visits = visits  # imported before candidate code: the tamper watch holds it
        self.device = "cuda" if job.tier == "device" else "cpu"
        lap("start-up: gate imports")
        if self.device == "cuda" and not torch.cuda.is_available():
            chan.reject(FailureKind.UNSUPPORTED, "import", "the device tier needs a CUDA GPU; none is visible")
        if job.tier == "interpret" and (unfit := interpreter_unfit(_version("triton"),
                                                                   _version("numpy"))):
            chan.reject(FailureKind.UNSUPPORTED, "import", unfit)
        lap("start-up: cuda")
        try:
            self.case = import_case_module(Path(job.case_path))
        except Exception as exc:
            chan.reject(FailureKind.BAD_CASE, "import", f"the case module does not import: {describe(exc)}")
        self.shapes = self._shape_table()
        lap("start-up: case")
        self.cap = guards.Captured.take()
        self.do_bench = None
        # Shared around kernel runs, exclusive around timed ones (other gates may share the GPU).
        self.calls = 0  # candidate calls made (the first one compiles)
        self.lock: Any = gpulock.NoLock()
        self.ledger: Any = None  # planned device memory of the gates on this GPU (`gate.memledger`)
        if self.device == "cuda":
            from gate.memledger import Ledger  # noqa: PLC0415

            self.lock = gpulock.for_current_device(torch)
            self.ledger = Ledger.beside(getattr(self.lock, "path", None))
        lap("start-up: cuda")
        if job.language == "triton" or self.device == "cuda":
            import triton  # noqa: F401  (imported before the candidate so its hooks can go in)
            import triton.testing

            self.do_bench = triton.testing.do_bench
        lap("start-up: triton import")
        ref = self.case.reference
        self.reference_code = (str(Path(ref.__code__.co_filename).resolve()), ref.__code__.co_name)
        self.originals: dict[tuple[str, str, int], tuple[Any, ...]] = {}
        # by variant, what each autotuner's pruning kept on its first seed's correctness call
        self.first_kept: dict[str, dict[int, set[int]]] = {}
        # by variant, the kernels its first correctness call launched (`check_same_kernels`);
        # by variant and the integers of a set, the launches of its later correctness calls
        self.launched: dict[str, frozenset[str]] = {}
        self.seed_launches: dict[tuple[str, Any], list[tuple[Any, ...]]] = {}
        # torch's dispatch-mode stack: its depth before candidate code loaded, and its reader
        self.modes_before = 0
        self.mode_depth: Callable[[], int] = lambda: 0
        self.timed_s = 0.0  # seconds spent inside timed runs (the rest is the gate's overhead)
        self.sleep_rate: float | None = None  # `torch.cuda._sleep` cycles per microsecond
        self.monitor: Any = None
        self.watch: Any = None
        self.run_fn: Any = None
        self.tuning_s = 0.0  # seconds the autotuner's configurations were timed (device tier)
        self.pools: dict[str, Any] = {}  # variant -> refill.Pool
        # variant -> the pool sets (by seed) its timed calls have run on, whether every set
        # of its pool has the same integers (scalars, shapes, integer tensors), and the first
        # visits its timed runs measured, judged together after the last run (`gate.visits`)
        self.visited: dict[str, set[int]] = {}
        self.same_work: dict[str, bool] = {}
        self.first_visits: dict[str, list[Any]] = {}
        self.kernels = guards.KernelLog(self.cap.synchronize)
        if self.device == "cuda":
            self.kernels.warm_up()
            sleep = getattr(self.torch.cuda, "_sleep", None)
            if sleep is not None:  # the marks of `gpu_lead` on the GPU's timeline
                self.kernels.learn_marker(lambda: sleep(1))
        self.lead_marks = 0  # the marks the last `gpu_lead` issued (`visits.call_gpu_ms`)
        lap("start-up: kernel log")
        if self.device == "cuda" and _held_mode(job.tier, hasattr(self.case, "compare")):
            _warm_gate_kernels()
            lap("start-up: gate kernels")
        self.modules_before: set[str] = set()
        self.threads_before: frozenset[int] = frozenset()  # Python threads before candidate code
        self.audit: Any = None  # the process's `guards.AuditGuard`, armed at candidate import
        self.permitted: frozenset[str] = frozenset()  # foreign modules the host may load
        self.reference_warnings: set[str] = set()  # sent as flags, each once
        # what a CUDA host runs under, for good: the emulate tier's CPU stand-ins, the device
        # tier's CUDA header folders for the host's own NVRTC calls
        self.emulation = contextlib.ExitStack()
        self.held_mode = _held_mode(job.tier, hasattr(self.case, "compare"))
        self.vault: dict[tuple[str, str, int], list[Any]] = {}  # held references (masked)
        self.parked: set[tuple[str, str, int]] = set()  # input sets waiting off the device
        # parked sets dropped and drawn again on the device where used (`gate.remake`), and
        # per variant whether its make_inputs draws a set the same twice
        self.recipes: dict[tuple[str, str, int], Any] = {}
        self.redraws: dict[str, bool] = {}
        self.draw_s: dict[str, float] = {}  # variant -> its warm draw's seconds (the probe's)
        # held references dropped and computed again at each comparison (`_recomputes`): key ->
        # the digest of its first computation; per variant whether its references are, the
        # first computation's digest of every set that may be, and the reference's seconds
        self.recomputed: dict[tuple[str, str, int], str] = {}
        self.recomputes: dict[str, bool] = {}
        self.ref_digests: dict[tuple[str, str, int], str] = {}
        self.compute_s: dict[str, float] = {}
        self.copy_rates: dict[str, float] = {}  # variant -> bytes/s of a reference's copy out and in
        self.remakes: dict[str, bool] = {}  # variant -> whether its crossovers' references are too
        self.ref_settings: tuple[Any, ...] | None = None  # torch's settings the references ran under
        self.plan_figures: dict[str, tuple[int, int]] = {}  # variant -> (free bytes, reference peak)
        # variant -> device bytes beyond its plan where parked sets' references (or a set that
        # cannot be drawn again) stay (`memplan.room_beyond`), and what stayed there
        self.room: dict[str, int] = {}
        self.spare: dict[str, int] = {}  # variant -> device bytes beyond its plan (`_spare`)
        self.set_size: dict[str, int] = {}  # variant -> bytes of its first input set
        self.stayed: dict[str, list[str]] = {}
        # variant -> the sets that will wait, in the order their references have a claim on the
        # room (`_room_order`), and the sets whose place is decided
        self.room_order: dict[str, list[tuple[str, str, int]]] = {}
        self.placed: set[tuple[str, str, int]] = set()
        self.set_plans: dict[str, Any] = {}  # variant -> memplan.SetPlan
        # the seed a set was drawn with where it is not the job's (`_draw_seed`) and the set
        # may be drawn again (the configuration sets; the sealed set's is kept nowhere)
        self.draw_seeds: dict[tuple[str, str, int], int] = {}
        # the sealed sets' (dtype, shape) per input where kept masked (`_mask_sealed`), else None
        self.sealed_meta: dict[tuple[str, str, int], list[Any]] = {}
        self.out_bytes: dict[str, int] = {}  # variant -> bytes of its first reference's tensors
        self.work_bytes: dict[str, int] = {}  # variant -> memplan.working_bytes

    # -- helpers -------------------------------------------------------------------------
    def _shape_table(self) -> Any:
        """SMALL_SHAPES (interpret tier), SHAPES (device tier), or the job's selection of
        SHAPES and BENCH_SHAPES variants (a `Case.with_variants` view)."""
        if self.device != "cuda":
            return self.case.SMALL_SHAPES
        if not self.job.variants:
            return self.case.SHAPES
        table = {**self.case.SHAPES, **getattr(self.case, "BENCH_SHAPES", {})}
        missing = [v for v in self.job.variants if v not in table]
        if missing:
            self.chan.reject(FailureKind.BAD_CASE, "import",
                             f"the case module has no variant {', '.join(missing)}")
        return {v: table[v] for v in self.job.variants}

    def sync(self) -> None:
        if self.cap.synchronize is not None:
            self.cap.synchronize()

    def clone_inputs(self, inputs: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(self.cap.clone(x) if type(x) is self.cap.tensor_type else x for x in inputs)

    def encode(self, values: Any) -> list[Any]:
        from gate.transport import encode_all

        return encode_all(values, self.cap)

    def bench(self, fn: Any, between: Any = None, *, times: list[float] | None = None,
              on_reps: Callable[[int], Any] | None = None) -> tuple[float, float]:
        """(median ms by do_bench with L2 flush, mean wall-clock ms of 10 synchronized calls).
        Timed once the parent has judged everything sent so far (`Channel.wait_quiet`) and
        with the GPU to itself (`gate.gpulock`). `between()` runs before each L2 flush, i.e.
        before every timed call, outside the measured interval (the input refill). With
        `times`, the measured calls' milliseconds are added to it, one each, in their order
        (`gate.visits.bench_calls`, do_bench's measurement; `on_reps(n)` is told their number
        before the first). A call after which `between()` returns True (it brought in a set)
        gets a longer lead (`gpu_lead`). Python's garbage collector is paused while timing."""
        self.chan.wait_quiet()
        with self.lock.exclusive():
            start = self.cap.perf_counter()
            with self.gpu_lead(fn, between):
                if times is None:
                    with self.visits.collector_paused():  # as `visits.bench_calls` times
                        ms = float(self.do_bench(fn, warmup=25, rep=100, return_mode="median"))
                else:
                    times.extend(self._bench_calls(fn, on_reps))
                    ms = float(statistics.median(times))
            self.sync()
            t0 = self.cap.perf_counter()
            for _ in range(10):
                fn()
            self.sync()
            end = self.cap.perf_counter()
        self.timed_s += end - start
        return ms, (end - t0) * 100.0

    def _bench_calls(self, fn: Any, on_reps: Callable[[int], Any] | None) -> list[float]:
        """do_bench's measurement of `fn`, each measured call's milliseconds (`gate.visits`),
        through Triton's driver as do_bench goes through it (its L2 flush as `gpu_lead` has
        it now)."""
        from triton import runtime  # noqa: PLC0415

        driver = runtime.driver.active
        return self.visits.bench_calls(fn, warmup=25, rep=100, device=driver.get_device_interface(),
                                  clear_cache=lambda cache: driver.clear_cache(cache),
                                  make_cache=driver.get_empty_cache_for_benchmark, on_reps=on_reps)

    @contextlib.contextmanager
    def gpu_lead(self, fn: Any, between: Any = None) -> Any:
        """While `do_bench` runs: its L2 flush between timed calls also keeps the GPU busy
        (`torch.cuda._sleep`) for a few times the host's time to issue one call of `fn`.

        `do_bench` records the start event right after the flush and then issues `fn`; when the
        host needs longer to issue `fn` (a Python wrapper, an autotuner's dispatch: tens of
        microseconds) than the GPU needs for the flush (a 256 MB memset, ~60 us on an H200),
        the GPU waits between the start event and the kernel and the host's time is timed. For
        kernels of a few microseconds the measured median then flips between the kernel's time
        and the host's (the same expert: 0.015 or 0.05 ms, process to process). With the lead
        the host runs ahead of the GPU and the events enclose the kernels alone; the wait
        itself lies before the start event, outside the measurement. Where `between()` returns
        True (a first visit follows, `gate.visits`), the lead is `visits.FIRST_LEAD_US` at the
        least: one call judged alone, so a stall of the host inside it is not timed. Each lead,
        a short sleep before each refill and one at the end mark the calls on the GPU's
        timeline (`lead_marks` of them: `visits.call_gpu_ms`). CPU tier: no effect."""
        torch = self.torch
        sleep = getattr(torch.cuda, "_sleep", None)
        if self.device != "cuda" or sleep is None:
            yield
            return
        from triton import runtime  # noqa: PLC0415

        driver = runtime.driver.active
        flush = driver.clear_cache
        self.sync()
        t0 = self.cap.perf_counter()
        for _ in range(3):
            fn()
        host_us = (self.cap.perf_counter() - t0) / 3 * 1e6
        self.sync()
        lead_us = min(max(100.0, 3.0 * host_us), 2000.0)
        cycles = max(1, int(lead_us * self._cycles_per_us()))
        first_cycles = max(cycles, int(self.visits.FIRST_LEAD_US * self._cycles_per_us()))

        self.lead_marks = 0

        def mark(n: int) -> None:
            sleep(n)
            self.lead_marks += 1

        def clear_cache(cache: Any) -> None:
            mark(1)  # the previous call's activities end here: the refill and flush follow
            longer = between() if between is not None else None
            flush(cache)
            mark(first_cycles if longer is True else cycles)

        had = "clear_cache" in vars(driver)
        driver.clear_cache = clear_cache
        try:
            yield
            mark(1)
        finally:
            if had:
                driver.clear_cache = flush
            else:
                del driver.clear_cache

    def _cycles_per_us(self) -> float:
        """GPU clock cycles of `torch.cuda._sleep` per microsecond (measured once)."""
        if self.sleep_rate is None:
            torch = self.torch
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda._sleep(100_000)  # wake the clock
            start.record()
            torch.cuda._sleep(2_000_000)
            end.record()
            end.synchronize()
            self.sleep_rate = 2_000_000 / max(start.elapsed_time(end) * 1000.0, 1.0)
        return self.sleep_rate

    # -- reference phase -----------------------------------------------------------------
    def plan(self, variant: str | None = None) -> list[tuple[str, str, int]]:
        """The input sets of each variant (or of `variant`): its correctness seeds (the job's,
        or as many as its `memplan.SetPlan` keeps), the timed, configuration, sealed and
        (device) re-verification sets (`memplan.fixed_sets` of them beside the seeds)."""
        extra = [(PHASE_TIMED, self.job.extra_seed), (PHASE_CONFIG, self.config_seed()),
                 (PHASE_SEALED, self.sealed_seed())]
        if self.device == "cuda":
            extra.append((PHASE_REVERIFY, self.job.reverify_seed))
        return [(v, phase, seed) for v in ([variant] if variant else self.shapes)
                for phase, seed in [(PHASE_SEED, s) for s in self.seeds_of(v)] + extra]

    def seeds_of(self, variant: str) -> tuple[int, ...]:
        plan = self.set_plans.get(variant)
        return tuple(self.job.seeds[:plan.seeds]) if plan else tuple(self.job.seeds)

    def references(self) -> None:
        """Each input set of `plan` is drawn and its reference computed once, before candidate
        code loads; every phase that calls the candidate on a set is judged against that one
        reference. How many sets a variant keeps follows from the device memory free before
        its first set and the bytes of that set, its reference and the reference's step
        (`gate.memplan`); the worker tells the parent the seeds it kept. Sets that the plan (or,
        later, the device's free memory) cannot hold wait in host memory between their uses
        (`_park`)."""
        self.lap.restart()
        for variant in self.shapes:
            self._variant_references(variant)
        for variant in self.shapes:
            self._send_parked_flags(variant)
        self.chan.send("refs_done")
        self.lap("references: flags")
        if self.device == "cuda":
            for variant in self.shapes:
                rotation = self._rotation(variant)
                ms, wall = self.bench_as_candidate(lambda: self.case.reference(*rotation.buffers),
                                                   rotation.refill_next)
                self.chan.send("ref_ms", variant, ms, wall, self.timed_s)
                self._time_reference_tf32(variant, rotation)
                self._time_reference_compiled(variant, rotation)
            self._poison_cached_memory()
            self.lap("references: timed")

    def _send_parked_flags(self, variant: str) -> None:
        """Flags of how `variant`'s sets wait between their uses: drawn again on the device
        (`gate.remake`), and copied to host memory."""
        total = sum(1 for k in self.originals if k[0] == variant)
        redrawn = [k for k in self.parked if k[0] == variant and k in self.recipes]
        hosted = [k for k in self.parked if k[0] == variant and k not in self.recipes]
        gib = 2 ** 30
        if redrawn:
            self.chan.send("flag", f"{variant}: {len(redrawn)} of {total} input sets are dropped "
                                   f"between their uses and drawn again on the device where used "
                                   f"({self.recipes[redrawn[0]].nbytes / gib:.1f} GiB a set; each "
                                   f"draw checked against the first's digest)")
        if hosted:
            self.chan.send("flag", f"{variant}: {len(hosted)} of {total} input sets wait in host "
                                   f"memory between their uses "
                                   f"({self._set_bytes(self.originals[hosted[0]]) / gib:.1f} GiB a set)")
        again = [k for k in self.recomputed if k[0] == variant]
        if again:
            self.chan.send("flag", f"{variant}: {len(again)} held reference(s) are dropped between "
                                   f"their uses and computed again where compared "
                                   f"({self.compute_s.get(variant, 0.0):.3f} s a computation; each "
                                   f"checked against its first computation's digest)")
        stayed = self.stayed.get(variant, [])
        if stayed:
            self.chan.send("flag", f"{variant}: {stayed.count('reference')} held reference(s) and "
                                   f"{stayed.count('set')} whole set(s) of those the plan lets wait "
                                   f"stay on the device, in the room it leaves free")

    def _variant_references(self, variant: str) -> None:
        """The input sets and references of one variant: the first seed's set, then the plan
        its sizes allow (`_set_plan`), then the other sets and the refill pool. The plan is
        made from the free memory less what the other gates on this GPU have planned and not
        yet allocated, and what it will still allocate is written for them (`gate.memledger`).
        Of the sets the plan lets leave the device, those drawn again where used go first
        (`memplan.leaving`, `_may_draw_again`)."""
        from gate import memplan  # noqa: PLC0415

        with self._planning():
            free = self._free_bytes() - self._others_planned()
            first = self.plan(variant)[0]
            peak_from = self._reset_peak()
            inputs = self._draw(variant, first[2])
            self.lap("references: draw")
            self._reference(*first, inputs)
            self.originals[first] = inputs
            plan = self._set_plan(variant, inputs, free, self._peak_since(peak_from))
            per_set = self._set_bytes(inputs) + (self.out_bytes.get(variant, 0) if self.held_mode else 0)
            self.room[variant] = self._room_beyond(variant, plan, free, per_set)
            self.spare[variant] = self._spare(plan, free, per_set, self.work_bytes[variant])
            self.set_size[variant] = self._set_bytes(inputs)
            # The ledger is told the room the sets that may wait can take, not all the room
            # there is: each of them (lean: every set and the pool's crossovers) holds at most
            # its set and its reference there. The room itself is free memory, and a gate that
            # wrote it all left every gate planning beside it a negative free count (a lean
            # plan: every set drawn again at each use).
            waiting = len(self.plan(variant)) + plan.pool - 1 if plan.lean else plan.parked
            claim = waiting * (self.set_size[variant] + self.out_bytes.get(variant, 0))
            self._reserve((self.work_bytes[variant] if plan.lean else
                           (plan.sets - 1) * per_set + self.work_bytes[variant])
                          + min(self.room[variant], claim))
        del inputs
        keys = self.plan(variant)
        # the seeds after the first, the configuration, sealed and re-verification sets may
        # leave the device between their uses: those drawn again where used first, then the
        # last of them first (the re-verification set is used last); lean, all
        parkable = [k for k in keys if k != first and k[1] != PHASE_TIMED]
        to_park = set(memplan.leaving(parkable, plan.parked, self._may_draw_again)) \
            if plan.parked and not plan.lean else set()
        self.room_order[variant] = self._room_order(variant, keys if plan.lean else sorted(to_park),
                                                    plan.pool - 1 if plan.lean else 0)
        if plan.lean:  # a lean plan: no set stays on the device between its uses
            self._park(first)
        self.chan.send("seeds", variant, list(self.seeds_of(variant)))
        if plan.reduced:
            self.chan.send("flag", f"{variant}: input sets sized to the device's memory: {plan.reason}")
        for key in keys[1:]:
            seed = _draw_seed(key)
            if key[1] == PHASE_CONFIG:  # drawn again where used: its recipe needs the seed
                self.draw_seeds[key] = seed
            inputs = self._draw(variant, seed)
            self.lap("references: draw")
            self._reference(*key, inputs)
            self.originals[key] = self._mask_sealed(key, inputs) if key[1] == PHASE_SEALED else inputs
            del inputs
            if plan.lean or key in to_park or (key in parkable and self._short(variant)):
                self._park(key)
                self.lap("references: park")
        self.pools[variant] = self._pool(variant)
        self._reserve(max(self.work_bytes.values()))  # the sets are allocated: the calls' work

    def _mask_sealed(self, key: tuple[str, str, int], inputs: tuple[Any, ...]) -> tuple[Any, ...]:
        """The sealed set as the worker keeps it: each input the seal will hold
        (`guards.Seal.sealable`) as its bytes masked under a key that goes to the parent and
        is forgotten here (`sealed_meta` keeps its dtype and shape); the seal asks the parent
        for it at each launch of the sealed call. Its real values are never in the clear while
        candidate code runs."""
        from gate import heldcompare  # noqa: PLC0415

        chain = heldcompare.new_key()
        kept, meta = [], []
        for x in inputs:
            if self.guards.Seal.sealable(self.cap, x):
                flat = self.guards.Seal.kept_bytes(self.cap, x)
                kept.append(heldcompare.xor_pad_(flat, chain, sum(m is not None for m in meta)))
                meta.append((x.dtype, tuple(x.shape)))
            else:
                kept.append(x)
                meta.append(None)
        self.sealed_meta[key] = meta
        self.chan.send("seal_key", key[0], chain)
        del chain
        return tuple(kept)

    def _sealed_inputs(self, key: tuple[str, str, int]) -> tuple[tuple[Any, ...], list[Any]]:
        """The sealed call's inputs (fresh tensors holding poison where the set is masked) and
        the masked bytes of those the seal holds, in order."""
        inputs, masked = [], []
        for x, m in zip(self.original(key), self.sealed_meta[key]):
            if m is None:
                inputs.append(self.cap.clone(x) if type(x) is self.cap.tensor_type else x)
                continue
            t = self.torch.empty(m[1], dtype=m[0], device=self.device)
            self.guards.poison_(t)
            inputs.append(t)
            masked.append(x)
        return tuple(inputs), masked

    def _seal_keys(self, variant: str) -> tuple[int, int]:
        """The key the sealed call's real values are masked under now and a fresh one, from
        the parent (`Seal.keys`)."""
        self.chan.send("unseal", variant)
        _, key, fresh = self.chan.answer("unsealed")
        return key, fresh

    def _planning(self) -> Any:
        return contextlib.nullcontext() if self.ledger is None else self.ledger.planning()

    def _others_planned(self) -> int:
        if self.ledger is None:
            return 0
        try:
            return self.ledger.others()
        except OSError:
            return 0

    def _reserve(self, nbytes: int) -> None:
        if self.ledger is not None:
            with contextlib.suppress(OSError):
                self.ledger.reserve(nbytes)

    def release_planned(self) -> None:
        """This gate allocates nothing more (its run is over)."""
        if self.ledger is not None:
            self.ledger.release()

    def _free_bytes(self) -> int:
        """Device memory this worker can still allocate (free, and cached by its allocator);
        0 off the device."""
        if self.device != "cuda":
            return 0
        torch = self.torch
        free, _ = torch.cuda.mem_get_info()
        return int(free + torch.cuda.memory_reserved() - torch.cuda.memory_allocated())

    def _reset_peak(self) -> int:
        if self.device != "cuda":
            return 0
        self.torch.cuda.reset_peak_memory_stats()
        return int(self.torch.cuda.memory_allocated())

    def _peak_since(self, start: int) -> int:
        if self.device != "cuda":
            return 0
        return max(0, int(self.torch.cuda.max_memory_allocated()) - start)

    def _set_plan(self, variant: str, inputs: tuple[Any, ...], free: int, peak: int) -> Any:
        """The variant's `memplan.SetPlan` (kept in `set_plans`): from the device's free memory
        before its first set, that set's bytes, its reference's and the reference step's peak;
        off the device, or with `KLINEAGE_GATE_SETS=job`, the job's numbers; with
        `KLINEAGE_GATE_SETS=lean`, a lean plan at any tier (`memplan.lean_plan`). A plan that
        parks sets of a variant whose sets are drawn again where used (`_redraws`) is lean
        where that keeps more held references on the device (`memplan.with_redraw`)."""
        from gate import memplan, remake  # noqa: PLC0415

        seeds, pool = len(self.job.seeds), max(1, self.job.refill_sets)
        fixed = memplan.fixed_sets(self.device == "cuda")
        set_bytes = self._set_bytes(inputs)
        out_bytes = self.out_bytes.get(variant, 0)
        # the peak holds the first set itself (its inputs, its held reference): kept, not work
        peak = max(0, peak - set_bytes - (out_bytes if self.held_mode else 0))
        self.work_bytes[variant] = memplan.working_bytes(set_bytes, out_bytes, peak)
        self.plan_figures[variant] = (free, peak)
        choice = os.environ.get("KLINEAGE_GATE_SETS")
        if choice == "lean":
            plan = memplan.lean_plan(seeds, pool, fixed, "every input set and every held "
                                                         "reference leaves the device between "
                                                         "its uses (asked)")
        elif self.device != "cuda" or choice == "job":
            plan = memplan.SetPlan(seeds, pool, 0, seeds + fixed + pool - 1)
        else:
            plan = memplan.plan_sets(free, set_bytes, out_bytes, seeds=seeds, pool=pool,
                                     fixed=fixed, held=self.held_mode, reference_peak=peak)
            if plan.parked and not plan.lean and self.held_mode \
                    and os.environ.get("KLINEAGE_GATE_ROOM") != "0" \
                    and self._redraws(self.plan(variant)[0], remake.digest(inputs)):
                plan = memplan.with_redraw(plan, free, set_bytes, out_bytes, fixed=fixed,
                                           reference_peak=peak)
        if plan.lean:
            self.work_bytes[variant] = memplan.lean_bytes(set_bytes, out_bytes, peak)
        self.set_plans[variant] = plan
        return plan

    def bench_as_candidate(self, fn: Callable[[], Any], between: Callable[[], Any]) -> tuple[float, float]:
        """`bench(fn, between)` inside a window of the kernel log, as the candidate's timed runs
        are (`timed_runs`): a baseline is timed under the same CUDA-activity session, so what
        the session costs per call is in both sides of a ratio. What the window records of the
        baseline's kernels is dropped."""
        try:
            with self.kernels.window():
                return self.bench(fn, between)
        finally:
            self.kernels.kernels.clear()
            self.kernels.time_ns.clear()

    def _time_reference_tf32(self, variant: str, rotation: Any) -> None:
        """fp32 inputs: the reference timed again, the same way, with TF32 allowed in matmuls
        and convolutions (the baseline a user picks when fp32 precision is not needed; x/ref_tf32
        of the verdict). The process's settings are restored before candidate code loads."""
        torch = self.torch
        if not any(type(t) is self.cap.tensor_type and t.dtype == torch.float32 for t in rotation.buffers):
            return
        saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
        try:
            ms, _ = self.bench_as_candidate(lambda: self.case.reference(*rotation.buffers),
                                            rotation.refill_next)
        finally:
            torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved
        self.chan.send("ref_tf32_ms", variant, ms, self.timed_s)

    def _time_reference_compiled(self, variant: str, rotation: Any) -> None:
        """With KLINEAGE_GATE_COMPILE=1 in the caller's environment: the reference under
        `torch.compile(mode=COMPILE_MODE)`, compiled (and autotuned) first, then timed the same
        way, before candidate code loads (x/compile of the verdict). A reference torch.compile
        fails on is a flag, not a rejection."""
        if os.environ.get("KLINEAGE_GATE_COMPILE") != "1":
            return
        torch = self.torch
        try:
            compiled = torch.compile(self.case.reference, mode=COMPILE_MODE)

            def call() -> Any:
                with torch.no_grad():
                    return compiled(*rotation.buffers)

            with self.lock.shared():
                call()
                self.sync()
            ms, _ = self.bench_as_candidate(call, rotation.refill_next)
        except Exception as exc:  # noqa: BLE001 — a baseline, not a verdict
            self.chan.send("flag", f"reference ({variant}): no torch.compile baseline: {describe(exc)[:300]}")
            return
        self.chan.send("ref_compile_ms", variant, ms, self.timed_s)

    def _set_bytes(self, inputs: tuple[Any, ...]) -> int:
        return sum(t.numel() * t.element_size() for t in inputs if type(t) is self.cap.tensor_type)

    def _park(self, key: tuple[str, str, int]) -> None:
        """Let the input set `key` leave the device: dropped, to be drawn again where used,
        where the case draws it the same twice (`_recipe`), else copied to host memory, or
        where there is room beyond the plan (`_take_room`) kept whole; its held reference stays
        in that room where it can, else, where its set is drawn again and that is cheaper than
        its copies (`_recomputes`), is dropped and computed again where compared, else goes to
        host memory."""
        inputs = self.originals[key]
        recipe = self._recipe(key, inputs)
        out = self.out_bytes.get(key[0], 0) if self.held_mode else 0
        if recipe is None and self._take_room(key, self._set_bytes(inputs) + out, "set"):
            self.placed.add(key)
            return
        again = recipe is not None and not recipe.crossed and self._recomputes(key, inputs)
        if recipe is not None:
            self.recipes[key] = recipe
            self.originals[key] = ()
        else:
            self.originals[key] = self._host_copy(inputs)
        del inputs
        if self._take_room(key, out, "reference"):
            pass
        elif again:
            self._drop_reference(key)
        else:
            self._park_reference(key)
        self.placed.add(key)
        self.parked.add(key)

    def _room_order(self, variant: str, waiting: list[tuple[str, str, int]],
                    crossovers: int) -> list[tuple[str, str, int]]:
        """The sets of `variant` that will wait (`waiting`, and the pool's first `crossovers`
        crossovers), in the order their references have a claim on the room beyond the plan:
        by how often each is compared. The first seed's (its correctness call, the knockout
        calls), then the timed set's and the crossovers' (the sampled timed calls), the
        configuration set's (each autotuner configuration, where the candidate has an
        autotuner), the other seeds', the re-verification set's, the sealed set's."""
        rank = {PHASE_TIMED: 1, PHASE_REFILL: 2, PHASE_CONFIG: 3, PHASE_SEED: 4, PHASE_REVERIFY: 5,
                PHASE_SEALED: 6}
        first = (variant, PHASE_SEED, self.job.seeds[0])
        pool = [(variant, PHASE_REFILL, self.job.refill_seed + k) for k in range(1, crossovers + 1)]
        return sorted(list(waiting) + pool, key=lambda k: 0 if k == first else rank.get(k[1], 7))

    def _room_beyond(self, variant: str, plan: Any, free: int, per_set: int) -> int:
        """`memplan.room_beyond` of the variant's plan (device tier, references held here);
        none with `KLINEAGE_GATE_ROOM=0` or where a lean plan was asked for
        (`KLINEAGE_GATE_SETS=lean`: every set and reference leaves the device)."""
        from gate import memplan  # noqa: PLC0415

        if self.device != "cuda" or not self.held_mode or os.environ.get("KLINEAGE_GATE_ROOM") == "0" \
                or os.environ.get("KLINEAGE_GATE_SETS") == "lean":
            return 0
        return memplan.room_beyond(free, plan, per_set, self.work_bytes[variant])

    def _spare(self, plan: Any, free: int, per_set: int, work: int) -> int:
        """The device bytes beyond `plan` (`memplan.room_beyond`, whatever keeps the room for
        references and sets at none): what a comparison that computes its reference again
        may take beyond the plan's largest phase (`_recomputes`)."""
        from gate import memplan  # noqa: PLC0415

        return memplan.room_beyond(free, plan, per_set, work) if self.device == "cuda" else 0

    def _take_room(self, key: tuple[str, str, int], nbytes: int, what: str) -> bool:
        """Whether `nbytes` of `key`'s (its held reference, or its whole set) stay on the
        device in the room beyond its variant's plan: taken from it where they fit beside what
        is still to come and has a prior claim on it (`_claimed`), and the device still has
        the calls' working memory free (`_short`)."""
        variant = key[0]
        if nbytes + self._claimed(key) > self.room.get(variant, 0) or self._short(variant):
            return False
        self.room[variant] -= nbytes
        self.stayed.setdefault(variant, []).append(what)
        return True

    def _claimed(self, key: tuple[str, str, int]) -> int:
        """The room kept for what of `key`'s variant is still to come ahead of `key`: the
        references of the sets ahead of it in `_room_order`. A reference that can be computed
        again where compared (`_computed_later`) comes after every one that cannot, and after
        each set never drawn again (the sealed set) that can stay whole beside those: a
        reference computed again costs a computation at each comparison, one in host memory
        its copies, a whole set in host memory its copy out and back."""
        variant = key[0]
        order = self.room_order.get(variant, [])
        out = self.out_bytes.get(variant, 0) if self.held_mode else 0
        ahead = order[:order.index(key)] if key in order else order
        waiting = [k for k in order if k not in self.placed and k != key]
        if not self._computed_later(key):
            return out * sum(1 for k in ahead if k in waiting and not self._computed_later(k))
        kept = [k for k in waiting if not self._computed_later(k)]
        claimed = out * len(kept)
        for k in kept:
            whole = self.set_size.get(variant, 0)
            if k[1] == PHASE_SEALED and claimed + whole <= self.room.get(variant, 0):
                claimed += whole
        return claimed + out * sum(1 for k in ahead if k in waiting and self._computed_later(k))

    def _computed_later(self, key: tuple[str, str, int]) -> bool:
        """Whether `key`'s held reference will be computed again where compared, its variant's
        being (`_recomputes`): every set's but the sealed one's and the refill pool's (whether
        a crossover's is, `_remakes`, is decided as it is made: counted as if it were not)."""
        return bool(self.recomputes.get(key[0])) and key[1] not in (PHASE_SEALED, PHASE_REFILL)

    def _recipe(self, key: tuple[str, str, int], inputs: tuple[Any, ...], *,
                base: tuple[str, str, int] | None = None,
                donor: tuple[str, str, int] | None = None) -> Any:
        """How to draw `key`'s set again on the device (`gate.remake.Recipe`), or None where it
        waits in host memory: the sealed set (a secret seed, kept masked), a variant whose
        make_inputs does not draw a set the same twice (`_redraws`), a crossover of sets not
        drawn again themselves, or `KLINEAGE_GATE_REDRAW=0`."""
        from gate import remake  # noqa: PLC0415

        if key[1] == PHASE_SEALED or os.environ.get("KLINEAGE_GATE_REDRAW") == "0":
            return None
        if base is not None and not (base in self.recipes and donor in self.recipes):
            return None
        first = remake.digest(inputs)
        if base is None and not self._redraws(key, first):
            return None
        self.lap("references: digest")
        return remake.Recipe(self.draw_seeds.get(key, key[2]), first, remake.nbytes(inputs), base, donor)

    def _may_draw_again(self, key: tuple[str, str, int]) -> bool:
        """Whether `key`'s set would be dropped and drawn again where used if it left the
        device (`_recipe`): not the sealed set, and only where its variant's sets are drawn
        again (`_redraws`, probed on the first seed's set where not yet measured)."""
        from gate import remake  # noqa: PLC0415

        if key[1] == PHASE_SEALED or os.environ.get("KLINEAGE_GATE_REDRAW") == "0":
            return False
        if key[0] not in self.redraws:
            first = self.plan(key[0])[0]
            inputs = self.originals.get(first)
            if not inputs:
                return False
            return self._redraws(first, remake.digest(inputs))
        return self.redraws[key[0]]

    def _redraws(self, key: tuple[str, str, int], first: str) -> bool:
        """Whether `key`'s variant has its sets drawn again where used: the case's make_inputs
        draws `key`'s set (digest `first`) the same a second time, and that draw with its digest
        takes no longer than a copy in from host memory (`remake.worth_drawing_again`);
        measured once per variant (the set drawn again beside the first; where that draw is
        slower than a copy, drawn a third time and the faster of the two taken, so that a
        warm-up the first paid does not decide). A flag says why not where the draw is the
        same but slower."""
        from gate import remake  # noqa: PLC0415

        variant = key[0]
        if os.environ.get("KLINEAGE_GATE_REDRAW") == "0":
            return False
        if variant not in self.redraws:
            same, seconds, nbytes = self._timed_draw(key, first)
            fast = remake.worth_drawing_again(seconds, nbytes)
            if same and not fast:  # a warm draw decides: the first may have paid a warm-up
                same, again_s, _ = self._timed_draw(key, first)
                seconds = min(seconds, again_s)
                fast = remake.worth_drawing_again(seconds, nbytes)
            self.draw_s[variant] = seconds
            self.redraws[variant] = same and fast
            if same and not fast:
                self.chan.send("flag", f"{variant}: its input sets wait in host memory, not drawn "
                                       f"again: a draw took {seconds:.2f} s for "
                                       f"{nbytes / 2**30:.1f} GiB, longer than a copy in")
            self.lap("references: redraw probe")
        return self.redraws[variant]

    def _timed_draw(self, key: tuple[str, str, int], first: str) -> tuple[bool, float, int]:
        """`key`'s set drawn a second time: whether it is the set of digest `first`, the
        seconds of the draw and its digest (not the wait for the GPU lock: another gate's
        timed runs) and its bytes."""
        from gate import remake  # noqa: PLC0415

        t0, waited = time.perf_counter(), self.lock.waited_s
        again = self._draw(key[0], self.draw_seeds.get(key, key[2]))
        same = remake.redraws(first, again)
        seconds = time.perf_counter() - t0 - (self.lock.waited_s - waited)
        return same, seconds, remake.nbytes(again)

    def _redrawn(self, key: tuple[str, str, int],
                 have: dict[tuple[str, str, int], tuple[Any, ...]] | None = None) -> tuple[Any, ...]:
        """`key`'s set drawn again on the device from its recipe and checked against the
        digest of its first draw (a crossover's sets taken from `have` where there, else drawn
        again too). After candidate code loaded: only where it replaced nothing of the gate's
        or torch's (`check_tamper`), and the process's generators reseeded after
        (`_forget_seeds`)."""
        from gate import remake  # noqa: PLC0415

        if have is not None and key in have:
            return have[key]
        recipe = self.recipes[key]
        loaded = self.watch is not None
        if loaded:
            self.check_tamper("anti_cheat")
        if recipe.crossed:
            inputs = self.refill.crossover(self._redrawn(recipe.base, have),
                                           self._redrawn(recipe.donor, have), recipe.seed)
        else:
            inputs = self._draw(key[0], recipe.seed)
        if loaded:
            _forget_seeds(self.torch)
        if inputs is None or remake.digest(inputs) != recipe.digest:
            self.chan.reject(FailureKind.TAMPERING, "anti_cheat",
                             f"the input set {key[0]}/{key[1]} {key[2]}, drawn again on the device "
                             f"for its next use, differs from its first draw (before candidate "
                             f"code loaded): the case's inputs were drawn differently")
        return inputs

    def _keeps_digest(self, phase: str) -> bool:
        """Whether a reference of `phase` keeps the digest of its first computation, for a
        computation again to be checked against (`_recomputes`): held references of sets that
        may be drawn again (not the sealed set's), unless `KLINEAGE_GATE_RECOMPUTE=0` or
        `KLINEAGE_GATE_REDRAW=0`."""
        return self.held_mode and phase != PHASE_SEALED \
            and os.environ.get("KLINEAGE_GATE_RECOMPUTE") != "0" \
            and os.environ.get("KLINEAGE_GATE_REDRAW") != "0"

    def _recomputes(self, key: tuple[str, str, int], inputs: tuple[Any, ...]) -> bool:
        """Whether `key`'s held reference (its set drawn again where used, `inputs` its set)
        is dropped and computed again at each comparison (`_held`) instead of waiting in host
        memory or in the room beyond the plan. Measured once per variant: the reference
        computed a second time on `inputs` (warm: the first computation paid the warm-up) has
        the digest of its first (`remake.computes_again`), that computation and the set's draw
        take no longer than the reference's copy in and back out at this process's measured
        copy rate (`remake.worth_computing_again`; `KLINEAGE_GATE_RECOMPUTE=1` skips this
        test), and the comparison's memory with it (`memplan.recompute_bytes`) fits beside the
        plan (what it needs beyond the plan's largest phase is taken from the room beyond it).
        A flag says why not where the reference is not the same twice or costs more."""
        from gate import heldcompare, hoststage, memplan, remake  # noqa: PLC0415

        variant = key[0]
        choice = os.environ.get("KLINEAGE_GATE_RECOMPUTE")
        if choice == "0" or key not in self.ref_digests:
            return False
        if variant not in self.recomputes:
            t0, waited = time.perf_counter(), self.lock.waited_s
            probe = self._computed_again(key, inputs, heldcompare.new_key(), quiet=True)
            again = probe[1] if probe is not None else ""
            del probe
            seconds = time.perf_counter() - t0 - (self.lock.waited_s - waited)
            out = self.out_bytes.get(variant, 0)
            where = next((x.device for x in inputs if type(x) is self.cap.tensor_type), self.device)
            rate = hoststage.copy_rate(where, min(max(out, 1), hoststage.RATE_PROBE_BYTES))
            self.copy_rates[variant] = rate
            same = remake.computes_again(self.ref_digests[key], again)
            draw = self.draw_s.get(variant, 0.0)
            fast = remake.worth_computing_again(draw, seconds, out, rate)
            fits, need = True, 0
            if self.device == "cuda" and variant in self.plan_figures:
                _, peak = self.plan_figures[variant]
                need = memplan.recompute_bytes(self._set_bytes(inputs), out, peak)
                fits = need - self.work_bytes[variant] <= self.spare.get(variant, 0)
            self.compute_s[variant] = seconds
            self.recomputes[variant] = same and fits and (fast or choice == "1")
            gib = 2 ** 30
            if not same:
                self.chan.send("flag", f"{variant}: its held references wait, not computed again "
                                       f"where compared: the reference computed twice on one set "
                                       f"gave different bytes" + ("" if again else " (or failed)"))
            elif not fits:
                self.chan.send("flag", f"{variant}: its held references wait, not computed again "
                                       f"where compared: a comparison would hold {need / gib:.1f} GiB")
            elif not self.recomputes[variant]:
                self.chan.send("flag", f"{variant}: its held references wait, not computed again "
                                       f"where compared: the draw and the reference took "
                                       f"{draw + seconds:.2f} s for {out / gib:.2f} GiB of output, "
                                       f"longer than its copy in and out ({rate / 1e9:.1f} GB/s)")
            if self.recomputes[variant] and need > self.work_bytes.get(variant, 0):
                self._widen_work(variant, need - self.work_bytes[variant])
            self.lap("references: recompute probe")
        return self.recomputes[variant]

    def _remakes(self, variant: str, make_s: float) -> bool:
        """Whether the held references of `variant`'s crossovers are dropped and computed again
        where compared as well (its other sets' are, `_recomputes`): the crossover made again
        (`make_s`, measured as it was first made: its two sets drawn again and mixed) and its
        reference computed cost no more than the reference's copy in and back out
        (`remake.worth_computing_again`), and the two sets a crossover is made from fit beside
        a comparison in the device bytes beyond the plan (`spare`). Decided once per variant,
        on its first crossover; a flag says why not."""
        from gate import remake  # noqa: PLC0415

        if variant not in self.remakes:
            out = self.out_bytes.get(variant, 0)
            rate = self.copy_rates.get(variant, 0.0)
            fast = os.environ.get("KLINEAGE_GATE_RECOMPUTE") == "1" or remake.worth_computing_again(
                make_s, self.compute_s.get(variant, 0.0), out, rate)
            sources = 2 * self.set_size.get(variant, 0) if self.device == "cuda" else 0
            fits = sources <= self.spare.get(variant, 0)
            self.remakes[variant] = fast and fits
            if fits and fast and sources:
                self._widen_work(variant, sources)
            elif not self.remakes[variant]:
                took = make_s + self.compute_s.get(variant, 0.0)
                why = (f"making one again and its reference took {took:.2f} s, longer than its copy "
                       f"in and out") if not fast else \
                    f"the two sets it is made from ({sources / 2**30:.1f} GiB) do not fit beside a comparison"
                self.chan.send("flag", f"{variant}: its crossovers' held references wait, not "
                                       f"computed again where compared: {why}")
        return self.remakes[variant]

    def _widen_work(self, variant: str, extra: int) -> None:
        """A comparison of `variant` that computes its reference again needs `extra` device bytes
        beyond the calls' working memory: taken from the spare bytes beyond the plan, and the room
        kept for references no larger than what spare is left."""
        self.spare[variant] -= extra
        self.room[variant] = max(0, min(self.room.get(variant, 0), self.spare[variant]))
        self.work_bytes[variant] = self.work_bytes.get(variant, 0) + extra

    def _drop_reference(self, key: tuple[str, str, int]) -> None:
        """`key`'s held reference leaves: computed again at each comparison (`_held`)."""
        self.recomputed[key] = self.ref_digests[key]
        self.vault.pop(key, None)

    def _computed_again(self, key: tuple[str, str, int], inputs: tuple[Any, ...],
                        mask_key: int, quiet: bool = False) -> tuple[list[Any], str] | None:
        """The reference of `key` computed on `inputs` under the torch settings of the first
        computations (`_settings`) and held masked under `mask_key`: (its held items, its
        digest). The result in the clear is poisoned once masked. A reference that raises
        rejects the run, or with `quiet` gives None."""
        from gate import heldcompare  # noqa: PLC0415

        torch = self.torch
        try:
            with self.lock.shared(), _under(torch, self.ref_settings), torch.no_grad(), \
                    warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ref = self.case.reference(*inputs)
                held, summary = heldcompare.hold(ref, mask_key, digest=True)
                self.sync()
        except Exception as exc:
            if quiet:
                return None
            kind = FailureKind.OUT_OF_MEMORY if _does_not_fit(exc) else FailureKind.TAMPERING
            self.chan.reject(kind, "anti_cheat",
                             f"the case's reference, computed again on {key[0]}/{key[1]} {key[2]} "
                             f"for a comparison, failed: {describe(exc)}")
        for t in (ref if isinstance(ref, (tuple, list)) else (ref,)):
            if isinstance(t, torch.Tensor):
                self.guards.poison_(t)
        del ref
        return held, summary["digest"]

    def _held(self, ref: tuple[str, str, int], mask_key: int,
              given: tuple[tuple[str, str, int], tuple[Any, ...]] | None = None,
              quiet: bool = False) -> list[Any] | None:
        """The held reference of `ref` (None where this worker holds none): the vault's, or,
        where it was dropped (`_recomputes`), computed again on its set (`given`'s where it is
        that set, else drawn again) and masked under the parent's current key `mask_key`, once
        its digest is the first computation's. Candidate code has replaced nothing of the
        gate's or torch's (`check_tamper`). `quiet`: None where the computation raises (a
        comparison that only names whose answer a failing output is)."""
        if ref not in self.recomputed:
            return self.vault.get(ref)
        if self.watch is not None:
            self.check_tamper("anti_cheat")
        inputs = given[1] if given is not None and given[0] == ref else self._redrawn(ref)
        done = self._computed_again(ref, inputs, mask_key, quiet)
        del inputs
        if done is None:
            return None
        held, again = done
        if again != self.recomputed[ref]:
            self.chan.reject(FailureKind.TAMPERING, "anti_cheat",
                             f"the reference of {ref[0]}/{ref[1]} {ref[2]}, computed again for a "
                             f"comparison, differs from its first computation (before candidate "
                             f"code loaded): the reference's ops or its inputs were changed")
        return held

    def _host_copy(self, inputs: tuple[Any, ...]) -> tuple[Any, ...]:
        from gate import hoststage  # noqa: PLC0415

        return tuple(hoststage.to_host(x) if type(x) is self.cap.tensor_type else x for x in inputs)

    def _on_device(self, inputs: tuple[Any, ...]) -> tuple[Any, ...]:
        from gate import hoststage  # noqa: PLC0415

        return tuple(hoststage.to_device(x, self.device) if type(x) is self.cap.tensor_type else x
                     for x in inputs)

    def _short(self, variant: str) -> bool:
        """The device no longer has the working memory of `variant`'s calls free (another
        process took memory since the plan; `memplan.working_bytes`), or
        `KLINEAGE_GATE_PARK=1` asks to park every set that may wait."""
        if os.environ.get("KLINEAGE_GATE_PARK") == "1":
            return True
        if self.device != "cuda":
            return False
        return self._free_bytes() - self._others_planned() < self.work_bytes.get(variant, 0)

    def _park_reference(self, key: tuple[str, str, int]) -> None:
        """The held reference of `key` (masked) waits in host memory (`heldcompare.Held.park`)."""
        for item in self.vault.get(key, ()):
            if hasattr(item, "park"):
                item.park()

    def _release(self, key: tuple[str, str, int]) -> None:
        """The input set `key` has had its last call: its inputs go (its held reference stays,
        for naming whose answer a wrong output is; its recipe too, for the crossovers made of
        it)."""
        self.originals.pop(key, None)
        self.parked.discard(key)

    def original(self, key: tuple[str, str, int]) -> tuple[Any, ...]:
        """The input set `key` on the run's device (drawn again, or a copy brought back, where
        it was parked)."""
        if key in self.recipes:
            return self._redrawn(key)
        inputs = self.originals[key]
        if key not in self.parked:
            return inputs
        return self._on_device(inputs)

    def _for_one_call(self, key: tuple[str, str, int]) -> tuple[tuple[Any, ...], tuple[Any, ...] | None]:
        """`key`'s set for one call that spends its inputs (a sealed call leaves them poison):
        (the call's inputs, the set itself where it stays whole beside them, else None). A set
        that waits off the device comes back as a copy of its own (drawn again, or copied in),
        which the call takes: a clone beside it would hold one set more than the plan's working
        memory counts (`memplan.PHASE_WORK`, `LEAN_WORK`). A set kept whole is cloned."""
        inputs = self.original(key)
        kept = self.originals.get(key, ())
        if any(type(x) is self.cap.tensor_type and any(x is k for k in kept) for x in inputs):
            return self.clone_inputs(inputs), inputs
        return inputs, None

    def sealed_seed(self) -> int:
        """Fresh inputs for the sealed call (answers kept from other calls do not fit them)."""
        return self.job.sealed_seed or self.job.reverify_seed + 1

    def config_seed(self) -> int:
        """The name of the set the configuration calls run on (`configs`), drawn with a seed
        of its own (`_draw_seed`)."""
        return self.job.config_seed or self.job.reverify_seed + 2

    def _draw(self, variant: str, seed: int) -> tuple[Any, ...]:
        try:
            with self.lock.shared():
                inputs = tuple(self.case.make_inputs(dict(self.shapes[variant]), seed, self.device))
                self.sync()
        except Exception as exc:
            self.chan.reject(FailureKind.BAD_CASE, "correctness",
                             f"the case's make_inputs failed on {variant}: {describe(exc)}")
        return inputs

    def _reference(self, variant: str, phase: str, seed: int, inputs: tuple[Any, ...], *,
                   finite_like: bool = False) -> bool:
        """Compute and send the reference of `inputs`; poison it afterwards. With
        `finite_like`, send nothing and return False when the reference raises or is not finite
        (a crossover the case's reference does not accept)."""
        torch = self.torch
        try:
            # A reference may warn of how it computed (a back-end it fell back to): a flag. So
            # is a library's warning triggered at the case's own lines (torch's reasons why).
            if self.ref_settings is None:
                self.ref_settings = _settings(torch)
            with self.lock.shared(), warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                with torch.no_grad():
                    ref = self.case.reference(*self.clone_inputs(inputs))
                self.sync()
            self.lap("references: compute")
        except Exception as exc:
            if finite_like:
                return False
            self.chan.reject(FailureKind.BAD_CASE, "correctness",
                             f"the case's reference failed on {variant}: {describe(exc)}")
        for w in caught:
            message = str(w.message)
            if message in self.reference_warnings:
                continue
            self.reference_warnings.add(message)
            if str(Path(w.filename).resolve()) == self.reference_code[0]:
                self.chan.send("flag", f"reference ({variant}): {message}")
            else:  # a library's warning: to stderr, as it would have gone
                warnings.showwarning(w.message, w.category, w.filename, w.lineno)
        tensors = [t for t in (ref if isinstance(ref, (tuple, list)) else (ref,))
                   if isinstance(t, torch.Tensor)]
        self.out_bytes.setdefault(variant, sum(t.numel() * t.element_size() for t in tensors))
        if finite_like and not all(bool(torch.isfinite(t).all()) for t in tensors
                                   if t.is_floating_point() or t.is_complex()):
            return False
        # the probe before the masked copy: its rounded inputs and result are not held beside it
        if phase == PHASE_SEED and seed == self.job.seeds[0] \
                and self.shapes[variant].get("dtype") == "fp32":
            self._precision_probe(variant, seed, inputs, ref)
            self.lap("references: precision probe")
        if self.held_mode:  # kept here, masked; the parent gets its key, headers and a sample
            from gate import heldcompare  # noqa: PLC0415

            key = heldcompare.new_key()
            kept = self._keeps_digest(phase)  # for a computation again to be checked against
            with self.lock.shared():
                held, summary = heldcompare.hold(ref, key, digest=phase == PHASE_SEED or kept)
                self.sync()
            if kept:
                self.ref_digests[(variant, phase, seed)] = summary["digest"]
            if phase != PHASE_SEED:
                summary = {**summary, "digest": ""}
            self.vault[(variant, phase, seed)] = held
            self.chan.send("ref", variant, phase, seed, {**summary, "key": key}, None)
            del key, held, summary
        else:
            with_inputs = hasattr(self.case, "compare")
            self.chan.send("ref", variant, phase, seed, self.encode(ref),
                           self.encode(inputs) if with_inputs else None)
        self.lap("references: hold and send" if self.held_mode else "references: send")
        # The reference's answer must not survive where a candidate could find it.
        for t in tensors:
            self.guards.poison_(t)
        del ref, tensors
        return True

    def _precision_probe(self, variant: str, seed: int, inputs: tuple[Any, ...], ref: Any) -> None:
        """Send ("precision", variant, seed, error of the reference on these inputs rounded to
        TF32): the yardstick of a lower-precision candidate (`gate.precision`; variants of dtype
        fp32 only). It informs a flag and judges nothing, so a reference that fails here is skipped."""
        from gate import precision

        if not precision.applies(inputs):
            return
        try:
            with self.lock.shared(), self.torch.no_grad(), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                low = self.case.reference(*precision.rounded_inputs(inputs))
                err = precision.relative_error(low, ref)
                self.sync()
        except Exception:  # noqa: BLE001 — see the docstring
            return
        del low
        self.chan.send("precision", variant, seed, err)

    def _pool(self, variant: str) -> Any:
        """The variant's refill pool (`gate.refill`): the timed set, then crossovers of it with
        the first seed's set (fresh draws where the case asks or a crossover is refused). A
        fresh draw's seed continues the job's seeds; a crossover's is a number of its own. A
        lean plan's pool waits in host memory (`_rotation` brings it back), the timed and first
        sets on the device only while a crossover is made."""
        refill = self.refill
        lean = self.set_plans[variant].lean
        timed_key = (variant, PHASE_TIMED, self.job.extra_seed)
        donor_key = (variant, PHASE_SEED, self.job.seeds[0])
        fresh_only = str(getattr(self.case, "REFILL", "crossover")) == "fresh"
        sets = [(self.job.extra_seed, self.originals[timed_key])]
        for k in range(1, self._crossovers(variant) + 1):
            seed = self.job.refill_seed + k
            key = (variant, PHASE_REFILL, seed)
            t0, waited = time.perf_counter(), self.lock.waited_s
            mixed = None if fresh_only else refill.crossover(self.original(timed_key),
                                                             self.original(donor_key), seed)
            make_s = time.perf_counter() - t0 - (self.lock.waited_s - waited)
            self.lap("references: crossover")
            crossed = mixed is not None and self._reference(variant, PHASE_REFILL, seed, mixed,
                                                            finite_like=True)
            if not crossed:
                del mixed
                mixed = self._draw(variant, seed)
                self._reference(variant, PHASE_REFILL, seed, mixed)
                # a crossover keeps the timed set's integers; a fresh draw may not (its calls
                # may then ask another amount of work: `gate.visits`)
                if self.same_work.get(variant, True):
                    self.same_work[variant] = _integers(mixed, self.cap) == _integers(sets[0][1], self.cap)
            sets.append((seed, mixed))
            # the pool's inputs stay on the device (refills copy them between timed calls);
            # its references are compared only for the few sampled calls
            out = self.out_bytes.get(variant, 0) if self.held_mode else 0
            recipe = None
            if lean:  # drawn again for the timed runs where it can be, else a host copy
                recipe = self._recipe(key, mixed, base=timed_key, donor=donor_key) if crossed \
                    else self._recipe(key, mixed)
            # a lean pool's crossovers beyond the plan's claim no room: their references are
            # computed again where compared, or wait
            beyond = lean and k >= self.set_plans[variant].pool
            if (lean or self._short(variant)) \
                    and not (lean and not beyond and self._take_room(key, out, "reference")):
                if recipe is not None and self._recomputes(key, mixed) \
                        and (not recipe.crossed or self._remakes(variant, make_s)):
                    self._drop_reference(key)
                else:
                    self._park_reference(key)
            self.placed.add(key)
            if lean:
                if recipe is not None:
                    self.recipes[key] = recipe
                sets[-1] = (seed, () if recipe is not None else self._host_copy(mixed))
            del mixed
        return refill.Pool(sets)

    def _crossovers(self, variant: str) -> int:
        """The crossovers in `variant`'s refill pool: the plan's pool less the timed set; a
        lean plan's, the job's pool less the timed set, as a lean rotation brings back one
        crossover at a time (`_rotation`). A cache keyed on a few probed input elements sees
        the few changed places of one crossover about as often as it probes 1/64 of them;
        only a stale answer to some crossover names it, so a pool of one crossover would let
        such a cache pass one gate in ten."""
        plan = self.set_plans[variant]
        return max(plan.pool, self.job.refill_sets if plan.lean else 1) - 1

    def _lean(self, variant: str) -> bool:
        plan = self.set_plans.get(variant)
        return plan is not None and plan.lean

    def _rotation(self, variant: str, crossover: int | None = None) -> Any:
        """Fresh buffers (a copy of the timed set) that refilled calls of `variant` rotate in.
        A lean plan's rotation holds the timed set and one crossover of the pool: the
        `crossover`-th (from 1), or one drawn at random (a system random source)."""
        pool = self.pools[variant]
        if self._lean(variant):
            # the timed set once: the crossovers drawn again are made from it (three sets at
            # the most: it, the first seed's and a crossover)
            timed_key = (variant, PHASE_TIMED, self.job.extra_seed)
            have = {timed_key: self.original(timed_key)}
            sets = [(pool.seed(0), have[timed_key])]
            if len(pool.sets) > 1:
                pick = crossover if crossover is not None \
                    else random.SystemRandom().randrange(1, len(pool.sets))
                pool = self.refill.Pool([pool.sets[0], pool.sets[pick]])
            for seed, inputs in pool.sets[1:]:
                key = (variant, PHASE_REFILL, seed)
                sets.append((seed, self._redrawn(key, have) if key in self.recipes
                             else self._on_device(inputs)))
            pool = self.refill.Pool(sets)
            del have, sets
        return self.refill.Rotation(pool, self.clone_inputs(pool.inputs(0)), self.cap.copy_)

    def _poison_cached_memory(self) -> None:
        """Poison the memory the allocator keeps cached (where references were): one block of
        its size, or, where that does not fit in one piece, pieces of `POISON_PIECE_BYTES`
        until it is covered or the device is full."""
        torch = self.torch
        free = torch.cuda.memory_reserved() - torch.cuda.memory_allocated()
        if free < 4:
            return
        try:
            blocks = [torch.empty(free // 4, dtype=torch.float32, device="cuda")]
        except torch.cuda.OutOfMemoryError:
            blocks, done = [], 0
            try:
                while done < free:
                    blocks.append(torch.empty(POISON_PIECE_BYTES // 4, dtype=torch.float32,
                                              device="cuda"))
                    done += POISON_PIECE_BYTES
            except torch.cuda.OutOfMemoryError:
                pass
        for block in blocks:
            self.guards.poison_(block)
        self.sync()
        del blocks

    # -- candidate -----------------------------------------------------------------------
    def load_candidate(self) -> None:
        guards = self.guards
        _forget_seeds(self.torch)
        self.monitor = guards.LaunchMonitor(candidate_dir=str(Path(self.job.scratch).resolve()),
                                            isolate=self.device == "cpu",
                                            host_bytes=guards.HostBytes() if self.device == "cpu" else None)
        if self.job.language == "triton":
            if self.job.tier == "interpret":
                from gate import interpcalls, interpdeps  # noqa: PLC0415

                interpcalls.install()
                interpdeps.install_constexpr_check(self.monitor.note_refusal)
            self.monitor.install_triton()
        emulating = self.job.tier == "emulate" and self.job.language == "cuda"
        if emulating:
            # The CUDA bindings and experts.cudahost answer from the CPU emulator from here on
            # (`gate.cudacpu.host`), before the launch hooks and the tamper snapshot go in.
            from gate.cudacpu import host as cudacpu_host  # noqa: PLC0415

            self.emulation.enter_context(cudacpu_host.emulated())
            self.monitor.install_cuda()
        if self.device == "cuda":
            self.monitor.install_cuda()
            self.monitor.gate_stream = int(self.cap.current_stream().cuda_stream)
        if self.job.language == "cuda":
            if self.device == "cuda":  # NVRTC the host calls itself finds the CUDA headers
                from experts import cudahost  # noqa: PLC0415

                self.emulation.enter_context(cudahost.cuda_headers_for_nvrtc())
            self.install_host_paths()
        if self.device == "cuda" and self.job.language == "triton":
            self.install_tuning_bench()
        self.watch = guards.TamperWatch()
        self.modules_before = set(sys.modules)
        self.mode_depth = getattr(self.torch._C, "_len_torch_dispatch_stack", self.mode_depth)
        self.modes_before = self.mode_depth()
        self.threads_before = frozenset(sys._current_frames())
        self.audit = guards.AuditGuard.install()
        self.audit.arm([self.job.scratch, self.job.origin_dir or ""])
        t0 = time.perf_counter()
        with self.extension_builder() as found:
            try:
                module = import_candidate(self.chan, self.job)
            finally:
                if found is not None:
                    self.record_extension(found, time.perf_counter() - t0)
        self.check_tamper("import")
        self.run_fn = module.run
        if emulating:  # the host sees the emulated GPU, its inputs claim to live there
            self.run_fn = functools.partial(cudacpu_host.host_call, self.run_fn)
        # The worker's own attributes from here on: a method shadowed, an instrument swapped
        # (its checks, its module of guards) is tampering; counters change.
        self.watch.watch_instance("worker", self, mutable=RUNNER_MUTABLE)

    def install_host_paths(self) -> None:
        """A CUDA host that launches through CuPy (its own source) or a `load_inline` extension:
        those launch paths are hooked too, and CuPy's modules may load (`gate.foreign`)."""
        from gate import foreign, hostforms  # noqa: PLC0415

        text = Path(self.job.module_path).read_text()
        self.permitted = foreign.permitted_modules(text)
        emulating = self.job.tier == "emulate"
        if emulating and hostforms.builds_extension(text):
            self.chan.reject(FailureKind.UNSUPPORTED, "import",
                             "the emulate tier cannot build a load_inline extension (its C++ host "
                             "half needs nvcc and a CUDA build of torch): gate it at the static or "
                             "device tier")
        if self.permitted and emulating:  # CuPy's compilers through the emulated cudahost
            from gate import hostview  # noqa: PLC0415
            from gate.cudacpu.host import EMULATED  # noqa: PLC0415

            self.emulation.enter_context(hostview.cupy_stand_in(EMULATED))
        elif self.permitted and self.device == "cuda":
            self.monitor.install_cupy()
        if hostforms.builds_extension(text):
            self.monitor.install_extensions()

    def record_extension(self, found: Any, seconds: float) -> None:
        """The parts of `load_candidate` a `load_inline` host's import took
        (`gate.extbuild.Found`): the wait for its folder's build lock, and the import itself
        under a name that says how its extension was had: found built ahead (`gate.prebuild`),
        found built by the build its gate started beside it, found built by an earlier gate of
        the same text, built here, or none built. A reject that ends the import
        ends the worker before its phases are sent: these then go unrecorded."""
        if found.waited_s >= 0.005:
            self.parts.append(("load_candidate: extension lock wait", found.waited_s))
        what = {"ahead": "found built ahead", "own": "found built at its gate's start",
                "gate": "found built by an earlier gate",
                "built": "built here"}.get(found.outcome(), "none built")
        self.parts.append((f"load_candidate: extension {what}", seconds - found.waited_s))

    def extension_builder(self) -> Any:
        """Around the candidate's import: the build lock of the folder its `load_inline`
        extension builds in (`gate.extbuild.builder`: a build ahead of it ends first, what a
        killed build left is cleared; it yields what it found, `record_extension`); nothing
        (None) for other candidates."""
        folder = os.environ.get("TORCH_EXTENSIONS_DIR")
        if self.job.language != "cuda" or not folder:
            return contextlib.nullcontext()
        from gate import extbuild, hostforms  # noqa: PLC0415

        if not hostforms.builds_extension(Path(self.job.module_path).read_text()):
            return contextlib.nullcontext()
        return extbuild.builder(folder)

    def install_tuning_bench(self) -> None:
        """Device tier: a Triton autotuner in the candidate times its configurations the way
        the gate times the candidate, with the GPU to itself (`gate.gpulock`) and behind the
        GPU lead (`gpu_lead`).

        Triton's autotuner benchmarks each configuration with `driver.active.get_benchmarker()`
        (`do_bench`). Left alone, it times while other gates run kernels on the same GPU and
        times the host where a call is slow to issue, so the configuration it keeps (and with
        it the candidate's measured time) depends on what else ran meanwhile: the same conv2d
        text measured 0.042 and 0.033 ms in two runs. Each configuration's first call (its
        compile, seconds of CPU) runs outside the exclusive lock, like the candidate's first
        call; then it is timed, for at most `TUNE_WARMUP_MS` + `TUNE_REP_MS`. An autotuner
        given its own `do_bench` keeps it."""
        from triton import runtime  # noqa: PLC0415

        driver = runtime.driver.active
        own = driver.get_benchmarker()
        runner = self

        def tuning_bench(kernel_call: Any, *args: Any, **kwargs: Any) -> Any:
            kernel_call()  # compiles this configuration; OutOfResources etc. go to the autotuner
            runner.sync()
            with runner.lock.exclusive():
                start = runner.cap.perf_counter()
                kwargs["warmup"] = min(float(kwargs.get("warmup", TUNE_WARMUP_MS)), TUNE_WARMUP_MS)
                kwargs["rep"] = min(float(kwargs.get("rep", TUNE_REP_MS)), TUNE_REP_MS)
                with runner.gpu_lead(kernel_call):
                    out = own(kernel_call, *args, **kwargs)
                runner.sync()
                runner.tuning_s += runner.cap.perf_counter() - start
            return out

        driver.get_benchmarker = lambda: tuning_bench

    def check_tamper(self, stage: str) -> None:
        if self.audit is not None and self.audit.findings:
            self.chan.reject(FailureKind.TAMPERING, stage,
                             f"candidate code tried {self.audit.findings[0]}, which the gate "
                             f"refused: it reaches into the gate's own process")
        if self.mode_depth() > self.modes_before:
            self.chan.reject(FailureKind.TAMPERING, stage,
                             "candidate code left a torch dispatch mode of its own on torch's "
                             "mode stack: ops run beneath the gate's op trace go unseen by it")
        changed = self.watch.changed()
        if changed:
            shown = ", ".join(changed[:8]) + (" ..." if len(changed) > 8 else "")
            self.chan.reject(FailureKind.TAMPERING, stage,
                             f"candidate code replaced {shown}: the gate does not trust a run "
                             f"after its checks, timers or torch were patched")
        from gate import foreign  # noqa: PLC0415

        loaded = foreign.loaded_foreign(set(sys.modules) - self.modules_before, self.permitted)
        if loaded:
            self.chan.reject(FailureKind.FOREIGN_LIBRARY, "anti_cheat",
                             f"candidate code imported {', '.join(loaded)} while it ran: the answer "
                             f"must come from its own kernels, and the gate cannot attribute "
                             f"another library's")

    def own_kernel_names(self) -> set[str]:
        """Names of the candidate's own kernels: those it launched through the hooked paths
        and, for CUDA, the `__global__` functions of its `.cu` text."""
        from gate import foreign  # noqa: PLC0415

        names = set(self.monitor.names)
        if self.job.cu_path:
            names |= foreign.cuda_kernel_names(Path(self.job.cu_path).read_text())
        return names

    def check_kernels(self, stage: str, what: str) -> None:
        """Every GPU kernel that ran in the candidate's calls so far is its own or allowed
        (`gate.foreign`); the first foreign one rejects, named."""
        from gate import foreign  # noqa: PLC0415

        if self.kernels.lost:
            self.chan.reject(FailureKind.TAMPERING, stage,
                             f"the GPU profiler that attributes kernels started before candidate "
                             f"code loaded and not during its {what}: {self.kernels.lost[:200]}")
        bad = foreign.attribute_kernels(self.kernels.kernels, self.own_kernel_names())
        if bad:
            more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
            self.chan.reject(FailureKind.FOREIGN_KERNEL, stage,
                             f"a GPU kernel that is not the candidate's ran during its {what}: "
                             f"{bad[0][:300]}{more}; only kernels compiled from its own source and "
                             f"torch's fill/copy kernels may run")

    def _tuning(self) -> bool:
        return self.monitor.tuning > 0

    def call(self, inputs: tuple[Any, ...], mode: str, poison: bool = True,
             seal: Any = None) -> dict[str, Any]:
        """One traced call of the candidate on `inputs` (already cloned); with `seal` (a
        `guards.Seal` of `inputs`), the sealed call: the outputs returned are `Seal.outputs`."""
        trace = self.guards.OpTrace(self.reference_code, poison, self._tuning, seal=seal)
        self.monitor.reset(mode, inputs)
        out, exc, odd = None, None, None
        # The first call compiles (CPU work, seconds): it runs without the GPU's shared lock so
        # that a gate waiting to time is not held up by another's compiler.
        first, self.calls = self.calls == 0, self.calls + 1
        try:
            with (contextlib.nullcontext() if first else self.lock.shared()), self.kernels.window(), \
                    trace:
                if seal is not None:
                    seal.seal()
                    self.monitor.seal = seal
                try:
                    out = self.run_fn(*inputs)
                    self.sync()
                finally:
                    self.monitor.seal = None
            odd = odd_output(out, self.cap.tensor_type)
            if odd is not None:  # read no further: reading it would run candidate code
                out = None
            elif seal is not None:
                out = seal.outputs(out)
        except BaseException as e:  # SystemExit too: a candidate may not end the worker
            exc = e
        return {"out": out, "exc": exc, "odd": odd, "trace": trace, "launches": self.monitor.launches,
                "side": list(self.monitor.side_stream),
                "launched": self.guards.LaunchSignature.of(self.monitor.sequence, self.monitor.given)}

    def check_call(self, res: dict[str, Any], inputs: tuple[Any, ...],
                   original: tuple[Any, ...] | None, stage: str, what: str) -> None:
        """The checks of one call; `original` None: its inputs are not compared (sealed)."""
        chan, trace = self.chan, res["trace"]
        if res["exc"] is not None:
            exc = res["exc"]
            chan.reject(classify(exc), stage, f"run raised on {what}: {describe(exc)}")
        if self.monitor.refused is not None:  # refused, and the refusal caught
            chan.reject(FailureKind.COMPILE_ERROR, "compile",
                        f"on {what} the candidate launched a kernel Triton's JIT would not launch "
                        f"on a GPU: {self.monitor.refused}")
        if trace.reference_calls:
            chan.reject(FailureKind.REFERENCE_CALL, "anti_cheat",
                        f"the candidate called the case's reference on {what} "
                        f"({', '.join(sorted(set(trace.reference_calls)))})")
        if trace.violations:
            chan.reject(FailureKind.TORCH_COMPUTE, "anti_cheat",
                        f"torch compute ops ran inside the candidate on {what}: "
                        f"{', '.join(sorted(set(trace.violations)))} (only allocation, views and "
                        f"copies are allowed; the answer must come from the candidate's kernels)")
        self.check_tamper("anti_cheat")
        if res["side"]:
            chan.reject(FailureKind.SIDE_STREAM, "anti_cheat",
                        f"launch outside the gate's stream on {what}: {res['side'][0]}")
        if res["launches"] == 0:
            chan.reject(FailureKind.NO_LAUNCH, "anti_cheat",
                        f"none of the candidate's own kernels launched on {what}")
        if trace.host_reads:
            chan.reject(FailureKind.HOST_COMPUTE, "anti_cheat",
                        f"host code read floating-point values off the device on {what} "
                        f"({'; '.join(dict.fromkeys(trace.host_reads))}): a candidate's host "
                        f"code needs its tensors' shapes, not their values; the answer must "
                        f"come from its kernels")
        if res.get("odd") is not None:
            chan.reject(FailureKind.BAD_OUTPUT, "anti_cheat",
                        f"{res['odd']} on {what}: run returns torch tensors, Python numbers or "
                        f"None, alone or in a plain tuple or list (an object of a class of its "
                        f"own runs its code when the gate reads it, after the call)")
        if original is not None:
            self.check_inputs(inputs, original, what)
        self.check_output_types(res["out"], what)

    def check_seal(self, seal: Any, stage: str, what: str) -> None:
        """What a sealed call's seal found: a window refused (`Seal.breach`), a launch that
        wrote into an input (`Seal.written`: the inputs end poisoned, `check_inputs` cannot
        compare them)."""
        if seal.breach is not None:
            self.chan.reject(FailureKind(seal.breach[0]), "anti_cheat", f"{what}: {seal.breach[1]}")
        if seal.written:
            self.chan.reject(FailureKind.INPUT_MUTATION, "anti_cheat",
                             f"the candidate wrote into its inputs on {what} ({seal.written} "
                             f"launch(es) left an input changed)")

    def check_same_kernels(self, variant: str, launched: Any, kind: FailureKind, stage: str,
                           what: str) -> None:
        """A call of `variant` launches no kernel that the variant's first correctness call did
        not (`guards.LaunchSignature`): an honest candidate runs the same kernels whatever
        values its inputs hold (it may launch fewer: a set-up done once). One that launches
        others tells the calls apart (the sealed call by the poison its host code reads or the
        gate's frames, a set seen before by a cache of answers) and computes elsewhere in the
        rest."""
        first = self.launched.get(variant)
        if first is None or launched.kernels <= first:
            return
        self.chan.reject(kind, stage,
                         f"on {what} the candidate launched {', '.join(sorted(launched.kernels - first))}, "
                         f"which its first call of {variant} did not "
                         f"({', '.join(sorted(first)) or 'none'}): it tells the gate's calls apart "
                         f"(sealed inputs, a set seen before) and computes differently in some")

    def check_sealed_launches(self, variant: str, ints: tuple[Any, ...], launched: Any,
                              kind: FailureKind, what: str, why: str) -> None:
        """A call launches as the variant's correctness calls after its first did on sets of
        the same integers (`ints`, the call's set's `_integers` as drawn): kernels, grids,
        integer arguments (`guards.odd_launches`). So the sealed call, and the knockout call (on
        the first seed's set again: one a cache of answers answers). A candidate that tells such
        a call apart and runs its kernels idle in the others (on 0 elements) launches otherwise. So
        does one that keeps its launches and flips a float argument (a flag its kernel picks a
        path by): a float argument that held one value in every such correctness call holds it
        here too (`guards.odd_floats`), where that says something: two calls or more, or inputs
        without a float scalar (a float drawn with the inputs, or made from one, differs
        between sets). On the CPU tiers, so does a flag in a buffer host code writes
        (`check_given`)."""
        seen = self.seed_launches.get((variant, ints))
        if not seen:
            return
        odd = self.guards.odd_launches([*(s.shape for s in seen), launched.shape])
        if odd is not None:
            mine, theirs = launched.shape, seen[0].shape
        elif (len(seen) >= 2 or float not in ints) and \
                self.guards.odd_floats([s.sequence for s in seen], launched.sequence) is not None:
            mine, theirs = launched.sequence, seen[0].sequence
        else:
            self.check_given(seen, launched, kind, what, why)
            return
        self.chan.reject(kind, "anti_cheat",
                         f"on {what} the candidate's launches ({_launches_text(mine)}) "
                         f"differ from those of its correctness calls on inputs of the same "
                         f"integers ({_launches_text(theirs)}): {why}")

    def check_given(self, seen: list[Any], launched: Any, kind: FailureKind, what: str, why: str) -> None:
        """On the CPU tiers, a call that launches as the correctness calls on inputs of the same
        integers is given what they were given where host code put it: an element of a buffer
        it passes that held one value in all of them (two or more) holds it here too
        (`gate.hostbytes.odd_contents`). A candidate that tells the sealed call apart by the
        inputs' values (host memory there) and picks its kernel's path by a flag it writes into
        a buffer of its own launches alike, but gives its kernel another flag."""
        found = self.guards.odd_contents([s.contents for s in seen], launched.contents)
        if found is None:
            return
        j, k, at, theirs, mine = found
        kernel = launched.sequence[j][0] if j < len(launched.sequence) else "?"
        self.chan.reject(kind, "anti_cheat",
                         f"on {what} launch {j + 1} of the candidate's ({kernel}) was given, in its "
                         f"argument {k} (from 0), a buffer whose element at byte {at} of its storage held "
                         f"{theirs} (hex) in each of its correctness calls on inputs of the same "
                         f"integers and holds {mine} here, put there by host code (no kernel of the "
                         f"candidate's left it there): {why}")

    def check_same_launches(self, calls: list[tuple[Any, ...]], stage: str, what: str) -> None:
        """Calls on one set of buffers refilled with values that differ in floats alone (their
        launch sequences, the first call's left out: a set-up on new buffers) launch alike:
        the same kernels, grids and scalar arguments in the same order, counters apart
        (`guards.odd_launches`)."""
        odd = self.guards.odd_launches(calls)
        if odd is not None:
            self.chan.reject(FailureKind.REUSED_OUTPUT, stage,
                             f"on {what} the candidate's launches ({_launches_text(odd)}) differ "
                             f"from another call's on the same buffers ({_launches_text(calls[0])}) "
                             f"though only float values changed: it skips or changes its work on "
                             f"inputs it has seen (a cache of answers)")

    def check_timed_launches(self, variant: str, cuts: list[int], what: str) -> None:
        """The timed calls, cut out of the monitor's sequence at `cuts` (where each ended), held
        to `check_same_kernels` and, after the first, to `check_same_launches`."""
        sequence = self.monitor.sequence
        calls = [tuple(sequence[start:end]) for start, end in zip([0, *cuts], cuts)]
        sequence.clear()
        for call in set(calls):
            self.check_same_kernels(variant, self.guards.LaunchSignature.of(list(call)),
                                    FailureKind.REUSED_OUTPUT, "timing", what)
        self.check_same_launches(calls[1:], "timing", what)

    def check_inputs(self, inputs: tuple[Any, ...], original: tuple[Any, ...], what: str) -> None:
        for i, (x, o) in enumerate(zip(inputs, original)):
            if type(o) is self.cap.tensor_type and not self.cap.equal(x, o):
                self.chan.reject(FailureKind.INPUT_MUTATION, "anti_cheat",
                                 f"the candidate wrote into input {i} on {what}")

    def check_output_types(self, out: Any, what: str) -> None:
        items = out if isinstance(out, (tuple, list)) else (out,)
        for i, t in enumerate(items):
            if isinstance(t, self.torch.Tensor) and type(t) is not self.cap.tensor_type:
                self.chan.reject(FailureKind.BAD_OUTPUT, "anti_cheat",
                                 f"output {i} on {what} is a {type(t).__name__}, a tensor subclass "
                                 f"(lazy or self-modifying); a plain torch.Tensor is required")
            if type(t) is self.cap.tensor_type:
                if t.device.type != self.device or t.layout != self.torch.strided:
                    self.chan.reject(FailureKind.BAD_OUTPUT, "anti_cheat",
                                     f"output {i} on {what} is a {t.layout} tensor on {t.device}, "
                                     f"expected a strided tensor on {self.device}")

    def send_out(self, variant: str, phase: str, seed: int, res: dict[str, Any],
                 given: tuple[tuple[str, str, int], tuple[Any, ...]] | None = None) -> None:
        self.report(variant, phase, seed, res["out"], res["launches"], given)

    def report(self, variant: str, phase: str, seed: int, outputs: Any, launches: int,
               given: tuple[tuple[str, str, int], tuple[Any, ...]] | None = None) -> None:
        """Send one call's outputs to be judged: whole (`gate.transport`), or, with held
        references, compared here on the parent's key and the figures sent (`gate.heldcompare`).
        `given`: the key of the set the call ran on and that set (the call's inputs as first
        drawn), on which a reference computed again at this comparison is computed."""
        if not self.held_mode:
            self.chan.send("out", variant, phase, seed, self.encode(outputs), launches)
            return
        from gate import heldcompare  # noqa: PLC0415

        self.chan.send("out", variant, phase, seed,
                       {"held": True, "headers": heldcompare.headers(outputs)}, launches)
        _, ref, key, fresh, places, allclose = self.chan.answer("judge")
        held = self._held(tuple(ref), key, given)
        if held is None:
            self.chan.reject(FailureKind.TAMPERING, "anti_cheat",
                             f"the parent asked for a comparison with {ref}, which this worker "
                             f"does not hold: messages on the gate's pipe were forged")
        with self.lock.shared():
            figures = heldcompare.judge(outputs, held, key, fresh, places,
                                        tuple(allclose) if allclose else None)
            self.sync()
        del key, fresh
        self.chan.send("judged", variant, phase, seed, figures)
        # A failing output is compared with the variant's other sets too (whose answer is it?);
        # the parent sends their keys only then.
        _, others = self.chan.answer("more")
        if others:
            found = []
            for ref, key, fresh in others:
                held = self._held(tuple(ref), key, given, quiet=True)
                if held is None:
                    continue
                with self.lock.shared():
                    found.append(heldcompare.judge(outputs, held, key, fresh, [],
                                                   tuple(allclose) if allclose else None))
                    self.sync()
                del held
            self.chan.send("others", variant, phase, seed, found)

    # -- phases --------------------------------------------------------------------------
    def correctness(self) -> None:
        self.chan.send("stage", "correctness")
        for variant, phase, seed in self.plan():
            if phase != PHASE_SEED:
                continue
            original = self.original((variant, phase, seed))
            inputs = self.clone_inputs(original)
            self.monitor.kept.clear()
            res = self.call(inputs, "run")
            if seed == self.job.seeds[0]:
                self.first_kept[variant] = {k: set(v) for k, v in self.monitor.kept.items()}
            self.check_call(res, inputs, original, "correctness", f"{variant}/seed {seed}")
            launched = res["launched"]
            if seed == self.job.seeds[0]:
                self.launched[variant] = launched.kernels
            else:  # a set-up done once is in the first call alone
                self.seed_launches.setdefault((variant, _integers(original, self.cap)), []).append(launched)
            self.check_same_kernels(variant, launched, FailureKind.FALLBACK, "correctness",
                                    f"{variant}/seed {seed}")
            self.send_out(variant, phase, seed, res, ((variant, phase, seed), original))
            if seed != self.job.seeds[0]:  # the first seed's runs again (configs, knockout)
                self._release((variant, phase, seed))
            del original, inputs, res  # before the next set comes (a parked one is a copy)
        self.check_kernels("correctness", "correctness calls")

    def configs(self) -> None:
        """Every configuration of each autotuner the candidate ran is checked, not only the one
        it picked: the correctness calls ran the configuration that timed fastest (on the
        device) or the first (the interpreter cannot time), and another shape, GPU or timing
        run picks another. Each configuration is forced in turn (`LaunchMonitor.pin`) on every
        variant's configuration set, and its output goes to the parent like a seed's. That set
        is drawn for these calls alone, with a seed the job does not name (`_draw_seed`), and
        the calls are sealed: host code never reads its values, so an answer kept from the
        calls before (whose inputs it read) fits none of them. A configuration
        the autotuner's pruning drops for a shape is not run on it, and one that does not fit
        the GPU (the errors Triton's autotuner itself skips) is skipped: neither can be picked.
        The autotuners' choices are restored afterwards.

        A configuration the pruning dropped on every call of the runs before on the variant
        (`LaunchMonitor.kept`: it saw the same arguments) is not run again to find that out.
        Under the interpreter, where the pruning kept one configuration alone on each call of
        the variant's first correctness call, that call ran exactly what forcing it runs (one
        configuration left is not timed): its output, judged already, stands for it. Under the
        interpreter, configurations that differ only in what the compiler alone
        reads (`_interpreted_alike`: warps, stages, CTAs, registers) run the same Python on the
        same inputs: the first of them that runs on a variant stands for the others there."""
        tuners = [t for t in self.monitor.tuners.values() if len(getattr(t, "configs", ())) > 1]
        # how many configuration outputs may follow: the parent answers no more (each is
        # answered with a key where references are held)
        self.chan.send("configs", len(self.shapes) * sum(len(t.configs) for t in tuners))
        seed = self.config_seed()
        if not tuners:
            for variant in self.shapes:
                self._release((variant, PHASE_CONFIG, seed))
            return
        self.chan.send("stage", "correctness")
        skipped = 0
        host_bytes = self.monitor.host_bytes
        for tuner in tuners:
            kernel = getattr(self.guards.tuner_kernel(tuner), "__name__", None) or "kernel"
            saved = dict(tuner.cache)
            try:
                for variant in self.shapes:
                    key = (variant, PHASE_CONFIG, seed)
                    kept: set[int] | None = None  # what pruning kept on the runs before
                    ran: set[Any] = set()  # `_interpreted_alike` keys checked on this variant
                    if self.job.tier == "interpret":
                        kept = self.first_kept.get(variant, {}).get(id(tuner))
                        if kept is not None and len(kept) == 1:
                            continue  # the correctness call ran it alone
                    for index, config in enumerate(list(tuner.configs)):
                        if kept is not None and id(config) not in kept:
                            continue  # pruned for this shape: the autotuner never runs it here
                        alike = _interpreted_alike(config) if self.job.tier == "interpret" else None
                        if alike is not None and alike in ran:
                            continue
                        tuner.cache.clear()
                        tuner.best_config = None
                        self.monitor.pin = (tuner, config)
                        self.monitor.kept.pop(id(tuner), None)
                        inputs = res = seal = whole = None  # the previous call's go first
                        inputs, whole = self._for_one_call(key)
                        # sealed (`guards.Seal`): host code that tells the configuration calls
                        # apart by reading its inputs reads poison, as in the sealed call; the
                        # next configuration runs on the same set, so what this call's kernels
                        # wrote into the candidate's buffers goes (`again`)
                        seal = self.guards.Seal(inputs, self.cap, check=self.beside_launch, again=True)
                        # the seal undoes what the call wrote into the candidate's buffers: so
                        # does what the monitor learnt of the kernels' writes (`gate.hostbytes`)
                        known = host_bytes.state() if host_bytes is not None else None
                        try:
                            res = self.call(inputs, "run", seal=seal)
                        finally:
                            self.monitor.pin = None
                            if known is not None:
                                host_bytes.restore(known)
                        if id(tuner) in self.monitor.kept:
                            kept = (kept or set()) | self.monitor.kept[id(tuner)]
                        phase = (f"{PHASE_CONFIG} {index} of {kernel} "
                                 f"({self.guards.tuner_config_text(config)})")
                        if res["exc"] is not None and _does_not_fit(res["exc"]):
                            skipped += 1
                            continue
                        if res["exc"] is None and getattr(tuner, "best_config", None) is not config:
                            continue  # pruned for this shape: the autotuner never runs it here
                        what = f"{variant}/configuration inputs under {phase}"
                        self.check_seal(seal, "correctness", what)
                        self.check_call(res, inputs, None, "correctness", what)
                        self.send_out(variant, phase, seed, res, None if whole is None else (key, whole))
                        if alike is not None:
                            ran.add(alike)
            finally:
                tuner.cache.clear()
                tuner.cache.update(saved)
        for variant in self.shapes:
            self._release((variant, PHASE_CONFIG, seed))
        self.check_kernels("correctness", "configuration calls")
        if skipped:
            self.chan.send("flag", f"{skipped} autotune configuration run(s) did not fit the GPU "
                                   f"and were skipped, as the autotuner skips them")

    def knockout(self) -> None:
        self.chan.send("stage", "anti_cheat")
        variant = next(iter(self.shapes))
        seed = self.job.seeds[0]
        original = self.original((variant, PHASE_SEED, seed))
        for mode, phase in (("silent", PHASE_KNOCKOUT), ("raise", PHASE_FAULT)):
            inputs = res = None  # the previous call's go first
            inputs = self.clone_inputs(original)
            res = self.call(inputs, mode)
            trace = res["trace"]
            if trace.violations:
                when = "are skipped" if mode == "silent" else "fail"
                self.chan.reject(FailureKind.FALLBACK, "anti_cheat",
                                 f"when its kernel launches {when}, the candidate computes with "
                                 f"torch instead ({', '.join(sorted(set(trace.violations)))})")
            self.check_tamper("anti_cheat")
            if res["exc"] is None:
                self.check_inputs(inputs, original, f"the {phase} run")
                self.check_output_types(res["out"], f"the {phase} run")
                if mode == "silent":  # the first seed's set again, unsealed
                    self.check_sealed_launches(variant, _integers(original, self.cap), res["launched"],
                                               FailureKind.REUSED_OUTPUT,
                                               f"the {phase} run",
                                               "it launches otherwise on a set it has seen (a "
                                               "cache of answers)")
                self.send_out(variant, phase, seed, res, ((variant, PHASE_SEED, seed), original))
        self.check_kernels("anti_cheat", "knockout calls")
        for v in self.shapes:  # the first seed's sets have had their last call
            self._release((v, PHASE_SEED, seed))

    def sealed(self) -> None:
        """One call per variant on fresh inputs whose float tensors hold poison except while
        the candidate's own kernels run (`guards.Seal`): host code between launches sees NaN
        alone, so an answer it computed from the inputs (NumPy, Python, raw memory, torch
        outside the op trace) is garbage; the parent rejects a wrong output as
        `host_compute`. Input mutation is judged by the other calls: the inputs end poisoned."""
        self.chan.send("stage", "anti_cheat")
        seed = self.sealed_seed()
        for variant in self.shapes:
            inputs, masked = self._sealed_inputs((variant, PHASE_SEALED, seed))
            ints = _integers(inputs, self.cap)  # as drawn: host code may write its inputs
            seal = self.guards.Seal(inputs, self.cap, check=self.beside_launch,
                                    keys=functools.partial(self._seal_keys, variant), masked=masked)
            res = self.call(inputs, "run", seal=seal)
            what = f"{variant}/sealed inputs"
            self.check_seal(seal, "anti_cheat", what)
            if res["exc"] is not None and classify(res["exc"]) is FailureKind.TAMPERING:
                self.check_tamper("anti_cheat")
            if res["exc"] is not None and classify(res["exc"]) is FailureKind.OUT_OF_MEMORY:
                # the device ran out beside the call: no sign of host code reading inputs
                self.chan.reject(FailureKind.OUT_OF_MEMORY, "anti_cheat",
                                 f"run raised on {what}: {describe(res['exc'])}")
            if res["exc"] is not None:
                self.chan.reject(FailureKind.HOST_COMPUTE, "anti_cheat",
                                 f"run raised on {what} when its inputs are visible only to its "
                                 f"kernels: {describe(res['exc'])} (host code reads input values)")
            self.check_call(res, inputs, None, "anti_cheat", what)
            self.check_same_kernels(variant, res["launched"], FailureKind.HOST_COMPUTE, "anti_cheat", what)
            self.check_sealed_launches(variant, ints, res["launched"], FailureKind.HOST_COMPUTE, what,
                                       "it tells the sealed call apart and computes differently "
                                       "in the others")
            self.send_out(variant, PHASE_SEALED, seed, res)
            if os.environ.get("KLINEAGE_GATE_DEBUG") == "1":
                print(f"klineage gate sealed call {variant}: {seal.launches} launches, "
                      f"{seal.replayed} host copies replayed", file=sys.stderr, flush=True)
            del inputs, masked, seal, res
            self._release((variant, PHASE_SEALED, seed))
        self.check_kernels("anti_cheat", "sealed calls")

    def beside_launch(self) -> tuple[str, str] | None:
        """What of the candidate's could run while a sealed launch's window is open (the
        inputs' real values in memory), as (failure kind, reason); None when nothing: a launch
        from a thread other than the one that calls run, a thread the candidate started (not
        one the worker had before it loaded) alive, or the gate's code, instruments
        or worker tampered with (`check_tamper`'s findings; torch's own functions are
        checked after the call, as an emulated host answers its device queries with
        stand-ins meanwhile)."""
        import threading  # noqa: PLC0415

        if threading.current_thread() is not threading.main_thread():
            return (FailureKind.HOST_COMPUTE.value,
                    "the candidate launched a kernel from a thread of its own on sealed inputs "
                    "(the thread that called run could read the real inputs meanwhile); "
                    "kernels must launch from the thread that calls run")
        others = set(sys._current_frames()) - self.threads_before - {threading.get_ident()}
        if others:
            return (FailureKind.HOST_COMPUTE.value,
                    f"{len(others)} thread(s) started by the candidate ran while its kernel "
                    f"launched on sealed inputs (code beside a launch reads the real inputs); "
                    f"threads must end before run returns")
        if self.audit is not None and self.audit.findings:
            return (FailureKind.TAMPERING.value,
                    f"candidate code tried {self.audit.findings[0]}, which the gate refused")
        changed = self.watch.changed(gate_only=True)
        if changed:
            return (FailureKind.TAMPERING.value,
                    f"candidate code replaced {', '.join(changed[:8])} before a sealed launch")
        return None

    def repeat(self) -> None:
        """Interpret tier: repeated calls on the same input buffers, refilled with another set
        of the variant's pool before each call; every output is checked."""
        self.chan.send("stage", "correctness")
        for variant in self.shapes:
            # a lean plan's rotations one after the other, each with one crossover of the pool
            picks = range(1, len(self.pools[variant].sets)) if self._lean(variant) else [None]
            for pick in picks:
                rotation = self._rotation(variant, pick)
                sets = len(rotation.pool.sets)
                calls = max(self.job.repeat_calls, sets)
                later: list[tuple[Any, ...]] = []  # the launches of the calls after the first
                what = f"{variant}/repeated runs"
                for i in range(calls):
                    if i:
                        rotation.refill((rotation.current + 1) % sets)
                    original = rotation.pool.inputs(rotation.current)
                    res = self.call(rotation.buffers, "run")
                    self.check_call(res, rotation.buffers, original, "correctness", what)
                    self.check_same_kernels(variant, res["launched"], FailureKind.REUSED_OUTPUT,
                                            "correctness", what)
                    if i:  # the first call on new buffers may set up
                        later.append(res["launched"].sequence)
                    self.send_out(variant, PHASE_REFILL, rotation.pool.seed(rotation.current), res)
                    del res, original
                self.check_same_launches(later, "correctness", what)
                del rotation

    def timing(self) -> None:
        self.chan.send("stage", "timing")
        for variant in self.shapes:
            # Timed twice. The reported figure comes from the untraced runs: the op trace's
            # Python dispatch costs tens of microseconds per torch op, which would swamp kernels
            # of a few microseconds and is not paid by the reference either. The traced runs
            # (under the kernel log too) vouch for what the candidate does when timed; both are
            # held to the launch count, stream and input checks, and a sample of each run's
            # calls, drawn after they ran, plus its last call, is checked by the parent.
            self.timed_runs(variant, traced=True, what=f"{variant}/timed runs")
            self.check_kernels("timing", f"{variant} timed runs")
            ms, wall = self.timed_runs(variant, traced=False, what=f"{variant}/untraced timed runs")
            self.chan.send("cand_ms", variant, ms, wall, self.timed_s)
            self.send_picks(variant)

    def send_picks(self, variant: str) -> None:
        """The configuration each of the candidate's autotuners picked in the timed runs just
        done (by the kernel function's name): constexprs, num_warps, num_stages. The verdict
        reports them; a sweep around the kernel's own configuration starts there."""
        picks: dict[str, dict[str, int]] = {}
        for tuner in self.monitor.tuners.values():
            config = getattr(tuner, "best_config", None)
            name = getattr(self.guards.tuner_kernel(tuner), "__name__", None)
            if config is None or not name:
                continue
            values = {str(k): v for k, v in (getattr(config, "kwargs", None) or {}).items()
                      if isinstance(v, int) and not isinstance(v, bool)}
            for key in ("num_warps", "num_stages"):
                if isinstance(getattr(config, key, None), int):
                    values[key] = getattr(config, key)
            picks[name] = values
        if picks:
            self.chan.send("picks", variant, picks)

    def timed_runs(self, variant: str, *, traced: bool, what: str) -> tuple[float, float]:
        """Bench the candidate on input buffers refilled before every timed call; check the
        calls; send a sample of their outputs; (ms, wall ms). The pool's sets the candidate's
        timed calls have not run on yet are held back and brought in at random places among
        the measured calls; every call on a set it meets for the first time is checked, and
        after the untraced run (the last), a variant whose calls on sets met before are much
        quicker than each of those first calls, in that run or in both, is refused
        (`gate.visits`)."""
        visits = self.visits
        trace = self.guards.OpTrace(self.reference_code, poison=False, paused=self._tuning)
        self.lap.restart()
        rotation = self._rotation(variant, self._unmet_crossover(variant))
        self.lap("timing: pool brought back")
        last: list[Any] = [None, 0]  # the last call's outputs, the pool set it ran on
        calls = [0]
        seen = self.visited.setdefault(variant, set())
        rotation.hold_back({i for i, (seed, _) in enumerate(rotation.pool.sets) if seed not in seen})
        # the sets this run brings in: all that are left in the untraced run (whose median is
        # reported, and judged on its own first visits: two where the pool has them), else
        # the smaller half of the pool's crossovers not met, and fewer where the untraced run
        # would be left less than two (a lean rotation holds one crossover: the untraced run
        # takes another). Each first visit is compared with its own run's calls: the op
        # trace's Python may show in the traced run's times
        held_back = sorted(rotation.held_back)
        rotation.rng.shuffle(held_back)
        if traced:
            pool = self.pools[variant]
            unmet = sum(pool.seed(k) not in seen for k in range(1, len(pool.sets)))
            left = 1 if self._lean(variant) else visits.MIN_VISITS
            held_back = held_back[:max(0, min(unmet // 2, unmet - left))]
        host = self._samples_on_host(variant)
        sample = self.refill.SetSample(
            REFILL_SAMPLE, len(rotation.pool.sets), functools.partial(self._snapshot, host=host),
            among=tuple(i for i in range(len(rotation.pool.sets))
                        if i not in rotation.held_back or i in held_back))
        pending = [False]  # the last call's outputs not yet offered to the sample
        cuts: list[int] = []  # where each call's launches end in the monitor's sequence
        firsts_host = host or self._samples_on_host(variant, REFILL_SAMPLE + len(held_back) + 1)
        visit_log: list[tuple[int, bool]] = []  # per call: the pool set, whether met first here
        firsts: list[tuple[int, int, Any]] = []  # first visits (call number from 1, set, outputs)
        intro: dict[int, int] = {}  # call number -> the held-back set brought in before it
        reps_from = [0]  # the number of the first measured call

        def keep_first() -> None:
            # the last call's outputs, where it met its set first and they are not kept yet
            if pending[0] and visit_log[-1][1] and not (firsts and firsts[-1][0] == len(visit_log)):
                firsts.append((len(visit_log), last[1],
                               self._snapshot(last[0], host=firsts_host)))

        def fn() -> None:
            # the previous call's outputs go first (offered to the sample already, or a warm-up
            # call's): one output's memory at a time. A first visit's are kept before (where no
            # refill came between, as in the warm-up calls: no measured call is one of those)
            keep_first()
            last[0] = None
            seed = rotation.pool.seed(rotation.current)
            visit_log.append((rotation.current, seed not in seen))
            seen.add(seed)
            if traced:
                with trace:
                    last[0] = self.run_fn(*rotation.buffers)
            else:
                last[0] = self.run_fn(*rotation.buffers)
            last[1] = rotation.current
            pending[0] = True
            calls[0] += 1
            cuts.append(len(self.monitor.sequence))

        def between() -> bool:
            if pending[0]:
                keep_first()
                sample.offer(last[1], last[0])
                pending[0] = False
            index = intro.pop(calls[0], None)
            if index is None:
                rotation.refill_next()
                return False
            rotation.bring_in(index)
            return True  # a first visit follows: a longer GPU lead (`gpu_lead`)

        def on_reps(n: int) -> None:
            reps_from[0] = calls[0]
            places = visits.places(n, len(held_back), rotation.rng)
            for place, index in zip(places, held_back):
                intro[calls[0] + place] = index

        self.monitor.reset("run")
        self.kernels.time_ns.clear()
        self.kernels.spans = [] if self.kernels.marker else None
        times: list[float] = []
        try:
            with self.kernels.window():
                ms, wall = self.bench(fn, between, times=times, on_reps=on_reps)
        except BaseException as exc:
            self.chan.reject(classify(exc), "timing", f"run raised while timed: {describe(exc)}")
        # each measured call's GPU time where the kernel log tells it call by call: first
        # visits are judged by it (a host stall inside a call adds nothing there), else by
        # the events; the reported median is the events' either way
        gpu = visits.call_gpu_ms(self.kernels.spans, self.kernels.marker, self.lead_marks, len(times))
        self.kernels.spans = None
        self.lap("timing: timed calls and samples")
        if traced and calls[0]:
            self.send_kernel_ms(variant, calls[0])
        res = {"out": last[0], "exc": None, "trace": trace,
               "launches": self.monitor.launches, "side": list(self.monitor.side_stream)}
        self.check_call(res, rotation.buffers, rotation.pool.inputs(rotation.current), "timing", what)
        self.check_timed_launches(variant, cuts, what)
        launches = res["launches"]
        if res["launches"] < calls[0]:
            self.chan.reject(FailureKind.FALLBACK, "timing",
                             f"{calls[0]} timed calls launched only {res['launches']} kernels: "
                             f"the candidate skips its kernel when timed")
        # the last call is checked as the last; every earlier first visit as one
        checked = [(rotation.pool.seed(index), outputs) for index, outputs in
                   sample.kept + [(last[1], last[0])] + [(i, out) for n, i, out in firsts
                                                         if n != len(visit_log)]]
        # per set first met among the measured calls: its first call's ms, its later calls'
        measured = list(zip(times, visit_log[reps_from[0]:reps_from[0] + len(times)]))

        def first_visits(figures: list[float]) -> tuple[dict[int, Any], float | None]:
            calls = list(zip(figures, visit_log[reps_from[0]:reps_from[0] + len(figures)]))
            met = {index: (t, [t2 for t2, (i2, _) in calls if i2 == index][1:])
                   for t, (index, first) in calls if first}
            again = [t for t, (_, first) in calls if not first] \
                if self.same_work.get(variant, True) else []
            return met, (statistics.median(again) if again else None)

        met, again_ms = first_visits(times)
        met_gpu, again_gpu = first_visits(gpu) if gpu is not None else (met, again_ms)
        run_visits = [visits.FirstVisit(first, tuple(later), again_gpu, gpu is not None)
                      for first, later in met_gpu.values()]
        judged = self.first_visits.setdefault(variant, [])
        judged.extend(run_visits)
        del rotation, sample, last, res, firsts  # a lean plan's pool leaves the device before the reports
        self.lap("timing: checks")
        for seed, outputs in checked:
            self.report(variant, PHASE_REFILL, seed, outputs, launches)
        self.lap("timing: sampled outputs compared")
        if os.environ.get("KLINEAGE_GATE_DEBUG") == "1":
            at = {index: k for k, (_, (index, first)) in enumerate(measured) if first}
            slow, others, slowest = visits.slow_calls([(t, i, f) for t, (i, f) in measured])
            kernel = "" if gpu is None else " (GPU time: first {:.4f} ms, later {:.4f} ms)"
            print(f"klineage gate first visits ({what}): " + "; ".join(
                f"set {i}: first {first:.4f} ms (call {at[i]} of {len(measured)}), later "
                f"{statistics.median(later) if later else 0.0:.4f} ms of {len(later)}"
                + kernel.format(met_gpu[i][0], statistics.median(met_gpu[i][1] or [0.0]))
                for i, (first, later) in met.items())
                + f"; calls on sets met before {again_ms or 0.0:.4f} ms; median {ms:.4f} ms; "
                f"other calls slow as a first visit must be: {slow} of {others} (slowest "
                f"{slowest:.4f} ms); first visits judged by "
                + ("the GPU time of each call's activities" if gpu is not None else
                   f"the events (kernel log per call: none; {self.lead_marks} marks, "
                   f"spans {'kept' if self.kernels.marker else 'not kept: no marker'})"),
                file=sys.stderr, flush=True)
        # judged after the untraced run (whose median is reported): its own first visits, and
        # those of both runs together; a traced run's one first visit never decides alone
        if not traced:
            for whose, those in ((what, run_visits),
                                 (f"{variant}/timed runs, traced and untraced", judged)):
                reason = visits.memo_gain(those)
                if reason is not None:
                    self.chan.reject(FailureKind.REUSED_OUTPUT, "timing", f"{whose}: {reason}")
        return ms, wall

    def _unmet_crossover(self, variant: str) -> int | None:
        """For a lean plan's timed run (its rotation holds one crossover): a crossover of the
        pool the candidate's timed calls have not run on, drawn at random, so that the run
        has a first visit to time (`gate.visits`); None where each was met, or off a lean plan."""
        if not self._lean(variant):
            return None
        pool, seen = self.pools[variant], self.visited.get(variant, set())
        unmet = [k for k in range(1, len(pool.sets)) if pool.seed(k) not in seen]
        return random.SystemRandom().choice(unmet) if unmet else None

    def _samples_on_host(self, variant: str, samples: int | None = None) -> bool:
        """Whether the timed runs' sampled outputs of `variant` wait in host memory: a lean
        plan's, unless the device has room for them beside the pool brought back and the calls
        (`memplan.samples_fit`, from the memory free now). With `samples`, whether that many
        outputs kept beside the calls wait there, on any plan (on the device only)."""
        from gate import memplan  # noqa: PLC0415

        plan = self.set_plans.get(variant)
        if samples is not None:
            if self.device != "cuda":
                return False
        elif plan is None or not plan.lean:
            return False
        if os.environ.get("KLINEAGE_GATE_SAMPLES") == "host":
            return True
        free = self._free_bytes() - self._others_planned()
        return not memplan.samples_fit(free, self.out_bytes.get(variant, 0),
                                       REFILL_SAMPLE if samples is None else samples)

    def send_kernel_ms(self, variant: str, calls: int) -> None:
        """GPU milliseconds per call of each of the candidate's own kernels in the timed run
        just recorded (by function name): where a multi-kernel candidate spends its time. The
        verdict reports them; they judge nothing (the allowed fills and copies, the gate's L2
        flush and refills among them, are left out)."""
        from gate import foreign  # noqa: PLC0415

        own = self.own_kernel_names()
        own_base = {foreign.base_name(n) for n in own}
        per_kernel: dict[str, float] = {}
        for name, ns in self.kernels.time_ns.items():
            base = foreign.base_name(name)
            if name in own or base in own_base:
                per_kernel[base] = per_kernel.get(base, 0.0) + ns / 1e6 / calls
        if per_kernel:
            self.chan.send("kernel_ms", variant, per_kernel)

    def _snapshot(self, outputs: Any, host: bool = False) -> Any:
        """A copy of a call's outputs (tensors cloned on their device, stream-ordered after
        the call; with `host`, copied to host memory), for checking once the timed run is over."""
        if odd_output(outputs, self.cap.tensor_type) is not None:
            return "an output of a class of its own"  # compared as no tensor: a wrong output
        clone = self.cap.clone
        if host:
            from gate import hoststage  # noqa: PLC0415

            cap = self.cap
            clone = lambda t: cap.clone(t) if t.device.type == "cpu" else hoststage.to_host(t)  # noqa: E731
        if isinstance(outputs, (tuple, list)):
            return tuple(clone(t) if type(t) is self.cap.tensor_type else t for t in outputs)
        return clone(outputs) if type(outputs) is self.cap.tensor_type else outputs

    def reverify(self) -> None:
        """Device tier: one more fresh-input check, always (the parent flags >10x speedups)."""
        for variant in self.shapes:
            original = self.original((variant, PHASE_REVERIFY, self.job.reverify_seed))
            inputs = self.clone_inputs(original)
            res = self.call(inputs, "run")
            self.check_call(res, inputs, original, "timing", f"{variant}/re-verification")
            self.check_same_kernels(variant, res["launched"], FailureKind.FALLBACK, "timing",
                                    f"{variant}/re-verification")
            self.send_out(variant, PHASE_REVERIFY, self.job.reverify_seed, res,
                          ((variant, PHASE_REVERIFY, self.job.reverify_seed), original))
        self.check_kernels("timing", "re-verification calls")
        if not self.kernels.available and self.kernels.reason:
            self.chan.send("flag", f"GPU kernels not attributed: the profiler did not start "
                                   f"({self.kernels.reason[:200]})")


_PLAIN_VALUES = (bool, int, float, type(None))
_TYPE_NAME = type.__dict__["__name__"].__get__  # a class's own name: no metaclass of its runs
_TYPE_MRO = type.__dict__["__mro__"].__get__


def odd_output(out: Any, tensor_type: type) -> str | None:
    """Why what run returned is not plain, or None where it is: a torch tensor of the plain
    class, a Python bool / int / float or None, alone or in a tuple or list of exactly those
    classes. Read through `type()` alone, so that no code of the candidate's runs: a tuple of
    a class of its own (an `__iter__` run when the gate reads the outputs, after the op trace
    and, in the sealed call, after the real values are restored), a number of a class of its
    own (unpickled by the parent), an object whose `__class__` is a property (`isinstance`
    reads it). A tensor subclass is named as one."""
    def odd(value: Any, where: str) -> str | None:
        kind = type(value)
        if kind is tensor_type or kind in _PLAIN_VALUES:
            return None
        name = _TYPE_NAME(kind)
        if tensor_type in _TYPE_MRO(kind):
            return f"{where} is a {name}, a tensor subclass (lazy or self-modifying)"
        return f"{where} is a {name}, not a plain tensor or number"

    kind = type(out)
    if kind is tuple or kind is list:
        for i, item in enumerate(out):  # a plain tuple or list: no candidate code iterates
            found = odd(item, f"output {i}")
            if found is not None:
                return found
        return None
    if kind is not tensor_type and kind not in _PLAIN_VALUES and \
            (tuple in _TYPE_MRO(kind) or list in _TYPE_MRO(kind)):
        return f"the outputs are a {_TYPE_NAME(kind)}, not a plain tuple or list"
    return odd(out, "output 0")


def _integers(inputs: tuple[Any, ...], cap: Any) -> tuple[Any, ...]:
    """What of an input set is not float values: its scalars other than floats, each float
    (or complex) tensor's dtype and shape, and each integer or bool tensor's dtype, shape and
    a digest of its values. Sets of a case whose integer tensors are drawn anew (indices) are
    of different integers; a case's fixed ones (a grouped product's row offsets) make the
    sealed and knockout calls comparable with the correctness calls as floats alone do."""
    out: list[Any] = []
    for value in inputs:
        if type(value) is cap.tensor_type:
            if cap.is_floating_point(value) or cap.is_complex(value):
                out.append((str(value.dtype), tuple(value.shape)))
                continue
            import hashlib  # noqa: PLC0415

            flat = cap.view(cap.contiguous(cap.cpu(value)), -1)
            raw = cap.numpy(cap.view(flat, sys.modules["torch"].uint8)).tobytes()
            digest = hashlib.blake2b(raw, digest_size=16).hexdigest()
            out.append((str(value.dtype), tuple(value.shape), digest))
        elif isinstance(value, float):
            out.append(float)
        elif isinstance(value, (bool, int, str)) or value is None:
            out.append(value)
        else:
            out.append(type(value).__name__)
    return tuple(out)


def _launches_text(signature: tuple[Any, ...], shown: int = 4) -> str:
    """A call's launches in a reason: the first few kernels with what names them."""
    text = "; ".join(f"{name} {detail}" if detail else name for name, detail in signature[:shown])
    more = f"; ... {len(signature) - shown} more" if len(signature) > shown else ""
    return (text + more)[:300] or "none"


def _draw_seed(key: tuple[str, str, int]) -> int:
    """The seed an input set is drawn with: the job's, except for the sets no call before
    their own may have seen, the sealed set's and the configuration set's, drawn with a secret
    one (the job's seed names the set in messages alone), so that candidate code reading the
    job cannot draw them and compute their answers ahead. The worker keeps the sealed set's
    nowhere, the configuration set's with its recipe (`_Runner.draw_seeds`: it is drawn again
    where used, and is no more secret than the set itself, which is in the clear in the
    worker until its calls)."""
    if key[1] not in (PHASE_SEALED, PHASE_CONFIG):
        return key[2]
    import secrets  # noqa: PLC0415

    return secrets.randbelow((1 << 31) - 1) + 1


def _settings(torch: Any) -> tuple[Any, ...]:
    """torch's settings a reference computes under that candidate code may change: TF32 in
    matmuls and convolutions (the float32 matmul precision sets the first), cuDNN's
    deterministic and benchmark choices."""
    return (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
            torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark)


def _set_settings(torch: Any, settings: tuple[Any, ...]) -> None:
    (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
     torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark) = settings


@contextlib.contextmanager
def _under(torch: Any, settings: tuple[Any, ...] | None) -> Any:
    """torch's settings of `_settings` as `settings` (None: as they are) inside, restored after."""
    if settings is None:
        yield
        return
    saved = _settings(torch)
    _set_settings(torch, settings)
    try:
        yield
    finally:
        _set_settings(torch, saved)


def _forget_seeds(torch: Any) -> None:
    """Reseed the process's global generators from the system's entropy: a case whose
    make_inputs seeds them leaves the last seed drawn with (`torch.initial_seed()`) and the
    generators' states behind, from which candidate code could draw a set again."""
    import random  # noqa: PLC0415

    torch.seed()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.seed_all()
    random.seed()
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()


def _held_mode(tier: str, own_compare: bool) -> bool:
    """Whether outputs are compared in the worker against held references
    (`gate.heldcompare`): by default on the device tier (the comparison runs on the GPU and
    only figures travel; the sets a run keeps are sized so that the held references fit beside
    them, `gate.memplan`), elsewhere with `KLINEAGE_GATE_COMPARE=worker`;
    `KLINEAGE_GATE_COMPARE=parent` sends whole outputs to the parent on every tier. Never for a
    case that compares with its own function (which gets the outputs whole)."""
    choice = os.environ.get("KLINEAGE_GATE_COMPARE", "")
    if own_compare or choice == "parent":
        return False
    return choice == "worker" or tier == "device"


# Fields of a `triton.Config` that only the compiler reads: an interpreted kernel runs alike
# under any values of them (its constexprs are the config's kwargs).
COMPILER_ONLY_CONFIG_FIELDS = frozenset({"num_warps", "num_stages", "num_ctas", "maxnreg"})


def _interpreted_alike(config: Any) -> Any:
    """A key equal for two autotune configurations exactly when the interpreter runs them
    alike: every field but `COMPILER_ONLY_CONFIG_FIELDS`, the kwargs by type and value, any
    other object (a pre-hook) by identity. None (never alike) for a configuration without
    plain fields."""
    fields = getattr(config, "__dict__", None)
    if not isinstance(fields, dict):
        return None

    def value_key(value: Any) -> Any:
        if value is None or isinstance(value, (bool, int, float, str)):
            return (type(value).__qualname__, repr(value))
        return ("object", id(value))

    key = []
    for name, value in sorted(fields.items()):
        if name in COMPILER_ONLY_CONFIG_FIELDS:
            continue
        if name == "kwargs" and isinstance(value, dict):
            key.append((name, tuple(sorted((str(k), value_key(v)) for k, v in value.items()))))
        else:
            key.append((name, value_key(value)))
    return (type(config), tuple(key))


def _does_not_fit(exc: BaseException) -> bool:
    """The compile errors Triton's autotuner catches and times as infinitely slow: a
    configuration that raises one is never the one it picks."""
    names = {"OutOfResources", "CompileTimeAssertionFailure", "PTXASError"}
    return any(type(e).__name__ in names for e in exception_chain(exc))


def _run(chan: Channel, job: Job) -> None:
    import time

    start = time.perf_counter()
    runner = _Runner(chan, job)
    lock_file = getattr(runner.lock, "path", None)
    chan.send("ready", {"device": runner.device, "pid": os.getpid(),
                        "gpu_lock": str(lock_file) if lock_file else None})
    phases = [runner.references, runner.load_candidate, runner.correctness, runner.configs,
              runner.knockout, runner.sealed]
    phases += [runner.timing, runner.reverify] if runner.device == "cuda" else [runner.repeat]
    chan.send("mark", "start-up", time.perf_counter() - start)
    for name, seconds in runner.startup:
        chan.send("mark", name, seconds)
    for phase in phases:
        t0 = time.perf_counter()
        phase()
        for name, seconds in runner.parts:
            chan.send("mark", name, seconds)
        runner.parts.clear()
        chan.send("mark", phase.__name__, time.perf_counter() - t0)
    if runner.tuning_s:
        chan.send("mark", "autotune timing", runner.tuning_s)
    if runner.kernels.seconds:
        chan.send("mark", "kernel log", runner.kernels.seconds)
    if runner.lock.waited_s:
        chan.send("mark", "gpu lock wait", runner.lock.waited_s)
    if chan.quiet_s:
        chan.send("mark", "parent compare wait", chan.quiet_s)
    runner.release_planned()
