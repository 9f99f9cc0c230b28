"""Build a CUDA C++ source into a shared library of emulated kernels, load it, launch kernels.

`build(source, ...)` rewrites the source (`gate.cudacpu.prepass`), compiles it with the system
C++ compiler (`g++`, or `$CXX`) against `cudacpu.h` (force-included) and loads it. The library
is cached on disk by a hash of everything that goes into it (the rewritten source, the
emulation headers, defines, include folders, compiler and flags) under
`$KLINEAGE_CUDACPU_CACHE` (default: `~/.cache/klineage/cudacpu`): a second build of the same
source costs a hash and a `dlopen`. With GCC, the emulation header is precompiled once into the
same cache and read by every build (`_precompiled`). `Library.launch(kernel, grid, block, shared_bytes, args)`
runs one launch to completion on the calling thread and raises `EmulationError` with the
emulator's one-line reason when the kernel faults, traps, deadlocks or runs PTX it does not
emulate. Arguments are what `experts.cudahost.pack_args` accepts (tensors pass their
`data_ptr()`, which for the emulator is host memory).

Preconditions: a C++17 compiler on PATH; Linux (fibers use ucontext; faults are caught with
SIGSEGV / SIGBUS handlers while a launch runs).
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Sequence

from gate.cudacpu.prepass import Unsupported, defines_kernels_in_macros, kernel_names, rewrite

__all__ = ["BuildError", "EmulationError", "Library", "build", "cache_dir", "emulator_digest",
           "STUB_HEADERS"]

HERE = Path(__file__).resolve().parent
HEADERS = ("cudacpu.h", "cudacpu_ptx.h")
FLAGS = ("-std=c++17", "-O1", "-fPIC", "-shared", "-fno-strict-aliasing", "-fvisibility=hidden",
         "-fno-gnu-unique", "-U_FORTIFY_SOURCE", "-D_FORTIFY_SOURCE=0", "-w", "-Wl,-Bsymbolic")
# The flags of FLAGS that reach the compiler proper (not the link): a precompiled header is
# built with them.
COMPILE_FLAGS = tuple(f for f in FLAGS if f != "-shared" and not f.startswith("-Wl,"))
DEFAULT_STACK_KB = 256
# CUDA headers a kernel includes: cudacpu.h already provides what the emulator supports of them.
STUB_HEADERS = {
    name: "// provided by cudacpu.h\n" for name in (
        "cuda_fp16.h", "cuda_bf16.h", "cuda_runtime.h", "cuda_runtime_api.h", "cuda.h",
        "device_launch_parameters.h", "cuda_pipeline.h", "cuda_pipeline_primitives.h",
        "vector_types.h", "vector_functions.h", "device_functions.h", "sm_80_intrinsics.h",
        "cuda_fp16.hpp", "cuda_bf16.hpp", "crt/host_defines.h", "cooperative_groups.h",
        "cooperative_groups/reduce.h")
}
STUB_HEADERS["math_constants.h"] = (
    "#pragma once\n#define CUDART_INF_F __int_as_float(0x7f800000)\n"
    "#define CUDART_NAN_F __int_as_float(0x7fffffff)\n#define CUDART_INF __longlong_as_double(0x7ff0000000000000ULL)\n"
    "#define CUDART_PI_F 3.141592654f\n#define CUDART_PI 3.1415926535897931\n"
    "#define CUDART_L2E_F 1.442695041f\n#define CUDART_LN2_F 0.693147181f\n"
    "#define CUDART_MAX_NORMAL_F __int_as_float(0x7f7fffff)\n")


class BuildError(RuntimeError):
    """The source does not build for the emulator: a refusal (`Unsupported`) or a compile
    error; `log` holds the compiler's messages (empty for a refusal)."""

    def __init__(self, message: str, log: str = "") -> None:
        super().__init__(message if not log else f"{message}\n{log}".rstrip())
        self.log = log


class EmulationError(RuntimeError):
    """A launch failed in the emulator (illegal address, trap, deadlock, unsupported PTX...)."""


