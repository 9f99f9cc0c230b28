"""A CUDA function template is one function from its `template <...>` head: rules that delete
the helpers they once inserted (the tensor-core restorations) take the head with the body."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import kir
from passes.cuda._c import CSource, functions

ROOT = Path(__file__).resolve().parent.parent

TEXT = """\
__device__ __forceinline__ int plain(int x) { return x + 1; }
template <int N>
__device__ __forceinline__ void waits() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
template <typename T,
          int M>
__device__ T scaled(T x) { return x * M; }
"""


def test_a_function_template_starts_at_its_template_head() -> None:
    src = CSource.of_text(TEXT)
    starts = {f.name: src.text[f.start:].splitlines()[0] for f in functions(src)}
    assert starts["plain"].startswith("__device__ __forceinline__ int plain")
    assert starts["waits"] == "template <int N>"
    assert starts["scaled"] == "template <typename T,"


def test_wgmma_restored_on_a_held_out_state_leaves_no_orphan_template_head() -> None:
    """The held-out GEMM state whose wgmma was de-optimized into a function template helper:
    the card lifted from the expert's lineage restores it, and the result compiles for sm_90a
    (it once kept the helper's `template <int N>` above the next declaration)."""
    pytest.importorskip("cuda.bindings.nvrtc")
    from experts.cudahost import compile_source
    from lineage.graph import Lineage
    from lineage.moves import materializations
    from lineage.skills import lift
    from passes.rewriter import DeterministicRewriter

    cards = [c for c in lift(Lineage.load(ROOT / "bench/results/lineages/device-cuda/gemm_cuda/lineage.json"))
             if c.pass_name == "wgmma"]
    assert cards
    held = json.loads((ROOT / "bench/results/lineages/heldout-cuda/gemm-b8/lineage.json").read_text())
    states = [n for n in held["nodes"] if n.get("language") == "cuda" and "kl_wgmma_as_mma<" in n.get("source", "")]
    assert states
    made = next(materializations(cards[0], kir.parse(states[0]["source"], "cuda"), DeterministicRewriter()))
    assert made.ir is not None
    out = made.ir.unparse()
    assert "kl_wgmma_as_mma" not in out
    compile_source(out, arch="sm_90a")
