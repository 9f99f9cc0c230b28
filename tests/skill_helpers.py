"""Shared helpers of the admission / optimize tests (not a conftest: imported explicitly)."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from gate import FailureKind, Tier, Timing, Verdict
from gate.verdict import VariantTiming
from lineage.graph import Lineage
from lineage.skills import Library, SkillCard, Trial, lift

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "lineages"


def lineage(name: str) -> Lineage:
    return Lineage.load(DATA / f"{name}.json")


def naive_source(name: str) -> str:
    lin = lineage(name)
    return lin.node(lin.roles("naive")[0])["source"]


def gemm_cards(admitted: bool) -> dict[str, SkillCard]:
    cards = {c.pass_name: c for c in lift(lineage("gemm"))}
    if admitted:
        cards = {k: c.with_trial(Trial("topk:s:0", "topk", "interpret", True)) for k, c in cards.items()}
    return cards


def library(tmp: Path, admitted: bool) -> Library:
    lib = Library.open(tmp / "lib", create=True)
    for card in gemm_cards(admitted).values():
        lib.put(card)
    return lib


class ScriptedGate:
    """Stands in for `gate.check`: a source passes unless `fails(source)`; its time is
    `ms(source)`. Records every source it was asked about."""

    def __init__(self, fails: Callable[[str], bool] = lambda s: False,
                 ms: Callable[[str], float | None] = lambda s: None,
                 kernels: Callable[[str], dict[str, float]] | None = None,
                 picks: Callable[[str], dict[str, dict[str, int]]] | None = None) -> None:
        self.fails, self.ms, self.kernels, self.picks = fails, ms, kernels, picks
        self.seen: list[str] = []

    def __call__(self, source: str, language: Any, case: Any, tier: Any, **kw: Any) -> Verdict:
        self.seen.append(source)
        tier = Tier(str(getattr(tier, "value", tier)))
        if self.fails(source):
            return Verdict(False, tier, "correctness", FailureKind.WRONG_OUTPUT,
                           "max rel err 0.3 > 0.005")
        ms = self.ms(source)
        profile = tuple(self.kernels(source).items()) if self.kernels and ms else ()
        picked = tuple((k, tuple(c.items())) for k, c in self.picks(source).items()) \
            if self.picks and ms else ()
        variants = (VariantTiming("default", ms, 1.0, profile, picked),) if profile or picked else ()
        return Verdict(True, tier, "timing" if ms else "correctness",
                       timing=Timing(ms, 1.0, variants) if ms else None)


def packed_library(name: str) -> Path:
    """The library folder packed in tests/data/libraries/NAME.json (its files by relative path,
    one JSON file in the repository instead of a folder of cards), unpacked once per content
    into the temporary folder; a half-written unpack is never used."""
    import hashlib  # noqa: PLC0415
    import json  # noqa: PLC0415
    import os  # noqa: PLC0415
    import shutil  # noqa: PLC0415
    import tempfile  # noqa: PLC0415

    text = (ROOT / "tests" / "data" / "libraries" / f"{name}.json").read_text()
    root = Path(tempfile.gettempdir()) / "klineage-test-libraries" / (
        f"{name}-{hashlib.sha256(text.encode()).hexdigest()[:16]}")
    if (root / "index.json").is_file():
        return root
    tmp = root.with_name(f"{root.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    for rel, body in json.loads(text)["files"].items():
        path = tmp / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body)
    try:
        tmp.rename(root)
    except OSError:  # another process unpacked it first
        shutil.rmtree(tmp, ignore_errors=True)
    return root
