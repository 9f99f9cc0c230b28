"""Every `klineage` command over a table of bad inputs: exit code 2, exactly one line on stderr
(naming the file where there is one) and no traceback; with `--json`, also the same message as
one JSON object on stdout.

The CLI runs in this process (`lineage.cli.main`); a few rows also run as a real subprocess to
check what a shell sees.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lineage.cli import COMMANDS, main

ROOT = Path(__file__).resolve().parents[1]
EXPERT = ROOT / "experts" / "gemm" / "gemm_triton.py"
LINEAGE = ROOT / "bench" / "results" / "lineages" / "device" / "gemm"


def _card(card_id: str = "tile-sizes.triton.0000") -> dict:
    return {"id": card_id, "intent": "x", "pass": "tile-sizes", "category": "tiling",
            "language": "triton", "locus": "call", "admitted": True}


@pytest.fixture(scope="module")
def bad(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of bad inputs, named by what is wrong with them."""
    d = tmp_path_factory.mktemp("bad")
    (d / "empty.py").write_text("")
    (d / "blank.py").write_text("  \n\n")
    (d / "latin1.py").write_bytes(b"x = '\xe9'\n")
    (d / "syntax.py").write_text("import triton\n\n\ndef f(x:\n    return x\n")
    (d / "kernel.txt").write_text("x = 1\n")
    (d / "folder.py").mkdir()
    (d / "afile").write_text("not a folder\n")
    (d / "broken.cu").write_text("__global__ void k(float* x) {\n  x[0] = ;\n  int = 3;\n}\n")
    # lineages: valid JSON of the wrong shape, not JSON, not UTF-8, a node that lacks fields
    for name, text in {
        "lin-ints": '{"nodes": [1, 2], "edges": []}',
        "lin-list": "[1, 2, 3]",
        "lin-nodes-dict": '{"nodes": {"a": 1}, "edges": []}',
        "lin-bare-state": '{"nodes": [{"id": "s", "type": "state"}], "edges": []}',
        "lin-dangling": json.dumps({"nodes": [], "edges": [{"source": "a", "target": "b"}]}),
        "lin-graph-str": json.dumps({"graph": "x", "nodes": [], "edges": []}),
        "lin-notjson": "{nodes",
    }.items():
        (d / name).mkdir()
        (d / name / "lineage.json").write_text(text)
    (d / "lin-latin1").mkdir()
    (d / "lin-latin1" / "lineage.json").write_bytes(b'{"nodes": "\xe9"}')
    # libraries: a card that is not JSON, a card of the wrong shape, an index that is not JSON
    for name, card in {"lib-notjson": "{", "lib-shape": "[1]",
                       "lib-fields": json.dumps({"id": 3})}.items():
        (d / name / "cards").mkdir(parents=True)
        (d / name / "cards" / "c.json").write_text(card)
        (d / name / "index.json").write_text('{"cards": []}')
    (d / "lib-ok" / "cards").mkdir(parents=True)
    (d / "lib-ok" / "cards" / f"{_card()['id']}.json").write_text(json.dumps(_card()))
    (d / "lib-ok" / "index.json").write_text('{"cards": []}')
    return d


def _p(bad: Path, name: str) -> str:
    return str(bad / name)


E, L = str(EXPERT), str(LINEAGE)

