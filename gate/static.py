"""The static tier, inside the worker: compile for sm_90a on any machine and read the artifacts.

Host code sees the static target, whatever the machine (`gate.target`, `gate.hostview`): the
candidate is imported and its `run` called once per shape variant of the case (real shapes)
with the device queries it makes answered from the target's table and its inputs claiming to
be on the GPU (real values, kept on the host), so a persistent grid is sized by the target's
SM count and a branch on the device type takes its GPU path. A variant whose call fails that
way is called again with plain inputs on this machine's device (flagged).

Triton: the kernels' launch path is replaced by a recorder, so every launch yields the
kernel, its arguments and options; an autotuned kernel yields one launch per configuration.
Each distinct launch becomes `triton.compile(ASTSource(fn, signature, constexprs, attrs),
target=GPUTarget("cuda", 90, 32), options)`, the signature and divisibility attributes derived
the way Triton's JIT derives them. Compiles run in parallel in forked processes, one per core.

SASS opcode counts (nvdisasm) are added when `KLINEAGE_GATE_SASS=1` is set.

CUDA: the candidate `.cu` text (its device half: a `load_inline` source's C++ wrappers left
out and the template kernels they launch instantiated, `gate.hostforms.device_source`; a
stand-in specialization such as `__half` for `at::Half` that does not compile is flagged and
left out, `_device_compile`) is compiled with NVRTC for sm_90a (`experts.cudahost`),
with the `-D` defines the host module's optional `static_defines(shape) -> dict` gives for each
variant. Then `run` is traced with its launches recorded instead of made, whichever way the
host makes them (`experts.cudahost`, `cuda.bindings.driver`, CuPy's `RawKernel` /
`RawModule`, a `load_inline` extension: `gate.hostview.host_libraries`): a kernel's dynamic
shared memory is what its launches pass, else what host code opted it in to, else 0 where its
PTX declares no `extern` shared array, else unknown (`CompileFacts`).
"""
from __future__ import annotations

import contextlib
import inspect
import io
import json
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from gate import facts, hostview
from gate.channel import Channel, Job, describe, import_candidate
from gate.target import STATIC_TARGET
from gate.verdict import CompileFacts, FailureKind

TARGET = STATIC_TARGET
TARGET_ARCH = TARGET.arch
TARGET_NAME = TARGET.name
_OPTION_KEYS = ("num_warps", "num_stages", "num_ctas", "maxnreg", "enable_fp_fusion",
                "launch_cooperative_grid", "launch_pdl", "max_num_imprecise_acc_default")


@dataclass(frozen=True, slots=True)
class _TritonCompile:
    fn: Any
    variant: str
    signature: Mapping[str, str]
    constexprs: Mapping[str, Any]
    attrs: Mapping[tuple[int, ...], Any]
    options: Mapping[str, Any]

    def key(self) -> str:
        return repr((id(self.fn), sorted(self.signature.items()), sorted(self.constexprs.items(), key=str),
                     sorted(self.attrs.items(), key=str), sorted(self.options.items())))

    def config(self) -> dict[str, Any]:
        cfg: dict[str, Any] = {"variant": self.variant}
        cfg.update({k: v for k, v in self.constexprs.items() if isinstance(v, (int, float, bool, str))})
        cfg.update(self.options)
        return cfg


# Filled before the compile pool forks; children read it instead of unpickling JIT functions.
_PENDING: list[_TritonCompile] = []


def run_static(chan: Channel, job: Job) -> None:
    chan.send("ready", {"device": "static", "pid": os.getpid()})
    if job.language == "cuda":
        compiles = _cuda_facts(chan, job)
    else:
        compiles = _triton_facts(chan, job)
    chan.send("facts", [c.to_json() for c in compiles])


# ---------------------------------------------------------------------------------------------
# Triton

def _specialize(value: Any, backend: Any, specialize: bool, align: bool) -> tuple[str, Any]:
    """(signature type, attribute key) of one runtime argument, as Triton's JIT computes it."""
    try:
        from triton._C.libtriton import native_specialize_impl
        from triton.backends.compiler import BaseBackend

        return native_specialize_impl(BaseBackend, value, False, specialize, align)
    except ImportError:
        pass
    from triton.runtime.jit import mangle_type  # older Triton: Python specialization

    ty = mangle_type(value, specialize)
    key = None
    if hasattr(value, "data_ptr"):
        key = "D" if align and value.data_ptr() % 16 == 0 else ""
    elif isinstance(value, int) and not isinstance(value, bool) and specialize:
        key = "D" if value % 16 == 0 else ""
    return ty, key


