"""The server's view of a trial: the endpoint's own ``/metrics`` (Prometheus text), sampled once a
second while the trial runs, summarised beside the client's latencies, so that a failed SLA says
whether the queue, the KV cache or preemption caused it.

The metric names are those of the served vLLM version (``llmfleet.compat.METRICS``, read from the
server's ``/version``): requests running and waiting (gauges), KV cache usage (gauge, 0-1),
preemptions, prefix-cache queries and hits (counters, in tokens), and the sums and counts of the
server's own end-to-end and time-to-first-token histograms and of its API server's time per
completion request (their means over the trial referee the client's:
benchmarks/probe_vs_vllm_bench.py). Only the lines of those metrics are parsed (by
prometheus_client's parser), so a sample costs the client well under a millisecond of its loop.
"""

from __future__ import annotations

import asyncio
import math
import time

import aiohttp

from llmfleet import compat

INTERVAL_S = 1.0
GAUGES = ("running", "queue", "kv_cache")
COUNTERS = ("preemptions", "prefix_cache_queries", "prefix_cache_hits")
HISTOGRAMS = ("e2e_latency", "ttft", "http_duration")
HANDLER = "/v1/completions"  # the HTTP histogram's series the probe's requests land in
KV_FULL = 0.9  # KV cache usage from which it counts as a cause (vLLM preempts when it runs out)


def names_for(version: str) -> dict[str, str]:
    """Sample names per purpose for a vLLM version (histograms: their base name)."""
    out = {}
    for purpose in GAUGES + COUNTERS + HISTOGRAMS:
        try:
            out[purpose] = compat.metric(purpose, version)
        except KeyError:
            continue  # the version has none: that part of the view is left out
    return out


def parse(text: str, names: dict[str, str], model: str | None = None) -> dict[str, float]:
    """The wanted samples of a /metrics page, summed over their series (of ``model`` where labelled)."""
    from prometheus_client.parser import text_string_to_metric_families

    wanted = {}
    for purpose, name in names.items():
        if purpose in HISTOGRAMS:
            wanted[f"{name}_sum"] = f"{purpose}_sum"
            wanted[f"{name}_count"] = f"{purpose}_count"
        else:
            wanted[name] = purpose
    prefixes = tuple(wanted)
    lines = [line for line in text.splitlines() if line.startswith(prefixes)]
    out: dict[str, float] = {}
    for family in text_string_to_metric_families("\n".join(lines) + "\n"):
        for s in family.samples:
            key = wanted.get(s.name)
            if key is None or (model is not None and s.labels.get("model_name", model) != model) \
                    or s.labels.get("handler", HANDLER) != HANDLER:
                continue
            out[key] = out.get(key, 0.0) + s.value
    return out


class ServerView:
    """Samples an endpoint's /metrics during a trial (``sample``), then sums it up (``summary``)."""

    def __init__(self, base_url: str, version: str, model: str, headers: dict | None = None,
                 interval_s: float = INTERVAL_S):
        self.url = f"{base_url.rstrip('/')}/metrics"
        self.version = version
        self.model = model
        self.names = names_for(version)
        self.headers = headers or {}
        self.interval_s = interval_s
        self.samples: list[tuple[float, dict[str, float]]] = []
        self.errors: list[str] = []

    async def read(self, session: aiohttp.ClientSession, t0: float) -> None:
        try:
            async with session.get(self.url, headers=self.headers, timeout=aiohttp.ClientTimeout(total=5)) as resp:
                if resp.status != 200:
                    self.errors.append(f"HTTP {resp.status}")
                    return
                text = await resp.text()
        except (aiohttp.ClientError, TimeoutError) as exc:
            self.errors.append(f"{type(exc).__name__}: {exc}")
            return
        self.samples.append((round(time.perf_counter() - t0, 3), parse(text, self.names, self.model)))

    async def sample(self, session: aiohttp.ClientSession, t0: float) -> None:
        """Once a second until cancelled (the first at the trial's start)."""
        n = 0
        while True:
            await self.read(session, t0)
            n += 1
            await asyncio.sleep(max(0.0, t0 - 0.05 + n * self.interval_s - time.perf_counter()))

    def summary(self) -> dict:
        return summarize(self.samples, self.version, self.names, self.errors)


