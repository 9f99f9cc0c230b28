"""Shared host helper for CUDA C++ expert kernels: NVRTC compile, module load, launch.

A CUDA expert is a `.cu` file plus a host module beside it (`foo.cu` + `foo.py`). The host
module reads its source, calls `compile_source`, then `get_function` and `launch`:

    compiled = cudahost.compile_source(Path(__file__).with_suffix(".cu").read_text())
    func = cudahost.get_function(compiled, "my_kernel")
    cudahost.launch(func, grid, block, shared_bytes, (out, a, b, n), stream)

What a caller may rely on:
- `compile_source` is pure with respect to its arguments: the same source, arch, options and
  include paths give the same `Compiled` object (an in-process cache keyed by their hash). It
  needs no GPU: with no device it targets `sm_90a`. It raises `CompileError` (with the NVRTC
  log) when the source does not compile.
- `Compiled` carries the PTX text and, when NVRTC made one, the cubin bytes, so a static
  check can look for instructions (`mma.sync`, `cp.async`, `wgmma`) without a GPU.
- `get_function` finds a kernel by its plain name also when it is not `extern "C"`: the PTX
  entry whose Itanium-mangled name is that function (`entry_name`).
- `cuda_headers_for_nvrtc()` gives a host that calls NVRTC itself the CUDA header folders
  this helper's own compiles get (`include_dirs()`), appended after the host's options.
- `launch` goes through `driver.cuLaunchKernel`, looked up on the module `cuda.bindings.driver`
  at every call, so a caller that replaces that attribute (the gate counts or suppresses
  launches that way) sees every launch made through this helper.
- Arguments: a torch tensor (or anything with `data_ptr()`) passes its device pointer; a
  ctypes scalar passes as is; a Python `int` passes as a 32-bit signed int, a `float` as a
  32-bit float, a `bool` as a 32-bit int; an object with `getPtr()` (a cuda-python struct such
  as `CUtensorMap`) passes by value from that address. Anything else raises `TypeError`.
- Any failing CUDA driver call raises `CudaError` naming the call and the error.

Nothing here imports torch; the CUDA bindings are imported lazily, so importing this module
is cheap and works on a machine without CUDA.
"""
from __future__ import annotations

import contextlib
import ctypes
import hashlib
import importlib
import importlib.util
import os
import re
import sys
import threading
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence, TypeVar

DEFAULT_ARCH = "sm_90a"

__all__ = [
    "DEFAULT_ARCH",
    "CompileError",
    "CudaError",
    "Compiled",
    "default_arch",
    "include_dirs",
    "with_cuda_headers",
    "cuda_headers_for_nvrtc",
    "NVRTC_FILLS",
    "NVRTC_MODULES",
    "shared_byte",
    "compile_source",
    "clear_cache",
    "ptxas_resources",
    "mangled_identifier",
    "entry_names",
    "entry_name",
    "get_function",
    "set_dynamic_shared",
    "function_attributes",
    "pack_args",
    "launch",
    "stream_of",
]


class CompileError(RuntimeError):
    """NVRTC rejected the source; `log` holds the compiler's messages."""

    def __init__(self, message: str, log: str) -> None:
        super().__init__(f"{message}\n{log}".rstrip())
        self.log = log


class CudaError(RuntimeError):
    """A CUDA driver call failed; the message names the call and the error code."""


@dataclass(frozen=True, slots=True)
class Compiled:
    """One NVRTC compilation: its key, target, PTX text, cubin bytes (or None) and log."""

    key: str
    name: str
    arch: str
    options: tuple[str, ...]
    ptx: str
    cubin: bytes | None
    log: str
    # Loaded modules per CUDA context handle; not part of equality or hashing.
    _modules: dict = field(default_factory=dict, compare=False, hash=False, repr=False)

    def resources(self) -> dict[str, dict[str, int]]:
        """Per kernel, what ptxas reported: `registers`, `stack_bytes`, `spill_stores`,
        `spill_loads` (only for kernels whose report is in the log)."""
        return ptxas_resources(self.log)

    def image(self) -> bytes:
        """What `cuModuleLoadData` gets: the cubin when there is one, else NUL-ended PTX."""
        if self.cubin is not None:
            return self.cubin
        return self.ptx.encode() + b"\0"


