"""Facts read off compiled artifacts: PTX instruction classes, cubin resources, SASS opcodes.

Pure functions over text and bytes; no GPU and no GPU library needed. The cubin is an ELF file
whose `.nv.info` / `.nv.info.<kernel>` sections hold attribute records (format byte, attribute
byte, 16-bit size-or-value, then `size` bytes for the sized format); the register count is
attribute 0x2f (REGCOUNT: symbol index, count) and the stack frame 0x11 (FRAME_SIZE). Static
shared memory is the size of the `.nv.shared.<kernel>` section.
"""
from __future__ import annotations

import re
import shutil
import struct
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

# PTX instruction classes the passes' preconditions and the skills' effects talk about.
PTX_CLASSES: dict[str, re.Pattern[str]] = {
    "wgmma": re.compile(r"^\s*(?:@\S+\s+)?wgmma\.mma_async", re.M),
    "mma": re.compile(r"^\s*(?:@\S+\s+)?mma\.sync", re.M),
    "ldmatrix": re.compile(r"^\s*(?:@\S+\s+)?ldmatrix\.", re.M),
    "stmatrix": re.compile(r"^\s*(?:@\S+\s+)?stmatrix\.", re.M),
    "cp_async": re.compile(r"^\s*(?:@\S+\s+)?cp\.async\.c[ag]\.", re.M),
    "tma": re.compile(r"^\s*(?:@\S+\s+)?cp\.async\.bulk\.", re.M),
    "mbarrier": re.compile(r"^\s*(?:@\S+\s+)?mbarrier\.", re.M),
    "vec128_load": re.compile(
        r"^\s*(?:@\S+\s+)?ld\.global(?:\.\w+)*?\.(?:v4\.(?:b32|f32|u32|s32)|v2\.(?:b64|f64|u64|s64))\b",
        re.M),
    "vec128_store": re.compile(
        r"^\s*(?:@\S+\s+)?st\.global(?:\.\w+)*?\.(?:v4\.(?:b32|f32|u32|s32)|v2\.(?:b64|f64|u64|s64))\b",
        re.M),
    "shuffle": re.compile(r"^\s*(?:@\S+\s+)?shfl\.sync", re.M),
    "barrier": re.compile(r"^\s*(?:@\S+\s+)?(?:bar\.sync|barrier\.sync|bar\.arrive)", re.M),
    "local_memory": re.compile(r"^\s*(?:@\S+\s+)?(?:ld|st)\.local", re.M),
    "setmaxnreg": re.compile(r"^\s*(?:@\S+\s+)?setmaxnreg", re.M),
}

# SASS opcode classes (when a disassembler is available): the ground truth of what ptxas kept.
SASS_CLASSES: dict[str, re.Pattern[str]] = {
    "HGMMA": re.compile(r"\b[HQ]GMMA\."),
    "HMMA": re.compile(r"\bHMMA\."),
    "LDSM": re.compile(r"\bLDSM\."),
    "LDGSTS": re.compile(r"\bLDGSTS\."),
    "UTMALDG": re.compile(r"\bUTMALDG\b"),
    "LDG128": re.compile(r"\bLDG\.E\.(?:\S*\.)?128\b"),
    "SHFL": re.compile(r"\bSHFL\."),
    "LDL_STL": re.compile(r"\b(?:LDL|STL)\b"),
}

_REGCOUNT, _FRAME_SIZE = 0x2F, 0x11
_SIZED_FORMAT = 0x04
_RESERVED_SHARED = 1024
_PTXAS_SMEM = re.compile(r"(\d+) bytes smem")
_PTXAS_ENTRY = re.compile(r"(?:Compiling entry function|Function properties for) '?([A-Za-z_$][\w$]*)'?")


def ptx_instruction_counts(ptx: str) -> dict[str, int]:
    """Count each PTX instruction class of `PTX_CLASSES` in `ptx` (0 where absent)."""
    return {name: len(pattern.findall(ptx)) for name, pattern in PTX_CLASSES.items()}


