"""The pass model: registry, options and pass specs, declarations, the rewriter protocol."""
from __future__ import annotations

from dataclasses import FrozenInstanceError
from pathlib import Path

import pytest

import kir
from kir.errors import BadInputError
from passes import (Applied, Category, PassContext, Skipped, get_all_passes, get_pass,
                    parse_pass_spec, pass_from_spec)
from passes.registry import all_pass_classes
from passes.rewriter import ChainRewriter, DeterministicRewriter, Rewriter, resolve_pass

DATA = Path(__file__).parent / "data" / "passes"
TRITON_RULES = {"autotune", "tile-sizes", "num-warps", "software-pipelining", "grouped-ordering",
                "tensor-core-dot", "even-k-fast-path", "tma-descriptors", "exp2-fold",
                "causal-block-skip", "persistent-grid", "radix-width", "histogram-primitive",
                "scan-fusion", "early-exit", "k-major-operands", "tf32x3-dot", "split-k",
                "reduce-before-contract", "masked-bounds", "loop-depth", "loop-unroll",
                "loop-interchange", "host-descriptors", "scale-after-max", "grid-bound"}
CUDA_RULES = {"vectorize-global", "smem-staging", "pragma-unroll", "launch-bounds",
              "warp-shuffle-reduce", "cp-async-pipeline", "restrict-readonly", "wgmma",
              "mma-intrinsics", "tma-bulk-copy", "warp-specialization", "mma-micro-kernel",
              "row-cache", "row-registers", "launch-threads", "gemm-schedule"}


def test_registry_is_lazy_and_complete() -> None:
    loaders = get_all_passes()
    assert all(callable(load) for load in loaders.values())
    classes = {cls.name: cls for cls in all_pass_classes()}
    assert set(classes) == set(loaders)
    rules = {n for n, c in classes.items() if c.deterministic}
    assert {n for n in rules if "triton" in classes[n].languages} == TRITON_RULES
    assert {n for n in rules if "cuda" in classes[n].languages} == CUDA_RULES
    for cls in classes.values():
        assert cls.name == cls.name.lower() and " " not in cls.name
        assert isinstance(cls.category, Category)
        assert cls.languages and set(cls.languages) <= {"triton", "cuda"}


def test_unknown_pass_is_a_clear_error() -> None:
    with pytest.raises(BadInputError, match="unknown pass 'tile-size'.*did you mean: tile-sizes"):
        get_pass("tile-size")


def test_pass_spec_parses_into_typed_options() -> None:
    p = pass_from_spec("software-pipelining{stages=4}")
    assert p.stages == 4 and p.spec() == "software-pipelining{stages=4}"
    assert pass_from_spec("num-warps").value == 8
    assert pass_from_spec("exp2-fold{factor='LOG2E', side=left}").factor == "LOG2E"
    assert parse_pass_spec("x{a='1,2', b=3}") == ("x", {"a": "1,2", "b": "3"})
    with pytest.raises(FrozenInstanceError):
        p.stages = 2  # type: ignore[misc]


@pytest.mark.parametrize("spec, message", [
    ("software-pipelining{stages=many}", "expects int"),
    ("software-pipelining{depth=3}", "has no option 'depth'"),
    ("software-pipelining{stages}", "bad option"),
    ("Bad Name", "bad pass spec"),
    ("tile-sizes{value='1}", "unterminated quote"),
])
def test_bad_options_are_clear_errors(spec: str, message: str) -> None:
    with pytest.raises(BadInputError, match=message):
        pass_from_spec(spec)


def test_options_have_docstrings() -> None:
    fields = get_pass("software-pipelining").option_fields()
    assert fields["stages"][0] is int and "pipeline depth" in fields["stages"][1]


def test_declaration_has_the_documented_keys() -> None:
    decl = get_pass("autotune").declaration()
    assert list(decl) == ["name", "category", "languages", "platforms", "requires", "provides",
                          "conflicts", "preconditions", "deterministic"]
    assert decl["requires"] == ["tiled"] and decl["deterministic"] is True


def test_precondition_failure_skips_with_the_deciding_facts() -> None:
    ir = kir.parse_file(DATA / "mm_pinned.py")
    p = get_pass("software-pipelining")()
    site = next(s for s in p.sites(ir) if not s.present and "loop" in s.detail)
    result = p.optimize(ir, site, PassContext(facts={"arch": "sm_75"}))
    assert isinstance(result, Skipped)
    assert "precondition failed" in result.reason and result.facts == {"arch": "sm_75", "stages": 3}
    applied = p.optimize(ir, site, PassContext(facts={"arch": "sm_90"}))
    assert isinstance(applied, Applied)
    assert "tl.range(0, K, BLOCK_K, num_stages=3)" in applied.ir.text
    assert applied.preconditions[0].value is True


def test_context_for_case_reads_the_case_shape() -> None:
    import gate

    shape = next(iter(gate.load_case("gemm").small_shapes.values()))
    ctx = PassContext.for_case("gemm", tier="interpret", arch="sm_90")
    assert ctx.facts["K"] == shape["K"] and ctx.facts["dtype"] == shape["dtype"]
    assert ctx.facts["arch"] == "sm_90" and ctx.case == "gemm"
    device = PassContext.for_case("gemm", tier="device")
    assert device.facts["M"] == next(iter(gate.load_case("gemm").shapes.values()))["M"]
    with pytest.raises(BadInputError):
        PassContext.for_case("gemm", variant="nope")


def test_rewriter_protocol_and_deterministic_backend() -> None:
    ir = kir.parse_file(DATA / "mm_pinned.py")
    backend = DeterministicRewriter()
    assert isinstance(backend, Rewriter)
    p = get_pass("exp2-fold")()
    site = next(s for s in p.sites(ir) if s.present)
    back = backend.rewrite(ir, site, p, direction="deoptimize")
    assert isinstance(back, Applied) and "tl.exp(" in back.ir.text

    class Card:  # what a SkillCard offers a rewriter
        pass_name = "exp2-fold"
        options = dict(back.options)

    fsite = next(s for s in p.sites(back.ir) if not s.present)
    fwd = ChainRewriter([backend]).rewrite(back.ir, fsite, Card())
    assert isinstance(fwd, Applied) and fwd.ir.text == ir.text
    assert resolve_pass(Card()).options()["factor"] == "LOG2E"
    intent = backend.rewrite(ir, site, get_pass("radix-select"))
    assert isinstance(intent, Skipped) and intent.reason == "needs the LLM rewriter"


def test_algorithmic_intents_are_detected_not_rewritten() -> None:
    ir = kir.parse_file(Path(__file__).parent.parent / "experts" / "topk" / "topk_cuda.cu")
    p = get_pass("radix-select")()
    assert not p.deterministic
    site = next(s for s in p.sites(ir) if s.present)
    assert p.deoptimize(ir, site).reason == "needs the LLM rewriter"
    assert p.optimize(ir, site, PassContext(facts={"dtype": "fp32"})).reason == "needs the LLM rewriter"


def test_passes_import_no_gpu_library() -> None:
    import subprocess
    import sys

    code = ("import sys, passes; from passes.registry import all_pass_classes; all_pass_classes(); "
            "import passes.graph, passes.rewriter, passes.roundtrip; "
            "print(sorted(m for m in ('torch', 'triton', 'cuda', 'gate') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).parent.parent)
    assert out.stdout.strip() == "[]"
