"""Retrieval: per-dimension top-k of admitted cards, feature filter, ranking, the CLI."""
from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

from lineage.graph import Lineage
from lineage.retrieval import (
    TRIAL_CASE_SIMILARITY,
    Retriever,
    Target,
    similarity,
    target_from_kernel,
)
from lineage.skills import Library, SkillCard, Trial, lift

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "lineages"
DECLS = {
    "tensor-core-dot": {"requires": ["tiled"], "provides": ["tensor-core"]},
    "software-pipelining": {"requires": ["tiled"], "provides": ["pipelined"]},
    "autotune": {"requires": ["tiled"], "provides": ["autotuned"]},
    "tile-sizes": {"requires": [], "provides": ["tiled"]},
}


def _cards(admit: bool = True) -> dict[str, SkillCard]:
    lin = Lineage.load(DATA / "gemm.json")
    lin.merge(Lineage.load(DATA / "conv2d.json"))
    cards = {c.pass_name: c for c in lift(lin)}
    if admit:
        cards = {k: c.with_trial(Trial("topk:s:0", "topk", "interpret", True))
                 for k, c in cards.items()}
    return cards


def _naive_target(case: str = "gemm", extra: tuple = ()) -> Target:
    return Target(language="triton", case=case,
                  features=({"pass": "tile-sizes", "anchor": "triton:k/param:BLOCK_M[0]"},) + extra)


def _ids(result: object) -> list[str]:
    return [r.card.pass_name for r in result.cards]


def test_only_admitted_cards_are_retrieved() -> None:
    hypotheses = list(_cards(admit=False).values())
    assert Retriever(hypotheses, declarations=DECLS).retrieve(_naive_target()).cards == ()
    mixed = hypotheses[:1] + [c for c in _cards().values() if c.id != hypotheses[0].id]
    got = _ids(Retriever(mixed, declarations=DECLS).retrieve(_naive_target()))
    assert hypotheses[0].pass_name not in got and len(got) == 2


def test_ranking_is_scope_similarity_then_measured_effect() -> None:
    result = Retriever(list(_cards().values()), declarations=DECLS).retrieve(_naive_target())
    # All three share case, language and platform; on a naive target, prior actions decide:
    # tensor-core-dot needs none (Jaccard 1), the others had earlier steps before them.
    assert _ids(result) == ["tensor-core-dot", "software-pipelining", "autotune"]
    top = result.cards[0]
    assert top.similarity == {"case": 1.0, "language": 1.0, "platform": 1.0, "prior_actions": 1.0}
    # With tensor-core-dot present, pipelining (whose evidence had it) ranks above autotune.
    target = _naive_target(extra=({"pass": "tensor-core-dot",
                                   "anchor": "triton:k/for[0]/call:tl.dot[0]"},))
    ranked = Retriever(list(_cards().values()), declarations=DECLS).retrieve(target)
    assert _ids(ranked)[0] == "software-pipelining"


def test_verified_scope_counts_successful_trials_only() -> None:
    card = _cards(admit=False)["tensor-core-dot"]
    topk = Target(language="triton", case="topk")
    assert similarity(card, topk)["case"] == 0.0
    failed = card.with_trial(Trial("topk:s:1", "topk", "interpret", False, "mismatch"))
    assert similarity(failed, topk)["case"] == 0.0
    shown = failed.with_trial(Trial("topk:s:2", "topk", "interpret", True))
    assert similarity(shown, topk)["case"] == TRIAL_CASE_SIMILARITY
    # The card's own case (its evidence) counts more than a case it was only tried in.
    assert similarity(shown, Target(language="triton", case="gemm"))["case"] == 1.0


