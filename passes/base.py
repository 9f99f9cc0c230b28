"""The pass model: one optimization intent that KLineage can find, remove and re-apply.

A pass is a frozen dataclass (imitating xDSL): its `name` is a kebab-case ClassVar, its options
are typed dataclass fields, and `"software-pipelining{stages=3}"` parses into an instance
(`parse_pass_spec`). The declarations that drive the dependency graph and the scope of a skill
(`requires`, `provides`, `conflicts`, `languages`, `platforms`, `preconditions`,
`deterministic`) are ClassVars, so they are read without building an instance.

A pass finds `Site`s in a kernel (`sites`): where the optimization is *present* (it can be
de-optimized there) and where it is *applicable* (it can be applied there). `deoptimize` and
`optimize` return a tagged `PassResult` — `Applied | Skipped | Failed` — never raise for an
expected refusal, and confine their edits to the site's anchored region (`Site.span`).

`optimize(deoptimize(K)) == K` up to formatting: a de-optimization records in
`Applied.options` what it removed (e.g. the expert's autotune config list), and the lineage
engine re-derives the forward edit with `pass.with_options(applied.options).optimize(...)`.
Without recorded options, `optimize` uses defaults documented on each option.

No GPU library is imported here or by any pass module at import time.
"""
from __future__ import annotations

import dataclasses
import enum
import functools
import re
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from kir.errors import BadInputError

if TYPE_CHECKING:  # kir/anchors types are only needed for annotations
    from anchors import AnchorIndex
    from kir import Edit, KernelIR

    from passes.precondition import PreconditionResult


class Category(str, enum.Enum):
    """The action categories of the paper's Table 1."""

    STAGING = "staging & movement"
    COMPUTE = "compute & layout"
    EXPRESSION = "expression-level"
    ALGORITHMIC = "algorithmic"


_EMPTY: Mapping[str, Any] = types.MappingProxyType({})


def _frozen(mapping: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return types.MappingProxyType(dict(mapping or {}))


@dataclass(frozen=True, slots=True)
class Site:
    """One place in a kernel where a pass applies.

    `present=True`: the optimization is there (a de-optimization site); `present=False`: it
    could be applied there (an optimization site). `anchor` is the id of the smallest anchor
    of `anchors.build_index(ir)` that contains the region; `span` is the byte region
    `(start, end)` of the source that a rewrite at this site may touch. `detail` holds what the
    pass found (e.g. the constexpr values, the config count), JSON-serialisable.
    """

    pass_name: str
    anchor: str
    present: bool
    detail: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    span: tuple[int, int] = (0, 0)

    def to_json(self) -> dict[str, Any]:
        return {"pass": self.pass_name, "anchor": self.anchor, "present": self.present,
                "span": list(self.span), "detail": dict(self.detail)}


@dataclass(frozen=True, slots=True)
class Applied:
    """The rewrite succeeded: `edits` (span edits on the input IR) give `ir`.

    `options` are the options of the *same* pass that undo this rewrite: after a
    de-optimization, `pass.with_options(options).optimize(new_ir, site)` restores the input.
    `preconditions` are the evaluated preconditions that admitted the rewrite.
    """

    edits: tuple[Edit, ...]
    ir: KernelIR
    options: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    preconditions: tuple[PreconditionResult, ...] = ()

    ok: ClassVar[bool] = True


@dataclass(frozen=True, slots=True)
class Skipped:
    """The rewrite refused: it could not keep semantics, or a precondition failed.

    `facts` are the facts that decided the refusal (e.g. `{"K": 100, "BLOCK_K": 64}`).
    """

    reason: str
    facts: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)

    ok: ClassVar[bool] = False


@dataclass(frozen=True, slots=True)
class Failed:
    """The rewrite was attempted and broke (e.g. the result does not parse): a bug or an
    unexpected construct, reported rather than raised."""

    error: str

    ok: ClassVar[bool] = False


PassResult = Applied | Skipped | Failed


