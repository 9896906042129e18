"""The probe's report: a JSON document (schema below, exported to docs/probe-report.schema.json),
a terminal table, a picture (PNG), and the baseline gate."""

from __future__ import annotations

import datetime as dt
import json
import math
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from llmfleet.probe.config import ProbeError, RequestClass
from llmfleet.probe.load import Trial

SCHEMA = "llmfleet-probe/2"
BASELINE_SCHEMA = "llmfleet-probe-baseline/1"

DEFINITIONS = {
    "ttft_ms": "intended send time -> first stream chunk carrying a choice",
    "tpot_ms": "per request: (e2e - ttft) / (server-counted output tokens - 1), as vLLM's benchmark; a "
               "one-token answer has none",
    "itl_ms": "gaps between successive stream chunks carrying a choice, pooled (chunks, not tokens)",
    "e2e_ms": "intended send time -> end of the stream",
    "percentiles": "over every measured request; a failed or timed-out request counts as worse than any "
                   "latency, and a percentile that falls on one is null; means are over successful requests",
    "slo": "<metric>_p<q>_ms: the metric's q-th percentile over the group's measured requests (the whole mix, "
           "or one class) must be at most the limit; each verdict lists group, percentile, limit and value",
    "good": "a measured request that succeeded and met every SLO limit of its class and the overall ones, "
            "each limit taken per request: vLLM's --goodput ttft:X tpot:Y e2el:Z rule (vllm/benchmarks/serve.py "
            "calculate_metrics: good if every metric <= its limit, a one-token answer's TPOT 0). Applied to vLLM's "
            "benchmark's own requests of a run, it counts the good requests --goodput counts: 75/75, 72/72, 35/35 "
            "in three runs (benchmarks/probe_vs_vllm_bench.py, vLLM 0.32.0)",
    "goodput_share": "good / measured requests; a trial passes only if it is at least goodput_min",
    "goodput_rps": "good requests / span_s",
    "span_s": "the schedule's window of the measured requests: from the intended send before the first "
              "measured one (or the start) to the last measured intended send; every request rate uses it",
    "offered_rps": "the rate asked (a trace: its own rate at the speed asked)",
    "scheduled_rps": "measured requests / span_s (a drawn schedule: exactly the offered rate)",
    "sent_rps": "requests sent / (span_s stretched to the last actual send): equal to scheduled when the "
                "client kept up", "completed_rps": "successful requests / span_s",
    "request_throughput_rps": "successful requests / window_s (vLLM's 'request throughput')",
    "output_tokens_per_s": "server-counted output tokens of successful measured requests / window_s",
    "total_tokens_per_s": "server-counted prompt + output tokens of successful measured requests / window_s",
    "window_s": "the start of span_s (the measured schedule's start) -> the last end of a measured request, "
                "as vLLM's benchmark's duration (its start -> its last end)",
    "lag_ms": "client scheduling lag: actual send - intended send",
    "warm-up": "requests of the first warmup_s seconds are sent but not measured",
    "server": "the endpoint's /metrics sampled once a second during the trial: running and waiting requests, "
              "KV cache usage (mean, max), preemptions and prefix-cache queries and hits (tokens) over the "
              "trial, the server's own mean E2E and TTFT (its histograms' sum / count over the trial, every "
              "request it finished then, warm-up included; vLLM times them from its arrival_time, set after the "
              "HTTP request is parsed and the prompt rendered, to the engine's output, so a client sees a few ms "
              "more: vllm/v1/engine/input_processor.py, v1/metrics/stats.py in 0.32.0), and the causes they show "
              "for a lost SLA; http_duration_mean_ms: the API server's own time per completion request, receipt to "
              "the end of the streamed answer (prometheus-fastapi-instrumentator)",
    "effective_rps": "highest offered rate whose every SLO held and whose goodput share reached goodput_min, in "
                     "every repeat",
}


class Dist(BaseModel):
    mean: float | None
    p50: float | None
    p90: float | None
    p95: float | None
    p99: float | None


