"""`klineage cases` and `klineage bench` (the parts that run without a GPU)."""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from lineage.cli import main

REPO = Path(__file__).resolve().parents[1]


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_cases_json_lists_gemm_with_its_experts(capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    code, out, _ = _run(capsys, "cases", "--json")
    assert code == 0
    cases = {c["name"]: c for c in json.loads(out)["cases"]}
    gemm = cases["gemm"]
    assert gemm["reference"] == "cuBLAS via torch.matmul"
    assert gemm["platform"] == "cuda"
    assert gemm["shapes"]["default"] == {"M": 4096, "N": 4096, "K": 4096, "dtype": "bf16"}
    assert gemm["small_shapes"]["default"]["dtype"] == "fp16"
    assert gemm["bench_shapes"] == {}
    assert cases["fmha"]["bench_shapes"]["paper-noncausal"]["H"] == 64
    assert gemm["tolerance"]["bf16"] == pytest.approx(1e-2)
    assert gemm["experts"] == [{"path": "experts/gemm/gemm_triton.py", "language": "triton"},
                               {"path": "experts/gemm/gemm_cuda.cu", "language": "cuda"}]
    for case in cases.values():
        assert set(case) == {"name", "ref", "kind", "path", "description", "reference", "platform",
                             "shapes", "small_shapes", "small_shapes_reason", "bench_shapes",
                             "tolerance", "check", "experts", "start"}
        for expert in case["experts"]:
            assert (REPO / expert["path"]).is_file(), expert


def test_cases_text_names_every_case_and_expert(capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    code, out, _ = _run(capsys, "cases")
    assert code == 0
    assert "gemm: dense matrix product" in out
    assert "expert (cuda): experts/gemm/gemm_cuda.cu" in out
    assert "shape default: M=4096 N=4096 K=4096 dtype=bf16" in out
    assert "bench paper-causal: B=8 H=64 S=2048 D=128 causal=True dtype=fp16" in out


def test_bench_without_gpu_exits_2_with_a_clear_message(capsys: pytest.CaptureFixture[str],
                                                          monkeypatch: pytest.MonkeyPatch,
                                                          tmp_path: Path) -> None:
    monkeypatch.setenv("KLINEAGE_GATE_NO_GPU", "1")
    code, out, err = _run(capsys, "bench", "--case", "gemm", "--out", str(tmp_path))
    assert code == 2
    assert "needs a CUDA GPU" in err and "Traceback" not in err
    assert not (tmp_path / "experts.json").exists()


def test_bench_unknown_case_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, "bench", "--case", "no-such-case")
    assert code == 2
    assert "unknown case 'no-such-case'" in err


def test_bench_rows_floors_and_results_files(tmp_path: Path) -> None:
    import gate
    from lineage.commands import bench

    case = gate.load_case("gemm")
    ceilings = {"matrix_tflops": 800.0, "copy_tbs": 4.0}
    timing = SimpleNamespace(candidate_ms=0.2, reference_ms=0.19,
                             variants=(SimpleNamespace(variant="default", candidate_ms=0.2, reference_ms=0.19),))
    verdict = SimpleNamespace(ok=True, timing=timing, reason=None)
    rows = bench.rows_for_verdict(case, "gemm_triton.py", "triton", verdict, ceilings)
    assert len(rows) == 1
    row = rows[0]
    flop_floor = 2 * 4096**3 / 800e12 * 1e3
    byte_floor = 3 * 4096 * 4096 * 2 / 4e12 * 1e3
    assert row.flop_floor_ms == pytest.approx(flop_floor)
    assert row.byte_floor_ms == pytest.approx(byte_floor)
    assert row.floor_ms == pytest.approx(max(flop_floor, byte_floor))
    assert row.speedup == pytest.approx(0.95)
    assert row.fraction_of_floor == pytest.approx(flop_floor / 0.2)

    failed = SimpleNamespace(ok=False, timing=None, reason="compile error")
    bad = bench.rows_for_verdict(case, "gemm_cuda.cu", "cuda", failed, ceilings)[0]
    assert bad.expert_ms is None and bad.speedup is None and not bad.ok

    result = {"gpu": "Test GPU", "command": "klineage bench --case gemm", "ceilings": ceilings,
              "ceilings_source": "measured", "rows": [], "geomean_triton_speedup": bench.geomean([0.95]),
              "triton_case_variants": 1}
    bench.write_results(tmp_path, result, [row, bad])
    assert json.loads((tmp_path / "experts.json").read_text())["gpu"] == "Test GPU"
    md = (tmp_path / "experts.md").read_text()
    assert "Test GPU" in md and "klineage bench --case gemm" in md
    assert "| gemm | default | gemm_triton.py | 0.2000 | 0.1900 | vendor | 0.950 |" in md
    assert "no: compile error" in md
    assert "0.950" in md.split("Geometric mean")[1]


def test_geomean_ignores_missing_values() -> None:
    from lineage.commands import bench

    assert bench.geomean([1.0, 4.0, None, 0.0]) == pytest.approx(2.0)
    assert bench.geomean([]) is None


def test_bench_keeps_rows_of_cases_benched_earlier_on_the_same_gpu(tmp_path: Path) -> None:
    from lineage.commands import bench

    def row(case: str, language: str, speedup: float) -> bench.BenchRow:
        return bench.BenchRow(case=case, variant="default", expert=f"{case}.py", language=language, ok=True,
                              expert_ms=1.0, reference_ms=speedup, speedup=speedup, flop_floor_ms=0.5,
                              byte_floor_ms=0.1, floor_ms=0.5, fraction_of_floor=0.5, reason=None)

    ceilings = {"matrix_tflops": 800.0, "copy_tbs": 4.0}
    first = [row("topk", "triton", 4.0), row("gemm", "triton", 0.5)]
    bench.write_results(tmp_path, bench.build_result("GPU A", "klineage bench --case all", ["klineage bench --case all"],
                                                     ceilings, "measured", first), first)

    kept, commands = bench.earlier_results(tmp_path, "GPU A", {("gemm", "default")})
    assert [r.case for r in kept] == ["topk"] and kept[0].speedup == 4.0
    assert commands == ["klineage bench --case all"]
    assert bench.earlier_results(tmp_path, "GPU B", {("gemm", "default")}) == ([], [])

    merged = kept + [row("gemm", "triton", 1.0)]
    result = bench.build_result("GPU A", "klineage bench --case gemm",
                                commands + ["klineage bench --case gemm"], ceilings, "measured", merged)
    assert result["geomean_triton_speedup"] == pytest.approx(2.0)
    assert result["triton_case_variants"] == 2
    bench.write_results(tmp_path, result, merged)
    md = (tmp_path / "experts.md").read_text()
    assert "`klineage bench --case all`; `klineage bench --case gemm`" in md


def test_bench_dry_run_lists_the_paper_variant_without_a_gpu(capsys: pytest.CaptureFixture[str],
                                                             monkeypatch: pytest.MonkeyPatch,
                                                             tmp_path: Path) -> None:
    monkeypatch.setenv("KLINEAGE_GATE_NO_GPU", "1")
    code, out, _ = _run(capsys, "bench", "--case", "fmha", "--dry-run", "--json",
                        "--out", str(tmp_path))
    assert code == 0
    plan = json.loads(out)["plan"]
    assert [(p["variant"], p["bench_only"]) for p in plan] == [
        ("causal", False), ("noncausal", False), ("paper-noncausal", True), ("paper-causal", True)]
    assert plan[2]["shape"] == {"B": 8, "H": 64, "S": 2048, "D": 128, "causal": False,
                                "dtype": "fp16"}
    assert plan[2]["experts"] == ["fmha_triton.py"]
    assert not (tmp_path / "experts.json").exists()

    code, out, _ = _run(capsys, "bench", "--case", "all", "--dry-run", "--variant", "paper-causal")
    assert code == 0
    assert out.strip() == ("fmha / paper-causal (bench only): B=8 H=64 S=2048 D=128 causal=True "
                           "dtype=fp16  [fmha_triton.py]")

    code, out, _ = _run(capsys, "bench", "--dry-run", "--json", "--shapes", "bench")
    assert code == 0
    assert [(p["case"], p["variant"]) for p in json.loads(out)["plan"]] == [
        ("fmha", "paper-noncausal"), ("fmha", "paper-causal")]
    code, out, _ = _run(capsys, "bench", "--case", "fmha", "--dry-run", "--shapes", "gate")
    assert code == 0 and "paper" not in out and "fmha / causal:" in out


def test_bench_unknown_variant_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, "bench", "--case", "gemm", "--variant", "paper-causal", "--dry-run")
    assert code == 2
    assert "no variant paper-causal in case gemm" in err and "known: default" in err
    code, _, err = _run(capsys, "bench", "--case", "gemm", "--shapes", "bench", "--dry-run")
    assert code == 2
    assert "nothing to time: case gemm has no bench shapes" in err


