"""A constexpr serving several roles split per role (`passes.triton.untie`), tiles read through
`self` attributes bound in a constructor, and the swept kernels run in Triton's interpreter
against torch (tiny shapes: the interpreter runs on the CPU)."""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from types import ModuleType

import kir
import pytest
import torch

from lineage.control import apply_byte_edits
from lineage.transfer import config_candidates, untied_for
from passes.triton.roles import joint_config, sweep_edit
from passes.triton.untie import needs_untie, tied_tiles, untie_edit

ROOT = Path(__file__).resolve().parents[1]

# One tile T sizes the rows, the columns and the reduction step; a 1-D grid of row-major tiles.
ONE_TILE = '''
import torch, triton
import triton.language as tl

@triton.jit
def square_tiles(A, B, C, m_size, n_size, k_size, s_am, s_ak, s_bk, s_bn, s_cm, s_cn,
                 T: tl.constexpr):
    pid = tl.program_id(0)
    tiles_n = tl.cdiv(n_size, T)
    row = (pid // tiles_n) * T + tl.arange(0, T)
    col = (pid % tiles_n) * T + tl.arange(0, T)
    d = tl.arange(0, T)
    total = tl.zeros((T, T), dtype=tl.float32)
    for step in tl.range(0, tl.cdiv(k_size, T)):
        kk = step * T + d
        lhs = tl.load(A + row[:, None] * s_am + kk[None, :] * s_ak,
                      mask=(row[:, None] < m_size) & (kk[None, :] < k_size), other=0.0)
        rhs = tl.load(B + kk[:, None] * s_bk + col[None, :] * s_bn,
                      mask=(kk[:, None] < k_size) & (col[None, :] < n_size), other=0.0)
        total = tl.dot(lhs, rhs, total)
    tl.store(C + row[:, None] * s_cm + col[None, :] * s_cn, total.to(C.dtype.element_ty),
             mask=(row[:, None] < m_size) & (col[None, :] < n_size))

def run(a, b):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    t = 16
    square_tiles[(triton.cdiv(M, t) * triton.cdiv(N, t),)](
        a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
        c.stride(0), c.stride(1), T=t, num_warps=2)
    return c
'''

# One block for rows and columns (grouped order, pointers advanced along K), already autotuned,
# its grid read from the meta-parameters.
SHARED_MN = '''
import torch
import triton
import triton.language as tl

@triton.autotune(configs=[triton.Config({"BLOCK": 32, "BK": 16}, num_warps=4)], key=["M", "N", "K"])
@triton.jit
def grouped(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
            stride_cm, stride_cn, BLOCK: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr = 2):
    pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK)
    num_pid_n = tl.cdiv(N, BLOCK)
    num_pid_in_group = GROUP * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP
    group_size_m = min(num_pid_m - first_pid_m, GROUP)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m
    offs_am = (pid_m * BLOCK + tl.arange(0, BLOCK)) % M
    offs_bn = (pid_n * BLOCK + tl.arange(0, BLOCK)) % N
    offs_k = tl.arange(0, BK)
    a_ptrs = a_ptr + (offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak)
    b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)
    accumulator = tl.zeros((BLOCK, BLOCK), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BK, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BK, other=0.0)
        accumulator = tl.dot(a, b, accumulator)
        a_ptrs += BK * stride_ak
        b_ptrs += BK * stride_bk
    offs_cm = pid_m * BLOCK + tl.arange(0, BLOCK)
    offs_cn = pid_n * BLOCK + tl.arange(0, BLOCK)
    c_ptrs = c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
    tl.store(c_ptrs, accumulator.to(c_ptr.dtype.element_ty),
             mask=(offs_cm[:, None] < M) & (offs_cn[None, :] < N))

def run(a, b):
    M, K = a.shape
    K, N = b.shape
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    grid = lambda META: (triton.cdiv(M, META["BLOCK"]) * triton.cdiv(N, META["BLOCK"]),)
    grouped[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                  c.stride(0), c.stride(1))
    return c
'''