class TrialStats(BaseModel):
    requests: int
    ok: int
    failed: int
    errors: dict[str, int]
    error_examples: dict[str, str | None]
    ttft_ms: Dist
    tpot_ms: Dist
    itl_ms: Dist
    e2e_ms: Dist
    output_tokens_per_s: float
    total_tokens_per_s: float
    offered_rps: float
    scheduled_rps: float
    sent_rps: float
    completed_rps: float
    goodput_rps: float
    good: int
    goodput_share: float | None
    request_throughput_rps: float
    span_s: float
    window_s: float
    lag_ms: dict[str, float | None]
    prompt_tokens: dict[str, float | None]
    output_tokens: dict[str, float | None]
    token_count_method: str | None


class Verdict(BaseModel):
    group: str  # "overall" or a class
    slo: str  # the key, e.g. ttft_p99_ms
    metric: str
    percentile: float
    limit_ms: float
    value_ms: float | None  # null: the percentile fell on a failed request
    requests: int
    met: bool


class ServerSummary(BaseModel):
    vllm_version: str
    metrics: dict[str, str]  # purpose: the metric name read
    samples: int
    errors: list[str]
    running: dict[str, float] | None
    queue: dict[str, float] | None  # requests waiting: mean, max
    kv_cache: dict[str, float] | None  # usage 0-1: mean, max
    preemptions: float | None
    prefix_cache_queries: float | None
    prefix_cache_hits: float | None
    prefix_cache_hit_rate: float | None
    e2e_latency_mean_ms: float | None
    e2e_latency_requests: int | None
    ttft_mean_ms: float | None
    ttft_requests: int | None
    http_duration_mean_ms: float | None  # the API server's own time per /v1/completions request
    http_duration_requests: int | None
    series: list[dict[str, float | None]]
    causes: list[str]


class TrialReport(BaseModel):
    offered_rps: float
    passed: bool
    reasons: list[str]
    stopped_early: bool
    saturated: bool
    backlog_growth: float
    verdicts: list[Verdict]
    goodput_min: float | None
    overall: TrialStats
    per_class: dict[str, TrialStats]
    server: ServerSummary | None
    e2e_ms_sorted: list[float | None]  # every measured request's e2e (null: failed), for the CDF


class Effective(BaseModel):
    rps: float | None
    lowest_failing_rps: float | None
    relative_uncertainty: float | None
    p95_ms_at_effective: list[float | None]
    note: str


class Gate(BaseModel):
    baseline_file: str
    metric: str
    baseline: float | None
    measured: float | None
    tolerance: float
    passed: bool
    message: str


class ProbeReport(BaseModel):
    model_config = ConfigDict(extra="forbid")
    schema_id: str = SCHEMA
    created: str
    target: dict[str, str | int | None]
    method: dict[str, str | float | int | None]
    definitions: dict[str, str]
    slo: dict[str, float]  # the overall SLOs (each class's are in mix)
    goodput_min: float | None
    mix: list[RequestClass]
    mode: str  # "check" (one trial at check_rps), "search", or "trace" (a replay)
    trials: list[TrialReport]
    effective: Effective | None
    ceiling: dict | None
    ceiling_note: str
    gate: Gate | None
    passed: bool
    reasons: list[str]


def trial_report(t: Trial) -> TrialReport:
    e2e = sorted([r.latency_or_inf("e2e_s") * 1000 for r in t.results if r.measured])
    return TrialReport(offered_rps=t.offered_rps, passed=t.passed, reasons=t.reasons, stopped_early=t.stopped_early,
                       saturated=t.saturated, backlog_growth=t.backlog_growth,
                       verdicts=[Verdict(**v) for v in t.verdicts], goodput_min=t.goodput_min,
                       overall=TrialStats(**t.stats), per_class={k: TrialStats(**v) for k, v in t.per_class.items()},
                       server=ServerSummary(**t.server) if t.server else None,
                       e2e_ms_sorted=[None if v == math.inf else round(v, 3) for v in e2e])


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def schema_json() -> str:
    return json.dumps(ProbeReport.model_json_schema(), indent=2, sort_keys=True) + "\n"


# ---- baseline -----------------------------------------------------------------------------------

def save_baseline(report: ProbeReport, path: Path) -> None:
    key = report.effective.rps if report.mode == "search" and report.effective else None
    check = report.trials[-1].overall if report.mode != "search" else None
    data = {"schema": BASELINE_SCHEMA, "created": report.created, "model": report.target.get("model"),
            "host": report.target.get("host"), "server": report.target.get("server"), "mode": report.mode,
            "effective_rps": key, "check_rps": report.trials[-1].offered_rps if check else None,
            "p95_e2e_ms": check.e2e_ms.p95 if check else None, "slo": report.slo}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")


