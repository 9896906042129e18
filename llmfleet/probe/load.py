"""One trial: an open-loop schedule at an offered rate, sent on time, watched for saturation.

The whole schedule (send times, classes, lengths, prompts) is drawn before the first request, as
vLLM's benchmark does: inter-arrival gaps are gamma distributed with shape = burstiness (1 is a
Poisson process) and mean 1/rate, scaled so that n requests span exactly n/rate seconds.
Requests are sent when the schedule says, whatever is still in flight (open loop). Requests of
the first ``warmup_s`` are sent but not measured.

The trial stops early, and fails, as soon as the SLA is certainly broken: more than 5 % of the
measured requests (overall, or of a class with its own SLO) have failed or are already older than
the P95 limit. Saturation (a growing queue) is read from the in-flight count: its least-squares
growth over the measured window.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from dataclasses import dataclass, field
from typing import Callable

import aiohttp

from llmfleet.probe import stats
from llmfleet.probe.client import Endpoint, Planned, Result, auth_headers, send
from llmfleet.probe.config import ProbeConfig
from llmfleet.probe.prompts import PromptMaker

SLA_QUANTILE = 0.95
SPIN_S = 0.0015  # the last stretch before a send is spent yielding to the loop, not sleeping


def plan(config: ProbeConfig, rate: float, maker: PromptMaker, seed: int, requests: int | None = None,
         fixed: dict | None = None) -> list[Planned]:
    """The schedule of one trial. ``requests`` overrides the measured count (else duration x rate,
    at least min_requests); ``fixed`` (prompt_tokens, output_tokens) pins every length."""
    rng = random.Random(seed)
    n_measured = requests or max(config.min_requests, math.ceil(rate * config.duration_s))
    n_warm = 0 if requests else math.ceil(rate * config.warmup_s)
    shape = config.burstiness if config.arrivals == "gamma" else 1.0
    n = n_warm + n_measured
    # send times: cumulative gamma gaps, scaled so that the last request leaves at n / rate exactly
    # (as vLLM's benchmark does: the offered rate is then exact whatever the seed)
    times, t = [], 0.0
    for _ in range(n):
        t += rng.gammavariate(shape, 1.0 / (rate * shape))
        times.append(t)
    scale = (n / rate) / times[-1]
    names = [c.name for c in config.mix]
    weights = [c.share for c in config.mix]
    out = []
    for i in range(n):
        c = config.class_named(rng.choices(names, weights)[0])
        if fixed:
            pt, ot = fixed["prompt_tokens"], fixed["output_tokens"]
        else:
            pt = rng.randint(c.prompt_tokens.min, c.prompt_tokens.max)
            ot = rng.randint(c.output_tokens.min, c.output_tokens.max)
        out.append(Planned(i, c.name, times[i] * scale, maker.make(pt), pt, ot, c.temperature, c.top_p, i >= n_warm))
    return out


@dataclass
class Trial:
    offered_rps: float
    results: list[Result]
    stats: dict
    per_class: dict[str, dict]
    passed: bool
    reasons: list[str]
    stopped_early: bool
    saturated: bool
    backlog_growth: float  # in-flight requests gained over the measured window (least squares)
    in_flight: list[tuple[float, int]] = field(default_factory=list)


def _ages_break_sla(config: ProbeConfig, planned: list[Planned], results: dict[int, Result],
                    started: dict[int, float], t_now: float) -> str | None:
    """The reason the SLA is already certainly broken, or None."""
    groups = [(None, config.slo_p95_e2e_ms)] + [(c.name, c.slo_p95_e2e_ms) for c in config.mix if c.slo_p95_e2e_ms]
    for cls, limit_ms in groups:
        members = [p for p in planned if p.measured and (cls is None or p.cls == cls)]
        if not members:
            continue
        allowed = math.floor(len(members) * (1 - SLA_QUANTILE))
        bad = 0
        for p in members:
            r = results.get(p.index)
            if r is not None:
                bad += r.latency_or_inf("e2e_s") * 1000 > limit_ms
            elif p.index in started and (t_now - p.intended_s) * 1000 > limit_ms:
                bad += 1
        if bad > allowed:
            who = "overall" if cls is None else f"class {cls}"
            return (f"stopped early: {bad} of {len(members)} measured requests ({who}) already failed or "
                    f"took longer than the P95 limit {limit_ms:g} ms, so P95 cannot hold")
    return None


def growth(samples: list[tuple[float, int]]) -> float:
    """Least-squares slope of in-flight count x the span: requests gained over the window."""
    if len(samples) < 3:
        return 0.0
    ts = [t for t, _ in samples]
    ys = [y for _, y in samples]
    mt, my = sum(ts) / len(ts), sum(ys) / len(ys)
    var = sum((t - mt) ** 2 for t in ts)
    if var == 0:
        return 0.0
    slope = sum((t - mt) * (y - my) for t, y in zip(ts, ys, strict=True)) / var
    return slope * (ts[-1] - ts[0])


async def run(endpoint: Endpoint, api_key: str | None, config: ProbeConfig, planned: list[Planned],
              offered_rps: float, progress: Callable[[int, int, int], None] | None = None,
              stop_early: bool = True) -> Trial:
    url = f"{endpoint.base_url}/v1/completions"
    headers = auth_headers(api_key)
    results: dict[int, Result] = {}
    started: dict[int, float] = {}
    tasks: dict[int, asyncio.Task] = {}
    samples: list[tuple[float, int]] = []
    stop_reason: list[str] = []
    connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300)
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=10)
    first_measured = next((p.intended_s for p in planned if p.measured), 0.0)

    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        t0 = time.perf_counter() + 0.05

        async def one(p: Planned):
            started[p.index] = p.intended_s
            try:
                results[p.index] = await send(session, url, headers, endpoint.model, p, t0, endpoint.ignore_eos,
                                              config.request_timeout_s, config.stall_timeout_s)
            except asyncio.CancelledError:
                pass

        async def dispatch():
            # the event loop's timers wake up to a millisecond late (epoll's timeout is in whole ms):
            # sleep to just before the send time, then yield to the loop until it comes
            for p in planned:
                target = t0 + p.intended_s
                delay = target - time.perf_counter()
                if delay > SPIN_S:
                    await asyncio.sleep(delay - SPIN_S)
                while time.perf_counter() < target:
                    await asyncio.sleep(0)
                tasks[p.index] = asyncio.create_task(one(p))

        async def watch():
            while True:
                await asyncio.sleep(0.25)
                t_now = time.perf_counter() - t0
                if t_now >= first_measured:
                    samples.append((t_now, len(started) - len(results)))
                if progress:
                    progress(len(started), len(results), len(planned))
                if stop_early:
                    reason = _ages_break_sla(config, planned, results, started, t_now)
                    if reason:
                        stop_reason.append(reason)
                        return

        dispatcher = asyncio.create_task(dispatch())
        watcher = asyncio.create_task(watch())
        await asyncio.wait([dispatcher, watcher], return_when=asyncio.FIRST_COMPLETED)
        if not watcher.done():
            everything = asyncio.gather(*tasks.values())
            await asyncio.wait([everything, watcher], return_when=asyncio.FIRST_COMPLETED)
        if watcher.done() and stop_reason:
            dispatcher.cancel()
            for t in tasks.values():
                t.cancel()
            await asyncio.gather(dispatcher, *tasks.values(), return_exceptions=True)
        else:
            watcher.cancel()
        if progress:
            progress(len(started), len(results), len(planned))
    t_end = time.perf_counter() - t0
    for p in planned:  # what the trial never finished counts against the SLA
        if p.index not in results:
            r = Result(p.index, p.cls, p.intended_s, p.measured, p.prompt_tokens, p.output_tokens)
            if p.index in started:
                r.error_kind, r.error = "cancelled", "still running when the trial stopped early"
                r.e2e_s, r.done_s = t_end - p.intended_s, t_end
            else:
                r.error_kind, r.error = "not_sent", "not sent: the trial stopped early"
            results[p.index] = r
    ordered = [results[p.index] for p in planned]
    return judge(config, ordered, offered_rps, samples, bool(stop_reason), stop_reason, planned)


def judge(config: ProbeConfig, results: list[Result], offered_rps: float, samples: list[tuple[float, int]],
          stopped_early: bool, stop_reason: list[str], planned: list[Planned] | None = None) -> Trial:
    measured = [r for r in results if r.measured]
    span = (max(r.intended_s for r in measured) - min(r.intended_s for r in measured)) if len(measured) > 1 else 0
    scheduled = round((len(measured) - 1) / span, 3) if span > 0 else None
    overall = stats.summarize(results, offered_rps, scheduled)
    per_class = {c.name: stats.summarize([r for r in results if r.cls == c.name], offered_rps * c.share,
                                         window_s=overall["window_s"]) for c in config.mix}
    reasons = list(stop_reason)
    p95 = stats.p95_e2e_s(results)
    if p95 * 1000 > config.slo_p95_e2e_ms and not stopped_early:
        shown = "failed requests" if p95 == math.inf else f"{p95 * 1000:.0f} ms"
        reasons.append(f"P95 end-to-end {shown} > SLO {config.slo_p95_e2e_ms:g} ms")
    for c in config.mix:
        if c.slo_p95_e2e_ms and not stopped_early:
            cp = stats.p95_e2e_s(results, c.name)
            if cp * 1000 > c.slo_p95_e2e_ms:
                shown = "failed requests" if cp == math.inf else f"{cp * 1000:.0f} ms"
                reasons.append(f"class {c.name}: P95 end-to-end {shown} > its SLO {c.slo_p95_e2e_ms:g} ms")
    g = growth(samples)
    mean_in_flight = sum(y for _, y in samples) / len(samples) if samples else 0.0
    saturated = g > max(3.0, 0.5 * mean_in_flight)
    if saturated:
        reasons.append(f"saturated: the backlog grew by {g:.1f} requests over the measured window")
    return Trial(offered_rps, results, overall, per_class, not reasons, reasons, stopped_early, saturated,
                 round(g, 2), samples[::max(1, len(samples) // 200)])
