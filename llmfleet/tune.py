"""`llmfleet tune`'s search, without I/O of its own but the journal it appends to: the candidates of
a declared space, the order it tries them in, when it stops early, the confidence intervals of the
top candidates measured again, the Pareto front, and the winner as group data with its provenance.

The search (issue #43; the known tuners it improves on: vLLM's benchmarks/auto_tune/auto_tune.sh and
`vllm bench sweep` run a full grid, BentoML's llm-optimizer a full grid filtered afterwards):

- **A space.** Each flag takes a list of values, ordered (numbers ascending) or a range
  {"min", "max", "step"}; layouts are a list of vllm_layout values (None: vllm.service), unordered.
  A candidate is one value of each.
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
    flags: tuple[tuple[str, object], ...]  # (flag, value) in the space's order
    layout: object = None  # a vllm_layout value; None: vllm.service

    @property
    def key(self) -> str:
        """A stable name of the candidate (its journal key)."""
        raw = json.dumps({"flags": dict(self.flags), "layout": self.layout}, sort_keys=True)
        return hashlib.sha256(raw.encode()).hexdigest()[:12]

    def describe(self) -> str:
        flags = ", ".join(f"{k} {v}" for k, v in self.flags)
        return flags + (f"; layout {json.dumps(self.layout)}" if self.layout is not None else "")


@dataclass
class Space:
    flags: dict[str, list]  # each flag's values, in order
    layouts: list = field(default_factory=lambda: [None])

    @classmethod
    def parse(cls, raw: dict) -> Space:
        """{"flags": {name: [values] | {"min", "max", "step"}}, "layouts": [...]} (layouts optional)."""
        unknown = set(raw) - {"flags", "layouts"}
        if unknown:
            raise SpaceError(f"tune_space: unknown key(s) {sorted(unknown)} (fix: 'flags' and 'layouts' only)")
        flags: dict[str, list] = {}
        for name, spec in (raw.get("flags") or {}).items():
            flags[name] = _values(name, spec)
        layouts = list(raw.get("layouts") or [None])
        if not flags and len(layouts) < 2:
            raise SpaceError("tune_space: nothing to search (fix: a flag with two values or more, or two layouts)")
        return cls(flags, layouts)

    def grid(self) -> list[Candidate]:
        """Every candidate (what a full grid would start), flags varying fastest."""
        out = [Candidate((), layout) for layout in self.layouts]
        for name, values in self.flags.items():
            out = [Candidate(c.flags + ((name, v),), c.layout) for c in out for v in values]
        return out

    def neighbours(self, c: Candidate) -> list[Candidate]:
        """One flag one step up or down its values, or another layout: up first (a larger batch is
        where throughput usually lies), then down, then the layouts."""
        out = []
        values = dict(c.flags)
        for name, options in self.flags.items():
            at = options.index(values[name])
            for step in (1, -1):
                if 0 <= at + step < len(options):
                    changed = tuple((k, options[at + step] if k == name else v) for k, v in c.flags)
                    out.append(Candidate(changed, c.layout))
        out += [Candidate(c.flags, layout) for layout in self.layouts if layout != c.layout]
        return out

    def nearest(self, flags: dict, layout: object) -> Candidate:
        """The candidate closest to a configuration (the current one): each flag's value, or the
        space's nearest value where it is not one; the layout, or the space's first."""
        chosen = []
        for name, options in self.flags.items():
            value = flags.get(name)
            if value not in options:
                numeric = isinstance(value, (int, float)) and all(isinstance(o, (int, float)) for o in options)
                value = min(options, key=lambda o: abs(o - value)) if numeric else options[0]  # type: ignore[operator]
            chosen.append((name, value))
        return Candidate(tuple(chosen), layout if layout in self.layouts else self.layouts[0])


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
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in spec):
        return sorted(spec)
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


def pareto(trials: Iterable[Trial]) -> list[Trial]:
    """The measured trials no other beats on both throughput (higher) and P95 latency (lower),
    by throughput."""
    points = [t for t in trials if t.status == MEASURED and t.effective_rps is not None and t.p95_ms is not None]
    front = [t for t in points if not any(
        o.effective_rps >= t.effective_rps and o.p95_ms <= t.p95_ms  # type: ignore[operator]
        and (o.effective_rps > t.effective_rps or o.p95_ms < t.p95_ms) for o in points)]  # type: ignore[operator]
    return sorted(front, key=lambda t: t.effective_rps, reverse=True)  # type: ignore[arg-type,return-value]


def snippet(c: Candidate, base_flags: dict, provenance: dict) -> str:
    """The winner as group data: vllm_flags (group data's, the searched ones replaced) and
    vllm_layout where the space has layouts, each line of provenance a comment above."""
    lines = [f"# llmfleet tune: {k}: {v}" for k, v in provenance.items()]
    flags = dict(base_flags) | dict(c.flags)
    lines.append(f"vllm_flags = {flags!r}")
    if c.layout is not None:
        lines.append(f"vllm_layout = {c.layout!r}")
    return "\n".join(lines) + "\n"
