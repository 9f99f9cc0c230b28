"""The host conventions a CUDA candidate may come in, as the gate's worker needs to know them.

Besides a host module that defines `run(*inputs)` and launches through NVRTC + cuda-python
(`experts.cudahost`, or `cuda.bindings` directly), a CUDA candidate may be

- a KernelBench-style solution: a module defining `ModelNew(nn.Module)` (no `run`) whose
  kernels come from `torch.utils.cpp_extension.load_inline(cuda_sources=...)`: `entry` makes
  its `run`; the source's host half (the C++ wrappers, the pybind11 module, torch headers)
  is left out where only the device code is compiled (`device_source`), and what each C++
  wrapper launches with `<<<...>>>` is read from the source (`chevron_launches`), and the
  dynamic shared memory it allows a kernel first (`dynamic_shared_limits`);
- a CuPy host: `cupy.RawKernel` / `cupy.RawModule` of the candidate's own source
  (`gate.foreign.cupy_own_source` says whether a module uses CuPy only so).

Plain Python and kir only: nothing here imports torch at module import.
"""
from __future__ import annotations

import ast
import inspect
import re
import runpy
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kir

# Headers that only the host half of a source includes (torch's extension API, the CUDA
# runtime's host API, the C++ standard library): NVRTC has none of them.
_HOST_HEADERS = re.compile(
    r"^[ \t]*#[ \t]*include[ \t]*[<\"](?:torch/|ATen/|c10/|pybind11/|cuda_runtime|cuda\.h|"
    r"cuda_runtime_api|vector|iostream|string|sstream|map|unordered_map|memory|stdexcept|"
    r"algorithm|cstdio|stdio\.h|cstdlib|stdlib\.h|cassert|assert\.h|tuple|utility|"
    r"functional|c?math|math\.h)[^\n]*$", re.M)
_DEVICE_QUALIFIERS = ("__global__", "__device__")
_SIZEOF = {"char": 1, "int8_t": 1, "uint8_t": 1, "bool": 1, "short": 2, "half": 2, "__half": 2,
           "__nv_bfloat16": 2, "at::Half": 2, "at::BFloat16": 2, "c10::Half": 2,
           "c10::BFloat16": 2, "int": 4, "unsigned": 4, "float": 4, "int32_t": 4,
           "uint32_t": 4, "half2": 4, "__half2": 4, "__nv_bfloat162": 4, "double": 8,
           "long": 8, "int64_t": 8, "size_t": 8, "float2": 8, "int2": 8, "float4": 16,
           "int4": 16, "uint4": 16, "double2": 16}


def _top_functions(ir: Any) -> list[tuple[int, int, str, tuple[str, ...]]]:
    """(start, end, name, qualifiers) of each function definition outside any function; a
    template's span covers its `template <...>` line."""
    out = []
    for node in ir.walk():
        if node.kind not in ("function", "kernel") or node.grammar_type != "function_definition":
            continue
        if any(ir.kind_of(a) in ("function", "kernel") for a in ir.ancestors(node)):
            continue
        span = node.span
        parent = ir.node(node.parent) if node.parent is not None else None
        if parent is not None and parent.kind == "template":
            span = parent.span
        out.append((span.start, span.end, node.name or "", tuple(node.attrs.get("qualifiers", ()))))
    return out


# What torch's extension builder passes nvcc for every CUDA source (torch.utils.cpp_extension),
# so that a `load_inline` host's source is compiled under the same rules at the static tier;
# NVRTC has no `--expt-relaxed-constexpr`: `-default-device` lets device code call the
# unannotated `constexpr` helpers `device_source` keeps (every other one is blanked).
EXTENSION_NVRTC_OPTIONS = ("-default-device", "-D__CUDA_NO_HALF_OPERATORS__",
                           "-D__CUDA_NO_HALF_CONVERSIONS__", "-D__CUDA_NO_BFLOAT16_CONVERSIONS__",
                           "-D__CUDA_NO_HALF2_OPERATORS__")


_EXTENSION_HEADERS = re.compile(r"^[ \t]*#[ \t]*include[ \t]*[<\"](?:torch/|ATen/|c10/|pybind11/)",
                                re.M)


def has_host_half(text: str) -> bool:
    """Whether a CUDA source holds the host half of a torch extension: an include of torch's
    extension API, a `<<<...>>>` launch or a pybind11 module (a `load_inline` source)."""
    return bool(_EXTENSION_HEADERS.search(text)) or "<<<" in text or "PYBIND11_MODULE" in text


def nvrtc_options(text: str) -> tuple[str, ...]:
    """The NVRTC options that compile `text` as its host's compiler would: those of torch's
    extension builder for a source with a host half, else none."""
    return EXTENSION_NVRTC_OPTIONS if has_host_half(text) else ()


