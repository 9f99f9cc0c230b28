"""Before/after pairs of every deterministic pass on small kernels of our own.

`tests/data/passes/<kernel>` is the *before*; `tests/data/passes/expected/<kernel>.<pass>` is
the kernel after de-optimizing the pass's first site. Each pair checks the de-optimization
text, that re-applying the pass with the recorded options gives the kernel back, and what the
pass does without recorded options (its defaults).
"""
from __future__ import annotations

from pathlib import Path

import pytest

import kir
from passes import Applied, PassContext, Skipped, get_pass
from passes.roundtrip import forward_site, normalized

DATA = Path(__file__).parent / "data" / "passes"
PAIRS = sorted((DATA / "expected").iterdir())
SMALL_GEMM = Path(__file__).parent / "data" / "cases" / "gemm_small"
CTX = PassContext(facts={"arch": "sm_90", "dtype": "fp16", "K": 128, "M": 64, "N": 64})

# pass -> what optimizing the de-optimized kernel without recorded options gives:
# "same" (the kernel back), "applied" (a valid, different optimization), "either" (same where
# the default equals the expert's value, e.g. num_stages=3) or "skipped"
DEFAULTS = {
    "tile-sizes": "same", "num-warps": "either", "software-pipelining": "either",
    "autotune": "applied", "grouped-ordering": "same", "tensor-core-dot": "same",
    "exp2-fold": "applied", "even-k-fast-path": "same", "tma-descriptors": "applied",
    "causal-block-skip": "skipped", "persistent-grid": "skipped", "vectorize-global": "applied",
    "smem-staging": "skipped", "pragma-unroll": "same", "launch-bounds": "same",
    "warp-shuffle-reduce": "skipped", "cp-async-pipeline": "skipped", "restrict-readonly": "same",
}


def _first_site(p, ir):  # noqa: ANN001, ANN202
    """The first present site the pass de-optimizes (some sites are refused, see below)."""
    return next(s for s in p.sites(ir) if s.present and p.deoptimize(ir, s, CTX).ok)


def _split(path: Path) -> tuple[Path, str]:
    kernel, pass_name = path.name.split(".")[:2]
    return DATA / (kernel + path.suffix), pass_name


@pytest.mark.parametrize("expected", PAIRS, ids=lambda p: p.name)
def test_deoptimize_gives_the_expected_kernel(expected: Path) -> None:
    before, pass_name = _split(expected)
    ir = kir.parse_file(before)
    p = get_pass(pass_name)()
    site = _first_site(p, ir)
    result = p.deoptimize(ir, site, CTX)
    assert isinstance(result, Applied), result
    assert result.ir.text == expected.read_text()
    # every edit stays inside the site's region
    assert all(site.span[0] <= e.span.start <= e.span.end <= site.span[1] for e in result.edits)


@pytest.mark.parametrize("expected", PAIRS, ids=lambda p: p.name)
def test_optimize_with_recorded_options_restores_the_kernel(expected: Path) -> None:
    before, pass_name = _split(expected)
    ir = kir.parse_file(before)
    p = get_pass(pass_name)()
    site = _first_site(p, ir)
    back = p.deoptimize(ir, site, CTX)
    forward = p.with_options(back.options)
    deopt_ir = kir.parse_file(expected)
    fsite = forward_site(forward, deopt_ir, site)
    assert fsite is not None
    result = forward.optimize(deopt_ir, fsite, CTX)
    assert isinstance(result, Applied), result
    lang = ir.language.value
    assert normalized(result.ir.text, lang) == normalized(ir.text, lang)


@pytest.mark.parametrize("expected", PAIRS, ids=lambda p: p.name)
def test_optimize_without_options_uses_the_defaults(expected: Path) -> None:
    before, pass_name = _split(expected)
    ir = kir.parse_file(before)
    p = get_pass(pass_name)()
    deopt_ir = kir.parse_file(expected)
    site = _first_site(p, ir)
    fsite = forward_site(p, deopt_ir, site)
    assert fsite is not None
    result = p.optimize(deopt_ir, fsite, CTX)
    lang = ir.language.value
    want = DEFAULTS[pass_name]
    if want == "skipped":
        assert isinstance(result, Skipped) and result.reason
        return
    assert isinstance(result, Applied), result
    same = normalized(result.ir.text, lang) == normalized(ir.text, lang)
    assert want == "either" or same is (want == "same")


