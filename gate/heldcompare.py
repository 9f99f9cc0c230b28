"""Comparison on the worker's own device against references held there under a mask (worker
side; imports torch).

Sending every output to the parent and comparing it there with numpy (`gate.compare`) costs a
device-to-host copy and a CPU pass per output: tens of seconds for a gate whose outputs are
gigabytes. Here the worker keeps each reference on its device and compares there, and only
figures travel. What the parent-side design guaranteed, and how it still holds:

- *The reference is out of the candidate's reach.* The candidate runs in the worker and can
  find any tensor it holds (the garbage collector, the caching allocator's block list), so a
  reference kept in the clear could simply be copied out by a kernel. A held reference is kept
  as its bytes XOR a one-time pad drawn from a key (`Held`); the key goes to the parent with
  the reference's summary before candidate code loads, and the worker forgets it. To judge an
  output, the worker sends its structure (`header`) and the parent answers with the key and a
  fresh one; the worker unmasks a chunk at a time, compares, and masks again under the fresh
  key, so a key the worker had once opens nothing later. The parent answers each output once
  (a second request for the same check is a forged message: `gate.runner`).
- *The figures are the parent's to judge.* The worker computes sums (relative-norm error in
  float64, NaN / inf placement, KernelBench's allclose misses, the place of the worst or first
  failing element, the share of the squared error in wrong elements: `gate.compare.gross_share`);
  tolerances and verdicts stay in the parent (`gate.compare.held_outcome`).
- *A subverted comparison is caught.* Candidate code could rebind what the comparison computes
  with (a dispatcher override of a torch op escapes `guards.TamperWatch`). So the parent also
  keeps its own sample of each reference, taken at places drawn before candidate code loaded,
  and with each key it asks for the output at a random subset of them, drawn then; it rejects a
  run whose figures claim a match that the sample contradicts (`gate.compare.sample_contradicts`).
  A wrong output right at every sampled place can pass the sample alone; the figures then have
  to be forged as well.

Outputs of a case with its own `compare(out, ref, inputs)` still go to the parent whole.

An fp32 reference on a GPU is masked and compared by `gate.fusedcompare` (one pass, the pads
made in registers: `Held.fused`); other references by torch ops a chunk at a time.
`KLINEAGE_GATE_FUSED=0` compares every reference with torch ops, `=1` fp32 ones in one pass
on the CPU as well (in Triton's interpreter).
"""
from __future__ import annotations

import os
import random
import sys
from dataclasses import dataclass
from typing import Any

import torch

from gate.compare import WRONG_ELEMENT, new_key

__all__ = ["Held", "digest_bytes", "fused_applies", "headers", "hold", "judge", "new_key", "xor_pad_"]

CHUNK_BYTES = 1 << 26  # the unmasked piece of a reference that exists at one time (with
# its float64 temporaries, about 1 GB of device memory)
SAMPLE_PLACES = 2048  # places per tensor output whose reference values the parent keeps
_GOLDEN = 0x9E3779B97F4A7C15
_SEED_MASK = (1 << 63) - 1


