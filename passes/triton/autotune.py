"""Autotuning of a Triton kernel: a config list searched at launch <-> one pinned config.

De-optimization keeps the first config (the one an expert lists first is its best guess):
- a literal config list of plain values, with the kernel launched in the module: the
  `@triton.autotune(...)` decorator is removed and the first config's values become keyword
  arguments of every launch of the kernel;
- otherwise (a list built by code such as `configs=_configs()`, a config with a `pre_hook`, a
  kernel launched elsewhere or by a host helper that also launches other kernels, so that its
  launch keywords are theirs too): the list is pinned to its first element (`configs=E[:1]`); the
  configs after it then offer no launch-parameter sites (they never run).
Either way the comment lines directly above the decorator (they explain the tuned list) are
removed with it and restored by the forward step.
Optimization restores the recorded decorator (or removes the pin); without a recorded
decorator it builds a standard Hopper config list around the pinned launch values.
"""
from __future__ import annotations

import ast
import builtins
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from passes._source import ByteEdit, finish, indent_of, line_start, make_site
from passes.base import Applied, Category, Pass, PassContext, PassResult, Site, Skipped
from passes.triton._py import PyModule, callee, literal_int
from passes.triton.launch import CONFIG_NAMES, TRITON, comment_above, kernel_tiles, slice_keep
from passes.triton.roles import _host_literal as host_literal
from passes.triton.roles import _removals, heuristic_constant, heuristic_entries

if TYPE_CHECKING:
    from anchors import AnchorIndex
    from kir import KernelIR

LAUNCH_META = ("num_warps", "num_stages", "num_ctas", "maxnreg")
# (num_warps, num_stages) variants the default Hopper list tries around the pinned config.
HOPPER_VARIANTS = ((4, 3), (8, 3), (4, 4), (8, 4))
# What `triton.Config` runs with where an entry does not say (its constructor's defaults).
CONFIG_DEFAULTS = {"num_warps": 4, "num_stages": 3}


def _is_pin(expr: ast.AST) -> bool:
    """`E[:1]`: a config list pinned to its first element."""
    return slice_keep(expr) == 1


def _literal_configs(expr: ast.AST) -> list[ast.Call] | None:
    if isinstance(expr, ast.List) and expr.elts and all(
            isinstance(e, ast.Call) and callee(e) in CONFIG_NAMES for e in expr.elts):
        return list(expr.elts)
    return None


def configured_alike(a: str, b: str) -> bool:
    """Whether Triton module text `a` is `b`'s kernel with each literal config list
    (`[triton.Config(...), ...]`) holding some of `b`'s entries, reordered or repeated, and
    nothing else changed: an autotuner picks among the same configurations, or among fewer of
    them, so `a` is never faster. Texts that do not parse are alike only when equal."""
    if a == b:
        return True
    try:
        (shape_a, lists_a), (shape_b, lists_b) = _config_sets(ast.parse(a)), _config_sets(ast.parse(b))
    except SyntaxError:
        return False
    return shape_a == shape_b and all(x <= y for x, y in zip(lists_a, lists_b))


def _config_sets(tree: ast.Module) -> tuple[str, list[frozenset[str]]]:
    """`tree` dumped with each literal config list emptied, and the set of each list's entries
    in the order the lists come."""
    sets: list[frozenset[str]] = []
    for node in ast.walk(tree):
        entries = _literal_configs(node)
        if entries is not None:
            sets.append(frozenset(ast.dump(e) for e in entries))
            node.elts = []
    return ast.dump(tree), sets


def _config_values(mod: PyModule, config: ast.Call) -> list[tuple[str, str]] | None:
    """(name, value source) of a literal `triton.Config({...}, num_warps=..)`, or None."""
    if not config.args or not isinstance(config.args[0], ast.Dict):
        return None
    values: list[tuple[str, str]] = []
    for key, val in zip(config.args[0].keys, config.args[0].values):
        if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
            return None
        values.append((key.value, mod.text(val)))
    for kw in config.keywords:
        if kw.arg in LAUNCH_META:
            values.append((kw.arg, mod.text(kw.value)))
        else:  # a pre_hook (or anything else) cannot become a launch keyword: pin by slicing
            return None
    return values