def test_autotune_default_builds_a_config_list_around_the_pinned_values() -> None:
    ir = kir.parse_file(DATA / "mm_pinned.py")
    p = get_pass("autotune")()
    site = next(s for s in p.sites(ir) if not s.present)
    result = p.optimize(ir, site, CTX)
    assert isinstance(result, Applied)
    text = result.ir.text
    assert text.count("triton.Config(") == 4
    assert 'triton.Config({"BLOCK_M": 32, "BLOCK_N": 32}, num_warps=8, num_stages=3)' in text
    assert "key=['M', 'N', 'K']" in text
    assert "BLOCK_M=32" not in text.split("def run")[1]  # the launch no longer pins them


def test_computed_config_lists_are_pinned_by_slicing() -> None:
    text = (DATA / "mm_autotuned.py").read_text()
    start, end = text.index("configs=[") + len("configs="), text.index("], key=") + 1
    text = text[:start] + "_configs()" + text[end:]  # a list built by code
    ir = kir.parse(text, language="triton")
    p = get_pass("autotune")()
    result = p.deoptimize(ir, next(s for s in p.sites(ir) if s.present))
    assert isinstance(result, Applied) and result.options == {"pinned": "slice"}
    assert "configs=_configs()[:1]" in result.ir.text


def test_tile_sizes_stop_at_the_floor() -> None:
    ir = kir.parse_file(DATA / "mm_pinned.py")
    p = get_pass("tile-sizes")()
    sizes = {(s.detail["tile"], s.present) for s in p.sites(ir)}
    assert ("BLOCK_K", True) in sizes
    small = get_pass("tile-sizes").from_options({"floor": 32})
    assert not any(s.present for s in small.sites(ir))


def test_a_tile_step_records_its_tile_and_is_performed_on_that_tile_only() -> None:
    ir = kir.parse_file(DATA / "mm_pinned.py")
    p = get_pass("tile-sizes")()
    k_site = next(s for s in p.sites(ir) if s.present and s.detail["tile"] == "BLOCK_K")
    back = p.deoptimize(ir, k_site)
    assert isinstance(back, Applied) and back.options["tile"] == "BLOCK_K"
    forward = p.with_options(back.options)
    sites = {s.detail["tile"]: s for s in forward.sites(back.ir) if not s.present}
    refused = forward.optimize(back.ir, sites["BLOCK_M"])
    assert isinstance(refused, Skipped) and "resized a k tile, not a m tile (BLOCK_M)" in refused.reason
    again = forward.optimize(back.ir, sites["BLOCK_K"])
    assert isinstance(again, Applied) and again.ir.text == ir.text


def test_older_tile_records_get_their_tile_from_the_edited_literal() -> None:
    cls = get_pass("tile-sizes")
    for before, name in [("k[grid](a, BLOCK_M=16, BLOCK_N=16)", "BLOCK_N"),
                         ('triton.Config({"BLOCK_M": 16, "BLOCK_K": 16})', "BLOCK_K"),
                         ("def k(x, BLOCK_N: tl.constexpr = 16):", "BLOCK_N")]:
        at = before.rindex("16")
        diff = [{"action": "update", "src_span": [at, at + 2], "old": "16", "new": "32"}]
        assert cls.recorded_options({"value": 32}, before, diff) == {"value": 32, "tile": name}
    # a recorded tile is kept; a step the literal does not name stays as it was
    assert cls.recorded_options({"value": 32, "tile": "X_BLOCK"}, "BLOCK_M=16", []) == {
        "value": 32, "tile": "X_BLOCK"}
    assert cls.recorded_options({"value": 32}, "f(16)", [{"src_span": [2, 4]}]) == {"value": 32}


def test_tiles_of_a_fixed_host_grid_are_resized_with_its_copies_or_not_at_all() -> None:
    # mm_pinned launches cdiv(M, 32) * cdiv(N, 32) programs: each 32 is the copy of the tile
    # whose size it divides (`offs_m < M`), and is resized with it
    ir = kir.parse_file(DATA / "mm_pinned.py")
    p = get_pass("tile-sizes")()
    results = {s.detail["tile"]: p.deoptimize(ir, s) for s in p.sites(ir) if s.present}
    assert "grid = (triton.cdiv(M, 16) * triton.cdiv(N, 32),)" in results["BLOCK_M"].ir.text
    assert "grid = (triton.cdiv(M, 32) * triton.cdiv(N, 16),)" in results["BLOCK_N"].ir.text
    assert isinstance(results["BLOCK_K"], Applied)  # the K step does not map programs
    # a grid with no copy of the tile launches its programs whatever BLOCK_M is
    fixed = ir.text.replace("grid = (triton.cdiv(M, 32) * triton.cdiv(N, 32),)",
                            "grid = (triton.cdiv(M * N, 1024),)")
    ir = kir.parse(fixed, language="triton")
    results = {s.detail["tile"]: p.deoptimize(ir, s) for s in p.sites(ir) if s.present}
    assert isinstance(results["BLOCK_M"], Skipped) and "grid" in results["BLOCK_M"].reason
    assert isinstance(results["BLOCK_N"], Skipped)


