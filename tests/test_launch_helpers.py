"""A kernel launched from host code through a helper it is passed to (`_launch(kernel, ...)`
launching `kernel[grid](...)`): the launch is found inside the helper, by the role the
parameter plays, whether the kernel is passed positionally or by keyword; it offers the same
launch-parameter sites as a direct launch and rewrites edit it there; a helper that launches
two kernels is refused with its reason; a kernel with no launch at all is named. Swept modules
run in the Triton interpreter (the session sets TRITON_INTERPRET) against torch."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

import kir
from kir.errors import BadInputError
from lineage.control import apply_byte_edits, autotune_control
from lineage.retrieval import kernel_sites
from module_helpers import load_module
from passes.base import Applied, Skipped
from passes.triton._py import PyModule
from passes.triton.autotune import Autotune
from passes.triton.launch import NumWarps, SoftwarePipelining, TileSizes
from passes.triton.roles import SweepRefusal, joint_config, kernel_launches, sweep_edit, unlaunched

HEAD = '''
import torch
import triton
import triton.language as tl


@triton.jit
def double(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2, mask=mask)


@triton.jit
def bump(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 1, mask=mask)

'''

# The launch keywords are literals, written where the kernel is launched.
DIRECT = HEAD + '''
def run(x):
    y = torch.empty_like(x)
    n = x.numel()
    grid = (triton.cdiv(n, 64),)
    double[grid](x, y, n, BLOCK=64, num_warps=2, num_stages=2)
    return y
'''

HELPER = HEAD + '''
def _launch(kernel, x, y, n):
    grid = (triton.cdiv(n, 64),)
    kernel[grid](x, y, n, BLOCK=64, num_warps=2, num_stages=2)


def run(x):
    y = torch.empty_like(x)
    _launch(double, x, y, x.numel())
    return y
'''

HELPER_KEYWORD = HELPER.replace("_launch(double, x, y, x.numel())",
                                "_launch(x=x, y=y, n=x.numel(), kernel=double)")

# Two kernels through one helper: its launch is theirs alike.
SHARED = HELPER.replace("    _launch(double, x, y, x.numel())\n",
                        "    _launch(double, x, y, x.numel())\n    _launch(bump, y, y, x.numel())\n")

# The helper of the report: the block comes in through the helper's parameter.
BLOCK_PARAM = HEAD + '''
def _launch(kernel, x, y, n, block):
    grid = (triton.cdiv(n, block),)
    kernel[grid](x, y, n, BLOCK=block, num_warps=4)


def run(x):
    y = torch.empty_like(x)
    _launch(double, x, y, x.numel(), 64)
    return y
'''

VEC_CONFIGS = [{"grid": 32, "num_warps": 1}, {"grid": 128, "num_warps": 2}]
LAUNCH_LINE = "    kernel[grid](x, y, n, BLOCK=64, num_warps=2, num_stages=2)"


def _ir(text: str) -> kir.KernelIR:
    return kir.parse(text, "triton")


def _line(text: str, line: str) -> int:
    return 1 + text.splitlines().index(line)


def _kinds(text: str) -> tuple[set[str], set[str]]:
    present, open_ = kernel_sites(_ir(text))
    return {r["pass"] for r in present}, {r["pass"] for r in open_}


def _changed_lines(before: str, after: str) -> list[tuple[str, str]]:
    a, b = before.splitlines(), after.splitlines()
    assert len(a) == len(b)
    return [(x, y) for x, y in zip(a, b) if x != y]


def _doubles(text: str, tmp_path: Path) -> None:
    """Each configuration of the autotuned kernel alone (the interpreter has no benchmarker)
    doubles its input."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("runs in Triton's interpreter (no GPU)")
    module = load_module(text, tmp_path, "launch_helpers")
    configs = list(module.double.configs)
    assert len(configs) >= 2
    x = torch.randn(150, generator=torch.Generator().manual_seed(0))
    for config in configs:
        module.double.configs = [config]
        torch.testing.assert_close(module.run(x), 2 * x)


@pytest.mark.parametrize("text", [HELPER, HELPER_KEYWORD], ids=["positional", "keyword"])
def test_the_launch_of_a_kernel_passed_to_a_helper_is_found_inside_the_helper(text: str) -> None:
    mod = PyModule(_ir(text))
    kernel = next(k for k in mod.kernels() if k.name == "double")
    [launch] = kernel_launches(mod, kernel)
    assert launch.call.lineno == _line(text, LAUNCH_LINE)
    assert mod.text(launch.values()["BLOCK"]) == "64"
    # the helper is never handed `bump`: no launch of it
    other = next(k for k in mod.kernels() if k.name == "bump")
    assert kernel_launches(mod, other) == []


@pytest.mark.parametrize("text", [HELPER, HELPER_KEYWORD], ids=["positional", "keyword"])
def test_a_helper_launch_offers_the_sites_and_configuration_of_a_direct_launch(
        text: str) -> None:
    present, open_ = _kinds(text)
    assert {"tile-sizes", "num-warps", "software-pipelining"} <= present
    assert (present, open_) == _kinds(DIRECT)
    assert joint_config(_ir(text))["double"] == joint_config(_ir(DIRECT))["double"]


