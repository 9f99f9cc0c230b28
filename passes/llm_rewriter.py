"""The LLM rewriter back-end: a `Rewriter` that asks Claude (Anthropic Messages API) to perform
one pass or SkillCard at one anchored region of a kernel.

What a caller may rely on:
- The prompt carries the card's fields (its carrier verbatim), the anchored region (the exact
  bytes of `site.span`) and the surrounding kernel text; the model is asked for one fenced code
  block holding only the replacement of that region, between two marker lines.
- The reply is *checked before it becomes an edit*. It is rejected, with a reason, when it is
  truncated or malformed (no single fenced block, no markers, an API-shaped body without text),
  when it touches anything outside the region (text outside the markers, or the region's
  neighbouring lines re-emitted inside it), when it changes nothing, or when the edited kernel
  does not parse (`kir.parse`). A rejection is a `Failed` whose `error` starts with
  `"llm reply rejected:"`; callers record it as risk evidence.
- The result's single `Edit` lies inside `site.span`; nothing else of the kernel changes.
- Spend is counted in USD from each reply's `usage` with the prices of the chosen model
  (`MODELS`; input, output, cache-write and cache-read tokens). Before every request the worst
  case of that request is priced: its input tokens as counted by the API's token-counting
  endpoint (`messages.count_tokens`, free of charge), or, where that cannot answer, estimated
  as characters / `CHARS_PER_TOKEN` (an over-count for code), every one priced at the dearest
  input rate, plus `max_tokens` of output. A request that could take the spend past the budget
  is not sent and the rewriter answers `Skipped` (reason starting `"llm budget"`). An attempt
  that got no reply (a timeout, a dropped connection) may still have been billed: it is charged
  its worst case.
- The SkillCard library is sent as the system prompt's last block with
  `cache_control: {"type": "ephemeral"}`, so it is a cached prefix shared by every request;
  `usage_report()` says how many prefix tokens were written to and read from the cache (a
  prefix under the model's minimum cacheable length is never cached: reads stay 0).
- Retries are the SDK's own (`max_retries` of the client: exponential back-off with jitter,
  `retry-after` / `retry-after-ms` honoured, the `x-should-retry` header obeyed; 408, 409, 429,
  5xx, timeouts and connection errors are retried). What is left after them, and any other SDK
  error (`anthropic.AnthropicError`), gives `Skipped` with a one-line reason, so a chain falls
  through to the next back-end and an optimize run goes on. Every failed call is recorded in
  `calls` like a successful one.
- A refused key or an unknown model (HTTP 401, 403, 404) is not retried: the first one turns
  the rewriter off for the rest of its life (`disabled`), and every later `rewrite` answers
  `Skipped` with that one reason without a request.
- Without `ANTHROPIC_API_KEY` (and no key given) the rewriter is *unavailable*: `rewrite`
  answers `Skipped(NO_KEY_MESSAGE)` and never touches the network; `available()` says so.
  `default_rewriter()` builds the chain deterministic-then-LLM, or deterministic only (with the
  message) when no key is set.

The `anthropic` SDK is imported lazily, when a client is first needed.
"""
from __future__ import annotations

import os
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from passes.base import Applied, Failed, Pass, PassContext, PassResult, Site, Skipped
from passes.rewriter import CardLike, ChainRewriter, DeterministicRewriter, Direction, Rewriter

if TYPE_CHECKING:
    from kir import KernelIR

NO_KEY_MESSAGE = ("ANTHROPIC_API_KEY is not set: the LLM rewriter is off and only the passes' "
                  "deterministic rewrites are used")
REJECTED = "llm reply rejected"
BEGIN_MARKER = "@@@ KLINEAGE REGION BEGIN @@@"
END_MARKER = "@@@ KLINEAGE REGION END @@@"

# HTTP statuses that say the key or the model is wrong: retrying cannot help, and every later
# request would fail the same way.
FATAL_STATUS = frozenset({401, 403, 404})
#: Characters per token used to price a request before it is sent when the token-counting
#: endpoint cannot answer (no network in tests, an old SDK). Code tokenizes at 3.5-4 characters
#: per token; 3 over-counts, so the estimate errs towards refusing a request.
CHARS_PER_TOKEN = 3.0


