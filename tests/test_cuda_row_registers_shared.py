"""`row-registers` on a row the kernel already keeps in shared memory: `row-cache`'s form (after
the launch was narrowed and the passes vectorized, the chain the style tier's LayerNorm search
kept) and a copy an expert wrote by hand. The passes are read back from global memory, the
vectorized loops become their loops as written, and the row is held in registers instead; the
output compiles with NVRTC for sm_90a and, through each kernel's own host module on the CPU
(`gate.cudacpu`), matches torch at the case's small shape; the shipped card materializes on the
search's best state; the round trip holds; refusals say why."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

import kir
from cuda_style_helpers import context, emulated_error, start
from nvrtc_helpers import ptx_for_sm90a
from passes import Applied, PassContext, Skipped, get_pass
from passes.cuda.memory import vector_fallbacks
from passes.cuda.row_cache import cached_rows
from passes.cuda.row_registers import register_rows, rows_as_written
from passes.roundtrip import roundtrip

pytest.importorskip("torch")
pytest.importorskip("gate.cudacpu")

ROOT = Path(__file__).resolve().parents[1]
STYLES = ROOT / "bench" / "styles" / "cuda"
ROWS = Path(__file__).resolve().parent / "data" / "cuda_rows"


@pytest.fixture(autouse=True)
def _no_nvrtc_in_the_host(monkeypatch: pytest.MonkeyPatch) -> None:
    # NVRTC compiles each output once below (ptx_for_sm90a); the emulated host need not again.
    monkeypatch.setenv("KLINEAGE_CUDACPU_NVRTC", "0")


def _chain(folder: Path, steps: list[tuple[str, dict]]) -> tuple[kir.KernelIR, PassContext]:
    """The folder's kernel after each rule acted once (at its first open site)."""
    cu, host = start(folder)
    ir = kir.parse_file(cu)
    ctx = context(ir, host)
    for rule, options in steps:
        p = get_pass(rule).from_options(options)
        result = next(r for r in (p.optimize(ir, s, ctx) for s in p.sites(ir) if not s.present)
                      if isinstance(r, Applied))
        ir = result.ir
    return ir, ctx


CACHED = [("row-cache", {}), ("vectorize-global", {})]
# (folder, the steps before row-registers)
KERNELS = [
    (STYLES / "cu_layernorm", [("launch-threads", {"threads": 128}), *CACHED]),  # bf16, two trees
    (ROWS / "rw_welford_ln", CACHED),  # Welford over a struct, per-thread counts
    (ROWS / "rw_cg_l2norm", CACHED),  # cooperative groups' thread_rank / size
    (ROWS / "rw_while_softmax", CACHED),  # trees as while loops
    (ROWS / "rw_smem_copy_ln", []),  # the row copied into shared memory by hand, fp16
]


@pytest.mark.parametrize("folder,steps", KERNELS, ids=[f.name for f, _s in KERNELS])
def test_a_row_kept_in_shared_memory_is_held_in_registers(folder: Path, steps: list) -> None:
    ir, ctx = _chain(folder, steps)
    (cached,) = cached_rows(ir)
    p = get_pass("row-registers")()
    (site,) = [s for s in p.sites(ir) if not s.present]
    assert site.detail["shared"] == cached.array
    result = p.optimize(ir, site, ctx)
    assert isinstance(result, Applied), result
    out = result.ir.text
    # the shared copy, its guard and its fill are gone (the name is left in comments only)
    assert all(line.lstrip().startswith("//") for line in out.splitlines()
               if re.search(rf"\b{cached.array}\b", line))
    assert "16-byte accesses where" not in out  # the vectorized passes became their loops
    assert len(register_rows(result.ir)) == 1 and cached_rows(result.ir) == []
    ptx = ptx_for_sm90a(out)
    assert ".v4." in ptx and "cp.async" not in ptx
    err, tol = emulated_error(folder, out)
    assert err <= tol, f"{folder.name}: error {err:.3g} over {tol}"
    # the form's de-optimization gives the passes over global memory, which the rule takes again
    back = kir.parse(out, "cuda", path=ir.path)
    present = [s for s in p.sites(back) if s.present]
    assert len(present) == 1
    assert roundtrip(p, back, present[0], ctx).same


# rows read from global memory by passes vectorized first (`vectorize-global` before any row rule)
VECTORIZED_ROWS = [
    (STYLES / "cu_layernorm", [("warp-shuffle-reduce", {}), ("vectorize-global", {})]),
    (ROWS / "rw_online_softmax", [("vectorize-global", {})]),
    (ROWS / "rw_cg_tree_rms", [("vectorize-global", {})]),
]