def _launch_to_compile(jit_fn: Any, variant: str, args: tuple[Any, ...], kwargs: dict[str, Any],
                       backend: Any) -> _TritonCompile:
    params = jit_fn.params
    names = [p.name for p in params]
    options = {k: kwargs.pop(k) for k in list(kwargs) if k not in names}
    bound = inspect.signature(jit_fn.fn).bind(*args, **kwargs)
    bound.apply_defaults()
    signature: dict[str, str] = {}
    constexprs: dict[str, Any] = {}
    attrs: dict[tuple[int, ...], Any] = {}
    for i, p in enumerate(params):
        value = bound.arguments[p.name]
        if p.is_constexpr:
            signature[p.name] = "constexpr"
            constexprs[p.name] = value
            continue
        ty, key = _specialize(value, backend, not p.do_not_specialize,
                              not p.do_not_specialize_on_alignment)
        if ty == "constexpr":  # e.g. an int equal to 1, or None
            signature[p.name] = "constexpr"
            constexprs[p.name] = key
            continue
        annotation = getattr(p, "annotation_type", "")
        signature[p.name] = annotation or ty
        if isinstance(key, str) and key:
            attrs[(i,)] = backend.parse_attr(key)
    keep = {k: v for k, v in options.items() if k in _OPTION_KEYS and v is not None}
    return _TritonCompile(jit_fn, variant, MappingProxyType(signature), MappingProxyType(constexprs),
                          MappingProxyType(attrs), MappingProxyType(keep))


def _record_launches(chan: Channel, job: Job) -> tuple[list[_TritonCompile], list[list[str]]]:
    """The distinct compiles `run` asks for, and the launches they stand for: one group of
    compile keys per launch (an autotuned launch: one key per configuration it would try)."""
    import torch
    import triton.runtime.autotuner as autotuner
    import triton.runtime.jit as jit
    from triton.backends.compiler import GPUTarget
    from triton.compiler import make_backend

    from gate.cases import import_case_module

    backend = make_backend(GPUTarget("cuda", TARGET_ARCH, TARGET.warp_size))
    scratch = str(Path(job.scratch).resolve())
    pending: list[_TritonCompile] = []
    variant = [""]
    # the launches one autotuned call stands for (its configurations): one group each
    group: list[int | None] = [None]
    groups: list[list[str]] = []

    def owns(fn: Any) -> bool:
        code = getattr(getattr(fn, "fn", None), "__code__", None)
        return code is not None and str(Path(code.co_filename).resolve()).startswith(scratch)

    def jit_run(self: Any, *args: Any, grid: Any = None, warmup: bool = False, **kwargs: Any) -> None:
        # Specialize now: a config's pre_hook may have just reshaped a tensor descriptor that
        # the next config's pre_hook reshapes again.
        if owns(self):
            made = _launch_to_compile(self, variant[0], args, dict(kwargs), backend)
            pending.append(made)
            if group[0] is None:
                groups.append([made.key()])
            else:
                groups[group[0]].append(made.key())
        return None

    def autotune_run(self: Any, *args: Any, **kwargs: Any) -> None:
        # One recorded launch per configuration the autotuner would try (after its pruning),
        # through any heuristics wrapped inside, each after the config's pre_hook.
        self.nargs = dict(zip(self.arg_names, args))
        try:
            configs = self.prune_configs(kwargs) if len(self.configs) > 1 else self.configs
        except Exception:  # a pruning function that needs the GPU: compile them all
            configs = self.configs
        outer = group[0]
        if outer is None:  # an autotuner inside another records into the outer one's group
            groups.append([])
            group[0] = len(groups) - 1
        try:
            for config in configs:
                if config.pre_hook is not None:
                    config.pre_hook({**self.nargs, **kwargs, **config.all_kwargs()})
                self.fn.run(*args, **kwargs, **config.all_kwargs())
        finally:
            group[0] = outer
        self.nargs = None
        return None

    jit.JITFunction.run = jit_run  # type: ignore[method-assign]
    autotuner.Autotuner.run = autotune_run  # type: ignore[method-assign]
    machine = "cuda" if torch.cuda.is_available() else "cpu"

    def begin(name: str) -> None:
        variant[0] = name

    with hostview.target_device(TARGET):
        module = import_candidate(chan, job, stage="compile")
        case = import_case_module(Path(job.case_path))
        failures = _trace_run(chan, module, case, begin, lambda: len(pending), machine)
    for failure in failures:
        if not failure.recorded:
            chan.reject(FailureKind.COMPILE_ERROR, "compile",
                        f"could not trace `run` for {failure.variant} to find its kernels' "
                        f"arguments: {failure.reason}")
    if not pending:
        chan.reject(FailureKind.NO_LAUNCH, "compile", "`run` launched none of the module's kernels")
    unique: dict[str, _TritonCompile] = {}
    for c in pending:
        unique.setdefault(c.key(), c)
    return list(unique.values()), [g for g in groups if g]


