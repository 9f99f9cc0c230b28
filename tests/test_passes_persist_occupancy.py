"""A persistent launch keeps as many programs resident as the GPU holds at once (`persistent-grid`
by role): its SMs times the programs of the compiled kernel one SM holds, from the kernel's
warps, registers and shared memory and the device's limits, capped at the tiles. The launch's
options reach the grid through a pre-run hook (Triton calls a grid with the kernel's arguments
alone); Triton's launch path is stood in for here, the kernel is checked under the interpreter
at a program count that does not divide its tiles, and one configuration is compiled for
sm_90 to read what the hardware would hold."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import kir
from gate.facts import cubin_kernels
from module_helpers import compiled_for_sm90, compiled_output, load_module
from test_passes_persist import BATCHED, TUNED, _apply

torch = pytest.importorskip("torch")

H200 = SimpleNamespace(multi_processor_count=132, max_threads_per_multi_processor=2048,
                       regs_per_multiprocessor=65536, shared_memory_per_multiprocessor=233472)


def _persistent(source: str) -> str:
    return _apply(kir.parse(source, language="triton"), "persistent-grid", "role").text


def _compiled(warps: int, regs: int, shared: int) -> SimpleNamespace:
    """What `warmup` gives back on a GPU: a compiled kernel whose handles load on demand."""
    return SimpleNamespace(n_regs=regs, metadata=SimpleNamespace(num_warps=warps, shared=shared),
                           _init_handles=lambda: None)


class _Jit:
    """Triton's launch path as the grid sees it: pre-run hooks with the launch's keywords, then
    the grid with the kernel's arguments by name; `warmup` answers from `resources(options)`."""

    def __init__(self, arg_names: list[str], resources: Any, inner: Any = None) -> None:
        self.arg_names, self.resources, self.inner = arg_names, resources, inner
        self.hooks: list[Any] = []
        self.grids: list[tuple[int, ...]] = []
        self.warmed: list[dict] = []

    def add_pre_run_hook(self, hook: Any) -> None:
        self.hooks.append(hook)

    def warmup(self, *, grid: Any, **kwargs: Any) -> SimpleNamespace:
        self.warmed.append({k: v for k, v in kwargs.items() if k not in self.arg_names})
        return self.resources(kwargs)

    def __getitem__(self, grid: Any) -> Any:
        def launch(*args: Any, **kwargs: Any) -> Any:
            for hook in self.hooks:
                hook(*args, **kwargs)

            def recorded(meta: dict) -> tuple[int, ...]:
                self.grids.append(tuple(grid(meta)))
                return self.grids[-1]
            if self.inner is not None:  # the interpreter runs the kernel on the recorded grid
                return self.inner[recorded](*args, **{k: v for k, v in kwargs.items()
                                                      if k in self.arg_names})
            recorded({**dict(zip(self.arg_names, args)),
                      **{k: v for k, v in kwargs.items() if k in self.arg_names}})
            return None
        return launch


class _Tuned:
    """An autotuner around a jit function: each launch adds its configuration's options."""

    def __init__(self, fn: _Jit, options: dict) -> None:
        self.fn, self.options = fn, options

    def __getitem__(self, grid: Any) -> Any:
        return lambda *args, **kwargs: self.fn[grid](*args, **kwargs, **self.options)