def test_union_of_per_dimension_top_k() -> None:
    cards = _cards()
    # A CUDA card of another case and platform: no case, language or platform match, but the
    # only one whose prior actions the target has.
    other = dataclasses.replace(cards["autotune"], id="autotune.cuda.x", language="cuda",
                                scope={"cases": ["conv2d"], "languages": ["cuda"],
                                       "platforms": ["rocm"], "prior_actions": ["launch-bounds"]},
                                anchor={**cards["autotune"].anchor, "present_loci": ["x"]})
    target = _naive_target(case="gemm", extra=({"pass": "launch-bounds", "anchor": "c:k"},))
    got = Retriever([cards["software-pipelining"], cards["autotune"], other], k=1,
                    declarations=DECLS).retrieve(target)
    via = {r.card.pass_name if r.card is not other else "other": r.via for r in got.cards}
    assert via["other"] == ("prior_actions",)
    # k=1 per dimension: pipelining (1.25x) beats autotune (1.11x) on case/language/platform.
    assert via["software-pipelining"] == ("case", "language", "platform")
    assert "autotune" not in via
    assert _ids(Retriever([cards["software-pipelining"], cards["autotune"], other], k=2,
                          declarations=DECLS).retrieve(target))[:2] == ["software-pipelining",
                                                                        "autotune"]


def test_feature_filter_present_conflicts_and_requires() -> None:
    cards = _cards()
    present = _naive_target(extra=({"pass": "tensor-core-dot",
                                    "anchor": "triton:k/for[0]/call:tl.dot[0]"},))
    result = Retriever(list(cards.values()), declarations=DECLS).retrieve(present)
    assert "tensor-core-dot" not in _ids(result)
    assert result.skipped[cards["tensor-core-dot"].id].startswith("already present")
    # ... unless the target still has an open site at the card's locus (another kernel).
    reopened = dataclasses.replace(present, open_sites=(
        {"pass": "tensor-core-dot", "anchor": "triton:k2/for[0]/assign:acc[0]"},))
    again = Retriever(list(cards.values()), declarations=DECLS).retrieve(reopened)
    assert "tensor-core-dot" in _ids(again)
    # A conflicting feature in the target removes the card.
    clash = dataclasses.replace(cards["autotune"], conflicts=("persistent",))
    decls = {**DECLS, "persistent-grid": {"provides": ["persistent"]}}
    target = _naive_target(extra=({"pass": "persistent-grid", "anchor": "triton:k"},))
    result = Retriever([clash], declarations=decls).retrieve(target)
    assert result.cards == () and "conflicts with present persistent" in result.skipped[clash.id]
    # Requirements: unmet -> skipped; met by another retrieved card -> kept.
    bare = Target(language="triton", case="gemm")
    alone = Retriever([cards["software-pipelining"]], declarations=DECLS).retrieve(bare)
    assert alone.cards == () and "requires tiled" in alone.skipped[cards["software-pipelining"].id]
    tiler = dataclasses.replace(cards["autotune"], id="tile-sizes.triton.x", pass_name="tile-sizes",
                                requires=(), provides=("tiled",))
    both = Retriever([cards["software-pipelining"], tiler], declarations=DECLS).retrieve(bare)
    assert set(_ids(both)) == {"software-pipelining", "tile-sizes"}


def test_target_from_a_real_kernel_skips_what_it_already_has(tmp_path: Path) -> None:
    # The gemm fixture's expert state: tensor cores, pipelining and autotuning are all there.
    lin = Lineage.load(DATA / "gemm.json")
    kernel = tmp_path / "expert.py"
    kernel.write_text(lin.node(lin.roles("expert")[0])["source"])
    target = target_from_kernel(kernel, "gemm")
    assert {"tensor-core-dot", "software-pipelining", "autotune"} <= target.present_passes
    result = Retriever(list(_cards().values())).retrieve(target)
    assert result.cards == ()
    assert all(why.startswith("already present") for why in result.skipped.values())
    assert set(result.skipped) == {c.id for c in _cards().values()}


