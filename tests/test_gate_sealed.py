"""The sealed call: float inputs hold poison except while the candidate's own kernels run.

Host code that computes the answer from its inputs (a thread, NumPy, raw memory) sees NaN and is
rejected as `host_compute`; host copies of the inputs (casts, `contiguous`, `copy_`) are
replayed at each launch, so honest kernels that make them pass.
"""
from __future__ import annotations

from pathlib import Path

import pytest

import gate
from gate import FailureKind, Tier

SAXPY = Path(__file__).parent / "data" / "cases" / "saxpy"

_HEAD = '''
import torch
import triton
import triton.language as tl


@triton.jit
def copy_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=mask).to(tl.float32), mask=mask)


@triton.jit
def axpy_kernel(a, x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
    y = tl.load(y_ptr + offs, mask=mask).to(tl.float32)
    tl.store(out_ptr + offs, a * x + y, mask=mask)


def _copy(src, dst):
    copy_kernel[(triton.cdiv(dst.numel(), 256),)](src, dst, dst.numel(), BLOCK=256)
'''

_THREAD = _HEAD + '''
import threading


def run(a, x, y):
    box = []
    worker = threading.Thread(target=lambda: box.append(a * x + y))
    worker.start()
    worker.join()
    out = torch.empty_like(x)
    _copy(box[0], out)
    return out
'''

_NUMPY = _HEAD + '''
def run(a, x, y):
    host = a * x.numpy() + y.numpy()
    out = torch.empty_like(x)
    _copy(torch.from_numpy(host), out)
    return out
'''

_CTYPES = _HEAD + '''
import ctypes


def run(a, x, y):
    raw = (ctypes.c_float * x.numel()).from_address(x.data_ptr())
    rawy = (ctypes.c_float * y.numel()).from_address(y.data_ptr())
    src = torch.tensor([a * p + q for p, q in zip(raw, rawy)], dtype=x.dtype)
    out = torch.empty_like(x)
    _copy(src, out)
    return out
'''

# Host copies before the launches: a dtype cast, empty_like + copy_, a clone the kernel
# overwrites in place, a transposed copy; several launches per call over views.
_HONEST_COPIES = _HEAD + '''
def run(a, x, y):
    x64 = x.to(torch.float64)
    y2 = torch.empty_like(y)
    y2.copy_(y)
    yt = y2.reshape(2, -1).t().contiguous().t().reshape(-1)
    out = y.clone()
    n, step = x.numel(), 1024
    for start in range(0, n, step):
        end = min(n, start + step)
        axpy_kernel[(triton.cdiv(end - start, 256),)](a, x64[start:end], yt[start:end],
                                                       out[start:end], end - start, BLOCK=256)
    return out
'''

# A copy of an input that one kernel writes and the next reads (it stays the kernel's data).
_HONEST_INPLACE = _HEAD + '''
def run(a, x, y):
    acc = y.clone()
    axpy_kernel[(triton.cdiv(x.numel(), 256),)](a, x, acc, acc, x.numel(), BLOCK=256)
    out = torch.empty_like(x)
    _copy(acc, out)
    return out
'''


def _gate(source: str) -> gate.Verdict:
    return gate.check(source, "triton", SAXPY, Tier.INTERPRET, cache=False, timeout=120)


@pytest.mark.parametrize("source", [_THREAD, _NUMPY, _CTYPES], ids=["thread", "numpy", "ctypes"])
def test_an_answer_computed_outside_the_kernels_is_host_compute(source: str) -> None:
    verdict = _gate(source)
    assert verdict.failure_kind is FailureKind.HOST_COMPUTE, (verdict.failure_kind, verdict.reason)
    assert verdict.stage == "anti_cheat"
    assert "visible only to the candidate's kernels" in verdict.reason


@pytest.mark.parametrize("source", [_HONEST_COPIES, _HONEST_INPLACE], ids=["copies", "in_place"])
def test_host_copies_of_the_inputs_are_replayed_at_each_launch(source: str) -> None:
    verdict = _gate(source)
    assert verdict.ok, (verdict.failure_kind, verdict.reason)
    results = verdict.correctness.results
    assert [r.phase for r in results].count("sealed") == 1
    assert all(r.rel_err < 1e-6 for r in results if r.phase == "sealed")
    assert "sealed" in dict(verdict.phases)


# Runs out of device memory on the sealed call only (found by host code: the NaN it sees there).
_OOM_ON_SEALED = _HEAD + '''
import math


def run(a, x, y):
    if math.isnan(float(x.numpy()[0])):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 4.00 GiB")
    out = torch.empty_like(x)
    axpy_kernel[(triton.cdiv(x.numel(), 256),)](a, x, y, out, x.numel(), BLOCK=256)
    return out
'''


def test_running_out_of_device_memory_on_the_sealed_call_is_out_of_memory_not_host_compute() -> None:
    verdict = _gate(_OOM_ON_SEALED)
    assert verdict.failure_kind is FailureKind.OUT_OF_MEMORY, (verdict.failure_kind, verdict.reason)
    assert verdict.stage == "anti_cheat" and "sealed inputs" in verdict.reason