@dataclass(frozen=True, slots=True)
class _TraceFailure:
    variant: str
    reason: str
    recorded: bool  # whether the call recorded anything before it failed


def _trace_run(chan: Channel, module: Any, case: Any, begin: Callable[[str], None],
               recorded: Callable[[], int], machine: str) -> list[_TraceFailure]:
    """Call `run` once per shape variant of `case`, as on the target (inputs on the target GPU,
    `gate.hostview`); `begin(variant)` before each, `recorded()` counts what the recorders hold.

    A variant whose call fails before recording anything is called again with plain inputs on
    `machine` ("cuda" or "cpu"; flagged when that records something). Returns the variants whose
    last call failed, and why.
    """
    failures = []
    for name, shape in case.SHAPES.items():
        begin(name)
        before = recorded()
        error = _call_run(module, case, shape, None)
        if error is not None and recorded() == before:
            retry = _call_run(module, case, shape, machine)
            if recorded() > before:
                chan.send("flag", f"static: `run` for {name} was traced with {machine} inputs (its "
                                  f"device queries may show {machine} values): with inputs on the "
                                  f"target GPU it failed: {describe(error, 300)}")
                error = retry
        if error is not None:
            failures.append(_TraceFailure(name, describe(error), recorded() > before))
    return failures


def _call_run(module: Any, case: Any, shape: Mapping[str, Any], device: str | None
              ) -> Exception | None:
    """`module.run` on the case's inputs for `shape`: on the target GPU (`device` None), else
    on `device`; the exception it raised, if any. Nothing launches either way."""
    import torch

    try:
        inputs = case.make_inputs(dict(shape), 0, device or "cpu")
        with torch.no_grad():
            if device is None:
                with hostview.target_tensors() as put:
                    module.run(*put(inputs))
            else:
                module.run(*inputs)
    except Exception as exc:
        return exc
    return None


def _compile_one(index: int) -> dict[str, Any] | str:
    """Compile `_PENDING[index]` (in a forked child); CompileFacts as JSON, or an error text."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    c = _PENDING[index]
    t0 = time.perf_counter()
    log = io.StringIO()
    try:
        with contextlib.redirect_stdout(log):
            src = ASTSource(c.fn, dict(c.signature), dict(c.constexprs), dict(c.attrs))
            kernel = triton.compile(src, target=GPUTarget("cuda", TARGET_ARCH, TARGET.warp_size),
                                    options=dict(c.options))
    except Exception as exc:
        return f"{c.fn.__name__} {c.config()}: {describe(exc, 1500)}"
    spent = time.perf_counter() - t0
    asm = kernel.asm
    name = kernel.metadata.name
    cub = facts.cubin_kernels(asm["cubin"]).get(name) if "cubin" in asm else None
    spills = _ptxas_spills(log.getvalue(), name)
    return CompileFacts(
        kernel=name, config=c.config(),
        registers=cub.registers if cub else None,
        # Triton's launcher passes `metadata.shared` as every launch's dynamic shared memory.
        static_shared_bytes=cub.static_shared_bytes if cub else 0,
        dynamic_shared_bytes=int(getattr(kernel.metadata, "shared", 0) or 0),
        dynamic_shared_source="triton",
        local_bytes=(cub.frame_bytes or 0) if cub else 0,
        spill_stores=spills[0] if spills else None, spill_loads=spills[1] if spills else None,
        instructions=facts.ptx_instruction_counts(asm.get("ptx", "")),
        sass=facts.sass_counts(asm["cubin"]) if "cubin" in asm and _want_sass() else None,
        compile_s=spent,
    ).to_json()


def _prewarm(compiles: list[_TritonCompile]) -> list[str]:
    """Compute once, before forking, the hashes every compile needs (Triton hashes its whole
    installation for its cache key): otherwise each child pays for it again. The kernels whose
    own hash the JIT refuses (a reference to a Python function that is not Triton's, which the
    JIT refuses to launch though `triton.compile` may accept it), each with Triton's words."""
    for where in ("triton.runtime.cache", "triton.compiler.compiler"):
        try:
            module = __import__(where, fromlist=["triton_key"])
            module.triton_key()
            break
        except (ImportError, AttributeError):
            continue
    refused: list[str] = []
    for c in compiles:
        try:
            getattr(c.fn, "cache_key", None)
        except (RuntimeError, TypeError) as exc:  # DependenciesFinder's refusals
            refused.append(f"{c.fn.__name__}: {describe(exc, 600)}")
    return refused


