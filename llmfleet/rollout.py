"""A canary rollout's logic, without I/O of its own but the Prometheus query it is handed and the
evidence it writes: the cohort, the gateway weights that give it each step's share, the PromQL of
each side, the gates' verdicts, and the evidence (JSON and a PNG).

operations/vllm_roll.py runs it (rollout_strategy = "canary"): the cohort's hosts roll first
(drained at the gateway, switched, ready, as in a rolling deploy), every other host waits for the
verdict. For each of rollout_steps the cohort's gateway agents answer the weight that gives the
cohort that share of the gateway's requests (the others stay at 100), and after the warm-up both
sides are compared over the same window from Prometheus. A step that fails a gate ends the rollout:
the cohort is switched back to what it served and the deploy fails naming the gate, both values and
the evidence file. After the last step the cohort is back at full weight and the other hosts roll
at vllm_max_unavailable.

Facts behind the values: HAProxy 2.6 (docs.haproxy.org/2.6/configuration.html, 4.2 "balance
roundrobin": weights honoured and changed at runtime; 5.2 "weight": 0 to 256; "agent-check": an
answer "N%" sets the weight to N% of the configured one, src/server.c
server_parse_weight_change_request caps it at 256). vLLM's metric names: llmfleet/compat.py METRICS.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from llmfleet import compat

if TYPE_CHECKING:
    from llmfleet.schema import Settings

CONFIGURED_WEIGHT = 100  # every server of the gateway's backend (templates/gateway/haproxy.cfg.j2): N% is weight N
MAX_WEIGHT = 256  # HAProxy's highest server weight (CFG 5.2 "weight"; a relative agent answer is capped there)
CANARY, ROLLING = "canary", "rolling"
# a canary's synthetic requests carry SYNTHETIC_HEADER; the gateway and the front door answer them
# with SERVED_BY_HEADER, the server that answered (HAProxy 2.6 CFG 7.3.3 "srv_name", 4.2
# "http-response set-header" with a log-format value), so the synthetic client can tell the cohort's
# answers from the baseline's by class (the per-class gates; vLLM's histograms carry no class)
SYNTHETIC_HEADER, SERVED_BY_HEADER = "X-Llmfleet-Synthetic", "X-Llmfleet-Server"


@dataclass(frozen=True)
class Gate:
    """One gate: the measure it compares, how (`ratio`: cohort / baseline at most the threshold, or
    the cohort slower by no more than the gate's floor; `increase`: cohort - baseline at most it;
    `shift`: |cohort / baseline - 1| at most it), and what it says in a verdict.

    A latency gate's floor: histogram_quantile interpolates linearly inside the bucket the quantile
    falls in (prometheus.io/docs/prometheus/latest/querying/functions/#histogram_quantile), so two
    P95s less than about a bucket apart may be the same distribution; and a ratio of small values
    (a 10 ms inter-token latency) doubles on noise. The cohort fails a latency gate only when it is
    both `ratio` times and the floor's seconds slower."""

    measure: str
    how: str
    label: str
    floor: str | None = None  # a ratio gate's absolute floor (rollout_gates' name, seconds)


# rollout_gates' names (schema.RolloutGates), in the order a verdict lists them
GATES: dict[str, Gate] = {
    "ttft_p95_ratio": Gate("ttft_p95_s", "ratio", "P95 time to first token (s)", "ttft_p95_floor_s"),
    "itl_p95_ratio": Gate("itl_p95_s", "ratio", "P95 inter-token latency (s)", "itl_p95_floor_s"),
    "e2e_p95_ratio": Gate("e2e_p95_s", "ratio", "P95 end-to-end latency (s)", "e2e_p95_floor_s"),
    "error_ratio_increase": Gate("error_ratio", "increase", "share of 5xx answers at the gateway"),
    "generated_tokens_shift": Gate("generated_tokens_mean", "shift", "mean generated tokens per request"),
    "preemptions_per_request_increase": Gate("preemptions_per_request", "increase", "preemptions per request"),
    "kv_cache_peak_increase": Gate("kv_cache_peak", "increase", "peak KV cache usage (0-1)"),
}

# each measure: PromQL over one side's vLLM series ({sel}: job="vllm" and its hosts) or the gateway's
# ({gsel}: job="gateway", its backend and the side's servers), over the window [{w}s]. A metric
# renamed between vLLM versions is read under every name (the sides may run different versions).
_HIST_Q = 'histogram_quantile(0.95, sum by (le) (increase({{__name__=~"{names}",{sel}}}[{w}s])))'
MEASURES: dict[str, str] = {
    "requests": 'sum(increase({{__name__=~"{e2e_count}",{sel}}}[{w}s]))',
    "ttft_p95_s": _HIST_Q.replace("{names}", "{ttft_bucket}"),
    "itl_p95_s": _HIST_Q.replace("{names}", "{itl_bucket}"),
    "e2e_p95_s": _HIST_Q.replace("{names}", "{e2e_bucket}"),
    "error_ratio": 'sum(increase(haproxy_server_http_responses_total{{{gsel},code="5xx"}}[{w}s])) / '
                   'sum(increase(haproxy_server_http_responses_total{{{gsel}}}[{w}s]))',
    "generated_tokens_mean": 'sum(increase({{__name__=~"{gen_sum}",{sel}}}[{w}s])) / '
                             'sum(increase({{__name__=~"{gen_count}",{sel}}}[{w}s]))',
    "preemptions_per_request": 'sum(increase({{__name__=~"{preemptions}",{sel}}}[{w}s])) / '
                               'sum(increase({{__name__=~"{e2e_count}",{sel}}}[{w}s]))',
    "kv_cache_peak": 'max(max_over_time({{__name__=~"{kv_cache}",{sel}}}[{w}s]))',
}


def _names(purpose: str, suffix: str = "") -> str:
    """Every name vLLM has given the metric of `purpose` (compat.METRICS), as a PromQL regex."""
    return "|".join(re.escape(name + suffix) for name, _, _ in compat.METRICS[purpose]).replace("\\", "\\\\")


def _hosts_regex(hosts: list[str]) -> str:
    return "|".join(re.escape(h) for h in sorted(hosts)).replace("\\", "\\\\")


def selectors(hosts: list[str], backend: str, instances: list[str] | None = None) -> tuple[str, str]:
    """One side's label selectors: its vLLM series and its HAProxy server series. A side of hosts:
    job vllm by host, and the fleet gateway's servers (job gateway, named by host). A side of a
    layout host's instances (`instances`): job vllm by host and vllm_instance, and its front door's
    servers (job frontdoor, named by instance), as `llmfleet monitoring` labels them."""
    regex = _hosts_regex(hosts)
    if instances is None:
        return f'job="vllm",host=~"{regex}"', f'job="gateway",proxy="{backend}",server=~"{regex}"'
    names = _hosts_regex(instances)
    return (f'job="vllm",host=~"{regex}",vllm_instance=~"{names}"',
            f'job="frontdoor",host=~"{regex}",proxy="{backend}",server=~"{names}"')


def queries(hosts: list[str], window_s: int, backend: str, instances: list[str] | None = None) -> dict[str, str]:
    """The PromQL of each measure for one side (its hosts, or `instances` of a layout host), over the
    `window_s` seconds before the query's time."""
    names = {"ttft_bucket": _names("ttft", "_bucket"), "itl_bucket": _names("itl", "_bucket"),
             "e2e_bucket": _names("e2e_latency", "_bucket"), "e2e_count": _names("e2e_latency", "_count"),
             "gen_sum": _names("request_generation_tokens", "_sum"),
             "gen_count": _names("request_generation_tokens", "_count"),
             "preemptions": _names("preemptions"), "kv_cache": _names("kv_cache")}
    sel, gsel = selectors(hosts, backend, instances)
    return {m: q.format(sel=sel, gsel=gsel, w=window_s, **names) for m, q in MEASURES.items()}


def fleet_rate_query(hosts: list[str], window_s: int, instances: list[str] | None = None) -> str:
    """Requests the hosts (or a layout host's `instances`) finished per second over the `window_s`
    seconds before the query's time."""
    sel, _ = selectors(hosts, "", instances)
    return f'sum(rate({{__name__=~"{_names("e2e_latency", "_count")}",{sel}}}[{window_s}s]))'


def measure(query: Callable[[str, float], float | None], hosts: list[str], end: float, window_s: int,
            backend: str, instances: list[str] | None = None) -> dict[str, float | None]:
    """One side's measures over [end - window_s, end]: `query(promql, at)` answers a number or None
    (no series, or NaN: nothing happened)."""
    return {m: query(q, end) for m, q in queries(hosts, window_s, backend, instances).items()}


# ---- the cohort and its weight -------------------------------------------------------------------

def cohort(settings: Settings, serving: list[str], layouts: list[str] | None = None) -> list[str]:
    """The canary cohort of hosts: rollout_canary_hosts, else the first serving host without a layout
    by name; [] where every serving host has one (each proves a change on its canary instances)."""
    if settings.rollout_canary_hosts:
        return sorted(settings.rollout_canary_hosts)
    return [h for h in sorted(serving) if h not in (layouts or [])][:1]


def weight_for(share_pct: float, n_cohort: int, n_baseline: int) -> int:
    """The weight (percent of the configured one) each cohort host's agent answers so that the
    cohort gets `share_pct` of the requests, the baseline's hosts staying at 100: round-robin sends
    each server its weight's share of the backend's total."""
    w = share_pct / (100 - share_pct) * n_baseline / n_cohort * CONFIGURED_WEIGHT
    return max(1, min(MAX_WEIGHT, round(w)))


def share_of(weight: int, n_cohort: int, n_baseline: int) -> float:
    """The cohort's share of the requests (percent) at `weight`, the baseline at 100."""
    return 100 * n_cohort * weight / (n_cohort * weight + n_baseline * CONFIGURED_WEIGHT)


def max_share(n_cohort: int, n_baseline: int) -> float:
    return share_of(MAX_WEIGHT, n_cohort, n_baseline)


def problems(settings: Settings, serving: list[str], layouts: list[str], has_gateways: bool) -> list[str]:
    """What makes a canary impossible for this inventory (`serving`: every host that serves; `layouts`:
    those of them with a serving layout), each with its fix; [] for "rolling". A fleet whose every
    serving host has a layout has no cohort of hosts (and needs no gateway): each proves a change on
    its canary instances (instance_problems)."""
    if settings.rollout_strategy != CANARY:
        return []
    fix_rolling = "or rollout_strategy = 'rolling'"
    out = []
    if settings.rollout_prometheus_url is None:
        out.append("rollout_strategy = 'canary' and rollout_prometheus_url = None: the gates read the fleet's "
                   "Prometheus (fix: its URL, scraping what `llmfleet monitoring` renders, " + fix_rolling + ")")
    unknown = [h for h in settings.rollout_canary_hosts if h not in serving]
    if unknown:
        out.append(f"rollout_canary_hosts = {list(settings.rollout_canary_hosts)!r}: {', '.join(unknown)} "
                   f"{'is' if len(unknown) == 1 else 'are'} not a serving host of the inventory (fix: name hosts of "
                   f"{sorted(serving)!r})")
        return out
    members = cohort(settings, serving, layouts)
    if not members:
        return out
    if not has_gateways:
        out.append(f"rollout_strategy = 'canary': the inventory has no gateway hosts (group "
                   f"{settings.gateway_group!r}), where the cohort's traffic share is set (fix: add gateway hosts, "
                   f"{fix_rolling})")
    in_layout = [h for h in members if h in layouts]
    if in_layout:
        out.append(f"rollout_canary_hosts: {', '.join(in_layout)} serve(s) a layout (vllm_layout): a cohort of hosts "
                   "is hosts without one, and a layout host proves a change on its own canary instances "
                   "(rollout_canary_instances) (fix: other hosts, " + fix_rolling + ")")
    baseline = [h for h in serving if h not in members]
    if not baseline:
        out.append(f"rollout_canary_hosts = {members!r}: every serving host is in the cohort, and nothing is left "
                   "to compare it with (fix: leave at least one serving host out of it)")
        return out
    out += _share_problems(settings, len(members), len(baseline), "host")
    return out


def _share_problems(settings: Settings, n_cohort: int, n_baseline: int, unit: str) -> list[str]:
    """The steps' problems for a cohort of `n_cohort` against `n_baseline` (hosts at the gateway,
    or instances at a front door): shares that do not rise, a share the cohort's weight cannot
    reach, synthetic load too slow for rollout_min_requests."""
    out = []
    steps = list(settings.rollout_steps)
    if steps != sorted(set(steps)):
        out.append(f"rollout_steps = {steps!r}: the shares must rise, each once (fix: for example [10, 25])")
    top = max_share(n_cohort, n_baseline)
    high = [s for s in steps if s > top]
    if high:
        total = n_cohort + n_baseline
        need = next((n for n in range(n_cohort, total) if max_share(n, total - n) >= max(steps)), None)
        out.append(f"rollout_steps = {steps!r}: a cohort of {n_cohort} {unit}(s) beside {n_baseline} can take at "
                   f"most {top:.1f}% of the requests (HAProxy's highest weight, {MAX_WEIGHT}, against 100) "
                   f"(fix: steps up to {math.floor(top * 10) / 10:g}"
                   + (f", or a cohort of {need} {unit}s" if need else "") + ")")
    first = share_of(weight_for(steps[0], n_cohort, n_baseline), n_cohort, n_baseline)
    synthetic = settings.rollout_synthetic_rps * first / 100 * settings.rollout_step_s
    if synthetic < settings.rollout_min_requests:
        out.append(f"rollout_synthetic_rps = {settings.rollout_synthetic_rps:g}: at the first step ({steps[0]:g}%) "
                   f"it gives the cohort about {synthetic:.0f} requests in a window of rollout_step_s = "
                   f"{settings.rollout_step_s}, fewer than rollout_min_requests = {settings.rollout_min_requests} "
                   f"(fix: rollout_synthetic_rps = "
                   f"{math.ceil(settings.rollout_min_requests / (first / 100 * settings.rollout_step_s) * 10) / 10:g}"
                   f" or more, a longer rollout_step_s, or a larger first step)")
    return out


def instance_cohort(settings: Settings, names: list[str]) -> list[str]:
    """A layout host's canary instances: rollout_canary_instances, else its first instance by name."""
    return sorted(settings.rollout_canary_instances) if settings.rollout_canary_instances else sorted(names)[:1]


def instance_problems(settings: Settings, host: str, names: list[str]) -> list[str]:
    """What makes an instance canary impossible on a layout host whose instances are `names`, each
    with its fix; [] for "rolling" and for a layout of one instance (nothing on the host to compare
    it with: it rolls as a baseline host, on the fleet cohort's verdict)."""
    if settings.rollout_strategy != CANARY or len(names) < 2:
        return []
    unknown = [n for n in settings.rollout_canary_instances if n not in names]
    if unknown:
        return [f"rollout_canary_instances = {list(settings.rollout_canary_instances)!r}: {host} serves no instance "
                f"{', '.join(unknown)} (fix: name instances of its vllm_layout, {sorted(names)!r}, or leave it empty "
                "for the first)"]
    members = instance_cohort(settings, names)
    if len(members) == len(names):
        return [f"rollout_canary_instances = {members!r}: every instance of {host}'s layout is a canary, and none is "
                "left to compare them with (fix: leave at least one instance out)"]
    return _share_problems(settings, len(members), len(names) - len(members), "instance")


# ---- the verdict -----------------------------------------------------------------------------------

@dataclass
class GateVerdict:
    gate: str
    label: str
    threshold: float
    cohort: float | None
    baseline: float | None
    value: float | None  # the compared figure (ratio, difference or shift)
    passed: bool
    why: str = ""
    floor: float | None = None  # a latency gate's floor (s): slower by no more than this passes

    def line(self) -> str:
        def fmt(v: float | None) -> str:
            return "none" if v is None else f"{v:.4g}"
        word = "pass" if self.passed else "FAIL"
        if self.gate.split("[")[0] == "requests":
            return (f"{word} {self.gate}: {self.label}: cohort {fmt(self.cohort)}, baseline {fmt(self.baseline)} "
                    f"(at least {self.threshold:g} each)" + (f": {self.why}" if self.why else ""))
        slower = ("" if self.floor is None or self.cohort is None or self.baseline is None
                  else f"; slower by {fmt(self.cohort - self.baseline)} s, floor {self.floor:g} s")
        return (f"{word} {self.gate}: {self.label}: cohort {fmt(self.cohort)}, baseline {fmt(self.baseline)}"
                f" ({_how(self.gate)} {fmt(self.value)}, at most {self.threshold:g}{slower})"
                + (f": {self.why}" if self.why else ""))


def _how(gate: str) -> str:
    return {"ratio": "ratio", "increase": "difference", "shift": "shift"}[GATES[gate.split("[")[0]].how]


def judge(gates: dict[str, float], cohort_side: dict[str, float | None], baseline_side: dict[str, float | None],
          min_requests: int) -> list[GateVerdict]:
    """Every gate's verdict, the requests each side finished first (fewer than `min_requests` on
    either side fails the step: no verdict on too little). A measure a side has no observation of
    in the window is not compared (inter-token latency where every request asked one token): the
    requests gate is what stops a cohort whose requests never reached its histograms."""
    out = []
    c_n, b_n = cohort_side.get("requests") or 0, baseline_side.get("requests") or 0
    enough = c_n >= min_requests and b_n >= min_requests
    out.append(GateVerdict("requests", "requests finished in the window", min_requests, c_n, b_n, min(c_n, b_n),
                           enough, "" if enough else "too few for a verdict (rollout_min_requests)"))
    for name, gate in GATES.items():
        threshold, floor = gates[name], gates[gate.floor] if gate.floor else None
        c, b = cohort_side.get(gate.measure), baseline_side.get(gate.measure)
        value, passed, why = _compare(gate.how, c, b, threshold)
        if not passed and floor is not None and c is not None and b is not None and c - b <= floor + 1e-12:
            passed, why = True, f"within the floor ({gate.floor})"
        out.append(GateVerdict(name, gate.label, threshold, c, b, value, passed, why, floor))
    return out


# the per-class gates: the overall gate each one applies per class of the probe's mix, and what it
# reads from a side's synthetic answers of the class
CLASS_GATES = {"ttft_p95_ratio": ("ttft_s", GATES["ttft_p95_ratio"].label),
               "e2e_p95_ratio": ("e2e_s", GATES["e2e_p95_ratio"].label),
               "error_ratio_increase": ("failed", "share of failed requests")}


def class_verdicts(gates: dict[str, float], by_side: dict[str, dict[str, dict]], min_requests: int,
                   alpha: float) -> list[GateVerdict]:
    """Per class of the probe's mix, from the synthetic load's answers by side (llmfleet/probe/
    synthetic.py "by_side"): P95 TTFT and end-to-end latency against the same ratio and floor as the
    overall gates, and the share of failed requests against error_ratio_increase. A latency gate
    fails only where the cohort's answers are also slower beyond chance: a one-sided Mann-Whitney U
    test (scipy.stats.mannwhitneyu), p below `alpha` divided by the number of latency comparisons
    (Bonferroni): a P95 of a dozen requests moves a lot between two windows of the same server. A
    class with fewer than `min_requests` on either side is not compared, and says so."""
    from scipy.stats import mannwhitneyu

    cohort, baseline = by_side.get("cohort", {}), by_side.get("baseline", {})
    classes = sorted(set(cohort) | set(baseline))
    compared = [c for c in classes if cohort.get(c, {}).get("requests", 0) >= min_requests
                and baseline.get(c, {}).get("requests", 0) >= min_requests]
    tests = max(1, 2 * len(compared))
    out = []
    for cls in classes:
        c, b = cohort.get(cls, {}), baseline.get(cls, {})
        if cls not in compared:
            out.append(GateVerdict(f"requests[{cls}]", f"class {cls}: synthetic requests in the window", min_requests,
                                   c.get("requests", 0), b.get("requests", 0), None, True,
                                   "not compared: too few on a side (rollout_min_class_requests)"))
            continue
        for gate, (key, what) in CLASS_GATES.items():
            label, name = f"class {cls}: {what}", f"{gate}[{cls}]"
            if key == "failed":
                cv, bv = c["failed"] / c["requests"], b["failed"] / b["requests"]
                value, passed, why = _compare("increase", cv, bv, gates[gate])
                out.append(GateVerdict(name, label, gates[gate], cv, bv, value, passed, why))
                continue
            xs, ys = c[key], b[key]
            floor_name = GATES[gate].floor
            floor = gates[floor_name] if floor_name else None
            if len(xs) < 2 or len(ys) < 2:
                out.append(GateVerdict(name, label, gates[gate], None, None, None, True,
                                       "not compared: too few answered", floor))
                continue
            cv, bv = _p95(xs), _p95(ys)
            value, passed, why = _compare("ratio", cv, bv, gates[gate])
            if not passed and floor is not None and cv - bv <= floor + 1e-12:
                passed, why = True, f"within the floor ({floor_name})"
            if not passed:
                p = float(mannwhitneyu(xs, ys, alternative="greater").pvalue)
                if p >= alpha / tests:
                    passed, why = True, (f"not significant: Mann-Whitney p = {p:.3g}, at least {alpha:g} / {tests} "
                                         "(rollout_class_significance)")
                else:
                    why = f"Mann-Whitney p = {p:.3g} < {alpha:g} / {tests}"
            out.append(GateVerdict(name, label, gates[gate], cv, bv, value, passed, why, floor))
    return out


def _p95(xs: list[float]) -> float:
    """The 95th percentile, interpolated between the closest ranks (numpy's default)."""
    import numpy

    return float(numpy.percentile(xs, 95))


def _compare(how: str, c: float | None, b: float | None, threshold: float) -> tuple[float | None, bool, str]:
    if how == "increase":  # none on a side: nothing of it happened there (no 5xx, no preemption)
        value = (c or 0.0) - (b or 0.0)
        return value, value <= threshold + 1e-12, ""
    if c is None or b is None:  # the requests gate has both sides' counts: no observation here, not no request
        side = "either side" if c is None and b is None else "the cohort" if c is None else "the baseline"
        return None, True, (f"not compared: {side} observed none in the window (inter-token latency: no request of "
                            "more than one token)")
    if b == 0:
        return (0.0 if c == 0 else math.inf), c == 0, ""
    ratio = c / b
    value = ratio if how == "ratio" else abs(ratio - 1)
    return value, value <= threshold + 1e-12, ""


# ---- the evidence --------------------------------------------------------------------------------

@dataclass
class Step:
    share_pct: float  # asked
    weight: int  # each cohort host's agent answers this percent
    achieved_pct: float  # the share that weight gives
    start: float
    end: float  # the window (Unix time), warm-up left out
    synthetic: dict | None  # the synthetic load sent during the window (None: the fleet's own traffic)
    cohort: dict[str, float | None]
    baseline: dict[str, float | None]
    verdicts: list[GateVerdict]
    queries: dict[str, dict[str, str]] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return all(v.passed for v in self.verdicts)


@dataclass
class Evidence:
    started: float
    cohort: list[str]
    baseline: list[str]
    prometheus: str
    steps: list[Step] = field(default_factory=list)
    verdict: str = "pending"  # passed, failed

    def failed_gates(self) -> list[GateVerdict]:
        return [v for s in self.steps for v in s.verdicts if not v.passed]

    def to_json(self) -> str:
        doc = asdict(self)
        for step, raw in zip(self.steps, doc["steps"], strict=True):
            raw["passed"] = step.passed
        return json.dumps(doc, indent=2)


def evidence_paths(settings: Settings, root: Path, started: float, members: list[str]) -> tuple[Path, Path]:
    """The JSON and PNG of a rollout: rollout_evidence_dir (relative: to `root`), named by its start
    (UTC) and cohort."""
    import time

    folder = Path(settings.rollout_evidence_dir)
    folder = folder if folder.is_absolute() else root / folder
    stem = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(started)) + "-canary-" + "-".join(members).replace("/", ".")
    return folder / f"{stem}.json", folder / f"{stem}.png"


