"""What a candidate's host code sees while the static tier traces it: the target GPU.

The static tier runs the host function `run` once per shape variant to find its launches, on
a machine that may have no GPU. Host code that branches on where its inputs live, sizes a
persistent grid by the SM count, or picks a kernel by compute capability would otherwise show
its CPU path, or fail. Three views make it see the static target (`gate.target`) instead:

- `target_device(props)`: `torch.cuda`'s device queries (properties, capability, current
  device and stream, availability) and Triton's active driver answer from `props`.
- `target_tensors()`: host tensors that say they live on `cuda:0`, and a torch function mode
  under which a tensor made or moved "on the GPU" is made on the host with the same claim.
  The values are real, so host code may read them.
- `record_cuda_launches(host)`: `experts.cudahost`'s kernel lookup, dynamic shared memory
  opt-in and launch are recorded instead of made (`CudaLaunches`), and host-side tensor-map
  encoders answer with an empty descriptor: nothing reaches a GPU.
- `host_libraries(seen, host_text, props)`: the same for hosts that do not go through
  `experts.cudahost`: `cuda.bindings.driver`'s context, device, module, function and launch
  calls are answered from `props` and recorded (`record_driver`); a CuPy host of its own
  source gets a stand-in `cupy` whose `RawKernel` / `RawModule` compile and launch through
  `experts.cudahost` (`cupy_stand_in`: recorded there, or run by the emulate tier's
  emulator); `torch.utils.cpp_extension.load_inline` builds nothing and gives a module
  whose functions record the `<<<...>>>` launches their C++ makes (`gate.hostforms`).

Each is a context manager that puts back what it replaced. Nothing here is imported before
the worker imports torch (no GPU library at module import).
"""
from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import ModuleType, SimpleNamespace
from typing import Any

from gate.target import TargetProperties


@contextlib.contextmanager
def _patched(owner: Any, replacements: dict[str, Any]) -> Iterator[None]:
    missing = object()
    saved = {name: getattr(owner, name, missing) for name in replacements}
    try:
        for name, value in replacements.items():
            setattr(owner, name, value)
        yield
    finally:
        for name, value in saved.items():
            if value is missing:
                delattr(owner, name)
            else:
                setattr(owner, name, value)


# ---------------------------------------------------------------------------------------------
# Device queries

def torch_properties(props: TargetProperties) -> SimpleNamespace:
    """`props` under the attribute names of `torch.cuda.get_device_properties(...)`."""
    return SimpleNamespace(
        name=props.device_name, major=props.major, minor=props.minor,
        multi_processor_count=props.sm_count, total_memory=props.total_memory,
        is_integrated=0, is_multi_gpu_board=0, warp_size=props.warp_size,
        max_threads_per_multi_processor=props.max_threads_per_sm,
        max_threads_per_block=props.max_threads_per_block,
        regs_per_multiprocessor=props.registers_per_sm, L2_cache_size=props.l2_cache_bytes,
        shared_memory_per_block=props.shared_memory_per_block,
        shared_memory_per_block_optin=props.shared_memory_per_block_optin,
        shared_memory_per_multiprocessor=props.shared_memory_per_sm,
        clock_rate=props.sm_clock_khz, memory_clock_rate=props.memory_clock_khz,
        memory_bus_width=props.memory_bus_width_bits, gcnArchName="NONE", uuid="static-target")


def triton_properties(props: TargetProperties) -> dict[str, int]:
    """`props` as Triton's `driver.active.utils.get_device_properties(device)` gives them."""
    return {"max_shared_mem": props.shared_memory_per_block_optin,
            "max_num_regs": props.registers_per_block, "multiprocessor_count": props.sm_count,
            "warpSize": props.warp_size, "sm_clock_rate": props.sm_clock_khz,
            "mem_clock_rate": props.memory_clock_khz, "mem_bus_width": props.memory_bus_width_bits}


class _Stream:
    """The current stream of the target device: the legacy default stream (handle 0)."""

    cuda_stream = 0

    def __init__(self, device: Any = None) -> None:
        self.device = device

    def synchronize(self) -> None:
        return None

    def wait_stream(self, other: Any) -> None:
        return None


