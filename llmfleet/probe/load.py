"""One trial: an open-loop schedule at an offered rate (or a replayed trace), sent on time, watched
for saturation, judged against the SLOs and goodput.

The whole schedule (send times, classes, lengths, prompts) is drawn before the first request, as
vLLM's benchmark does: inter-arrival gaps are gamma distributed with shape = burstiness (1 is a
Poisson process) and mean 1/rate, scaled so that the n_w warm-up requests span n_w/rate seconds
and the n measured ones the next n/rate exactly (the offered rate is then what the measured part
holds, whatever the seed). Requests are sent when the schedule says, whatever is still in flight
(open loop). Requests of the first ``warmup_s`` are sent but not measured.

The trial stops early, and fails, as soon as the SLA is certainly lost: for a TTFT or E2E SLO at
percentile q, more of the group's measured requests have failed or are already past the limit (an
E2E older than it, a first token not there yet) than the percentile allows; for goodput, more
requests than ``1 - goodput_min`` of them. Saturation (a growing queue) is read from the
in-flight count: its least-squares growth over the measured window.
"""

from __future__ import annotations

import asyncio
import gc
import math
import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

import aiohttp

from llmfleet.probe import stats
from llmfleet.probe.client import Endpoint, Planned, Result, auth_headers, send
from llmfleet.probe.config import ProbeConfig, Slo
from llmfleet.probe.prompts import PromptMaker
from llmfleet.probe.server import ServerView

SPIN_S = 0.0015  # the last stretch before a send is spent yielding to the loop, not sleeping


# Set by `llmfleet probe` on SIGTERM or a first Ctrl-C (stop_on_signals): no new request is sent,
# those in flight end as they would, and the trial is judged on the requests it sent; the report says
# so (run.run_probe). A search stops after the trial that was running.
STOP = threading.Event()