def _delta(samples: list[tuple[float, dict[str, float]]], key: str) -> float | None:
    have = [v[key] for _, v in samples if key in v]
    return have[-1] - have[0] if len(have) >= 2 else None


def summarize(samples: list[tuple[float, dict[str, float]]], version: str, names: dict[str, str],
              errors: list[str] | None = None) -> dict:
    """Gauges as mean and max over the samples, counters and histograms as their change over the
    trial, and ``causes``: what in the server's view explains a lost SLA (the queue, the KV cache,
    preemption), or that none of them does."""
    out: dict = {"vllm_version": version, "metrics": names, "samples": len(samples),
                 "errors": (errors or [])[:3]}
    backwards = sorted({k for (_, a), (_, b) in zip(samples, samples[1:], strict=False) for k in a
                        if k in b and not k.startswith(GAUGES) and b[k] < a[k]})
    if backwards:
        # one server's counters never go down: these samples came from several servers (a front door
        # balancing /metrics over a host's instances) or the server restarted; none of them can be summed up
        out["errors"] = out["errors"] + [
            f"counters went down between samples ({', '.join(backwards)}): more than one server answers this "
            "URL's /metrics (a front door over several instances: probe each instance with --instances), or the "
            "server restarted; the server view is left out"]
        samples = []
    for purpose in GAUGES:
        vs = [v[purpose] for _, v in samples if purpose in v]
        out[purpose] = {"mean": round(sum(vs) / len(vs), 3), "max": round(max(vs), 3)} if vs else None
    for purpose in COUNTERS:
        d = _delta(samples, purpose)
        out[purpose] = None if d is None else round(d, 1)
    q, h = out["prefix_cache_queries"], out["prefix_cache_hits"]
    out["prefix_cache_hit_rate"] = round(h / q, 4) if q and h is not None else None
    for purpose in HISTOGRAMS:
        ds, dc = _delta(samples, f"{purpose}_sum"), _delta(samples, f"{purpose}_count")
        out[f"{purpose}_mean_ms"] = round(ds / dc * 1000, 3) if ds is not None and dc else None
        out[f"{purpose}_requests"] = None if dc is None else int(dc)
    step = max(1, math.ceil(len(samples) / 120))
    out["series"] = [{"t": t, **{k: v.get(k) for k in GAUGES}} for t, v in samples[::step]]
    out["causes"] = causes(out)
    return out


def causes(s: dict) -> list[str]:
    found = []
    if s["queue"] and s["queue"]["max"] >= 1:
        running = f"{s['running']['max']:g}" if s["running"] else "?"
        found.append(f"queue: up to {s['queue']['max']:g} requests waiting (mean {s['queue']['mean']:.1f}) while "
                     f"up to {running} ran: the server had no room for them")
    if s["kv_cache"] and s["kv_cache"]["max"] >= KV_FULL:
        found.append(f"KV cache: up to {s['kv_cache']['max']:.0%} used (mean {s['kv_cache']['mean']:.0%})")
    if s["preemptions"]:
        found.append(f"preemption: {s['preemptions']:g} requests preempted (their KV cache dropped and recomputed)")
    if not found and any(s[g] for g in GAUGES):
        kv = f"{s['kv_cache']['max']:.0%}" if s["kv_cache"] else "not known"
        ran = f"up to {s['running']['max']:g} requests ran at once (mean {s['running']['mean']:g}), each engine step " \
            "the slower for every one of them" if s["running"] else "the requests themselves were slow"
        found.append(f"not the queue, the KV cache or preemption (waiting max "
                     f"{s['queue']['max'] if s['queue'] else 'not known'}, KV cache max {kv}, "
                     f"preemptions {s['preemptions'] or 0:g}): {ran}; or the client or the network")
    return found
