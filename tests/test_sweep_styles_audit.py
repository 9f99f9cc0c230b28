"""The sweep's launch-grid rewrite on grids written the ways users write a block count: rounded
up by hand (`(M + 31) // 32`, `(M + 32 - 1) // 32`, `math.ceil(N / 64)`), floored (`n // 256`
on sizes the author made multiples of the tile), or computed by a helper. Each configuration
of the list must launch exactly the programs that cover the output: fewer leave rows
unwritten, more run programs that write nothing."""
from __future__ import annotations

import ast
import math
from pathlib import Path

import kir
import pytest

from lineage.control import autotune_control, generic_configs
from lineage.transfer import config_candidates
from passes.triton.roles import joint_config, sweep_edit


def _configs(text: str) -> list[dict[str, int]]:
    """The meta-parameters of each `triton.Config` of the module's autotune list."""
    return [ast.literal_eval(node.args[0]) for node in ast.walk(ast.parse(text))
            if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("Config")]


def _grid(text: str, kernel: str) -> str:
    """The grid text of the module's launch of `kernel` (a name's binding followed once; a
    `def grid(meta)` of one return as a lambda)."""
    tree = ast.parse(text)
    site = next(n for n in ast.walk(tree) if isinstance(n, ast.Subscript)
                and ast.unparse(n.value) == kernel)
    if isinstance(site.slice, ast.Name):
        return next(ast.unparse(n.value) if isinstance(n, ast.Assign) else
                    f"lambda {n.args.args[0].arg}: {ast.unparse(n.body[-1].value)}"
                    for n in ast.walk(tree)
                    if isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == site.slice.id
                    or isinstance(n, ast.FunctionDef) and n.name == site.slice.id)
    return ast.unparse(site.slice)


def _counts(text: str, kernel: str, sizes: dict[str, int]) -> list[tuple[dict[str, int], tuple]]:
    """(configuration, program counts) of each configuration at `sizes`."""
    import triton  # noqa: PLC0415

    grid = eval(_grid(text, kernel), {"triton": triton, "math": math, **sizes})  # noqa: S307
    return [(cfg, tuple(grid(cfg))) for cfg in _configs(text)]


ROUNDED = '''import torch
import triton
import triton.language as tl


@triton.jit
def axpy2d(x_ptr, y_ptr, o_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    msk = (rm[:, None] < M) & (rn[None, :] < N)
    x = tl.load(x_ptr + rm[:, None] * N + rn[None, :], mask=msk)
    y = tl.load(y_ptr + rm[:, None] * N + rn[None, :], mask=msk)
    tl.store(o_ptr + rm[:, None] * N + rn[None, :], 2.0 * x + y, mask=msk)


def run(x, y):
    M, N = x.shape
    o = torch.empty_like(x)
    axpy2d[((M + 31) // 32, (N + 63) // 64)](x, y, o, M, N, BM=32, BN=64)
    return o
'''

PROBLEM = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        return 2.0 * x + y


def get_inputs():
    return [torch.randn(97, 150), torch.randn(97, 150)]


def get_init_inputs():
    return []
'''


def test_a_count_rounded_up_with_the_tiles_value_less_one_follows_the_tile(tmp_path: Path) -> None:
    import gate

    out = autotune_control(ROUNDED)
    # `(M + 31) // meta["BM"]` would launch too few programs at BM=128 (rows never written)
    # and programs that write nothing at BM=16
    counts = _counts(out, "axpy2d", {"M": 97, "N": 150})
    assert {c["BM"] for c, _ in counts} - {32}, counts
    for cfg, grid in counts:
        assert grid == (math.ceil(97 / cfg["BM"]), math.ceil(150 / cfg["BN"])), (cfg, grid)
    problem = tmp_path / "axpy2d.py"
    problem.write_text(PROBLEM)
    control = tmp_path / "control.py"
    control.write_text(out)
    verdict = gate.check_file(control, gate.load_case(problem), "interpret", cache=False)
    assert verdict.ok, verdict.reason


MM = '''import math

import torch
import triton
import triton.language as tl


