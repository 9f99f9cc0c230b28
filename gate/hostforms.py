"""The host conventions a CUDA candidate may come in, as the gate's worker needs to know them.

Besides a host module that defines `run(*inputs)` and launches through NVRTC + cuda-python
(`experts.cudahost`, or `cuda.bindings` directly), a CUDA candidate may be

- a KernelBench-style solution: a module defining `ModelNew(nn.Module)` (no `run`) whose
  kernels come from `torch.utils.cpp_extension.load_inline(cuda_sources=...)`: `entry` makes
  its `run`; the source's host half (the C++ wrappers, the pybind11 module, torch headers)
  is left out where only the device code is compiled (`device_source`: the template kernels
  the wrappers launch are instantiated after it, `instances`), and what each C++ wrapper
  launches with `<<<...>>>` is read from the source (`chevron_launches`), and the dynamic
  shared memory it allows a kernel first (`dynamic_shared_limits`);
- a CuPy host: `cupy.RawKernel` / `cupy.RawModule` of the candidate's own source
  (`gate.foreign.cupy_own_source` says whether a module uses CuPy only so).

Plain Python and kir only: nothing here imports torch at module import.
"""
from __future__ import annotations

import ast
import inspect
import re
import runpy
from collections.abc import Callable, Sequence
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

# Every byte to a space, a table made from integers (not from `b" "`, a one-byte object the
# whole process shares, which a host's NVRTC call may have overwritten: experts.cudahost.shared_byte).
_SPACES = bytes(32 for _ in range(256))


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


def device_source(text: str, instantiate: Sequence[Instance] | None = None) -> str:
    """`text` with its host half blanked (`has_host_half`): functions qualified neither
    `__global__` nor `__device__` nor `constexpr` (C++ wrappers, the pybind11 module) and
    includes of host-only headers. What is left is what NVRTC compiles for the device; line
    numbers are kept (blanked code becomes blank lines). The template kernels the host half
    launches are instantiated after it (`instances`: all of them, or those of `instantiate`),
    each specialization on a line of its own after the last line of `text`. A source without a
    host half comes back unchanged (an unqualified function there is the author's, compiled as
    written)."""
    if not has_host_half(text):
        return text
    wanted = instances(text) if instantiate is None else instantiate
    return _device_half(text) + "".join(f"\n{i.declaration}" for i in wanted)


def _device_half(text: str) -> str:
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
                       r"(?:int|long|size_t|unsigned|int64_t|int32_t|auto)?\s*"
                       r"([A-Za-z_]\w*\s*=[^;{}]+);")


def _constants(text: str) -> dict[str, str]:
    """`const` / `constexpr` integer names of `text` and the expressions they are set to (each
    of a declaration `constexpr int a = 16, b = 32;`)."""
    out = {}
    for m in _CONSTANT.finditer(text):
        for part in _split_top(m.group(1)):
            name, eq, value = part.partition("=")
            if eq and re.fullmatch(r"[A-Za-z_]\w*", name.strip()) and value.strip():
                out[name.strip()] = value.strip()
    return out


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
        outside[s:e] = bytes(e - s).translate(_SPACES)
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


# ---------------------------------------------------------------------------------------------
# Template kernels the host half instantiates


@dataclass(frozen=True, slots=True)
class Instance:
    """One specialization of a template kernel that a C++ wrapper launches, as the explicit
    instantiation (`declaration`) that has NVRTC compile it. `stand_in` is None where the
    specialization is one the host's own build compiles; else what was put in its place and
    why it may fail where that build would not (`__half` for `at::Half`, whose conversions only
    torch's headers have; an integer type of a dispatch macro, whose `<cmath>` overloads NVRTC
    lacks): its failing to compile is then not the kernel's (`gate.static` flags it)."""

    kernel: str
    args: tuple[str, ...]
    declaration: str
    stand_in: str | None = None