def run_loop(coro):
    """Run ``coro`` to its end on uvloop (libuv's event loop in C: the same asyncio API at a fraction of
    the cost per callback; it lifts the client's capacity on 2 cores, benchmarks/probe_client_capacity.py),
    or on asyncio's own loop where uvloop is not installed."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coro)


def plan(config: ProbeConfig, rate: float, maker: PromptMaker, seed: int, requests: int | None = None,
         fixed: dict | None = None) -> list[Planned]:
    """The schedule of one trial. ``requests`` overrides the measured count (else duration x rate,
    at least min_requests); ``fixed`` (prompt_tokens, output_tokens) pins every length."""
    rng = random.Random(seed)
    n_measured = requests or max(config.min_requests, math.ceil(rate * config.duration_s))
    n_warm = 0 if requests else math.ceil(rate * config.warmup_s)
    shape = config.burstiness if config.arrivals == "gamma" else 1.0
    n = n_warm + n_measured
    # send times: cumulative gamma gaps, the warm-up part scaled to span n_warm / rate and the measured
    # part the next n_measured / rate exactly (as vLLM's benchmark scales the whole: the offered rate is
    # then exact whatever the seed)
    gaps = [rng.gammavariate(shape, 1.0 / (rate * shape)) for _ in range(n)]
    times, t = [], 0.0
    for part in (gaps[:n_warm], gaps[n_warm:]):
        scale = (len(part) / rate) / sum(part) if part else 1.0
        for g in part:
            t += g * scale
            times.append(t)
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
        prompt = maker.make(pt, prefix=(c.name, c.shared_prefix_tokens) if c.shared_prefix_tokens else None)
        out.append(Planned(i, c.name, times[i], prompt, pt, ot, c.temperature, c.top_p, i >= n_warm))
    return out


def span(planned: list[Planned]) -> tuple[float, float]:
    """The schedule's window of the measured requests: from the intended send of the request before
    the first measured one (or the trial's start) to the last measured intended send. Every request
    rate of the report is counted over it."""
    measured = [p.intended_s for p in planned if p.measured]
    if not measured:
        return 0.0, 0.0
    first = min(measured)
    before = [p.intended_s for p in planned if not p.measured and p.intended_s <= first]
    return max(before, default=0.0), max(measured)


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
    verdicts: list[dict] = field(default_factory=list)  # each SLO of each group (stats.verdict)
    goodput_min: float | None = None
    server: dict | None = None  # the server's view (llmfleet.probe.server.summarize)


def allowed_bad(n: int, q: float) -> int:
    """How many of n values may exceed a limit before percentile q (linear interpolation) certainly does:
    once the value at the floor of q's rank is above it, so is the percentile."""
    return n - 1 - math.floor((n - 1) * q / 100) if n else 0


class SlaWatch:
    """While a trial runs: is its SLA already certainly lost? Finished requests are counted once
    (``finished``); in-flight ones are looked at on each check (``lost``)."""

    def __init__(self, config: ProbeConfig, planned: list[Planned]):
        measured = [p for p in planned if p.measured]
        per_class = Counter(p.cls for p in measured)
        # (label, class or None for the whole mix, slo, allowed)
        self.groups: list[tuple[str, str | None, Slo, int]] = []
        for slo in config.slos:
            self.groups.append(("overall", None, slo, allowed_bad(len(measured), slo.q)))
        for c in config.mix:
            for slo in c.slos:
                self.groups.append((f"class {c.name}", c.name, slo, allowed_bad(per_class[c.name], slo.q)))
        self.bad = [0] * len(self.groups)
        self.class_slos = {cls: config.slos_of(cls) for cls in per_class}
        self.goodput_min = config.goodput_min
        self.goodput_allowed = len(measured) - math.ceil(config.goodput_min * len(measured) - 1e-9) \
            if config.goodput_min else None
        self.not_good = 0
        self.n = len(measured)

    def finished(self, r: Result) -> None:
        if not r.measured:
            return
        for i, (_, cls, slo, _) in enumerate(self.groups):
            if cls is None or cls == r.cls:
                v = r.metric_s(slo.metric)
                self.bad[i] += v is not None and v * 1000 > slo.limit_ms
        self.not_good += not stats.meets(r, self.class_slos[r.cls])

    def lost(self, live: list[Result], t_now: float) -> str | None:
        """The reason the SLA is already certainly lost, or None. ``live``: measured requests in flight."""
        for i, (label, cls, slo, allowed) in enumerate(self.groups):
            if slo.metric == "tpot":
                continue  # not known before the end
            late = sum(1 for r in live if (cls is None or r.cls == cls) and _late(r, slo.metric, slo.limit_ms, t_now))
            if self.bad[i] + late > allowed:
                return (f"stopped early: {self.bad[i] + late} measured requests ({label}) already failed or "
                        f"passed the {slo.label} limit {slo.limit_ms:g} ms, more than the {allowed} "
                        f"{slo.label} allows, so it cannot hold")
        if self.goodput_allowed is not None:
            late = sum(1 for r in live if any(_late(r, s.metric, s.limit_ms, t_now) for s in self.class_slos[r.cls]))
            if self.not_good + late > self.goodput_allowed:
                return (f"stopped early: {self.not_good + late} of {self.n} measured requests already missed an "
                        f"SLO, so the goodput share cannot reach {self.goodput_min:g}")
        return None


def _late(r: Result, metric: str, limit_ms: float, t_now: float) -> bool:
    """An in-flight request certainly past a limit: older than an E2E limit, or no first token yet
    past a TTFT limit."""
    age_ms = (t_now - r.intended_s) * 1000
    if metric == "e2e":
        return age_ms > limit_ms
    if metric == "ttft":
        return r.ttft_s is None and age_ms > limit_ms
    return False


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
              stop_early: bool = True, server_view: ServerView | None = None,
              extra_headers: dict[str, str] | None = None) -> Trial:
    watch_sla = SlaWatch(config, planned)
    # no cycle collection while the trial runs: a pass over every tracked object stalls the loop for
    # milliseconds, and the client makes no cyclic garbage to collect (measured: 5,000 requests at
    # 1000/s, gc.collect() afterwards found 0 unreachable objects); re-enabled after the trial
    collecting = gc.isenabled()
    gc.collect()
    gc.freeze()
    gc.disable()
    try:
        return await _run(endpoint, api_key, config, planned, offered_rps, progress, stop_early, server_view,
                          watch_sla, extra_headers or {})
    finally:
        gc.unfreeze()
        if collecting:
            gc.enable()


