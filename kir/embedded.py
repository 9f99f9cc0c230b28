"""CUDA source held as a string in a Python host module, and writing a new source back into it.

Users write CUDA kernels inside Python as often as beside it: a KernelBench-style solution
passes a string to `torch.utils.cpp_extension.load_inline(cuda_sources=...)`, a CuPy host to
`cupy.RawKernel` / `cupy.RawModule`, an NVRTC host to `nvrtcCreateProgram`. The IR, the anchors
and the passes work on that string's text as a CUDA source (`find`, `in_file`); a rewrite of it
goes back into the module as a string literal that evaluates to the rewritten text (`splice`),
the rest of the module unchanged.

Which literal is the source: the one string constant of the module, outside docstrings, that
defines a `__global__` function. A module with several such literals, or whose source is an
f-string (its text depends on values known only when the module runs), is refused with the
reason (`BadInputError`). A module that defines `@triton.jit` kernels is a Triton kernel, not
a CUDA host (`in_file` gives None).

Positions are character offsets into the module's text, end exclusive.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

from kir.errors import BadInputError

_DEFINES_KERNEL = re.compile(r"__global__[^;{}()]*?\b[A-Za-z_]\w*\s*\(")
_PREFIX = re.compile(r"^([rRuU]*)('''|\"\"\"|'|\")", re.S)


@dataclass(frozen=True, slots=True)
class Embedded:
    """The CUDA source literal of a host module: `host` (the module's text), `start`/`end`
    (the literal's character span in it, prefix and quotes included), `text` (the literal's
    value: the CUDA source) and `line` (1-indexed line of the literal's start)."""

    host: str
    start: int
    end: int
    text: str
    line: int

    @property
    def literal(self) -> str:
        return self.host[self.start:self.end]

    def splice(self, source: str) -> str:
        """The host module with `source` in place of the CUDA source: the same text when
        `source` is unchanged, else the literal rewritten in its own quoting where that can
        hold `source` (a raw triple-quoted string stays raw unless `source` needs escapes)."""
        if source == self.text:
            return self.host
        return self.host[:self.start] + encode_literal(source, self.literal) + self.host[self.end:]


def encode_literal(value: str, like: str) -> str:
    """A Python string literal that evaluates to `value`, in the quoting of the literal `like`
    (its prefix letters and quotes) where possible."""
    m = _PREFIX.match(like)
    prefix, quote = (m.group(1), m.group(2)) if m else ("", '"""')
    raw = "r" in prefix.lower()
    attempts = []
    if raw:
        attempts.append(prefix + quote + value + quote)
    escaped = value.replace("\\", "\\\\")
    plain = prefix.replace("r", "").replace("R", "")
    if len(quote) == 3:
        # escape the delimiter's character where a run of it could end the literal early
        body = escaped.replace(quote[0], "\\" + quote[0]) if quote in escaped or \
            escaped.endswith(quote[0]) else escaped
    else:
        body = escaped.replace(quote, "\\" + quote).replace("\n", "\\n").replace("\r", "\\r")
    attempts.append(plain + quote + body + quote)
    attempts.append(repr(value))
    for text in attempts:
        try:
            if ast.literal_eval(text) == value:
                return text
        except (SyntaxError, ValueError):
            continue
    return repr(value)


def _docstrings(tree: ast.Module) -> set[int]:
    """ids of the constant nodes that are docstrings (a string statement of its own)."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, (ast.Constant, ast.JoinedStr)):
            out.add(id(node.value))
    return out


def _offsets(text: str) -> list[int]:
    """Byte offset of each line's start in the UTF-8 encoding of `text` (index 0: line 1)."""
    starts = [0]
    for line in text.encode("utf-8").splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    return starts


def defines_kernel(text: str) -> bool:
    """Whether `text` defines (or declares) a `__global__` function."""
    return _DEFINES_KERNEL.search(text) is not None


def find(host: str, *, where: str = "module") -> Embedded | None:
    """The CUDA source literal of the Python module text `host` (module docstring), or None
    when it holds none. Raises `BadInputError` for text that does not parse, for several
    source literals and for an f-string source; `where` names the module in those messages."""
    try:
        tree = ast.parse(host)
    except SyntaxError as exc:
        raise BadInputError(f"{where}: Python syntax error: {exc.msg} (line {exc.lineno})") from None
    docs = _docstrings(tree)
    found: list[ast.Constant] = []
    formatted: list[int] = []
    for node in ast.walk(tree):
        if id(node) in docs:
            continue
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and defines_kernel(node.value):
            found.append(node)
        elif isinstance(node, ast.JoinedStr) and any(
                isinstance(v, ast.Constant) and isinstance(v.value, str) and "__global__" in v.value
                for v in node.values):
            formatted.append(node.lineno)
    if formatted:
        raise BadInputError(f"{where}: the CUDA source at line {formatted[0]} is an f-string: its "
                            f"text is known only when the module runs (write it as a plain string "
                            f"and pass values as kernel arguments or #defines)")
    if not found:
        return None
    if len(found) > 1:
        lines = ", ".join(str(n.lineno) for n in found)
        raise BadInputError(f"{where}: {len(found)} string literals define CUDA kernels (lines "
                            f"{lines}); one CUDA source per host module is supported")
    node = found[0]
    data = host.encode("utf-8")
    lines = _offsets(host)
    assert node.end_lineno is not None and node.end_col_offset is not None
    b0 = lines[node.lineno - 1] + node.col_offset
    b1 = lines[node.end_lineno - 1] + node.end_col_offset
    start = len(data[:b0].decode("utf-8"))
    end = start + len(data[b0:b1].decode("utf-8"))
    return Embedded(host, start, end, node.value, node.lineno)


def _defines_triton_kernel(tree: ast.Module) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for dec in node.decorator_list:
                target = dec.func if isinstance(dec, ast.Call) else dec
                if isinstance(target, ast.Attribute) and target.attr in ("jit", "autotune", "heuristics") \
                        and isinstance(target.value, ast.Name) and target.value.id == "triton":
                    return True
    return False


def in_file(path: str | Path) -> Embedded | None:
    """The CUDA source held in the Python file `path`, or None when `path` is no `.py` file,
    holds no CUDA source, or defines `@triton.jit` kernels. Raises `BadInputError` like
    `find`, and for a file that cannot be read as UTF-8 text."""
    p = Path(path)
    if p.suffix != ".py" or not p.is_file():
        return None
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInputError(f"{p}: cannot read as UTF-8 text ({exc})") from None
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None  # not a host module: the caller's own parse reports the error
    if _defines_triton_kernel(tree):
        return None
    return find(text, where=str(p))


@dataclass(frozen=True, slots=True)
class CudaUnit:
    """What a CUDA kernel file stands for: `source` (the CUDA text), `source_path` (where it
    is: the `.cu`, or the host module holding it), `host_path` (the Python host module) and
    `held` (the literal, when the source is held in the host module)."""

    source: str
    source_path: Path
    host_path: Path
    held: Embedded | None = None

    def text_of(self, source: str) -> str:
        """The text of `source_path` for a rewritten `source`: the source itself for a `.cu`,
        the host module with `source` written into its string for a held one."""
        return self.held.splice(source) if self.held is not None else source


def cuda_unit(path: str | Path) -> CudaUnit | None:
    """The CUDA kernel `path` stands for, or None when it is not one: a `.cu` (its host the
    `.py` of the same stem); a `.py` host module holding its CUDA source (`in_file`); a `.py`
    host module beside a `.cu` of its stem that defines no `@triton.jit` kernel. Raises
    `BadInputError` like `in_file`, and for a `.py` that compiles CUDA (`load_inline`, CuPy,
    NVRTC) from a source that is neither one string literal nor a `.cu` beside it."""
    p = Path(path)
    if p.suffix == ".cu":
        try:
            return CudaUnit(p.read_text(encoding="utf-8"), p, p.with_suffix(".py"))
        except (OSError, UnicodeDecodeError) as exc:
            raise BadInputError(f"{p}: cannot read as UTF-8 text ({exc})") from None
    held = in_file(p)
    if held is not None:
        return CudaUnit(held.text, p, p, held)
    if p.suffix != ".py" or not p.is_file():
        return None
    try:
        tree = ast.parse(p.read_text(encoding="utf-8"))
    except (SyntaxError, UnicodeDecodeError, OSError):
        return None
    if _defines_triton_kernel(tree):
        return None
    beside = p.with_suffix(".cu")
    if beside.is_file():
        return cuda_unit(beside)
    compiler = _compiles_cuda(tree)
    if compiler is not None:
        raise BadInputError(f"{p}: calls {compiler} but holds no CUDA source as one string literal "
                            f"defining a __global__ function, and no {beside.name} is beside it "
                            f"(a source built at run time cannot be rewritten)")
    return None


# Calls that compile CUDA source a host module hands them.
_COMPILERS = frozenset({"load_inline", "RawKernel", "RawModule", "nvrtcCreateProgram",
                        "compile_source"})


def _compiles_cuda(tree: ast.Module) -> str | None:
    """The name of the first call in `tree` that compiles CUDA source, if any."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
            if name in _COMPILERS:
                return name
    return None