# torch's reduced float types -> (the CUDA type NVRTC has for it, the header that declares it)
_TORCH_FLOATS = {"Half": ("__half", "cuda_fp16.h"), "BFloat16": ("__nv_bfloat16", "cuda_bf16.h")}
_FIXED_WIDTH = {"int8_t": "signed char", "uint8_t": "unsigned char", "int16_t": "short",
                "uint16_t": "unsigned short", "int32_t": "int", "uint32_t": "unsigned int",
                "int64_t": "long", "uint64_t": "unsigned long"}  # NVRTC declares none of them
# A dispatch macro's ScalarType names -> the C++ type its `scalar_t` is (complex left out).
_SCALARS = {"Double": "double", "Float": "float", "Half": "at::Half", "BFloat16": "at::BFloat16",
            "Byte": "uint8_t", "Char": "int8_t", "Short": "int16_t", "Int": "int32_t",
            "Long": "int64_t", "Bool": "bool"}
_INTEGRAL = ("Byte", "Char", "Short", "Int", "Long")
_SCALAR_ARG = re.compile(r"(?:\bScalarType::|\bk)(" + "|".join(_SCALARS) + r")\b")
_DISPATCHED = "scalar_t"  # the type name ATen's AT_DISPATCH_* macros bind in their lambda
_DISPATCH = re.compile(r"(?:\w+::)*AT_DISPATCH_\w+")
# Words a template argument may hold besides names the file declares outside any function.
_BUILTIN_WORDS = frozenset(
    "bool char short int long signed unsigned float double void const volatile true false "
    "sizeof alignof nullptr size_t".split())
_VECTOR_TYPE = re.compile(r"(?:u?char|u?short|u?int|u?long|u?longlong|float|double)[1-4]")
_HEADER_TYPES = {"__half": "cuda_fp16.h", "__half2": "cuda_fp16.h", "half": "cuda_fp16.h",
                 "half2": "cuda_fp16.h", "__nv_bfloat16": "cuda_bf16.h",
                 "__nv_bfloat162": "cuda_bf16.h", "nv_bfloat16": "cuda_bf16.h"}
_DATA_POINTER = re.compile(r"(?:\.|->)(?:data_ptr|mutable_data_ptr|const_data_ptr|data)$")
_CASTS = ("reinterpret_cast", "static_cast", "const_cast")


def _includes(text: str, header: str) -> bool:
    return re.search(r"^[ \t]*#[ \t]*include[ \t]*[<\"]" + re.escape(header) + r"[>\"]", text,
                     re.M) is not None


def _dispatch_types(macro: str, head: str) -> list[tuple[str, str | None]]:
    """(C++ type, stand-in reason or None) of each scalar type the `AT_DISPATCH_*` macro
    `macro` runs its lambda for; `head` is its arguments before the lambda (the extra
    ScalarTypes of `_AND`, `_AND2` ...). Float and double are what torch's build compiles too;
    every other type is a stand-in (`Instance.stand_in`). Empty for a macro not of that family."""
    name = macro.rsplit("::", 1)[-1]
    scalars: list[str] = []
    if "REDUCED_FLOATING" in name:
        scalars += ["Half", "BFloat16"]
    elif "FLOATING" in name or "ALL_TYPES" in name:
        scalars += ["Double", "Float"]
    if "INTEGRAL" in name or "ALL_TYPES" in name:
        scalars += list(_INTEGRAL)
    scalars += [{"HALF": "Half", "BFLOAT16": "BFloat16"}[w]
                for w in re.findall(r"_AND_(HALF|BFLOAT16)", name)]
    scalars += _SCALAR_ARG.findall(head)
    out = []
    for scalar in dict.fromkeys(scalars):
        exact = scalar in ("Double", "Float")
        out.append((_SCALARS[scalar], None if exact else f"{scalar} of {name}"))
    return out


