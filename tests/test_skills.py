"""SkillCards: lift from hand-built lineages, serialization, the library on disk, the CLI."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import anchors
import kir
from kir.errors import BadInputError
from lineage.graph import Lineage
from lineage.skills import Library, SkillCard, Trial, lift, locus_signature

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "lineages"


def _gemm() -> Lineage:
    return Lineage.load(DATA / "gemm.json")


def _conv() -> Lineage:
    return Lineage.load(DATA / "conv2d.json")


def _by_pass(cards: list[SkillCard]) -> dict[str, SkillCard]:
    return {c.pass_name: c for c in cards}


def test_locus_signature_drops_kernel_name_and_indices() -> None:
    assert locus_signature("triton:matmul_kernel/for[0]/call:tl.dot[1]") == "for/call:tl.dot"
    assert locus_signature("triton:matmul_kernel/for[0]/assign:acc[0]") == "for/assign:acc"
    assert locus_signature("triton:matmul_kernel") == "kernel"
    assert locus_signature("triton:@module/assign:X[0]") == "@module/assign:X"


def test_lift_makes_one_card_per_pass_and_locus_with_measured_fields() -> None:
    lin = _gemm()
    cards = _by_pass(lift(lin))
    assert set(cards) == {"tensor-core-dot", "software-pipelining", "autotune"}
    dot = cards["tensor-core-dot"]
    assert dot.locus == "for/assign:acc" and not dot.admitted
    # Effect: the forward speedup 40 ms -> 5 ms, and static deltas from the verdict facts.
    assert dot.speedup["n"] == 1 and dot.speedup["median"] == pytest.approx(8.0)
    assert dot.effect["static"]["max_registers"]["median_delta"] == 32
    assert dot.effect["static"]["instructions.mma"]["median_delta"] == 8
    assert dot.effect["tier"] == "device"
    # Carrier: before/after snippet of the changed lines.
    assert "tl.sum(" in dot.carrier["before"] and "tl.dot(a, b, acc)" in dot.carrier["after"]
    assert "tl.dot" not in dot.carrier["before"]
    # Risk: the rejected de-optimizations of the pass, with why.
    assert [r["reason"] for r in dot.risk] == ["fp16 accumulate exceeds tolerance"]
    assert cards["software-pipelining"].risk[0]["failure_kind"] == "resources"
    # Scope: what was applied before (the expert order is autotune last).
    assert cards["autotune"].scope["prior_actions"] == ["software-pipelining", "tensor-core-dot",
                                                    "tile-sizes"]
    assert dot.scope["cases"] == ["gemm"] and dot.scope["languages"] == ["triton"]
    assert {p["expr"] for p in dot.preconditions} == {"dtype in {fp16, bf16}", "BLOCK_K >= 16"}
    assert len(dot.evidence) == 1 and dot.evidence[0] in lin.transitions()
    # Declarations come from the pass registry.
    assert "tensor-core" in dot.provides


def test_the_anchor_query_finds_the_locus_in_the_source_state() -> None:
    lin = _gemm()
    dot = _by_pass(lift(lin))["tensor-core-dot"]
    root = lin.roles("naive")[0]
    index = anchors.build_index(kir.parse(lin.node(root)["source"], language="triton"))
    found = [str(m.anchor.id) for m in index.query(dot.anchor["query"])]
    assert dot.anchor["examples"][0] in found


def test_transitions_with_the_same_intent_and_context_share_one_card() -> None:
    merged = _gemm()
    merged.merge(_conv())
    cards = _by_pass(lift(merged))
    assert len(cards) == 3  # not 5: one card per intent and context
    dot = cards["tensor-core-dot"]
    assert len(dot.evidence) == 2 and sorted(dot.scope["cases"]) == ["conv2d", "gemm"]
    # Only the gemm transition was timed: one speedup sample.
    assert dot.speedup["n"] == 1
    held = {p["expr"]: p for p in dot.preconditions}["dtype in {fp16, bf16}"]
    assert (held["held"], held["unknown"]) == (1, 1)


def test_lift_is_stable_and_json_roundtrips() -> None:
    first, second = lift(_gemm()), lift(_gemm())
    assert [c.id for c in first] == [c.id for c in second]
    for card in first:
        again = SkillCard.from_json(json.loads(json.dumps(card.to_json())))
        assert again.to_json() == card.to_json()
    with pytest.raises(BadInputError):
        SkillCard.from_json({"intent": "no id"})


def test_markdown_carries_every_field_and_the_carrier_verbatim() -> None:
    dot = _by_pass(lift(_gemm()))["tensor-core-dot"]
    text = dot.to_markdown()
    for heading in ("Intent", "Pass", "Anchor", "Carrier", "Preconditions", "Effect",
                    "Evidence", "Risk", "Scope", "Verification log"):
        assert f"**{heading}.**" in text
    assert dot.carrier["before"].rstrip("\n") in text
    assert dot.carrier["after"].rstrip("\n") in text
    assert "8.00x" in text and "hypothesis" in text


def test_library_merges_relifted_cards_and_keeps_admission(tmp_path: Path) -> None:
    lib = Library.open(tmp_path / "lib", create=True)
    lib.add_all(lift(_gemm()))
    dot_id = _by_pass(lift(_gemm()))["tensor-core-dot"].id
    admitted = lib.get(dot_id).with_trial(Trial("conv2d:s:x", "conv2d", "interpret", True))
    lib.put(admitted)
    # Lifting the same lineage again and another one: evidence united, no double counting.
    lib.add_all(lift(_gemm()))
    lib.add_all(lift(_conv()))
    dot = lib.get(dot_id)
    assert dot.admitted and len(dot.verification) == 1
    assert len(dot.evidence) == 2 and dot.speedup["n"] == 1
    assert dot.scope["cases"] == ["gemm", "conv2d"]
    index = json.loads((tmp_path / "lib" / "index.json").read_text())
    assert {e["id"] for e in index["cards"]} == set(lib.ids()) and len(lib.ids()) == 3
    assert [e["admitted"] for e in index["cards"] if e["id"] == dot_id] == [True]
    assert not list((tmp_path / "lib").rglob("*.tmp"))  # atomic writes leave no temp files
    # Reopened from disk, the library holds the same cards.
    assert [c.to_json() for c in Library.open(tmp_path / "lib").cards()] == \
        [c.to_json() for c in lib.cards()]


def test_library_bad_paths(tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match="no such SkillCard library"):
        Library.open(tmp_path / "missing")
    (tmp_path / "file").write_text("x")
    with pytest.raises(BadInputError, match="not a SkillCard library"):
        Library.open(tmp_path / "file")
    lib = Library.open(tmp_path / "lib", create=True)
    with pytest.raises(BadInputError):
        lib.get("../../etc/passwd")


def _klineage(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lineage", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


def test_skills_command_lists_cards_as_json(tmp_path: Path) -> None:
    lib = tmp_path / "lib"
    proc = _klineage("skills", str(lib), "--add", str(DATA / "gemm.json"), "--add",
                     str(DATA / "conv2d.json"), "--json")
    assert proc.returncode == 0, proc.stderr
    skills = json.loads(proc.stdout)["skills"]
    assert len(skills) == 3
    for s in skills:
        assert set(s) == {"id", "intent", "pass", "admitted", "scope", "effect",
                          "preconditions", "evidence", "risk"}
    dot = next(s for s in skills if s["pass"] == "tensor-core-dot")
    assert dot["effect"]["speedup"]["max"] == pytest.approx(8.0) and len(dot["evidence"]) == 2
    md = _klineage("skills", str(lib), "--markdown")
    assert md.returncode == 0 and "### SkillCard" in md.stdout
    bad = _klineage("skills", str(tmp_path / "none"))
    assert bad.returncode == 2 and bad.stderr.startswith("klineage: error:")
    assert "Traceback" not in bad.stderr


def test_same_locus_after_different_prior_actions_is_two_cards() -> None:
    merged = _gemm()
    conv = _conv()
    # Strip conv2d's launch feature: its steps then ran without tile-sizes applied before.
    for sid in conv.states():
        node = conv.graph.nodes[sid]
        node["features"] = [f for f in node["features"] if f["pass"] != "tile-sizes"]
    merged.merge(conv)
    dots = [c for c in lift(merged) if c.pass_name == "tensor-core-dot"]
    assert len(dots) == 2
    assert sorted(tuple(c.scope["prior_actions"]) for c in dots) == [(), ("tile-sizes",)]
    assert len({c.id for c in dots}) == 2


def test_option_candidates_put_the_sites_own_variant_first() -> None:
    card = SkillCard(id="x.triton.1", intent="", pass_name="x", category="", language="triton",
                     locus="for/call:tl.load", options={"desc": "a"},
                     variants=({"anchor": "triton:k/for[0]/call:tl.load[0]", "options": {"desc": "a"}},
                               {"anchor": "triton:k/for[0]/call:tl.load[1]", "options": {"desc": "b"}},
                               {"anchor": "triton:k/call:tl.store[0]", "options": {"desc": "c"}}))
    assert card.option_candidates("triton:k/for[0]/call:tl.load[1]") == [
        {"desc": "b"}, {"desc": "a"}, {"desc": "c"}]
    # Another kernel: same locus first, then the card's options, then the rest.
    assert card.option_candidates("triton:other/call:tl.store[0]")[0] == {"desc": "c"}
    assert card.options_for("triton:k/for[0]/call:tl.load[1]") == {"desc": "b"}