class _TargetDriver:
    """Triton's active driver for host code traced at the static tier: device queries only."""

    def __init__(self, torch: ModuleType, props: TargetProperties) -> None:
        self._torch = torch
        self._props = props
        self.utils = SimpleNamespace(
            get_device_properties=lambda *a, **k: triton_properties(props),
            get_device_capability=lambda *a, **k: (props.major, props.minor),
            get_current_device=lambda: 0, set_current_device=lambda *a: None)

    def get_current_target(self) -> Any:
        from triton.backends.compiler import GPUTarget

        return GPUTarget("cuda", self._props.arch, self._props.warp_size)

    def get_device_capability(self, *args: Any) -> tuple[int, int]:
        return self._props.major, self._props.minor

    def get_current_device(self) -> int:
        return 0

    def set_current_device(self, *args: Any) -> None:
        return None

    def get_current_stream(self, *args: Any) -> int:
        return 0

    def get_active_torch_device(self) -> Any:
        return self._torch.device("cuda", 0)

    def get_device_interface(self) -> Any:
        return self._torch.cuda


@contextlib.contextmanager
def target_device(props: TargetProperties) -> Iterator[None]:
    """Answer `torch.cuda`'s and Triton's device queries from `props` (device 0 only)."""
    import torch

    cuda = torch.cuda
    info = torch_properties(props)
    replacements = {
        "is_available": lambda: True, "device_count": lambda: 1, "current_device": lambda: 0,
        "set_device": lambda *a, **k: None, "synchronize": lambda *a, **k: None,
        "get_device_properties": lambda *a, **k: info,
        "get_device_capability": lambda *a, **k: (props.major, props.minor),
        "get_device_name": lambda *a, **k: props.device_name,
        "current_stream": lambda *a, **k: _Stream(torch.device("cuda", 0)),
        "default_stream": lambda *a, **k: _Stream(torch.device("cuda", 0)),
        "device": lambda *a, **k: contextlib.nullcontext(),
        "stream": lambda *a, **k: contextlib.nullcontext(),
    }
    with contextlib.ExitStack() as stack:
        stack.enter_context(_patched(cuda, replacements))
        runtime = sys.modules.get("triton.runtime.driver")
        if runtime is not None:
            holder = runtime.driver
            stack.enter_context(_patched(holder, {"_active": _TargetDriver(torch, props)}))
        yield


# ---------------------------------------------------------------------------------------------
# Tensors on the target

_TARGET_TYPES: dict[str, Any] = {}


def _target_types() -> tuple[type, type]:
    """(TargetTensor, the torch function mode that keeps GPU tensors on the host), made once."""
    if "tensor" in _TARGET_TYPES:
        return _TARGET_TYPES["tensor"], _TARGET_TYPES["mode"]
    import torch
    from torch.overrides import TorchFunctionMode
    from torch.utils._pytree import tree_map

    gpu = torch.device("cuda", 0)

    class TargetTensor(torch.Tensor):
        """A host tensor that says it lives on the target GPU (`cuda:0`)."""

        @property
        def device(self) -> Any:  # type: ignore[override]
            return gpu

        @property
        def is_cuda(self) -> bool:  # type: ignore[override]
            return True

        def get_device(self) -> int:  # type: ignore[override]
            return 0

    def on_gpu(value: Any) -> bool:
        if isinstance(value, torch.device):
            return value.type == "cuda"
        return isinstance(value, str) and value.split(":")[0] == "cuda"

    def on_host(value: Any) -> bool:
        if isinstance(value, torch.device):
            return value.type == "cpu"
        return value == "cpu" if isinstance(value, str) else False

    def claim(value: Any) -> Any:
        if isinstance(value, torch.Tensor) and not isinstance(value, TargetTensor):
            return value.as_subclass(TargetTensor)
        return value

    def release(value: Any) -> Any:
        return value.as_subclass(torch.Tensor) if isinstance(value, TargetTensor) else value

    class OnTarget(TorchFunctionMode):
        """Makes on the host, as `TargetTensor`s, the tensors host code makes on the GPU."""

        def __torch_function__(self, func: Any, types: Any, args: Any = (),
                               kwargs: Any = None) -> Any:
            kwargs = dict(kwargs or {})
            if func is torch.Tensor.cuda:
                return claim(args[0])
            if func is torch.Tensor.cpu:
                return release(func(*args, **kwargs))
            moved = to_host = False
            device = kwargs.get("device")
            if on_gpu(device) or (isinstance(device, int) and not isinstance(device, bool)):
                kwargs["device"], moved = "cpu", True
            elif on_host(device):
                to_host = True
            if func is torch.Tensor.to:
                fixed = []
                for arg in args:
                    if on_gpu(arg):
                        arg, moved = "cpu", True
                    elif on_host(arg):
                        to_host = True
                    fixed.append(arg)
                args = tuple(fixed)
            out = func(*args, **kwargs)
            if moved:
                return tree_map(claim, out)
            if to_host:
                return tree_map(release, out)
            return out

    _TARGET_TYPES.update(tensor=TargetTensor, mode=OnTarget)
    return TargetTensor, OnTarget


