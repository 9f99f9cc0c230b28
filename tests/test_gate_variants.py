"""Case views (`Case.with_variants`): benchmark-only shapes, the device tier's variant selection,
the verdict-cache key of a view; and a case reference's own warnings as verdict flags."""
from __future__ import annotations

from pathlib import Path

import pytest

import gate
from gate.check import prepare
from kir.errors import BadInputError

DATA = Path(__file__).parent / "data" / "cases"
SAXPY = DATA / "saxpy"


def test_a_view_runs_the_variants_it_names_at_the_device_tier_only() -> None:
    fmha = gate.load_case("fmha")
    assert fmha.device_shapes is fmha.shapes and fmha.variants == ()
    view = fmha.with_variants(["paper-causal", "noncausal", "paper-causal"])
    assert list(view.device_shapes) == ["paper-causal", "noncausal"]
    assert view.device_shapes["paper-causal"]["H"] == 64
    assert view.shapes == fmha.shapes and view.small_shapes == fmha.small_shapes
    with pytest.raises(BadInputError, match="no variant nosuch"):
        fmha.with_variants(["nosuch"])
    with pytest.raises(BadInputError, match="none given"):
        fmha.with_variants([])


def test_a_view_has_a_verdict_cache_key_of_its_own() -> None:
    fmha = gate.load_case("fmha")
    source = (Path(gate.cases.EXPERTS_DIR) / "fmha" / "fmha_triton.py").read_text()
    platform = ("toolchain", "GPU")

    def key(case: gate.Case) -> str:
        return prepare(source, "triton", case, gate.Tier.DEVICE, gpu=True).key(platform)

    keys = {key(fmha), key(fmha.with_variants(["paper-causal"])),
            key(fmha.with_variants(["paper-noncausal"])), key(fmha.with_variants(["causal"]))}
    assert len(keys) == 4
    assert key(fmha) == key(gate.load_case("fmha"))


def _case_copy(tmp_path: Path, old: str, new: str) -> Path:
    folder = tmp_path / "variant_case"
    folder.mkdir()
    text = (SAXPY / "case.py").read_text()
    assert old in text
    (folder / "case.py").write_text(text.replace(old, new))
    return folder


def test_bench_shapes_may_not_reuse_a_gate_variant_name(tmp_path: Path) -> None:
    folder = _case_copy(tmp_path, 'SMALL_SHAPES = {',
                        'BENCH_SHAPES = {"default": {"N": 1 << 26, "dtype": "fp32"}}\nSMALL_SHAPES = {')
    with pytest.raises(BadInputError, match="reuses the SHAPES variant name"):
        gate.load_case(folder)


def test_a_warning_of_the_case_reference_is_a_flag_of_the_verdict(tmp_path: Path) -> None:
    folder = _case_copy(tmp_path, "    return a * x + y\n",
                        "    import warnings\n\n"
                        "    warnings.warn('computed by the slow path', stacklevel=1)\n"
                        "    return a * x + y\n")
    verdict = gate.check_file(SAXPY / "saxpy_triton.py", gate.load_case(folder),
                              tier=gate.Tier.INTERPRET, cache=False)
    assert verdict.ok, verdict.reason
    # Once, though the reference ran for every seed and refill set.
    assert [f for f in verdict.flags if "slow path" in f] == [
        "reference (default): computed by the slow path"]
