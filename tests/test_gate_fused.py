"""The one-pass held comparison (`gate.fusedcompare`), run here in Triton's interpreter on the
CPU: its pads are Philox4x32-10 of (key, word), its figures are those of the torch path and of
the parent's numpy comparison, a reference held by it opens only under the parent's current
key (also when it waits in host memory), and the precision probe's error agrees."""
from __future__ import annotations

import math
import random
from pathlib import Path

import pytest
import torch
import triton
import triton.language as tl

import gate
from gate import FailureKind, Tier
from gate import compare as cmp
from gate import fusedcompare, heldcompare, precision
from gate.guards import Captured
from gate.transport import encode_all

# the interpreter computes masked-off lanes and NaN arithmetic in numpy, which warns
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
DATA = Path(__file__).parent / "data"


@pytest.fixture(autouse=True)
def _small_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fusedcompare, "BLOCK", 256)  # several blocks per output


@triton.jit
def _randint4x(out, seed, ROWS: tl.constexpr):
    q = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    words = tl.randint4x(seed, q)
    for c in tl.static_range(4):
        tl.store(out + q * 4 + c, words[c].to(tl.int32, bitcast=True))


def test_the_pad_is_philox_of_the_key_and_the_word_index() -> None:
    key = 0x5DEECE66D1234567
    want = torch.empty(512, dtype=torch.int32)
    # Triton's Philox4x32-10: word 4q + c is word c at counter (q, 0, 0, 0)
    _randint4x[(2,)](want, key, ROWS=64)
    assert torch.equal(fusedcompare.pad_words(key, 512), want)
    # a chunk's pad is the pad at its place; words past 2^34 have pads of their own
    assert torch.equal(fusedcompare.pad_words(key, 100, base=300), want[300:400])
    assert not torch.equal(fusedcompare.pad_words(key, 100, base=1 << 34), want[:100])
    assert not torch.equal(fusedcompare.pad_words(key + 1, 512), want)
    with pytest.raises(ValueError):
        fusedcompare.pad_words(key, 100, base=3)


def _fp32_cases() -> list[tuple[str, object, object]]:
    g = torch.Generator().manual_seed(0)
    ref = torch.randn(1000, generator=g)
    near = ref + 1e-7 * torch.randn(1000, generator=g)
    far = ref + 1e-2 * torch.randn(1000, generator=g)
    nan_out = near.clone()
    nan_out[634] = float("nan")
    inf_ref = ref.clone()
    inf_ref[7] = float("inf")
    inf_same, inf_other = near.clone(), near.clone()
    inf_same[7], inf_other[7] = float("inf"), float("-inf")
    one_off = ref.clone()
    one_off[999] += 1.0  # in the last, partial block
    return [
        ("close", near, ref),
        ("far", far, ref),
        ("one element off at the end", one_off, ref),
        ("nan in the output", nan_out, ref),
        ("inf matched", inf_same, inf_ref),
        ("inf of the other sign", inf_other, inf_ref),
        ("zeros for a zero reference", torch.zeros(300), torch.zeros(300)),
        ("empty", torch.zeros(0, 4), torch.zeros(0, 4)),
        ("a matrix, two outputs and a scalar", (far.view(20, 50), near, 3), (ref.view(20, 50), ref, 3)),
    ]


def _judge(out, ref, allclose, *, fused: bool, park: bool = False) -> tuple[dict, dict]:
    key = cmp.new_key()
    held, summary = heldcompare.hold(ref, key, random.Random(1), fused=fused)
    if park:
        for h in held:
            if isinstance(h, heldcompare.Held):
                h.park()
    return heldcompare.judge(out, held, key, cmp.new_key(), [], allclose), summary