_CACHE: dict[str, Compiled] = {}
_LOCK = threading.Lock()


def _nvrtc() -> Any:
    from cuda.bindings import nvrtc

    return nvrtc


def _driver() -> Any:
    from cuda.bindings import driver

    return driver


def _check(result: Any, what: str) -> Any:
    """Unwrap a cuda-python `(err, *values)` result; raise `CudaError` when err is not 0."""
    if result is None:  # a replaced entry point (a launch hook) may return nothing
        return None
    if isinstance(result, tuple):
        err, rest = result[0], result[1:]
    else:
        err, rest = result, ()
    if int(err) != 0:
        name = getattr(err, "name", str(err))
        raise CudaError(f"{what} failed: {name} ({int(err)})")
    if not rest:
        return None
    return rest[0] if len(rest) == 1 else rest


def default_arch() -> str:
    """`sm_XY` of the current CUDA device (`sm_90a` on a Hopper), else `DEFAULT_ARCH`.

    The `a` suffix enables the architecture-specific instructions (`wgmma`, `setmaxnreg`) that
    expert kernels for Hopper use. Any failure to query a device gives `DEFAULT_ARCH`.
    """
    try:
        drv = _driver()
        _check(drv.cuInit(0), "cuInit")
        dev = _current_device(drv)
        major = _check(drv.cuDeviceGetAttribute(
            drv.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev), "cuDeviceGetAttribute")
        minor = _check(drv.cuDeviceGetAttribute(
            drv.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev), "cuDeviceGetAttribute")
    except Exception:  # no driver, no device: compile for the default target
        return DEFAULT_ARCH
    suffix = "a" if (major, minor) == (9, 0) else ""
    return f"sm_{major}{minor}{suffix}"


def include_dirs() -> list[str]:
    """Folders holding CUDA headers (`cuda_fp16.h`...) found in `CUDA_HOME`/`CUDA_PATH` and in
    the `nvidia-*` wheels on `sys.path`; empty when there are none. NVRTC needs them only for
    sources that include CUDA headers."""
    found: list[str] = []
    candidates: list[Path] = []
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            candidates.append(Path(os.environ[var]) / "include")
    candidates.append(Path("/usr/local/cuda/include"))
    for entry in sys.path:
        base = Path(entry or ".") / "nvidia"
        if base.is_dir():
            candidates.extend(sorted(base.glob("*/include")))
            candidates.extend(sorted(base.glob("cu*/include")))
    for cand in candidates:
        if (cand / "cuda_fp16.h").is_file() or (cand / "cuda_runtime.h").is_file():
            # CUDA 13 keeps libcu++ (`cuda/std/...`, which cooperative_groups.h includes) apart.
            for folder in (cand, cand / "cccl"):
                if folder.is_dir() and str(folder) not in found:
                    found.append(str(folder))
    return found


T = TypeVar("T", str, bytes)

NVRTC_MODULES = ("cuda.bindings.nvrtc", "cuda.nvrtc")
"""The cuda-python NVRTC binding modules a host may import: the current one and the older
name of earlier cuda-python releases (where installed)."""


def with_cuda_headers(options: Sequence[T]) -> list[T]:
    """`options` followed by `-I` of each folder of `include_dirs()` they do not name already,
    as bytes unless the options are `str`: after them, so that a caller's own `-I` folders are
    searched first. NVRTC has no default header search path; without these a source that
    includes `cuda_fp16.h` compiles only where the toolkit sits where NVRTC's build expects."""
    given = list(options)
    text = bool(given) and all(isinstance(o, str) for o in given)
    present = {o.decode(errors="replace") if isinstance(o, (bytes, bytearray)) else str(o)
               for o in given}
    extra = [f"-I{d}" for d in include_dirs() if f"-I{d}" not in present]
    return given + [e if text else e.encode() for e in extra]  # type: ignore[misc]


