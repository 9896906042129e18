"""The lab's Prometheus as a person (or a test) asks it: through its HTTP API (/api/v1/targets,
/api/v1/alerts, /api/v1/rules, /api/v1/query)."""

from __future__ import annotations

import datetime as dt
import json
import time
import urllib.parse
import urllib.request

from llmfleet.errors import LabError
from llmfleet.lab.config import LabPaths
from llmfleet.lab.services import prometheus_config_dir
from llmfleet.lab.state import LabState


def url() -> str:
    state = LabState.load(LabPaths.from_env())
    if state is None or "prometheus" not in state.services:
        raise LabError("the lab's Prometheus is not running: run `llmfleet lab up` first")
    svc = state.services["prometheus"]
    return f"http://{svc.address}:{svc.port}"


def api(path: str, **params: str) -> dict | list:
    query = f"?{urllib.parse.urlencode(params)}" if params else ""
    try:
        with urllib.request.urlopen(f"{url()}/api/v1/{path}{query}", timeout=10) as r:
            doc = json.loads(r.read())
    except OSError as exc:
        raise LabError(f"the lab's Prometheus at {url()} does not answer /api/v1/{path}: {exc}") from exc
    if doc.get("status") != "success":
        raise LabError(f"the lab's Prometheus refused /api/v1/{path}: {doc.get('error')}")
    return doc["data"]


def query(expr: str) -> list[dict]:
    """Instant query: [{"metric": {labels}, "value": [time, "value"]}]."""
    result = api("query", query=expr)
    assert isinstance(result, dict)
    return result["result"]


def when(stamp: str) -> float:
    """A time of Prometheus's API (Go's RFC 3339: nanoseconds, "Z" or an offset) as Unix time
    (Python 3.11's fromisoformat reads both, cutting nanoseconds to microseconds)."""
    try:
        return dt.datetime.fromisoformat(stamp).timestamp()
    except ValueError:
        raise LabError(f"the lab's Prometheus gave a time this does not read: {stamp!r}") from None


def scraped_since(since: float, targets: dict, seen: dict[str, float], now: float) -> dict[str, float]:
    """`seen` with each target scraped after `since` (Unix time) added, at `now`: when this saw that
    scrape done (lastScrape is when a scrape began, and the API shows it once its samples are in)."""
    for t in targets["activeTargets"]:
        key = f"{t['labels'].get('job', '')} {t['scrapeUrl']}"
        if key not in seen and when(t["lastScrape"]) > since:
            seen[key] = now
    return seen


def settled(seen: dict[str, float], targets: dict, rules: dict) -> bool:
    """Whether every target has been scraped since (`seen`, from scraped_since) and every rule group
    evaluated after the last of those scrapes was seen: its alerts then judge what the targets say now
    (an audit that just wrote its metrics, a service just started), not what they said an interval
    ago. (A target's latest scrape is no guide: with targets spread over the interval, one was
    nearly always scraped after the last evaluation.)"""
    if not targets["activeTargets"] or len(seen) < len(targets["activeTargets"]):
        return False
    return all(when(g["lastEvaluation"]) > max(seen.values()) for g in rules["groups"])


def summary(settle_s: float = 0) -> dict:
    """Address, targets and alerts. With `settle_s`, first wait (at most that long) until every target
    has been scraped, and every rule group evaluated after that, since this call began; "settled" says
    whether that happened."""
    since = time.time()
    deadline = time.monotonic() + settle_s
    seen: dict[str, float] = {}
    while True:
        targets = api("targets")
        rules = api("rules")
        assert isinstance(targets, dict) and isinstance(rules, dict)
        done = settled(scraped_since(since, targets, seen, time.time()), targets, rules)
        if done or time.monotonic() >= deadline:
            break
        time.sleep(0.25)
    alerts = api("alerts")
    assert isinstance(alerts, dict)
    return {
        "settled": done,
        "url": url(), "config": str(prometheus_config_dir(LabPaths.from_env()) / "prometheus.yml"),
        "rules": sum(1 for g in rules["groups"] for r in g["rules"] if r["type"] == "alerting"),
        "targets": sorted(({"job": t["labels"].get("job", ""), "host": t["labels"].get("host", ""),
                            "target": t["scrapeUrl"], "health": t["health"], "error": t.get("lastError", "")}
                           for t in targets["activeTargets"]), key=lambda t: (t["job"], t["host"], t["target"])),
        "alerts": [{"name": a["labels"]["alertname"], "host": a["labels"].get("host", ""), "state": a["state"],
                    "source": a["labels"].get("source", "")}
                   for a in alerts["alerts"]],
    }
