"""reduce-before-contract: a GEMM whose product is only summed over N runs on B summed over N.

Four start kernels written apart (a stored product summed by a second kernel in chunks, with
strides the host passes; the fused form with an atomic add of the tile's row sums; a mean over
a block of rows by a consumer that divides by N itself, B read through a transpose's strides;
a fused mean stored per row) and the benchmark's level2/14 start: each is taken and its output
matches torch under the interpreter. Refusals for a non-linear epilogue, a bias, a product the
host also returns, a consumer that takes a max, partial sums, an unmasked extent. Sums over M
are taken as the mirror. The added reduction compiles for sm_90. The search offers the rule as
a move of its own. The GEMM at N = 1 (M = 1) is a matrix-vector product: its dot is written as
the fp32 products summed over K (tile 1 along the summed extent) under a list of 2-16 rows a
program, each configuration matching torch and compiling for sm_90, at least 64 programs at
1024 rows; a dot the rule keeps takes 16 x 16 tiles; the search's generic-list form keeps the
rule's list."""
from __future__ import annotations

import ast
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

import kir
from passes.base import Applied, Skipped
from passes.registry import get_pass
from passes.triton.reduce_first import GEMV_CONFIGS, UNIT_CONFIGS
from tests.module_helpers import load_module

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).parent / "data" / "reduce_first"
START = ROOT / "bench/kernelbench/level2/14_Gemm_Divide_Sum_Scaling.py"
PASS = get_pass("reduce-before-contract")()


def _apply(source: str):  # noqa: ANN202
    ir = kir.parse(source, "triton")
    sites = [s for s in PASS.sites(ir) if not s.present]
    assert sites, "no open site"
    return [PASS.optimize(ir, s) for s in sites]


def _applied(source: str) -> str:
    results = _apply(source)
    done = [r for r in results if isinstance(r, Applied)]
    assert len(done) == 1, [getattr(r, "reason", r) for r in results]
    return done[0].ir.unparse()


def _refused(source: str) -> str:
    results = _apply(source)
    assert all(isinstance(r, Skipped) for r in results)
    return " | ".join(r.reason for r in results)


def _torch_compute(text: str) -> list[str]:
    """Host code that computes with torch: a sum, a mean or a product (allocations are not)."""
    tree = ast.parse(text)
    jit = {id(n) for f in tree.body if isinstance(f, ast.FunctionDef)
           and any("jit" in ast.unparse(d) for d in f.decorator_list) for n in ast.walk(f)}
    return [ast.unparse(n) for n in ast.walk(tree) if id(n) not in jit and (
        isinstance(n, ast.BinOp) and isinstance(n.op, ast.MatMult)
        or isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
        and n.func.attr in ("sum", "mean", "matmul", "mm", "mv", "einsum"))]


def _cases(torch):  # noqa: ANN001, ANN202
    """name -> (inputs, the reference in float64)."""
    gen = torch.Generator().manual_seed(0)

    def rand(*shape):  # noqa: ANN002, ANN202
        return torch.randn(*shape, generator=gen)

    a, b = rand(24, 40), rand(40, 36)
    x, w = rand(20, 48), rand(28, 48)
    q, p = rand(18, 33), rand(21, 33)
    c, e = rand(17, 24), rand(24, 30)
    xs, ws = rand(12, 40), rand(44, 40)
    at, bc = rand(36, 22), rand(36, 26)
    f64 = torch.float64
    return {
        "stored_strided": ((a, b, 0.75), ((a.to(f64) @ b.to(f64)) * 0.75).sum(1)),
        "fused_atomic": ((x, w, 3.0), ((x.to(f64) @ w.to(f64).T) / 3.0).sum(1)),
        "stored_mean": ((q, p), (q.to(f64) @ p.to(f64).T).mean(1, keepdim=True)),
        "fused_mean_store": ((c, e), (c.to(f64) @ e.to(f64)).mean(1)),
        "stored_colsum": ((at, bc), ((at.to(f64).T @ bc.to(f64)) * 0.25).sum(0)),
        "fused_atomic_over_m": ((x, w, 3.0), (x.to(f64) @ w.to(f64).T).sum(0)),
        "start": ((xs, ws), ((xs.to(f64) @ ws.to(f64).T) / 2).sum(1, keepdim=True) * 1.5),
        # 16-bit operands: the product made without a dot multiplies them in fp32, as the dot did
        "start_fp16": ((xs.half(), ws.half()),
                       ((xs.half().to(f64) @ ws.half().to(f64).T) / 2).sum(1, keepdim=True) * 1.5),
    }


