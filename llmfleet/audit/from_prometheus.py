"""`llmfleet audit --from-prometheus URL`: the fleet's drift as Prometheus holds it, in the audit's own
report (table, JSON, JUnit, HTML), in a few queries whatever the fleet's size.

Every host's self-audit (llmfleet/self_audit.py) and every control machine's audit write the same
series (llmfleet/audit/metrics.py): per host its problems (``llmfleet_audit_problem``, one series a
problem, labelled with its kind, check, what, expected and actual), the checks run, whether it
answered, and when. Of the audits of a host Prometheus holds, the latest is the host's result. A
host whose node exporter answers but that has no audit at all is reported (its self-audit never
ran, or is off). Waivers apply here as in an audit (the waivers file is the control machine's).
"""

from __future__ import annotations

import datetime as dt

from llmfleet import prometheus
from llmfleet.audit.fingerprint import repair as hardware_repair
from llmfleet.audit.model import HostResult, Problem
from llmfleet.audit.state_drift import repair_for
from llmfleet.errors import AuditError

NODE_JOB = "node"  # llmfleet monitoring's job of every host's node exporter


def query(url: str, promql: str, timeout_s: float = 30) -> list[dict]:
    """An instant query: [{"metric": {label: value}, "value": [time, "value"]}, ...]."""
    try:
        return prometheus.query(url, promql, timeout_s=timeout_s)
    except prometheus.PrometheusError as exc:
        raise AuditError(f"--from-prometheus {exc} (fix: the URL of the Prometheus that scrapes the hosts' node "
                         "exporters, e.g. http://prometheus:9090)") from None


def _latest(url: str) -> dict[str, tuple[float, str, str]]:
    """{host: (time, source, inventory)} of each host's latest audit."""
    out: dict[str, tuple[float, str, str]] = {}
    for r in query(url, "llmfleet_audit_timestamp_seconds"):
        m = r["metric"]
        host, when = m.get("host"), float(r["value"][1])
        if host and (host not in out or when > out[host][0]):
            out[host] = (when, m.get("source", "control"), m.get("inventory", ""))
    return out


def _same(m: dict, source: str) -> bool:
    return m.get("source", "control") == source


def _problem(m: dict, inventory: str) -> Problem:
    host, kind, check = m["host"], m.get("kind", "state"), m.get("check", "")
    repair = {"state": lambda: repair_for(check, inventory, host),
              "hardware": lambda: hardware_repair(inventory, host)}.get(kind, lambda: "")()
    return Problem(host, kind, check, m.get("message", ""), m.get("expected") or None, m.get("actual") or None,
                   what=m.get("what", ""), why=m.get("why", ""), repair=repair)


def results(url: str, hosts: list[str] | None = None) -> tuple[dict[str, HostResult], str]:
    """({host: its result}, the inventory the audits name) from Prometheus at ``url``; ``hosts``: only these."""
    latest = _latest(url)
    problems = query(url, "llmfleet_audit_problem")
    checks = {(r["metric"].get("host"), r["metric"].get("source", "control")): int(float(r["value"][1]))
              for r in query(url, "llmfleet_audit_checks")}
    unreachable = {(r["metric"].get("host"), r["metric"].get("source", "control")): float(r["value"][1]) > 0
                   for r in query(url, "llmfleet_audit_unreachable")}
    answering = {r["metric"]["host"] for r in query(url, f'up{{job="{NODE_JOB}"}} == 1') if "host" in r["metric"]}
    wanted = set(hosts) if hosts else set(latest) | answering
    out: dict[str, HostResult] = {}
    inventories = {inv for _, _, inv in latest.values() if inv}
    for name in sorted(wanted):
        r = out[name] = HostResult(name)
        if name not in latest:
            r.reachable = False
            r.problems.append(Problem(name, "unreachable", "audit metrics", "no audit of this host in Prometheus "
                                      f"({url}): its self-audit never ran, or is off", "an audit", "none",
                                      what="audit metrics", why="not audited",
                                      repair=f"systemctl status llmfleet-self-audit.timer on {name}, or "
                                             "llmfleet audit INVENTORY --limit " + name))
            continue
        when, source, inventory = latest[name]
        r.reachable = not unreachable.get((name, source), False)
        r.checks_run = checks.get((name, source), 0)
        r.problems = [_problem({**p["metric"], "host": name}, inventory) for p in problems
                      if p["metric"].get("host") == name and _same(p["metric"], source)]
        at = dt.datetime.fromtimestamp(when, dt.UTC).isoformat(timespec="seconds")
        r.notes.append(f"from Prometheus: the {'self-audit' if source == 'self' else 'audit'} of {at}")
    return out, (inventories.pop() if len(inventories) == 1 else ", ".join(sorted(inventories)) or url)