@dataclass(frozen=True, slots=True)
class Price:
    """USD per million tokens, by kind of token (defaults: Claude Opus 4.6 list prices; cache
    writes are 5-minute writes, 1.25x input; cache reads 0.1x input)."""

    input: float = 5.0
    output: float = 25.0
    cache_write: float = 6.25
    cache_read: float = 0.5

    def cost(self, usage: Mapping[str, int]) -> float:
        """USD for one reply's usage (`input_tokens`, `output_tokens`,
        `cache_creation_input_tokens`, `cache_read_input_tokens`; missing counts as 0)."""
        return (usage.get("input_tokens", 0) * self.input
                + usage.get("output_tokens", 0) * self.output
                + usage.get("cache_creation_input_tokens", 0) * self.cache_write
                + usage.get("cache_read_input_tokens", 0) * self.cache_read) / 1e6


def _list_price(input_usd: float, output_usd: float) -> Price:
    return Price(input=input_usd, output=output_usd, cache_write=input_usd * 1.25,
                 cache_read=input_usd * 0.1)


#: Models the rewriter knows the prices of (list prices, USD per million tokens). A dated id
#: (`claude-sonnet-4-5-20250929`) has the prices of its undated name. The first is the default.
MODELS: dict[str, Price] = {
    "claude-opus-4-6": _list_price(5.0, 25.0),
    "claude-opus-4-5": _list_price(5.0, 25.0),
    "claude-sonnet-4-5": _list_price(3.0, 15.0),
    "claude-haiku-4-5": _list_price(1.0, 5.0),
    "claude-opus-4-1": _list_price(15.0, 75.0),
    "claude-sonnet-4-0": _list_price(3.0, 15.0),
    "claude-sonnet-4": _list_price(3.0, 15.0),
}
DEFAULT_MODEL = next(iter(MODELS))


def price_of(model: str) -> Price:
    """The list prices of `model`; `BadInputError` for a model not in `MODELS` (its spend could
    not be bounded)."""
    from kir.errors import BadInputError  # noqa: PLC0415

    name = re.sub(r"-\d{8}$", "", model)
    if name not in MODELS:
        raise BadInputError(f"unknown model '{model}': no prices for it (known: "
                            f"{', '.join(MODELS)}; a dated id of one of them also works)")
    return MODELS[name]


@dataclass(frozen=True, slots=True)
class LLMConfig:
    """Everything that shapes the requests; a value, so runs can record it. `price` must be the
    model's (`for_model` builds a config that keeps them together)."""

    model: str = DEFAULT_MODEL
    temperature: float | None = None
    """Sampling temperature; None leaves the model's default (some models refuse one)."""
    max_tokens: int = 8192
    price: Price = field(default_factory=Price)
    budget_usd: float = 10.0
    """Total spend this rewriter may reach; requests that could exceed it are not sent."""
    max_retries: int = 4
    """Retries of one request by the SDK (its back-off, `retry-after`, `x-should-retry`)."""
    timeout_s: float = 120.0
    context_lines: int = 40
    """Lines of kernel shown on each side of the region when the kernel is long."""
    full_kernel_lines: int = 400
    """Kernels up to this many lines are shown whole."""

    @classmethod
    def for_model(cls, model: str, **fields: Any) -> LLMConfig:
        """A config for `model` with its list prices (`price_of`; unknown model:
        `BadInputError`)."""
        return cls(model=model, price=price_of(model), **fields)


@dataclass(frozen=True, slots=True)
class CallRecord:
    """One request sent to the API, successful or not. `attempts` counts the HTTP attempts the
    SDK made (retries included); `outcome` is "ok", why the reply was unusable, or the error
    ("HTTP 401: ...", "timeout: ...", ...); `cost_usd` is from `usage`, or for attempts that
    got no reply their worst case (they may have been billed)."""

    model: str
    usage: Mapping[str, int]
    cost_usd: float
    attempts: int
    outcome: str

    @property
    def failed(self) -> bool:
        return self.outcome != "ok"


@dataclass(frozen=True, slots=True)
class Reply:
    """A parsed reply: the replacement text of the region, or the reason it was rejected."""

    replacement: str | None
    reason: str = ""


class BudgetExceeded(Exception):
    """Raised inside the rewriter when a request would exceed the budget (turned into Skipped)."""