def _template_params(ir: Any, template: Any) -> list[tuple[str, bool, str | None]] | None:
    """(name, is a type, default text or None) of each parameter of a `template <...>`
    declaration, in order; None where one is neither a plain type nor a plain value parameter
    (a pack, a template template parameter)."""
    plist = next((ir.node(c) for c in ir.children_of(template.id)
                  if ir.grammar_type_of(c) == "template_parameter_list"), None)
    if plist is None:
        return None
    out: list[tuple[str, bool, str | None]] = []
    for c in ir.children_of(plist.id):
        node = ir.node(c)
        if node.grammar_type in ("type_parameter_declaration", "parameter_declaration",
                                 "optional_type_parameter_declaration",
                                 "optional_parameter_declaration"):
            if not node.name:
                return None
            default = _split_default(ir, c)[1]
            out.append((node.name, node.grammar_type.endswith("type_parameter_declaration"),
                        default))
        elif node.grammar_type != "comment":
            return None
    return out


def _split_default(ir: Any, nid: int) -> tuple[str, str | None]:
    """A parameter's declaration and its default (the text of `= value`), or None where it
    has none (`optional_..._declaration`: the value is its last node)."""
    text = ir.node_text(nid)
    kids = ir.children_of(nid)
    if not ir.grammar_type_of(nid).startswith("optional_") or not kids:
        return text, None
    cut = ir.span_of(kids[-1]).start - ir.span_of(nid).start
    return text[:cut].rstrip().removesuffix("=").rstrip(), text[cut:].strip()


def _kernel_params(ir: Any, kernel: Any) -> list[str] | None:
    """The text of each parameter of a kernel's definition (defaults left out); None for a
    variadic one."""
    decl = next((c for c in ir.children_of(kernel.id)
                 if ir.grammar_type_of(c) == "function_declarator"), None)
    plist = next((c for c in ir.children_of(decl) if ir.grammar_type_of(c) == "parameter_list"),
                 None) if decl is not None else None
    if plist is None:
        return None
    params = []
    for c in ir.children_of(plist):
        if ir.grammar_type_of(c) not in ("parameter_declaration", "optional_parameter_declaration"):
            if ir.grammar_type_of(c) != "comment":
                return None
            continue
        params.append(_split_default(ir, c)[0])
    if params == ["void"]:
        return []
    return params


def _replace_names(text: str, values: dict[str, str]) -> str:
    """`text` with each whole name of `values` (not a member `::x`, `.x`, `->x`) replaced."""
    if not values:
        return text
    pattern = r"(?<![\w.:>])(?<!->)\b(" + "|".join(map(re.escape, values)) + r")\b"
    return re.sub(pattern, lambda m: values[m.group(1)], text)


@dataclass(frozen=True, slots=True)
class _Scope:
    """What a template argument written in a C++ wrapper may refer to where the device half
    instantiates it: names declared outside any function (`file`), the wrapper's `const` /
    `constexpr` names (`local`, written in by value) and the headers the source includes."""

    text: str
    file: frozenset[str]
    local: dict[str, str]

    def resolve(self, arg: str) -> tuple[str, str | None] | None:
        """(`arg` as the device half can name it, stand-in reason or None); None where it
        names what only the wrapper knows (a variable, a type alias of its own, a torch type
        without its CUDA header)."""
        arg = " ".join(_substituted(arg, self.local).split())
        stand_in = None
        for torch_name, (cuda_type, header) in _TORCH_FLOATS.items():
            torch_type = rf"\b(?:at|c10|torch)::{torch_name}\b"
            if re.search(torch_type, arg):
                if not _includes(self.text, header):
                    return None
                arg = re.sub(torch_type, cuda_type, arg)
                stand_in = f"{cuda_type} for at::{torch_name}"
        arg = _replace_names(arg, _FIXED_WIDTH)
        for m in re.finditer(r"(?<![\w.])(?<!::)(?<!->)[A-Za-z_]\w*", arg):
            word = m.group(0)
            header = _HEADER_TYPES.get(word)
            if header is not None:
                if not _includes(self.text, header):
                    return None
            elif not (word in _BUILTIN_WORDS or word in self.file or _VECTOR_TYPE.fullmatch(word)):
                return None
        return arg, stand_in


