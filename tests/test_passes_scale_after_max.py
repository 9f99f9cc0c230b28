"""scale-after-max: the softmax's scale moved past its row maximum, only where the scale is
provably non-negative (positive where the scores are masked to -inf)."""
from __future__ import annotations

import math
from pathlib import Path

import pytest

import kir
from module_helpers import compiled_for_sm90, load_module
from passes import get_pass
from passes.base import Applied

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parent.parent
STYLE = ROOT / "bench/styles/nw_attn_flat_ptrs/flat_attn.py"
HELDOUT = ROOT / "bench/heldout/attn_causal/attn_start.py"
RULE = get_pass("scale-after-max")()


def _everywhere(ir: kir.KernelIR, rule) -> kir.KernelIR:
    """`rule` applied at each of its open sites, one after the other."""
    for _ in range(8):
        site = next((s for s in rule.sites(ir) if not s.present), None)
        if site is None:
            break
        result = rule.optimize(ir, site)
        assert isinstance(result, Applied), result
        ir = result.ir
    return ir


def _searched(path: Path, text: str | None = None) -> kir.KernelIR:
    """The start after exp2-fold and causal-block-skip (the state the search reaches first)."""
    ir = kir.parse(text if text is not None else path.read_text(), language="triton", path=path)
    return _everywhere(_everywhere(ir, get_pass("exp2-fold")()), get_pass("causal-block-skip")())


def _open(ir: kir.KernelIR) -> list:
    return [s for s in RULE.sites(ir) if not s.present]


def test_the_style_start_after_exp2_fold_and_the_causal_skip_scales_after_its_maxima() -> None:
    before = _searched(STYLE)
    assert [s.detail["masked"] for s in _open(before)] == [False, True]
    text = _everywhere(before, RULE).unparse()
    assert text.count("        s = tl.dot(q, kt)\n") == 2
    assert text.count("tl.maximum(m_run, tl.max(s, axis=1) * sm_scale)") == 2
    assert text.count("tl.exp2((s * sm_scale - m_new[:, None]) * 1.4426950408889634)") == 2
    # the masked tile's drop is untouched: -inf times a positive scale is -inf
    assert 's = tl.where(allowed, s, float("-inf"))' in text
    assert not _open(kir.parse(text, language="triton"))


def test_the_scores_folded_with_log2e_take_the_scale_whole() -> None:
    text = STYLE.read_text().replace("* sm_scale\n", "* (sm_scale * 1.4426950408889634)\n") \
        .replace("tl.exp(", "tl.exp2(")
    assert "tl.exp2(s - m_new[:, None])" in text
    out = _everywhere(kir.parse(text, language="triton", path=STYLE), RULE).unparse()
    assert "tl.max(s, axis=1) * (sm_scale * 1.4426950408889634))" in out
    assert "tl.exp2(s * (sm_scale * 1.4426950408889634) - m_new[:, None])" in out


def _rel_err(module, b: int, h: int, s: int, d: int) -> float:
    torch.manual_seed(0)
    q, k, v = (torch.randn(b, h, s, d).half() for _ in range(3))
    ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(),
                                                           is_causal=True)
    out = module.run(q, k, v).float()
    return float((out - ref).norm() / ref.norm())


@pytest.mark.parametrize("start", [STYLE, HELDOUT], ids=["style", "heldout"])
def test_the_rewritten_attention_matches_torch(start: Path, tmp_path: Path) -> None:
    before = _searched(start)
    after = _everywhere(before, RULE)
    assert after.unparse() != before.unparse()
    module = load_module(after.unparse(), tmp_path, "scale_after_max")
    # 48 keys: the last query tile's diagonal block is masked, and a row of it past the end
    assert _rel_err(module, 1, 2, 48, 16) < 5e-3