class _Failed(Exception):
    """A request that failed for good (after the SDK's retries); the message is one line."""


class LLMRewriter:
    """A `Rewriter` (name "llm") backed by the Anthropic Messages API. Not a value object: it
    holds the client and the running spend (thread-safe)."""

    name = "llm"

    def __init__(self, config: LLMConfig | None = None, *, api_key: str | None = None,
                 library: str = "", client: Any = None, http_client: Any = None) -> None:
        """`library` is the card library text sent as the cached system prefix (see
        `set_library`). `client` (an `anthropic.Anthropic`) or `http_client` (an httpx client
        handed to the SDK, e.g. one with a mock transport) replace the default network
        client."""
        self.config = config or LLMConfig()
        self._api_key = api_key if api_key is not None else os.environ.get("ANTHROPIC_API_KEY")
        self._client = client
        self._http_client = http_client
        self._library = library
        self._lock = threading.Lock()
        self._spent = 0.0
        self._reserved = 0.0  # worst-case cost of requests in flight
        self._attempts = threading.local()  # HTTP attempts of this thread's current request
        self.disabled: str | None = None
        """Why the rewriter turned itself off (a refused key or unknown model), else None."""
        self.calls: list[CallRecord] = []

    # -- state ----------------------------------------------------------------------------
    def available(self) -> tuple[bool, str]:
        """(True, "") when requests can be made, else (False, why)."""
        if self.disabled is not None:
            return False, self.disabled
        if self._client is None and not self._api_key:
            return False, NO_KEY_MESSAGE
        return True, ""

    @property
    def spent_usd(self) -> float:
        """USD spent so far: the usage the API reported, plus the worst case of attempts that
        got no reply."""
        return self._spent

    @property
    def remaining_usd(self) -> float:
        return max(0.0, self.config.budget_usd - self._spent)

    def usage_report(self) -> dict[str, Any]:
        """Totals of the calls so far: {"model", "calls", "failed", "attempts", "input_tokens",
        "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens",
        "spent_usd", "disabled"}. Cache reads of 0 over several calls mean the library prefix
        was not cached (e.g. shorter than the model's minimum cacheable length)."""
        with self._lock:
            calls = list(self.calls)
            spent = self._spent
        totals = {key: sum(int(c.usage.get(key, 0)) for c in calls) for key in _USAGE_KEYS}
        return {"model": self.config.model, "calls": len(calls),
                "failed": sum(c.failed for c in calls),
                "attempts": sum(c.attempts for c in calls), **totals,
                "spent_usd": round(spent, 6), "disabled": self.disabled}

    def set_library(self, text: str) -> None:
        """Replace the cached prefix (the rendered card library)."""
        self._library = text

    # -- the Rewriter protocol ------------------------------------------------------------
    def rewrite(self, ir: KernelIR, site: Site, card_or_pass: Pass | type[Pass] | CardLike,
                ctx: PassContext | None = None, *, direction: Direction = "optimize"
                ) -> PassResult:
        ok, why = self.available()
        if not ok:
            return Skipped(why)
        source = ir.source if isinstance(ir.source, bytes) else str(ir.source).encode()
        start, end = site.span
        if not (0 <= start <= end <= len(source)) or (start, end) == (0, 0):
            return Skipped(f"site {site.anchor} has no usable region {site.span}")
        prompt = build_prompt(ir, source, site, card_or_pass, ctx, direction,
                              self.config.context_lines, self.config.full_kernel_lines)
        try:
            text = self._request(prompt)
        except BudgetExceeded as exc:
            return Skipped(str(exc), {"spent_usd": round(self._spent, 6),
                                      "budget_usd": self.config.budget_usd})
        except _Failed as exc:
            return Skipped(f"llm request failed: {exc}")
        if isinstance(text, Reply):  # the body was not a usable message
            return Failed(f"{REJECTED}: {text.reason}")
        reply = extract_replacement(text, source, start, end)
        if reply.replacement is None:
            return Failed(f"{REJECTED}: {reply.reason}")
        return _apply(ir, start, end, reply.replacement)

    # -- the request ----------------------------------------------------------------------
    def _system_blocks(self) -> list[dict[str, Any]]:
        blocks: list[dict[str, Any]] = [{"type": "text", "text": SYSTEM_INSTRUCTIONS}]
        if self._library:
            blocks.append({"type": "text", "text": "# SkillCard library\n\n" + self._library})
        # The breakpoint on the last system block caches instructions + library together.
        blocks[-1]["cache_control"] = {"type": "ephemeral"}
        return blocks

    def input_tokens(self, prompt: str) -> tuple[int, str]:
        """(input tokens of a request with this user prompt, how they were counted): "api"
        from `messages.count_tokens`, or "estimate" (characters / `CHARS_PER_TOKEN`) where the
        endpoint cannot answer. A refused key or unknown model disables the rewriter here
        already (see `disabled`)."""
        import anthropic  # noqa: PLC0415 — lazy: the SDK is only needed when a key is set

        try:
            counted = self._get_client().messages.count_tokens(
                model=self.config.model, system=self._system_blocks(),
                messages=[{"role": "user", "content": prompt}], timeout=self.config.timeout_s)
            tokens = getattr(counted, "input_tokens", None)
            if isinstance(tokens, int) and tokens >= 0:
                return tokens, "api"
        except anthropic.APIStatusError as exc:
            if exc.status_code in FATAL_STATUS:
                self._disable(exc)
                raise _Failed(self.disabled) from None
        except (anthropic.AnthropicError, AttributeError, TypeError):
            pass  # offline, or an SDK without the endpoint: the estimate below
        chars = len(SYSTEM_INSTRUCTIONS) + len(self._library) + len(prompt)
        return int(chars / CHARS_PER_TOKEN) + 1, "estimate"

    def estimate_usd(self, prompt: str) -> float:
        """The most one request with this user prompt can cost: every input token (prefix and
        prompt, counted by `input_tokens`) at the dearest input rate (a prefix token may be a
        cache write), and `max_tokens` of output."""
        price = self.config.price
        tokens, _ = self.input_tokens(prompt)
        return (tokens * max(price.cache_write, price.input, price.cache_read)
                + self.config.max_tokens * price.output) / 1e6

    def _request(self, prompt: str) -> str | Reply:
        estimate = self.estimate_usd(prompt)
        with self._lock:
            if self._spent + self._reserved + estimate > self.config.budget_usd:
                raise BudgetExceeded(
                    f"llm budget: ${self._spent:.4f} spent of ${self.config.budget_usd:.4f}; "
                    f"this request may cost up to ${estimate:.4f}")
            self._reserved += estimate
        try:
            return self._call(prompt, estimate)
        finally:
            with self._lock:
                self._reserved -= estimate

    def _call(self, prompt: str, estimate: float) -> str | Reply:
        import anthropic  # noqa: PLC0415

        client = self._get_client()
        kwargs: dict[str, Any] = {
            "model": self.config.model, "max_tokens": self.config.max_tokens,
            "system": self._system_blocks(),
            "messages": [{"role": "user", "content": prompt}],
            "timeout": self.config.timeout_s,
        }
        if self.config.temperature is not None:
            # Sent as a raw body field: the SDK's typed signature no longer lists it.
            kwargs["extra_body"] = {"temperature": self.config.temperature}
        self._attempts.sent = self._attempts.answered = 0
        try:
            message = client.messages.create(**kwargs)
        except anthropic.APIStatusError as exc:
            reason = f"HTTP {exc.status_code}: {_short(exc)}"
            if exc.status_code in FATAL_STATUS:
                self._disable(exc)
                reason = str(self.disabled)
            raise self._failure(reason, estimate) from None
        except anthropic.APIConnectionError as exc:  # includes APITimeoutError
            kind = "timeout" if isinstance(exc, anthropic.APITimeoutError) else "connection"
            raise self._failure(f"{kind}: {_short(exc)}", estimate) from None
        except anthropic.AnthropicError as exc:  # any other SDK error: this request only
            raise self._failure(f"{type(exc).__name__}: {_short(exc)}", estimate) from None
        usage = _usage_of(message)
        cost = self.config.price.cost(usage) + self._unanswered() * estimate
        text, reason = _text_of(message)
        self._record(CallRecord(self.config.model, usage, cost, self._sent(),
                                "ok" if reason == "" else reason))
        return text if reason == "" else Reply(None, reason)

    def _failure(self, reason: str, estimate: float) -> _Failed:
        """Record a failed call (attempts without a reply charged their worst case)."""
        attempts = max(self._sent(), 1)
        unanswered = self._unanswered()
        self._record(CallRecord(self.config.model, {k: 0 for k in _USAGE_KEYS},
                                unanswered * estimate, attempts, reason))
        more = f" (after {attempts} attempts)" if attempts > 1 else ""
        return _Failed(f"{reason}{more}")

    def _record(self, call: CallRecord) -> None:
        with self._lock:
            self._spent += call.cost_usd
            self.calls.append(call)

    def _disable(self, exc: Any) -> None:
        what = {401: "the API key was refused", 403: "the API key may not use this model",
                404: f"model '{self.config.model}' was not found"}.get(exc.status_code, "")
        with self._lock:
            if self.disabled is None:
                self.disabled = (f"llm rewriter off: {what} (HTTP {exc.status_code}: "
                                 f"{_short(exc)})")

    def _sent(self) -> int:
        return int(getattr(self._attempts, "sent", 0))

    def _unanswered(self) -> int:
        return max(0, self._sent() - int(getattr(self._attempts, "answered", 0)))

    def _get_client(self) -> Any:
        if self._client is None:
            import anthropic  # noqa: PLC0415

            http = self._http_client
            if http is None:
                http = anthropic.DefaultHttpxClient()
            # Count the HTTP attempts of the SDK's retries (per thread: each request's
            # retries run in the thread that made it); attempts without a response may
            # still have been billed.
            hooks = getattr(http, "event_hooks", None)
            if isinstance(hooks, dict):
                http.event_hooks = {
                    "request": [*hooks.get("request", []), self._on_request],
                    "response": [*hooks.get("response", []), self._on_response]}
            self._client = anthropic.Anthropic(api_key=self._api_key,
                                               max_retries=self.config.max_retries,
                                               timeout=self.config.timeout_s, http_client=http)
        return self._client

    def _on_request(self, request: Any) -> None:
        if str(getattr(getattr(request, "url", None), "path", "")).endswith("/messages"):
            self._attempts.sent = self._sent() + 1

    def _on_response(self, response: Any) -> None:
        request = getattr(response, "request", None)
        if str(getattr(getattr(request, "url", None), "path", "")).endswith("/messages"):
            self._attempts.answered = int(getattr(self._attempts, "answered", 0)) + 1


