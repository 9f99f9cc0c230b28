"""bench/tf32_ceiling.py on the CPU: its configurations fit sm_90, every kernel code path (family,
B form, epilogue) computes the product under the Triton interpreter, the Mish forms hold over
a wide range of values, and its records are what the results store reads."""
from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _probe() -> ModuleType:
    return _load("_tf32_ceiling", ROOT / "bench" / "tf32_ceiling.py")


def test_the_grid_holds_what_it_probes_and_fits_sm90() -> None:
    probe = _probe()
    for op in probe.SHAPES:
        vs = probe.variants(op)
        assert len({v.name for v in vs}) == len(vs), op
        assert all(v.smem_bytes <= probe.SMEM_LIMIT for v in vs), op
        assert {v.family for v in vs} >= {"ptr", "tma-nested"}, op
        assert {(v.bm, v.bn) for v in vs} >= {(128, 256), (256, 128)}, op
        assert {v.bk for v in vs} >= {32} and {v.warps for v in vs} >= {8}, op
    forms = {v.bform for v in probe.variants("nn4096")}
    assert forms >= {"kn", "kn-trans", "kn-reg", "kn-regi", "kcopy", "kcopy-pre"}
    nt = probe.variants("nt8192")
    assert {v.bk for v in nt} >= {32, 64} and {v.stages for v in nt} >= {3, 4, 5}
    assert {v.family for v in nt} >= {"tma", "tma-grid"} and {v.group for v in nt} == {1, 8}
    assert {v.epi for v in nt} == set(probe.EPILOGUES) and {v.split for v in nt} == {1, 2}


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="interpreter not enabled")
def test_every_code_path_matches_torch_under_the_interpreter() -> None:
    probe = _probe()
    checks = probe.interpreter_checks(list(probe.SHAPES))
    assert {c["variant"].split()[0] for c in checks} == {"ptr", "tma", "tma-nested", "tma-grid"}
    assert len(checks) >= 30
    # the PTX rounding runs on the device only; its bit-level twin is checked here
    assert any(" kn-regi " in c["variant"] for c in checks)
    assert any(c["variant"].endswith("split2") for c in checks)
    bad = [c for c in checks if not c["ok"]]
    assert not bad, bad


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="interpreter not enabled")
def test_mish_forms_hold_from_large_negative_to_past_the_cutoff() -> None:
    import torch  # noqa: PLC0415

    probe = _probe()
    shape = probe.SMALL["nt8192"]
    a, w, bias = probe.make_inputs("nt8192", device="cpu", shape=shape)
    a = a * 40.0  # products from about -60 to 60: both sides of the v > 20 branch
    bias = torch.linspace(-30.0, 30.0, shape["N"])
    ref_plain = probe.reference("nt8192", (a, w, bias), "bias", shape)
    assert ref_plain.min() < -20 and ref_plain.max() > 20
    for epi, split in (("mish2-start", 1), ("mish2-exp2log2", 1), ("mish2-rational", 1), ("mish2-rational", 2)):
        got = probe.hand_run(probe.Variant("ptr", "nk", 32, 32, 16, 4, 2, epi, split=split))(a, w, bias)
        ref = probe.reference("nt8192", (a, w, bias), epi, shape)
        assert torch.isfinite(got).all(), epi
        assert torch.allclose(got, ref, rtol=1e-4, atol=1e-5), (epi, (got - ref).abs().max())


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="interpreter not enabled")
def test_the_register_rounding_is_tf32_round_to_nearest() -> None:
    import torch  # noqa: PLC0415

    probe = _probe()
    shape = {"BATCH": 1, "M": 32, "N": 32, "K": 16, "b": "kn"}
    a = torch.eye(32, 16)  # C = the first 16 rows of B, each element through the rounding
    b = torch.randn(16, 32) * torch.logspace(-3, 3, 32)
    got = probe.hand_run(probe.Variant("ptr", "kn-regi", 32, 32, 16, 4, 2))(a, b, None)
    bits = b.view(torch.int32)
    want = ((bits + 0x1000) & ~0x1FFF).view(torch.float32)
    assert torch.equal(got[:16], want)
    assert not torch.equal(want, b)  # the rounding changed values: the check can fail