def gate(report: ProbeReport, path: Path, tolerance: float) -> Gate:
    """Compare with a stored baseline: search mode gates effective_rps (at least baseline x (1 - tol)),
    check mode the P95 e2e at the same rate (at most baseline x (1 + tol))."""
    try:
        base = json.loads(path.read_text())
    except OSError as exc:
        raise ProbeError(f"probe_baseline_file = {str(path)!r}: cannot be read ({exc.strerror}) (fix: record one "
                         "with llmfleet probe ... --save-baseline FILE, or set probe_baseline_file = None)") from exc
    except ValueError as exc:
        raise ProbeError(f"probe_baseline_file = {str(path)!r}: not JSON ({exc})") from exc
    if base.get("schema") != BASELINE_SCHEMA:
        raise ProbeError(f"probe_baseline_file = {str(path)!r}: not an llmfleet probe baseline "
                         f"(schema {base.get('schema')!r}, expected {BASELINE_SCHEMA!r})")
    f = str(path)
    if base.get("model") != report.target.get("model"):
        return Gate(baseline_file=f, metric="model", baseline=None, measured=None, tolerance=tolerance,
                    passed=False, message=f"the baseline was recorded for model {base.get('model')!r}, this run "
                    f"probes {report.target.get('model')!r}: not comparable (fix: record a new baseline)")
    if report.mode == "search":
        b, m = base.get("effective_rps"), report.effective.rps if report.effective else None
        if b is None:
            return Gate(baseline_file=f, metric="effective_rps", baseline=None, measured=m, tolerance=tolerance,
                        passed=False, message="the baseline holds no effective_rps (fix: record it with --search)")
        ok = m is not None and m >= b * (1 - tolerance)
        return Gate(baseline_file=f, metric="effective_rps", baseline=b, measured=m, tolerance=tolerance, passed=ok,
                    message=f"effective throughput {m} req/s vs baseline {b} req/s "
                            f"(at least {b * (1 - tolerance):.3g})")
    rate = report.trials[-1].offered_rps
    b, m = base.get("p95_e2e_ms"), report.trials[-1].overall.e2e_ms.p95
    if b is None or base.get("check_rps") != rate:
        return Gate(baseline_file=f, metric="p95_e2e_ms", baseline=b, measured=m, tolerance=tolerance, passed=False,
                    message=f"the baseline was recorded at {base.get('check_rps')} req/s, this check ran at {rate}: "
                    "not comparable (fix: record a new baseline at this rate)")
    ok = m is not None and m <= b * (1 + tolerance)
    shown = "failed requests" if m is None else f"{m:.0f} ms"
    return Gate(baseline_file=f, metric="p95_e2e_ms", baseline=b, measured=m, tolerance=tolerance, passed=ok,
                message=f"P95 end-to-end {shown} at {rate} req/s vs baseline {b:.0f} ms "
                        f"(at most {b * (1 + tolerance):.0f} ms)")


# ---- terminal -----------------------------------------------------------------------------------

def _v(x: float | None, fmt: str = "{:.0f}") -> str:
    return "failed" if x is None else fmt.format(x)


def _e2e_slo(report: ProbeReport) -> float | None:
    """The overall end-to-end SLO limit (ms), for the pictures; None: the SLOs set no E2E limit."""
    return next((v for k, v in report.slo.items() if k.startswith("e2e_")), None)


