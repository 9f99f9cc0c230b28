"""Forward re-derivation by transplant: a card's recorded step (`carrier["edit"]`) performed on a
kernel whose anchors play the same roles under other names and layout, where the pass's rule
has no site or is not asked; gated like any candidate (CUDA: NVRTC for sm_90a at the static
tier; Triton: the interpreter). Where the anchors do not map, the refusal says so."""
from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

import gate
import kir
from anchors.transplant import replay
from lineage.graph import Lineage
from lineage.optimize import card_sites, materialize, materializations, optimize
from lineage.skills import Library, SkillCard, Trial, lift
from passes.base import Skipped
from passes.rewriter import DeterministicRewriter
from skill_helpers import ROOT, ScriptedGate, gemm_cards, naive_source

CUDA_LINEAGES = ROOT / "bench" / "results" / "cuda" / "lineages"
SAXPY = ROOT / "tests" / "data" / "cases" / "saxpy"


@dataclass(frozen=True)
class _RuleOff:
    """The deterministic back-end with every rule switched off (each refuses)."""

    name: str = "deterministic"

    def rewrite(self, ir: Any, site: Any, card: Any, ctx: Any = None, *,
                direction: str = "optimize") -> Skipped:
        return Skipped("rule switched off for the test")


def _admitted(cards: list[SkillCard], case: str) -> list[SkillCard]:
    return [c.with_trial(Trial(f"{case}:s:0", case, "static", True)) for c in cards]


def _shuffle_cards() -> list[SkillCard]:
    """The warp-shuffle-reduce cards of the committed topk CUDA lineage (static tier)."""
    lin = Lineage.load(CUDA_LINEAGES / "topk_cuda_static" / "lineage.json")
    return sorted((c for c in lift(lin) if c.pass_name == "warp-shuffle-reduce"),
                  key=lambda c: c.id)


def _renamed_cuda(source: str, names: dict[str, str]) -> str:
    """`source` with `names` renamed, two-space indentation and braces on their own line."""
    text = re.sub(r"\b(" + "|".join(map(re.escape, names)) + r")\b",
                  lambda m: names[m.group(1)], source)
    return re.sub(r"\) \{\n", ")\n{\n", text.replace("    ", "  "))


def _shuffle_target(card: SkillCard) -> str:
    """The card's source state with its scratch names and helper functions renamed: the rule
    (which finds the shared-memory emulation it wrote) has no site there."""
    before = str(card.carrier["edit"]["before"])
    scratch = {name: "tmp_" + name[3:] for name in set(re.findall(r"\bkl_\w+", before))}
    helpers = {name: name + "_renamed"
               for name in re.findall(r"__device__[^(;{]*?\b(\w+)\(", before)}
    return _renamed_cuda(before, {**scratch, **helpers})


def _facts_count(verdict: Any, cls: str) -> int:
    return sum(int(c.instructions.get(cls, 0)) for c in verdict.facts.compiles)


# -- the carrier ----------------------------------------------------------------------------------
def test_a_lifted_card_keeps_its_step_and_reads_back_from_the_library(tmp_path: Path) -> None:
    lin = Lineage.load(CUDA_LINEAGES / "topk_cuda_static" / "lineage.json")
    card = _shuffle_cards()[0]
    (tid,) = card.evidence
    src, dst = (next(iter(lin.graph.predecessors(tid))), next(iter(lin.graph.successors(tid))))
    step = card.carrier["edit"]
    assert step["language"] == "cuda" and step["before"] == lin.node(src)["source"]
    assert set(step["anchors"]) == {a["anchor"] for a in lin.node(tid)["diff"]}
    before, after = replay(step)
    assert before.text == step["before"] and after.text == lin.node(dst)["source"]
    lib = Library.open(tmp_path / "lib", create=True)
    lib.put(card)
    assert lib.get(card.id).carrier["edit"] == step
    # a card written before steps were kept reads back without one: no transplant for it
    old = card.to_json()
    old["carrier"] = {k: v for k, v in old["carrier"].items() if k != "edit"}
    bare = SkillCard.from_json(json.loads(json.dumps(old)))
    made = materialize(bare, kir.parse(_shuffle_target(card), "cuda"), DeterministicRewriter())
    assert not made.ok and made.refusals == ("no site for warp-shuffle-reduce",)


# -- CUDA -----------------------------------------------------------------------------------------
def test_a_cuda_card_is_transplanted_where_its_rule_finds_no_site_and_compiles() -> None:
    card = _shuffle_cards()[0]
    target = kir.parse(_shuffle_target(card), "cuda")
    assert card_sites(card, target) == []  # the rule cannot take it
    made = materialize(card, target, DeterministicRewriter())
    assert made.ok and made.rewriter == "transplant", made.refusals
    text = made.ir.unparse()
    assert text.count("__shfl_up_sync") == target.unparse().count("__shfl_up_sync") + 1
    assert made.site is not None and "_renamed/" in made.site.anchor  # the target's anchor
    assert "kl_" not in text and "\n{\n" in text  # the target's names and layout stay
    expert = ROOT / "experts" / "topk" / "topk_cuda.cu"
    start = gate.check(target.unparse(), "cuda", "topk", "static", path=expert, cache=False)
    verdict = gate.check(text, "cuda", "topk", "static", path=expert, cache=False)
    assert start.ok and verdict.ok, verdict.reason
    # the shared-memory exchange became a shuffle in the compiled kernel
    assert _facts_count(verdict, "shuffle") > _facts_count(start, "shuffle")


