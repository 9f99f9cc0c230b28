"""gemm-schedule's deep forms on kernels whose launch is in a Python host module of their own:
the rule writes what the launch must do as the source's host-launch line, and the host's
launches (a CuPy RawModule function, experts.cudahost's launch, the driver's cuLaunchKernel) are
edited to do it (`kir.hostlaunch`). The start kernels and hosts here are written for these tests:
the rewrites compile for sm_90a, the edited hosts run them on the CPU emulator at ragged small
shapes against torch (TMA maps encoded by the host, and the cp.async fallback where they cannot
be), refusals say why, and the rule and the host edit round-trip."""
from __future__ import annotations

import importlib.util
import itertools
import re
from pathlib import Path
from typing import Any

import pytest

import kir
from kir import hostlaunch
from kir.embedded import cuda_unit, find
from kir.hostlaunch import Directive
from passes import PassContext, Skipped, get_pass
from nvrtc_helpers import ptx_for_sm90a

torch = pytest.importorskip("torch")

CTX = PassContext(facts={"arch": "sm_90"})
TMA = {"wgmma": True, "deep": True, "wide": True, "producer": True, "tma": True}
WIDE = {"wgmma": True, "deep": True, "wide": True}

# fp16, 256 threads in one dimension, 32 x 64 tiles, eight rows of one column a thread
ROW_MAJOR = r"""#include <cuda_fp16.h>

extern "C" __global__ void hgemm_rm(const __half* __restrict__ P, const __half* __restrict__ Q,
                                    __half* __restrict__ R, int rows, int cols, int depth)
{
    __shared__ __half ps[32][16];
    __shared__ __half qs[16][64];
    const int t = threadIdx.x;
    const int r0 = blockIdx.y * 32, c0 = blockIdx.x * 64;
    const int tr = (t / 64) * 8, tc = t % 64;
    float acc[8];
    for (int i = 0; i < 8; ++i) acc[i] = 0.f;
    for (int kb = 0; kb < depth; kb += 16) {
        for (int e = t; e < 32 * 16; e += 256) {
            const int i = e / 16, j = e % 16;
            __half v = __float2half(0.f);
            if (r0 + i < rows && kb + j < depth) v = P[(size_t)(r0 + i) * depth + kb + j];
            ps[i][j] = v;
        }
        for (int e = t; e < 16 * 64; e += 256) {
            const int i = e / 64, j = e % 64;
            qs[i][j] = (kb + i < depth && c0 + j < cols) ? Q[(size_t)(kb + i) * cols + c0 + j]
                                                         : __float2half(0.f);
        }
        __syncthreads();
        for (int kk = 0; kk < 16; ++kk) {
            const float q = __half2float(qs[kk][tc]);
            for (int i = 0; i < 8; ++i) acc[i] += __half2float(ps[tr + i][kk]) * q;
        }
        __syncthreads();
    }
    for (int i = 0; i < 8; ++i)
        if (r0 + tr + i < rows && c0 + tc < cols)
            R[(size_t)(r0 + tr + i) * cols + c0 + tc] = __float2half(acc[i]);
}
"""

# bf16, A given transposed (k x m), 16 x 16 threads, 64 x 64 tiles, 4 x 4 results a thread
A_TRANSPOSED = r"""// C = A @ B with A given transposed (at: k x m), 16 x 16 threads, 64 x 64 tiles, 4 x 4 each
#include <cuda_bf16.h>
#define T 64
#define D 16

extern "C" __global__ void at_b_gemm(const __nv_bfloat16* at, const __nv_bfloat16* b,
                                     __nv_bfloat16* c, int m, int n, int k)
{
  __shared__ float sa[D][T];
  __shared__ float sb[D][T];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int lin = ty * 16 + tx;
  const int bm = blockIdx.y * T, bn = blockIdx.x * T;
  float acc[4][4];
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.f;
  for (int k0 = 0; k0 < k; k0 += D) {
    for (int e = lin; e < D * T; e += 256) {
      const int kk = e / T, i = e % T;
      sa[kk][i] = (k0 + kk < k && bm + i < m) ? __bfloat162float(at[(size_t)(k0 + kk) * m + bm + i]) : 0.f;
      sb[kk][i] = (k0 + kk < k && bn + i < n) ? __bfloat162float(b[(size_t)(k0 + kk) * n + bn + i]) : 0.f;
    }
    __syncthreads();
    for (int kk = 0; kk < D; ++kk)
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j)
          acc[i][j] += sa[kk][ty * 4 + i] * sb[kk][tx * 4 + j];
    __syncthreads();
  }
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) {
      const int r = bm + ty * 4 + i, q = bn + tx * 4 + j;
      if (r < m && q < n) c[(size_t)r * n + q] = __float2bfloat16(acc[i][j]);
    }
}
"""

