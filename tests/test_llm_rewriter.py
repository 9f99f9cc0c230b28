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
from kir.errors import BadInputError
from passes.llm_rewriter import (BEGIN_MARKER, END_MARKER, MODELS, NO_KEY_MESSAGE, LLMConfig,
                                 LLMRewriter, Price, default_rewriter, price_of)
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
    """A transport that answers each Messages request with the next scripted response and each
    token-counting request with `count` (a response, a callable, or an input-token count)."""

    def __init__(self, *responses: Callable[[Any], Any] | dict[str, Any],
                 count: int | Callable[[Any], Any] = 2000) -> None:
        self.responses = list(responses)
        self.count = count
        self.requests: list[dict[str, Any]] = []
        self.counted: list[dict[str, Any]] = []

    def __call__(self, request: Any) -> Any:
        if request.url.path.endswith("/count_tokens"):
            self.counted.append(json.loads(request.content))
            if callable(self.count):
                return self.count(request)
            return httpx.Response(200, json={"input_tokens": self.count})
        self.requests.append(json.loads(request.content))
        step = self.responses.pop(0) if len(self.responses) > 1 else self.responses[0]
        if callable(step):
            return step(request)
        return httpx.Response(200, json=step)

    def rewriter(self, config: LLMConfig | None = None, **kw: Any) -> tuple[LLMRewriter, list[float]]:
        """A rewriter over this transport, and the list the SDK's retry sleeps land in (the
        tests patch `time.sleep`, see the `sleeps` fixture)."""
        rw = LLMRewriter(config or LLMConfig(model="claude-test", temperature=0.2,
                                             max_tokens=1024),
                         api_key="test-key", library=kw.pop("library", "LIBRARY-PREFIX"),
                         http_client=httpx.Client(transport=httpx.MockTransport(self)), **kw)
        return rw, SLEEPS


SLEEPS: list[float] = []


@pytest.fixture(autouse=True)
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The SDK's retry back-off sleeps, recorded instead of slept."""
    import time

    SLEEPS.clear()
    monkeypatch.setattr(time, "sleep", SLEEPS.append)
    return SLEEPS


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
    # The SDK's retries: retry-after honoured as given (not capped), attempts counted.
    assert len(mock.requests) == 3 and sleeps == [3.0, 3.0]
    assert rw.calls[-1].attempts == 3 and rw.calls[-1].outcome == "ok"


def _timeout(request: Any) -> Any:
    raise httpx.ReadTimeout("timed out", request=request)


def test_timeouts_back_off_with_jitter_then_skip_and_charge_the_worst_case() -> None:
    mock = Mock(_timeout)
    rw, sleeps = mock.rewriter(LLMConfig(model="claude-test", max_retries=3, max_tokens=1000))
    estimate = rw.estimate_usd("x")  # the mock counts 2000 input tokens for any request
    result = rw.rewrite(_ir(), _site(), _card())
    assert isinstance(result, Skipped) and "timeout" in result.reason, result
    assert "after 4 attempts" in result.reason and len(mock.requests) == 4
    # The SDK's back-off: growing, with jitter (each delay within [75%, 100%] of 0.5 * 2^n).
    assert len(sleeps) == 3
    for n, slept in enumerate(sleeps):
        assert 0.75 * 0.5 * 2**n <= slept <= 0.5 * 2**n
    # Each unanswered attempt may have been billed: the spend counts its worst case, and the
    # failed call is recorded.
    assert rw.spent_usd == pytest.approx(4 * estimate) and rw.spent_usd > 0
    (call,) = rw.calls
    assert call.failed and call.attempts == 4 and call.outcome.startswith("timeout")


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


def test_the_server_can_forbid_a_retry() -> None:
    no_retry = lambda r: httpx.Response(529, headers={"x-should-retry": "false"},  # noqa: E731
                                        json={"type": "error", "error": {
                                            "type": "overloaded_error", "message": "busy"}})
    mock = Mock(no_retry, _message(_reply(NEW_REGION)))
    rw, _ = mock.rewriter()
    result = rw.rewrite(_ir(), _site(), _card())
    assert isinstance(result, Skipped) and "HTTP 529" in result.reason
    assert len(mock.requests) == 1 and rw.calls[0].failed


@pytest.mark.parametrize("status, error_type, why", [
    (401, "authentication_error", "API key was refused"),
    (403, "permission_error", "may not use this model"),
    (404, "not_found_error", "was not found"),
])
def test_a_refused_key_or_unknown_model_fails_fast_once(status: int, error_type: str,
                                                        why: str) -> None:
    refuse = lambda r: httpx.Response(status, json={"type": "error", "error": {  # noqa: E731
        "type": error_type, "message": "no"}})
    mock = Mock(refuse)
    rw, sleeps = mock.rewriter()
    first = rw.rewrite(_ir(), _site(), _card())
    assert isinstance(first, Skipped) and why in first.reason and f"HTTP {status}" in first.reason
    assert "\n" not in first.reason and len(mock.requests) == 1 and sleeps == []
    (call,) = rw.calls
    assert call.failed and f"HTTP {status}" in call.outcome and call.cost_usd == 0.0
    # Every later card and site: the same reason, no request, nothing more recorded.
    for _ in range(3):
        again = rw.rewrite(_ir(), _site(), _card())
        assert isinstance(again, Skipped) and again.reason == rw.disabled
    assert len(mock.requests) == 1 and len(rw.calls) == 1
    assert rw.available() == (False, rw.disabled) and why in rw.disabled
    assert rw.usage_report()["failed"] == 1


