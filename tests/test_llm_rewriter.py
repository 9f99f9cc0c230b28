"""The LLM rewriter, offline: an HTTP mock transport answers with API-shaped JSON."""
from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

anthropic = pytest.importorskip("anthropic")

import kir
from lineage.skills import SkillCard
from passes.base import Applied, Failed, Site, Skipped
from passes.llm_rewriter import (BEGIN_MARKER, END_MARKER, NO_KEY_MESSAGE, LLMConfig,
                                 LLMRewriter, Price, default_rewriter)
from passes.rewriter import DeterministicRewriter

# The SDK's own HTTP library (httpx2 in recent SDKs, httpx before).
try:
    import httpx2 as httpx
except ImportError:  # pragma: no cover - older SDKs
    import httpx  # type: ignore[no-redef]

KERNEL = '''import triton
import triton.language as tl


@triton.jit
def scale_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    y = x * 2.0
    tl.store(y_ptr + offs, y, mask=offs < n)
'''
REGION = "    y = x * 2.0\n"
NEW_REGION = "    y = x + x\n"
CARRIER_BEFORE = "    acc += a * b  # CARRIER-BEFORE-MARK\n"


def _ir() -> kir.KernelIR:
    return kir.parse(KERNEL, language="triton")


def _site() -> Site:
    start = KERNEL.encode().index(REGION.encode())
    return Site("demo-pass", "triton:scale_kernel/assign[3]", False, {"found": "mul"},
                (start, start + len(REGION.encode())))


def _card() -> SkillCard:
    return SkillCard(id="demo-pass.triton.0000", intent="double by addition", pass_name="demo-pass",
                     category="expression-level", language="triton", locus="assign",
                     carrier={"before": CARRIER_BEFORE, "after": "    acc = tl.dot(a, b, acc)\n"},
                     admitted=True)


