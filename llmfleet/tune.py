"""`llmfleet tune`'s search, without I/O of its own but the journal it appends to: the candidates of
a declared space, the order it tries them in, when it stops early, the confidence intervals of the
top candidates measured again, the Pareto front, and the winner as group data with its provenance.

The search (issue #43; the known tuners it improves on: vLLM's benchmarks/auto_tune/auto_tune.sh and
`vllm bench sweep` run a full grid, BentoML's llm-optimizer a full grid filtered afterwards):

- **A space.** Each flag takes a list of values, ordered (numbers ascending) or a range
  {"min", "max", "step"}; None among a flag's values is the flag left out (vLLM's own default).
  Environment variables (vllm_env: the CPU build's KV cache, VLLM_CPU_KVCACHE_SPACE, is one) take a
  list of values in the order given. Layouts are a list of vllm_layout values (None: vllm.service),
  unordered. A candidate is one value of each.
- **Hill climbing from the current configuration.** The incumbent is measured first (effective
  throughput: the probe's search against the group's mix and SLOs). Its neighbours (one flag one
  step up or down, or another layout) are tried in turn; the first that beats the incumbent by more
  than `min_gain` becomes the incumbent and the scan starts again from its neighbours. The search
  ends when no neighbour beats the incumbent, or at `max_starts` server starts.
- **Early stopping.** A neighbour is first asked to hold the incumbent's effective rate under the
  SLOs (one check at that rate); one that cannot is beaten without a search ("beaten"). Only one
  that holds it is searched upward from there.
- **Rejected trials** are recorded with the reason and the search goes on: refused before a start
  (the deploy's validation: `refused`), failed to start or crashed or out of memory (`failed`, the
  server's reason), over the preemption bound or without KV-cache headroom (`rejected`).
- **Resume.** Every trial is one JSON line of the journal; a search run again reads it and does not
  measure a candidate it holds.
"""

from __future__ import annotations

import hashlib
import json
import math
import statistics
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

# Student's t, two-sided 95%, by degrees of freedom (the t table; df > 30: the normal's 1.96)
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
       15: 2.131, 20: 2.086, 30: 2.042}
MEASURED, BEATEN, REFUSED, FAILED, REJECTED = "measured", "beaten", "refused", "failed", "rejected"


class SpaceError(ValueError):
    """A space that cannot be searched: names the entry, the value and the fix."""


@dataclass(frozen=True)
class Candidate:
    flags: tuple[tuple[str, object], ...]  # (flag, value) in the space's order; value None: left out
    layout: object = None  # a vllm_layout value; None: vllm.service
    env: tuple[tuple[str, str], ...] = ()  # (variable, value) in the space's order

    @property
    def key(self) -> str:
        """A stable name of the candidate (its journal key)."""
        doc: dict = {"flags": dict(self.flags), "layout": self.layout}
        if self.env:
            doc["env"] = dict(self.env)
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:12]

    def describe(self) -> str:
        parts = [f"{k} {'default' if v is None else v}" for k, v in self.flags]
        parts += [f"{k}={v}" for k, v in self.env]
        return ", ".join(parts) + (f"; layout {layout_words(self.layout)}" if self.layout is not None else "")

    def flags_over(self, base: dict) -> dict:
        """vllm_flags: ``base`` with the candidate's values (a None value: the flag left out)."""
        out = dict(base) | dict(self.flags)
        return {k: v for k, v in out.items() if v is not None}

    def env_over(self, base: dict) -> dict:
        """vllm_env: ``base`` with the candidate's variables."""
        return dict(base) | dict(self.env)


def layout_words(layout: object) -> str:
    """A layout in few words: a shorthand as it is, instances by name with their GPUs or CPUs
    ("a CPUs 0 + b CPUs 1")."""
    if not isinstance(layout, list):
        return str(layout)
    words = []
    for inst in layout:
        inst = inst if isinstance(inst, dict) else dict(inst)
        gpus = inst.get("gpus") or []
        words.append(f"{inst.get('name')} " + (f"GPUs {','.join(map(str, gpus))}" if gpus else
                                               f"CPUs {inst.get('cpus') or 'any'}"))
    return " + ".join(words)


