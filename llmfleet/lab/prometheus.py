"""The lab's Prometheus as a person (or a test) asks it: through its HTTP API (/api/v1/targets,
/api/v1/alerts, /api/v1/rules, /api/v1/query)."""

from __future__ import annotations

import json
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


def summary() -> dict:
    targets = api("targets")
    alerts = api("alerts")
    rules = api("rules")
    assert isinstance(targets, dict) and isinstance(alerts, dict) and isinstance(rules, dict)
    return {
        "url": url(), "config": str(prometheus_config_dir(LabPaths.from_env()) / "prometheus.yml"),
        "rules": sum(1 for g in rules["groups"] for r in g["rules"] if r["type"] == "alerting"),
        "targets": sorted(({"job": t["labels"].get("job", ""), "host": t["labels"].get("host", ""),
                            "target": t["scrapeUrl"], "health": t["health"], "error": t.get("lastError", "")}
                           for t in targets["activeTargets"]), key=lambda t: (t["job"], t["host"], t["target"])),
        "alerts": [{"name": a["labels"]["alertname"], "host": a["labels"].get("host", ""), "state": a["state"]}
                   for a in alerts["alerts"]],
    }