@dataclass(frozen=True, slots=True)
class PassContext:
    """The facts a pass may consult: case shape and dtype, platform, static compile facts.

    `facts` is the flat fact table preconditions are evaluated against (names such as `M`,
    `K`, `dtype`, `arch`, `shared_mem_per_block`); site facts (the kernel's constexpr values)
    are layered on top of it per site. Build one with `PassContext.for_case` or directly.
    """

    facts: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    case: str | None = None
    platform: str = "cuda"
    arch: str = "sm_90"

    @staticmethod
    def for_case(case: str | None = None, *, variant: str | None = None, tier: str = "interpret",
                 arch: str = "sm_90", compile_facts: Mapping[str, Any] | None = None,
                 extra: Mapping[str, Any] | None = None) -> PassContext:
        """The context of a case's shape (`SMALL_SHAPES` at the interpret tier, `SHAPES`
        otherwise; the first variant unless `variant` names one; `shape_dims` names its
        entries, `input_shapes` the shapes of the inputs it makes, where they can be told
        without making them: `_input_shapes`), the arch, and static compile facts when given.
        The gate is imported here, not at module import."""
        facts: dict[str, Any] = {"arch": arch, "platform": "cuda"}
        if case is not None:
            import gate  # noqa: PLC0415 — lazy: the gate imports torch

            loaded = gate.load_case(case)
            shapes = _case_shapes(loaded, tier)
            if not shapes:
                raise BadInputError(f"case '{case}' has no shapes")
            name = variant if variant is not None else next(iter(shapes))
            if name not in shapes:
                raise BadInputError(f"case '{case}' has no shape variant '{name}' "
                                    f"(have: {', '.join(shapes)})")
            facts.update(shapes[name])
            facts["shape_dims"] = tuple(shapes[name])  # which facts are the case's shape
            made = _input_shapes(loaded, shapes[name])
            if made is not None:
                facts["input_shapes"] = made
        facts.update(compile_facts or {})
        facts.update(extra or {})
        return PassContext(facts=_frozen(facts), case=case, arch=arch)

    def with_facts(self, more: Mapping[str, Any]) -> PassContext:
        """A context whose fact table is this one's updated with `more`."""
        return dataclasses.replace(self, facts=_frozen({**self.facts, **more}))


def _input_shapes(case: Any, shape: Mapping[str, Any]) -> tuple[tuple[int, ...], ...] | None:
    """The shapes of the tensors the case's `make_inputs(shape, ...)` returns, made as fake
    tensors (no memory, no data); None where the module cannot make them so."""
    module = getattr(case, "module", None)
    module = module() if callable(module) else module
    make = getattr(module, "make_inputs", None)
    if make is None:
        return None
    try:
        from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: PLC0415

        with FakeTensorMode():
            made = make(dict(shape), 0, "cpu")
        return tuple(tuple(int(d) for d in t.shape) for t in made if hasattr(t, "shape"))
    except Exception:  # noqa: BLE001 — a case whose inputs need real data: the fact is left out
        return None


def _case_shapes(case: Any, tier: str) -> Mapping[str, Mapping[str, Any]]:
    # gate.Case may expose the module or copy its tables; accept either spelling.
    small = tier == "interpret"
    for attr in (("small_shapes", "SMALL_SHAPES") if small else ("shapes", "SHAPES")):
        value = getattr(case, attr, None)
        if value:
            return value
    module = getattr(case, "module", None)
    if module is not None:
        return getattr(module, "SMALL_SHAPES" if small else "SHAPES", {})
    return {}