@pytest.mark.parametrize("name,out,ref", _fp32_cases(), ids=[c[0] for c in _fp32_cases()])
def test_the_fused_figures_are_the_torch_paths_and_agree_with_the_parent(
        name: str, out, ref, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(heldcompare, "CHUNK_BYTES", 1024)  # parked: several chunks
    cap = Captured.take()
    for allclose in (None, (1e-2, 1e-2)):
        plain, _ = _judge(out, ref, allclose, fused=False)
        for park in (False, True):
            fused, summary = _judge(out, ref, allclose, fused=True, park=park)
            assert fused["misses"] == plain["misses"], (name, park)
            assert fused["gross"] == pytest.approx(plain["gross"], rel=1e-9, abs=1e-12), name
            if math.isfinite(plain["err"]):
                assert fused["err"] == pytest.approx(plain["err"], rel=1e-12, abs=1e-300), name
            else:
                assert (fused["err"] != fused["err"]) == (plain["err"] != plain["err"]), name
            if plain["misses"] and any(plain["misses"]):
                assert repr(fused["at"]) == repr(plain["at"]), (name, fused["at"], plain["at"])
            got = cmp.held_outcome(heldcompare.headers(out), summary["headers"], fused,
                                   tolerance=1e-5, allclose=allclose)
            want = cmp.compare(encode_all(out, cap), encode_all(ref, cap), tolerance=1e-5,
                               allclose=allclose)
            assert (got.ok, got.kind) == (want.ok, want.kind), (name, got, want)


def test_the_largest_difference_and_the_first_miss_are_named() -> None:
    ref = torch.zeros(1000)
    out = ref.clone()
    out[700], out[41], out[900] = 0.25, 0.5, 0.5  # 41 and 900 tie: the first is named
    for fused in (True, False):
        figures, _ = _judge(out, ref, None, fused=fused)
        assert figures["at"] == (0, 41, 0.5, 0.0), fused
        figures, _ = _judge(out, ref, (1e-2, 1e-2), fused=fused)
        assert figures["misses"] == [3] and figures["at"] == (0, 41, 0.5, 0.0), fused


def test_a_fused_held_reference_opens_only_under_the_current_key(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(heldcompare, "CHUNK_BYTES", 4096)
    ref = torch.randn(3000)
    key, fresh = cmp.new_key(), cmp.new_key()
    [held], summary = heldcompare.hold(ref, key, fused=True)
    assert held.fused and held.shape == (3000,)
    words = ref.view(torch.int32)
    # what the worker keeps is the reference XOR the pad, nothing readable
    assert torch.equal(held.masked.view(torch.int32), words ^ fusedcompare.pad_words(key, 3000))
    assert (held.masked == ref.view(torch.uint8)).float().mean() < 0.05
    assert torch.equal(torch.cat([c for _, c in held.pieces(key)]), ref)
    assert heldcompare.judge(ref.clone(), [held], key, fresh, [], None)["err"] == 0.0
    # after a comparison the old key opens noise, the fresh one the reference
    stale = heldcompare.judge(ref.clone(), [held], key, cmp.new_key(), [], None)
    assert not stale["err"] < 1.0
    [held], _ = heldcompare.hold(ref, key, fused=True)
    heldcompare.judge(ref.clone(), [held], key, fresh, [], None)
    held.park()  # parked: each chunk comes back, is compared, and leaves masked anew
    newer = cmp.new_key()
    assert heldcompare.judge(ref.clone(), [held], fresh, newer, [], None)["err"] == 0.0
    assert torch.equal(torch.cat([c for _, c in held.pieces(newer)]), ref)
    places, values = summary["samples"][0]
    assert values == [float(ref[p]) for p in places]


@pytest.mark.parametrize("n", [1, 7, 1000, 1001])
def test_the_digest_made_in_the_masking_pass_is_the_torch_paths(n: int) -> None:
    ref = torch.randn(n, generator=torch.Generator().manual_seed(n)) * 1e3
    _, fused = heldcompare.hold(ref, cmp.new_key(), fused=True)
    _, plain = heldcompare.hold(ref, cmp.new_key(), fused=False)
    assert fused["digest"] == plain["digest"] == heldcompare._digest(ref)
    other = ref.clone()
    other[n // 2] += 1.0
    assert heldcompare.hold(other, cmp.new_key(), fused=True)[1]["digest"] != fused["digest"]


def test_a_sealed_streams_pad_is_one_pass_where_the_bytes_are_whole_words(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KLINEAGE_GATE_FUSED", "1")
    raw = torch.randn(300).view(torch.uint8)
    masked = heldcompare.xor_pad_(raw.clone(), 11, 2)
    assert (masked == raw).float().mean() < 0.05
    stream = (11 ^ (3 * heldcompare._GOLDEN)) & heldcompare._SEED_MASK
    assert torch.equal(masked.view(torch.int32), raw.view(torch.int32) ^ fusedcompare.pad_words(stream, 300))
    unaligned = torch.zeros(1201, dtype=torch.uint8)[1:]  # bytes not on a 4-byte boundary
    unaligned.copy_(masked)
    assert torch.equal(heldcompare.xor_pad_(unaligned, 11, 2), raw)
    assert not torch.equal(heldcompare.xor_pad_(masked.clone(), 11, 3), raw)  # another stream
    odd = torch.arange(7, dtype=torch.uint8)  # not whole words: the drawn pad, still a round trip
    assert torch.equal(heldcompare.xor_pad_(heldcompare.xor_pad_(odd.clone(), 5, 0), 5, 0), odd)


def test_the_fill_count_counts_the_words_unlike_the_pattern() -> None:
    g = torch.Generator().manual_seed(5)
    pattern = [7, -1, 0x7FC00000, -(1 << 31)]
    words = torch.tensor(pattern * 250, dtype=torch.int32)  # 1000 words, several blocks
    assert fusedcompare.count_unlike(words, pattern) == 0
    assert fusedcompare.count_unlike(words, pattern[1:] + pattern[:1]) == 1000  # shifted: none
    places = torch.randperm(1000, generator=g)[:37]
    words[places] ^= 1 << 12
    assert fusedcompare.count_unlike(words, pattern) == 37
    assert fusedcompare.count_unlike(words[:0], pattern) == 0
    with pytest.raises(ValueError):
        fusedcompare.count_unlike(words, pattern[:2])


@pytest.mark.parametrize("dtype,value", [
    (torch.float32, float("nan")), (torch.float16, float("nan")), (torch.bfloat16, float("nan")),
    (torch.float64, float("nan")), (torch.complex64, float("nan")), (torch.int64, -(1 << 63)),
    (torch.int8, -128), (torch.bool, True)])
@pytest.mark.parametrize("n", [1, 7, 1030])
def test_a_sealed_buffer_is_judged_poisoned_in_one_pass_as_on_the_host(
        monkeypatch: pytest.MonkeyPatch, dtype: torch.dtype, value: object, n: int) -> None:
    """The sealed call's test of whether a buffer still holds its poison (`Seal._holds_poison`)
    reads it on its device: the same answer as the host's for every dtype and byte count,
    whichever element (first, middle, or one in the last 1-3 bytes) was written."""
    monkeypatch.setenv("KLINEAGE_GATE_FUSED", "1")
    t = torch.empty(n, dtype=dtype)
    t.fill_(value)
    assert heldcompare.holds_fill(t, value) is True
    for place in {0, n // 2, n - 1}:
        written = t.clone()
        written[place] = 0 if dtype is not torch.bool else False
        assert heldcompare.holds_fill(written, value) is False, place
    other = torch.empty(n, dtype=dtype)
    other.fill_(0 if dtype is not torch.bool else False)
    assert heldcompare.holds_fill(other, value) is False
    monkeypatch.setenv("KLINEAGE_GATE_FUSED", "0")
    assert heldcompare.holds_fill(t, value) is None  # on the CPU: the host's test


@pytest.mark.gpu
def test_on_the_gpu_a_sealed_buffer_is_judged_poisoned_in_one_pass() -> None:
    heldcompare.warm()
    for dtype, value in ((torch.float32, float("nan")), (torch.bfloat16, float("nan")),
                         (torch.int32, -(1 << 31)), (torch.bool, True)):
        t = torch.empty(3 * 2048 + 5, dtype=dtype, device="cuda")
        t.fill_(value)
        assert heldcompare.holds_fill(t, value) is True
        t[4000] = 0 if dtype is not torch.bool else False
        assert heldcompare.holds_fill(t, value) is False


def test_the_gates_kernels_take_no_parameter_triton_s_binder_shadows() -> None:
    """Triton 3.6 binds a launch's arguments in a generated function whose locals include
    `params` and `specialization`: a kernel parameter of such a name is shadowed by a dict
    ("failed to specialize argument of type: dict") on the GPU, not in the interpreter."""
    import inspect

    shadowed = {"params", "specialization", "options", "backend", "specialize_impl"}
    kernels = [k for k in vars(fusedcompare).values() if hasattr(k, "fn") and hasattr(k, "warmup")]
    assert kernels
    for kernel in kernels:
        assert not shadowed & set(inspect.signature(kernel.fn).parameters), kernel.fn.__name__


def test_other_dtypes_and_cpu_tensors_keep_the_torch_path() -> None:
    key = cmp.new_key()
    [half], _ = heldcompare.hold(torch.randn(100).half(), key, fused=True)
    [cpu], _ = heldcompare.hold(torch.randn(100), key)
    assert not half.fused and not cpu.fused


def test_the_precision_probes_error_is_the_same_in_one_pass() -> None:
    g = torch.Generator().manual_seed(3)
    ref = torch.randn(64, 50, generator=g)
    low = precision.tf32_rounded(ref) * 1.0001
    want = precision.relative_error(low, ref)
    assert fusedcompare.relative_error(low, ref) == pytest.approx(want, rel=1e-12)
    bad = low.clone()
    bad[3, 4] = float("nan")
    assert fusedcompare.relative_error(bad, ref) == math.inf == precision.relative_error(bad, ref)
    both = ref.clone()
    both[0, 0] = float("inf")  # an inf the output matches: torch's sums give NaN, so inf
    assert fusedcompare.relative_error(both, both) == math.inf == precision.relative_error(both, both)


@pytest.mark.gpu
def test_on_the_gpu_the_fused_figures_are_the_torch_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fusedcompare, "BLOCK", 2048)
    heldcompare.warm()  # compiles without launching; the launches below reuse it
    g = torch.Generator(device="cuda").manual_seed(5)
    ref = torch.randn((1 << 22) + 3, generator=g, device="cuda")
    out = ref + 1e-3 * torch.randn(ref.numel(), generator=g, device="cuda")
    out[12345] = float("nan")
    for o in (out, torch.where(out != out, ref, out)):
        for allclose in (None, (1e-3, 1e-3)):
            plain, _ = _judge(o, ref, allclose, fused=False)
            fused, _ = _judge(o, ref, allclose, fused=True)
            assert fused["misses"] == plain["misses"]
            assert fused["gross"] == pytest.approx(plain["gross"], rel=1e-9, abs=1e-12) or \
                fused["err"] != fused["err"]  # NaN: the share is not read
            assert repr(fused["err"]) == repr(plain["err"]) or \
                fused["err"] == pytest.approx(plain["err"], rel=1e-12)
    raw = ref.view(torch.uint8)
    masked = heldcompare.xor_pad_(raw.clone(), 11, 2)  # a sealed input's stream, in one pass
    assert (masked == raw).float().mean() < 0.05
    assert torch.equal(heldcompare.xor_pad_(masked, 11, 2), raw)
    [held], _ = heldcompare.hold(ref, 7, fused=True)
    held.park()
    assert heldcompare.judge(ref.clone(), [held], 7, 8, [], None)["err"] == 0.0
    assert fusedcompare.relative_error(out, ref) == math.inf


def test_an_interpret_gate_holds_and_judges_in_one_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker's own flow with the one-pass path (forced on the CPU): the honest kernel
    passes every check, a reused answer is still named, and sets parked in host memory are
    judged chunk by chunk."""
    saxpy = DATA / "cases" / "saxpy"
    monkeypatch.setenv("KLINEAGE_GATE_COMPARE", "worker")
    monkeypatch.setenv("KLINEAGE_GATE_FUSED", "1")
    verdict = gate.check_file(saxpy / "saxpy_triton.py", saxpy, Tier.INTERPRET, cache=False, timeout=120)
    assert verdict.ok, verdict.reason
    assert verdict.correctness.max_rel_err < 1e-6
    phases = [r.phase for r in verdict.correctness.results]
    assert phases.count("seed") == 3 and phases.count("sealed") == 1 and phases.count("refill") >= 4
    monkeypatch.setenv("KLINEAGE_GATE_PARK", "1")
    cheat = gate.check_file(DATA / "cheats" / "reuse_data_ptr.py", saxpy,
                            Tier.INTERPRET, cache=False, timeout=120)
    # a parked set brought back may land at its earlier address: the knockout (kernels skipped,
    # the answer still right) can name the reuse before the reuse check does
    assert cheat.failure_kind in (FailureKind.REUSED_OUTPUT, FailureKind.FALLBACK), cheat.reason


def test_the_one_pass_tf32_rounding_is_the_torch_rounding(monkeypatch: pytest.MonkeyPatch) -> None:
    g = torch.Generator().manual_seed(4)
    x = torch.cat([torch.randn(996, generator=g) * 10.0 ** torch.randint(-40, 39, (996,), generator=g),
                   torch.tensor([float("inf"), -float("inf"), float("nan"), 0.0, -0.0, 3.4028235e38,
                                 1e-45, 1.0 + 2.0 ** -11, 1.0 + 3 * 2.0 ** -11])]).view(3, 335)
    want = precision.tf32_rounded(x)
    got = fusedcompare.tf32_rounded(x)
    assert got.shape == x.shape and torch.equal(got.view(torch.int32), want.view(torch.int32))
    monkeypatch.setenv("KLINEAGE_GATE_FUSED", "1")  # the probe takes the one pass
    assert torch.equal(precision.tf32_rounded(x).view(torch.int32), want.view(torch.int32))


def test_where_the_kernels_do_not_compile_the_torch_path_holds_and_compares(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("KLINEAGE_GATE_FUSED", "1")
    monkeypatch.setattr(heldcompare, "FUSED_OFF", None)
    assert heldcompare.warm("cpu") and heldcompare.FUSED_OFF is None

    def broken(*args, **kwargs):
        raise RuntimeError("ptxas fatal: no such instruction")

    monkeypatch.setattr(fusedcompare.klineage_gate_judge, "warmup", broken, raising=False)
    assert heldcompare.warm("cpu") is False
    assert "ptxas fatal" in heldcompare.FUSED_OFF and "one-pass comparison off" in capsys.readouterr().err
    ref = torch.randn(100)
    key = cmp.new_key()
    [held], _ = heldcompare.hold(ref, key)
    assert not held.fused
    assert heldcompare.judge(ref.clone(), [held], key, cmp.new_key(), [], None)["err"] == 0.0