def target_tensor_type() -> type:
    """The class of the tensors `target_tensors` makes and `on_target` returns."""
    return _target_types()[0]


def on_target(value: Any) -> Any:
    """`value` (a tensor, or a tuple/list/dict of them) with every tensor a `TargetTensor`."""
    from torch.utils._pytree import tree_map
    import torch

    tensor_type, _ = _target_types()
    return tree_map(lambda v: v.as_subclass(tensor_type)
                    if isinstance(v, torch.Tensor) and not isinstance(v, tensor_type) else v, value)


@contextlib.contextmanager
def target_tensors() -> Iterator[Callable[[Any], Any]]:
    """While active, tensors made on `cuda` are made on the host as `TargetTensor`s; yields
    `on_target`, to put the inputs there."""
    _, mode = _target_types()
    with mode():
        yield on_target


# ---------------------------------------------------------------------------------------------
# CUDA launches through experts.cudahost

@dataclass(frozen=True, slots=True)
class TracedKernel:
    """What `cudahost.get_function` returns while launches are recorded: the kernel's name."""

    name: str


@dataclass(slots=True)
class CudaLaunches:
    """Per (shape variant, kernel name): the dynamic shared memory (bytes) of each recorded
    launch, and the largest opt-in (`set_dynamic_shared`) host code made. `variant` is the
    variant being traced; the caller sets it. `unsized` counts launches whose shared memory
    only the running host knows (a C++ wrapper's `<<<g, b, bytes>>>` with `bytes` computed)."""

    variant: str = ""
    launched: dict[tuple[str, str], list[int]] = field(default_factory=dict)
    opt_in: dict[tuple[str, str], int] = field(default_factory=dict)
    unsized: int = 0

    def count(self) -> int:
        """How many launches and opt-ins were recorded (so far)."""
        return sum(len(v) for v in self.launched.values()) + len(self.opt_in) + self.unsized

    def launch(self, kernel: str, shared_bytes: int | None) -> None:
        if shared_bytes is None:
            self.unsized += 1
        else:
            self.launched.setdefault((self.variant, kernel), []).append(int(shared_bytes))

    def allow(self, kernel: str, nbytes: int) -> None:
        key = (self.variant, kernel)
        self.opt_in[key] = max(int(nbytes), self.opt_in.get(key, 0))


def _name(func: Any) -> str | None:
    return func.name if isinstance(func, TracedKernel) else None