def test_bench_runs_gate_shapes_as_the_gate_does_and_bench_shapes_apart() -> None:
    import gate
    from lineage.commands import bench

    fmha = gate.load_case("fmha")
    runs = bench.variant_runs(fmha)
    assert runs[0] is fmha  # every gate variant: the case itself, the gate's own run
    assert list(runs[1].device_shapes) == ["paper-noncausal", "paper-causal"]
    only = bench.variant_runs(fmha, ["paper-causal", "noncausal"])
    assert [list(r.device_shapes) for r in only] == [["noncausal"], ["paper-causal"]]
    assert bench.variant_runs(gate.load_case("gemm"), ["paper-causal"]) == []
    assert bench.variant_runs(fmha, sets=["gate"]) == [fmha]
    assert [list(r.device_shapes) for r in bench.variant_runs(fmha, ["noncausal", "paper-causal"],
                                                              sets=["bench"])] == [["paper-causal"]]


def test_bench_rows_of_a_bench_only_variant_are_labelled_and_left_out_of_the_mean(
        tmp_path: Path) -> None:
    import gate
    from lineage.commands import bench

    view = gate.load_case("fmha").with_variants(["paper-noncausal"])
    ceilings = {"matrix_tflops": 800.0, "copy_tbs": 4.0}
    timing = SimpleNamespace(candidate_ms=4.0, reference_ms=3.6, variants=(
        SimpleNamespace(variant="paper-noncausal", candidate_ms=4.0, reference_ms=3.6),))
    verdict = SimpleNamespace(ok=True, timing=timing, reason=None, flags=("a note",))
    [row] = bench.rows_for_verdict(view, "fmha_triton.py", "triton", verdict, ceilings)
    assert (row.variant, row.bench_only, row.shape["H"], row.notes) == (
        "paper-noncausal", True, 64, ("a note",))
    assert row.flop_floor_ms == pytest.approx(4 * 8 * 64 * 2048**2 * 128 / 800e12 * 1e3)
    gate_row = bench.BenchRow(case="fmha", variant="noncausal", expert="fmha_triton.py",
                              language="triton", ok=True, expert_ms=1.0, reference_ms=1.2,
                              speedup=1.2, flop_floor_ms=0.5, byte_floor_ms=0.1, floor_ms=0.5,
                              fraction_of_floor=0.5, reason=None)
    result = bench.build_result("GPU A", "klineage bench", ["klineage bench"], ceilings, "measured",
                                [gate_row, row])
    assert result["geomean_triton_speedup"] == pytest.approx(1.2)
    assert result["triton_case_variants"] == 1
    assert result["rows"][1]["shape"]["H"] == 64 and result["rows"][1]["bench_only"] is True
    bench.write_results(tmp_path, result, [gate_row, row])
    md = (tmp_path / "experts.md").read_text()
    assert ("| fmha | paper-noncausal (bench only) | fmha_triton.py | 4.0000 | 3.6000 | vendor | 0.900 |"
            in md)
    assert "- fmha / paper-noncausal: B=8 H=64 S=2048 D=128 causal=False dtype=fp16" in md
    assert "- fmha / fmha_triton.py: a note" in md

    # Benching one variant again keeps the case's other variants from the earlier run.
    kept, _ = bench.earlier_results(tmp_path, "GPU A", {("fmha", "paper-noncausal")})
    assert [(r.variant, r.notes) for r in kept] == [("noncausal", ())]