# The diagonal blocks of A @ A.T: rows and columns are the same block, truly tied.
GRAM_DIAGONAL = '''
import triton
import triton.language as tl

@triton.jit
def gram_diag(A, G, n, k, s, T: tl.constexpr):
    offs = tl.program_id(0) * T + tl.arange(0, T)
    acc = tl.zeros((T, T), dtype=tl.float32)
    for k0 in range(0, k, T):
        kk = k0 + tl.arange(0, T)
        a = tl.load(A + offs[:, None] * s + kk[None, :], mask=offs[:, None] < n, other=0.0)
        acc += tl.dot(a, tl.trans(a))
    tl.store(G + offs[:, None] * n + offs[None, :], acc)

def run(a, g):
    gram_diag[(triton.cdiv(a.shape[0], 16),)](a, g, a.shape[0], a.shape[1], a.stride(0), T=16)
'''

# Tiles held by a launcher object: a constructor default (a module constant), a literal
# default, a class attribute.
LAUNCHER = '''
import torch
import triton
import triton.language as tl

ROWS = 32


@triton.jit
def proj(x, w, y, M, N, K, sxm, swk, sym, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    r = tl.program_id(0) * BM + tl.arange(0, BM)
    c = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        a = tl.load(x + r[:, None] * sxm + (k0 + rk)[None, :],
                    mask=(r[:, None] < M) & ((k0 + rk)[None, :] < K), other=0.0)
        b = tl.load(w + (k0 + rk)[:, None] * swk + c[None, :],
                    mask=((k0 + rk)[:, None] < K) & (c[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    tl.store(y + r[:, None] * sym + c[None, :], acc.to(y.dtype.element_ty),
             mask=(r[:, None] < M) & (c[None, :] < N))


class Projection:
    cols = 32

    def __init__(self, rows=ROWS, depth=16, warps=2):
        self.rows = rows
        self.depth = depth
        self.warps = warps

    def forward(self, x, w):
        M, K = x.shape
        N = w.shape[1]
        y = torch.empty((M, N), device=x.device, dtype=x.dtype)
        proj[(triton.cdiv(M, self.rows), triton.cdiv(N, self.cols))](
            x, w, y, M, N, K, x.stride(0), w.stride(0), y.stride(0),
            BM=self.rows, BN=self.cols, BK=self.depth, num_warps=self.warps)
        return y


_P = Projection()


def run(a, b):
    return _P.forward(a, b)
'''


def _ir(text: str) -> kir.KernelIR:
    return kir.parse(text, "triton")


def _load(text: str, tmp_path: Path, name: str) -> ModuleType:
    """A fresh module of `text` (a file: @triton.jit reads its source)."""
    path = tmp_path / f"{name}.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(f"_untie_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.double() - ref.double()).norm() / ref.double().norm())


def _swept(text: str, kernel: str, config: dict) -> str:
    """`text` untied where `config` needs it and swept over `config` alone."""
    ir = untied_for(_ir(text), kernel, [config])
    made = sweep_edit(ir, kernel, [config])
    assert not hasattr(made, "reason"), made
    return apply_byte_edits(ir.unparse(), made[0])


def _interpreted() -> None:
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("runs in Triton's interpreter (no GPU)")


# -- untie: roles of each use -----------------------------------------------------------------
def test_a_tile_serving_three_roles_is_split_by_the_role_of_each_use() -> None:
    assert tied_tiles(_ir(ONE_TILE), "square_tiles") == {"T": ("m", "n", "k")}
    made = untie_edit(_ir(ONE_TILE), "square_tiles")
    assert not hasattr(made, "reason"), made
    assert made.names == {"T": {"m": "T_M", "n": "T_N", "k": "T_K"}}
    out = apply_byte_edits(ONE_TILE, made.edits)
    for line in (
        "T_M: tl.constexpr, T_N: tl.constexpr, T_K: tl.constexpr):",
        "tiles_n = tl.cdiv(n_size, T_N)",
        "row = (pid // tiles_n) * T_M + tl.arange(0, T_M)",
        "col = (pid % tiles_n) * T_N + tl.arange(0, T_N)",
        "d = tl.arange(0, T_K)",
        "total = tl.zeros((T_M, T_N), dtype=tl.float32)",
        "for step in tl.range(0, tl.cdiv(k_size, T_K)):",
        "kk = step * T_K + d",
        "T_M=t, T_N=t, T_K=t, num_warps=2)",
    ):
        assert line in out, line
    # the host grid still reads the shared value, which each new constexpr now takes
    assert "(triton.cdiv(M, t) * triton.cdiv(N, t),)" in out
    compile(out, "untied.py", "exec")