@contextlib.contextmanager
def record_cuda_launches(host: ModuleType | None, arch: str,
                         seen: CudaLaunches | None = None) -> Iterator[CudaLaunches]:
    """Record, instead of making, the launches host code makes through `experts.cudahost`
    (into `seen`, or a new record).

    The helper's functions are replaced on the module and wherever `host` holds them under
    another name; `default_arch()` answers `arch`. A launch of a kernel that was not looked up
    through `get_function` here is not recorded.
    """
    from experts import cudahost

    seen = seen if seen is not None else CudaLaunches()

    def get_function(compiled: Any, kernel: str) -> TracedKernel:
        return TracedKernel(str(kernel))

    def set_dynamic_shared(func: Any, nbytes: int) -> None:
        if (name := _name(func)) is not None:
            seen.allow(name, nbytes)

    def launch(func: Any, grid: Any, block: Any, shared_bytes: int, args: Any,
               stream: Any = None) -> None:
        if (name := _name(func)) is not None:
            seen.launch(name, int(shared_bytes))

    replacements = {"get_function": get_function, "set_dynamic_shared": set_dynamic_shared,
                    "launch": launch, "default_arch": lambda: arch}
    originals = {getattr(cudahost, name): name for name in replacements}
    with contextlib.ExitStack() as stack:
        stack.enter_context(_patched(cudahost, replacements))
        if host is not None:
            aliases = {name: replacements[originals[value]] for name, value in vars(host).items()
                       if _hashable(value) and value in originals}
            stack.enter_context(_patched(host, aliases))
        stack.enter_context(_empty_tensor_maps())
        yield seen


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


@contextlib.contextmanager
def _empty_tensor_maps() -> Iterator[None]:
    """Host-side TMA descriptor encoders answer success and an empty descriptor: encoding
    needs the driver library, and the traced launch never reads the descriptor."""
    try:
        from cuda.bindings import driver
    except ImportError:
        yield
        return
    names = [n for n in ("cuTensorMapEncodeTiled", "cuTensorMapEncodeIm2col") if hasattr(driver, n)]

    def encode(*args: Any, **kwargs: Any) -> tuple[Any, Any]:
        return driver.CUresult.CUDA_SUCCESS, driver.CUtensorMap()

    with _patched(driver, {name: encode for name in names}):
        yield


# ---------------------------------------------------------------------------------------------
# Hosts that do not go through experts.cudahost

@contextlib.contextmanager
def host_libraries(seen: CudaLaunches, host_text: str, props: TargetProperties,
                   cuda_source: str = "") -> Iterator[None]:
    """While active, the CUDA paths host code of `host_text` may take answer from `props` and
    record their launches into `seen`: the driver (`record_driver`), a stand-in CuPy when the
    host compiles its own source with CuPy (`cupy_stand_in`), and a `load_inline` that builds
    nothing when it calls `load_inline` (`extension_stand_in`; `cuda_source` is the source its
    C++ wrappers' launches are read from). Enter it before the host module is imported."""
    from gate import foreign, hostforms

    with contextlib.ExitStack() as stack:
        stack.enter_context(record_driver(seen, props))
        if foreign.cupy_own_source(host_text):
            stack.enter_context(cupy_stand_in(props))
        if hostforms.builds_extension(host_text):
            stack.enter_context(extension_stand_in(seen, cuda_source))
        yield


_ATTRIBUTES = {
    "COMPUTE_CAPABILITY_MAJOR": "major", "COMPUTE_CAPABILITY_MINOR": "minor",
    "MULTIPROCESSOR_COUNT": "sm_count", "WARP_SIZE": "warp_size",
    "MAX_THREADS_PER_BLOCK": "max_threads_per_block",
    "MAX_THREADS_PER_MULTIPROCESSOR": "max_threads_per_sm",
    "MAX_REGISTERS_PER_BLOCK": "registers_per_block",
    "MAX_REGISTERS_PER_MULTIPROCESSOR": "registers_per_sm",
    "MAX_SHARED_MEMORY_PER_BLOCK": "shared_memory_per_block",
    "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN": "shared_memory_per_block_optin",
    "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR": "shared_memory_per_sm",
    "L2_CACHE_SIZE": "l2_cache_bytes", "CLOCK_RATE": "sm_clock_khz",
    "MEMORY_CLOCK_RATE": "memory_clock_khz", "GLOBAL_MEMORY_BUS_WIDTH": "memory_bus_width_bits",
}


def device_attribute(props: TargetProperties, attribute: Any) -> int:
    """A `CUdevice_attribute` (enum member or its name) of the target; 0 for one not in the
    table (a capability flag the target is taken not to have)."""
    name = getattr(attribute, "name", str(attribute)).removeprefix("CU_DEVICE_ATTRIBUTE_")
    field_ = _ATTRIBUTES.get(name)
    return int(getattr(props, field_)) if field_ else 0


