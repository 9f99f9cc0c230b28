"""The passes on the expert kernels: detection, the round trip on every expert where a pass
applies, and the gate on fully de-optimized experts (interpret tier for Triton, static compile
for CUDA)."""
from __future__ import annotations

from pathlib import Path

import pytest

import anchors
import kir
from passes import PassContext, get_pass
from passes.registry import present_sites
from passes.roundtrip import deoptimize_all, roundtrip

EXPERTS = Path(__file__).parent.parent / "experts"

# expert -> passes that must be found in it (the constructs its docstring names); the experts
# evolve, so this is a floor, not the full list
FOUND = {
    "gemm/gemm_triton.py": {"autotune", "tile-sizes", "grouped-ordering", "persistent-grid",
                            "tensor-core-dot", "tma-descriptors"},
    "conv2d/conv2d_triton.py": {"autotune", "tile-sizes", "grouped-ordering", "tensor-core-dot"},
    "fmha/fmha_triton.py": {"autotune", "tile-sizes", "tensor-core-dot", "exp2-fold",
                            "causal-block-skip"},
    "gdn/gdn_triton.py": {"autotune", "tensor-core-dot"},
    "topk/topk_triton.py": {"autotune", "radix-select"},
    "trmm/trmm_triton.py": {"autotune", "tile-sizes", "grouped-ordering", "tensor-core-dot",
                            "causal-block-skip"},
    "gemm/gemm_cuda.cu": {"restrict-readonly", "pragma-unroll", "launch-bounds",
                          "cp-async-pipeline", "mma-intrinsics", "wgmma", "warp-specialization"},
    "topk/topk_cuda.cu": {"vectorize-global", "restrict-readonly", "pragma-unroll",
                          "launch-bounds", "warp-shuffle-reduce", "radix-select"},
}

# (expert, pass) -> why the rule finds its construct there and keeps it (part of its refusal)
REFUSED = {("gemm/gemm_cuda.cu", "tma-bulk-copy"): "tensor map encoded on the host",
           # 128 x 64 x 128 as a broadcast product: over the compiler's limit (the lineage
           # removes tensor cores once the tiles are smaller)
           ("trmm/trmm_triton.py", "tensor-core-dot"): "does not compile"}
# (expert, pass) -> the option of a forward rewrite that goes further than the expert: the
# trmm expert masks every block of its clamped K loop; restoring the clamp also splits off the
# blocks below the diagonal, which no row masks (the loop's split form)
FURTHER = {("trmm/trmm_triton.py", "causal-block-skip"): "split"}


def _present_rules(expert: str) -> list[str]:
    path = EXPERTS / expert
    if not path.exists():
        return []
    ir = kir.parse_file(path)
    return sorted({s.pass_name for s in present_sites(ir) if get_pass(s.pass_name).deterministic})


# every deterministic pass present in every expert (found when the tests are collected)
CASES = [(expert, name) for expert in sorted(FOUND) for name in _present_rules(expert)]
SITES_PER_PASS = 3  # the first sites of each pass: enough to cover its forms, fast in CI


def _ir(expert: str) -> kir.KernelIR:
    path = EXPERTS / expert
    if not path.exists():
        pytest.skip(f"{expert} is not in this checkout")
    return kir.parse_file(path)


@pytest.mark.parametrize("expert", sorted(FOUND))
def test_passes_find_their_constructs_in_the_experts(expert: str) -> None:
    ir = _ir(expert)
    assert FOUND[expert] <= {s.pass_name for s in present_sites(ir)}


@pytest.mark.parametrize("expert, pass_name", CASES, ids=[f"{e}:{p}" for e, p in CASES])
def test_roundtrip_on_expert(expert: str, pass_name: str) -> None:
    ir = _ir(expert)
    p = get_pass(pass_name)()
    ctx = PassContext(facts={"arch": "sm_90", "dtype": "bf16"})
    sites = [s for s in p.sites(ir, anchors.build_index(ir)) if s.present]
    assert sites
    for site in sites[:SITES_PER_PASS]:
        if (expert, pass_name) in REFUSED:
            refusal = p.deoptimize(ir, site, ctx)
            assert not refusal.ok and REFUSED[expert, pass_name] in refusal.reason
            continue
        trip = roundtrip(p, ir, site, ctx)
        assert trip.backward.ok, trip.backward
        assert trip.backward.ir.text != ir.text
        if (expert, pass_name) in FURTHER:
            assert trip.forward.ok and trip.forward.options.get(FURTHER[expert, pass_name])
            assert not trip.same
            continue
        assert trip.same, trip.forward


TRITON_CASES = [("gemm", "gemm/gemm_triton.py"), ("conv2d", "conv2d/conv2d_triton.py"),
                ("fmha", "fmha/fmha_triton.py"), ("gdn", "gdn/gdn_triton.py"),
                ("topk", "topk/topk_triton.py"), ("trmm", "trmm/trmm_triton.py")]
# The interpreter runs every program in Python: smaller tiles (more programs) and broadcast
# products make the heavier experts slow, so their chains stop earlier.
CHAIN = {"gdn": (4, set()), "conv2d": (4, {"tile-sizes"})}


@pytest.mark.slow
@pytest.mark.parametrize("case, expert", TRITON_CASES, ids=[c for c, _ in TRITON_CASES])
def test_deoptimized_triton_expert_still_computes_the_case(case: str, expert: str) -> None:
    gate = pytest.importorskip("gate")
    ir = _ir(expert)
    max_steps, leave = CHAIN.get(case, (10, set()))
    rules = [n for n in _present_rules(expert) if n not in leave]
    naive, steps = deoptimize_all(ir, max_steps=max_steps, passes=rules)
    assert steps and naive.text != ir.text
    verdict = gate.check(naive.text, "triton", case, tier="interpret",
                         path=str(EXPERTS / expert), cache=False)
    assert verdict.ok, (steps, verdict.stage, verdict.reason)


@pytest.mark.slow
@pytest.mark.parametrize("case, expert", [("gemm", "gemm/gemm_cuda.cu"), ("topk", "topk/topk_cuda.cu")],
                         ids=["gemm", "topk"])
def test_deoptimized_cuda_expert_still_compiles(case: str, expert: str) -> None:
    gate = pytest.importorskip("gate")
    ir = _ir(expert)
    naive, steps = deoptimize_all(ir)
    # every rule present in the expert was removed (a removal may bring in a construct another
    # rule then removes, e.g. the shuffles of the scalar MMA)
    kept = {name for where, name in REFUSED if where == expert}
    assert set(_present_rules(expert)) - kept <= {name for name, _ in steps}
    verdict = gate.check(naive.text, "cuda", case, tier="static", path=str(EXPERTS / expert),
                         cache=False)
    assert verdict.ok, (verdict.stage, verdict.reason)
