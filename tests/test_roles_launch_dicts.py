"""Launch values passed through a dict (`**meta`, a module-level `**CONFIG`, a `dict(...)`) or
bound by `functools.partial(kernel[grid], ...)`: read by role like keywords, and taken out of
where they are passed when the kernel is swept, so that the autotuner owns them. Each swept
module runs in the Triton interpreter (the session sets TRITON_INTERPRET) against torch."""
from __future__ import annotations

import os
from pathlib import Path
from types import ModuleType

import pytest
import torch

import kir
from module_helpers import load_module
from kir.errors import BadInputError
from lineage.control import apply_byte_edits, autotune_control
from lineage.transfer import config_candidates
from passes.triton.roles import SweepRefusal, joint_config, sweep_edit


MM_HEAD = '''
import functools
import torch
import triton
import triton.language as tl


@triton.jit
def mm(a, b, c, M, N, K, sam, sak, sbk, sbn, scm, scn,
       BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pm = tl.program_id(0)
    pn = tl.program_id(1)
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        x = tl.load(a + rm[:, None] * sam + (k0 + rk)[None, :] * sak,
                    mask=(rm[:, None] < M) & ((k0 + rk)[None, :] < K), other=0.0)
        y = tl.load(b + (k0 + rk)[:, None] * sbk + rn[None, :] * sbn,
                    mask=((k0 + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(x, y)
    tl.store(c + rm[:, None] * scm + rn[None, :] * scn, acc,
             mask=(rm[:, None] < M) & (rn[None, :] < N))

'''

# A dict literal in the host function, which the host-computed grid also reads.
MM_DICT = MM_HEAD + '''
def run(a, b):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    meta = {"BM": 16, "BN": 32, "BK": 16, "num_warps": 2, "num_stages": 1}
    grid = (triton.cdiv(M, meta["BM"]), triton.cdiv(N, meta["BN"]))
    mm[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
             c.stride(0), c.stride(1), **meta)
    return c
'''

# `dict(...)` of keywords and a grid that already reads the meta-parameters.
MM_DICT_CALL = MM_HEAD + '''
def run(a, b):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    cfg = dict(BK=16, BM=32, BN=16, num_warps=4)
    mm[lambda META: (triton.cdiv(M, META["BM"]), triton.cdiv(N, META["BN"]))](
        a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
        c.stride(0), c.stride(1), **cfg)
    return c
'''

# `functools.partial(kernel[grid], ...)` bound to a name that is called.
MM_PARTIAL = MM_HEAD + '''
def run(a, b):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    launch = functools.partial(mm[(triton.cdiv(M, 16), triton.cdiv(N, 16))], BM=16, BN=16,
                               BK=32, num_warps=1)
    launch(a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
           c.stride(0), c.stride(1))
    return c
'''

VEC_HEAD = '''
from functools import partial
import torch
import triton
import triton.language as tl


@triton.jit
def axpy(x_ptr, y_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, alpha * x + y, mask=mask)

'''

# A module-level dict spread at the launch; it also carries a value that is not tuned.
VEC_CONFIG = VEC_HEAD + '''
CONFIG = {"alpha": 2.0, "BLOCK": 64, "num_warps": 2}


def run(x, y):
    out = torch.empty_like(x)
    n = x.numel()
    axpy[(triton.cdiv(n, CONFIG["BLOCK"]),)](x, y, out, n, **CONFIG)
    return out
'''

# A partial (imported by name) whose result is called at once.
VEC_PARTIAL = VEC_HEAD + '''
def run(x, y):
    out = torch.empty_like(x)
    n = x.numel()
    partial(axpy[(triton.cdiv(n, 32),)], BLOCK=32, num_warps=1)(x, y, out, n, alpha=2.0)
    return out
'''


def _ir(text: str) -> kir.KernelIR:
    return kir.parse(text, language="triton")


def _load(source: str, where: Path) -> ModuleType:
    return load_module(source, where, "launch_dicts")


