"""The SkillCard library that comes with the package (`lineage/shipped_library/`, package data).

It holds the admitted cards lifted from the experts' device-tier lineages, Triton and CUDA in
one library (retrieval keeps to the target's language), and its index records where they come
from (`Library.provenance`: the lineages lifted, the GPU and commit of admission, the command
that built it; `bench/build_library.py` rebuilds it on a GPU machine). `klineage optimize` and
`klineage skills` read it when no library is named, and say which one they used.
"""
from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

from kir.errors import BadInputError

FOLDER = "shipped_library"


def shipped_library_path() -> Path:
    """Where the shipped library lies in this installation."""
    return Path(str(resources.files("lineage").joinpath(FOLDER)))


def open_library(path: str | Path | None) -> tuple[Any, dict[str, Any]]:
    """The library at `path`, else the shipped one, and the JSON that names it: {"path",
    "shipped", "provenance"}. A missing shipped library (a broken installation) is a
    `BadInputError` that says to name one."""
    from lineage.skills import Library  # noqa: PLC0415

    shipped = path is None
    root = shipped_library_path() if shipped else Path(path)
    if shipped and not (root / "index.json").is_file():
        raise BadInputError(f"the shipped SkillCard library is missing from this installation "
                            f"({root}); name one with --library")
    lib = Library.open(root)
    return lib, {"path": str(root), "shipped": shipped, "provenance": lib.provenance}


def describe(named: dict[str, Any]) -> str:
    """One line naming the library a command used (its provenance, for the shipped one)."""
    if not named["shipped"]:
        return f"library: {named['path']}"
    prov = named.get("provenance") or {}
    parts = "; ".join(
        f"{p.get('language')}: {p.get('cards')} cards admitted at the {p.get('tier')} tier on "
        f"{p.get('gpu')} (commit {p.get('commit')})" for p in prov.get("parts", []))
    return (f"library: the shipped library, version {prov.get('version', '?')}, built at commit "
            f"{prov.get('commit', '?')} ({parts or 'no provenance recorded'}): {named['path']}")


__all__ = ["describe", "open_library", "shipped_library_path"]
