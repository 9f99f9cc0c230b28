"""Expert Triton kernel for `topk`: radix select of the k-th largest key, then a sort of k.

One program owns one row, held in registers. The floats are mapped to unsigned keys whose
integer order is the float order, and the k-th largest key is found digit by digit, most
significant first: each pass histograms one RADIX_BITS-wide digit of the keys that still match
the prefix found so far (a coarse histogram, then refinements), and picks the bin in which the
k-th largest falls. With the threshold key T known, the k winners (every key > T, then the first
keys == T in index order) are compacted by one prefix sum and sorted descending; only those k
elements are ever sorted, never the row.

Expert decisions, each a plain Triton construct: the radix width RADIX_BITS, the warp count and
EARLY_EXIT (a while loop that stops refining once the chosen bin holds only winners, instead of
all 32/RADIX_BITS passes) are autotuned; the histogram is tl.histogram; the two counts the
compaction needs come from one scan of a packed int32; the compaction writes (key, index)
packed into one int64 into the indices output, which doubles as scratch, and the k-element
sort runs on those packed words.
"""
from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

_INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"


def _first_config_when_interpreted(configs: list[triton.Config], named_args: dict,
                                   **kwargs) -> list[triton.Config]:
    """The CPU interpreter tries only the first (best-measured) config, so it runs exactly the
    config a pinned (de-autotuned) kernel runs on the device; the device tries them all."""
    return configs[:1] if _INTERPRET else configs


@triton.jit
def _ordered_key(x):
    """float32 -> int32 whose signed order is the float order (negative floats flipped)."""
    bits = x.to(tl.int32, bitcast=True)
    return bits ^ ((bits >> 31) & 0x7FFFFFFF)


@triton.jit
def _key_to_float(key):
    """Inverse of _ordered_key."""
    bits = key ^ ((key >> 31) & 0x7FFFFFFF)
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def _radix_pass(ukey, valid, prefix, remaining, cut, RADIX_BITS: tl.constexpr):
    """One refinement: histogram the digit at bit `cut` of the live keys (those whose bits above
    the digit equal `prefix`), pick the bin holding the `remaining`-th largest.

    Returns the extended prefix, the winners still to find inside it, and whether every live
    key in the chosen bin is a winner (then no further digit is needed).
    """
    NUM_BINS: tl.constexpr = 1 << RADIX_BITS
    bins = tl.arange(0, NUM_BINS)
    high = ukey >> cut
    digit = (high & (NUM_BINS - 1)).to(tl.int32)
    # Two shifts, each under 32 bits: on the first pass (prefix 0) every key is live.
    live = valid & ((high >> RADIX_BITS) == prefix)
    hist = tl.histogram(digit, NUM_BINS, mask=live)
    at_least = tl.cumsum(hist, 0, reverse=True)  # live keys with digit >= bin
    chosen = tl.max(tl.where(at_least >= remaining, bins, -1), 0)
    above = tl.sum(tl.where(bins == chosen, at_least - hist, 0), 0)
    in_bin = tl.sum(tl.where(bins == chosen, hist, 0), 0)
    remaining = remaining - above
    return (prefix << RADIX_BITS) | chosen.to(tl.uint32), remaining, in_bin == remaining


@triton.jit
def topk_radix_kernel(
    x_ptr, values_ptr, indices_ptr,
    L, K,
    BLOCK_L: tl.constexpr, BLOCK_K: tl.constexpr, RADIX_BITS: tl.constexpr,
    EARLY_EXIT: tl.constexpr,
):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK_L)
    valid = offs < L
    x = tl.load(x_ptr + row * L + offs, mask=valid, other=0.0)  # rows are dense
    skey = _ordered_key(x)
    # Unsigned view of the same order; digits are taken from it most significant first.
    ukey = skey.to(tl.uint32, bitcast=True) ^ 0x80000000

    # Threshold search, most significant digit first: `prefix` holds the digits found so far
    # (the bits of the k-th largest key from `cut` up) and `remaining` the winners still to
    # find among the keys that match it.
    cut = tl.full((), 32 - RADIX_BITS, tl.int32)
    prefix, remaining, settled = _radix_pass(ukey, valid, tl.zeros((), dtype=tl.uint32), K, cut, RADIX_BITS)
    if EARLY_EXIT:
        # Stop as soon as the chosen bin holds only winners (typical data: a few passes).
        while (cut > 0) & (settled == 0):
            cut -= RADIX_BITS
            prefix, remaining, settled = _radix_pass(ukey, valid, prefix, remaining, cut, RADIX_BITS)
    else:
        for _ in tl.static_range(32 // RADIX_BITS - 1):
            cut -= RADIX_BITS
            prefix, remaining, settled = _radix_pass(ukey, valid, prefix, remaining, cut, RADIX_BITS)

    # Winners: keys above the threshold, and the first `remaining` keys equal to it (on the bits
    # from `cut` up). One scan of above + (equal << 16) yields both running counts (L < 65536 is
    # checked on the host).
    above_t = valid & ((ukey >> cut) > prefix)
    equal_t = valid & ((ukey >> cut) == prefix)
    counts = tl.cumsum(above_t.to(tl.int32) + (equal_t.to(tl.int32) << 16), 0)
    n_above = counts & 0xFFFF
    n_equal = counts >> 16
    take = above_t | (equal_t & (n_equal <= remaining))
    pos = n_above + tl.minimum(n_equal, remaining) - 1
    packed = (skey.to(tl.int64) << 32) | offs.to(tl.int64)
    idx_row = indices_ptr + row * K
    tl.store(idx_row + pos, packed, mask=take)
    # The compacted words were written by other threads of this program.
    tl.debug_barrier()

    offs_k = tl.arange(0, BLOCK_K)
    in_k = offs_k < K
    low = tl.full((BLOCK_K,), -9223372036854775808, dtype=tl.int64)
    words = tl.load(idx_row + offs_k, mask=in_k, other=low)
    words = tl.sort(words, descending=True)
    tl.store(values_ptr + row * K + offs_k, _key_to_float((words >> 32).to(tl.int32)), mask=in_k)
    tl.store(idx_row + offs_k, words & 0xFFFFFFFF, mask=in_k)


def run(x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """torch.topk(x, k, dim=-1) for a 2-D float32 x: (values, int64 indices), sorted descending."""
    if x.dim() != 2 or x.dtype != torch.float32:
        raise ValueError("expects a 2-D float32 tensor")
    b, length = x.shape
    if not 0 < k <= length < 65536:
        raise ValueError(f"need 0 < k <= L < 65536, got k={k}, L={length}")
    x = x.contiguous()  # a no-op for dense rows
    values = torch.empty((b, k), device=x.device, dtype=x.dtype)
    indices = torch.empty((b, k), device=x.device, dtype=torch.int64)
    topk_radix_kernel[(b,)](
        x, values, indices,
        length, k,
        BLOCK_L=triton.next_power_of_2(length), BLOCK_K=triton.next_power_of_2(k), RADIX_BITS=4, EARLY_EXIT=True, num_warps=16,
    )
    return values, indices