def test_fresh_names_do_not_clash_with_the_module() -> None:
    text = ONE_TILE.replace("    t = 16\n", "    t = 16\n    T_M = 0\n")
    made = untie_edit(_ir(text), "square_tiles")
    assert made.names["T"]["m"] not in ("T", "T_M") and made.names["T"]["n"] == "T_N"


def test_a_meta_grid_and_the_config_list_follow_the_untie() -> None:
    assert tied_tiles(_ir(SHARED_MN), "grouped") == {"BLOCK": ("m", "n")}
    made = untie_edit(_ir(SHARED_MN), "grouped")
    assert not hasattr(made, "reason"), made
    out = apply_byte_edits(SHARED_MN, made.edits)
    assert 'triton.Config({"BLOCK_M": 32, "BLOCK_N": 32, "BK": 16}, num_warps=4)' in out
    assert 'triton.cdiv(M, META["BLOCK_M"]) * triton.cdiv(N, META["BLOCK_N"])' in out
    assert "num_pid_m = tl.cdiv(M, BLOCK_M)" in out and "num_pid_n = tl.cdiv(N, BLOCK_N)" in out
    assert "offs_bn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N" in out
    assert "accumulator = tl.zeros((BLOCK_M, BLOCK_N)" in out
    # BK was never tied: untouched
    assert "a_ptrs += BK * stride_ak" in out and "BK_" not in out


def test_an_untie_is_refused_where_a_role_cannot_be_told() -> None:
    made = untie_edit(_ir(GRAM_DIAGONAL), "gram_diag")
    assert hasattr(made, "reason") and "relates its m and n dimensions" in made.reason
    asserted = ONE_TILE.replace("    pid = tl.program_id(0)\n",
                                "    pid = tl.program_id(0)\n    tl.static_assert(T % 16 == 0)\n")
    made = untie_edit(_ir(asserted), "square_tiles")
    assert hasattr(made, "reason") and "tl.static_assert(T % 16 == 0)" in made.reason
    assert "not determined" in made.reason
    named = ONE_TILE.replace("    return c\n", '    print({"T": 1})\n    return c\n')
    made = untie_edit(_ir(named), "square_tiles")
    assert hasattr(made, "reason") and "cannot rewrite" in made.reason


def test_kernels_with_one_tile_per_role_are_not_tied() -> None:
    from tests.test_transfer_roles import MM_A, MM_B

    assert tied_tiles(_ir(MM_A), "mm") == {} and tied_tiles(_ir(MM_B), "matmul_tile") == {}
    assert hasattr(untie_edit(_ir(MM_A), "mm"), "reason")
    assert untied_for(_ir(MM_A), "mm", [{"m": 128, "n": 256, "k": 64}]).text == MM_A


def test_the_untie_waits_for_a_configuration_that_tells_the_roles_apart() -> None:
    ties = {"T": ("m", "n", "k")}
    assert not needs_untie(ties, [{"m": 64, "n": 64, "k": 64, "num_warps": 8}])
    assert needs_untie(ties, [{"m": 64, "n": 64, "k": 64}, {"m": 128, "n": 256, "k": 64}])
    same = untied_for(_ir(ONE_TILE), "square_tiles", [{"m": 32, "n": 32, "k": 32}])
    assert same.text == ONE_TILE


def test_a_carried_configuration_reaches_a_kernel_that_ties_its_roles() -> None:
    recorded = {"tiles": {"m": 128, "n": 256, "k": 64}, "dot": True, "num_warps": 8,
                "num_stages": 3}
    made = config_candidates({"config": {"expert": recorded}}, _ir(ONE_TILE))
    assert len(made) == 1
    _, new_ir, fitted = made[0]
    assert fitted[0] == {"T_M": 128, "T_N": 256, "T_K": 64, "num_warps": 8, "num_stages": 3}
    text = new_ir.unparse()
    assert 'lambda meta: (triton.cdiv(M, meta["T_M"]) * triton.cdiv(N, meta["T_N"]),)' in text
    assert "T_M=t" not in text and "num_warps=2" not in text


