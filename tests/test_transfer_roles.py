"""Launch parameters found by role, configurations carried across kernels that name them
differently, the no-library control, and retrieval by operator signature."""
from __future__ import annotations

import ast
from pathlib import Path

import kir
import pytest
from attention_sources import CAUSAL

from lineage.control import apply_byte_edits, autotune_control, generic_configs
from lineage.retrieval import signature_similarity
from lineage.transfer import SWEEP_POINTS, config_candidates, sweep_around
from passes.triton.roles import fit_configs, joint_config, operator_signature, sweep_edit

# One tiled matmul written three ways: tile names, host code and loop forms differ.
MM_A = '''
import torch, triton
import triton.language as tl

@triton.jit
def mm(a, b, c, M, N, K, sam, sak, sbk, sbn, scm, scn,
       BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pm = tl.program_id(0)
    pn = tl.program_id(1)
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        x = tl.load(a + rm[:, None] * sam + (k0 + rk)[None, :] * sak,
                    mask=(rm[:, None] < M) & ((k0 + rk)[None, :] < K), other=0.0)
        y = tl.load(b + (k0 + rk)[:, None] * sbk + rn[None, :] * sbn,
                    mask=((k0 + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(x, y)
    tl.store(c + rm[:, None] * scm + rn[None, :] * scn, acc.to(tl.float16),
             mask=(rm[:, None] < M) & (rn[None, :] < N))

def run(a, b):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    tm, tn = 32, 32
    mm[(triton.cdiv(M, tm), triton.cdiv(N, tn))](a, b, c, M, N, K, a.stride(0), a.stride(1),
        b.stride(0), b.stride(1), c.stride(0), c.stride(1), BM=tm, BN=tn, BK=32)
    return c
'''

MM_B = '''
import torch, triton
import triton.language as tl

@triton.jit
def matmul_tile(A, B, C, m_size, n_size, k_size, s0, s1, s2, s3, s4, s5,
                TILE_ROWS: tl.constexpr, TILE_COLS: tl.constexpr, DEPTH: tl.constexpr):
    pid = tl.program_id(0)
    tiles_n = tl.cdiv(n_size, TILE_COLS)
    row = (pid // tiles_n) * TILE_ROWS + tl.arange(0, TILE_ROWS)
    col = (pid % tiles_n) * TILE_COLS + tl.arange(0, TILE_COLS)
    d = tl.arange(0, DEPTH)
    total = tl.zeros((TILE_ROWS, TILE_COLS), dtype=tl.float32)
    for step in tl.range(0, tl.cdiv(k_size, DEPTH)):
        kk = step * DEPTH + d
        lhs = tl.load(A + row[:, None] * s0 + kk[None, :] * s1,
                      mask=(row[:, None] < m_size) & (kk[None, :] < k_size), other=0.0)
        rhs = tl.load(B + kk[:, None] * s2 + col[None, :] * s3,
                      mask=(kk[:, None] < k_size) & (col[None, :] < n_size), other=0.0)
        total = tl.dot(lhs, rhs, total)
    tl.store(C + row[:, None] * s4 + col[None, :] * s5, total.to(tl.float16),
             mask=(row[:, None] < m_size) & (col[None, :] < n_size))

def run(a, b):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    grid = (triton.cdiv(M, 32) * triton.cdiv(N, 64),)
    matmul_tile[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                      c.stride(0), c.stride(1), TILE_ROWS=32, TILE_COLS=64, DEPTH=16, num_warps=2)
    return c
'''

ROWSUM = '''
import torch, triton
import triton.language as tl

@triton.jit
def rowsum(x, y, n_cols, stride, BLOCK: tl.constexpr):
    r = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    v = tl.load(x + r * stride + offs, mask=offs < n_cols, other=0.0)
    tl.store(y + r, tl.sum(v, axis=0))

def run(x):
    y = torch.empty(x.shape[0], device=x.device, dtype=x.dtype)
    rowsum[(x.shape[0],)](x, y, x.shape[1], x.stride(0), BLOCK=triton.next_power_of_2(x.shape[1]))
    return y
'''


# The same matmul with its K walked by a `while` loop and tiles named by letters.
MM_WHILE = MM_A.replace("BM", "P").replace("BN", "Q").replace("BK", "R").replace(
    """    for k0 in range(0, K, R):
""", """    k0 = 0
    while k0 < K:
""").replace("""        acc += tl.dot(x, y)
""", """        acc += tl.dot(x, y)
        k0 += R
""")


# The same matmul with its K loop moved into a jit helper that returns the accumulator.
_LOOP = MM_A[MM_A.index("    rk = tl.arange(0, BK)\n"):MM_A.index("    tl.store(")]
MM_HELPER = MM_A.replace(_LOOP, "    acc = _tile(a, b, rm, rn, M, N, K, sam, sak, sbk, sbn, BM, BN, BK)\n").replace(
    "@triton.jit\ndef mm(",
    "@triton.jit\ndef _tile(a, b, rm, rn, M, N, K, sam, sak, sbk, sbn, BM: tl.constexpr,\n"
    "          BN: tl.constexpr, BK: tl.constexpr):\n"
    + _LOOP.replace("acc", "total") + "    return total\n\n\n@triton.jit\ndef mm(")


# The same matmul whose K loop stops at a bound read from the program index (a causal,
# triangular product): it walks data, not programs.
MM_TRIANGULAR = MM_A.replace("for k0 in range(0, K, BK):",
                             "for k0 in range(0, tl.minimum((pm + 1) * BM, K), BK):")

# The same matmul walking one program's slice of K (split-K): the loop starts at a value read
# from the program index but steps by the K block.
MM_SPLIT_K = MM_A.replace("    for k0 in range(0, K, BK):",
                          "    k_lo = tl.program_id(2) * 4 * BK\n    for k0 in range(k_lo, K, BK):")


def _ir(text: str) -> kir.KernelIR:
    return kir.parse(text, "triton")


@pytest.mark.parametrize("text,kernel,expect", [
    (MM_A, "mm", {"BM": "m", "BN": "n", "BK": "k"}),
    (MM_B, "matmul_tile", {"TILE_ROWS": "m", "TILE_COLS": "n", "DEPTH": "k"}),
    (MM_WHILE, "mm", {"P": "m", "Q": "n", "R": "k"}),
    (MM_HELPER, "mm", {"BM": "m", "BN": "n", "BK": "k"}),
    (MM_TRIANGULAR, "mm", {"BM": "m", "BN": "n", "BK": "k"}),
    (MM_SPLIT_K, "mm", {"BM": "m", "BN": "n", "BK": "k"}),
])
def test_tiles_are_found_by_what_they_do_not_by_name(text: str, kernel: str, expect: dict) -> None:
    cfg = joint_config(_ir(text))[kernel]
    assert {p.name: p.role for p in cfg.params} == expect
    assert cfg.dot


def test_a_block_computed_from_the_problem_is_not_tunable() -> None:
    cfg = joint_config(_ir(ROWSUM))["rowsum"]
    assert [(p.name, p.role, p.value) for p in cfg.params] == [("BLOCK", "vec", None)]
    assert cfg.by_role() == {}


def test_host_values_are_read_through_tuples_and_literals() -> None:
    a = joint_config(_ir(MM_A))["mm"]
    assert a.by_role() == {"m": 32, "n": 32, "k": 32} and a.num_warps == 4
    b = joint_config(_ir(MM_B))["matmul_tile"]
    assert b.by_role() == {"m": 32, "n": 64, "k": 16} and b.num_warps == 2


def test_operator_signature_reads_structure() -> None:
    assert operator_signature(_ir(MM_A)) == operator_signature(_ir(MM_B)) == {"dot-loop"}
    assert operator_signature(_ir(ROWSUM)) == {"row-reduce"}
    assert signature_similarity({"dot-loop"}, {"dot-loop", "block-ptr"}) == 0.5
    assert signature_similarity({"dot-loop"}, {"row-reduce"}) == 0.0
    assert signature_similarity((), {"dot-loop"}) == 0.0


def test_a_recorded_configuration_lands_on_a_kernel_with_other_names() -> None:
    recorded = joint_config(_ir(MM_A))["mm"].to_json()
    recorded.update(tiles={"m": 128, "n": 256, "k": 64}, num_warps=8, num_stages=3)
    made = config_candidates({"config": {"mm": recorded}}, _ir(MM_B))
    assert len(made) == 1
    name, new_ir, fitted = made[0]
    text = new_ir.unparse()
    assert name == "matmul_tile"
    assert fitted[0] == {"TILE_ROWS": 128, "TILE_COLS": 256, "DEPTH": 64,
                         "num_warps": 8, "num_stages": 3}
    assert 2 <= len(fitted) <= SWEEP_POINTS
    # the host grid now reads the tuned tiles and the launch no longer pins them
    assert 'meta["TILE_ROWS"]' in text and 'meta["TILE_COLS"]' in text
    assert "TILE_ROWS=32" not in text and "num_warps=2" not in text
    assert "@triton.autotune(" in text and "key=['m_size', 'n_size', 'k_size']" in text
    compile(text, "candidate.py", "exec")
    # a recorded configuration of a kernel without a dot loop does not fit a matmul: its
    # values are left alone; asked for, the sweep goes around the matmul's own configuration
    other = {"config": {"x": {"tiles": {"grid": 64}, "dot": False, "num_warps": 4, "num_stages": 2}}}
    assert config_candidates(other, _ir(MM_B)) == []
    [(name, _, own)] = config_candidates(other, _ir(MM_B), own=True)
    assert name == "matmul_tile"
    assert own[0] == {"TILE_ROWS": 32, "TILE_COLS": 64, "DEPTH": 16, "num_warps": 2,
                      "num_stages": own[0]["num_stages"]}
    assert {"TILE_ROWS": 64, "TILE_COLS": 64, "DEPTH": 16, "num_warps": 2,
            "num_stages": own[0]["num_stages"]} in own
    assert all(c.get("TILE_COLS") != 128 or c["TILE_ROWS"] == 32 for c in own)  # one knob each


