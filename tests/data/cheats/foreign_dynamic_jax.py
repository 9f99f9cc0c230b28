"""Cheat (gemm case): imports JAX by a computed call so no `import` statement names it, and
computes the product there; its own kernel copies the result in."""
import importlib

import torch
import triton
import triton.language as tl

jnp = importlib.import_module("jax.numpy")


@triton.jit
def copy_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=mask), mask=mask)


def run(a, b):
    c = jnp.asarray(a.float().cpu().numpy()) @ jnp.asarray(b.float().cpu().numpy())
    src = torch.as_tensor(c.__array__(), device=a.device).to(a.dtype)
    out = torch.empty_like(src)
    copy_kernel[(triton.cdiv(out.numel(), 1024),)](src, out, out.numel(), BLOCK=1024)
    return out