def _fork_map(n: int, workers: int) -> list[dict[str, Any] | str]:
    """`_compile_one` over range(n) in `workers` forked children (round-robin), in order.

    Plain fork, not a multiprocessing pool: the worker may not have children of its own
    through multiprocessing, and the children need only what is already in memory.
    """
    chunks = [list(range(i, n, workers)) for i in range(workers)]
    running = []
    for chunk in chunks:
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:  # child: compile its share, write JSON, leave without cleanup handlers
            os.close(read_fd)
            try:
                data = json.dumps([_compile_one(i) for i in chunk]).encode()
            except BaseException as exc:
                data = json.dumps([f"compile process failed: {describe(exc)}"] * len(chunk)).encode()
            with os.fdopen(write_fd, "wb") as f:
                f.write(data)
            os._exit(0)
        os.close(write_fd)
        running.append((pid, read_fd, chunk))
    results: list[dict[str, Any] | str] = ["compile process died"] * n
    for pid, read_fd, chunk in running:
        with os.fdopen(read_fd, "rb") as f:
            data = f.read()
        _, status = os.waitpid(pid, 0)
        if data:
            for i, res in zip(chunk, json.loads(data)):
                results[i] = res
        else:
            for i in chunk:
                results[i] = f"compile process died (status {status})"
    return results


def _want_sass() -> bool:
    # Disassembly costs about a second per compile: opt in with KLINEAGE_GATE_SASS=1.
    return os.environ.get("KLINEAGE_GATE_SASS") == "1"


def _ptxas_spills(log: str, name: str) -> tuple[int, int] | None:
    from experts.cudahost import ptxas_resources

    res = ptxas_resources(log).get(name)
    if not res or "spill_stores" not in res:
        return None
    return res["spill_stores"], res["spill_loads"]


def _triton_facts(chan: Channel, job: Job) -> list[CompileFacts]:
    # Triton deletes ptxas' report unless asked to print it; the compile captures the print.
    os.environ.setdefault("TRITON_DUMP_PTXAS_LOG", "1")
    compiles, groups = _record_launches(chan, job)
    _PENDING[:] = compiles
    refused = _prewarm(compiles)
    if refused:
        chan.reject(FailureKind.COMPILE_ERROR, "compile",
                    f"Triton's JIT would not launch {refused[0]}")
    workers = max(1, min(len(compiles), os.cpu_count() or 1))
    if workers == 1:
        results = [_compile_one(i) for i in range(len(compiles))]
    else:
        results = _fork_map(len(compiles), workers)
    errors = [r for r in results if isinstance(r, str)]
    if errors:
        chan.reject(FailureKind.COMPILE_ERROR, "compile",
                    f"{len(errors)} of {len(results)} compiles for {TARGET_NAME} failed; first: {errors[0]}")
    out = [CompileFacts.from_json(r) for r in results if isinstance(r, dict)]
    _check_shared_memory(chan, dict(zip((c.key() for c in compiles), out)), groups)
    return out


def _check_shared_memory(chan: Channel, by_key: Mapping[str, CompileFacts],
                         groups: list[list[str]]) -> None:
    """A launch all of whose compiles need more shared memory per block than the target lets a
    kernel opt in to would not run there: rejected, as the device would. An autotuned launch
    with some such configurations is flagged (the device's autotuner skips them)."""
    limit = TARGET.shared_memory_per_block_optin
    flagged: set[str] = set()
    for keys in groups:
        facts_ = [by_key[k] for k in dict.fromkeys(keys) if k in by_key]
        over = [f for f in facts_ if f.shared_needed > limit]
        if not over:
            continue
        worst = max(over, key=lambda f: f.shared_needed)
        need = worst.shared_needed
        if len(over) == len(facts_):
            chan.reject(FailureKind.COMPILE_ERROR, "compile",
                        f"{worst.kernel} needs {need} bytes of shared memory per block in every "
                        f"configuration it launches with ({worst.config}); {TARGET_NAME} allows "
                        f"{limit}: it would not launch there")
        text = (f"static: {len(over)} of {len(facts_)} configurations of {worst.kernel} need more "
                f"shared memory than {TARGET_NAME} allows ({need} > {limit} bytes, "
                f"{worst.config}): the autotuner on the device skips them")
        if text not in flagged:
            flagged.add(text)
            chan.send("flag", text)


