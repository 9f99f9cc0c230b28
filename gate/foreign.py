"""What a candidate may not reach: other array / GPU libraries, native libraries, and GPU kernels
that are neither its own nor on the gate's allow list.

Plain Python (no torch): the parent scans the candidate's text before any worker starts
(`scan_source`), the worker checks which modules candidate code imported (`loaded_foreign`) and
attributes the GPU kernels its profiler recorded (`attribute_kernels`).

The allow list of kernels a candidate's calls may run besides its own is what the op trace
(`gate.guards.ALLOWED_OPS`) lets host code do on the GPU, plus the gate's own timing helpers:

- torch fills (`torch.empty/zeros/ones/full`, `fill_`, `zero_`; the gate's L2 flush and poison
  fills): `at::native::...FillFunctor...`;
- torch copies (`copy_`, `clone`, `contiguous`, `.to(dtype)`; the gate's input refills and
  output snapshots): `at::native::...direct_copy_kernel...` / `...copy_kernel...` (with
  the casts into a narrower float, `...float16_copy_kernel_cuda...`), and the
  driver's `Memcpy ...` / `Memset ...` activities;
- `torch.arange`: `...elementwise_kernel_with_index...arange...`;
- `torch.cuda._sleep` (the gate's GPU lead, `gate.worker._Runner.gpu_lead`): `...spin_kernel...`.

A kernel is the candidate's own when the candidate launched a kernel of that name through the
paths the gate hooks (Triton's JIT launch, `cuda.bindings.driver.cuLaunchKernel[Ex]`, which
covers its NVRTC modules), or, for a CUDA candidate, when its `.cu` text defines a `__global__`
function of that name. Anything else (cuBLAS, cuDNN, CUTLASS in a wheel, CuPy, XLA, a library
reached through ctypes) is foreign.
"""
from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from dataclasses import dataclass

# Top-level modules (or dotted prefixes) of array and GPU libraries other than torch / triton /
# cuda-python: each computes on the GPU with kernels the gate cannot attribute to the candidate.
FOREIGN_MODULES = (
    "jax", "jaxlib", "cupy", "cupyx", "cupy_backends", "tensorflow", "numba.cuda", "pycuda",
    "nvmath", "tensorrt", "torch_tensorrt", "cudf", "cuml", "cugraph", "mxnet", "paddle",
    "onnxruntime", "tinygrad", "mlx",
)
# Names through which Python code loads a native shared library.
_NATIVE_LOADERS = frozenset({"CDLL", "PyDLL", "WinDLL", "OleDLL", "LoadLibrary", "cdll", "pydll",
                             "windll", "oledll", "dlopen", "load_library"})
_NATIVE_MODULES = ("ctypes", "_ctypes", "cffi")


@dataclass(frozen=True, slots=True)
class Finding:
    """One thing a candidate's text reaches that it may not: `line` is 1-indexed."""

    line: int
    what: str


def _foreign(name: str) -> str | None:
    """The FOREIGN_MODULES entry `name` (a dotted module name) falls under, if any."""
    for entry in FOREIGN_MODULES:
        if name == entry or name.startswith(entry + "."):
            return entry
    return None


