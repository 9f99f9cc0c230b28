"""Scope-conditioned retrieval of SkillCards (paper §3.4).

Given a target T = (case, language, platform, features present in the kernel), the `Retriever`
returns the union of the per-dimension top-k *admitted* cards — one ranking per dimension of
scope: case (C), language (L), platform (P) and prior actions (D) — using each card's
*verified* scope (its evidence plus its successful trials), filtered against the target's
features:

- a card whose pass is already present at the locus where the card would put it, or for the
  whole kernel (and has no open site left at the card's locus), is skipped, and so is a card that conflicts with a
  feature the target has (one its own evidence was recorded with excepted: the step replaced it) — both *before* the top-k, so they take no place in it;
- a card whose `requires` are neither present in the target nor provided by another retrieved
  card is skipped (after the union, since another retrieved card may provide them).

Within a dimension, at equal similarity, cards whose pass has an open site in the target rank
first, and one card per pass before a pass's second (`Retriever._ranked`).

What is left is ranked by scope similarity (the sum of the four similarities, each in [0, 1];
a case the card was only shown to hold in by an admission trial counts half of its own case),
then by measured effect (geometric-mean speedup), then by id. Skipped cards are reported with
the reason, so a user sees why a card did not come back.
"""
from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kir.errors import BadInputError
from lineage.skills import Library, SkillCard, locus_signature
from passes._recent import Recent

if TYPE_CHECKING:
    from kir import KernelIR

DIMENSIONS = ("case", "language", "platform", "prior_actions")


@dataclass(frozen=True, slots=True)
class Target:
    """What retrieval conditions on. `features` are `{"pass", "anchor"}` records of the
    optimizations present in the target kernel (as `Pass.sites` finds them)."""

    language: str
    case: str | None = None
    platform: str = "cuda"
    features: tuple[Mapping[str, str], ...] = ()
    signature: tuple[str, ...] = ()
    """The target's operator signature (`passes.triton.roles.operator_signature`): what its
    kernels do (a dot in a reduction loop, an online softmax, a row reduction, a scan...)."""
    open_sites: tuple[Mapping[str, str], ...] = ()
    """`{"pass", "anchor"}` of the places where a pass could still be applied (its
    `present=False` sites): a card whose pass is present at its locus is still retrieved when
    the target has such an open site at the card's locus (e.g. a second kernel in the file)."""

    @property
    def present_passes(self) -> frozenset[str]:
        return frozenset(str(f.get("pass")) for f in self.features)

    def provided(self, declarations: Mapping[str, Mapping[str, Any]] | None = None) -> frozenset[str]:
        """Feature names the target has: its present passes and what those passes provide,
        and what a *root* pass (one that requires nothing) provides where it has an open site:
        such a pass tunes a construct the kernel already has (tile-sizes can grow the tiles of
        a kernel whose tiles sit at their floor, so the kernel is `tiled`)."""
        decls = declarations or {}
        names = set(self.present_passes)
        for name in self.present_passes:
            names.update(decls.get(name, {}).get("provides", ()))
        for site in self.open_sites:
            decl = decls.get(str(site.get("pass")), {})
            if decl and not decl.get("requires"):
                names.update(decl.get("provides", ()))
        return frozenset(names | self._implied(decls))

    def _implied(self, decls: Mapping[str, Mapping[str, Any]]) -> set[str]:
        """What the present passes require: it holds in the kernel, or they could not be there;
        and so does what every pass of the kernel's language that provides such a feature
        requires (the only ways to have it). A kernel whose tiles arrive by TMA (which needs a
        pipeline, which needs tiles staged in shared memory) is staged in shared memory even
        where no detector recognizes the staging itself."""
        found: set[str] = set()
        todo = [r for name in self.present_passes for r in decls.get(name, {}).get("requires", ())]
        while todo:
            feature = todo.pop()
            if feature in found:
                continue
            found.add(feature)
            providers = [set(d.get("requires", ())) for d in decls.values()
                         if feature in d.get("provides", ())
                         and self.language in (d.get("languages") or [self.language])]
            if providers:
                todo.extend(set.intersection(*providers))
        return found

    def to_json(self) -> dict[str, Any]:
        return {"case": self.case, "language": self.language, "platform": self.platform,
                "signature": list(self.signature), "features": [dict(f) for f in self.features],
                "open_sites": [dict(f) for f in self.open_sites]}


def kernel_features(ir: KernelIR) -> tuple[dict[str, str], ...]:
    """The optimizations present in `ir`: one `{"pass", "anchor"}` per present site of every
    registered pass of the kernel's language (pass modules that do not import are skipped)."""
    return kernel_sites(ir)[0]