@pytest.fixture
def on_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """`torch.cuda` answers as an H200 would (132 SMs)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: H200)


def test_one_sm_holds_the_programs_its_warps_registers_and_shared_memory_allow(tmp_path: Path) -> None:
    per_sm = load_module(_persistent(TUNED), tmp_path)._resident_programs_per_sm
    # 64-row attention tiles at 4 warps (sm_90 compile: 200 registers, 12 KiB): registers bind
    assert per_sm(4, 200, 12288) == 2
    # a 128x128 GEMM tile at 8 warps (255 registers, 32 KiB): one
    assert per_sm(8, 255, 32768) == 1
    # a light kernel: the 64 warps an SM schedules bind; a heavy stage buffer: shared memory
    assert per_sm(4, 32, 0) == 16 and per_sm(4, 64, 100 * 1024) == 2
    assert per_sm(1, 16, 0) == 32  # never more than 32 blocks


@pytest.mark.parametrize("options, resources, programs", [
    ({"num_warps": 4, "num_stages": 3}, (4, 200, 12288), 2 * 132),  # several fit on one SM
    ({"num_warps": 8, "num_stages": 3}, (8, 255, 32768), 132),      # one fits
])
def test_the_launch_keeps_what_the_gpu_holds_at_once_capped_at_the_tiles(
        tmp_path: Path, on_gpu: None, options: dict, resources: tuple, programs: int) -> None:
    module = load_module(_persistent(TUNED), tmp_path)
    jit = _Jit(list(module.mm_walk.arg_names),
               lambda kwargs: _compiled(*resources) if kwargs["num_warps"] == options["num_warps"]
               else _compiled(1, 1, 0))
    module.mm_walk = _Tuned(jit, options)  # an autotuned kernel: the options are its config's
    module._resident_programs_watch(module.mm_walk)
    a, b = torch.zeros(2048, 64), torch.zeros(64, 2048)
    module.run(a, b)
    module.run(a, b)
    tiles = (2048 // 16) ** 2
    assert jit.grids == [(min(tiles, programs),)] * 2
    assert len(jit.warmed) == 1 and jit.warmed[0]["num_warps"] == options["num_warps"]  # read once
    module.run(torch.zeros(4096, 64), b)  # other sizes of the same specialization: no new read
    assert jit.grids[-1] == (min(256 * 128, programs),) and len(jit.warmed) == 1
    small = torch.zeros(40, 64), torch.zeros(64, 24)
    module.run(*small)
    assert jit.grids[-1] == (3 * 2,)  # 6 tiles: never more programs than tiles


def test_the_walk_is_right_at_a_program_count_that_does_not_divide_the_tiles(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, on_gpu: None) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    module = load_module(_persistent(BATCHED), tmp_path)
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda index: SimpleNamespace(**{**vars(H200), "multi_processor_count": 5}))
    # two programs an SM hold (4 warps, 255 registers), five SMs: ten programs over 27 tiles
    jit = _Jit(list(module.bmm3.arg_names), lambda kwargs: _compiled(4, 255, 8192), module.bmm3)
    module.bmm3 = jit
    module._resident_programs_watch(jit)
    g = torch.Generator().manual_seed(5)
    x, y = torch.randn(3, 40, 20, generator=g), torch.randn(3, 20, 33, generator=g)
    assert torch.allclose(module.run(x, y), x @ y, atol=1e-3, rtol=1e-3)
    assert jit.grids == [(10,)] and 27 % 10


def test_a_tuple_grid_becomes_a_lambda_called_at_the_launch() -> None:
    """A grid tuple is evaluated before the launch, its hook and the compile: the launch's grid
    becomes a lambda (reading a bound tuple as it was bound), and the hook is registered where
    the kernel is defined."""
    from test_passes_tma_boxes import WALKED  # noqa: PLC0415

    text = _persistent(WALKED)
    assert ("mm_walk[lambda meta: (min(triton.cdiv(M, 16) * triton.cdiv(N, 16), "
            "_resident_programs(mm_walk, meta)),)]") in text
    assert "\n\n\n_resident_programs_watch(mm_walk)\n\n\ndef run(" in text
    launch = "mm_walk[(triton.cdiv(M, 16) * triton.cdiv(N, 16),)]("
    bound = WALKED.replace(launch, "grid = (triton.cdiv(M, 16) * triton.cdiv(N, 16),)\n    mm_walk[grid](")
    assert bound != WALKED
    text = _persistent(bound)
    assert "grid = (triton.cdiv(M, 16) * triton.cdiv(N, 16),)\n" in text
    assert "mm_walk[lambda meta: (min(grid[0], _resident_programs(mm_walk, meta)),)](" in text


def test_sm90_compile_of_an_attention_tile_holds_several_programs_an_sm(tmp_path: Path) -> None:
    """The rewritten causal attention of `bench/styles/nw_attn_flat_ptrs` at 64x32 tiles and
    4 warps, compiled for sm_90: its registers and shared memory as the launch reads them."""
    start = (Path(__file__).resolve().parents[1] / "bench/styles/nw_attn_flat_ptrs/flat_attn.py").read_text()
    text = _persistent(start)
    got = compiled_for_sm90(text, tmp_path, "attn", "flat_causal_attn", {"BQ": 64, "BKV": 32, "HD": 64})
    (facts,) = cubin_kernels(bytes.fromhex(got["cubin"])).values()
    per_sm = load_module(text, tmp_path)._resident_programs_per_sm
    assert got["num_warps"] == 4 and 0 < got["shared"] <= 32 * 1024, got["shared"]
    assert facts.registers is not None and facts.registers <= 255
    assert per_sm(got["num_warps"], facts.registers, got["shared"]) >= 2, facts


# Triton's own launch path on the static sm_90 target (`gate.hostview`, no GPU): an autotuned
# kernel's configuration reaches the grid through the hook, the grid's `warmup` finds the kernel
# the launch compiled (one compile), and the count is read once. Loading a compiled kernel
# needs a GPU: its loader here reads the registers from the cubin and launches nothing.
_LAUNCH = r"""
import importlib.util, json, sys
sys.path[:0] = [sys.argv[3], sys.argv[3] + "/tests"]
import torch
import triton.runtime.jit as jit
from triton.compiler import compiler
from gate import hostview
from gate.facts import cubin_kernels
from gate.target import STATIC_TARGET

