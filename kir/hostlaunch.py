"""A launch configuration a CUDA source asks of its Python host module, and the host edited to
make it.

A rewrite may need the launch changed (dynamic shared memory and the kernel's opt-in to it, a
larger block, an argument built on the host) where the launch is not in the CUDA source but in
the Python host module beside it (a `.cu` plus its host) or around it (a source held as a string
by a CuPy / NVRTC host). The candidate stays one CUDA source: the rewrite writes what it needs as
a comment line of the source (`Directive`, `TAG`), and whoever runs or writes out the candidate's
host (the gate, the optimize loop's output, the CPU emulator's `run_host`) runs
`apply(host_text, source)`, which edits the host so that its launches of that kernel do it. A
de-optimization that takes the line out gives back the host as written; the edits are also
recognized and taken out before being made again (`apply` on an edited host is the same edit).

The host's launches, found by what they call (`launch_sites`):

- a CuPy kernel object called `k(grid, block, args, shared_mem=...)`: a name bound to
  `RawKernel(src, "name")` / `module.get_function("name")` (any callee whose name ends so);
- `*.launch(func, grid, block, shared_bytes, args, stream)` (`experts.cudahost`'s signature);
- `*.cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shared, stream, params, extra)`.

Which kernel a launch runs is read from where its function object comes from (a name, a
subscript or a call of a module function, traced to the one kernel-name literal it is looked up
by); a launch that cannot be told is taken as the source's where the source defines one kernel.
Each launch's callee `C` becomes `_kl_host_launch("kernel", "convention", C)`: a helper written
into the host (`HELPER`, once, after its imports) that checks the launch passes the block the
rewrite was made for and no dynamic shared memory (or keeps the launch's own bytes where the
directive says `keep_shared`, or drops them for its own where it says `drop_shared`), raises
the kernel's limit first (CuPy:
`max_dynamic_shared_size_bytes`; cudahost: `set_dynamic_shared`; driver: `cuFuncSetAttribute`),
launches the block and the bytes asked, and where asked encodes the operands' TMA tensor maps
(`cuda.bindings.driver.cuTensorMapEncodeTiled`, 2-D, 128-byte swizzle, zero fill; a map that
cannot be encoded gives maps marked absent, which the kernel takes as "stage without TMA") and
passes them by value after the launch's own arguments. A directive's `arch` (a kernel with
architecture-specific instructions) adds that target to a CuPy kernel's options and to the host's
own `nvrtcCompileProgram` calls. Positions are character offsets of the host's text. Plain Python
only; nothing here imports a GPU library.
"""
from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from typing import Any

TAG = "// host launch: "
"""How the source's comment line that asks for a launch configuration starts."""
CALL = "_kl_host_launch"
ARCH_CALL = "_kl_host_arch"
BEGIN = "# ---- host launch (begin): what the CUDA source asks of its launches ----\n"
END = "# ---- host launch (end) ----\n"
_LOOKUPS = ("RawKernel", "get_function", "cuModuleGetFunction", "cuLibraryGetKernel")


class HostLaunchError(ValueError):
    """A host module whose launches cannot be edited as a directive asks (the message: why)."""