@dataclass(frozen=True, slots=True)
class Autotune(Pass):
    """`@triton.autotune` over a config list <-> one pinned config."""

    decorator: str = ""
    """The exact decorator text to restore (recorded by a de-optimization); empty: build the
    default Hopper config list."""
    index: int = 0
    """Position of the autotune decorator in the kernel's decorator list."""
    pinned: str = ""
    """How the config was pinned: "slice" (`configs=E[:1]`) or the comma-separated launch
    keywords the de-optimization added."""
    comment: str = ""
    """The comment lines above the decorator that a slice pin dropped (recorded; they explain
    the tuned list), restored above the decorator."""

    name: ClassVar[str] = "autotune"
    category: ClassVar[Category] = Category.EXPRESSION
    summary: ClassVar[str] = "autotune over a config list <-> one pinned config"
    requires: ClassVar[tuple[str, ...]] = ("tiled",)
    provides: ClassVar[tuple[str, ...]] = ("autotuned",)
    languages: ClassVar[tuple[str, ...]] = TRITON
    platforms: ClassVar[tuple[str, ...]] = ("*",)
    preconditions: ClassVar[tuple[str, ...]] = ("launches >= 1",)

    def sites(self, ir: KernelIR, index: AnchorIndex | None = None) -> list[Site]:
        mod = PyModule(ir)
        out: list[Site] = []
        for kernel in mod.kernels():
            dec = mod.decorator(kernel, "autotune")
            locus = mod.span(kernel)
            launches = mod.launches(kernel.name, shared=True)
            # the comment explaining the decorator goes and comes back with it
            first = comment_above(mod.source, mod.stmt_span(kernel)[0])
            span = (min([first, *(mod.start(c) for c in launches)]),
                    max([mod.end(kernel), *(mod.end(c) for c in launches)]))
            detail = {"kernel": kernel.name, "launches": len(launches)}
            if dec is None:
                tiles = kernel_tiles(mod).get(kernel.name, {})
                pinned = [kw.arg for c in launches for kw in c.keywords
                          if kw.arg and (kw.arg in tiles or kw.arg in LAUNCH_META)]
                pinned += list(_heuristic_pins(mod, kernel))
                if pinned:
                    out.append(make_site(self.name, ir, index, span, False,
                                         {**detail, "pinned": sorted(set(pinned))}, locus))
                continue
            configs = self._configs_kw(dec)
            if configs is None:
                continue
            if _is_pin(configs.value):
                out.append(make_site(self.name, ir, index, span, False,
                                     {**detail, "pinned": "slice"}, locus))
                continue
            literal = _literal_configs(configs.value)
            if literal is not None and len(literal) <= 1:
                continue  # one config: nothing is tuned
            detail["configs"] = len(literal) if literal is not None else "computed"
            out.append(make_site(self.name, ir, index, span, True, detail, locus))
        return out

    @staticmethod
    def _configs_kw(dec: ast.expr) -> ast.keyword | None:
        if not isinstance(dec, ast.Call):
            return None
        kw = next((k for k in dec.keywords if k.arg == "configs"), None)
        if kw is None and dec.args:
            return ast.keyword(arg="configs", value=dec.args[0])
        return kw

    def _kernel(self, mod: PyModule, site: Site) -> ast.FunctionDef | None:
        name = site.detail.get("kernel")
        return next((k for k in mod.kernels() if k.name == name), None)

    def deoptimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        mod = PyModule(ir)
        kernel = self._kernel(mod, site)
        dec = mod.decorator(kernel, "autotune") if kernel is not None else None
        configs = self._configs_kw(dec) if dec is not None else None
        if configs is None:
            return Skipped("no autotune decorator with a config list at the site",
                           {"site": site.anchor})
        launches = mod.launches(kernel.name, shared=True)
        literal = _literal_configs(configs.value)
        values = _config_values(mod, literal[0]) if literal else None
        if mod.sharing(kernel.name) is not None:
            values = None  # pinning at the launch would pin the helper's other kernels too
        dec_index = kernel.decorator_list.index(dec)
        top = mod.stmt_span(kernel)[0]
        # a comment right above the autotune decorator describes the tuned list
        comment_start = comment_above(mod.source, top) if dec_index == 0 else top
        if values is None or not launches:  # pin the first config in place
            end = mod.end(configs.value)
            edits = [ByteEdit(end, end, "[:1]")]
            options = {"pinned": "slice"}
            if comment_start < top:  # the list it describes no longer runs
                edits.insert(0, ByteEdit(comment_start, top, ""))
                options["comment"] = mod.source[comment_start:top].decode("utf-8")
            return finish(ir, site, edits, options=options)
        results, skip = self.check(ctx, {"launches": len(launches)})
        if skip:
            return skip
        return _unwrapped(mod, site, kernel, values, results)

    def optimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        mod = PyModule(ir)
        kernel = self._kernel(mod, site)
        if kernel is None:
            return Skipped("no kernel at the site", {"site": site.anchor})
        dec = mod.decorator(kernel, "autotune")
        if dec is not None:
            configs = self._configs_kw(dec)
            if configs is None or not _is_pin(configs.value):
                return Skipped("the kernel is already autotuned", {"kernel": kernel.name})
            value = configs.value
            edits = [ByteEdit(mod.end(value.value), mod.end(value), "")]
            if self.comment:
                at = mod.stmt_span(kernel)[0]
                edits.insert(0, ByteEdit(at, at, self.comment))
            return finish(ir, site, edits)
        counted = _counts_in_grids(self, ir, site, ctx, kernel.name)
        if counted is not None:
            return counted
        launches = mod.launches(kernel.name, shared=True)
        if not launches:
            return Skipped("the kernel is never launched in this module", {"kernel": kernel.name})
        shared = mod.sharing(kernel.name)
        if shared is not None:
            return Skipped(shared, {"kernel": kernel.name})
        if self.decorator:
            names = [n for n in self.pinned.split(",") if n]
            fitted = _fit_decorator(self.decorator, mod, kernel)
            if isinstance(fitted, Skipped):
                return fitted
            text = fitted
        else:
            names, text = self._default_decorator(mod, kernel, launches)
            if not names:
                return Skipped("no pinned tile sizes to tune", {"kernel": kernel.name})
        edits = []
        for call in launches:
            for kw in call.keywords:
                if kw.arg in names:
                    edits.append(mod.remove_argument(call, kw))
        table, _ = heuristic_entries(mod, kernel)
        if table is not None:  # a heuristic's constant would override every config's value
            edits += _removals(mod, table, [k for k in table.keys if isinstance(k, ast.Constant)
                                            and k.value in names])
        grids = _grids_follow(mod, kernel, [n for n in names if n not in LAUNCH_META])
        if isinstance(grids, Skipped):
            return grids
        edits += grids
        position = min(self.index, len(kernel.decorator_list))
        anchor_node = kernel.decorator_list[position] if position < len(kernel.decorator_list) else kernel
        at = line_start(mod.source, mod.start(anchor_node))
        edits.append(ByteEdit(at, at, text))
        return finish(ir, site, _merge_removals(edits))

    def _default_decorator(self, mod: PyModule, kernel: ast.FunctionDef,
                           launches: list[ast.Call]) -> tuple[list[str], str]:
        pinned: dict[str, str] = {}
        tiles_of = kernel_tiles(mod).get(kernel.name, {})
        for kw in launches[0].keywords:
            if kw.arg and kw.arg in tiles_of and literal_int(kw.value) is not None:
                pinned[kw.arg] = mod.text(kw.value)
            elif kw.arg and kw.arg in tiles_of and host_literal(mod, launches[0], kw.value):
                # a host name bound once to a literal (`BM, BN = 64, 32`): its value is pinned
                pinned[kw.arg] = str(host_literal(mod, launches[0], kw.value))
            elif kw.arg in ("num_warps", "num_stages") and literal_int(kw.value) is not None:
                pinned[kw.arg] = mod.text(kw.value)
        pinned.update({n: str(v) for n, v in _heuristic_pins(mod, kernel).items()})
        tiles = {k: v for k, v in pinned.items() if k not in LAUNCH_META}
        if not tiles:
            return [], ""
        first = (int(pinned.get("num_warps", 4)), int(pinned.get("num_stages", 3)))
        variants = [first] + [v for v in HOPPER_VARIANTS if v != first]
        meta = "{" + ", ".join(f'"{k}": {v}' for k, v in tiles.items()) + "}"
        indent = indent_of(mod.source, mod.start(kernel))
        lines = [f"{indent}    triton.Config({meta}, num_warps={w}, num_stages={s}),"
                 for w, s in variants]
        from passes.triton.roles import _dimension_keys  # noqa: PLC0415

        keys = _dimension_keys(kernel)  # the sizes the kernel compares or divides by, by role
        text = (f"{indent}@triton.autotune(configs=[\n" + "\n".join(lines) + "\n"
                f"{indent}], key={keys!r})\n")
        return list(pinned), text