loads, compiles = [], []


def load(self):
    if self.module is None:
        (facts,) = cubin_kernels(self.kernel).values()
        self.module, self.function, self.n_regs = object(), 0, facts.registers
        self.n_spills, self.n_max_threads, self._run = 0, 1024, lambda *args: None
        loads.append([self.metadata.num_warps, facts.registers, self.metadata.shared])


compile_once = jit.JITFunction._do_compile
compiler.CompiledKernel._init_handles = load
jit.JITFunction._do_compile = lambda *a, **k: compiles.append(1) or compile_once(*a, **k)
out = {}
with hostview.target_device(STATIC_TARGET):
    for warps in (4, 8):
        loads.clear(), compiles.clear()
        path = sys.argv[1].replace(".py", f"_{warps}.py")
        open(path, "w").write(open(sys.argv[1]).read().replace("WARPS", str(warps)))
        spec = importlib.util.spec_from_file_location(f"{sys.argv[2]}_{warps}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        grids, count = [], module._resident_programs
        module._resident_programs = lambda k, meta: grids.append(count(k, meta)) or grids[-1]
        a, b = torch.zeros(4096, 512, dtype=torch.float16), torch.zeros(512, 4096, dtype=torch.float16)
        module.run(a, b)
        module.run(a, b)
        out[warps] = {"grids": grids, "loads": list(loads), "compiles": len(compiles)}
print(json.dumps({"sms": STATIC_TARGET.sm_count, "runs": out}))
"""


def test_triton_hands_an_autotuned_configuration_to_the_grid_and_compiles_once(tmp_path: Path) -> None:
    import json  # noqa: PLC0415

    text = _persistent(TUNED).replace(
        "@triton.jit\ndef mm_walk",
        "@triton.autotune(configs=[triton.Config({'BLK_M': 128, 'BLK_N': 128, 'BLK_K': 64}, "
        "num_warps=WARPS, num_stages=3)], key=['M'])\n@triton.jit\ndef mm_walk")
    text = text.replace(", BLK_M=16, BLK_N=16, BLK_K=16)", ")")
    assert text.count("WARPS") == 1 and "BLK_M=16" not in text
    got = json.loads(compiled_output(_LAUNCH, text, tmp_path, "tuned", str(Path(__file__).parents[1])))
    sms, tiles = got["sms"], (4096 // 128) ** 2
    per_sm = load_module(text.replace("WARPS", "4"), tmp_path)._resident_programs_per_sm
    for warps, run in got["runs"].items():
        (resident,) = run["loads"]  # the second launch reads the count kept from the first
        assert resident[0] == int(warps) and run["compiles"] == 1, run
        assert run["grids"] == [min(tiles, sms * per_sm(*resident))] * 2, run
    assert got["runs"]["4"]["grids"][0] > got["runs"]["8"]["grids"][0] == sms  # 2 an SM, then 1