@lru_cache(maxsize=1)
def emulator_digest() -> str:
    """A hash of the emulator itself (its headers and Python modules): verdicts reached under
    one emulator are cached apart from another's."""
    digest = hashlib.sha256()
    for path in sorted([*(HERE / h for h in HEADERS), *HERE.glob("*.py")]):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def cache_dir() -> Path:
    """Where built libraries are kept (`$KLINEAGE_CUDACPU_CACHE`, else ~/.cache/klineage/cudacpu)."""
    env = os.environ.get("KLINEAGE_CUDACPU_CACHE")
    base = Path(env) if env else Path.home() / ".cache" / "klineage" / "cudacpu"
    base.mkdir(parents=True, exist_ok=True)
    return base


@lru_cache(maxsize=1)
def _compiler() -> tuple[str, str]:
    cxx = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        raise BuildError("no C++ compiler found (g++ or $CXX): the emulate tier needs one")
    version = subprocess.run([cxx, "--version"], capture_output=True, text=True).stdout.splitlines()
    return cxx, version[0] if version else ""


def _stub_dir() -> Path:
    folder = cache_dir() / "include"
    for name, text in STUB_HEADERS.items():
        path = folder / name
        if not path.is_file() or path.read_text() != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(text)
            os.replace(tmp, path)
    return folder


@dataclass(slots=True)
class Library:
    """A loaded library of emulated kernels (see the module docstring)."""

    path: Path
    kernels: tuple[str, ...]
    source_name: str
    _dll: Any = field(repr=False, default=None)
    opt_in: dict[str, int] = field(default_factory=dict)
    """Dynamic shared memory each kernel was allowed (`set_dynamic_shared`), by name."""
    refused: tuple[str, ...] = ()
    """Why each inline PTX statement of the source is not emulated (a launch that reaches one
    fails with that reason)."""

    def has(self, kernel: str) -> bool:
        return _resolve(kernel, self.kernels) is not None

    def global_symbol(self, name: str) -> tuple[int, int] | None:
        """(address, bytes) of the source's file-scope `__device__` / `__constant__` variable
        `name` (what `cuModuleGetGlobal` answers); None when it has none."""
        address, size = ctypes.c_void_p(), ctypes.c_size_t()
        if self._dll.cudacpu_global(name.encode(), ctypes.byref(address), ctypes.byref(size)):
            return int(address.value or 0), int(size.value)
        return None

    def launch(self, kernel: str, grid: int | Sequence[int], block: int | Sequence[int],
               shared_bytes: int, args: Sequence[Any] | Any, stack_kb: int | None = None) -> None:
        """Run `kernel` on `grid` x `block` with `shared_bytes` of dynamic shared memory.

        `args` is a sequence of kernel arguments (as `experts.cudahost.pack_args` takes them)
        or an integer address of an array of pointers to the argument values (what
        `cuLaunchKernel` takes). Raises `EmulationError` on any failure of the launch,
        including a dynamic shared size above 48 KiB the kernel was not allowed.
        """
        name = _resolve(kernel, self.kernels)
        if name is None:
            raise EmulationError(f"named symbol not found: {self.source_name} has no kernel {kernel!r} "
                                 f"(kernels: {', '.join(self.kernels) or 'none'})")
        if shared_bytes > 48 * 1024 and shared_bytes > self.opt_in.get(name, 0):
            raise EmulationError(f"launch of {name} with {shared_bytes} bytes of dynamic shared memory "
                                 f"above 48 KiB without opting in (CUDA_ERROR_INVALID_VALUE)")
        dims = (ctypes.c_uint * 6)(*_dim3(grid), *_dim3(block))
        keep: Any = None
        if isinstance(args, int):
            address = args
        else:
            from experts import cudahost  # noqa: PLC0415  (plain Python: no CUDA import)

            keep = cudahost.pack_args(list(args))
            address = keep.address
        err = ctypes.create_string_buffer(600)
        stack = (stack_kb or int(os.environ.get("CUDACPU_STACK_KB", DEFAULT_STACK_KB))) * 1024
        with _LAUNCH_LOCK:  # one launch at a time per process: fault handlers are process-wide
            rc = self._dll.cudacpu_launch(name.encode(), dims, ctypes.c_size_t(int(shared_bytes)),
                                          ctypes.c_void_p(address), ctypes.c_size_t(stack), err,
                                          ctypes.c_size_t(len(err)))
        del keep
        if rc != 0:
            raise EmulationError(f"{name}: {err.value.decode(errors='replace')}")