def device_source(text: str) -> str:
    """`text` with its host half blanked (`has_host_half`): functions qualified neither
    `__global__` nor `__device__` nor `constexpr` (C++ wrappers, the pybind11 module) and
    includes of host-only headers. What is left is what NVRTC compiles for the device; line
    numbers are kept (blanked code becomes blank lines). A source without a host half comes
    back unchanged (an unqualified function there is the author's, compiled as written)."""
    if not has_host_half(text):
        return text
    ir = kir.parse(text, "cuda")
    data = ir.source
    cuts = [(s, e) for s, e, _, quals in _top_functions(ir)
            if not any(q in quals for q in _DEVICE_QUALIFIERS)
            and not re.match(rb"(?:template\s*<[^>]*>\s*)?(?:static\s+|inline\s+)*constexpr\b",
                             data[s:e])]
    out = bytearray(data)
    for s, e in cuts:
        out[s:e] = bytes(b if b == 0x0A else 0x20 for b in data[s:e])
    blanked = out.decode("utf-8")
    return _HOST_HEADERS.sub("", blanked)


@dataclass(frozen=True, slots=True)
class Chevron:
    """One `kernel<<<grid, block, shared, stream>>>(...)` launch in a host function: the
    kernel's name and its dynamic shared memory in bytes (0 when the launch passes none; None
    when it is an expression only the running host knows)."""

    kernel: str
    shared_bytes: int | None


def _split_top(text: str) -> list[str]:
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch in "([{<":
            depth += 1
        elif ch in ")]}>":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur).strip())
    return parts


def constant_bytes(expr: str) -> int | None:
    """The value of a launch's shared-memory argument when it is made of integer literals,
    `sizeof(<scalar type>)` and + - * / ( ): `256 * sizeof(float)` is 1024; else None."""
    def size(m: re.Match[str]) -> str:
        n = _SIZEOF.get(m.group(1).strip())
        return str(n) if n is not None else "?"

    text = re.sub(r"sizeof\s*\(\s*([\w:]+)\s*\)", size, expr)
    text = re.sub(r"(\d+)[uUlL]+\b", r"\1", text)
    if not re.fullmatch(r"[\d\s+\-*/()]+", text):
        return None
    try:
        tree = ast.parse(text.replace("/", "//"), mode="eval")
    except SyntaxError:
        return None
    allowed = (ast.Expression, ast.BinOp, ast.Constant, ast.Add, ast.Sub, ast.Mult, ast.FloorDiv,
               ast.UnaryOp, ast.USub)
    if not all(isinstance(n, allowed) for n in ast.walk(tree)):
        return None
    try:
        return int(eval(compile(tree, "<shared>", "eval"), {"__builtins__": {}}))  # noqa: S307
    except ZeroDivisionError:
        return None


_CONSTANT = re.compile(r"\b(?:static\s+)?(?:const\s+|constexpr\s+)+(?:unsigned\s+|signed\s+)?"
                       r"(?:int|long|size_t|unsigned|int64_t|int32_t|auto)?\s*([A-Za-z_]\w*)\s*"
                       r"=\s*([^;,{}]+);")


def _constants(text: str) -> dict[str, str]:
    """`const` / `constexpr` integer names of `text` and the expressions they are set to."""
    return {m.group(1): m.group(2).strip() for m in _CONSTANT.finditer(text)}


def _substituted(expr: str, names: dict[str, str], depth: int = 4) -> str:
    for _ in range(depth):
        new = re.sub(r"\b[A-Za-z_]\w*\b(?!\s*\()",
                     lambda m: f"({names[m.group(0)]})" if m.group(0) in names else m.group(0), expr)
        if new == expr:
            break
        expr = new
    return expr


def chevron_launches(text: str) -> dict[str, list[Chevron]]:
    """Per host function of `text` (by name), the `<<<...>>>` launches in its body. A shared
    memory size made of literals, `sizeof` and `const` / `constexpr` names (of the function or
    the file) is read as its value."""
    ir = kir.parse(text, "cuda")
    funcs = [(s, e, name) for s, e, name, quals in _top_functions(ir)
             if not any(q in quals for q in _DEVICE_QUALIFIERS)]
    data = ir.source
    outside = bytearray(data)
    for s, e, _ in funcs:
        outside[s:e] = b" " * (e - s)
    file_names = _constants(outside.decode("utf-8", errors="replace"))
    out: dict[str, list[Chevron]] = {}
    for node in ir.walk():
        if node.kind != "launch":
            continue
        body = ir.node_text(node)
        m = re.search(r"<<<(.*?)>>>", body, re.S)
        if m is None:
            continue
        args = _split_top(m.group(1))
        kernel = str(node.attrs.get("callee") or node.name or "")
        for s, e, name in funcs:
            if s <= node.span.start < e:
                names = {**file_names, **_constants(data[s:e].decode("utf-8", errors="replace"))}
                shared = constant_bytes(_substituted(args[2], names)) \
                    if len(args) > 2 and args[2] else 0
                out.setdefault(name, []).append(Chevron(kernel, shared))
    return out