def table(report: ProbeReport):
    """rich renderables for the terminal."""
    from rich.table import Table
    from rich.text import Text

    out: list[Table | Text] = []
    t = report.target
    title = f"{t.get('host') or t.get('url')}  model {t.get('model')}  ({report.mode})"
    shown = _trial_at(report)
    if shown is not None:
        tab = Table(title=f"{title}: {shown.offered_rps:g} req/s offered", title_justify="left")
        for col in ("class", "req", "fail", "good", "TTFT p50", "TTFT p95", "TPOT p50", "TPOT p95", "ITL p50",
                    "E2E p50", "E2E p95", "E2E p99", "out tok/s"):
            tab.add_column(col, justify="left" if col == "class" else "right")
        rows = [("all", shown.overall)] + list(shown.per_class.items())
        for name, st in rows:
            good = "-" if st.goodput_share is None else f"{st.goodput_share:.0%}"
            tab.add_row(name, str(st.requests), str(st.failed), good, _v(st.ttft_ms.p50), _v(st.ttft_ms.p95),
                        _v(st.tpot_ms.p50, "{:.1f}"), _v(st.tpot_ms.p95, "{:.1f}"), _v(st.itl_ms.p50, "{:.1f}"),
                        _v(st.e2e_ms.p50), _v(st.e2e_ms.p95), _v(st.e2e_ms.p99), f"{st.output_tokens_per_s:.1f}")
        out.append(tab)
        for v in shown.verdicts:
            who = "all" if v.group == "overall" else v.group
            shown_v = "failed requests" if v.value_ms is None else f"{v.value_ms:.0f} ms"
            out.append(Text(f"SLO {who}: P{v.percentile:g} {v.metric.upper()} {shown_v} <= {v.limit_ms:g} ms: "
                            f"{'met' if v.met else 'NOT met'}", style="" if v.met else "red"))
        o = shown.overall
        goal = f" (at least {shown.goodput_min:.0%} needed)" if shown.goodput_min else ""
        share = "-" if o.goodput_share is None else f"{o.goodput_share:.1%}"
        out.append(Text(f"goodput: {o.good} of {o.requests} requests met every SLO: {share}{goal}, "
                        f"{o.goodput_rps:.2f}/s"))
        out.append(Text(f"offered {o.offered_rps:g}/s, scheduled {o.scheduled_rps:.2f}/s, sent {o.sent_rps:.2f}/s, "
                        f"completed {o.completed_rps:.2f}/s (each over the {o.span_s:g} s schedule of the measured "
                        f"requests); client lag p99 {_v(o.lag_ms.get('p99'), '{:.2f}')} ms; errors "
                        f"{o.errors or 'none'}; latencies in ms from the intended send time"))
        if shown.server:
            out.append(Text(server_line(shown.server)))
    if report.mode == "search":
        searched = Table(title="search", title_justify="left")
        for col in ("rate/s", "passed", "E2E p95 ms", "good", "why"):
            searched.add_column(col)
        for tr in report.trials:
            share = "-" if tr.overall.goodput_share is None else f"{tr.overall.goodput_share:.0%}"
            searched.add_row(f"{tr.offered_rps:g}", "yes" if tr.passed else "no", _v(tr.overall.e2e_ms.p95), share,
                             "; ".join(tr.reasons)[:100])
        out.append(searched)
        e = report.effective
        if e and e.rps is not None:
            unc = f" (lowest failing {e.lowest_failing_rps:g}/s, +{e.relative_uncertainty:.0%})" \
                if e.lowest_failing_rps else ""
            out.append(Text(f"effective throughput: {e.rps:g} req/s with every SLO met and goodput >= "
                            f"{report.goodput_min or 0:.0%}{unc}. {e.note}", style="bold"))
        else:
            out.append(Text(f"effective throughput: none ({e.note if e else ''})", style="bold red"))
    if report.ceiling:
        c = report.ceiling
        out.append(Text(f"ceiling (calculation): {c['batch_tokens_per_s']:.0f} output tok/s at batch "
                        f"{c['batch']:.1f}, context {c['avg_context']:.0f}; reached "
                        f"{report.ceiling.get('share_reached', 0):.0%}"))
    else:
        out.append(Text(f"ceiling: {report.ceiling_note}"))
    if report.gate:
        out.append(Text(f"baseline gate: {'pass' if report.gate.passed else 'FAIL'}: {report.gate.message}",
                        style="green" if report.gate.passed else "bold red"))
    verdict = "PASS" if report.passed else "FAIL: " + "; ".join(report.reasons)
    out.append(Text(verdict, style="bold green" if report.passed else "bold red"))
    return out