BLOCK_POINTERS = '''
import triton
import triton.language as tl

@triton.jit
def bp_mm(a, b, c, M, N, K, sam, sak, sbk, sbn, scm, scn, S: tl.constexpr):
    pm = tl.program_id(0)
    pn = tl.program_id(1)
    ap = tl.make_block_ptr(a, shape=(M, K), strides=(sam, sak), offsets=(pm * S, 0),
                           block_shape=(S, S), order=(1, 0))
    bp = tl.make_block_ptr(b, shape=(K, N), strides=(sbk, sbn), offsets=(0, pn * S),
                           block_shape=(S, S), order=(1, 0))
    acc = tl.zeros((S, S), dtype=tl.float32)
    for _ in range(0, K, S):
        acc += tl.dot(tl.load(ap, boundary_check=(0, 1)), tl.load(bp, boundary_check=(0, 1)))
        ap = tl.advance(ap, (0, S))
        bp = tl.advance(bp, (S, 0))
    cp = tl.make_block_ptr(c, shape=(M, N), strides=(scm, scn), offsets=(pm * S, pn * S),
                           block_shape=(S, S), order=(1, 0))
    tl.store(cp, acc, boundary_check=(0, 1))
'''


def test_block_pointer_uses_take_the_role_of_their_axis() -> None:
    made = untie_edit(_ir(BLOCK_POINTERS), "bp_mm")
    assert not hasattr(made, "reason"), made
    out = apply_byte_edits(BLOCK_POINTERS, made.edits)
    for line in (
        "offsets=(pm * S_M, 0),\n                           block_shape=(S_M, S_K)",
        "offsets=(0, pn * S_N),\n                           block_shape=(S_K, S_N)",
        "for _ in range(0, K, S_K):",
        "ap = tl.advance(ap, (0, S_K))",
        "bp = tl.advance(bp, (S_K, 0))",
        "offsets=(pm * S_M, pn * S_N),\n                           block_shape=(S_M, S_N)",
    ):
        assert line in out, line


# -- tiles behind self attributes -------------------------------------------------------------
def test_tiles_held_by_an_object_are_read_through_its_constructor() -> None:
    cfg = joint_config(_ir(LAUNCHER))["proj"]
    assert cfg.by_role() == {"m": 32, "n": 32, "k": 16} and cfg.num_warps == 2
    built = LAUNCHER.replace("_P = Projection()", "_P = Projection(depth=64)")
    assert joint_config(_ir(built))["proj"].by_role()["k"] == 64
    two = built + "_Q = Projection(depth=32)\n"
    assert "k" not in joint_config(_ir(two))["proj"].by_role()
    rebound = LAUNCHER.replace("        self.warps = warps\n",
                               "        self.warps = warps\n        self.rows += 0\n")
    assert "m" not in joint_config(_ir(rebound))["proj"].by_role()


def test_a_sweep_over_attribute_tiles_drops_them_from_the_launch() -> None:
    made = sweep_edit(_ir(LAUNCHER), "proj", [{"m": 64, "n": 16, "k": 32, "num_warps": 4}])
    assert not hasattr(made, "reason"), made
    out = apply_byte_edits(LAUNCHER, made[0])
    assert 'proj[lambda meta: (triton.cdiv(M, meta["BM"]), triton.cdiv(N, meta["BN"]))](' in out
    assert "BM=self.rows" not in out and "BK=self.depth" not in out
    assert "num_warps=self.warps" not in out
    assert 'triton.Config({"BM": 64, "BN": 16, "BK": 32}, num_warps=4, num_stages=3)' in out
    compile(out, "swept.py", "exec")


