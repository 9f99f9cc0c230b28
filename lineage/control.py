"""The no-library control: a kernel under the plain autotune sweep a Triton user writes by hand.

`autotune_control(source)` gives each launched kernel of a module an `@triton.autotune` list of
generic configurations over its tunable launch parameters, found by role
(`passes.triton.roles`): for a kernel that reduces with `tl.dot` in a loop, the familiar list of
(M, N, K) tiles with their warps and stages (for a loop of two chained products over a fixed
output width, attention's, the query tiles and key steps an attention kernel is written with);
for any other kernel, its block sizes at 1x, 2x and 4x with 2 to 16 warps; the loop step of a
kernel whose only tile it is (a row walked in 1-D chunks) from at least `HOST_LOOP_STEP`, also
where the host computes it from the problem (or warps alone when no block size is a literal or
a loop step). A configuration whose blocks Triton would refuse to compile (more than 2**20
elements, such as the 3-D product of an attention without `tl.dot` at 4x tiles:
`passes.triton.tensor_sizes`) is left out. No lineage or card is consulted: it is what a user
would do without KLineage, and what the library has to beat.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from kir import parse
from kir.errors import BadInputError
from passes._source import ByteEdit
from lineage.transfer import first_unique
from passes.triton._py import PyModule
from passes.triton.roles import (
    KernelConfig,
    SweepRefusal,
    constexpr_globals_lifted,
    joint_config,
    sweep_edit,
    unlaunched,
)
from passes.triton.tensor_sizes import compiles_like_written

# (m, n, k, warps, stages): the tile list commonly written for a tiled tl.dot kernel on NVIDIA GPUs,
# and two entries a Hopper list adds for the problems it misses:
# - 64x128 with a 64-wide K step at 5 stages: a problem too small to fill the GPU with 128x128
#   tiles (128-byte rows of 16-bit operands, the widest swizzle);
# - a 16-row tile with a 128-deep K step at 5 stages: a product whose rows fit one tile (a
#   matrix-vector-like product, memory-bound on the other operand). Its speed is bytes in
#   flight: a deep step, many stages and many programs along N. On an H200 (A/B at f21d2d4,
#   M=8 N=8192 K=4096 bf16) it ran 0.0261 ms against cuBLAS's 0.0267; the list without it
#   picked 32x64x32 at 0.0391.
DOT_CONFIGS: tuple[tuple[int, int, int, int, int], ...] = (
    (128, 256, 64, 8, 3),
    (64, 256, 32, 4, 4),
    (128, 128, 32, 4, 4),
    (128, 64, 32, 4, 4),
    (64, 128, 32, 4, 4),
    (128, 32, 32, 4, 4),
    (64, 32, 32, 2, 5),
    (32, 64, 32, 2, 5),
    (64, 128, 64, 4, 5),
    (16, 64, 128, 4, 5),
)
# (m, step, warps, stages): the tile list commonly written for a loop of two chained products
# whose output width is the problem's (attention: S = Q K^T, then P V, over a fixed head
# dimension): ten entries of the grid Triton's fused-attention tutorial sweeps on Hopper (query
# tiles of 64 or 128 rows, key steps of 32 to 128, 4 warps, 8 at 128 x 128, 2 to 4 stages),
# none of them 128 x 128 at 4 warps (registers spilled at a head dimension of 128) or at 4
# stages (more shared memory than a block has there). DOT_CONFIGS does not fit such a loop:
# with no column tile to set, it collapses to its (m, k) pairs, and its K column is a
# reduction depth (32 or 64) where this step is also the first product's column count (the
# fmha expert runs 128 x 128 at 8 warps, a pair that list never writes).
CHAINED_DOT_CONFIGS: tuple[tuple[int, int, int, int], ...] = (
    (128, 128, 8, 3),
    (128, 64, 4, 3),
    (64, 64, 4, 3),
    (64, 64, 4, 4),
    (128, 128, 8, 2),
    (128, 64, 4, 4),
    (64, 128, 4, 3),
    (128, 32, 4, 4),
    (64, 32, 4, 4),
    (64, 64, 4, 2),
)
# The most configurations a generic list holds (the control's and the plain sweep's alike).
MAX_CONFIGS = 12
# (block scale, warps) for kernels without a dot loop.
BLOCK_CONFIGS: tuple[tuple[int, int], ...] = (
    (1, 4),
    (1, 8),
    (2, 4),
    (2, 8),
    (4, 8),
    (1, 2),
    (4, 16),
    (2, 16),
)
WARP_CONFIGS: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
# The loop step of a kernel whose only tile it is (a row walked in 1-D chunks), at scale 1 of
# BLOCK_CONFIGS when the host computes it or it was written smaller: the chunk a row kernel
# commonly walks its row in, in elements.
HOST_LOOP_STEP = 1024


def generic_configs(config: KernelConfig, max_configs: int = MAX_CONFIGS) -> list[dict[str, int]]:
    """Role-keyed generic configurations for one kernel (see the module docstring)."""
    tiles = config.by_role()
    # a row walked in 1-D chunks: any step walks the same masked range (`sweep_edit` keeps an
    # unmasked one at divisors of its own), so the list reaches the common chunks
    chunks = set(tiles) <= {"loop"} and any(p.role == "loop" for p in config.params)
    out: list[dict[str, int]] = []
    if config.dot and config.chained and "k" in tiles and "n" not in tiles:
        for m, step, w, s in CHAINED_DOT_CONFIGS:
            cfg = {role: v for role, v in (("m", m), ("k", step)) if role in tiles}
            out.append({**cfg, "num_warps": w, "num_stages": s})
    elif config.dot and {"m", "n", "k"} & set(tiles):
        for m, n, k, w, s in DOT_CONFIGS:
            cfg = {role: v for role, v in (("m", m), ("n", n), ("k", k)) if role in tiles}
            if "group" in tiles:
                cfg["group"] = 8
            out.append({**cfg, "num_warps": w, "num_stages": s})
    elif any(r in tiles for r in ("grid", "vec", "loop")) or chunks:
        for scale, w in BLOCK_CONFIGS:
            cfg = {r: v * scale for r, v in tiles.items() if r in ("grid", "vec", "loop")}
            if chunks:
                cfg["loop"] = max(tiles.get("loop", 0), HOST_LOOP_STEP) * scale
            out.append({**cfg, "num_warps": w, "num_stages": config.num_stages})
    else:
        out = [{"num_warps": w, "num_stages": config.num_stages} for w in WARP_CONFIGS]
    return first_unique(out, max_configs)


def autotune_control(source: str, max_configs: int = MAX_CONFIGS, keep: Collection[str] = ()) -> str:
    """`source` with every launched kernel autotuned over a generic list, except the kernels
    named in `keep` (their own list, or their launch's values, stay). Kernels whose launch
    cannot take tuned parameters (see `passes.triton.roles.sweep_edit`) are left as they are;
    a module where no kernel can be tuned raises `BadInputError` with the reasons."""
    ir = parse(source, "triton")
    ir = constexpr_globals_lifted(ir) or ir  # module-level constexpr tiles as parameters
    tuned = False
    reasons: list[str] = []
    for name in [n for n in joint_config(ir) if n not in keep]:
        mod = PyModule(ir)
        kernel = next(k for k in mod.kernels() if k.name == name)
        # no configuration whose blocks Triton refuses to compile (`passes.triton.tensor_sizes`)
        configs = generic_configs(joint_config(ir)[name], max_configs)
        made = sweep_edit(ir, name, configs, fits=compiles_like_written(mod, kernel))
        if isinstance(made, SweepRefusal):
            if made.reason != "the kernel is never launched in this module":
                reasons.append(f"{name}: {made.reason}")
            continue
        ir = parse(apply_byte_edits(ir.unparse(), made[0]), "triton")  # one kernel at a time
        tuned = True
    if not tuned:
        raise BadInputError(
            "no kernel could be autotuned: "
            + ("; ".join(reasons) or "; ".join(unlaunched(ir)) or "no launches")
        )
    return ir.unparse()


def apply_byte_edits(source: str, edits: Sequence[ByteEdit]) -> str:
    """`source` with `edits` (byte spans, non-overlapping) applied (`kir.ir.apply_edits`)."""
    from kir import Edit, Span  # noqa: PLC0415
    from kir.ir import apply_edits  # noqa: PLC0415

    return apply_edits(
        source.encode("utf-8"), [Edit(Span(e.start, e.end), e.text) for e in edits]
    ).decode("utf-8")


def describe(source: str) -> Mapping[str, Any]:
    """Every kernel's configuration by role (for reports)."""
    return {k: c.to_json() for k, c in joint_config(parse(source, "triton")).items()}