def _message(text: str, usage: dict[str, int] | None = None, stop: str = "end_turn") -> dict[str, Any]:
    return {"id": "msg_01", "type": "message", "role": "assistant", "model": "claude-test",
            "content": [{"type": "text", "text": text}], "stop_reason": stop,
            "stop_sequence": None,
            "usage": usage or {"input_tokens": 1000, "output_tokens": 100,
                               "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}}


def _reply(body: str) -> str:
    return f"Here is the region.\n\n```python\n{BEGIN_MARKER}\n{body}{END_MARKER}\n```\n"


class Mock:
    """A transport that answers each request with the next scripted response."""

    def __init__(self, *responses: Callable[[Any], Any] | dict[str, Any]) -> None:
        self.responses = list(responses)
        self.requests: list[dict[str, Any]] = []

    def __call__(self, request: Any) -> Any:
        self.requests.append(json.loads(request.content))
        step = self.responses.pop(0) if len(self.responses) > 1 else self.responses[0]
        if callable(step):
            return step(request)
        return httpx.Response(200, json=step)

    def rewriter(self, config: LLMConfig | None = None, **kw: Any) -> tuple[LLMRewriter, list[float]]:
        sleeps: list[float] = []
        rw = LLMRewriter(config or LLMConfig(model="claude-test", temperature=0.2,
                                             max_tokens=1024),
                         api_key="test-key", library=kw.pop("library", "LIBRARY-PREFIX"),
                         http_client=httpx.Client(transport=httpx.MockTransport(self)),
                         sleep=sleeps.append, **kw)
        return rw, sleeps


def test_good_reply_becomes_one_edit_inside_the_region() -> None:
    mock = Mock(_message(_reply(NEW_REGION)))
    rw, _ = mock.rewriter()
    result = rw.rewrite(_ir(), _site(), _card())
    assert isinstance(result, Applied), result
    (edit,) = result.edits
    assert (edit.span.start, edit.span.end) == _site().span
    assert result.ir.unparse() == KERNEL.replace(REGION, NEW_REGION)
    body = mock.requests[0]
    assert body["model"] == "claude-test" and body["max_tokens"] == 1024
    assert body["temperature"] == 0.2
    # The library is the cached prefix: the last system block carries the cache breakpoint.
    assert "LIBRARY-PREFIX" in body["system"][-1]["text"]
    assert body["system"][-1]["cache_control"] == {"type": "ephemeral"}
    prompt = body["messages"][0]["content"]
    assert CARRIER_BEFORE.strip() in prompt  # carrier verbatim
    assert "double by addition" in prompt and REGION.strip() in prompt
    assert "def scale_kernel" in prompt  # surrounding context


def test_indentation_and_newline_of_the_region_are_matched() -> None:
    # The region starts after the indentation of its line and has no trailing newline.
    start = KERNEL.index("y = x * 2.0")
    site = Site("demo-pass", "a", False, {}, (start, start + len("y = x * 2.0")))
    mock = Mock(_message(_reply("    y = x + x\n")))
    result = mock.rewriter()[0].rewrite(_ir(), site, _card())
    assert isinstance(result, Applied), result
    assert result.ir.unparse() == KERNEL.replace(REGION, NEW_REGION)


@pytest.mark.parametrize("text, why", [
    ("I cannot do that.", "no fenced code block"),
    (_reply(NEW_REGION) + _reply("    y = 2.0 * x\n"), "2 code blocks"),
    ("```python\n    y = x + x\n```", "markers"),
    (_reply(REGION), "unchanged"),
])
def test_malformed_replies_are_rejected_with_a_reason(text: str, why: str) -> None:
    result = Mock(_message(text)).rewriter()[0].rewrite(_ir(), _site(), _card())
    assert isinstance(result, Failed)
    assert result.error.startswith("llm reply rejected") and why in result.error


@pytest.mark.parametrize("response, why", [
    (lambda r: httpx.Response(200, content=b"<html>gateway</html>"), "malformed"),
    (lambda r: httpx.Response(200, json={"id": "x", "type": "message"}), "malformed"),
    (_message(_reply(NEW_REGION), stop="max_tokens"), "cut off"),
    ({**_message(""), "content": [{"type": "tool_use", "id": "t", "name": "x", "input": {}}]},
     "no text"),
])
def test_malformed_api_bodies_are_rejected(response: Any, why: str) -> None:
    result = Mock(response).rewriter()[0].rewrite(_ir(), _site(), _card())
    assert isinstance(result, Failed) and why in result.error, result


@pytest.mark.parametrize("text", [
    # text outside the markers
    f"```python\n    x = tl.load(x_ptr + offs)\n{BEGIN_MARKER}\n{NEW_REGION}{END_MARKER}\n```",
    # the line before the region copied into the replacement (it would be duplicated)
    _reply("    x = tl.load(x_ptr + offs, mask=offs < n)\n" + NEW_REGION),
    # the line after the region copied into it
    _reply(NEW_REGION + "    tl.store(y_ptr + offs, y, mask=offs < n)\n"),
])
def test_replies_that_touch_outside_the_region_are_rejected(text: str) -> None:
    result = Mock(_message(text)).rewriter()[0].rewrite(_ir(), _site(), _card())
    assert isinstance(result, Failed) and "outside the region" in result.error, result


def test_a_reply_that_does_not_parse_is_rejected() -> None:
    result = Mock(_message(_reply("    y = x *\n"))).rewriter()[0].rewrite(_ir(), _site(), _card())
    assert isinstance(result, Failed) and "does not parse" in result.error, result


def _rate_limited(request: Any) -> Any:
    return httpx.Response(429, headers={"retry-after": "3"},
                          json={"type": "error", "error": {"type": "rate_limit_error",
                                                           "message": "slow down"}})


def test_rate_limit_then_success_retries_after_the_advised_delay() -> None:
    mock = Mock(_rate_limited, _rate_limited, _message(_reply(NEW_REGION)))
    rw, sleeps = mock.rewriter()
    assert isinstance(rw.rewrite(_ir(), _site(), _card()), Applied)
    assert len(mock.requests) == 3 and sleeps == [3.0, 3.0]
    assert rw.calls[-1].attempts == 3


def _timeout(request: Any) -> Any:
    raise httpx.ReadTimeout("timed out", request=request)


def test_timeouts_back_off_exponentially_then_give_up_with_skipped() -> None:
    mock = Mock(_timeout)
    rw, sleeps = mock.rewriter(LLMConfig(max_retries=3, backoff_s=0.5, backoff_max_s=1.5))
    result = rw.rewrite(_ir(), _site(), _card())
    assert isinstance(result, Skipped) and "timeout" in result.reason, result
    assert "gave up after 4 attempts" in result.reason
    assert sleeps == [0.5, 1.0, 1.5] and len(mock.requests) == 4
    assert rw.spent_usd == 0.0


def test_server_error_is_retried_but_bad_request_is_not() -> None:
    overloaded = lambda r: httpx.Response(529, json={"type": "error", "error": {  # noqa: E731
        "type": "overloaded_error", "message": "busy"}})
    mock = Mock(overloaded, _message(_reply(NEW_REGION)))
    assert isinstance(mock.rewriter()[0].rewrite(_ir(), _site(), _card()), Applied)
    bad = Mock(lambda r: httpx.Response(400, json={"type": "error", "error": {
        "type": "invalid_request_error", "message": "temperature is not supported"}}))
    result = bad.rewriter()[0].rewrite(_ir(), _site(), _card())
    assert isinstance(result, Skipped) and "HTTP 400" in result.reason
    assert len(bad.requests) == 1


def test_spend_counts_cache_writes_and_reads_at_their_prices() -> None:
    price = Price(input=3.0, output=15.0, cache_write=3.75, cache_read=0.3)
    first = {"input_tokens": 800, "output_tokens": 200, "cache_creation_input_tokens": 5000,
             "cache_read_input_tokens": 0}
    second = {"input_tokens": 800, "output_tokens": 200, "cache_creation_input_tokens": 0,
              "cache_read_input_tokens": 5000}
    mock = Mock(_message(_reply(NEW_REGION), first), _message(_reply(NEW_REGION), second))
    rw, _ = mock.rewriter(LLMConfig(price=price, max_tokens=512))
    rw.rewrite(_ir(), _site(), _card())
    rw.rewrite(_ir(), _site(), _card())
    expected_1 = (800 * 3.0 + 200 * 15.0 + 5000 * 3.75) / 1e6
    expected_2 = (800 * 3.0 + 200 * 15.0 + 5000 * 0.3) / 1e6
    assert rw.calls[0].cost_usd == pytest.approx(expected_1)
    assert rw.calls[1].cost_usd == pytest.approx(expected_2)
    assert rw.spent_usd == pytest.approx(expected_1 + expected_2)
    # The cached prefix is identical in both requests (what makes the cache hit possible).
    assert mock.requests[0]["system"] == mock.requests[1]["system"]


def test_the_rewriter_refuses_once_the_budget_would_be_exceeded() -> None:
    expensive = {"input_tokens": 100_000, "output_tokens": 0, "cache_creation_input_tokens": 0,
                 "cache_read_input_tokens": 0}
    mock = Mock(_message(_reply(NEW_REGION), expensive))
    config = LLMConfig(price=Price(input=5.0, output=25.0), max_tokens=1000, budget_usd=0.51)
    rw, _ = mock.rewriter(config)
    assert isinstance(rw.rewrite(_ir(), _site(), _card()), Applied)
    assert rw.spent_usd == pytest.approx(0.5)
    # The worst case of another request (1000 output tokens alone cost $0.025) would pass
    # $0.51: refused without a request.
    result = rw.rewrite(_ir(), _site(), _card())
    assert isinstance(result, Skipped) and result.reason.startswith("llm budget"), result
    assert len(mock.requests) == 1
    assert rw.remaining_usd == pytest.approx(0.01)


def test_without_a_key_the_rewriter_is_off_and_callers_fall_back(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)

    def no_network(request: Any) -> Any:
        raise AssertionError("no request may be sent without a key")

    rw = LLMRewriter(http_client=httpx.Client(transport=httpx.MockTransport(no_network)))
    assert rw.available() == (False, NO_KEY_MESSAGE)
    result = rw.rewrite(_ir(), _site(), _card())
    assert isinstance(result, Skipped) and "ANTHROPIC_API_KEY" in result.reason
    chosen, note = default_rewriter()
    assert isinstance(chosen, DeterministicRewriter) and note == NO_KEY_MESSAGE
    monkeypatch.setenv("ANTHROPIC_API_KEY", "k")
    chosen, note = default_rewriter()
    assert note == "" and [b.name for b in chosen.backends] == ["deterministic", "llm"]


def test_sdk_errors_used_for_retries_exist() -> None:
    # The retry policy relies on these SDK classes; a renamed class would silently stop retries.
    assert issubclass(anthropic.APITimeoutError, anthropic.APIConnectionError)
    assert issubclass(anthropic.RateLimitError, anthropic.APIStatusError)


CUDA = '''extern "C" __global__ void scale(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = x[i] * 2.0f;
    }
}
'''


@pytest.mark.parametrize("body, ok", [("        y[i] = x[i] + x[i];\n", True),
                                      ("        y[i] = x[i] + ;\n", False)])
def test_cuda_region_rewrite_checks_the_parse(body: str, ok: bool) -> None:
    region = "        y[i] = x[i] * 2.0f;\n"
    start = CUDA.index(region)
    site = Site("demo-pass", "cuda:scale/if[0]", False, {}, (start, start + len(region)))
    result = Mock(_message(_reply(body))).rewriter()[0].rewrite(
        kir.parse(CUDA, language="cuda"), site, _card())
    if ok:
        assert isinstance(result, Applied) and result.ir.unparse() == CUDA.replace(region, body)
    else:
        assert isinstance(result, Failed) and "does not parse" in result.error, result