@pytest.mark.parametrize("extra,where,tile", [
    ("    def scratch(self, M):\n        return torch.empty(triton.cdiv(M, self.rows))\n",
     "self.rows", "BM"),
    ("", "self.depth", "BK"),
])
def test_an_attribute_tile_read_elsewhere_on_the_host_is_pinned(extra: str, where: str,
                                                                 tile: str) -> None:
    text = LAUNCHER.replace("\n\n_P = Projection()", extra + "\n\n_P = Projection()")
    if not extra:
        text = text.replace("def run(a, b):", "STEP = _P.depth\n\n\ndef run(a, b):")
    made = sweep_edit(_ir(text), "proj", [{"m": 64, "n": 16, "k": 32}])
    assert not hasattr(made, "reason"), made
    edits, fitted = made
    assert all(tile not in f for f in fitted)  # the host's value stays the launch's
    out = apply_byte_edits(text, edits)
    assert f"{tile}={where}" in out
    compile(out, "swept.py", "exec")
    # with nothing else to tune, the sweep is refused with the reason
    alone = sweep_edit(_ir(text), "proj", [{"m" if tile == "BM" else "k": 64}])
    assert hasattr(alone, "reason") and "beyond the launch" in alone.reason and where in alone.reason


# -- the swept kernels compute what they did, in the interpreter -------------------------------
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_the_held_out_bmm_untied_and_swept_matches_torch(tmp_path: Path,
                                                         dtype: torch.dtype) -> None:
    _interpreted()
    start = (ROOT / "bench/heldout/bmm/bmm_start.py").read_text()
    recorded = {"tiles": {"m": 128, "n": 256, "k": 64}, "dot": True, "num_warps": 8,
                "num_stages": 3}
    (name, new_ir, fitted), = config_candidates({"config": {"x": recorded}}, _ir(start))
    assert fitted[0]["num_warps"] == 8 and sorted(fitted[0].values())[-3:] == [64, 128, 256]
    module = _load(new_ir.unparse(), tmp_path, f"bmm_{str(dtype)[-2:]}")
    kernel = getattr(module, name)
    torch.manual_seed(0)
    a = torch.randn(2, 40, 72).to(dtype)
    b = torch.randn(2, 72, 24).to(dtype)
    ref = torch.bmm(a.float(), b.float())
    tol = 5e-3 if dtype == torch.float16 else 1e-4
    # every configuration of the sweep, the expert's 128x256x64 first, computes the product
    for config in list(kernel.configs):
        kernel.configs = [config]
        assert _rel_err(module.run(a, b), ref) <= tol, config


def test_the_held_out_skinny_gemm_swept_through_its_object_matches_torch(tmp_path: Path) -> None:
    _interpreted()
    start = (ROOT / "bench/heldout/mm_skinny/gemm_start.py").read_text()
    for i, (config, dtype) in enumerate([({"m": 64, "n": 16, "k": 32}, torch.float16),
                                         ({"m": 16, "n": 32, "k": 64}, torch.float32)]):
        out = _swept(start, "gemm", config)
        assert 'meta["TILE_M"]' in out and "TILE_M=self.tile_m" not in out
        module = _load(out, tmp_path, f"skinny_{i}")
        torch.manual_seed(i)
        a = torch.randn(72, 40).to(dtype)
        b = torch.randn(40, 24).to(dtype)
        assert _rel_err(module.run(a, b), a.float() @ b.float()) <= 5e-3


@pytest.mark.parametrize("text,kernel,config", [
    (ONE_TILE, "square_tiles", {"m": 32, "n": 16, "k": 64}),
    (SHARED_MN, "grouped", {"m": 16, "n": 32, "k": 16}),
    (LAUNCHER, "proj", {"m": 16, "n": 64, "k": 32}),
])
def test_restyled_kernels_swept_match_torch(tmp_path: Path, text: str, kernel: str,
                                            config: dict) -> None:
    _interpreted()
    out = _swept(text, kernel, config)
    module = _load(out, tmp_path, kernel)
    torch.manual_seed(1)
    a = torch.randn(40, 56).to(torch.float16)
    b = torch.randn(56, 72).to(torch.float16)
    assert _rel_err(module.run(a, b), a.float() @ b.float()) <= 5e-3
