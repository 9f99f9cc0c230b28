"""`launch-bounds{resident}` on kernels written here in styles the repository's kernels do not
use: the bounds ask for the blocks that fill an SM's threads (2048 / threads), so that ptxas
keeps a thread's registers at 32 and registers never hold fewer blocks on an SM than threads do
(a row kernel whose vectorized passes take more registers otherwise); the output compiles with
NVRTC for sm_90a and computes the answer on the CPU emulation; the de-optimization records the
form so that a card materializes it on a kernel with another block size; the shipped card does.
bench/cuda_roles.py gates a kernel's rule outputs at once (--jobs)."""
from __future__ import annotations

import re

import pytest
import torch

import kir
from nvrtc_helpers import ptx_for_sm90a
from passes import Applied, PassContext, Skipped, get_pass
from passes.cuda.annotations import resident_blocks

from test_cuda_role_rules import _apply_all

# LayerNorm over bf16 rows, restyled: a block of 128 threads strides by blockDim.x, the
# statistics reduced by a `__shfl_xor_sync` butterfly and a shared array of warp partials,
# the row's length an `unsigned`, the output written through a separate pointer of rows
ROW_NORM = r"""
#include <cuda_bf16.h>
__device__ float all_sum(float v, float* part) {
  #pragma unroll
  for (int m = 16; m; m >>= 1) v += __shfl_xor_sync(0xffffffffu, v, m);
  const int nw = blockDim.x / 32;
  if ((threadIdx.x & 31) == 0) part[threadIdx.x / 32] = v;
  __syncthreads();
  float t = 0.f;
  for (int k = 0; k < nw; ++k) t += part[k];
  __syncthreads();
  return t;
}
extern "C" __global__ void normalize_rows(const __nv_bfloat16* in, const __nv_bfloat16* scale,
                                          const __nv_bfloat16* shift, __nv_bfloat16* out,
                                          unsigned width, float tiny) {
  __shared__ float part[32];
  const __nv_bfloat16* src = in + (unsigned long long)blockIdx.x * width;
  __nv_bfloat16* dst = out + (unsigned long long)blockIdx.x * width;
  float acc = 0.f;
  for (unsigned c = threadIdx.x; c < width; c += blockDim.x) acc += __bfloat162float(src[c]);
  const float mu = all_sum(acc, part) / width;
  float dev = 0.f;
  for (unsigned c = threadIdx.x; c < width; c += blockDim.x) {
    const float e = __bfloat162float(src[c]) - mu;
    dev = fmaf(e, e, dev);
  }
  const float inv = rsqrtf(all_sum(dev, part) / width + tiny);
  for (unsigned c = threadIdx.x; c < width; c += blockDim.x)
    dst[c] = __float2bfloat16((__bfloat162float(src[c]) - mu) * inv * __bfloat162float(scale[c])
                              + __bfloat162float(shift[c]));
}
"""

# its host: NVRTC + the driver through experts.cudahost, 128 threads a block
HOST = '''
from pathlib import Path
import torch
from experts import cudahost
_fn = []
def run(x, w, b):
    if not _fn:
        src = Path(__file__).with_suffix(".cu")
        _fn.append(cudahost.get_function(cudahost.compile_source(src.read_text(), name=src.name),
                                         "normalize_rows"))
    y = torch.empty_like(x)
    cudahost.launch(_fn[0], x.shape[0], 128, 0, [x, w, b, y, x.shape[1], 1e-5],
                    torch.cuda.current_stream())
    return y
'''

# a kernel whose bounds name a template parameter (no value until instantiated) and one whose
# bounds are a macro without a minimum
TEMPLATED = r"""
template <int BLOCK>
__global__ void __launch_bounds__(BLOCK) scale_rows(const float* a, float* b, int n, float s) {
  for (int i = threadIdx.x; i < n; i += BLOCK) b[blockIdx.x * n + i] = a[blockIdx.x * n + i] * s;
}
template __global__ void scale_rows<64>(const float*, float*, int, float);
"""
MACRO = r"""
#define NTHREADS 512
extern "C" __global__ void __launch_bounds__(NTHREADS) square(const float* a, float* b, int n) {
  const int i = blockIdx.x * NTHREADS + threadIdx.x;
  if (i < n) b[i] = a[i] * a[i];
}
"""


def _registers(text: str) -> tuple[int, int]:
    """(registers a thread, spilled bytes) of the only kernel of `text` compiled for sm_90a."""
    cudahost = pytest.importorskip("experts.cudahost")
    ptx_for_sm90a(text)  # a compile error fails with NVRTC's log
    res = next(iter(cudahost.compile_source(text, name="candidate.cu", arch="sm_90a").resources().values()))
    return res["registers"], res["spill_stores"] + res["spill_loads"]