def test_sweep_around_a_configuration() -> None:
    pts = sweep_around({"tiles": {"m": 128, "n": 256, "k": 64}, "num_warps": 8, "num_stages": 3},
                       also={"tiles": {"m": 64, "n": 256, "k": 64}, "num_warps": 4, "num_stages": 1})
    assert pts[0] == {"m": 128, "n": 256, "k": 64, "num_warps": 8, "num_stages": 3}
    assert pts[1] == {"m": 64, "n": 256, "k": 64, "num_warps": 4, "num_stages": 1}
    assert {"m": 128, "n": 128, "k": 64, "num_warps": 8, "num_stages": 3} in pts
    # a deeper pipeline, the transposed tile, and a half tile for problems the tile cannot fill
    assert pts[2] == {"m": 128, "n": 256, "k": 64, "num_warps": 8, "num_stages": 4}
    assert pts[3] == {"m": 256, "n": 128, "k": 64, "num_warps": 8, "num_stages": 4}
    assert pts[4] == {"m": 64, "n": 128, "k": 64, "num_warps": 4, "num_stages": 4}
    assert len(pts) == 8 and len({tuple(sorted(p.items())) for p in pts}) == 8
    # a narrow recorded reduction step (a convolution's channel block) is also proposed wide
    narrow = sweep_around({"tiles": {"m": 128, "n": 128, "k": 16}, "num_warps": 4,
                           "num_stages": 3})
    assert {"m": 128, "n": 128, "k": 64, "num_warps": 4, "num_stages": 3} in narrow
    # a 128x128 accumulator is not doubled (256x256 would not fit the registers); a 64x128 one is,
    # with twice the warps and the wide reduction step: a problem larger than the recorded one
    assert not any(p["m"] * p["n"] > 128 * 256 for p in narrow)
    smaller = sweep_around({"tiles": {"m": 64, "n": 128, "k": 16}, "num_warps": 4,
                            "num_stages": 3})
    assert {"m": 128, "n": 256, "k": 64, "num_warps": 8, "num_stages": 3} in smaller
    assert all(p["k"] in (16, 64) for p in narrow)
    # a recorded configuration without a reduction step, on a target that has one
    no_k = sweep_around({"tiles": {"m": 64, "n": 128}, "num_warps": 4, "num_stages": 3},
                        roles={"m", "n", "k"})
    assert {"m": 64, "n": 128, "k": 64, "num_warps": 4, "num_stages": 3} in no_k
    assert {"m": 128, "n": 256, "k": 64, "num_warps": 8, "num_stages": 3} in no_k
    assert sum("k" in p for p in no_k) == 2  # the other points keep the target's own step


def test_a_kernel_with_no_tunable_block_is_swept_over_its_warps() -> None:
    """A row kernel whose block is the whole row (fixed by the problem) keeps it; the sweep of
    a launch card that does not fit goes over the warps and stages around its own launch."""
    from lineage.transfer import sweep_own
    from passes.triton.roles import KernelConfig

    pts = sweep_own(KernelConfig("row_norm", (), num_warps=8, num_stages=3))
    assert pts[0] == {"num_warps": 8, "num_stages": 3}
    assert {p["num_warps"] for p in pts} == {2, 4, 8, 16, 32}
    assert len(pts) <= SWEEP_POINTS


def test_one_literal_for_two_tiles_is_told_apart_by_the_size_it_divides() -> None:
    text = MM_A.replace("    tm, tn = 32, 32\n", "").replace("triton.cdiv(M, tm), triton.cdiv(N, tn)",
                                                         "triton.cdiv(M, 32), triton.cdiv(N, 32)")
    text = text.replace("BM=tm, BN=tn", "BM=32, BN=32")
    made = sweep_edit(_ir(text), "mm", [{"m": 64, "n": 128, "k": 32}])
    assert not hasattr(made, "reason"), made
    edits, _ = made
    out = apply_byte_edits(text, edits)
    assert 'triton.cdiv(M, meta["BM"]), triton.cdiv(N, meta["BN"])' in out


def test_a_sweep_of_nothing_but_a_tile_the_host_reuses_is_refused() -> None:
    text = MM_A.replace("    return c\n", "    scratch = torch.empty(tm)\n    return c\n")
    made = sweep_edit(_ir(text), "mm", [{"m": 64}])
    assert hasattr(made, "reason") and "beyond the launch" in made.reason


def test_the_control_uses_a_generic_list_for_each_kind_of_kernel() -> None:
    dot = generic_configs(joint_config(_ir(MM_B))["matmul_tile"])
    assert len(dot) == 10 and dot[0] == {"m": 128, "n": 256, "k": 64, "num_warps": 8, "num_stages": 3}
    # a row tile of 16 with a deep K step: the entry for a product whose rows fit one tile
    assert {"m": 16, "n": 64, "k": 128, "num_warps": 4, "num_stages": 5} in dot
    rows = generic_configs(joint_config(_ir(ROWSUM))["rowsum"])
    assert [c["num_warps"] for c in rows] == [1, 2, 4, 8, 16, 32]
    out = autotune_control(ROWSUM)
    assert "@triton.autotune(" in out and "key=['n_cols']" in out
    compile(out, "control.py", "exec")


def test_tile_sites_do_not_depend_on_names() -> None:
    from passes.registry import get_pass
    sites = get_pass("tile-sizes")().sites(_ir(MM_B))
    assert {s.detail["tile"] for s in sites} == {"TILE_ROWS", "TILE_COLS", "DEPTH"}
    assert {s.detail["role"] for s in sites} == {"m", "n", "k"}


def test_two_launches_sharing_a_grid_variable_rewrite_it_once() -> None:
    text = MM_B.replace("    return c\n", """    matmul_tile[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                      c.stride(0), c.stride(1), TILE_ROWS=32, TILE_COLS=64, DEPTH=16, num_warps=2)
    return c
""")
    made = sweep_edit(_ir(text), "matmul_tile", [{"m": 64, "n": 128, "k": 32}])
    assert not hasattr(made, "reason"), made
    out = apply_byte_edits(text, made[0])
    assert out.count("lambda meta:") == 1 and out.count("TILE_ROWS=32") == 0
    compile(out, "two_launches.py", "exec")




def _causal_in_interpreter(kernel_text: str, tmp_path: Path):
    """The gate's interpret-tier verdict of the `CAUSAL` kernel text `kernel_text` with a host
    that runs it per (batch, head) on the held-out causal attention case."""
    import gate

    host = ("\nimport torch\n\n\ndef run(q, k, v):\n    B, H, S, D = q.shape\n"
            "    o = torch.empty_like(q, dtype=torch.float32)\n"
            "    for bh in range(B * H):\n"
            "        b, h = divmod(bh, H)\n"
            "        attend[(triton.cdiv(S, 16),)](q[b, h], k[b, h], v[b, h], o[b, h], S, D ** -0.5,"
            " D=D, BQ=16, BKV=16)\n"
            "    return o.to(q.dtype)\n")
    target = tmp_path / "attend.py"
    target.write_text(kernel_text + host)
    case = gate.load_case(str(ROOT_DIR / "bench/heldout/attn_causal"))
    return gate.check_file(target, case, tier="interpret", cache=False)


def _bounding_sites(text: str) -> list:
    """The causal-block-skip sites of `text` that bound or split a key loop."""
    from passes.registry import get_pass

    return [s for s in get_pass("causal-block-skip")().sites(_ir(text))
            if s.detail.get("form") in ("bound", "split")]


def test_a_causal_key_loop_is_bounded_at_the_blocks_last_row_found_from_its_mask() -> None:
    from passes.registry import get_pass

    p = get_pass("causal-block-skip")()
    ir = _ir(CAUSAL)
    site = next(s for s in p.sites(ir) if s.detail.get("form") == "bound")
    assert not site.present and site.detail["limit"] == "qi * BQ + BQ"
    done = p.optimize(ir, site)
    assert "range(below_diagonal, tl.minimum(n, qi * BQ + BQ), BKV)" in done.ir.unparse()
    # the clamped loop was split too: the split is what is present (undone first, then the
    # clamp), not a second bound
    after = [s.detail.get("form") for s in p.sites(done.ir) if s.present]
    assert after == ["split"]
    # without the key <= row mask there is nothing to bound
    plain = _ir(CAUSAL.replace("rows[:, None] >= keys[None, :]", "keys[None, :] < n"))
    assert not [s for s in p.sites(plain) if s.detail.get("form") == "bound"]


def _loops(text: str) -> list[ast.For]:
    return [n for n in ast.walk(ast.parse(text)) if isinstance(n, ast.For)]


def test_key_blocks_below_the_diagonal_run_in_a_loop_of_their_own_without_masks() -> None:
    """Bounding the key loop also splits it at the program's first row: the blocks that end at
    or before it are masked for no row, so their loop has neither the causal `tl.where` nor the
    bounds masks of its loads; the diagonal blocks keep the original body, and the blocks run
    in the same order (a whole number of key blocks, none past the loop's bound)."""
    from passes.registry import get_pass

    p = get_pass("causal-block-skip")()
    site = next(s for s in p.sites(_ir(CAUSAL)) if s.detail.get("form") == "bound")
    out = p.optimize(_ir(CAUSAL), site).ir.unparse()
    assert "below_diagonal = tl.minimum(tl.minimum(n, qi * BQ + BQ), qi * BQ) // BKV * BKV" in out
    first, second = _loops(out)
    assert ast.unparse(first.iter) == "range(0, below_diagonal, BKV)"
    assert "tl.where" not in ast.unparse(first) and "mask" not in ast.unparse(first)
    assert "tl.where(rows[:, None] >= keys[None, :]" in ast.unparse(second)
    assert ast.unparse(second).count("mask=keys[:, None] < n") == 2
    # split once: the split kernel offers no second split
    assert not [s for s in p.sites(_ir(out)) if not s.present]


def test_a_loop_that_already_stops_at_the_diagonal_is_split_there() -> None:
    """The bound read from a variable that spells the block's last row another way
    (`(qi + 1) * BQ`) is recognised as present; the split is the one open site."""
    from passes.registry import get_pass

    p = get_pass("causal-block-skip")()
    text = CAUSAL.replace("    for j in range(0, n, BKV):",
                          "    stop = tl.minimum((qi + 1) * BQ, n)\n    for j in range(0, stop, BKV):")
    sites = p.sites(_ir(text))
    assert [s.present for s in sites if s.detail.get("form") == "bound"] == [True]
    [split] = [s for s in sites if not s.present]
    assert split.detail == {"form": "split"}
    out = p.optimize(_ir(text), split).ir.unparse()
    first, second = _loops(out)
    assert "mask" not in ast.unparse(first) and "tl.where" not in ast.unparse(first)
    assert ast.unparse(second.iter) == "range(below_diagonal, stop, BKV)"


