"""One streamed completion, timed from its intended send time, and the endpoint's preflight.

Timing (benchmarking.md pitfalls 2-5): every latency counts from the moment the schedule meant
the request to leave (not when the client got round to it), so time queued in the client counts.
TTFT ends at the first stream chunk that carries a choice (as vLLM's benchmark), ITL are the gaps
between such chunks (chunks are not tokens), end-to-end ends with the stream. Token counts come from
the server's ``usage`` (``stream_options.include_usage``); only a server without it falls back to
counting chunks, and the result says so.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field

import aiohttp

from llmfleet.probe.config import ProbeError
from llmfleet.rollout import SERVED_BY_HEADER


@dataclass
class Planned:
    index: int
    cls: str
    intended_s: float  # from the trial's start
    prompt: str
    prompt_tokens: int  # asked
    output_tokens: int  # asked
    temperature: float
    top_p: float
    measured: bool  # False: warm-up, excluded from the metrics


@dataclass
class Result:
    index: int
    cls: str
    intended_s: float
    measured: bool
    prompt_tokens_asked: int
    output_tokens_asked: int
    lag_s: float = 0.0
    ok: bool = False
    error_kind: str | None = None  # timeout, stall, http, malformed, connect, no_tokens, cancelled
    error: str | None = None
    ttft_s: float | None = None
    e2e_s: float | None = None  # until the end (or the failure), from the intended send time
    itl_s: list[float] = field(default_factory=list)
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    token_count_method: str = "usage"
    chunks: int = 0
    done_s: float | None = None  # from the trial's start
    good: bool = False  # met every SLO of its class and the overall ones (set by load.judge)
    served_by: str | None = None  # the server a load balancer says answered (rollout.SERVED_BY_HEADER)

    def latency_or_inf(self, which: str) -> float:
        """ttft_s or e2e_s of a request that succeeded; inf for a failure (it counts against the SLA)."""
        value = getattr(self, which)
        return value if self.ok and value is not None else float("inf")

    def metric_s(self, metric: str) -> float | None:
        """ttft, tpot or e2e (s): inf for a failure; None for the TPOT of a one-token answer (it has none)."""
        if not self.ok:
            return float("inf")
        return self.tpot_s if metric == "tpot" else getattr(self, f"{metric}_s")

    @property
    def tpot_s(self) -> float | None:
        if self.ok and self.completion_tokens and self.completion_tokens > 1 and self.e2e_s is not None \
                and self.ttft_s is not None:
            return (self.e2e_s - self.ttft_s) / (self.completion_tokens - 1)
        return None


def auth_headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def payload(model: str, p: Planned, ignore_eos: bool) -> dict:
    body = {"model": model, "prompt": p.prompt, "max_tokens": p.output_tokens, "temperature": p.temperature,
            "top_p": p.top_p, "stream": True, "stream_options": {"include_usage": True}}
    if ignore_eos:
        body["ignore_eos"] = True  # vLLM's extension: lengths are what was asked, not caps
    return body


async def send(session: aiohttp.ClientSession, url: str, headers: dict, model: str, p: Planned, t0: float,
               ignore_eos: bool, request_timeout_s: float, stall_timeout_s: float, r: Result | None = None) -> Result:
    """Send ``p`` at t0 + p.intended_s (the caller sleeps until then) and follow its stream, filling ``r``
    (new if None: the caller may pass one to watch its progress)."""
    r = r or Result(p.index, p.cls, p.intended_s, p.measured, p.prompt_tokens, p.output_tokens)
    intended = t0 + p.intended_s
    now = time.perf_counter
    r.lag_s = max(0.0, now() - intended)
    last = None
    done_at = None  # when [DONE] came: the end of the answer (the stream is read on to its end, so that the
    # connection goes back to the pool instead of being closed: a new TCP connection per request costs the
    # client more than the request itself at hundreds per second)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + request_timeout_s - (now() - intended)
    try:
        # one timer for both limits: the request's deadline, and (once the answer streams) nothing for
        # stall_timeout_s, moved on with each line (a timer per line, not a task per line)
        async with asyncio.timeout_at(deadline) as limit:
            async with session.post(url, json=payload(model, p, ignore_eos), headers=headers) as resp:
                r.served_by = resp.headers.get(SERVED_BY_HEADER)
                if resp.status != 200:
                    body = (await resp.text())[:300]
                    r.error_kind, r.error = "http", f"HTTP {resp.status}: {_message(body)}"
                    return r
                while True:
                    limit.reschedule(min(deadline, loop.time() + stall_timeout_s))
                    line = await resp.content.readline()
                    if not line:
                        break
                    if done_at is not None:
                        continue
                    line = line.strip()
                    if not line or line.startswith(b":"):
                        continue
                    if not line.startswith(b"data:"):
                        r.error_kind = "malformed"
                        r.error = f"malformed stream line (not 'data: ...'): {line[:80]!r}"
                        return r
                    data = line[5:].strip()
                    if data == b"[DONE]":
                        done_at = now()
                        continue
                    try:
                        chunk = json.loads(data)
                        choices = chunk.get("choices")
                        usage = chunk.get("usage")
                    except (ValueError, AttributeError):
                        r.error_kind = "malformed"
                        r.error = f"malformed stream chunk (not a JSON object): {data[:80]!r}"
                        return r
                    t = now()
                    if choices:
                        if last is None:
                            r.ttft_s = t - intended
                        else:
                            r.itl_s.append(t - last)
                        last = t
                        r.chunks += 1
                    if usage:
                        r.prompt_tokens = usage.get("prompt_tokens")
                        r.completion_tokens = usage.get("completion_tokens")
    except TimeoutError:
        if done_at is None:  # (after [DONE], a server that keeps the stream open costs only the connection)
            _timed_out(r, loop.time() >= deadline - 0.001, request_timeout_s, stall_timeout_s)
            return r
    except aiohttp.ClientConnectionError as exc:
        r.error_kind, r.error = "connect", f"connection failed: {exc}"
        return r
    except asyncio.CancelledError:
        r.error_kind, r.error = "cancelled", "still running when the trial stopped (counted as failed)"
        raise
    finally:
        end = done_at if done_at is not None else now()
        r.e2e_s = end - intended
        r.done_s = end - t0
    return _finish(r)


def _timed_out(r: Result, past_deadline: bool, request_timeout_s: float, stall_timeout_s: float) -> None:
    """The error of a request its timer ended: past its deadline (timeout), or a stream that stalled."""
    if past_deadline:
        r.error_kind = "timeout"
        r.error = f"no complete answer within {request_timeout_s:g} s of the intended send time"
    else:
        r.error_kind = "stall"
        r.error = f"the stream stalled: nothing for {stall_timeout_s:g} s after {r.chunks} chunk(s)"


def _finish(r: Result) -> Result:
    """The verdict on a stream read to its end: ok with a token at least; counted by chunks where the
    server sent no usage."""
    if r.chunks == 0:
        r.error_kind, r.error = "no_tokens", "the stream ended without any token"
        return r
    if r.completion_tokens is None:
        r.completion_tokens = r.chunks
        r.token_count_method = "chunks (the server sent no usage)"
    r.ok = True
    return r


def _message(body: str) -> str:
    try:
        data = json.loads(body)
        err = data.get("error", data)
        return str(err.get("message", err) if isinstance(err, dict) else err)[:200]
    except ValueError:
        return body[:200]


@dataclass
class Endpoint:
    """What the preflight learnt about the endpoint."""

    base_url: str
    model: str
    max_model_len: int | None
    ignore_eos: bool
    tokens_per_word: float | None
    server: str | None  # e.g. "vllm-0.32.0-..." (system_fingerprint)
    version: str | None = None  # the server's /version (vLLM's): picks the names of its /metrics


async def preflight(base_url: str, model: str, api_key: str | None, timeout_s: float = 30.0,
                    calibrate: bool = False) -> Endpoint:
    """Before any load: reachable, the key accepted, the model served, ignore_eos understood.
    Each failure is a ProbeError naming the URL, what was wrong and the fix."""
    headers = auth_headers(api_key)
    base = base_url.rstrip("/")
    to = aiohttp.ClientTimeout(total=timeout_s)
    try:
        async with aiohttp.ClientSession(timeout=to) as s:
            async with s.get(f"{base}/v1/models", headers=headers) as resp:
                body = await resp.text()
                if resp.status in (401, 403):
                    have = "the API key given" if api_key else "no API key"
                    raise ProbeError(f"{base}: refused {have} (HTTP {resp.status} on /v1/models) (fix: "
                                     "--api-key-file FILE or LLMFLEET_API_KEY with the server's key)")
                if resp.status != 200:
                    raise ProbeError(f"{base}/v1/models answered HTTP {resp.status}: {_message(body)} "
                                     "(fix: the base URL of an OpenAI-compatible server, without /v1)")
                try:
                    models = {m["id"]: m for m in json.loads(body)["data"]}
                except (ValueError, KeyError, TypeError) as exc:
                    raise ProbeError(f"{base}/v1/models: not an OpenAI model list ({body[:100]!r})") from exc
            if model not in models:
                served = sorted(models)
                raise ProbeError(f"{base}: model {model!r} is not served there; it serves: "
                                 f"{', '.join(served) or 'nothing'} (fix: --model {served[0] if served else '...'})")
            max_len = models[model].get("max_model_len")
            ignore_eos, server = True, None
            test = Planned(0, "preflight", 0.0, "Hello", 1, 2, 0.0, 1.0, False)
            for attempt in (True, False):
                async with s.post(f"{base}/v1/completions", json=payload(model, test, attempt),
                                  headers=headers) as resp:
                    text = await resp.text()
                    if resp.status == 200:
                        ignore_eos = attempt
                        for line in text.splitlines():
                            if line.startswith("data: {"):
                                server = json.loads(line[6:]).get("system_fingerprint") or server
                        break
                    if not (attempt and resp.status == 400 and "ignore_eos" in text):
                        raise ProbeError(f"{base}/v1/completions answered HTTP {resp.status}: {_message(text)}")
            version = None
            async with s.get(f"{base}/version", headers=headers) as resp:
                if resp.status == 200:
                    try:
                        version = str((await resp.json(content_type=None)).get("version")) or None
                    except (ValueError, AttributeError):
                        version = None
            per_word = None
            if calibrate:
                from llmfleet.probe.prompts import _WORDS
                sample = " ".join(_WORDS[:200])
                async with s.post(f"{base}/tokenize", json={"model": model, "prompt": sample},
                                  headers=headers) as resp:
                    if resp.status == 200:
                        count = (await resp.json()).get("count")
                        per_word = count / len(sample.split()) if count else None
    except aiohttp.ClientConnectorError as exc:
        raise ProbeError(f"{base}: cannot connect ({exc.os_error.strerror if exc.os_error else exc}) "
                         "(fix: check the URL and port, and that the server is running: "
                         "systemctl status vllm on the host)") from exc
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise ProbeError(f"{base}: no usable answer within {timeout_s:g} s ({type(exc).__name__}: {exc}) "
                         "(fix: check that the server is up and not overloaded)") from exc
    return Endpoint(base, model, max_len, ignore_eos, per_word, server, version)