def write(evidence: Evidence, json_path: Path, png_path: Path) -> None:
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(evidence.to_json() + "\n")
    plot(evidence, png_path)


def plot(evidence: Evidence, path: Path) -> None:
    """PNG: for each step, the cohort's and the baseline's value of every gate's measure, the
    failed ones marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    gates = list(GATES)
    fig, axes = plt.subplots(1, len(gates), figsize=(3.2 * len(gates), 3.6))
    for ax, name in zip(axes, gates, strict=True):
        measure_name = GATES[name].measure
        xs = [f"{s.achieved_pct:.0f}%" for s in evidence.steps]
        cohort_vals = [s.cohort.get(measure_name) for s in evidence.steps]
        base_vals = [s.baseline.get(measure_name) for s in evidence.steps]
        x = list(range(len(xs)))
        ax.bar([i - 0.2 for i in x], [v or 0 for v in base_vals], 0.4, label="baseline", color="#8a8a8a")
        ax.bar([i + 0.2 for i in x], [v or 0 for v in cohort_vals], 0.4, label="cohort", color="#3070b0")
        for i, step in enumerate(evidence.steps):
            verdict = next(v for v in step.verdicts if v.gate == name)
            if not verdict.passed:
                ax.annotate("FAIL", (i + 0.2, cohort_vals[i] or 0), ha="center", va="bottom", color="red",
                            fontweight="bold")
        ax.set_xticks(x, xs)
        ax.set_title(GATES[name].label, fontsize=8)
        ax.tick_params(labelsize=7)
    axes[0].legend(fontsize=7)
    fig.suptitle(f"canary {', '.join(evidence.cohort)} against {', '.join(evidence.baseline)}: {evidence.verdict}",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
