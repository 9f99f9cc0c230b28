"""bench/gemm_ceiling.py on the CPU: the variants it writes carry the rules it names, its hand
kernel's code paths compute the product (Triton interpreter), its configurations fit sm_90."""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from types import ModuleType

import pytest

from lineage.control import DOT_CONFIGS

ROOT = Path(__file__).resolve().parents[1]


def _probe() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_gemm_ceiling", ROOT / "bench" / "gemm_ceiling.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_recipe_takes_the_held_out_starts_and_keeps_its_structure() -> None:
    probe = _probe()
    for op in ("mm1024", "bmm"):
        made = probe.build(op)
        for name, names in probe.RECIPES.items():
            info = made[f"rules:{name}"]
            assert "source" in info, (op, name, info.get("refused"))
            assert [s["rule"] for s in info["log"]] == list(names)
            assert all(s["sites_taken"] == 1 for s in info["log"]), (op, name, info["log"])
            shape = probe.structure(info["source"])
            assert shape["persistent"] == ("persistent-grid" in names)
            # the tile loop is flattened where descriptors came before the persistent grid
            assert shape["flattened"] == (names[0] == "tma-descriptors" and "persistent-grid" in names)
            assert (shape["descriptor_loads"] == 2) == ("tma-descriptors" in names)
            assert shape["autotune_configs"] == len(DOT_CONFIGS)
        assert probe.structure(made["control"]["source"])["autotune_configs"] >= 7
        hopper = probe.structure(made["control+hopper"]["source"])["autotune_configs"]
        assert hopper == len(DOT_CONFIGS) + len(set(probe.HOPPER_ENTRIES) - set(DOT_CONFIGS))
    # bmm ties one BLOCK to m, n and k: the rules' lists go through the untie
    assert made["control-untied"]["list"].endswith("untied")


def test_hand_configurations_fit_and_its_code_paths_match_torch() -> None:
    probe = _probe()
    for op in probe.OPS:
        elem = 4 if probe.shape_of(op)["dtype"] == "fp32" else 2
        for cfg in probe.hand_configs(op):
            assert probe.smem_bytes(cfg, elem, elem) <= probe.SMEM_LIMIT, (op, cfg)
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("interpreter not enabled")
    checks = probe.interpreter_checks()
    assert {c["config"].split()[-1] for c in checks} >= {"ptr", "device", "nested", "ws", "splitk2"}
    bad = [c for c in checks if not c["ok"]]
    assert not bad, bad


def test_bad_arguments_exit_2(tmp_path: Path) -> None:
    probe = _probe()
    assert probe.main([str(tmp_path), "--only", "nope"]) == 2
    assert probe.main([str(tmp_path), "--jobs", "0"]) == 2
