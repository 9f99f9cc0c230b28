"""The precondition language: parsing, three-valued evaluation, deciding facts, errors."""
from __future__ import annotations

import pytest

from kir.errors import QueryError
from passes.precondition import evaluate, names, validate


@pytest.mark.parametrize("expr, facts, value", [
    ("K % BLOCK_K == 0 and dtype in {bf16, fp16}", {"K": 128, "BLOCK_K": 64, "dtype": "fp16"}, True),
    ("K % BLOCK_K == 0 and dtype in {bf16, fp16}", {"K": 100, "BLOCK_K": 64, "dtype": "fp16"}, False),
    ("K % BLOCK_K == 0 and dtype in {bf16, fp16}", {"K": 128, "BLOCK_K": 64, "dtype": "fp32"}, False),
    ("arch >= sm_80", {"arch": "sm_90a"}, True),
    ("arch >= sm_80", {"arch": "sm_75"}, False),
    ("arch >= sm_80", {"arch": 86}, True),
    ("arch < sm_90 or smem >= 2 * 64 * 64 * 2", {"arch": "sm_90", "smem": 232448}, True),
    ("not (num_stages > 4)", {"num_stages": 3}, True),
    ("dtype not in {fp32, tf32}", {"dtype": "bf16"}, True),
    ("dtype == bf16", {"dtype": "bf16"}, True),
    ("pow2(BLOCK) and min(M, N) // BLOCK >= 2 and cdiv(K, 64) == 3", {"BLOCK": 64, "M": 256, "N": 128, "K": 130}, True),
    ("-x + 3 * 2 - 1 == 1", {"x": 4}, True),
    ("name == 'tl.dot'", {"name": "tl.dot"}, True),
])
def test_truth_values(expr: str, facts: dict, value: bool) -> None:
    assert evaluate(expr, facts).value is value


def test_result_carries_the_facts_that_decided_it() -> None:
    result = evaluate("K % BLOCK_K == 0 and dtype in {bf16, fp16}",
                      {"K": 100, "BLOCK_K": 64, "dtype": "fp16", "unused": 1})
    assert result.value is False
    # the conjunction failed on its first operand: dtype did not decide it
    assert dict(result.facts) == {"K": 100, "BLOCK_K": 64}
    assert result.to_json() == {"expr": "K % BLOCK_K == 0 and dtype in {bf16, fp16}",
                                "value": False, "facts": {"BLOCK_K": 64, "K": 100}}


def test_missing_facts_are_unknown_not_false() -> None:
    result = evaluate("arch >= sm_90 and K % 64 == 0", {"K": 128})
    assert result.value is None and result.missing == ("arch",)
    # Kleene logic: a known false or true operand decides regardless of the unknown one
    assert evaluate("arch >= sm_90 and K % 64 == 0", {"K": 100}).value is False
    assert evaluate("arch >= sm_90 or K % 64 == 0", {"K": 128}).value is True
    assert evaluate("not (arch >= sm_90)", {}).value is None


def test_names_lists_fact_lookups_but_not_set_symbols() -> None:
    assert names("K % BLOCK_K == 0 and dtype in {bf16, fp16}") == {"K", "BLOCK_K", "dtype"}


@pytest.mark.parametrize("expr", ["K %", "a and", "", "dtype in {", "foo(3) > 1", "arch >>= 1", "1 +* 2"])
def test_unparsable_preconditions_raise_query_error(expr: str) -> None:
    with pytest.raises(QueryError):
        validate(expr)


@pytest.mark.parametrize("expr, facts", [
    ("dtype + 1 > 2", {"dtype": "fp16"}),
    ("K % B == 0", {"K": 4, "B": 0}),
    ("K", {"K": 3}),
    ("dtype < 3", {"dtype": "fp16"}),
])
def test_unevaluable_preconditions_raise_query_error(expr: str, facts: dict) -> None:
    with pytest.raises(QueryError):
        evaluate(expr, facts)


def test_every_registered_precondition_parses() -> None:
    from passes.registry import all_pass_classes

    exprs = [expr for cls in all_pass_classes() for expr in cls.preconditions]
    assert exprs
    for expr in exprs:
        validate(expr)
        # validate must be able to fail on the same text: a broken copy of each is refused
        for broken in (f"({expr}", f"{expr} and nosuch_function(1)", f"{expr} ==="):
            with pytest.raises(QueryError):
                validate(broken)
        # and the expression is one the evaluator can run (facts missing: unknown, not error)
        result = evaluate(expr, {})
        assert result.value is None and set(result.missing) <= names(expr)
