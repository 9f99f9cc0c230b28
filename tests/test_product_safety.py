"""Nothing lost, nothing poisoned: a write into an existing lineage or library resumes, refuses
(exit 2, one line) or keeps the old one beside the new; a corrupt library is reported before
any work; a verdict is cached under a key that holds where the kernel's text came from.

The CLI runs in this process (`lineage.cli.main`); the induction itself is replaced by a stub
where a test is about what happens before it starts.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import gate
from gate import Tier
from gate.check import platform_of, prepare, scratch_stem
from kir.errors import KLineageError
from lineage.cli import main

ROOT = Path(__file__).resolve().parents[1]
EXPERT = ROOT / "experts" / "gemm" / "gemm_triton.py"
SAXPY = ROOT / "tests" / "data" / "cases" / "saxpy"
LINEAGE = ROOT / "tests" / "data" / "lineages" / "gemm.json"


def _card(card_id: str = "tile-sizes.triton.0000") -> dict:
    return {"id": card_id, "intent": "x", "pass": "tile-sizes", "category": "tiling",
            "language": "triton", "locus": "call", "admitted": True}


@pytest.fixture
def no_induction(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Replace the induction with a stub that records its call and stops the command."""
    calls: list[str] = []

    def stub(kernel: str, *args: object, **kwargs: object) -> None:
        calls.append(str(kernel))
        raise KLineageError("induction reached")

    monkeypatch.setattr("lineage.induce.induce", stub)
    return calls