def kernel_sites(ir: KernelIR) -> tuple[tuple[dict[str, str], ...], tuple[dict[str, str], ...]]:
    """(present, open): `{"pass", "anchor"}` of every site of every registered pass of the
    kernel's language, split by `Site.present` (duplicates removed, order kept). Read once per
    source among the last `SITES_KEPT` (a run asks again for each state it returns to)."""
    from passes import get_all_passes  # noqa: PLC0415

    language = str(getattr(ir.language, "value", ir.language))
    key = (language, ir.source, tuple(get_all_passes()))
    hit = _SITES.get(key, lambda: _read_kernel_sites(ir, language))
    return tuple(dict(r) for r in hit[0]), tuple(dict(r) for r in hit[1])


SITES_KEPT = 128
_SITES: Recent[tuple[tuple[dict[str, str], ...], ...]] = Recent(SITES_KEPT)


def _read_kernel_sites(
    ir: KernelIR, language: str
) -> tuple[tuple[dict[str, str], ...], tuple[dict[str, str], ...]]:
    import anchors  # noqa: PLC0415

    from passes import get_all_passes  # noqa: PLC0415

    index = anchors.build_index(ir)
    present: list[dict[str, str]] = []
    open_: list[dict[str, str]] = []
    for name, load in get_all_passes().items():
        try:
            cls = load()
        except ImportError:
            continue
        if cls.languages and language not in cls.languages:
            continue
        for site in cls().sites(ir, index):
            record = {"pass": name, "anchor": site.anchor}
            bucket = present if site.present else open_
            if record not in bucket:
                bucket.append(record)
    return tuple(present), tuple(open_)


def target_from_kernel(path: str | Path, case: str | None = None, platform: str = "cuda") -> Target:
    """The retrieval target of a kernel file (a CUDA kernel held in its host module, e.g. a
    `load_inline` source or a CuPy RawKernel, is read as CUDA, as `optimize` reads it); raises
    BadInputError if it does not parse."""
    import kir  # noqa: PLC0415
    from kir.embedded import cuda_unit  # noqa: PLC0415

    file = Path(path)
    if not file.is_file():
        raise BadInputError(f"{path}: no such kernel file")
    unit = cuda_unit(file)
    ir = kir.parse(unit.source, "cuda", path=unit.source_path) if unit is not None \
        else kir.parse_file(file)
    present, open_ = kernel_sites(ir)
    return Target(language=str(getattr(ir.language, "value", ir.language)), case=case,
                  platform=platform, features=present, open_sites=open_,
                  signature=kernel_signature(ir))


def kernel_signature(ir: KernelIR) -> tuple[str, ...]:
    """The operator signature of a kernel (empty for a language without one)."""
    if str(getattr(ir.language, "value", ir.language)) != "triton":
        return ()
    from passes.triton.roles import operator_signature  # noqa: PLC0415

    return tuple(sorted(operator_signature(ir)))


def pass_declarations(names: Iterable[str]) -> dict[str, dict[str, Any]]:
    """`Pass.declaration()` of each registered name (missing or unimportable ones left out)."""
    from passes import get_all_passes  # noqa: PLC0415

    registry = get_all_passes()
    out: dict[str, dict[str, Any]] = {}
    for name in names:
        try:
            out[name] = registry[name]().declaration()
        except (KeyError, ImportError):
            continue
    return out


@dataclass(frozen=True, slots=True)
class Retrieved:
    """One retrieved card: its similarity per dimension, the dimensions whose top-k it made,
    and the ranking score (sum of similarities)."""

    card: SkillCard
    similarity: Mapping[str, float]
    via: tuple[str, ...]
    score: float

    def to_json(self) -> dict[str, Any]:
        return {**self.card.summary_json(), "score": round(self.score, 6),
                "similarity": {k: round(v, 6) for k, v in self.similarity.items()},
                "via": list(self.via)}


@dataclass(frozen=True, slots=True)
class Retrieval:
    """The ranked cards and the cards skipped by the feature filter (id -> reason)."""

    target: Target
    cards: tuple[Retrieved, ...]
    skipped: Mapping[str, str] = field(default_factory=dict)


def verified_scope(card: SkillCard) -> dict[str, list[str]]:
    """The card's scope widened by its successful trials (the scope it was *shown* to hold in)."""
    scope = {key: list(card.scope.get(key) or []) for key in ("cases", "languages", "platforms")}
    for trial in card.verification:
        if trial.ok and trial.case and trial.case not in scope["cases"]:
            scope["cases"].append(trial.case)
    return scope


# Case similarity of a card shown to hold in the target's case by a trial only: one
# materialization is weaker evidence than the lineage steps the card was lifted from, so a card
# lifted from the target case's own lineage ranks above one that was only tried there.
TRIAL_CASE_SIMILARITY = 0.5


# Case similarity of a card whose cases do not include the target's, at most (when the operator
# signatures are equal): below a case the card was lifted from or tried in.
STRUCTURE_SIMILARITY = 0.4


