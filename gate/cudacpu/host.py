"""CUDA host code on the CPU: the driver and compiler calls a host module makes, answered by
the emulator, so a candidate's real host module runs its kernels at the case's small shapes.

`emulated()` (a context manager) installs, for the modules imported while it is active:

- `experts.cudahost` (`from experts import cudahost`, `import experts.cudahost`): the same
  API, with `compile_source` building the emulated library (after NVRTC accepts the source,
  where NVRTC is installed: a source the GPU compiler rejects is a compile error here too),
  `get_function` returning a `CpuFunction`, `set_dynamic_shared` recording the opt-in, and
  `launch` going through `cuda.bindings.driver.cuLaunchKernel` as the real helper does;
- `cuda.bindings.driver` / `cuda.bindings.nvrtc` (and the older `cuda.cuda` / `cuda.nvrtc`)
  for hosts that call the bindings themselves: `nvrtcCreateProgram / CompileProgram /
  GetPTX(Size) / GetCUBIN(Size) / GetProgramLog(Size) / DestroyProgram`, `cuInit`,
  `cuDeviceGet(Count / Attribute / Name)`, `cuCtx*` (current, primary context, synchronize),
  `cuModuleLoadData(Ex) / GetFunction / Unload`, `cuFuncSetAttribute / GetAttribute / GetName`,
  `cuLaunchKernel`, `cuStreamCreate / Synchronize / Destroy`, `cuTensorMapEncodeTiled` (tile
  mode: the 128 bytes hold the emulator's own encoding of the map, which its TMA copies read),
  `cuModuleGetGlobal` (a file-scope `__device__` / `__constant__` variable), `cuMemAlloc /
  Free`, `cuMemcpy*` and `cuMemsetD8/16/32` (and their Async forms): device memory is host
  memory.
  The image NVRTC "returns" is a token that names the emulated library; `cuModuleLoadData`
  turns it back into the library. Kernel parameters are an address of an array of pointers, a
  `(values, types)` pair as cuda-python accepts (type None: a pointer-like value, or a structure
  passed by value, a ctypes `Structure` or an object with `getPtr` and no `__int__`), or a NumPy
  array of addresses. Any other
  driver call raises `EmulationError` naming it (graphs, events, im2col tensor maps ...);
- the device the host code sees (`gate.hostview.target_device(EMULATED)`): the static tier's
  target, an sm_90a GPU, so a host that picks a kernel by architecture picks the one the device
  tier runs (TMA and wgmma kernels included). Inputs are host tensors that say they are on
  `cuda:0` (`host_call`), and tensors made "on the GPU" are made on the host.

Everything is put back when the context ends. Nothing here imports torch or CUDA at import.
"""
from __future__ import annotations

import contextlib
import ctypes
import enum
import hashlib
import importlib
import sys
import threading
import types
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any, Sequence

from gate.cudacpu.library import BuildError, EmulationError, Library, build
from gate.target import STATIC_TARGET

__all__ = ["EMULATED", "CpuFunction", "emulated", "host_call", "nvrtc_check_enabled"]

# The static target's properties (an H100, sm_90a): host code takes the path it takes there,
# TMA / wgmma kernels included, so the emulate tier checks what the device tier runs.
EMULATED = replace(STATIC_TARGET, device_name="cudacpu (CUDA emulated on the CPU as an sm_90a device)")
_TOKEN = b"CUDACPU-LIBRARY:"
_LIBRARIES: dict[str, Library] = {}
_LOCK = threading.Lock()


@dataclass(frozen=True, slots=True)
class CpuFunction:
    """A kernel of an emulated library: what `get_function` / `cuModuleGetFunction` return
    (`function_of`). Its handle (`int()`) is that of a loaded module's CUfunction: one per
    library and kernel for the process's life, never handed to another kernel (an object's
    `id` is reused once it is collected, and a launch monitor that names kernels by handle
    would then name one kernel after another)."""

    library: Library
    name: str
    handle: int

    def __int__(self) -> int:
        return self.handle


_HANDLES: dict[tuple[int, str], CpuFunction] = {}


