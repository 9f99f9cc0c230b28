"""One-pass comparison and masking of fp32 references on the worker's device (worker side;
imports torch and triton; used by `gate.heldcompare` for references held on a GPU).

The held comparison of `gate.heldcompare` done with torch ops costs some forty passes over
each chunk of a reference (the pad drawn into memory twice, float64 copies of both sides, a
temporary per test): a quarter of a second per 8 GiB output on an H200, a dozen times a gate.
Here one kernel reads the masked reference and the output once, makes the pads in registers,
writes the reference back masked under the fresh key and leaves per-block partial figures that
a few small reductions turn into `heldcompare`'s figures. A second kernel XORs words with a
pad: masking a reference as it is copied in (`hold`), opening a chunk (`Held.pieces`). The
precision probe (`gate.precision`) rounds its inputs to TF32 and measures its error with one
pass each as well. A fourth counts the words of a buffer that differ from a fill (whether a
sealed buffer still holds its poison, `guards.Seal`), so that the test reads it once on its
device instead of copying it to the host.

The pad of 32-bit word `4 q + c` under a 63-bit key is word c of Philox4x32-10 with counter
(q mod 2^32, q div 2^32, 0, 0) and key (key mod 2^32, key div 2^32): a function of (key, word)
alone, so any chunk (starting at a multiple of 4 words) opens on its own, and a pad never
exists in memory. A reference masked
this way is only opened by these kernels (`Held.fused`); the torch path's pads differ.

Figures, per block of `BLOCK` elements (float64 sums of float64 values, as the torch path):
sum of squared differences and of squared reference values where the reference is finite,
whether the output is NaN / non-finite where the reference is finite, whether the reference's
non-finite places differ from the output's, allclose misses and the first one (place, both
values), the largest finite difference (first place, both values), whether the reference
holds a non-finite value, the sum of squared differences of the elements off by more than
`gate.compare.WRONG_ELEMENT` of their reference's magnitude. Partial rows are reduced
in a fixed order: the figures do not change from run to run.

All scalars (sizes, offsets, keys, tolerances) travel in one float64 tensor (exact below
2^53), so each kernel compiles once per variant whatever the sizes; `warm` compiles them
without launching anything (a worker's start-up, `gate.worker.standby`).
"""
from __future__ import annotations

import math
from typing import Any

import torch
import triton
import triton.language as tl

from gate import hoststage
from gate.compare import WRONG_ELEMENT

__all__ = ["BLOCK", "FIELDS", "applies", "count_unlike", "pad_words", "relative_error", "stats", "tf32_rounded", "compile_error",
           "xor_words"]

BLOCK = 2048  # elements of one program (8 per thread at 8 warps: about 110 registers on sm_90)
NUM_WARPS = 8
FIELDS = 14  # figures of one block (`klineage_gate_judge`'s partial row)
_NONE: tl.constexpr = tl.constexpr(1 << 62)  # "no place" in a partial row (beyond any index)
_INF: tl.constexpr = tl.constexpr(float("inf"))
_WRONG: tl.constexpr = tl.constexpr(WRONG_ELEMENT)
_TINY = float(torch.finfo(torch.float64).tiny)


@triton.jit
def _pad(first, k0, k1, ROWS: tl.constexpr):
    """The pad of words first .. first + 4 ROWS - 1 (`first` a multiple of 4): word 4 q + c
    is word c of Philox4x32-10 at counter (q low, q high, 0, 0), key (k0, k1); uint32."""
    q = (first >> 2) + tl.arange(0, ROWS).to(tl.int64)
    c0 = (q & 0xFFFFFFFF).to(tl.uint32)
    c1 = ((q >> 32) & 0xFFFFFFFF).to(tl.uint32)
    c2 = tl.zeros_like(c0)
    c3 = tl.zeros_like(c0)
    m0: tl.constexpr = 0xD2511F53
    m1: tl.constexpr = 0xCD9E8D57
    w0: tl.constexpr = 0x9E3779B9
    w1: tl.constexpr = 0xBB67AE85
    for _ in tl.static_range(10):
        hi0 = tl.umulhi(c0, m0)
        lo0 = c0 * m0
        hi1 = tl.umulhi(c2, m1)
        lo1 = c2 * m1
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
        k0 = k0 + w0
        k1 = k1 + w1
    return tl.interleave(tl.interleave(c0, c2), tl.interleave(c1, c3))