def _compile_with_headers(original: Any) -> Any:
    def nvrtcCompileProgram(prog: Any, numOptions: int = 0, options: Any = None) -> Any:  # noqa: N802, N803
        opts = with_cuda_headers(list(options or [])[: int(numOptions)])
        return original(prog, len(opts), opts)

    nvrtcCompileProgram.__wrapped__ = original  # type: ignore[attr-defined]
    nvrtcCompileProgram.__doc__ = getattr(original, "__doc__", None)
    return nvrtcCompileProgram


# NVRTC calls that write their result into a buffer the caller made.
NVRTC_FILLS = ("nvrtcGetProgramLog", "nvrtcGetPTX", "nvrtcGetCUBIN", "nvrtcGetLTOIR")


def shared_byte(buf: Any) -> bool:
    """Whether `buf` is an immutable bytes object of at most one byte: CPython hands out one
    shared object per byte value (`b" " * 1` is the object every `b" "` in the process is), so
    a call that writes a result's terminating NUL into it (an empty NVRTC log, sized 1) turns
    every `b" "` of the process into `b"\\x00"`. Its content is the terminator alone: nothing
    is lost by not writing it."""
    return isinstance(buf, bytes) and len(buf) <= 1


def _fill_guarded(original: Any, success: Any) -> Any:
    def fill(prog: Any, buf: Any, *rest: Any) -> Any:
        return (success,) if shared_byte(buf) else original(prog, buf, *rest)

    fill.__wrapped__ = original  # type: ignore[attr-defined]
    fill.__name__ = getattr(original, "__name__", "fill")
    fill.__doc__ = getattr(original, "__doc__", None)
    return fill


@contextlib.contextmanager
def cuda_headers_for_nvrtc() -> Iterator[list[str]]:
    """While active, `nvrtcCompileProgram` of each NVRTC binding module of `NVRTC_MODULES`
    that is installed compiles with `with_cuda_headers` of the options it is given: a host
    that calls NVRTC itself finds the CUDA headers as `compile_source` does (the host's other
    options untouched), and a call that fills a buffer (`NVRTC_FILLS`) leaves a `shared_byte`
    unwritten. Enter it before the host is imported (a host may bind the function at import).
    Yields the names of the modules wrapped; puts the functions back at the end."""
    wrapped: list[tuple[Any, Any]] = []
    names: list[str] = []
    for name in NVRTC_MODULES:
        try:
            if importlib.util.find_spec(name) is None:
                continue
            with warnings.catch_warnings():  # the older name warns that it is deprecated
                warnings.simplefilter("ignore")
                module = importlib.import_module(name)
        except ImportError:
            continue
        current = getattr(module, "nvrtcCompileProgram", None)
        if current is None or getattr(current, "__wrapped__", None) is not None:
            continue  # none to wrap, or wrapped already (an enclosing use)
        wrapped.append((module, "nvrtcCompileProgram", current))
        names.append(name)
        module.nvrtcCompileProgram = _compile_with_headers(current)
        success = getattr(getattr(module, "nvrtcResult", None), "NVRTC_SUCCESS", 0)
        for fill in NVRTC_FILLS:
            if (got := getattr(module, fill, None)) is not None:
                wrapped.append((module, fill, got))
                setattr(module, fill, _fill_guarded(got, success))
    try:
        yield names
    finally:
        for module, attr, original in reversed(wrapped):
            setattr(module, attr, original)