def function_of(library: Library, kernel: str) -> CpuFunction:
    """The one `CpuFunction` of `kernel` in `library` (libraries live as long as the process:
    `_LIBRARIES`)."""
    with _LOCK:
        key = (id(library), kernel)
        found = _HANDLES.get(key)
        if found is None or found.library is not library:
            found = _HANDLES[key] = CpuFunction(library, kernel, 0x10000 + 16 * len(_HANDLES))
        return found


def nvrtc_check_enabled() -> bool:
    """Whether sources also go through NVRTC (when importable; `KLINEAGE_CUDACPU_NVRTC=0`
    switches it off)."""
    import os  # noqa: PLC0415

    if os.environ.get("KLINEAGE_CUDACPU_NVRTC", "1") == "0":
        return False
    try:
        importlib.import_module("cuda.bindings.nvrtc")
    except ImportError:
        return False
    return True


def _register(lib: Library) -> bytes:
    key = hashlib.sha256(str(lib.path).encode()).hexdigest()[:32]
    with _LOCK:
        _LIBRARIES[key] = lib
    return _TOKEN + key.encode() + b"\0"


def _library_of(image: Any) -> Library | None:
    if isinstance(image, int):
        data = ctypes.string_at(image, len(_TOKEN) + 33)
    elif hasattr(image, "tobytes"):
        data = image.tobytes()
    else:
        data = bytes(image)
    at = data.find(_TOKEN)
    if at < 0:
        return None
    key = data[at + len(_TOKEN):at + len(_TOKEN) + 32].decode(errors="replace")
    with _LOCK:
        return _LIBRARIES.get(key)


def _options(options: Sequence[Any]) -> tuple[dict[str, str], list[str]]:
    """(-D defines, -I folders) of NVRTC options; the rest does not change the emulation."""
    defines: dict[str, str] = {}
    include: list[str] = []
    items = [o.decode() if isinstance(o, (bytes, bytearray)) else str(o) for o in options]
    i = 0
    while i < len(items):
        opt = items[i]
        for flag, store in (("-D", "define"), ("--define-macro=", "define"), ("-I", "include"),
                            ("--include-path=", "include")):
            if opt.startswith(flag):
                value = opt[len(flag):]
                if not value and i + 1 < len(items):
                    i += 1
                    value = items[i]
                if store == "define":
                    name, _, val = value.partition("=")
                    defines[name] = val or "1"
                else:
                    include.append(value)
                break
        i += 1
    return defines, include


# ---------------------------------------------------------------------------------------------
# experts.cudahost

def _cudahost_module(real: types.ModuleType, driver: types.ModuleType,
                     real_nvrtc: types.ModuleType | None) -> types.ModuleType:
    mod = types.ModuleType(real.__name__, real.__doc__)
    mod.__dict__.update({k: v for k, v in vars(real).items() if not k.startswith("__")})
    mod.__file__ = getattr(real, "__file__", None)
    nvrtc_check = nvrtc_check_enabled() and real_nvrtc is not None

    def compile_source(source: str, *, name: str = "kernel.cu", arch: str | None = None,
                       options: Sequence[str] = (), include: Any = None,
                       defines: dict[str, Any] | None = None) -> Any:
        opts = [*(f"-D{k}={v}" for k, v in sorted((defines or {}).items())), *options,
                *(f"-I{d}" for d in include or [])]
        if arch:
            opts.append(f"--gpu-architecture={arch}")
        ptx, log = _nvrtc_compile(real_nvrtc, source, name, opts) if nvrtc_check else ("", None)
        if log is not None:
            raise real.CompileError(f"NVRTC could not compile {name} for {arch or real.DEFAULT_ARCH}", log)
        defs, incs = _options(options)
        try:
            lib = build(source, name=name, defines={**defs, **(defines or {})},
                        include=[*(include or []), *incs])
        except BuildError as exc:
            raise real.CompileError(f"the emulator cannot build {name}", str(exc)) from None
        key = hashlib.sha256("\0".join([source, name, *opts]).encode()).hexdigest()
        return real.Compiled(key=key, name=name, arch=arch or real.DEFAULT_ARCH, options=tuple(opts),
                             ptx=ptx, cubin=_register(lib), log="")

    def get_function(compiled: Any, kernel: str) -> CpuFunction:
        lib = _library_of(compiled.cubin or b"")
        if lib is None:
            raise real.CudaError(f"cuModuleLoadData({compiled.name}) failed: not an emulated image")
        if not lib.has(kernel):
            raise real.CudaError(f"cuModuleGetFunction({kernel}) failed: CUDA_ERROR_NOT_FOUND (500)")
        return function_of(lib, kernel)

    def set_dynamic_shared(func: Any, nbytes: int) -> None:
        if isinstance(func, CpuFunction):
            func.library.opt_in[func.name] = max(int(nbytes), func.library.opt_in.get(func.name, 0))

    def function_attributes(func: Any) -> dict[str, int]:
        return {"registers": 0, "shared_bytes": 0, "local_bytes": 0, "max_threads": 1024}

    def launch(func: Any, grid: Any, block: Any, shared_bytes: int, args: Sequence[Any],
               stream: Any = None) -> None:
        g, b = real._dim3(grid), real._dim3(block)
        packed = real.pack_args(args)
        result = driver.cuLaunchKernel(func, *g, *b, int(shared_bytes), stream, packed.address, 0)
        real._check(result, "cuLaunchKernel")

    mod.compile_source = compile_source
    mod.get_function = get_function
    mod.set_dynamic_shared = set_dynamic_shared
    mod.function_attributes = function_attributes
    mod.launch = launch
    mod.default_arch = lambda: EMULATED.name
    mod.stream_of = lambda stream=None: stream
    return mod


