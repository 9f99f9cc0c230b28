"""k-major-operands: a tf32 dot operand read N-contiguous is read from a K-contiguous copy.

Before/after on GEMM kernels written in three styles (strides as arguments, hard-coded
row-major indexing, block pointers) and a batched one; the rewritten modules run through the
interpreter against torch, refuse where the operand is K-major or 16-bit, round-trip, and
compile for sm_90."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import kir
from passes.base import Applied, PassContext, Skipped
from passes.registry import get_pass
from passes.roundtrip import normalized, roundtrip
from tests.module_helpers import load_module

STRIDED = '''
import torch
import triton
import triton.language as tl


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                  stride_cm, stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  BLOCK_K: tl.constexpr):
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < K - k * BLOCK_K), other=0.0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < K - k * BLOCK_K) & (offs_n[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def run(a, b):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=torch.float32)
    grid = (triton.cdiv(M, 16), triton.cdiv(N, 16))
    matmul_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                        c.stride(0), c.stride(1), BLOCK_M=16, BLOCK_N=16, BLOCK_K=16)
    return c
'''

# A^T B: both operands read along their non-K axis (x is (K, M), y is (K, N)), indexed by hand.
HARDCODED = '''
import torch
import triton
import triton.language as tl


@triton.jit
def tt_kernel(x, y, out, M, N, K, TM: tl.constexpr, TN: tl.constexpr, TK: tl.constexpr):
    rows = tl.program_id(0) * TM + tl.arange(0, TM)
    cols = tl.program_id(1) * TN + tl.arange(0, TN)
    acc = tl.zeros((TM, TN), dtype=tl.float32)
    for k0 in range(0, K, TK):
        ks = k0 + tl.arange(0, TK)
        xt = tl.load(x + ks[None, :] * M + rows[:, None], mask=(rows[:, None] < M) & (ks[None, :] < K), other=0.0)
        yt = tl.load(y + ks[:, None] * N + cols[None, :], mask=(ks[:, None] < K) & (cols[None, :] < N), other=0.0)
        acc = tl.dot(xt, yt, acc)
    tl.store(out + rows[:, None] * N + cols[None, :], acc, mask=(rows[:, None] < M) & (cols[None, :] < N))


def run(xs, ys):
    K, M = xs.shape
    N = ys.shape[1]
    out = torch.empty((M, N), device=xs.device, dtype=torch.float32)
    tt_kernel[(triton.cdiv(M, 16), triton.cdiv(N, 16))](xs, ys, out, M, N, K, TM=16, TN=16, TK=16)
    return out
'''

BLOCKPTR = '''
import torch
import triton
import triton.language as tl


@triton.jit
def bp_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pm = tl.program_id(0)
    pn = tl.program_id(1)
    a_blk = tl.make_block_ptr(base=a_ptr, shape=(M, K), strides=(K, 1), offsets=(pm * BM, 0),
                              block_shape=(BM, BK), order=(1, 0))
    b_blk = tl.make_block_ptr(base=b_ptr, shape=(K, N), strides=(N, 1), offsets=(0, pn * BN),
                              block_shape=(BK, BN), order=(1, 0))
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for _ in range(0, K, BK):
        a = tl.load(a_blk, boundary_check=(0, 1), padding_option="zero")
        b = tl.load(b_blk, boundary_check=(0, 1), padding_option="zero")
        acc += tl.dot(a, b)
        a_blk = tl.advance(a_blk, (0, BK))
        b_blk = tl.advance(b_blk, (BK, 0))
    c_blk = tl.make_block_ptr(base=c_ptr, shape=(M, N), strides=(N, 1), offsets=(pm * BM, pn * BN),
                              block_shape=(BM, BN), order=(1, 0))
    tl.store(c_blk, acc, boundary_check=(0, 1))


def run(a, b):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=torch.float32)
    bp_kernel[(triton.cdiv(M, 16), triton.cdiv(N, 16))](a, b, c, M, N, K, BM=16, BN=16, BK=16)
    return c
'''

# Batched, indexed by hand: each batch's matrices dense and row-major (z * K * N).
HARDCODED_BATCHED = '''
import torch
import triton
import triton.language as tl


@triton.jit
def hb_kernel(A, B, C, M, N, K, TM: tl.constexpr, TN: tl.constexpr, TK: tl.constexpr):
    z = tl.program_id(2)
    rm = tl.program_id(0) * TM + tl.arange(0, TM)
    rn = tl.program_id(1) * TN + tl.arange(0, TN)
    acc = tl.zeros((TM, TN), dtype=tl.float32)
    for k0 in range(0, K, TK):
        rk = k0 + tl.arange(0, TK)
        a = tl.load(A + z * M * K + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        b = tl.load(B + z * K * N + rk[:, None] * N + rn[None, :], mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    tl.store(C + z * M * N + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


def run(A, B):
    Z, M, K = A.shape
    N = B.shape[2]
    C = torch.empty((Z, M, N), dtype=A.dtype, device=A.device)
    hb_kernel[(triton.cdiv(M, 16), triton.cdiv(N, 16), Z)](A, B, C, M, N, K, TM=16, TN=16, TK=16)
    return C
'''

ROOT = Path(__file__).resolve().parent.parent
# A batched product whose launch spreads each tensor's strides (`*B.stride()`).
BATCHED = (ROOT / "bench/kernelbench/level1/3_Batched_matrix_multiplication.py").read_text()

# Both operands K-major already (B given as (N, K) and transposed in registers).
NT = '''
import torch
import triton
import triton.language as tl


@triton.jit
def nt_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    om = tl.program_id(0) * BM + tl.arange(0, BM)
    on = tl.program_id(1) * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for s in range(0, K, BK):
        k = s + tl.arange(0, BK)
        a = tl.load(a_ptr + om[:, None] * K + k[None, :], mask=(om[:, None] < M) & (k[None, :] < K), other=0.0)
        b = tl.load(b_ptr + on[:, None] * K + k[None, :], mask=(on[:, None] < N) & (k[None, :] < K), other=0.0)
        acc += tl.dot(a, tl.trans(b))
    tl.store(c_ptr + om[:, None] * N + on[None, :], acc, mask=(om[:, None] < M) & (on[None, :] < N))


def run(a, b):
    M, K = a.shape
    N = b.shape[0]
    c = torch.empty((M, N), device=a.device, dtype=torch.float32)
    nt_kernel[(triton.cdiv(M, 16), triton.cdiv(N, 16))](a, b, c, M, N, K, BM=16, BN=16, BK=16)
    return c
'''

PASS = get_pass("k-major-operands")()


def _results(source: str, ctx: PassContext | None = None) -> dict[str, object]:
    """Operand -> the rule's result at its site."""
    ir = kir.parse(source, "triton")
    return {s.detail["operand"]: PASS.optimize(ir, s, ctx) for s in PASS.sites(ir) if not s.present}


