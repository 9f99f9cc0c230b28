"""`gate.check`: parse, then run a candidate at a tier in a fresh worker, with a verdict cache."""
from __future__ import annotations

import ast
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, replace
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

from gate import extbuild, foreign, gpulock
from gate.cache import VerdictCache, cache_key
from gate.cases import Case, load_case
from gate.hostforms import builds_extension
from gate.runner import supervise
from gate.verdict import FailureKind, Tier, Verdict, reject
from gate.worker import Job
from kir.errors import BadInputError

GATE_VERSION = "10"  # bump when a change to the gate could change a verdict
DEFAULT_TIMEOUT_S = {Tier.STATIC: 300.0, Tier.INTERPRET: 300.0, Tier.DEVICE: 300.0,
                     Tier.EMULATE: 300.0}
# Device-tier gates may run side by side: each worker takes its GPU's readers-writer lock
# (`gate.gpulock`: exclusive while it times). With that lock switched off
# (KLINEAGE_GPU_LOCK=off), one device-tier run at a time per process.
_DEVICE_LOCK = threading.Lock()
_UNCACHED = {FailureKind.TIMEOUT, FailureKind.INTERNAL, FailureKind.UNSUPPORTED, FailureKind.CRASH,
             FailureKind.OUT_OF_MEMORY, FailureKind.GATE_FAULT}


def gpu_available() -> bool:
    """A CUDA GPU is visible (without importing torch unless the caller already did)."""
    if os.environ.get("KLINEAGE_GATE_NO_GPU") == "1":
        return False
    torch = sys.modules.get("torch")
    if torch is not None:
        return bool(torch.cuda.is_available())
    return any(Path(p).exists() for p in ("/dev/nvidia0", "/dev/nvidiactl")) and _gpu_name() != ""


