"""The library that comes with the package: one bundle file of package data a wheel carries,
read through importlib.resources and unpacked into a library folder, with its provenance;
`klineage skills` / `optimize` read it when no library is named and say so."""
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


@pytest.fixture(autouse=True)
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KLINEAGE_CACHE_DIR", str(tmp_path / "cache"))


def test_the_shipped_library_loads_with_its_provenance(tmp_path: Path) -> None:
    root = shipped_library_path()
    assert root.is_relative_to(tmp_path / "cache") and shipped_library_path() == root
    lib = Library.open(root)
    bundle = json.loads((ROOT / "lineage" / "shipped_library.json").read_text())
    assert sorted(lib.ids()) == sorted(c["id"] for c in bundle["cards"])
    cards = lib.cards(admitted_only=True)
    assert {c.language for c in cards} == {"triton", "cuda"}
    prov = lib.provenance
    assert prov is not None and prov["version"] and prov["commit"]
    for part in prov["parts"]:
        assert part["gpu"] and part["commit"] and part["tier"] in ("device", "emulate")
        # a tier below the device's ran on no GPU and says so
        assert (part["gpu"] == "no GPU") == (part["tier"] != "device"), part
        for lineage in part["lineages"]:
            assert (ROOT / lineage / "lineage.json").is_file(), lineage
    # every admitted card is counted by one part; a part naming its cards names cards it holds
    assert sum(part["cards"] for part in prov["parts"]) == len(cards)
    by_id = {c.id: c for c in cards}
    for part in prov["parts"]:
        ids = part.get("ids")
        if ids is not None:
            assert len(ids) == part["cards"] and set(ids) <= set(by_id)
            assert {by_id[i].language for i in ids} == {part["language"]}
            if part["tier"] != "device":  # admitted without timing: no speedup is claimed
                assert all(by_id[i].speedup is None for i in ids), ids


def test_package_data_declares_the_bundle() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["lineage"]
    assert any(fnmatch.fnmatch("shipped_library.json", pat) for pat in patterns)


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
    with zipfile.ZipFile(wheel) as whl:
        carried = json.loads(whl.read("lineage/shipped_library.json"))
    assert carried == json.loads((ROOT / "lineage" / "shipped_library.json").read_text())


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


def test_a_folder_left_without_its_index_is_unpacked_again(tmp_path: Path) -> None:
    root = shipped_library_path()
    (root / "index.json").unlink()  # as a folder someone emptied by hand
    for card in (root / "cards").iterdir():
        card.unlink()
    again = shipped_library_path()
    assert again == root and (root / "index.json").is_file()
    assert len(Library.open(again).ids()) == len(
        json.loads((ROOT / "lineage" / "shipped_library.json").read_text())["cards"])