@dataclass(frozen=True, slots=True)
class Directive:
    """What a source asks of its host's launches of `kernel`: `shared_bytes` of dynamic shared
    memory (the limit raised to it first), the block `block` instead of `block_from` (the block
    the launches must pass; None: the block is kept), `arch` (a target the kernel needs, e.g.
    "sm_90a"), and `tma` (None, or the tensor maps to pass after the launch's own arguments:
    {"dtype": "bf16" | "fp16", "params": [[name, bytes], ...] (the kernel's parameters),
    "maps": [[pointer, ld, inner, outer, box], ...] (parameter names or integer literals; a
    row-major outer x inner operand, boxes of 64 inner x box outer elements)})."""

    kernel: str
    shared_bytes: int = 0
    block_from: tuple[int, int, int] | None = None
    block: tuple[int, int, int] | None = None
    arch: str | None = None
    tma: dict[str, Any] | None = field(default=None, hash=False)
    persist: bool = False
    """The kernel loops over its own tiles with whatever grid it gets: a grid of more blocks than
    the device holds at once is launched as one row of that many (the device's SMs times the
    blocks of this size and shared memory an SM holds)."""
    keep_shared: bool = False
    """The launch's own dynamic shared memory passes as it is (`shared_bytes` is then 0): the
    rewritten kernel needs no more of it than the launch as written gives (a smaller block)."""
    drop_shared: bool = False
    """The launch's own dynamic shared memory is not passed, `shared_bytes` is: the rewritten
    kernel no longer declares the buffer the launch sized."""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kernel": self.kernel, "shared_bytes": self.shared_bytes}
        if self.block_from is not None:
            out["block_from"] = list(self.block_from)
        if self.block is not None:
            out["block"] = list(self.block)
        if self.arch:
            out["arch"] = self.arch
        if self.tma:
            out["tma"] = self.tma
        if self.persist:
            out["persist"] = True
        if self.keep_shared:
            out["keep_shared"] = True
        if self.drop_shared:
            out["drop_shared"] = True
        return out

    def line(self) -> str:
        """The source's comment line (no newline)."""
        return TAG + json.dumps(self.to_json(), sort_keys=True)

    @staticmethod
    def from_json(data: dict[str, Any]) -> Directive:
        def dims(v: Any) -> tuple[int, int, int] | None:
            return None if v is None else (int(v[0]), int(v[1]), int(v[2]))
        return Directive(str(data["kernel"]), int(data.get("shared_bytes", 0)),
                         dims(data.get("block_from")), dims(data.get("block")),
                         data.get("arch") or None, data.get("tma") or None,
                         bool(data.get("persist", False)), bool(data.get("keep_shared", False)),
                         bool(data.get("drop_shared", False)))


def directives(source: str) -> list[Directive]:
    """The directives of a CUDA source (its `TAG` comment lines), in order."""
    out = []
    for line in source.splitlines():
        at = line.find(TAG)
        if at >= 0 and not line[:at].strip():
            try:
                out.append(Directive.from_json(json.loads(line[at + len(TAG):])))
            except (ValueError, KeyError, TypeError, IndexError):
                continue
    return out


def directive_lines(source: str, kernel: str) -> list[tuple[int, int]]:
    """Character spans of the directive lines of `kernel` in `source`, each with its newline."""
    out, pos = [], 0
    for line in source.splitlines(keepends=True):
        at = line.find(TAG)
        if at >= 0 and not line[:at].strip():
            try:
                if json.loads(line[at + len(TAG):]).get("kernel") == kernel:
                    out.append((pos, pos + len(line)))
            except (ValueError, AttributeError):
                pass
        pos += len(line)
    return out


# ---------------------------------------------------------------------------------------------
# the host's launches


@dataclass(frozen=True, slots=True)
class LaunchSite:
    """One launch call of a host: its callee's character span, the convention ("cupy",
    "cudahost", "driver"), the kernel it runs (None where not told) and its line."""

    start: int
    end: int
    convention: str
    kernel: str | None
    line: int


def _name(func: ast.AST) -> str:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return _name(func.value) + "." + func.attr
    return ""


def _looked_up(expr: ast.AST) -> list[str]:
    """The kernel names `expr` looks a kernel up by (literal arguments of RawKernel /
    get_function / cuModuleGetFunction calls inside it)."""
    out = []
    for node in ast.walk(expr):
        if isinstance(node, ast.Call) and _name(node.func).split(".")[-1] in _LOOKUPS:
            for a in [*node.args, *(k.value for k in node.keywords if k.arg in ("name", "kernel"))]:
                if isinstance(a, ast.Constant) and isinstance(a.value, (str, bytes)):
                    value = a.value.decode() if isinstance(a.value, bytes) else a.value
                    if re.fullmatch(r"[A-Za-z_]\w*", value):
                        out.append(value)
    return out


