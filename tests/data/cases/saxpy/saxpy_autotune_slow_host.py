"""saxpy behind an autotuner whose two configurations differ on the host and on the GPU:

- BLOCK=1024 (4 warps) is the faster kernel, but its pre-hook spends 600 us of Python before
  each launch (a heavy per-configuration set-up);
- BLOCK=32 (1 warp) issues at once, but its kernel is several times slower (32 threads per
  block cannot keep enough loads in flight to fill the memory bus).

Timed by plain `do_bench`, the first configuration measures its host's 600 us and the
autotuner keeps the slow kernel. The gate times each configuration behind its GPU lead
(gate.worker `install_tuning_bench`), so the autotuner keeps the fast kernel.
The kernel is written out here (not imported): the gate counts launches of kernels defined
in the candidate's own file."""
import time

import torch
import triton
import triton.language as tl


def _slow_host(nargs):
    until = time.perf_counter() + 600e-6
    while time.perf_counter() < until:
        pass


@triton.autotune(
    configs=[
        triton.Config({"BLOCK": 1024}, num_warps=4, pre_hook=_slow_host),
        triton.Config({"BLOCK": 32}, num_warps=1),
    ],
    key=["n"],
)
@triton.jit
def saxpy_kernel(x_ptr, y_ptr, out_ptr, a, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, a * x + y, mask=mask)


def run(a: float, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    n = x.numel()
    saxpy_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, out, a, n)
    return out
