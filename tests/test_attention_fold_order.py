"""Two steps of the fmha expert that its cards carry to attention written in other styles:
log2(e) folded into the scale the scores are multiplied by (the card recorded a `qk_scale`
variable these kernels do not have: the rule finds the scale by the softmax's dataflow), and
the heaviest query blocks launched first once the key loop stops at the diagonal. Each rewrite
passes the interpret gate against torch at the case's small shapes."""
from __future__ import annotations

import ast
import shutil
from functools import cache
from pathlib import Path

import pytest

import gate
import kir
from lineage.moves import materializations
from passes.rewriter import DeterministicRewriter
from passes.triton.logdomain import scale_fold

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parent.parent
FLAT = ROOT / "bench" / "styles" / "nw_attn_flat_ptrs"
LOG2E = "1.4426950408889634"

# Causal attention on a 3-D grid (batch, head, query tile on axis 2), the key loop counted in
# blocks, the scale on the left of the product, and the mask a condition of what to drop
# (`offs_n > offs_m`, or-ed with the sequence's end) that tl.where sends to -inf.
GRID3 = '''import torch
import triton
import triton.language as tl


@triton.jit
def attn3d(Q, K, V, O, scale, seq, stride_b, stride_h, stride_s,
           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD: tl.constexpr):
    b = tl.program_id(0)
    h = tl.program_id(1)
    t = tl.program_id(2)
    offs_m = t * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD)
    head = b * stride_b + h * stride_h
    q = tl.load(Q + head + offs_m[:, None] * stride_s + offs_d[None, :],
                mask=offs_m[:, None] < seq, other=0.0)
    mx = tl.zeros((BLOCK_M,), dtype=tl.float32) - float("inf")
    den = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, HEAD), dtype=tl.float32)
    for j in range(0, tl.cdiv(seq, BLOCK_N)):
        offs_n = j * BLOCK_N + tl.arange(0, BLOCK_N)
        k = tl.load(K + head + offs_n[:, None] * stride_s + offs_d[None, :],
                    mask=offs_n[:, None] < seq, other=0.0)
        qk = scale * tl.dot(q, tl.trans(k))
        future = (offs_n[None, :] > offs_m[:, None]) | (offs_n[None, :] >= seq)
        qk = tl.where(future, float("-inf"), qk)
        mx_new = tl.maximum(mx, tl.max(qk, 1))
        alpha = tl.exp(mx - mx_new)
        p = tl.exp(qk - mx_new[:, None])
        den = den * alpha + tl.sum(p, 1)
        v = tl.load(V + head + offs_n[:, None] * stride_s + offs_d[None, :],
                    mask=offs_n[:, None] < seq, other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        mx = mx_new
    tl.store(O + head + offs_m[:, None] * stride_s + offs_d[None, :],
             (acc / den[:, None]).to(O.dtype.element_ty), mask=offs_m[:, None] < seq)


def run(q, k, v):
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    B, H, S, D = q.shape
    o = torch.empty_like(q)
    attn3d[(B, H, triton.cdiv(S, 32))](q, k, v, o, D ** -0.5, S,
                                       q.stride(0), q.stride(1), q.stride(2),
                                       BLOCK_M=32, BLOCK_N=16, HEAD=D)
    return o
'''


@cache
def _cards() -> dict[str, object]:
    from lineage.shipped import open_library

    return {c.pass_name: c for c in open_library(None)[0].cards()
            if any(s.get("case") == "fmha" for s in c.sources)}


def _made(text: str, pass_name: str) -> str:
    """The first kernel the shipped fmha card of `pass_name` writes with its rule alone."""
    made = list(materializations(_cards()[pass_name], kir.parse(text, "triton"),
                                 DeterministicRewriter(), None, sweeps=False, transplants=False))
    ok = next((m for m in made if m.ok), None)
    assert ok is not None, made[-1].refusals
    return ok.ir.unparse()


def _gated(text: str, folder: Path) -> None:
    case = gate.load_case(folder)
    verdict = gate.check(text, "triton", case, "interpret", path=case.start_path(), cache=False)
    assert verdict.ok, verdict.reason