def test_a_fallback_reference_is_flagged_and_left_out_of_the_mean(tmp_path: Path) -> None:
    """gdn's reference on a GPU without flash-linear-attention announces its fallback; the
    gate's flag marks the row, the table says FALLBACK and the headline leaves it out. A case
    that declares HEADLINE_EXCLUDED (trmm) keeps its row, out of the mean, with its reason."""
    import gate
    from lineage.commands import bench

    ceilings = {"matrix_tflops": 800.0, "copy_tbs": 4.0}

    def verdict(ms: float, ref_ms: float, flags: tuple[str, ...] = ()) -> SimpleNamespace:
        timing = SimpleNamespace(candidate_ms=ms, reference_ms=ref_ms, variants=(
            SimpleNamespace(variant="default", candidate_ms=ms, reference_ms=ref_ms),))
        return SimpleNamespace(ok=True, timing=timing, reason=None, flags=flags)

    flag = ("reference (default): fallback: flash-linear-attention is not importable here; a "
            "PyTorch chunked form in fp32 stands in for chunk_gated_delta_rule")
    [gdn] = bench.rows_for_verdict(gate.load_case("gdn"), "gdn_triton.py", "triton",
                                   verdict(0.35, 40.6, (flag,)), ceilings)
    [gemm] = bench.rows_for_verdict(gate.load_case("gemm"), "gemm_triton.py", "triton",
                                    verdict(0.2, 0.3), ceilings)
    [trmm] = bench.rows_for_verdict(gate.load_case("trmm"), "trmm_triton.py", "triton",
                                    verdict(0.3, 0.2), ceilings)
    assert gdn.reference_backend.startswith("fallback: flash-linear-attention is not importable")
    assert gdn.excluded and "fallback" in gdn.excluded
    assert gemm.reference_backend == "vendor: cuBLAS via torch.matmul" and gemm.excluded is None
    assert trmm.excluded == gate.load_case("trmm").module().HEADLINE_EXCLUDED
    result = bench.build_result("GPU A", "klineage bench", ["klineage bench"], ceilings,
                                "measured", [gdn, gemm, trmm])
    assert result["geomean_triton_speedup"] == pytest.approx(1.5)
    assert result["triton_case_variants"] == 1
    assert {e["case"] for e in result["excluded"]} == {"gdn", "trmm"}
    bench.write_results(tmp_path, result, [gdn, gemm, trmm])
    md = (tmp_path / "experts.md").read_text()
    gdn_line = next(line for line in md.splitlines() if line.startswith("| gdn |"))
    assert "**FALLBACK**" in gdn_line and "(not in the mean)" in gdn_line
    assert "- gdn / gdn_triton.py: its reference ran a fallback" in md
    assert "- trmm / trmm_triton.py: the expert has not reached its reference" in md


def test_gdns_reference_announces_its_fallback_on_a_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without flash-linear-attention, on a CUDA tensor, the reference warns `fallback: ...`
    from the case's own lines (what the gate turns into the flag); on the CPU it does not."""
    import warnings

    import torch

    import gate

    module = gate.load_case("gdn").module()
    monkeypatch.setattr(module, "_fla_chunk_gated_delta_rule", lambda: None)
    monkeypatch.setattr(module, "chunked_reference", lambda q, k, v, g, beta: v.float())
    fake = SimpleNamespace(device=SimpleNamespace(type="cuda"))
    v = torch.zeros(1, 2, 1, 2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module.reference(fake, None, v, None, None)
        module.reference(SimpleNamespace(device=SimpleNamespace(type="cpu")), None, v, None, None)
    assert len(caught) == 1 and str(caught[0].message).startswith("fallback: ")
    assert caught[0].filename == str(module.__file__)
