"""The CUDA roles and rules on kernels in further user styles (bench/styles/cuda/nw_*: each a
folder with its case and its start, a `.cu` beside its host or a host holding the source):
a GEMM whose square tiles are as wide as its 2-D block (`blockDim.x`) and carved out of one
dynamic shared buffer, indexed through a macro; a one-warp-per-row softmax whose arguments are
one structure passed by value; a LayerNorm folding two arrays carved from dynamic shared memory
in one tree (CuPy); an RMSNorm whose cooperative-groups tiles fold with `tile.shfl_down`, read
through `__ldg`; a 64-bit grid-stride SiLU (CuPy RawModule); an RMSNorm reading rows as
`float4` whose tree is a do-while loop; a `template <int BLOCK, typename T>` row sum launched
by a templated host wrapper (`load_inline`); a 4x4-register-tile GEMM whose operands and
sizes are the fields of one structure passed by value; an L2 norm whose (32, 8) block is
numbered as one line of threads. Each rule that acts finds its site as the user
wrote it; its output compiles with NVRTC for sm_90a and, run through the kernel's own host on
the CPU (`gate.cudacpu`), matches the case's reference at its small shape. What a rule cannot
rewrite soundly it refuses, and says why."""
from __future__ import annotations

from pathlib import Path

import pytest

import kir
from kir.embedded import CudaUnit, cuda_unit
from nvrtc_helpers import ptx_for_sm90a
from passes import Applied, PassContext, get_pass
from passes.cuda import recognize as R
from passes.cuda.gemm_direct import find_direct
from passes.cuda.gemm_eval import find_gemm_tiles
from passes.cuda.memory import vector_loops
from passes.cuda.tile_narrow import exact_kind

torch = pytest.importorskip("torch")
cudacpu = pytest.importorskip("gate.cudacpu")

import gate  # noqa: E402

STYLES = Path(__file__).resolve().parents[1] / "bench" / "styles" / "cuda"


@pytest.fixture(autouse=True)
def _no_nvrtc_in_the_host(monkeypatch: pytest.MonkeyPatch) -> None:
    # NVRTC compiles each output once below (ptx_for_sm90a); the emulated host need not again.
    monkeypatch.setenv("KLINEAGE_CUDACPU_NVRTC", "0")


def _unit(folder: str) -> CudaUnit:
    """The folder's CUDA start: its `.cu`, else the host module holding the source."""
    path = STYLES / folder
    starts = sorted(path.glob("*.cu")) or [p for p in sorted(path.glob("*.py")) if p.name != "case.py"]
    unit = cuda_unit(starts[0])
    assert unit is not None, folder
    return unit


def _ir(folder: str) -> kir.KernelIR:
    unit = _unit(folder)
    return kir.parse(unit.source, "cuda", path=unit.source_path)


def _rule_output(folder: str, rule: str) -> tuple[str, int, list[str]]:
    """The start after `rule` acted at every open site it takes (the launch's block read from
    the host, as the optimize loop gives it), how often it acted, and its refusals."""
    unit = _unit(folder)
    ir = _ir(folder)
    launch = R.launch_block(ir, host=unit.host_path.read_text())
    ctx = PassContext(facts={"arch": "sm_90", **({"block_threads": launch.threads}
                                                 if launch.threads else {})})
    p = get_pass(rule)()
    applied, refusals = 0, []
    for _ in range(8):
        for site in [s for s in p.sites(ir) if not s.present]:
            result = p.optimize(ir, site, ctx)
            if isinstance(result, Applied):
                ir, applied = result.ir, applied + 1
                break
            refusals.append(getattr(result, "reason", getattr(result, "error", "")))
        else:
            break
    return ir.text, applied, refusals


def _emulated_error(folder: str, source: str) -> tuple[float, float]:
    """(relative error, tolerance) of the folder's host running `source` on the emulator at
    the case's small shape, against the case's reference."""
    case = gate.load_case(STYLES / folder)
    shape = dict(next(iter(case.small_shapes.values())))
    inputs = tuple(case.module().make_inputs(shape, 5, "cpu"))
    host = _unit(folder).host_path
    from gate.cudacpu.host import EMULATED  # noqa: PLC0415
    from gate.hostview import cupy_stand_in  # noqa: PLC0415

    with cupy_stand_in(EMULATED):  # a CuPy host compiles its own source: the gate's stand-in
        out = cudacpu.run_host(source, host, *inputs, stem=host.stem)
    ref = case.module().reference(*inputs)
    err = float(torch.linalg.vector_norm(out.double() - ref.double()) /
                max(float(torch.linalg.vector_norm(ref.double())), 1e-30))
    return err, case.tolerance_for(shape["dtype"])