def _pointee(ir: Any, arg: int) -> str | None:
    """The type a launch argument points to where it says so plainly: `t.data_ptr<T>()`, a
    cast `reinterpret_cast<const T*>(...)` / `static_cast` / `(T*)p`; else None."""
    node = ir.node(arg)
    written = None
    if node.kind != "call" and node.grammar_type == "cast_expression":
        written = next((ir.node_text(c) for c in ir.children_of(arg)
                        if ir.grammar_type_of(c) == "type_descriptor"), None)
    elif node.grammar_type == "call_expression":
        callee = str(node.attrs.get("callee") or "")
        targs = str(node.attrs.get("template_args") or "")
        if _DATA_POINTER.search(callee) and targs:
            return targs[1:-1].strip()
        if callee in _CASTS:
            fn = next(iter(ir.children_of(arg)), None)
            tlist = next((c for c in ir.children_of(fn)
                          if ir.grammar_type_of(c) == "template_argument_list"), None) \
                if fn is not None else None
            written = ir.node_text(tlist)[1:-1] if tlist is not None else None
    if written is None:
        return None
    return _declared_pointee(written)


_POINTER = re.compile(r"\s*(?:const\s+|volatile\s+)*([A-Za-z_][\w:]*(?:\s+[A-Za-z_][\w:]*)*?)\s*"
                      r"(?:const\s*|volatile\s*)*\*\s*(?:const\s*|volatile\s*|__restrict__\s*)*"
                      r"(\w*)\s*")


def _declared_pointee(declared: str) -> str | None:
    """`X` of a pointer type or parameter written `[const] X* [__restrict__] [name]`."""
    m = _POINTER.fullmatch(declared)
    return m.group(1) if m else None


def _deduced(params: list[str], names: set[str], args: list[str | None]) -> dict[str, str] | None:
    """Template type parameters read off a launch's arguments: a kernel parameter written
    `[const] T* [__restrict__] name` for an argument whose pointee is known (`_pointee`). None
    where two arguments disagree."""
    out: dict[str, str] = {}
    for param, pointee in zip(params, args, strict=False):
        declared = _declared_pointee(param)
        if declared not in names or pointee is None:
            continue
        if out.setdefault(declared, pointee) != pointee:
            return None
    return out