def test_resident_bounds_cap_registers_of_a_vectorized_row_kernel() -> None:
    ctx = PassContext(facts={"arch": "sm_90", "block_threads": 128})
    vectorized, _ = _apply_all("vectorize-global", ROW_NORM, ctx)
    bounded, results = _apply_all("launch-bounds", vectorized, ctx, resident=True)
    assert any(isinstance(r, Applied) for r in results)
    assert "__launch_bounds__(128, 16)" in bounded
    before, _ = _registers(vectorized)
    after, spilled = _registers(bounded)
    assert before > 32 >= after, (before, after)  # 16 blocks of 128 threads fit an SM's registers
    assert spilled == 0


def test_resident_bounds_compute_the_answer_on_the_emulator(tmp_path) -> None:  # noqa: ANN001
    cudacpu = pytest.importorskip("gate.cudacpu")
    import gate  # noqa: PLC0415

    ctx = PassContext(facts={"arch": "sm_90", "block_threads": 128})
    vectorized, _ = _apply_all("vectorize-global", ROW_NORM, ctx)
    bounded, _ = _apply_all("launch-bounds", vectorized, ctx, resident=True)
    case = gate.load_case("layernorm_bf16")
    for shape in case.small_shapes.values():
        x, w, b = case.module().make_inputs(dict(shape), 5, "cpu")
        try:
            out = cudacpu.run_host(bounded, HOST, x, w, b, stem="normalize_rows")
        except cudacpu.BuildError as exc:
            pytest.skip(f"the CPU emulation does not build here: {str(exc).splitlines()[0]}")
        ref = case.module().reference(x, w, b)
        assert torch.allclose(out.float(), ref.float(), atol=3e-2, rtol=2e-2), shape


def test_bounds_without_a_minimum_gain_one_and_lose_it_again() -> None:
    rule = get_pass("launch-bounds").from_options({"resident": True})
    for text, want in ((MACRO, "__launch_bounds__(NTHREADS, 4)"),
                       (TEMPLATED, f"__launch_bounds__(BLOCK, {resident_blocks('BLOCK', TEMPLATED)})")):
        out, results = _apply_all("launch-bounds", text, resident=True)
        assert want in out, out
        ptx_for_sm90a(out)  # the expression form is a constant of the template's instance
        ir = kir.parse(out, "cuda")
        site = next(s for s in rule.sites(ir) if s.present)
        back = rule.deoptimize(ir, site)
        assert isinstance(back, Applied) and "__launch_bounds__" not in back.ir.text
        assert back.options["resident"] is True
        again = get_pass("launch-bounds").from_options(back.options)
        site = next(s for s in again.sites(back.ir) if not s.present)
        forward = again.optimize(back.ir, site, PassContext(facts={}))
        assert isinstance(forward, Applied) and want in forward.ir.text
    # without the option a kernel's own bounds are no site, and bounds of another minimum are
    # recorded as written
    assert not [s for s in get_pass("launch-bounds")().sites(kir.parse(MACRO, "cuda")) if not s.present]
    other = MACRO.replace("(NTHREADS)", "(NTHREADS, 2)")
    ir = kir.parse(other, "cuda")
    site = next(s for s in rule.sites(ir) if s.present)
    back = rule.deoptimize(ir, site)
    assert back.options["bounds"] == "NTHREADS, 2" and "resident" not in back.options


def test_resident_bounds_on_a_larger_block_and_a_refusal() -> None:
    out, _ = _apply_all("launch-bounds", ROW_NORM, PassContext(facts={"block_threads": 1024}),
                        resident=True)
    assert "__launch_bounds__(1024, 2)" in out
    ir = kir.parse(ROW_NORM, "cuda")
    rule = get_pass("launch-bounds").from_options({"resident": True})
    site = next(s for s in rule.sites(ir) if not s.present)
    refused = rule.optimize(ir, site, PassContext(facts={}))  # no launch, no fact: unknown block
    assert isinstance(refused, Skipped) and "block size is unknown" in refused.reason


def test_the_shipped_card_materializes_full_occupancy_on_a_user_kernel(
        tmp_path, monkeypatch) -> None:  # noqa: ANN001
    from lineage.shipped import open_library  # noqa: PLC0415

    monkeypatch.setenv("KLINEAGE_CACHE_DIR", str(tmp_path))
    lib, named = open_library(None)
    cards = [c for c in lib.cards(admitted_only=True)
             if c.pass_name == "launch-bounds" and c.options.get("resident")]
    assert cards, "the shipped library holds an admitted resident launch-bounds card"
    assert any(set(p.get("ids") or ()) & {c.id for c in cards} and p["tier"] == "emulate"
               for p in named["provenance"]["parts"])
    assert all(any(t.ok for t in c.verification) for c in cards)  # a passing held-out trial
    card = cards[0]
    rule = get_pass("launch-bounds").from_options(card.options)
    ir = kir.parse(ROW_NORM, "cuda")
    site = next(s for s in rule.sites(ir) if not s.present)
    result = rule.optimize(ir, site, PassContext(facts={"block_threads": 128}))
    assert isinstance(result, Applied)
    assert re.search(r"__launch_bounds__\(128, 16\)\s*normalize_rows", result.ir.text)