DYNAMIC = r"""
extern "C" __global__ void k(const float* x, float* y, int n) {
  extern __shared__ float smem[];
  float* a = smem;
  float* b = OFFSET;
  a[threadIdx.x] = x[blockIdx.x * n + threadIdx.x];
  b[SLOT] = 1.f;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) a[threadIdx.x] += a[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) y[blockIdx.x] = a[0] + b[0];
}
"""


@pytest.mark.parametrize("offset,slot,why", [
    ("smem + 2 * blockDim.x", "threadIdx.x", None),
    ("&smem[blockDim.x]", "threadIdx.x", None),
    ("smem + n", "threadIdx.x", "the pointer `b` is set to `smem + n`"),
    ("smem + blockDim.x", "threadIdx.x + 1", "`b[threadIdx.x + 1]` addresses the dynamic buffer"),
    ("smem + blockDim.x", "2 * threadIdx.x", "`b[2 * threadIdx.x]` addresses the dynamic buffer"),
])
def test_dynamic_shared_memory_a_smaller_block_needs_less_of(offset: str, slot: str,
                                                              why: str | None) -> None:
    from passes.cuda.launch_threads import dynamic_refusal  # noqa: PLC0415

    source = DYNAMIC.replace("OFFSET", offset).replace("SLOT", slot)
    got = dynamic_refusal(R.Unit(kir.parse(source, "cuda")), "k")
    assert got is None if why is None else why in (got or ""), got


# (kernel folder, rule, sites it acts at, what its PTX holds)
ACTS = [
    ("nw_float4_rms", "warp-shuffle-reduce", 1, "shfl.sync.down"),  # a do-while tree
    ("nw_params_warp_softmax", "vectorize-global", 1, ".v4."),  # rows from a struct's pointers
    ("nw_params_warp_softmax", "row-registers", 1, ".v4."),  # a warp's row, past a guarded return
    ("nw_gemm_blockdim", "mma-micro-kernel", 1, "mma.sync"),  # carved tiles, blockDim.x wide
    ("nw_gemm_blockdim", "gemm-schedule", 1, "mma.sync"),  # the carved buffer goes with the loop
    ("nw_carved_ln", "warp-shuffle-reduce", 1, "shfl.sync.down"),  # two carved arrays, one tree
    ("nw_gridstride_silu", "vectorize-global", 1, ".v4."),  # size_t grid stride, __ldg
    ("nw_cg_shfl_rms", "row-cache", 1, "cp.async"),  # __ldg reads of an fp16 row
    ("nw_carved_ln", "launch-threads", 1, None),  # the host's dynamic bytes kept
    ("nw_lin2d_l2", "warp-shuffle-reduce", 1, "shfl.sync.down"),  # a tree over ty * 32 + tx
    ("nw_gemm_params", "mma-micro-kernel", 1, "mma.sync"),  # operands read as `g.a[...]`
    ("nw_gemm_params", "gemm-schedule", 1, "mma.sync"),
]


@pytest.mark.parametrize("folder,rule,count,mark", ACTS, ids=[f"{f}-{r}" for f, r, _, _ in ACTS])
def test_the_rule_acts_on_the_kernel_as_written_and_keeps_its_answer(folder: str, rule: str,
                                                                     count: int, mark: str | None) -> None:
    out, applied, refusals = _rule_output(folder, rule)
    assert applied == count, refusals
    ptx = ptx_for_sm90a(out)
    assert mark is None or mark in ptx
    err, tol = _emulated_error(folder, out)
    assert err <= tol, f"{rule} on {folder}: error {err:.3g} over {tol}"


