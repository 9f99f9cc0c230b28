"""The source rewrite that lets CUDA C++ device code compile as C++ for the emulator.

Four rewrites, each keeping the line count of what it replaces (so compiler messages name the
user's lines):

- every `__shared__` declaration (function or file scope, any number of declarators) becomes a
  reference to block-shared storage: `__shared__ float t[32][33];` ->
  `float (&t)[32][33] = ::cudacpu::shared_var<float[32][33], ID>();`, and
  `extern __shared__ T s[];` -> a reference to the launch's dynamic shared memory;
- every `asm(...)` statement becomes a call of the PTX emulator with its template and its
  operands (outputs by reference): `::cudacpu::ptx::exec(template, operands, n, extended)`.
  A template made only of string literals is checked here against `SUPPORTED`; one that holds
  an instruction outside it becomes `::cudacpu::unsupported(reason)`, which ends the launch
  that executes it with the instruction named (a source may hold kernels its host never
  launches on this device); one built by macros is checked when it runs;
- every `volatile T* name` declaration becomes `::cudacpu::lockstep_ptr<T> name`: the
  lanes of a warp perform their accesses through it together (warp-synchronous code written
  for converged lanes, such as a tree's last steps through a volatile shared pointer);
- the kernels (`__global__` functions that are not templates) are registered by name, so a
  launch can find them (`CUDACPU_KERNEL(name)` appended at the end).

Positions are 0-indexed character offsets into the source. Pure text processing: no compiler.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Rewritten", "Unsupported", "SUPPORTED", "rewrite", "kernel_names"]

# Inline PTX the emulator runs (gate/cudacpu/cudacpu_ptx.h), by instruction head.
SUPPORTED = (
    ("mma.sync.aligned.m16n8k16.row.col", "f32 or f16 accumulators, f16 or bf16 inputs"),
    ("mma.sync.aligned.m16n8k8.row.col", "f32 or f16 accumulators, f16 or bf16 inputs"),
    ("ldmatrix.sync.aligned.m8n8", ".x1/.x2/.x4, .trans, .shared .b16"),
    ("stmatrix.sync.aligned.m8n8", ".x1/.x2/.x4, .trans, .shared .b16"),
    ("cp.async.ca", "shared <- global, 4/8/16 bytes, src-size or ignore-src zero fill"),
    ("cp.async.cg", "shared <- global, 16 bytes, src-size or ignore-src zero fill"),
    ("cp.async.commit_group", ""), ("cp.async.wait_group", ""), ("cp.async.wait_all", ""),
    ("cp.async.mbarrier.arrive", "the thread's copies land, then .noinc counts an arrival"),
    ("cvt", "f32 <-> f16 / bf16, f32 pair -> f16x2 / bf16x2"),
    ("cvta", "to / from .shared"),
    ("mov", "registers, special registers (%laneid, %warpid, %tid ...), vector pack / unpack"),
    ("setp", "integer and f32 comparisons"), ("selp", ""),
    ("ld", ".shared / .global / generic, scalar and .v2 / .v4"),
    ("st", ".shared / .global / generic, scalar and .v2 / .v4"),
    ("add", ""), ("sub", ""), ("mul", ""), ("and", ""), ("or", ""), ("xor", ""), ("shl", ""),
    ("shr", ""), ("min", ""), ("max", ""), ("fma", "f32"), ("mad", "f32"),
    ("ex2", "f32"), ("rcp", "f32"), ("rsqrt", "f32"), ("sqrt", "f32"), ("lg2", "f32"),
    ("sin", "f32"), ("cos", "f32"), ("tanh", "f32"), ("neg", "f32"), ("abs", "f32"),
    ("bar.sync", "id, count: the block or named barriers"), ("barrier.sync", ""),
    ("bar.arrive", "named barriers"), ("barrier.arrive", ""),
    ("mbarrier.init", ""), ("mbarrier.inval", ""), ("mbarrier.arrive", "also .expect_tx"),
    ("mbarrier.expect_tx", ""), ("mbarrier.complete_tx", ""),
    ("mbarrier.try_wait", "also .parity"), ("mbarrier.test_wait", "also .parity"),
    ("cp.async.bulk.shared::cluster.global", "1-D, completing on an mbarrier"),
    ("cp.async.bulk.shared::cta.global", "1-D, completing on an mbarrier"),
    ("cp.async.bulk.global.shared::cta", "1-D bulk store"),
    ("cp.async.bulk.commit_group", ""), ("cp.async.bulk.wait_group", ""),
    ("cp.async.bulk.prefetch", "no effect"), ("bra", "within the statement (wait loops)"),
    ("cp.async.bulk.tensor", "tile mode, 1-5 dimensions, maps from the emulated cuTensorMapEncodeTiled, "
                             "32/64/128-byte swizzles, zero fill; loads on an mbarrier, stores"),
    ("wgmma.mma_async.sync.aligned", "m64nNk16, f32 accumulators, f16 / bf16 operands from descriptors"),
    ("wgmma.fence", "no effect"), ("wgmma.commit_group", "no effect"),
    ("wgmma.wait_group", "no effect: a wgmma's result is there when it is issued"),
    ("setmaxnreg", "no effect"),
    ("membar", "no effect: memory is sequentially consistent"),
    ("fence", "no effect"), ("prefetch", "no effect"), ("griddepcontrol", "no effect"),
)
_UNSUPPORTED_HINTS = {
    "cp.reduce.async.bulk": "reducing bulk copies", "tcgen05": "tcgen05 (Blackwell tensor memory)",
    "elect": "elect.sync", "red": "red (use atomic builtins)", "atom": "atom (use atomic builtins)",
    "shfl": "shfl in asm (use the __shfl_*_sync builtins)", "vote": "vote in asm",
}


class Unsupported(ValueError):
    """The source uses something the emulator cannot run; the message says what, in one line."""


@dataclass(frozen=True, slots=True)
class Rewritten:
    """The rewritten source, the kernels it registers, the counts of each rewrite, and why each
    asm statement the emulator cannot run is refused (when it runs)."""

    text: str
    kernels: tuple[str, ...]
    shared_decls: int
    asm_statements: int
    refused: tuple[str, ...] = ()


def _mask(text: str) -> str:
    """`text` with comments and the insides of string and character literals blanked (same
    length, newlines kept): searches on it find only code."""
    out = list(text)
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "/" and i + 1 < n and text[i + 1] == "/":
            j = text.find("\n", i)
            j = n if j < 0 else j
            for k in range(i, j):
                out[k] = " "
            i = j
        elif c == "/" and i + 1 < n and text[i + 1] == "*":
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            for k in range(i, j):
                if out[k] != "\n":
                    out[k] = " "
            i = j
        elif c in "\"'":
            if c == "'" and i > 0 and (text[i - 1].isalnum() or text[i - 1] == "_"):
                i += 1  # a digit separator (1'000) or a suffix, not a literal
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            for k in range(i + 1, min(j, n)):
                out[k] = " "
            i = j + 1
        else:
            i += 1
    return "".join(out)


def _match_paren(masked: str, open_at: int) -> int:
    """Index of the bracket closing the one at `open_at` (masked text); -1 when none."""
    pairs = {"(": ")", "[": "]", "{": "}"}
    stack = []
    for i in range(open_at, len(masked)):
        c = masked[i]
        if c in pairs:
            stack.append(pairs[c])
        elif c in ")]}":
            if not stack or stack.pop() != c:
                return -1
            if not stack:
                return i
    return -1


def _split_top(text: str, masked: str, sep: str, angle: bool = False) -> list[tuple[int, int]]:
    """Spans of `text` split at `sep` outside brackets (and outside <> with `angle`)."""
    spans, depth, start = [], 0, 0
    for i, c in enumerate(masked):
        if c in "([{" or (angle and c == "<"):
            depth += 1
        elif c in ")]}" or (angle and c == ">"):
            depth -= 1
        elif c == sep and depth == 0:
            spans.append((start, i))
            start = i + 1
    spans.append((start, len(text)))
    return spans


def _keep_lines(old: str, new: str) -> str:
    """`new` followed by line splices so that it spans as many lines as `old` did."""
    return new + "\\\n" * old.count("\n")


# ---------------------------------------------------------------------------------------------
# __shared__ declarations

_QUALIFIERS = re.compile(
    r"\b(?:__shared__|static|extern|__device__|__align__\s*\((?:[^()]|\([^()]*\))*\)"
    r"|alignas\s*\((?:[^()]|\([^()]*\))*\)|__attribute__\s*\(\((?:[^()]|\([^()]*\))*\)\))")
_DECLARATOR = re.compile(r"^(?P<head>.*?)(?P<name>[A-Za-z_]\w*)\s*(?P<dims>(?:\[[^\]]*\]\s*)*)$", re.S)


def _declarators(decl: str) -> tuple[str, list[tuple[str, str, str]]]:
    """(type, [(pointer stars, name, array dims)]) of a declaration without its qualifiers."""
    masked = _mask(decl)
    pieces = [decl[a:b].strip() for a, b in _split_top(decl, masked, ",", angle=True)]
    first = _DECLARATOR.match(pieces[0])
    if first is None or not first.group("head").strip():
        raise Unsupported(f"a __shared__ declaration the emulator cannot read: `{' '.join(decl.split())}`")
    head = first.group("head")
    stars = re.search(r"[\s*&]*$", head).group(0)
    base = head[: len(head) - len(stars)].strip()
    out = [(stars.replace(" ", "").strip(), first.group("name"), first.group("dims").strip())]
    for piece in pieces[1:]:
        m = _DECLARATOR.match(piece)
        if m is None or m.group("head").strip("* \t\n"):
            raise Unsupported(f"a __shared__ declarator the emulator cannot read: `{piece}`")
        out.append((m.group("head").strip(), m.group("name"), m.group("dims").strip()))
    # an initializer is an `=` outside the brackets (`T x(...)` or `T x{...}` read as no
    # declarator above); parentheses inside a dimension are its arithmetic: `[TD * (TD + 1)]`
    if _assigns_at_top(masked):
        raise Unsupported(f"a __shared__ declaration with an initializer: `{' '.join(decl.split())}`")
    return base, out


def _assigns_at_top(masked: str) -> bool:
    """Whether masked text holds an `=` outside brackets that is no comparison (`==`, `<=`,
    `>=`, `!=`)."""
    depth = 0
    for i, c in enumerate(masked):
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif (c == "=" and depth == 0 and masked[i - 1:i] not in ("=", "<", ">", "!")
              and masked[i + 1:i + 2] != "="):
            return True
    return False


def _rewrite_shared(text: str, counter: list[int]) -> tuple[str, int]:
    masked = _mask(text)
    edits: list[tuple[int, int, str]] = []
    done_until = -1
    for m in re.finditer(r"\b__shared__\b", masked):
        if m.start() < done_until:
            continue
        start = max(masked.rfind(c, 0, m.start()) for c in ";{}") + 1
        # A preprocessor line between: the declaration starts on its own line after it.
        while True:
            hash_line = masked.rfind("\n#", start, m.start())
            if hash_line < 0:
                hash_line = -1 if not masked[start:m.start()].lstrip().startswith("#") else start
            if hash_line < 0:
                break
            start = masked.find("\n", hash_line + 1) + 1
        end = masked.find(";", m.end())
        if end < 0:
            raise Unsupported("a __shared__ declaration without its ending `;`")
        original = text[start:end]
        lead = original[: len(original) - len(original.lstrip())]
        decl = masked[start:end].replace("\\\n", "  ").strip()  # comments, splices blanked
        is_extern = re.search(r"\bextern\b", _mask(decl)) is not None
        aligned = re.search(r"\b(?:__align__|alignas)\s*\(\s*(\d+)\s*\)", decl)
        align = int(aligned.group(1)) if aligned else 128
        body = _QUALIFIERS.sub(" ", decl).strip()
        base, items = _declarators(body)
        file_scope = _depth(masked, start) == 0
        parts = []
        for stars, name, dims in items:
            if is_extern and file_scope:
                # the launch's dynamic shared memory, wherever the launch puts it: a name that
                # reads it at each use (a reference bound when the library loads could not)
                kind = f"{base} {stars}{dims or ''}".strip()
                parts.append(f"\n#define {name} (::cudacpu::dynamic_shared<{kind}>())\n")
            elif is_extern:
                kind = f"{base} {stars}{dims or ''}".strip()
                parts.append(f"{base} {stars}(&{name}){dims} = ::cudacpu::dynamic_shared<{kind}>();")
            else:
                counter[0] += 1
                kind = f"{base} {stars}{dims}".strip()
                parts.append(f"{base} {stars}(&{name}){dims} = "
                             f"::cudacpu::shared_var<{kind}, {counter[0]}, {align}>();")
        if is_extern and file_scope:  # the `;` goes too: macros end at their line
            new = "".join(parts)
            if not lead or lead.endswith("\n"):
                new = new[1:]  # already at the start of a line
            end += 1
            original = text[start:end]
            edits.append((start, end, lead + new + "\\\n" * max(0, original[len(lead):].count("\n") - 1)))
            done_until = end
            continue
        new = " ".join(parts)
        new = new[:-1] if new.endswith(";") else new  # the source's own `;` ends the last one
        edits.append((start, end, lead + _keep_lines(original[len(lead):], new)))
        done_until = end
    return _apply(text, edits), len(edits)


def _depth(masked: str, at: int) -> int:
    """Brace depth at offset `at` of masked text (0: file scope; namespaces count too, so a
    declaration inside `namespace x { }` reads as nested)."""
    return masked.count("{", 0, at) - masked.count("}", 0, at)


def _apply(text: str, edits: list[tuple[int, int, str]]) -> str:
    for start, end, new in sorted(edits, reverse=True):
        text = text[:start] + new + text[end:]
    return text


# ---------------------------------------------------------------------------------------------
# volatile pointers

_VOLATILE_POINTER = re.compile(
    r"\bvolatile\s+((?:const\s+)?(?:unsigned\s+|signed\s+)?(?:long\s+)*[A-Za-z_][\w:]*)\s*\*\s*"
    r"(?:__restrict__\s*|__restrict\s*)?(?=[A-Za-z_]\w*\s*[=,;)\[])")


def _rewrite_volatile(text: str) -> tuple[str, int]:
    """`volatile T* name` declarations (parameters, locals) become `lockstep_ptr<T> name`:
    warp-synchronous code that reads and writes through them runs with its lanes in lockstep."""
    masked = _mask(text)
    edits = []
    for m in _VOLATILE_POINTER.finditer(masked):
        kind = text[m.start(1):m.end(1)]
        if kind.split()[-1] in ("struct", "class"):
            continue
        edits.append((m.start(), m.end(), f"::cudacpu::lockstep_ptr<{kind}> "))
    return _apply(text, edits), len(edits)


# ---------------------------------------------------------------------------------------------
# asm statements

_ESCAPES = {"n": "\n", "t": "\t", "\\": "\\", '"': '"', "'": "'", "0": "\0", "r": "\r"}


def _literal_text(expr: str) -> str | None:
    """The text of a template made only of adjacent string literals; None otherwise."""
    rest = expr.strip()
    out = []
    while rest:
        m = re.match(r'"((?:[^"\\]|\\.)*)"\s*', rest, re.S)
        if m is None:
            return None
        out.append(re.sub(r"\\(.)", lambda e: _ESCAPES.get(e.group(1), e.group(1)), m.group(1)))
        rest = rest[m.end():]
    return "".join(out)


def _instruction_heads(template: str) -> list[str]:
    heads = []
    for stmt in template.split(";"):
        s = stmt.strip().lstrip("{}").strip()
        if not s or s.startswith(".reg") or s == "}":
            continue
        s = re.sub(r"^(?:[A-Za-z_$][\w$]*\s*:(?!:)\s*)+", "", s).strip("} \t\n")  # labels
        if s.startswith("@"):
            s = s.split(None, 1)[1] if len(s.split(None, 1)) > 1 else ""
        if s:
            heads.append(s.split()[0])
    return heads


def _check_supported(op: str) -> None:
    for prefix, why in _UNSUPPORTED_HINTS.items():
        if op == prefix or op.startswith(prefix + "."):
            raise Unsupported(f"inline PTX `{op}` is not emulated ({why})")
    parts = op.split(".")
    for head, _ in SUPPORTED:
        hp = head.split(".")
        if parts[: len(hp)] == hp:
            return
    raise Unsupported(f"inline PTX `{op}` is not emulated")


_CONSTRAINT = re.compile(r'^\s*(?:\[\s*\w+\s*\]\s*)?"([^"]*)"\s*\((.*)\)\s*$', re.S)


def _operands(section: str) -> list[tuple[str, str]]:
    """(constraint, expression) of each operand in an asm operand list."""
    if not section.strip():
        return []
    masked = _mask(section)
    out = []
    for a, b in _split_top(section, masked, ","):
        m = _CONSTRAINT.match(section[a:b])
        if m is None:
            raise Unsupported(f"an asm operand the emulator cannot read: `{' '.join(section[a:b].split())}`")
        out.append((m.group(1), m.group(2)))
    return out


def _asm_call(content: str, masked: str) -> str:
    content, masked = content.replace("\\\n", "  "), masked.replace("\\\n", "  ")  # line splices
    spans = _split_top(content, masked, ":")
    template = content[spans[0][0]:spans[0][1]].strip()
    extended = len(spans) > 1
    literal = _literal_text(template)
    if literal is not None:
        try:
            for op in _instruction_heads(literal):
                _check_supported(op)
        except Unsupported as exc:  # refused when it runs: the source may never execute it
            message = str(exc).replace("\\", "\\\\").replace('"', '\\"')
            return f'::cudacpu::unsupported("{message}")'
    outputs = _operands(content[spans[1][0]:spans[1][1]]) if len(spans) > 1 else []
    inputs = _operands(content[spans[2][0]:spans[2][1]]) if len(spans) > 2 else []
    if len(spans) > 4:
        raise Unsupported("asm goto is not emulated")
    items, ties = [], []
    for constraint, expr in outputs:
        letter = constraint.lstrip("=+&")[:1] or "r"
        read = "+" in constraint
        items.append(f"::cudacpu::ptx::out('{letter}', ({expr}), {'true' if read else 'false'})")
    for i, (constraint, expr) in enumerate(inputs):
        letter = constraint.strip()[:1] or "r"
        if letter.isdigit():
            ties.append((int(constraint.strip()), len(outputs) + i))
            letter = "r"
        items.append(f"::cudacpu::ptx::in('{letter}', ({expr}))")
    ext = "true" if extended else "false"
    if not items:
        return f"::cudacpu::ptx::exec({template}, nullptr, 0, {ext})"
    tie_code = "".join(f" _cudacpu_o[{o}].bits = _cudacpu_o[{i}].bits;" for o, i in ties)
    return (f"do {{ ::cudacpu::ptx::Operand _cudacpu_o[] = {{{', '.join(items)}}};{tie_code} "
            f"::cudacpu::ptx::exec({template}, _cudacpu_o, {len(items)}, {ext}); }} while (0)")


def _rewrite_asm(text: str) -> tuple[str, int]:
    masked = _mask(text)
    edits = []
    for m in re.finditer(r"\b(?:asm|__asm__|__asm)\b", masked):
        i = m.end()
        while True:
            q = re.match(r"\s*(volatile|__volatile__|__volatile|inline|goto)\b", masked[i:])
            if q is None:
                break
            if q.group(1) == "goto":
                raise Unsupported("asm goto is not emulated")
            i += q.end()
        p = re.match(r"\s*\(", masked[i:])
        if p is None:
            continue  # not an asm statement (a name containing asm is excluded by \b)
        open_at = i + p.end() - 1
        close = _match_paren(masked, open_at)
        if close < 0:
            raise Unsupported("an asm statement without its closing parenthesis")
        call = _asm_call(text[open_at + 1:close], masked[open_at + 1:close])
        edits.append((m.start(), close + 1, _keep_lines(text[m.start():close + 1], call)))
    return _apply(text, edits), len(edits)


# ---------------------------------------------------------------------------------------------
# kernels

def kernel_names(source: str, marker: str = "__global__") -> list[tuple[str, bool]]:
    """(name, is a template) of each `__global__` function `source` defines, in order (`marker`:
    the spelling of `__global__` in `source`)."""
    masked = re.sub(r"__launch_bounds__\s*\((?:[^()]|\([^()]*\))*\)", lambda m: " " * len(m.group(0)),
                    _mask(source))
    found: dict[str, bool] = {}
    for m in re.finditer(rf"\b{marker}\b", masked):
        end = masked.find("(", m.end())
        names = re.findall(r"[A-Za-z_]\w*", masked[m.end():end]) if end > 0 else []
        if not names:
            continue
        close = _match_paren(masked, end)
        if close > 0 and masked[close + 1:close + 200].lstrip().startswith(";"):
            continue  # a declaration without a body: its definition registers it
        statement = re.split(r"[;}]", masked[max(0, m.start() - 400):m.start()])[-1]
        found.setdefault(names[-1], re.search(r"\btemplate\s*<", statement) is not None)
    return list(found.items())


_GLOBAL_VARIABLE = re.compile(
    r"\b(?:__constant__|__device__)\b(?P<decl>[^;{}()=]*?)\b(?P<name>[A-Za-z_]\w*)\s*(?:\[[^\]]*\]\s*)*(?:=|;)")


def global_names(source: str) -> list[str]:
    """Names of the file-scope `__device__` / `__constant__` variables `source` defines (not
    functions, not `extern` declarations, not templates)."""
    masked = _mask(source)
    names: dict[str, None] = {}
    for m in _GLOBAL_VARIABLE.finditer(masked):
        statement = max(masked.rfind(c, 0, m.start()) for c in ";{}") + 1
        if _depth(masked, m.start()) != 0 or re.search(r"\bextern\b", masked[statement:m.end()]):
            continue
        line_start = masked.rfind("\n", 0, m.start()) + 1
        if masked[line_start:m.start()].lstrip().startswith("#"):
            continue  # inside a macro definition
        names.setdefault(m.group("name"), None)
    return list(names)


def defines_kernels_in_macros(source: str) -> bool:
    """Whether a `__global__` function is written inside a macro (its name is then known only
    after preprocessing: `kernel_names` of the expanded text)."""
    lines = _mask(source).split("\n")
    in_macro = False
    for line in lines:
        stripped = line.strip()
        if stripped.startswith("#define") or in_macro:
            if re.search(r"\b__global__\b", line):
                return True
            in_macro = stripped.endswith("\\")
    return False


def rewrite(source: str, name: str = "kernel.cu", kernels: list[str] | None = None) -> Rewritten:
    """`source` rewritten for the emulator (see the module docstring); `kernels` are the
    names to register (default: `kernel_names(source)`'s non-template kernels). Raises
    `Unsupported`."""
    counter = [0]
    text = source
    text, shared = _rewrite_shared(text, counter)
    text, _ = _rewrite_volatile(text)
    text, asm = _rewrite_asm(text)
    refused = tuple(dict.fromkeys(m.group(1) for m in re.finditer(r'::cudacpu::unsupported\("(.*?)(?<!\\)"\)', text)))
    if kernels is None:
        kernels = [k for k, is_template in kernel_names(source) if not is_template]
    tail = "".join(f"CUDACPU_KERNEL({k})\n" for k in kernels)
    tail += "".join(f"CUDACPU_GLOBAL({g})\n" for g in global_names(source))
    quoted = name.replace("\\", "/").replace('"', "")
    return Rewritten(f'#line 1 "{quoted}"\n{text}\n{tail}', tuple(kernels), shared, asm, refused)