def _dim3(value: int | Sequence[int]) -> tuple[int, int, int]:
    if isinstance(value, int):
        return (value, 1, 1)
    dims = tuple(int(v) for v in value) + (1, 1, 1)
    return dims[0], dims[1], dims[2]


def _resolve(kernel: str, kernels: Iterable[str]) -> str | None:
    """The registered kernel `kernel` names: its plain name, or an Itanium-mangled one
    (`_Z<len><name>...`) of a kernel that is not `extern "C"`."""
    names = set(kernels)
    if kernel in names:
        return kernel
    if kernel.startswith("_Z"):
        digits = "".join(c for c in kernel[2:12] if c.isdigit())
        rest = kernel[2 + len(digits):]
        if digits and rest[: int(digits)] in names:
            return rest[: int(digits)]
    return None


_LAUNCH_LOCK = threading.Lock()
_LOADED: dict[str, Library] = {}
_LOAD_LOCK = threading.Lock()


def build(source: str, *, name: str = "kernel.cu", defines: dict[str, Any] | None = None,
          include: Iterable[str] = (), options: Sequence[str] = ()) -> Library:
    """Build (or find in the cache) and load the emulated library of `source`.

    `defines` become `-DNAME=VALUE`; `include` are header folders; `options` extra compiler
    flags. Raises `BuildError` (one line first, then the compiler's log) when the source uses
    what the emulator does not support or does not compile as C++.
    """
    cxx, version = _compiler()
    stubs = _stub_dir()
    user = [f"-D{k}={v}" for k, v in sorted((defines or {}).items())]
    user += [f"-I{Path(d).resolve()}" for d in include]
    headers = _precompiled(cxx, version, (*COMPILE_FLAGS, f"-I{stubs}", f"-I{HERE}")) or HERE
    flags = [*FLAGS, f"-I{stubs}", f"-I{HERE}", "-include", str(headers / "cudacpu.h"), *user, *options]
    kernels = _expanded_kernels(cxx, source, [f"-I{stubs}", *user]) \
        if defines_kernels_in_macros(source) else None
    try:
        rewritten = rewrite(source, name, kernels)
    except Unsupported as exc:
        raise BuildError(f"{name}: not emulated: {exc}") from None
    digest = hashlib.sha256()
    for part in (version, *flags, rewritten.text, *((HERE / h).read_text() for h in HEADERS)):
        digest.update(part.encode())
        digest.update(b"\0")
    key = digest.hexdigest()[:40]
    with _LOAD_LOCK:
        hit = _LOADED.get(key)
        if hit is not None:
            return hit
    target = cache_dir() / f"{key}.so"
    if not target.is_file():
        _compile(cxx, flags, rewritten.text, target, name)
    lib = _load(target, rewritten.kernels, name)
    lib.refused = rewritten.refused
    with _LOAD_LOCK:
        return _LOADED.setdefault(key, lib)


