"""`launch-threads` on kernels that hold their block's size in a named constant (`#define`,
file-scope `constexpr`, kernel-scope `const int`): the constant's value changes with the launch
(a `<<<...>>>` launch naming it, or a Python host's literal through the host-launch line); the
output compiles with NVRTC for sm_90a, matches torch on the CPU emulator (`gate.cudacpu`), also
followed by `row-registers`, warp shuffles and launch bounds; the round trip restores the
constant and the launch; a constant used where a smaller value is not vouched for is refused,
the use named."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

import kir
from kir.embedded import cuda_unit
from nvrtc_helpers import ptx_for_sm90a
from passes import Applied, PassContext, get_pass
from passes.cuda.recognize import launch_block
from passes.roundtrip import roundtrip

cudacpu = pytest.importorskip("gate.cudacpu")

import gate  # noqa: E402
from gate import hostforms  # noqa: E402
from test_cuda_launch_threads import L1_HOST, _apply, _refusal  # noqa: E402

STYLES = Path(__file__).resolve().parents[1] / "bench" / "styles" / "cuda"
CTX = PassContext(facts={"arch": "sm_90"})

# a row sum of squares, scaled: the block in a file-scope constexpr that sizes the tree's array,
# steps the loops, starts the tree and is the launch's block in the load_inline wrapper
INLINE = r'''
import torch
from torch.utils.cpp_extension import load_inline

src = r"""
#include <torch/extension.h>

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads) row_scale(const float* in, float* out, int width) {
  __shared__ float part[kThreads];
  const float* row = in + (size_t)blockIdx.x * width;
  float ss = 0.f;
  for (int j = threadIdx.x; j < width; j += kThreads) ss += row[j] * row[j];
  part[threadIdx.x] = ss;
  __syncthreads();
  for (int h = kThreads / 2; h >= 1; h /= 2) {
    if (threadIdx.x < h) part[threadIdx.x] += part[threadIdx.x + h];
    __syncthreads();
  }
  const float k = rsqrtf(part[0] / width + 1e-6f);
  for (int j = threadIdx.x; j < width; j += kThreads) out[(size_t)blockIdx.x * width + j] = row[j] * k;
}