def test_a_recorded_tensor_core_step_lands_on_a_renamed_gemm_and_compiles_for_sm90a() -> None:
    lin = Lineage.load(CUDA_LINEAGES / "gemm_cuda_static" / "lineage.json")
    card = next(c for c in lift(lin) if c.pass_name == "wgmma")
    before = str(card.carrier["edit"]["before"])
    kernels = re.findall(r"__global__[^(]*?\b(\w+)\(", before)
    helpers = [n for n in re.findall(r"__device__[^(]*?\b(\w+)\(", before) if n not in kernels]
    target = kir.parse(_renamed_cuda(before, {n: f"fn{i}_{n[::-1]}" for i, n in
                                              enumerate(helpers)}), "cuda")
    made = materialize(card, target, _RuleOff())
    assert made.ok and made.rewriter == "transplant", made.refusals
    assert "wgmma" in made.ir.unparse() and not any(h in made.ir.unparse() for h in helpers)
    verdict = gate.check(made.ir.unparse(), "cuda", "gemm", "static",
                         path=ROOT / "experts" / "gemm" / "gemm_cuda.cu", cache=False)
    assert verdict.ok, verdict.reason
    assert _facts_count(verdict, "wgmma") > 0


def test_where_the_anchors_do_not_map_the_run_records_why(tmp_path: Path) -> None:
    cards = _admitted(_shuffle_cards(), "topk")
    made = materialize(cards[0], kir.parse((SAXPY / "saxpy_cuda.cu").read_text(), "cuda"),
                       DeterministicRewriter())
    assert not made.ok and made.refusals[0] == "no site for warp-shuffle-reduce"
    assert made.refusals[1].startswith("transplant: anchors do not map: anchor cuda:")
    assert "has no counterpart in the target" in made.refusals[1]
    lib = Library.open(tmp_path / "lib", create=True)
    for card in cards:
        lib.put(card)
    result = optimize(SAXPY / "saxpy_cuda.cu", str(SAXPY), lib, tier="static",
                      out=tmp_path / "out", rewriter=DeterministicRewriter(),
                      check_fn=ScriptedGate())
    assert result.applied == () and result.gated == 0
    assert {s.card for s in result.rejected} == {c.id for c in cards}
    for step in result.rejected:
        assert step.stage == "materialize" and "anchors do not map: anchor" in step.reason
    risk = Lineage.load(result.lineage_path).graph.graph["rejected"]
    assert all("anchors do not map" in r["reason"] for r in risk) and len(risk) == len(cards)