@pytest.fixture(scope="module")
def grid3(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A case folder: the flat style's causal reference, GRID3 as its start kernel."""
    folder = tmp_path_factory.mktemp("grid3")
    shutil.copy(FLAT / "case.py", folder / "case.py")
    case = folder / "case.py"
    case.write_text(case.read_text().replace('START = "flat_attn.py"', 'START = "grid3.py"'))
    (folder / "grid3.py").write_text(GRID3)
    return folder


def test_the_scale_of_a_kernel_with_no_scale_variable_takes_log2e() -> None:
    """`s = tl.dot(q, kt) * sm_scale` with the scale a parameter: the recorded `qk_scale` is not
    there, so log2(e) goes into the product's scalar and both exps of the softmax become exp2
    (before: each exp became `exp2((x) * log2e)`, the multiply tl.exp already does)."""
    out = _made((FLAT / "flat_attn.py").read_text(), "exp2-fold")
    assert f"s = tl.dot(q, kt) * (sm_scale * {LOG2E})" in out
    assert "p = tl.exp2(s - m_new[:, None])" in out
    assert "corr = tl.exp2(m_run - m_new)" in out
    assert "tl.exp(" not in out
    _gated(out, FLAT)


def test_scores_scaled_by_a_folded_product_read_as_the_fold_present() -> None:
    """The kernel the fold wrote (`tl.dot(q, kt) * (sm_scale * log2e)`, exp2 in the softmax):
    the rule reads its pass as present there (before: no site at all, so the state listed no
    exp2-fold and retrieval offered the fold again), undoes it to the start kernel byte for
    byte and, with the options it recorded, writes the same kernel again. A kernel with an exp
    the fold would have turned into exp2 left over is not that form."""
    from passes import Applied, get_pass

    start = (FLAT / "flat_attn.py").read_text()
    out = _made(start, "exp2-fold")
    rule = get_pass("exp2-fold")
    ir = kir.parse(out, "triton")
    sites = rule().sites(ir)
    assert [s.detail for s in sites] == [{"kernel": "flat_causal_attn", "scores": True}]
    back = rule().deoptimize(ir, sites[0])
    assert isinstance(back, Applied) and back.ir.unparse() == start
    again = rule(**back.options)
    open_site = next(s for s in again.sites(back.ir) if not s.present)
    assert again.optimize(back.ir, open_site).ir.unparse() == out
    mixed = out.replace("corr = tl.exp2(", "corr = tl.exp(")
    assert mixed != out
    assert not [s for s in rule().sites(kir.parse(mixed, "triton")) if s.present]


def test_a_diagonal_stopped_flat_grid_launches_its_heaviest_query_blocks_first() -> None:
    """The 1-D grid split by `%` / `//`: the key loop stops at the diagonal and splits off its
    unmasked blocks, and the program ids are relabeled last-first, so the query blocks with the
    most key blocks start first; the tile card then still resizes the grid's copy of BQ."""
    out = _made((FLAT / "flat_attn.py").read_text(), "causal-block-skip")
    assert "pid = (tl.num_programs(0) - 1 - tl.program_id(0))" in out
    assert "for kv0 in range(0, below_diagonal, BKV):" in out
    _gated(out, FLAT)
    tiled = _made(out, "tile-sizes")
    assert "BQ=64" in tiled and "grid = (triton.cdiv(S, 64) * B * H,)" in tiled
    _gated(tiled, FLAT)


def test_a_3d_grid_with_a_drop_mask_takes_both_steps(grid3: Path) -> None:
    """The query tile on grid axis 2 is the axis relabeled; the scale on the left of the
    product takes log2(e) there."""
    skipped = _made(GRID3, "causal-block-skip")
    assert "t = (tl.num_programs(2) - 1 - tl.program_id(2))" in skipped
    assert "b = tl.program_id(0)" in skipped and "h = tl.program_id(1)" in skipped
    _gated(skipped, grid3)
    folded = _made(skipped, "exp2-fold")
    assert f"qk = (scale * {LOG2E}) * tl.dot(q, tl.trans(k))" in folded
    assert folded.count("tl.exp2(") == 4 and "tl.exp(" not in folded  # both loops
    _gated(folded, grid3)


def _kernel(source: str) -> ast.FunctionDef:
    return next(n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef))


def test_the_fold_is_refused_where_a_scaled_value_leaves_the_softmax() -> None:
    """A kernel that also writes its row maxima (a log-sum-exp for the backward pass) would
    write them scaled by log2(e): no fold."""
    lse = GRID3.replace("    tl.store(O + head",
                        "    tl.store(O + head + 1, mx)\n    tl.store(O + head")
    assert not isinstance(scale_fold(_kernel(GRID3)), str)
    why = scale_fold(_kernel(lse))
    assert isinstance(why, str) and "tl.store(O + head + 1, mx)" in why