# fp16, y = x @ w^T with w stored (n, k), padded fp32 tiles
X_WT = r"""#include <cuda_fp16.h>
extern "C" __global__ void xwt(const __half* x, const __half* w, __half* y, int m, int n, int k)
{
    __shared__ float xs[64][17];
    __shared__ float ws[64][17];
    const int t = threadIdx.x;
    const int row0 = blockIdx.y * 64, col0 = blockIdx.x * 64;
    const int ty = t / 16, tx = t % 16;
    float acc[4][4] = {};
    for (int k0 = 0; k0 < k; k0 += 16) {
        for (int e = t; e < 64 * 16; e += 256) {
            const int r = e / 16, kk = e % 16;
            xs[r][kk] = (row0 + r < m && k0 + kk < k) ? __half2float(x[(size_t)(row0 + r) * k + k0 + kk]) : 0.f;
            ws[r][kk] = (col0 + r < n && k0 + kk < k) ? __half2float(w[(size_t)(col0 + r) * k + k0 + kk]) : 0.f;
        }
        __syncthreads();
        for (int kk = 0; kk < 16; ++kk)
            for (int i = 0; i < 4; ++i)
                for (int j = 0; j < 4; ++j)
                    acc[i][j] += xs[ty * 4 + i][kk] * ws[tx * 4 + j][kk];
        __syncthreads();
    }
    for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j)
            if (row0 + ty * 4 + i < m && col0 + tx * 4 + j < n)
                y[(size_t)(row0 + ty * 4 + i) * n + col0 + tx * 4 + j] = __float2half(acc[i][j]);
}
"""

CUPY_HOST = '''"""A CuPy RawModule host holding its source."""
import cupy
import torch

SOURCE = r"""
@SOURCE@"""

_module = cupy.RawModule(code=SOURCE, options=("--std=c++17",))
_gemm = _module.get_function("hgemm_rm")


def run(p, q):
    rows, depth = p.shape
    cols = q.shape[1]
    r = torch.empty(rows, cols, dtype=p.dtype, device=p.device)
    grid = ((cols + 63) // 64, (rows + 31) // 32)
    _gemm(grid, (256, 1, 1), (p.data_ptr(), q.data_ptr(), r.data_ptr(), cupy.int32(rows),
                              cupy.int32(cols), cupy.int32(depth)))
    return r
'''

CUDAHOST_HOST = '''"""The host of atb.cu: experts.cudahost, every argument by keyword."""
from pathlib import Path

import torch

from experts import cudahost as host

_F = []


def run(at, b):
    if not _F:
        src = Path(__file__).with_suffix(".cu")
        _F.append(host.get_function(host.compile_source(src.read_text(), name=src.name),
                                    "at_b_gemm"))
    k, m = at.shape
    n = b.shape[1]
    c = torch.zeros(m, n, dtype=at.dtype, device=at.device)
    host.launch(func=_F[0], grid=((n + 63) // 64, (m + 63) // 64), block=(16, 16),
                shared_bytes=0, args=[at, b, c, m, n, k], stream=None)
    return c
'''

