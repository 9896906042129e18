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

SCHEMA = "llmfleet-probe/1"
BASELINE_SCHEMA = "llmfleet-probe-baseline/1"

DEFINITIONS = {
    "ttft_ms": "intended send time -> first stream chunk carrying a choice",
    "tpot_ms": "per request: (e2e - ttft) / (server-counted output tokens - 1), as vLLM's benchmark",
    "itl_ms": "gaps between successive stream chunks carrying a choice, pooled (chunks, not tokens)",
    "e2e_ms": "intended send time -> end of the stream",
    "percentiles": "over every measured request; a failed or timed-out request counts as worse than any "
                   "latency, and a percentile that falls on one is null; means are over successful requests",
    "output_tokens_per_s": "server-counted output tokens of successful measured requests / measured window",
    "total_tokens_per_s": "server-counted prompt + output tokens of successful measured requests / window",
    "window_s": "first intended send of a measured request -> last end of a measured request",
    "offered_rps": "the rate asked", "scheduled_rps": "the rate of the drawn schedule",
    "sent_rps": "requests actually sent per second", "completed_rps": "successful requests per second of window",
    "lag_ms": "client scheduling lag: actual send - intended send",
    "warm-up": "requests of the first warmup_s seconds are sent but not measured",
    "effective_rps": "highest offered rate whose P95 e2e (and every per-class P95 SLO) held in every repeat",
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
    scheduled_rps: float | None
    sent_rps: float | None
    completed_rps: float
    window_s: float
    lag_ms: dict[str, float | None]
    prompt_tokens: dict[str, float | None]
    output_tokens: dict[str, float | None]
    token_count_method: str | None


class TrialReport(BaseModel):
    offered_rps: float
    passed: bool
    reasons: list[str]
    stopped_early: bool
    saturated: bool
    backlog_growth: float
    overall: TrialStats
    per_class: dict[str, TrialStats]
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
    slo: dict[str, float | None]
    mix: list[RequestClass]
    mode: str  # "check" (one trial at check_rps) or "search"
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
                       saturated=t.saturated, backlog_growth=t.backlog_growth, overall=TrialStats(**t.stats),
                       per_class={k: TrialStats(**v) for k, v in t.per_class.items()},
                       e2e_ms_sorted=[None if v == math.inf else round(v, 3) for v in e2e])


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def schema_json() -> str:
    return json.dumps(ProbeReport.model_json_schema(), indent=2, sort_keys=True) + "\n"


# ---- baseline -----------------------------------------------------------------------------------

def save_baseline(report: ProbeReport, path: Path) -> None:
    key = report.effective.rps if report.mode == "search" and report.effective else None
    check = report.trials[-1].overall if report.mode == "check" else None
    data = {"schema": BASELINE_SCHEMA, "created": report.created, "model": report.target.get("model"),
            "host": report.target.get("host"), "server": report.target.get("server"), "mode": report.mode,
            "effective_rps": key, "check_rps": report.trials[-1].offered_rps if check else None,
            "p95_e2e_ms": check.e2e_ms.p95 if check else None, "slo_p95_e2e_ms": report.slo.get("p95_e2e_ms")}
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