def pin_picked(ir: KernelIR, kernel: str, pick: Mapping[str, int]) -> PassResult:
    """`kernel`'s `@triton.autotune` over a literal list replaced by the entry `pick` names (the
    configuration its autotuner picked: integer constexprs, num_warps, num_stages, as the
    gate's verdict reports them, `gate.verdict.VariantTiming.picks`):
    - the decorator removed and the entry's values passed at each launch (a grid
      `lambda meta: ...` reads them from the launch as it read them from the autotuner), where
      the entry holds plain values, the kernel is launched in the module by launches of its own
      and the host reads nothing of the autotuner (`kernel.best_config`);
    - else the list cut to that entry (`configs=[entry]`): the autotuner stays (its entry's
      `pre_hook` runs, a shared launch helper's other kernels keep their values) and times
      nothing, a list of one needs no key.
    A configuration changes the schedule, not the result (up to the rounding of another
    accumulation order), so the pinned kernel is correct on any shape; on shapes whose
    autotune key differs from those the pick was made on it may be slower.
    Refused (`Skipped`, with why) where the kernel is not autotuned over several entries, its
    list is computed (which entry the pick is cannot be read from the source), or no single
    entry matches the pick."""
    rule = Autotune()
    site = next((s for s in rule.sites(ir) if s.present and s.detail.get("kernel") == kernel), None)
    if site is None:
        return Skipped("the kernel is not autotuned over several literal or computed configurations",
                       {"kernel": kernel})
    mod = PyModule(ir)
    fn = rule._kernel(mod, site)
    configs = rule._configs_kw(mod.decorator(fn, "autotune"))
    literal = _literal_configs(configs.value)
    if literal is None:
        return Skipped("its configurations are computed: which entry the pick is cannot be read "
                       "from the source", {"kernel": kernel})
    matches = [entry for entry in literal if _entry_matches(entry, pick)]
    if len(matches) != 1:
        return Skipped(f"{len(matches)} entries of its list match the pick",
                       {"kernel": kernel, "pick": _pick_text(pick)})
    entry = matches[0]
    values = _config_values(mod, entry)
    launches = mod.launches(kernel, shared=True)
    options = {"pick": _pick_text(pick)}
    if values is None or not launches or mod.sharing(kernel) is not None or _tuner_read(mod, kernel):
        lo, hi = mod.span(configs.value)
        return finish(ir, site, [ByteEdit(lo, hi, f"[{mod.text(entry)}]")],
                      options={**options, "pinned": "single"})
    return _unwrapped(mod, site, fn, values, options=options)