def _pad(key: int, index: int, nbytes: int, device: Any) -> torch.Tensor:
    """`nbytes` random bytes of chunk `index` under `key`, drawn as 64-bit words (a draw per 8
    bytes, not per byte: the pad of a gigabyte output is made in an eighth of the draws)."""
    gen = torch.Generator(device=device)
    gen.manual_seed((key ^ ((index + 1) * _GOLDEN)) & _SEED_MASK)
    words = torch.randint(-(1 << 63), (1 << 63) - 1, ((nbytes + 7) // 8,), dtype=torch.int64,
                          device=device, generator=gen)
    return words.view(torch.uint8)[:nbytes]


FUSED_OFF: str | None = None
"""Why this process holds and compares every reference with torch ops (`gate.fusedcompare`'s
kernels did not compile here), or None."""


def warm(device: Any = "cuda") -> bool:
    """Compile `gate.fusedcompare`'s kernels without launching them. Where one does not
    compile, this process holds and compares with torch ops from here on (`FUSED_OFF` says
    why, on stderr too) and False is returned."""
    global FUSED_OFF  # noqa: PLW0603 — one answer per process
    from gate import fusedcompare  # noqa: PLC0415

    error = fusedcompare.compile_error(device)
    if error is None:
        return True
    FUSED_OFF = error
    print(f"klineage gate: one-pass comparison off, kernels do not compile: {error}",
          file=sys.stderr, flush=True)
    return False


def xor_pad_(flat: torch.Tensor, key: int, index: int) -> torch.Tensor:
    """`flat` (uint8) XOR the pad of `key` for stream `index`, in place: masks bytes in the
    clear and unmasks masked ones (`gate.guards.Seal` keeps its real values so). On a GPU, in
    one pass with the pad made in registers (`gate.fusedcompare.xor_words`, under a key of
    the stream's own) where the bytes are whole 32-bit words (on the CPU too with
    KLINEAGE_GATE_FUSED=1); else a drawn pad. Which pad follows from the device and the byte
    count alone, so masking and unmasking agree. The seal works between the candidate's
    launches, where the profiler attributes kernels: its one kernel is allowed by name, the
    drawn pad's torch kernels are not, so KLINEAGE_GATE_FUSED=0 does not apply here, and the
    seal's bytes come padded to whole words (`guards.Seal.kept_bytes`)."""
    choice = os.environ.get("KLINEAGE_GATE_FUSED", "")
    if flat.is_cuda and FUSED_OFF is not None:
        # a drawn pad's torch kernels would read as the candidate's foreign kernels
        raise RuntimeError(f"the gate's masking kernel does not compile here ({FUSED_OFF}): "
                           "a sealed call cannot run on this GPU")
    if not ((flat.is_cuda or choice == "1") and flat.numel() % 4 == 0 and FUSED_OFF is None):
        return flat.bitwise_xor_(_pad(key, index, flat.numel(), flat.device))
    from gate import fusedcompare  # noqa: PLC0415

    stream_key = (key ^ ((index + 1) * _GOLDEN)) & _SEED_MASK
    try:
        words = flat.view(torch.int32)
    except RuntimeError:  # not aligned to 4 bytes: through an aligned copy
        words = flat.clone().view(torch.int32)
        fusedcompare.xor_words(words, words, stream_key)
        return flat.copy_(words.view(torch.uint8))
    fusedcompare.xor_words(words, words, stream_key)
    return flat


def holds_fill(t: torch.Tensor, value: Any) -> bool | None:
    """Whether every byte of `t` (a whole storage, on a GPU) is what `fill_(value)` writes
    there, judged in one pass on the device by the gate's own kernel
    (`fusedcompare.count_unlike`; the pattern made by the same fill, the last 1-3 bytes
    compared on the host; on the CPU too with KLINEAGE_GATE_FUSED=1, where Triton
    interprets); None where that kernel does not apply (on the CPU otherwise, where it does
    not compile, an element wider than 16 bytes): the caller tests on the host."""
    size = t.element_size()
    on_cpu = os.environ.get("KLINEAGE_GATE_FUSED", "") == "1"
    if not (t.is_cuda or on_cpu) or FUSED_OFF is not None or size > 16 or 16 % size:
        return None
    from gate import fusedcompare  # noqa: PLC0415

    pattern = torch.empty(16 // size, dtype=t.dtype, device=t.device)
    pattern.fill_(value)
    want = pattern.view(torch.uint8).cpu()  # the fill's 16 bytes, once on the host
    flat = t.detach().reshape(-1).view(torch.uint8)
    whole = flat.numel() // 4 * 4
    if whole and fusedcompare.count_unlike(flat[:whole].view(torch.int32),
                                           [int(w) for w in want.view(torch.int32)]):
        return False
    if whole == flat.numel():
        return True
    tail = flat[whole:].cpu()
    return all(int(tail[i]) == int(want[(whole + i) % 16]) for i in range(tail.numel()))


def _bytes(t: torch.Tensor) -> torch.Tensor:
    return t.detach().reshape(-1).view(torch.uint8)


def fused_applies(t: torch.Tensor) -> bool:
    """Whether `t` is held and compared by `gate.fusedcompare`: an fp32 tensor on a GPU, unless
    KLINEAGE_GATE_FUSED=0 or its kernels do not compile (`FUSED_OFF`); with
    KLINEAGE_GATE_FUSED=1 on the CPU too (where Triton interprets: the interpret tier)."""
    choice = os.environ.get("KLINEAGE_GATE_FUSED", "")
    return t.dtype == torch.float32 and choice != "0" and FUSED_OFF is None \
        and (t.is_cuda or choice == "1")


@dataclass(slots=True)
class Held:
    """One tensor of a reference, masked: its bytes XOR the pad of `key` (chunk by chunk)."""

    masked: torch.Tensor  # uint8, flat
    dtype: torch.dtype
    shape: tuple[int, ...]
    device: Any = None
    """Where it is compared (the masked bytes may wait in host memory: `park`)."""
    fused: bool = False
    """Masked by `gate.fusedcompare`'s pads (fp32), opened only by its kernels."""

    def park(self) -> None:
        """Keep the masked bytes in host memory; each comparison brings one chunk at a time
        (`gate.hoststage`)."""
        from gate import hoststage  # noqa: PLC0415

        self.masked = hoststage.to_host(self.masked)

    def _chunks(self) -> list[tuple[int, int, int]]:
        size = torch.empty((), dtype=self.dtype).element_size()
        step = max(size, CHUNK_BYTES // size * size)
        n = self.masked.numel()
        return [(i, b, min(b + step, n)) for i, b in enumerate(range(0, n, step))]

    def mask(self, key: int) -> None:
        """XOR each chunk (in the clear) with the pad of `key`."""
        if self.fused:
            from gate import fusedcompare  # noqa: PLC0415

            words = self.masked.view(torch.int32)
            fusedcompare.xor_words(words, words, key)
            return
        for i, b, e in self._chunks():
            piece = self.masked[b:e]
            piece.bitwise_xor_(_pad(key, i, e - b, piece.device))

    def pieces(self, key: int, fresh: int | None = None) -> Any:
        """(first element, the reference's elements of one chunk in the clear, on `device`),
        chunk by chunk; with `fresh`, each chunk is masked under `fresh` once the caller is done
        with it."""
        size = torch.empty((), dtype=self.dtype).element_size()
        device = self.device if self.device is not None else self.masked.device
        if self.fused:
            yield from self._fused_pieces(key, fresh, device)
            return
        from gate import hoststage  # noqa: PLC0415

        for i, b, e in self._chunks():
            clear = hoststage.to_device(self.masked[b:e], device) ^ _pad(key, i, e - b, device)
            yield b // size, clear.view(self.dtype)
            if fresh is not None:
                hoststage.write_back(self.masked[b:e], clear.bitwise_xor_(_pad(fresh, i, e - b, device)))
            del clear

    def _fused_pieces(self, key: int, fresh: int | None, device: Any) -> Any:
        from gate import fusedcompare, hoststage  # noqa: PLC0415

        for _, b, e in self._chunks():
            words = self.masked[b:e].view(torch.int32)
            clear = torch.empty(words.numel(), dtype=torch.int32, device=device)
            fusedcompare.xor_words(hoststage.to_device(words, device), clear, key, b // 4)
            yield b // 4, clear.view(self.dtype)
            if fresh is not None:
                fusedcompare.xor_words(clear, clear, fresh, b // 4)
                hoststage.write_back(self.masked[b:e], clear.view(torch.uint8))
            del clear


def hold(ref: Any, key: int, rng: random.Random | None = None, *,
         digest: bool = True, fused: bool | None = None) -> tuple[list[Any], dict[str, Any]]:
    """Mask a reference result (one tensor or a tuple / list of them, scalars beside) under
    `key`: (the held items, one per output: a `Held` or the plain value; the summary the parent
    keeps: each output's header, its sample (places, float values), whether every tensor is all
    zeros, with `digest` a digest of its bytes (else "")). `fused`: hold fp32 tensors for
    `gate.fusedcompare` (None: where `fused_applies`)."""
    rng = rng or random.SystemRandom()
    items = list(ref) if isinstance(ref, (tuple, list)) else [ref]
    held: list[Any] = []
    headers, samples, digests = [], [], []
    zero = True
    any_tensor = False
    for x in items:
        if not isinstance(x, torch.Tensor):
            held.append(x)
            headers.append(header(x))
            samples.append(None)
            continue
        any_tensor = True
        flat = x.detach().reshape(-1)
        places = sorted(rng.sample(range(flat.numel()), min(SAMPLE_PLACES, flat.numel())))
        index = torch.tensor(places, dtype=torch.int64, device=flat.device)
        samples.append((places, flat[index].to(torch.float64).tolist()))
        zero = zero and not bool(flat.any()) if flat.numel() else zero
        if fused_applies(x) if fused is None else fused and x.dtype == torch.float32:
            entry, sums = _hold_fused(x, key, digest)
            held.append(entry)
            digests.append(_digest(flat, sums) if digest else "")
        else:
            digests.append(_digest(flat) if digest else "")
            entry = Held(_bytes(x).clone(), x.dtype, tuple(x.shape), x.device)
            entry.mask(key)
            held.append(entry)
        headers.append(header(x))
    summary = {"held": True, "headers": headers, "samples": samples,
               "zero": zero and any_tensor, "digest": ":".join(digests)}
    return held, summary


def _hold_fused(x: torch.Tensor, key: int, digest: bool) -> tuple[Held, Any]:
    """An fp32 tensor masked as it is copied (one pass: `gate.fusedcompare.xor_words`), with
    `digest` the weighted sums of its 8-byte words from the same pass (None where its bytes do
    not split into aligned words: `_digest` reads them itself)."""
    from gate import fusedcompare  # noqa: PLC0415

    words = x.detach().reshape(-1).view(torch.int32)
    masked = torch.empty(words.numel() * 4, dtype=torch.uint8, device=x.device)
    sums = fusedcompare.xor_words(words, masked.view(torch.int32), key,
                                  digest=digest and words.data_ptr() % 8 == 0)
    return Held(masked, x.dtype, tuple(x.shape), x.device, fused=True), sums


def _digest(flat: torch.Tensor, body_sums: Any = None) -> str:
    """Two weighted sums of the tensor's 8-byte words (int64, wrapping; its bytes where it
    does not split into aligned words, and the last few), a piece at a time: equal references
    give equal digests; different ones almost never do. `body_sums`: the two sums over the
    whole words, made already (`gate.fusedcompare.xor_words`)."""
    raw = _bytes(flat)
    words = raw.numel() // 8
    try:
        body = raw[:words * 8].view(torch.int64)
    except RuntimeError:  # not aligned to 8 bytes: every byte is a word
        body, words = raw, 0
    tail = raw[words * 8:]
    a = torch.zeros((), dtype=torch.int64, device=raw.device)
    b = torch.zeros((), dtype=torch.int64, device=raw.device)
    step = 1 << 23
    for part in (body, tail):
        if body_sums is not None and part is body:
            a, b = a + body_sums[0], b + body_sums[1]
            part = part[:0]
        for start in range(0, part.numel(), step):
            piece = part[start:start + step].to(torch.int64)
            pos = torch.arange(start, start + piece.numel(), dtype=torch.int64, device=raw.device)
            a += (piece * (pos % 65521 + 1)).sum()
            b += (piece * (pos * 2654435761 % 4294967291 + 7)).sum()
        a, b = a * 31 + 1, b * 37 + 3  # the tail's sums are not the body's
    return f"{int(a)}.{int(b)}.{raw.numel()}"


def digest_bytes(t: torch.Tensor) -> str:
    """`_digest` of a tensor's bytes in its logical order (any device, any strides). A
    contiguous tensor on a GPU of whole, aligned 8-byte words is read in one pass of
    `gate.fusedcompare.xor_words` (its weighted sums, the tensor XORed with a pad and back:
    its values are what they were once this returns) where the one-pass kernels are on."""
    flat = t.detach().reshape(-1)
    raw = _bytes(flat)
    if fused_applies(torch.empty(0, dtype=torch.float32, device=flat.device)) and flat.is_contiguous() \
            and raw.numel() % 8 == 0 and raw.data_ptr() % 8 == 0 and raw.numel():
        from gate import fusedcompare  # noqa: PLC0415

        words, key = raw.view(torch.int32), new_key()
        sums = fusedcompare.xor_words(words, words, key, digest=True)
        fusedcompare.xor_words(words, words, key)
        return _digest(flat, sums)
    return _digest(flat)


def header(x: Any) -> tuple[Any, ...]:
    """The structure of one output as the parent compares it (`gate.transport` items without
    their bytes): ("tensor", dtype, shape, None) | ("value", x) | ("other", type, detail)."""
    if type(x) is torch.Tensor:
        return ("tensor", str(x.dtype).removeprefix("torch."), tuple(x.shape), None)
    if isinstance(x, torch.Tensor):
        return ("other", type(x).__name__, "a tensor subclass")
    if isinstance(x, (bool, int, float)) or x is None:
        return ("value", x)
    return ("other", type(x).__name__, repr(type(x)))


def headers(out: Any) -> list[tuple[Any, ...]]:
    return [header(x) for x in (out if isinstance(out, (tuple, list)) else [out])]


def judge(out: Any, held: list[Any], key: int, fresh: int, asked: list[list[int] | None],
          allclose: tuple[float, float] | None) -> dict[str, Any]:
    """Compare `out` (same structure as the held reference: the parent checked the headers)
    with the reference held under `key`, then mask it again under `fresh`. Returns figures only:
    `err` (the largest relative-norm error over tensor outputs, float64; NaN where the output
    holds NaN / inf where the reference is finite or NaN anywhere; inf where the reference's own
    inf / NaN places differ), `misses` (per tensor output, elements not close by KernelBench's
    `allclose`, when asked), `at` (output, flat index, output value, reference value: the first
    element failing allclose, else the largest difference), `values` (the output at the places
    `asked`, per output), and per tensor output its error (`errs`) and the share of its squared
    error carried by elements off by more than `WRONG_ELEMENT` of their magnitude (`gross`,
    `gate.compare.gross_share`)."""
    items = list(out) if isinstance(out, (tuple, list)) else [out]
    err = 0.0
    errs: list[float] = []
    gross: list[float] = []
    misses: list[int] = []
    at: tuple[int, int, float, float] | None = None
    values: list[list[float] | None] = []
    for i, (o, r) in enumerate(zip(items, held)):
        if not isinstance(r, Held):
            values.append(None)
            continue
        flat = o.detach().reshape(-1)
        if r.fused and flat.dtype == r.dtype and (flat.device == torch.device(r.device)
                                                  or flat.device.type == "cpu"):
            from gate import fusedcompare  # noqa: PLC0415

            # an output in host memory (a lean plan's sampled one) comes a chunk at a time
            stats = fusedcompare.stats(flat, r.masked, key, fresh, allclose, CHUNK_BYTES // 4,
                                       device=r.device)
        else:
            stats = _tensor_stats(flat, r, key, fresh, allclose)
        e = stats["err"]
        err = e if e != e else max(err, e)
        errs.append(e)
        gross.append(stats["gross"])
        if allclose is not None:
            misses.append(stats["misses"])
        if at is None and (stats["misses"] or allclose is None) and stats["at"] is not None:
            at = (i, *stats["at"])
        picks = asked[i] if i < len(asked) else None
        if picks:
            index = torch.tensor(picks, dtype=torch.int64, device=flat.device)
            values.append(flat[index].to(torch.float64).tolist())
        else:
            values.append(None)
    return {"err": err, "misses": misses, "at": at, "values": values, "errs": errs, "gross": gross}


def _tensor_stats(flat: torch.Tensor, ref: Held, key: int, fresh: int,
                  allclose: tuple[float, float] | None) -> dict[str, Any]:
    """Float64 sums over one output against its held reference, a chunk at a time (each chunk
    masked under `fresh` after its sums): the relative-norm error, the share of the squared
    error in elements off by more than `WRONG_ELEMENT` of their magnitude, allclose misses.
    Every figure stays on the device until the last
    chunk is done (one synchronization per output, not a few per chunk): per chunk its misses,
    its first failing element and its largest difference, each with its place and values. An
    output in host memory (a lean plan's sampled output) is compared on the reference's device,
    a chunk at a time."""
    device = torch.device(ref.device) if ref.device is not None else flat.device
    zero = torch.zeros((), dtype=torch.float64, device=device)
    num, den, gross = zero.clone(), zero.clone(), zero.clone()
    nan_bad = torch.zeros((), dtype=torch.bool, device=device)
    inf_bad = nan_bad.clone()
    rows: list[torch.Tensor] = []
    for start, r in ref.pieces(key, fresh):
        # float64 temporaries are most of the time of a gigabyte output: as few as possible,
        # the rest made in place
        o = flat[start:start + r.numel()].to(device=device, dtype=torch.float64)
        r = r.to(torch.float64)
        rf, of = torch.isfinite(r), torch.isfinite(o)
        nan_bad |= (~of & rf).any() | torch.isnan(o).any()
        inf_bad |= (~rf & (o != r)).any()
        d = torch.sub(o, r).masked_fill_(~rf, 0.0)
        num += torch.dot(d, d)
        finite_r = r.masked_fill(~rf, 0.0)
        den += torch.dot(finite_r, finite_r)
        del finite_r
        if not d.numel():
            continue
        size = d.abs_()  # d is not needed signed any more
        wrong = size.masked_fill(size.gt(r.abs().mul_(WRONG_ELEMENT)).logical_not_(), 0.0)
        gross += torch.dot(wrong, wrong)
        del wrong
        j = torch.argmax(size).view(1)
        worst = [size.index_select(0, j), (j + start).to(torch.float64), o.index_select(0, j),
                 r.index_select(0, j)]
        del d, size
        miss = [zero.view(1)] * 4
        if allclose is not None:
            atol, rtol = allclose
            within = torch.sub(r, o).abs_() <= o.abs().mul_(rtol).add_(atol)
            bad = within.logical_or_(o == r).logical_not_()
            first = torch.argmax(bad.to(torch.uint8)).view(1)
            miss = [bad.sum().to(torch.float64).view(1), (first + start).to(torch.float64),
                    o.index_select(0, first), r.index_select(0, first)]
        rows.append(torch.cat(miss + worst))
        del o, r
    table = torch.stack(rows).tolist() if rows else []
    missed = sum(int(t[0]) for t in table)
    at: tuple[int, float, float] | None = None
    first_miss = next((t for t in table if t[0] > 0), None)
    if first_miss is not None:
        at = (int(first_miss[1]), first_miss[2], first_miss[3])
    else:
        largest = -1.0  # the first chunk's element of the largest finite difference
        for t in table:
            if t[4] == t[4] and t[4] > largest:
                largest, at = t[4], (int(t[5]), t[6], t[7])
    if bool(nan_bad):
        err = float("nan")
    elif bool(inf_bad):
        err = float("inf")
    else:
        err = float(num.sqrt() / torch.clamp(den.sqrt(), min=torch.finfo(torch.float64).tiny))
    total = float(num)
    share = float(gross) / total if total > 0 else 0.0
    return {"err": err, "misses": missed, "at": at, "gross": share}