# (row id, argv with {bad} standing for the fixture folder, text the one line must contain)
ROWS: list[tuple[str, list[str], str]] = [
    # anchors
    ("anchors-missing", ["anchors", "{bad}/missing.py"], "missing.py"),
    ("anchors-dir", ["anchors", "{bad}/folder.py"], "folder.py"),
    ("anchors-empty", ["anchors", "{bad}/empty.py"], "empty.py"),
    ("anchors-blank", ["anchors", "{bad}/blank.py"], "blank.py"),
    ("anchors-latin1", ["anchors", "{bad}/latin1.py"], "latin1.py"),
    ("anchors-syntax", ["anchors", "{bad}/syntax.py"], "syntax.py"),
    ("anchors-suffix", ["anchors", "{bad}/kernel.txt"], "kernel.txt"),
    ("anchors-unknown-attr", ["anchors", E, "-q", "kernel[nme=x]"], "nme"),
    ("anchors-bad-query", ["anchors", E, "-q", "kernel[["], "query"),
    ("anchors-unknown-kind", ["anchors", E, "-q", "kernal"], "kernal"),
    ("anchors-language", ["anchors", E, "--language", "rust"], "rust"),
    # diff
    ("diff-missing", ["diff", E, "{bad}/missing.py"], "missing.py"),
    ("diff-latin1", ["diff", "{bad}/latin1.py", E], "latin1.py"),
    ("diff-syntax", ["diff", E, "{bad}/syntax.py"], "syntax.py"),
    # gate
    ("gate-empty", ["gate", "{bad}/empty.py", "--case", "gemm"], "empty.py"),
    ("gate-blank", ["gate", "{bad}/blank.py", "--case", "gemm"], "blank.py"),
    ("gate-missing", ["gate", "{bad}/missing.py", "--case", "gemm"], "missing.py"),
    ("gate-dir", ["gate", "{bad}/folder.py", "--case", "gemm"], "folder.py"),
    ("gate-latin1", ["gate", "{bad}/latin1.py", "--case", "gemm"], "latin1.py"),
    ("gate-suffix", ["gate", "{bad}/kernel.txt", "--case", "gemm"], "kernel.txt"),
    ("gate-timeout-negative", ["gate", E, "--case", "gemm", "--timeout", "-1"], "--timeout"),
    ("gate-timeout-zero", ["gate", E, "--case", "gemm", "--timeout", "0"], "--timeout"),
    ("gate-unknown-case", ["gate", E, "--case", "nosuch"], "nosuch"),
    ("gate-tier", ["gate", E, "--case", "gemm", "--tier", "fast"], "fast"),
    # cases, passes, deps, bench
    ("cases-option", ["cases", "--bogus"], "--bogus"),
    ("passes-language", ["passes", "--language", "rust"], "rust"),
    ("deps-missing", ["deps", "{bad}/missing.py"], "missing.py"),
    ("deps-latin1", ["deps", "{bad}/latin1.py"], "latin1.py"),
    ("deps-unknown-pass", ["deps", "--pass", "nosuch"], "nosuch"),
    ("deps-json-dot", ["deps", "--json", "--dot"], "--dot"),
    ("bench-unknown-case", ["bench", "--case", "nosuch"], "nosuch"),
    ("bench-timeout", ["bench", "--timeout", "-5"], "--timeout"),
    ("bench-out-file", ["bench", "--out", "{bad}/afile"], "afile"),
    # induce
    ("induce-missing", ["induce", "{bad}/missing.py", "--case", "gemm", "--out", "{bad}/o1"],
     "missing.py"),
    ("induce-empty", ["induce", "{bad}/empty.py", "--case", "gemm", "--out", "{bad}/o1"],
     "empty.py"),
    ("induce-unknown-case", ["induce", E, "--case", "nosuch", "--out", "{bad}/o1"], "nosuch"),
    ("induce-out-file", ["induce", E, "--case", "gemm", "--out", "{bad}/afile"], "afile"),
    ("induce-out-under-file", ["induce", E, "--case", "gemm", "--out", "{bad}/afile/sub"],
     "afile"),
    ("induce-max-steps", ["induce", E, "--case", "gemm", "--max-steps", "0"], "--max-steps"),
    ("induce-pass-spec", ["induce", E, "--case", "gemm", "--out", "{bad}/o1", "--pass",
                          "nosuch{x=1}"], "nosuch"),
    ("induce-library-file", ["induce", E, "--case", "gemm", "--out", "{bad}/o1", "--library",
                             "{bad}/afile"], "afile"),
    # show / export / report
    *[(f"{cmd}-{lin}", [cmd, f"{{bad}}/{lin}", *extra], lin)
      for cmd, extra in (("show", []), ("export", ["--format", "json"]), ("report", []))
      for lin in ("lin-ints", "lin-list", "lin-nodes-dict", "lin-bare-state", "lin-dangling",
                  "lin-graph-str", "lin-notjson", "lin-latin1")],
    ("show-missing", ["show", "{bad}/nosuch"], "nosuch"),
    ("show-plain-file", ["show", "{bad}/afile"], "afile"),
    ("export-format", ["export", L, "--format", "png"], "png"),
    ("export-out-under-file", ["export", L, "--format", "json", "-o", "{bad}/afile/x/l.json"],
     "afile"),
    ("export-out-dir", ["export", L, "--format", "json", "-o", "{bad}/folder.py"], "folder.py"),
    # skills
    ("skills-add-wrong-shape", ["skills", "{bad}/lib-new", "--add", "{bad}/lin-ints"], "lin-ints"),
    ("skills-add-missing", ["skills", "{bad}/lib-new", "--add", "{bad}/nosuch"], "nosuch"),
    ("skills-unknown-case", ["skills", "{bad}/lib-ok", "--target", E, "--case", "nosuch"],
     "nosuch"),
    ("skills-target-no-case", ["skills", "{bad}/lib-ok", "--target", E], "--case"),
    ("skills-target-missing", ["skills", "{bad}/lib-ok", "--target", "{bad}/missing.py",
                               "--case", "gemm"], "missing.py"),
    ("skills-card-notjson", ["skills", "{bad}/lib-notjson"], "c.json"),
    ("skills-card-shape", ["skills", "{bad}/lib-shape"], "c.json"),
    ("skills-card-fields", ["skills", "{bad}/lib-fields"], "c.json"),
    ("skills-library-file", ["skills", "{bad}/afile"], "afile"),
    ("skills-library-missing", ["skills", "{bad}/nosuch-lib"], "nosuch-lib"),
    ("skills-k-zero", ["skills", "{bad}/lib-ok", "-k", "0"], "-k"),
    ("skills-held-out-alone", ["skills", "{bad}/lib-ok", "--held-out", L], "--admit"),
    ("skills-admit-wrong-shape", ["skills", "{bad}/lib-ok", "--admit", "{bad}/lin-list"],
     "lin-list"),
    # optimize
    ("optimize-out-file", ["optimize", E, "--case", "gemm", "--library", "{bad}/lib-ok", "--out",
                           "{bad}/afile"], "afile"),
    ("optimize-unknown-case", ["optimize", E, "--case", "nosuch", "--library", "{bad}/lib-ok",
                               "--out", "{bad}/o2"], "nosuch"),
    ("optimize-library-missing", ["optimize", E, "--case", "gemm", "--library", "{bad}/nolib",
                                  "--out", "{bad}/o2"], "nolib"),
    ("optimize-library-bad-card", ["optimize", E, "--case", "gemm", "--library",
                                   "{bad}/lib-shape", "--out", "{bad}/o2"], "c.json"),
    ("optimize-empty", ["optimize", "{bad}/empty.py", "--case", "gemm", "--library",
                        "{bad}/lib-ok", "--out", "{bad}/o2"], "empty.py"),
    ("optimize-syntax", ["optimize", "{bad}/syntax.py", "--case", "gemm", "--library",
                         "{bad}/lib-ok", "--out", "{bad}/o2"], "syntax.py"),
    ("optimize-budget", ["optimize", E, "--case", "gemm", "--library", "{bad}/lib-ok",
                         "--budget-usd", "-1"], "--budget-usd"),
    ("optimize-model", ["optimize", E, "--case", "gemm", "--library", "{bad}/lib-ok", "--out",
                        "{bad}/o2", "--model", "gpt-nothing"], "gpt-nothing"),
    # demo, and the group itself
    ("demo-out-file", ["demo", "--out", "{bad}/afile"], "afile"),
    ("demo-tier", ["demo", "--tier", "static"], "static"),
    ("unknown-command", ["nosuch"], "nosuch"),
]