def instances(text: str) -> list[Instance]:
    """The specializations of the source's `template <...> __global__` kernels that its C++
    wrappers launch with `<<<...>>>`, each once, in the order of the launches.

    A launch's template arguments are those it writes (`k<__half, 256>`), then those deduced
    from its arguments where the deduction is plain (`_deduced`: a `[const] T*` parameter given
    `t.data_ptr<X>()` or a cast to `X*`), then the template's defaults. An argument may name
    literals, builtin and CUDA types and what the file declares outside any function; a
    wrapper's own `const` / `constexpr` integer names are written in by value. Inside an
    `AT_DISPATCH_*` macro's lambda, `scalar_t` is each type the macro covers
    (`_dispatch_types`); torch's `at::Half` / `at::BFloat16` become `__half` / `__nv_bfloat16`
    where the source includes their CUDA header (stand-ins). A specialization the source
    instantiates itself (`template __global__ void k<...>(...);`, arguments compared by value)
    is not made again: NVRTC refuses one made twice.

    Left out: a launch whose arguments name what only the wrapper knows (a variable, its own
    type alias, `acc_type`, the template parameters of a templated wrapper), one whose
    parameters cannot all be told (a value parameter deduced from a scalar argument, a
    deduction through anything but a plain pointer), a kernel that is overloaded, a member or
    takes a pack, a type argument that is a pointer, reference, array or function type (put
    into `const T*` as text it would name another type), a dispatch macro outside the
    `AT_DISPATCH_<types>[_AND...]` family (`AT_DISPATCH_V2`, `AT_DISPATCH_SWITCH`)."""
    ir = kir.parse(text, "cuda")
    tops = _top_functions(ir)
    hosts = [(s, e, name) for s, e, name, quals in tops
             if not any(q in quals for q in _DEVICE_QUALIFIERS)]
    outside = bytearray(ir.source)
    for s, e in [(s, e) for s, e, _, _ in tops] + [
            (n.span.start, n.span.end) for n in ir.walk()
            if n.grammar_type in ("comment", "string_literal", "raw_string_literal")]:
        outside[s:e] = bytes(e - s).translate(_SPACES)
    file_text = _HOST_HEADERS.sub("", outside.decode("utf-8", errors="replace"))
    file_names = frozenset(re.findall(r"[A-Za-z_]\w*", file_text))
    kernels: dict[str, list[Any]] = {}
    for node in ir.find("kernel"):
        kernels.setdefault(node.name or "", []).append(node)
    file_scope = _Scope(text, file_names, {})
    constants = _constants(file_text)

    def specializations(site: Any, scope: _Scope) -> list[Instance]:
        callee = _callee(ir, site)
        defined = kernels.get(callee[1] if callee else "", [])
        if callee is None or len(defined) != 1 or defined[0].parent is None:
            return []
        kernel, template = defined[0], ir.node(defined[0].parent)
        if template.kind != "template" or any(ir.kind_of(a) == "class"
                                               for a in ir.ancestors(kernel)):
            return []
        return _launch_instances(ir, site, callee[0], kernel, template, scope)

    def key(inst: Instance) -> tuple[str, ...]:  # one specialization however it is written
        return (inst.kernel, *(_normal(a, constants) for a in inst.args))

    own = {key(i) for node in ir.walk() if node.grammar_type == "template_instantiation"
           for i in specializations(node, file_scope)}  # explicit ones: not made twice
    out: dict[tuple[str, ...], Instance] = {}
    for launch in ir.find("launch"):
        host = next(((s, e) for s, e, _ in hosts if s <= launch.span.start < e), None)
        if host is None:
            continue
        scope = _Scope(text, file_names,
                       _constants(ir.source[host[0]:host[1]].decode("utf-8", errors="replace")))
        for inst in specializations(launch, scope):
            if key(inst) not in own:
                out.setdefault(key(inst), inst)
    return list(out.values())


def _normal(arg: str, constants: dict[str, str]) -> str:
    """A template argument as a key: its value where it is an integer constant, else its
    text without spaces."""
    value = constant_bytes(_substituted(arg, constants))
    return str(value) if value is not None else "".join(arg.split())


def _callee(ir: Any, site: Any) -> tuple[int, str] | None:
    """(node of the kernel it names, its name) of a launch or an explicit instantiation."""
    if site.kind == "launch":
        kids = ir.children_of(site.id)
        name = str(site.attrs.get("callee") or "")
        return (kids[0], name.rsplit("::", 1)[-1]) if kids else None
    decl = next((c for c in ir.children_of(site.id)
                 if ir.grammar_type_of(c) == "function_declarator"), None)
    kids = ir.children_of(decl) if decl is not None else []
    if not kids:
        return None
    name = next((n.name for n in ir.walk(kids[0]) if n.kind == "name"), None)
    return (kids[0], name) if name else None