def test_skills_command_with_a_target(tmp_path: Path) -> None:
    lib = Library.open(tmp_path / "lib", create=True)
    for card in _cards().values():
        lib.put(card)
    naive = Lineage.load(DATA / "gemm.json")
    kernel = tmp_path / "naive.py"
    kernel.write_text(naive.node(naive.roles("naive")[0])["source"])
    proc = subprocess.run([sys.executable, "-m", "lineage", "skills", str(tmp_path / "lib"),
                           "--target", str(kernel), "--case", "gemm", "--json"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["target"]["case"] == "gemm" and data["skills"]
    assert data["skills"][0]["pass"] == "tensor-core-dot"
    assert {"id", "intent", "pass", "admitted", "scope", "effect", "preconditions", "evidence",
            "risk", "score", "similarity", "via"} <= set(data["skills"][0])
    no_case = subprocess.run([sys.executable, "-m", "lineage", "skills", str(tmp_path / "lib"),
                              "--target", str(kernel)], cwd=ROOT, capture_output=True, text=True,
                             timeout=300)
    assert no_case.returncode == 2 and "--case" in no_case.stderr


def test_conflicts_are_judged_per_kernel() -> None:
    card = dataclasses.replace(_cards()["autotune"], conflicts=("even-k",),
                               anchor={**_cards()["autotune"].anchor, "present_loci": ["zzz"]})
    decls = {**DECLS, "even-k-fast-path": {"provides": ["even-k"]}}
    features = ({"pass": "tile-sizes", "anchor": "triton:k1/param:BLOCK_M[0]"},
                {"pass": "even-k-fast-path", "anchor": "triton:k1/for[0]/if[0]"})
    # The card can act in k2, which has no even-k path: kept.
    free = Target(language="triton", case="gemm", features=features,
                  open_sites=({"pass": "autotune", "anchor": "triton:k2"},))
    assert _ids(Retriever([card], declarations=decls).retrieve(free)) == ["autotune"]
    # Its only open site is in k1, next to the even-k path: skipped.
    blocked = dataclasses.replace(free, open_sites=({"pass": "autotune", "anchor": "triton:k1"},))
    result = Retriever([card], declarations=decls).retrieve(blocked)
    assert result.cards == () and "conflicts with present even-k" in result.skipped[card.id]
    # A card recorded where the conflicting feature was present (WGMMA replacing the mma.sync
    # it conflicts with) is not blocked by it.
    replacing = dataclasses.replace(card, scope={**card.scope, "prior_actions": ["even-k"]})
    assert _ids(Retriever([replacing], declarations=decls).retrieve(blocked)) == ["autotune"]


def test_an_open_site_of_a_root_pass_meets_a_requirement() -> None:
    # tile-sizes requires nothing; its open site (tiles at their floor) shows the kernel is
    # tiled, so a card requiring `tiled` is retrieved on a naive kernel.
    naive = Target(language="triton", case="gemm",
                   open_sites=({"pass": "tile-sizes", "anchor": "triton:run/launch:k[0]"},))
    got = Retriever([_cards()["tensor-core-dot"]], declarations=DECLS).retrieve(naive)
    assert _ids(got) == ["tensor-core-dot"]
    # An open site of a pass that itself has requirements meets nothing.
    piped = Target(language="triton", case="gemm",
                   open_sites=({"pass": "software-pipelining", "anchor": "triton:k/for[0]"},))
    none = Retriever([_cards()["tensor-core-dot"]], declarations={
        **DECLS, "software-pipelining": {"requires": ["tiled"], "provides": ["tiled"]}}).retrieve(piped)
    assert none.cards == ()


def test_what_a_present_pass_requires_and_every_way_to_provide_it_requires_is_met() -> None:
    # The CUDA gemm's naive root: TMA copies are present (they require a pipeline), nothing
    # detects its shared-memory staging; the pipeline's only CUDA provider requires staged
    # tiles, so cards requiring either are retrieved. A provider in another language counts
    # for nothing, and without a present pass nothing is implied.
    decls = {**DECLS,
             "tma-bulk-copy": {"requires": ["pipelined"], "provides": [], "languages": ["cuda"]},
             "cp-async-pipeline": {"requires": ["smem-staged"], "provides": ["pipelined"],
                                   "languages": ["cuda"]},
             "software-pipelining": {"requires": ["tiled"], "provides": ["pipelined"],
                                     "languages": ["triton"]}}
    tma = Target(language="cuda", case="gemm",
                 features=({"pass": "tma-bulk-copy", "anchor": "cuda:tma_load_2d/asm[0]"},))
    assert {"pipelined", "smem-staged"} <= tma.provided(decls)
    assert "tiled" not in tma.provided(decls)
    assert not {"pipelined", "smem-staged"} & Target(language="cuda", case="gemm").provided(decls)
    staged = dataclasses.replace(_cards()["tensor-core-dot"], language="cuda",
                                 scope={"cases": ["gemm"], "languages": ["cuda"]},
                                 requires=("smem-staged",))
    assert _ids(Retriever([staged], declarations=decls).retrieve(tma)) == ["tensor-core-dot"]
    assert Retriever([staged], declarations=decls).retrieve(
        Target(language="cuda", case="gemm")).cards == ()


def test_a_pass_present_for_the_whole_kernel_covers_the_cards_locus() -> None:
    card = _cards()["tensor-core-dot"]
    assert card.anchor["present_loci"] and "kernel" not in card.anchor["present_loci"]
    whole = _naive_target(extra=({"pass": "tensor-core-dot", "anchor": "triton:k"},))
    result = Retriever([card], declarations=DECLS).retrieve(whole)
    assert result.cards == () and result.skipped[card.id].startswith("already present")
    # Present only at an unrelated locus: the card still comes back.
    elsewhere = _naive_target(extra=({"pass": "tensor-core-dot",
                                      "anchor": "triton:k/if[0]/assign:z[0]"},))
    assert _ids(Retriever([card], declarations=DECLS).retrieve(elsewhere)) == ["tensor-core-dot"]


def test_excluded_cards_give_their_top_k_places_to_the_next_ranked() -> None:
    cards = _cards()
    pool = [cards["software-pipelining"], cards["autotune"]]
    target = _naive_target(case="gemm")
    first = Retriever(pool, k=1, declarations=DECLS).retrieve(target)
    assert _ids(first) == ["software-pipelining"]  # k=1: autotune never makes the top-k
    again = Retriever(pool, k=1, declarations=DECLS).retrieve(
        target, exclude={cards["software-pipelining"].id})
    assert _ids(again) == ["autotune"]
    assert "already tried" in again.skipped[cards["software-pipelining"].id]


def test_at_equal_similarity_the_top_k_goes_to_passes_that_can_act_one_card_per_pass() -> None:
    """A new operator (no case in common): language and platform tie for every card, so each
    dimension's top-k is decided by what comes next. Cards of passes with an open site in the
    target come first, one per pass before a pass's second card; cards of passes with no site
    there (first by id) do not crowd them out."""
    base = _cards()
    cards = [dataclasses.replace(base["autotune"], id=f"a-{name}.{j}", pass_name=name, requires=())
             for name in ("radix-width", "histogram-primitive", "scan-fusion") for j in range(2)]
    cards += [dataclasses.replace(base["autotune"], id=f"pipe.{j}", pass_name="software-pipelining",
                                  requires=()) for j in range(3)]
    cards.append(dataclasses.replace(base["autotune"], id="tc", pass_name="tensor-core-dot",
                                     requires=()))  # one scope and effect for all: only sites differ
    target = Target(language="triton", case="new-op", open_sites=(
        {"pass": "tensor-core-dot", "anchor": "triton:k/for[0]/call:tl.sum[0]"},
        {"pass": "software-pipelining", "anchor": "triton:k/for[0]"}))
    got = [r.card.id for r in Retriever(cards, k=2, declarations=DECLS).retrieve(target).cards]
    assert "tc" in got and len([g for g in got if g.startswith("pipe.")]) == 1, got
    assert not [g for g in got if g.startswith("a-")], got


def test_a_cuda_kernel_held_in_its_host_module_is_a_cuda_target(tmp_path: Path) -> None:
    """A load_inline host (the KernelBench solution form) holds its kernel as a string: the
    target is that CUDA source, as `optimize` reads it, not the Python module."""
    host = tmp_path / "solution.py"
    host.write_text('''import torch
from torch.utils.cpp_extension import load_inline

src = r"""
#include <torch/extension.h>
__global__ void scale_rows(const float* x, float* y, int n, float s) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        y[i] = x[i] * s;
}
torch::Tensor scale(torch::Tensor x, double s) {
    auto y = torch::empty_like(x);
    scale_rows<<<128, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), (int)x.numel(), (float)s);
    return y;
}
"""
ext = load_inline(name="scale_ext", cpp_sources="torch::Tensor scale(torch::Tensor x, double s);",
                  cuda_sources=src, functions=["scale"])
''')
    target = target_from_kernel(host, "softmax")
    assert target.language == "cuda"