torch::Tensor row_scale_op(torch::Tensor x) {
  auto y = torch::empty_like(x);
  row_scale<<<x.size(0), kThreads>>>(x.data_ptr<float>(), y.data_ptr<float>(), x.size(1));
  return y;
}
"""
ext = load_inline(name="row_scale_ext", cpp_sources="torch::Tensor row_scale_op(torch::Tensor x);",
                  cuda_sources=src, functions=["row_scale_op"])


class ModelNew(torch.nn.Module):
    def forward(self, x):
        return ext.row_scale_op(x)
'''

# a row max-subtract: the block a kernel-scope `const int` (bound to a local step), the host an
# experts.cudahost launch of the same literal
LOCAL = r"""
extern "C" __global__ void shift_rows(const float* src, float* dst, int n) {
  const int nt = 256;
  __shared__ float best[nt];
  const float* line = src + (long long)blockIdx.x * n;
  const int step = nt;
  float m = -3.0e38f;
  for (int c = threadIdx.x; c < n; c += step) m = fmaxf(m, line[c]);
  best[threadIdx.x] = m;
  __syncthreads();
  for (int s = nt >> 1; s > 0; s >>= 1) {
    if (threadIdx.x < s) best[threadIdx.x] = fmaxf(best[threadIdx.x], best[threadIdx.x + s]);
    __syncthreads();
  }
  for (int c = threadIdx.x; c < n; c += step) dst[(long long)blockIdx.x * n + c] = line[c] - best[0];
}
"""
LOCAL_HOST = L1_HOST.replace("l1_rows", "shift_rows")


def _round_trip(text: str, path: Path | None, original: str) -> None:
    p = get_pass("launch-threads")()
    ir = kir.parse(text, "cuda", path=path)
    present = [s for s in p.sites(ir) if s.present]
    assert len(present) == 1 and not [s for s in p.sites(ir) if not s.present]
    back = p.deoptimize(ir, present[0], CTX)
    assert isinstance(back, Applied) and back.ir.text == original, back
    trip = roundtrip(p, ir, present[0], CTX)
    assert trip.same, (trip.backward, trip.forward)


def test_a_defined_block_changes_with_the_hosts_launch() -> None:
    folder = STYLES / "cu_layernorm"
    path = folder / "layernorm.cu"
    start = path.read_text()
    out = _apply("launch-threads{threads=128}", start, path)
    assert "#define NT 128" in out and "#define NT 256" not in out
    assert launch_block(kir.parse(out, "cuda", path=path)).dims == (128, 1, 1)
    _round_trip(out, path, start)
    ptx_for_sm90a(out)
    fast = _apply("row-registers{vectors=4}", out, path)
    fast = _apply("warp-shuffle-reduce", fast, path)
    fast = _apply("launch-bounds", fast, path)
    assert "__launch_bounds__(128" in fast
    ptx_for_sm90a(fast)
    case = gate.load_case(folder)
    for n in (600, 4100):  # 4100: past 4 vectors of 128 threads, the passes as written
        inputs = tuple(case.module().make_inputs({"M": 3, "N": n, "dtype": "bf16"}, 1, "cpu"))
        want = case.module().reference(*inputs).float()
        for text in (out, fast):
            got = cudacpu.run_host(text, folder / "layernorm.py", *inputs, stem="layernorm")
            assert torch.allclose(got.float(), want, atol=2e-2, rtol=2e-2), n


def test_a_constexpr_block_named_by_the_inline_launch(tmp_path: Path) -> None:
    (tmp_path / "row_scale.py").write_text(INLINE)
    unit = cuda_unit(tmp_path / "row_scale.py")
    out = _apply("launch-threads{threads=64}", unit.source, unit.source_path)
    assert "constexpr int kThreads = 64;" in out and "<<<x.size(0), kThreads>>>" in out
    assert launch_block(kir.parse(out, "cuda", path=unit.source_path)).dims == (64, 1, 1)
    _round_trip(out, unit.source_path, unit.source)
    device = hostforms.device_source(out)
    ptx_for_sm90a(device)
    lib = cudacpu.build(device, name="row_scale.cu")
    x = torch.randn(4, 300, generator=torch.Generator().manual_seed(3))
    y = torch.zeros_like(x)
    lib.launch("row_scale", 4, 64, 0, [x, y, 300])
    assert torch.allclose(y, x * torch.rsqrt((x * x).mean(1, keepdim=True) + 1e-6), atol=1e-5)


def test_a_kernel_scope_const_and_a_host_literal(tmp_path: Path) -> None:
    (tmp_path / "shift.cu").write_text(LOCAL)
    (tmp_path / "shift.py").write_text(LOCAL_HOST)
    out = _apply("launch-threads{threads=128}", LOCAL, tmp_path / "shift.cu")
    assert "const int nt = 128;" in out and '"block_from": [256, 1, 1]' in out
    _round_trip(out, tmp_path / "shift.cu", LOCAL)
    ptx_for_sm90a(out)
    x = torch.randn(5, 700, generator=torch.Generator().manual_seed(4))
    got = cudacpu.run_host(out, tmp_path / "shift.py", x, stem="shift")
    assert torch.equal(got, x - x.amax(1, keepdim=True))


def test_a_constant_used_elsewhere_is_refused_and_the_use_named(tmp_path: Path) -> None:
    (tmp_path / "shift.py").write_text(LOCAL_HOST)
    other = LOCAL.replace("best[0];\n}", "best[0] + (threadIdx.x < nt ? 0.f : 1.f);\n}")
    (tmp_path / "shift.cu").write_text(other)
    reason = _refusal(other, tmp_path / "shift.cu")
    assert "`nt` (256), also used where a smaller value is not vouched for (line 15:" in reason
    twice = LOCAL + "__device__ int spare() { const int nt = 256; return nt; }\n"
    (tmp_path / "shift.cu").write_text(twice)
    assert "`nt` is defined 2 times" in _refusal(twice, tmp_path / "shift.cu")
    literal = LOCAL.replace("for (int s = nt >> 1;", "for (int s = 256 >> 1;")
    (tmp_path / "shift.cu").write_text(literal)
    assert "counts its threads as `256` (256) besides `nt`" in _refusal(literal, tmp_path / "shift.cu")
    (tmp_path / "row_scale.py").write_text(INLINE.replace(
        "const float k = rsqrtf(part[0] / width", "const float k = rsqrtf(part[0] * kThreads / width"))
    unit = cuda_unit(tmp_path / "row_scale.py")
    assert "`kThreads` (256), also used" in _refusal(unit.source, unit.source_path)
    # an array outside the kernel sized by the constant would shrink for its other callers
    (tmp_path / "row_scale.py").write_text(INLINE.replace(
        "torch::Tensor row_scale_op", "__device__ float first(const float* p) {\n  __shared__ float t[kThreads];\n"
        "  t[threadIdx.x] = p[threadIdx.x];\n  return t[0];\n}\n\ntorch::Tensor row_scale_op", 1))
    unit = cuda_unit(tmp_path / "row_scale.py")
    p = get_pass("launch-threads")()
    ir = kir.parse(unit.source, "cuda", path=unit.source_path)
    site = next(s for s in p.sites(ir) if not s.present)
    assert "`__shared__ float t[kThreads];`" in p.optimize(ir, site, CTX).reason


def _registers(source: str, path: Path, ctx: PassContext, vectors: int = 0) -> Applied:
    p = get_pass("row-registers").from_options({"vectors": vectors})
    ir = kir.parse(source, "cuda", path=path)
    results = [p.optimize(ir, s, ctx) for s in p.sites(ir) if not s.present]
    assert len(results) == 1
    return results[0]


def test_row_registers_fit_the_cases_row_at_the_launchs_block() -> None:
    folder = STYLES / "cu_layernorm"
    path = folder / "layernorm.cu"
    start = path.read_text()
    device = PassContext.for_case(str(folder), tier="device")  # N = 4096 bf16: 512 vectors a row
    assert device.facts["shape_dims"] == ("M", "N", "dtype")
    for asked, held in ((0, 2), (1, 2), (8, 8)):  # a recorded 1 would only take the fallback;
        made = _registers(start, path, device, asked)  # 8 holds it (a recorded form's round trip)
        assert isinstance(made, Applied) and made.options == {"vectors": held}, made
    narrow = _apply("launch-threads{threads=128}", start, path)
    made = _registers(narrow, path, device)
    assert made.options == {"vectors": 4} and "uint4 kl_reg0[4];" in made.ir.text
    small = PassContext.for_case(str(folder), tier="interpret")  # N = 600: one vector a thread
    made = _registers(start, path, small)
    assert made.options == {"vectors": 1}
    case = gate.load_case(folder)
    inputs = tuple(case.module().make_inputs({"M": 3, "N": 600, "dtype": "bf16"}, 2, "cpu"))
    got = cudacpu.run_host(made.ir.text, folder / "layernorm.py", *inputs, stem="layernorm")
    assert torch.allclose(got.float(), case.module().reference(*inputs).float(), atol=2e-2, rtol=2e-2)
    # a row too long for 16 vectors a thread: the form would only take its fallback
    long = device.with_facts({"N": 4096 * 64})
    made = _registers(start, path, long)
    assert made.reason.startswith("a row of 262144 elements at 256 threads needs 128 vectors")
    # a square case tells a bound that is not one of its facts (`cols`); an oblong one does not ...
    unit = cuda_unit(STYLES / "cu_softmax_rows" / "softmax_rows.py")
    square = PassContext(facts={"M": 8192, "N": 8192, "dtype": "fp16", "shape_dims": ("M", "N", "dtype")})
    assert _registers(unit.source, unit.source_path, square).options == {"vectors": 4}
    oblong = square.with_facts({"M": 100})
    assert _registers(unit.source, unit.source_path, oblong, 2).options == {"vectors": 2}
    # ... unless the case's inputs have one last dimension (the row a block walks)
    rows = oblong.with_facts({"input_shapes": ((100, 8192), (8192,))})
    assert _registers(unit.source, unit.source_path, rows, 2).options == {"vectors": 4}
    unit = cuda_unit(STYLES / "cu_rmsnorm" / "rmsnorm.py")  # `dim`, an oblong 16384 x 4096 case
    shaped = PassContext.for_case(str(STYLES / "cu_rmsnorm"), tier="device")
    assert shaped.facts["input_shapes"] == ((16384, 4096), (4096,))
    assert _registers(unit.source, unit.source_path, shaped).options == {"vectors": 4}


def test_a_narrower_launch_refits_a_row_held_for_the_wider_block() -> None:
    folder = STYLES / "cu_layernorm"
    path = folder / "layernorm.cu"
    device = PassContext.for_case(str(folder), tier="device")
    held = _registers(path.read_text(), path, device).ir.text  # 2 vectors at 256 threads
    p = get_pass("launch-threads").from_options({"threads": 128})
    ir = kir.parse(held, "cuda", path=path)
    site = next(s for s in p.sites(ir) if not s.present)
    made = p.optimize(ir, site, device)  # 4096 elements at 128 threads: 4 vectors
    assert isinstance(made, Applied) and "uint4 kl_reg0[4];" in made.ir.text, made
    assert "(N) <= 32 * (NT)" in made.ir.text
    unknown = p.optimize(ir, site, CTX)  # the row not known: 2 vectors scaled by 256 / 128
    assert isinstance(unknown, Applied) and unknown.ir.text == made.ir.text


def test_the_searches_old_chain_then_the_narrower_launch() -> None:
    folder = STYLES / "cu_layernorm"
    path = folder / "layernorm.cu"
    text = path.read_text()
    for spec in ("warp-shuffle-reduce", "restrict-readonly", "vectorize-global", "launch-bounds"):
        p = get_pass(spec)()
        while True:  # every site the rule takes, as the searches' chain took them
            ir = kir.parse(text, "cuda", path=path)
            made = next((r for r in (p.optimize(ir, s, CTX) for s in p.sites(ir) if not s.present)
                         if isinstance(r, Applied)), None)
            if made is None:
                break
            text = made.ir.text
    assert "((NT) >> 5)" in text and "2 * (NT)" in text  # the shuffles and vectors name the block
    out = _apply("launch-threads{threads=128}", text, path)
    assert "#define NT 128" in out
    _round_trip(out, path, text)
    ptx_for_sm90a(out)
    case = gate.load_case(folder)
    for n in (600, 1030):
        inputs = tuple(case.module().make_inputs({"M": 3, "N": n, "dtype": "bf16"}, 3, "cpu"))
        got = cudacpu.run_host(out, folder / "layernorm.py", *inputs, stem="layernorm")
        assert torch.allclose(got.float(), case.module().reference(*inputs).float(), atol=2e-2, rtol=2e-2), n