@pytest.mark.parametrize("folder,steps", VECTORIZED_ROWS, ids=[f.name for f, _s in VECTORIZED_ROWS])
def test_a_row_read_by_vectorized_passes_is_held_in_registers(folder: Path, steps: list) -> None:
    ir, ctx = _chain(folder, steps)
    assert "16-byte accesses where" in ir.text and cached_rows(ir) == []
    p = get_pass("row-registers")()
    (site,) = [s for s in p.sites(ir) if not s.present]
    assert site.detail["vectorized"] is True
    covered = ir.source[site.span[0]:site.span[1]].decode()  # every vectorized pass, whole
    assert covered.count("16-byte accesses where") == ir.text.count("16-byte accesses where")
    assert covered.startswith("{") and covered.endswith("}")
    result = p.optimize(ir, site, ctx)
    assert isinstance(result, Applied), result
    out = result.ir.text
    assert "16-byte accesses where" not in out and len(register_rows(result.ir)) == 1
    assert ".v4." in ptx_for_sm90a(out)
    err, tol = emulated_error(folder, out)
    assert err <= tol, f"{folder.name}: error {err:.3g} over {tol}"


def test_the_layernorm_searchs_best_takes_the_card_with_the_rows_fitted_vectors() -> None:
    """The state the style tier's LayerNorm searches kept (the own sweep's 128 threads, row-cache,
    vectorize-global) had no row-registers site; the shipped card now materializes there, with
    the vectors that hold the case's row (4096 bf16 at 128 threads: 4)."""
    from lineage.moves import materialize  # noqa: PLC0415
    from lineage.shipped import open_library  # noqa: PLC0415
    from passes.rewriter import DeterministicRewriter  # noqa: PLC0415

    folder = STYLES / "cu_layernorm"
    ir, ctx = _chain(folder, KERNELS[0][1])
    ctx = PassContext.for_case(str(folder), tier="device").with_facts(dict(ctx.facts))
    lib, _named = open_library(None)
    cards = [c for c in lib.cards(admitted_only=True) if c.pass_name == "row-registers"]
    assert cards
    made = materialize(cards[0], ir, DeterministicRewriter(), ctx, max_sites=1)
    assert made.ir is not None and made.rewriter == "deterministic", made
    (held,) = register_rows(made.ir)
    assert held.vectors == 4 and cached_rows(made.ir) == []


HAND_COPY = (ROWS / "rw_smem_copy_ln" / "smem_ln.cu").read_text()


def test_refusals_say_why() -> None:
    # a thread may leave before the passes: the copy's barrier was the block's, the register
    # form takes none, so the row is taken
    early = HAND_COPY.replace("    for (int c = threadIdx.x; c < cols; c += blockDim.x) cache[c] = src[c];",
                              "    if (threadIdx.x >= cols) return;\n"
                              "    for (int c = threadIdx.x; c < cols; c += blockDim.x) cache[c] = src[c];")
    assert early != HAND_COPY
    ir = kir.parse(early, "cuda")
    p = get_pass("row-registers")()
    assert [r for r in rows_as_written(ir) if isinstance(r, Skipped)] == []
    site = next(s for s in p.sites(ir) if not s.present)
    assert isinstance(p.optimize(ir, site, PassContext(facts={"arch": "sm_90"})), Applied)


VECTORIZED = r"""
extern "C" __global__ void k(const float* x, float* y, int n)
{
    float s = 0.f;
    if ((reinterpret_cast<unsigned long long>(&x[0]) & 15ull) == 0) {
        for (int j = threadIdx.x; j < n / 4; j += blockDim.x) {
            const float4 v = reinterpret_cast<const float4*>(x)[j];
            s += v.x + v.y + v.z + v.w;
        }
        for (int i = n / 4 * 4 + threadIdx.x; i < n; i += blockDim.x) s += x[i];
    } else {
        for (int i = threadIdx.x; i < n; i += blockDim.x) s += x[i];
    }
    y[blockIdx.x * blockDim.x + threadIdx.x] = s;
}
"""


def test_a_vectorized_loop_stands_for_its_fallback_only_where_the_tail_repeats_it() -> None:
    (found,) = vector_fallbacks(kir.parse(VECTORIZED, "cuda"))
    assert found.loop == "for (int i = threadIdx.x; i < n; i += blockDim.x) s += x[i];"
    # a tail that is not the fallback's body (another loop, other work): not this role
    other = VECTORIZED.replace("i < n; i += blockDim.x) s += x[i];\n    } else",
                               "i < n; i += blockDim.x) s += 2.f * x[i];\n    } else")
    assert other != VECTORIZED and vector_fallbacks(kir.parse(other, "cuda")) == []
    unchecked = VECTORIZED.replace("& 15ull) == 0", "& 0ull) == 0")
    assert vector_fallbacks(kir.parse(unchecked, "cuda")) == []
