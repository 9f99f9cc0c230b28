"""One rule for a `cdiv` call (passes.triton._py.is_cdiv): the call's last dotted name is
exactly `cdiv`, whatever module or alias it is read through; a name that merely ends in
`cdiv` is another function."""
from __future__ import annotations

import ast

import pytest

from passes.triton._py import is_cdiv


def _call(text: str) -> ast.AST:
    return ast.parse(text, mode="eval").body


@pytest.mark.parametrize("text", ["triton.cdiv(n, 64)", "tl.cdiv(n, 64)", "cdiv(n, 64)",
                                  "triton.language.cdiv(n, 64)", "tr.cdiv(n, 64)"])
def test_every_spelling_of_cdiv(text: str) -> None:
    assert is_cdiv(_call(text)) and is_cdiv(_call(text), 2)


@pytest.mark.parametrize("text", ["my_cdiv(n, 64)", "tl.not_cdiv(n, 64)", "cdivide(n, 64)",
                                  "tl.cdiv", "n // 64"])
def test_other_names_are_not_cdiv(text: str) -> None:
    assert not is_cdiv(_call(text))


def test_arity_where_asked() -> None:
    assert is_cdiv(_call("tl.cdiv(n)")) and not is_cdiv(_call("tl.cdiv(n)"), 2)