async def _run(endpoint: Endpoint, api_key: str | None, config: ProbeConfig, planned: list[Planned],
               offered_rps: float, progress, stop_early: bool, server_view: ServerView | None,
               watch_sla: SlaWatch, extra_headers: dict[str, str]) -> Trial:
    url = f"{endpoint.base_url}/v1/completions"
    headers = auth_headers(api_key) | extra_headers
    results: dict[int, Result] = {}
    live: dict[int, Result] = {}
    tasks: dict[int, asyncio.Task] = {}
    samples: list[tuple[float, int]] = []
    stop_reason: list[str] = []
    connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300)
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=10)
    first_measured = next((p.intended_s for p in planned if p.measured), 0.0)

    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        t0 = time.perf_counter() + 0.05
        sampler = asyncio.create_task(server_view.sample(session, t0)) if server_view else None

        async def one(p: Planned):
            r = Result(p.index, p.cls, p.intended_s, p.measured, p.prompt_tokens, p.output_tokens)
            live[p.index] = r
            try:
                await send(session, url, headers, endpoint.model, p, t0, endpoint.ignore_eos,
                           config.request_timeout_s, config.stall_timeout_s, r)
            except asyncio.CancelledError:
                return
            del live[p.index]
            results[p.index] = r
            watch_sla.finished(r)

        async def watch():
            while True:
                await asyncio.sleep(0.25)
                t_now = time.perf_counter() - t0
                if t_now >= first_measured:
                    samples.append((t_now, len(live)))
                if progress:
                    progress(len(live) + len(results), len(results), len(planned))
                if stop_early:
                    reason = watch_sla.lost([r for r in live.values() if r.measured], t_now)
                    if reason:
                        stop_reason.append(reason)
                        return

        dispatcher = asyncio.create_task(_dispatch(planned, t0, one, tasks))
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
        if sampler and server_view:
            sampler.cancel()
            await asyncio.gather(sampler, return_exceptions=True)
            await server_view.read(session, t0)  # the end of the trial: its counters cover every request
        if progress:
            progress(len(live) + len(results), len(results), len(planned))
    t_end = time.perf_counter() - t0
    planned, ordered = _settle(planned, results, live, tasks, bool(stop_reason), t_end)
    server = server_view.summary() if server_view else None
    return judge(config, ordered, offered_rps, samples, bool(stop_reason), stop_reason,
                 span(planned) if planned else None, server)


async def _dispatch(planned: list[Planned], t0: float, one, tasks: dict[int, asyncio.Task]) -> None:
    """Start ``one(p)`` for each planned request at its send time (t0 + its intended time), into
    ``tasks``; no more once STOP is set.

    The event loop's timers wake up to a millisecond late (epoll's timeout is in whole ms): sleep to
    just before the send time, then yield to the loop until it comes; every request whose time has
    come leaves at once."""
    for p in planned:
        target = t0 + p.intended_s
        delay = target - time.perf_counter()
        while delay > SPIN_S and not STOP.is_set():  # a stop is seen within 0.25 s of a long gap
            await asyncio.sleep(min(delay - SPIN_S, 0.25))
            delay = target - time.perf_counter()
        if STOP.is_set():
            return
        while time.perf_counter() < target:
            await asyncio.sleep(0)
        tasks[p.index] = asyncio.create_task(one(p))