def _optimized(source: str) -> str:
    """Every operand the rule takes, made K-major one after the other."""
    ir = kir.parse(source, "triton")
    changed = True
    while changed:
        changed = False
        for site in (s for s in PASS.sites(ir) if not s.present):
            result = PASS.optimize(ir, site)
            if isinstance(result, Applied):
                ir, changed = result.ir, True
                break
    return ir.unparse()


def _inputs(source: str, torch, seed: int):  # noqa: ANN001, ANN202 — torch imported by the caller
    """The source's operands (on the GPU where there is one, else for the interpreter), the
    product they stand for, and the tolerance: tf32 dots on the GPU, fp32 in the interpreter."""
    gen = torch.Generator().manual_seed(seed)
    if source is HARDCODED:  # x is (K, M), y is (K, N): out = x.T @ y
        shapes, reference = ((40, 24), (40, 20)), (lambda x, y: x.T @ y)
    elif source is BATCHED or source is HARDCODED_BATCHED:
        shapes, reference = ((3, 24, 40), (3, 40, 20)), torch.bmm
    else:
        shapes, reference = ((24, 40), (40, 20)), torch.mm
    device = "cuda" if torch.cuda.is_available() else "cpu"
    args = tuple(torch.randn(*shape, generator=gen).to(device) for shape in shapes)
    return args, reference, (1e-2 if device == "cuda" else 2e-3)


