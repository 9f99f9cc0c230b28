"""Guided de-optimization end to end at the interpret tier (Triton interpreter on the CPU)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lineage.graph import Lineage

ROOT = Path(__file__).resolve().parents[1]
GEMM = ROOT / "experts" / "gemm" / "gemm_triton.py"
SMALL_GEMM = ROOT / "tests" / "data" / "cases" / "gemm_small"
# As `klineage demo` does on a CPU: the interpreter takes minutes per gate at 16-wide tiles.
FLOOR32 = ("--pass", "tile-sizes{floor=32}")
# The gemm expert's tiles (128x256x64) stop at 64: its chain keeps three tile-sizes steps, and
# its 32-wide states took half of the induction's time in the interpreter.
FLOOR64 = ("--pass", "tile-sizes{floor=64}")


def _env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["KLINEAGE_CACHE_DIR"] = str(tmp_path / "cache")
    return env


def _klineage(*args: str, env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lineage", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def gemm_lineage(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, dict[str, str]]:
    """The gemm expert's lineage, and the environment (gate cache) it was induced with."""
    tmp = tmp_path_factory.mktemp("gemm")
    out = tmp / "lin"
    env = _env(tmp)
    proc = _klineage("induce", str(GEMM), "--case", "gemm", "--tier", "interpret", "--out", str(out),
                     *FLOOR64, "--json", env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, json.loads(proc.stdout), env


@pytest.mark.slow
def test_gemm_lineage_reaches_a_naive_root(gemm_lineage: tuple[Path, dict, dict]) -> None:
    out, summary, _ = gemm_lineage
    assert set(summary) >= {"out", "states", "transitions", "rejected", "termination", "root", "expert"}
    assert summary["transitions"] >= 5, summary
    assert summary["termination"] == "naive", summary
    lin = Lineage.load(out)
    root = lin.node(summary["root"])
    assert "naive" in root["roles"]
    assert {r["passes"][0] for r in lin.graph.graph["runs"]} == {FLOOR64[1]}
    assert sum(lin.node(t)["pass"] == "tile-sizes" for t in lin.transitions()) >= 2
    # The naive root has no tensor cores, no pipelining and no autotuning left.
    left = {f["pass"] for f in root["features"]}
    assert not left & {"tensor-core-dot", "software-pipelining", "autotune"}, left
    import kir

    root_ir = kir.parse(root["source"], language="triton")
    assert not root_ir.find(kind="dot"), "the naive root still calls tl.dot"
    expert_ir = kir.parse(lin.node(summary["expert"])["source"], language="triton")
    assert expert_ir.find(kind="dot")
    # Every state on the chain passed the gate; every transition has a structured diff.
    path = lin.path_to_expert(summary["root"])
    assert path[-1] == summary["expert"]
    for node in path:
        attrs = lin.node(node)
        if attrs["type"] == "state":
            assert attrs["verdict"]["ok"] is True
        else:
            assert attrs["diff"], attrs["pass"]
            assert attrs["backward"]["pass"] == attrs["pass"]
    assert (out / "report.html").is_file()


def test_show_export_report_commands(gemm_lineage: tuple[Path, dict, dict], tmp_path: Path) -> None:
    out, summary, _ = gemm_lineage
    env = _env(tmp_path)
    show = _klineage("show", str(out), "--json", env=env)
    assert show.returncode == 0, show.stderr
    data = json.loads(show.stdout)
    assert data["transitions"] == summary["transitions"]
    assert len(data["chain"]) == summary["transitions"] + 1
    for fmt in ("graphml", "dot", "json"):
        proc = _klineage("export", str(out), "--format", fmt, "-o", str(tmp_path / f"l.{fmt}"), env=env)
        assert proc.returncode == 0, proc.stderr
        assert (tmp_path / f"l.{fmt}").stat().st_size > 100
    rep = _klineage("report", str(out), "--json", env=env)
    assert rep.returncode == 0 and json.loads(rep.stdout)["report"].endswith("report.html")
    bad = _klineage("show", str(tmp_path / "nope"), env=env)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1


@pytest.mark.slow
def test_kill_9_then_resume_finishes_the_same_lineage(gemm_lineage: tuple[Path, dict, dict], tmp_path: Path) -> None:
    # The gate's verdict cache from the first induction makes this one quick; what is tested
    # is that a killed run leaves a whole lineage and that --resume completes the same one.
    _, full, env = gemm_lineage
    out = tmp_path / "lin"
    proc = subprocess.Popen([sys.executable, "-m", "lineage", "induce", str(GEMM), "--case", "gemm",
                             "--tier", "interpret", "--out", str(out), *FLOOR64, "--json"],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    killed_at = None
    while time.time() < deadline and proc.poll() is None:
        path = out / "lineage.json"
        if path.exists():
            try:
                n = sum(1 for n in json.loads(path.read_text())["nodes"] if n["type"] == "transition")
            except (json.JSONDecodeError, KeyError):
                n = 0  # must never happen: writes are atomic
                raise
            if n >= 2:
                proc.send_signal(signal.SIGKILL)
                killed_at = n
                break
        time.sleep(0.02)
    proc.wait(timeout=30)
    assert killed_at is not None, "induction finished before it could be killed"
    partial = Lineage.load(out)  # the file a killed run leaves is a whole lineage
    assert len(partial.transitions()) >= 2
    resumed = _klineage("induce", str(GEMM), "--case", "gemm", "--tier", "interpret", "--out", str(out),
                        *FLOOR64, "--resume", "--json", env=env)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    summary = json.loads(resumed.stdout)
    assert summary["termination"] == "naive"
    assert summary["root"] == full["root"] and summary["transitions"] == full["transitions"]


@pytest.mark.slow
def test_width_two_explores_another_order_and_merges_states(tmp_path: Path) -> None:
    kernel = ROOT / "experts" / "examples" / "matmul_tiled.py"
    out = tmp_path / "lin"
    # Tiles stop at 32 as in the other inductions here: the chain keeps its tile-sizes steps, and
    # the 16-wide states it would reach below took most of this test's time in the interpreter.
    # The small gemm test case: whole 64- and 32-wide tiles as at the gemm case's sizes (the
    # same lineage, state for state), in a fifth of the programs.
    proc = _klineage("induce", str(kernel), "--case", str(SMALL_GEMM), "--tier", "interpret",
                     "--out", str(out), "--width", "2", *FLOOR32, "--json", env=_env(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout)
    lin = Lineage.load(out)
    assert len(lin.graph.graph["runs"]) == 2
    expert = summary["expert"]
    first_steps = {lin.node(t)["pass"] for t in lin.graph.predecessors(expert)}
    assert len(first_steps) == 2, first_steps  # two branches left the expert by different passes
    # Both orders remove the same optimizations, so they meet again: fewer states than two
    # separate chains (the expert and each branch's own steps) would have.
    assert len(lin.roles("naive")) == 1
    steps = [run["steps"] for run in lin.graph.graph["runs"]]
    assert min(steps) >= 2, steps
    assert len(lin.states()) < 1 + sum(steps), (len(lin.states()), steps)
    assert summary["termination"] == ["naive", "naive"]


def test_induce_bad_input_is_one_line_exit_2(tmp_path: Path) -> None:
    env = _env(tmp_path)
    for args in (["induce", str(tmp_path / "missing.py"), "--case", "gemm"],
                 ["induce", str(GEMM), "--case", "no-such-case", "--tier", "interpret"],
                 ["induce", str(GEMM), "--case", "gemm", "--width", "0"]):
        proc = _klineage(*args, "--out", str(tmp_path / "o"), env=env)
        assert proc.returncode == 2, (args, proc.stderr)
        assert proc.stderr.strip().count("\n") == 0 and "Traceback" not in proc.stderr


def test_device_tier_removes_the_autotuner_first(tmp_path: Path) -> None:
    # Every device-tier gate autotunes the candidate over its config list; with the autotuner
    # removed first, every later gate compiles and times one config. The interpret tier (which
    # runs one config anyway) keeps the dependency order.
    import kir
    from lineage.induce import Inducer

    fmha = ROOT / "experts" / "fmha" / "fmha_triton.py"
    inducer = Inducer(fmha, "fmha", tier="interpret", out=tmp_path / "lin")
    ir = kir.parse_file(fmha)
    interpret_order = [p.name for p, _ in inducer.present_sites(ir)]
    inducer.tier = "device"
    device_order = [p.name for p, _ in inducer.present_sites(ir)]
    assert interpret_order[0] != "autotune" and "autotune" in interpret_order
    assert device_order[0] == "autotune"
    assert sorted(device_order) == sorted(interpret_order)


def test_compile_check_rejects_what_the_gpu_compile_refuses(tmp_path: Path) -> None:
    """With --compile-check an interpret-tier induction gates each state at the static tier
    first (the GPU compile at the case's device shapes) and keeps only what compiles there.
    A stand-in gate refuses to compile any state without tensor cores, as the GPU compile
    refuses fmha's tensor-core removal at D = 128."""
    from gate import FailureKind, Tier, Verdict
    from lineage.induce import Inducer

    class StandInGate:
        def __init__(self) -> None:
            self.tiers: list[str] = []

        def check(self, source: str, language: str, case: object, tier: str, **kw: object) -> Verdict:
            self.tiers.append(tier)
            if tier == "static" and "tl.dot(" not in source:
                return Verdict(False, Tier.STATIC, "compile", FailureKind.COMPILE_ERROR,
                               "numel (2097152) exceeds triton maximum tensor numel (1048576)")
            return Verdict(True, Tier(tier), "correctness")

    def induce(check: bool, out: str) -> tuple[Lineage, list[str]]:
        inducer = Inducer(GEMM, "gemm", tier="interpret", out=tmp_path / out, max_steps=40,
                          compile_check=check, pass_specs=("tile-sizes{floor=32}",))
        gate = StandInGate()
        inducer._gate = gate
        return inducer.run().lineage, gate.tiers

    checked, tiers = induce(True, "checked")
    assert "static" in tiers and "interpret" in tiers
    assert all("tl.dot(" in checked.node(s)["source"] for s in checked.states())
    refused = [r for r in checked.graph.graph["rejected"] if r["pass"] == "tensor-core-dot"]
    assert any(r["stage"] == "compile" and "maximum tensor numel" in r["reason"] for r in refused)
    assert checked.graph.graph["runs"][0]["compile_check"] is True
    plain, tiers = induce(False, "plain")
    assert set(tiers) == {"interpret"}
    assert any("tl.dot(" not in plain.node(s)["source"] for s in plain.states())
