"""Entry points: text or file -> `KernelIR`, with the input checks the CLI relies on."""
from __future__ import annotations

from pathlib import Path

from kir.errors import BadInputError
from kir.ir import KernelIR, Language, build

#: File suffix -> language. C++ headers count as CUDA: CUTLASS-style kernels live in them.
SUFFIXES: dict[str, Language] = {
    ".cu": Language.CUDA, ".cuh": Language.CUDA, ".h": Language.CUDA, ".hpp": Language.CUDA,
    ".hh": Language.CUDA, ".cpp": Language.CUDA, ".cc": Language.CUDA, ".cxx": Language.CUDA,
    ".inl": Language.CUDA, ".py": Language.TRITON,
}


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
    return build(text, data, lang, str(path) if path is not None else None)


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