def test_roles_of_the_kernels_in_their_spelling() -> None:
    trees = {f: [(t["form"], t["extent"], [c["op"] for c in t["combines"]])
                 for t in R.roles(_ir(f))["reduction_trees"]]
             for f in ("nw_float4_rms", "nw_carved_ln", "nw_cg_shfl_rms", "nw_params_warp_softmax")}
    assert trees == {"nw_float4_rms": [("halving", "blockDim.x", ["sum"])],
                     "nw_carved_ln": [("halving", "blockDim.x", ["sum", "sum"])],
                     "nw_cg_shfl_rms": [],  # its folds are shuffles already
                     "nw_params_warp_softmax": []}
    loops = {f: [s.kind for s in R.stride_loops(_ir(f))]
             for f in ("nw_gridstride_silu", "nw_tmpl_atomic_rowsum", "nw_params_warp_softmax")}
    assert loops == {"nw_gridstride_silu": ["grid"],
                     "nw_tmpl_atomic_rowsum": ["block"],  # `i += BLOCK`, `<kBlock, T>` at launch
                     "nw_params_warp_softmax": ["block"] * 3}
    ir = _ir("nw_params_warp_softmax")
    unit = R.Unit(ir)
    pointers = R.global_pointers(unit, unit.kernels["softmax_warp_rows"])
    assert {k: v for k, v in pointers.items() if k in ("x", "y")} == {"x": "float", "y": "float"}
    blocks = {f: R.launch_block(_ir(f), host=_unit(f).host_path.read_text()).dims
              for f in ("nw_gemm_blockdim", "nw_params_warp_softmax", "nw_tmpl_atomic_rowsum",
                        "nw_carved_ln", "nw_gridstride_silu")}
    assert blocks == {"nw_gemm_blockdim": (16, 16, 1), "nw_params_warp_softmax": (32, 4, 1),
                      "nw_tmpl_atomic_rowsum": (128, 1, 1), "nw_carved_ln": (256, 1, 1),
                      "nw_gridstride_silu": (128, 1, 1)}


def test_the_carved_gemm_is_a_micro_kernel_over_views_of_its_buffer() -> None:
    ir = _ir("nw_gemm_blockdim")
    tiles, why = find_gemm_tiles(ir, (16, 16))
    assert why == [] and [(t.bm, t.bn, t.bk, t.dynamic) for t in tiles] == [(16, 16, 16, True)]
    tile = tiles[0]
    # the two tiles lie TS * TS = 256 floats apart in the one buffer
    assert sorted(t.base for t in (tile.a, tile.b)) == [0, 256]
    assert {exact_kind(ir, "hgemm_dyn", t.array, tile.region) for t in (tile.a, tile.b)} == {"fp16"}
    # the stagings are not rings cp-async-pipeline can double: it has no site, the roles say why
    roles = R.roles(ir)
    assert roles["stagings"] == []
    assert [r["reason"].split(",")[0] for r in roles["refusals"]] == ["a copy into As", "a copy into Bs"]
    assert all("a pointer into shared memory" in r["reason"] for r in roles["refusals"])
    p = get_pass("cp-async-pipeline")()
    assert [s for s in p.sites(ir) if not s.present] == []


def test_operands_read_through_a_structures_pointer_fields_are_staged() -> None:
    ir = _ir("nw_gemm_params")
    unit = R.Unit(ir)
    assert R.struct_pointer_fields(unit, unit.kernels["gemm_params"]) == {
        "g.a": "__half", "g.b": "__half", "g.c": "__half"}
    staged = [(s["array"], s["source"], s["form"], s["converted"]) for s in R.roles(ir)["stagings"]]
    assert staged == [("a_t", "g.a", "ternary", True), ("b_s", "g.b", "ternary", True)]
    tile = find_gemm_tiles(ir, (256, 1))[0][0]
    assert exact_kind(ir, "gemm_params", tile.a.array, tile.region) == "fp16"
    # the fp32 tiles are filled by converting: cp.async copies bytes, so it refuses saying so
    _out, applied, refusals = _rule_output("nw_gemm_params", "cp-async-pipeline")
    assert applied == 0 and "converts what it reads" in refusals[0]


def _carved_variant(old: str, new: str) -> kir.KernelIR:
    text = _unit("nw_gemm_blockdim").source
    assert old in text
    return kir.parse(text.replace(old, new), "cuda")


def test_a_carved_buffer_written_other_than_element_by_element_is_not_told_exact() -> None:
    tile = find_gemm_tiles(_ir("nw_gemm_blockdim"), (16, 16))[0][0]
    scaled = _carved_variant("__half2float(B[IDX(t + ty, col, N)])",
                             "0.5f * __half2float(B[IDX(t + ty, col, N)]) + 0.1f")
    assert "holds" in exact_kind(scaled, "hgemm_dyn", tile.a.array, tile.region)
    retyped = _carved_variant("float* Bs = smem + TS * TS;",
                              "float* Bs = smem + TS * TS;\n    int* flags = (int*)(Bs + TS * TS);\n"
                              "    flags[threadIdx.x] = 0;")
    why = exact_kind(retyped, "hgemm_dyn", "As", tile.region)
    assert "cannot be told" in why, why
    p = get_pass("mma-micro-kernel")()
    ctx = PassContext(facts={"arch": "sm_90", "block_threads": 256})
    for ir in (scaled, retyped):
        results = [p.optimize(ir, s, ctx) for s in p.sites(ir) if not s.present]
        assert results and not any(isinstance(r, Applied) for r in results)