def scan_source(source: str) -> list[Finding]:
    """Imports of foreign libraries and native-library loads in Python `source`, by line.

    Sees `import x`, `from x import y` (also `from numba import cuda`), `importlib.import_module`
    / `__import__` with a literal name, and ctypes / cffi library loads (`CDLL`, `cdll.X`,
    `LoadLibrary`, `ffi.dlopen`) and `torch.ops.load_library`. Text that does not parse yields
    nothing (the parse check reports it)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    out: list[Finding] = []
    native = False
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str) and _callee(node.func) in ("import_module",
                                                                                   "__import__"):
            names = [node.args[0].value]
        for name in names:
            if name.split(".")[0] in _NATIVE_MODULES:
                native = True
            entry = _foreign(name)
            if entry is not None:
                out.append(Finding(node.lineno, f"imports {entry} ({name})"))
                break
    for node in ast.walk(tree):
        loader = None
        if isinstance(node, ast.Attribute) and node.attr in _NATIVE_LOADERS:
            loader = node.attr
        elif isinstance(node, ast.Name) and node.id in _NATIVE_LOADERS:
            loader = node.id
        if loader is None:
            continue
        if loader == "load_library" or native:
            out.append(Finding(node.lineno, f"loads a native library ({loader})"))
    unique = {(f.line, f.what): f for f in out}
    return sorted(unique.values(), key=lambda f: (f.line, f.what))


def _callee(func: ast.expr) -> str:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return ""


def describe_findings(findings: Iterable[Finding], limit: int = 4) -> str:
    items = list(findings)
    shown = "; ".join(f"line {f.line}: {f.what}" for f in items[:limit])
    return shown + (f"; and {len(items) - limit} more" if len(items) > limit else "")


def loaded_foreign(modules: Iterable[str]) -> list[str]:
    """The FOREIGN_MODULES entries that some of `modules` (names in sys.modules) fall under."""
    return sorted({e for m in modules if (e := _foreign(m)) is not None})


# ---------------------------------------------------------------------------------------------
# Kernel attribution

_ALLOWED_KERNELS = (
    re.compile(r"at::native::.*FillFunctor"),
    re.compile(r"at::native::.*direct_copy_kernel"),
    re.compile(r"at::native::.*\bcopy_kernel"),
    # `.to(dtype)` into a narrower float: `float16_copy_kernel_cuda`, `bfloat16_copy_...`
    re.compile(r"at::native::.*\b(?:b?float\d*|float8_\w+?)_copy_kernel"),
    re.compile(r"elementwise_kernel_with_index.*arange"),
    re.compile(r"at::cuda::.*spin_kernel"),
)
_DRIVER_ACTIVITIES = ("Memcpy ", "Memset ")


def kernel_allowed(name: str) -> bool:
    """The kernel is on the allow list (module docstring): a torch fill / copy / arange kernel,
    the gate's GPU-lead spin, or a driver memcpy / memset."""
    if name.startswith(_DRIVER_ACTIVITIES):
        return True
    return any(p.search(name) for p in _ALLOWED_KERNELS)


def _mangled_identifier(text: str) -> str | None:
    """The function identifier of an Itanium-mangled name (`_Z11gemm_kernelPfi`, nested
    `_ZN2ns11gemm_kernelEPf`): the last length-prefixed name before the parameters."""
    i = 2
    if text[i:i + 1] == "L":
        i += 1
    nested = text[i:i + 1] == "N"
    if nested:
        i += 1
        while text[i:i + 1] in ("K", "V", "r"):
            i += 1
    last = None
    while True:
        m = re.match(r"\d+", text[i:])
        if m is None:
            return last
        n = int(m.group(0))
        start = i + m.end()
        last = text[start:start + n]
        i = start + n
        if not nested:
            return last


def base_name(name: str) -> str:
    """The function identifier of a kernel name: `gemm_kernel` for `gemm_kernel`,
    `void ns::gemm_kernel<128>(float*, int)` and the Itanium-mangled `_Z11gemm_kernelPfi`."""
    text = name.strip()
    if text.startswith("_Z"):
        ident = _mangled_identifier(text)
        if ident:
            return ident
    cut = len(text)
    for i, ch in enumerate(text):  # the identifier ends where its template / parameters begin
        if ch in "<(":
            cut = i
            break
    words = text[:cut].split()
    head = words[-1] if words else text[:cut]
    return head.rsplit("::", 1)[-1]


def cuda_kernel_names(cu_source: str) -> set[str]:
    """Names of the `__global__` functions a CUDA source defines."""
    text = re.sub(r"__launch_bounds__\s*\([^)]*\)", " ", cu_source)
    return set(re.findall(r"__global__[^;{}()]*?\b([A-Za-z_]\w*)\s*\(", text))


def attribute_kernels(executed: Iterable[str], own: Iterable[str]) -> list[str]:
    """Kernels in `executed` (names as the profiler reports them) that are neither the
    candidate's (`own`: names of its launched or defined kernels, exact or mangled) nor allowed.
    Distinct names, in first-seen order."""
    own_exact = set(own)
    own_base = {base_name(n) for n in own_exact}
    foreign: dict[str, None] = {}
    for name in executed:
        if name in own_exact or kernel_allowed(name):
            continue
        if base_name(name) in own_base:
            continue
        foreign.setdefault(name, None)
    return list(foreign)
