"""host-descriptors: in-kernel tensor descriptors built on the host instead. The in-kernel
forms are made here by `tma-descriptors` from style-case starts (and one start that builds its
own); the rewrites run under the interpreter at sizes no tile divides and match torch."""
from __future__ import annotations

import importlib.util
import json
import math
import os
import re
from pathlib import Path
from types import ModuleType

import pytest

import kir
from module_helpers import applied_at_its_site, compiled_output, load_module
from passes import get_pass
from passes.base import Skipped

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parent.parent
STYLES = ROOT / "bench" / "styles"
RULE = get_pass("host-descriptors")()


def _case(case: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"hd_case_{case}", STYLES / case / "case.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _start(case: str) -> kir.KernelIR:
    return kir.parse((STYLES / case / _case(case).START).read_text(), "triton")


def _in_kernel(case: str) -> kir.KernelIR:
    """The case's start with its tile loads through in-kernel descriptors (`tma-descriptors`)."""
    return applied_at_its_site(get_pass("tma-descriptors")(), _start(case)).ir


def _hosted(ir: kir.KernelIR) -> str:
    return applied_at_its_site(RULE, ir).ir.unparse()


def _one_config(module: ModuleType, index: int) -> None:
    """Each autotuner of `module` runs its configuration `index` only (no timing under the
    interpreter)."""
    for value in vars(module).values():
        if hasattr(value, "configs") and hasattr(value, "prune_configs"):
            value.configs = [value.configs[index]]


def _rel_err(module: ModuleType, case: str, shape: dict, shift: bool = False) -> float:
    spec = _case(case)
    inputs = spec.make_inputs(shape, 1, "cpu")
    if shift:  # storage one element in: not 16-byte aligned, no descriptor can read it
        def shifted(t: torch.Tensor) -> torch.Tensor:
            buf = torch.empty(t.numel() + 1, dtype=t.dtype)
            view = buf[1:].view(t.shape)
            view.copy_(t)
            return view
        inputs = tuple(shifted(t) for t in inputs)
        assert all(t.data_ptr() % 16 for t in inputs)
    ref = spec.reference(*inputs)
    out = module.run(*inputs)
    return float((out.float() - ref.float()).norm() / ref.float().norm())


ATTN_SHAPE = {"B": 2, "H": 3, "S": 80, "D": 32, "dtype": "fp16"}  # 80: no tile of 32 or 64 divides it


def test_attention_descriptors_move_to_the_host_with_batch_and_head_merged_into_one_axis() -> None:
    text = _hosted(_in_kernel("nw_attn_flat_ptrs"))
    kernel = text[text.index("def flat_causal_attn"):text.index("def run")]
    assert "make_tensor_descriptor" not in kernel
    # the pointers stay (the pointer path reads them); each descriptor follows its pointer
    assert "def flat_causal_attn(q_ptr, k_ptr, k_desc, v_ptr, v_desc, o_ptr, o_desc," in kernel
    # `bh // n_heads` and `bh % n_heads` are one axis of B * H indexed by bh: rank 3, not 4
    assert "k_desc.load([bh, kv0, 0]).reshape(BKV, HD)" in kernel
    assert "o_desc.store([bh, qb * BQ, 0], (o.to(tl.float16)).reshape(1, BQ, HD))" in kernel
    host = text[text.index("def run"):]
    # the sizes are the grid's factors the indices are proven below; the head stride steps
    # the merged axis, where the batch stride is H of them (else the pointer path runs)
    assert ("tma_ok = _descriptors_fit(q, k, v, o, H, S) and q.stride(3) == 1 "
            "and q.stride(0) == H * q.stride(1)\n") in host
    assert re.search(r"k_desc = TensorDescriptor\(k, \[B \* H, S, D\], \[q\.stride\(1\), "
                     r"q\.stride\(2\), q\.stride\(3\)\], \[1, bkv, D\]\) if tma_ok else None", host)
    assert "BQ=bq, BKV=bkv, HD=D, TMA_OK=tma_ok)" in host
    assert "grid = (triton.cdiv(S, bq) * B * H,)" in host
    assert not [s for s in RULE.sites(kir.parse(text, "triton")) if not s.present]


def test_attention_on_the_host_matches_torch_on_both_paths(tmp_path: Path) -> None:
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("the interpreter runs this test")
    module = load_module(_hosted(_in_kernel("nw_attn_flat_ptrs")), tmp_path, "hd_attn")
    assert _rel_err(module, "nw_attn_flat_ptrs", ATTN_SHAPE) < 5e-3
    # tensors a descriptor cannot read: the kernel gets None and runs its pointer loads
    assert _rel_err(module, "nw_attn_flat_ptrs", ATTN_SHAPE, shift=True) < 5e-3


def test_attention_whose_strides_do_not_nest_takes_the_pointer_path(tmp_path: Path) -> None:
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("the interpreter runs this test")
    module = load_module(_hosted(_in_kernel("nw_attn_flat_ptrs")), tmp_path, "hd_attn_nest")
    made = []
    real = module.TensorDescriptor
    module.TensorDescriptor = lambda *a: made.append(a) or real(*a)
    spec = _case("nw_attn_flat_ptrs")
    b, h, s, d = (ATTN_SHAPE[k] for k in "BHSD")
    torch.manual_seed(0)
    contiguous = tuple(torch.randn(b, h, s, d).half() for _ in range(3))
    # heads inside the rows: a descriptor could read it (rank 4), but the batch stride is not
    # H head strides, so no axis of B * H steps through it
    interleaved = tuple(torch.randn(b, s, h, d).half().transpose(1, 2) for _ in range(3))
    assert interleaved[0].stride(0) != h * interleaved[0].stride(1)
    for inputs, ranks in ((contiguous, [3, 3, 3]), (interleaved, [])):
        made.clear()
        ref = spec.reference(*inputs).float()
        out = module.run(*inputs).float()
        assert float((out - ref).norm() / ref.norm()) < 5e-3
        assert [len(shape) for _, shape, *_ in made] == ranks


def test_autotuned_blocks_are_set_by_a_pre_hook_of_every_configuration(tmp_path: Path) -> None:
    from lineage.moves import plain_sweep  # noqa: PLC0415

    tuned = plain_sweep(_in_kernel("nw_attn_flat_ptrs")).ir
    text = _hosted(tuned)
    configs = re.findall(r"triton\.Config\(.*\)", text)
    assert configs and all(c.endswith("pre_hook=_flat_causal_attn_descriptor_blocks)") for c in configs)
    assert 'nargs["k_desc"].block_shape = [1, nargs["BKV"], nargs["HD"]]' in text
    assert "[1, 1, 1]) if tma_ok else None" in text  # a placeholder until a config runs
    if os.environ.get("TRITON_INTERPRET") != "1":
        return
    module = load_module(text, tmp_path, "hd_attn_tuned")
    blocks = [c.kwargs["BQ"] for c in module.flat_causal_attn.configs]
    _one_config(module, next(i for i, b in enumerate(blocks) if ATTN_SHAPE["S"] % b))
    assert _rel_err(module, "nw_attn_flat_ptrs", ATTN_SHAPE) < 5e-3


def test_a_sweep_after_the_rule_sizes_the_descriptors_per_configuration(tmp_path: Path) -> None:
    # the launch's literal tiles became host names that the descriptors' blocks read, so the
    # generic sweep the search runs next writes a pre_hook for them
    from lineage.moves import plain_sweep  # noqa: PLC0415

    swept = plain_sweep(kir.parse(_hosted(_in_kernel("nw_attn_flat_ptrs")), "triton"))
    assert swept.ir is not None, swept.refusals
    text = swept.ir.unparse()
    assert 'if nargs["k_desc"] is not None: nargs["k_desc"].block_shape = [1, nargs["BKV"], nargs["HD"]]' \
        in text
    if os.environ.get("TRITON_INTERPRET") != "1":
        return
    module = load_module(text, tmp_path, "hd_attn_swept")
    _one_config(module, -1)
    assert _rel_err(module, "nw_attn_flat_ptrs", ATTN_SHAPE) < 5e-3


@pytest.mark.parametrize("case, made_here", [("mm_tensordesc", False), ("bmm_grid3", True)])
def test_gemm_descriptors_on_the_host_match_torch(case: str, made_here: bool, tmp_path: Path) -> None:
    # mm_tensordesc builds its own descriptors (no flag, no pointer path); bmm_grid3 moves its
    # pointers by the batch (`a_ptr += pid_b * stride_ab`), which becomes a leading axis
    ir = _in_kernel(case) if made_here else _start(case)
    text = _hosted(ir)
    assert "make_tensor_descriptor" not in text
    if case == "bmm_grid3":
        assert "a_desc.load([pid_b, pid_m * TILE_M, k0]).reshape(TILE_M, TILE_K)" in text
        assert "TensorDescriptor(a, [nb, M, K], [a.stride(0), a.stride(1), a.stride(2)]" in text
    else:  # the pointers nothing else reads are replaced by the descriptors
        assert "def mm_td_kernel(a_desc, b_desc, c_ptr, c_desc," in text
    if os.environ.get("TRITON_INTERPRET") != "1":
        return
    module = load_module(text, tmp_path, f"hd_{case}")
    spec = _case(case)
    shape = dict(next(iter(spec.SMALL_SHAPES.values())))
    assert _rel_err(module, case, shape) < 5e-3


REFUSED = '''
import torch
import triton
import triton.language as tl


@triton.jit
def rows(x_ptr, y_ptr, starts_ptr, n, d, sx0, sx1, BR: tl.constexpr, BD: tl.constexpr):
    pid = tl.program_id(0)
    first = tl.load(starts_ptr + pid)
    x_desc = tl.make_tensor_descriptor(x_ptr + OFFSET, shape=[n, d], strides=[sx0, sx1],
                                       block_shape=[BR, BD])
    y_desc = tl.make_tensor_descriptor(y_ptr, shape=[n, d], strides=[sx0, sx1], block_shape=[BR, BD])
    y_desc.store([0, 0], x_desc.load([0, 0]))


def run(x, starts):
    y = torch.empty_like(x)
    rows[(starts.numel(),)](x, y, starts, x.shape[0], x.shape[1], STRIDES, BR=16, BD=16)
    return y
'''


@pytest.mark.parametrize("offset, strides, why", [
    # a row read from memory: how many values it takes is nothing the grid says
    ("first * sx0", "x.stride(0), x.stride(1)", "is not read from the launch grid"),
    ("pid + pid * sx0", "x.stride(0), x.stride(1)", "is not an index times a stride"),
    ("pid * sx0", "x.shape[1], 1", "is not a tensor's stride the launch passes"),
])
def test_a_base_that_does_not_decompose_is_refused(offset: str, strides: str, why: str) -> None:
    ir = kir.parse(REFUSED.replace("OFFSET", offset).replace("STRIDES", strides), "triton")
    site = next(s for s in RULE.sites(ir) if not s.present)
    result = RULE.optimize(ir, site)
    if "tensor's stride" in why:  # y_desc (no offset) still fails on its strides
        assert isinstance(result, Skipped) and why in result.reason, result
        return
    # y_desc has no offset and moves; x_desc stays in the kernel, with the reason recorded
    assert not isinstance(result, Skipped), result
    assert "x_desc = tl.make_tensor_descriptor" in result.ir.unparse()
    again = RULE.optimize(result.ir, next(s for s in RULE.sites(result.ir) if not s.present))
    assert isinstance(again, Skipped) and why in again.reason, again


NESTED = '''
import torch
import triton
import triton.language as tl


@triton.jit
def scale_tiles(x_ptr, y_ptr, n_b, n_c, rows, cols, s0, s1, s2, s3, s4,
                BR: tl.constexpr, BC: tl.constexpr, TMA_OK: tl.constexpr):
    pid = tl.program_id(0)
    ab = pid // n_c
    base = (ab // n_b) * s0 + (ab % n_b) * s1 + (pid % n_c) * s2
    r = tl.program_id(1) * BR
    if TMA_OK:
        x_desc = tl.make_tensor_descriptor(x_ptr + base, shape=[rows, cols], strides=[s3, s4],
                                           block_shape=[BR, BC])
        y_desc = tl.make_tensor_descriptor(y_ptr + base, shape=[rows, cols], strides=[s3, s4],
                                           block_shape=[BR, BC])
        tile = x_desc.load([r, 0])
        y_desc.store([r, 0], tile * 2)
    else:
        rr = r + tl.arange(0, BR)
        cc = tl.arange(0, BC)
        offs = base + rr[:, None] * s3 + cc[None, :] * s4
        mask = (rr[:, None] < rows) & (cc[None, :] < cols)
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2, mask=mask)


def run(x):
    A, B, C, R, N = x.shape
    y = torch.empty_like(x)
    scale_tiles[(A * B * C, triton.cdiv(R, 16))](x, y, B, C, R, N, x.stride(0), x.stride(1),
                                                 x.stride(2), x.stride(3), x.stride(4),
                                                 BR=16, BC=32, TMA_OK=True)
    return y
'''


@pytest.mark.parametrize("flagged", [True, False])
def test_three_leading_axes_merge_into_one_only_under_a_flag(flagged: bool, tmp_path: Path) -> None:
    source = NESTED
    if not flagged:  # the descriptors built always, the pointer path gone
        source = re.sub(r"    if TMA_OK:\n((?:        .*\n)+)    else:\n(?:        .*\n)+",
                        lambda m: m.group(1).replace("\n        ", "\n    ")
                        .replace("        ", "    ", 1), source)
        assert "if TMA_OK" not in source and "tl.store" not in source
    text = _hosted(kir.parse(source, "triton"))
    if not flagged:  # no pointer path for a layout the merged axis cannot read: axes kept
        assert "x_desc.load([ab // n_b, ab % n_b, pid % n_c, r, 0]).reshape(BR, BC)" in text, text
        assert "TensorDescriptor(x, [A, B, C, R, N], [x.stride(0), x.stride(1), x.stride(2), " \
            "x.stride(3), x.stride(4)], [1, 1, 1, br, bc])" in text
        return
    # (ab // n_b, ab % n_b) -> ab, then (pid // n_c, pid % n_c) -> pid: one axis of A * B * C
    assert "x_desc.load([pid, r, 0]).reshape(BR, BC)" in text
    assert "TensorDescriptor(x, [A * B * C, R, N], [x.stride(2), x.stride(3), x.stride(4)], " \
        "[1, br, bc]) if tma_ok else None" in text
    assert ("tma_ok = True and x.stride(0) == B * x.stride(1) "
            "and x.stride(1) == C * x.stride(2)\n") in text
    if os.environ.get("TRITON_INTERPRET") != "1":
        return
    module = load_module(text, tmp_path, "hd_nested")
    torch.manual_seed(0)
    dense = torch.randn(2, 3, 2, 40, 32)
    crossed = torch.randn(2, 2, 3, 40, 32).transpose(1, 2)  # B outside C in memory: no nesting
    for x in (dense, crossed):
        assert torch.equal(module.run(x), x * 2)


def test_the_search_offers_the_rule_where_a_kernel_builds_descriptors() -> None:
    from lineage.moves import rule_offers  # noqa: PLC0415

    offers = {card.pass_name: prior for card, prior in rule_offers(_in_kernel("nw_attn_flat_ptrs"))}
    assert offers.get("host-descriptors") == pytest.approx(math.log(1.05))
    assert "host-descriptors" not in {c.pass_name for c, _ in rule_offers(_start("nw_attn_flat_ptrs"))}


_SM90 = r"""
import importlib.util, json, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.runtime.jit import JITFunction
spec = importlib.util.spec_from_file_location(sys.argv[2], sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
ask = json.loads(sys.argv[3])
jit = module.flat_causal_attn
while not isinstance(jit, JITFunction):
    jit = jit.fn
consts = ask["constexprs"]
signature = {n: "constexpr" if n in consts else ask["descs"][n] if n in ask["descs"]
             else "*fp16" if n.endswith("_ptr") else "fp32" if n == "sm_scale" else "i32"
             for n in jit.arg_names}
kernel = triton.compile(ASTSource(fn=jit, signature=signature, constexprs=consts),
                        target=GPUTarget("cuda", 90, 32), options={"num_warps": 4, "num_stages": 3})
print(json.dumps({"ptx": kernel.asm["ptx"]}))
"""


def test_the_rewritten_attention_compiles_for_sm90(tmp_path: Path) -> None:
    text = _hosted(_in_kernel("nw_attn_flat_ptrs"))
    # rank 3: the batch and head axes merged into one
    descs = {"k_desc": "tensordesc<fp16[1, 64, 64]>", "v_desc": "tensordesc<fp16[1, 64, 64]>",
             "o_desc": "tensordesc<fp16[1, 64, 64]>"}
    ask = {"constexprs": {"BQ": 64, "BKV": 64, "HD": 64, "TMA_OK": True}, "descs": descs}
    ptx = json.loads(compiled_output(_SM90, text, tmp_path, "hd_sm90", json.dumps(ask)))["ptx"]
    # host descriptors: the kernel reads them through TMA and writes no tensormap of its own
    assert "cp.async.bulk.tensor" in ptx
    assert "tensormap.replace" not in ptx


def test_the_rule_only_optimizes() -> None:
    ir = _in_kernel("nw_attn_flat_ptrs")
    site = next(s for s in RULE.sites(ir) if not s.present)
    assert isinstance(RULE.deoptimize(ir, site), Skipped)
