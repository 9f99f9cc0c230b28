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
function of that name. Anything else (cuBLAS, cuDNN, CUTLASS in a wheel, CuPy's routines, XLA,
a library reached through ctypes) is foreign.

CuPy is two things: a compiler of the candidate's own CUDA source (`RawKernel`, `RawModule`)
and a library of precompiled routines (`cupy.matmul`, `cupy.dot`, cuBLAS handles, `cupyx`). A
module whose every use of `cupy` is one of `CUPY_OWN_SOURCE` (compiling its own source, and the
zero-copy views, streams and dtypes a launch needs) may import it (`cupy_own_source`); any other
use refuses the import. What such a kernel computes is still attributed at run time: a kernel
CuPy brings (an elementwise routine behind `+`, cuBLAS behind `@`) is foreign by name.
"""
from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from dataclasses import dataclass

from experts.cudahost import mangled_identifier

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
    `LoadLibrary`, `ffi.dlopen`) and `torch.ops.load_library`. An import of `cupy` by a module
    that uses it only to compile its own source (`cupy_own_source`) is no finding; where it
    uses more, each other use is named. Text that does not parse yields nothing (the parse
    check reports it)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    out: list[Finding] = []
    native = False
    cupy_verdict = _cupy_uses(tree)
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
            if entry == "cupy" and isinstance(node, (ast.Import, ast.ImportFrom)) and cupy_verdict[0]:
                continue
            if entry is not None:
                out.append(Finding(node.lineno, f"imports {entry} ({name})"))
                break
    if not cupy_verdict[0]:
        out.extend(cupy_verdict[1])
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


# What a module may reach through `cupy` when it compiles and launches its own CUDA source.
CUPY_OWN_SOURCE = frozenset({
    "RawKernel", "RawModule", "asarray", "from_dlpack", "empty", "ndarray", "dtype",
    "cuda", "cuda.Stream", "cuda.ExternalStream", "cuda.get_current_stream", "cuda.Device",
    "cuda.runtime.getDevice", "cuda.runtime.getDeviceProperties",
    "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64", "bool_",
})
_COMPILES_OWN = frozenset({"RawKernel", "RawModule"})
_CUPY_PACKAGES = frozenset({"cupy", "cupyx", "cupy_backends"})


def _dotted(node: ast.expr) -> list[str] | None:
    """`a.b.c` as ["a", "b", "c"]; None for anything but names joined by attributes."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return [node.id, *reversed(parts)]


def _cupy_uses(tree: ast.Module) -> tuple[bool, list[Finding]]:
    """(whether `tree` uses CuPy only to compile and launch its own source, the uses that are
    not that). The names `import cupy [as x]` binds are followed through attribute chains: a
    chain must be one of `CUPY_OWN_SOURCE` (or lie under `cupy.cuda`'s listed names); a bare
    use of the name (passed on, `getattr`) is not. `from cupy import N` imports N alone. The
    answer is True only when some use is `RawKernel` / `RawModule`."""
    aliases: set[str] = set()
    bad: list[Finding] = []
    compiles = False
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name == "cupy":
                    aliases.add(a.asname or "cupy")
                elif _foreign(a.name) in _CUPY_PACKAGES:
                    bad.append(Finding(node.lineno, f"imports {_foreign(a.name)} ({a.name})"))
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level and \
                _foreign(node.module) in _CUPY_PACKAGES:
            if node.module != "cupy":
                bad.append(Finding(node.lineno, f"imports {_foreign(node.module)} ({node.module})"))
                continue
            for a in node.names:
                if a.name in CUPY_OWN_SOURCE:
                    compiles |= a.name in _COMPILES_OWN
                else:
                    bad.append(Finding(node.lineno, f"uses cupy.{a.name}: only CuPy's compilers "
                                                    f"of the candidate's own source may be used"))
    if not aliases:
        return compiles and not bad, bad
    parents: dict[int, ast.AST] = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parents[id(child)] = node
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Name) and node.id in aliases):
            continue
        top: ast.expr = node
        while isinstance(parents.get(id(top)), ast.Attribute):
            top = parents[id(top)]  # type: ignore[assignment]
        chain = _dotted(top) or [node.id]
        path = ".".join(chain[1:])
        if path in CUPY_OWN_SOURCE or any(path.startswith(e + ".") for e in CUPY_OWN_SOURCE
                                          if e != "cuda"):
            compiles |= path in _COMPILES_OWN
            continue
        shown = f"cupy.{path}" if path else "the cupy module itself"
        bad.append(Finding(node.lineno, f"uses {shown}: only CuPy's compilers of the candidate's "
                                        f"own source may be used"))
    return compiles and not bad, bad


def cupy_own_source(source: str) -> bool:
    """Whether Python `source` uses CuPy, and only to compile and launch its own CUDA source
    (`RawKernel` / `RawModule` and `CUPY_OWN_SOURCE`). False for text that does not parse."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False
    return _cupy_uses(tree)[0]


def permitted_modules(source: str) -> frozenset[str]:
    """The FOREIGN_MODULES entries the candidate of Python `source` may load at run time:
    CuPy's (with the packages it loads itself) when it compiles its own source with CuPy."""
    if cupy_own_source(source):
        return frozenset({"cupy", "cupyx", "cupy_backends"})
    return frozenset()


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


def loaded_foreign(modules: Iterable[str], permitted: Iterable[str] = ()) -> list[str]:
    """The FOREIGN_MODULES entries that some of `modules` (names in sys.modules) fall under,
    less the `permitted` ones (`permitted_modules`)."""
    allowed = set(permitted)
    return sorted({e for m in modules if (e := _foreign(m)) is not None and e not in allowed})


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
    # the gate's own XOR of a sealed call's inputs with a pad between launches
    # (`gate.fusedcompare.klineage_gate_xor`): a copy that computes nothing
    re.compile(r"^klineage_gate_xor$"),
    # the gate's test of whether a sealed buffer still holds its poison
    # (`gate.fusedcompare.klineage_gate_unlike`): it reads and counts, it writes no tensor
    re.compile(r"^klineage_gate_unlike$"),
)
_DRIVER_ACTIVITIES = ("Memcpy ", "Memset ")


def kernel_allowed(name: str) -> bool:
    """The kernel is on the allow list (module docstring): a torch fill / copy / arange kernel,
    the gate's GPU-lead spin or sealed-input XOR, or a driver memcpy / memset."""
    if name.startswith(_DRIVER_ACTIVITIES):
        return True
    return any(p.search(name) for p in _ALLOWED_KERNELS)


def base_name(name: str) -> str:
    """The function identifier of a kernel name: `gemm_kernel` for `gemm_kernel`,
    `void ns::gemm_kernel<128>(float*, int)` and the Itanium-mangled `_Z11gemm_kernelPfi`."""
    text = name.strip()
    ident = mangled_identifier(text)
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