@contextlib.contextmanager
def record_driver(seen: CudaLaunches, props: TargetProperties) -> Iterator[None]:
    """`cuda.bindings.driver` as a host of the target sees it, nothing reaching a GPU:
    initialization, device and context queries answer from `props`; a module load gives a
    handle; `cuModuleGetFunction` / `cuLibraryGetKernel` give a `TracedKernel` of the name;
    `cuLaunchKernel[Ex]` record (kernel, dynamic shared bytes) and `cuFuncSetAttribute` of the
    dynamic shared size an opt-in; synchronizations and unloads succeed. Tensor-map encoders
    give an empty descriptor. Other driver calls are left as they are."""
    try:
        from cuda.bindings import driver
    except ImportError:
        yield
        return
    ok = driver.CUresult.CUDA_SUCCESS
    context, device = driver.CUcontext(1), driver.CUdevice(0)

    def name_of(raw: Any) -> str:
        return raw.decode() if isinstance(raw, (bytes, bytearray)) else str(raw)

    def func_set_attribute(func: Any, attr: Any, value: Any) -> tuple[Any]:
        if isinstance(func, TracedKernel) and "DYNAMIC_SHARED" in getattr(attr, "name", str(attr)):
            seen.allow(func.name, int(value))
        return (ok,)

    def func_get_attribute(attr: Any, func: Any) -> tuple[Any, int]:
        name = getattr(attr, "name", str(attr))
        return ok, props.max_threads_per_block if "MAX_THREADS" in name else 0

    def launch(func: Any, *args: Any, **kwargs: Any) -> tuple[Any]:
        if isinstance(func, TracedKernel):
            seen.launch(func.name, int(args[6]) if len(args) > 6 else 0)
        return (ok,)

    def launch_ex(config: Any, func: Any, *args: Any, **kwargs: Any) -> tuple[Any]:
        if isinstance(func, TracedKernel):
            seen.launch(func.name, int(getattr(config, "sharedMemBytes", 0) or 0))
        return (ok,)

    answers: dict[str, Any] = {
        "cuInit": lambda *a, **k: (ok,),
        "cuDriverGetVersion": lambda *a, **k: (ok, 12080),
        "cuDeviceGet": lambda *a, **k: (ok, device),
        "cuDeviceGetCount": lambda *a, **k: (ok, 1),
        "cuDeviceGetName": lambda *a, **k: (ok, props.device_name.encode()),
        "cuDeviceGetAttribute": lambda attr, *a, **k: (ok, device_attribute(props, attr)),
        "cuDeviceComputeCapability": lambda *a, **k: (ok, props.major, props.minor),
        "cuDevicePrimaryCtxRetain": lambda *a, **k: (ok, context),
        "cuDevicePrimaryCtxRelease": lambda *a, **k: (ok,),
        "cuCtxGetCurrent": lambda *a, **k: (ok, context),
        "cuCtxSetCurrent": lambda *a, **k: (ok,),
        "cuCtxPushCurrent": lambda *a, **k: (ok,),
        "cuCtxPopCurrent": lambda *a, **k: (ok, context),
        "cuCtxGetDevice": lambda *a, **k: (ok, device),
        "cuCtxCreate": lambda *a, **k: (ok, context),
        "cuCtxSynchronize": lambda *a, **k: (ok,),
        "cuStreamSynchronize": lambda *a, **k: (ok,),
        "cuModuleLoadData": lambda *a, **k: (ok, driver.CUmodule(1)),
        "cuModuleLoadDataEx": lambda *a, **k: (ok, driver.CUmodule(1)),
        "cuModuleLoad": lambda *a, **k: (ok, driver.CUmodule(1)),
        "cuModuleUnload": lambda *a, **k: (ok,),
        "cuModuleGetFunction": lambda module, name, *a, **k: (ok, TracedKernel(name_of(name))),
        "cuLibraryLoadData": lambda *a, **k: (ok, driver.CUlibrary(1)),
        "cuLibraryGetKernel": lambda lib, name, *a, **k: (ok, TracedKernel(name_of(name))),
        "cuKernelGetFunction": lambda kernel, *a, **k: (ok, kernel),
        "cuFuncSetAttribute": func_set_attribute,
        "cuKernelSetAttribute": lambda attr, value, kernel, *a, **k: func_set_attribute(kernel, attr, value),
        "cuFuncGetAttribute": func_get_attribute,
        "cuFuncSetCacheConfig": lambda *a, **k: (ok,),
        "cuOccupancyMaxActiveBlocksPerMultiprocessor": lambda *a, **k: (ok, 1),
        "cuLaunchKernel": launch,
        "cuLaunchKernelEx": launch_ex,
        "cuLaunchCooperativeKernel": launch,
    }
    present = {name: fn for name, fn in answers.items() if hasattr(driver, name)}
    with _patched(driver, present), _empty_tensor_maps():
        yield