@pytest.mark.parametrize("host", ["D ** -0.5", "1 / math.sqrt(q.shape[-1])", "scale", "0.125"])
def test_a_scale_the_host_makes_positive_is_proved(host: str) -> None:
    text = STYLE.read_text().replace("1.0 / math.sqrt(D)", host) \
        .replace("    o = torch.empty_like(q)\n", "    o = torch.empty_like(q)\n    scale = 1.0 / math.sqrt(D)\n")
    assert [s.detail["masked"] for s in _open(_searched(STYLE, text))] == [False, True]


@pytest.mark.parametrize("host, signature, why", [
    ("scale", "def run(q, k, v, scale=0.125):", "argument of the host function"),
    ("-0.125", "def run(q, k, v):", "is negative"),
    ("-1.0 / math.sqrt(D)", "def run(q, k, v):", "is negative"),
    ("q.abs().max().item()", "def run(q, k, v):", "can prove positive"),
])
def test_a_scale_not_proved_non_negative_refuses(host: str, signature: str, why: str) -> None:
    text = STYLE.read_text().replace("1.0 / math.sqrt(D)", host).replace("def run(q, k, v):", signature)
    ir = _searched(STYLE, text)
    assert not _open(ir)
    refusals = RULE.refusals(ir)
    assert len(refusals) == 2 and all(why in r for r in refusals), refusals


def test_a_negative_literal_in_the_kernel_refuses() -> None:
    text = STYLE.read_text().replace("tl.dot(q, kt) * sm_scale", "tl.dot(q, kt) * -0.125")
    ir = _searched(STYLE, text)
    assert not _open(ir) and all("is negative" in r for r in RULE.refusals(ir))


def test_a_zero_scale_keeps_the_masked_tile() -> None:
    """0 * -inf is NaN: the masked tile needs a scale proved positive, the unmasked one not."""
    text = STYLE.read_text().replace("1.0 / math.sqrt(D)", "0.0")
    ir = _searched(STYLE, text)
    assert [s.detail["masked"] for s in _open(ir)] == [False]
    assert any("proved positive" in r for r in RULE.refusals(ir))


def test_scores_read_another_way_are_left_alone() -> None:
    """A read that is neither a row maximum nor an exponent's subtraction would see unscaled
    scores: the rule refuses, and a drop other than -inf is not scaled by the factor either."""
    summed = STYLE.read_text().replace("l_run = l_run * corr + tl.sum(p, axis=1)",
                                       "l_run = l_run * corr + tl.sum(p, axis=1) + 0 * tl.sum(s, axis=1)")
    dropped = STYLE.read_text().replace('float("-inf")', "-1.0e6")
    assert summed != STYLE.read_text() and dropped != STYLE.read_text()
    assert not _open(kir.parse(summed, language="triton", path=STYLE))
    assert not _open(kir.parse(dropped, language="triton", path=STYLE))
    assert _open(kir.parse(STYLE.read_text(), language="triton", path=STYLE))


def test_the_rewritten_attention_compiles_for_sm90(tmp_path: Path) -> None:
    text = _everywhere(_searched(STYLE), RULE).unparse()
    ptx = compiled_for_sm90(text, tmp_path, "scale_after_max_sm90", "flat_causal_attn",
                            {"BQ": 64, "BKV": 64, "HD": 64})["ptx"]
    assert "mma" in ptx and "ex2.approx" in ptx


@pytest.mark.parametrize("scale, masked", [("tl.math.rsqrt(HD * 1.0)", [False, True]),
                                           ("tl.sqrt(HD * 1.0)", [False]),
                                           ("tl.math.rsqrt(rq)", [])])
def test_a_root_of_a_scalar_is_a_scale_and_a_root_of_a_tile_is_not(scale: str, masked: list) -> None:
    """rsqrt is positive, sqrt only non-negative (so not under a -inf drop); a root of a tile
    (the query rows) scales each row its own way, which no row maximum commutes with."""
    text = STYLE.read_text().replace("tl.dot(q, kt) * sm_scale", f"tl.dot(q, kt) * {scale}")
    assert [s.detail["masked"] for s in _open(_searched(STYLE, text))] == masked