# ---------------------------------------------------------------------------------------------
# cuda.bindings.driver / nvrtc

class _Result(enum.IntEnum):
    CUDA_SUCCESS = 0
    CUDA_ERROR_INVALID_VALUE = 1
    CUDA_ERROR_NOT_FOUND = 500
    CUDA_ERROR_LAUNCH_FAILED = 719
    CUDA_ERROR_NOT_SUPPORTED = 801


class _NvrtcResult(enum.IntEnum):
    NVRTC_SUCCESS = 0
    NVRTC_ERROR_INVALID_INPUT = 3
    NVRTC_ERROR_COMPILATION = 6


def _real(name: str) -> types.ModuleType | None:
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


class _Program:
    def __init__(self, source: str, name: str) -> None:
        self.source, self.name = source, name
        self.image: bytes = b""
        self.log = ""


def _address(value: Any) -> int:
    """The host address behind a device pointer or host buffer a driver call was given."""
    if isinstance(value, int):
        return value
    if hasattr(value, "data_ptr"):
        return int(value.data_ptr())
    if hasattr(value, "ctypes") and hasattr(value, "dtype"):  # a NumPy array
        return int(value.ctypes.data)
    if isinstance(value, bytearray):
        return ctypes.addressof((ctypes.c_char * len(value)).from_buffer(value))
    if isinstance(value, bytes):
        return ctypes.cast(ctypes.c_char_p(value), ctypes.c_void_p).value or 0
    if isinstance(value, ctypes._SimpleCData) or isinstance(value, ctypes.Array):
        return ctypes.addressof(value)
    return int(value)  # CUdeviceptr and the like


def _kernel_params(params: Any) -> Any:
    """What `cuLaunchKernel` got as kernelParams, as `Library.launch` takes it (and what must
    stay alive until the launch returns)."""
    if params is None or params == 0:
        return 0, None
    if isinstance(params, int):
        return params, None
    if hasattr(params, "ctypes") and hasattr(params, "dtype"):  # a NumPy array of addresses
        return int(params.ctypes.data), params
    if isinstance(params, tuple) and len(params) == 2 and isinstance(params[0], (tuple, list)):
        values, kinds = params
        keep, pointers = [], []
        for value, kind in zip(values, kinds):
            if kind is None and isinstance(value, ctypes.Structure):  # by value, as cuda-python
                keep.append(value)
                pointers.append(ctypes.addressof(value))
                continue
            if kind is None and callable(getattr(value, "getPtr", None)) and \
                    not hasattr(value, "__int__"):  # a structure by value (CUtensorMap ...)
                keep.append(value)
                pointers.append(int(value.getPtr()))
                continue
            if kind is None:  # a pointer-like object (CUdeviceptr, an int address, a tensor)
                if hasattr(value, "data_ptr"):
                    value = value.data_ptr()
                cell: Any = ctypes.c_void_p(int(value))
            else:
                cell = kind(value) if not isinstance(value, kind) else value
            keep.append(cell)
            pointers.append(ctypes.addressof(cell))
        array = (ctypes.c_void_p * max(1, len(pointers)))(*pointers)
        keep.append(array)
        return ctypes.addressof(array), keep
    raise TypeError(f"kernelParams of type {type(params).__name__} are not emulated")


