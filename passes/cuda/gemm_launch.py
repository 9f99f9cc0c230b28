"""The host side of `gemm-schedule`'s deep form: the `<<<grid, block>>>` launches of a kernel in
its own translation unit (the C++ wrapper of a `load_inline` source) edited to pass the kernel's
dynamic shared memory and to raise the kernel's limit on it first, and that edit undone.

Each launch statement of the kernel becomes (with BLOCK its own block, or the block the rewrite
asks for: the producer form adds a warpgroup)

    { static const cudaError_t kl_gs_limit = cudaFuncSetAttribute(K,
        cudaFuncAttributeMaxDynamicSharedMemorySize, BYTES); (void)kl_gs_limit; }  // MARK{"launch": ...}
    K<<<grid, BLOCK, BYTES>>>(...);

(one line before the launch; a function-local static raises the limit once per process), its
grid passed through `kl_gs_grid(K, grid, threads, BYTES)` (`_gemm_text.PERSIST_HOST`: the
kernel loops over its own tiles, so a grid of more blocks than the device holds at once is
launched as one row of that many, each block's ring running on into its next tile). The
comment records the launch's configuration as written, which `undo_edits` puts back. Where the
rewrite asks for an added argument (the producer form's tensor maps), it is written from the
launch's own arguments after them, and the comment records the argument list as written too.

Preconditions (each refusal says which): each launch is a statement on its own line; a launch
passes no dynamic shared memory (a third argument, where given, is a literal zero).

A kernel the unit does not launch is launched by the Python host module beside the unit's file
(a `.cu`'s `.py`; the module holding the source as a string): `host_edits` writes what the
launch must do as the source's host-launch line (`kir.hostlaunch.Directive`, at the end of the
source), which the gate and the optimize loop's output apply to the host (CuPy kernel calls,
`experts.cudahost.launch`, `cuLaunchKernel`), where `kir.hostlaunch.refusal` finds each launch
of the kernel. Positions are byte offsets of `KernelIR.source`. No GPU library is imported here.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from kir import hostlaunch
from kir.hostlaunch import Directive
from passes._source import ByteEdit
from passes.cuda._gemm_text import MARK, PREFIX
from passes.cuda.recognize import _split_args

if TYPE_CHECKING:
    from kir import KernelIR

TAG = MARK + '{"launch": '
"""How the line that raises a kernel's limit starts its comment."""
_ZERO = re.compile(r"0+[uUlL]*")


