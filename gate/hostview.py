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
    variant being traced; the caller sets it."""

    variant: str = ""
    launched: dict[tuple[str, str], list[int]] = field(default_factory=dict)
    opt_in: dict[tuple[str, str], int] = field(default_factory=dict)

    def count(self) -> int:
        """How many launches and opt-ins were recorded (so far)."""
        return sum(len(v) for v in self.launched.values()) + len(self.opt_in)


def _name(func: Any) -> str | None:
    return func.name if isinstance(func, TracedKernel) else None


@contextlib.contextmanager
def record_cuda_launches(host: ModuleType | None, arch: str) -> Iterator[CudaLaunches]:
    """Record, instead of making, the launches host code makes through `experts.cudahost`.

    The helper's functions are replaced on the module and wherever `host` holds them under
    another name; `default_arch()` answers `arch`. A launch of a kernel that was not looked up
    through `get_function` here is not recorded.
    """
    from experts import cudahost

    seen = CudaLaunches()

    def get_function(compiled: Any, kernel: str) -> TracedKernel:
        return TracedKernel(str(kernel))

    def set_dynamic_shared(func: Any, nbytes: int) -> None:
        if (name := _name(func)) is not None:
            key = (seen.variant, name)
            seen.opt_in[key] = max(int(nbytes), seen.opt_in.get(key, 0))

    def launch(func: Any, grid: Any, block: Any, shared_bytes: int, args: Any,
               stream: Any = None) -> None:
        if (name := _name(func)) is not None:
            seen.launched.setdefault((seen.variant, name), []).append(int(shared_bytes))

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