def test_the_launch_order_is_left_alone_where_programs_may_wait_on_each_other() -> None:
    """Programs that use atomics may depend on the order they start in: the block skip comes
    without the relabeling."""
    atomic = GRID3.replace("    tl.store(O + head",
                           "    tl.atomic_add(O, 0.0)\n    tl.store(O + head")
    out = _made(atomic, "causal-block-skip")
    assert "tl.minimum(" in out and "num_programs" not in out


CROSS = ROOT / "bench" / "styles" / "xattn_cross"
HELPER = ROOT / "bench" / "styles" / "attn_helper_flag"


def _function(source: str, pick: str) -> ast.FunctionDef:
    """The jit function of `source` whose body holds the line `pick`."""
    return next(n for n in ast.parse(source).body
                if isinstance(n, ast.FunctionDef) and pick in ast.unparse(n))


@pytest.mark.parametrize(("scaled", "folded"), [
    ("q = (q * sm_scale).to(Q.dtype.element_ty)",
     f"q = (q * (sm_scale * {LOG2E})).to(Q.dtype.element_ty)"),
    ("q *= sm_scale", f"q *= (sm_scale * {LOG2E})")])
def test_a_query_scaled_by_a_second_binding_takes_log2e_where_it_is_scaled(
        scaled: str, folded: str) -> None:
    """`q = (q * sm_scale).to(...)` (or `q *= sm_scale`) after the load rebinds q: the read in
    the key loop's dot sees that binding (the one before it in straight-line code), the dot is
    linear in q, so the pre-scale takes log2(e) and both exps become exp2; the load's q is no
    domain value."""
    text = (CROSS / "xattn.py").read_text()
    out = _made(text.replace("q = (q * sm_scale).to(Q.dtype.element_ty)", scaled), "exp2-fold")
    assert folded in out
    assert "p = tl.exp2(qk - m_new[:, None])" in out and "alpha = tl.exp2(m_i - m_new)" in out
    assert "tl.exp(" not in out and "qk = tl.dot(q, tl.trans(k))" in out
    _gated(out, CROSS)


def test_a_pre_scaled_query_that_leaves_the_softmax_is_not_folded() -> None:
    """The scaled q also stored: refused with the store; the loaded q stored before its
    rescale is another binding's value and leaves the fold alone."""
    text = (CROSS / "xattn.py").read_text()
    line = "    q = (q * sm_scale).to(Q.dtype.element_ty)\n"
    raw = text.replace(line, "    tl.store(O, q)\n" + line)
    scaled = text.replace(line, line + "    tl.store(O, q)\n")
    assert not isinstance(scale_fold(_function(raw, "tl.dot(")), str)
    why = scale_fold(_function(scaled, "tl.dot("))
    assert isinstance(why, str) and "tl.store(O, q)" in why


def test_a_running_max_kept_by_a_helper_folds_once_the_helper_is_inlined() -> None:
    """The helper's running max is its parameter (no fold there); inlined, the kernel hands it
    back through `(a, b, m) = (a_h, b_h, m_h)`, whose elements are bindings like any other, so
    the kernel's scale takes log2(e). Stored after the walk, the max refuses the fold."""
    from lineage.moves import _normalized

    inlined = _normalized(kir.parse((HELPER / "flag_attn.py").read_text(), "triton"))[0]
    assert inlined is not None
    text = inlined.unparse()
    helper = _function(text, "return (o_acc")
    assert isinstance(scale_fold(helper), str)
    kernel = _function(text, "tl.program_id(")
    fold = scale_fold(kernel)
    assert not isinstance(fold, str) and len(fold.exps) == 2
    made = list(materializations(_cards()["exp2-fold"], inlined, DeterministicRewriter(), None,
                                 sweeps=False, transplants=False))
    out = next(m.ir.unparse() for m in made if m.ok and "* 1.44" in
               ast.unparse(_function(m.ir.unparse(), "tl.program_id(")))
    body = ast.unparse(_function(out, "tl.program_id("))
    assert f"logits = tl.dot(q_tile, tl.trans(k_tile)) * (softmax_scale * {LOG2E})" in body
    assert body.count("tl.exp2(") == 2 and "tl.exp(" not in body
    _gated(out, HELPER)
    stored = text.replace("    out = o_acc / row_sum", "    tl.store(Out, row_max)\n"
                          "    out = o_acc / row_sum")
    why = scale_fold(_function(stored, "tl.program_id("))
    assert isinstance(why, str) and "tl.store(Out, row_max)" in why
