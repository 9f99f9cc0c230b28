"""CUDA kernels run on the CPU: the gate's `emulate` tier (correctness of CUDA without a GPU).

A CUDA C++ source is rewritten (`prepass`) and compiled with the system C++ compiler against
an emulation header (`cudacpu.h`, `cudacpu_ptx.h`) into a shared library (`library.build`,
cached on disk by content); its host module runs unchanged with the driver and NVRTC calls
answered on the CPU (`host.emulated`, `host.host_call`). Entry points:

- `gate.check(source, "cuda", case, tier="emulate", host=host_path)` (or `klineage gate
  K.cu --tier emulate`): the full gate at the case's SMALL_SHAPES, in a fresh worker, with the
  same comparison, seeds, knockout, sealed and repeated calls as the interpret tier. This is
  what a CUDA rewrite is checked with on a machine without a GPU.
- `run_host(source, host, *inputs)`: one call of the host's `run` on `inputs` (host tensors)
  with `source` as its `.cu`, in this process; the outputs come back as host tensors.
- `build(source, ...)` -> `Library`, `Library.launch(kernel, grid, block, shared, args)`: one
  kernel, no host module.

Execution model: blocks run one after another; a block's threads are fibers on one OS thread,
each run until a barrier, a warp collective or its end; the order alternates between blocks
(first to last, last to first) and shared memory starts each block poisoned (all bits set), so
a read that no barrier orders after the write it needs sees poison in one order or the other.
Warp collectives resolve once every lane of their mask that has not exited has arrived;
accesses through `volatile` pointers run the warp's lanes in lockstep.
cp.async copies land when their group is waited for (or the thread ends). Atomics are plain
read-modify-writes (no thread runs inside another's). The emulated device is the static tier's
sm_90a target, to host code (`host.EMULATED`: a host that picks a kernel by architecture picks
the one the device tier runs) and to device code (`__CUDA_ARCH__` 900).

Supported: `__global__ / __device__ / __host__ / __forceinline__ / __launch_bounds__ /
__restrict__ / __align__ / __constant__` device globals; `__shared__` (any scope, several
declarators) and `extern __shared__` sized by the launch (above 48 KiB only after the opt-in);
threadIdx / blockIdx / blockDim / gridDim / warpSize; `__syncthreads` (and `_count / _and /
_or`), `__syncwarp`, fences; `__shfl_sync / _up / _down / _xor` (any type up to 8 bytes, with
width), `__ballot_sync / __any_sync / __all_sync / __uni_sync / __activemask`,
`__match_any_sync / __match_all_sync`, `__reduce_*_sync`; atomics (Add, Sub, Exch, Min, Max,
Inc, Dec, CAS, And, Or, Xor, and their `_block` / `_system` forms) on any type; float math
(libm for `expf`... and the `__expf / __fdividef / rsqrtf / __saturatef`... intrinsics),
integer intrinsics (`__popc, __clz, __ffs, __brev, __byte_perm, __funnelshift_*, __mulhi,
__dp4a`...), bit casts and rounding conversions; `__half`, `__nv_bfloat16`, `half2`,
`__nv_bfloat162` with their conversions (round to nearest even, as the GPU) and arithmetic;
vector types (`float4`, `int4`... with CUDA's alignment, `make_*`); `__ldg` and the cache-hint
loads / stores; `__cvta_generic_to_shared`; the `cuda_pipeline.h` primitives; device
`assert`, `__trap`, `printf`; `cooperative_groups` blocks and tiles of up to a warp
(`tiled_partition<N>`, their shuffles and votes, `cg::reduce`); `#pragma unroll` (ignored).
Inline PTX: `prepass.SUPPORTED`
(mma.sync m16n8k16 / m16n8k8 with f16 / bf16 inputs, ldmatrix / stmatrix m8n8, cp.async with
zero fill and its groups, `cp.async.mbarrier.arrive` (.noinc: the thread's copies land at it and
it counts an arrival), 1-D bulk copies (`cp.async.bulk`) completing on mbarriers, TMA
tensor copies in tile mode (`cp.async.bulk.tensor`, 1-5 dimensions, 32 / 64 / 128-byte
swizzles, zero fill, loads on mbarriers and stores; maps from the emulated
`cuTensorMapEncodeTiled`), `wgmma.mma_async` m64nNk16 with f32 accumulators and f16 / bf16
operands from shared-memory descriptors (K- or MN-major, any swizzle; a warpgroup-wide
collective, its result there when issued), mbarrier init / arrive (expect_tx) / complete_tx /
try_wait (parity), `setmaxnreg` (no effect), branches to
labels within a statement (wait loops), cvt between f32 and f16 / bf16 (x2), cvta, mov with
special registers, setp / selp, ld / st (shared, global), integer and f32 arithmetic, bar.sync /
bar.arrive for the block and for named barriers of part of it, fences as no-ops); any other
instruction ends the launch that reaches it with the instruction named (`Library.refused` lists
them for a source).

Not modeled: timing and performance of any kind; memory ordering beyond barriers (memory is
sequentially consistent, so a missing `__threadfence` passes); blocks that wait for one
another (an inter-block spin lock, a decoupled look-back scan: blocks run one after another, so
such a kernel hangs until the gate's time limit); warp-synchronous code that
relies on lockstep execution without `__syncwarp` is run in lockstep only where it reads and
writes through `volatile T*` pointers (each access waits for the warp's other running lanes:
the classic unrolled last warp of a tree); through plain pointers or `volatile` arrays its
lanes run one after another and read stale values (it fails here, as it may on Volta and later
GPUs); shuffles that read from lanes outside the mask or that have exited (they return the
caller's own value); TMA im2col / gather / multicast modes, wgmma with A in registers or
f16 accumulators, tcgen05, thread block clusters beyond one block, grid-wide cooperative groups
(`this_grid().sync()`), WMMA (`mma.h`), dynamic parallelism, texture and surface memory,
the runtime API on the host (`cudaMemcpyToSymbol` ...; the driver's `cuModuleGetGlobal`,
`cuMemAlloc` and `cuMemcpy*` are answered); host modules whose kernels come
from a `load_inline` extension (its C++ host half needs nvcc and a CUDA build of torch: the
gate refuses them at this tier); out-of-bounds accesses that stay inside mapped host memory (an
access outside it is an `illegal memory access`); kernels that are templates or overloaded (a
host cannot launch those by plain name either, except through NVRTC name expressions, which
are refused).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from gate.cudacpu.host import EMULATED, CpuFunction, emulated, host_call
from gate.cudacpu.library import BuildError, EmulationError, Library, build

__all__ = ["EMULATED", "BuildError", "CpuFunction", "EmulationError", "Library", "build",
           "emulated", "host_call", "run_host"]


def run_host(source: str, host: str | Path, *inputs: Any, stem: str | None = None) -> Any:
    """One call of a CUDA host module's `run(*inputs)` with its kernels emulated on the CPU.

    `source` is the `.cu` text the host compiles (a rewrite under test); `host` is the host
    module (its path, or its text). Both are copied into a fresh folder as `<stem>.cu` and
    `<stem>.py` (stem: the host file's, else "candidate"; a host holding its source as a string
    holds `source` instead; its launches edited as the source's host-launch lines ask,
    `kir.hostlaunch`), the host is imported there under
    `emulated()` and called through `host_call`. Inputs are host tensors (and scalars);
    outputs come back as host tensors. Raises what the host raises: `CompileError` from
    `experts.cudahost` when the source does not build, `CudaError` / `EmulationError` when a
    launch fails.
    """
    import importlib.util  # noqa: PLC0415
    import shutil  # noqa: PLC0415
    import sys  # noqa: PLC0415
    import tempfile  # noqa: PLC0415

    if isinstance(host, str) and "\n" not in host:
        host = Path(host)
    text = host.read_text() if isinstance(host, Path) else host
    from kir import embedded, hostlaunch  # noqa: PLC0415

    held = embedded.find(text)  # a host holding its source as a string runs `source` instead
    text = hostlaunch.apply(held.splice(source) if held is not None else text, source)
    if stem is None:
        stem = host.stem if isinstance(host, Path) else "candidate"
    folder = Path(tempfile.mkdtemp(prefix="cudacpu-host-"))
    try:
        (folder / f"{stem}.cu").write_text(source)
        (folder / f"{stem}.py").write_text(text)
        name = f"cudacpu_host_{stem}_{abs(hash((source, text))) & 0xffffffff:x}"
        with emulated():
            spec = importlib.util.spec_from_file_location(name, folder / f"{stem}.py")
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            try:
                spec.loader.exec_module(module)
                return host_call(module.run, *inputs)
            finally:
                sys.modules.pop(name, None)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
