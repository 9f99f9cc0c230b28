"""Entry points: text or file -> `KernelIR`, with the input checks the CLI relies on."""
from __future__ import annotations

from pathlib import Path

from kir.errors import BadInputError, ParseError
from kir.ir import Columns, KernelIR, Language
from kir.kinds import ANCHORED

#: File suffix -> language. C++ headers count as CUDA: CUTLASS-style kernels live in them.
SUFFIXES: dict[str, Language] = {
    ".cu": Language.CUDA, ".cuh": Language.CUDA, ".h": Language.CUDA, ".hpp": Language.CUDA,
    ".hh": Language.CUDA, ".cpp": Language.CUDA, ".cc": Language.CUDA, ".cxx": Language.CUDA,
    ".inl": Language.CUDA, ".py": Language.TRITON,
}

#: A CUDA parse is refused when ERROR nodes without recovered structure cover more than this
#: share of the bytes (real headers full of unknown macros reach 50%; noise goes past 90%).
MAX_ERROR_SHARE = 0.8


def detect_language(path: str | Path) -> Language:
    """Language from a file suffix; raises `BadInputError` for an unknown suffix."""
    suffix = Path(path).suffix.lower()
    try:
        return SUFFIXES[suffix]
    except KeyError:
        known = ", ".join(sorted(SUFFIXES))
        raise BadInputError(
            f"{path}: unknown suffix '{suffix}' (known: {known}; or pass a language)") from None


def as_language(language: Language | str) -> Language:
    try:
        return Language(language)
    except ValueError:
        raise BadInputError(f"unknown language '{language}' (use cuda or triton)") from None


def parse(
    source: str | bytes, language: Language | str | None = None, path: str | Path | None = None
) -> KernelIR:
    """Parse kernel source. The language comes from `language`, else from `path`'s suffix.

    Raises `BadInputError` when neither names a language or bytes are not UTF-8, and
    `ParseError` for Triton syntax errors or CUDA text that tree-sitter cannot recover.
    A CUDA parse with recoverable errors succeeds and reports `error_nodes > 0`.
    """
    if isinstance(source, bytes):
        data = source
        try:
            text = source.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BadInputError(f"{path or 'source'}: not UTF-8 text ({exc.reason} "
                                f"at byte {exc.start})") from None
    else:
        text = source
        data = source.encode("utf-8")
    if language is None:
        if path is None:
            raise BadInputError("cannot tell the language: pass language= or a path")
        lang = detect_language(path)
    else:
        lang = as_language(language)
    if "\x00" in text:
        raise BadInputError(f"{path or 'source'}: binary data (NUL bytes) is not kernel source")
    where = str(path) if path is not None else None
    # back-ends load on first use: tree-sitter's grammar takes a while to load, and
    # `kir.errors` (imported by every CLI command) must stay cheap; libcst loads only for the
    # rare Python construct `kir.triton` leaves to it
    if lang is Language.CUDA:
        from kir import cuda

        cols, errors = cuda.build(data)
        _check_cuda_errors(cols, errors, data, where)
        return KernelIR(lang, text, data, where, cols, errors)
    from kir import triton

    cols = triton.build(text, data)
    return KernelIR(lang, text, data, where, cols, 0)


def _check_cuda_errors(cols: Columns, errors: int, data: bytes, where: str | None) -> None:
    """Refuse CUDA text when most of it sits in ERROR nodes with no structure recovered.

    tree-sitter always returns *a* tree; an ERROR node that still holds functions, classes or
    declarations (e.g. a header whose top-level `#if` confused the grammar) is recovered code
    and stays; text with no anchored node at all, or mostly bare ERROR bytes, is refused.
    """
    if not errors:
        return
    lost = 0
    err_end = rec_end = -1
    kinds, gtypes, starts, ends = cols.kinds, cols.gtypes, cols.starts, cols.ends
    for i in range(1, len(kinds)):
        s, e = starts[i], ends[i]
        if s >= err_end:
            if gtypes[i] == "ERROR":
                lost += e - s
                err_end = e
        elif kinds[i] in ANCHORED and s >= rec_end:
            lost -= e - s
            rec_end = e
    recovered = any(k in ANCHORED for k in kinds[1:])
    if data.strip() and (lost > MAX_ERROR_SHARE * len(data) or not recovered):
        first = next(i for i, g in enumerate(gtypes) if g in ("ERROR", "MISSING") and i)
        line = data.count(b"\n", 0, starts[first]) + 1
        raise ParseError(f"{where or 'source'}: not CUDA C++ (syntax errors cover "
                         f"{lost * 100 // len(data)}% of it, first at line {line})")


def parse_file(path: str | Path, language: Language | str | None = None) -> KernelIR:
    """Read and parse a kernel file. Missing, binary, non-UTF-8 or empty files raise
    `BadInputError`; the language comes from the suffix unless given."""
    p = Path(path)
    if not p.exists():
        raise BadInputError(f"{p}: no such file")
    if not p.is_file():
        raise BadInputError(f"{p}: not a regular file")
    lang = as_language(language) if language is not None else detect_language(p)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise BadInputError(f"{p}: cannot read ({exc.strerror})") from None
    if not data.strip():
        raise BadInputError(f"{p}: empty file")
    if b"\x00" in data:
        raise BadInputError(f"{p}: binary file, not kernel source")
    return parse(data, language=lang, path=str(p))
