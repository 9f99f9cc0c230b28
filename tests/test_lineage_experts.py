"""Induction, resume, export and report for every shipped expert at the CPU tiers.

The gemm Triton expert's full lineage is tested in test_lineage_induce.py; here every other
expert is walked a step back, interrupted by its step limit, resumed for another step, and
exported, so a regression in any expert's passes or gate case shows up in CI.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import networkx as nx
import pytest

from lineage.graph import Lineage

ROOT = Path(__file__).resolve().parents[1]

# (kernel, case, tier): the Triton experts run in the interpreter, the CUDA ones (no interpreter
# for CUDA C++) are gated by compiling through NVRTC.
EXPERTS = [
    ("experts/conv2d/conv2d_triton.py", "conv2d", "interpret"),
    ("experts/topk/topk_triton.py", "topk", "interpret"),
    ("experts/fmha/fmha_triton.py", "fmha", "interpret"),
    ("experts/gdn/gdn_triton.py", "gdn", "interpret"),
    ("experts/gemm/gemm_cuda.cu", "gemm", "static"),
    ("experts/topk/topk_cuda.cu", "topk", "static"),
]


def _klineage(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lineage", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=900)


@pytest.mark.slow
@pytest.mark.parametrize(("kernel", "case", "tier"), EXPERTS, ids=[Path(e[0]).name for e in EXPERTS])
def test_induce_resume_export_report(kernel: str, case: str, tier: str, tmp_path: Path) -> None:
    env = dict(os.environ, KLINEAGE_CACHE_DIR=str(tmp_path / "cache"))
    out = tmp_path / "lin"
    common = ("induce", kernel, "--case", case, "--tier", tier, "--out", str(out), "--json")
    # One step, then one more on resume: each further step is a gate in the interpreter (the
    # deepest state is the slowest), and one step on each side tests the same resume.
    first = _klineage(*common, "--max-steps", "1", env=env)
    assert first.returncode == 0, first.stderr[-3000:]
    partial = json.loads(first.stdout)
    assert partial["termination"] == "max-steps", partial
    assert partial["transitions"] >= 1, partial
    before = Lineage.load(out)

    resumed = _klineage(*common, "--max-steps", "2", "--resume", env=env)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    summary = json.loads(resumed.stdout)
    after = Lineage.load(out)
    # Resuming keeps every state and transition already found and walks further back.
    assert set(before.states()) <= set(after.states())
    assert set(before.transitions()) <= set(after.transitions())
    assert summary["transitions"] > partial["transitions"] or summary["termination"] == "naive", summary
    assert summary["expert"] == partial["expert"]
    # Every state on the chain passed the gate at the requested tier; every forward step
    # names its pass and carries a structured diff.
    for node in after.path_to_expert(summary["root"]):
        attrs = after.node(node)
        if attrs["type"] == "state":
            assert attrs["verdict"]["ok"] is True and attrs["verdict"]["tier"] == tier
        else:
            assert attrs["pass"] and attrs["diff"]

    graphml = tmp_path / "l.graphml"
    proc = _klineage("export", str(out), "--format", "graphml", "-o", str(graphml), env=env)
    assert proc.returncode == 0, proc.stderr
    assert nx.read_graphml(graphml).number_of_nodes() == after.graph.number_of_nodes()
    for fmt in ("dot", "json"):
        proc = _klineage("export", str(out), "--format", fmt, "-o", str(tmp_path / f"l.{fmt}"), env=env)
        assert proc.returncode == 0, proc.stderr
    report = _klineage("report", str(out), "--json", env=env)
    assert report.returncode == 0, report.stderr
    html = Path(json.loads(report.stdout)["report"]).read_text()
    assert "<svg" in html and summary["expert"] in html