def _driver_module(real: types.ModuleType | None) -> types.ModuleType:
    mod = types.ModuleType("cuda.bindings.driver", "cuda.bindings.driver answered by the CPU emulator")
    result = getattr(real, "CUresult", _Result)
    ok = result.CUDA_SUCCESS

    def err(name: str) -> Any:
        return getattr(result, name, getattr(_Result, name))

    handle = (lambda cls, v: getattr(real, cls)(v)) if real is not None else (lambda cls, v: v)
    attr_names = {
        "COMPUTE_CAPABILITY_MAJOR": EMULATED.major, "COMPUTE_CAPABILITY_MINOR": EMULATED.minor,
        "MULTIPROCESSOR_COUNT": EMULATED.sm_count, "WARP_SIZE": EMULATED.warp_size,
        "MAX_THREADS_PER_BLOCK": EMULATED.max_threads_per_block,
        "MAX_SHARED_MEMORY_PER_BLOCK": EMULATED.shared_memory_per_block,
        "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN": EMULATED.shared_memory_per_block_optin,
        "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR": EMULATED.shared_memory_per_sm,
        "MAX_REGISTERS_PER_BLOCK": EMULATED.registers_per_block,
        "MAX_THREADS_PER_MULTIPROCESSOR": EMULATED.max_threads_per_sm,
        "L2_CACHE_SIZE": EMULATED.l2_cache_bytes, "CLOCK_RATE": EMULATED.sm_clock_khz,
    }

    def attribute(attrib: Any, dev: Any = 0) -> Any:
        name = getattr(attrib, "name", str(attrib)).replace("CU_DEVICE_ATTRIBUTE_", "")
        return ok, attr_names.get(name, 0)

    def module_load(image: Any, *rest: Any) -> Any:
        lib = _library_of(image)
        if lib is None:
            return (err("CUDA_ERROR_INVALID_VALUE"), None)
        return ok, lib

    def get_function(module: Any, name: Any) -> Any:
        kernel = name.decode() if isinstance(name, (bytes, bytearray)) else str(name)
        if not isinstance(module, Library) or not module.has(kernel):
            return (err("CUDA_ERROR_NOT_FOUND"), None)
        return ok, function_of(module, kernel)

    def func_set_attribute(func: Any, attrib: Any, value: int) -> Any:
        if isinstance(func, CpuFunction) and "DYNAMIC_SHARED" in getattr(attrib, "name", str(attrib)):
            func.library.opt_in[func.name] = int(value)
        return (ok,)

    def func_get_attribute(attrib: Any, func: Any) -> Any:
        name = getattr(attrib, "name", str(attrib))
        return ok, 1024 if "MAX_THREADS" in name else 0

    def func_get_name(func: Any) -> Any:
        return (ok, func.name.encode()) if isinstance(func, CpuFunction) else (err("CUDA_ERROR_INVALID_VALUE"), b"")

    def launch_kernel(func: Any, gx: int, gy: int, gz: int, bx: int, by: int, bz: int, shared: int,
                      stream: Any, params: Any, extra: Any) -> Any:
        if not isinstance(func, CpuFunction):
            return (err("CUDA_ERROR_INVALID_VALUE"),)
        address, keep = _kernel_params(params)
        try:
            func.library.launch(func.name, (int(gx), int(gy), int(gz)), (int(bx), int(by), int(bz)),
                                int(shared), address)
        except EmulationError as exc:
            raise EmulationError(f"cuLaunchKernel: {exc}") from None
        del keep
        return (ok,)

    def success(*values: Any) -> Any:
        return lambda *a, **k: (ok, *values) if values else (ok,)

    def launch_kernel_ex(config: Any, func: Any, params: Any, extra: Any) -> Any:
        for i in range(int(getattr(config, "numAttrs", 0) or 0)):
            attr = config.attrs[i]
            if "CLUSTER_DIMENSION" in getattr(getattr(attr, "id", None), "name", ""):
                dims = attr.value.clusterDim
                if (int(dims.x), int(dims.y), int(dims.z)) != (1, 1, 1):
                    raise EmulationError("cuLaunchKernelEx: thread block clusters are not emulated")
        return launch_kernel(func, config.gridDimX, config.gridDimY, config.gridDimZ, config.blockDimX,
                             config.blockDimY, config.blockDimZ, config.sharedMemBytes, config.hStream,
                             params, extra)

    # Device memory is host memory: allocations are kept here until freed.
    allocations: dict[int, Any] = {}

    def mem_alloc(nbytes: int) -> Any:
        buf = ctypes.create_string_buffer(max(1, int(nbytes)) + 255)
        address = (ctypes.addressof(buf) + 255) & ~255  # cudaMalloc's alignment
        allocations[address] = buf
        return ok, handle("CUdeviceptr", address)

    def mem_free(ptr: Any) -> Any:
        allocations.pop(_address(ptr), None)
        return (ok,)

    def memcpy(dst: Any, src: Any, nbytes: int, *rest: Any) -> Any:
        ctypes.memmove(_address(dst), _address(src), int(nbytes))
        return (ok,)

    def memset(width: int) -> Any:
        def fill(ptr: Any, value: int, count: int, *rest: Any) -> Any:
            kind = {1: ctypes.c_uint8, 2: ctypes.c_uint16, 4: ctypes.c_uint32}[width]
            (kind * int(count)).from_address(_address(ptr))[:] = [int(value)] * int(count)
            return (ok,)
        return fill

    def module_global(module: Any, name: Any) -> Any:
        key = name.decode() if isinstance(name, (bytes, bytearray)) else str(name)
        found = module.global_symbol(key) if isinstance(module, Library) else None
        if found is None:
            return (err("CUDA_ERROR_NOT_FOUND"), None, 0)
        return ok, handle("CUdeviceptr", found[0]), found[1]

    def encode_tiled(dtype: Any, rank: int, address: Any, dims: Any, strides: Any, box: Any,
                     element_strides: Any, interleave: Any, swizzle: Any, l2: Any, oob: Any) -> Any:
        if real is None:
            return (err("CUDA_ERROR_NOT_SUPPORTED"), None)
        words = _tensor_map_words(dtype, int(rank), address, dims, strides, box, element_strides,
                                  interleave, swizzle, oob)
        if words is None:
            return (err("CUDA_ERROR_INVALID_VALUE"), None)
        tmap = real.CUtensorMap()
        ctypes.memmove(int(tmap.getPtr()), (ctypes.c_uint64 * 16)(*words), 128)
        return ok, tmap

    ctx = handle("CUcontext", 1) if real is not None else 1
    functions = {
        "cuInit": success(), "cuDriverGetVersion": success(12080),
        "cuDeviceGet": lambda ordinal: (ok, handle("CUdevice", int(ordinal))),
        "cuDeviceGetCount": success(1), "cuDeviceGetAttribute": attribute,
        "cuDeviceGetName": lambda n, d=0: (ok, EMULATED.device_name.encode()[: int(n)]),
        "cuDeviceTotalMem": success(EMULATED.total_memory),
        "cuCtxGetCurrent": success(ctx), "cuCtxSetCurrent": success(), "cuCtxGetDevice": success(0),
        "cuCtxCreate": success(ctx), "cuCtxDestroy": success(), "cuCtxSynchronize": success(),
        "cuCtxPushCurrent": success(), "cuCtxPopCurrent": success(ctx),
        "cuDevicePrimaryCtxRetain": success(ctx), "cuDevicePrimaryCtxRelease": success(),
        "cuModuleLoadData": module_load, "cuModuleLoadDataEx": module_load,
        "cuModuleGetFunction": get_function, "cuModuleUnload": success(),
        "cuLibraryLoadData": module_load,
        "cuFuncSetAttribute": func_set_attribute, "cuFuncGetAttribute": func_get_attribute,
        "cuFuncGetName": func_get_name, "cuFuncSetCacheConfig": success(),
        "cuLaunchKernel": launch_kernel, "cuLaunchKernelEx": launch_kernel_ex,
        "cuTensorMapEncodeTiled": encode_tiled,
        "cuModuleGetGlobal": module_global, "cuMemAlloc": mem_alloc, "cuMemAllocAsync": mem_alloc,
        "cuMemFree": mem_free, "cuMemFreeAsync": mem_free,
        **{name: memcpy for name in ("cuMemcpy", "cuMemcpyAsync", "cuMemcpyHtoD", "cuMemcpyHtoDAsync",
                                     "cuMemcpyDtoH", "cuMemcpyDtoHAsync", "cuMemcpyDtoD", "cuMemcpyDtoDAsync")},
        "cuMemsetD8": memset(1), "cuMemsetD8Async": memset(1), "cuMemsetD16": memset(2),
        "cuMemsetD16Async": memset(2), "cuMemsetD32": memset(4), "cuMemsetD32Async": memset(4),
        "cuStreamCreate": success(handle("CUstream", 0) if real is not None else 0),
        "cuStreamSynchronize": success(), "cuStreamDestroy": success(), "cuStreamQuery": success(),
        "cuGetErrorString": lambda e: (ok, getattr(e, "name", str(e)).encode()),
        "cuGetErrorName": lambda e: (ok, getattr(e, "name", str(e)).encode()),
    }
    mod.__dict__.update(functions)
    mod.CUresult = result
    emulated_names = set(functions)

    def missing(name: str) -> Any:
        target = getattr(real, name, None)
        if name.startswith("cu") and name not in emulated_names and callable(target) \
                and not isinstance(target, type):  # a driver call; types (cuuint64_t ...) pass
            def refuse(*args: Any, **kwargs: Any) -> Any:
                raise EmulationError(f"the CUDA driver call {name} is not emulated on the CPU")
            return refuse
        if real is not None and hasattr(real, name):
            return getattr(real, name)
        raise AttributeError(name)

    mod.__getattr__ = missing  # type: ignore[attr-defined]
    return mod