# ---------------------------------------------------------------------------------------------
# CUDA

def _cuda_facts(chan: Channel, job: Job) -> list[CompileFacts]:
    from experts import cudahost
    from gate import hostforms
    from gate.cases import import_case_module

    assert job.cu_path is not None
    source = Path(job.cu_path).read_text()
    options = hostforms.nvrtc_options(source)
    seen = hostview.CudaLaunches()
    with contextlib.ExitStack() as stack:
        stack.enter_context(hostview.target_device(TARGET))
        stack.enter_context(hostview.host_libraries(seen, Path(job.module_path).read_text(),
                                                    TARGET, source))
        stack.enter_context(cudahost.cuda_headers_for_nvrtc())  # a host's own NVRTC calls
        host = import_candidate(chan, job, stage="compile")
        case = import_case_module(Path(job.case_path))
        compiles = _cuda_compiles(chan, job, host, case, source, options)
        launches, failures = _trace_cuda_launches(chan, host, case, seen)
    return _cuda_compile_facts(chan, compiles, launches, failures)


def _cuda_compiles(chan: Channel, job: Job, host: Any, case: Any, source: str,
                   options: tuple[str, ...] = ()) -> list[tuple]:
    """NVRTC compiles of the device half of `source` (`_device_compile`, with `options`) for
    the target, one per distinct set of `static_defines`: (first variant, defines, variants,
    Compiled, seconds)."""
    from experts import cudahost

    assert job.cu_path is not None
    defines_of = getattr(host, "static_defines", None)
    groups: dict[str, tuple[dict[str, Any], list[str]]] = {}  # first variant -> (defines, all)
    for variant, shape in case.SHAPES.items():
        defines = dict(defines_of(dict(shape))) if callable(defines_of) else {}
        first = next((v for v, (d, _) in groups.items() if d == defines), None)
        if first is None:
            groups[variant] = (defines, [variant])
        else:
            groups[first][1].append(variant)
    compiled_groups = []
    for variant, (defines, members) in groups.items():
        t0 = time.perf_counter()
        try:
            compiled = _device_compile(chan, source, Path(job.cu_path).name, defines, options)
        except cudahost.CompileError as exc:
            chan.reject(FailureKind.COMPILE_ERROR, "compile",
                        f"NVRTC ({TARGET_NAME}): {describe(exc, 2000)}")
        compiled_groups.append((variant, defines, members, compiled, time.perf_counter() - t0))
    return compiled_groups


def _device_compile(chan: Channel, source: str, name: str, defines: Mapping[str, Any],
                    options: tuple[str, ...]) -> Any:
    """NVRTC's compile of the device half of `source` (`gate.hostforms.device_source`), with
    the template kernels its C++ wrappers launch instantiated. Where that fails and some of
    those specializations are stand-ins (`Instance.stand_in`: `__half` for torch's `at::Half`,
    an integer type of a dispatch macro), the source is compiled again without them and each is
    kept only if it compiles; those left out are flagged, not failed: torch's own build
    compiles other types there. Raises `CompileError` where the rest fails too, or where only
    stand-ins were left to compile (the first error, which names them)."""
    from experts import cudahost
    from gate import hostforms

    def compile_with(kept: list[hostforms.Instance]) -> Any:
        return cudahost.compile_source(hostforms.device_source(source, kept), name=name,
                                       arch=TARGET_NAME, defines=dict(defines), options=options)

    wanted = hostforms.instances(source) if hostforms.has_host_half(source) else []
    try:
        return compile_with(wanted)
    except cudahost.CompileError as exc:
        first = exc
    kept = [i for i in wanted if i.stand_in is None]
    if len(kept) == len(wanted):
        raise first
    compiled = compile_with(kept)
    left = []
    for inst in wanted:
        if inst.stand_in is None:
            continue
        try:
            compiled = compile_with([*kept, inst])
            kept.append(inst)
        except cudahost.CompileError:
            left.append(inst)
    if not facts.ptx_entries(compiled.ptx):
        raise first
    if not left:
        return compiled
    named = "; ".join(f"{i.kernel}<{', '.join(i.args)}> ({i.stand_in})" for i in left)
    chan.send("flag", f"static: not compiled: {named}: stand-ins for types torch's build compiles "
                      f"with its own headers, which NVRTC does not have ({describe(first, 300)})")
    return compiled