@triton.jit
def _key(prm, at):
    return tl.load(prm + at).to(tl.int64).to(tl.uint32)


# Named for the profiler: a sealed call's windows unmask and mask its inputs with it
# (`heldcompare.xor_pad_`) while the candidate's kernels are attributed, and
# `gate.foreign.kernel_allowed` lets this name alone through (it copies, it computes nothing).
@triton.jit
def klineage_gate_xor(src, dst, part, prm, DIGEST: tl.constexpr, BLOCK: tl.constexpr):
    """dst[j] = src[j] ^ pad(base + j) over int32 words; prm: n, base, key low, key high.
    DIGEST: a row of `part` (int64) gets the block's two weighted sums of the 8-byte words of
    src (`heldcompare._digest`'s, word w weighted w % 65521 + 1 and w * 2654435761 %
    4294967291 + 7, wrapping), over the words src holds whole."""
    n = tl.load(prm).to(tl.int64)
    base = tl.load(prm + 1).to(tl.int64)
    start = tl.program_id(0).to(tl.int64) * BLOCK
    offs = start + tl.arange(0, BLOCK)
    inside = offs < n
    clear = tl.load(src + offs, mask=inside, other=0)
    words = clear.to(tl.uint32, bitcast=True) ^ _pad(base + start, _key(prm, 2), _key(prm, 3),
                                                     BLOCK // 4)
    tl.store(dst + offs, words.to(tl.int32, bitcast=True), mask=inside)
    if DIGEST:
        lo, hi = tl.split(tl.reshape(clear, [BLOCK // 2, 2]))
        value = lo.to(tl.uint32, bitcast=True).to(tl.int64) | (hi.to(tl.int64) << 32)
        pair = (start >> 1) + tl.arange(0, BLOCK // 2).to(tl.int64)
        value = tl.where(2 * pair + 1 < n, value, 0)
        place = (base >> 1) + pair
        row = part + tl.program_id(0).to(tl.int64) * 2
        tl.store(row, tl.sum(value * (place % 65521 + 1), axis=0))
        tl.store(row + 1, tl.sum(value * (place * 2654435761 % 4294967291 + 7), axis=0))


@triton.jit
def klineage_gate_judge(out, ref, part, prm, ALLCLOSE: tl.constexpr, MASKED: tl.constexpr,
                  BLOCK: tl.constexpr):
    """One block's figures (a row of `part`, `FIELDS` float64) of `out` against `ref`.

    prm: n, base (element index of out[0] and ref[0]), key low, key high, fresh low, fresh
    high, atol, rtol. MASKED: `ref` holds the reference's int32 words masked under the key;
    they are written back masked under the fresh key. Else `ref` is the fp32 reference."""
    n = tl.load(prm).to(tl.int64)
    base = tl.load(prm + 1).to(tl.int64)
    pid = tl.program_id(0).to(tl.int64)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    inside = offs < n
    if MASKED:
        words = tl.load(ref + offs, mask=inside, other=0).to(tl.uint32, bitcast=True)
        words = words ^ _pad(base + pid * BLOCK, _key(prm, 2), _key(prm, 3), BLOCK // 4)
        again = words ^ _pad(base + pid * BLOCK, _key(prm, 4), _key(prm, 5), BLOCK // 4)
        tl.store(ref + offs, again.to(tl.int32, bitcast=True), mask=inside)
        r = words.to(tl.float32, bitcast=True).to(tl.float64)
    else:
        r = tl.load(ref + offs, mask=inside, other=0.0).to(tl.float64)
    o = tl.load(out + offs, mask=inside, other=0.0).to(tl.float64)
    r_finite = (tl.abs(r) < _INF) & inside
    o_finite = tl.abs(o) < _INF
    nan_bad = tl.max(((r_finite & (o_finite == 0)) | ((o != o) & inside)).to(tl.int32), axis=0)
    inf_bad = tl.max((inside & (r_finite == 0) & (o != r)).to(tl.int32), axis=0)
    d = tl.where(r_finite, o - r, 0.0)
    num = tl.sum(d * d, axis=0)
    den = tl.sum(tl.where(r_finite, r * r, 0.0), axis=0)
    size = tl.abs(d)
    size = tl.where(inside & (size == size), size, -1.0)  # NaN: not a finite difference
    largest = tl.max(size, axis=0)
    at = tl.min(tl.where(size == largest, offs, _NONE), axis=0)
    gross = tl.sum(tl.where(size > tl.abs(r) * _WRONG, d * d, 0.0), axis=0)
    row = part + pid * 14
    tl.store(row + 0, num)
    tl.store(row + 1, den)
    tl.store(row + 2, nan_bad.to(tl.float64))
    tl.store(row + 3, inf_bad.to(tl.float64))
    tl.store(row + 12, tl.max((inside & (r_finite == 0)).to(tl.int32), axis=0).to(tl.float64))
    tl.store(row + 13, gross)
    tl.store(row + 8, largest)
    tl.store(row + 9, (base + at).to(tl.float64))
    tl.store(row + 10, tl.sum(tl.where(offs == at, o, 0.0), axis=0))
    tl.store(row + 11, tl.sum(tl.where(offs == at, r, 0.0), axis=0))
    if ALLCLOSE:  # KernelBench's test: |r - o| <= atol + rtol |o|, or equal
        atol = tl.load(prm + 6)
        rtol = tl.load(prm + 7)
        close = tl.abs(r - o) <= tl.abs(o) * rtol + atol
        bad = inside & ((close | (o == r)) == 0)
    else:
        bad = offs < 0  # no test: nothing misses
    first = tl.min(tl.where(bad, offs, _NONE), axis=0)
    tl.store(row + 4, tl.sum(bad.to(tl.int32), axis=0).to(tl.float64))
    tl.store(row + 5, tl.where(first == _NONE, _NONE, base + first).to(tl.float64))
    tl.store(row + 6, tl.sum(tl.where(offs == first, o, 0.0), axis=0))
    tl.store(row + 7, tl.sum(tl.where(offs == first, r, 0.0), axis=0))


@triton.jit
def klineage_gate_unlike(src, found, prm, BLOCK: tl.constexpr):
    """found[0] += the number of int32 words of src that differ from a fill's pattern: word j
    is to hold prm[1 + j % 4]; prm: n, the four words (signed, exact in float64). Reads src
    once and writes one counter: it computes nothing of an answer."""
    n = tl.load(prm).to(tl.int64)
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    inside = offs < n
    words = tl.load(src + offs, mask=inside, other=0)
    lane = offs % 4
    want = tl.where(lane == 0, tl.load(prm + 1).to(tl.int64).to(tl.int32),
                    tl.where(lane == 1, tl.load(prm + 2).to(tl.int64).to(tl.int32),
                             tl.where(lane == 2, tl.load(prm + 3).to(tl.int64).to(tl.int32),
                                      tl.load(prm + 4).to(tl.int64).to(tl.int32))))
    unlike = tl.sum((inside & (words != want)).to(tl.int32), axis=0)
    if unlike > 0:
        tl.atomic_add(found, unlike)


@triton.jit
def klineage_gate_tf32(src, dst, prm, BLOCK: tl.constexpr):
    """dst = src (fp32 bits, int32 words) rounded to TF32, to nearest even at 10 mantissa
    bits; inf and NaN as they are (`gate.precision.tf32_rounded`'s rounding); prm: n."""
    n = tl.load(prm).to(tl.int64)
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    inside = offs < n
    bits = tl.load(src + offs, mask=inside, other=0)
    special = (bits & 0x7F800000) == 0x7F800000
    rounded = (bits + (((bits >> 13) & 1) + 0xFFF)) & -0x2000
    tl.store(dst + offs, tl.where(special, bits, rounded), mask=inside)


def applies(t: torch.Tensor) -> bool:
    """Whether a reference tensor can be held and compared by these kernels: fp32."""
    return t.dtype == torch.float32


def _split(key: int) -> tuple[int, int]:
    return key & 0xFFFFFFFF, (key >> 32) & 0xFFFFFFFF


def _params(device: Any, *values: float) -> torch.Tensor:
    return torch.tensor([float(v) for v in values], dtype=torch.float64, device=device)


def _blocks(n: int) -> tuple[int]:
    return (max(1, triton.cdiv(n, BLOCK)),)


def xor_words(src: torch.Tensor, dst: torch.Tensor, key: int, base: int = 0, *,
              digest: bool = False) -> tuple[torch.Tensor, torch.Tensor] | None:
    """dst = src ^ pad(key) word by word (int32 views of equal size on one device; `base`: the
    word index of src[0] in the whole tensor, a multiple of 4). dst may be src. With `digest`
    (base 0), also the two weighted sums of src's whole 8-byte words (int64 tensors on the
    device, before `heldcompare._digest` mixes them)."""
    if base % 4:
        raise ValueError(f"a pad starts at a multiple of 4 words, not {base}")
    n = src.numel()
    part = torch.zeros((_blocks(n)[0] if digest else 1, 2), dtype=torch.int64, device=src.device)
    if n:
        prm = _params(src.device, n, base, *_split(key))
        klineage_gate_xor[_blocks(n)](src, dst, part, prm, DIGEST=digest, BLOCK=BLOCK,
                                num_warps=NUM_WARPS)
        prm.zero_()  # the key does not stay behind in device memory
    return (part[:, 0].sum(), part[:, 1].sum()) if digest else None


def count_unlike(words: torch.Tensor, pattern: list[int]) -> int:
    """How many words of `words` (int32, flat) differ from `pattern` (four int32 values,
    word j to hold pattern[j % 4]): whether a buffer still holds the fill written into it,
    judged on its device in one pass (`guards.Seal`: a 4 GiB buffer copied to the host for
    the test took seconds). Only the count comes back."""
    n = words.numel()
    if not n:
        return 0
    if len(pattern) != 4:
        raise ValueError(f"a fill pattern is four words, not {len(pattern)}")
    found = torch.zeros(1, dtype=torch.int32, device=words.device)
    prm = _params(words.device, n, *pattern)
    klineage_gate_unlike[_blocks(n)](words, found, prm, BLOCK=BLOCK, num_warps=NUM_WARPS)
    return int(found.cpu()[0])


def pad_words(key: int, n: int, base: int = 0, device: Any = "cpu") -> torch.Tensor:
    """The pad of words base .. base + n - 1 under `key` (int32): for tests and checks; the
    kernels never write a pad out."""
    zeros = torch.zeros(n, dtype=torch.int32, device=device)
    xor_words(zeros, zeros, key, base)
    return zeros


def _partials(out: torch.Tensor, ref: torch.Tensor, prm: torch.Tensor, *, masked: bool,
              allclose: bool) -> torch.Tensor:
    n = out.numel()
    part = torch.empty((_blocks(n)[0], FIELDS), dtype=torch.float64, device=out.device)
    klineage_gate_judge[_blocks(n)](out, ref, part, prm, ALLCLOSE=allclose, MASKED=masked,
                              BLOCK=BLOCK, num_warps=NUM_WARPS, enable_fp_fusion=False)
    return part


def _figures(parts: list[torch.Tensor]) -> list[float]:
    """The partial rows reduced in a fixed order, read back in one synchronization: num, den,
    nan, inf, misses, then the first miss (place, o, r), the largest difference (size,
    place, o, r), whether the reference holds a non-finite value and the wrong elements' sum
    of squared differences."""
    t = torch.cat(parts) if len(parts) > 1 else parts[0]
    sums = torch.stack([t[:, 0].sum(), t[:, 1].sum(), t[:, 2].max(), t[:, 3].max(), t[:, 4].sum()])
    first = torch.argmin(t[:, 5])
    largest = torch.argmax(t[:, 8])  # the first block of the largest (argmax keeps the first)
    return torch.cat([sums, t[first, 5:8], t[largest, 8:12], t[:, 12].max().view(1),
                      t[:, 13].sum().view(1)]).tolist()


def stats(flat: torch.Tensor, masked: torch.Tensor, key: int, fresh: int,
          allclose: tuple[float, float] | None, chunk: int, device: Any = None) -> dict[str, Any]:
    """`heldcompare`'s figures of one fp32 output `flat` (flat, contiguous) against the
    reference held in `masked` (uint8, masked by `xor_words` under `key`), which is masked
    again under `fresh`, computed on `device` (None: the output's). Where `masked` or the
    output waits in host memory, a chunk of `chunk` elements of each at a time comes to the
    device (`gate.hoststage`), and the masked chunk goes back."""
    flat = flat.contiguous()
    device = flat.device if device is None else torch.device(device)
    atol, rtol = allclose if allclose is not None else (0.0, 0.0)
    n = flat.numel()
    if n == 0:
        return {"err": 0.0, "misses": 0, "at": None, "gross": 0.0}
    parts = []
    here, out_here = masked.device == device, flat.device == device
    step = n if here and out_here else max(4, chunk // 4 * 4)  # pads start at multiples of 4 words
    for b in range(0, n, step):
        e = min(n, b + step)
        words = masked.view(torch.int32)[b:e]
        piece = words if here else hoststage.to_device(words, device)
        out = flat[b:e] if out_here else hoststage.to_device(flat[b:e], device)
        prm = _params(device, e - b, b, *_split(key), *_split(fresh), atol, rtol)
        parts.append(_partials(out, piece, prm, masked=True, allclose=allclose is not None))
        prm.zero_()
        if not here:
            hoststage.write_back(words, piece)
        del piece
    num, den, nan_bad, inf_bad, misses, miss_at, miss_o, miss_r, size, big_at, big_o, big_r, _, \
        gross = _figures(parts)
    at = None
    if misses > 0:
        at = (int(miss_at), miss_o, miss_r)
    elif size >= 0:
        at = (int(big_at), big_o, big_r)
    if nan_bad:
        err = float("nan")
    elif inf_bad:
        err = float("inf")
    else:
        err = math.sqrt(num) / max(math.sqrt(den), _TINY)
    return {"err": err, "misses": int(misses), "at": at, "gross": gross / num if num > 0 else 0.0}


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref|| / ||ref|| of two fp32 tensors of one shape on one device, float64 sums in
    one pass; inf where either holds a non-finite value (as `gate.precision.relative_error`)."""
    o, r = out.reshape(-1).contiguous(), ref.reshape(-1).contiguous()
    prm = _params(o.device, o.numel(), 0, 0, 0, 0, 0, 0.0, 0.0)
    figures = _figures([_partials(o, r, prm, masked=False, allclose=False)])
    num, den, nan_bad, inf_bad, ref_nonfinite = *figures[:4], figures[12]
    if nan_bad or inf_bad or ref_nonfinite:
        return float("inf")
    return math.sqrt(num) / max(math.sqrt(den), 1e-300)


def tf32_rounded(t: torch.Tensor) -> torch.Tensor:
    """A copy of an fp32 tensor rounded to TF32 in one pass (`gate.precision.tf32_rounded`)."""
    src = t.contiguous()
    out = torch.empty_like(src)
    n = src.numel()
    if n:
        prm = _params(src.device, n)
        klineage_gate_tf32[_blocks(n)](src.view(torch.int32), out.view(torch.int32), prm,
                                 BLOCK=BLOCK, num_warps=NUM_WARPS)
    return out.view(t.shape)


def compile_error(device: Any = "cuda") -> str | None:
    """Compile the kernels (each variant the gate launches) without launching them: None, or
    why one does not compile (`heldcompare.warm` then turns the one pass off)."""
    try:
        # (Triton's interpreter runs a warm-up: n = 0 there, nothing read or written)
        words = torch.zeros(16, dtype=torch.int32, device=device)
        values = torch.zeros(16, dtype=torch.float32, device=device)
        prm = torch.zeros(8, dtype=torch.float64, device=device)
        part = torch.zeros((1, FIELDS), dtype=torch.float64, device=device)
        sums = torch.zeros((1, 2), dtype=torch.int64, device=device)
        klineage_gate_tf32.warmup(words, words, prm, BLOCK=BLOCK, num_warps=NUM_WARPS, grid=(1,))
        klineage_gate_unlike.warmup(words, words, prm, BLOCK=BLOCK, num_warps=NUM_WARPS,
                                    grid=(1,))
        for digest in (False, True):
            klineage_gate_xor.warmup(words, words, sums, prm, DIGEST=digest, BLOCK=BLOCK,
                               num_warps=NUM_WARPS, grid=(1,))
        for allclose, masked, ref in ((True, True, words), (False, True, words),
                                      (False, False, values)):
            klineage_gate_judge.warmup(values, ref, part, prm, ALLCLOSE=allclose, MASKED=masked,
                                 BLOCK=BLOCK, num_warps=NUM_WARPS, enable_fp_fusion=False,
                                 grid=(1,))
    except Exception as exc:  # noqa: BLE001 — the torch path compares the same figures
        return f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
    return None
