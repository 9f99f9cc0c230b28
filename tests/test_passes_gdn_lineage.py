"""tensor-core-dot on the gdn expert: one site per kernel, and exact re-derivation.

The gdn expert holds 35 `tl.dot` calls in four kernels, some nested (`tl.dot(x, tl.dot(a, b)
+ tl.dot(c, d))`). A lineage removes the tensor cores of one kernel per step and re-derives the
forward step from the recorded calls; the per-call form (`granularity="call"`) stays available
and must re-derive a dot that sits in a sum of dots at the right place.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import anchors
import kir
from passes import Applied, PassContext, Skipped, get_pass
from passes.roundtrip import forward_site, normalized, roundtrip

GDN = Path(__file__).parent.parent / "experts" / "gdn" / "gdn_triton.py"
CTX = PassContext(facts={"arch": "sm_90", "dtype": "bf16"})
KERNELS = ["_gdn_kkt_solve_kernel", "_gdn_wy_kernel", "_gdn_state_kernel", "_gdn_output_kernel"]
HEAD = "import triton\nimport triton.language as tl\n\n\n@triton.jit\n"


def _dot(**options: object):  # noqa: ANN202
    return get_pass("tensor-core-dot").from_options(options)


def _gdn() -> kir.KernelIR:
    return kir.parse_file(GDN)


def _same(a: kir.KernelIR | str, b: kir.KernelIR | str) -> bool:
    text = [x if isinstance(x, str) else x.text for x in (a, b)]
    return normalized(text[0], "triton") == normalized(text[1], "triton")


def _kernel_text(ir: kir.KernelIR, name: str) -> str:
    node = next(n for n in ir.find(name=name) if n.kind in ("kernel", "function"))
    return ir.node_text(node)


def _present(p, ir: kir.KernelIR) -> list:  # noqa: ANN001
    return [s for s in p.sites(ir, anchors.build_index(ir)) if s.present]


def test_gdn_has_one_tensor_core_site_per_kernel_covering_all_its_dots() -> None:
    ir = _gdn()
    sites = _present(_dot(), ir)
    assert [s.anchor for s in sites] == [f"triton:{k}" for k in KERNELS]
    per_call = _present(_dot(granularity="call"), ir)
    assert len(per_call) == 35
    assert sum(s.detail["dots"] for s in sites) == len(per_call)
    assert {s.detail["kernel"] for s in sites} == set(KERNELS)


@pytest.mark.parametrize("kernel", KERNELS)
def test_kernel_deoptimization_removes_every_dot_of_that_kernel_and_rederives_it(kernel: str) -> None:
    ir = _gdn()
    p = _dot()
    site = next(s for s in _present(p, ir) if s.detail["kernel"] == kernel)
    trip = roundtrip(p, ir, site, CTX)
    assert isinstance(trip.backward, Applied), trip.backward
    back = trip.backward.ir
    assert "tl.dot(" not in _kernel_text(back, kernel) and "tl.sum(" in _kernel_text(back, kernel)
    for other in set(KERNELS) - {kernel}:  # the other kernels keep their tensor cores
        assert _kernel_text(back, other) == _kernel_text(ir, other)
    recorded = json.loads(trip.backward.options["calls"])
    assert recorded and all(c.startswith("tl.dot(") for c in recorded)
    assert trip.same, trip.forward


def test_every_kernel_deoptimized_then_rederived_in_reverse_gives_the_expert() -> None:
    ir = _gdn()
    p = _dot()
    steps = []
    while sites := _present(p, ir):
        back = p.deoptimize(ir, sites[0], CTX)
        assert isinstance(back, Applied), back
        steps.append((ir, sites[0], back))
        ir = back.ir
    assert len(steps) == 4 and "tl.dot(" not in ir.text.split("def run(")[0]
    for before, site, back in reversed(steps):
        forward = p.with_options(back.options)
        fsite = forward_site(forward, ir, site)
        assert fsite is not None and fsite.anchor == site.anchor
        result = forward.optimize(ir, fsite, CTX)
        assert isinstance(result, Applied), result
        assert _same(result.ir, before)
        ir = result.ir
    assert _same(ir, _gdn())


def test_per_call_rederivation_restores_the_second_dot_of_a_sum() -> None:
    # `x20 = -tl.dot(x22, tl.dot(a20, x00) + tl.dot(a21, x10))`: with `tl.dot(a20, x00)`
    # de-optimized first, the product of `tl.dot(a21, x10)` used to be read as accumulating
    # into the first product and the recorded call was restored over the wrong one.
    ir = _gdn()
    p = _dot(granularity="call")
    for operand in ("a20", "a21"):
        site = next(s for s in _present(p, ir) if s.detail["a"] == operand)
        trip = roundtrip(p, ir, site, CTX)
        assert trip.same, (operand, trip.forward)
        ir = trip.backward.ir
    assert "tl.sum(a20" in ir.text and "tl.sum(a21" in ir.text


def test_per_call_rederivation_holds_in_any_order_over_the_gdn_dots() -> None:
    ir = _gdn()
    p = _dot(granularity="call")
    steps = 0
    while sites := _present(p, ir):
        site = sites[len(sites) // 2]  # from the middle: nested and summed dots both ways
        trip = roundtrip(p, ir, site, CTX)
        assert trip.same, (site.anchor, site.detail, trip.forward)
        ir = trip.backward.ir
        steps += 1
    assert steps == 35


def test_default_optimize_keeps_a_sum_of_dots_and_nests_restored_dots() -> None:
    src = HEAD + ("def k(a, b, c, d, x):\n"
                  "    y = tl.dot(x, tl.dot(a, b) + tl.dot(c, d))\n"
                  "    return y\n")
    ir = kir.parse(src, language="triton")
    p = _dot()
    back = p.deoptimize(ir, _present(p, ir)[0], CTX)
    assert isinstance(back, Applied) and "tl.dot" not in back.ir.text
    fsite = forward_site(p, back.ir, _present(p, ir)[0])
    result = p.optimize(back.ir, fsite, CTX)  # no recorded calls: the pass's defaults
    assert isinstance(result, Applied), result
    assert _same(result.ir, ir)


def test_an_accumulating_dot_inside_an_operator_keeps_its_precedence() -> None:
    src = HEAD + ("def k(a, b, acc, s):\n"
                  "    y = -tl.dot(a, b, acc) * s\n"
                  "    z = tl.dot(a, b, acc).to(tl.float16)\n"
                  "    return y, z\n")
    ir = kir.parse(src, language="triton")
    p = _dot()
    back = p.deoptimize(ir, _present(p, ir)[0], CTX)
    assert isinstance(back, Applied)
    assert "y = -(acc + tl.sum(" in back.ir.text and "z = (acc + tl.sum(" in back.ir.text
    trip = roundtrip(p, ir, _present(p, ir)[0], CTX)
    assert trip.same, trip.forward


def test_recorded_calls_of_another_kernel_are_refused_and_the_defaults_still_apply() -> None:
    ir = _gdn()
    p = _dot()
    site = next(s for s in _present(p, ir) if s.detail["kernel"] == "_gdn_wy_kernel")
    recorded = p.deoptimize(ir, site, CTX).options
    src = HEAD + ("def k(a, b, acc):\n"
                  "    acc = acc + tl.sum(a.to(tl.float32)[:, :, None] * b.to(tl.float32)[None, :, :], axis=1)\n"
                  "    return acc\n")
    naive = kir.parse(src, language="triton")
    fsite = next(s for s in p.sites(naive) if not s.present)
    refused = p.with_options(recorded).optimize(naive, fsite, CTX)
    assert isinstance(refused, Skipped) and "recorded" in refused.reason
    default = p.optimize(naive, fsite, CTX)
    assert isinstance(default, Applied) and "acc = tl.dot(a, b, acc)" in default.ir.text


MM = HEAD + '''def mm(a_ptr, b_ptr, c_ptr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    om = tl.arange(0, BLOCK_M)
    on = tl.arange(0, BLOCK_N)
    ok = tl.arange(0, BLOCK_K)
    a = tl.load(a_ptr + om[:, None] * BLOCK_K + ok[None, :])
    b = tl.load(b_ptr + ok[:, None] * BLOCK_N + on[None, :])
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    acc = tl.dot(a, b, acc)
    tl.store(c_ptr + om[:, None] * BLOCK_N + on[None, :], acc)


def run(a, b, c):
    mm[(1,)](a, b, c, BLOCK_M=128, BLOCK_N=128, BLOCK_K=SIZE)
'''


def test_a_product_too_large_to_compile_is_refused_by_the_precondition() -> None:
    p = _dot()
    small = kir.parse(MM.replace("SIZE", "64"), language="triton")
    fits = p.deoptimize(small, _present(p, small)[0], CTX)
    assert isinstance(fits, Applied)
    assert [r.facts["product_elems"] for r in fits.preconditions] == [128 * 64 * 128]
    large = kir.parse(MM.replace("SIZE", "128"), language="triton")
    refused = p.deoptimize(large, _present(p, large)[0], CTX)
    assert isinstance(refused, Skipped) and "product_elems" in refused.reason
    assert refused.facts["product_elems"] == 128 * 128 * 128 > refused.facts["max_product_elems"]


def test_gdn_products_are_sized_from_the_autotune_configs_and_the_case_shape() -> None:
    ir = _gdn()
    p = _dot()
    site = next(s for s in _present(p, ir) if s.detail["kernel"] == "_gdn_wy_kernel")
    ctx = PassContext.for_case("gdn", tier="device")  # K = V = 128
    back = p.deoptimize(ir, site, ctx)
    assert isinstance(back, Applied)
    # x (BT x BT) times a BD-wide slice of K, the largest config's BD = 128
    assert [r.facts.get("product_elems") for r in back.preconditions] == [64 * 64 * 128]


def test_a_removed_persistent_loop_takes_its_comment_along_and_brings_it_back() -> None:
    expert = kir.parse_file(Path(__file__).parent.parent / "experts" / "gemm" / "gemm_triton.py")
    p = get_pass("persistent-grid")()
    site = next(s for s in p.sites(expert) if s.present)
    trip = roundtrip(p, expert, site, CTX)
    assert isinstance(trip.backward, Applied), trip.backward
    assert "# Persistent grid" in expert.text and "# Persistent grid" not in trip.backward.ir.text
    assert trip.same and "# Persistent grid" in trip.forward.ir.text