class _Module:
    """What `_kernel_of` needs of a host module: each name's and subscript's assigned values,
    the module's functions."""

    def __init__(self, tree: ast.Module) -> None:
        self.values: dict[str, list[ast.AST]] = {}
        self.functions: dict[str, ast.AST] = {}
        for node in ast.walk(tree):
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    self.values.setdefault(ast.unparse(t), []).append(node.value)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.functions.setdefault(node.name, node)

    def kernel_of(self, expr: ast.AST, depth: int = 0) -> str | None:
        names = set(_looked_up(expr))
        if not names and depth < 4:
            if isinstance(expr, (ast.Name, ast.Subscript, ast.Attribute)):
                for value in self.values.get(ast.unparse(expr), []):
                    got = self.kernel_of(value, depth + 1)
                    if got:
                        names.add(got)
            elif isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and \
                    expr.func.id in self.functions:
                names.update(_looked_up(self.functions[expr.func.id]))
        return names.pop() if len(names) == 1 else None

    def kernel_objects(self) -> dict[str, str]:
        """Names (and subscripts) bound to a CuPy-style kernel object -> its kernel."""
        out = {}
        for target, values in self.values.items():
            for v in list(values):
                if isinstance(v, ast.Dict):  # {"name": RawKernel(...)}: each entry by its key
                    for key, item in zip(v.keys, v.values):
                        if isinstance(key, ast.Constant) and isinstance(item, ast.Call):
                            entry = ast.unparse(ast.Subscript(ast.parse(target, mode="eval").body,
                                                              ast.Constant(key.value)))
                            found = _looked_up(item)
                            if len(found) == 1:
                                out[entry] = found[0]
                    continue
                # CuPy's lookups: RawKernel(src, name), RawModule.get_function(name) (cudahost's
                # get_function(compiled, name) gives a function handle, not a callable kernel)
                last = _name(v.func).split(".")[-1] if isinstance(v, ast.Call) else ""
                if last == "RawKernel" or (last == "get_function" and len(v.args) == 1):
                    found = _looked_up(v)
                    if len(found) == 1:
                        out[target] = found[0]
        return out


def _offsets(text: str) -> list[int]:
    """Character offset of each line's start (index 0: line 1)."""
    starts = [0]
    for line in text.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    return starts


def _span(text: str, starts: list[int], node: ast.AST) -> tuple[int, int]:
    """The character span of `node` (ast columns count UTF-8 bytes)."""
    def at(line: int, col: int) -> int:
        raw = text[starts[line - 1]:starts[line]].encode("utf-8")[:col]
        return starts[line - 1] + len(raw.decode("utf-8", errors="replace"))
    return at(node.lineno, node.col_offset), at(node.end_lineno, node.end_col_offset)  # type: ignore[attr-defined]


def launch_sites(host_text: str) -> list[LaunchSite]:
    """Every kernel launch of the host module (see the module docstring), in text order.
    Raises `HostLaunchError` for a module that does not parse."""
    try:
        tree = ast.parse(host_text)
    except SyntaxError as exc:
        raise HostLaunchError(f"the host module does not parse (line {exc.lineno})") from None
    module = _Module(tree)
    objects = module.kernel_objects()
    starts = _offsets(host_text)
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Call) and _name(func.func) == CALL and len(func.args) == 3:
            convention = func.args[1].value if isinstance(func.args[1], ast.Constant) else ""
            inner = func.args[2]
        else:
            convention, inner = "", func
        name = _name(inner)
        last = name.split(".")[-1]
        if not convention:
            if last == "cuLaunchKernel":
                convention = "driver"
            elif last == "launch" and (len(node.args) >= 5 or node.keywords):
                convention = "cudahost"
            elif ast.unparse(inner) in objects or (
                    isinstance(inner, ast.Call) and _name(inner.func).split(".")[-1] ==
                    "get_function" and len(inner.args) == 1):  # module.get_function("k")(...)
                convention = "cupy"
            else:
                continue
        if convention == "cupy":
            kernel = objects.get(ast.unparse(inner)) or module.kernel_of(inner)
        else:
            first = node.args[0] if node.args else next(
                (k.value for k in node.keywords if k.arg in ("func", "f", "kernel")), None)
            kernel = module.kernel_of(first) if first is not None else None
        start, end = _span(host_text, starts, func)
        out.append(LaunchSite(start, end, convention, kernel, node.lineno))
    return sorted(out, key=lambda s: s.start)