def test_a_tile_scaling_a_program_id_read_in_place_takes_its_grid_copy_along() -> None:
    """The held-out sum_dim kernel: `cols = tl.program_id(1) * BLOCK_C + ...` (no pid variable)
    under a host grid of `cdiv(C, 64)`, BLOCK_C=64 at the launch: the grid's 64 on the axis
    BLOCK_C scales is its copy, resized with it (a grid left at 64 would leave columns
    unwritten, or write past them); the row step CHUNK_R is free."""
    ir = kir.parse_file(DATA.parent.parent.parent / "bench/heldout/kernelbench/sum_dim_triton.py")
    p = get_pass("tile-sizes")()
    results = {s.detail["tile"]: p.optimize(ir, s) for s in p.sites(ir) if not s.present}
    assert "[(B, triton.cdiv(C, 128))]" in results["BLOCK_C"].ir.text
    assert "BLOCK_C=128" in results["BLOCK_C"].ir.text
    assert isinstance(results["CHUNK_R"], Applied)
    other_axis = ir.text.replace("[(B, triton.cdiv(C, 64))]", "[(triton.cdiv(C, 64), B)]")
    assert other_axis != ir.text
    ir = kir.parse(other_axis, language="triton")
    shrunk = {s.detail["tile"]: p.deoptimize(ir, s) for s in p.sites(ir) if s.present}
    assert isinstance(shrunk["BLOCK_C"], Skipped) and "grid" in shrunk["BLOCK_C"].reason


def test_even_k_without_flag_needs_known_divisibility() -> None:
    ir = kir.parse_file(DATA / "expected" / "mm_autotuned.even-k-fast-path.py")
    text = ir.text.replace("GROUP_M: tl.constexpr, EVEN_K: tl.constexpr", "GROUP_M: tl.constexpr")
    ir = kir.parse(text, language="triton")
    p = get_pass("even-k-fast-path")()
    site = next(s for s in p.sites(ir) if not s.present)
    unknown = p.optimize(ir, site, PassContext(facts={}))
    assert isinstance(unknown, Skipped) and "known true" in unknown.reason
    ragged = p.optimize(ir, site, PassContext(facts={"K": 100}))
    assert isinstance(ragged, Skipped) and ragged.facts["K"] == 100
    even = p.optimize(ir, site, PassContext(facts={"K": 128}))
    assert isinstance(even, Applied) and "mask=" not in even.ir.text.split("for k in")[1].split("acc =")[0]


def test_refusals_say_why() -> None:
    ir = kir.parse_file(DATA / "mm_persistent_tma.py")
    p = get_pass("persistent-grid")()
    site = next(s for s in p.sites(ir) if s.present)
    # a value computed in the tile loop and read after it: one tile per program would change it
    text = ir.text.replace("        c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(c_ptr.dtype.element_ty))\n",
                           "        c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(c_ptr.dtype.element_ty))\n"
                           "    tl.device_assert(acc.shape[0] > 0)\n")
    carried = kir.parse(text, language="triton")
    site = next(s for s in p.sites(carried) if s.present)
    result = p.deoptimize(carried, site)
    assert isinstance(result, Skipped) and result.facts == {"names": ["acc"]}


@pytest.mark.parametrize("expected", [p for p in PAIRS if p.suffix == ".cu"], ids=lambda p: p.name)
def test_deoptimized_cuda_still_compiles(expected: Path) -> None:
    from experts import cudahost

    compiled = cudahost.compile_source(expected.read_text(), name=expected.name, arch="sm_90")
    assert compiled.ptx


@pytest.mark.slow
@pytest.mark.parametrize("kernel", ["mm_autotuned.py", "mm_pinned.py"])
def test_deoptimized_own_kernels_still_compute_gemm(kernel: str) -> None:
    gate = pytest.importorskip("gate")
    from passes.roundtrip import deoptimize_all

    ir = kir.parse_file(DATA / kernel)
    naive, steps = deoptimize_all(ir)
    removed = {name for name, _ in steps}
    assert {"tensor-core-dot", "tile-sizes"} <= removed
    # gemm at small sizes: the naive kernel's 16-wide tiles take the interpreter tens of
    # seconds per gate at the gemm case's own sizes
    verdict = gate.check(naive.text, "triton", str(SMALL_GEMM), tier="interpret",
                         path=str(DATA / kernel), cache=False)
    assert verdict.ok, (steps, verdict.stage, verdict.reason)