@dataclass(frozen=True, slots=True)
class Pass:
    """Base of every pass. Subclasses are frozen slotted dataclasses whose fields are options.

    Subclasses set the ClassVars below and implement `sites`, `deoptimize` and `optimize`.
    `deoptimize`/`optimize` must return `Skipped` (with the facts) where a precondition fails
    or where semantics cannot be kept, and must only edit inside `site.span`.
    """

    name: ClassVar[str] = ""
    category: ClassVar[Category] = Category.EXPRESSION
    summary: ClassVar[str] = ""
    requires: ClassVar[tuple[str, ...]] = ()
    provides: ClassVar[tuple[str, ...]] = ()
    conflicts: ClassVar[tuple[str, ...]] = ()
    languages: ClassVar[tuple[str, ...]] = ()
    platforms: ClassVar[tuple[str, ...]] = ("cuda",)
    preconditions: ClassVar[tuple[str, ...]] = ()
    deterministic: ClassVar[bool] = True
    tunables: ClassVar[Mapping[str, tuple[Any, ...]]] = _EMPTY
    """Options a search may sweep where a recorded step sets them: option -> the values to try
    besides the recorded one (e.g. a pipeline's slot count)."""
    reach: ClassVar[tuple[Mapping[str, Any], ...]] = ()
    """The rule's fullest forms, best first: option sets a search tries on top of each
    recorded variant before it (`lineage.moves.tuned`), where the kernel allows them; where it
    does not, the rule refuses and no gate is spent (e.g. a GEMM schedule's deep, wide forms,
    which need the launch in the kernel's own source)."""
    prior: ClassVar[float] = 0.0
    """Above 1: the speedup a search expects from the rule where it has a site, before any
    lineage recorded it; the search then offers the rule as a move of its own on every state
    it applies to (`lineage.moves.rule_moves`). 0: the rule acts only through cards."""

    # -- the three operations -------------------------------------------------------------
    def sites(self, ir: KernelIR, index: AnchorIndex | None = None) -> list[Site]:
        """Where the optimization is present (`present=True`) or applicable (`False`)."""
        raise NotImplementedError

    def deoptimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        """Remove the optimization at `site`; `Applied.options` re-derive it."""
        raise NotImplementedError

    def optimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        """Apply the optimization at `site` with this instance's options."""
        raise NotImplementedError

    @classmethod
    def recorded_options(cls, options: Mapping[str, Any], before: str,
                         diff: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """The options a recorded forward step needs to be performed again: `options` as the
        lineage holds them, completed from the step's source text `before` and its structured
        `diff` where an older record left something out (the default adds nothing)."""
        return dict(options)

    # -- declarations and options -------------------------------------------------------
    @classmethod
    def declaration(cls) -> dict[str, Any]:
        """The JSON record `klineage passes --json` prints for this pass."""
        return {
            "name": cls.name,
            "category": cls.category.value,
            "languages": list(cls.languages),
            "platforms": list(cls.platforms),
            "requires": list(cls.requires),
            "provides": list(cls.provides),
            "conflicts": list(cls.conflicts),
            "preconditions": list(cls.preconditions),
            "deterministic": cls.deterministic,
        }

    @classmethod
    def option_fields(cls) -> dict[str, tuple[type, str]]:
        """Option name -> (type, docstring) for every option field of the pass."""
        return dict(_option_fields(cls))

    @classmethod
    def from_options(cls, options: Mapping[str, Any] | None = None) -> Pass:
        """An instance with `options` (values may be strings, converted to the field types);
        unknown options or values of the wrong type raise BadInputError."""
        fields = cls.option_fields()
        kwargs: dict[str, Any] = {}
        for key, value in (options or {}).items():
            if key not in fields:
                known = ", ".join(sorted(fields)) or "none"
                raise BadInputError(f"pass '{cls.name}' has no option '{key}' (options: {known})")
            kwargs[key] = _coerce(cls.name, key, value, fields[key][0])
        try:
            return cls(**kwargs)
        except (TypeError, ValueError) as exc:
            raise BadInputError(f"bad options for pass '{cls.name}': {exc}") from None

    def with_options(self, options: Mapping[str, Any] | None) -> Pass:
        """This pass with some options replaced (same validation as `from_options`)."""
        merged = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        merged.update(options or {})
        return type(self).from_options(merged)

    def options(self) -> dict[str, Any]:
        """The option values of this instance."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def spec(self) -> str:
        """`name{key=value,...}` listing the options that differ from their defaults."""
        default = type(self)()
        changed = {k: v for k, v in self.options().items() if getattr(default, k) != v}
        if not changed:
            return self.name
        return self.name + "{" + ",".join(f"{k}={_spec_value(v)}" for k, v in changed.items()) + "}"

    # -- helpers for subclasses ---------------------------------------------------------
    def check(self, ctx: PassContext | None, site_facts: Mapping[str, Any] | None = None
              ) -> tuple[list[PreconditionResult], Skipped | None]:
        """Evaluate the declared preconditions on `ctx.facts` + `site_facts`.

        Returns the results and, when one is false, the `Skipped` to return. A precondition
        that names a fact the context does not have is *unknown*, not false: the pass does not
        refuse on what it cannot know (the gate checks the result)."""
        from passes.precondition import evaluate  # noqa: PLC0415 — avoids an import cycle

        facts = dict(ctx.facts if ctx is not None else {})
        facts.update(site_facts or {})
        results = [evaluate(expr, facts) for expr in self.preconditions]
        for result in results:
            if result.value is False:
                return results, Skipped(f"precondition failed: {result.expr}", result.facts)
        return results, None


def _spec_value(value: Any) -> str:
    text = str(value)
    return text if re.fullmatch(r"[\w.+-]*", text) else repr(text)


def _coerce(pass_name: str, key: str, value: Any, kind: Any) -> Any:
    """Convert an option value (possibly a string from a pass spec) to the field's type."""
    origin = typing.get_origin(kind)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(kind) if a is not type(None)]
        if value is None or (isinstance(value, str) and value.lower() == "none"):
            return None
        kind = args[0]
    try:
        if kind is bool:
            if isinstance(value, bool):
                return value
            if isinstance(value, str) and value.lower() in ("true", "1", "yes", "false", "0", "no"):
                return value.lower() in ("true", "1", "yes")
            raise ValueError(value)
        if kind is int:
            if isinstance(value, bool):
                raise ValueError(value)
            return int(value, 0) if isinstance(value, str) else int(value)
        if kind is float:
            return float(value)
        if kind is str:
            if not isinstance(value, str):
                raise ValueError(value)
            return value
    except (TypeError, ValueError):
        raise BadInputError(f"pass '{pass_name}': option '{key}' expects "
                            f"{getattr(kind, '__name__', kind)}, got {value!r}") from None
    return value


