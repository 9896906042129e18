"""Effective throughput: the highest offered rate whose P95 end-to-end latency (and every per-class
SLO) holds, found by bracketing and bisection with repeated trials.

Bracketing doubles the rate from ``start`` until a rate fails (or halves it until one passes);
bisection then halves the bracket [highest passing, lowest failing] until it is narrower than
``precision`` (relative). A rate passes only if every one of its ``repeats`` trials passes (the
first failing repeat ends that rate). The answer is the highest passing rate, with the bracket as
its uncertainty and the spread of P95 over the repeats at that rate.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

MIN_RATE_FRACTION = 1 / 64  # halving from start stops here: nothing passes


@dataclass
class Outcome:
    rate: float
    passed: bool
    p95_ms: float | None  # None: the P95 fell on failed requests
    detail: object = None  # the trial (kept for the report)


@dataclass
class SearchResult:
    effective_rps: float | None  # None: even the lowest rate tried failed
    lowest_failing_rps: float | None  # None: the maximum rate still passed
    trials: list[Outcome] = field(default_factory=list)
    p95_ms_at_effective: list[float | None] = field(default_factory=list)
    note: str = ""

    @property
    def relative_uncertainty(self) -> float | None:
        if self.effective_rps and self.lowest_failing_rps:
            return (self.lowest_failing_rps - self.effective_rps) / self.effective_rps
        return None


def search(trial: Callable[[float], Outcome], start: float, max_rate: float, precision: float,
           repeats: int, floor: bool = False) -> SearchResult:
    """``floor``: ``start`` is a rate to hold (llmfleet tune's incumbent's): where it fails, the
    search ends there, with no effective rate, instead of halving down."""
    res = SearchResult(None, None)
    p95s: dict[float, list[float | None]] = {}

    def passes(rate: float) -> bool:
        rate = round(rate, 4)
        for _ in range(repeats):
            o = trial(rate)
            res.trials.append(o)
            p95s.setdefault(rate, []).append(o.p95_ms)
            if not o.passed:
                return False
        return True

    lo = hi = None
    rate = start
    if passes(rate):
        lo = rate
        while lo < max_rate:
            rate = min(lo * 2, max_rate)
            if passes(rate):
                lo = rate
            else:
                hi = rate
                break
        else:
            res.note = f"the maximum rate {max_rate:g}/s still met the SLO: effective throughput is at least that"
    elif floor:
        hi = rate
        res.note = f"did not hold {start:g}/s, the rate it had to hold"
    else:
        hi = rate
        while rate > start * MIN_RATE_FRACTION:
            rate = rate / 2
            if passes(rate):
                lo = rate
                break
            hi = rate
        if lo is None:
            res.note = f"no rate down to {rate:g}/s met the SLO"
    while lo is not None and hi is not None and (hi - lo) / lo > precision:
        mid = (lo + hi) / 2
        if passes(mid):
            lo = mid
        else:
            hi = mid
    res.effective_rps = round(lo, 4) if lo is not None else None
    res.lowest_failing_rps = round(hi, 4) if hi is not None else None
    res.p95_ms_at_effective = p95s.get(res.effective_rps, []) if res.effective_rps is not None else []
    return res