def _settle(planned: list[Planned], results: dict[int, Result], live: dict[int, Result],
            tasks: dict[int, asyncio.Task], stopped_early: bool,
            t_end: float) -> tuple[list[Planned], list[Result]]:
    """The requests the trial is judged on and their results in plan order: what it never finished
    counts against the SLA (cancelled, or not sent); stopped by a signal, only what it sent."""
    if STOP.is_set() and not stopped_early:  # stopped by a signal: judged on what it sent
        planned = [p for p in planned if p.index in tasks]
    for p in planned:  # what the trial never finished counts against the SLA
        if p.index not in results:
            r = live.get(p.index) or Result(p.index, p.cls, p.intended_s, p.measured, p.prompt_tokens,
                                            p.output_tokens)
            r.ok = False
            if p.index in live:
                r.error_kind, r.error = "cancelled", "still running when the trial stopped early"
                r.e2e_s, r.done_s = t_end - p.intended_s, t_end
            else:
                r.error_kind, r.error = "not_sent", "not sent: the trial stopped early"
            results[p.index] = r
    return planned, [results[p.index] for p in planned]


def judge(config: ProbeConfig, results: list[Result], offered_rps: float, samples: list[tuple[float, int]],
          stopped_early: bool, stop_reason: list[str], window: tuple[float, float] | None = None,
          server: dict | None = None) -> Trial:
    """The trial's metrics and verdict: every SLO at its percentile (overall and per class), the
    goodput share, saturation; the server's view says why where it can."""
    measured = [r for r in results if r.measured]
    if window is None:
        window = (0.0, max((r.intended_s for r in measured), default=0.0))
    for r in results:
        r.good = stats.meets(r, config.slos_of(r.cls))
    overall = stats.summarize(results, offered_rps, window)
    names = [c.name for c in config.mix]
    classes = [n for n in names if any(r.cls == n for r in measured) or not measured] + \
        sorted({r.cls for r in measured} - set(names))
    per_class = {}
    for name in classes:
        members = [r for r in results if r.cls == name]
        share = config.class_named(name).share if name in names else \
            sum(r.measured for r in members) / max(1, len(measured))
        per_class[name] = stats.summarize(members, offered_rps * share, window, window_s=overall["window_s"])
    verdicts = [stats.verdict(results, slo, "overall") for slo in config.slos]
    for c in config.mix:
        members = [r for r in results if r.cls == c.name]
        verdicts += [stats.verdict(members, slo, c.name) for slo in c.slos if any(r.measured for r in members)]
    reasons = list(stop_reason)
    if not stopped_early:
        for v in verdicts:
            if not v["met"]:
                who = "" if v["group"] == "overall" else f"class {v['group']}: "
                shown = "failed requests" if v["value_ms"] is None else f"{v['value_ms']:.0f} ms"
                reasons.append(f"{who}P{v['percentile']:g} {v['metric'].upper()} {shown} > SLO {v['limit_ms']:g} ms")
        share = overall["goodput_share"]
        if config.goodput_min and share is not None and share < config.goodput_min:
            reasons.append(f"goodput share {share:.1%} ({overall['good']} of {overall['requests']} requests met "
                           f"every SLO) < probe_goodput_min {config.goodput_min:.0%}")
    g = growth(samples)
    mean_in_flight = sum(y for _, y in samples) / len(samples) if samples else 0.0
    saturated = g > max(3.0, 0.5 * mean_in_flight)
    if saturated:
        reasons.append(f"saturated: the backlog grew by {g:.1f} requests over the measured window")
    if reasons and server and server.get("causes"):
        reasons.append("server: " + "; ".join(server["causes"]))
    return Trial(offered_rps, results, overall, per_class, not reasons, reasons, stopped_early, saturated,
                 round(g, 2), samples[::max(1, len(samples) // 200)], verdicts, config.goodput_min, server)


def stop_on_signals() -> None:
    """SIGTERM, or a first Ctrl-C, ends the probe early with a report (STOP); a second Ctrl-C
    interrupts it at once, as Python's default does."""
    import signal

    def stop(signum, frame):
        STOP.set()
        signal.signal(signal.SIGINT, signal.default_int_handler)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