def test_records_are_read_by_the_store_and_the_summary_picks_the_fastest_correct() -> None:
    probe = _probe()
    store = _load("_store_for_tf32", ROOT / "bench" / "store.py")
    base = {"op": "nt8192", "shape": probe.SHAPES["nt8192"]}
    rows = [
        {**base, "variant": "torch", "family": "torch", "e2e_us": 380.0, "kernel_us": 370.0},
        {**base, "variant": "ptr nk 128x256x32 w8 s3", "family": "ptr", "bform": "nk", "epi": "none",
         "e2e_us": 400.0, "kernel_us": 395.0, "x_torch_kernel": 0.937, "ok": True},
        {**base, "variant": "ptr nk 128x128x32 w4 s4", "family": "ptr", "bform": "nk", "epi": "none",
         "e2e_us": 390.0, "kernel_us": 385.0, "x_torch_kernel": 0.961, "ok": False},
        {**base, "variant": "ptr nk 128x256x32 w8 s3 mish2-rational", "family": "ptr", "bform": "nk",
         "epi": "mish2-rational", "e2e_us": 420.0, "kernel_us": 410.0, "epilogue_us": 15.0, "ok": True,
         "rel_err": 1e-4},
        {"op": "nn4096", "variant": "-", "error": "timing cut at the wall"},
    ]
    rec = probe.record("nt8192", rows, "python3 bench/tf32_ceiling.py OUT")
    assert set(rec["timings"]) == {"torch", "torch: kernel alone", "ptr nk 128x256x32 w8 s3",
                                   "ptr nk 128x256x32 w8 s3: kernel alone", "ptr nk 128x128x32 w4 s4",
                                   "ptr nk 128x128x32 w4 s4: kernel alone",
                                   "ptr nk 128x256x32 w8 s3 mish2-rational",
                                   "ptr nk 128x256x32 w8 s3 mish2-rational: kernel alone"}
    kind = next(k for k, (match, _) in store.EXTRACTORS.items() if match(Path("nt8192.json"), rec))
    assert kind == "case"
    read = {r["variant"]: r["metrics"] for r in store.EXTRACTORS[kind][1](Path("nt8192.json"), rec)}
    assert read["ptr nk 128x256x32 w8 s3"]["ms"] == 0.4
    assert read["ptr nk 128x256x32 w8 s3: kernel alone"]["ms"] == 0.395
    text = probe.summary(rows)
    # the faster row is wrong: the summary's best of `ptr nk` is the correct one
    line = next(ln for ln in text.splitlines() if "| ptr nk |" in ln)
    assert "128x256x32 w8 s3" in line and "0.937" in line
    assert "| ptr nk 128x256x32 w8 s3 mish2-rational | 410.0 | 15.0 |" in text


def test_the_start_variants_carry_the_rules_they_name(tmp_path: Path) -> None:
    probe = _probe()
    report = probe.write_starts(["nn4096", "bmm128", "nt8192"], tmp_path)
    assert report["nt8192"] == {}
    for op in ("nn4096", "bmm128"):
        assert set(report[op]) == {"start: control", "start: k-major-operands", "start: tf32-round-operands"}
        for name, info in report[op].items():
            text = (tmp_path / "src" / f"{op}__{probe._slug(name)}.py").read_text()
            assert "@triton.autotune(" in text
            assert info["rules"] == ([] if name == "start: control" else [name.split(": ")[1]])
            assert ("_tf32_round(" in text) == (name == "start: tf32-round-operands")
            assert ("_k_major(" in text) == (name == "start: k-major-operands")
            # A is read K-major already: each rule refuses it and takes B
            assert all("already K-major" in why for why in info["refused"]), info


def test_bad_arguments_exit_2(tmp_path: Path) -> None:
    probe = _probe()
    assert probe.main([str(tmp_path), "--only", "nope"]) == 2
    assert probe.main([str(tmp_path), "--jobs", "0"]) == 2


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="interpreter not enabled")
def test_the_device_children_write_a_row_per_variant(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The warm and timing children on the CPU (interpreter, small shapes, stand-in timers):
    each variant that warmed is a row with its error and ratios, one that did not says why."""
    import torch  # noqa: PLC0415

    probe = _probe()
    monkeypatch.setitem(probe.SHAPES, "nt8192", {"BATCH": 1, "M": 256, "N": 256, "K": 64, "b": "nk"})
    keep = ["ptr nk 128x128x32 w4 s4", "tma nk 128x128x32 w8 s4", "ptr nk 128x256x32 w8 s3 mish2-rational split2",
            "ptr nk 128x256x32 w8 s3 bias"]
    every = probe.variants
    monkeypatch.setattr(probe, "variants", lambda op: [v for v in every(op) if v.name in keep])
    made = probe.make_inputs
    monkeypatch.setattr(probe, "make_inputs", lambda op, device="cuda", shape=None, fill=True: made(op, "cpu", shape))
    monkeypatch.setattr(probe, "kernel_us", lambda fn, calls=20: (fn(), 50.0)[1])
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    import triton.testing  # noqa: PLC0415
    monkeypatch.setattr(triton.testing, "do_bench", lambda fn, **kw: (fn(), 0.1)[1])
    (tmp_path / "warm").mkdir()
    probe.write_starts(["nt8192"], tmp_path)
    for name in keep[:-1]:  # the last one never warmed
        probe.child_warm("nt8192", name, tmp_path)
    assert probe.child_time("nt8192", tmp_path) == 0
    rows = {r["variant"]: r for r in map(json.loads, (tmp_path / "rows.jsonl").read_text().splitlines())}
    assert set(rows) >= {"torch", "torch-linear", "torch-mish2", "torch-fp32", *keep}
    assert rows[keep[-1]]["error"].startswith("not compiled")
    for name in keep[:-1]:
        assert rows[name]["ok"] and rows[name]["x_torch_kernel"] == 1.0, rows[name]
    assert rows[keep[2]]["x_model_e2e"] == 1.0