@dataclass
class Space:
    flags: dict[str, list]  # each flag's values, in order (None: the flag left out)
    layouts: list = field(default_factory=lambda: [None])
    env: dict[str, list[str]] = field(default_factory=dict)  # each variable's values, in the order given

    @classmethod
    def parse(cls, raw: dict) -> Space:
        """{"flags": {name: [values] | {"min", "max", "step"}}, "env": {name: [values]},
        "layouts": [...]} (each part optional)."""
        if not isinstance(raw, dict):
            raise SpaceError(f"tune_space = {raw!r}: a mapping of 'flags', 'env' and 'layouts' (fix: e.g. "
                             "{'flags': {'max-num-seqs': [64, 128, 256]}})")
        unknown = set(raw) - {"flags", "env", "layouts"}
        if unknown:
            raise SpaceError(f"tune_space: unknown key(s) {sorted(unknown)} (fix: 'flags', 'env' and 'layouts' only)")
        flags: dict[str, list] = {}
        for name, spec in (raw.get("flags") or {}).items():
            flags[name] = _values(name, spec)
        env: dict[str, list[str]] = {}
        for name, spec in (raw.get("env") or {}).items():
            if not isinstance(spec, list) or not spec or not all(isinstance(v, str) for v in spec) \
                    or len(set(spec)) != len(spec):
                raise SpaceError(f"tune_space.env.{name} = {spec!r}: a list of distinct strings, as vllm_env "
                                 "takes them (fix: e.g. ['1', '4'])")
            env[name] = list(spec)
        layouts = list(raw.get("layouts") or [None])
        if len(set(map(json.dumps, layouts))) != len(layouts):
            raise SpaceError(f"tune_space.layouts = {layouts!r}: each layout once (fix: remove the repeated one)")
        if None in layouts and len(layouts) > 1:
            # the deploy moves a host from vllm.service to a layout, not back: the front door keeps
            # vllm_port (operations/vllm.py _serve_layout; the way back is not built)
            raise SpaceError(f"tune_space.layouts = {layouts!r}: None (vllm.service) beside serving layouts: a deploy "
                             "moves a host from vllm.service to a layout but not back (fix: compare layouts only, e.g. "
                             "one instance on every GPU against two on half each: [[{...}], [{...}, {...}]])")
        if not any(len(v) > 1 for v in [*flags.values(), *env.values()]) and len(layouts) < 2:
            raise SpaceError("tune_space: nothing to search (fix: a flag or variable with two values or more, or two "
                             "layouts)")
        return cls(flags, layouts, env)

    def grid(self) -> list[Candidate]:
        """Every candidate (what a full grid would start), flags varying fastest."""
        out = [Candidate((), layout) for layout in self.layouts]
        for name, values in self.env.items():
            out = [Candidate((), c.layout, c.env + ((name, v),)) for c in out for v in values]
        for name, values in self.flags.items():
            out = [Candidate(c.flags + ((name, v),), c.layout, c.env) for c in out for v in values]
        return out

    def neighbours(self, c: Candidate) -> list[Candidate]:
        """One flag one step up or down its values, then one variable's next or previous value,
        then another layout: up first (a larger batch is where throughput usually lies)."""
        out = []
        values = dict(c.flags)
        for name, options in self.flags.items():
            at = options.index(values[name])
            for step in (1, -1):
                if 0 <= at + step < len(options):
                    changed = tuple((k, options[at + step] if k == name else v) for k, v in c.flags)
                    out.append(Candidate(changed, c.layout, c.env))
        env = dict(c.env)
        for name, options in self.env.items():
            at = options.index(env[name])
            for step in (1, -1):
                if 0 <= at + step < len(options):
                    out.append(Candidate(c.flags, c.layout,
                                         tuple((k, options[at + step] if k == name else v) for k, v in c.env)))
        out += [Candidate(c.flags, layout, c.env) for layout in self.layouts if layout != c.layout]
        return out

    def nearest(self, flags: dict, layout: object, env: dict | None = None) -> Candidate:
        """The candidate closest to a configuration (the current one): each flag's value (a flag
        left out: None where the space has it), or the space's nearest value where it is not one;
        each variable's value, or the space's first; the layout, or the space's first."""
        chosen = []
        for name, options in self.flags.items():
            value = flags.get(name)
            if value not in options:
                numbers = [o for o in options if isinstance(o, (int, float))]
                numeric = isinstance(value, (int, float)) and numbers
                value = min(numbers, key=lambda o: abs(o - value)) if numeric else options[0]  # type: ignore[operator]
            chosen.append((name, value))
        env = env or {}
        chosen_env = tuple((name, str(env[name]) if env.get(name) in options else options[0])
                           for name, options in self.env.items())
        return Candidate(tuple(chosen), layout if layout in self.layouts else self.layouts[0], chosen_env)

    def is_exactly(self, c: Candidate, flags: dict, layout: object, env: dict) -> bool:
        """Whether ``c`` is that configuration itself (nothing to start to measure it)."""
        return c.flags_over(flags) == flags and c.env_over(env) == env and c.layout == layout