def test_klineage_optimize_applies_a_cuda_card_by_transplant_at_the_static_tier(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
        ) -> None:
    from lineage.cli import main

    cards = _admitted(_shuffle_cards(), "topk")
    lib = Library.open(tmp_path / "lib", create=True)
    for card in cards:
        lib.put(card)
    target = tmp_path / "scan.cu"
    target.write_text(_shuffle_target(cards[0]))
    shutil.copyfile(ROOT / "experts" / "topk" / "topk_cuda.py", tmp_path / "scan.py")
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.setenv("KLINEAGE_CACHE_DIR", str(tmp_path / "cache"))
    capsys.readouterr()
    code = main(["optimize", str(target), "--case", "topk", "--library", str(tmp_path / "lib"),
                 "--tier", "static", "--budget-steps", "3", "--out", str(tmp_path / "out"),
                 "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert [(s["pass"], s["rewriter"]) for s in out["applied"]] == [
        ("warp-shuffle-reduce", "transplant")]
    assert out["best"]["verdict"]["ok"] and out["best"]["verdict"]["tier"] == "static"
    best = Path(out["best"]["path"]).read_text()
    assert best.count("__shfl_up_sync") == target.read_text().count("__shfl_up_sync") + 1
    lin = Lineage.load(out["lineage"])
    assert [lin.node(t)["rederived_by"] for t in lin.transitions()] == ["transplant"]


# -- Triton ---------------------------------------------------------------------------------------
def _renamed_gemm() -> str:
    names = {"acc": "total", "a": "lhs", "b": "rhs", "rm": "rows", "rn": "cols", "k": "kk",
             "matmul_kernel": "mm_kernel"}
    kernel, host = naive_source("gemm").split("\ndef run(")
    kernel = re.sub(r"\b(" + "|".join(names) + r")\b", lambda m: names[m.group(1)], kernel)
    kernel = kernel.replace("    for ", "    # walk K a tile at a time\n    for ").replace(
        "tl.store(c_ptr + ", "tl.store(\n        c_ptr + ")
    return kernel + "\ndef run(" + host.replace("matmul_kernel", "mm_kernel")


def test_a_triton_card_is_transplanted_onto_a_renamed_kernel_and_passes_the_interpreter() -> None:
    card = gemm_cards(admitted=True)["tensor-core-dot"]
    target = kir.parse(_renamed_gemm(), "triton")
    made = materialize(card, target, _RuleOff())
    assert made.ok and made.rewriter == "transplant", made.refusals
    text = made.ir.unparse()
    assert "tl.dot(lhs, rhs" in text and "tl.sum(" not in text
    assert "# walk K a tile at a time" in text and "tl.store(\n        c_ptr" in text
    # gemm at small sizes: the naive kernel's 32-wide tiles are slow to interpret at the
    # gemm case's own
    small = ROOT / "tests" / "data" / "cases" / "gemm_small"
    verdict = gate.check(text, "triton", str(small), "interpret", cache=False)
    assert verdict.ok, verdict.reason


def test_the_rule_comes_first_and_the_transplant_only_where_it_refuses() -> None:
    card = gemm_cards(admitted=True)["tensor-core-dot"]
    target = kir.parse(_renamed_gemm(), "triton")
    made = list(materializations(card, target, DeterministicRewriter()))
    assert made and {m.rewriter for m in made} == {"deterministic"}
    assert [m.rewriter for m in materializations(card, target, _RuleOff(),
                                                 transplants=False)] == [""]


def test_a_triton_step_does_not_land_on_another_reduction() -> None:
    """`tl.max` is not a renamed `tl.sum`: what the kernel does not name must match."""
    card = gemm_cards(admitted=True)["tensor-core-dot"]
    target = kir.parse(_renamed_gemm().replace("tl.sum(", "tl.max("), "triton")
    made = materialize(card, target, _RuleOff())
    assert not made.ok
    assert any(r.startswith("transplant: anchors do not map:") for r in made.refusals)


def test_a_transplant_that_does_not_bring_the_optimization_is_refused() -> None:
    """A step whose text lands but whose pass's detector sees no more of it is no candidate."""
    card = gemm_cards(admitted=True)["tensor-core-dot"]
    # (without the carrier's configuration: a launch card would otherwise end on a sweep)
    fake = replace(card, pass_name="software-pipelining",
                   carrier={k: v for k, v in card.carrier.items() if k != "config"})
    made = materialize(fake, kir.parse(_renamed_gemm(), "triton"), _RuleOff())
    assert not made.ok
    assert any("software-pipelining is not present after the transplanted step" in r
               for r in made.refusals)


DEVICE_CUDA = ROOT / "bench" / "results" / "lineages" / "device-cuda"


def test_the_device_gemm_cards_rebuild_the_expert_from_its_naive_root_by_transplant() -> None:
    """The forward path the CUDA roundtrip takes, by recorded steps alone (every rule off): from
    the least optimized state of the device lineage, the lifted cards map one after another
    (a step recorded after others maps once they are back) until the kernel is the expert again,
    token for token; the tensor-core and warp-specialization states compile for sm_90a."""
    from anchors.transplant import _tokens

    lin = Lineage.load(DEVICE_CUDA / "gemm_cuda" / "lineage.json")
    expert = next(s for s in lin.states() if "expert" in lin.node(s)["roles"])
    root = max(lin.states(), key=lambda s: (len(lin.path_to_expert(s) or ()), s))
    ir = kir.parse(lin.node(root)["source"], "cuda")
    cards = lift(lin)
    assert all(c.carrier["edit"]["language"] == "cuda" and c.scope["languages"] == ["cuda"]
               for c in cards)
    applied: list[str] = []
    compiled: dict[str, Any] = {}
    left = list(cards)
    while left:
        card, made = next(((c, m) for c in left if (m := materialize(c, ir, _RuleOff())).ok),
                          (None, None))
        assert card is not None, {c.id: materialize(c, ir, _RuleOff()).refusals for c in left}
        assert made.rewriter == "transplant"
        ir = made.ir
        left.remove(card)
        applied.append(card.pass_name)
        if card.pass_name in ("mma-intrinsics", "warp-specialization", "wgmma"):
            compiled[card.pass_name] = gate.check(ir.unparse(), "cuda", "gemm", "static",
                                                  path=ROOT / "experts" / "gemm" / "gemm_cuda.cu",
                                                  cache=False)
    # scalar FMA -> mma.sync -> WGMMA, the shared-memory reductions back to shuffles first
    assert applied.index("mma-intrinsics") < applied.index("wgmma")
    assert applied.count("warp-shuffle-reduce") == 5
    assert max(i for i, p in enumerate(applied) if p == "warp-shuffle-reduce") \
        < applied.index("mma-intrinsics")
    assert [t.text for t in _tokens(ir.unparse())] \
        == [t.text for t in _tokens(lin.node(expert)["source"])]
    for name, verdict in compiled.items():
        assert verdict.ok, (name, verdict.reason)
    # the Hopper kernel's mma.sync (the non-Hopper kernel keeps its own) become WGMMA
    assert _facts_count(compiled["mma-intrinsics"], "wgmma") == 0
    assert _facts_count(compiled["wgmma"], "wgmma") > 0
    assert _facts_count(compiled["wgmma"], "mma") < _facts_count(compiled["mma-intrinsics"], "mma")