def ptxas_shared(log: str) -> dict[str, int]:
    """Static shared memory (bytes) per kernel from a `ptxas -v` report."""
    out: dict[str, int] = {}
    current = None
    for line in log.splitlines():
        if (m := _PTXAS_ENTRY.search(line)) is not None:
            current = m.group(1)
        elif current is not None and (m := _PTXAS_SMEM.search(line)) is not None:
            out[current] = int(m.group(1))
    return out


def ptx_entries(ptx: str) -> list[str]:
    """Names of the `.entry` (kernel) functions in a PTX module, in order."""
    return re.findall(r"\.entry\s+([A-Za-z_$][\w$]*)", ptx)


_PTX_FUNCTION = re.compile(r"\.(entry|func)\s+(?:\([^)]*\)\s*)?([A-Za-z_$][\w$]*)\s*")
_PTX_EXTERN_SHARED = re.compile(r"^\s*\.extern\s+\.shared\b[^;]*?([A-Za-z_$%][\w$]*)\s*\[\s*\]",
                                re.M)


def _ptx_bodies(ptx: str) -> dict[str, tuple[str, str]]:
    """(kind, body) of each function defined in a PTX module (`entry` or `func`)."""
    out: dict[str, tuple[str, str]] = {}
    for m in _PTX_FUNCTION.finditer(ptx):
        pos = m.end()
        if ptx.startswith("(", pos):  # the parameter list holds no parentheses of its own
            pos = ptx.find(")", pos) + 1
        brace, semi = ptx.find("{", pos), ptx.find(";", pos)
        if brace < 0 or 0 <= semi < brace:  # a prototype, not a definition
            continue
        depth, end = 0, brace
        while end < len(ptx):
            depth += {"{": 1, "}": -1}.get(ptx[end], 0)
            end += 1
            if depth == 0:
                break
        out[m.group(2)] = (m.group(1), ptx[brace:end])
    return out


def ptx_dynamic_shared(ptx: str) -> dict[str, bool]:
    """Per `.entry`: does it (or a function it calls) use an `.extern .shared` array, i.e.
    shared memory whose size the launch gives (dynamic shared memory)?"""
    externs = set(_PTX_EXTERN_SHARED.findall(ptx))
    bodies = _ptx_bodies(ptx)

    def mentions(body: str, names: set[str]) -> bool:
        return any(re.search(rf"(?<![\w$]){re.escape(n)}(?![\w$])", body) for n in names)

    users = {name for name, (_, body) in bodies.items() if externs and mentions(body, externs)}
    while users:  # callers of a user are users
        more = {name for name, (_, body) in bodies.items()
                if name not in users and re.search(r"\bcall", body) and mentions(body, users)}
        if not more:
            break
        users |= more
    return {name: name in users for name, (kind, _) in bodies.items() if kind == "entry"}


@dataclass(frozen=True, slots=True)
class CubinKernel:
    """Resources of one kernel in a cubin; None where the cubin does not say."""

    name: str
    registers: int | None
    frame_bytes: int | None
    static_shared_bytes: int


@dataclass(frozen=True, slots=True)
class _Section:
    name: str
    offset: int
    size: int
    link: int


def _sections(elf: bytes) -> list[_Section]:
    if elf[:4] != b"\x7fELF" or elf[4] != 2:  # only 64-bit little-endian cubins exist today
        raise ValueError("not a 64-bit ELF cubin")
    shoff, = struct.unpack_from("<Q", elf, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)
    raw = []
    for i in range(shnum):
        base = shoff + i * shentsize
        name_off, _type = struct.unpack_from("<II", elf, base)
        offset, size, link = struct.unpack_from("<QQI", elf, base + 0x18)
        raw.append((name_off, offset, size, link))
    strtab_off = raw[shstrndx][1]
    out = []
    for name_off, offset, size, link in raw:
        end = elf.index(b"\0", strtab_off + name_off)
        out.append(_Section(elf[strtab_off + name_off:end].decode(), offset, size, link))
    return out