@functools.cache
def _option_fields(cls: type) -> Mapping[str, tuple[type, str]]:
    """`Pass.option_fields` of a class, computed once (reading the docs parses its source)."""
    hints = typing.get_type_hints(cls)
    docs = _field_docs(cls)
    return types.MappingProxyType(
        {f.name: (hints[f.name], docs.get(f.name, "")) for f in dataclasses.fields(cls)})


def _field_docs(cls: type) -> dict[str, str]:
    """Docstrings written under dataclass fields (`x: int = 1` then `\"\"\"doc\"\"\"`)."""
    import ast  # noqa: PLC0415
    import inspect  # noqa: PLC0415
    import textwrap  # noqa: PLC0415

    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if klass is object or not dataclasses.is_dataclass(klass):
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError, SyntaxError):
            continue
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for first, second in zip(body, body[1:]):
            if (isinstance(first, ast.AnnAssign) and isinstance(first.target, ast.Name)
                    and isinstance(second, ast.Expr) and isinstance(second.value, ast.Constant)
                    and isinstance(second.value.value, str)):
                docs[first.target.id] = " ".join(second.value.value.split())
    return docs


_SPEC = re.compile(r"^\s*([a-z0-9][a-z0-9-]*)\s*(?:\{(.*)\})?\s*$", re.S)


def parse_pass_spec(spec: str) -> tuple[str, dict[str, str]]:
    """Split `"name{key=value,key2='a,b'}"` into the name and raw option strings.

    Values may be quoted with ' or " (to hold commas or braces). Raises BadInputError on a
    malformed spec."""
    match = _SPEC.match(spec)
    if match is None:
        raise BadInputError(f"bad pass spec {spec!r}: expected name{{key=value,...}}")
    name, body = match.group(1), match.group(2)
    options: dict[str, str] = {}
    if body and body.strip():
        for item in _split_options(spec, body):
            key, sep, value = item.partition("=")
            key = key.strip()
            if not sep or not re.fullmatch(r"[A-Za-z_]\w*", key):
                raise BadInputError(f"bad option {item.strip()!r} in pass spec {spec!r}")
            value = value.strip()
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
                value = value[1:-1]
            options[key] = value
    return name, options


def _split_options(spec: str, body: str) -> Sequence[str]:
    items, current, quote = [], [], ""
    for char in body:
        if quote:
            current.append(char)
            if char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
            current.append(char)
        elif char == ",":
            items.append("".join(current))
            current = []
        else:
            current.append(char)
    if quote:
        raise BadInputError(f"unterminated quote in pass spec {spec!r}")
    items.append("".join(current))
    return [item for item in items if item.strip()]

