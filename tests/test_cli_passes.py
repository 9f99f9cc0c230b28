"""`klineage passes` and `klineage deps`: JSON formats, DOT, errors."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from lineage.cli import main

DATA = Path(__file__).parent / "data" / "passes"


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_passes_json_lists_every_declaration(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "passes", "--json")
    assert code == 0
    data = json.loads(out)
    rows = {row["name"]: row for row in data["passes"]}
    assert len(rows) >= 17 + 5
    assert set(rows["autotune"]) == {"name", "category", "languages", "platforms", "requires",
                                     "provides", "conflicts", "preconditions", "deterministic"}
    assert rows["warp-shuffle-reduce"]["languages"] == ["cuda"]
    assert rows["wgmma"]["deterministic"] is True and rows["wgmma"]["preconditions"] == ["arch >= sm_90"]
    assert sum(r["deterministic"] and "triton" in r["languages"] for r in rows.values()) >= 10
    assert sum(r["deterministic"] and "cuda" in r["languages"] for r in rows.values()) >= 6


def test_passes_text_and_language_filter(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "passes", "--language", "cuda")
    assert code == 0 and "cp-async-pipeline" in out and "tile-sizes" not in out


def test_deps_json_without_kernel(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "deps", "--json")
    data = json.loads(out)
    assert code == 0 and "kernel" not in data
    order = data["order"]
    for edge in data["edges"]:
        assert order.index(edge["from"]) < order.index(edge["to"])


def test_deps_json_with_kernel(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "deps", str(DATA / "mm_autotuned.py"), "--json", "--pass", "autotune")
    data = json.loads(out)
    assert code == 0 and data["language"] == "triton"
    present = {row["pass"] for row in data["present"]}
    assert {"autotune", "grouped-ordering", "tensor-core-dot", "even-k-fast-path"} <= present
    assert all(row["anchor"].startswith("triton:") for row in data["present"])
    assert sorted(data["deopt_order"]) == sorted(present)
    assert data["deopt_order"].index("autotune") < data["deopt_order"].index("tile-sizes")
    assert data["pass"]["must_precede"] == ["tile-sizes"]


def test_deps_dot_marks_present_passes(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "deps", str(DATA / "row_sum.cu"), "--dot")
    assert code == 0 and out.startswith("digraph passes {")
    assert '"launch-bounds" [label="launch-bounds\\n[compute & layout]", style=filled' in out


@pytest.mark.parametrize("argv, message", [
    (("deps", "--pass", "nope"), "unknown pass 'nope'"),
    (("deps", "/no/such/kernel.py"), "no such file"),
    (("deps", "--json", "--dot"), "exclusive"),
])
def test_bad_input_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str], argv: tuple, message: str) -> None:
    code, _, err = _run(capsys, *argv)
    assert code == 2 and message in err and err.count("\n") == 1