_USAGE_KEYS = ("input_tokens", "output_tokens", "cache_creation_input_tokens",
               "cache_read_input_tokens")


def default_rewriter(config: LLMConfig | None = None, *, library: str = "",
                     api_key: str | None = None) -> tuple[Rewriter, str]:
    """The rewriter materialization uses: deterministic rules first, then the LLM.

    Returns (rewriter, note): without an API key the rewriter is deterministic only and `note`
    is `NO_KEY_MESSAGE`; otherwise `note` is "" and the LLM back-end is `rewriter.backends[1]`.
    """
    llm = LLMRewriter(config, api_key=api_key, library=library)
    ok, why = llm.available()
    if not ok:
        return DeterministicRewriter(), why
    return ChainRewriter((DeterministicRewriter(), llm)), ""


# -- the prompt ---------------------------------------------------------------------------------
SYSTEM_INSTRUCTIONS = f"""You are a GPU kernel engineer working inside KLineage. You apply one \
optimization (or, when asked, remove one) at one anchored region of a kernel.

Rules for your answer:
1. Answer with exactly one fenced code block and nothing else inside it but:
   the line {BEGIN_MARKER}
   the new text of the region
   the line {END_MARKER}
2. Replace only the region. Do not repeat, change or add any line that lies outside it; the
   surrounding kernel is shown for context only and stays as it is.
3. The result must parse, keep the kernel's signature and outputs, and stay numerically correct
   within the case's tolerance. Do not call PyTorch or any library to do the work.
4. A SkillCard's carrier is a code-bearing hint to instantiate on this kernel, not text to paste.
"""


