"""tensor-core-dot finds a broadcast-multiply-reduce matmul by what it computes, not by one
spelling: the product bound to a name first, its factors swapped, `axis=-2`, `tl.expand_dims`.
Each form is restored to `tl.dot`, and the restored kernel matches the original and torch under
the Triton interpreter; forms that are not provably `a @ b` are left alone."""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

import kir
from module_helpers import load_module
from passes import Applied, PassContext, get_pass

torch = pytest.importorskip("torch")

CTX = PassContext(facts={"arch": "sm_90", "dtype": "fp32"})

KERNEL = '''
import torch
import triton
import triton.language as tl


@triton.jit
def mm(a_ptr, b_ptr, c_ptr, M, N, K,
       BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k0 + rk)[None, :])
        b = tl.load(b_ptr + (k0 + rk)[:, None] * N + rn[None, :])
BODY
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc)


def run(a, b):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), dtype=torch.float32)
    mm[(M // 16, N // 16)](a, b, c, M, N, K, BM=16, BN=16, BK=16)
    return c
'''

_I = " " * 8  # the loop body's indent

# form -> (the loop body's product and sum, what the restore writes there)
FORMS = {
    "inline": (f"{_I}acc += tl.sum(a[:, :, None] * b[None, :, :], axis=1)\n",
               f"{_I}acc += tl.dot(a, b)\n"),
    "named": (f"{_I}prod = a[:, :, None] * b[None, :, :]\n{_I}acc += tl.sum(prod, axis=1)\n",
              f"{_I}acc += tl.dot(a, b)\n"),
    "swapped": (f"{_I}acc += tl.sum(b[None, :, :] * a[:, :, None], axis=1)\n",
                f"{_I}acc += tl.dot(a, b)\n"),
    "axis-2": (f"{_I}acc += tl.sum(a[:, :, None] * b[None, :, :], axis=-2)\n",
               f"{_I}acc += tl.dot(a, b)\n"),
    "expand_dims": (f"{_I}acc += tl.sum(tl.expand_dims(a, 2) * tl.expand_dims(b, 0), axis=1)\n",
                    f"{_I}acc += tl.dot(a, b)\n"),
    "expand_dims-kw": (f"{_I}acc += tl.sum(tl.expand_dims(b, axis=0) * tl.expand_dims(a, axis=2), 1)\n",
                       f"{_I}acc += tl.dot(a, b)\n"),
    # the accumulate path: `acc + product` folds acc into the dot
    "named-swapped-acc": (f"{_I}p = tl.expand_dims(b, 0) * a[:, :, None]\n"
                          f"{_I}acc = acc + tl.sum(p, axis=-2)\n",
                          f"{_I}acc = tl.dot(a, b, acc)\n"),
    # the cast path: `.to(T)` stays a cast of the dot
    "named-cast": (f"{_I}prod = tl.expand_dims(a.to(tl.float32), axis=2) * b.to(tl.float32)[None, :, :]\n"
                   f"{_I}acc += tl.sum(prod, axis=1).to(tl.float32)\n",
                   f"{_I}acc += tl.dot(a, b).to(tl.float32)\n"),
    # a factor rebound between the product and its sum: the dot stays where the product is
    # computed, the sum reads the name
    "named-rebound": (f"{_I}prod = a[:, :, None] * b[None, :, :]\n{_I}a = a * 2.0\n"
                      f"{_I}acc += tl.sum(prod, axis=1)\n",
                      f"{_I}prod = tl.dot(a, b)\n{_I}a = a * 2.0\n{_I}acc += prod\n"),
}

# forms that do not compute `a @ b` (or not provably): no product site
REFUSED = {
    "axis0": f"{_I}acc += tl.sum(a[:, :, None] * b[None, :, :], axis=0)\n",
    "axis2": f"{_I}acc += tl.sum(a[:, :, None] * b[None, :, :], axis=2)\n",
    "named-axis0": f"{_I}prod = a[:, :, None] * b[None, :, :]\n{_I}acc += tl.sum(prod, axis=0)\n",
    "same-pattern": f"{_I}acc += tl.sum(a[:, :, None] * b[:, :, None], axis=1)\n",
    "expand-axis1": f"{_I}acc += tl.sum(tl.expand_dims(a, 1) * tl.expand_dims(b, 0), axis=1)\n",
    "expand-axis-1": f"{_I}acc += tl.sum(tl.expand_dims(a, -1) * tl.expand_dims(b, 0), axis=1)\n",
    "keep_dims": f"{_I}acc += tl.sum(b[None, :, :] * a[:, :, None], axis=1, keep_dims=True)\n",
    "named-read-twice": (f"{_I}prod = a[:, :, None] * b[None, :, :]\n"
                         f"{_I}acc += tl.sum(prod, axis=1) + tl.sum(prod, axis=2)\n"),
    "named-twice": (f"{_I}prod = a[:, :, None] * b[None, :, :]\n{_I}prod = prod * 2.0\n"
                    f"{_I}acc += tl.sum(prod, axis=1)\n"),
    "rank3-axis-2": (f"{_I}x = a[:, :, None]\n"
                     f"{_I}acc += tl.sum(x[:, :, None] * b[None, :, :], axis=-2)\n"),
}