DRIVER_HOST = '''"""NVRTC and the driver API of cuda-python; the kernel's arguments PACKED."""
import ctypes

import torch
from cuda.bindings import driver, nvrtc

from experts.cudahost import include_dirs  # where cuda_fp16.h is

SOURCE = """
@SOURCE@"""
_state = {}


def _ok(ret):
    if int(ret[0]) != 0:
        raise RuntimeError(repr(ret[0]))
    return ret[1] if len(ret) == 2 else ret[1:]


def _load():
    _ok(driver.cuInit(0))
    prog = _ok(nvrtc.nvrtcCreateProgram(SOURCE.encode(), b"xwt.cu", 0, [], []))
    opts = [b"--gpu-architecture=compute_90"] + [b"-I" + d.encode() for d in include_dirs()]
    if int(nvrtc.nvrtcCompileProgram(prog, len(opts), opts)[0]) != 0:
        raise RuntimeError("NVRTC failed")
    ptx = b" " * _ok(nvrtc.nvrtcGetPTXSize(prog))
    _ok(nvrtc.nvrtcGetPTX(prog, ptx))
    _state["f"] = _ok(driver.cuModuleGetFunction(_ok(driver.cuModuleLoadData(ptx)), b"xwt"))


def run(x, w):
    if "f" not in _state:
        _load()
    m, k = x.shape
    n = w.shape[0]
    y = torch.empty(m, n, dtype=x.dtype, device=x.device)
    values = (x.data_ptr(), w.data_ptr(), y.data_ptr(), m, n, k)
    kinds = (ctypes.c_void_p,) * 3 + (ctypes.c_int,) * 3
    args = @ARGS@
    _ok(driver.cuLaunchKernel(_state["f"], (n + 63) // 64, (m + 63) // 64, 1, 256, 1, 1, 0, 0,
                              args, 0))
    return y
'''
# the driver host's kernel parameters: cuda-python's (values, types) pair, or an address of an
# array of pointers the host packs itself
PACKED = {"pair": "(values, kinds)",
          "address": "_pack(values, kinds)"}
PACK = '''

_kept = []


def _pack(values, kinds):
    cells = [kind(v) for v, kind in zip(values, kinds)]
    array = (ctypes.c_void_p * len(cells))(*[ctypes.addressof(c) for c in cells])
    _kept[:] = [cells, array]
    return ctypes.addressof(array)
'''


def _write(tmp: Path, convention: str, packed: str = "pair") -> Path:
    """The start's kernel file in `tmp` (with its host) for a host convention."""
    if convention == "cupy":
        path = tmp / "hgemm.py"
        path.write_text(CUPY_HOST.replace("@SOURCE@", ROW_MAJOR.lstrip("\n")))
    elif convention == "cudahost":
        path = tmp / "atb.cu"
        path.write_text(A_TRANSPOSED)
        path.with_suffix(".py").write_text(CUDAHOST_HOST)
    else:
        path = tmp / "xwt.py"
        path.write_text(DRIVER_HOST.replace("@SOURCE@", X_WT.lstrip("\n"))
                        .replace("@ARGS@", PACKED[packed]) + (PACK if packed == "address" else ""))
    return path


def _rewrite(path: Path, options: dict[str, Any]) -> tuple[Any, Any, Any]:
    """(the unit, its IR, the rule's result) of `options` on the start at `path`."""
    unit = cuda_unit(path)
    ir = kir.parse(unit.source, "cuda", path=str(unit.source_path))
    rule = get_pass("gemm-schedule").from_options(options)
    site = next(s for s in rule.sites(ir) if not s.present)
    return unit, ir, rule.optimize(ir, site, CTX)


def _host(unit: Any, source: str) -> str:
    """The host module the gate runs for `source` (its held string replaced, its launches
    edited as the source asks)."""
    text = unit.host_path.read_text()
    held = find(text)
    return hostlaunch.apply(held.splice(source) if held is not None else text, source)


_RUNS = itertools.count()


def _emulated(unit: Any, source: str, *inputs: Any) -> tuple[Any, list[Any]]:
    """`run(*inputs)` of the edited host on the CPU emulator (a CuPy host through the gate's
    stand-in CuPy), and the tensor maps the host encoded (None: refused by the driver)."""
    from gate.cudacpu.host import EMULATED, emulated, host_call
    from gate.hostview import cupy_stand_in

    folder = unit.host_path.parent / f"run{next(_RUNS)}"
    folder.mkdir()
    (folder / unit.host_path.name).write_text(_host(unit, source))
    (folder / unit.host_path.with_suffix(".cu").name).write_text(source)
    encoded: list[Any] = []
    with emulated(), cupy_stand_in(EMULATED):
        import cuda.bindings.driver as drv

        real = drv.cuTensorMapEncodeTiled

        def encode(*args: Any) -> Any:
            out = real(*args)
            encoded.append(out[1] if int(out[0]) == 0 else None)
            return out
        drv.cuTensorMapEncodeTiled = encode
        try:
            spec = importlib.util.spec_from_file_location(f"kl_host_{folder.name}",
                                                          folder / unit.host_path.name)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return host_call(module.run, *inputs), encoded
        finally:
            drv.cuTensorMapEncodeTiled = real


