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
  successful measured requests, divided by the throughput window (the start of the measured
  schedule, as for the request rates -> the last end of a measured request), as vLLM's benchmark
  divides by its run's duration (its start, one gap before its first request, -> its last end).
- Request rates, all over one window, the schedule's span of the measured requests (from the
  intended send of the request before the first measured one, or the trial's start, to the last
  measured intended send): scheduled = measured requests / span (the offered rate, exactly, for a
  drawn schedule); sent = requests sent / (span stretched to the last actual send); completed =
  successful requests / span; goodput = good requests / span. A client and server that keep up
  read offered = scheduled = sent = completed. request_throughput_rps = successful requests /
  throughput window, as vLLM's "request throughput" (lower by the last request's latency).
- Goodput: a measured request is good if it succeeded and met every SLO of its class and the
  overall ones, each SLO's limit taken as a per-request threshold (vLLM's --goodput definition);
  goodput share = good / measured requests.
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


def summarize(results: list[Result], offered_rps: float, span: tuple[float, float],
              window_s: float | None = None) -> dict:
    """Metrics of the measured requests (warm-up excluded); see the module docstring. ``span``: the
    schedule's (start, end) of the measured requests, the window of every request rate; ``window_s``:
    the trial's throughput window, for a class's share of the throughput (else the requests' own)."""
    m = [r for r in results if r.measured]
    ok = [r for r in m if r.ok]
    sent = [r for r in m if r.error_kind != "not_sent"]
    start, end = span
    span_s = max(end - start, 1e-9)
    sent_span_s = max(max((r.intended_s + r.lag_s for r in sent), default=end), end) - start
    if m:  # from where the measured schedule starts (as vLLM's benchmark counts from its start) to the last end
        last = max((r.done_s for r in m if r.done_s is not None), default=end)
        window = max(last - start, 1e-9)
    else:
        window = 1e-9
    if window_s:
        window = window_s
    good = sum(r.good for r in m)
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
        "scheduled_rps": round(len(m) / span_s, 3),
        "sent_rps": round(len(sent) / max(sent_span_s, 1e-9), 3),
        "completed_rps": round(len(ok) / span_s, 3),
        "goodput_rps": round(good / span_s, 3),
        "good": good,
        "goodput_share": round(good / len(m), 4) if m else None,
        "request_throughput_rps": round(len(ok) / window, 3),
        "span_s": round(span_s, 3),
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


def values_s(results: list[Result], metric: str) -> list[float]:
    """A metric (s) of every measured request that has one: failures as inf (a one-token answer has no TPOT)."""
    out = []
    for r in results:
        if r.measured:
            v = r.metric_s(metric)
            if v is not None:
                out.append(v)
    return out


def meets(r: Result, slos) -> bool:
    """Succeeded, and within every SLO's limit (llmfleet.probe.config.Slo), as one request."""
    if not r.ok:
        return False
    for s in slos:
        v = r.metric_s(s.metric)
        if v is not None and v * 1000 > s.limit_ms:
            return False
    return True


def verdict(results: list[Result], slo, group: str) -> dict:
    """One SLO of one group (the mix, or a class) on the measured requests: the percentile, and whether
    it holds. A percentile that falls on a failure is null and fails."""
    vs = values_s(results, slo.metric)
    v = pct(vs, slo.q) if vs else math.nan
    value = None if (v == INF or math.isnan(v)) else round(v * 1000, 3)
    return {"group": group, "slo": slo.key, "metric": slo.metric, "percentile": slo.q, "limit_ms": slo.limit_ms,
            "value_ms": value, "requests": len(vs), "met": value is not None and value <= slo.limit_ms}