@triton.jit
def mm_k(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    om = tl.program_id(0) * BM + tl.arange(0, BM)
    on = tl.program_id(1) * BN + tl.arange(0, BN)
    ok = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + om[:, None] * K + (k + ok)[None, :], mask=(om[:, None] < M) & ((k + ok)[None, :] < K), other=0.0)
        b = tl.load(b_ptr + (k + ok)[:, None] * N + on[None, :], mask=((k + ok)[:, None] < K) & (on[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    tl.store(c_ptr + om[:, None] * N + on[None, :], acc, mask=(om[:, None] < M) & (on[None, :] < N))


def run(a, b):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=torch.float32)
    grid = GRID
    mm_k[grid](a, b, c, M, N, K, BM=32, BN=64, BK=16)
    return c
'''


@pytest.mark.parametrize("count", ["(M + 32 - 1) // 32", "(M + 15 + 16) // 32"])
def test_counts_rounded_up_by_a_sum_or_by_ceil_follow_the_tiles(count: str) -> None:
    # neither was rewritten before: the tiles were swept under the written counts; `(M + 15 +
    # 16) // 32` is ceil(M / 32) too, but was held as rounded by constants not tied to BM
    src = MM.replace("GRID", f"({count}, math.ceil(N / 64))")
    for text in [autotune_control(src)] + [
            ir.unparse() for _, ir, _ in config_candidates({}, kir.parse(src, "triton"),
                                                           own=True, every=True)]:
        counts = _counts(text, "mm_k", {"M": 70, "N": 90})
        assert any(c["BM"] != 32 or c["BN"] != 64 for c, _ in counts), counts
        for cfg, grid in counts:
            assert grid == (math.ceil(70 / cfg["BM"]), math.ceil(90 / cfg["BN"])), (cfg, grid)


@pytest.mark.parametrize("count", ["(M + 32) // 32"])
def test_a_count_rounded_by_constants_not_tied_to_the_tile_holds_the_tile(count: str) -> None:
    # `(M + 32) // meta["BM"]` is no count of BM's blocks once BM is not 32: BM keeps its 32
    # (the written count is right there) and the rest is swept around it
    src = MM.replace("GRID", f"({count}, triton.cdiv(N, 64))")
    made = sweep_edit(kir.parse(src, "triton"), "mm_k",
                      generic_configs(joint_config(kir.parse(src, "triton"))["mm_k"]))
    assert not hasattr(made, "reason"), made
    assert all("BM" not in c for c in made[1]) and {c["BN"] for c in made[1]} - {64}, made[1]
    out = autotune_control(src)
    assert "BM=32)" in out and f"({count}, triton.cdiv(N, meta[" in out, out


UNROLLED = '''import torch
import triton
import triton.language as tl


@triton.jit
def relu_sq(x_ptr, o_ptr, n, BLOCK: tl.constexpr, UNROLL: tl.constexpr):
    base = tl.program_id(0) * BLOCK * UNROLL
    for u in tl.static_range(UNROLL):
        offs = base + u * BLOCK + tl.arange(0, BLOCK)
        r = tl.maximum(tl.load(x_ptr + offs, mask=offs < n), 0.0)
        tl.store(o_ptr + offs, r * r, mask=offs < n)


def run(x):
    o = torch.empty_like(x)
    relu_sq[(triton.cdiv(x.numel(), 256 * 4),)](x, o, x.numel(), BLOCK=256, UNROLL=4)
    return o
'''


def test_a_tile_whose_count_is_a_product_keeps_its_value_and_the_warps_are_swept() -> None:
    # `cdiv(n, 256 * 4)` counts blocks of BLOCK * UNROLL: no literal there is BLOCK's copy, so
    # BLOCK keeps its value; the kernel was refused outright before, its warps never swept
    out = autotune_control(UNROLLED)
    assert "BLOCK=256, UNROLL=4)" in out and "cdiv(x.numel(), 256 * 4)" in out, out
    configs = _configs(out)
    assert configs and all("BLOCK" not in c for c in configs), configs


def test_a_grid_a_helper_computes_keeps_the_tiles_that_scale_program_ids() -> None:
    src = MM.replace("GRID", "tiles_grid(M, N, 32, 64)").replace(
        "def run(", "def tiles_grid(m, n, bm, bn):\n    return (triton.cdiv(m, bm), "
        "triton.cdiv(n, bn))\n\n\ndef run(")
    out = autotune_control(src)
    assert "BM=32, BN=64)" in out, out  # the helper's count stays right at these tiles
    configs = _configs(out)
    assert configs and all(set(c) == {"BK"} for c in configs), configs
    assert {c["BK"] for c in configs} - {16}, configs


FLOORED = '''import torch
import triton
import triton.language as tl


@triton.jit
def silu_k(x_ptr, o_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, MASK)
    tl.store(o_ptr + offs, x * tl.sigmoid(x), MASK)


def run(x):
    o = torch.empty_like(x)
    n = x.numel()
    silu_k[(n // 256,)](x, o, n, BLOCK=256)
    return o
'''


def test_a_floored_count_is_rounded_up_where_the_tile_may_grow() -> None:
    # sizes are multiples of 256 (the author's floor is exact there), not of 1024
    out = autotune_control(FLOORED.replace("MASK", "mask=offs < n"))
    counts = _counts(out, "silu_k", {"n": 1280})
    assert max(c["BLOCK"] for c, _ in counts) > 256, counts
    for cfg, grid in counts:
        assert grid == (math.ceil(1280 / cfg["BLOCK"]),), (cfg, grid)


def test_a_floored_count_stays_floored_where_the_tile_only_shrinks() -> None:
    # no mask: the tile only shrinks to a divisor, whose whole blocks cover what 256's did
    # (rounding up would run a partial block past the end, unmasked)
    src = FLOORED.replace(", MASK", "")
    made = config_candidates({}, kir.parse(src, "triton"), own=True, every=True)
    assert made
    for _, ir, _ in made:
        text = ir.unparse()
        assert "(n // meta[\"BLOCK\"]" in text, text
        for cfg, grid in _counts(text, "silu_k", {"n": 1280}):
            assert cfg["BLOCK"] <= 256 and grid == (1280 // cfg["BLOCK"],), (cfg, grid)



def test_two_tiles_of_one_role_keep_their_ratio_in_the_generic_list() -> None:
    # both tiles count output blocks (role `grid`): the list scaled one value into both, so
    # the 32x64 tile the author wrote became 32x32, 64x64, 128x128 and never ran as written
    lists = [_configs(autotune_control(ROUNDED))] + [
        cfgs for _, _, cfgs in config_candidates({}, kir.parse(ROUNDED, "triton"), own=True,
                                                 every=True)]
    for configs in lists:
        assert {"BM": 32, "BN": 64} in [{k: c[k] for k in ("BM", "BN")} for c in configs], configs
        assert all(c["BN"] == 2 * c["BM"] for c in configs), configs
        assert len({c["BM"] for c in configs}) > 1, configs


def test_a_tile_resize_takes_the_round_up_term_along_and_refuses_a_floor() -> None:
    from passes import Applied, get_pass  # noqa: PLC0415

    def resized(src: str, tile: str) -> str | None:
        ir = kir.parse(src, "triton")
        step = get_pass("tile-sizes")()
        site = next(s for s in step.sites(ir) if not s.present and s.detail["tile"] == tile)
        made = step.optimize(ir, site)
        return made.ir.unparse() if isinstance(made, Applied) else None

    # `(M + 32 - 1) // 64` would leave the rows past the last whole 64-row block unwritten
    out = resized(MM.replace("GRID", "((M + 32 - 1) // 32, math.ceil(N / 64))"), "BM")
    assert out is not None and "grid = ((M + 64 - 1) // 64, math.ceil(N / 64))" in out, out
    out = resized(MM.replace("GRID", "((M + 32 - 1) // 32, math.ceil(N / 64))"), "BN")
    assert out is not None and "math.ceil(N / 128))" in out, out
    # a floor count cannot follow a larger tile: the resize is refused
    assert resized(MM.replace("GRID", "(M // 32, triton.cdiv(N, 64))"), "BM") is None


def _cover_in_every_list(src: str, n: int) -> None:
    """Under the control's list and the own sweep alike, `silu_k` is tuned past its written
    BLOCK of 256 and every configuration launches exactly the blocks that cover `n`."""
    for text in [autotune_control(src)] + [
            ir.unparse() for _, ir, _ in config_candidates({}, kir.parse(src, "triton"),
                                                           own=True, every=True)]:
        counts = _counts(text, "silu_k", {"n": n})
        assert max(c["BLOCK"] for c, _ in counts) > 256, counts
        for cfg, grid in counts:
            assert grid == (math.ceil(n / cfg["BLOCK"]),), (cfg, grid)


@pytest.mark.parametrize("count", ["n // 256 + (n % 256 > 0)", "n // 256 + int(n % 256 != 0)",
                                   "n // B + (n % B > 0)"])
def test_a_floor_with_its_remainder_check_counts_the_partial_block_once(count: str) -> None:
    # the remainder check is the count's round-up: the floor was rounded up beside it
    # (`(n + meta["BLOCK"] - 1) // meta["BLOCK"] + (n % 256 > 0)`), one idle program per
    # launch at every tile, the written one included
    src = FLOORED.replace("MASK", "mask=offs < n").replace("(n // 256,)", f"({count},)")
    src = src.replace("    n = x.numel()\n", "    n = x.numel()\n    B = 256\n") \
        .replace("BLOCK=256)", "BLOCK=B)") if " B " in count else src
    _cover_in_every_list(src, 1001)


def test_a_tile_resize_takes_a_remainder_check_along() -> None:
    from passes import Applied, get_pass  # noqa: PLC0415

    src = FLOORED.replace("MASK", "mask=offs < n").replace(
        "(n // 256,)](x, o, n, BLOCK=256)", "(n // 64 + (n % 64 > 0),)](x, o, n, BLOCK=64)")
    ir = kir.parse(src, "triton")
    step = get_pass("tile-sizes")()
    site = next(s for s in step.sites(ir) if not s.present and s.detail["tile"] == "BLOCK")
    made = step.optimize(ir, site)
    assert isinstance(made, Applied), made
    assert "silu_k[(n // 128 + (n % 128 > 0),)](x, o, n, BLOCK=128)" in made.ir.unparse()


FLOORED_NAME = FLOORED.replace("MASK", "mask=offs < n").replace(
    "    silu_k[(n // 256,)](x, o, n, BLOCK=256)",
    "    block = 256\n    silu_k[(n // block,)](x, o, n, BLOCK=block)")


def test_a_floor_by_the_tiles_host_name_is_rounded_up_where_the_tile_may_grow() -> None:
    # `n // block` was rewritten to `n // meta["BLOCK"]`: at BLOCK=512 the last 256 of 1280
    # elements were never written
    _cover_in_every_list(FLOORED_NAME, 1280)


def test_a_tile_resize_refuses_a_host_name_the_grid_floors_by() -> None:
    from passes import Applied, get_pass  # noqa: PLC0415

    ir = kir.parse(FLOORED_NAME.replace("block = 256", "block = 64"), "triton")
    step = get_pass("tile-sizes")()
    sites = [s for s in step.sites(ir) if s.detail["tile"] == "BLOCK"]
    assert sites
    for site in sites:  # `block = 128` under `n // block` left rows unwritten
        made = step.optimize(ir, site)
        assert not isinstance(made, Applied), made.ir.unparse()
        assert "floors" in made.reason, made.reason


@pytest.mark.parametrize("grid", ["grid = lambda META: (n // META['BLOCK'],)",
                                  "def grid(meta):\n        return (n // meta.get('BLOCK', 256),)"])
def test_a_floor_in_a_grid_of_the_meta_parameters_is_rounded_up_where_the_tile_may_grow(
        grid: str) -> None:
    src = FLOORED.replace("MASK", "mask=offs < n").replace(
        "    silu_k[(n // 256,)](x, o, n, BLOCK=256)",
        f"    {grid}\n    silu_k[grid](x, o, n, BLOCK=256)")
    _cover_in_every_list(src, 1280)
    # unmasked, the tile only shrinks to a divisor: whole blocks stay whole, the floor stays
    out = autotune_control(src.replace(", mask=offs < n", ""))
    assert "(n // meta" in out or "(n // META" in out, out


TICKET = '''import torch
import triton
import triton.language as tl


@triton.jit
def sum_ticket(x_ptr, part_ptr, count_ptr, out_ptr, n, BLOCK: tl.constexpr, RB: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    tl.store(part_ptr + pid, tl.sum(tl.load(x_ptr + offs, mask=offs < n, other=0.0), axis=0))
    ticket = tl.atomic_add(count_ptr, 1)
    if ticket == tl.num_programs(0) - 1:  # the last program to finish adds the partials
        idx = tl.arange(0, RB)
        parts = tl.load(part_ptr + idx, mask=idx < tl.num_programs(0), other=0.0)
        tl.store(out_ptr, tl.sum(parts, axis=0))


def run(x):
    n = x.numel()
    blocks = triton.cdiv(n, 128)
    parts = torch.empty(blocks, device=x.device, dtype=torch.float32)
    count = torch.zeros(1, device=x.device, dtype=torch.int32)
    out = torch.empty(1, device=x.device, dtype=torch.float32)
    sum_ticket[(blocks,)](x, parts, count, out, n, BLOCK=128, RB=triton.next_power_of_2(blocks))
    return out
'''


def test_a_counter_an_atomic_takes_as_its_pointer_is_restored_between_trial_runs() -> None:
    # `tl.atomic_add(count_ptr, 1)` has no address arithmetic: the counter was not in
    # `restore_value`, so the autotuner's trial runs left it past the last ticket and the
    # tuning call on a GPU never wrote `out`
    out = autotune_control(TICKET)
    restore = next(ast.literal_eval(kw.value) for node in ast.walk(ast.parse(out))
                   if isinstance(node, ast.Call) and ast.unparse(node.func) == "triton.autotune"
                   for kw in node.keywords if kw.arg == "restore_value")
    assert "count_ptr" in restore, restore


PARTIALS = (Path(__file__).parent / "data/styles/partials_buffer.py").read_text()


@pytest.mark.parametrize("count", ["triton.cdiv(x.numel(), 256)", "triton.cdiv(total, 256)"])
def test_a_buffer_sized_by_the_launchs_size_written_another_way_holds_the_tile(count: str) -> None:
    # `n = x.numel()` is passed to the kernel and the partials buffer holds cdiv(x.numel(),
    # 256) entries: BLOCK was swept, so larger blocks left entries unwritten (summed as they
    # were) and the own sweep's BLOCK=128 wrote past the buffer's end
    src = PARTIALS.replace("n_parts = triton.cdiv(n, 256)", f"n_parts = {count}") \
        .replace("    n = x.numel()\n", "    n = x.numel()\n    total = n\n")
    assert src.count(count) == 1
    assert all("BLOCK" not in c for c in _configs(autotune_control(src)))
    for name, _, configs in config_candidates({}, kir.parse(src, "triton"), own=True, every=True):
        assert name != "partial_sumsq" or all("BLOCK" not in c for c in configs), configs


TRANSPOSE = '''import torch
import triton
import triton.language as tl


@triton.jit
def transpose_k(x_ptr, o_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
    n = tl.program_id(0) * BN + tl.arange(0, BN)
    m = tl.program_id(1) * BM + tl.arange(0, BM)
    mask = (m[:, None] < M) & (n[None, :] < N)
    v = tl.load(x_ptr + m[:, None] * N + n[None, :], mask=mask)
    tl.store(o_ptr + n[None, :] * M + m[:, None], v, mask=mask)


def run(x):
    M, N = x.shape
    out = torch.empty((N, M), device=x.device, dtype=x.dtype)
    transpose_k[(triton.cdiv(out.shape[0], 64), triton.cdiv(out.size(1), 32))](x, out, M, N, BM=32, BN=64)
    return out
'''


def test_a_grid_written_with_tensor_shapes_follows_the_tiles_of_the_sizes_they_are() -> None:
    # `out.shape[0]` is the N of `M, N = x.shape` (out is made (N, M)): the literals were not
    # tied to BN and BM, so neither tile was swept (warps only)
    import torch  # noqa: PLC0415

    sizes = {"x": torch.empty(97, 150), "out": torch.empty(150, 97)}
    for text in [autotune_control(TRANSPOSE)] + [
            ir.unparse() for _, ir, _ in config_candidates({}, kir.parse(TRANSPOSE, "triton"),
                                                           own=True, every=True)]:
        counts = _counts(text, "transpose_k", sizes)
        assert {c["BN"] for c, _ in counts} - {64}, counts
        for cfg, grid in counts:
            assert grid == (math.ceil(150 / cfg["BN"]), math.ceil(97 / cfg["BM"])), (cfg, grid)


HELPER_BUFFER = PARTIALS.replace(
    "def run(x):",
    "def _partials(n, device):\n    return torch.empty(triton.cdiv(n, SIZE), device=device, "
    "dtype=torch.float32)\n\n\ndef run(x):").replace(
    "    n_parts = triton.cdiv(n, 256)\n    parts = torch.empty(n_parts, device=x.device, "
    "dtype=torch.float32)\n", "    parts = _partials(n, x.device)\n    n_parts = parts.numel()\n")


@pytest.mark.parametrize("size", ["256", "BLOCK_SIZE"])
def test_a_buffer_a_helper_sizes_by_the_tile_holds_the_tile(size: str) -> None:
    # the partials buffer is made in a helper, by the literal or by a module-level name the
    # launch passes too: only the launching function was searched, so BLOCK was swept
    src = HELPER_BUFFER.replace("SIZE", size)
    if size != "256":
        src = src.replace("def _partials", f"{size} = 256\n\n\ndef _partials").replace(
            "(triton.cdiv(n, 256),)](x, parts, n, BLOCK=256)",
            f"(triton.cdiv(n, {size}),)](x, parts, n, BLOCK={size})")
    assert "cdiv(n, 256)" not in src.split("def run")[1] or size == "256"
    assert all("BLOCK" not in c for c in _configs(autotune_control(src)))
    for name, _, configs in config_candidates({}, kir.parse(src, "triton"), own=True, every=True):
        assert name != "partial_sumsq" or all("BLOCK" not in c for c in configs), configs
    # a closure's parameter the launching function reads beyond the launch still holds
    bmm = (Path(__file__).parents[1] / "bench/styles/bmm_static_k/bmm_static.py").read_text()
    assert "K=K, TK=tk)" in autotune_control(bmm)


def test_a_tile_resize_refuses_a_tile_the_host_sizes_a_buffer_by() -> None:
    from passes import Applied, get_pass  # noqa: PLC0415

    for src in (PARTIALS, HELPER_BUFFER.replace("SIZE", "256")):
        ir = kir.parse(src.replace("256", "64"), "triton")
        step = get_pass("tile-sizes")()
        sites = [s for s in step.sites(ir) if s.detail["tile"] == "BLOCK"]
        assert sites
        for site in sites:  # BLOCK=128 beside a buffer of cdiv(n, 64) partials
            made = step.optimize(ir, site)
            assert not isinstance(made, Applied), made.ir.unparse()
            assert "beyond the launch" in made.reason, made.reason


GROUPS = '''import torch
import triton
import triton.language as tl


@triton.jit
def quant_rows(x_ptr, q_ptr, s_ptr, N, n_groups, GROUP: tl.constexpr):
    row = tl.program_id(0)
    g = tl.program_id(1)
    offs = g * GROUP + tl.arange(0, GROUP)
    x = tl.load(x_ptr + row * N + offs)
    s = tl.max(tl.abs(x), axis=0) / 127.0
    tl.store(q_ptr + row * N + offs, tl.floor(x / s + 0.5))
    tl.store(s_ptr + row * n_groups + g, s)


def run(x):
    M, N = x.shape
    q = torch.empty_like(x)
    s = torch.empty((M, N // 64), device=x.device, dtype=torch.float32)
    quant_rows[(M, N // 64)](x, q, s, N, s.shape[1], GROUP=64)
    return q, s
'''


def test_an_unmasked_tile_whose_value_the_host_divides_a_buffers_size_by_holds() -> None:
    # GROUP is compared with no size, so no size was known to check the host's divisions
    # against: the own sweep halved it to 32 under a scale buffer of N // 64 columns, and
    # the programs of the second half wrote past the buffer's end
    assert all("GROUP" not in c for c in _configs(autotune_control(GROUPS)))
    for _, _, configs in config_candidates({}, kir.parse(GROUPS, "triton"), own=True, every=True):
        assert all("GROUP" not in c for c in configs), configs


# -- counts told by what they compute, not how they are written ---------------------------------

def _launched(tmp_path: Path, text: str, kernel: str, *inputs: object) -> list[tuple[dict[str, int], tuple]]:
    """(configuration, program counts) of each configuration of `kernel`'s autotune list when
    the module's own `run` launches it on `inputs`: the host code runs as written (its
    bindings, helpers and partials), the kernel replaced by a recorder of its grid."""
    import importlib.util  # noqa: PLC0415

    path = tmp_path / f"swept_{next(_MODULES)}.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    configs = [dict(c.kwargs) for c in getattr(module, kernel).configs]
    seen: list[tuple[object, dict]] = []

    class Recorder:
        def __getitem__(self, grid: object):
            return lambda *args, **kwargs: seen.append((grid, kwargs))

    setattr(module, kernel, Recorder())
    module.run(*inputs)
    assert len(seen) == 1, seen
    grid, kwargs = seen[0]
    return [(cfg, tuple(grid({**kwargs, **cfg}) if callable(grid) else grid)) for cfg in configs]


_MODULES = iter(range(10**6))
SILU = FLOORED.replace("MASK", "mask=offs < n")


def _swept_texts(src: str) -> list[str]:
    """The module under the control's list and under the own sweep."""
    return [autotune_control(src)] + [
        ir.unparse() for name, ir, _ in config_candidates({}, kir.parse(src, "triton"), own=True,
                                                          every=True) if name == "silu_k"]


def _swept_covering(tmp_path: Path, src: str, sizes: tuple[int, ...] = (1001,)) -> None:
    """Under the control's list and the own sweep alike, `silu_k` is tuned past its written
    BLOCK of 256, and its host launches exactly the blocks that cover each of `sizes`."""
    import torch  # noqa: PLC0415

    texts = _swept_texts(src)
    assert len(texts) == 2
    for text in texts:
        for n in sizes:
            counts = _launched(tmp_path, text, "silu_k", torch.empty(n))
            assert max(c["BLOCK"] for c, _ in counts) > 256, counts
            for cfg, grid in counts:
                assert grid == (math.ceil(n / cfg["BLOCK"]),), (n, cfg, grid)


@pytest.mark.parametrize("launch", [
    "    silu_k[(-(n // -256),)](x, o, n, BLOCK=256)\n",
    "    silu_k[(len(range(0, n, 256)),)](x, o, n, BLOCK=256)\n",
    "    silu_k[(triton.cdiv(n, 2 * 128),)](x, o, n, BLOCK=256)\n",
    "    silu_k[(triton.cdiv(n, 2 * 128),)](x, o, n, BLOCK=2 * 128)\n",
    "    q, r = divmod(n, 256)\n    silu_k[(q + (r > 0),)](x, o, n, BLOCK=256)\n",
    "    grid = ((n + 255) >> 8,)\n    silu_k[grid](x, o, n, BLOCK=256)\n",
    "    block = 256\n    q, r = divmod(n, block)\n    silu_k[(q + (r > 0),)](x, o, n, BLOCK=block)\n",
    "    whole = n // 256\n    rest = n % 256\n    blocks = whole + (rest > 0)\n"
    "    silu_k[(blocks,)](x, o, n, BLOCK=256)\n",
])
def test_a_block_count_written_any_way_follows_the_tile(tmp_path: Path, launch: str) -> None:
    # each is ceil(n / 256), written so that no pattern of the rewrite knew it: BLOCK kept
    # its 256 and warps alone were swept (with `BLOCK=2 * 128`, not even the value was read)
    src = SILU.replace("    silu_k[(n // 256,)](x, o, n, BLOCK=256)\n", launch)
    _swept_covering(tmp_path, src, (1001, 1152, 1280))


PARTIAL_GRID = SILU.replace("import torch\n", "import functools\n\nimport torch\n").replace(
    "def run(x):", "def blocks_of(n, meta):\n    return (triton.cdiv(n, meta['BLOCK']),)\n\n\n"
    "def run(x):").replace("silu_k[(n // 256,)]", "silu_k[functools.partial(blocks_of, n)]")


def test_a_grid_functools_partial_makes_of_a_def_of_the_meta_parameters_is_one(
        tmp_path: Path) -> None:
    # `functools.partial(blocks_of, n)` is a grid of the meta-parameters: BLOCK was held as
    # if the grid were a host helper's count
    _swept_covering(tmp_path, PARTIAL_GRID)


def test_a_tile_read_from_a_dict_entry_by_the_launch_and_the_grid_is_swept(tmp_path: Path) -> None:
    # `BLOCK=cfg["BLOCK"]` beside `cdiv(n, cfg["BLOCK"])`: the tile had no known value, so
    # it was never swept
    src = SILU.replace("    silu_k[(n // 256,)](x, o, n, BLOCK=256)\n",
                       "    cfg = {'BLOCK': 256}\n"
                       "    silu_k[(triton.cdiv(n, cfg['BLOCK']),)](x, o, n, BLOCK=cfg['BLOCK'])\n")
    _swept_covering(tmp_path, src)
    # read beyond the launch (a buffer sized by it), the entry holds the tile
    held = src.replace("    return o\n", "    parts = torch.empty(cfg['BLOCK'])\n    return o, parts\n")
    assert all("BLOCK" not in c for c in _configs(autotune_control(held)))


@pytest.mark.parametrize("launch", [
    "    silu_k[(n // 256 + (n % 128 > 0),)](x, o, n, BLOCK=256)\n",
    "    silu_k[lambda meta: (n // meta['BLOCK'] + (n % 128 > 0),)](x, o, n, BLOCK=256)\n",
])
def test_a_count_that_is_no_count_of_the_tiles_blocks_holds_the_tile(
        tmp_path: Path, launch: str) -> None:
    # `n // 256 + (n % 128 > 0)` is neither ceil nor floor of n / 256 (one block short where
    # n % 256 == 128): its floor was rounded up and the check kept, one idle program at every
    # tile, and more at BLOCK=1024; the tile keeps its value, the warps are swept
    import torch  # noqa: PLC0415

    src = SILU.replace("    silu_k[(n // 256,)](x, o, n, BLOCK=256)\n", launch)
    for text in _swept_texts(src):
        for n in (1001, 1152, 1280):
            counts = _launched(tmp_path, text, "silu_k", torch.empty(n))
            assert len(counts) > 1 and {c.get("BLOCK", 256) for c, _ in counts} == {256}, counts
            assert {grid for _, grid in counts} == {(n // 256 + (n % 128 > 0),)}, counts



@pytest.mark.parametrize("launch", [
    "    silu_k[(-(n // -64),)](x, o, n, BLOCK=64)\n",
    "    silu_k[(len(range(0, n, 64)),)](x, o, n, BLOCK=64)\n",
    "    silu_k[(triton.cdiv(n, 2 * 32),)](x, o, n, BLOCK=64)\n",
    "    q, r = divmod(n, 64)\n    silu_k[(q + (r > 0),)](x, o, n, BLOCK=64)\n",
])
def test_a_tile_resize_rewrites_a_block_count_written_any_way(launch: str) -> None:
    from passes import Applied, get_pass  # noqa: PLC0415

    # the grid's count of BLOCK's blocks had no literal copy of 64 the resize knew: refused as
    # a grid that does not derive from BLOCK
    ir = kir.parse(SILU.replace("    silu_k[(n // 256,)](x, o, n, BLOCK=256)\n", launch), "triton")
    step = get_pass("tile-sizes")()
    for site in [s for s in step.sites(ir) if s.detail["tile"] == "BLOCK"]:
        for resize, size in ((step.optimize, 128), (step.deoptimize, 32)):
            made = resize(ir, site)
            assert isinstance(made, Applied), made
            assert f"silu_k[(triton.cdiv(n, {size}),)](x, o, n, BLOCK={size})" \
                in made.ir.unparse(), made.ir.unparse()


# -- grids of tests/data/moves_styles: a partial, a lambda over a helper, a def's statements, a
# dict of tiles ---------------------------------------------------------------------------------
STYLES = Path(__file__).parent / "data" / "moves_styles"


def _every_list(src: str) -> list[str]:
    """The module under the control's list and under each own sweep."""
    return [autotune_control(src)] + [
        ir.unparse() for _, ir, _ in config_candidates({}, kir.parse(src, "triton"), own=True,
                                                       every=True)]


def _cover_1d(tmp_path: Path, src: str, kernel: str, written: int) -> set[int]:
    """Each list's configurations launch exactly the blocks that cover 1001 elements (a tile
    a configuration leaves out runs at its `written` value); the block sizes they run."""
    import torch  # noqa: PLC0415

    blocks: set[int] = set()
    for text in _every_list(src):
        for cfg, grid in _launched(tmp_path, text, kernel, torch.randn(1001)):
            block = cfg.get("BLOCK", written)
            blocks.add(block)
            assert grid == (math.ceil(1001 / block),), (cfg, grid)
    return blocks


def _cover_mm(tmp_path: Path, src: str, kernel: str, flat: bool) -> set[tuple[int, int]]:
    """As `_cover_1d` for an (M, N) output of 70 x 37 tiled BM x BN, on two grid axes or on
    one (`flat`); the (BM, BN) pairs the lists run."""
    import torch  # noqa: PLC0415

    tiles: set[tuple[int, int]] = set()
    for text in _every_list(src):
        for cfg, grid in _launched(tmp_path, text, kernel, torch.randn(70, 45).half(),
                                   torch.randn(45, 37).half()):
            bm, bn = cfg["BM"], cfg["BN"]
            tiles.add((bm, bn))
            counts = (math.ceil(70 / bm), math.ceil(37 / bn))
            assert grid == ((counts[0] * counts[1],) if flat else counts), (cfg, grid)
    return tiles


def test_a_grid_a_partial_binds_the_block_of_holds_it(tmp_path: Path) -> None:
    # `functools.partial(grid_of, n, 256)`: the count is of 256's blocks whatever BLOCK is
    src = (STYLES / "stencil_grid_partial.py").read_text()
    assert _cover_1d(tmp_path, src, "stencil_p", 256) == {256}


@pytest.mark.parametrize("kernel,flat", [("mm_grid_lambda_helper", False),
                                         ("mm_grid_def_statements", True)])
def test_a_grid_that_reads_the_tiles_through_a_helper_or_statements_follows_them(
        tmp_path: Path, kernel: str, flat: bool) -> None:
    # `lambda META: tiles_of(M, N, META["BM"], META["BN"])`, and `def grid(META)` counting
    # in statements before its return: the tiles are tuned, the counts follow them
    name = {"mm_grid_lambda_helper": "mm_lh", "mm_grid_def_statements": "mm_flat"}[kernel]
    tiles = _cover_mm(tmp_path, (STYLES / f"{kernel}.py").read_text(), name, flat)
    assert len(tiles) > 2, tiles


CFG_LAMBDA = (STYLES / "stencil_cfg_dict.py").read_text()


def test_a_grid_that_reads_a_module_level_dict_of_tiles_holds_the_tile(tmp_path: Path) -> None:
    # `CFG = {"BLOCK": 128}` at module level, read by the launch and the grid's lambda: the
    # value is not followed there, so the tile is left to the launch (warps are swept)
    assert _cover_1d(tmp_path, CFG_LAMBDA, "stencil_c", 128) == {128}


def test_a_lambda_grid_that_reads_the_tile_from_the_launchs_dict_follows_the_tile(
        tmp_path: Path) -> None:
    # `CFG = {"BLOCK": 128}` in the launching function, `lambda meta: (triton.cdiv(n,
    # CFG["BLOCK"]),)`: the key "BLOCK" of CFG was read as the lambda reading meta["BLOCK"],
    # so BLOCK was swept under a count of 128's blocks (at 256 and 512, idle programs; the own
    # sweep's 64 left elements unwritten). The lambda now reads meta["BLOCK"] there.
    src = CFG_LAMBDA.replace('CFG = {"BLOCK": 128}\n\n\n', "").replace(
        "    n = x.numel()\n", '    n = x.numel()\n    CFG = {"BLOCK": 128}\n')
    assert len(_cover_1d(tmp_path, src, "stencil_c", 128)) > 2
    # a lambda that reads another dict's key than the launch's: the tile keeps its value
    other = src.replace('    CFG = {"BLOCK": 128}\n', '    CFG = {"BLOCK": 128}\n    ALT = dict(CFG)\n') \
        .replace('cdiv(n, CFG["BLOCK"])', 'cdiv(n, ALT["BLOCK"])')
    assert _cover_1d(tmp_path, other, "stencil_c", 128) == {128}