def _entry_matches(entry: ast.Call, pick: Mapping[str, int]) -> bool:
    """The literal `triton.Config` entry runs the picked configuration: each integer it sets
    (its dict's, num_warps, num_stages, their defaults where it omits them) is the pick's, and
    the pick sets nothing else."""
    meta = entry.args[0] if entry.args and isinstance(entry.args[0], ast.Dict) else None
    if meta is None:
        return False
    ints: dict[str, int] = dict(CONFIG_DEFAULTS)
    for key, val in zip(meta.keys, meta.values):
        if isinstance(key, ast.Constant) and isinstance(key.value, str) and literal_int(val) is not None:
            ints[key.value] = literal_int(val)
    for kw in entry.keywords:
        if kw.arg in CONFIG_DEFAULTS:
            if literal_int(kw.value) is None:
                return False
            ints[kw.arg] = literal_int(kw.value)
    return ints == dict(pick)


def _tuner_read(mod: PyModule, kernel: str) -> bool:
    """Host code reads an attribute of the kernel's autotuner (`kernel.best_config`, `.configs`)."""
    return any(isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == kernel
               for n in ast.walk(mod.tree))


def _pick_text(pick: Mapping[str, int]) -> str:
    return " ".join(f"{k}={v}" for k, v in pick.items())