def test_a_block_passed_through_the_helper_parameter_is_read_and_swept(tmp_path: Path) -> None:
    cfg = joint_config(_ir(BLOCK_PARAM))["double"]
    assert cfg.by_role() == {"grid": 64} and cfg.num_warps == 4
    made = sweep_edit(_ir(BLOCK_PARAM), "double", VEC_CONFIGS)
    assert not isinstance(made, SweepRefusal), made
    out = apply_byte_edits(BLOCK_PARAM, made[0])
    helper = out.split("def _launch")[1].split("def run")[0]
    assert 'grid = lambda meta: (triton.cdiv(n, meta["BLOCK"]),)' in helper
    assert "    kernel[grid](x, y, n)\n" in helper
    assert out.split("def run")[1] == BLOCK_PARAM.split("def run")[1]
    _doubles(out, tmp_path)


@pytest.mark.parametrize("text", [HELPER, HELPER_KEYWORD], ids=["positional", "keyword"])
def test_a_rewrite_at_a_helper_launch_edits_the_launch_inside_the_helper(text: str) -> None:
    ir = _ir(text)
    rule = NumWarps()
    [site] = [s for s in rule.sites(ir) if s.present]
    made = rule.deoptimize(ir, site)
    assert isinstance(made, Applied), made
    after = made.ir.unparse()
    compile(after, "rewritten", "exec")
    assert _changed_lines(text, after) == [
        (LAUNCH_LINE, "    kernel[grid](x, y, n, BLOCK=64, num_stages=2)")]


def test_autotuning_a_helper_launched_kernel_rewrites_the_helper(tmp_path: Path) -> None:
    ir = _ir(HELPER)
    rule = Autotune()
    [site] = [s for s in rule.sites(ir) if s.detail["kernel"] == "double"]
    made = rule.optimize(ir, site)
    assert isinstance(made, Applied), made
    out = made.ir.unparse()
    helper = out.split("def _launch")[1].split("def run")[0]
    assert "    kernel[grid](x, y, n)\n" in helper
    assert 'grid = lambda meta: (triton.cdiv(n, meta["BLOCK"]),)' in helper
    assert out.split("def double")[0].count("@triton.autotune(") == 1
    _doubles(out, tmp_path)


def test_a_helper_that_launches_two_kernels_is_refused_with_its_reason() -> None:
    ir = _ir(SHARED)
    mod = PyModule(ir)
    line = _line(SHARED, LAUNCH_LINE)
    reason = (f"the launch on line {line} is inside `_launch`, which launches `bump`, `double` "
              "as its parameter `kernel`: editing it would change the launch of every kernel "
              "it runs")
    for name in ("double", "bump"):  # read for both kernels alike
        kernel = next(k for k in mod.kernels() if k.name == name)
        assert [launch.call.lineno for launch in kernel_launches(mod, kernel)] == [line]
        assert joint_config(ir)[name].num_warps == 2
        made = sweep_edit(ir, name, VEC_CONFIGS)
        assert isinstance(made, SweepRefusal) and made.reason == reason
    tried = 0
    for rule in (NumWarps(), TileSizes(), SoftwarePipelining(), Autotune()):
        for site in rule.sites(ir):
            made = (rule.deoptimize if site.present else rule.optimize)(ir, site)
            assert isinstance(made, Skipped) and made.reason == reason, (rule.name, made)
            tried += 1
    assert tried >= 5  # one site of each launch pass, two autotune sites


def test_a_helper_used_other_than_by_a_call_is_treated_as_shared() -> None:
    text = HELPER + "\n\nLAUNCHERS = {\"double\": _launch}\n"
    made = sweep_edit(_ir(text), "double", VEC_CONFIGS)
    assert isinstance(made, SweepRefusal)
    assert "launches `double` and whatever a use of it passes unseen" in made.reason


def test_a_kernel_with_no_launch_is_named() -> None:
    # launched two helpers deep: the outer one hands its parameter on, which is not followed
    text = HELPER.replace("    _launch(double, x, y, x.numel())\n",
                          "    _outer(double, x, y)\n") + '''

def _outer(kern, x, y):
    _launch(kern, x, y, x.numel())
'''
    assert unlaunched(_ir(text)) == (
        f"kernel `double`: no launch of it found in the module's host code (line "
        f"{_line(text, '    _outer(double, x, y)')} hands it to something the launch analysis "
        "does not follow)",
        "kernel `bump`: no launch of it found in the module's host code")
    assert unlaunched(_ir(HELPER)) == (
        "kernel `bump`: no launch of it found in the module's host code",)
    no_host = HEAD.replace("tl.load(x_ptr + offs, mask=mask) * 2", "twice(x_ptr, offs, mask)") + '''
@triton.jit
def twice(p, offs, mask):
    return tl.load(p + offs, mask=mask) * 2
'''
    with pytest.raises(BadInputError, match="no kernel could be autotuned: kernel `double`: no "
                       "launch of it found in the module's host code; kernel `bump`: no launch"):
        autotune_control(no_host)  # the jit function `twice` is called, not launched