def _kernel(body: str) -> str:
    return KERNEL.replace("BODY\n", body)


def _product_sites(text: str) -> list:  # noqa: ANN202
    ir = kir.parse(text, language="triton")
    return [s for s in get_pass("tensor-core-dot")().sites(ir) if not s.present]


def _restore(text: str) -> str:
    ir = kir.parse(text, language="triton")
    p = get_pass("tensor-core-dot")()
    (site,) = [s for s in p.sites(ir) if not s.present]
    assert site.detail["products"] == 1
    result = p.optimize(ir, site, CTX)
    assert isinstance(result, Applied), result
    return result.ir.text


def _run(text: str, where: Path, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return load_module(text, where, "product_forms").run(a, b)


@pytest.mark.parametrize("form", list(FORMS))
def test_each_form_is_found_and_restored_to_a_dot(form: str) -> None:
    body, restored = FORMS[form]
    text = _kernel(body)
    sites = get_pass("tensor-core-dot")().sites(kir.parse(text, language="triton"))
    assert [s.present for s in sites] == [False]
    new = _restore(text)
    assert new == _kernel(restored)
    assert not re.search(r"tl\.sum\(", new)
    # restored: the pass now sees the dot as present and no product left
    after = get_pass("tensor-core-dot")().sites(kir.parse(new, language="triton"))
    assert [s.present for s in after] == [True]


@pytest.mark.parametrize("form", list(FORMS))
def test_the_restored_kernel_matches_the_original_and_torch(
        form: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("interpreter not enabled")
    text = _kernel(FORMS[form][0])
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(32, 48, generator=g), torch.randn(48, 16, generator=g)  # M != N != K
    ref = a @ b
    before = _run(text, tmp_path, a, b)
    after = _run(_restore(text), tmp_path, a, b)
    assert torch.allclose(before, ref, atol=1e-2, rtol=1e-2)
    assert torch.allclose(after, ref, atol=1e-2, rtol=1e-2)
    assert torch.allclose(after, before, atol=1e-2, rtol=1e-2)


@pytest.mark.parametrize("form", list(REFUSED))
def test_forms_that_are_not_provably_a_matmul_have_no_site(form: str) -> None:
    assert _product_sites(_kernel(REFUSED[form])) == []


def test_a_product_of_unknown_rank_is_a_dot_on_axis_1_but_not_on_axis_minus_2() -> None:
    unknown = _kernel(f"{_I}a = helper(a)\n{_I}acc += tl.sum(b[None, :, :] * a[:, :, None], axis=AXIS)\n")
    assert len(_product_sites(unknown.replace("AXIS", "1"))) == 1
    assert _product_sites(unknown.replace("AXIS", "-2")) == []


def test_a_product_that_reads_memory_is_not_moved_past_a_store() -> None:
    body = (f"{_I}prod = tl.load(a_ptr + rm[:, None] * K + (k0 + rk)[None, :])[:, :, None] * b[None, :, :]\n"
            f"{_I}tl.store(a_ptr + rm[:, None] * K + (k0 + rk)[None, :], a)\n"
            f"{_I}acc += tl.sum(prod, axis=1)\n")
    new = _restore(_kernel(body))
    assert ("prod = tl.dot(tl.load(a_ptr + rm[:, None] * K + (k0 + rk)[None, :]), b)\n" in new
            and f"{_I}acc += prod\n" in new)


def test_per_call_sites_cover_the_named_product_and_restore_it() -> None:
    text = _kernel(FORMS["named-swapped-acc"][0])
    ir = kir.parse(text, language="triton")
    p = get_pass("tensor-core-dot")(granularity="call")
    (site,) = [s for s in p.sites(ir) if not s.present]
    assert site.span[0] == text.index(f"{_I}p = ") and site.detail["a"] == "a" and site.detail["b"] == "b"
    result = p.optimize(ir, site, CTX)
    assert isinstance(result, Applied), result
    assert result.ir.text == _kernel(FORMS["named-swapped-acc"][1])
    # a recorded call restores the same way
    recorded = p.with_options({"call": "tl.dot(a, b, acc)"}).optimize(ir, site, CTX)
    assert isinstance(recorded, Applied), recorded
    assert recorded.ir.text == _kernel(FORMS["named-swapped-acc"][1])


def test_the_form_a_deoptimization_writes_round_trips_unchanged() -> None:
    text = _kernel(f"{_I}acc = tl.dot(a, b, acc)\n")
    ir = kir.parse(text, language="triton")
    p = get_pass("tensor-core-dot")()
    (site,) = p.sites(ir)
    removed = p.deoptimize(ir, site, CTX)
    assert isinstance(removed, Applied), removed
    assert "acc = acc + tl.sum(a.to(tl.float32)[:, :, None] * b.to(tl.float32)[None, :, :], axis=1)" \
        in removed.ir.text
    (back,) = [s for s in p.sites(removed.ir) if not s.present]
    again = p.with_options(removed.options).optimize(removed.ir, back, CTX)
    assert isinstance(again, Applied) and again.ir.text == text
    default = p.optimize(removed.ir, back, CTX)
    assert isinstance(default, Applied) and default.ir.text == text