def _inputs(convention: str, m: int, n: int, k: int) -> tuple[tuple[Any, ...], Any, float]:
    """The host's inputs at m x n x k, the product they ask for and its tolerance."""
    if convention == "cupy":
        p, q = torch.randn(m, k).half(), torch.randn(k, n).half()
        return (p, q), p.float() @ q.float(), 5e-3
    if convention == "cudahost":
        at, b = torch.randn(k, m).bfloat16(), torch.randn(k, n).bfloat16()
        return (at, b), at.float().T @ b.float(), 2e-2
    x, w = torch.randn(m, k).half(), torch.randn(n, k).half()
    return (x, w), x.float() @ w.float().T, 5e-3


CONVENTIONS = ["cupy", "cudahost", "driver"]


@pytest.mark.parametrize("convention", CONVENTIONS)
@pytest.mark.parametrize("options", [TMA, WIDE, {"wgmma": True, "deep": True, "producer": True}],
                         ids=["tma", "deep-wide", "producer"])
def test_the_deep_forms_fire_where_a_python_host_launches_the_kernel(
        tmp_path: Path, convention: str, options: dict[str, Any]) -> None:
    from passes.roundtrip import roundtrip

    unit, ir, result = _rewrite(_write(tmp_path, convention), options)
    assert result.ok, result
    text = result.ir.text
    asked = hostlaunch.directives(text)
    assert len(asked) == 1 and asked[0].shared_bytes > 48 * 1024 and asked[0].arch == "sm_90a"
    grown = asked[0].block
    if options.get("producer"):  # the launch's block and a warpgroup of 128 threads
        assert grown is not None and grown[0] * grown[1] == 256 + 128
    else:
        assert grown is None
    assert (asked[0].tma is not None) == bool(options.get("tma"))
    assert asked[0].persist  # the kernel loops over its tiles: the host may launch fewer blocks
    # the device code alone: the maps' encoding is the host's
    assert "cudaGetDriverEntryPoint" not in text and "<<<" not in text
    ptx = ptx_for_sm90a(text)
    assert "wgmma.mma_async" in ptx
    assert ("cp.async.bulk.tensor.2d" in ptx) == bool(options.get("tma"))
    # the host the gate runs: each launch wrapped, the helper once, valid Python
    host = _host(unit, text)
    compile(host, "host", "exec")
    assert host.count(hostlaunch.BEGIN) == 1 and len(re.findall(r"_kl_host_launch\(\"", host)) == 1
    assert hostlaunch.apply(host, text) == host  # an edited host is edited the same way again
    # the de-optimization takes the line back (the host as written), and the rule gives its
    # output again
    rule = get_pass("gemm-schedule").from_options(options)
    done = next(s for s in rule.sites(result.ir) if s.present)
    back = rule.deoptimize(result.ir, done, CTX)
    assert back.ok and hostlaunch.TAG not in back.ir.text and "kl_gs_" not in back.ir.text
    plain = unit.host_path.read_text()
    assert _host(unit, back.ir.text) == (find(plain).splice(back.ir.text) if find(plain) else plain)
    assert roundtrip(rule, result.ir, done, CTX).same


def test_a_cupy_module_of_a_wgmma_kernel_is_built_for_sm90a(tmp_path: Path) -> None:
    # a RawModule's functions cannot be compiled again at their launch: the module's
    # construction in the host gets the target among its options
    unit, _, result = _rewrite(_write(tmp_path, "cupy"), TMA)
    assert result.ok, result
    host = _host(unit, result.ir.text)
    assert re.search(r'_kl_host_arch\("sm_90a", cupy\.RawModule\)\(code=', host)

    class RawModule:
        def __init__(self, code: str = "", options: tuple = ()) -> None:
            self.code, self.options = code, options
    built = hostlaunch.helpers()["_kl_host_arch"]("sm_90a", RawModule)(
        code="x", options=("--std=c++17",))
    assert built.options == ("--std=c++17", "-arch=sm_90a")
    again = hostlaunch.helpers()["_kl_host_arch"]("sm_90a", RawModule)(
        code="x", options=("-arch=sm_90a",))
    assert again.options == ("-arch=sm_90a",)