DO_TREE = r"""
extern "C" __global__ void k(const float* in, float* out, int n) {
  __shared__ float sh[256];
  float v = 0.f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) v += in[(size_t)blockIdx.x * n + i];
  sh[threadIdx.x] = v;
  __syncthreads();
  BODY
  if (threadIdx.x == 0) out[blockIdx.x] = TAIL;
}
"""


def _do_tree(body: str, tail: str = "sh[0]") -> str:
    return DO_TREE.replace("BODY", body).replace("TAIL", tail)


def test_do_while_trees_halved_first_or_last_keep_their_sums() -> None:
    first = _do_tree("unsigned s = blockDim.x; do { s >>= 1; if (threadIdx.x < s) sh[threadIdx.x] "
                     "+= sh[threadIdx.x + s]; __syncthreads(); } while (s > 1);")
    last = _do_tree("int s = blockDim.x / 2; do { if (threadIdx.x < s) sh[threadIdx.x] = "
                    "fmaxf(sh[threadIdx.x], sh[threadIdx.x + s]); __syncthreads(); s /= 2; } "
                    "while (s > 0);")
    x = torch.randn(3, 333, generator=torch.Generator().manual_seed(7))
    for source, want in ((first, None), (last, None)):
        trees, _ = R.reduction_trees(kir.parse(source, "cuda"))
        assert [(t.form, t.extent) for t in trees] == [("halving", "blockDim.x")]
        p = get_pass("warp-shuffle-reduce")()
        ir = kir.parse(source, "cuda")
        result = p.optimize(ir, next(s for s in p.sites(ir) if not s.present),
                            PassContext(facts={"arch": "sm_90"}))
        assert isinstance(result, Applied), result
        ptx_for_sm90a(result.ir.text)
        for block in (256, 64):
            got, start = torch.zeros(3), torch.zeros(3)
            cudacpu.build(result.ir.text, name="do_tree.cu").launch("k", 3, block, 0, [x, got, 333])
            cudacpu.build(source, name="do_tree_start.cu").launch("k", 3, block, 0, [x, start, 333])
            assert torch.allclose(got, start, rtol=1e-5, atol=1e-4), block


def test_do_while_loops_that_are_not_trees_are_refused_or_no_site() -> None:
    stops_early = _do_tree("unsigned s = blockDim.x; do { s >>= 1; if (threadIdx.x < s) "
                           "sh[threadIdx.x] += sh[threadIdx.x + s]; __syncthreads(); } while (s > 2);")
    read_after = _do_tree("unsigned s = blockDim.x; do { s >>= 1; if (threadIdx.x < s) "
                          "sh[threadIdx.x] += sh[threadIdx.x + s]; __syncthreads(); } while (s > 1);",
                          "sh[0] + s")
    both = _do_tree("unsigned s = blockDim.x; do { s >>= 1; if (threadIdx.x < s) sh[threadIdx.x] "
                    "+= sh[threadIdx.x + s]; __syncthreads(); s >>= 1; } while (s > 1);")
    for source, why in ((stops_early, "stops at s > 2"), (read_after, "read outside the tree"),
                        (both, "other than first or last")):
        trees, refusals = R.reduction_trees(kir.parse(source, "cuda"))
        assert trees == [] and any(why in r.reason for r in refusals), [r.reason for r in refusals]
        p = get_pass("warp-shuffle-reduce")()
        assert [s for s in p.sites(kir.parse(source, "cuda")) if not s.present] == []


MIXED_TEMPLATE = r"""
template <int BLOCK, typename T>
__global__ void rowsum(const T* __restrict__ x, float* __restrict__ y, int n) {
  __shared__ float sh[BLOCK];
  float s = 0.f;
  for (int i = threadIdx.x; i < n; i += BLOCK) s += static_cast<float>(x[(size_t)blockIdx.x * n + i]);
  sh[threadIdx.x] = s;
  __syncthreads();
  for (int k = BLOCK / 2; k > 0; k >>= 1) {
    if (threadIdx.x < k) sh[threadIdx.x] += sh[threadIdx.x + k];
    __syncthreads();
  }
  if (threadIdx.x == 0) y[blockIdx.x] = sh[0];
}
template __global__ void rowsum<256, float>(const float*, float*, int);

template <typename T>
void row_sums(const T* x, float* y, int m, int n) {
  constexpr int threads = 256;
  rowsum<threads, T><<<m, threads>>>(x, y, n);
}
"""