def _compile_calls(host_text: str) -> list[tuple[int, int]]:
    """Character spans of the callees of the host's `nvrtcCompileProgram` calls and CuPy
    `RawModule` constructions (whose functions a launch cannot compile again: their options are
    given the target where the module is built), bare or already wrapped by `ARCH_CALL`."""
    tree = ast.parse(host_text)
    starts = _offsets(host_text)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            inner = f.args[1] if isinstance(f, ast.Call) and _name(f.func) == ARCH_CALL and \
                len(f.args) == 2 else f
            if _name(inner).split(".")[-1] in ("nvrtcCompileProgram", "RawModule"):
                out.append(_span(host_text, starts, f))
    return sorted(out)


def refusal(host_text: str, kernel: str, only_kernel: bool, where: str = "the host module") -> str:
    """Why the host's launches of `kernel` cannot be edited, or "" where they can.
    `only_kernel`: the CUDA source defines no other kernel (a launch that does not say which
    kernel it runs is of this one)."""
    try:
        sites = launch_sites(host_text)
    except HostLaunchError as exc:
        return f"{where}: {exc}"
    mine = [s for s in sites if s.kernel == kernel or (s.kernel is None and only_kernel)]
    tree = ast.parse(host_text)
    objects = [t for t, k in _Module(tree).kernel_objects().items() if k == kernel]
    calls = {(s.start, s.end) for s in mine}
    starts = _offsets(host_text)
    for node in ast.walk(tree):
        # a kernel object handed on (to another name, into a container) is launched where the
        # rule cannot see
        if isinstance(node, (ast.Name, ast.Subscript, ast.Attribute)) and \
                isinstance(getattr(node, "ctx", None), ast.Load) and ast.unparse(node) in objects:
            if _span(host_text, starts, node) in calls or _inside_call(tree, node):
                continue
            return (f"{where} uses the kernel object {ast.unparse(node)} at line {node.lineno} "
                    "other than by calling it (its launch there cannot be followed)")
    if not mine:
        untold = [s for s in sites if s.kernel is None]
        if untold:
            return (f"{where} launches a kernel at line {untold[0].line} through a function object "
                    f"the rule cannot trace to {kernel}'s lookup")
        return (f"{where} has no launch of {kernel} the rule can read (a CuPy kernel call, "
                "experts.cudahost's launch, cuLaunchKernel)")
    return ""


def _inside_call(tree: ast.AST, node: ast.AST) -> bool:
    """Whether `node` is an attribute read of a kernel object (`k.attributes`) or inside an
    edited callee (`_kl_host_launch(..., k)`)."""
    for parent in ast.walk(tree):
        if isinstance(parent, ast.Attribute) and parent.value is node:
            return True
        if isinstance(parent, ast.Call) and _name(parent.func) == CALL and node in parent.args:
            return True
    return False


# ---------------------------------------------------------------------------------------------
# editing the host


def strip(host_text: str) -> str:
    """`host_text` without the edits `apply` made: the helper block goes, every wrapped callee
    is written as it was."""
    text = host_text
    a = text.find(BEGIN)
    b = text.find(END, a) if a >= 0 else -1
    if a >= 0 and b >= 0:
        text = text[:a] + text[b + len(END):]
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return text
    starts = _offsets(text)
    cuts = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _name(node.func) in (CALL, ARCH_CALL) and node.args:
            inner = node.args[-1]
            cuts.append((*_span(text, starts, node), text[slice(*_span(text, starts, inner))]))
    for s, e, value in sorted(cuts, reverse=True):
        text = text[:s] + value + text[e:]
    return text


