"""The SkillCard library that comes with the package (`lineage/shipped_library.json`).

It holds the admitted cards lifted from the experts' lineages (device tier; CUDA cards of an
emulate-tier lineage too, admitted without timing), Triton and CUDA in one library (retrieval
keeps to the target's language), and where they come from (the provenance, per part: the
lineages lifted, the tier, GPU and commit of admission, the command that built it;
`bench/build_library.py` rebuilds it on a GPU machine). It ships as one JSON file, package
data, and is unpacked on first use into a library folder under the verdict cache's folder
(`$KLINEAGE_CACHE_DIR/shipped-library/<content hash>/`, `Library.provenance` in its index).
`klineage optimize` and `klineage skills` read it when no library is named, and say which
one they used.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from kir.errors import BadInputError

BUNDLE = "shipped_library.json"
BUNDLE_FORMAT = 1


def _bundle_text() -> str:
    try:
        return resources.files("lineage").joinpath(BUNDLE).read_text(encoding="utf-8")
    except (FileNotFoundError, OSError):
        raise BadInputError(f"the shipped SkillCard library ({BUNDLE}) is missing from this "
                            "installation; name one with --library") from None


def shipped_library_path() -> Path:
    """The shipped library as a library folder, unpacked from the package's bundle the first
    time this version of it is asked for (a content-addressed folder: a new bundle gets a new
    folder; a half-written one is never used)."""
    from gate.cache import cache_dir  # noqa: PLC0415
    from lineage.skills import Library, SkillCard  # noqa: PLC0415

    text = _bundle_text()
    root = cache_dir() / "shipped-library" / hashlib.sha256(text.encode()).hexdigest()[:16]
    if (root / "index.json").is_file():
        return root
    data = json.loads(text)
    tmp = root.with_name(f"{root.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    lib = Library.open(tmp, create=True)
    for card in data["cards"]:
        lib.put(SkillCard.from_json(card))
    lib.set_provenance(data.get("provenance") or {})
    if root.exists() and not (root / "index.json").is_file():
        shutil.rmtree(root, ignore_errors=True)  # a folder left without its index: not a library
    try:
        tmp.rename(root)
    except OSError:  # another process unpacked it first
        shutil.rmtree(tmp, ignore_errors=True)
    return root


def write_bundle(library: Any, path: str | Path, provenance: Mapping[str, Any]) -> Path:
    """Write the admitted cards of `library` (a `Library`) with `provenance` as a bundle file."""
    cards = [c.to_json() for c in library.cards(admitted_only=True)]
    out = Path(path)
    out.write_text(json.dumps({"format": BUNDLE_FORMAT, "provenance": dict(provenance),
                               "cards": cards}, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return out


def open_library(path: str | Path | None) -> tuple[Any, dict[str, Any]]:
    """The library at `path`, else the shipped one, and the JSON that names it: {"path",
    "shipped", "provenance"}."""
    from lineage.skills import Library  # noqa: PLC0415

    shipped = path is None
    lib = Library.open(shipped_library_path() if shipped else Path(path))
    return lib, {"path": str(lib.root), "shipped": shipped, "provenance": lib.provenance}


def describe(named: dict[str, Any]) -> str:
    """One line naming the library a command used (its provenance, for the shipped one)."""
    if not named["shipped"]:
        return f"library: {named['path']}"
    prov = named.get("provenance") or {}
    parts = "; ".join(
        f"{p.get('language')}: {p.get('cards')} cards admitted at the {p.get('tier')} tier "
        f"{'without a GPU' if p.get('gpu') == 'no GPU' else 'on ' + str(p.get('gpu'))} "
        f"(commit {p.get('commit')})" for p in prov.get("parts", []))
    return (f"library: the shipped library, version {prov.get('version', '?')}, built at commit "
            f"{prov.get('commit', '?')} ({parts or 'no provenance recorded'}): {named['path']}")


__all__ = ["describe", "open_library", "shipped_library_path", "write_bundle"]
