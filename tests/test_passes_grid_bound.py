"""grid-bound: a grid axis counted from device values the host reads (`.tolist()`, `.item()`,
`int(t.max())`: a synchronization every call) is counted from a tensor's shape instead, where
the kernel's own guard leaves the extra programs idle, and the read is gone.

Applied to three kernels written differently: the held-out grouped GEMM's start (`tolist()` and
a Python max over the offsets' steps, a 3-D tuple grid, the work under `if tile * BLOCK_M <
end - start:`), a jagged row-wise scale (`int(lengths.max())` inline in the grid, an early
`return`, a literal block) and a segment sum (`(offsets[1:] - offsets[:-1]).max().item()`, a
lambda grid over `META["BLOCK"]`, an atomic under `if end - start > chunk * BLOCK:`). Each
rewritten module matches the original under Triton's interpreter on odd sizes with empty
groups, and its run() reads nothing from the device. The de-optimization writes a read back,
and the rule takes that kernel again to the same text. Refused, with the reason: the value read
also passed to the kernel, also used to allocate, a kernel whose loaded values address no
dimension through a stride the launch passes (no bound shown), a kernel with no guard, a host
count of another form than the kernel's guard.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

import kir
from passes.base import Applied
from passes.registry import get_pass
from tests.module_helpers import applied_at_its_site, load_module, refused_at_its_site

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parent.parent
GROUPED = (ROOT / "bench/heldout/grouped_gemm/grouped_start.py").read_text()
PASS = get_pass("grid-bound")()

JAGGED = '''\
import torch
import triton
import triton.language as tl


@triton.jit
def jagged_scale(x_ptr, w_ptr, out_ptr, starts_ptr, lengths_ptr, D, stride_x, stride_o,
                 BLOCK_R: tl.constexpr, BLOCK_D: tl.constexpr):
    seq = tl.program_id(0)
    blk = tl.program_id(1)
    length = tl.load(lengths_ptr + seq)
    if blk * BLOCK_R >= length:
        return
    start = tl.load(starts_ptr + seq)
    offs = blk * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = tl.arange(0, BLOCK_D)
    mask = (offs[:, None] < length) & (cols[None, :] < D)
    w = tl.load(w_ptr + seq)
    x = tl.load(x_ptr + (start + offs)[:, None] * stride_x + cols[None, :], mask=mask, other=0.0)
    tl.store(out_ptr + (start + offs)[:, None] * stride_o + cols[None, :], x * w, mask=mask)


def run(x, w, starts, lengths):
    out = torch.zeros_like(x)
    B, D = lengths.shape[0], x.shape[1]
    jagged_scale[(B, triton.cdiv(int(lengths.max()), 16))](
        x, w, out, starts, lengths, D, x.stride(0), out.stride(0),
        BLOCK_R=16, BLOCK_D=triton.next_power_of_2(D))
    return out
'''

SEGMENT = '''\
import torch
import triton
import triton.language as tl


@triton.jit
def segment_sum(x_ptr, out_ptr, offsets_ptr, stride_x, BLOCK: tl.constexpr):
    seg = tl.program_id(0)
    chunk = tl.program_id(1)
    start = tl.load(offsets_ptr + seg)
    end = tl.load(offsets_ptr + seg + 1)
    if end - start > chunk * BLOCK:
        idx = start + chunk * BLOCK + tl.arange(0, BLOCK)
        vals = tl.load(x_ptr + idx * stride_x, mask=idx < end, other=0.0)
        tl.atomic_add(out_ptr + seg, tl.sum(vals, axis=0))


def run(x, offsets):
    S = offsets.shape[0] - 1
    out = torch.zeros(S, dtype=torch.float32, device=x.device)
    longest = (offsets[1:] - offsets[:-1]).max().item()
    grid = lambda META: (S, triton.cdiv(longest, META["BLOCK"]))
    segment_sum[grid](x, out, offsets, x.stride(0), BLOCK=32)
    return out
'''


def _ir(source: str) -> kir.KernelIR:
    return kir.parse(source, "triton")


def _bounded(source: str) -> str:
    result = applied_at_its_site(PASS, _ir(source))
    assert [s.present for s in PASS.sites(result.ir)] == [True]
    return result.ir.unparse()


def _refusal(source: str) -> str:
    return refused_at_its_site(PASS, _ir(source))


def _edited(source: str, old: str, new: str) -> str:
    assert source.count(old) == 1, old
    return source.replace(old, new)


def _host_reads(source: str) -> list[str]:
    """The calls of run() that copy device values to the host."""
    run = next(n for n in ast.parse(source).body
               if isinstance(n, ast.FunctionDef) and n.name == "run")
    return [ast.unparse(c) for c in ast.walk(run) if isinstance(c, ast.Call) and (
        isinstance(c.func, ast.Attribute) and c.func.attr in ("tolist", "item", "cpu", "numpy")
        or isinstance(c.func, ast.Name) and c.func.id in ("int", "float"))]


def _offsets(sizes: list[int]) -> torch.Tensor:
    return torch.cumsum(torch.tensor([0, *sizes]), 0).to(torch.int32)


def test_grouped_gemm_grid_from_rows(tmp_path: Path) -> None:
    new = _bounded(GROUPED)
    assert "triton.cdiv(a.shape[0], BLOCK_M)" in new
    assert _host_reads(GROUPED) and not _host_reads(new)
    old_mod, new_mod = load_module(GROUPED, tmp_path), load_module(new, tmp_path)
    gen = torch.Generator().manual_seed(0)
    offsets = _offsets([37, 0, 70, 5, 38])  # 150 rows, an empty group, none a tile multiple
    a = torch.randn(150, 40, generator=gen).half()
    b = torch.randn(5, 40, 48, generator=gen).half()
    want = torch.cat([a[lo:hi].float() @ b[g].float() for g, (lo, hi)
                      in enumerate(zip(offsets[:-1].tolist(), offsets[1:].tolist()))])
    before, after = old_mod.run(a, b, offsets), new_mod.run(a, b, offsets)
    torch.testing.assert_close(before.float(), want, atol=5e-2, rtol=5e-3)
    assert torch.equal(after, before)


def test_jagged_rows_from_values_shape(tmp_path: Path) -> None:
    new = _bounded(JAGGED)
    assert "triton.cdiv(x.shape[0], 16)" in new
    assert _host_reads(JAGGED) and not _host_reads(new)
    lengths = torch.tensor([5, 0, 29, 1, 17], dtype=torch.int32)
    starts = (torch.cumsum(lengths, 0) - lengths).to(torch.int32)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(55, 13, generator=gen)  # 52 rows in sequences, 3 after them
    w = torch.randn(5, generator=gen)
    before = load_module(JAGGED, tmp_path).run(x, w, starts, lengths)
    after = load_module(new, tmp_path).run(x, w, starts, lengths)
    assert before[:52].abs().sum() > 0 and torch.equal(after, before)


def test_a_count_through_an_alias_of_triton(tmp_path: Path) -> None:
    # `tr.cdiv` is the same call as `triton.cdiv` (passes.triton._py.is_cdiv)
    source = _edited(JAGGED, "import triton\n", "import triton\nimport triton as tr\n")
    source = _edited(source, "triton.cdiv(int(lengths.max()), 16)", "tr.cdiv(int(lengths.max()), 16)")
    new = _bounded(source)
    assert "tr.cdiv(x.shape[0], 16)" in new and not _host_reads(new)
    lengths = torch.tensor([3, 0, 21], dtype=torch.int32)
    starts = (torch.cumsum(lengths, 0) - lengths).to(torch.int32)
    x = torch.randn(26, 5, generator=torch.Generator().manual_seed(3))
    w = torch.tensor([0.5, 2.0, -1.0])
    before = load_module(source, tmp_path).run(x, w, starts, lengths)
    after = load_module(new, tmp_path).run(x, w, starts, lengths)
    assert before[:24].abs().sum() > 0 and torch.equal(after, before)


def test_segment_sum_lambda_grid_and_item(tmp_path: Path) -> None:
    new = _bounded(SEGMENT)
    assert 'triton.cdiv(x.shape[0], META["BLOCK"])' in new or \
        "triton.cdiv(x.shape[0], META['BLOCK'])" in new
    assert _host_reads(SEGMENT) and not _host_reads(new)
    offsets = _offsets([70, 0, 3, 33, 1])
    x = torch.randn(107, generator=torch.Generator().manual_seed(2))
    before = load_module(SEGMENT, tmp_path).run(x, offsets)
    after = load_module(new, tmp_path).run(x, offsets)
    want = torch.stack([x[lo:hi].sum()
                        for lo, hi in zip(offsets[:-1].tolist(), offsets[1:].tolist())])
    torch.testing.assert_close(after, want, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(after, before, atol=1e-5, rtol=1e-5)


def test_deoptimization_writes_the_read_back() -> None:
    for source in (GROUPED, JAGGED, SEGMENT):
        bounded = _ir(_bounded(source))
        site = next(s for s in PASS.sites(bounded) if s.present)
        back = PASS.deoptimize(bounded, site)
        assert isinstance(back, Applied), back
        assert _host_reads(back.ir.unparse())
        assert _bounded(back.ir.unparse()) == bounded.unparse()


def test_refuses_a_value_also_passed_to_the_kernel() -> None:
    source = _edited(GROUPED, "def grouped_mm(a_ptr, b_ptr, out_ptr, offsets_ptr, N, K,",
                     "def grouped_mm(a_ptr, b_ptr, out_ptr, offsets_ptr, largest, N, K,")
    source = _edited(source, "grouped_mm[grid](a, b, out, offsets, N,",
                     "grouped_mm[grid](a, b, out, offsets, largest, N,")
    assert "outside the grid's count" in _refusal(source)


def test_refuses_a_value_also_used_to_allocate() -> None:
    source = _edited(SEGMENT, "    grid = lambda META",
                     "    scratch = torch.empty(longest, device=x.device)\n    grid = lambda META")
    assert "`longest` (read from the device) is also used" in _refusal(source)


def test_refuses_where_no_dimension_bounds_the_values() -> None:
    # the row stride passed as a width, not as x.stride(0): nothing shows which dimension the
    # lengths count rows of
    source = _edited(JAGGED, "D, x.stride(0), out.stride(0),", "D, D, D,")
    assert "no dimension is shown to bound" in _refusal(source)


def test_refuses_a_kernel_without_a_guard() -> None:
    source = _edited(SEGMENT, "    if end - start > chunk * BLOCK:\n", "    if True:\n")
    assert "under no test of" in _refusal(source)


def test_refuses_a_count_of_another_form() -> None:
    source = _edited(SEGMENT, "(offsets[1:] - offsets[:-1]).max().item()", "offsets.max().item()")
    assert "the kernel guards against" in _refusal(source)


def test_offered_without_a_card() -> None:
    assert 1.0 < type(PASS).prior <= 1.2
