"""Vector add with persistent programs and tensor descriptors (Triton >= 3.4 API).

Parser test input for KLineage: methods on tensor descriptors (`x_desc.load`), a class,
a nested helper function and a host launcher.
"""
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_desc, y_desc, out_desc, n_blocks, BLOCK: tl.constexpr, NUM_SMS: tl.constexpr):
    pid = tl.program_id(0)
    for blk in tl.range(pid, n_blocks, NUM_SMS, flatten=True):
        x = x_desc.load([blk * BLOCK])
        y = y_desc.load([blk * BLOCK])
        out_desc.store([blk * BLOCK], x + y)


class Launcher:
    """Keeps the launch grid for a fixed number of SMs."""

    def __init__(self, num_sms: int) -> None:
        self.num_sms = num_sms

    def grid(self, n_blocks: int) -> tuple[int]:
        def clamp(v: int) -> int:
            return max(1, min(v, self.num_sms))

        return (clamp(n_blocks),)