_LIMIT = re.compile(r"\bcudaFuncSetAttribute\s*\(\s*&?\s*(\w+)\s*,\s*"
                    r"cudaFuncAttributeMaxDynamicSharedMemorySize\s*,\s*([^;]*?)\)\s*;")


def dynamic_shared_limits(text: str) -> dict[str, int | None]:
    """Per kernel, the dynamic shared memory the host half of `text` allows it with
    `cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes)` (what a
    launch above 48 KiB needs first): the bytes where made of literals, `sizeof` and + - * /,
    else None. The largest where several calls name one kernel."""
    out: dict[str, int | None] = {}
    for m in _LIMIT.finditer(text):
        value = constant_bytes(m.group(2))
        have = out.get(m.group(1), 0)
        out[m.group(1)] = None if value is None or have is None else max(have, value)
    return out


def builds_extension(source: str) -> bool:
    """Whether Python `source` calls `load_inline` (torch's inline C++/CUDA extension)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
            if name == "load_inline":
                return True
    return False


# ---------------------------------------------------------------------------------------------
# ModelNew as run

MODEL_CLASS = "ModelNew"


def _required(fn: Callable[..., Any], skip_self: bool = False) -> tuple[int, int | None]:
    """(required positional parameters, positional parameters or None for *args)."""
    params = list(inspect.signature(fn).parameters.values())
    if skip_self and params:
        params = params[1:]
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = [p for p in positional if p.default is p.empty]
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return len(required), None
    return len(required), len(positional)


def _init_inputs(module: Any, case_path: str | None) -> list[Any]:
    """The constructor arguments of the host's model: its own `get_init_inputs()`, else the
    case's (a case module's, or a KernelBench problem file's)."""
    own = getattr(module, "get_init_inputs", None)
    if callable(own):
        return list(own())
    if case_path:
        path = Path(case_path)
        namespace = runpy.run_path(str(path)) if path.suffix == ".py" else {}
        get = namespace.get("get_init_inputs")
        if callable(get):
            return list(get())
    return []


class ModelRun:
    """`run(*inputs)` of a host module that defines a model class instead: the model is built
    once (when the module is loaded, outside any traced call) and moved to the inputs' device
    on the first call. Where the case passes the model's tensors after the forward's own inputs
    (a KernelBench problem's parameters, then its buffers), they are put into the model's
    slots in that order before each call, as the problem's reference does with its Model."""

    def __init__(self, cls: type, init: list[Any]) -> None:
        self.model = cls(*init)
        self.forward_arity = _required(self.model.forward)[1]
        self.slots = _tensor_slots(self.model)
        self.placed = False

    def __call__(self, *inputs: Any) -> Any:
        extra = len(inputs) - self.forward_arity if self.forward_arity is not None else 0
        if self.slots and extra == len(self.slots):
            for places, tensor in zip(self.slots, inputs[self.forward_arity:]):
                for owner, name, table in places:
                    getattr(owner, table)[name] = tensor
            inputs = inputs[:self.forward_arity]
        elif not self.placed:
            device = next((getattr(x, "device", None) for x in inputs if hasattr(x, "device")), None)
            if device is not None:
                self.model.to(device)
        self.placed = True
        return self.model(*inputs)


def _tensor_slots(model: Any) -> list[list[tuple[Any, str, str]]]:
    """Where each of the model's parameters, then buffers, sits: [(module, name, table)]."""
    tensors: list[Any] = [p for _, p in model.named_parameters()] + \
        [b for _, b in model.named_buffers()]
    where: dict[int, list[tuple[Any, str, str]]] = {}
    for sub in model.modules():
        for table in ("_parameters", "_buffers"):
            for name, tensor in getattr(sub, table).items():
                if tensor is not None:
                    where.setdefault(id(tensor), []).append((sub, name, table))
    return [where[id(t)] for t in tensors]


def entry(module: Any, case_path: str | None = None) -> Callable[..., Any] | None:
    """The host's `run`: its own, else a `ModelRun` of its `ModelNew` class (built with
    `_init_inputs`), else None."""
    run = getattr(module, "run", None)
    if callable(run):
        return run
    cls = getattr(module, MODEL_CLASS, None)
    if not isinstance(cls, type):
        return None
    required, _ = _required(cls.__init__, skip_self=True)
    init = _init_inputs(module, case_path) if required else []
    return ModelRun(cls, init)