def _values(name: str, spec) -> list:
    if isinstance(spec, dict):
        if set(spec) != {"min", "max", "step"}:
            raise SpaceError(f"tune_space.flags.{name} = {spec!r}: a range is {{'min', 'max', 'step'}} (fix: those "
                             "three keys, or a list of values)")
        lo, hi, step = spec["min"], spec["max"], spec["step"]
        if not all(isinstance(v, (int, float)) for v in (lo, hi, step)) or step <= 0 or hi < lo:
            raise SpaceError(f"tune_space.flags.{name} = {spec!r}: min <= max and a positive step, all numbers")
        n = int(math.floor((hi - lo) / step + 1e-9)) + 1
        return [lo + i * step for i in range(n)]
    if not isinstance(spec, list) or len(spec) < 1 or len(set(map(json.dumps, spec))) != len(spec):
        raise SpaceError(f"tune_space.flags.{name} = {spec!r}: a list of distinct values, or a range "
                         "{'min', 'max', 'step'}")
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in spec if v is not None):
        # numbers ascending, the flag left out (None) first: vLLM's default is where a search starts
        return [v for v in spec if v is None] + sorted(v for v in spec if v is not None)
    return list(spec)


# ---- trials and the journal -------------------------------------------------------------------------

@dataclass
class Trial:
    key: str
    candidate: str  # Candidate.describe()
    status: str  # measured, beaten, refused, failed, rejected
    effective_rps: float | None = None
    p95_ms: float | None = None  # the P95 end-to-end latency at the effective rate
    reason: str = ""
    starts: int = 0  # server starts it cost
    repeats: list[float] = field(default_factory=list)  # effective rates measured again (confirm)
    # the search's resolution: the widest bracket (lowest failing rate minus the effective one) of
    # its measurements; None: the top rate still passed, or nothing was measured
    resolution: float | None = None


class Journal:
    """The trials so far, one JSON line each (appended as each ends: an interrupted search loses at
    most the trial it was in)."""

    def __init__(self, path: Path):
        self.path = path
        self.trials: dict[str, Trial] = {}
        if path.exists():
            for line in path.read_text().splitlines():
                if line.strip():
                    t = Trial(**json.loads(line))
                    self.trials[t.key] = t

    def record(self, trial: Trial) -> Trial:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as f:
            f.write(json.dumps(asdict(trial)) + "\n")
        self.trials[trial.key] = trial
        return trial

    @property
    def starts(self) -> int:
        return sum(t.starts for t in self.trials.values())


# measure(candidate, floor_rps): a trial of the candidate. floor_rps None: the full search (the
# incumbent); a number: first the check at that rate (status "beaten" if it does not hold), then
# the search upward from it.
Measure = Callable[[Candidate, float | None], Trial]


def search(space: Space, start: Candidate, measure: Measure, journal: Journal, *, max_starts: int,
           min_gain: float = 0.02, log: Callable[[str], None] = lambda _: None) -> Trial:
    """Hill climbing from `start` (module doc); the journal's trials are reused. Returns the best
    measured trial (the incumbent at the end)."""
    incumbent = _trial(start, None, measure, journal, log)
    if incumbent.status != MEASURED or incumbent.effective_rps is None:
        raise SpaceError(f"the starting configuration ({start.describe()}) did not measure: {incumbent.reason} (fix: "
                         "a configuration that serves, or a space around one that does)")
    best_c = start
    improved = True
    while improved:
        improved = False
        for c in space.neighbours(best_c):
            if c.key in journal.trials:
                t = journal.trials[c.key]
            elif journal.starts >= max_starts:
                log(f"stopped: {journal.starts} server starts, the most allowed (max_starts)")
                return incumbent
            else:
                t = _trial(c, incumbent.effective_rps, measure, journal, log)
            if t.status == MEASURED and t.effective_rps is not None and \
                    t.effective_rps > incumbent.effective_rps * (1 + min_gain):  # type: ignore[operator]
                log(f"better: {c.describe()} at {t.effective_rps:g} req/s (was {incumbent.effective_rps:g})")
                incumbent, best_c, improved = t, c, True
                break
    return incumbent