def compile_source(
    source: str,
    *,
    name: str = "kernel.cu",
    arch: str | None = None,
    options: Sequence[str] = (),
    include: Iterable[str] | None = None,
    defines: dict[str, str | int] | None = None,
) -> Compiled:
    """Compile CUDA C++ `source` with NVRTC for `arch` (default: `default_arch()`).

    `options` are extra NVRTC options; `defines` become `-DNAME=VALUE`; `include` are extra
    header folders (the CUDA header folders from `include_dirs()` are always added). A kernel
    that is not `extern "C"` keeps its C++ (Itanium-mangled) name in the image; `get_function`
    still finds it by its plain name when that names one kernel. The result is cached
    in-process by a hash of all inputs. Raises `CompileError` on a compile error.
    """
    arch = arch or default_arch()
    # ptxas -v puts the resource report (registers, stack, spills) into the log: static facts.
    opts = [f"--gpu-architecture={arch}", "-std=c++17", "--ptxas-options=-v"]
    opts += [f"-D{k}={v}" for k, v in sorted((defines or {}).items())]
    opts += list(options)
    incs = list(include or []) + include_dirs()
    opts += [f"-I{d}" for d in incs]
    key = hashlib.sha256("\0".join([source, name, *opts]).encode()).hexdigest()
    with _LOCK:
        hit = _CACHE.get(key)
    if hit is not None:
        return hit
    compiled = _compile_uncached(source, name, arch, tuple(opts), key)
    with _LOCK:
        return _CACHE.setdefault(key, compiled)


def _compile_uncached(source: str, name: str, arch: str, opts: tuple[str, ...], key: str) -> Compiled:
    nvrtc = _nvrtc()
    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], [])
    if int(err) != 0:
        raise CompileError(f"nvrtcCreateProgram failed: {err}", "")
    try:
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), [o.encode() for o in opts])
        log = _program_log(nvrtc, prog)
        if int(err) != 0:
            raise CompileError(f"NVRTC could not compile {name} for {arch}", log)
        err, ptx_size = nvrtc.nvrtcGetPTXSize(prog)
        ptx_buf = b" " * ptx_size
        _check(nvrtc.nvrtcGetPTX(prog, ptx_buf), "nvrtcGetPTX")
        cubin: bytes | None = None
        # A virtual target (compute_XY) yields PTX only; a real one (sm_XY) yields a cubin too.
        if arch.startswith("sm_"):
            err, cubin_size = nvrtc.nvrtcGetCUBINSize(prog)
            if int(err) == 0 and cubin_size > 0:
                cubin_buf = b" " * cubin_size
                _check(nvrtc.nvrtcGetCUBIN(prog, cubin_buf), "nvrtcGetCUBIN")
                cubin = bytes(cubin_buf)
        return Compiled(key=key, name=name, arch=arch, options=opts,
                        ptx=ptx_buf.rstrip(b"\0").decode(errors="replace"), cubin=cubin, log=log)
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def _program_log(nvrtc: Any, prog: Any) -> str:
    err, size = nvrtc.nvrtcGetProgramLogSize(prog)
    if int(err) != 0 or size <= 1:
        return ""
    buf = b" " * size
    nvrtc.nvrtcGetProgramLog(prog, buf)
    return buf.rstrip(b"\0").decode(errors="replace")


_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
_STACK = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_REGS = re.compile(r"Used (\d+) registers")


def ptxas_resources(log: str) -> dict[str, dict[str, int]]:
    """Parse the `ptxas -v` report in an NVRTC log into per-kernel resource numbers."""
    out: dict[str, dict[str, int]] = {}
    current: dict[str, int] | None = None
    for line in log.splitlines():
        if (m := _ENTRY.search(line)) is not None:
            current = out.setdefault(m.group(1), {})
        elif current is not None and (m := _STACK.search(line)) is not None:
            current.update(stack_bytes=int(m.group(1)), spill_stores=int(m.group(2)),
                           spill_loads=int(m.group(3)))
        elif current is not None and (m := _REGS.search(line)) is not None:
            current["registers"] = int(m.group(1))
    return out


def clear_cache() -> None:
    """Forget every compiled program (loaded modules stay alive until process exit)."""
    with _LOCK:
        _CACHE.clear()