def test_a_template_of_a_value_and_a_type_reads_the_value_of_its_one_instantiation() -> None:
    ir = kir.parse(MIXED_TEMPLATE, "cuda")
    assert R.launch_block(ir).dims == (256, 1, 1)
    assert [s.kind for s in R.stride_loops(ir)] == ["block"]  # `i += BLOCK`, BLOCK = 256
    assert [(t.extent, t.extent_value) for t in R.reduction_trees(ir)[0]] == [("BLOCK", 256)]
    p = get_pass("warp-shuffle-reduce")()
    result = p.optimize(ir, next(s for s in p.sites(ir) if not s.present),
                        PassContext(facts={"arch": "sm_90"}))
    assert isinstance(result, Applied), result
    assert "blockDim.x ==" not in result.ir.text  # the launch proves the block
    device = result.ir.text[:result.ir.text.index("template <typename T>\nvoid")]
    assert "shfl.sync.down" in ptx_for_sm90a(device)  # the explicit instantiation is compiled
    unit = R.Unit(ir)
    fn = unit.functions["rowsum"]
    assert unit.template_value(fn, "BLOCK / 2") == 128
    # the element type is the type parameter: no lanes per 16 bytes, and vectorize-global says so
    (plan,) = [plan for _loop, plan in vector_loops(ir)]
    assert "`x` (T) have no size known here" in plan.reason
    # no GEMM: the GEMM rules say nothing of the template's several instantiations
    rowsum = _ir("nw_tmpl_atomic_rowsum")
    assert find_gemm_tiles(rowsum) == ([], []) and find_direct(rowsum, (128, 1)) == ([], [])
    halves = kir.parse(MIXED_TEMPLATE.replace(
        "rowsum<threads, T><<<m, threads>>>(x, y, n);",
        "rowsum<threads, T><<<m, threads>>>(x, y, n);\n  rowsum<256, __half><<<m, 256>>>(nullptr, y, n);"),
        "cuda")
    assert R.Unit(halves).template_value(R.Unit(halves).functions["rowsum"], "BLOCK") == 256
    other = kir.parse(MIXED_TEMPLATE.replace(
        "rowsum<threads, T><<<m, threads>>>(x, y, n);",
        "rowsum<threads, T><<<m, threads>>>(x, y, n);\n  rowsum<128, T><<<m, 128>>>(x, y, n);"),
        "cuda")
    assert R.Unit(other).template_value(R.Unit(other).functions["rowsum"], "BLOCK") is None


def test_launch_threads_keeps_the_carved_buffers_bytes_at_the_hosts_launch() -> None:
    out, applied, _ = _rule_output("nw_carved_ln", "launch-threads")
    (line,) = [ln for ln in out.splitlines() if ln.startswith("// host launch: ")]
    assert applied == 1 and '"keep_shared": true' in line and '"block": [128, 1, 1]' in line
    host = _unit("nw_carved_ln").host_path.read_text()
    from kir import hostlaunch  # noqa: PLC0415

    edited = hostlaunch.apply(host, out)
    assert "_kl_host_launch(" in edited and "shared_mem=2 * THREADS * 4" in edited


def test_gemm_schedule_drops_the_launchs_bytes_for_the_buffer_it_removes() -> None:
    out, applied, _ = _rule_output("nw_gemm_blockdim", "gemm-schedule")
    assert applied == 1 and "extern __shared__" not in out
    (line,) = [ln for ln in out.splitlines() if ln.startswith("// host launch: ")]
    assert '"drop_shared": true' in line and '"block_from": [16, 16, 1]' in line
    # a buffer the body still uses after the K loop stays: the rule says so
    text = _unit("nw_gemm_blockdim").source.replace(
        "C[IDX(row, col, N)] = __float2half(acc);", "C[IDX(row, col, N)] = __float2half(acc + smem[0]);")
    p = get_pass("gemm-schedule")()
    ir = kir.parse(text, "cuda", path=_unit("nw_gemm_blockdim").source_path)
    results = [p.optimize(ir, s, PassContext(facts={"arch": "sm_90", "block_threads": 256}))
               for s in p.sites(ir) if not s.present]
    assert results and not any(isinstance(r, Applied) for r in results)
    assert any("dynamic shared memory beyond the K loop's tiles" in r.reason for r in results)
