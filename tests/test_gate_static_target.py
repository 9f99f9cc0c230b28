"""The static tier sees its target GPU: dynamic shared memory of launches, the target's SM count."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import gate
from gate import Tier
from gate import facts as gate_facts
from gate.target import STATIC_TARGET
from gate.verdict import CompileFacts, Facts
from lineage.cli import main

SAXPY = Path(__file__).parent / "data" / "cases" / "saxpy"

# Three kernels: `staged` takes its buffer from the launch (dynamic shared memory), `plain`
# uses none, `spare` declares a dynamic buffer but the host below never launches it.
_CU = r"""
extern "C" __global__ void staged(float a, const float* x, const float* y, float* out, int n) {
  extern __shared__ float buf[];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  buf[threadIdx.x] = i < n ? x[i] : 0.0f;
  __syncthreads();
  if (i < n) out[i] = a * buf[threadIdx.x] + y[i];
}
extern "C" __global__ void plain(float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] += 0.0f;
}
extern "C" __global__ void spare(float* out, int n) {
  extern __shared__ float tmp[];
  tmp[threadIdx.x] = out[threadIdx.x];
  __syncthreads();
  if (threadIdx.x < n) out[threadIdx.x] = tmp[blockDim.x - 1 - threadIdx.x];
}
"""

# The launch's dynamic size is computed by host code (a block of THREADS floats, twice).
_HOST = '''
import ctypes
from pathlib import Path

import torch

from experts import cudahost

_SOURCE = Path(__file__).with_suffix(".cu")
THREADS = 128


def run(a, x, y):
    if not x.is_cuda:
        raise ValueError("expects CUDA tensors")
    compiled = cudahost.compile_source(_SOURCE.read_text(), name=_SOURCE.name)
    smem = 2 * THREADS * x.element_size()
    staged = cudahost.get_function(compiled, "staged")
    cudahost.set_dynamic_shared(staged, 64 * 1024)
    out = torch.empty_like(x)
    n = x.numel()
    grid = (n + THREADS - 1) // THREADS
    stream = torch.cuda.current_stream(x.device)
    cudahost.launch(staged, grid, THREADS, smem, (ctypes.c_float(a), x, y, out, n), stream)
    cudahost.launch(cudahost.get_function(compiled, "plain"), grid, THREADS, 0, (out, n), stream)
    return out
'''


def _cuda_candidate(folder: Path, host: str) -> Path:
    (folder / "dyn_cuda.cu").write_text(_CU)
    (folder / "dyn_cuda.py").write_text(host)
    return folder / "dyn_cuda.cu"


def _by_kernel(verdict: gate.Verdict) -> dict[str, CompileFacts]:
    assert verdict.ok, verdict.reason
    return {c.kernel: c for c in verdict.facts.compiles}


def test_ptx_tells_which_kernels_declare_dynamic_shared_memory() -> None:
    from experts import cudahost

    compiled = cudahost.compile_source(_CU, name="dyn.cu", arch="sm_90a")
    assert gate_facts.ptx_dynamic_shared(compiled.ptx) == {"staged": True, "plain": False,
                                                            "spare": True}


def test_dynamic_shared_memory_of_a_cuda_launch_is_reported(tmp_path: Path) -> None:
    verdict = gate.check_file(_cuda_candidate(tmp_path, _HOST), SAXPY, Tier.STATIC, cache=False)
    kernels = _by_kernel(verdict)
    staged = kernels["staged"]
    # The launch passes 2 * 128 floats, not the 64 KiB the host allows it.
    assert (staged.dynamic_shared_bytes, staged.dynamic_shared_source) == (1024, "launch")
    assert staged.static_shared_bytes == 0 and staged.shared_bytes == 1024
    plain = kernels["plain"]
    assert (plain.dynamic_shared_bytes, plain.dynamic_shared_source) == (0, "launch")
    spare = kernels["spare"]
    assert spare.dynamic_shared_bytes is None and spare.dynamic_shared_source == "not_launched"
    assert spare.shared_bytes is None
    assert verdict.facts.max_shared_bytes == 1024
    assert verdict.facts.dynamic_shared_unknown == ()


def test_dynamic_shared_memory_that_cannot_be_traced_is_unknown(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # The host opts `staged` in, then fails before any launch: `staged` is known by its opt-in,
    # `spare` (which declares a dynamic buffer) is unknown, `plain` (which declares none) is 0.
    host = _HOST.replace("    out = torch.empty_like(x)\n",
                         "    raise RuntimeError('no launch path here')\n", 1)
    cu = _cuda_candidate(tmp_path, host)
    verdict = gate.check_file(cu, SAXPY, Tier.STATIC, cache=False)
    kernels = _by_kernel(verdict)
    assert (kernels["staged"].dynamic_shared_bytes, kernels["staged"].dynamic_shared_source) == (
        64 * 1024, "opt_in")
    assert (kernels["plain"].dynamic_shared_bytes, kernels["plain"].dynamic_shared_source) == (
        0, "unused")
    spare = kernels["spare"]
    assert spare.dynamic_shared_bytes is None and spare.dynamic_shared_source == "unknown"
    assert verdict.facts.dynamic_shared_unknown == ("spare",)
    assert any("spare" in f and "no launch path here" in f for f in verdict.flags), verdict.flags

    assert main(["gate", str(cu), "--case", str(SAXPY), "--tier", "static", "--no-cache"]) == 0
    text = capsys.readouterr().out
    assert "dynamic: unknown for spare" in text, text
    assert main(["gate", str(cu), "--case", str(SAXPY), "--tier", "static", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)["facts"]
    spare_json = next(c for c in data["compiles"] if c["kernel"] == "spare")
    assert spare_json["dynamic_shared_bytes"] is None and spare_json["shared_bytes"] is None
    assert data["dynamic_shared_unknown"] == ["spare"]


# A persistent Triton kernel whose program count the host takes from the device: through torch
# on a GPU tensor, else the host's core count (`how` picks the query).
_TRITON = '''
import os

import torch
import triton
import triton.language as tl


@triton.jit
def saxpy_kernel(x_ptr, y_ptr, out_ptr, a, n, BLOCK: tl.constexpr, NUM_SMS: tl.constexpr):
    for blk in tl.range(tl.program_id(0), tl.cdiv(n, BLOCK), NUM_SMS):
        offs = blk * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask)
        y = tl.load(y_ptr + offs, mask=mask)
        tl.store(out_ptr + offs, a * x + y, mask=mask)


def _sm_count(x):
    if x.device.type != "cuda":
        return os.cpu_count()
    if HOW == "torch":
        return torch.cuda.get_device_properties(x.device).multi_processor_count
    props = triton.runtime.driver.active.utils.get_device_properties(x.device.index)
    return props["multiprocessor_count"]


def run(a, x, y):
    out = torch.empty(x.shape, device=x.device, dtype=x.dtype)
    n = x.numel()
    sms = _sm_count(x)
    saxpy_kernel[(min(sms, triton.cdiv(n, 1024)),)](x, y, out, a, n, BLOCK=1024, NUM_SMS=sms)
    return out
'''


@pytest.mark.parametrize("how", ["torch", "triton"])
def test_triton_host_code_sees_the_targets_sm_count(tmp_path: Path, how: str) -> None:
    assert os.cpu_count() != STATIC_TARGET.sm_count  # else the test could not tell them apart
    kernel = tmp_path / "persistent_triton.py"
    kernel.write_text(f"HOW = {how!r}\n" + _TRITON)
    verdict = gate.check_file(kernel, SAXPY, Tier.STATIC, cache=False)
    assert verdict.ok, verdict.reason
    (c,) = verdict.facts.compiles
    assert c.config["NUM_SMS"] == STATIC_TARGET.sm_count == 132
    assert (c.static_shared_bytes, c.dynamic_shared_source) == (0, "triton")
    assert verdict.facts.to_json()["target_properties"]["sm_count"] == 132
    assert not verdict.flags


def test_facts_json_round_trip_and_old_form() -> None:
    c = CompileFacts("k", {"variant": "default"}, 32, 1024, None, "unknown", 0, 0, 0, {})
    facts = Facts((c,))
    data = facts.to_json()
    assert data["compiles"][0]["shared_bytes"] is None
    assert data["max_shared_bytes"] is None and data["dynamic_shared_unknown"] == ["k"]
    assert data["target_properties"]["shared_memory_per_block_optin"] == 227 * 1024
    assert Facts.from_json(data) == facts
    old = dict(data["compiles"][0], shared_bytes=4096)
    for key in ("static_shared_bytes", "dynamic_shared_bytes", "dynamic_shared_source"):
        del old[key]
    read = CompileFacts.from_json(old)
    assert read.static_shared_bytes == 4096 and read.dynamic_shared_bytes is None
    big = CompileFacts("k", {}, 32, 0, 300 * 1024, "triton", 0, 0, 0, {})
    assert Facts((big, c)).over_shared_limit == 1
