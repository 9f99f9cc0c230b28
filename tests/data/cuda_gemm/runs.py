"""How each GEMM of this folder is launched and what torch computes for it.

`RUNS[stem] = (block option, run)`: `run(launch, m, n, k)` makes inputs, calls
`launch(grid, block, args)` as the kernel's own host half would, and returns (output, reference,
relative tolerance). Inputs are fp16 / bf16 host tensors (the emulator's device memory).
"""
from __future__ import annotations

from typing import Any, Callable

import torch

Launch = Callable[[Any, Any, list[Any]], None]


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _mk(m: int, k: int, n: int, dtype: Any) -> tuple[Any, Any]:
    return torch.randn(m, k).to(dtype), torch.randn(k, n).to(dtype)


def axpby_tiled(launch: Launch, m: int, n: int, k: int) -> tuple[Any, Any, float]:
    a, b = _mk(m, k, n, torch.half)
    c = torch.randn(m, n).half()
    want = 0.5 * (a.float() @ b.float()) - 1.5 * c.float()
    launch((_cdiv(n, 16), _cdiv(m, 16)), (16, 16), [m, n, k, 0.5, a, b, -1.5, c])
    return c.float(), want, 5e-3


def bias_gelu_reg(launch: Launch, m: int, n: int, k: int) -> tuple[Any, Any, float]:
    x, w = _mk(m, k, n, torch.bfloat16)
    bias = torch.randn(n)
    y = torch.zeros(m, n, dtype=torch.bfloat16)
    launch((_cdiv(n, 64), _cdiv(m, 64)), (256, 1), [x, w, bias, y, m, n, k])
    want = torch.nn.functional.gelu(x.float() @ w.float() + bias, approximate="tanh")
    return y.float(), want, 2e-2


def nt_half2(launch: Launch, m: int, n: int, k: int) -> tuple[Any, Any, float]:
    k += k % 2  # the pairs are 4-byte aligned only for an even K
    a, bt = torch.randn(m, k).half(), torch.randn(n, k).half()
    c = torch.zeros(m, n, dtype=torch.half)
    launch((_cdiv(n, 32), _cdiv(m, 32)), (16, 16), [a, bt, c, m, n, k])
    return c.float(), torch.relu(a.float() @ bt.float().T), 5e-3


def batched_z(launch: Launch, m: int, n: int, k: int) -> tuple[Any, Any, float]:
    import ctypes

    batch = 3
    a, b = torch.randn(batch, m, k).bfloat16(), torch.randn(batch, k, n).bfloat16()
    c = torch.zeros(batch, m, n, dtype=torch.bfloat16)
    launch((_cdiv(n, 16), _cdiv(m, 16), batch), (16, 16),
           [a, b, c, m, n, k] + [ctypes.c_longlong(v) for v in (m * k, k * n, m * n)])
    return c.float(), a.float() @ b.float(), 2e-2


def double_buffer(launch: Launch, m: int, n: int, k: int) -> tuple[Any, Any, float]:
    a, b = _mk(m, k, n, torch.bfloat16)
    c = torch.zeros(m, n)
    launch((_cdiv(n, 32), _cdiv(m, 32)), (16, 16), [a, b, c, m, n, k])
    return c, a.float() @ b.float(), 2e-2


def template_tiles(launch: Launch, m: int, n: int, k: int) -> tuple[Any, Any, float]:
    a, b = _mk(m, k, n, torch.half)
    c = torch.zeros(m, n, dtype=torch.half)
    launch((_cdiv(n, 16), _cdiv(m, 16)), (256, 1), [a, b, c, m, n, k])
    return c.float(), a.float() @ b.float(), 5e-3


def colmajor(launch: Launch, m: int, n: int, k: int) -> tuple[Any, Any, float]:
    # column-major with leading dimensions past the rows: A is m x k in an (m + 3)-row array
    lda, ldb, ldc = m + 3, k + 1, m + 2
    a_store = torch.randn(k, lda).half()
    b_store = torch.randn(n, ldb).half()
    c_store = torch.zeros(n, ldc, dtype=torch.half)
    a = a_store[:, :m].T.float()
    b = b_store[:, :k].T.float()
    launch((_cdiv(m, 32), _cdiv(n, 8)), (32, 8), [m, n, k, a_store, lda, b_store, ldb, c_store, ldc])
    return c_store[:, :m].T.float(), a @ b, 5e-3