def test_a_refused_key_is_seen_by_the_token_count_already() -> None:
    mock = Mock(_message(_reply(NEW_REGION)), count=lambda r: httpx.Response(
        401, json={"type": "error", "error": {"type": "authentication_error", "message": "x"}}))
    rw, _ = mock.rewriter()
    result = rw.rewrite(_ir(), _site(), _card())
    assert isinstance(result, Skipped) and "API key was refused" in result.reason
    assert mock.requests == [] and rw.disabled


def test_any_other_sdk_error_skips_this_request_only() -> None:
    def broken(request: Any) -> Any:
        raise anthropic.AnthropicError("something the SDK did not expect")

    mock = Mock(broken, _message(_reply(NEW_REGION)))
    rw, _ = mock.rewriter()
    first = rw.rewrite(_ir(), _site(), _card())
    assert isinstance(first, Skipped) and "AnthropicError" in first.reason, first
    assert rw.calls[0].failed and rw.disabled is None
    assert isinstance(rw.rewrite(_ir(), _site(), _card()), Applied)


def test_the_estimate_counts_tokens_with_the_api_and_falls_back_offline() -> None:
    config = LLMConfig(model="claude-test", price=Price(input=1.0, output=2.0, cache_write=1.25,
                                                        cache_read=0.1), max_tokens=100)
    mock = Mock(_message(_reply(NEW_REGION)), count=12345)
    rw, _ = mock.rewriter(config)
    assert rw.input_tokens("hello") == (12345, "api")
    assert rw.estimate_usd("hello") == pytest.approx((12345 * 1.25 + 100 * 2.0) / 1e6)
    sent = mock.counted[-1]
    assert sent["model"] == "claude-test" and sent["messages"][0]["content"] == "hello"
    assert sent["system"][-1]["cache_control"] == {"type": "ephemeral"}

    def offline(request: Any) -> Any:
        raise httpx.ConnectError("no network", request=request)

    rw, _ = Mock(_message(_reply(NEW_REGION)), count=offline).rewriter(
        LLMConfig(model="claude-test", max_retries=0))
    tokens, how = rw.input_tokens("x" * 3000)
    assert how == "estimate" and tokens >= 1000


def test_two_requests_in_flight_reserve_their_worst_case_together() -> None:
    """The budget covers requests running at once: while one is in flight its worst case is
    reserved, so a second that would pass the budget with it is refused without a request."""
    import threading

    entered, release = threading.Event(), threading.Event()

    def slow(request: Any) -> Any:
        if not entered.is_set():  # the first request waits until the second was decided
            entered.set()
            release.wait(10)
        return httpx.Response(200, json=_message(_reply(NEW_REGION)))

    mock = Mock(slow, count=10)
    config = LLMConfig(model="claude-test", price=Price(input=1.0, output=10.0,
                                                        cache_write=1.0, cache_read=1.0),
                       max_tokens=60_000, budget_usd=1.0)  # worst case ~ $0.6 per request
    rw, _ = mock.rewriter(config)
    results: list[Any] = []
    first = threading.Thread(target=lambda: results.append(rw.rewrite(_ir(), _site(), _card())))
    first.start()
    assert entered.wait(10)
    second = rw.rewrite(_ir(), _site(), _card())
    release.set()
    first.join(10)
    assert isinstance(second, Skipped) and second.reason.startswith("llm budget"), second
    assert isinstance(results[0], Applied) and len(mock.requests) == 1


def test_prices_follow_the_model() -> None:
    assert LLMConfig().price == MODELS[LLMConfig().model]
    haiku = LLMConfig.for_model("claude-haiku-4-5")
    assert haiku.price.input < LLMConfig.for_model("claude-opus-4-1").price.input
    assert price_of("claude-sonnet-4-5-20250929") == MODELS["claude-sonnet-4-5"]
    with pytest.raises(BadInputError, match="unknown model 'gpt-4'"):
        LLMConfig.for_model("gpt-4")


def test_the_usage_report_shows_cache_writes_then_reads() -> None:
    first = {"input_tokens": 100, "output_tokens": 50, "cache_creation_input_tokens": 4000,
             "cache_read_input_tokens": 0}
    second = {"input_tokens": 100, "output_tokens": 50, "cache_creation_input_tokens": 0,
              "cache_read_input_tokens": 4000}
    mock = Mock(_message(_reply(NEW_REGION), first), _message(_reply(NEW_REGION), second))
    rw, _ = mock.rewriter()
    rw.rewrite(_ir(), _site(), _card())
    rw.rewrite(_ir(), _site(), _card())
    report = rw.usage_report()
    assert report["calls"] == 2 and report["failed"] == 0 and report["attempts"] == 2
    assert report["cache_creation_input_tokens"] == 4000
    assert report["cache_read_input_tokens"] == 4000
    assert report["spent_usd"] == pytest.approx(rw.spent_usd)


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


def test_sdk_errors_the_rewriter_catches_exist() -> None:
    # The failure handling relies on these SDK classes; a renamed class would let errors out.
    assert issubclass(anthropic.APITimeoutError, anthropic.APIConnectionError)
    assert issubclass(anthropic.APIStatusError, anthropic.APIError)
    assert issubclass(anthropic.APIError, anthropic.AnthropicError)


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