def _launch_instances(ir: Any, site: Any, callee: int, kernel: Any, template: Any,
                      scope: _Scope) -> list[Instance]:
    """The specializations one launch of a template kernel makes (one per type of the
    dispatch macro around it, if any; see `instances`), or the one an explicit instantiation
    names (`site`: the launch or the instantiation; `callee`: the kernel's name in it)."""
    tparams = _template_params(ir, template)
    params = _kernel_params(ir, kernel)
    if tparams is None or params is None:
        return []
    tlist = next((n.id for n in ir.walk(callee) if n.grammar_type == "template_argument_list"),
                 None)  # the callee's own, before any nested in it
    written = [ir.node_text(c) for c in ir.children_of(tlist)
               if ir.grammar_type_of(c) != "comment"] if tlist is not None else []
    if site.kind == "launch":
        arglist = next((c for c in ir.children_of(site.id)
                        if ir.grammar_type_of(c) == "argument_list"), None)
        pointees = [_pointee(ir, c) for c in ir.children_of(arglist)] if arglist is not None else []
    else:
        pointees = [_declared_pointee(p) for p in _kernel_params(ir, site) or []]
    if tlist is None and "<" in ir.node_text(callee):
        return []  # arguments the grammar did not read as a list
    if len(written) > len(tparams):
        return []
    bindings: list[tuple[str, str | None]] = [("", None)]
    uses = " ".join(written + [p or "" for p in pointees])
    if re.search(rf"\b{_DISPATCHED}\b", uses):
        macro = next((ir.node(a) for a in ir.ancestors(site) if ir.kind_of(a) == "call"
                      and _DISPATCH.fullmatch(str(ir.attrs_of(a).get("callee") or ""))), None)
        if macro is None:
            return []
        call = ir.node_text(macro)
        head = call[:call.find('"')] if '"' in call else call
        bindings = _dispatch_types(str(macro.attrs.get("callee")), head)
    qualified = "::".join(ir.name_of(a) or "" for a in reversed(list(ir.ancestors(kernel)))
                          if ir.kind_of(a) == "namespace" and ir.name_of(a) != "(anonymous)")
    out = []
    for dispatched, why in bindings:
        bind = {_DISPATCHED: dispatched} if dispatched else {}
        inst = _specialize(kernel.name or "", qualified, tparams, params,
                           [_replace_names(w, bind) for w in written],
                           [_replace_names(p, bind) if p else None for p in pointees], scope)
        if inst is not None:
            out.append(Instance(inst.kernel, inst.args, inst.declaration,
                                inst.stand_in or why))
    return out


def _specialize(name: str, namespace: str, tparams: list[tuple[str, bool, str | None]],
                params: list[str], written: list[str], pointees: list[str | None],
                scope: _Scope) -> Instance | None:
    """The explicit instantiation of kernel `name` for one launch (see `instances`)."""
    values: dict[str, str] = {}
    stand_ins: list[str] = []

    def put(param: str, arg: str) -> bool:
        got = scope.resolve(arg)
        if got is None:
            return False
        values[param] = got[0]
        if got[1]:
            stand_ins.append(got[1])
        return True

    for (param, _, _), arg in zip(tparams, written, strict=False):
        if not put(param, arg):
            return None
    kinds = {p: is_type for p, is_type, _ in tparams}
    deduced = _deduced(params, {p for p, t in kinds.items() if t and p not in values}, pointees)
    if deduced is None:
        return None
    for param, arg in deduced.items():
        if not put(param, arg):
            return None
    for param, _, default in tparams:  # a default may name the parameters before it
        typed = {p: (v if kinds[p] else f"({v})") for p, v in values.items()}
        if param not in values and (default is None or
                                    not put(param, _replace_names(default, typed))):
            return None
    if any(kinds[p] and re.search(r"[*&\[(]", v) for p, v in values.items()):
        return None
    args = tuple(values[p] for p, _, _ in tparams)
    typed = {p: (v if kinds[p] else f"({v})") for p, v in values.items()}
    where = f"{namespace}::" if namespace else ""
    declaration = (f"template __global__ void {where}{name}<{', '.join(args)}>"
                   f"({', '.join(_replace_names(p, typed) for p in params)});")
    return Instance(name, args, declaration, "; ".join(dict.fromkeys(stand_ins)) or None)


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