class _CupyStream:
    """A CuPy stream as the stand-in gives it: the legacy default stream."""

    ptr = 0
    cuda_stream = 0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        return None

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def use(self) -> Any:
        return self

    def synchronize(self) -> None:
        return None


def _cupy_argument(value: Any) -> Any:
    """A CuPy kernel argument as `experts.cudahost.pack_args` takes it, with CuPy's widths: a
    tensor (or a view of one) passes its address, a NumPy scalar its own type (a structured one
    its bytes, by value), a Python `int` 64 bits, a `float` a double, a `bool` one byte."""
    import ctypes

    import numpy as np

    if hasattr(value, "data_ptr"):
        return value
    if isinstance(value, np.void):  # a structured scalar: the struct's bytes, by value
        from kir import hostlaunch

        return hostlaunch.helpers()["_KlHostBytes"](value.tobytes())
    if isinstance(value, np.generic):
        if value.dtype == np.float16:
            return ctypes.c_uint16(int(value.view(np.uint16)))
        return np.ctypeslib.as_ctypes_type(value.dtype)(value.item())
    if isinstance(value, bool):
        return ctypes.c_bool(value)
    if isinstance(value, int):
        return ctypes.c_int64(value)
    if isinstance(value, float):
        return ctypes.c_double(value)
    raise TypeError(f"cannot pass {type(value).__name__} to a kernel")


class _CupyKernel:
    """A stand-in `cupy.RawKernel` that compiles and launches through `experts.cudahost` (as
    that module is where it is called: the static tier's recorder, the emulator's): `code` is
    compiled on the first launch; `max_dynamic_shared_size_bytes` becomes an opt-in."""

    def __init__(self, code: str, name: str, options: Any = ()) -> None:
        object.__setattr__(self, "code", code)
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "options", tuple(options or ()))
        object.__setattr__(self, "attributes", {})
        object.__setattr__(self, "max_dynamic_shared_size_bytes", 0)

    def __call__(self, grid: Any, block: Any, args: Any, *, shared_mem: int = 0,
                 **kwargs: Any) -> None:
        import importlib

        host = importlib.import_module("experts.cudahost")
        compiled = host.compile_source(self.code, name=f"{self.name}.cu", options=self.options)
        func = host.get_function(compiled, self.name)
        if self.max_dynamic_shared_size_bytes:
            host.set_dynamic_shared(func, int(self.max_dynamic_shared_size_bytes))
        host.launch(func, grid, block, int(shared_mem), [_cupy_argument(a) for a in args])

    def compile(self, *args: Any, **kwargs: Any) -> None:
        return None