def bf162_store(launch: Launch, m: int, n: int, k: int) -> tuple[Any, Any, float]:
    n += n % 2
    a, b = _mk(m, k, n, torch.bfloat16)
    c = torch.zeros(m, n, dtype=torch.bfloat16)
    launch((_cdiv(n // 2, 16), _cdiv(m, 16)), (16, 16), [a, b, c, m, n, k])
    return c.float(), a.float() @ b.float(), 2e-2


def sizet_unroll4(launch: Launch, m: int, n: int, k: int) -> tuple[Any, Any, float]:
    import ctypes

    a, b = _mk(m, k, n, torch.bfloat16)
    c = torch.zeros(m, n, dtype=torch.bfloat16)
    launch((_cdiv(n, 16), _cdiv(m, 16)), (16, 16),
           [a, b, c, ctypes.c_size_t(m), ctypes.c_size_t(n), ctypes.c_size_t(k)])
    return c.float(), a.float() @ b.float(), 2e-2


def struct_dims(launch: Launch, m: int, n: int, k: int) -> tuple[Any, Any, float]:
    import ctypes

    class Shape(ctypes.Structure):
        _fields_ = [("m", ctypes.c_int), ("n", ctypes.c_int), ("k", ctypes.c_int)]

        def getPtr(self) -> int:  # noqa: N802 - the name cudahost.pack_args asks for
            return ctypes.addressof(self)

    a, b = _mk(m, k, n, torch.bfloat16)
    c = torch.zeros(m, n, dtype=torch.bfloat16)
    launch((_cdiv(n, 16), _cdiv(m, 16)), (16, 16), [Shape(m, n, k), a, b, c])
    return c.float(), a.float() @ b.float(), 2e-2


def half_acc(launch: Launch, m: int, n: int, k: int) -> tuple[Any, Any, float]:
    a, b = _mk(m, k, n, torch.half)
    c = torch.zeros(m, n, dtype=torch.half)
    launch((_cdiv(n, 16), _cdiv(m, 16)), (16, 16), [a, b, c, m, n, k])
    return c.float(), a.float() @ b.float(), 3e-2


naive_half_acc = half_acc

RUNS: dict[str, tuple[str, Callable[..., tuple[Any, Any, float]]]] = {
    "axpby_tiled": ("16x16", axpby_tiled), "bias_gelu_reg": ("256", bias_gelu_reg),
    "nt_half2": ("16x16", nt_half2), "batched_z": ("16x16", batched_z),
    "double_buffer": ("16x16", double_buffer), "template_tiles": ("256", template_tiles),
    "colmajor": ("32x8", colmajor), "bf162_store": ("16x16", bf162_store),
    "sizet_unroll4": ("16x16", sizet_unroll4), "struct_dims": ("16x16", struct_dims),
    "half_acc": ("16x16", half_acc), "naive_half_acc": ("16x16", naive_half_acc),
}


def batched_naive(launch: Launch, m: int, n: int, k: int) -> tuple[Any, Any, float]:
    batch = 2
    a, b = torch.randn(batch, m, k).half(), torch.randn(batch, k, n).half()
    c = torch.zeros(batch, m, n, dtype=torch.half)
    launch((_cdiv(n, 16), _cdiv(m, 16), batch), (16, 16), [a, b, c, m, n, k])
    return c.float(), a.float() @ b.float(), 5e-3


RUNS["batched_naive"] = ("16x16", batched_naive)


def gridstride_naive(launch: Launch, m: int, n: int, k: int) -> tuple[Any, Any, float]:
    a, b = _mk(m, k, n, torch.bfloat16)
    c = torch.randn(m, n)
    want = a.float() @ b.float() + 0.5 * c
    launch((64, 1), (256, 1), [a, b, c, m, n, k, 0.5])
    return c, want, 2e-2


def beta_init_naive(launch: Launch, m: int, n: int, k: int) -> tuple[Any, Any, float]:
    a, b = _mk(m, k, n, torch.half)
    c = torch.randn(m, n).half()
    want = a.float() @ b.float() - 2.0 * c.float()
    launch((_cdiv(n, 32), _cdiv(m, 8)), (32, 8), [a, b, c, m, n, k, -2.0])
    return c.float(), want, 5e-3


RUNS["gridstride_naive"] = ("256", gridstride_naive)
RUNS["beta_init_naive"] = ("32x8", beta_init_naive)


def c_init_naive(launch: Launch, m: int, n: int, k: int) -> tuple[Any, Any, float]:
    a, b = _mk(m, k, n, torch.half)
    c = torch.randn(m, n).half()
    want = a.float() @ b.float() + c.float()
    launch((_cdiv(n, 32), _cdiv(m, 8)), (32, 8), [a, b, c, m, n, k, 0.0])
    return c.float(), want, 5e-3


RUNS["c_init_naive"] = ("32x8", c_init_naive)


def floor_k_tiled(launch: Launch, m: int, n: int, k: int) -> tuple[Any, Any, float]:
    a, b = _mk(m, k, n, torch.half)
    c = torch.randn(m, n).half()
    whole = k // 16 * 16  # the kernel drops the K remainder
    want = 0.5 * (a.float()[:, :whole] @ b.float()[:whole]) - 1.5 * c.float()
    launch((_cdiv(n, 16), _cdiv(m, 16)), (16, 16), [m, n, k, 0.5, a, b, -1.5, c])
    return c.float(), want, 5e-3


RUNS["axpby_xrows"] = ("16x16", axpby_tiled)
RUNS["floor_k_tiled"] = ("16x16", floor_k_tiled)


def ring_toggle(launch: Launch, m: int, n: int, k: int) -> tuple[Any, Any, float]:
    a, b = _mk(m, k, n, torch.half)
    c = torch.zeros(m, n, dtype=torch.half)
    launch((_cdiv(n, 64), _cdiv(m, 64)), (256, 1), [m, n, k, a, b, c])
    return c.float(), a.float() @ b.float(), 5e-3


RUNS["ring_toggle"] = ("256", ring_toggle)


def dims_in_memory(launch: Launch, m: int, n: int, k: int) -> tuple[Any, Any, float]:
    a, b = _mk(m, k, n, torch.half)
    c = torch.zeros(m, n, dtype=torch.half)
    dims = torch.tensor([m, n, k], dtype=torch.int32)
    launch((_cdiv(n, 32), _cdiv(m, 32)), (256, 1), [dims, a, b, c])
    return c.float(), a.float() @ b.float(), 5e-3


RUNS["dims_in_memory"] = ("256", dims_in_memory)


def linear_nt_vec(launch: Launch, m: int, n: int, k: int) -> tuple[Any, Any, float]:
    k = -(-k // 8) * 8  # the kernel reads whole 16-byte chunks of K
    x, w = torch.randn(m, k).bfloat16(), torch.randn(n, k).bfloat16()
    y = torch.zeros(m, n, dtype=torch.bfloat16)
    launch((_cdiv(n, 64), _cdiv(m, 64)), (256, 1), [x, w, y, m, n, k, 0.75])
    return y.float(), 0.75 * (x.float() @ w.float().T), 2e-2


RUNS["linear_nt_vec"] = ("256", linear_nt_vec)
RUNS["ring_views"] = ("16x16", double_buffer)
RUNS["rowptr_tiled"] = ("16x16", axpby_tiled)


def template_sizes(launch: Launch, m: int, n: int, k: int) -> tuple[Any, Any, float]:
    m, n, k = 72, 136, 40  # the kernel's instantiation (its sizes are template values)
    a, b = _mk(m, k, n, torch.half)
    c = torch.zeros(m, n, dtype=torch.half)
    launch((_cdiv(n, 16), _cdiv(m, 16)), (16, 16), [a, b, c])
    return c.float(), a.float() @ b.float(), 5e-3


RUNS["template_sizes"] = ("16x16", template_sizes)


def pipeline_async(launch: Launch, m: int, n: int, k: int) -> tuple[Any, Any, float]:
    n, k = -(-n // 8) * 8, -(-k // 8) * 8  # whole 16-byte chunks along N and K
    a, b = _mk(m, k, n, torch.bfloat16)
    c = torch.zeros(m, n, dtype=torch.bfloat16)
    launch((_cdiv(n, 64), _cdiv(m, 64)), (256, 1), [a, b, c, m, n, k])
    return c.float(), a.float() @ b.float(), 2e-2


RUNS["pipeline_async"] = ("256", pipeline_async)