def _cuda_compile_facts(chan: Channel, compiled_groups: list[tuple],
                        launches: hostview.CudaLaunches,
                        failures: list[_TraceFailure]) -> list[CompileFacts]:
    """The facts of each compiled kernel, its dynamic shared memory from the traced launches."""
    from experts import cudahost

    failed = {f.variant: f.reason for f in failures}
    out: list[CompileFacts] = []
    unknown: set[str] = set()
    for variant, defines, members, compiled, spent in compiled_groups:
        resources = cudahost.ptxas_resources(compiled.log)
        shared = facts.ptxas_shared(compiled.log)
        dynamic_users = facts.ptx_dynamic_shared(compiled.ptx)
        cubin = facts.cubin_kernels(compiled.cubin) if compiled.cubin else {}
        sass = facts.sass_counts(compiled.cubin) if compiled.cubin and _want_sass() else None
        counts = facts.ptx_instruction_counts(compiled.ptx)
        for name in facts.ptx_entries(compiled.ptx):
            res = resources.get(name, {})
            cub = cubin.get(name)
            dynamic, source = _dynamic_shared(name, members, launches, dynamic_users.get(name),
                                              any(m in failed for m in members))
            if source == "unknown":
                unknown.add(name)
            out.append(CompileFacts(
                kernel=name, config={"variant": variant, **defines},
                registers=res.get("registers", cub.registers if cub else None),
                static_shared_bytes=shared.get(name, cub.static_shared_bytes if cub else 0),
                dynamic_shared_bytes=dynamic, dynamic_shared_source=source,
                local_bytes=res.get("stack_bytes", (cub.frame_bytes or 0) if cub else 0),
                spill_stores=res.get("spill_stores"), spill_loads=res.get("spill_loads"),
                instructions=counts, sass=sass, compile_s=spent))
    if not out:
        chan.reject(FailureKind.COMPILE_ERROR, "compile", "the .cu file defines no kernel (.entry)")
    silent = [f for f in failures if not f.recorded]
    if silent and not unknown:  # said here where no kernel's shared memory depends on it
        chan.send("flag", f"static: `run` for {silent[0].variant} failed before any launch, so "
                          f"none of its launches was traced: {silent[0].reason}")
    if unknown:
        why = "; ".join(f"{v}: {r}" for v, r in failed.items())
        chan.send("flag", f"static: dynamic shared memory unknown for "
                          f"{', '.join(sorted(unknown))}: `run` could not be traced as far as "
                          f"their launches ({why})")
    return out


def _trace_cuda_launches(chan: Channel, host: Any, case: Any, seen: hostview.CudaLaunches
                         ) -> tuple[hostview.CudaLaunches, list[_TraceFailure]]:
    """The launches `host.run` makes on the target, per variant, into `seen`: through
    `experts.cudahost`, and (`hostview.host_libraries`, entered by the caller) through the
    driver, CuPy or a `load_inline` extension."""
    import torch

    machine = "cuda" if torch.cuda.is_available() else "cpu"
    with hostview.target_device(TARGET), hostview.record_cuda_launches(host, TARGET_NAME, seen):
        def begin(name: str) -> None:
            seen.variant = name

        failures = _trace_run(chan, host, case, begin, seen.count, machine)
    return seen, failures


def _dynamic_shared(kernel: str, variants: list[str], seen: hostview.CudaLaunches,
                    declares_dynamic: bool | None, trace_failed: bool) -> tuple[int | None, str]:
    """(dynamic shared bytes or None, source) of `kernel` compiled for `variants` (see
    `gate.verdict.DYNAMIC_SHARED_SOURCES`): the largest traced launch, else the largest opt-in,
    else 0 when its PTX declares no dynamic shared array, else unknown."""
    from gate.foreign import base_name  # a C++ kernel's PTX entry is its mangled name

    base = base_name(kernel)
    launched = [b for (v, k), sizes in seen.launched.items()
                if v in variants and (k == kernel or base_name(k) == base) for b in sizes]
    if launched:
        return max(launched), "launch"
    opted = [n for (v, k), n in seen.opt_in.items()
             if v in variants and (k == kernel or base_name(k) == base)]
    if opted:
        return max(opted), "opt_in"
    if declares_dynamic is False:
        return 0, "unused"
    return None, "unknown" if trace_failed else "not_launched"