# the fused form summing over M instead: the atomic adds go to the product's columns
OVER_M = ("tl.atomic_add(y + i, tl.sum(total / d, axis=1), mask=i < rows)",
          "tl.atomic_add(y + j, tl.sum(total, axis=0), mask=j < hidden)")


def _source(name: str) -> str:
    if name in ("start", "start_fp16"):
        return START.read_text()
    if name == "fused_atomic_over_m":
        text = (DATA / "fused_atomic.py").read_text()
        assert OVER_M[0] in text
        return text.replace(OVER_M[0], OVER_M[1]).replace(
            "y = torch.zeros((rows,)", "y = torch.zeros((hidden,)")
    return (DATA / f"{name}.py").read_text()


@pytest.mark.parametrize("name", ["stored_strided", "fused_atomic", "stored_mean", "fused_mean_store",
                                  "stored_colsum", "fused_atomic_over_m", "start", "start_fp16"])
def test_the_rule_takes_each_form_and_matches_torch(name: str, tmp_path) -> None:
    torch = pytest.importorskip("torch")
    source = _source(name)
    text = _applied(source)
    inputs, ref = _cases(torch)[name]
    before = load_module(source, tmp_path).run(*inputs)
    torch.testing.assert_close(before.double(), ref, rtol=1e-4, atol=1e-3)
    after = load_module(text, tmp_path)
    tuned = _tuned(after)
    assert len(tuned) == 1 and len(tuned[0].configs) == len(GEMV_CONFIGS)  # the GEMM's own list
    for config in list(tuned[0].configs):  # each alone: the interpreter has no benchmarker
        tuned[0].configs = [config]
        got = after.run(*inputs)
        assert got.shape == before.shape == ref.shape
        # 16-bit operands: the summed operand is a vector of their dtype (fp16's 2^-11 step)
        half = inputs[0].dtype == torch.float16
        torch.testing.assert_close(got.double(), ref, rtol=2e-3 if half else 1e-4, atol=2e-2 if half else 1e-3)
    # the product is made with N = 1 on an operand the added kernel summed over N
    assert "_sum_along(" in text and "@triton.jit\ndef _sum_along_kernel" in text
    assert not _torch_compute(text)


def _tuned(module) -> list:  # noqa: ANN001
    """The module's autotuned kernels."""
    return [v for v in vars(module).values() if hasattr(v, "configs") and hasattr(v, "base_fn")]


def test_the_torch_compute_check_can_fail() -> None:
    assert _torch_compute("def run(x, w):\n    return (x @ w.T).sum(1)\n") == ["(x @ w.T).sum(1)", "x @ w.T"]
    assert not _torch_compute("def run(x):\n    return torch.empty_like(x)\n")


def test_the_stored_form_shrinks_the_buffer_and_keeps_the_consumers_divisor() -> None:
    text = _applied(_source("stored_mean"))
    assert "t = torch.empty((M, 1)" in text
    assert "mean_rows[(triton.cdiv(M, 8),)](t, out, M, 1," in text and "N_full=N)" in text
    assert "tl.sum(tile, axis=1) / N_full" in text and "rows[:, None] * N +" in text
    again = kir.parse(text, "triton")
    assert [s.present for s in PASS.sites(again)] == [True]
    assert isinstance(PASS.deoptimize(again, PASS.sites(again)[0]), Skipped)


def test_the_fused_form_launches_one_column_and_sets_the_k_stride() -> None:
    text = _applied(_source("fused_mean_store"))
    assert "(a, b_summed, out, M, 1, K, a.stride(0), 1," in text
    # the launch's tiles (BN computed from N) give way to the matrix-vector list
    assert "(a, b_summed, out, M, 1, K, a.stride(0), 1, N_full=N)" in text
    assert 'triton.Config({"BM": 4, "BN": 1, "BK": 512}, num_warps=4, num_stages=3)' in text
    # the product at one column made without a dot: the fp32 products summed over K
    assert "acc += tl.sum(at.to(tl.float32)[:, :, None] * bt.to(tl.float32)[None, :, :], axis=1)" in text
    assert "tl.dot(" not in text
    assert "_sum_along(b, K, N, (b.stride(0)), 1)" in text
    assert "tl.sum(acc, axis=1) / N_full" in text


