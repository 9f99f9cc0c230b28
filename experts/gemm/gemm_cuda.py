"""Host side of the CUDA C++ expert GEMM (`gemm_cuda.cu`): C = A @ B, row-major, bf16 or fp16.

`run(a, b)` compiles the `.cu` beside this file with NVRTC (once per process), then launches
- on a Hopper GPU (sm_90a): `gemm_wgmma_*`, the TMA + wgmma warp-specialized kernel;
- elsewhere: `gemm_mma_*`, the cp.async + ldmatrix + mma.sync kernel.
Both need K and N to be multiples of 8 (16-byte rows for TMA and 16-byte cp.async chunks) and
16-byte aligned operands; other inputs raise `ValueError`. Torch is used only to allocate the
output and to hand over pointers and the current stream.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import torch

SOURCE_PATH = Path(__file__).with_suffix(".cu")

# Launch geometry; must match the #defines of gemm_cuda.cu.
WG_BM, WG_BN, WG_BK, WG_THREADS = 128, 256, 64, 384
WG_STAGES, WG_A_BYTES, WG_B_BYTES = 4, 128 * 64 * 2, 64 * 256 * 2
WG_SMEM_BYTES = WG_STAGES * (WG_A_BYTES + WG_B_BYTES) + 2 * WG_STAGES * 8 + 1024
MS_BM, MS_BN, MS_BK, MS_STAGES, MS_THREADS = 128, 128, 32, 4, 256
MS_SMEM_BYTES = MS_STAGES * (MS_BM * (MS_BK + 8) + MS_BK * (MS_BN + 8)) * 2

_SUFFIX = {torch.bfloat16: "bf16", torch.float16: "fp16"}


def _cudahost() -> Any:
    """experts/cudahost.py, imported by path so this module also works when the gate copies
    it (with its .cu) into a scratch folder outside the package."""
    name = "experts.cudahost"
    if name in sys.modules:
        return sys.modules[name]
    try:
        return importlib.import_module(name)
    except ImportError:
        path = Path(__file__).resolve().parents[1] / "cudahost.py"
        if not path.is_file():
            raise
        spec = importlib.util.spec_from_file_location("klineage_cudahost", path)
        module = importlib.util.module_from_spec(spec)
        assert spec.loader is not None
        spec.loader.exec_module(module)
        sys.modules[name] = module
        return module


def compile_kernels(arch: str | None = None, defines: dict[str, str | int] | None = None) -> Any:
    """The NVRTC compilation of gemm_cuda.cu (cached by source, arch and defines)."""
    return _cudahost().compile_source(SOURCE_PATH.read_text(), name=SOURCE_PATH.name,
                                      arch=arch, defines=defines)


def _check(a: torch.Tensor, b: torch.Tensor) -> None:
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"expected A (M, K) and B (K, N), got {tuple(a.shape)} and {tuple(b.shape)}")
    if a.dtype != b.dtype or a.dtype not in _SUFFIX:
        raise ValueError(f"A and B must both be bf16 or fp16, got {a.dtype} and {b.dtype}")
    if a.shape[1] % 8 or b.shape[1] % 8 or a.shape[1] == 0:
        raise ValueError(f"K and N must be positive multiples of 8, got K={a.shape[1]} N={b.shape[1]}")
    if a.data_ptr() % 16 or b.data_ptr() % 16:
        raise ValueError("A and B must be 16-byte aligned")


def _tensor_map(t: torch.Tensor, box_inner: int, box_outer: int) -> Any:
    """A 2-D TMA descriptor of row-major `t` with a (box_outer x box_inner) box, 128-byte
    swizzle, zero fill outside the tensor."""
    from cuda.bindings import driver as drv

    u32, u64 = drv.cuuint32_t, drv.cuuint64_t
    dtype = (drv.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 if t.dtype == torch.bfloat16
             else drv.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT16)
    rows, cols = t.shape
    err, tmap = drv.cuTensorMapEncodeTiled(
        dtype, 2, t.data_ptr(),
        [u64(cols), u64(rows)], [u64(t.stride(0) * t.element_size())],
        [u32(box_inner), u32(box_outer)], [u32(1), u32(1)],
        drv.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        drv.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B,
        drv.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        drv.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
    if int(err) != 0:
        raise _cudahost().CudaError(f"cuTensorMapEncodeTiled failed: {err}")
    return tmap


def _cdiv(x: int, y: int) -> int:
    return (x + y - 1) // y


def matmul(a: torch.Tensor, b: torch.Tensor, kernel: str = "auto",
           defines: dict[str, str | int] | None = None) -> torch.Tensor:
    """C = A @ B with the chosen kernel: "wgmma" (sm_90a only), "mma", or "auto" (wgmma on
    compute capability 9.0, else mma). `defines` override the .cu's tuning macros."""
    _check(a, b)
    a = a.contiguous()
    b = b.contiguous()
    host = _cudahost()
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    if kernel == "auto":
        kernel = "wgmma" if torch.cuda.get_device_capability(a.device) == (9, 0) else "mma"
    compiled = compile_kernels(defines=defines)
    stream = torch.cuda.current_stream(a.device)
    if kernel == "wgmma":
        func = host.get_function(compiled, f"gemm_wgmma_{_SUFFIX[a.dtype]}")
        host.set_dynamic_shared(func, WG_SMEM_BYTES)
        map_a = _tensor_map(a, WG_BK, WG_BM)   # A tile: BM rows x BK (128 bytes) columns
        map_b = _tensor_map(b, 64, WG_BK)      # B atom: BK rows x 64 (128 bytes) columns
        grid = _cdiv(M, WG_BM) * _cdiv(N, WG_BN)
        host.launch(func, grid, WG_THREADS, WG_SMEM_BYTES, [map_a, map_b, c, M, N, K], stream)
    elif kernel == "mma":
        func = host.get_function(compiled, f"gemm_mma_{_SUFFIX[a.dtype]}")
        host.set_dynamic_shared(func, MS_SMEM_BYTES)
        grid = _cdiv(M, MS_BM) * _cdiv(N, MS_BN)
        host.launch(func, grid, MS_THREADS, MS_SMEM_BYTES, [a, b, c, M, N, K], stream)
    else:
        raise ValueError(f"unknown kernel {kernel!r}: expected 'auto', 'wgmma' or 'mma'")
    return c


def run(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """C = A @ B in A's dtype (fp32 accumulation); the case's reference signature."""
    return matmul(a, b)