_ELEMENT_BYTES = {"UINT8": 1, "UINT16": 2, "UINT32": 4, "INT32": 4, "UINT64": 8, "INT64": 8,
                  "FLOAT16": 2, "FLOAT32": 4, "FLOAT64": 8, "BFLOAT16": 2, "FLOAT32_FTZ": 4,
                  "TFLOAT32": 4, "TFLOAT32_FTZ": 4}
_SWIZZLE = {"SWIZZLE_NONE": 0, "SWIZZLE_32B": 1, "SWIZZLE_64B": 2, "SWIZZLE_128B": 3}
TENSOR_MAP_MAGIC = 0x3150434144554343  # "CUDACPU1": cudacpu_ptx.h's TensorMap reads the same words


def _tensor_map_words(dtype: Any, rank: int, address: Any, dims: Any, strides: Any, box: Any,
                      element_strides: Any, interleave: Any, swizzle: Any, oob: Any) -> list[int] | None:
    """The 16 words of an emulated tensor map (tile mode, rank 1-5, element strides 1, no
    interleave, zero fill); None for anything else."""
    def ints(values: Any) -> list[int]:
        return [int(getattr(v, "value", v) if not isinstance(v, int) else v) for v in values]

    name = getattr(dtype, "name", str(dtype)).replace("CU_TENSOR_MAP_DATA_TYPE_", "")
    esize = _ELEMENT_BYTES.get(name)
    mode = _SWIZZLE.get(getattr(swizzle, "name", str(swizzle)).replace("CU_TENSOR_MAP_", ""))
    flat = getattr(interleave, "name", str(interleave)).endswith("INTERLEAVE_NONE")
    dims_, strides_, box_, steps = ints(dims), ints(strides), ints(box), ints(element_strides)
    if esize is None or mode is None or not flat or not 1 <= rank <= 5 or any(s != 1 for s in steps) \
            or len(dims_) != rank or len(box_) != rank or len(strides_) != rank - 1 or "NAN" in str(oob):
        return None
    words = [0] * 16
    words[0] = TENSOR_MAP_MAGIC
    words[1] = int(getattr(address, "value", address)) if not isinstance(address, int) else address
    words[2] = rank | (esize << 8) | (mode << 16)
    words[3:3 + rank] = dims_
    words[8:8 + rank - 1] = strides_
    for i, b in enumerate(box_):
        words[12 + i // 4] |= (b & 0xFFFF) << (16 * (i % 4))
    return words


def _nvrtc_module(real: types.ModuleType | None, nvrtc_check: bool) -> types.ModuleType:
    from experts import cudahost  # noqa: PLC0415  (plain Python: its bindings load lazily)

    mod = types.ModuleType("cuda.bindings.nvrtc", "cuda.bindings.nvrtc answered by the CPU emulator")
    result = getattr(real, "nvrtcResult", _NvrtcResult)
    ok = result.NVRTC_SUCCESS

    def create(source: Any, name: Any, *rest: Any) -> Any:
        text = source.decode() if isinstance(source, (bytes, bytearray)) else str(source)
        label = name.decode() if isinstance(name, (bytes, bytearray)) else str(name or "kernel.cu")
        return ok, _Program(text, label or "kernel.cu")

    def compile_program(prog: _Program, n: int = 0, options: Sequence[Any] = ()) -> Any:
        opts = list(options or [])[: int(n) if n else None]
        if nvrtc_check and real is not None:
            _, log = _nvrtc_compile(real, prog.source, prog.name, opts)
            if log is not None:
                prog.log = log
                return (result.NVRTC_ERROR_COMPILATION,)
        defines, include = _options(opts)
        try:
            lib = build(prog.source, name=prog.name, defines=defines, include=include)
        except BuildError as exc:
            prog.log = str(exc)
            return (result.NVRTC_ERROR_COMPILATION,)
        prog.image = _register(lib)
        return (ok,)

    def size_of(prog: _Program) -> Any:
        return ok, len(prog.image)

    def copy_into(prog: _Program, buf: Any) -> Any:
        data = prog.image
        if cudahost.shared_byte(buf):  # the process's one-byte object: left as it is
            return (ok,)
        if isinstance(buf, bytearray):
            buf[: len(data)] = data
        elif isinstance(buf, int):
            ctypes.memmove(buf, data, len(data))
        elif isinstance(buf, bytes):  # cuda-python fills a bytes buffer in place
            ctypes.memmove(ctypes.c_char_p(buf), data, min(len(buf), len(data)))
        elif hasattr(buf, "ctypes"):
            ctypes.memmove(buf.ctypes.data, data, len(data))
        return (ok,)

    def log_size(prog: _Program) -> Any:
        return ok, len(prog.log.encode()) + 1

    def log_into(prog: _Program, buf: Any) -> Any:
        data = prog.log.encode() + b"\0"
        if cudahost.shared_byte(buf):  # an empty log's terminator: nothing to write
            return (ok,)
        if isinstance(buf, bytes):
            ctypes.memmove(ctypes.c_char_p(buf), data, min(len(buf), len(data)))
        elif isinstance(buf, bytearray):
            buf[: len(data)] = data
        return (ok,)

    def unsupported(name: str) -> Any:
        def refuse(*args: Any, **kwargs: Any) -> Any:
            raise EmulationError(f"{name} is not emulated (name expressions of template kernels)")
        return refuse

    mod.__dict__.update({
        "nvrtcCreateProgram": create, "nvrtcCompileProgram": compile_program,
        "nvrtcGetPTXSize": size_of, "nvrtcGetPTX": copy_into, "nvrtcGetCUBINSize": size_of,
        "nvrtcGetCUBIN": copy_into, "nvrtcGetProgramLogSize": log_size,
        "nvrtcGetProgramLog": log_into, "nvrtcDestroyProgram": lambda prog: (ok,),
        "nvrtcVersion": lambda: (ok, 12, 8),
        "nvrtcGetErrorString": lambda e: (ok, getattr(e, "name", str(e)).encode()),
        "nvrtcAddNameExpression": unsupported("nvrtcAddNameExpression"),
        "nvrtcGetLoweredName": unsupported("nvrtcGetLoweredName"),
        "nvrtcResult": result,
    })
    if real is not None:
        mod.__getattr__ = lambda name: getattr(real, name)  # type: ignore[attr-defined]
    return mod


_NVRTC_SEEN: dict[str, tuple[str, str | None]] = {}


def _nvrtc_compile(nvrtc: types.ModuleType, source: str, name: str, options: Sequence[Any]
                   ) -> tuple[str, str | None]:
    """(PTX, None) when the real NVRTC (`nvrtc`, the bindings module) compiles `source` with
    `options` (for sm_90a unless they name an architecture); ("", its log) when it does not.
    Cached in-process by the inputs."""
    from experts import cudahost  # noqa: PLC0415  (plain Python: its bindings load lazily)

    opts = [o.decode() if isinstance(o, (bytes, bytearray)) else str(o) for o in options]
    if not any(o.startswith(("--gpu-architecture", "-arch")) for o in opts):
        opts.append(f"--gpu-architecture={cudahost.DEFAULT_ARCH}")
    if not any(o.startswith("-std") for o in opts):
        opts.append("-std=c++17")
    opts = cudahost.with_cuda_headers(opts)
    key = hashlib.sha256("\0".join([source, name, *opts]).encode()).hexdigest()
    hit = _NVRTC_SEEN.get(key)
    if hit is not None:
        return hit
    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], [])
    try:
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), [o.encode() for o in opts])
        if int(err) != 0:
            _, size = nvrtc.nvrtcGetProgramLogSize(prog)
            log = b" " * size
            nvrtc.nvrtcGetProgramLog(prog, log)
            out: tuple[str, str | None] = ("", log.rstrip(b"\0").decode(errors="replace"))
        else:
            _, size = nvrtc.nvrtcGetPTXSize(prog)
            ptx = b" " * size
            nvrtc.nvrtcGetPTX(prog, ptx)
            out = (ptx.rstrip(b"\0").decode(errors="replace"), None)
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    _NVRTC_SEEN[key] = out
    return out