def _grids(text: str, extent: int) -> list[tuple[int, ...]]:
    """The grid of the rewritten GEMM's launch (a `lambda meta:` the autotune list shapes) at
    each configuration of its list, every host name it reads set to `extent`."""
    import triton

    tree = ast.parse(text)
    [grid] = [n for n in ast.walk(tree) if isinstance(n, ast.Lambda) and n.args.args[0].arg == "meta"]
    [tuner] = [d for f in tree.body if isinstance(f, ast.FunctionDef) for d in f.decorator_list
               if "autotune" in ast.unparse(d)]
    configs = [ast.literal_eval(c.args[0]) for c in ast.walk(tuner)
               if isinstance(c, ast.Call) and ast.unparse(c.func) == "triton.Config"]
    names = {n.id: extent for n in ast.walk(grid.body) if isinstance(n, ast.Name) and n.id != "meta"}
    made = eval(compile(ast.Expression(grid), "grid", "eval"), {**names, "triton": triton})  # noqa: S307
    return [tuple(made(c)) for c in configs]


@pytest.mark.parametrize("name", ["start", "stored_mean", "fused_mean_store", "stored_colsum"])
def test_the_matrix_vector_product_fills_the_gpu(name: str) -> None:
    """At N = 1 (M = 1) the GEMM is a matrix-vector product: every configuration of its list
    launches one program per 2-16 rows (columns) of the other extent: 64 to 512 at 1024 (the
    start's 64-row tiles launched 16)."""
    text = _applied(_source(name))
    grids = _grids(text, 1024)
    assert len(grids) == len(UNIT_CONFIGS)
    assert sorted(math.prod(g) for g in grids) == sorted(1024 // t for t, *_ in UNIT_CONFIGS), grids
    assert min(math.prod(g) for g in grids) >= 64


def test_a_dot_the_rule_cannot_rewrite_keeps_the_16_wide_list() -> None:
    """A dot whose result is another precision (`out_dtype=tl.float16`) stays a dot: its tiles
    stay 16 x 16 (the least a dot takes), one program per 16 rows."""
    source = _source("start").replace('input_precision="ieee")', 'input_precision="ieee", out_dtype=tl.float16)')
    text = _applied(source)
    assert "tl.dot(a, b, input_precision=\"ieee\", out_dtype=tl.float16)" in text
    grids = _grids(text, 1024)
    assert len(grids) == len(GEMV_CONFIGS) and all(math.prod(g) == 64 for g in grids), grids


def test_the_generic_list_form_keeps_the_rules_own_list() -> None:
    """The search's first form of the rule (every kernel under the generic autotune list) leaves
    the list the rule wrote for the matrix-vector product: the generic GEMM tiles (BN 64-256)
    would compute 63-255 columns the masks drop."""
    from lineage.moves import rule_candidates, rule_card, rule_listed, rule_moves

    start = kir.parse(_source("start"), "triton")
    made, _ = rule_moves(start)["reduce-before-contract"]
    assert rule_listed(start, made) == {"gemm_nt"}
    swept, plain = (m.ir.unparse() for m in rule_candidates(rule_card("reduce-before-contract", "triton"), start))
    assert plain == made.unparse()
    own = swept[swept.rindex("@triton.autotune", 0, swept.index("def gemm_nt")):swept.index("def gemm_nt")]
    assert own.count("triton.Config(") == len(GEMV_CONFIGS) and '"BN": 64' not in own
    # the other kernels did take the generic list
    assert swept.count("@triton.autotune") > made.unparse().count("@triton.autotune")


REFUSALS = [
    ("fused_atomic", "tl.sum(total / d, axis=1)", "tl.sum(tl.maximum(total, 0.0), axis=1)",
     "not linear"),
    ("fused_atomic", "tl.sum(total / d, axis=1)", "tl.sum(tl.sigmoid(total), axis=1)", "not linear"),
    ("fused_atomic", "tl.sum(total / d, axis=1)", "tl.sum(total / d)", "over both axes"),
    ("fused_atomic", "tl.sum(total / d, axis=1)", "tl.max(total, axis=1)", "tl.max"),
    ("fused_atomic", "tl.sum(total / d, axis=1)",
     "tl.sum(total + tl.load(w + j)[None, :], axis=1)", "not linear"),
    ("fused_atomic", "mask=(j[:, None] < hidden) & (kk[None, :] < depth)", "mask=kk[None, :] < depth",
     "not bounds-checked along N"),
    ("fused_atomic", "mask=(j[:, None] < hidden) & (kk[None, :] < depth), other=0.0)",
     "mask=(j[:, None] < hidden) & (kk[None, :] < depth))", "masked lanes are not loaded as zero"),
    ("fused_atomic", "tl.sum(total / d, axis=1)", "tl.sum(total.to(tl.int32), axis=1)", "integer"),
    ("fused_atomic", "        total += tl.dot(xt, tl.trans(wt))\n",
     "        total += tl.dot(xt, tl.trans(wt))\n        total = tl.minimum(total, 8.0)\n",
     "read in the dot loop beyond the dot"),
    ("fused_atomic", "x, w.contiguous(), y, rows, hidden, depth, d,", "x, w.contiguous(), y, rows, hidden, hidden, d,",
     "the rule cannot set the summed extent to 1 alone"),
    ("stored_strided", "    return out\n", "    return out, prod\n", "also read outside its consumer"),
    ("stored_strided", "    tl.store(dst + r, tl.sum(part, axis=0))\n",
     "        tl.store(dst + r * 64 + start // CHUNK, tl.sum(part, axis=0))\n", "a sum per chunk"),
    ("stored_strided", "tl.sum(part, axis=0)", "tl.max(part, axis=0)", "tl.max"),
    ("stored_strided", "part += tl.load(src + r * row_stride + cols, mask=cols < width, other=0.0)",
     "part += tl.exp(tl.load(src + r * row_stride + cols, mask=cols < width, other=0.0))",
     "not linear"),
    # a block of rows per program summed over M: partial sums, not the whole extent
    ("stored_mean", "tl.sum(tile, axis=1) / N", "tl.sum(tile, axis=0) / M", "a slice of M per program"),
    ("stored_strided", "cols = start + tl.arange(0, CHUNK)",
     "cols = start + tl.program_id(1) * CHUNK + tl.arange(0, CHUNK)", "a slice of N per program"),
    # the consumer also reads another tensor sized by N
    ("stored_strided", "    tl.store(dst + r, tl.sum(part, axis=0))\n",
     "    tl.store(dst + r, tl.sum(part, axis=0) + tl.sum(tl.load(src + r * row_stride + tl.arange(0, CHUNK),"
     " mask=tl.arange(0, CHUNK) < width, other=0.0), axis=0))\n".replace("src + r", "dst + r"),
     "another tensor's access is sized by width"),
    # each N tile's row sums stored apart for a later kernel to add
    ("fused_atomic", "tl.atomic_add(y + i, tl.sum(total / d, axis=1), mask=i < rows)",
     "tl.store(y + i * tl.num_programs(1) + tl.program_id(1), tl.sum(total, axis=1), mask=i < rows)",
     "writes each N tile's sums apart"),
    ("stored_mean", "c = acc * alpha" if False else "tl.store(o_ptr + rm[:, None] * N + rn[None, :], acc,",
     "tl.store(o_ptr + rm[:, None] * N + rn[None, :], tl.maximum(acc, 0.0),", "not linear"),
]


@pytest.mark.parametrize("name, old, new, why", REFUSALS)
def test_refusals_say_why(name: str, old: str, new: str, why: str) -> None:
    source = _source(name)
    assert old in source
    assert why in _refused(source.replace(old, new))


def test_the_sum_over_m_shrinks_the_rows() -> None:
    """Summed over M, the left operand is summed over M and the buffer has one row."""
    text = _applied(_source("stored_colsum"))
    assert "prod = torch.empty((1, N)" in text
    assert "_sum_along(a, K, M, (a.stride(1)), (a.stride(0)))" in text
    assert "(a_summed, b, prod, 1, N, K, 1, a.stride(0)," in text
    assert "column_sums[(N,)](prod, out, 1, N, ROWS=32)" in text
    # a sum over M whose left operand is not masked along M is refused for that reason
    unmasked = _source("stored_colsum").replace("mask=(om[:, None] < M) & (ok[None, :] < K)",
                                                "mask=ok[None, :] < K")
    assert "left operand's loads are not bounds-checked along M" in _refused(unmasked)


def test_a_consumer_reading_across_the_summed_axis_is_refused() -> None:
    """A consumer whose load walks the rows with unit stride reads neither a row nor a column
    of the product as the rule needs."""
    source = _source("stored_strided").replace(
        "part += tl.load(src + r * row_stride + cols, mask=cols < width, other=0.0)",
        "part += tl.load(src + cols * 3 + r, mask=cols < width, other=0.0)")
    assert "the rule cannot follow" in _refused(source) or "along its" in _refused(source)


def test_the_search_offers_the_rule_before_the_sweep() -> None:
    from lineage.moves import rule_moves
    from lineage.optimize import SWEEP_PRIOR

    offered = rule_moves(kir.parse(_source("start"), "triton"))
    assert "reduce-before-contract" in offered
    assert "_sum_along(" in offered["reduce-before-contract"][0].unparse()
    assert PASS.prior > max(SWEEP_PRIOR, get_pass("tf32x3-dot").prior)


_COMPILE = r"""
import importlib.util, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
spec = importlib.util.spec_from_file_location("rewritten", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
jit = module._sum_along_kernel
consts = {"BLOCK_K": 128, "BLOCK_E": 64}
signature = {n: "*fp32" if n in ("src", "dst") else "constexpr" if n in consts else "i32"
             for n in jit.arg_names}
kernel = triton.compile(ASTSource(fn=jit, signature=signature, constexprs=consts),
                        target=GPUTarget("cuda", 90, 32), options={"num_warps": 4, "num_stages": 3})
print("ld.global" in kernel.asm["ptx"], "atom" in kernel.asm["ptx"])
tuner = module.gemm_nt
for config in tuner.configs:
    consts = dict(config.kwargs)
    signature = {n: "*fp32" if n.endswith("_ptr") else "constexpr" if n in consts else "i32"
                 for n in tuner.fn.arg_names}
    made = triton.compile(ASTSource(fn=tuner.fn, signature=signature, constexprs=consts),
                          target=GPUTarget("cuda", 90, 32),
                          options={"num_warps": config.num_warps, "num_stages": config.num_stages})
    print(made.metadata.shared <= 227 * 1024, end=" ")
"""


def test_the_added_reduction_compiles_for_sm90_without_atomics(tmp_path) -> None:
    """The interpreter runs what the compiler may refuse: the added kernel is compiled too, and
    the GEMM at each configuration of its matrix-vector list, within sm_90's shared memory."""
    pytest.importorskip("triton")
    path = tmp_path / "rewritten.py"
    path.write_text(_applied(_source("start")))
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-c", _COMPILE, str(path)], capture_output=True, text=True,
                          env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["True", "False"] + ["True"] * len(GEMV_CONFIGS)


def test_the_search_takes_the_rule_right_after_the_control(tmp_path) -> None:
    """With an empty library, the run gates the start's plain sweep (the control), then the
    rule ahead of tf32x3-dot (its prior is the higher), and keeps it."""
    from lineage.optimize import optimize
    from lineage.skills import Library
    from passes.rewriter import DeterministicRewriter
    from skill_helpers import ScriptedGate

    target = tmp_path / "start.py"
    target.write_text(_source("start"))
    gate = ScriptedGate(ms=lambda s: 0.1 if "_sum_along(" in s else 3.0 if "tf32x3" in s
                        else 5.0 if "triton.autotune" in s else 10.0)
    result = optimize(target, str(DATA / "problem_rowsum.py"), Library.open(tmp_path / "empty", create=True),
                      tier="device", out=tmp_path / "out", rewriter=DeterministicRewriter(),
                      check_fn=gate, budget_steps=2)
    assert [s.pass_name for s in result.applied] == ["autotune", "reduce-before-contract"]
    assert result.best_ms == 0.1
    assert not any("tf32x3" in s for s in gate.seen)
