"""Carrying a card's joint launch configuration to a kernel it was not lifted from.

A launch-parameter step (a tile size, the warps, the pipeline depth, an autotune list) pays
only together with the rest of the configuration it ran with: a 128x256 tile with 4 warps and
2 stages is slower than the 32x32 tile it replaced, with 8 warps and 3 stages it is 5x faster.
So a card of such a pass carries the configuration of its evidence's kernel by role
(`carrier["config"]`, see `passes.triton.roles`), and materializing it on a target proposes that
configuration *and a small sweep around it* (each block dimension halved, half and twice
the warps, one pipeline stage more and fewer: `SWEEP_POINTS` configurations at most) as the
target kernel's `@triton.autotune` list. The autotuner picks among them on the target's own
shapes; the gate times the result like any candidate.

The recorded configuration is matched to the target's kernels by structure (both reduce with
a dot in a loop, or neither; the roles they share), never by kernel or parameter names. A
target that sizes several roles with one constexpr (one `BLOCK` for the accumulator's rows, its
columns and the reduction step) is untied first when the sweep gives those roles different
values (`passes.triton.untie`), so that the recorded 128x256x64 tile can be expressed on it.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence, Set
from typing import TYPE_CHECKING, Any

from passes.triton.roles import (
    DOT_ROLES,
    KernelConfig,
    Param,
    SweepRefusal,
    constexpr_globals_lifted,
    joint_config,
    sweep_edit,
)

if TYPE_CHECKING:
    from kir import KernelIR
    from passes.base import Site

# Passes whose steps change launch parameters: their cards carry a joint configuration.
LAUNCH_PASSES = frozenset({"tile-sizes", "num-warps", "software-pipelining", "autotune"})
# Configurations in one proposed sweep (the recorded one first).
SWEEP_POINTS = 8
# The smallest block a sweep proposes for a dot operand (tl.dot needs 16).
MIN_DOT_BLOCK = 16
# The reduction step a sweep also proposes when the recorded one is narrower: a row of 64
# 16-bit elements is 128 bytes, the widest shared-memory swizzle of the tensor-core loads. The
# recorded step fitted its lineage's reduction (a convolution's channel block of 16); a target's
# reduction may be long (leave-one-out gemm kept k=16 in every configuration, 0.53 of its expert).
WIDE_K = 64
# The largest output tile (accumulator elements) and warp count a sweep proposes by doubling a
# recorded tile, for a problem larger than the one it was recorded on (leave-one-out gemm,
# 4096^3, got conv2d's 64x128 tile, 128 being all of that convolution's output channels):
# 128x256 fp32 accumulators are 128 registers per thread at 8 warps, of the 255 a thread has.
MAX_ACC_ELEMENTS = 128 * 256
MAX_WARPS = 8
# The fp32 accumulator elements a thread may hold in a swept configuration: a dot kernel's
# output tile gets at least the warps that keep it there (`warps_cover`). 128 is a 128x256 tile
# at 8 warps, or 64x128 at 2: the largest share of the usual matmul configurations. A card that
# records only a reduction step with one warp (a triangular solve's k=32) fits a matmul by that
# step, and its sweep would give the matmul's 128x256 tile one warp: 1024 a thread, which ptxas
# spilled for minutes, the rest of a run's box. At 256 a thread (128x256 at 4 warps, 32x256 at
# 1) the kernels compiled but spilled: mm1024 ran 0.1014 ms against 0.0123 at its pick
# (h100x4-b1cf421), 0.0415 against 0.0140 (h100-795cf0c).
ACC_PER_THREAD = 128
MOST_WARPS = 16
# A kernel whose first run (compilation included) takes this long is compiled at no fewer than
# half its warps by an own sweep (`sweep_own`).
HEAVY_FIRST_RUN_S = 10.0


def recorded_configs(
    carrier: Mapping[str, Any],
) -> list[tuple[Mapping[str, Any], Mapping[str, Any] | None]]:
    """(configuration of the lineage's expert kernel, configuration the card's evidence ran
    with) per recorded kernel; the expert's where both exist, those with tiles first."""
    own = dict(carrier.get("config") or {})
    expert = dict(carrier.get("expert_config") or {})
    pairs = [(expert.get(k) or own[k], own.get(k) if expert.get(k) else None) for k in own]
    pairs += [(cfg, None) for k, cfg in expert.items() if k not in own]
    return sorted(pairs, key=lambda p: (not p[0].get("tiles"), not p[0].get("dot")))