def test_persistent_grid_refuses_a_stale_host_tile_count() -> None:
    # the host counts 64x64 tiles; after shrinking BLOCK_M the kernel has twice as many
    text = (DATA / "mm_persistent_tma.py").read_text().replace("BLOCK_M=64", "BLOCK_M=32")
    ir = kir.parse(text, language="triton")
    p = get_pass("persistent-grid")()
    site = next(s for s in p.sites(ir) if s.present)
    result = p.deoptimize(ir, site)
    assert isinstance(result, Skipped)
    assert result.facts == {"host_sizes": [64, 64], "kernel_sizes": [32, 64]}


def test_autotune_with_a_pre_hook_is_pinned_by_slicing() -> None:
    text = (DATA / "mm_autotuned.py").read_text().replace(
        "num_warps=4, num_stages=2)", "num_warps=4, num_stages=2, pre_hook=None)")
    ir = kir.parse(text, language="triton")
    p = get_pass("autotune")()
    result = p.deoptimize(ir, next(s for s in p.sites(ir) if s.present))
    assert isinstance(result, Applied) and result.options == {"pinned": "slice"}
    assert "][:1], key=" in result.ir.text


_WHILE_MM = '''import torch
import triton
import triton.language as tl


@triton.jit
def mm(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
       P: tl.constexpr, Q: tl.constexpr, R: tl.constexpr):
    rows = tl.program_id(0) * P + tl.arange(0, P)
    cols = tl.program_id(1) * Q + tl.arange(0, Q)
    acc = tl.zeros((P, Q), dtype=tl.float32)
    kk = 0
    while kk < K:
        ks = kk + tl.arange(0, R)
        x = tl.load(a_ptr + rows[:, None] * sam + ks[None, :] * sak,
                    mask=(rows[:, None] < M) & (ks[None, :] < K), other=0.0)
        y = tl.load(b_ptr + ks[:, None] * sbk + cols[None, :] * sbn,
                    mask=(ks[:, None] < K) & (cols[None, :] < N), other=0.0)
        acc += tl.dot(x, y)
        kk += R
    tl.store(c_ptr + rows[:, None] * scm + cols[None, :] * scn, acc.to(c_ptr.dtype.element_ty),
             mask=(rows[:, None] < M) & (cols[None, :] < N))


def run(a, b):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    mm[(triton.cdiv(M, 32), triton.cdiv(N, 32))](a, b, c, M, N, K, a.stride(0), a.stride(1),
                                                 b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                                                 P=32, Q=32, R=32)
    return c
'''


def test_a_counted_while_loop_becomes_the_pipelined_for_loop_it_is() -> None:
    # Triton pipelines counted loops only: `k = 0; while k < K: ...; k += R` is never
    # pipelined as written, whatever num_stages says
    ir = kir.parse(_WHILE_MM, language="triton")
    p = get_pass("software-pipelining")()
    site = next(s for s in p.sites(ir) if s.detail.get("while"))
    assert not site.present and site.detail["loop"] == "kk"
    result = p.optimize(ir, site)
    assert isinstance(result, Applied)
    text = result.ir.text
    assert "for kk in tl.range(0, K, R, num_stages=3):" in text
    assert "while" not in text and "kk += R" not in text and "kk = 0" not in text
    after = [s for s in p.sites(result.ir)]
    assert not any(s.detail.get("while") for s in after)
    assert any(s.present and s.detail.get("num_stages") == 3 for s in after)


@pytest.mark.parametrize("change", [
    ("        kk += R\n", "        kk += R\n        if kk > 64:\n            break\n"),  # not last
    ("    while kk < K:\n", "    while kk < K:\n        kk += 0\n"),  # counted twice
    ("    tl.store(c_ptr", "    acc += kk\n    tl.store(c_ptr"),  # read after the loop
    ("    kk = 0\n", "    kk = 0\n    kk += P\n"),  # changed after its start
    ("    while kk < K:\n", "    while kk <= K:\n"),  # not `name < stop`
    ("    kk = 0\n", "    k0 = 0\n    kk = k0\n    k0 = 5\n"),  # its start changed before the loop
    ("    acc = tl.zeros((P, Q), dtype=tl.float32)\n    kk = 0\n",  # read on an outer loop's next trip
     "    acc = tl.zeros((P, Q), dtype=tl.float32)\n    kk = 0\n    for rep in range(2):\n"
     "        acc += kk\n        kk = 0\n"),
])
def test_a_while_loop_that_is_not_counted_is_left_alone(change: tuple[str, str]) -> None:
    text = _WHILE_MM.replace(*change)
    assert text != _WHILE_MM
    ir = kir.parse(text, language="triton")
    assert not any(s.detail.get("while") for s in get_pass("software-pipelining")().sites(ir))