def test_cuda_roles_gates_a_kernels_rule_outputs_at_once(tmp_path, capsys) -> None:  # noqa: ANN001
    import importlib.util  # noqa: PLC0415
    import json  # noqa: PLC0415
    from pathlib import Path  # noqa: PLC0415

    pytest.importorskip("experts.cudahost")
    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("cuda_roles", root / "bench" / "cuda_roles.py")
    roles = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(roles)
    folder = root / "bench" / "styles" / "cuda" / "cu_layernorm"
    assert roles.main([str(folder), "--out", str(tmp_path), "--jobs", "0"]) == 2
    rc = roles.main([str(folder), "--tier", "static", "--jobs", "3", "--json", "--out", str(tmp_path),
                     "--rules", "warp-shuffle-reduce,launch-bounds{resident=1}"])
    assert rc == 0
    rules = json.loads(capsys.readouterr().out)["kernels"][0]["rules"]
    assert set(rules) == {"warp-shuffle-reduce", "launch-bounds{resident=1}", "all of the above"}
    assert all(r["applied"] and r["verdict"]["ok"] for r in rules.values()), rules
    assert (tmp_path / "cuda_roles.md").is_file()


# a register-blocked product: each thread keeps a 6x8 tile of results and two fragments
BLOCKED = r"""
extern "C" __global__ void blocked_product(const float* a, const float* b, float* c, int n) {
  __shared__ float sa[16][97], sb[16][129];
  float part[6][8] = {};
  float fa[6], fb[8];
  const int r0 = blockIdx.y * 96 + (threadIdx.x / 16) * 6, c0 = blockIdx.x * 128 + (threadIdx.x % 16) * 8;
  for (int k0 = 0; k0 < n; k0 += 16) {
    for (int i = threadIdx.x; i < 16 * 96; i += blockDim.x) sa[i % 16][i / 16] = a[(blockIdx.y * 96 + i / 16) * n + k0 + i % 16];
    for (int i = threadIdx.x; i < 16 * 128; i += blockDim.x) sb[i / 128][i % 128] = b[(k0 + i / 128) * n + blockIdx.x * 128 + i % 128];
    __syncthreads();
    for (int k = 0; k < 16; ++k) {
      for (int i = 0; i < 6; ++i) fa[i] = sa[k][(threadIdx.x / 16) * 6 + i];
      for (int j = 0; j < 8; ++j) fb[j] = sb[k][(threadIdx.x % 16) * 8 + j];
      for (int i = 0; i < 6; ++i)
        for (int j = 0; j < 8; ++j) part[i][j] += fa[i] * fb[j];
    }
    __syncthreads();
  }
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 8; ++j) c[(r0 + i) * n + c0 + j] = part[i][j];
}
"""


def test_resident_bounds_are_refused_where_register_tiles_would_spill() -> None:
    """At 2048 / 256 = 8 blocks an SM leaves 32 registers a thread: a thread holding 62 words
    of register tiles would spill them (a 10x slower product), so the minimum is refused with
    the tiles named; bounds without a minimum still apply, and so do the bounds on a row
    kernel whose thread holds no tile."""
    ctx = PassContext(facts={"arch": "sm_90", "block_threads": 256})
    rule = get_pass("launch-bounds").from_options({"resident": True})
    ir = kir.parse(BLOCKED, "cuda")
    site = next(s for s in rule.sites(ir) if not s.present)
    refused = rule.optimize(ir, site, ctx)
    assert isinstance(refused, Skipped), refused
    assert "62 words" in refused.reason and "part[6][8]" in refused.reason and "32 registers" in refused.reason
    recorded = get_pass("launch-bounds").from_options({"bounds": "256, 4"})
    assert isinstance(recorded.optimize(ir, site, ctx), Skipped)  # 64 registers: 62 > 32
    loose = get_pass("launch-bounds").from_options({"bounds": "256, 1"})
    applied = loose.optimize(ir, site, ctx)
    assert isinstance(applied, Applied) and "__launch_bounds__(256, 1)" in applied.ir.text
    plain = get_pass("launch-bounds")().optimize(ir, site, ctx)
    assert isinstance(plain, Applied) and "__launch_bounds__(256)" in plain.ir.text
    out, results = _apply_all("launch-bounds", ROW_NORM, PassContext(facts={"block_threads": 256}),
                              resident=True)
    assert "__launch_bounds__(256, 8)" in out