def _role_config(config: Mapping[str, Any]) -> dict[str, int]:
    tiles = {k: int(v) for k, v in (config.get("tiles") or {}).items() if v}
    return {
        **tiles,
        "num_warps": int(config.get("num_warps") or 4),
        "num_stages": int(config.get("num_stages") or 3),
    }


def sweep_around(
    config: Mapping[str, Any], points: int = SWEEP_POINTS, also: Mapping[str, Any] | None = None,
    roles: Set[str] = frozenset(),
) -> list[dict[str, int]]:
    """The recorded configuration and its neighbours, role-keyed, in this order: `also` (the
    configuration the card's own step ran with); one stage more (a deeper pipeline); the output
    tile transposed (m and n swapped, one stage more: a problem of another aspect); the tile
    halved in m and n with half the warps and one stage more (twice as many programs, for a
    problem too small to fill the GPU with the recorded tile); the tile doubled in m and n with
    twice the warps and a reduction step of at least `WIDE_K` (a problem larger than the
    recorded one; accumulators up to `MAX_ACC_ELEMENTS`); a reduction step narrower than
    `WIDE_K` widened to it (or proposed at it where the target has a reduction step, one of
    `roles`, and the recorded configuration none: the target's own step stays in the others);
    then each block halved (dot blocks not below 16), half and twice the warps, one stage
    fewer."""
    tiles = {k: int(v) for k, v in (config.get("tiles") or {}).items() if v}
    warps = int(config.get("num_warps") or 4)
    stages = int(config.get("num_stages") or 3)
    base = {**tiles, "num_warps": warps, "num_stages": stages}
    deeper = {**base, "num_stages": stages + 1}
    out = [base] + ([_role_config(also)] if also else []) + [deeper]
    if "m" in tiles and "n" in tiles and tiles["m"] != tiles["n"]:
        out.append({**deeper, "m": tiles["n"], "n": tiles["m"]})
    if all(tiles.get(r, 0) // 2 >= MIN_DOT_BLOCK for r in ("m", "n")):
        out.append({**deeper, "m": tiles["m"] // 2, "n": tiles["n"] // 2,
                    "num_warps": max(1, warps // 2)})
    narrow_k = 0 < tiles.get("k", 0) < WIDE_K or ("k" in roles and "k" not in tiles)
    if tiles.get("m", 0) > 0 and tiles.get("n", 0) > 0 \
            and 4 * tiles["m"] * tiles["n"] <= MAX_ACC_ELEMENTS:
        out.append({**base, "m": tiles["m"] * 2, "n": tiles["n"] * 2,
                    "num_warps": min(MAX_WARPS, warps * 2), **({"k": WIDE_K} if narrow_k else {})})
    if narrow_k:
        out.append({**base, "k": WIDE_K})
    for role in ("m", "n", "k", "grid", "loop", "vec"):
        if role in tiles and tiles[role] // 2 >= (MIN_DOT_BLOCK if role in DOT_ROLES else 1):
            out.append({**base, role: tiles[role] // 2})
    out.append({**base, "num_warps": max(1, warps // 2)})
    out.append({**base, "num_warps": min(32, warps * 2)})
    if stages > 1:
        out.append({**base, "num_stages": stages - 1})
    return first_unique(out, points)


def warps_cover(configs: Sequence[dict[str, int]], target: KernelConfig) -> list[dict[str, int]]:
    """`configs` with each dot kernel's output tile (its m x n, the target's own value where a
    configuration leaves one out) given at least the warps that hold its fp32 accumulator
    within `ACC_PER_THREAD` registers a thread; a configuration that would need more than
    `MOST_WARPS` is left out. Kernels without a dot are returned as they are."""
    if not target.dot:
        return list(configs)
    own = target.by_role()
    out: list[dict[str, int]] = []
    for cfg in configs:
        m, n = cfg.get("m", own.get("m", 0)), cfg.get("n", own.get("n", 0))
        need = 1
        while need * 32 * ACC_PER_THREAD < m * n:
            need *= 2
        if need > MOST_WARPS:
            continue
        warps = int(cfg.get("num_warps", target.num_warps))
        out.append({**cfg, "num_warps": need} if warps < need else dict(cfg))
    return first_unique(out, len(out))


def element_bytes(dtype: Any) -> int | None:
    """Bytes of one element of a case's `dtype` fact ("fp32", "bf16", "float16", "fp8e4m3",
    a torch dtype's text...), or None where the text names no width it knows."""
    text = str(dtype or "").lower().replace("torch.", "")
    bits = re.search(r"\d+", text)
    if bits and int(bits.group()) in (8, 16, 32, 64):
        return int(bits.group()) // 8
    return {"half": 2, "float": 4, "double": 8}.get(text)


def shared_limit() -> int:
    """The shared memory an sm_90 block may have (`gate.target`, 227 KB)."""
    from gate.target import STATIC_TARGET  # noqa: PLC0415 — pure data, no torch

    return STATIC_TARGET.shared_memory_per_block_optin


def operand_bytes(m: int, n: int, k: int, stages: int, elem_bytes: int) -> int:
    """Shared memory of a dot loop's pipelined operand tiles: `stages` x (m x k + k x n)
    elements of `elem_bytes`."""
    return max(stages, 1) * (m * k + k * n) * elem_bytes


# The pipeline depth a fitted dot configuration keeps while its reduction step can narrow
# (a two-stage ring leaves each step's copy exposed).
KEEP_STAGES = 3


def shared_fit(configs: Sequence[dict[str, int]], target: KernelConfig,
               elem_bytes: int | None) -> list[dict[str, int]]:
    """`configs` of a dot kernel whose operand tiles, pipelined, need more shared memory than
    an sm_90 block may have (`operand_bytes`) with a narrower reduction step (to the row bytes
    of the 16-bit step it was recorded with), fewer stages (not below `KEEP_STAGES`), a still
    narrower step (not below 16), fewer stages (not below 2); one that still does not fit is
    left out. Recorded
    configurations are 16-bit ones: on fp32 operands a 128x256x64 tile at 3 stages needs
    288 KB, and half of a sweep's points could not compile (the device autotuner skips them;
    the static tier flags them). Kernels without a dot, configurations without the three
    roles, and an unknown element width are returned as they are."""
    if not target.dot or not elem_bytes:
        return list(configs)
    limit = shared_limit()
    own = target.by_role()
    out: list[dict[str, int]] = []
    for cfg in configs:
        m, n, k = (int(cfg.get(r, own.get(r, 0))) for r in ("m", "n", "k"))
        stages = int(cfg.get("num_stages", target.num_stages))
        if not (m and n and k):
            out.append(dict(cfg))
            continue
        def over(step: int, depth: int) -> bool:
            return operand_bytes(m, n, step, depth, elem_bytes) > limit

        # First the reduction step's rows back to the bytes a 16-bit step of `k` has (the
        # widest swizzle the recorded step was chosen for), then the pipeline down to
        # `KEEP_STAGES`, a narrower step, and two stages at the least.
        fitted, narrow = stages, k
        while over(narrow, fitted) and narrow * elem_bytes > 2 * k and narrow // 2 >= MIN_DOT_BLOCK:
            narrow //= 2
        while fitted > min(stages, KEEP_STAGES) and over(narrow, fitted):
            fitted -= 1
        while over(narrow, fitted) and narrow // 2 >= MIN_DOT_BLOCK:
            narrow //= 2
        while fitted > 2 and over(narrow, fitted):
            fitted -= 1
        if over(narrow, fitted):
            continue
        out.append({**cfg, **({"num_stages": fitted} if fitted != stages else {}),
                    **({"k": narrow} if narrow != k else {})})
    return first_unique(out, len(out))


def entries_over_shared(ir: KernelIR, elem_bytes: int | None) -> dict[str, int]:
    """The autotune entries (`triton.Config(...)` text -> bytes) of the dot kernels of `ir`
    whose operand tiles need more shared memory than a block may have at `elem_bytes`
    (`operand_bytes`); {} where the width is unknown. A single tile, warp or stage step on an
    entry is checked with it (`lineage.optimize.materializations`): a 256x256x64 entry at 2
    stages on fp32 operands cannot compile, and the autotuner would only skip it."""
    if not elem_bytes or str(getattr(ir.language, "value", ir.language)) != "triton":
        return {}
    from passes.triton._py import PyModule, literal_int  # noqa: PLC0415
    from passes.triton.roles import autotune_entries  # noqa: PLC0415

    limit = shared_limit()
    mod = PyModule(ir)
    configs = joint_config(ir)
    over: dict[str, int] = {}
    for kernel in mod.kernels():
        target = configs.get(kernel.name)
        if target is None or not target.dot:
            continue
        role_of = {p.name: p.role for p in target.params}
        own = target.by_role()
        for entry in autotune_entries(mod, kernel):
            values = {role_of.get(str(getattr(key, "value", ""))): literal_int(value)
                      for key, value in zip(entry.args[0].keys, entry.args[0].values)}
            stages = next((literal_int(kw.value) for kw in entry.keywords
                           if kw.arg == "num_stages"), None) or target.num_stages
            m, n, k = (values.get(r) or own.get(r, 0) for r in ("m", "n", "k"))
            if m and n and k:
                need = operand_bytes(m, n, k, stages, elem_bytes)
                if need > limit:
                    over[mod.text(entry)] = need
    return over


def first_unique(configs: Sequence[dict[str, int]], points: int) -> list[dict[str, int]]:
    """The first `points` distinct configurations, in order."""
    unique: list[dict[str, int]] = []
    for cfg in configs:
        if cfg not in unique:
            unique.append(cfg)
    return unique[:points]


def sweep_own(
    target: KernelConfig, points: int = SWEEP_POINTS, heavy: bool = False
) -> list[dict[str, int]]:
    """A sweep around the target's own configuration, for a launch card whose recorded
    configuration does not fit the target's structure: what the card carries over is that its
    parameters paid to tune, not its values. In this order: the target's configuration; twice
    and half the warps; each block doubled and halved (dot blocks not below 16); every block
    doubled with twice the warps, then quadrupled with four times the warps (a larger block
    pays only with the warps to cover it; an author's block may be far below what the problem
    wants: a 128-wide chunk over 4096-wide rows); one pipeline stage more and fewer; four
    times and a quarter of the warps. A dot kernel's stage steps come right after its own
    configuration (one more) and its warp steps (one fewer), before the blocks. Dot kernels' joint steps keep accumulators within
    `MAX_ACC_ELEMENTS` and warps within `MAX_WARPS`. Pipeline stages are stepped only for a
    kernel with a loop they pipeline (`KernelConfig.pipelined`: each value is otherwise the
    same code compiled again). A `heavy` kernel (its first run, compilation included, took
    `HEAVY_FIRST_RUN_S` or more) is not given a quarter of its warps: each thread's share of
    its blocks, and the code ptxas compiles for it, grows as the warps shrink (a radix select
    compiled in 28 s at 4 warps, 54 s at 2 and 176 s at 1, and the one-warp point of a sweep
    spent a run's box), while a light row kernel may want them (a 2048-wide layer norm was
    fastest at a quarter of its 8 warps)."""
    tiles = target.by_role()
    warps, stages = target.num_warps, target.num_stages
    base = {**tiles, "num_warps": warps, "num_stages": stages}
    deeper = [{**base, "num_stages": stages + 1}] if target.pipelined else []
    shallower = [{**base, "num_stages": stages - 1}] if target.pipelined and stages > 1 else []
    # A dot loop's pipeline depth pays as often as its tile (a 1024-cube product wanted 64x128
    # at 5 stages, not 4): its steps come first, not after the tiles' where a sweep's points
    # ran out before them.
    early = deeper if target.dot else []
    out = [base, *early, {**base, "num_warps": min(32, warps * 2)},
           {**base, "num_warps": max(1, warps // 2)}, *(shallower if target.dot else [])]
    for role, value in tiles.items():
        out.append({**base, role: value * 2})
        if value // 2 >= (MIN_DOT_BLOCK if role in DOT_ROLES else 1):
            out.append({**base, role: value // 2})
    for scale in (2, 4):
        grown = {role: value * scale for role, value in tiles.items()}
        most = MAX_WARPS if target.dot else MOST_WARPS
        if not grown or target.dot and grown.get("m", 1) * grown.get("n", 1) > MAX_ACC_ELEMENTS:
            break
        out.append({**base, **grown, "num_warps": min(most, warps * scale)})
    if not target.dot:
        out += deeper + shallower
    out.append({**base, "num_warps": min(32, warps * 4)})
    if not heavy:
        out.append({**base, "num_warps": max(1, warps // 4)})
    return first_unique(out, points)


def fit(recorded: Mapping[str, Any], target: KernelConfig) -> int:
    """How well a recorded configuration fits a target kernel: 0 when their structure differs
    (a dot in a loop or not) or they share no tunable role; else the number of roles they share
    (1 for two kernels launched with warps alone). A sweep carries what the recorded
    configuration says about the roles it shares: a 32-wide reduction step recorded on a
    kernel with no output tile says nothing about a matmul's 128x256 tile."""
    if bool(recorded.get("dot")) != target.dot:
        return 0
    rec_roles = set((recorded.get("tiles") or {}))
    tgt_roles = set(target.by_role())
    if not rec_roles and not tgt_roles:
        return 1
    return len(rec_roles & tgt_roles)


def matches(recorded: Mapping[str, Any], target: KernelConfig) -> bool:
    """A recorded configuration fits a target kernel (`fit` above 0)."""
    return fit(recorded, target) > 0


def best_fit(
    recorded: Sequence[tuple[Mapping[str, Any], Mapping[str, Any] | None]], target: KernelConfig
) -> tuple[int, tuple[Mapping[str, Any], Mapping[str, Any] | None] | None]:
    """The recorded (configuration, own step's configuration) pair that fits `target` best,
    with its `fit` (the first of equal fits; (0, None) when none fits)."""
    scored = [(fit(pair[0], target), -i, pair) for i, pair in enumerate(recorded)]
    score, _, pair = max(scored, key=lambda x: x[:2], default=(0, 0, None))
    return (score, pair) if score > 0 else (0, None)


def carrier_fit(carrier: Mapping[str, Any], ir: KernelIR) -> int:
    """The best `fit` of a card's recorded configurations on any kernel of `ir` (0: none fits,
    or the card records none)."""
    recorded = recorded_configs(carrier)
    if not recorded:
        return 0
    return max((best_fit(recorded, t)[0] for t in joint_config(ir).values()), default=0)


def picked(target: KernelConfig, pick: Mapping[str, int] | None) -> KernelConfig:
    """`target` as its autotuner picked it on the device (`pick`: constexpr name -> value,
    num_warps, num_stages; `gate.verdict.Timing.picks`): an autotuned kernel's own
    configuration is the one it runs, not the first of its list. `target` where no pick names
    its parameters."""
    if not pick:
        return target
    params = tuple(Param(p.name, p.role, int(pick[p.name])) if p.name in pick and p.value is not None
                   and int(pick[p.name]) > 0 else p for p in target.params)
    warps = int(pick.get("num_warps", target.num_warps) or target.num_warps)
    stages = int(pick.get("num_stages", target.num_stages) or target.num_stages)
    return dataclasses.replace(target, params=params, num_warps=warps, num_stages=stages)


def config_candidates(
    carrier: Mapping[str, Any], ir: KernelIR, skip_kernel: Any = None, own: bool = False,
    heavy: bool = False, picks: Mapping[str, Mapping[str, int]] | None = None,
    every: bool = False, elem_bytes: int | None = None, points: int = SWEEP_POINTS,
) -> list[tuple[str, KernelIR, list[dict[str, int]]]]:
    """(kernel name, rewritten IR, fitted configs) for each target kernel a recorded
    configuration fits, with a sweep around that configuration; with `own`, for each target
    kernel none fits, with a sweep around the kernel's own configuration (`sweep_own`), the
    one its autotuner picked where `picks` names it (`picked`); with `every` too, also on the
    kernels a recorded configuration fits (after their recorded sweep: another hypothesis).
    Kernels the sweep is refused on (`sweep_edit`) are left out, as are those
    `skip_kernel(name)` names. `heavy`: see `sweep_own`. `elem_bytes` (the case's element
    width, where known): dot kernels' configurations are fitted to shared memory (`shared_fit`).
    `points`: the configurations of an own sweep (its first ones, `sweep_own`)."""
    from kir import Edit, Span  # noqa: PLC0415
    from kir.errors import KLineageError  # noqa: PLC0415

    recorded = recorded_configs(carrier)
    if not recorded and not (own and every):  # a sweep of every kernel's own needs no record
        return []
    ir = constexpr_globals_lifted(ir) or ir  # module-level constexpr tiles as parameters
    out: list[tuple[str, KernelIR, list[dict[str, int]]]] = []
    for name, target in joint_config(ir).items():
        if skip_kernel is not None and skip_kernel(name):
            continue
        _, pair = best_fit(recorded, target)
        if own and every:
            pair = None
        elif (pair is None) != own:
            continue
        running = picked(target, (picks or {}).get(name))
        if pair is not None:
            # a role the recorded configuration does not set stays as the kernel runs it: its
            # autotuner's pick, not the first entry of its list (mm1024's list began 128x256
            # and its pick was 64x128: a card that records only k and one warp swept 128x256
            # tiles at 4 warps, 8x slower than the pick)
            configs = [{**running.by_role(), **cfg}
                       for cfg in sweep_around(pair[0], also=pair[1], roles=set(target.by_role()))]
        else:
            configs = sweep_own(running, points=points, heavy=heavy)
        configs = shared_fit(warps_cover(configs, running), running, elem_bytes)
        if not configs:
            continue
        work = untied_for(ir, name, configs)
        made = sweep_edit(work, name, configs)
        if isinstance(made, SweepRefusal):
            continue
        edits, fitted = made
        try:
            new_ir = work.apply(Edit(Span(e.start, e.end), e.text) for e in edits)
        except KLineageError:
            continue
        out.append((name, new_ir, fitted))
    return out


def untied_for(ir: KernelIR, kernel: str, configs: Sequence[Mapping[str, int]]) -> KernelIR:
    """`ir` with the constexprs of `kernel` that serve several roles split per role
    (`passes.triton.untie`) when some configuration of `configs` gives those roles different
    values (one `BLOCK` for m, n and k cannot take 128x256x64); `ir` itself when none does or
    the untie is refused."""
    from kir import Edit, Span  # noqa: PLC0415
    from kir.errors import KLineageError  # noqa: PLC0415
    from passes.triton.untie import needs_untie, tied_tiles, untie_edit  # noqa: PLC0415

    ties = tied_tiles(ir, kernel)
    if not ties or not needs_untie(ties, configs):
        return ir
    made = untie_edit(ir, kernel, list(ties))
    if isinstance(made, SweepRefusal):
        return ir
    try:
        return ir.apply(Edit(Span(e.start, e.end), e.text) for e in made.edits)
    except KLineageError:
        return ir


def kernel_site(pass_name: str, ir: KernelIR, kernel: str) -> Site | None:
    """A site on the definition of `kernel` (what a config sweep acts on)."""
    import ast  # noqa: PLC0415

    from passes._source import make_site  # noqa: PLC0415
    from passes.triton._py import PyModule  # noqa: PLC0415

    mod = PyModule(ir)
    node = next((k for k in mod.kernels() if k.name == kernel), None)
    if not isinstance(node, ast.FunctionDef):
        return None
    span = mod.span(node)
    return make_site(
        pass_name, ir, None, (0, len(ir.source)), False, {"kernel": kernel, "sweep": True}, span
    )


def sweep_summary(fitted: Sequence[Mapping[str, int]]) -> str:
    return "; ".join(",".join(f"{k}={v}" for k, v in cfg.items()) for cfg in fitted)