def _symbols(elf: bytes, sections: list[_Section]) -> list[str]:
    symtab = next((s for s in sections if s.name == ".symtab"), None)
    if symtab is None:
        return []
    strtab = sections[symtab.link]
    names = []
    for i in range(symtab.size // 24):
        name_off, = struct.unpack_from("<I", elf, symtab.offset + 24 * i)
        start = strtab.offset + name_off
        names.append(elf[start:elf.index(b"\0", start)].decode(errors="replace"))
    return names


def _attributes(data: bytes) -> list[tuple[int, bytes]]:
    """(attribute, payload) records of an `.nv.info` section."""
    out, pos = [], 0
    while pos + 4 <= len(data):
        fmt, attr, size = data[pos], data[pos + 1], struct.unpack_from("<H", data, pos + 2)[0]
        pos += 4
        if fmt == _SIZED_FORMAT:
            out.append((attr, data[pos:pos + size]))
            pos += size
        else:
            out.append((attr, struct.pack("<H", size)))
    return out


def cubin_kernels(cubin: bytes) -> dict[str, CubinKernel]:
    """Per-kernel registers, stack frame and static shared memory from a cubin's ELF."""
    sections = _sections(cubin)
    symbols = _symbols(cubin, sections)
    regs: dict[str, int] = {}
    frames: dict[str, int] = {}
    kernels: set[str] = set()
    for sec in sections:
        if sec.name.startswith(".text."):
            kernels.add(sec.name[len(".text."):])
        if sec.name == ".nv.info" or sec.name.startswith(".nv.info."):
            for attr, payload in _attributes(cubin[sec.offset:sec.offset + sec.size]):
                if attr in (_REGCOUNT, _FRAME_SIZE) and len(payload) >= 8:
                    sym, value = struct.unpack_from("<II", payload)
                    name = symbols[sym] if sym < len(symbols) else f"sym{sym}"
                    (regs if attr == _REGCOUNT else frames)[name] = value
    # Since sm_80 the section also covers the 1 KiB the hardware reserves at the start of each
    # block's shared memory; ptxas reports (and a kernel asks for) the bytes after it.
    shared = {s.name[len(".nv.shared."):]: max(0, s.size - _RESERVED_SHARED) for s in sections
              if s.name.startswith(".nv.shared.") and not s.name.startswith(".nv.shared.reserved")}
    return {k: CubinKernel(k, regs.get(k), frames.get(k), shared.get(k, 0)) for k in sorted(kernels)}


def sass_counts(cubin: bytes, disassembler: str | None = None) -> dict[str, int] | None:
    """SASS opcode-class counts via nvdisasm / cuobjdump; None when neither is available."""
    tool = disassembler or find_disassembler()
    if tool is None:
        return None
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        args = [tool, "-c", f.name] if Path(tool).name.startswith("nvdisasm") else [tool, "-sass", f.name]
        try:
            text = subprocess.run(args, capture_output=True, text=True, timeout=60, check=True).stdout
        except (OSError, subprocess.SubprocessError):
            return None
    return {name: len(p.findall(text)) for name, p in SASS_CLASSES.items()}


def find_disassembler() -> str | None:
    """nvdisasm from PATH or Triton's bundled copy (found without importing triton)."""
    found = shutil.which("nvdisasm")
    if found:
        return found
    import importlib.util

    spec = importlib.util.find_spec("triton")
    if spec is None or not spec.submodule_search_locations:
        return None
    for root in spec.submodule_search_locations:
        candidate = Path(root) / "backends" / "nvidia" / "bin" / "nvdisasm"
        if candidate.is_file():
            return str(candidate)
    return None