def launch_edits(ir: KernelIR, kernel: str, nbytes: int, block: str | None = None,
                 extra: Callable[[list[str]], str] | None = None,
                 persist: int | None = None) -> list[ByteEdit] | str:
    """Edits that make every `<<<...>>>` launch of `kernel` in `ir` pass `nbytes` of dynamic
    shared memory after raising the kernel's limit to it (and, where `block` is given, launch
    that block instead of its own; where `extra` is given, pass one more argument after the
    launch's own, `extra(its arguments)`, which returns a refusal starting "!" where it cannot be
    written; where `persist` is given, the kernel loops over its tiles with any grid and the
    launch's grid becomes `kl_gs_grid(kernel, grid, persist, nbytes)`: no more blocks than the
    device holds at once at `persist` threads a block, `_gemm_text.PERSIST_HOST`), or why they
    cannot be made."""
    data = ir.source
    edits: list[ByteEdit] = []
    for node in ir.walk():
        if node.kind != "launch" or str(node.attrs.get("callee") or node.name or "") != kernel:
            continue
        parent = ir.node(node.parent) if node.parent is not None else None
        if parent is None or parent.grammar_type != "expression_statement":
            return f"a launch of {kernel} is not a statement of its own"
        start = parent.span.start
        line = data.rfind(b"\n", 0, start) + 1
        if data[line:start].strip():
            return f"a launch of {kernel} shares its line with other code"
        at = data.find(b"<<<", node.span.start, node.span.end)
        end = data.find(b">>>", at + 3, node.span.end)
        if at < 0 or end < 0:
            return f"a launch of {kernel} has no <<<...>>> configuration"
        config = data[at + 3:end].decode("utf-8")
        # the kernel as the launch names it: a template's instantiation `k<64, 128>`
        callee = data[node.span.start:at].decode("utf-8").strip() or kernel
        args = _split_args(config)
        if len(args) >= 3 and not _ZERO.fullmatch(args[2].strip()):
            return f"a launch of {kernel} already passes dynamic shared memory ({args[2].strip()})"
        new = list(args)
        if block is not None and len(new) >= 2:
            new[1] = block
        if persist is not None and new:
            new[0] = (f"{PREFIX}grid(reinterpret_cast<const void*>({callee}), dim3({new[0].strip()}), "
                      f"{int(persist)}, {nbytes})")
        if len(new) == 2:
            new.append(str(nbytes))
        else:
            new[2] = str(nbytes)
        indent = data[line:start].decode("utf-8")
        record = json.dumps(config)
        added: list[ByteEdit] = []
        if extra is not None:
            call = arguments(data, end + 3, parent.span.end)
            if call is None:
                return f"a launch of {kernel} has no argument list after its configuration"
            own = call[2]
            more = extra(_split_args(own) if own.strip() else [])
            if more.startswith("!"):
                return more[1:]
            record += f', "args": {json.dumps(own)}'
            added.append(ByteEdit(call[0], call[1], (own + ", " if own.strip() else "") + more))
        limit = (f"{indent}{{ static const cudaError_t {PREFIX}limit = cudaFuncSetAttribute("
                 f"{callee}, cudaFuncAttributeMaxDynamicSharedMemorySize, {nbytes}); "
                 f"(void){PREFIX}limit; }}  {TAG}{record}}}\n")
        edits.append(ByteEdit(line, line, limit))
        edits.append(ByteEdit(at + 3, end, ", ".join(new)))
        edits += added
    if not edits:
        beside = Path(ir.path).with_suffix(".py") if ir.path else None
        where = f" ({beside.name} launches it)" if beside is not None and beside.is_file() else ""
        return (f"{kernel} is not launched in this source{where}: its launch is in a host module "
                "of its own, which cannot be given the dynamic shared memory the deep schedule "
                "needs")
    return edits


def launched_here(ir: KernelIR, kernel: str) -> bool:
    """Whether the unit itself launches `kernel` (a `<<<...>>>` launch, edited or not)."""
    return any(node.kind == "launch" and str(node.attrs.get("callee") or node.name or "") == kernel
               for node in ir.walk())


def host_module(ir: KernelIR) -> Path | None:
    """The Python host module beside the unit's file (for a source held in a `.py`: that
    module), or None where there is none."""
    if not ir.path:
        return None
    beside = Path(ir.path).with_suffix(".py")
    return beside if beside.is_file() else None


def host_edits(ir: KernelIR, directive: Directive, kernels: int) -> list[ByteEdit] | str:
    """The edit that writes `directive` (what the host's launches of its kernel must do) as the
    source's last line, or why the host module's launches cannot be edited so (`kernels`: how
    many kernels the unit defines)."""
    host = host_module(ir)
    if host is None:
        return (f"{directive.kernel} is not launched in this source and no Python host module is "
                "beside it: its launch cannot be given the dynamic shared memory the deep "
                "schedule needs")
    try:
        text = host.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return f"{host.name} cannot be read ({exc})"
    why = hostlaunch.refusal(hostlaunch.strip(text), directive.kernel, kernels == 1, host.name)
    if why:
        return why
    data = ir.source
    lead = "" if not data or data.endswith(b"\n") else "\n"
    return [ByteEdit(len(data), len(data), lead + directive.line() + "\n")]