def test_a_loop_counting_key_blocks_splits_at_the_block_of_the_first_row() -> None:
    """`for j in range(n_blocks)` with keys `j * BKV + tl.arange(0, BKV)`: the first loop
    counts the blocks that end at or before the program's first row, unmasked."""
    from passes.registry import get_pass

    p = get_pass("causal-block-skip")()
    text = CAUSAL.replace("    for j in range(0, n, BKV):\n        keys = j + tl.arange(0, BKV)",
                          "    n_blocks = tl.cdiv(n, BKV)\n    for j in range(n_blocks):\n"
                          "        keys = j * BKV + tl.arange(0, BKV)")
    assert "range(n_blocks)" in text
    site = next(s for s in p.sites(_ir(text)) if s.detail.get("form") == "bound")
    out = p.optimize(_ir(text), site).ir.unparse()
    assert "below_diagonal = tl.minimum(tl.minimum(n, qi * BQ + BQ), qi * BQ) // BKV" in out
    first, second = _loops(out)
    assert ast.unparse(first.iter) == "range(0, below_diagonal)"
    assert "tl.where" not in ast.unparse(first) and "mask" not in ast.unparse(first)
    assert ast.unparse(second.iter) == "range(below_diagonal, tl.cdiv(tl.minimum(n, qi * BQ + BQ), BKV))"
    # keys that do not start at j * BKV (blocks of another size than the count's): the count
    # of BKV blocks says nothing about them, so no bound is offered
    other = text.replace("keys = j * BKV + tl.arange(0, BKV)", "keys = j * D + tl.arange(0, BKV)")
    assert not _bounding_sites(other)


def test_a_name_the_fold_would_read_as_true_but_is_assigned_again_stops_the_split() -> None:
    """`ok = keys < n` folds to true below the diagonal; `ok` assigned again (to the causal
    test of another row block) is not true there: no split, only the bound."""
    from passes.registry import get_pass

    p = get_pass("causal-block-skip")()
    text = CAUSAL.replace(
        "        x = tl.where(rows[:, None] >= keys[None, :], x, -1.0e30)",
        "        ok = keys[None, :] < n\n"
        "        x = tl.where(ok & (rows[:, None] >= keys[None, :]), x, -1.0e30)\n"
        "        ok = rows[:, None] - 64 < keys[None, :]\n"
        "        x = tl.where(ok, x, -1.0e30)")
    assert text.count("ok = ") == 2
    site = next(s for s in p.sites(_ir(text)) if s.detail.get("form") == "bound")
    out = p.optimize(_ir(text), site).ir.unparse()
    assert "below_diagonal" not in out and "tl.minimum(n, qi * BQ + BQ)" in out


def test_a_mask_the_split_cannot_prove_true_stays_in_the_first_loop() -> None:
    """A sliding window (`rows - W >= keys`) is not implied below the diagonal: the first loop
    keeps that `tl.where` and only drops the bounds masks, which the split does imply."""
    from passes.registry import get_pass

    p = get_pass("causal-block-skip")()
    text = CAUSAL.replace("rows[:, None] >= keys[None, :]",
                          "(rows[:, None] >= keys[None, :]) & (rows[:, None] - 64 < keys[None, :])")
    site = next(s for s in p.sites(_ir(text)) if s.detail.get("form") == "bound")
    first, _ = _loops(p.optimize(_ir(text), site).ir.unparse())
    assert "tl.where(rows[:, None] - 64 < keys[None, :], x, -1e+30)" in ast.unparse(first)
    assert "mask" not in ast.unparse(first)


def test_a_causal_mask_a_flag_can_switch_off_bounds_no_loop() -> None:
    """`(not CAUSAL) or rows >= keys` masks nothing when the flag is off: the key loop must
    not stop at the diagonal then, so no bound site is offered (nor through a name the
    condition is assigned to)."""
    from passes.registry import get_pass

    p = get_pass("causal-block-skip")()
    for cond in ("(CAUSAL == 0) | (rows[:, None] >= keys[None, :])",
                 "not CAUSAL or rows[:, None] >= keys[None, :]"):
        text = CAUSAL.replace("x = tl.where(rows[:, None] >= keys[None, :], x, -1.0e30)",
                              f"keep = {cond}\n        x = tl.where(keep, x, -1.0e30)")
        text = text.replace("BKV: tl.constexpr)", "BKV: tl.constexpr, CAUSAL: tl.constexpr)")
        assert "keep = " in text
        assert not _bounding_sites(text)
    # a mask applied under `if CAUSAL:` is switched off with the flag too
    text = CAUSAL.replace("        x = tl.where(rows[:, None] >= keys[None, :], x, -1.0e30)",
                          "        if CAUSAL:\n"
                          "            x = tl.where(rows[:, None] >= keys[None, :], x, -1.0e30)")
    text = text.replace("BKV: tl.constexpr)", "BKV: tl.constexpr, CAUSAL: tl.constexpr)")
    assert "if CAUSAL:" in text
    assert not _bounding_sites(text)
    # the same mask as a plain conjunction is bounded
    text = CAUSAL.replace("x = tl.where(rows[:, None] >= keys[None, :], x, -1.0e30)",
                          "keep = (keys[None, :] < n) & (rows[:, None] >= keys[None, :])\n"
                          "        x = tl.where(keep, x, -1.0e30)")
    assert [s.detail["form"] for s in p.sites(_ir(text)) if s.detail.get("form")] == ["bound"]


@pytest.mark.parametrize("cond", ["rows[:, None] + 64 >= keys[None, :]",
                                  "rows[:, None] >= keys[None, :] - 64"])
def test_a_mask_that_reaches_past_the_rows_block_bounds_no_loop(cond: str) -> None:
    """Keys up to `rows + 64` are kept: the loop may not stop at the block's last row."""
    text = CAUSAL.replace("rows[:, None] >= keys[None, :]", cond)
    assert cond in text
    assert not _bounding_sites(text)


MASK = "x = tl.where(rows[:, None] >= keys[None, :], x, -1.0e30)"


@pytest.mark.parametrize("mask", [
    "x = tl.where(rows[:, None] >= keys[None, :], -1.0e30, x)",
    "x = tl.where(keys[None, :] <= rows[:, None], float('-inf'), x)",
    "x = tl.where(rows[:, None] >= keys[None, :], x, 0.0)",
    "x = tl.where(keys[None, :] > rows[:, None], x, -1.0e30)",
])
def test_a_mask_that_keeps_the_keys_past_the_diagonal_or_zeroes_a_score_bounds_no_loop(
        mask: str) -> None:
    """Which side of a `tl.where` a comparison selects decides what it masks: `tl.where(past,
    -inf, x)` drops the keys up to the diagonal and keeps the ones after it, and a score set to
    zero before the exponential still weighs exp(0 - m). Neither may stop the loop at the
    diagonal (each once did)."""
    text = CAUSAL.replace(MASK, mask)
    assert mask in text
    assert not _bounding_sites(text)


@pytest.mark.parametrize("mask", [
    "x = x + tl.where(rows[:, None] >= keys[None, :], 0, -1.0e6)",
    "x = x + tl.where(rows[:, None] >= keys[None, :], 0.0, float('-inf'))",
    "future = (keys[None, :] > rows[:, None]) | (keys[None, :] >= n)\n"
    "        x = tl.where(future, float('-inf'), x)",
])
def test_an_additive_mask_and_a_mask_of_what_to_drop_bound_the_loop(tmp_path: Path,
                                                                     mask: str) -> None:
    """The additive form (`x + tl.where(keep, 0, -1e6)`) and the dual form, a condition of
    what to drop joined by `|` into the first value of a `tl.where`, bound the key loop like
    `tl.where(keep, x, -inf)`; the bounded kernel matches the reference in the interpreter."""
    from passes.registry import get_pass

    text = CAUSAL.replace(MASK, mask)
    assert mask.splitlines()[0] in text
    p = get_pass("causal-block-skip")()
    ir = _ir(text)
    site = next(s for s in p.sites(ir) if s.detail.get("form") == "bound")
    bounded = p.optimize(ir, site).ir.unparse()
    assert "tl.minimum(n, qi * BQ + BQ)" in bounded
    verdict = _causal_in_interpreter(bounded, tmp_path)
    assert verdict.ok, verdict.reason


@pytest.mark.parametrize("mask", [
    "future = (keys[None, :] > rows[:, None]) | (keys[None, :] >= n)\n"
    "        x = tl.where(future, float('-inf'), x)",
    "x = tl.where((rows[:, None] < keys[None, :]) | (n <= keys[None, :]), -1.0e30, x)",
])
def test_a_mask_of_what_to_drop_is_folded_out_of_the_loop_below_the_diagonal(mask: str) -> None:
    """Below the program's first row no key is past a row nor at or past the loop's bound: a
    condition of what to drop is false there, so the first loop of the split has neither its
    `tl.where` nor its name, and the diagonal blocks keep both."""
    from passes.registry import get_pass

    text = CAUSAL.replace(MASK, mask)
    p = get_pass("causal-block-skip")()
    site = next(s for s in p.sites(_ir(text)) if s.detail.get("form") == "bound")
    first, second = _loops(p.optimize(_ir(text), site).ir.unparse())
    assert "tl.where" not in ast.unparse(first) and "future" not in ast.unparse(first)
    assert "mask" not in ast.unparse(first)
    assert "tl.where" in ast.unparse(second)
    # a term the split does not make false (a band: keys 64 rows or more behind) stays in
    # the first loop, the causal term goes
    band = CAUSAL.replace(MASK, "x = tl.where((keys[None, :] > rows[:, None]) | "
                                "(rows[:, None] - keys[None, :] >= 64), -1.0e30, x)")
    site = next(s for s in p.sites(_ir(band)) if s.detail.get("form") == "bound")
    first, _ = _loops(p.optimize(_ir(band), site).ir.unparse())
    assert "x = tl.where(rows[:, None] - keys[None, :] >= 64, -1e+30, x)" in ast.unparse(first)