@pytest.mark.parametrize("source,taken,kept", [
    (STRIDED, {"b_ptr"}, {"a_ptr"}),
    (HARDCODED, {"x", "y"}, set()),
    (BLOCKPTR, {"b_ptr"}, {"a_ptr"}),
    (BATCHED, {"b"}, {"a"}),
    (HARDCODED_BATCHED, {"B"}, {"A"}),
], ids=["strides-as-args", "hard-coded", "block-pointer", "batched", "hard-coded-batched"])
def test_rule_takes_the_n_contiguous_operand_and_matches_torch(source, taken, kept, tmp_path) -> None:
    torch = pytest.importorskip("torch")
    results = _results(source)
    assert {k for k, r in results.items() if isinstance(r, Applied)} == taken
    assert all("already K-major" in r.reason for k, r in results.items() if k in kept)
    out = _optimized(source)
    assert out.count("_k_major(") == len(taken) + 1  # one copy per operand, and its definition
    if source is BLOCKPTR and _block_pointers_removed():
        pytest.skip("this Triton removed block pointers: the rewrite is checked, not run")
    args, reference, tol = _inputs(source, torch, 0)
    got = load_module(out, tmp_path).run(*args)
    torch.testing.assert_close(got, reference(*args), rtol=tol, atol=tol)


def _block_pointers_removed() -> bool:
    """The installed Triton (3.7 on) keeps `tl.make_block_ptr` only to say it was removed."""
    import triton  # noqa: PLC0415

    major, minor = (int(x) for x in triton.__version__.split(".")[:2])
    return (major, minor) >= (3, 7)


def test_the_copy_is_k_major_and_reads_what_it_copied(tmp_path) -> None:
    torch = pytest.importorskip("torch")
    module = load_module(_optimized(STRIDED), tmp_path)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    x = torch.arange(3 * 5 * 7, dtype=torch.float32, device=device).reshape(3, 5, 7)
    copy = module._k_major(x, 1, 2)
    assert copy.stride(1) == 1 and copy.stride(2) == 5
    assert torch.equal(copy, x)
    assert module._k_major(copy, 1, 2) is copy  # already K-major: no second copy


def test_strides_the_host_passes_leave_the_kernel_alone() -> None:
    out = _optimized(STRIDED)
    kernel = lambda text: text[text.index("def matmul_kernel"):text.index("def run")]  # noqa: E731
    assert kernel(out) == kernel(STRIDED)
    assert "b_kmajor = _k_major(b, 0, 1)" in out
    assert "b_kmajor.stride(0), b_kmajor.stride(1)" in out


def test_block_pointer_order_is_written_k_first() -> None:
    out = _optimized(BLOCKPTR)
    b = out[out.index("b_blk = tl.make_block_ptr"):]
    assert "order=(0, 1)" in b[:b.index("\n    acc")]
    assert "strides=(K, 1)" in out  # the A operand, K-major already, is left as it is


@pytest.mark.parametrize("why,source,ctx", [
    ("already K-major", NT, None),
    ("16-bit", STRIDED.replace("acc += tl.dot(a, b)", "acc += tl.dot(a.to(tl.float16), b.to(tl.float16))"), None),
    ("16-bit", STRIDED, PassContext(facts={"dtype": "float16"})),
    ("full fp32", STRIDED.replace("tl.dot(a, b)", 'tl.dot(a, b, input_precision="ieee")'), None),
    ("also writes", STRIDED.replace("tl.store(c_ptrs, acc", "tl.store(b_ptr + offs_n[None, :], acc"), None),
], ids=["k-major", "cast-fp16", "fp16-case", "ieee", "written"])
def test_refusals_say_why(why, source, ctx) -> None:
    results = _results(source, ctx)
    assert results and all(isinstance(r, Skipped) for r in results.values())
    assert any(why in r.reason for r in results.values())