def _insert_at(text: str) -> int:
    """Where the helper goes: before the module's first statement that is not its docstring or
    an import (the end where there is none)."""
    tree = ast.parse(text)
    starts = _offsets(text)
    for i, node in enumerate(tree.body):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if i == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue
        first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
        return starts[first - 1]
    return len(text)


def edit(host_text: str, wanted: list[Directive], kernels: set[str] | None = None) -> str:
    """`host_text` with its launches doing what `wanted` asks (see the module docstring); the
    host as written (`strip`) where nothing is asked. `kernels`: the kernels of the CUDA source
    (a launch that does not say which kernel it runs is of the only one). Raises
    `HostLaunchError` where a launch cannot be edited."""
    text = strip(host_text)
    if not wanted:
        return text
    only = kernels is not None and len(kernels) == 1
    for d in wanted:
        why = refusal(text, d.kernel, only and d.kernel in (kernels or set()))
        if why:
            raise HostLaunchError(why)
    edits: list[tuple[int, int, str]] = []
    by_kernel = {d.kernel: d for d in wanted}
    for s in launch_sites(text):
        kernel = s.kernel if s.kernel is not None else (next(iter(kernels)) if only and kernels
                                                         else None)
        if kernel in by_kernel:
            callee = text[s.start:s.end]
            edits.append((s.start, s.end,
                          f"{CALL}({json.dumps(kernel)}, {json.dumps(s.convention)}, {callee})"))
    arch = next((d.arch for d in wanted if d.arch), None)
    if arch:
        for s, e in _compile_calls(text):
            edits.append((s, e, f"{ARCH_CALL}({json.dumps(arch)}, {text[s:e]})"))
    for s, e, new in sorted(edits, reverse=True):
        text = text[:s] + new + text[e:]
    specs = {d.kernel: d.to_json() for d in wanted}
    block = BEGIN + f"_KL_HOST_LAUNCHES = {specs!r}\n" + HELPER + END
    at = _insert_at(text)
    lead = "" if at == 0 or text[at - 1:at] == "\n" else "\n"
    return text[:at] + lead + block + text[at:]


def apply(host_text: str, source: str) -> str:
    """The host module to run for the CUDA `source`: `host_text` edited as the source's
    directives ask (unchanged where it asks nothing and the host carries no edits). Raises
    `HostLaunchError` where a launch cannot be edited."""
    wanted = directives(source)
    if not wanted and BEGIN not in host_text:
        return host_text
    bare = re.sub(r"__launch_bounds__\s*\([^()]*\)", "", source)
    kernels = set(re.findall(r"__global__[^;{}()]*?\b([A-Za-z_]\w*)\s*\(", bare))
    return edit(host_text, wanted, kernels)