def build_prompt(ir: Any, source: bytes, site: Site, card_or_pass: Any,
                 ctx: PassContext | None, direction: Direction, context_lines: int,
                 full_kernel_lines: int) -> str:
    """The user message for one request (the library goes in the cached system prefix)."""
    start, end = site.span
    before = source[:start].decode("utf-8", "replace")
    region = source[start:end].decode("utf-8", "replace")
    after = source[end:].decode("utf-8", "replace")
    total_lines = before.count("\n") + region.count("\n") + after.count("\n") + 1
    if total_lines > full_kernel_lines:
        before = "".join(before.splitlines(keepends=True)[-context_lines:])
        after = "".join(after.splitlines(keepends=True)[:context_lines])
        shown = f"an excerpt ({context_lines} lines each side of the region)"
    else:
        shown = "the whole kernel"
    language = str(getattr(getattr(ir, "language", None), "value", getattr(ir, "language", "")))
    action = ("Apply" if direction == "optimize" else "Remove (de-optimize)")
    parts = [
        f"## Task\n{action} the following at the region anchored `{site.anchor}` of this "
        f"{language} kernel{f' ({ir.path})' if getattr(ir, 'path', None) else ''}.",
        "## What to apply\n" + describe(card_or_pass),
    ]
    if site.detail:
        parts.append("## What the pass found at this site\n" + _kv(site.detail))
    if ctx is not None and ctx.facts:
        parts.append("## Facts of the target (case shape, platform)\n" + _kv(ctx.facts))
    parts.append(f"## Region to replace (exact text)\n```\n{region}\n```")
    parts.append(f"## Kernel ({shown}); the region sits between the marker lines\n```\n"
                 f"{before}\n{BEGIN_MARKER}\n{region}\n{END_MARKER}\n{after}\n```")
    parts.append("Answer with one fenced code block: the marker line, the new region, the "
                 "marker line.")
    return "\n\n".join(parts)