def server_line(s: ServerSummary) -> str:
    def gauge(g, fmt="{:.1f}"):
        return "not known" if g is None else f"mean {fmt.format(g['mean'])}, max {fmt.format(g['max'])}"

    hit = "-" if s.prefix_cache_hit_rate is None else f"{s.prefix_cache_hit_rate:.0%}"
    own = f"its own mean E2E {_v(s.e2e_latency_mean_ms, '{:.1f}')} ms (HTTP {_v(s.http_duration_mean_ms, '{:.1f}')} " \
          f"ms), TTFT {_v(s.ttft_mean_ms, '{:.1f}')} ms" if s.e2e_latency_requests else \
        "no request finished between its samples"
    return (f"server (vLLM {s.vllm_version} /metrics, {s.samples} samples): running {gauge(s.running)}; waiting "
            f"{gauge(s.queue)}; KV cache {gauge(s.kv_cache, '{:.0%}')}; preemptions {_v(s.preemptions, '{:g}')}; "
            f"prefix-cache hits {hit}; {own}")


def _trial_at(report: ProbeReport) -> TrialReport | None:
    """The trial a report shows: the check's or the replay's, or the search's at the effective rate."""
    if report.mode != "search":
        return report.trials[-1] if report.trials else None
    e = report.effective
    if e and e.rps is not None:
        at = [t for t in report.trials if t.offered_rps == e.rps and t.passed]
        if at:
            return at[-1]
    return report.trials[-1] if report.trials else None


# ---- picture ------------------------------------------------------------------------------------

def plot(report: ProbeReport, path: Path) -> None:
    """PNG: P50/P95/P99 e2e vs offered rate (every trial), and the e2e CDF at the effective (or
    checked) rate; failed requests sit at the right edge of the CDF."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = _trial_at(report)
    series = shown.server.series if shown and shown.server and shown.server.series else None
    fig, axes = plt.subplots(1, 3 if series else 2, figsize=(18 if series else 12, 4.5))
    a, b = axes[0], axes[1]
    slo = _e2e_slo(report)
    trials = sorted(report.trials, key=lambda t: t.offered_rps)
    rates = [t.offered_rps for t in trials]
    top = 0.0
    for q, style in (("p50", "o-"), ("p95", "s-"), ("p99", "^-")):
        ys = [getattr(t.overall.e2e_ms, q) for t in trials]
        finite: list[float] = [y for y in ys if y is not None]
        top = max([top, *finite])
        a.plot(rates, [math.nan if y is None else y for y in ys], style, label=f"E2E {q}")
    if slo:
        a.axhline(slo, color="red", linestyle="--", label="E2E SLO")
    failed = [t.offered_rps for t in trials if not t.passed]
    if failed:
        a.scatter(failed, [max(top, slo or 0.0) * 1.05] * len(failed), marker="x", color="red",
                  label="trial failed")
    a.set_xlabel("offered rate (requests/s)")
    a.set_ylabel("end-to-end latency (ms, from intended send)")
    a.set_title("latency vs offered rate")
    a.legend()
    if shown:
        vals = shown.e2e_ms_sorted
        finite = [v for v in vals if v is not None]
        n = len(vals)
        edge = max(finite) * 1.1 if finite else 1.0
        xs = [v if v is not None else edge for v in vals]
        b.step(xs, [(i + 1) / n for i in range(n)], where="post")
        if slo:
            b.axvline(slo, color="red", linestyle="--", label="E2E SLO")
        b.axhline(0.95, color="grey", linestyle=":")
        b.set_title(f"E2E CDF at {shown.offered_rps:g} req/s ({n} requests, {n - len(finite)} failed)")
        b.set_xlabel("end-to-end latency (ms)")
        b.set_ylabel("share of requests")
        b.legend()
    if series and shown:
        c = axes[2]
        ts = [p["t"] for p in series]
        for key, label in (("running", "running"), ("queue", "waiting")):
            c.plot(ts, [math.nan if p.get(key) is None else p[key] for p in series], label=label)
        c.set_xlabel("time in the trial (s)")
        c.set_ylabel("requests (server's /metrics)")
        kv = c.twinx()
        usage = [p.get("kv_cache") for p in series]
        kv.plot(ts, [math.nan if u is None else u * 100 for u in usage], "k:", label="KV cache %")
        kv.set_ylabel("KV cache usage (%)")
        kv.set_ylim(0, 100)
        c.set_title(f"the server's view at {shown.offered_rps:g} req/s")
        c.legend(loc="upper left")
    fig.suptitle(f"{report.target.get('host') or report.target.get('url')}: {report.target.get('model')}")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)

