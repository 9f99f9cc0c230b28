"""Host side of the CUDA C++ expert GEMM (`gemm_cuda.cu`): C = A @ B, row-major, bf16 or fp16.

`run(a, b)` compiles the `.cu` beside this file with NVRTC (once per process), then launches
- on a Hopper GPU (sm_90a): `gemm_wgmma_*`, the TMA + wgmma warp-specialized kernel;
- elsewhere: `gemm_mma_*`, the cp.async + ldmatrix + mma.sync kernel.
Both need K and N to be multiples of 8 (16-byte rows for TMA and 16-byte cp.async chunks) and
16-byte aligned operands; other inputs raise `ValueError`. Torch is used only to allocate the
output and to hand over pointers and the current stream.
"""
from __future__ import annotations

import functools
import importlib.util
import sys
from pathlib import Path
from typing import Any

import torch

SOURCE_PATH = Path(__file__).with_suffix(".cu")

# Launch geometry; must match the #defines of gemm_cuda.cu.
WG_BM, WG_BN, WG_BK, WG_THREADS = 128, 256, 64, 384
WG_STAGES, WG_A_BYTES, WG_B_BYTES = 4, 128 * 64 * 2, 64 * 256 * 2
# The .cu's default WG_EPILOGUE (0: stores from registers; 1: shared memory + TMA store;
# 2: shared memory + 16-byte stores); 1 and 2 add two 64x64 C chunks per consumer warpgroup.
WG_EPILOGUE, WG_C_CHUNK_BYTES, WG_CONSUMERS = 2, 64 * 64 * 2, 2
MS_BM, MS_BN, MS_BK, MS_STAGES, MS_THREADS = 128, 128, 32, 4, 256
MS_SMEM_BYTES = MS_STAGES * (MS_BM * (MS_BK + 8) + MS_BK * (MS_BN + 8)) * 2

# Launch the wgmma kernel persistently (one block per SM); chosen from bench/results/gemm.md.
PERSISTENT = True

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
        if spec is None or spec.loader is None:
            raise
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[name] = module
        return module


def compile_kernels(arch: str | None = None, defines: dict[str, str | int] | None = None) -> Any:
    """The NVRTC compilation of gemm_cuda.cu (cached by source, arch and defines)."""
    return _cudahost().compile_source(SOURCE_PATH.read_text(), name=SOURCE_PATH.name,
                                      arch=arch, defines=defines)


# Host work per call must stay far below the ~0.2 ms kernel, or the GPU waits on Python:
# kernels, device properties and tensor maps are looked up once and then reused.
_KERNELS: dict[tuple, tuple[Any, int]] = {}
_TENSOR_MAPS: dict[tuple, Any] = {}


@functools.lru_cache(maxsize=None)
def _device_info(index: int) -> tuple[tuple[int, int], int]:
    """(compute capability, SM count) of a CUDA device."""
    props = torch.cuda.get_device_properties(index)
    return (props.major, props.minor), props.multi_processor_count


def _kernel(name: str, smem: int, defines: dict[str, str | int] | None) -> Any:
    """The loaded kernel `name`, allowed `smem` bytes of dynamic shared memory (once)."""
    key = (name, smem, tuple(sorted((defines or {}).items())))
    hit = _KERNELS.get(key)
    if hit is None:
        host = _cudahost()
        func = host.get_function(compile_kernels(defines=defines), name)
        host.set_dynamic_shared(func, smem)
        hit = _KERNELS[key] = (func, smem)
    return hit[0]


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
    swizzle, zero fill outside the tensor. A descriptor holds only the address, sizes, strides
    and box, so one cached under those stays valid for any tensor that has them."""
    key = (t.data_ptr(), tuple(t.shape), t.stride(0), t.dtype, box_inner, box_outer)
    hit = _TENSOR_MAPS.get(key)
    if hit is not None:
        return hit
    if len(_TENSOR_MAPS) > 256:
        _TENSOR_MAPS.clear()
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
    _TENSOR_MAPS[key] = tmap
    return tmap


def wgmma_smem_bytes(defines: dict[str, str | int] | None = None) -> int:
    """Dynamic shared memory of the wgmma kernel under `defines` (the .cu's WG_SMEM_BYTES)."""
    stages = int((defines or {}).get("WG_STAGES", WG_STAGES))
    c_bytes = WG_CONSUMERS * 2 * WG_C_CHUNK_BYTES if _epilogue(defines) else 0
    return stages * (WG_A_BYTES + WG_B_BYTES) + c_bytes + 2 * stages * 8 + 1024


def _epilogue(defines: dict[str, str | int] | None) -> int:
    """The epilogue the .cu beside this module compiles to: `WG_EPILOGUE` (defines, else the
    default), or 0 for a source without the macro (a lineage state of the earlier expert, which
    writes C from registers and takes no C tensor map)."""
    if "WG_EPILOGUE" not in _source_text():
        return 0
    return int((defines or {}).get("WG_EPILOGUE", WG_EPILOGUE))


@functools.lru_cache(maxsize=1)
def _source_text() -> str:
    return SOURCE_PATH.read_text()


def _cdiv(x: int, y: int) -> int:
    return (x + y - 1) // y


def matmul(a: torch.Tensor, b: torch.Tensor, kernel: str = "auto",
           defines: dict[str, str | int] | None = None, persistent: bool = PERSISTENT) -> torch.Tensor:
    """C = A @ B with the chosen kernel: "wgmma" (sm_90a only), "mma", or "auto" (wgmma on
    compute capability 9.0, else mma). `defines` override the .cu's tuning macros;
    `persistent` launches the wgmma kernel with one block per SM instead of one per tile."""
    _check(a, b)
    a = a.contiguous()
    b = b.contiguous()
    host = _cudahost()
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    capability, num_sms = _device_info(a.device.index if a.device.index is not None else torch.cuda.current_device())
    if kernel == "auto":
        kernel = "wgmma" if capability == (9, 0) else "mma"
    stream = torch.cuda.current_stream(a.device)
    if kernel == "wgmma":
        smem = wgmma_smem_bytes(defines)
        func = _kernel(f"gemm_wgmma_{_SUFFIX[a.dtype]}", smem, defines)
        map_a = _tensor_map(a, WG_BK, WG_BM)   # A tile: BM rows x BK (128 bytes) columns
        map_b = _tensor_map(b, 64, WG_BK)      # B atom: BK rows x 64 (128 bytes) columns
        # C chunk: 64 rows x 64 (128 bytes) columns, passed only to a kernel that TMA-stores C
        # (WG_EPILOGUE 1 in a source that has the parameter: an older source ignores the macro).
        c_map = [_tensor_map(c, 64, 64)] if _epilogue(defines) == 1 else []
        grid = _cdiv(M, WG_BM) * _cdiv(N, WG_BN)
        if persistent:
            grid = min(grid, num_sms)
        host.launch(func, grid, WG_THREADS, smem, [map_a, map_b, *c_map, c, M, N, K], stream)
    elif kernel == "mma":
        func = _kernel(f"gemm_mma_{_SUFFIX[a.dtype]}", MS_SMEM_BYTES, defines)
        grid = _cdiv(M, MS_BM) * _cdiv(N, MS_BN)
        host.launch(func, grid, MS_THREADS, MS_SMEM_BYTES, [a, b, c, M, N, K], stream)
    else:
        raise ValueError(f"unknown kernel {kernel!r}: expected 'auto', 'wgmma' or 'mma'")
    return c


def run(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """C = A @ B in A's dtype (fp32 accumulation); the case's reference signature."""
    return matmul(a, b)