@pytest.mark.slow
def test_the_for_loop_from_a_counted_while_computes_the_same() -> None:
    gate = pytest.importorskip("gate")
    ir = kir.parse(_WHILE_MM, language="triton")
    p = get_pass("software-pipelining")()
    result = p.optimize(ir, next(s for s in p.sites(ir) if s.detail.get("while")))
    verdict = gate.check(result.ir.text, "triton", "gemm", tier="interpret", cache=False)
    assert verdict.ok, (verdict.stage, verdict.reason)


def test_num_warps_is_not_added_beside_a_spread_of_launch_options() -> None:
    # `**config` may hold num_warps already: adding one would pass it twice at run time
    text = _WHILE_MM.replace("P=32, Q=32, R=32)", "**_CONFIG)").replace(
        "def run(a, b):", "_CONFIG = dict(P=32, Q=32, R=32, num_warps=4)\n\n\ndef run(a, b):")
    p = get_pass("num-warps")()
    assert not p.sites(kir.parse(text, language="triton"))
    assert p.sites(kir.parse(_WHILE_MM, language="triton"))


_STATIC_MM = _WHILE_MM.replace("    kk = 0\n    while kk < K:\n", "    for t in tl.static_range(KT):\n        kk = t * R\n").replace(
    "        kk += R\n", "").replace("P: tl.constexpr, Q: tl.constexpr, R: tl.constexpr",
                                    "P: tl.constexpr, Q: tl.constexpr, R: tl.constexpr, KT: tl.constexpr")


def test_an_unrolled_dot_loop_becomes_a_pipelined_range() -> None:
    ir = kir.parse(_STATIC_MM, language="triton")
    p = get_pass("software-pipelining")()
    site = next(s for s in p.sites(ir) if s.detail.get("loop") == "t")
    result = p.optimize(ir, site)
    assert isinstance(result, Applied)
    assert "for t in tl.range(KT, num_stages=3):" in result.ir.text


def test_an_unrolled_loop_whose_variable_picks_a_branch_stays_unrolled() -> None:
    text = _STATIC_MM.replace("        acc += tl.dot(x, y)\n",
                              "        if t == 0:\n            acc = tl.dot(x, y)\n"
                              "        else:\n            acc += tl.dot(x, y)\n")
    assert text != _STATIC_MM
    p = get_pass("software-pipelining")()
    assert not any(s.detail.get("loop") == "t" for s in p.sites(kir.parse(text, language="triton")))


def test_a_loop_around_a_loading_loop_is_not_the_one_pipelined() -> None:
    # a loop over taps (or tiles) around the K loop: the K loop's loads are the ones a pipeline
    # overlaps; num_stages on the outer loop would stage whole K loops
    text = _STATIC_MM.replace("    for t in tl.static_range(KT):\n        kk = t * R\n",
                              "    for tap in range(2):\n        for t in range(KT):\n            kk = t * R\n")
    text = text.replace("        ks = kk + tl.arange(0, R)\n", "            ks = kk + tl.arange(0, R)\n")
    for line in ("        x = tl.load(", "                    mask=(rows", "        y = tl.load(",
                 "                    mask=(ks", "        acc += tl.dot(x, y)\n"):
        text = text.replace(line, "    " + line)
    compile(text, "mm.py", "exec")
    loops = [s.detail["loop"] for s in get_pass("software-pipelining")().sites(kir.parse(text, language="triton"))
             if "loop" in s.detail]
    assert loops == ["t"]


def test_the_exp_over_a_tile_is_offered_before_the_exp_over_a_row() -> None:
    # a card kept once per kernel folds the exp that costs most first: the probabilities'
    # (BLOCK_M, BLOCK_N) exp, not the per-row rescale written above it
    text = '''import triton
import triton.language as tl


@triton.jit
def k(x_ptr, o_ptr, n, BLOCK: tl.constexpr):
    r = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + r[:, None] * BLOCK + r[None, :])
    m = tl.max(x, axis=1)
    alpha = tl.exp(m - 1.0)
    p = tl.exp(x - m[:, None])
    tl.store(o_ptr + r[:, None] * BLOCK + r[None, :], p * alpha[:, None])
'''
    ir = kir.parse(text, language="triton")
    open_sites = [s for s in get_pass("exp2-fold")().sites(ir) if not s.present]
    first = text.encode()[slice(*open_sites[0].detail["call_span"])].decode()
    assert first == "tl.exp(x - m[:, None])"