def test_layout_the_rule_cannot_tell_is_refused() -> None:
    unknown = STRIDED.replace("a.stride(0), a.stride(1), b.stride(0), b.stride(1)", "sa0, sa1, sb0, sb1") \
        .replace("    M, K = a.shape\n", "    M, K = a.shape\n    sa0, sa1, sb0, sb1 = strides(a, b)\n")
    results = _results(unknown)
    assert all(isinstance(r, Skipped) and "cannot tell" in r.reason for r in results.values())


@pytest.mark.parametrize("source", [STRIDED, HARDCODED, BLOCKPTR, BATCHED],
                         ids=["strides-as-args", "hard-coded", "block-pointer", "batched"])
def test_optimize_of_deoptimize_round_trips(source) -> None:
    ir = kir.parse(_optimized(source), "triton")
    present = [s for s in PASS.sites(ir) if s.present]
    assert present
    for site in present:
        trip = roundtrip(PASS, ir, site)
        assert trip.same, getattr(trip.forward, "reason", trip.backward)
    back = PASS.deoptimize(ir, present[0])
    assert isinstance(back, Applied) and ("_k_major(" in back.ir.unparse()) == (len(present) > 1)


def test_deoptimized_kernel_still_matches_torch(tmp_path) -> None:
    torch = pytest.importorskip("torch")
    ir = kir.parse(_optimized(HARDCODED), "triton")
    for _ in range(2):
        site = next(s for s in PASS.sites(ir) if s.present)
        ir = PASS.deoptimize(ir, site).ir
    assert "_k_major" not in ir.unparse()
    args, reference, tol = _inputs(HARDCODED, torch, 1)
    torch.testing.assert_close(load_module(ir.unparse(), tmp_path).run(*args), reference(*args),
                               rtol=tol, atol=tol)


_COMPILE = r"""
import importlib.util, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
spec = importlib.util.spec_from_file_location("k_major_out", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
target = GPUTarget("cuda", 90, 32)
for name, ints, ones, consts in (
        ("square_mm", ["N", "stride_B_n"], ["stride_B_k"], {"BM": 128, "BN": 128, "BK": 32}),
        ("_k_major_copy", ["R", "C", "B1", "s0", "s1", "sr", "P"], ["sc"], {"TILE_R": 64, "TILE_C": 64})):
    jit = getattr(module, name)
    signature = {n: ("*fp32" if n not in ints + ones + list(consts) else "i32") for n in jit.arg_names}
    signature.update({n: "constexpr" for n in [*ones, *consts]})
    constants = {**consts, **{n: 1 for n in ones}}
    attrs = {(jit.arg_names.index(n),): [["tt.divisibility", 16]] for n in jit.arg_names if n not in ones and n not in consts}
    kernel = triton.compile(ASTSource(fn=jit, signature=signature, constexprs=constants, attrs=attrs),
                            target=target, options={"num_warps": 4, "num_stages": 3})
    # a tile read with its first axis fastest: the K-major operand (16-byte vectors along K)
    print(name, "wgmma" in kernel.asm["ptx"], "order = [0, 1]" in kernel.asm["ttgir"])
"""


def test_rule_output_compiles_for_sm90(tmp_path) -> None:
    pytest.importorskip("triton")
    start = (ROOT / "bench/kernelbench/level1/1_Square_matrix_multiplication_.py").read_text()
    out = _optimized(start)
    path = tmp_path / "k_major_out.py"
    path.write_text(out)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(_COMPILE), str(path)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "square_mm True True" in done.stdout  # a wgmma at sm_90 fed along K
    assert "_k_major_copy False" in done.stdout


