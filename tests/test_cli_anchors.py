"""`klineage anchors` and `klineage diff`: JSON formats, queries and bad input (exit 2)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from lineage.cli import main
from test_kir_support import EXAMPLES, KERNELS, ROOT

NAIVE = str(EXAMPLES / "matmul_naive.py")
TILED = str(EXAMPLES / "matmul_tiled.py")


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_anchors_json_format(capsys):
    code, out, err = run(capsys, "anchors", NAIVE, "--json")
    assert code == 0
    data = json.loads(out)
    assert list(data) == ["file", "language", "error_nodes", "anchors"]
    assert data["file"] == NAIVE and data["language"] == "triton" and data["error_nodes"] == 0
    by_id = {a["id"]: a for a in data["anchors"]}
    dot = by_id["triton:matmul_kernel/for[0]/call:tl.dot[0]"]
    assert list(dot) == ["id", "kind", "grammar_type", "name", "span", "line", "parent"]
    assert dot["kind"] == "dot" and dot["grammar_type"] == "Call" and dot["name"] == "tl.dot"
    assert dot["parent"] == "triton:matmul_kernel/for[0]"
    text = (EXAMPLES / "matmul_naive.py").read_bytes()
    assert text[dot["span"][0]:dot["span"][1]] == b"tl.dot(a, b)"
    assert text.splitlines()[dot["line"] - 1].strip() == b"acc += tl.dot(a, b)"


def test_anchors_query_filters_and_reports_captures(capsys):
    code, out, _ = run(capsys, "anchors", TILED, "--json", "--query",
                       "kernel@k >> loop > call[name=tl.load]")
    assert code == 0
    rows = json.loads(out)["anchors"]
    assert [r["id"] for r in rows] == ["triton:matmul_kernel/for[0]/call:tl.load[0]",
                                      "triton:matmul_kernel/for[0]/call:tl.load[1]"]
    assert rows[0]["captures"] == {"k": "triton:matmul_kernel"}


def test_anchors_text_output(capsys):
    code, out, err = run(capsys, "anchors", str(KERNELS / "softmax_rows.cu"), "-q", "load")
    assert code == 0
    lines = out.splitlines()
    assert len(lines) == 3 and all("cuda:softmax_rows/" in line for line in lines)
    assert "3 match(es)" in err


def test_anchors_reports_error_nodes_for_recoverable_cuda(tmp_path, capsys):
    p = tmp_path / "broken.cu"
    p.write_text("__global__ void k(float* x) { x[0] = ; __syncthreads(); }\n")
    code, out, err = run(capsys, "anchors", str(p), "--json")
    assert code == 0
    data = json.loads(out)
    assert data["error_nodes"] >= 1
    assert "cuda:k/call:__syncthreads[0]" in {a["id"] for a in data["anchors"]}
    code, out, err = run(capsys, "anchors", str(p))
    assert code == 0 and "syntax error node(s)" in err


def test_diff_json_format(capsys):
    code, out, _ = run(capsys, "diff", NAIVE, TILED, "--json")
    assert code == 0
    data = json.loads(out)
    assert data["language"] == "triton" and data["old"] == NAIVE and data["new"] == TILED
    assert data["actions"]
    for act in data["actions"]:
        assert act["action"] in ("insert", "delete", "update", "move")
        assert act["anchor"].startswith("triton:")
        assert {"action", "anchor", "kind"} <= set(act)
    assert any(a["action"] == "insert" and a["anchor"] == "triton:matmul_kernel/param:GROUP_M[0]"
               for a in data["actions"])


def test_diff_text_output(capsys):
    code, out, err = run(capsys, "diff", NAIVE, TILED)
    assert code == 0
    assert any(line.startswith("insert") and "param:GROUP_M" in line for line in out.splitlines())
    assert "action(s)" in err


def _bad_inputs(tmp_path) -> dict[str, list[str]]:
    empty = tmp_path / "empty.py"
    empty.write_text("")
    binary = tmp_path / "blob.cu"
    binary.write_bytes(b"\x00\x01\x02\xff")
    latin = tmp_path / "latin.py"
    latin.write_bytes("x = 'caf\xe9'\n".encode("latin-1"))
    suffix = tmp_path / "kernel.rs"
    suffix.write_text("fn main() {}\n")
    syntax = tmp_path / "syntax.py"
    syntax.write_text("def k(:\n")
    garbage = tmp_path / "garbage.cu"
    garbage.write_text("}}}} )))) ((((\n")
    return {
        "missing": ["anchors", str(tmp_path / "nope.cu")],
        "empty": ["anchors", str(empty)],
        "binary": ["anchors", str(binary)],
        "non-utf8": ["anchors", str(latin)],
        "suffix": ["anchors", str(suffix)],
        "syntax": ["anchors", str(syntax)],
        "cuda-garbage": ["anchors", str(garbage)],
        "bad-query": ["anchors", NAIVE, "--query", "kernel >>"],
        "unknown-kind": ["anchors", NAIVE, "--query", "kernal"],
        "diff-missing": ["diff", NAIVE, str(tmp_path / "nope.py")],
        "diff-languages": ["diff", NAIVE, str(KERNELS / "softmax_rows.cu")],
        "diff-syntax": ["diff", NAIVE, str(syntax)],
    }


@pytest.mark.parametrize("case", [
    "missing", "empty", "binary", "non-utf8", "suffix", "syntax", "cuda-garbage", "bad-query",
    "unknown-kind", "diff-missing", "diff-languages", "diff-syntax",
])
def test_bad_input_is_one_line_exit_2(tmp_path, capsys, case):
    code, out, err = run(capsys, *_bad_inputs(tmp_path)[case])
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("klineage: error: ")
    assert "Traceback" not in err


def test_bad_input_in_a_real_process_has_no_traceback(tmp_path):
    cases = _bad_inputs(tmp_path)
    for case in ("binary", "bad-query"):
        proc = subprocess.run([sys.executable, "-m", "lineage", *cases[case]], cwd=ROOT,
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