def test_a_banded_mask_starts_the_key_loop_at_the_band(tmp_path: Path) -> None:
    """Sliding-window attention keeps a key when `keys <= rows` and `rows - keys < window`: no
    key below `row base - window + 1` is kept for any row of the program, so the rewrite that
    stops the loop at the diagonal also starts its first loop at the band (and the result
    matches the reference in the interpreter). A loop that bumps a pointer it loads through
    (`kp += BK * D`) cannot start later: it keeps its start."""
    import gate
    from passes.registry import get_pass

    folder = ROOT_DIR / "bench/styles/attn_window"
    text = (folder / "window_attn.py").read_text()
    p = get_pass("causal-block-skip")()

    def bounded(src: str) -> str:
        ir = _ir(src)
        site = next(s for s in p.sites(ir) if s.detail.get("form") == "bound")
        return p.optimize(ir, site).ir.unparse()

    out = bounded(text)
    assert "for start in range(tl.maximum(qb * BQ - window + 1, 0) // BK * BK, below_diagonal" in out
    target = tmp_path / "banded.py"
    target.write_text(out)
    verdict = gate.check_file(target, gate.load_case(str(folder)), tier="interpret", cache=False)
    assert verdict.ok, verdict.reason
    loop = ("    for start in range(0, S, BK):\n        keys = start + tl.arange(0, BK)\n"
            "        k = tl.load(K + base + keys[:, None] * D + cols[None, :], mask=keys[:, None] < S,"
            " other=0.0)")
    moved = ("    kp = K + base + tl.arange(0, BK)[:, None] * D + cols[None, :]\n"
             "    for start in range(0, S, BK):\n        keys = start + tl.arange(0, BK)\n"
             "        k = tl.load(kp, mask=keys[:, None] < S, other=0.0)\n        kp += BK * D")
    assert loop in text
    out = bounded(text.replace(loop, moved))
    assert "for start in range(0, below_diagonal, BK)" in out
    # the band written other ways gives the same first key (base - window + 1)
    band = "(rows[:, None] - keys[None, :] < window)"
    assert band in text
    for other in ("(keys[None, :] > rows[:, None] - window)",
                  "(keys[None, :] + window > rows[:, None])",
                  "(rows[:, None] - keys[None, :] <= window - 1)"):
        out = bounded(text.replace(band, other))
        first = next(l for l in out.splitlines() if "for start in range(" in l)
        assert first.replace(" ", "").startswith("forstartinrange(tl.maximum(qb*BQ-")
        assert "window+1,0)" in first.replace(" ", "") or "(-1+window),0)" in first.replace(" ", "")


@pytest.mark.parametrize("mask,bounds", [
    ("x = tl.where(~(rows[:, None] >= keys[None, :]), -1.0e30, x)", True),
    ("x = tl.where(~(keys[None, :] > rows[:, None]), x, -1.0e30)", True),
    ("keep = ~((keys[None, :] > rows[:, None]) | (keys[None, :] >= n))\n"
     "        x = tl.where(keep, x, -1.0e30)", True),
    # the negations that keep the keys past the diagonal bound nothing
    ("x = tl.where(~(rows[:, None] >= keys[None, :]), x, -1.0e30)", False),
    ("x = tl.where(~(keys[None, :] > rows[:, None]), -1.0e30, x)", False),
])
def test_a_negated_mask_reads_as_its_dual(tmp_path: Path, mask: str, bounds: bool) -> None:
    """`~keep` is a condition of what to drop and `~drop` one of what to keep: the negated
    forms of the causal mask bound and split the key loop (the first loop without any
    `tl.where`, and the kernel matches the reference in the interpreter), and a negation that
    keeps the keys past the diagonal bounds nothing."""
    from passes.registry import get_pass

    text = CAUSAL.replace(MASK, mask)
    assert mask.splitlines()[0] in text
    p = get_pass("causal-block-skip")()
    sites = [s for s in p.sites(_ir(text)) if s.detail.get("form") == "bound"]
    assert bool(sites) is bounds
    if not bounds:
        return
    out = p.optimize(_ir(text), sites[0]).ir.unparse()
    first, second = _loops(out)
    assert "tl.where" not in ast.unparse(first) and "tl.where" in ast.unparse(second)
    verdict = _causal_in_interpreter(out, tmp_path)
    assert verdict.ok, verdict.reason


def test_a_band_written_as_what_to_drop_starts_the_key_loop_at_the_band(tmp_path: Path) -> None:
    """The sliding window as a condition of what to drop (`keys > rows`, `rows - keys >=
    window` or past the end, joined by `|` into `tl.where(drop, -inf, s)`) keeps the negation
    of the band term: the first loop starts where the kept band does, as for the mask of what
    to keep, loses the causal and bounds terms, keeps the band's, and the kernel matches the
    reference in the interpreter."""
    import gate
    from passes.registry import get_pass

    folder = ROOT_DIR / "bench/styles/attn_window"
    keep = ("ok = (keys[None, :] <= rows[:, None]) & (rows[:, None] - keys[None, :] < window)"
            " & (keys[None, :] < S)\n        s = tl.where(ok, s, float(\"-inf\"))")
    drop = ("drop = (keys[None, :] > rows[:, None]) | (rows[:, None] - keys[None, :] >= window)"
            " | (keys[None, :] >= S)\n        s = tl.where(drop, float(\"-inf\"), s)")
    text = (folder / "window_attn.py").read_text()
    assert keep in text
    ir = _ir(text.replace(keep, drop))
    p = get_pass("causal-block-skip")()
    site = next(s for s in p.sites(ir) if s.detail.get("form") == "bound")
    out = p.optimize(ir, site).ir.unparse()
    first, _ = _loops(out)
    assert ast.unparse(first.iter).replace(" ", "") == \
        "range(tl.maximum(qb*BQ-window+1,0)//BK*BK,below_diagonal,BK)"
    assert "drop = rows[:, None] - keys[None, :] >= window\n" in ast.unparse(first)
    assert "tl.where(drop, float('-inf'), s)" in ast.unparse(first)
    target = tmp_path / "banded_drop.py"
    target.write_text(out)
    verdict = gate.check_file(target, gate.load_case(str(folder)), tier="interpret", cache=False)
    assert verdict.ok, verdict.reason


@pytest.mark.parametrize("case_dir,start_file", [("attn_causal", "attn_start.py"),
                                                  ("attn_gqa", "gqa_start.py")])
def test_the_split_attention_kernel_matches_the_reference_in_the_interpreter(
        tmp_path: Path, case_dir: str, start_file: str) -> None:
    import gate
    from passes.registry import get_pass

    case = ROOT_DIR / "bench/heldout" / case_dir
    start = kir.parse_file(case / start_file)
    p = get_pass("causal-block-skip")()
    site = next(s for s in p.sites(start) if s.detail.get("form") == "bound")
    target = tmp_path / "attn_split.py"
    target.write_text(p.optimize(start, site).ir.unparse())
    assert "below_diagonal" in target.read_text()
    verdict = gate.check_file(target, gate.load_case(str(case)), tier="interpret", cache=False)
    assert verdict.ok, verdict.reason


# A per-head product: `H` only splits the program id, `D` is the whole head dimension (loaded
# unmasked); the loop is split into two independent dots; the K offset is advanced by `+=`.
HEADS = '''
import torch, triton
import triton.language as tl

@triton.jit
def heads(a, b, c, S, K, BM: tl.constexpr, BK: tl.constexpr, H: tl.constexpr, D: tl.constexpr):
    pm = tl.program_id(0)
    bh = tl.program_id(1)
    hb = (bh // H) * H + bh % H
    rm = pm * BM + tl.arange(0, BM)
    rd = tl.arange(0, D)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, D), dtype=tl.float32)
    off = 0
    for _ in range(0, tl.cdiv(K, 2 * BK)):
        x = tl.load(a + hb * S * K + rm[:, None] * K + (off + rk)[None, :],
                    mask=(rm[:, None] < S) & ((off + rk)[None, :] < K), other=0.0)
        y = tl.load(b + (off + rk)[:, None] * D + rd[None, :], mask=(off + rk)[:, None] < K,
                    other=0.0)
        acc += tl.dot(x, y)
        x2 = tl.load(a + hb * S * K + rm[:, None] * K + (off + BK + rk)[None, :],
                     mask=(rm[:, None] < S) & ((off + BK + rk)[None, :] < K), other=0.0)
        y2 = tl.load(b + (off + BK + rk)[:, None] * D + rd[None, :],
                     mask=(off + BK + rk)[:, None] < K, other=0.0)
        acc += tl.dot(x2, y2)
        off += 2 * BK
    tl.store(c + hb * S * D + rm[:, None] * D + rd[None, :], acc.to(tl.float16),
             mask=rm[:, None] < S)

def run(a, b):
    B, H, S, K = a.shape
    c = torch.empty((B, H, S, 32), device=a.device, dtype=a.dtype)
    heads[(triton.cdiv(S, 32), B * 4)](a, b, c, S, K, BM=32, BK=32, H=4, D=32)
    return c
'''


def test_a_head_count_and_a_whole_head_dimension_are_never_swept() -> None:
    cfg = joint_config(_ir(HEADS))["heads"]
    # H splits the program id but is no clamped group size: no role; D has no block of it
    assert {p.name: (p.role, p.value) for p in cfg.params} == {
        "BM": ("m", 32), "D": ("n", None), "BK": ("k", 32)}
    carrier = {"config": {"x": {"tiles": {"m": 128, "n": 64, "k": 64, "group": 8},
                                "num_warps": 8, "num_stages": 3, "dot": True}}}
    [(_, new_ir, fitted)] = config_candidates(carrier, _ir(HEADS))
    assert all(set(c) == {"BM", "BK", "num_warps", "num_stages"} for c in fitted)
    assert "H=4, D=32" in new_ir.unparse()


def test_two_independent_dots_are_not_a_chained_product() -> None:
    assert operator_signature(_ir(HEADS)) == {"dot-loop"}
    # attention's P @ V reads the softmax of Q @ K
    attn = HEADS.replace("acc += tl.dot(x2, y2)", "acc += tl.dot(tl.exp(tl.dot(x, y)), y2)")
    assert "two-dots" in operator_signature(_ir(attn))


def test_a_masked_row_block_is_never_shrunk() -> None:
    fixed = ROWSUM.replace("triton.next_power_of_2(x.shape[1])", "1024")
    cfg = joint_config(_ir(fixed))["rowsum"]
    assert cfg.by_role() == {"vec": 1024}
    # one program covers the row: a smaller block would drop its tail, a larger one is masked
    fitted = fit_configs(cfg, [{"vec": 512, "num_warps": 8}, {"vec": 2048}])
    assert [c["BLOCK"] for c in fitted] == [1024, 2048]