# Rows also run as a real subprocess (what a shell sees).
SUBPROCESS_ROWS = {"anchors-syntax", "gate-empty", "show-lin-ints", "export-out-under-file",
                   "optimize-out-file"}


def _argv(argv: list[str], bad: Path) -> list[str]:
    return [a.replace("{bad}", str(bad)) for a in argv]


def _check_one_line(rc: int, err: str, needle: str, bad: Path) -> str:
    assert rc == 2, f"exit code {rc}, stderr: {err!r}"
    assert "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, f"expected one line on stderr, got {lines!r}"
    (line,) = lines
    assert line.startswith("klineage: error: "), line
    assert needle.replace("{bad}", str(bad)) in line, f"{needle!r} not in {line!r}"
    return line


@pytest.mark.parametrize("argv, needle", [pytest.param(a, n, id=i) for i, a, n in ROWS])
def test_bad_input_is_one_line_naming_it_and_exit_2(argv: list[str], needle: str, bad: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(_argv(argv, bad))
    captured = capsys.readouterr()
    _check_one_line(rc, captured.err, needle, bad)
    assert not (bad / "afile").is_dir() and (bad / "afile").read_text() == "not a folder\n"


def test_every_command_has_a_bad_input_row() -> None:
    covered = {argv[0] for _, argv, _ in ROWS}
    assert set(COMMANDS) <= covered, sorted(set(COMMANDS) - covered)


@pytest.mark.parametrize("row", sorted(SUBPROCESS_ROWS))
def test_bad_input_in_a_real_process(row: str, bad: Path) -> None:
    argv, needle = next((a, n) for i, a, n in ROWS if i == row)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "lineage", *_argv(argv, bad)], cwd=bad,
                          capture_output=True, text=True, env=env, timeout=120)
    _check_one_line(proc.returncode, proc.stderr, needle, bad)