@lru_cache(maxsize=1)
def _gpu_name() -> str:
    tool = shutil.which("nvidia-smi")
    if tool is None:
        return ""
    try:
        out = subprocess.run([tool, "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=20, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.strip().splitlines()[0] if out.strip() else ""


def resolve_tier(tier: Tier | str, language: str, gpu: bool | None = None) -> tuple[Tier, tuple[str, ...]]:
    """The concrete tier to run, and flags explaining a change (CUDA stops at static on a CPU).

    `auto` is `device` where `gpu` (default: `gpu_available()`, this machine) says a GPU is
    present; an executor passes its cluster's answer instead."""
    try:
        t = Tier(tier)
    except ValueError:
        raise BadInputError(f"unknown tier '{tier}' (static, interpret, emulate, device, auto)") from None
    if t is Tier.EMULATE and language != "cuda":
        return Tier.INTERPRET, ("emulate runs CUDA kernels: Triton kernels run in Triton's interpreter",)
    if t is Tier.AUTO:
        t = Tier.DEVICE if (gpu_available() if gpu is None else gpu) else Tier.INTERPRET
    if t is Tier.INTERPRET and language == "cuda":
        return Tier.STATIC, ("cuda kernels have no interpreter: gated at the static tier (the emulate "
                             "tier runs them on the CPU)",)
    return t, ()


@lru_cache(maxsize=1)
def _toolchain() -> str:
    versions = []
    for dist in ("torch", "triton", "cuda-bindings", "cuda-python", "nvidia-cuda-nvrtc", "numpy"):
        try:
            versions.append(f"{dist}={metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            versions.append(f"{dist}=-")
    return ";".join(versions + [f"python={sys.version_info[:3]}"])


def _language(language: Any) -> str:
    value = getattr(language, "value", language)
    if value not in ("triton", "cuda"):
        raise BadInputError(f"unknown kernel language '{language}' (triton or cuda)")
    return str(value)


def _parse(source: str, language: str, path: Path | None, tier: Tier) -> Verdict | None:
    """None when the source parses; a rejecting verdict otherwise."""
    try:
        import kir
        from kir.errors import ParseError
    except ImportError:  # the foundation not installed: fall back to Python's own parser
        kir = None  # type: ignore[assignment]
    if kir is not None and hasattr(kir, "parse"):
        try:
            kir.parse(source, language, path)
        except ParseError as exc:
            return reject(tier, "parse", FailureKind.PARSE_ERROR, str(exc))
        return None
    if language == "triton":
        try:
            ast.parse(source)
        except SyntaxError as exc:
            return reject(tier, "parse", FailureKind.PARSE_ERROR, f"{exc.msg} (line {exc.lineno})")
    return None


def _foreign_code(python_source: str, tier: Tier) -> Verdict | None:
    """A rejecting verdict when the candidate's Python text imports another array / GPU library
    or loads a native library (`gate.foreign.scan_source`), naming the lines."""
    findings = foreign.scan_source(python_source)
    if not findings:
        return None
    return reject(tier, "anti_cheat", FailureKind.FOREIGN_LIBRARY,
                  f"{foreign.describe_findings(findings)}: the answer must come from the candidate's "
                  f"own kernels, and the gate cannot attribute another library's")


def _host_text(host: str | Path | None, path: Path | None) -> tuple[str, str]:
    """(host module text, its stem) of a CUDA candidate."""
    if host is None:
        if path is None:
            raise BadInputError("a CUDA candidate needs its host module: pass host= or path=")
        host = path.with_suffix(".py")
    if isinstance(host, Path) or (isinstance(host, str) and "\n" not in host and host.endswith(".py")):
        p = Path(host)
        if not p.is_file():
            raise BadInputError(f"CUDA host module {p} not found (a .py beside the .cu)")
        return p.read_text(), p.stem
    return str(host), path.stem if path is not None else "candidate"


def hosted(host_text: str, source: str) -> str:
    """The CUDA host module to run for `source`: `host_text` with `source` written into the
    CUDA source string it holds (`kir.embedded`: a `load_inline` / CuPy / NVRTC host that keeps
    its source in the module), else `host_text` as it is (a host that reads the `.cu` beside
    it), its launches edited as the source's host-launch lines ask (`kir.hostlaunch`: dynamic
    shared memory, a grown block, tensor maps a rewrite needs). Raises `BadInputError` for a host
    whose source string cannot be told (several, or an f-string) or whose launches cannot be
    edited so."""
    from kir import embedded, hostlaunch  # noqa: PLC0415

    found = embedded.find(host_text, where="CUDA host module")
    text = found.splice(source) if found is not None else host_text
    try:
        return hostlaunch.apply(text, source)
    except hostlaunch.HostLaunchError as exc:
        raise BadInputError(f"CUDA host module: {exc}") from None


def check(source: str, language: Any, case: Case | str | Path, tier: Tier | str = Tier.AUTO, *,
          path: str | Path | None = None, host: str | Path | None = None,
          timeout: float | None = None, cache: bool = True) -> Verdict:
    """Gate kernel source text against a case at a tier; see docs/INTERFACES.md ("gate").

    `path` (where the text came from) names the scratch module and, for CUDA, locates the host
    module (`path.with_suffix(".py")`) unless `host` (its text or path) is given. The same
    candidate at the same tier on the same platform and toolchain gets the cached verdict
    (`cached=True`); timeouts, crashes and gate faults are never cached. Raises
    `BadInputError` for an unknown case, tier or language and a missing host module.
    """
    job = prepare(source, language, case, tier, path=path, host=host, timeout=timeout)
    key = job.key(platform_of(job.tier))
    store = VerdictCache() if cache else None
    if store is not None and (hit := store.get(key)) is not None:
        return hit
    verdict = evaluate(job)
    if store is not None:
        store.record(key, verdict, cacheable(verdict))
    return verdict


def prebuild(source: str, language: Any, case: Case | str | Path, tier: Tier | str = Tier.AUTO, *,
             path: str | Path | None = None, host: str | Path | None = None) -> bool:
    """Start building, on a spare core, what the gate of this candidate (same arguments as
    `check`) would build first when it runs: the extension of a CUDA host that calls
    `load_inline`, in the folder its worker will build in (`gate.extbuild`). The gate itself is
    unchanged: its worker waits for a build ahead of its folder to end, then builds (torch and
    ninja recompile whatever does not match its own source) and runs the candidate as always.
    Returns whether a build was started: never at a tier other than device, for another host,
    a candidate with a cached verdict, bad input, or where builds ahead are off or busy."""
    if not extbuild.enabled():
        return False
    try:
        job = prepare(source, language, case, tier, path=path, host=host)
    except BadInputError:
        return False
    if job.language != "cuda" or job.tier is not Tier.DEVICE or not builds_extension(job.host_text):
        return False
    if VerdictCache().get(job.key(platform_of(job.tier))) is not None:
        return False
    try:
        text = hosted(job.host_text, job.source)
    except BadInputError:
        return False
    env = extbuild.build_env(dict(os.environ), text, job.source)
    origin = str(job.src_path.parent) if job.src_path is not None else None
    return extbuild.start(text, job.stem, origin, env, source=job.source)


@dataclass(frozen=True, slots=True)
class Prepared:
    """One gate job made concrete by the caller (case loaded, tier resolved, host module read):
    everything a run needs except the machine it runs on. `evaluate` runs it; `key` is its
    verdict-cache key on a platform (`platform_of` on the machine that runs it)."""

    source: str
    language: str
    case: Case
    tier: Tier
    flags: tuple[str, ...]
    stem: str
    host_text: str
    src_path: Path | None
    timeout: float

    def key(self, platform: tuple[str, str]) -> str:
        toolchain, device = platform
        # A view's variants join the key only when set: the keys of plain cases stay as they were.
        view = [",".join(self.case.variants)] if self.case.variants else []
        # Where the text came from reaches the run twice: the scratch module is named by its
        # stem (the compiler writes that file name into the PTX, and ptxas rejects one that is
        # not ASCII), and its folder is on the module path (helpers beside the kernel). A verdict
        # reached under one path is not the verdict of the same text under another.
        origin = ["path", self.stem, str(self.src_path.parent)] if self.src_path is not None else []
        return cache_key([GATE_VERSION, self.source, self.host_text, self.language, self.case.digest(),
                          self.tier.value, self.case.platform, toolchain, device, *view, *origin,
                          *_emulator(self.tier)])


def _emulator(tier: Tier) -> list[str]:
    """The emulator's own hash at the emulate tier (its verdicts follow its version); else []."""
    if tier is not Tier.EMULATE:
        return []
    from gate.cudacpu.library import emulator_digest  # noqa: PLC0415

    return ["cudacpu", emulator_digest()]


def platform_of(tier: Tier) -> tuple[str, str]:
    """(toolchain, device) of this machine as the verdict cache keys them: the device is the
    GPU's name at the device tier, "cpu" at the others."""
    return _toolchain(), _gpu_name() if tier is Tier.DEVICE else "cpu"


def prepare(source: str, language: Any, case: Case | str | Path, tier: Tier | str = Tier.AUTO, *,
            path: str | Path | None = None, host: str | Path | None = None,
            timeout: float | None = None, gpu: bool | None = None) -> Prepared:
    """The caller's half of `check` (same arguments; `gpu` as in `resolve_tier`). Raises
    `BadInputError` like `check`."""
    lang = _language(language)
    the_case = case if isinstance(case, Case) else load_case(case)
    run_tier, flags = resolve_tier(tier, lang, gpu)
    if run_tier is Tier.INTERPRET:
        dict(the_case.small_shapes)  # a problem file sizes itself here; one it cannot: BadInputError
    src_path = Path(path).resolve() if path is not None else None
    host_text, stem = _host_text(host, src_path) if lang == "cuda" else ("", src_path.stem if src_path else "candidate")
    if lang == "cuda":
        hosted(host_text, source)  # a host whose source string cannot be told: bad input now
    return Prepared(source, lang, the_case, run_tier, flags, scratch_stem(stem), host_text, src_path,
                    timeout if timeout is not None else DEFAULT_TIMEOUT_S[run_tier])


def scratch_stem(stem: str) -> str:
    """The name the scratch copy of a kernel gets: its own stem where that is ASCII, else the
    stem with every non-ASCII character spelled as its code point. The compilers write the
    file name into what they emit (PTX `.file`), and ptxas rejects a name that is not ASCII:
    a kernel's verdict does not depend on the script its file name is written in."""
    if stem.isascii():
        return stem
    return "".join(c if c.isascii() else f"_u{ord(c):x}_" for c in stem)


def evaluate(job: Prepared) -> Verdict:
    """Run a prepared job on this machine (parse, then a fresh worker); no cache."""
    t0 = time.perf_counter()
    verdict = _parse(job.source, job.language, job.src_path, job.tier) or _foreign_code(
        job.host_text if job.language == "cuda" else job.source, job.tier)
    if verdict is None:
        parsed = time.perf_counter() - t0
        verdict = _run(job.source, job.language, job.case, job.tier, job.stem, job.host_text,
                       job.src_path, job.timeout)
        verdict = replace(verdict, phases=(("parse (parent)", parsed), *verdict.phases))
    if job.flags:
        verdict = replace(verdict, flags=verdict.flags + job.flags)
    return verdict


def cacheable(verdict: Verdict) -> bool:
    """Whether a verdict may be cached (timeouts, crashes and faults of the gate are not)."""
    return verdict.failure_kind not in _UNCACHED


def _run(source: str, lang: str, case: Case, tier: Tier, stem: str, host_text: str,
         src_path: Path | None, timeout: float) -> Verdict:
    scratch = Path(tempfile.mkdtemp(prefix="klineage-gate-")).resolve()
    try:
        if lang == "cuda":
            cu = scratch / f"{stem}.cu"
            cu.write_text(source)
            module = scratch / f"{stem}.py"
            module.write_text(hosted(host_text, source))
        else:
            cu = None
            module = scratch / f"{stem}.py"
            module.write_text(source)
        rng = random.SystemRandom()
        base = rng.randrange(1, 2**30)  # fresh seeds: nothing to memorize
        env = dict(os.environ)
        if lang == "cuda" and builds_extension(host_text):
            env = extbuild.build_env(env, module.read_text(), source)
            if tier is Tier.DEVICE:  # the build overlaps the worker's start-up and references
                extbuild.start(module.read_text(), stem,
                               str(src_path.parent) if src_path else None, env, own=True,
                               source=source)
        job = Job(tier=tier.value, language=lang, module_path=str(module),
                  cu_path=str(cu) if cu else None, scratch=str(scratch),
                  origin_dir=str(src_path.parent) if src_path else None,
                  case_path=str(case.path), seeds=(base, base + 1, base + 2),
                  extra_seed=base + 3, reverify_seed=base + 4, sealed_seed=base + 5,
                  config_seed=base + 6,
                  refill_seed=rng.randrange(2**30, 2**31), env=tuple(env.items()),
                  variants=case.variants)
        if tier is Tier.DEVICE and gpulock.lock_path("any") is None:
            with _DEVICE_LOCK:
                return supervise(job, case, tier, timeout)
        return supervise(job, case, tier, timeout)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def check_file(path: str | Path, case: Case | str | Path, tier: Tier | str = Tier.AUTO, *,
               timeout: float | None = None, cache: bool = True) -> Verdict:
    """Gate a kernel file: a Triton `.py`, or a CUDA kernel (`kir.embedded.cuda_unit`): a `.cu`
    with its host `.py` beside it, that host module itself, or a Python host module that holds
    its CUDA source as a string."""
    from kir import embedded  # noqa: PLC0415

    p = Path(path)
    if not p.is_file():
        raise BadInputError(f"{p}: no such kernel file")
    if p.suffix not in (".cu", ".py"):
        raise BadInputError(f"{p}: a kernel is a Triton .py or a CUDA .cu file")
    try:
        text = p.read_text()
    except UnicodeDecodeError:
        raise BadInputError(f"{p}: not UTF-8 text") from None
    unit = embedded.cuda_unit(p)
    if unit is not None:
        return check(unit.source, "cuda", case, tier, path=unit.source_path, host=unit.host_path,
                     timeout=timeout, cache=cache)
    return check(text, "triton", case, tier, path=p, timeout=timeout, cache=cache)


@dataclass(frozen=True, slots=True)
class CheckRequest:
    """One candidate for `check_many` (the arguments of `check`)."""

    source: str
    language: str
    case: Case | str
    tier: Tier | str = Tier.AUTO
    path: str | None = None
    host: str | None = None
    timeout: float | None = None
    cache: bool = True