def _trial(c: Candidate, floor: float | None, measure: Measure, journal: Journal, log) -> Trial:
    if c.key in journal.trials:
        return journal.trials[c.key]
    t = measure(c, floor)
    log(f"{t.status}: {c.describe()}" + (f" at {t.effective_rps:g} req/s" if t.effective_rps else "")
        + (f" ({t.reason})" if t.reason else ""))
    return journal.record(t)


# ---- the figures ------------------------------------------------------------------------------------

def interval(values: Iterable[float]) -> tuple[float, float]:
    """The mean and the half-width of its two-sided 95% confidence interval (Student's t); a single
    value has no interval (inf)."""
    xs = list(values)
    if len(xs) < 2:
        return (xs[0] if xs else math.nan), math.inf
    df = len(xs) - 1
    t = T95.get(df) or next((T95[k] for k in sorted(T95) if k >= df), 1.96)
    return statistics.fmean(xs), t * statistics.stdev(xs) / math.sqrt(len(xs))


def figures(t: Trial) -> tuple[float, float]:
    """A trial's effective throughput: the mean of its measurements and the half-width of its 95%
    interval, never narrower than the search's resolution (a search answers with a bracket: every
    measurement may agree because they fell on the same rates)."""
    mean, half = interval(measurements(t))
    return mean, max(half, t.resolution or 0.0)


def pareto(trials: Iterable[Trial]) -> list[Trial]:
    """The measured trials no other beats on both throughput (higher) and P95 latency (lower),
    by throughput."""
    points = [t for t in trials if t.status == MEASURED and t.effective_rps is not None and t.p95_ms is not None]
    front = [t for t in points if not any(
        o.effective_rps >= t.effective_rps and o.p95_ms <= t.p95_ms  # type: ignore[operator]
        and (o.effective_rps > t.effective_rps or o.p95_ms < t.p95_ms) for o in points)]  # type: ignore[operator]
    return sorted(front, key=lambda t: t.effective_rps, reverse=True)  # type: ignore[arg-type,return-value]


def rejection(preemptions: float | None, requests: int, kv_peak: float | None, *, max_preemptions_per_request: float,
              min_kv_headroom: float) -> str:
    """Why a trial that met its SLOs is still rejected ("" if it is not): more preemptions per
    request than the bound (vLLM recomputes a preempted request: it served the SLOs on borrowed
    time), or a KV cache whose peak left less than the headroom (the next longer request preempts)."""
    reasons = []
    if preemptions is not None and requests and preemptions / requests > max_preemptions_per_request:
        reasons.append(f"{preemptions:g} preemptions over {requests} requests ({preemptions / requests:.3f} a request, "
                       f"above tune_max_preemptions_per_request {max_preemptions_per_request:g})")
    if kv_peak is not None and kv_peak > 1 - min_kv_headroom:
        reasons.append(f"KV cache peak {kv_peak:.1%}: less than tune_min_kv_headroom {min_kv_headroom:.0%} left")
    return "; ".join(reasons)


def ranked(trials: Iterable[Trial]) -> list[Trial]:
    """The measured trials, best first: by the mean of their measurements (the search's and the
    repeats'), then by lower P95."""
    measured = [t for t in trials if t.status == MEASURED and t.effective_rps is not None]
    return sorted(measured, key=lambda t: (-figures(t)[0], t.p95_ms or math.inf))


def measurements(t: Trial) -> list[float]:
    """Every effective rate measured for a trial: the search's, then the repeats'."""
    return [v for v in [t.effective_rps, *t.repeats] if v is not None]


def snippet(c: Candidate, base_flags: dict, base_env: dict, provenance: dict, layouts: bool) -> str:
    """The winner as group data: vllm_flags (group data's, the searched ones replaced), vllm_env
    where the space has variables, vllm_layout where it has layouts; the provenance as comments
    above."""
    lines = [f"# llmfleet tune: {k}: {v}" for k, v in provenance.items()]
    lines.append(f"vllm_flags = {c.flags_over(base_flags)!r}")
    if c.env:
        lines.append(f"vllm_env = {c.env_over(base_env)!r}")
    if layouts:
        lines.append(f"vllm_layout = {c.layout!r}")
    return "\n".join(lines) + "\n"


def mix_hash(mix: list, slo: dict) -> str:
    """A short hash of the request mix and the SLOs a tune measured against (its provenance)."""
    return hashlib.sha256(json.dumps([mix, slo], sort_keys=True, default=str).encode()).hexdigest()[:12]