def _check_json(rc: int, out: str, err: str, needle: str, bad: Path) -> None:
    """With --json, the failure is also one JSON object on stdout carrying the stderr message."""
    line = _check_one_line(rc, err, needle, bad)
    assert json.loads(out) == {"error": line.removeprefix("klineage: error: "), "exit": 2}


@pytest.mark.parametrize("argv, needle", [pytest.param(a, n, id=i) for i, a, n in ROWS])
def test_bad_input_with_json_is_also_a_json_object_on_stdout(
        argv: list[str], needle: str, bad: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main([*_argv(argv, bad), "--json"])
    captured = capsys.readouterr()
    _check_json(rc, captured.out, captured.err, needle, bad)


@pytest.mark.parametrize("argv, needle", [
    pytest.param(["--json", "anchors", "{bad}/missing.py"], "--json", id="before-the-command"),
    pytest.param(["--json", "nosuch"], "--json", id="before-an-unknown-command"),
    pytest.param(["anchors", "--json", "{bad}/syntax.py"], "syntax.py", id="before-the-argument"),
])
def test_json_anywhere_in_the_arguments_gets_the_error_as_json(
        argv: list[str], needle: str, bad: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(_argv(argv, bad))
    captured = capsys.readouterr()
    _check_json(rc, captured.out, captured.err, needle, bad)


def test_json_after_double_dash_is_an_argument_not_the_flag(
        bad: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["anchors", "--", "--json"])
    captured = capsys.readouterr()
    _check_one_line(rc, captured.err, "--json: no such file", bad)
    assert captured.out == ""


def test_without_json_stdout_stays_empty(bad: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["gate", str(bad / "empty.py"), "--case", "gemm"]) == 2
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize("row", ["gate-unknown-case", "show-lin-notjson", "optimize-syntax"])
def test_bad_input_with_json_in_a_real_process(row: str, bad: Path) -> None:
    argv, needle = next((a, n) for i, a, n in ROWS if i == row)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "lineage", *_argv(argv, bad), "--json"],
                          cwd=bad, capture_output=True, text=True, env=env, timeout=120)
    _check_json(proc.returncode, proc.stdout, proc.stderr, needle, bad)


def test_syntax_error_names_the_file_and_the_real_line(bad: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["anchors", str(bad / "syntax.py")]) == 2
    line = capsys.readouterr().err.strip()
    # `def f(x:` on line 4 is never closed; Python reports where the bracket opens.
    assert f"{bad / 'syntax.py'}:4:" in line, line
    assert line.count("line") <= 1, line


def test_a_wrong_shape_lineage_names_the_file_and_what_is_wrong(
        bad: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", str(bad / "lin-bare-state")]) == 2
    line = capsys.readouterr().err.strip()
    assert str(bad / "lin-bare-state" / "lineage.json") in line and "'s'" in line, line


def test_a_broken_cuda_file_gets_a_diff_warning(bad: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diff", str(bad / "broken.cu"), str(bad / "broken.cu")]) == 0
    err = capsys.readouterr().err
    warnings = [ln for ln in err.splitlines() if ln.startswith("klineage: warning:")]
    assert len(warnings) == 1 and str(bad / "broken.cu") in warnings[0], err


def test_valid_inputs_still_work(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """The checks above refuse bad input only: the same commands on good input succeed."""
    assert main(["show", L, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["states"] > 1
    out = tmp_path / "deep" / "er" / "l.json"
    assert main(["export", L, "--format", "json", "-o", str(out)]) == 0
    assert json.loads(out.read_text())["nodes"]
    assert main(["anchors", E, "-q", "kernel[name=matmul_kernel]"]) in (0,)


def test_optimize_with_hypotheses_only_says_to_admit_them(tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    lib = tmp_path / "lib"
    assert main(["skills", str(lib), "--add", L]) == 0
    capsys.readouterr()
    assert main(["optimize", E, "--case", "gemm", "--library", str(lib),
                 "--out", str(tmp_path / "o")]) == 2
    line = _check_one_line(2, capsys.readouterr().err, "not yet admitted", tmp_path)
    assert f"klineage skills {lib} --admit" in line
    assert not (tmp_path / "o").exists()  # nothing was started