def test_the_search_offers_the_rule_on_a_kernel_no_lineage_holds(tmp_path) -> None:
    """The optimize loop's frontier holds the rule as a move of its own on an NN fp32 GEMM
    (not on its NT twin); its first candidate is the rule's output under the generic autotune
    list; with an empty library a run gates it and keeps it where it is faster."""
    from lineage.control import autotune_control
    from lineage.graph import Lineage
    from lineage.optimize import _frontier, _Run, _State, _stream, optimize
    from lineage.retrieval import Retriever
    from lineage.skills import Library
    from passes.rewriter import DeterministicRewriter
    from skill_helpers import ScriptedGate

    case = str(ROOT / "tests/data/problems/precision/matmul_rand.py")
    start = (ROOT / "bench/kernelbench/level1/1_Square_matrix_multiplication_.py").read_text()
    run = _Run(None, None, None, Lineage(), "triton", case, "cuda", "device", "x",
               lambda e, d: None, 8, None, (), Retriever([]))
    moves = {}
    for source in (start, NT):
        state = _State(source, kir.parse(source, "triton"), None, 10.0, sid="s:0")
        run.states, run.best = [state], state
        moves[source] = {(o.kind, o.card.pass_name): o for o in _frontier(state, run)}
    assert ("rule", "k-major-operands") in moves[start]
    assert ("rule", "k-major-operands") not in moves[NT]
    first = next(_stream(moves[start][("rule", "k-major-operands")], run))
    assert first.ir.unparse() == autotune_control(_optimized(start))

    target = tmp_path / "square_mm.py"
    target.write_text(start)
    gate = ScriptedGate(ms=lambda s: 4.0 if "_k_major(" in s else 10.0)
    result = optimize(target, case, Library.open(tmp_path / "empty", create=True), tier="device",
                      out=tmp_path / "out", rewriter=DeterministicRewriter(), check_fn=gate,
                      budget_steps=3)
    assert result.best_ms == 4.0
    assert [s.pass_name for s in result.applied] == ["k-major-operands"]


def test_an_operand_passed_as_an_expression_is_copied_from_it(tmp_path) -> None:
    torch = pytest.importorskip("torch")
    source = HARDCODED.replace("(xs, ys, out, M", "(xs, ys.contiguous(), out, M")
    out = _optimized(source)
    assert "ys_kmajor = _k_major(ys.contiguous(), -2, -1)" in out
    ir = kir.parse(out, "triton")
    assert all(roundtrip(PASS, ir, s).same for s in PASS.sites(ir) if s.present)
    args, reference, tol = _inputs(HARDCODED, torch, 2)
    torch.testing.assert_close(load_module(out, tmp_path).run(*args), reference(*args),
                               rtol=tol, atol=tol)


def _with_descriptors(source: str) -> str:
    """The rule's output with tma-descriptors taken on the dot loop's tile loads."""
    tma = get_pass("tma-descriptors")()
    ir = kir.parse(_optimized(source), "triton")
    site = next(s for s in tma.sites(ir) if not s.present and "operands" in s.detail)
    result = tma.optimize(ir, site)
    assert isinstance(result, Applied), result
    return result.ir.unparse()