def _unwrapped(mod: PyModule, site: Site, kernel: ast.FunctionDef, values: list[tuple[str, str]],
               preconditions: tuple = (), options: Mapping[str, Any] | None = None) -> PassResult:
    """`kernel` without its `@triton.autotune` decorator (and the comment lines right above it,
    when it is the first decorator), `values` (one configuration's constexprs and launch
    options) passed as keyword arguments of each of its launches; refused where a launch
    passes one of them already."""
    launches = mod.launches(kernel.name, shared=True)
    names = {n for n, _ in values}
    for call in launches:
        clash = names & {kw.arg for kw in call.keywords}
        if clash:
            return Skipped("a launch already passes a tuned parameter",
                           {"kernel": kernel.name, "parameters": sorted(clash)})
    dec = mod.decorator(kernel, "autotune")
    dec_index = kernel.decorator_list.index(dec)
    top = mod.stmt_span(kernel)[0]
    start = comment_above(mod.source, top) if dec_index == 0 else line_start(mod.source, mod.start(dec))
    following = (kernel.decorator_list[dec_index + 1]
                 if dec_index + 1 < len(kernel.decorator_list) else kernel)
    end = line_start(mod.source, mod.start(following))
    removed = mod.source[start:end].decode("utf-8")
    pins = ", ".join(f"{n}={v}" for n, v in values)
    edits = [ByteEdit(start, end, "")]
    for call in launches:
        edits.append(mod.insert_argument(call, len(mod.arguments(call)), pins))
    return finish(mod.ir, site, edits, preconditions=preconditions, options={
        "decorator": removed, "index": dec_index, "pinned": ",".join(n for n, _ in values),
        **(options or {})})


def _heuristic_pins(mod: PyModule, kernel: ast.FunctionDef) -> dict[str, int]:
    """Tiles of `kernel` a `@triton.heuristics` entry sets to a constant, with the constant."""
    tiles = kernel_tiles(mod).get(kernel.name, {})
    return {n: heuristic_constant(fn) for n, fn in heuristic_entries(mod, kernel)[1].items()
            if n in tiles and heuristic_constant(fn) is not None}


def _counts_in_grids(rule: Autotune, ir: KernelIR, site: Site, ctx: PassContext | None,
                     kernel: str) -> PassResult | None:
    """The rewrite made on `ir` with each host variable holding the program count a grid of
    `kernel` reads written into that grid (`roles._grid_counts_inlined`: `programs = min(sms,
    cdiv(M, bm) * cdiv(N, bn))` before `kernel[(programs,)]`), so that the grid can follow the
    tuned tiles; as one edit of the site's region. None where no grid reads such a variable or
    the inlining reaches outside the site."""
    from passes.triton.roles import _grid_counts_inlined  # noqa: PLC0415

    counted = _grid_counts_inlined(ir, kernel)
    there = next((s for s in rule.sites(counted) if s.detail.get("kernel") == kernel
                  and not s.present), None) if counted is not None else None
    if there is None:
        return None
    made = rule.optimize(counted, there, ctx)
    if not isinstance(made, Applied):
        return made
    old, new = ir.source, made.ir.source
    lo, hi = site.span
    tail = len(old) - hi
    if new[:lo] != old[:lo] or new[len(new) - tail:] != old[hi:]:
        return None
    return finish(ir, site, [ByteEdit(lo, hi, new[lo:len(new) - tail].decode("utf-8"))],
                  options=made.options, preconditions=made.preconditions)


def _grids_follow(mod: PyModule, kernel: ast.FunctionDef, tuned: list[str]) -> list[ByteEdit] | Skipped:
    """Edits that make each launch's grid read the tiles the autotuner now picks (a host grid
    computed from their launch values becomes `lambda meta: ...`, `roles._grid_rewrite`);
    refused where it cannot: a grid left computing the program count from the old tiles would
    cover another output than the autotuned kernel writes."""
    from passes.triton.roles import SweepRefusal, _grid_rewrite, kernel_launches  # noqa: PLC0415

    if not tuned:
        return []
    out: list[ByteEdit] = []
    for launch in kernel_launches(mod, kernel):
        made = _grid_rewrite(mod, kernel, launch, tuned, launch.values())
        if isinstance(made, SweepRefusal):
            return Skipped(made.reason, {"kernel": kernel.name, **dict(made.detail)})
        out += [e for e in made if e not in out]
    return out