def table(report: ProbeReport):
    """rich renderables for the terminal."""
    from rich.table import Table
    from rich.text import Text

    out: list[Table | Text] = []
    t = report.target
    title = f"{t.get('host') or t.get('url')}  model {t.get('model')}  ({report.mode})"
    shown = report.trials[-1] if report.mode == "check" else _trial_at(report)
    if shown is not None:
        tab = Table(title=f"{title}: {shown.offered_rps:g} req/s offered", title_justify="left")
        for col in ("class", "req", "fail", "TTFT p50", "TTFT p95", "TPOT p50", "ITL p50", "E2E p50", "E2E p95",
                    "E2E p99", "out tok/s"):
            tab.add_column(col, justify="left" if col == "class" else "right")
        rows = [("all", shown.overall)] + list(shown.per_class.items())
        for name, s in rows:
            tab.add_row(name, str(s.requests), str(s.failed), _v(s.ttft_ms.p50), _v(s.ttft_ms.p95),
                        _v(s.tpot_ms.p50, "{:.1f}"), _v(s.itl_ms.p50, "{:.1f}"), _v(s.e2e_ms.p50), _v(s.e2e_ms.p95),
                        _v(s.e2e_ms.p99), f"{s.output_tokens_per_s:.1f}")
        out.append(tab)
        o = shown.overall
        out.append(Text(f"offered {o.offered_rps:g}/s, sent {_v(o.sent_rps, '{:.2f}')}/s, completed "
                        f"{o.completed_rps:.2f}/s; client lag p99 {_v(o.lag_ms.get('p99'), '{:.2f}')} ms; errors "
                        f"{o.errors or 'none'}; latencies in ms from the intended send time"))
    if report.mode == "search":
        st = Table(title="search", title_justify="left")
        for col in ("rate/s", "passed", "E2E p95 ms", "why"):
            st.add_column(col)
        for tr in report.trials:
            st.add_row(f"{tr.offered_rps:g}", "yes" if tr.passed else "no", _v(tr.overall.e2e_ms.p95),
                       "; ".join(tr.reasons)[:100])
        out.append(st)
        e = report.effective
        if e and e.rps is not None:
            unc = f" (lowest failing {e.lowest_failing_rps:g}/s, +{e.relative_uncertainty:.0%})" \
                if e.lowest_failing_rps else ""
            out.append(Text(f"effective throughput: {e.rps:g} req/s at P95 <= {report.slo['p95_e2e_ms']:g} ms"
                            f"{unc}. {e.note}", style="bold"))
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


def _trial_at(report: ProbeReport) -> TrialReport | None:
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

    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.5))
    trials = sorted(report.trials, key=lambda t: t.offered_rps)
    rates = [t.offered_rps for t in trials]
    top = 0.0
    for q, style in (("p50", "o-"), ("p95", "s-"), ("p99", "^-")):
        ys = [getattr(t.overall.e2e_ms, q) for t in trials]
        finite: list[float] = [y for y in ys if y is not None]
        top = max([top, *finite])
        a.plot(rates, [math.nan if y is None else y for y in ys], style, label=f"E2E {q}")
    a.axhline(report.slo["p95_e2e_ms"], color="red", linestyle="--", label="P95 SLO")
    failed = [t.offered_rps for t in trials if not t.passed]
    if failed:
        a.scatter(failed, [max(top, report.slo["p95_e2e_ms"] or 0.0) * 1.05] * len(failed), marker="x", color="red",
                  label="trial failed")
    a.set_xlabel("offered rate (requests/s)")
    a.set_ylabel("end-to-end latency (ms, from intended send)")
    a.set_title("latency vs offered rate")
    a.legend()
    shown = report.trials[-1] if report.mode == "check" else _trial_at(report)
    if shown:
        vals = shown.e2e_ms_sorted
        finite = [v for v in vals if v is not None]
        n = len(vals)
        edge = max(finite) * 1.1 if finite else 1.0
        xs = [v if v is not None else edge for v in vals]
        b.step(xs, [(i + 1) / n for i in range(n)], where="post")
        b.axvline(report.slo["p95_e2e_ms"], color="red", linestyle="--", label="P95 SLO")
        b.axhline(0.95, color="grey", linestyle=":")
        b.set_title(f"E2E CDF at {shown.offered_rps:g} req/s ({n} requests, {n - len(finite)} failed)")
        b.set_xlabel("end-to-end latency (ms)")
        b.set_ylabel("share of requests")
        b.legend()
    fig.suptitle(f"{report.target.get('host') or report.target.get('url')}: {report.target.get('model')}")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)