def test_a_launch_through_a_dict_is_refused_with_the_line_that_hides_it() -> None:
    text = MM_A.replace("def run(a, b):", "KERNELS = {'mm': mm}\n\ndef run(a, b):").replace(
        "    mm[", "    KERNELS['mm'][")
    assert "KERNELS['mm'][" in text
    made = sweep_edit(_ir(text), "mm", [{"m": 64}])
    assert not isinstance(made, tuple)
    assert "cannot follow" in made.reason and "line" in made.reason


MM_HOOKED = MM_A.replace("@triton.jit", '''def _sized(nargs):
    nargs["seen"] = nargs["BM"]

def _keep(configs, named_args, **kw):
    return configs

@triton.autotune(configs=[
    triton.Config({"BM": 32, "BN": 32, "BK": 32}, num_warps=4, num_stages=2, pre_hook=_sized),
    triton.Config({"BM": 64, "BN": 32, "BK": 32}, num_warps=4, pre_hook=_sized, num_stages=3),
][:1], key=["M", "N"], prune_configs_by={"early_config_prune": _keep})
@triton.jit''')


def test_a_sweep_keeps_what_the_author_wrote_beside_the_configurations() -> None:
    """Replacing an autotune decorator's configurations keeps its cache key, its pruning and
    the pre_hook every configuration shares (it may size host-built descriptors for the tile)."""
    text = MM_HOOKED
    made = sweep_edit(_ir(text), "mm", [{"m": 64, "n": 128, "k": 32}, {"m": 128, "n": 64, "k": 32}])
    assert not hasattr(made, "reason"), made
    out = apply_byte_edits(text, made[0])
    decorator = out[out.index("@triton.autotune"):out.index("@triton.jit")]
    assert decorator.count("pre_hook=_sized") == 2, decorator
    assert 'key=["M", "N"]' in decorator
    assert 'prune_configs_by={"early_config_prune": _keep}' in decorator
    compile(out, "swept", "exec")


IMPLICIT_GEMM = '''
import torch, triton
import triton.language as tl

@triton.jit
def taps(x, w, y, P, C, F, KH: tl.constexpr, KW: tl.constexpr,
         TP: tl.constexpr, TF: tl.constexpr, TC: tl.constexpr):
    i = tl.program_id(0)
    j = tl.program_id(1)
    rows = i * TP + tl.arange(0, TP)
    cols = j * TF + tl.arange(0, TF)
    lanes = tl.arange(0, TC)
    acc = tl.zeros((TP, TF), dtype=tl.float32)
    nc = tl.cdiv(C, TC)
    for t in range(KH * KW * nc):
        tap = t // nc
        cb = t % nc
        kh = tap // KW
        kw = tap - kh * KW
        ch = cb * TC + lanes
        a = tl.load(x + (rows[:, None] + kh * KW + kw) * C + ch[None, :],
                    mask=(rows[:, None] < P) & (ch[None, :] < C), other=0.0)
        b = tl.load(w + (tap * C + ch[:, None]) * F + cols[None, :],
                    mask=(ch[:, None] < C) & (cols[None, :] < F), other=0.0)
        acc = tl.dot(a, b, acc)
    tl.store(y + rows[:, None] * F + cols[None, :], acc, mask=(rows[:, None] < P) & (cols[None, :] < F))
'''


def test_a_reduction_block_stepped_through_a_value_of_the_trip_is_the_k_tile() -> None:
    """A K loop over taps x channel blocks advances the channel block by `(t % nc) * TC`, not
    by a loop step: the block that bounds the trip count and sizes the operands' shared axis is
    still the k tile. The filter width, which scales a trip value (`kh * KW`) but sizes no
    block, gets no role."""
    import ast as _ast

    from passes.triton.roles import tile_roles

    kernel = next(n for n in _ast.parse(IMPLICIT_GEMM).body if isinstance(n, _ast.FunctionDef))
    assert tile_roles(kernel) == {"TP": "m", "TF": "n", "TC": "k"}


def test_a_persistent_loop_over_program_ids_keeps_the_group_role() -> None:
    # persistent-grid writes `for tile in range(tl.program_id(0), tiles, tl.num_programs(0))`:
    # the program index read inline, not through a name, still makes the loop walk programs
    from passes import get_pass

    ir = _ir(MM_A)
    for name in ("grouped-ordering", "persistent-grid"):
        p = get_pass(name)()
        ir = p.optimize(ir, next(s for s in p.sites(ir) if not s.present)).ir
    assert "tl.num_programs(0)" in ir.text
    assert joint_config(ir)["mm"].by_role().get("group") == 8


# The same launch with its tiles held by a factory's parameters, and by a partial's keywords.
MM_FACTORY = MM_A.replace("def run(a, b):", "def make(tm=32, tn=32, tk=32):\n    def run(a, b):").replace(
    "\n    M, K = a.shape\n    N = b.shape[1]\n    c = torch.empty((M, N), device=a.device, dtype=a.dtype)\n"
    "    tm, tn = 32, 32\n", "\n        M, K = a.shape\n        N = b.shape[1]\n"
    "        c = torch.empty((M, N), device=a.device, dtype=a.dtype)\n").replace(
    "    mm[(triton.cdiv(M, tm)", "        mm[(triton.cdiv(M, tm)").replace(
    "BM=tm, BN=tn, BK=32)\n    return c\n", "BM=tm, BN=tn, BK=tk)\n        return c\n    return run\n\n\nrun = make()\n")
MM_PARTIAL = MM_A.replace("def run(a, b):", "def _run(a, b, tm, tn):").replace(
    "    tm, tn = 32, 32\n", "").replace(
    "    return c\n", "    return c\n\n\nrun = functools.partial(_run, tm=64, tn=16)\n").replace(
    "import torch, triton", "import functools\nimport torch, triton")


@pytest.mark.parametrize("text,tiles", [
    (MM_FACTORY, {"m": 32, "n": 32, "k": 32}),
    (MM_PARTIAL, {"m": 64, "n": 16, "k": 32}),
])
def test_host_values_are_read_through_parameters_their_callers_fill(text: str, tiles: dict) -> None:
    assert text != MM_A
    compile(text, "<mm>", "exec")
    assert joint_config(_ir(text))["mm"].by_role() == tiles


def test_a_tile_the_host_reads_beyond_the_launch_is_pinned_and_the_rest_swept() -> None:
    # `tm` also sizes a host check: the sweep keeps BM at 32 and tunes BN, BK, warps and stages
    text = MM_A.replace("    tm, tn = 32, 32\n", "    tm, tn = 32, 32\n    assert M % tm == 0\n")
    assert text != MM_A
    made = sweep_edit(_ir(text), "mm", [{"m": 128, "n": 256, "k": 64, "num_warps": 8, "num_stages": 3},
                                        {"m": 64, "n": 64, "k": 32, "num_warps": 4, "num_stages": 4}])
    assert not hasattr(made, "reason"), made
    edits, fitted = made
    assert [f.get("BM") for f in fitted] == [None, None]
    assert [(f["BN"], f["BK"], f["num_warps"]) for f in fitted] == [(256, 64, 8), (64, 32, 4)]
    out = apply_byte_edits(text, edits)
    assert "BM=tm" in out and "BN=tn" not in out
    assert 'meta["BN"]' in out and "triton.cdiv(M, tm)" in out
    compile(out, "mm.py", "exec")


def test_one_host_value_passed_to_several_tiles_is_not_a_reuse_of_it() -> None:
    # one BLOCK sizes the rows, columns and reduction step: untied, the launch passes
    # BLOCK_M=BLOCK, BLOCK_N=BLOCK, BLOCK_K=BLOCK; each tile's argument reading BLOCK is part of
    # the launch, not a host use that would pin the others
    from pathlib import Path

    text = (Path(__file__).resolve().parent.parent / "bench/heldout/bmm/bmm_start.py").read_text()
    carrier = {"config": {"k": {"kernel": "k", "dot": True, "tiles": {"m": 128, "n": 256, "k": 64},
                                "num_warps": 8, "num_stages": 3}}}
    [(name, _, fitted)] = config_candidates(carrier, _ir(text))
    assert fitted[0] == {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "num_warps": 8, "num_stages": 3}