def _module_names(mod: PyModule) -> set[str]:
    """Names bound at module level (defs, classes, assignments, imports) and builtins."""
    bound = set(dir(builtins))
    for node in mod.tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            bound.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
    return bound


def _fit_decorator(text: str, mod: PyModule, kernel: ast.FunctionDef) -> str | Skipped:
    """A recorded autotune decorator, fitted to `kernel` in `mod` (a card carries it from
    another module): keyword arguments that name helpers this module lacks (a
    `prune_configs_by` hook, say) are dropped, as they only narrow the search; `key` keeps the
    kernel's own argument names. Refused when a config sets a parameter the kernel lacks.
    The text comes back unchanged when it already fits (the lineage's own forward step)."""
    lines = text.splitlines(keepends=True)
    start = text.index("@")
    expr_src = text[start + 1:].rstrip()
    try:
        expr = ast.parse(expr_src, mode="eval").body
    except SyntaxError:
        return Skipped("the recorded decorator does not parse", {"decorator": lines[0].strip()})
    if not isinstance(expr, ast.Call):
        return Skipped("the recorded decorator is not a call", {"decorator": lines[0].strip()})
    params = {a.arg for a in kernel.args.args + kernel.args.kwonlyargs}
    data = expr_src.encode()
    offsets = [0]
    for line in expr_src.splitlines(keepends=True):
        offsets.append(offsets[-1] + len(line.encode()))

    def span(node: ast.AST) -> tuple[int, int]:
        return (offsets[node.lineno - 1] + node.col_offset,
                offsets[node.end_lineno - 1] + node.end_col_offset)

    configs = next((kw.value for kw in expr.keywords if kw.arg == "configs"), None)
    for config in (configs.elts if isinstance(configs, ast.List) else []):
        meta = config.args[0] if isinstance(config, ast.Call) and config.args else None
        if isinstance(meta, ast.Dict):
            unknown = [k.value for k in meta.keys if isinstance(k, ast.Constant) and k.value not in params]
            if unknown:
                return Skipped("the recorded configs set parameters the kernel does not have",
                               {"kernel": kernel.name, "unknown": ",".join(map(str, unknown))})
    bound = _module_names(mod)
    edits: list[tuple[int, int, bytes]] = []
    for kw in expr.keywords:
        if kw.arg == "configs":
            continue
        if kw.arg == "key" and isinstance(kw.value, (ast.List, ast.Tuple)):
            keep = [e for e in kw.value.elts if isinstance(e, ast.Constant) and e.value in params]
            if len(keep) != len(kw.value.elts):
                a, b = span(kw.value)
                edits.append((a, b, repr([e.value for e in keep]).encode()))
            continue
        missing = {n.id for n in ast.walk(kw.value) if isinstance(n, ast.Name)} - bound
        if missing:
            a, b = span(kw)
            # take the comma (and the blank space) before the keyword with it
            while a > 0 and data[a - 1:a] in (b" ", b"\n", b"\t"):
                a -= 1
            if data[a - 1:a] == b",":
                a -= 1
            edits.append((a, b, b""))
    if not edits:
        return text
    for a, b, new in sorted(edits, reverse=True):
        data = data[:a] + new + data[b:]
    return text[:start + 1] + data.decode() + "\n"


def _merge_removals(edits: list[ByteEdit]) -> list[ByteEdit]:
    """Adjacent argument removals of one call can touch: merge them so they do not overlap."""
    edits = sorted(edits, key=lambda e: (e.start, e.end))
    merged: list[ByteEdit] = []
    for e in edits:
        if merged and e.start < merged[-1].end and not e.text and not merged[-1].text:
            last = merged.pop()
            merged.append(ByteEdit(last.start, max(last.end, e.end), ""))
        else:
            merged.append(e)
    return merged