def _matches_torch(source: str, where: Path) -> None:
    """Each configuration of the autotuned kernel alone (the interpreter has no benchmarker)
    computes what torch does."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("runs in Triton's interpreter (no GPU)")
    module = _load(source, where)
    kernel = getattr(module, "mm" if hasattr(module, "mm") else "axpy")
    configs = list(kernel.configs)
    assert configs
    g = torch.Generator().manual_seed(0)
    for config in configs:
        kernel.configs = [config]
        if hasattr(module, "mm"):
            a = torch.randn(37, 20, generator=g)
            b = torch.randn(20, 45, generator=g)
            torch.testing.assert_close(module.run(a, b), a @ b, atol=1e-4, rtol=1e-4)
        else:
            x, y = torch.randn(150, generator=g), torch.randn(150, generator=g)
            torch.testing.assert_close(module.run(x, y), 2.0 * x + y)


def _swept(text: str, kernel: str, configs: list[dict[str, int]]) -> str:
    made = sweep_edit(_ir(text), kernel, configs)
    assert not isinstance(made, SweepRefusal), made
    out = apply_byte_edits(text, made[0])
    compile(out, "swept", "exec")
    return out


DOT_CONFIGS = [{"m": 16, "n": 16, "k": 16, "num_warps": 1, "num_stages": 1},
               {"m": 32, "n": 16, "k": 16, "num_warps": 2, "num_stages": 1}]
VEC_CONFIGS = [{"grid": 32, "num_warps": 1}, {"grid": 128, "num_warps": 2}]


@pytest.mark.parametrize(("text", "tiles", "warps", "stages"), [
    (MM_DICT, {"BM": 16, "BN": 32, "BK": 16}, 2, 1),
    (MM_DICT_CALL, {"BM": 32, "BN": 16, "BK": 16}, 4, 3),
    (MM_PARTIAL, {"BM": 16, "BN": 16, "BK": 32}, 1, 3),
], ids=["dict-literal", "dict-call", "partial"])
def test_dot_tiles_passed_through_a_dict_or_a_partial_are_read_by_role(
        text: str, tiles: dict, warps: int, stages: int) -> None:
    cfg = joint_config(_ir(text))["mm"]
    assert {p.name: p.value for p in cfg.params} == tiles
    assert {p.name: p.role for p in cfg.params} == {"BM": "m", "BN": "n", "BK": "k"}
    assert (cfg.num_warps, cfg.num_stages) == (warps, stages)


@pytest.mark.parametrize("text", [VEC_CONFIG, VEC_PARTIAL], ids=["module-dict", "partial"])
def test_a_block_passed_through_a_module_dict_or_a_partial_is_read(text: str) -> None:
    cfg = joint_config(_ir(text))["axpy"]
    block = 64 if "CONFIG" in text else 32
    assert cfg.by_role() == {"grid": block}
    assert cfg.num_warps == (2 if "CONFIG" in text else 1)


def test_the_sweep_takes_the_tuned_keys_out_of_a_dict_literal(tmp_path: Path) -> None:
    out = _swept(MM_DICT, "mm", DOT_CONFIGS)
    assert "    meta = {}\n" in out
    # the grid's reads of the dict now read the autotuner's meta-parameters
    assert 'grid = lambda meta: (triton.cdiv(M, meta["BM"]), triton.cdiv(N, meta["BN"]))' in out
    assert out.count("triton.Config(") == 2
    _matches_torch(out, tmp_path)


def test_the_sweep_takes_the_tuned_keywords_out_of_a_dict_call(tmp_path: Path) -> None:
    out = _swept(MM_DICT_CALL, "mm", DOT_CONFIGS)
    assert "    cfg = dict()\n" in out and "c.stride(0), c.stride(1), **cfg)" in out
    _matches_torch(out, tmp_path)


def test_the_sweep_keeps_what_a_module_dict_passes_besides_the_tuned_keys(
        tmp_path: Path) -> None:
    out = _swept(VEC_CONFIG, "axpy", VEC_CONFIGS)
    assert 'CONFIG = {"alpha": 2.0}\n' in out
    assert 'axpy[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, out, n, **CONFIG)' in out
    assert '"BLOCK": 32' in out and '"BLOCK": 128' in out
    _matches_torch(out, tmp_path)


@pytest.mark.parametrize(("text", "kernel", "configs"), [
    (MM_PARTIAL, "mm", DOT_CONFIGS), (VEC_PARTIAL, "axpy", VEC_CONFIGS)],
    ids=["bound", "called-at-once"])
def test_the_sweep_takes_the_tuned_keywords_out_of_a_partial(
        text: str, kernel: str, configs: list, tmp_path: Path) -> None:
    out = _swept(text, kernel, configs)
    if kernel == "mm":
        assert ('launch = functools.partial(mm[lambda meta: (triton.cdiv(M, meta["BM"]), '
                'triton.cdiv(N, meta["BN"]))])\n') in out
    else:
        assert ('partial(axpy[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)])'
                '(x, y, out, n, alpha=2.0)') in out
    assert "num_warps=1)" not in out.split("def run")[1]
    _matches_torch(out, tmp_path)


@pytest.mark.parametrize("text", [MM_DICT, MM_DICT_CALL, MM_PARTIAL, VEC_CONFIG, VEC_PARTIAL],
                         ids=["dict-literal", "dict-call", "partial", "module-dict",
                              "partial-at-once"])
def test_the_control_autotunes_kernels_launched_through_dicts_and_partials(
        text: str, tmp_path: Path) -> None:
    out = autotune_control(text, max_configs=2)
    assert "@triton.autotune(" in out and out.count("triton.Config(") == 2
    host = out.split("def run")[1]
    assert "num_warps" not in host and "BLOCK=" not in host and "BM=" not in host
    if "axpy" in text:  # cheap enough to run the generic configurations
        _matches_torch(out, tmp_path)


def test_a_recorded_configuration_is_carried_onto_a_partial_launch() -> None:
    carrier = {"config": {"x": {"tiles": {"m": 64, "n": 32, "k": 32}, "num_warps": 4,
                                "num_stages": 3, "dot": True}}}
    [(name, new_ir, fitted)] = config_candidates(carrier, _ir(MM_PARTIAL))
    assert name == "mm" and fitted[0] == {"BM": 64, "BN": 32, "BK": 32, "num_warps": 4,
                                          "num_stages": 3}
    assert "functools.partial(mm[lambda meta:" in new_ir.unparse()


def test_a_launch_dict_used_beyond_the_launch_is_refused() -> None:
    text = MM_DICT.replace('    c = torch.empty((M, N), device=a.device, dtype=a.dtype)\n', '')
    sized = '    c = torch.empty((M, meta["BN"] * N), device=a.device)\n'
    text = text.replace("    mm[grid](", sized + "    mm[grid](")
    made = sweep_edit(_ir(text), "mm", DOT_CONFIGS)
    assert isinstance(made, SweepRefusal)
    line = 1 + text.splitlines().index('    c = torch.empty((M, meta["BN"] * N), device=a.device)')
    assert made.reason == f"the launch dict meta is used beyond the launch (line {line})"
    with pytest.raises(BadInputError, match="the launch dict meta is used beyond the launch"):
        autotune_control(text)


def test_a_module_dict_shared_with_another_launch_is_refused() -> None:
    text = VEC_CONFIG + '''

def run_twice(x, y):
    out = torch.empty_like(x)
    other[(1,)](out, **CONFIG)
    return out
'''
    made = sweep_edit(_ir(text), "axpy", VEC_CONFIGS)
    assert isinstance(made, SweepRefusal)
    assert made.reason.startswith("the launch dict CONFIG is used beyond the launch (line ")
    # a dict losing no key to the autotuner may be shared
    kept = text.replace('"BLOCK": 64, "num_warps": 2', '').replace(
        'CONFIG["BLOCK"]),)](x, y, out, n, **CONFIG)', '64),)](x, y, out, n, BLOCK=64, **CONFIG)')
    assert "n, BLOCK=64, **CONFIG)" in kept
    out = _swept(kept, "axpy", VEC_CONFIGS)
    assert 'CONFIG = {"alpha": 2.0, }' in out and "other[(1,)](out, **CONFIG)" in out


def test_a_partial_used_beyond_its_calls_and_an_unreadable_dict_are_refused() -> None:
    passed = MM_PARTIAL.replace("    return c\n", "    return c, launch\n")
    made = sweep_edit(_ir(passed), "mm", DOT_CONFIGS)
    assert isinstance(made, SweepRefusal)
    assert made.reason.startswith("the launch partial launch is used beyond its calls (line ")
    # a dict updated in place is not read: its keys are unknown, and the sweep says so
    updated = MM_DICT.replace("    grid = (", '    meta["BK"] = 32\n    grid = (')
    assert joint_config(_ir(updated))["mm"].by_role() == {}
    made = sweep_edit(_ir(updated), "mm", DOT_CONFIGS)
    assert isinstance(made, SweepRefusal)
    assert made.reason.startswith("the launch passes **meta, whose keys the sweep cannot read")