def test_tiles_of_host_built_descriptors_are_swept_through_a_pre_hook() -> None:
    # the host builds TensorDescriptors with the tile sizes as block shapes and a grid lambda
    # reads the host variables: each configuration's pre_hook gives the descriptors its tiles,
    # and the grid reads them from the meta-parameters
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "bench/styles/mm_host_descriptors/mm_hostdesc.py"
    text = path.read_text()
    made = sweep_edit(_ir(text), "desc_matmul", [{"m": 128, "n": 256, "k": 64, "num_warps": 8,
                                                   "num_stages": 3}])
    assert not hasattr(made, "reason"), made
    edits, fitted = made
    assert fitted == [{"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "num_warps": 8, "num_stages": 3}]
    out = apply_byte_edits(text, edits)
    assert 'nargs["a_desc"].block_shape = [nargs["BLOCK_M"], nargs["BLOCK_K"]]' in out
    assert 'nargs["c_desc"].block_shape = [nargs["BLOCK_M"], nargs["BLOCK_N"]]' in out
    assert "pre_hook=_desc_matmul_descriptor_blocks)" in out
    assert 'triton.cdiv(M, meta["BLOCK_M"]), triton.cdiv(N, meta["BLOCK_N"])' in out
    compile(out, "swept.py", "exec")
    # a block shape the hook cannot write (computed) leaves the tile pinned
    odd = text.replace("[BLOCK_M, BLOCK_K]", "[BLOCK_M * 1, BLOCK_K]")
    assert odd != text
    pinned = sweep_edit(_ir(odd), "desc_matmul", [{"m": 128, "n": 256, "k": 64}])
    assert hasattr(pinned, "reason") or all("BLOCK_M" not in f for f in pinned[1])


@pytest.mark.slow
def test_a_swept_kernel_of_host_built_descriptors_computes_the_same() -> None:
    gate = pytest.importorskip("gate")
    from pathlib import Path

    case = Path(__file__).resolve().parent.parent / "bench/styles/mm_host_descriptors"
    text = (case / "mm_hostdesc.py").read_text()
    edits, _ = sweep_edit(_ir(text), "desc_matmul", [{"m": 64, "n": 64, "k": 32},
                                                     {"m": 32, "n": 64, "k": 16}])
    verdict = gate.check(apply_byte_edits(text, edits), "triton", str(case), tier="interpret",
                         cache=False)
    assert verdict.ok, (verdict.stage, verdict.reason)


def test_the_autotune_rule_makes_a_host_grid_follow_the_tiles_it_tunes() -> None:
    # the autotuner picks BM and BN per configuration: a grid still computed from the launch's
    # 32s would cover another output than the kernel writes
    from passes import Applied, get_pass

    text = MM_A.replace("    tm, tn = 32, 32\n", "").replace(
        "triton.cdiv(M, tm), triton.cdiv(N, tn)", "triton.cdiv(M, 32), triton.cdiv(N, 32)").replace(
        "BM=tm, BN=tn", "BM=32, BN=32")
    assert text != MM_A
    p = get_pass("autotune")()
    ir = _ir(text)
    result = p.optimize(ir, next(s for s in p.sites(ir) if not s.present))
    assert isinstance(result, Applied), result
    out = result.ir.unparse()
    assert 'triton.cdiv(M, meta["BM"]), triton.cdiv(N, meta["BN"])' in out
    compile(out, "tuned.py", "exec")


def test_the_autotune_rules_cache_key_is_the_sizes_the_kernel_compares() -> None:
    # sizes named in lower case (`rows`, `cols`, `depth`) are the problem's dimensions too:
    # a key without them would reuse one tuning for every shape
    from passes import Applied, get_pass

    text = MM_A.replace("    tm, tn = 32, 32\n", "").replace(
        "triton.cdiv(M, tm), triton.cdiv(N, tn)", "triton.cdiv(M, 32), triton.cdiv(N, 32)").replace(
        "BM=tm, BN=tn", "BM=32, BN=32")
    kernel = text[text.index("@triton.jit"):text.index("def run")]
    renamed = kernel.replace("M, N, K,", "rows, cols, depth,").replace("< M", "< rows").replace(
        "< N", "< cols").replace("< K", "< depth").replace("range(0, K, BK)", "range(0, depth, BK)")
    text = text.replace(kernel, renamed)
    p = get_pass("autotune")()
    ir = _ir(text)
    result = p.optimize(ir, next(s for s in p.sites(ir) if not s.present))
    assert isinstance(result, Applied), result
    assert "key=['rows', 'cols', 'depth']" in result.ir.unparse()


DEFAULTS_MM = '''
import torch, triton
import triton.language as tl

ROWS_PER_PROGRAM = 32
COLS_PER_PROGRAM = 32


@triton.jit
def mm_defaults(a, b, c, M, N, K, sa, sb, sc,
                BM: tl.constexpr = 32, BN: tl.constexpr = 32, BK: tl.constexpr = 32):
    pm = tl.program_id(0)
    pn = tl.program_id(1)
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        x = tl.load(a + rm[:, None] * sa + (k0 + rk)[None, :], mask=(rm[:, None] < M) & ((k0 + rk)[None, :] < K), other=0.0)
        y = tl.load(b + (k0 + rk)[:, None] * sb + rn[None, :], mask=((k0 + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(x, y)
    tl.store(c + rm[:, None] * sc + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


def run(a, b):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=torch.float32)
    grid = (triton.cdiv(M, ROWS_PER_PROGRAM), triton.cdiv(N, COLS_PER_PROGRAM))
    mm_defaults[grid](a, b, c, M, N, K, a.stride(0), b.stride(0), c.stride(0))
    return c
'''


def test_a_grid_copy_of_tiles_left_as_signature_defaults_follows_the_sweep() -> None:
    # the tiles are never passed: the grid divides by module constants equal to their
    # defaults, and those are what must become the autotuner's values
    made = sweep_edit(_ir(DEFAULTS_MM), "mm_defaults", [{"m": 128, "n": 64, "k": 64}])
    assert not hasattr(made, "reason"), made
    out = apply_byte_edits(DEFAULTS_MM, made[0])
    assert 'grid = lambda meta: (triton.cdiv(M, meta["BM"]), triton.cdiv(N, meta["BN"]))' in out
    compile(out, "tuned.py", "exec")


def test_a_grid_that_divides_by_something_else_than_a_default_tile_holds_the_tile() -> None:
    # the program count along N would not follow BN: BN keeps its default, BM and BK are swept
    text = DEFAULTS_MM.replace("COLS_PER_PROGRAM = 32", "COLS_PER_PROGRAM = 16")
    made = sweep_edit(_ir(text), "mm_defaults", [{"m": 128, "n": 64, "k": 64}])
    assert not hasattr(made, "reason"), made
    assert made[1] == [{"BM": 128, "BK": 64, "num_warps": 4, "num_stages": 3}], made[1]
    assert 'triton.cdiv(N, COLS_PER_PROGRAM))' in apply_byte_edits(text, made[0])


def test_the_configuration_sweep_takes_the_recorded_kernel_sharing_most_roles() -> None:
    from lineage.transfer import best_fit, carrier_fit

    target = joint_config(_ir(DEFAULTS_MM))["mm_defaults"]
    narrow = {"tiles": {"k": 32}, "num_warps": 1, "num_stages": 1, "dot": True}
    wide = {"tiles": {"m": 128, "n": 256, "k": 64}, "num_warps": 8, "num_stages": 3, "dot": True}
    rows = {"tiles": {"vec": 64}, "num_warps": 4, "num_stages": 1, "dot": False}
    assert best_fit([(rows, None), (narrow, None), (wide, None)], target) == (3, (wide, None))
    assert best_fit([(rows, None)], target) == (0, None)
    assert carrier_fit({"config": {"one": narrow}}, _ir(DEFAULTS_MM)) == 1
    assert carrier_fit({"config": {"one": narrow, "two": wide}}, _ir(DEFAULTS_MM)) == 3


# Kernels whose sweeps were unsound or wasted before: each needs what the autotuner's trial runs
# and its other configurations would break.
STYLES = Path(__file__).resolve().parent / "data" / "styles"
ROOT_DIR = Path(__file__).resolve().parent.parent


def _swept(path: Path, kernel: str, configs: list) -> str:
    text = path.read_text()
    made = sweep_edit(_ir(text), kernel, configs)
    assert not hasattr(made, "reason"), made
    out = apply_byte_edits(text, made[0])
    compile(out, path.name, "exec")
    return out


def test_a_tensor_passed_as_input_and_output_is_restored_between_trial_runs() -> None:
    out = _swept(STYLES / "inplace_alias.py", "softmax_inplace", [{"loop": 128}, {"loop": 32}])
    assert "restore_value=['dst']" in out


def test_a_kernel_with_atomics_is_swept_with_its_buffer_restored() -> None:
    out = _swept(ROOT_DIR / "bench/styles/splitk_reset_zero/splitk.py", "splitk_gemm",
                 [{"m": 64, "n": 64, "k": 32}])
    assert "restore_value=['out']" in out and "reset_to_zero" in out
    # the split count has no tile role: every configuration keeps the author's first value
    assert out.count('"SPLITS": 2') == out.count("triton.Config(") and '"SPLITS": 4' not in out


def test_a_literal_tile_that_also_sizes_a_host_buffer_is_pinned() -> None:
    text = (STYLES / "partials_buffer.py").read_text()
    made = sweep_edit(_ir(text), "partial_sumsq", [{"vec": 512, "num_warps": 8}])
    assert not hasattr(made, "reason"), made
    assert all(cfg.get("BLOCK", 256) == 256 for cfg in made[1])
    only_tile = sweep_edit(_ir(text), "partial_sumsq", [{"vec": 512}])
    assert hasattr(only_tile, "reason") and "divides by 256" in only_tile.reason


def test_a_tile_the_kernel_never_bounds_checks_only_shrinks() -> None:
    from passes import Applied, get_pass
    from passes.triton._py import PyModule
    from passes.triton.roles import unchecked_tiles

    text = (STYLES / "nomask_k.py").read_text()
    kernel = next(k for k in PyModule(_ir(text)).kernels() if k.name == "mm_nomask")
    assert unchecked_tiles(kernel) == {"BK"}
    made = sweep_edit(_ir(text), "mm_nomask", [{"m": 128, "n": 128, "k": 64},
                                               {"m": 64, "n": 64, "k": 16}])
    assert [(c["BM"], c["BK"]) for c in made[1]] == [(128, 32), (64, 16)]
    step = get_pass("tile-sizes")()
    ir = _ir(text)
    grow_k = [s for s in step.sites(ir) if not s.present and s.detail["tile"] == "BK"]
    assert grow_k and "never bounds-checks" in step.optimize(ir, grow_k[0]).reason
    grow_m = next(s for s in step.sites(ir) if not s.present and s.detail["tile"] == "BM")
    assert isinstance(step.optimize(ir, grow_m), Applied)


def test_a_program_count_computed_on_the_host_is_written_into_the_grid_it_feeds() -> None:
    # `n_rows` and `n_tiles` hold the program count the grid reads: written into the grid in
    # their place, the sweep makes it read the tuned tiles
    text = DEFAULTS_MM.replace(
        "    grid = (triton.cdiv(M, ROWS_PER_PROGRAM), triton.cdiv(N, COLS_PER_PROGRAM))\n",
        "    n_rows = triton.cdiv(M, ROWS_PER_PROGRAM)\n"
        "    n_tiles = n_rows * triton.cdiv(N, COLS_PER_PROGRAM)\n"
        "    grid = (n_tiles,)\n")
    assert text != DEFAULTS_MM
    made = sweep_edit(_ir(text), "mm_defaults", [{"m": 128, "n": 64, "k": 64}])
    assert not hasattr(made, "reason"), made
    out = apply_byte_edits(text, made[0])
    assert 'grid = lambda meta: (((triton.cdiv(M, meta["BM"])) * triton.cdiv(N, meta["BN"])),)' in out
    assert "n_rows" not in out and "n_tiles" not in out
    compile(out, "tuned.py", "exec")
    # a count the host also reads elsewhere stays; the grid then cannot follow the tiles,
    # which keep their values while the K step is swept
    kept = text.replace("    return c\n", "    assert n_tiles > 0\n    return c\n")
    made = sweep_edit(_ir(kept), "mm_defaults", [{"m": 128, "n": 64, "k": 64}])
    assert not hasattr(made, "reason"), made
    assert made[1] and all("BM" not in c and "BN" not in c and c["BK"] == 64 for c in made[1])
    assert "grid = (n_tiles,)" in apply_byte_edits(kept, made[0])


def test_module_level_constexpr_tiles_become_parameters_that_a_sweep_tunes() -> None:
    from passes.triton.roles import constexpr_globals_lifted

    text = (ROOT_DIR / "bench/styles/mm_global_constexpr/gmm.py").read_text()
    assert joint_config(_ir(text))["gmm_kernel"].by_role() == {}
    lifted = constexpr_globals_lifted(_ir(text))
    assert lifted is not None
    assert joint_config(lifted)["gmm_kernel"].by_role() == {"m": 32, "n": 32, "k": 32}
    made = sweep_edit(lifted, "gmm_kernel", [{"m": 128, "n": 256, "k": 64}])
    assert not hasattr(made, "reason"), made
    out = apply_byte_edits(lifted.unparse(), made[0])
    assert 'triton.cdiv(M, meta["BLOCK_ROWS"])' in out and 'triton.cdiv(N, meta["BLOCK_COLS"])' in out
    compile(out, "tuned.py", "exec")


def test_an_own_sweep_grows_the_block_with_the_warps_to_cover_it() -> None:
    """A memory-bound kernel's author may pick a block far below what the problem wants (a
    128-wide chunk over 4096-wide rows): the own sweep doubles and quadruples every block with
    the warps, beside the single-knob steps; a dot kernel's joint steps respect the register
    bound on its accumulator."""
    from lineage.transfer import MAX_ACC_ELEMENTS, sweep_own
    from passes.triton.roles import KernelConfig, Param

    row = KernelConfig("rows", (Param("CHUNK", "loop", 128),), num_warps=4, num_stages=3)
    pts = sweep_own(row)
    assert {"loop": 256, "num_warps": 8, "num_stages": 3} in pts
    assert {"loop": 512, "num_warps": 16, "num_stages": 3} in pts
    assert pts[0] == {"loop": 128, "num_warps": 4, "num_stages": 3} and len(pts) <= SWEEP_POINTS
    dot = KernelConfig("mm", (Param("BM", "m", 128), Param("BN", "n", 128)), dot=True,
                       num_warps=4, num_stages=3)
    for p in sweep_own(dot, points=32):
        assert p["m"] * p["n"] <= MAX_ACC_ELEMENTS
    assert {"m": 256, "n": 256, "num_warps": 8, "num_stages": 3} not in sweep_own(dot, points=32)


def test_a_dot_tile_swept_with_few_warps_gets_the_warps_that_hold_its_accumulator() -> None:
    """A card whose recorded configuration has only a reduction step and one warp (a
    triangular solve's k=32) fits a matmul by that step; its sweep keeps the matmul's own
    128x256 tile, which one warp would hold as 1024 accumulator registers a thread (ptxas
    spills for minutes; at four warps, 256 a thread, it compiles and spills). The sweep gives
    such a tile the warps to hold it in 128 a thread; row kernels keep theirs."""
    from lineage.transfer import ACC_PER_THREAD, warps_cover
    from passes.triton.roles import KernelConfig, Param

    mm = KernelConfig("mm", (Param("BM", "m", 128), Param("BN", "n", 256), Param("BK", "k", 64)),
                      dot=True, num_warps=8, num_stages=3)
    out = warps_cover([{"k": 32, "num_warps": 1, "num_stages": 1},
                       {"m": 64, "n": 64, "num_warps": 2, "num_stages": 3},
                       {"m": 512, "n": 512, "num_warps": 8, "num_stages": 3}], mm)
    assert out[0] == {"k": 32, "num_warps": 8, "num_stages": 1}
    assert out[1] == {"m": 64, "n": 64, "num_warps": 2, "num_stages": 3}
    assert len(out) == 2  # 512x512 would need 32 warps: left out
    for cfg in out:
        m, n = cfg.get("m", 128), cfg.get("n", 256)
        assert m * n <= 32 * cfg["num_warps"] * ACC_PER_THREAD
    row = KernelConfig("rows", (Param("BLOCK", "loop", 4096),), num_warps=4, num_stages=3)
    assert warps_cover([{"loop": 4096, "num_warps": 1, "num_stages": 3}], row) == \
        [{"loop": 4096, "num_warps": 1, "num_stages": 3}]


def test_a_heavy_kernel_keeps_half_its_warps_and_a_loopless_kernel_its_stages() -> None:
    """The own sweep of a kernel slow to compile (`heavy`: its first run took 10 s or more)
    proposes no quarter of its warps: each thread's share of its blocks, and the code ptxas
    compiles, grows as the warps shrink (a radix select compiled in 28 s at 4 warps and 176 s
    at 1). A light kernel keeps the point (a layer norm was fastest at a quarter of its warps).
    Stages are stepped only where a loop loads."""
    from lineage.optimize import first_run_s
    from lineage.transfer import HEAVY_FIRST_RUN_S, sweep_own
    from passes.triton.roles import KernelConfig, Param

    select = KernelConfig("select", (Param("BLOCK_L", "vec", None),), num_warps=4, num_stages=3,
                          pipelined=False)
    pts = sweep_own(select, heavy=True)
    assert min(p["num_warps"] for p in pts) == 2
    assert {p["num_stages"] for p in pts} == {3}
    assert min(p["num_warps"] for p in sweep_own(select)) == 1
    known = KernelConfig("rows", (Param("BLOCK", "vec", 1024),), num_warps=4, num_stages=3)
    pts = sweep_own(known, points=32)
    assert min(p["num_warps"] for p in pts) == 1
    assert {p["num_stages"] for p in pts} == {2, 3, 4}
    assert first_run_s({"phases": {"correctness": 28.7}}) >= HEAVY_FIRST_RUN_S
    assert first_run_s({"phases": {"spawn": 1.0}}) == 0.0 and first_run_s({}) == 0.0


def test_pipelined_is_read_from_the_loops_that_load() -> None:
    from passes.triton.roles import joint_config

    looped = '''import triton
import triton.language as tl


@triton.jit
def _row_sum(x_ptr, n, BLOCK: tl.constexpr):
    acc = tl.zeros((BLOCK,), tl.float32)
    for start in tl.range(0, n, BLOCK):
        acc += tl.load(x_ptr + start + tl.arange(0, BLOCK), mask=start + tl.arange(0, BLOCK) < n)
    return tl.sum(acc)


@triton.jit
def through_helper(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    tl.store(y_ptr, _row_sum(x_ptr, n, BLOCK))


@triton.jit
def _rows(x_ptr, start, BLOCK: tl.constexpr):
    return tl.load(x_ptr + start + tl.arange(0, BLOCK))


@triton.jit
def loads_through_a_helper(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    acc = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, n, BLOCK):
        acc += _rows(x_ptr, start, BLOCK)
    tl.store(y_ptr + tl.arange(0, BLOCK), acc)


@triton.jit
def unrolled(x_ptr, y_ptr, BLOCK: tl.constexpr, PASSES: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, BLOCK))
    for _ in tl.static_range(PASSES):
        x = x * 2 + tl.load(y_ptr + tl.arange(0, BLOCK))
    tl.store(y_ptr + tl.arange(0, BLOCK), x)


@triton.jit
def staged_by_its_loop(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    acc = tl.zeros((BLOCK,), tl.float32)
    for start in tl.range(0, n, BLOCK, num_stages=2):
        acc += tl.load(x_ptr + start + tl.arange(0, BLOCK))
    tl.store(y_ptr + tl.arange(0, BLOCK), acc)
'''
    found = joint_config(_ir(looped))
    assert found["through_helper"].pipelined
    assert found["_row_sum"].pipelined
    assert found["loads_through_a_helper"].pipelined
    assert not found["unrolled"].pipelined
    # the loop sets its own depth: the launch's num_stages does not change it
    assert not found["staged_by_its_loop"].pipelined


def test_a_dot_loops_own_sweep_steps_its_pipeline_before_its_tiles() -> None:
    """A dot loop's pipeline depth pays as often as its tile: its own sweep reaches one stage
    more and one fewer within the points, where a kernel of three tile roles used to spend
    them all on the tiles."""
    from lineage.transfer import sweep_own
    from passes.triton.roles import KernelConfig, Param

    mm = KernelConfig("mm", (Param("BM", "m", 64), Param("BN", "n", 128), Param("BK", "k", 64)),
                      dot=True, num_warps=4, num_stages=4)
    pts = sweep_own(mm)
    assert len(pts) <= SWEEP_POINTS
    assert pts[:2] == [{"m": 64, "n": 128, "k": 64, "num_warps": 4, "num_stages": 4},
                       {"m": 64, "n": 128, "k": 64, "num_warps": 4, "num_stages": 5}]
    assert {"m": 64, "n": 128, "k": 64, "num_warps": 4, "num_stages": 3} in pts
    assert {"m": 128, "n": 128, "k": 64, "num_warps": 4, "num_stages": 4} in pts
    flat = KernelConfig("mm", mm.params, dot=True, num_warps=4, num_stages=4, pipelined=False)
    assert {p["num_stages"] for p in sweep_own(flat, points=32)} == {4}


def test_an_autotuned_kernels_own_configuration_is_what_its_autotuner_picked() -> None:
    """The verdict's picks (kernel -> constexprs, warps, stages) become the kernel's own
    configuration for a sweep around it; a pick naming nothing of the kernel changes nothing;
    the timing keeps the picks through its JSON, from the variant that took longest."""
    from gate.verdict import Timing, VariantTiming
    from lineage.transfer import picked, sweep_own
    from passes.triton.roles import KernelConfig, Param

    mm = KernelConfig("mm", (Param("BM", "m", 128), Param("BN", "n", 256), Param("BK", "k", 64)),
                      autotuned=True, dot=True, num_warps=8, num_stages=3)
    pick = {"BM": 64, "BN": 128, "BK": 64, "num_warps": 4, "num_stages": 4}
    own = picked(mm, pick)
    assert own.by_role() == {"m": 64, "n": 128, "k": 64}
    assert (own.num_warps, own.num_stages) == (4, 4)
    assert sweep_own(own)[:2] == [{"m": 64, "n": 128, "k": 64, "num_warps": 4, "num_stages": 4},
                                  {"m": 64, "n": 128, "k": 64, "num_warps": 4, "num_stages": 5}]
    assert picked(mm, {"OTHER": 16}) == mm and picked(mm, None) == mm
    timing = Timing(0.3, 0.2, (
        VariantTiming("small", 0.1, 0.1, (), (("mm", (("BM", 32), ("num_warps", 2))),)),
        VariantTiming("large", 0.2, 0.1, (), (("mm", tuple(pick.items())),))))
    again = Timing.from_json(timing.to_json())
    assert again.picks() == {"mm": pick}
    assert again.to_json()["variants"][0]["picks"] == {"mm": {"BM": 32, "num_warps": 2}}
    from gate.verdict import picks_of

    assert picks_of({"k": {"BM": "x", "flag": True, "num_warps": 4}, "z": 5, "e": {}}) == \
        (("k", (("num_warps", 4),)),)
    assert picks_of(["not", "a", "mapping"]) == ()


def test_recent_keeps_the_last_answers_and_drops_the_least_recently_used() -> None:
    from passes._recent import Recent

    calls: list[str] = []

    def compute(key: str):
        return lambda: calls.append(key) or key.upper()

    memo: Recent[str] = Recent(2)
    assert memo.get("a", compute("a")) == "A" and memo.get("b", compute("b")) == "B"
    assert memo.get("a", compute("a")) == "A" and calls == ["a", "b"]  # kept; "a" now recent
    memo.get("c", compute("c"))  # drops "b", the least recently used
    assert len(memo) == 2
    memo.get("a", compute("a"))
    memo.get("b", compute("b"))
    assert calls == ["a", "b", "c", "b"]


def test_a_sweep_on_fp32_operands_fits_the_shared_memory_of_a_block() -> None:
    """A recorded 16-bit configuration (128x256x64 at 3 stages, 144 KB of operand tiles)
    needs 288 KB on fp32 operands: on a case whose dtype is fp32 every point of the sweep is
    fitted to the 227 KB an sm_90 block may have (a reduction step of the recorded row bytes
    first, 32 fp32 elements for 64 16-bit ones, then fewer stages), and one that cannot fit
    is left out; on 16-bit operands the recorded
    point stays as it was, and without a known width nothing changes."""
    from lineage.transfer import element_bytes

    recorded = joint_config(_ir(MM_A))["mm"].to_json()
    recorded.update(tiles={"m": 128, "n": 256, "k": 64}, num_warps=8, num_stages=3)
    carrier = {"config": {"mm": recorded}}
    limit = 227 * 1024

    def need(cfg: dict, bytes_: int) -> int:
        return cfg["num_stages"] * (cfg["TILE_ROWS"] * cfg["DEPTH"]
                                    + cfg["DEPTH"] * cfg["TILE_COLS"]) * bytes_

    [(_, _, wide)] = config_candidates(carrier, _ir(MM_B), elem_bytes=element_bytes("fp32"))
    assert wide and all(need(c, 4) <= limit for c in wide)
    assert {"TILE_ROWS": 128, "TILE_COLS": 256, "DEPTH": 32, "num_warps": 8,
            "num_stages": 3} == wide[0]  # the recorded point with 128-byte rows of fp32
    [(_, _, half)] = config_candidates(carrier, _ir(MM_B), elem_bytes=element_bytes("bf16"))
    assert half[0] == {"TILE_ROWS": 128, "TILE_COLS": 256, "DEPTH": 64, "num_warps": 8,
                       "num_stages": 3}
    assert all(need(c, 2) <= limit for c in half)
    [(_, _, unknown)] = config_candidates(carrier, _ir(MM_B))
    assert unknown[0] == half[0] and any(need(c, 4) > limit for c in unknown)
    assert [element_bytes(d) for d in ("fp32", "bfloat16", "torch.float8_e4m3fn", "half", "?")] \
        == [4, 2, 1, 2, None]


AUTOTUNED_MM = '''
import torch
import triton
import triton.language as tl


@triton.autotune(configs=[
    triton.Config({"BM": 128, "BN": 256, "BK": 64}, num_warps=8, num_stages=3),
    triton.Config({"BM": 64, "BN": 128, "BK": 64}, num_warps=4, num_stages=4),
], key=["M", "N", "K"])
@triton.jit
def mm(a, b, c, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        x = tl.load(a + rm[:, None] * K + (k0 + rk)[None, :],
                    mask=(rm[:, None] < M) & ((k0 + rk)[None, :] < K), other=0.0)
        y = tl.load(b + (k0 + rk)[:, None] * N + rn[None, :],
                    mask=((k0 + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(x, y)
    tl.store(c + rm[:, None] * N + rn[None, :], acc.to(c.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


def run(a, b):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    grid = lambda meta: (triton.cdiv(M, meta["BM"]), triton.cdiv(N, meta["BN"]))
    mm[grid](a, b, c, M, N, K)
    return c
'''


def test_a_recorded_sweep_keeps_the_tiles_it_does_not_set_as_the_autotuner_picked_them() -> None:
    """A card whose recorded configuration sets only a reduction step and one warp fits a
    matmul by that step. The roles it does not set stay as the kernel runs them: the tile its
    autotuner picked (64x128), not the first entry of its list (128x256, which the card's one
    warp, lifted to cover its accumulator, would sweep at a spilling 256 registers a thread)."""
    carrier = {"config": {"solve": {"kernel": "solve", "dot": True, "tiles": {"k": 32},
                                    "num_warps": 1, "num_stages": 1}}}
    pick = {"mm": {"BM": 64, "BN": 128, "BK": 64, "num_warps": 4, "num_stages": 4}}
    [(name, _, fitted)] = config_candidates(carrier, _ir(AUTOTUNED_MM), picks=pick)
    assert name == "mm" and fitted
    assert {(c["BM"], c["BN"]) for c in fitted} == {(64, 128)}
    assert all(64 * 128 <= 32 * c["num_warps"] * 128 for c in fitted)
    [(_, _, unpicked)] = config_candidates(carrier, _ir(AUTOTUNED_MM))
    assert {(c["BM"], c["BN"]) for c in unpicked} == {(128, 256)}
    assert all(c["num_warps"] >= 8 for c in unpicked)


TRMM = Path(__file__).resolve().parents[1] / "experts" / "trmm" / "trmm_triton.py"
_TRMM_LOOP = """    for k0 in tl.range(0, tl.minimum(M, (pid_m + 1) * BLOCK_M), BLOCK_K):
        ks = k0 + offs_k
        a = tl.load(a_ptr + rows[:, None] * stride_am + ks[None, :] * stride_ak,
                    mask=(rows[:, None] >= ks[None, :]) & (rows[:, None] < M), other=0.0)
"""
# The same product written split by hand: the blocks below the diagonal without the triangle's
# mask (and without the K bound the clamp makes true), then the diagonal blocks masked.
_TRMM_SPLIT = """    below = tl.minimum(tl.minimum(M, (pid_m + 1) * BLOCK_M), pid_m * BLOCK_M) // BLOCK_K * BLOCK_K
    for k0 in tl.range(0, below, BLOCK_K):
        ks = k0 + offs_k
        a = tl.load(a_ptr + rows[:, None] * stride_am + ks[None, :] * stride_ak, mask=rows[:, None] < M, other=0.0)
        b = tl.load(b_ptr + ks[:, None] * stride_bk + cols[None, :] * stride_bn, mask=cols[None, :] < N, other=0.0)
        acc = tl.dot(a, b, acc)
    for k0 in tl.range(below, tl.minimum(M, (pid_m + 1) * BLOCK_M), BLOCK_K):
        ks = k0 + offs_k
        a = tl.load(a_ptr + rows[:, None] * stride_am + ks[None, :] * stride_ak,
                    mask=(rows[:, None] >= ks[None, :]) & (rows[:, None] < M), other=0.0)
"""


def _trmm_split() -> str:
    text = TRMM.read_text()
    assert _TRMM_LOOP in text
    return text.replace(_TRMM_LOOP, _TRMM_SPLIT)


def test_a_key_loop_split_by_hand_is_merged_back_into_the_clamped_loop() -> None:
    """A split loop (the blocks below the diagonal unmasked, then the diagonal blocks) is
    undone into one clamped, masked loop, and the split of that loop is the hand-written one:
    an expert written split walks back through the split, then the clamp."""
    from passes.registry import get_pass
    from passes.roundtrip import roundtrip
    from passes.base import PassContext

    p = get_pass("causal-block-skip")()
    ir = _ir(_trmm_split())
    [split] = [s for s in p.sites(ir) if s.present]
    assert split.detail == {"form": "split"}
    back = p.deoptimize(ir, split)
    assert back.ok
    text = back.ir.unparse()
    assert "below" not in text and text.count("for k0 in") == 1
    assert "tl.range(0, tl.minimum(M, (pid_m + 1) * BLOCK_M), BLOCK_K)" in text
    # then the clamp is the site, as in the expert written unsplit
    assert [s.detail.get("form") for s in p.sites(back.ir) if s.present] == ["bound"]
    trip = roundtrip(p, ir, split, PassContext())
    assert trip.backward.ok and trip.forward.ok
    # forward writes its own split point's name; the loops are the hand-written ones
    first, second = _loops(trip.forward.ir.unparse())
    hand_first, hand_second = _loops(_trmm_split())
    assert ast.dump(ast.Module(first.body, [])) == ast.dump(ast.Module(hand_first.body, []))
    assert ast.dump(ast.Module(second.body, [])) == ast.dump(ast.Module(hand_second.body, []))


def test_a_split_whose_first_loop_does_more_than_the_folded_body_is_not_merged() -> None:
    """A first loop that is not the second's body with the diagonal's comparisons folded (here
    it scales what it loads) would change the result if merged: no de-optimization."""
    from passes.registry import get_pass

    p = get_pass("causal-block-skip")()
    text = _trmm_split().replace("        acc = tl.dot(a, b, acc)\n    for k0 in tl.range(below",
                                 "        acc = tl.dot(a * 2, b, acc)\n    for k0 in tl.range(below")
    assert text != _trmm_split()
    ir = _ir(text)
    [split] = [s for s in p.sites(ir) if s.present]
    assert not p.deoptimize(ir, split).ok
