"""The probe's metrics. Definitions (also in the report's ``definitions``):

- TTFT: intended send time -> first stream chunk with a choice.
- TPOT (per request, as vLLM's benchmark): (E2E - TTFT) / (output tokens - 1), output tokens from
  the server's usage; requests with one output token have none.
- ITL: gaps between successive stream chunks carrying a choice, pooled over requests (chunks
  are not tokens: with speculative decoding one chunk carries several).
- E2E: intended send time -> end of the stream.
- Percentiles are over **every** measured request: a failed or timed-out request counts as worse
  than any latency (reported as null in JSON, "failed" on the terminal), so failures can never make
  the percentiles look better. Means are over successful requests.
- Output / total tokens per second: server-counted output (and prompt + output) tokens of
  successful measured requests, divided by the measured window (first intended send -> last end).
- Offered rate: the rate asked; scheduled rate: what the drawn schedule holds; sent rate: requests
  actually sent per second; completed rate: successful requests per second of the window.
- Scheduling lag: actual send minus intended send (the client's own delay).
"""

from __future__ import annotations

import math
from collections import Counter

from llmfleet.probe.client import Result

PERCENTILES = (50, 90, 95, 99)
INF = math.inf


def pct(values: list[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default) that treats inf as worse than everything."""
    if not values:
        return math.nan
    xs = sorted(values)
    rank = (len(xs) - 1) * q / 100
    lo, hi = math.floor(rank), math.ceil(rank)
    w = rank - lo
    if xs[lo] == INF or (w > 0 and xs[hi] == INF):
        return INF
    return xs[lo] + (xs[hi] - xs[lo]) * w


def dist(values: list[float], scale: float = 1000.0) -> dict:
    """mean (finite values) and percentiles, in ms; None where the percentile falls on a failure."""
    finite = [v for v in values if v != INF]
    out = {"mean": round(sum(finite) / len(finite) * scale, 3) if finite else None}
    for q in PERCENTILES:
        v = pct(values, q)
        out[f"p{q}"] = None if (v == INF or math.isnan(v)) else round(v * scale, 3)
    return out


def summarize(results: list[Result], offered_rps: float, scheduled_rps: float | None = None,
              window_s: float | None = None) -> dict:
    """Metrics of the measured requests (warm-up excluded); see the module docstring. ``window_s``:
    the trial's window, for a class's share of the throughput (else the requests' own window)."""
    m = [r for r in results if r.measured]
    ok = [r for r in m if r.ok]
    if m:
        start = min(r.intended_s for r in m)
        end = max((r.done_s for r in m if r.done_s is not None), default=start)
        window = max(end - start, 1e-9)
        sent = [r for r in m if r.error_kind != "not_sent"]
        sent_span = max(r.intended_s + r.lag_s for r in sent) - min(r.intended_s + r.lag_s for r in sent) \
            if len(sent) > 1 else 0.0
    else:
        window, sent, sent_span = 1e-9, [], 0.0
    if window_s:
        window = window_s
    out_tok = sum(r.completion_tokens or 0 for r in ok)
    prompt_tok = sum(r.prompt_tokens or 0 for r in ok)
    lags = [r.lag_s for r in sent]
    errors = Counter(r.error_kind for r in m if not r.ok)
    examples = {}
    for r in m:
        if not r.ok and r.error_kind not in examples:
            examples[r.error_kind] = r.error
    methods = sorted({r.token_count_method for r in ok})
    return {
        "requests": len(m),
        "ok": len(ok),
        "failed": len(m) - len(ok),
        "errors": dict(sorted(errors.items())),
        "error_examples": examples,
        "ttft_ms": dist([r.latency_or_inf("ttft_s") for r in m]),
        "tpot_ms": dist([r.tpot_s for r in m if r.tpot_s is not None] + [INF for r in m if not r.ok]),
        "itl_ms": dist([g for r in ok for g in r.itl_s]),
        "e2e_ms": dist([r.latency_or_inf("e2e_s") for r in m]),
        "output_tokens_per_s": round(out_tok / window, 3),
        "total_tokens_per_s": round((out_tok + prompt_tok) / window, 3),
        "offered_rps": offered_rps,
        "scheduled_rps": scheduled_rps,
        "sent_rps": round((len(sent) - 1) / sent_span, 3) if sent_span > 0 else None,
        "completed_rps": round(len(ok) / window, 3),
        "window_s": round(window, 3),
        "lag_ms": {"p50": _ms(pct(lags, 50)), "p99": _ms(pct(lags, 99)), "max": _ms(max(lags, default=math.nan))},
        "prompt_tokens": {"asked_mean": _mean([r.prompt_tokens_asked for r in ok]),
                          "server_mean": _mean([r.prompt_tokens for r in ok if r.prompt_tokens is not None])},
        "output_tokens": {"asked_mean": _mean([r.output_tokens_asked for r in ok]),
                          "server_mean": _mean([r.completion_tokens for r in ok if r.completion_tokens is not None])},
        "token_count_method": methods[0] if len(methods) == 1 else (", ".join(methods) or None),
    }


def _ms(v: float) -> float | None:
    return None if math.isnan(v) or v == INF else round(v * 1000, 3)


def _mean(xs: list[float]) -> float | None:
    return round(sum(xs) / len(xs), 2) if xs else None


def p95_e2e_s(results: list[Result], cls: str | None = None) -> float:
    """P95 end-to-end latency (s) of the measured requests (failures as inf)."""
    return pct([r.latency_or_inf("e2e_s") for r in results if r.measured and (cls is None or r.cls == cls)], 95)
