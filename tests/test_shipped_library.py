"""The library that comes with the package: package data a wheel carries, loaded through
importlib.resources, with its provenance; `klineage skills` / `optimize` read it when no library
is named and say so."""
from __future__ import annotations

import fnmatch
import json
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from lineage.cli import main
from lineage.shipped import shipped_library_path
from lineage.skills import Library

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("kir", "anchors", "passes", "lineage", "gate", "experts", "grammars")


def test_the_shipped_library_loads_with_its_provenance() -> None:
    root = shipped_library_path()
    assert root.resolve() == (ROOT / "lineage" / "shipped_library").resolve()
    lib = Library.open(root)
    cards = lib.cards(admitted_only=True)
    assert {c.language for c in cards} == {"triton", "cuda"}
    prov = lib.provenance
    assert prov is not None and prov["version"] and prov["commit"]
    for part in prov["parts"]:
        assert part["gpu"] and part["commit"] and part["tier"] == "device"
        assert part["cards"] == sum(c.language == part["language"] for c in cards)
        for lineage in part["lineages"]:
            assert (ROOT / lineage / "lineage.json").is_file(), lineage


def test_package_data_declares_every_file_of_the_library() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["lineage"]
    files = [p.relative_to(ROOT / "lineage").as_posix()
             for p in (ROOT / "lineage" / "shipped_library").rglob("*") if p.is_file()]
    assert files
    assert [f for f in files if not any(fnmatch.fnmatch(f, pat) for pat in patterns)] == []


def test_a_built_wheel_carries_the_library(tmp_path: Path) -> None:
    # built from a copy of the sources: a build writes build/ and *.egg-info beside them
    src = tmp_path / "src"
    for name in PACKAGES:
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                           "-q", str(src), "-w", str(tmp_path)], capture_output=True, text=True,
                          timeout=600, cwd=tmp_path)
    if done.returncode != 0 and "No module named" in done.stderr:
        pytest.skip(f"no wheel builder here: {done.stderr.strip()[-200:]}")
    assert done.returncode == 0, done.stderr[-2000:]
    wheel = next(tmp_path.glob("klineage-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {f"lineage/{p.relative_to(ROOT / 'lineage').as_posix()}"
               for p in (ROOT / "lineage" / "shipped_library").rglob("*.json")}
    assert shipped and shipped <= names


def test_skills_without_a_library_reads_the_shipped_one(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["skills", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["library"]["shipped"] is True
    assert data["library"]["provenance"]["parts"]
    assert len(data["skills"]) == len(Library.open(shipped_library_path()).ids())
    assert main(["skills"]) == 0
    assert capsys.readouterr().out.startswith("library: the shipped library, version ")


def test_the_shipped_library_is_not_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = sorted(p.name for p in (shipped_library_path() / "cards").iterdir())
    rc = main(["skills", "--add", str(ROOT / "tests" / "data" / "lineages" / "gemm.json")])
    assert rc == 2 and "read-only" in capsys.readouterr().err
    assert sorted(p.name for p in (shipped_library_path() / "cards").iterdir()) == before
