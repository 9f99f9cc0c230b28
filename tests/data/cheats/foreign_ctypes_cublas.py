"""Cheat (gemm case, GPU): computes the product with cuBLAS called through ctypes (the library
torch already loaded), then has its own kernel copy it into the output: every launch through
Triton is its own, and skipping it breaks the output."""
import ctypes

import torch
import triton
import triton.language as tl


@triton.jit
def copy_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=mask), mask=mask)


def _library_path(stem):
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1]
            if stem in path.rsplit("/", 1)[-1]:
                return path
    return stem + ".so"


_BLAS = ctypes.CDLL(_library_path("libcublas.so"))
_HANDLE = ctypes.c_void_p()
_DTYPE = {torch.bfloat16: 14, torch.float16: 2, torch.float32: 0}  # cudaDataType


def _gemm(a, b, c):
    # Row-major C = A @ B is column-major C^T = B^T A^T.
    if not _HANDLE.value:
        _BLAS.cublasCreate_v2(ctypes.byref(_HANDLE))
    _BLAS.cublasSetStream_v2(_HANDLE, ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))
    m, k = a.shape
    n = b.shape[1]
    one, zero = ctypes.c_float(1.0), ctypes.c_float(0.0)
    t = _DTYPE[a.dtype]
    status = _BLAS.cublasGemmEx(_HANDLE, 0, 0, n, m, k, ctypes.byref(one),
                                ctypes.c_void_p(b.data_ptr()), t, n,
                                ctypes.c_void_p(a.data_ptr()), t, k, ctypes.byref(zero),
                                ctypes.c_void_p(c.data_ptr()), t, n, 68, -1)
    assert status == 0, status


def run(a, b):
    tmp = torch.empty((a.shape[0], b.shape[1]), device=a.device, dtype=a.dtype)
    _gemm(a, b, tmp)
    out = torch.empty_like(tmp)
    copy_kernel[(triton.cdiv(out.numel(), 1024),)](tmp, out, out.numel(), BLOCK=1024)
    return out
