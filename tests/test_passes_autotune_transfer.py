"""An autotune card's recorded decorator carried to another module (SkillCard transfer)."""
from __future__ import annotations

import re
from pathlib import Path

import kir
from passes.base import Skipped
from passes.triton._py import PyModule
from passes.triton.autotune import _fit_decorator

ROOT = Path(__file__).resolve().parents[1]
TOPK = (ROOT / "experts" / "topk" / "topk_triton.py").read_text()
DECORATOR = re.search(r"@triton\.autotune\(.*?\n\)\n", TOPK, re.S).group(0)


def _kernel(source: str, name: str):
    mod = PyModule(kir.parse(source, language="triton"))
    return mod, next(k for k in mod.kernels() if k.name == name)


def test_the_lineages_own_decorator_comes_back_unchanged() -> None:
    mod, kernel = _kernel(TOPK, "topk_radix_kernel")
    assert _fit_decorator(DECORATOR, mod, kernel) == DECORATOR


def test_a_hook_the_module_lacks_is_dropped_and_the_key_keeps_kernel_arguments() -> None:
    source = TOPK.replace("def _first_config_when_interpreted", "def _another_hook")
    mod, kernel = _kernel(source, "topk_radix_kernel")
    recorded = DECORATOR.replace('key=["L", "K"]', 'key=["L", "K", "M"]')
    fitted = _fit_decorator(recorded, mod, kernel)
    assert isinstance(fitted, str)
    assert "prune_configs_by" not in fitted and "_first_config_when_interpreted" not in fitted
    assert "key=['L', 'K']" in fitted
    assert fitted.count("triton.Config(") == DECORATOR.count("triton.Config(")
    compile(fitted.strip() + "\ndef f(): pass\n", "<decorator>", "exec")  # still valid Python


def test_configs_for_parameters_the_kernel_lacks_are_refused() -> None:
    gemm = (ROOT / "experts" / "gemm" / "gemm_triton.py").read_text()
    mod = PyModule(kir.parse(gemm, language="triton"))
    result = _fit_decorator(DECORATOR, mod, mod.kernels()[0])
    assert isinstance(result, Skipped)
    assert "RADIX_BITS" in result.facts["unknown"]