def signature_similarity(a: Iterable[str], b: Iterable[str]) -> float:
    """Jaccard similarity of two operator signatures (0 when either is empty)."""
    sa, sb = set(a), set(b)
    if not sa or not sb:
        return 0.0
    return len(sa & sb) / len(sa | sb)


def similarity(card: SkillCard, target: Target) -> dict[str, float]:
    """Per-dimension similarity of a card's verified scope to the target, each in [0, 1]
    (case: 1 when the card's evidence came from the target's case, `TRIAL_CASE_SIMILARITY`
    when only a successful trial did, else `STRUCTURE_SIMILARITY` times the Jaccard similarity
    of the operator signatures: a new operator is compared with the card's by what its kernels
    do, never by its name)."""
    scope = verified_scope(card)
    prior = set(card.scope.get("prior_actions") or [])
    present = set(target.present_passes)
    case = 0.0
    if target.case is not None and target.case in (card.scope.get("cases") or ()):
        case = 1.0
    elif target.case is not None and target.case in scope["cases"]:
        case = TRIAL_CASE_SIMILARITY
    else:  # a case the card has never seen: how alike the operators are, by structure
        case = STRUCTURE_SIMILARITY * signature_similarity(card.scope.get("signature") or (),
                                                           target.signature)
    return {
        "case": case,
        "language": 1.0 if target.language in scope["languages"] else 0.0,
        "platform": 1.0 if target.platform in (scope["platforms"] or ["cuda"]) else 0.0,
        # The share of the prior actions every piece of evidence had that the target has too
        # (the prior-action state the skill was shown to need); 1 when it needed none.
        "prior_actions": len(prior & present) / len(prior) if prior else 1.0,
    }