def _current_device(drv: Any) -> Any:
    ctx = _check(drv.cuCtxGetCurrent(), "cuCtxGetCurrent")
    if ctx is not None and int(ctx) != 0:
        return _check(drv.cuCtxGetDevice(), "cuCtxGetDevice")
    ordinal = 0
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        ordinal = torch.cuda.current_device()
    return _check(drv.cuDeviceGet(ordinal), "cuDeviceGet")


def _ensure_context(drv: Any) -> Any:
    """The current CUDA context; makes the primary context of the current device current when
    there is none (torch uses the primary context too, so pointers from torch are valid)."""
    _check(drv.cuInit(0), "cuInit")
    ctx = _check(drv.cuCtxGetCurrent(), "cuCtxGetCurrent")
    if ctx is not None and int(ctx) != 0:
        return ctx
    dev = _current_device(drv)
    ctx = _check(drv.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
    _check(drv.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    return ctx


_ENTRY_DECL = re.compile(r"\.entry\s+([^\s(]+)")


def mangled_identifier(name: str) -> str | None:
    """The function identifier of an Itanium-mangled name: `gemm_kernel` for
    `_Z11gemm_kernelPfi`, for the internal-linkage `_ZL11gemm_kernelPf` and for the nested
    `_ZN2ns11gemm_kernelEPf` (the last length-prefixed name before the parameters); None
    for a name that is not mangled or whose encoding this does not read."""
    if not name.startswith("_Z"):
        return None
    i = 2
    if name[i:i + 1] == "L":
        i += 1
    nested = name[i:i + 1] == "N"
    if nested:
        i += 1
        while name[i:i + 1] in ("K", "V", "r"):
            i += 1
    last = None
    while True:
        m = re.match(r"\d+", name[i:])
        if m is None:
            return last
        n = int(m.group(0))
        start = i + m.end()
        last = name[start:start + n] or None
        i = start + n
        if not nested:
            return last


def entry_names(ptx: str) -> list[str]:
    """The kernel entry names a PTX text declares (`.entry NAME(`), in order."""
    return _ENTRY_DECL.findall(ptx)


def entry_name(ptx: str, kernel: str) -> str:
    """The entry of `ptx` that `kernel` names: `kernel` itself when an entry has that exact
    name, else the one entry whose mangled name's function is `kernel` (a kernel that is not
    `extern "C"`: `_Z7row_sumPKfPfi`, `_ZN2ns7row_sumEPf`, one template instance), else
    `kernel` unchanged (the driver then reports it missing). Raises `CudaError` naming the
    entries when several match (overloads, template instances): pass one of those names."""
    entries = entry_names(ptx)
    if kernel in entries:
        return kernel
    matches = [e for e in entries if mangled_identifier(e) == kernel]
    if len(matches) > 1:
        raise CudaError(f"kernel {kernel!r} names {len(matches)} entries: {', '.join(matches)}; "
                        "pass one of these names")
    return matches[0] if matches else kernel


def get_function(compiled: Compiled, kernel: str) -> Any:
    """The `CUfunction` named `kernel` of `compiled`, loading its module into the current
    context once. `kernel` is an entry's name, or the plain name of a kernel that is not
    `extern "C"` (`entry_name` over `compiled.ptx`: the one entry whose mangled name is that
    function). Raises `CudaError` when the image does not load, has no such kernel, or has
    several kernels of that plain name (overloads, template instances)."""
    drv = _driver()
    ctx = _ensure_context(drv)
    with _LOCK:
        entry = compiled._modules.get(int(ctx))
        if entry is None:
            module = _check(drv.cuModuleLoadData(compiled.image()), f"cuModuleLoadData({compiled.name})")
            entry = (module, {})
            compiled._modules[int(ctx)] = entry
        module, functions = entry
        func = functions.get(kernel)
        if func is None:
            name = entry_name(compiled.ptx, kernel)
            func = _check(drv.cuModuleGetFunction(module, name.encode()), f"cuModuleGetFunction({name})")
            functions[kernel] = func
    return func


def set_dynamic_shared(func: Any, nbytes: int) -> None:
    """Allow `func` to launch with `nbytes` of dynamic shared memory (needed above 48 KiB)."""
    drv = _driver()
    attr = drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    _check(drv.cuFuncSetAttribute(func, attr, int(nbytes)), "cuFuncSetAttribute")


def function_attributes(func: Any) -> dict[str, int]:
    """Resource use of a loaded kernel: registers per thread, static shared bytes, local
    (spill/stack) bytes per thread, and the most threads per block it can launch with."""
    drv = _driver()
    a = drv.CUfunction_attribute
    names = {
        "registers": a.CU_FUNC_ATTRIBUTE_NUM_REGS,
        "shared_bytes": a.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES,
        "local_bytes": a.CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES,
        "max_threads": a.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
    }
    return {k: int(_check(drv.cuFuncGetAttribute(v, func), "cuFuncGetAttribute")) for k, v in names.items()}


class PackedArgs:
    """Kernel arguments laid out for `cuLaunchKernel`: `address` points at an array of
    pointers, one per argument. Keep the object alive until the launch call returns."""

    __slots__ = ("_values", "_array", "address")

    def __init__(self, values: list[Any], pointers: list[int]) -> None:
        self._values = values
        self._array = (ctypes.c_void_p * max(1, len(pointers)))(*pointers)
        self.address = ctypes.addressof(self._array)


def pack_args(args: Sequence[Any]) -> PackedArgs:
    """Pack kernel arguments (see the module docstring for the accepted kinds)."""
    values: list[Any] = []
    pointers: list[int] = []
    for i, arg in enumerate(args):
        if hasattr(arg, "data_ptr"):
            value: Any = ctypes.c_void_p(int(arg.data_ptr()))
        elif isinstance(arg, ctypes._SimpleCData):
            value = arg
        elif isinstance(arg, bool):
            value = ctypes.c_int32(int(arg))
        elif isinstance(arg, int):
            if not -(2**31) <= arg < 2**31:
                raise TypeError(f"argument {i}: int {arg} does not fit int32; pass a ctypes type")
            value = ctypes.c_int32(arg)
        elif isinstance(arg, float):
            value = ctypes.c_float(arg)
        elif hasattr(arg, "getPtr"):
            values.append(arg)
            pointers.append(int(arg.getPtr()))
            continue
        else:
            raise TypeError(f"argument {i}: cannot pass {type(arg).__name__} to a kernel")
        values.append(value)
        pointers.append(ctypes.addressof(value))
    return PackedArgs(values, pointers)


def stream_of(stream: Any) -> Any:
    """A `CUstream` from None (the legacy default stream), an int handle, a torch stream
    (`.cuda_stream`) or a `CUstream`."""
    drv = _driver()
    if stream is None:
        return drv.CUstream(0)
    if hasattr(stream, "cuda_stream"):
        return drv.CUstream(int(stream.cuda_stream))
    if isinstance(stream, int):
        return drv.CUstream(stream)
    return stream


def _dim3(value: int | Sequence[int]) -> tuple[int, int, int]:
    if isinstance(value, int):
        return (value, 1, 1)
    dims = tuple(int(v) for v in value) + (1, 1, 1)
    return dims[0], dims[1], dims[2]


def launch(
    func: Any,
    grid: int | Sequence[int],
    block: int | Sequence[int],
    shared_bytes: int,
    args: Sequence[Any],
    stream: Any = None,
) -> None:
    """Launch `func` on `grid` x `block` with `shared_bytes` of dynamic shared memory.

    Goes through `driver.cuLaunchKernel` (looked up at call time). Raises `CudaError` when the
    launch is refused. Like any kernel launch it is asynchronous with respect to the host.
    """
    drv = _driver()
    gx, gy, gz = _dim3(grid)
    bx, by, bz = _dim3(block)
    packed = pack_args(args)
    result = drv.cuLaunchKernel(func, gx, gy, gz, bx, by, bz, int(shared_bytes),
                                stream_of(stream), packed.address, 0)
    _check(result, "cuLaunchKernel")