@contextlib.contextmanager
def cupy_stand_in(props: TargetProperties) -> Iterator[ModuleType]:
    """A `cupy` module (in `sys.modules`) with what a host of its own source uses
    (`gate.foreign.CUPY_OWN_SOURCE`): `RawKernel(code, name)` and `RawModule(code=...)
    .get_function(name)` give `_CupyKernel`s; `asarray` / `from_dlpack` pass a tensor through;
    streams are the default stream; device queries answer from `props`; dtypes are NumPy's.
    A host that reads its source from a file (`RawModule(path=...)`) gets it read here."""
    import numpy as np

    def raw_kernel(code: str = "", name: str = "", options: Any = (), *args: Any,
                   **kwargs: Any) -> _CupyKernel:
        return _CupyKernel(code, str(name), options)

    class RawModule:
        def __init__(self, code: str | None = None, path: str | None = None, options: Any = (),
                     *args: Any, **kwargs: Any) -> None:
            if code is None and path is not None:
                with open(path, encoding="utf-8") as f:
                    code = f.read()
            self.code, self.options = code or "", tuple(options or ())

        def get_function(self, name: str) -> _CupyKernel:
            return _CupyKernel(self.code, str(name), self.options)

        def compile(self, *args: Any, **kwargs: Any) -> None:
            return None

    properties = {"major": props.major, "minor": props.minor,
                  "multiProcessorCount": props.sm_count, "warpSize": props.warp_size,
                  "maxThreadsPerBlock": props.max_threads_per_block,
                  "sharedMemPerBlock": props.shared_memory_per_block,
                  "sharedMemPerBlockOptin": props.shared_memory_per_block_optin,
                  "name": props.device_name.encode()}
    runtime = SimpleNamespace(getDevice=lambda: 0, getDeviceProperties=lambda *a: dict(properties))
    cuda = ModuleType("cupy.cuda")
    cuda.Stream = _CupyStream  # type: ignore[attr-defined]
    cuda.ExternalStream = _CupyStream  # type: ignore[attr-defined]
    cuda.get_current_stream = lambda *a, **k: _CupyStream()  # type: ignore[attr-defined]
    cuda.Device = lambda *a, **k: _CupyStream()  # type: ignore[attr-defined]
    cuda.runtime = runtime  # type: ignore[attr-defined]
    module = ModuleType("cupy")
    module.__dict__.update(
        RawKernel=raw_kernel, RawModule=RawModule, asarray=lambda x, *a, **k: x,
        from_dlpack=lambda x, *a, **k: x, cuda=cuda, ndarray=object, dtype=np.dtype,
        **{n: getattr(np, n) for n in ("int8", "int16", "int32", "int64", "uint8", "uint16",
                                       "uint32", "uint64", "float16", "float32", "float64",
                                       "bool_")})
    saved = {k: sys.modules.get(k) for k in ("cupy", "cupy.cuda")}
    sys.modules["cupy"], sys.modules["cupy.cuda"] = module, cuda
    try:
        yield module
    finally:
        for key, value in saved.items():
            if value is None:
                sys.modules.pop(key, None)
            else:
                sys.modules[key] = value


class _Extension:
    """A stand-in for the module `load_inline` builds: each function records the launches its
    C++ wrapper makes (`gate.hostforms.chevron_launches`; one launch of unknown shared memory
    where none is found) and returns a tensor like its first tensor argument."""

    def __init__(self, seen: CudaLaunches, launches: dict[str, list[Any]]) -> None:
        self._seen = seen
        self._launches = launches

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name.startswith("__"):
            raise AttributeError(name)
        seen, launches = self._seen, self._launches.get(name)

        def call(*args: Any, **kwargs: Any) -> Any:
            import torch

            for launch in launches or [None]:
                if launch is None:
                    seen.unsized += 1
                else:
                    seen.launch(launch.kernel, launch.shared_bytes)
            first = next((a for a in args if isinstance(a, torch.Tensor)), None)
            return torch.empty_like(first) if first is not None else None

        return call


@contextlib.contextmanager
def extension_stand_in(seen: CudaLaunches, cuda_source: str) -> Iterator[None]:
    """`torch.utils.cpp_extension.load_inline` builds nothing while active: it gives an
    `_Extension` over the launches in `cuda_source` (the candidate's; else the call's own
    `cuda_sources`)."""
    import torch.utils.cpp_extension as cpp_extension

    from gate import hostforms

    def load_inline(name: str = "", cpp_sources: Any = "", cuda_sources: Any = None,
                    *args: Any, **kwargs: Any) -> _Extension:
        text = cuda_source
        if not text:
            parts = [cuda_sources] if isinstance(cuda_sources, str) else list(cuda_sources or [])
            text = "\n".join(parts)
        try:
            launches = hostforms.chevron_launches(text) if text else {}
        except Exception:  # noqa: BLE001 — a source kir cannot read: launches of unknown size
            launches = {}
        return _Extension(seen, launches)

    with _patched(cpp_extension, {"load_inline": load_inline}):
        yield