def _one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def test_induce_over_an_existing_lineage_refuses_and_keeps_it(
        tmp_path: Path, no_induction: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "lin"
    out.mkdir()
    shutil.copy(LINEAGE, out / "lineage.json")
    before = (out / "lineage.json").read_bytes()
    rc = main(["induce", str(EXPERT), "--case", "gemm", "--tier", "interpret", "--out", str(out)])
    line = _one_error_line(capsys.readouterr().err)
    assert rc == 2 and str(out) in line and "--resume" in line
    assert no_induction == []
    assert (out / "lineage.json").read_bytes() == before
    assert sorted(p.name for p in out.iterdir()) == ["lineage.json"]


def test_resume_with_nothing_to_resume_says_so(tmp_path: Path, no_induction: list[str],
                                               capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "fresh"
    rc = main(["induce", str(EXPERT), "--case", "gemm", "--tier", "interpret", "--out", str(out),
               "--resume"])
    err = capsys.readouterr().err
    assert no_induction == [str(EXPERT)]  # it does start, having said so
    assert rc == 2 and "induction reached" in err
    assert f"nothing to resume in {out}" in err


def test_a_rerun_of_the_demo_keeps_the_previous_lineage_beside(
        tmp_path: Path, no_induction: list[str]) -> None:
    from lineage.commands.induce import run_induction

    out = tmp_path / "demo"
    out.mkdir()
    shutil.copy(LINEAGE, out / "lineage.json")
    before = (out / "lineage.json").read_bytes()
    (out / "report.html").write_text("<html></html>")
    with pytest.raises(KLineageError, match="induction reached"):
        run_induction(str(EXPERT), "gemm", "interpret", str(out), 1, 4, 4, resume=False,
                      as_json=False, quiet=True, keep_previous=True)
    kept = list(out.glob("previous-*"))
    assert len(kept) == 1 and (kept[0] / "lineage.json").read_bytes() == before
    assert (kept[0] / "report.html").is_file()
    assert not (out / "lineage.json").exists()


def test_induce_with_a_truncated_card_in_its_library_stops_before_inducing(
        tmp_path: Path, no_induction: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    lib = tmp_path / "lib"
    (lib / "cards").mkdir(parents=True)
    text = json.dumps(_card())
    (lib / "cards" / f"{_card()['id']}.json").write_text(text[: len(text) // 2])
    (lib / "index.json").write_text('{"cards": []}')
    rc = main(["induce", str(EXPERT), "--case", "gemm", "--tier", "interpret",
               "--out", str(tmp_path / "out"), "--library", str(lib)])
    line = _one_error_line(capsys.readouterr().err)
    assert rc == 2 and f"{_card()['id']}.json" in line
    assert no_induction == []


@pytest.mark.parametrize("index", ["{\"cards\": [", "[1, 2]", "\xff\xfe"], ids=["cut", "list", "binary"])
def test_skills_on_a_corrupt_index_exits_2_and_leaves_it(tmp_path: Path, index: str,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    lib = tmp_path / "lib"
    (lib / "cards").mkdir(parents=True)
    (lib / "cards" / f"{_card()['id']}.json").write_text(json.dumps(_card()))
    (lib / "index.json").write_bytes(index.encode("latin-1"))
    for argv in (["skills", str(lib)], ["skills", str(lib), "--add", str(LINEAGE)]):
        rc = main(argv)
        line = _one_error_line(capsys.readouterr().err)
        assert rc == 2 and "index.json" in line
        assert (lib / "index.json").read_bytes() == index.encode("latin-1")
        assert [p.name for p in (lib / "cards").iterdir()] == [f"{_card()['id']}.json"]


def test_cases_on_a_file_that_is_no_case_exits_2(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    other = tmp_path / "notes.py"
    other.write_text("x = 1\n")
    rc = main(["cases", str(other)])
    line = _one_error_line(capsys.readouterr().err)
    assert rc == 2 and "notes.py" in line and "not a case" in line
    assert main(["cases", str(SAXPY / "case.py"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["cases"][0]["name"] == "saxpy"


def test_a_huge_malformed_query_is_cut_in_the_error_line(capsys: pytest.CaptureFixture[str]) -> None:
    query = "kernel >> " + "loop > " * 15000 + "[[["
    rc = main(["anchors", str(EXPERT), "--query", query])
    line = _one_error_line(capsys.readouterr().err)
    assert rc == 2 and "bad anchor query" in line and f"{len(query)} characters" in line
    assert len(line) < 400


def test_the_verdict_key_holds_where_the_text_came_from(tmp_path: Path) -> None:
    source = (SAXPY / "saxpy_triton.py").read_text()
    plain = tmp_path / "plain" / "saxpy.py"
    spaced = tmp_path / "dïr with space" / "saxpy.py"
    renamed = tmp_path / "plain" / "sæxpy kernel.py"

    def key(path: Path | None) -> str:
        job = prepare(source, "triton", SAXPY, Tier.STATIC, path=path)
        return job.key(platform_of(job.tier))

    assert key(plain) == key(plain)
    assert len({key(plain), key(spaced), key(renamed), key(None)}) == 4


def test_a_non_ascii_file_name_reaches_the_compiler_as_ascii() -> None:
    assert scratch_stem("saxpy_triton") == "saxpy_triton"
    assert scratch_stem("sæxpy kernel").isascii()
    assert scratch_stem("sæxpy") != scratch_stem("saxpy") != scratch_stem("s\u00e6xpy ")


def test_a_kernel_named_in_another_script_passes_the_static_tier_and_poisons_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ptxas rejects a PTX `.file` name that is not ASCII. Triton's own compile cache does not
    key the file name, so the failure shows only on a cold cache (as here): the kernel's file
    name must not decide its verdict, nor a verdict reached under it be served at another path."""
    monkeypatch.setenv("KLINEAGE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton-cache"))
    odd = tmp_path / "dïr with space" / "tøpk ké.py"
    plain = tmp_path / "plain" / "topk.py"
    for path in (odd, plain):
        path.parent.mkdir()
        shutil.copy(ROOT / "experts" / "topk" / "topk_triton.py", path)
    first = gate.check_file(odd, "topk", Tier.STATIC)
    assert first.ok, first.reason
    second = gate.check_file(plain, "topk", Tier.STATIC)
    assert second.ok and not second.cached
    assert gate.check_file(plain, "topk", Tier.STATIC).cached


def test_optimize_time_limit_is_the_loops_time_box(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from skill_helpers import library, naive_source

    monkeypatch.setenv("KLINEAGE_CACHE_DIR", str(tmp_path / "cache"))
    target = tmp_path / "naive.py"
    target.write_text(naive_source("gemm"))
    lib = library(tmp_path, admitted=True)
    rc = main(["optimize", str(target), "--case", "gemm", "--library", str(lib.root), "--tier",
               "static", "--time-limit", "0.001", "--out", str(tmp_path / "out"), "--json"])
    result = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert result["termination"] == "time-box" and result["gated"] == 0
    assert Path(result["best"]["path"]).read_text() == target.read_text()
    assert result["previous"] is None
    # a second run into the same --out keeps the first one's files beside its own
    first = (tmp_path / "out" / "lineage.json").read_bytes()
    rc = main(["optimize", str(target), "--case", "gemm", "--library", str(lib.root), "--tier",
               "static", "--time-limit", "0.001", "--out", str(tmp_path / "out"), "--json"])
    again = json.loads(capsys.readouterr().out)
    assert rc == 0 and again["previous"]
    kept = Path(again["previous"])
    assert kept.parent == tmp_path / "out" and (kept / "lineage.json").read_bytes() == first
    assert sorted(p.name for p in kept.iterdir()) == ["best.py", "lineage.json", "result.json"]
    assert main(["optimize", str(target), "--case", "gemm", "--library", str(lib.root),
                 "--time-limit", "0"]) == 2