@pytest.mark.parametrize("source,desc,checked", [
    (STRIDED, "strides=[stride_bn, stride_bk]", "b_kmajor.stride(0) == 1"),
    (BATCHED, "strides=[sbn, sbk]", "*B_kmajor.stride(), *C.stride(),)[10] == 1"),
], ids=["strides-as-args", "batched"])
def test_descriptors_read_the_copy_along_k(source, desc, checked, tmp_path) -> None:
    """The copy is K-contiguous: tma-descriptors reads that from the host source (the copy
    helper's returns), so its descriptor over the copy reads K last and transposes the tile
    back, the launch checks the copy's K stride is 1, and the descriptor path is the one
    taken at run time (interpreter), matching torch."""
    torch = pytest.importorskip("torch")
    text = _with_descriptors(source)
    assert desc in text and "tl.trans(b_desc.load([" in text
    assert checked in text
    module = load_module(text, tmp_path)
    kernel = next(k for k in ("matmul_kernel", "bmm_kernel") if hasattr(module, k))
    real, flags = getattr(module, kernel), []

    class Spy:
        def __getitem__(self, grid):  # noqa: ANN001, ANN204
            def launch(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
                flags.append(kwargs.get("TMA_OK"))
                return real[grid](*args, **kwargs)
            return launch
    setattr(module, kernel, Spy())
    args, reference, tol = _inputs(source, torch, 3)
    torch.testing.assert_close(module.run(*args), reference(*args), rtol=tol, atol=tol)
    assert flags == [True]


_COMPILE_TMA = r"""
import importlib.util, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
spec = importlib.util.spec_from_file_location("k_major_tma", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
jit = module.bmm_kernel
ones = ["sak", "sbk", "scn"]
consts = {"TM": 128, "TN": 128, "TK": 32, "TMA_OK": True}
pointers = ["a", "b", "c"]
signature = {n: "*fp32" if n in pointers else "constexpr" if n in ones or n in consts else "i32"
             for n in jit.arg_names}
constants = {**consts, **{n: 1 for n in ones}}
attrs = {(jit.arg_names.index(n),): [["tt.divisibility", 16]] for n in jit.arg_names
         if signature[n] != "constexpr"}
kernel = triton.compile(ASTSource(fn=jit, signature=signature, constexprs=constants, attrs=attrs),
                        target=GPUTarget("cuda", 90, 32), options={"num_warps": 4, "num_stages": 3})
ptx = kernel.asm["ptx"]
print("wgmma", "wgmma" in ptx, "tma", "cp.async.bulk.tensor" in ptx)
"""


def test_descriptors_over_the_copy_compile_to_wgmma_fed_by_tma(tmp_path) -> None:
    """At sm_90 the batched product, its B operand read from the K-major copy through a
    descriptor, compiles to a wgmma whose operands TMA loads."""
    pytest.importorskip("triton")
    path = tmp_path / "k_major_tma.py"
    path.write_text(_with_descriptors(BATCHED))
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(_COMPILE_TMA), str(path)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "wgmma True tma True" in done.stdout


def test_the_search_takes_the_rule_after_the_plain_sweep(tmp_path) -> None:
    """After the start's plain sweep, the best kernel's launch leaves the tile sizes to its
    autotuner and spreads each tensor's strides (`*B.stride()`): the rule still reads which
    parameter each stride fills (the autotuned ones are not the launch's), so the search
    offers it on the swept kernel and takes it with the next gate."""
    from lineage.moves import plain_sweep, rule_moves
    from lineage.optimize import optimize
    from lineage.skills import Library
    from passes.rewriter import DeterministicRewriter
    from skill_helpers import ScriptedGate

    swept = plain_sweep(kir.parse(BATCHED, "triton")).ir
    assert "bmm_kernel[grid](A, B, C, M, N, K, *A.stride(), *B.stride(), *C.stride())" in swept.unparse()
    assert set(rule_moves(swept)) == {"k-major-operands"}
    target = tmp_path / "bmm.py"
    target.write_text(BATCHED)
    gate = ScriptedGate(ms=lambda s: 3.0 if "_k_major(" in s else 6.0 if "triton.autotune" in s else 10.0)
    result = optimize(target, str(ROOT / "tests/data/problems/precision/matmul_rand.py"),
                      Library.open(tmp_path / "empty", create=True), tier="device",
                      out=tmp_path / "out", rewriter=DeterministicRewriter(), check_fn=gate,
                      budget_steps=2)
    assert [s.pass_name for s in result.applied] == ["autotune", "k-major-operands"]
    assert result.best_ms == 3.0


def test_copy_of_a_ragged_k_starts_each_run_on_128_bytes_and_matches_torch(tmp_path) -> None:
    """A matrix whose K is no multiple of 16 elements (an irregular GEMM) is copied with its
    K runs padded to 128 bytes, read through the copy's strides, and gives torch's product;
    a batched operand's copy stays dense."""
    torch = pytest.importorskip("torch")
    start = (ROOT / "bench/kernelbench/level1/8_Matmul_with_irregular_shapes_.py").read_text()
    module = load_module(_optimized(start), tmp_path)
    a, b = torch.randn(37, 45), torch.randn(45, 29)
    made = module._k_major(b, 0, 1)
    assert made.shape == b.shape and made.stride() == (1, 64)  # 45 fp32 -> a 64-element pitch
    assert torch.equal(made, b)
    batched = module._k_major(torch.randn(3, 45, 29), 1, 2)
    assert batched.stride() == (45 * 29, 1, 45)
    torch.testing.assert_close(module.run(a, b), a @ b, rtol=2e-3, atol=2e-3)