def test_a_cupy_kernel_under_the_gates_launch_monitor_is_built_again_for_sm90a(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # the gate's monitor stands in for cupy.RawKernel with a wrapper whose constructor takes
    # (inner, name): the kernel for sm_90a is built through cupy.RawKernel, options by name
    import sys
    import types

    built: list[tuple] = []

    class Real:
        def __init__(self, code: str, name: str, options: tuple = ()) -> None:
            self.code, self.name, self.options = code, name, options

    class Monitored:  # as gate.guards.LaunchMonitor.install_cupy wraps a kernel
        def __init__(self, inner: Any, name: str) -> None:
            self._inner, self.name = inner, name

        def __getattr__(self, key: str) -> Any:
            return getattr(self._inner, key)

    def raw_kernel(code: str, name: str, *args: Any, **kwargs: Any) -> Monitored:
        built.append((args, kwargs))
        return Monitored(Real(code, name, *args, **kwargs), name)
    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(RawKernel=raw_kernel))
    kern = raw_kernel("src", "k", options=("--std=c++17",))
    derived = hostlaunch.helpers()["_kl_host_arch_kernel"](kern, "sm_90a")
    assert isinstance(derived, Monitored)  # still counted by the monitor
    assert derived.options == ("--std=c++17", "-arch=sm_90a") and derived.code == "src"
    assert built[-1] == ((), {"options": ("--std=c++17", "-arch=sm_90a")})
    assert hostlaunch.helpers()["_kl_host_arch_kernel"](kern, "sm_90a") is derived  # once