def parameter_bytes(ir: KernelIR, fn: Any) -> list[list[Any]]:
    """[name, bytes] of each parameter of the function `fn` (a `passes.cuda._c.Function`): a
    pointer 8, a 64-bit integer or double 8, a 16-bit type 2, a byte 1, anything else 4."""
    text = ir.text[fn.params_start + 1:fn.params_end - 1]
    out: list[list[Any]] = []
    for decl in _split_args(text):
        words = re.findall(r"[A-Za-z_]\w*", decl.split("=")[0])
        if not words:
            continue
        kinds = " ".join(words[:-1])
        if "*" in decl or "&" in decl:
            size = 8
        elif re.search(r"\b(long|size_t|ptrdiff_t|int64_t|uint64_t|double)\b", kinds):
            size = 8
        elif re.search(r"\b(short|half|__half|__nv_bfloat16|int16_t|uint16_t)\b", kinds):
            size = 2
        elif re.search(r"\b(char|bool|int8_t|uint8_t)\b", kinds):
            size = 1
        else:
            size = 4
        out.append([words[-1], size])
    return out


def undo_edits(ir: KernelIR, kernel: str) -> list[ByteEdit]:
    """Edits that take back every launch edit of `launch_edits` for `kernel` in `ir`: the line
    raising the limit goes, the launch after it gets its configuration as written; and the
    host-launch lines `host_edits` wrote for it."""
    data = ir.source
    tag = TAG.encode()
    mine = re.compile(rb"cudaFuncSetAttribute\(" + re.escape(kernel.encode()) + rb"\s*[,<]")
    edits: list[ByteEdit] = []
    pos = 0
    for line in data.splitlines(keepends=True):
        text = line.decode("utf-8", errors="replace")
        if text.lstrip().startswith(hostlaunch.TAG) and \
                hostlaunch.directive_lines(text, kernel):
            edits.append(ByteEdit(pos, pos + len(line), ""))
        pos += len(line)
    pos = data.find(tag)
    while pos >= 0:
        line = data.rfind(b"\n", 0, pos) + 1
        stop = data.find(b"\n", pos)
        stop = len(data) if stop < 0 else stop
        if not mine.search(data[line:pos]):
            pos = data.find(tag, stop)
            continue
        recorded = json.loads(data[pos + len(MARK):stop].decode("utf-8").rstrip())
        edits.append(ByteEdit(line, min(stop + 1, len(data)), ""))
        at = data.find(b"<<<", stop)
        end = data.find(b">>>", at + 3)
        if at >= 0 and end >= 0:
            edits.append(ByteEdit(at + 3, end, recorded["launch"]))
            call = arguments(data, end + 3, len(data)) if "args" in recorded else None
            if call is not None:
                edits.append(ByteEdit(call[0], call[1], recorded["args"]))
        pos = data.find(tag, stop)
    return edits


def arguments(data: bytes, pos: int, stop: int) -> tuple[int, int, str] | None:
    """The byte span inside the parentheses of the argument list that starts at `pos` (after
    blanks), and its text, or None where there is none before `stop`."""
    while pos < stop and data[pos:pos + 1].isspace():
        pos += 1
    if data[pos:pos + 1] != b"(":
        return None
    depth = 0
    for i in range(pos, stop):
        c = data[i:i + 1]
        if c in (b"(", b"[", b"{"):
            depth += 1
        elif c in (b")", b"]", b"}"):
            depth -= 1
            if depth == 0:
                return pos + 1, i, data[pos + 1:i].decode("utf-8")
    return None


def limit_lines(text: str) -> list[tuple[int, int]]:
    """Character spans of the lines `launch_edits` added to `text`."""
    out = []
    pos = text.find(TAG)
    while pos >= 0:
        line = text.rfind("\n", 0, pos) + 1
        stop = text.find("\n", pos)
        stop = len(text) if stop < 0 else stop + 1
        out.append((line, stop))
        pos = text.find(TAG, stop)
    return out