@lru_cache(maxsize=8)
def _precompiled(cxx: str, version: str, flags: tuple[str, ...]) -> Path | None:
    """A folder holding the emulation headers and `cudacpu.h` precompiled with `flags` (GCC's
    `cudacpu.h.gch`, which `-include <folder>/cudacpu.h` then reads instead of parsing the
    header again: about 0.4 s of every build), built once per headers, compiler and flags under
    `cache_dir()`. GCC checks the precompiled header against each compile's own options and
    macros and reads the text beside it where they differ. None (include the headers where they
    are) for another compiler, where it fails, or with `KLINEAGE_CUDACPU_PCH=0`."""
    gcc = re.match(r"(\S*[/-])?(g\+\+|gcc|c\+\+)(-\d+)? \(", version)
    if os.environ.get("KLINEAGE_CUDACPU_PCH") == "0" or gcc is None:
        return None
    texts = [(name, (HERE / name).read_text()) for name in HEADERS]
    digest = hashlib.sha256("\0".join([cxx, version, *flags, *(t for _, t in texts)]).encode())
    folder = cache_dir() / f"pch-{digest.hexdigest()[:24]}"
    if (folder / "cudacpu.h.gch").is_file():
        return folder
    tmp = Path(tempfile.mkdtemp(prefix="pch-", dir=cache_dir()))
    try:
        for name, text in texts:
            (tmp / name).write_text(text)
        proc = subprocess.run([cxx, *flags, "-x", "c++-header", str(tmp / "cudacpu.h"), "-o",
                               str(tmp / "cudacpu.h.gch")], capture_output=True, text=True)
        if proc.returncode != 0:
            return None
        try:
            os.rename(tmp, folder)  # whole, or not at all (another process may have won)
        except OSError:
            pass
        return folder if (folder / "cudacpu.h.gch").is_file() else None
    except OSError:
        return None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _expanded_kernels(cxx: str, source: str, flags: list[str]) -> list[str]:
    """The non-template kernels of `source` after its macros are expanded (kernels written by
    macros), found by the preprocessor with `__global__` spelled as a marker."""
    key = hashlib.sha256("\0".join([cxx, source, *flags]).encode()).hexdigest()[:40]
    known = cache_dir() / f"{key}.kernels"
    if known.is_file():
        return known.read_text().split()
    marker = "__cudacpu_global_marker__"
    proc = subprocess.run([cxx, "-E", "-P", "-x", "c++", "-std=c++17", "-D__CUDA_ARCH__=900",
                           "-D__CUDACC__=1", f"-D__global__={marker}", *flags, "-"],
                          input=source, capture_output=True, text=True)
    if proc.returncode != 0:
        log = proc.stderr.strip()
        raise BuildError(f"the preprocessor rejects the source: {log.splitlines()[0] if log else ''}", log)
    found = [k for k, is_template in kernel_names(proc.stdout, marker) if not is_template]
    tmp = known.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(" ".join(found))
    os.replace(tmp, known)
    return found


def _compile(cxx: str, flags: list[str], text: str, target: Path, name: str) -> None:
    with tempfile.TemporaryDirectory(prefix="cudacpu-") as tmp:
        src = Path(tmp) / "kernel.cc"
        src.write_text(text)
        out = Path(tmp) / "kernel.so"
        proc = subprocess.run([cxx, *flags, "-o", str(out), str(src)], capture_output=True, text=True)
        if proc.returncode != 0:
            log = proc.stderr.strip()
            first = next((ln for ln in log.splitlines() if "error" in ln), log.splitlines()[0] if log else "")
            missing = re.search(r"fatal error: ([^:\s]+): No such file", first)
            if missing:  # a library the emulator does not provide (CUB, Thrust, CUTLASS...)
                raise BuildError(f"{name}: not emulated: the header <{missing.group(1)}> is not one "
                                 "the emulator provides", log[-4000:])
            raise BuildError(f"{name} does not compile for the emulator: {first.strip()}", log[-4000:])
        tmp_target = target.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
        shutil.copyfile(out, tmp_target)
        os.replace(tmp_target, target)


def _load(path: Path, kernels: tuple[str, ...], name: str) -> Library:
    dll = ctypes.CDLL(str(path), mode=os.RTLD_LOCAL | os.RTLD_NOW)
    dll.cudacpu_launch.restype = ctypes.c_int
    dll.cudacpu_launch.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_uint), ctypes.c_size_t,
                                   ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t]
    dll.cudacpu_kernel_name.restype = ctypes.c_char_p
    dll.cudacpu_global.restype = ctypes.c_int
    dll.cudacpu_global.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_size_t)]
    found = tuple(dll.cudacpu_kernel_name(i).decode() for i in range(dll.cudacpu_kernel_count()))
    return Library(path, found or kernels, name, dll)