HELPER = r'''

def _kl_host_launch(kernel, convention, launch):
    """`launch` (a launch of `kernel`: a CuPy kernel object, experts.cudahost's `launch`, the
    driver's `cuLaunchKernel`) as the kernel's source asks (_KL_HOST_LAUNCHES): the block it was
    rewritten for and no dynamic shared memory expected (unless kept: "keep_shared", the
    launch's own bytes pass as they are); the kernel's limit raised, then the
    block and the bytes asked launched, with the TMA tensor maps after the arguments where
    asked."""
    spec = _KL_HOST_LAUNCHES[kernel]

    def call(*args, **kwargs):
        return _kl_host_call(kernel, spec, convention, launch, list(args), dict(kwargs))
    return call


def _kl_host_arch(arch, compile_program):
    """The host's nvrtcCompileProgram with the target `arch` (e.g. sm_90a) for the program: an
    option naming the same architecture without its suffix gets it; none: the target added. For
    a CuPy RawModule: the module built with the target among its options."""
    if getattr(compile_program, "__name__", "") == "RawModule":
        def build(*args, **kwargs):
            options = tuple(kwargs.get("options", ()) or ())
            if not any(arch in str(o) for o in options):
                kwargs["options"] = options + ("-arch=" + arch,)
            return compile_program(*args, **kwargs)
        return build

    def call(prog, count, options, *rest):
        options = list(options)[:int(count)]
        number = arch.split("_")[-1].rstrip("a")
        found = False
        for i, option in enumerate(options):
            raw = option.decode() if isinstance(option, bytes) else str(option)
            for flag in ("--gpu-architecture=", "-arch=", "-arch "):
                if raw.startswith(flag):
                    found = True
                    kind, _, value = raw[len(flag):].partition("_")
                    if value == number:
                        new = flag + kind + "_" + value + "a"
                        options[i] = new.encode() if isinstance(option, bytes) else new
        if not found:
            added = "--gpu-architecture=" + arch
            options.append(added.encode() if options and isinstance(options[0], bytes) else added)
        return compile_program(prog, len(options), options, *rest)
    return call


def _kl_host_grid(spec, grid, block, nbytes):
    """`grid`, or where the kernel loops over its own tiles (spec "persist") and `grid` has more
    blocks than the device holds at once, one row of that many: the SMs times the blocks an SM
    holds by threads (2048) and by shared memory (its per-SM bytes over the block's, 1 KiB of it
    the runtime's own); `grid` where the device cannot be asked."""
    if not spec.get("persist"):
        return grid
    dims, threads = _kl_host_dim3(grid), 1
    for v in _kl_host_dim3(block):
        threads *= v
    try:
        import importlib

        drv = importlib.import_module("cuda.bindings.driver")
        err, dev = drv.cuCtxGetDevice()
        attr = drv.CUdevice_attribute
        err2, sms = drv.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev)
        err3, smem = drv.cuDeviceGetAttribute(
            attr.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, dev)
        if int(err) or int(err2) or int(err3):
            return grid
    except Exception:  # no driver to ask (an emulated run, no cuda-python): the grid as given
        return grid
    per = min(2048 // max(threads, 1), int(smem) // (int(nbytes) + 1024))
    most = int(sms) * per
    if most <= 0 or dims[0] * dims[1] * dims[2] <= most:
        return grid
    return (max(most // dims[2], 1), 1, dims[2])  # (planes stay: blockIdx.z may be a batch)


def _kl_host_dim3(value):
    if isinstance(value, int):
        return (value, 1, 1)
    dims = [int(v) for v in value] + [1, 1, 1]
    return (dims[0], dims[1], dims[2])


def _kl_host_int(value):
    if hasattr(value, "data_ptr"):
        return int(value.data_ptr())
    if hasattr(value, "__cuda_array_interface__"):
        return int(value.__cuda_array_interface__["data"][0])
    if hasattr(value, "value") and not isinstance(value, int):
        return int(value.value)
    return int(value)


class _KlHostBytes:
    """A kernel argument passed by value from bytes, 64-byte aligned (`getPtr`, as cuda-python's
    structures)."""

    def __init__(self, data):
        import ctypes

        self._buffer = ctypes.create_string_buffer(len(data) + 64)
        self._at = (ctypes.addressof(self._buffer) + 63) & ~63
        ctypes.memmove(self._at, data, len(data))

    def getPtr(self):
        return self._at


def _kl_host_maps(tma, values):
    """The kernel's tensor-map parameter (two CUtensorMaps and `ok`, 320 bytes) for the
    argument values `values` (by parameter), `ok` only where both maps were encoded."""
    import ctypes
    import importlib

    try:
        drv = importlib.import_module("cuda.bindings.driver")
    except ImportError:
        drv = None
    names = [p[0] for p in tma["params"]]

    def value(name):
        return _kl_host_int(values[names.index(name)]) if name in names else int(name)
    words, ok = [], drv is not None
    for ptr, ld, inner, outer, box in tma["maps"]:
        base, pitch, n_in, n_out = value(ptr), value(ld), value(inner), value(outer)
        tmap = None
        if drv is not None and n_in > 0 and n_out > 0 and pitch >= n_in and pitch * 2 % 16 == 0 \
                and base % 16 == 0:
            kind = drv.CUtensorMapDataType
            err, tmap = drv.cuTensorMapEncodeTiled(
                kind.CU_TENSOR_MAP_DATA_TYPE_FLOAT16 if tma["dtype"] == "fp16"
                else kind.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, base,
                [drv.cuuint64_t(n_in), drv.cuuint64_t(n_out)], [drv.cuuint64_t(pitch * 2)],
                [drv.cuuint32_t(64), drv.cuuint32_t(box)], [drv.cuuint32_t(1), drv.cuuint32_t(1)],
                drv.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
                drv.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B,
                drv.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                drv.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
            tmap = tmap if int(err) == 0 else None
        ok = ok and tmap is not None
        words.append(ctypes.string_at(int(tmap.getPtr()), 128) if tmap is not None else bytes(128))
    return b"".join(words) + int(ok).to_bytes(4, "little") + bytes(60)


def _kl_host_bind(args, kwargs, names):
    """The values of the parameters `names` of a call made with `args` / `kwargs` (taken out of
    `kwargs`); None for one not passed."""
    out = list(args[:len(names)]) + [None] * max(0, len(names) - len(args))
    for i, name in enumerate(names):
        if name in kwargs:
            out[i] = kwargs.pop(name)
    return out, list(args[len(names):])


def _kl_host_call(kernel, spec, convention, launch, args, kwargs):
    import importlib

    nbytes = int(spec["shared_bytes"])
    want = spec.get("block_from")
    keep = bool(spec.get("keep_shared"))  # the launch's own bytes pass as they are
    drop = bool(spec.get("drop_shared"))  # the launch's own bytes give way to the spec's

    def checked(block, shared):
        if want is not None and list(_kl_host_dim3(block)) != list(want):
            raise RuntimeError(f"{kernel} is launched with the block {_kl_host_dim3(block)}; its "
                               f"source was rewritten for {tuple(want)}")
        if shared not in (None, 0) and not keep and not drop:
            raise RuntimeError(f"{kernel}'s launch already passes {shared} bytes of dynamic "
                               "shared memory")
        return tuple(spec["block"]) if spec.get("block") else block
    tma = spec.get("tma")
    if convention == "cupy":
        (grid, block, kargs), rest = _kl_host_bind(args, kwargs, ("grid", "block", "args"))
        shared = kwargs.pop("shared_mem", None)
        block = checked(block, shared)
        nbytes = int(shared or 0) if keep else nbytes
        kern = _kl_host_arch_kernel(launch, spec.get("arch"))
        kern.max_dynamic_shared_size_bytes = nbytes
        kargs = tuple(kargs)
        grid = _kl_host_grid(spec, grid, block, nbytes)
        if tma:
            import numpy

            data = _kl_host_maps(tma, kargs)
            kind = numpy.dtype({"names": ["w", "ok"], "formats": [("<u8", (32,)), "<i4"],
                                "offsets": [0, 256], "itemsize": len(data)})
            kargs += (numpy.frombuffer(data, dtype=kind)[0],)
        return kern(grid, block, kargs, *rest, shared_mem=nbytes, **kwargs)
    if convention == "cudahost":
        names = ("func", "grid", "block", "shared_bytes", "args", "stream")
        (func, grid, block, shared, kargs, stream), rest = _kl_host_bind(args, kwargs, names)
        block = checked(block, shared)
        nbytes = int(shared or 0) if keep else nbytes
        grid = _kl_host_grid(spec, grid, block, nbytes)
        importlib.import_module("experts.cudahost").set_dynamic_shared(func, nbytes)
        kargs = list(kargs)
        if tma:
            kargs.append(_KlHostBytes(_kl_host_maps(tma, kargs)))
        return launch(func, grid, block, nbytes, kargs, stream, *rest, **kwargs)
    # the driver's cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shared, stream, params, extra)
    if len(args) != 11 or kwargs:
        raise RuntimeError(f"{kernel}: cuLaunchKernel called with {len(args)} positional "
                           "arguments (11 expected)")
    drv = importlib.import_module("cuda.bindings.driver")
    args[4:7] = checked(tuple(args[4:7]), args[7])
    nbytes = int(args[7] or 0) if keep else nbytes
    args[1:4] = _kl_host_grid(spec, tuple(args[1:4]), tuple(args[4:7]), nbytes)
    args[7] = nbytes
    attr = drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    result = drv.cuFuncSetAttribute(args[0], attr, nbytes)
    err = result[0] if isinstance(result, tuple) else result
    if err is not None and int(err) != 0:
        return result if isinstance(result, tuple) else (result,)
    keep = None
    if tma:
        import ctypes

        params, count = args[9], len(tma["params"])
        if isinstance(params, tuple) and len(params) == 2:
            maps = _KlHostBytes(_kl_host_maps(tma, list(params[0])))
            args[9] = (tuple(params[0]) + (maps,), tuple(params[1]) + (None,))
        else:
            address = int(params) if not hasattr(params, "ctypes") else int(params.ctypes.data)
            pointers = (ctypes.c_void_p * count).from_address(address)
            sizes = {1: ctypes.c_uint8, 2: ctypes.c_uint16, 4: ctypes.c_int32, 8: ctypes.c_int64}
            values = [sizes.get(int(size), ctypes.c_int64).from_address(pointers[i]).value
                      for i, (_, size) in enumerate(tma["params"])]
            maps = _KlHostBytes(_kl_host_maps(tma, values))
            keep = (ctypes.c_void_p * (count + 1))(*pointers, maps.getPtr())
            args[9] = ctypes.addressof(keep)
    out = launch(*args)
    del keep
    return out


_KL_HOST_KERNELS = {}


def _kl_host_arch_kernel(kern, arch):
    """A CuPy kernel object compiled for `arch` as well (its options given the target), once
    per source, name and options; `kern` where none is asked or its source is not at hand."""
    code, options = getattr(kern, "code", None), tuple(getattr(kern, "options", ()) or ())
    if not arch or not code or any(arch in str(o) for o in options):
        return kern
    key = (type(kern), code, kern.name, options, arch)
    derived = _KL_HOST_KERNELS.get(key)
    if derived is None:
        # built as the host builds its kernels (`cupy.RawKernel`, which a launch monitor may
        # stand in for), the options by name (the monitor's kernel takes no other positions);
        # a plain import, so that the gate reads it as CuPy compiling the host's own source
        import cupy

        derived = cupy.RawKernel(code, kern.name, options=options + ("-arch=" + arch,))
        try:  # compiled now: a compiler that refuses the target says so here, by name
            if callable(getattr(derived, "compile", None)):
                derived.compile()
        except Exception as exc:
            raise RuntimeError(f"{kern.name}: CuPy could not compile it with -arch={arch} beside "
                               f"its own target ({type(exc).__name__}: {str(exc)[:200]})") from exc
        _KL_HOST_KERNELS[key] = derived
    return derived
'''
"""The host helper `edit` writes (after `_KL_HOST_LAUNCHES`, the directives by kernel)."""


_NAMESPACE: dict[str, Any] = {}


def helpers() -> dict[str, Any]:
    """`HELPER`'s functions, to call from Python (`_kl_host_maps(tma, values)`: the tensor-map
    parameter's bytes; `_KlHostBytes(data)`: bytes passed by value), run once."""
    if not _NAMESPACE:
        exec(compile(HELPER, "kir.hostlaunch.HELPER", "exec"), _NAMESPACE)  # noqa: S102
    return _NAMESPACE

