"""tile-loop-flatten: a kernel written persistent (a tile loop from the program id, stepping by
the program count) whose K loop feeds `tl.dot` from tensor descriptors gets
`tl.range(..., flatten=True)` on its tile loop, and its K loop's unroll taken off.

No site where the K loop reads through pointers, where the loop is already flattened, on a
one-tile-per-program kernel, or on the expert GEMM (written flattened); the search offers it
without a card; at sm_90 the flattened kernel compiles to other code than the two loops did.
"""
from __future__ import annotations

from pathlib import Path

import kir
from passes.base import Applied, PassContext, Skipped
from passes.registry import get_pass
from tests.module_helpers import compiled_output

ROOT = Path(__file__).resolve().parent.parent
PASS = get_pass("tile-loop-flatten")()

PERSISTENT = '''
import torch
import triton
import triton.language as tl


@triton.jit
def walk_tiles(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    a_d = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BM, BK])
    b_d = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[N, 1], block_shape=[BK, BN])
    c_d = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    tiles_n = tl.cdiv(N, BN)
    for t in range(tl.program_id(0), tl.cdiv(M, BM) * tiles_n, tl.num_programs(0)):
        pm = t // tiles_n
        pn = t % tiles_n
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in tl.range(0, K, BK, loop_unroll_factor=2):
            acc = tl.dot(a_d.load([pm * BM, k]), b_d.load([k, pn * BN]), acc)
        c_d.store([pm * BM, pn * BN], acc.to(tl.float16))


def run(a, b):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), dtype=torch.float16, device=a.device)
    walk_tiles[(4,)](a, b, c, M, N, K, BM=64, BN=64, BK=32)
    return c
'''

POINTERS = PERSISTENT.replace(
    "            acc = tl.dot(a_d.load([pm * BM, k]), b_d.load([k, pn * BN]), acc)\n",
    "            rm = pm * BM + tl.arange(0, BM)\n"
    "            rn = pn * BN + tl.arange(0, BN)\n"
    "            rk = k + tl.arange(0, BK)\n"
    "            acc = tl.dot(tl.load(a_ptr + rm[:, None] * K + rk[None, :]),\n"
    "                         tl.load(b_ptr + rk[:, None] * N + rn[None, :]), acc)\n")


def _ir(source: str) -> kir.KernelIR:
    return kir.parse(source, "triton")


def _flattened(source: str) -> str:
    ir = _ir(source)
    sites = PASS.sites(ir)
    assert len(sites) == 1 and not sites[0].present, sites
    result = PASS.optimize(ir, sites[0])
    assert isinstance(result, Applied), result
    assert PASS.sites(result.ir) == []
    return result.ir.unparse()


def test_the_tile_loop_is_flattened_and_the_k_loop_no_longer_unrolled() -> None:
    out = _flattened(PERSISTENT)
    assert ("for t in tl.range(tl.program_id(0), tl.cdiv(M, BM) * tiles_n, tl.num_programs(0), "
            "flatten=True):") in out
    assert "for k in tl.range(0, K, BK):" in out


def test_no_site_over_pointer_loads_a_flattened_loop_or_one_tile_per_program() -> None:
    assert POINTERS != PERSISTENT
    assert PASS.sites(_ir(POINTERS)) == []
    assert PASS.sites(_ir(_flattened(PERSISTENT))) == []
    one_tile = PERSISTENT.replace(
        "    for t in range(tl.program_id(0), tl.cdiv(M, BM) * tiles_n, tl.num_programs(0)):\n",
        "    for t in range(0, 1, 1):\n")
    assert one_tile != PERSISTENT
    assert PASS.sites(_ir(one_tile)) == []
    assert PASS.sites(_ir((ROOT / "experts/gemm/gemm_triton.py").read_text())) == []


def test_it_writes_no_de_optimization_and_the_search_offers_it() -> None:
    from lineage.moves import rule_offers

    ir = _ir(PERSISTENT)
    assert isinstance(PASS.deoptimize(ir, PASS.sites(ir)[0]), Skipped)
    ctx = PassContext.for_case(None, extra={"dtype": "fp16"})
    assert "tile-loop-flatten" in {card.pass_name for card, _ in rule_offers(ir, ctx)}


_COMPILE = r"""
import importlib.util, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
spec = importlib.util.spec_from_file_location(sys.argv[2], sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
jit = module.walk_tiles
consts = {"BM": 128, "BN": 128, "BK": 64}
signature = {n: "*fp16" if n.endswith("_ptr") else "constexpr" if n in consts else "i32"
             for n in jit.arg_names}
attrs = {(jit.arg_names.index(n),): [["tt.divisibility", 16]] for n in jit.arg_names if n not in consts}
kernel = triton.compile(ASTSource(fn=jit, signature=signature, constexprs=consts, attrs=attrs),
                        target=GPUTarget("cuda", 90, 32), options={"num_warps": 8, "num_stages": 3})
print(kernel.asm["ptx"].count("\n"))
"""


def test_at_sm90_the_flattened_loops_compile_to_other_code(tmp_path) -> None:
    plain = PERSISTENT.replace(", loop_unroll_factor=2", "")
    two_loops = int(compiled_output(_COMPILE, plain, tmp_path, "two_loops"))
    flat = int(compiled_output(_COMPILE, _flattened(PERSISTENT), tmp_path, "flat"))
    assert flat != two_loops, (two_loops, flat)
