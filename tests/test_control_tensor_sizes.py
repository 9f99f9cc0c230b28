"""The generic autotune list (`lineage.control`) offers no configuration whose blocks Triton
refuses to compile (more than 2**20 elements, `passes.triton.tensor_sizes`): a kernel that
broadcasts two tiles and a head dim into one 3-D block (attention without `tl.dot`) does not get
the list's 4x tiles, which do not compile at a head dim of 128 for sm_90; a 2-D attention
with the same unknown head dim keeps them, and a block whose dims are all known is judged
exactly."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from kir import parse
from lineage.control import autotune_control
from passes.triton._py import PyModule
from passes.triton.tensor_sizes import MAX_ELEMS, block_sizes, compiles_like_written

# Scores of a query tile against key tiles without tl.dot: a BLOCK_M x HEAD_DIM x BLOCK_N
# product, built in a helper; the head dim comes from the input's shape. The list scales both
# tiles (4x: 128 x 128 x 128 elements at head dim 128).
BROADCAST = '''import torch
import triton
import triton.language as tl


@triton.jit
def _scores(acc, q, k_ptr, offs_n, live, HEAD_DIM: tl.constexpr):
    offs_d = tl.arange(0, HEAD_DIM)
    k = tl.load(k_ptr + offs_n[:, None] * HEAD_DIM + offs_d[None, :], mask=live[:, None],
                other=0.0).to(tl.float32)
    return tl.maximum(acc, tl.sum(q[:, :, None] * tl.trans(k)[None, :, :], axis=1))


@triton.autotune(configs=[triton.Config({"BLOCK_M": 32, "BLOCK_N": 32}, num_warps=4)], key=["seq"])
@triton.jit
def _best(q_ptr, k_ptr, o_ptr, seq, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
          BLOCK_N: tl.constexpr):
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + offs_m[:, None] * HEAD_DIM + offs_d[None, :], mask=offs_m[:, None] < seq,
                other=0.0).to(tl.float32).reshape(BLOCK_M, HEAD_DIM)
    acc = tl.full([BLOCK_M, BLOCK_N], float("-inf"), dtype=tl.float32)
    for start in range(0, seq, BLOCK_N):
        offs_n = start + tl.arange(0, BLOCK_N)
        acc = _scores(acc, q, k_ptr, offs_n, offs_n < seq, HEAD_DIM)
    tl.store(o_ptr + offs_m, tl.max(acc, 1), mask=offs_m < seq)


def run(q, k):
    seq, head_dim = q.shape
    out = torch.empty(seq, device=q.device, dtype=torch.float32)
    _best[lambda meta: (triton.cdiv(seq, meta["BLOCK_M"]),)](q, k, out, seq, HEAD_DIM=head_dim)
    return out
'''


def _configs(text: str) -> list[dict[str, int]]:
    return [{k: int(v) for k, v in re.findall(r'"(\w+)": (\d+)', line)}
            for line in text.splitlines() if "triton.Config(" in line]


def test_broadcast_product_list_leaves_out_tiles_over_the_limit() -> None:
    configs = _configs(autotune_control(BROADCAST))
    assert configs and {c["BLOCK_M"] for c in configs} == {32, 64}
    # the head dim the device case runs (128): every configuration's product fits
    assert all(c["BLOCK_M"] * 128 * c["BLOCK_N"] <= MAX_ELEMS for c in configs)


def test_the_largest_listed_tile_compiles_for_sm90(tmp_path) -> None:
    """The largest tile the list offers compiles for sm_90 at head dim 128 (the 128x128 tile
    the list held before does not: numel 2097152 exceeds Triton's maximum). Compiled in a
    child without the interpreter, as the gate's static tier compiles."""
    pytest.importorskip("triton")
    path = tmp_path / "swept_broadcast.py"
    path.write_text(autotune_control(BROADCAST))
    largest = max(_configs(path.read_text()), key=lambda c: c["BLOCK_M"] * c["BLOCK_N"])
    script = f"""
import importlib.util, triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
spec = importlib.util.spec_from_file_location("swept_broadcast", {str(path)!r})
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
signature = {{"q_ptr": "*fp16", "k_ptr": "*fp16", "o_ptr": "*fp32", "seq": "i32",
             "HEAD_DIM": "constexpr", "BLOCK_M": "constexpr", "BLOCK_N": "constexpr"}}
constexprs = {{"HEAD_DIM": 128, "BLOCK_M": {largest["BLOCK_M"]}, "BLOCK_N": {largest["BLOCK_N"]}}}
triton.compile(ASTSource(module._best.fn, signature, constexprs, {{}}),
               target=GPUTarget("cuda", 90, 32), options={{"num_warps": 4}})
"""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(tmp_path / "cache")
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_block_sizes_follow_helpers_and_known_dims() -> None:
    mod = PyModule(parse(BROADCAST, "triton"))
    kernel = next(k for k in mod.kernels() if k.name == "_best")
    sizes = block_sizes(mod, kernel, {"BLOCK_M": 32, "BLOCK_N": 32})
    # the helper's 3-D product: 32 x 32 known, the head dim unknown
    assert max(e for e, unknown in sizes.values() if unknown) == 32 * 32
    known = block_sizes(mod, kernel, {"BLOCK_M": 32, "BLOCK_N": 32, "HEAD_DIM": 2048})
    assert max(e for e, _ in known.values()) == 32 * 2048 * 32
    fits = compiles_like_written(mod, kernel)
    assert fits({"BLOCK_M": 64, "BLOCK_N": 64}) and not fits({"BLOCK_M": 128, "BLOCK_N": 128})


def test_two_dimensional_attention_keeps_large_tiles() -> None:
    """Blocks of one tile and the unknown head dim ([BLOCK_M, HEAD_DIM]) and of two tiles
    ([BLOCK_M, BLOCK_N], with tl.dot) stay far below the limit: no tile is left out."""
    dotted = (BROADCAST.replace("tl.sum(q[:, :, None] * tl.trans(k)[None, :, :], axis=1)",
                                "tl.dot(q, tl.trans(k))"))
    configs = _configs(autotune_control(dotted))
    assert max(c["BLOCK_M"] for c in configs) >= 128
