"""The shipped library reaches CUDA GEMMs users write: for shared-memory tiled GEMM starts that
were never a state of any lineage (the microkernel fixtures, the CUDA style tier's tiled GEMMs,
under their own case names), retrieval from the shipped library with no library named offers an
admitted `mma-micro-kernel` card, and that card materializes on the start by the rule (the
deterministic back-end, not a transplant of the recorded step) into mma.sync."""
from __future__ import annotations

from pathlib import Path

import pytest

import kir
from lineage.moves import materialize
from lineage.retrieval import Retriever, target_from_kernel
from lineage.shipped import open_library
from passes import PassContext
from passes.rewriter import DeterministicRewriter

ROOT = Path(__file__).resolve().parents[1]
STARTS = [
    ("tests/data/microkernels/blocktile_bf16.cu", "gemm"),
    ("tests/data/microkernels/nt_bias_relu_bf16.cu", "a_user_linear"),
    ("bench/styles/cuda/cu_mm_smem_tiled/mm_tiled.cu", "bench/styles/cuda/cu_mm_smem_tiled"),
    ("bench/styles/cuda/cu_mm_bt/linear_bt.cu", "bench/styles/cuda/cu_mm_bt"),
    ("bench/styles/cuda/cu_conv_igemm/conv_igemm.cu", "bench/styles/cuda/cu_conv_igemm"),
]


@pytest.fixture(scope="module")
def shipped(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    mp = pytest.MonkeyPatch()
    mp.setenv("KLINEAGE_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    lib, named = open_library(None)
    yield lib, named
    mp.undo()


def test_the_shipped_library_holds_admitted_mma_micro_kernel_cards_with_their_tier(shipped) -> None:
    lib, named = shipped
    cards = [c for c in lib.cards(admitted_only=True) if c.pass_name == "mma-micro-kernel"]
    assert cards and all(c.language == "cuda" for c in cards)
    parts = [p for p in named["provenance"]["parts"] if set(p.get("ids") or ()) & {c.id for c in cards}]
    assert parts and all(p["tier"] == "emulate" and p["gpu"] == "no GPU" for p in parts)
    for card in cards:  # admitted by a passing trial outside its source lineage
        assert any(t.ok for t in card.verification), card.id


@pytest.mark.parametrize("path,case", STARTS, ids=lambda s: Path(s).name)
def test_retrieval_offers_the_mma_card_and_it_materializes_on_a_user_gemm(shipped, path: str,
                                                                          case: str) -> None:
    lib, _ = shipped
    target = target_from_kernel(ROOT / path, case, "cuda")
    assert any(f["pass"] == "mma-micro-kernel" for f in target.open_sites)
    found = [r.card for r in Retriever(lib).retrieve(target).cards
             if r.card.pass_name == "mma-micro-kernel"]
    assert found, f"no mma-micro-kernel card retrieved for {path}"
    ir = kir.parse((ROOT / path).read_text(), "cuda")
    made = materialize(found[0], ir, DeterministicRewriter(),
                       PassContext(facts={"arch": "sm_90"}), max_sites=1)
    assert made.ir is not None, made
    assert made.rewriter == "deterministic"
    assert "mma.sync.aligned.m16n8k16" in made.ir.text and made.ir.text != ir.text
