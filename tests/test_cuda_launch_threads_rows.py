"""`launch-threads` after `row-registers` (and warp shuffles): the row held in registers is
re-fitted to the smaller block (its vectors per thread grow to what `row-registers` chooses at
that block where the case's row is known, else scale by the blocks' ratio); past row-registers'
limit the launch is refused, the reason given. The output compiles with NVRTC for sm_90a and
matches torch on the CPU emulator (a row that fits the registers and one too long, which runs
the passes as written); the de-optimization restores the launch and the vectors, the round trip
holds. A row in shared memory (`row-cache`) is sized by the row, not the block: the narrower
launch stays valid there."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

import kir
from kir.embedded import cuda_unit
from nvrtc_helpers import ptx_for_sm90a
from passes import Applied, PassContext, Skipped, get_pass
from passes.roundtrip import roundtrip

cudacpu = pytest.importorskip("gate.cudacpu")

import gate  # noqa: E402
from test_cuda_launch_threads import L1_HOST, L1_ROWS  # noqa: E402

STYLES = Path(__file__).resolve().parents[1] / "bench" / "styles" / "cuda"


def _apply(name: str, options: dict, source: str, path: Path, ctx: PassContext) -> Applied | Skipped:
    p = get_pass(name).from_options(options)
    ir = kir.parse(source, "cuda", path=path)
    results = [p.optimize(ir, s, ctx) for s in p.sites(ir) if not s.present]
    applied = [r for r in results if isinstance(r, Applied)]
    return applied[0] if applied else results[0] if results else Skipped("no site", {})


def _chain(source: str, path: Path, ctx: PassContext) -> str:
    """row-registers (the fit), then every warp shuffle the rule takes."""
    made = _apply("row-registers", {}, source, path, ctx)
    assert isinstance(made, Applied), made
    text = made.ir.text
    while isinstance(made := _apply("warp-shuffle-reduce", {}, text, path, ctx), Applied):
        text = made.ir.text
    assert "__shfl_down_sync" in text
    return text


def _vectors(text: str) -> int:
    counts = {int(n) for n in re.findall(r"uint4 kl_reg0\[(\d+)\];", text)}
    loops = {int(n) for n in re.findall(r"kl_k < (\d+);", text)}
    assert len(counts) == 1 and loops == counts, (counts, loops)
    return counts.pop()


def _back(text: str, path: Path, ctx: PassContext, original: str) -> None:
    p = get_pass("launch-threads")()
    ir = kir.parse(text, "cuda", path=path)
    present = [s for s in p.sites(ir) if s.present]
    assert len(present) == 1
    back = p.deoptimize(ir, present[0], ctx)
    assert isinstance(back, Applied) and back.ir.text == original, back
    trip = roundtrip(p, ir, present[0], ctx)
    assert trip.same, (trip.backward, trip.forward)


@pytest.mark.parametrize(("threads", "vectors"), [(128, 4), (64, 8)])
def test_the_layernorm_style_start_refits_its_row_at_the_smaller_block(threads: int, vectors: int) -> None:
    folder = STYLES / "cu_layernorm"
    path = folder / "layernorm.cu"
    start = path.read_text()
    device = PassContext.for_case(str(folder), tier="device")  # N = 4096 bf16
    held = _chain(start, path, device)
    assert _vectors(held) == 2
    out = _apply("launch-threads", {"threads": threads}, held, path, device)
    assert isinstance(out, Applied), out
    text = out.ir.text
    # what row-registers chooses on the start launched with the smaller block
    narrow = _apply("launch-threads", {"threads": threads}, start, path, device)
    chosen = _apply("row-registers", {}, narrow.ir.text, path, device)
    assert chosen.options["vectors"] == vectors == _vectors(text)
    assert f"#define NT {threads}" in text and f"(N) <= {8 * vectors} * (NT)" in text
    assert "((NT) >> 5)" in text  # the shuffles' warp count follows the block
    _back(text, path, device, held)
    rows = get_pass("row-registers")()  # the row's own rule still reads its form back
    ir = kir.parse(text, "cuda", path=path)
    site = next(s for s in rows.sites(ir) if s.present)
    assert roundtrip(rows, ir, site, device).same
    assert rows.deoptimize(ir, site, device).options == {"vectors": vectors}
    ptx_for_sm90a(text)
    case = gate.load_case(folder)
    for n in (600, 8 * vectors * threads, 8 * vectors * threads + 4):  # fits, fills, one too long
        inputs = tuple(case.module().make_inputs({"M": 3, "N": n, "dtype": "bf16"}, 5, "cpu"))
        got = cudacpu.run_host(text, folder / "layernorm.py", *inputs, stem="layernorm")
        want = case.module().reference(*inputs).float()
        assert torch.allclose(got.float(), want, atol=2e-2, rtol=2e-2), n


def test_a_restyled_row_kernel_refits_from_the_inputs_rows_or_the_blocks_ratio(tmp_path: Path) -> None:
    cu, host = tmp_path / "l1.cu", tmp_path / "l1.py"
    cu.write_text(L1_ROWS)
    host.write_text(L1_HOST)
    # `width` is no fact: the case's inputs tell the row (2048 floats: 2 vectors at 256 threads)
    shaped = PassContext(facts={"M": 7, "N": 2048, "shape_dims": ("M", "N"), "input_shapes": ((7, 2048),)})
    held = _chain(L1_ROWS, cu, shaped)
    assert _vectors(held) == 2
    for threads, ctx, vectors in ((128, shaped, 4), (64, shaped, 8),
                                  (64, PassContext(facts={"arch": "sm_90"}), 8)):  # not known: 2 * 256 / 64
        out = _apply("launch-threads", {"threads": threads}, held, cu, ctx)
        assert isinstance(out, Applied), out
        text = out.ir.text
        assert _vectors(text) == vectors and f"(width) <= {4 * vectors} * (step)" in text
        narrow = _apply("launch-threads", {"threads": threads}, L1_ROWS, cu, shaped)
        assert _apply("row-registers", {}, narrow.ir.text, cu, shaped).options["vectors"] == vectors
        _back(text, cu, ctx, held)
        ptx_for_sm90a(text)
        for width in (300, 4 * vectors * threads, 4 * vectors * threads + 3):
            x = torch.randn(5, width, generator=torch.Generator().manual_seed(width))
            got = cudacpu.run_host(text, host, x, stem="l1")
            want = x / x.abs().sum(1, keepdim=True).clamp_min(1e-12)
            assert torch.allclose(got, want, atol=1e-6, rtol=1e-4), (threads, width)


def test_a_row_past_row_registers_limit_at_the_smaller_block_is_refused(tmp_path: Path) -> None:
    cu = tmp_path / "l1.cu"
    cu.write_text(L1_ROWS)
    (tmp_path / "l1.py").write_text(L1_HOST)
    long = PassContext(facts={"M": 7, "N": 16384, "shape_dims": ("M", "N"), "input_shapes": ((7, 16384),)})
    held = _chain(L1_ROWS, cu, long)  # 16 vectors at 256 threads
    assert _vectors(held) == 16
    reason = _apply("launch-threads", {"threads": 128}, held, cu, long).reason
    assert reason == ("its row held in registers (kl_reg0, 16 vectors) would need 32 vectors of 16 "
                      "bytes per thread to hold the case's row of 16384 elements at 128 threads, "
                      "more than row-registers' 16")
    unknown = _apply("launch-threads", {"threads": 128}, held, cu, PassContext(facts={}))
    assert unknown.reason.endswith("to hold a row of 16 vectors a thread at 256 threads at 128 "
                                   "threads, more than row-registers' 16")


def test_a_row_in_shared_memory_keeps_its_size_under_the_narrower_launch() -> None:
    unit = cuda_unit(STYLES / "cu_softmax_rows" / "softmax_rows.py")
    ctx = PassContext.for_case(str(STYLES / "cu_softmax_rows"), tier="device")
    text = unit.source
    for name in ("row-cache", "vectorize-global", "warp-shuffle-reduce", "warp-shuffle-reduce"):
        made = _apply(name, {}, text, unit.source_path, ctx)
        assert isinstance(made, Applied), (name, made)
        text = made.ir.text
    rows = re.findall(r"__shared__ __align__\(16\) __half kl_row0\[(\d+)\];", text)
    out = _apply("launch-threads", {"threads": 128}, text, unit.source_path, ctx)
    assert isinstance(out, Applied), out
    assert re.findall(r"__shared__ __align__\(16\) __half kl_row0\[(\d+)\];", out.ir.text) == rows
    assert "<<<rows, 128, threads * sizeof(float)>>>" in out.ir.text
    _back(out.ir.text, unit.source_path, ctx, text)
    device = gate.hostforms.device_source(out.ir.text)
    ptx_for_sm90a(device)
    lib = cudacpu.build(device, name="softmax_rows.cu")
    cols = int(rows[0])
    for width in (500, cols, cols + 8):  # the shared row, filled, and one too long for it
        x = torch.randn(3, width, generator=torch.Generator().manual_seed(width)).half()
        y = torch.zeros_like(x)
        lib.launch("softmax_rows_kernel", 3, 128, 128 * 4, [x, y, width])
        assert torch.allclose(y.float(), torch.softmax(x.float(), 1), atol=2e-3), width


def test_kept_values_and_hoisted_operands_grow_with_the_row() -> None:
    unit = cuda_unit(STYLES / "cu_softmax_rows" / "softmax_rows.py")  # 8192 fp16: 4 vectors at 256
    ctx = PassContext.for_case(str(STYLES / "cu_softmax_rows"), tier="device")
    held = _apply("row-registers", {"reuse": True}, unit.source, unit.source_path, ctx).ir.text
    out = _apply("launch-threads", {"threads": 128}, held, unit.source_path, ctx)
    assert isinstance(out, Applied), out
    text = out.ir.text  # 8 vectors of 8 lanes: the lanes' loops keep their 8
    assert _vectors(text) == 8 and "float kl_reg0_e0[8][8];" in text and "kl_l < 8;" in text
    _back(text, unit.source_path, ctx, held)
    device = gate.hostforms.device_source(text)
    ptx_for_sm90a(device)
    lib = cudacpu.build(device, name="softmax_rows.cu")
    for width in (300, 8192, 8200):
        x = torch.randn(2, width, generator=torch.Generator().manual_seed(width)).half()
        y = torch.zeros_like(x)
        lib.launch("softmax_rows_kernel", 2, 128, 128 * 4, [x, y, width])
        assert torch.allclose(y.float(), torch.softmax(x.float(), 1), atol=2e-3), width
    folder = STYLES / "cu_layernorm"
    path = folder / "layernorm.cu"
    device_ctx = PassContext.for_case(str(folder), tier="device")
    held = _apply("row-registers", {"hoist": True}, path.read_text(), path, device_ctx).ir.text
    text = _apply("launch-threads", {"threads": 64}, held, path, device_ctx).ir.text
    assert re.findall(r"uint4 (kl_reg0\w*)\[8\];", text) == ["kl_reg0", "kl_reg0_0", "kl_reg0_1"]
    _back(text, path, device_ctx, held)
    ptx_for_sm90a(text)