class Retriever:
    """Retrieves admitted cards for a target; `k` is the per-dimension top-k."""

    def __init__(self, cards: Library | Sequence[SkillCard], *, k: int = 5,
                 declarations: Mapping[str, Mapping[str, Any]] | None = None,
                 include_hypotheses: bool = False) -> None:
        if k < 1:
            raise BadInputError("retrieval top-k must be >= 1")
        all_cards = cards.cards() if isinstance(cards, Library) else list(cards)
        self.cards = [c for c in all_cards if c.admitted or include_hypotheses]
        self.k = k
        self._given = declarations
        self._fetched: dict[str, Mapping[str, Any]] = {}

    def _decls(self, names: Iterable[str]) -> Mapping[str, Mapping[str, Any]]:
        """Declarations given to the constructor, else the registry's (fetched as needed)."""
        if self._given is not None:
            return self._given
        missing = set(names) - set(self._fetched)
        if missing:
            self._fetched.update(pass_declarations(missing))
        return self._fetched

    def retrieve(self, target: Target, exclude: Collection[str] = ()) -> Retrieval:
        """The admitted cards for `target` (class docstring); the ids in `exclude` (e.g. cards
        a caller already tried on this kernel) are set aside before the top-k is taken, so
        the next-ranked cards take their places."""
        from passes import get_all_passes  # noqa: PLC0415

        # every registered pass: a requirement's providers are asked for (Target.provided)
        decls = self._decls({c.pass_name for c in self.cards} | set(target.present_passes)
                            | {str(f.get("pass")) for f in target.open_sites}
                            | set(get_all_passes()))
        provided = target.provided(decls)
        # What the target already has (or conflicts with) is set aside first, so it does not
        # take the top-k places of cards that can still act.
        pool, skipped = self._applicable(target, provided)
        if exclude:
            excluded = set(exclude)
            skipped.update({c.id: "excluded by the caller (already tried)" for c in pool
                            if c.id in excluded})
            pool = [c for c in pool if c.id not in excluded]
        sims = {c.id: similarity(c, target) for c in pool}
        by_id = {c.id: c for c in pool}
        via: dict[str, list[str]] = {}
        acting = {str(f.get("pass")) for f in target.open_sites}
        for dim in DIMENSIONS:
            for card in self._ranked(pool, sims, dim, acting)[: self.k]:
                via.setdefault(card.id, []).append(dim)
        kept = self._requirements_met([by_id[i] for i in via], provided, skipped)
        results = [Retrieved(c, sims[c.id], tuple(via[c.id]), sum(sims[c.id].values()))
                   for c in kept]
        results.sort(key=lambda r: (-round(r.score, 9), -r.card.effect_score, r.card.id))
        return Retrieval(target, tuple(results), skipped)

    @staticmethod
    def _ranked(pool: list[SkillCard], sims: Mapping[str, Mapping[str, float]], dim: str,
                acting: set[str]) -> list[SkillCard]:
        """One dimension's ranking. At equal similarity (language and platform are 1 for most
        cards) a card whose pass has an open site in the target comes before one that cannot
        act there, and a pass's first card before the second card of a pass already ranked,
        then the larger effect: the top-k then spans the passes that can act, rather than the
        largest effects of passes with no site (or six cards of one pass)."""
        ordered = sorted((c for c in pool if sims[c.id][dim] > 0),
                         key=lambda c: (-sims[c.id][dim], -c.effect_score, c.id))
        seen: dict[tuple[float, str], int] = {}
        nth: dict[str, int] = {}
        for c in ordered:
            key = (sims[c.id][dim], c.pass_name)
            nth[c.id] = seen.get(key, 0)
            seen[key] = nth[c.id] + 1
        return sorted(ordered, key=lambda c: (-sims[c.id][dim], c.pass_name not in acting,
                                              nth[c.id], -c.effect_score, c.id))

    def _applicable(self, target: Target, provided: frozenset[str]
                    ) -> tuple[list[SkillCard], dict[str, str]]:
        """The cards neither present at their locus in the target nor in conflict with it."""
        present_loci = _loci(target.features)
        open_loci = _loci(target.open_sites)
        skipped: dict[str, str] = {}
        candidates: list[SkillCard] = []
        for card in self.cards:
            here = present_loci.get(card.pass_name, set())
            where = set(card.anchor.get("present_loci") or [])
            still_open = card.locus in open_loci.get(card.pass_name, set())
            covered = _covered(where, here)
            if here and (not where or covered) and not still_open:
                skipped[card.id] = (f"already present: {card.pass_name} at "
                                    f"{', '.join(sorted(covered or here))}")
                continue
            clash = self._clash(card, target, provided)
            if clash:
                skipped[card.id] = f"conflicts with present {', '.join(clash)}"
                continue
            candidates.append(card)
        return candidates, skipped

    def _clash(self, card: SkillCard, target: Target, provided: frozenset[str]) -> list[str]:
        """The target's features the card conflicts with. Conflicts are per kernel: when the
        target lists open sites of the card's pass, a card is free if one of the kernels
        (anchor scopes) holding such a site has none of the conflicting features."""
        scopes = {_scope(f.get("anchor", "")) for f in target.open_sites
                  if f.get("pass") == card.pass_name}
        # A conflict the card's own evidence was recorded with is no clash: the step was taken
        # where that feature was present (WGMMA replaces the mma.sync it conflicts with).
        conflicts = set(card.conflicts) - set(card.scope.get("prior_actions") or ())
        everywhere = sorted(conflicts & provided)
        if not everywhere or not scopes:
            return everywhere
        decls = self._given if self._given is not None else self._fetched
        per_scope: list[list[str]] = []
        for scope in scopes:
            names: set[str] = set()
            for f in target.features:
                if _scope(f.get("anchor", "")) == scope:
                    names.add(str(f.get("pass")))
                    names.update(decls.get(str(f.get("pass")), {}).get("provides", ()))
            per_scope.append(sorted(conflicts & names))
        return min(per_scope, key=len)

    @staticmethod
    def _requirements_met(candidates: list[SkillCard], provided: frozenset[str],
                          skipped: dict[str, str]) -> list[SkillCard]:
        """Requirements may be met by the target or by another retrieved card (applied first);
        unmet cards are dropped (reason in `skipped`) until a fixpoint, since dropping one may
        strand another."""
        while True:
            unmet: dict[str, list[str]] = {}
            for card in candidates:
                # A card cannot meet its own requirement: count only the target and the others.
                others = set(provided)
                for other in candidates:
                    if other.id != card.id:
                        others.add(other.pass_name)
                        others.update(other.provides)
                unmet[card.id] = sorted(set(card.requires) - others)
            dropped = [c for c in candidates if unmet[c.id]]
            if not dropped:
                return candidates
            for card in dropped:
                skipped[card.id] = f"requires {', '.join(unmet[card.id])}, not present"
            candidates = [c for c in candidates if not unmet[c.id]]


def _scope(anchor_id: str) -> str:
    """The top-level scope (kernel or function) of an anchor id: its first path step."""
    return str(anchor_id).split("/", 1)[0]


def _covered(where: set[str], here: set[str]) -> set[str]:
    """The loci of `where` at which the pass is present: the same locus, or any locus when the
    pass is present for a whole kernel (a kernel-level site, locus ``kernel``, stands for every
    construct inside it)."""
    if "kernel" in here:
        return set(where) | {"kernel"}
    return set(where) & here


def _loci(records: Iterable[Mapping[str, str]]) -> dict[str, set[str]]:
    """pass name -> locus signatures of its records."""
    out: dict[str, set[str]] = {}
    for f in records:
        out.setdefault(str(f.get("pass")), set()).add(locus_signature(f.get("anchor", "")))
    return out