def describe(card_or_pass: Any) -> str:
    """The card's (or pass's) fields as prompt text; a SkillCard's carrier verbatim."""
    to_prompt = getattr(card_or_pass, "to_prompt", None)
    if callable(to_prompt):
        return str(to_prompt())
    if isinstance(card_or_pass, type) and issubclass(card_or_pass, Pass):
        card_or_pass = card_or_pass()
    if isinstance(card_or_pass, Pass):
        decl = type(card_or_pass).declaration()
        lines = [f"pass `{card_or_pass.spec()}` ({decl['category']})"]
        if type(card_or_pass).summary:
            lines.append(type(card_or_pass).summary)
        for key in ("requires", "provides", "conflicts", "preconditions"):
            if decl[key]:
                lines.append(f"{key}: {', '.join(decl[key])}")
        if card_or_pass.options():
            lines.append("options: " + _kv(card_or_pass.options()))
        return "\n".join(lines)
    name = getattr(card_or_pass, "pass_name", "?")
    options = dict(getattr(card_or_pass, "options", None) or {})
    return f"pass `{name}` with options {options}"


def _kv(mapping: Mapping[str, Any]) -> str:
    return "\n".join(f"- {k}: {v}" for k, v in mapping.items())


# -- reading the reply --------------------------------------------------------------------------
_FENCE = re.compile(r"^[ \t]*(```+|~~~+)[^\n]*\n(.*?)^[ \t]*\1[ \t]*$", re.S | re.M)


def extract_replacement(text: str, source: bytes, start: int, end: int) -> Reply:
    """The new region text from a reply, or why the reply is rejected (see module docstring)."""
    blocks = [m.group(2) for m in _FENCE.finditer(text)]
    blocks = [b for b in blocks if BEGIN_MARKER in b or END_MARKER in b] or blocks
    if not blocks:
        return Reply(None, "no fenced code block in the reply")
    if len(blocks) > 1:
        return Reply(None, f"{len(blocks)} code blocks in the reply; expected one")
    block = blocks[0]
    if block.count(BEGIN_MARKER) != 1 or block.count(END_MARKER) != 1:
        return Reply(None, "the code block lacks exactly one pair of region markers")
    head, _, rest = block.partition(BEGIN_MARKER)
    body, _, tail = rest.partition(END_MARKER)
    if head.strip() or tail.strip():
        return Reply(None, "the reply edits outside the region (text outside the markers)")
    # The markers sit on their own lines: drop the newline after BEGIN and before END.
    body = body[1:] if body.startswith("\n") else body
    body = body[:-1] if body.endswith("\n") else body
    before = source[:start].decode("utf-8", "replace")
    region = source[start:end].decode("utf-8", "replace")
    after = source[end:].decode("utf-8", "replace")
    body = _fit_edges(body, before, region)
    leaked = _reemitted_context(body, before, region, after)
    if leaked:
        return Reply(None, f"the reply edits outside the region (repeats the line {leaked!r} "
                           "that lies outside it)")
    if body == region:
        return Reply(None, "the reply leaves the region unchanged")
    return Reply(body)


