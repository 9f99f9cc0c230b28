"""anchors: the query language (grammars/anchor_query.lark)."""
from __future__ import annotations

import pytest

import anchors
import kir
from kir.errors import BadInputError, QueryError
from test_kir_support import EXAMPLES, KERNELS


@pytest.fixture(scope="module")
def tiled() -> anchors.AnchorIndex:
    return anchors.build_index(kir.parse_file(EXAMPLES / "matmul_tiled.py"))


@pytest.fixture(scope="module")
def flash() -> anchors.AnchorIndex:
    return anchors.build_index(kir.parse_file(KERNELS / "flash_attention_fwd.py"))


@pytest.fixture(scope="module")
def cutlass() -> anchors.AnchorIndex:
    return anchors.build_index(kir.parse_file(KERNELS / "tiled_mma.cuh"))


def ids(matches) -> list[str]:
    return [m.anchor.id for m in matches]


def test_issue_example_query(tiled):
    got = tiled.query("kernel[name=matmul_kernel] >> loop > call[name=tl.dot]")
    assert ids(got) == ["triton:matmul_kernel/for[0]/call:tl.dot[0]"]


def test_child_versus_descendant(flash):
    child = ids(flash.query("kernel > call[name=tl.load]"))
    desc = ids(flash.query("kernel >> call[name=tl.load]"))
    assert child == ["triton:attn_fwd/call:tl.load[0]"]
    assert desc == child + ["triton:attn_fwd/for[0]/if[0]/call:tl.load[0]",
                            "triton:attn_fwd/for[0]/if[0]/call:tl.load[1]",
                            "triton:attn_fwd/for[0]/call:tl.load[0]"]


def test_kind_tests_and_call_matching_sharper_kinds(flash):
    assert ids(flash.query("dot")) == ids(flash.query("call[name=tl.dot]"))
    assert len(ids(flash.query("load"))) == 4
    assert ids(flash.query("loop[iterator=tl.range]")) == ["triton:attn_fwd/for[0]"]
    assert len(flash.query("*")) == len(flash)
    assert ids(flash.query("launch")) == ["triton:run/launch:attn_fwd[0]"]


@pytest.mark.parametrize("query, expected", [
    ("constexpr_param[name^=BLOCK]", ["BLOCK_M", "BLOCK_N"]),
    ("constexpr_param[name$=_N]", ["BLOCK_N", "EVEN_N"]),
    ("constexpr_param[name*=AUS]", ["CAUSAL"]),
    ("constexpr_param[name~='^(HEAD|EVEN)_']", ["HEAD_DIM", "EVEN_N"]),
    ("decorator[name!=triton.jit]", ["triton.heuristics", "triton.autotune"]),
    ('decorator[name="triton.jit"]', ["triton.jit"]),
])
def test_predicate_operators(flash, query, expected):
    assert [m.anchor.name for m in flash.query(query)] == expected


def test_list_attributes_and_presence(flash, cutlass):
    assert ids(flash.query("kernel[decorators=triton.autotune]")) == ["triton:attn_fwd"]
    assert ids(flash.query("call[keywords=dtype]"))  # tl.zeros(..., dtype=...)
    assert ids(cutlass.query("kernel[launch_bounds]")) == ["cuda:klt::gemm::gemm_kernel"]
    assert ids(cutlass.query("dot[ops~=^mma\\.sync]")) == ["cuda:klt::gemm::mma_m16n8k16/asm[0]"]


def test_captures(tiled):
    (m,) = tiled.query("kernel@k >> loop@l > call[name=tl.dot]")
    assert m.captures["k"].id == "triton:matmul_kernel"
    assert m.captures["l"].id == "triton:matmul_kernel/for[0]"
    assert m.anchor.kind == "dot"


def test_cuda_structure_queries(cutlass):
    got = ids(cutlass.query("class[name=MmaPipelined] >> loop > barrier"))
    assert got == ["cuda:klt::gemm::MmaPipelined::operator()/for[1]/call:cp_async_wait[0]",
                   "cuda:klt::gemm::MmaPipelined::operator()/for[1]/call:__syncthreads[0]"]
    assert ids(cutlass.query("namespace > namespace > kernel")) == ["cuda:klt::gemm::gemm_kernel"]
    assert ids(cutlass.query("kernel > shared_decl[extern=True]")) == [
        "cuda:klt::gemm::gemm_kernel/shared:smem_raw[0]"]


def test_no_match_is_empty_not_an_error(tiled):
    assert tiled.query("kernel[name=nope] >> loop") == []


@pytest.mark.parametrize("bad", [
    "", "kernel >", ">> loop", "kernel[name=", "kernel[]", "loop >>> call", "kernel@",
    "bogus_kind", "call[name~='(']",
])
def test_bad_queries_raise_query_error(tiled, bad):
    with pytest.raises(QueryError) as info:
        tiled.query(bad)
    assert isinstance(info.value, BadInputError)
    assert "\n" not in str(info.value)