def test_a_persistent_kernel_is_launched_with_as_many_blocks_as_the_device_holds(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import sys
    import types

    grid = hostlaunch.helpers()["_kl_host_grid"]
    spec = {"persist": True}
    # no device to ask (this machine): the grid as the host passes it
    monkeypatch.setitem(sys.modules, "cuda.bindings.driver", types.ModuleType("no_driver"))
    assert grid(spec, (32, 32), (384, 1, 1), 231424) == (32, 32)
    # 132 SMs of 233472 bytes: one 384-thread block of 226 KiB an SM, two of 100 KiB
    attrs = types.SimpleNamespace(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT="sms",
                                  CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR="smem")
    values = {"sms": 132, "smem": 233472}
    fake = types.SimpleNamespace(cuCtxGetDevice=lambda: (0, 0), CUdevice_attribute=attrs,
                                 cuDeviceGetAttribute=lambda a, dev: (0, values[a]))
    monkeypatch.setitem(sys.modules, "cuda.bindings.driver", fake)
    assert grid(spec, (32, 32), (384, 1, 1), 231424) == (132, 1, 1)
    assert grid(spec, (32, 32, 1), (384, 1, 1), 100 * 1024) == (264, 1, 1)
    assert grid(spec, 1024, (256, 1, 1), 200 * 1024) == (132, 1, 1)
    # a grid the device holds at once, or a kernel that does not loop over its tiles: as given
    assert grid(spec, (8, 8), (384, 1, 1), 231424) == (8, 8)
    assert grid({}, (32, 32), (384, 1, 1), 231424) == (32, 32)


@pytest.mark.parametrize("convention,packed", [("cupy", ""), ("cudahost", ""), ("driver", "pair"),
                                               ("driver", "address")])
def test_each_edited_host_runs_the_tma_form_on_the_emulator(tmp_path: Path, convention: str,
                                                            packed: str) -> None:
    unit, _, result = _rewrite(_write(tmp_path, convention, packed or "pair"), TMA)
    assert result.ok, result
    torch.manual_seed(3)
    # ragged M, N and K (the maps' boxes zero-filled past them); rows of 72 elements: encodable
    inputs, want, tol = _inputs(convention, 40, 56, 72)
    got, encoded = _emulated(unit, result.ir.text, *inputs)
    assert len(encoded) == 2 and all(m is not None for m in encoded)  # both maps: TMA copies
    assert (got.float() - want).abs().max() <= tol * want.abs().max()
    if convention == "cupy":  # a host passing A's map over B's data: caught
        asked = hostlaunch.directives(result.ir.text)[0]
        a, b = asked.tma["maps"]
        wrong = Directive(asked.kernel, asked.shared_bytes, asked.block_from, asked.block,
                          asked.arch, {**asked.tma, "maps": [[b[0], *a[1:]], b]})
        bad, _ = _emulated(unit, result.ir.text.replace(asked.line(), wrong.line()), *inputs)
        assert (bad.float() - want).abs().max() > tol * want.abs().max()


@pytest.mark.parametrize("convention,grown", [("cupy", (640, 1, 1)), ("cudahost", (16, 40, 1)),
                                              ("driver", (640, 1, 1))])
def test_each_edited_host_launches_four_consumer_warpgroups_on_the_emulator(
        tmp_path: Path, convention: str, grown: tuple[int, int, int]) -> None:
    from passes.roundtrip import roundtrip

    options = {**TMA, "consumers": 4}
    unit, _, result = _rewrite(_write(tmp_path, convention), options)
    assert result.ok, result
    asked = hostlaunch.directives(result.ir.text)[0]
    # the host launches the launch's block, two more warpgroups and the producer
    assert asked.block == grown and asked.block_from[0] * asked.block_from[1] == 256
    assert asked.persist and asked.tma is not None
    torch.manual_seed(5)
    # N past 128: both halves of the tile hold blocks of the launch's size; ragged M and N
    inputs, want, tol = _inputs(convention, 40, 200, 72)
    got, encoded = _emulated(unit, result.ir.text, *inputs)
    assert len(encoded) == 2 and all(m is not None for m in encoded)
    assert (got.float() - want).abs().max() <= tol * want.abs().max()
    rule = get_pass("gemm-schedule").from_options(options)
    done = next(s for s in rule.sites(result.ir) if s.present)
    back = rule.deoptimize(result.ir, done, CTX)
    assert back.ok and hostlaunch.TAG not in back.ir.text and back.options["consumers"] == 4
    assert roundtrip(rule, result.ir, done, CTX).same


def test_a_row_pitch_tma_cannot_describe_takes_the_cp_async_fill(tmp_path: Path) -> None:
    unit, _, result = _rewrite(_write(tmp_path, "cupy"), TMA)
    torch.manual_seed(4)
    # K = 91 halves: 182-byte rows, not a multiple of 16 bytes: no map, the kernel's cp.async
    inputs, want, tol = _inputs("cupy", 33, 70, 91)
    got, encoded = _emulated(unit, result.ir.text, *inputs)
    assert encoded == []  # the host did not ask the driver for maps it cannot describe
    assert (got.float() - want).abs().max() <= tol * want.abs().max()


def test_refusals_name_what_was_not_found(tmp_path: Path) -> None:
    # a kernel object handed on: its launch happens where the rule cannot follow
    path = _write(tmp_path, "cupy")
    path.write_text(path.read_text().replace(
        "    _gemm(grid,", "    launcher = [_gemm][0]\n    launcher(grid,"))
    *_, refused = _rewrite(path, {**TMA, "block": "256"})
    assert isinstance(refused, Skipped) and "\n" not in refused.reason
    assert "uses the kernel object _gemm at line" in refused.reason
    # two kernels in the source and a launch that does not say which one it runs
    two = tmp_path / "two"
    two.mkdir()
    path = _write(two, "cudahost")
    path.write_text(A_TRANSPOSED + '\nextern "C" __global__ void fill(float* p) { p[0] = 0.f; }\n')
    *_, refused = _rewrite(path, WIDE)
    assert isinstance(refused, Skipped)
    assert "launches a kernel at line" in refused.reason and "cannot trace" in refused.reason
    # the source alone (no host module beside it)
    lone = tmp_path / "lone"
    lone.mkdir()
    (lone / "atb.cu").write_text(A_TRANSPOSED)
    *_, refused = _rewrite(lone / "atb.cu", {**WIDE, "block": "16x16"})
    assert isinstance(refused, Skipped) and "no Python host module is beside it" in refused.reason
    # the host's launches are read; the 48 KiB forms need none of them
    *_, plain = _rewrite(lone / "atb.cu", {"wgmma": True, "block": "16x16"})
    assert plain.ok and hostlaunch.TAG not in plain.ir.text


def test_a_launch_with_another_block_than_the_rewrite_was_made_for_is_stopped(tmp_path: Path
                                                                              ) -> None:
    unit, _, result = _rewrite(_write(tmp_path, "cupy"), WIDE)
    source = result.ir.text
    asked = hostlaunch.directives(source)[0]
    other = Directive(asked.kernel, asked.shared_bytes, (128, 1, 1), None, asked.arch)
    inputs, _, _ = _inputs("cupy", 8, 8, 8)
    with pytest.raises(RuntimeError, match=r"launched with the block \(256, 1, 1\); its source "
                                           r"was rewritten for \(128, 1, 1\)"):
        _emulated(unit, source.replace(asked.line(), other.line()), *inputs)


def test_the_host_edit_is_undone_and_made_once() -> None:
    host = CUDAHOST_HOST
    asked = Directive("at_b_gemm", 100000, (16, 16, 1), (16, 24, 1), "sm_90a")
    source = A_TRANSPOSED + asked.line() + "\n"
    edited = hostlaunch.apply(host, source)
    assert edited != host and hostlaunch.strip(edited) == host
    assert hostlaunch.apply(edited, source) == edited
    assert hostlaunch.apply(edited, A_TRANSPOSED) == host  # the line gone: the host as written
    assert hostlaunch.apply(host, A_TRANSPOSED) is host
    # the launch keeps its own arguments; only its callee is wrapped
    assert ('_kl_host_launch("at_b_gemm", "cudahost", host.launch)(func=_F[0], grid=' in edited)


def test_the_bench_runs_the_reach_forms_through_a_copy_of_the_start_host(tmp_path: Path) -> None:
    # bench/gemm_schedule.py --starts ... --forms reach: the style tier's CuPy start, rewritten
    # where its file is (so that its host is asked for the launch), run through the copy of its
    # host the bench builds
    from gate.cudacpu.host import EMULATED, emulated, host_call
    from gate.hostforms import entry
    from gate.hostview import cupy_stand_in

    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("kl_bench_gemm_schedule_hosts",
                                                  root / "bench" / "gemm_schedule.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.chosen_forms("reach") == ["wgmma_deep_wide_tma", "wgmma_deep_wide"]
    with pytest.raises(ValueError, match="unknown form 'fastest'"):
        bench.chosen_forms("reach,fastest")
    start = next(s for s in bench.style_starts() if s["name"] == "cu_mm_reg1d")
    text, detail = bench.rewrite(start["source"], (512, 1, 1), "sm_90", "wgmma_deep_wide_tma",
                                 start["host"])
    assert detail["kernel"] == "mm_reg1d" and hostlaunch.directives(text)[0].block == (640, 1, 1)
    host = bench.rebuilt_host(start, text, tmp_path / "tma")
    assert '_kl_host_launch("mm_reg1d", "cupy", _mm)(grid, (512,),' in host.read_text()
    case = start["case"]
    inputs = case.make_inputs(dict(case.SMALL_SHAPES["default"]), 5, "cpu")
    with emulated(), cupy_stand_in(EMULATED):
        run = entry(bench._load(host, "kl_bench_hosted_reg1d"),
                    str(bench.STYLES / "cu_mm_reg1d" / "case.py"))
        got = host_call(run, *inputs)
    want = case.reference(*inputs).float()
    assert (got.float() - want).abs().max() <= 5e-3 * want.abs().max()
    # without the start's file the deep forms are refused, the reason given
    refused = bench.rewrite(start["source"], (512, 1, 1), "sm_90", "wgmma_deep_wide")
    assert isinstance(refused, str) and "no Python host module is beside it" in refused


def test_the_gate_runs_a_hosted_tma_form_through_the_edited_host() -> None:
    # the style tier's CuPy start: the static tier traces the edited host's launch (its opt-in
    # and bytes), the emulate tier checks the result at the case's small shapes; a host-launch
    # line that hands the kernel A's map over B's data is caught there
    import gate

    root = Path(__file__).resolve().parents[1]
    start = root / "bench" / "styles" / "cuda" / "cu_mm_reg1d" / "mm_reg1d.py"
    unit, _, result = _rewrite(start, TMA)
    assert result.ok, result
    case = str(start.parent / "case.py")
    for tier in ("static", "emulate"):
        verdict = gate.check(result.ir.text, "cuda", case, tier, path=unit.source_path,
                             cache=False)
        assert verdict.ok, (tier, verdict.reason)
    asked = hostlaunch.directives(result.ir.text)[0]
    a, b = asked.tma["maps"]
    wrong = Directive(asked.kernel, asked.shared_bytes, asked.block_from, asked.block, asked.arch,
                      {**asked.tma, "maps": [[b[0], *a[1:]], b]})
    verdict = gate.check(result.ir.text.replace(asked.line(), wrong.line()), "cuda", case,
                         "emulate", path=unit.source_path, cache=False)
    assert not verdict.ok and "relative error" in str(verdict.reason)


@pytest.mark.parametrize("convention", ["cudahost", "cupy"])
def test_the_optimize_output_carries_the_host_edits(tmp_path: Path, convention: str) -> None:
    # what `klineage optimize` writes: best.cu with its host beside it, or the host holding it,
    # its launches edited as the best source asks
    from lineage.outcome import write_best

    start = tmp_path / "start"
    start.mkdir()
    unit, _, result = _rewrite(_write(start, convention), WIDE)
    out = tmp_path / "out"
    out.mkdir()
    best = out / f"best{unit.source_path.suffix}"
    write_best(unit.source_path, result.ir.text, "cuda", best)
    host = best.with_suffix(".py")
    text = host.read_text()
    assert "_kl_host_launch(" in text and text == _host(unit, result.ir.text)
    if convention == "cudahost":
        assert best.read_text() == result.ir.text
    else:  # the held source is the best one
        assert find(text).text == result.ir.text


def test_launches_are_found_by_what_they_call() -> None:
    host = '''import cupy
from cuda.bindings import driver
from experts import cudahost as ch

SRC = r"""extern "C" __global__ void k(float* x) {}"""
mod = cupy.RawModule(code=SRC)
table = {"k": cupy.RawKernel(SRC, "k")}
_fn = {}


def _lookup():
    if "f" not in _fn:
        _fn["f"] = ch.get_function(ch.compile_source(SRC), "k")
    return _fn["f"]


def run(x, grid, block):
    mod.get_function("k")((1,), (128,), (x,))
    table["k"](grid, block, (x,), shared_mem=0)
    ch.launch(_lookup(), grid, block, 0, [x])
    f = driver.cuModuleGetFunction(None, b"k")[1]
    driver.cuLaunchKernel(f, *grid, *block, 0, 0, ((x,), (None,)), 0)
    print(len(table))
'''
    sites = hostlaunch.launch_sites(host)
    assert [(s.convention, s.kernel) for s in sites] == [
        ("cupy", "k"), ("cupy", "k"), ("cudahost", "k"), ("driver", "k")]
    # `len(table)` reads the container, not the kernel object: no refusal
    assert hostlaunch.refusal(host, "k", only_kernel=False) == ""
    assert "other than by calling it" in hostlaunch.refusal(
        host.replace("print(len(table))", "print(table['k'])"), "k", only_kernel=False)
    edited = hostlaunch.edit(host, [Directive("k", 65536, (128, 1, 1))], {"k"})
    assert edited.count('_kl_host_launch("k", ') == 4  # the four launches, each wrapped
    assert hostlaunch.strip(edited) == host


@pytest.mark.gpu
@pytest.mark.parametrize("convention,packed", [("cupy", "pair"), ("cudahost", "pair"),
                                               ("driver", "pair"), ("driver", "address")])
def test_on_the_gpu_each_edited_host_runs_the_reach_forms(tmp_path: Path, convention: str,
                                                          packed: str) -> None:
    if not torch.cuda.is_available():
        pytest.skip("no GPU")
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("wgmma and TMA need sm_90a")
    if convention == "cupy":
        pytest.importorskip("cupy")
    for options in (TMA, WIDE, {**TMA, "consumers": 4}):
        where = tmp_path / "_".join(sorted(options))
        where.mkdir()
        unit, _, result = _rewrite(_write(where, convention, packed), options)
        assert result.ok, result
        folder = unit.host_path.parent / "run"
        folder.mkdir()
        (folder / unit.host_path.name).write_text(_host(unit, result.ir.text))
        (folder / unit.host_path.with_suffix(".cu").name).write_text(result.ir.text)
        spec = importlib.util.spec_from_file_location(f"kl_gpu_host_{convention}_{packed}_"
                                                      f"{len(options)}", folder / unit.host_path.name)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        torch.manual_seed(6)
        # ragged sizes; K = 520 rows encode (TMA), K = 517 do not (the cp.async fill)
        for m, n, k in ((1000, 1032, 520), (999, 1001, 517)):
            inputs, want, tol = _inputs(convention, m, n, k)
            got = module.run(*(x.cuda() for x in inputs))
            torch.cuda.synchronize()
            assert (got.float().cpu() - want).abs().max() <= tol * want.abs().max(), (m, n, k)