# ---------------------------------------------------------------------------------------------
# Installing the stand-ins

@contextlib.contextmanager
def emulated() -> Iterator[types.ModuleType]:
    """Within: `experts.cudahost` and the CUDA bindings answer from the emulator (see the
    module docstring). Yields the stand-in driver module."""
    real_host = importlib.import_module("experts.cudahost")
    real_driver = _real("cuda.bindings.driver")
    real_nvrtc = _real("cuda.bindings.nvrtc")
    driver = _driver_module(real_driver)
    nvrtc = _nvrtc_module(real_nvrtc, nvrtc_check_enabled())
    host = _cudahost_module(real_host, driver, real_nvrtc)
    host._driver = lambda: driver  # noqa: SLF001  (the helper's own lookups)
    host._nvrtc = lambda: nvrtc  # noqa: SLF001
    modules = {"experts.cudahost": host, "cuda.bindings.driver": driver, "cuda.bindings.nvrtc": nvrtc}
    if real_driver is not None:
        modules.update({"cuda.cuda": driver, "cuda.nvrtc": nvrtc})
    saved = {name: sys.modules.get(name) for name in modules}
    parents = [("experts", "cudahost", host)]
    if real_driver is not None:
        parents += [("cuda.bindings", "driver", driver), ("cuda.bindings", "nvrtc", nvrtc)]
    saved_attrs = []
    try:
        sys.modules.update(modules)
        for parent, attr, value in parents:
            pkg = sys.modules.get(parent)
            if pkg is not None:
                saved_attrs.append((pkg, attr, getattr(pkg, attr, None)))
                setattr(pkg, attr, value)
        yield driver
    finally:
        for name, value in saved.items():
            if value is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = value
        for pkg, attr, value in saved_attrs:
            if value is None:
                with contextlib.suppress(AttributeError):
                    delattr(pkg, attr)
            else:
                setattr(pkg, attr, value)


def host_call(run: Any, *inputs: Any) -> Any:
    """`run(*inputs)` as on the emulated GPU: device queries answer `EMULATED`, the inputs say
    they are on `cuda:0`, and what `run` returns comes back as plain host tensors."""
    import torch  # noqa: PLC0415
    from torch.utils._pytree import tree_map  # noqa: PLC0415

    from gate import hostview  # noqa: PLC0415

    with hostview.target_device(EMULATED), hostview.target_tensors() as put:
        out = run(*put(inputs))
    return tree_map(lambda v: v.as_subclass(torch.Tensor) if isinstance(v, torch.Tensor)
                    and type(v) is not torch.Tensor else v, out)