def _fit_edges(body: str, before: str, region: str) -> str:
    """Match the region's edges: a region that starts after a line's indentation gets the
    model's copy of that indentation removed; trailing newlines follow the region's."""
    indent = before[before.rfind("\n") + 1:]
    if indent and not indent.strip() and body.startswith(indent):
        body = body[len(indent):]
    if not region.endswith("\n"):
        body = body.rstrip("\n")
    elif not body.endswith("\n"):
        body += "\n"
    return body


def _reemitted_context(body: str, before: str, region: str, after: str) -> str:
    """A non-trivial neighbouring line outside the region that the reply starts or ends with,
    when the region itself does not: the model copied context into its replacement, which
    would duplicate that line."""
    def significant(lines: list[str]) -> list[str]:
        return [ln.strip() for ln in lines if len(ln.strip()) >= 6]

    body_lines = significant(body.splitlines())
    region_lines = significant(region.splitlines())
    if not body_lines:
        return ""
    prev = significant(before.splitlines()[-3:])
    nxt = significant(after.splitlines()[:3])
    if prev and body_lines[0] == prev[-1] and (not region_lines or region_lines[0] != prev[-1]):
        return prev[-1]
    if nxt and body_lines[-1] == nxt[0] and (not region_lines or region_lines[-1] != nxt[0]):
        return nxt[0]
    return ""


def _apply(ir: Any, start: int, end: int, replacement: str) -> PassResult:
    """The edit as an `Applied`, or a rejection when the edited kernel does not parse."""
    import kir  # noqa: PLC0415 — kir imports the parsers
    from kir.errors import ParseError  # noqa: PLC0415

    edit = kir.Edit(kir.Span(start, end), replacement)
    try:
        new_ir = ir.apply([edit])
    except ParseError as exc:
        return Failed(f"{REJECTED}: the edited kernel does not parse: {exc}")
    errors = getattr(new_ir, "error_nodes", 0)
    errors = errors if isinstance(errors, int) else len(errors)
    # CUDA parses leniently (tree-sitter): count the error nodes the edit introduced.
    before = getattr(ir, "error_nodes", 0)
    before = before if isinstance(before, int) else len(before)
    if errors > before:
        return Failed(f"{REJECTED}: the edited kernel does not parse "
                      f"({errors - before} new syntax error(s))")
    return Applied((edit,), new_ir)


# -- API-shaped bodies ------------------------------------------------------------------------
def _usage_of(message: Any) -> dict[str, int]:
    usage = getattr(message, "usage", None)
    out: dict[str, int] = {}
    for key in ("input_tokens", "output_tokens", "cache_creation_input_tokens",
                "cache_read_input_tokens"):
        value = getattr(usage, key, None) if usage is not None else None
        out[key] = value if isinstance(value, int) and value >= 0 else 0
    return out


def _text_of(message: Any) -> tuple[str, str]:
    """(text, "") from a message, or ("", why it is unusable)."""
    content = getattr(message, "content", None)
    if not isinstance(content, list):
        return "", "malformed API response (no content list)"
    if getattr(message, "stop_reason", None) == "max_tokens":
        return "", "the reply was cut off at max_tokens"
    texts = [getattr(block, "text", None) for block in content
             if getattr(block, "type", None) == "text"]
    texts = [t for t in texts if isinstance(t, str)]
    if not texts:
        return "", "the reply holds no text"
    return "".join(texts), ""


def _short(exc: BaseException) -> str:
    """One line for an SDK error: the API's error type and message where the body has them."""
    body = getattr(exc, "body", None)
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and error.get("message"):
        text = f"{error.get('type', 'error')}: {error['message']}"
    else:
        text = str(exc)
    text = " ".join(text.split())
    return text[:200]
