"""bench/replay.py: a recorded run replayed under the current policy, each gate answered from
the run's lineage (a text it kept: its recorded verdict; any other: modelled)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from passes.rewriter import DeterministicRewriter
from skill_helpers import ROOT, ScriptedGate

CASE = ROOT / "tests/data/cases/saxpy"
START = CASE / "saxpy_triton.py"


def _replay_module():
    spec = importlib.util.spec_from_file_location("bench_replay", ROOT / "bench/replay.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _ms(source: str) -> float:
    """A scripted cost model: an autotuned kernel runs faster, the more configurations with 8
    warps its list holds."""
    return 1.0 - 0.05 * source.count("num_warps=8") if "triton.autotune" in source else 1.2


def test_a_replay_reaches_the_runs_best_from_its_lineage_alone(tmp_path: Path) -> None:
    from lineage.optimize import optimize
    from lineage.shipped import open_library

    library, _ = open_library(None)
    run = optimize(START, str(CASE), library, tier="device", out=tmp_path / "run", budget_steps=3,
                   check_fn=ScriptedGate(ms=_ms), rewriter=DeterministicRewriter())
    out = _replay_module().replay(tmp_path / "run", str(CASE), budget=3)
    first = out["gated"][0]
    assert first["card"] == "(start)" and first["known"] and first["ms"] == pytest.approx(1.2)
    assert out["best_ms"] == pytest.approx(run.best_ms)
    # the best is reached by a text the run kept, with its recorded time
    assert next(g for g in out["gated"] if g["ms"] == pytest.approx(run.best_ms))["known"]
    # a model of a pass the replay's candidates make appear speeds those up
    modelled = _replay_module().replay(tmp_path / "run", str(CASE), budget=3, model={"autotune": 2.0})
    assert modelled["best_ms"] < out["best_ms"]


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main = _replay_module().main
    assert main([str(tmp_path), str(CASE)]) == 2
    assert "holds no lineage.json" in capsys.readouterr().err
    (tmp_path / "lineage.json").write_text("{")
    assert main([str(tmp_path), str(CASE), "--model", "x=0"]) == 2
    assert "positive" in capsys.readouterr().err
    assert main([str(tmp_path), str(CASE)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("replay:") and len(err.strip().splitlines()) == 1
