"""`llmfleet lab prometheus` answers as of a scrape and a rule evaluation after it began
(llmfleet/lab/prometheus.py: when, settled); tests/integration/test_monitoring.py asks the lab's
real Prometheus right after an audit."""

from __future__ import annotations

import datetime as dt

import pytest

from llmfleet.errors import LabError
from llmfleet.lab.prometheus import scraped_since, settled, when

T0 = dt.datetime(2026, 12, 4, 3, 56, 21, tzinfo=dt.timezone.utc).timestamp()


def stamp(seconds_after: float) -> str:
    """As Prometheus writes it (Go's time.Time in JSON: nanoseconds, UTC as "Z")."""
    t = dt.datetime.fromtimestamp(T0 + seconds_after, dt.timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond:06d}123Z"


@pytest.mark.parametrize("text, expected", [
    ("2026-12-04T03:56:21.723715405Z", T0 + 0.723715),
    ("2026-12-04T03:56:21Z", T0),
    ("2026-12-04T04:56:21.5+01:00", T0 + 0.5),
    ("0001-01-01T00:00:00Z", dt.datetime(1, 1, 1, tzinfo=dt.timezone.utc).timestamp()),  # never scraped
])
def test_prometheus_times_are_read_with_their_zone_and_nanoseconds_cut_to_microseconds(text, expected):
    assert when(text) == pytest.approx(expected, abs=1e-6)


def test_a_time_it_cannot_read_is_an_error_that_shows_it():
    with pytest.raises(LabError, match="'yesterday'"):
        when("yesterday")


def targets(*after: float) -> dict:
    return {"activeTargets": [{"labels": {"job": "node"}, "scrapeUrl": f"http://10.0.0.{i}:9100/metrics",
                               "lastScrape": stamp(a)} for i, a in enumerate(after)]}


def rules(*after: float) -> dict:
    return {"groups": [{"name": f"g{i}", "lastEvaluation": stamp(a)} for i, a in enumerate(after)]}


def test_a_target_counts_from_the_first_poll_that_shows_it_scraped_since_and_keeps_that_time():
    seen: dict[str, float] = {}
    scraped_since(T0, targets(-1, 2), seen, now=T0 + 2.5)
    assert seen == {"node http://10.0.0.1:9100/metrics": T0 + 2.5}  # the other was scraped before T0
    scraped_since(T0, targets(4, 7), seen, now=T0 + 7.5)  # both scraped again: the first keeps its time
    assert seen == {"node http://10.0.0.1:9100/metrics": T0 + 2.5, "node http://10.0.0.0:9100/metrics": T0 + 7.5}


@pytest.mark.parametrize("polls, evaluations, expected", [
    # (seconds after T0 each target's scrape was seen at), the groups' last evaluations
    ((1, 2), (3, 4), True),    # every target seen scraped, every group evaluated after the last was seen
    ((1, None), (3, 4), False),  # one target not scraped since T0
    ((1, 2), (1.5, 4), False),   # one group evaluated before the last was seen: its alerts judge older values
    ((), (3,), False),           # no target at all: nothing was scraped
])
def test_settled_only_when_every_target_was_scraped_since_and_every_group_evaluated_after(polls, evaluations,
                                                                                          expected):
    # targets scraped again since they were first seen: their latest scrape (10 s) is later than every
    # evaluation, which must not matter
    current = targets(*[10 for _ in polls])
    seen = {f"node http://10.0.0.{i}:9100/metrics": T0 + at for i, at in enumerate(polls) if at is not None}
    assert settled(seen, current, rules(*evaluations)) is expected
