"""Audit results as metrics: each audit writes a summary per host in Prometheus's text format into
a node exporter's textfile folder (group data audit_metrics_dir) on the machine that runs it, so
that drift pages someone (alert rules: templates/monitoring/audit-alerts.yml.j2) instead of
waiting in a report.

One file per host, `llmfleet_audit_<host>.prom`, replaced whole (written beside it, then renamed:
the textfile collector never reads half a file): an audit limited to some hosts leaves the others'
last results, and their time, as they were. Expired waivers go to `llmfleet_audit_fleet.prom`.
A host taken out of the fleet keeps its file until it is removed by hand.
"""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

from llmfleet.audit.model import KINDS, show
from llmfleet.errors import AuditError

HOST_KINDS = tuple(k for k in KINDS if k != "waiver")  # a host's problems by kind; waivers are the fleet's
FILE = "llmfleet_audit_{host}.prom"
FLEET_FILE = "llmfleet_audit_fleet.prom"
HELP = {
    "llmfleet_audit_problems": ("gauge", "Open problems the last audit of the host found, by kind."),
    "llmfleet_audit_waived": ("gauge", "Problems the last audit of the host found that a waiver covers."),
    "llmfleet_audit_unreachable": ("gauge", "1 when the host did not answer the last audit."),
    "llmfleet_audit_checks": ("gauge", "Checks the last audit of the host ran."),
    "llmfleet_audit_timestamp_seconds": ("gauge", "When the last audit of the host ran (Unix time)."),
    "llmfleet_audit_vllm_weights_load_seconds": ("gauge", "Seconds the running vLLM server took to load its "
                                                 "weights when it started, as its log says, by unit."),
    "llmfleet_audit_problem": ("gauge", "1 for each problem the last audit of the host found: its kind, check, "
                               "what differs, expected and actual (and the waiver's reason, if waived)."),
}
# a problem's labels: what `llmfleet audit --from-prometheus` reads back into the same report
PROBLEM_LABELS = ("kind", "check", "what", "expected", "actual", "message", "why", "waived")
LABEL_MAX = 4000  # characters of one label value (Prometheus sets no limit of its own: label_value_length_limit 0)
FLEET_HELP = {
    "llmfleet_audit_waivers_expired": ("gauge", "Waivers past their expiry date in the last audit."),
    "llmfleet_audit_fleet_timestamp_seconds": ("gauge", "When the last audit ran (Unix time)."),
}


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _block(name: str, kind: str, text: str, samples: list[tuple[dict[str, str], float]]) -> list[str]:
    lines = [f"# HELP {name} {text}", f"# TYPE {name} {kind}"]
    for labels, value in samples:
        shown = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
        number = f"{value:.17g}"  # every digit a Unix time has (":g" keeps six)
        lines.append(f"{name}{{{shown}}} {number}" if shown else f"{name} {number}")
    return lines


def _problem_labels(p: dict) -> dict[str, str]:
    """A problem as label values: text as it is, any other value as the report shows it."""
    values = {k: p.get(k) for k in PROBLEM_LABELS}
    for k in ("expected", "actual"):
        values[k] = values[k] if isinstance(values[k], str) else show(values[k])
    return {k: str(v if v is not None else "")[:LABEL_MAX] for k, v in values.items()}


def host_text(doc: dict, host: str, source: str | None = None) -> str:
    """The host's summary from an audit report (llmfleet/audit/report.py build()). ``source="self"``:
    the host's own self-audit (llmfleet/self_audit.py), whose series carry no host label (the node
    exporter's scrape target gives it) and a label source="self"."""
    h = doc["hosts"][host]
    when = dt.datetime.fromisoformat(doc["created"]).timestamp()
    open_ = [p for p in h["problems"] if not p["waived"]]
    inventory = doc["inventory"]
    base = {"inventory": inventory, "source": source} if source else {"host": host, "inventory": inventory}
    values = {
        "llmfleet_audit_problems": [(base | {"kind": k}, float(sum(p["kind"] == k for p in open_)))
                                    for k in HOST_KINDS],
        "llmfleet_audit_waived": [(base, float(sum(bool(p["waived"]) for p in h["problems"])))],
        "llmfleet_audit_unreachable": [(base, 0.0 if h["reachable"] else 1.0)],
        "llmfleet_audit_checks": [(base, float(h["checks_run"]))],
        "llmfleet_audit_timestamp_seconds": [(base, when)],
        "llmfleet_audit_vllm_weights_load_seconds": [
            (base | {"unit": unit}, float(w["weights_s"]))
            for unit, w in sorted(((h.get("figures") or {}).get("vllm_weights_load") or {}).items())
            if isinstance(w, dict) and isinstance(w.get("weights_s"), int | float)],
        "llmfleet_audit_problem": [(base | _problem_labels(p), 1.0) for p in h["problems"]],
    }
    lines = []
    for name, (kind, text) in HELP.items():
        lines += _block(name, kind, text, values[name])
    return "\n".join(lines) + "\n"


def fleet_text(doc: dict) -> str:
    when = dt.datetime.fromisoformat(doc["created"]).timestamp()
    base = {"inventory": doc["inventory"]}
    expired = float(sum(p["kind"] == "waiver" for p in doc["fleet_problems"]))
    values = {"llmfleet_audit_waivers_expired": [(base, expired)],
              "llmfleet_audit_fleet_timestamp_seconds": [(base, when)]}
    lines = []
    for name, (kind, text) in FLEET_HELP.items():
        lines += _block(name, kind, text, values[name])
    return "\n".join(lines) + "\n"


def write(doc: dict, folder: Path) -> list[Path]:
    """Write the report's per-host files and the fleet file into the textfile folder; return them."""
    if not folder.is_dir():
        raise AuditError(f"audit_metrics_dir = {str(folder)!r}: no such folder on this machine (fix: create it: "
                         "the textfile folder of the node exporter here, e.g. Debian's "
                         "/var/lib/prometheus/node-exporter; or set audit_metrics_dir = None)")
    written = []
    files = {FILE.format(host=h): host_text(doc, h) for h in doc["hosts"]} | {FLEET_FILE: fleet_text(doc)}
    for name, text in files.items():
        if not re.fullmatch(r"[A-Za-z0-9_.-]+\.prom", name):
            raise AuditError(f"cannot name a metrics file after {name!r}")
        path = folder / name
        tmp = folder / f".{name}.tmp"
        tmp.write_text(text)
        tmp.chmod(0o644)
        tmp.replace(path)
        written.append(path)
    return written


def metrics_dir(hosts: list[dict]) -> Path | None:
    """The one audit_metrics_dir of the audited hosts' data (None: not set); hosts that disagree stop
    the audit, named."""
    values = {h["data"].get("audit_metrics_dir") for h in hosts}
    if len(values) > 1:
        shown = "; ".join(f"{h['name']}: {h['data'].get('audit_metrics_dir')}" for h in hosts)
        raise AuditError(f"audit_metrics_dir differs between the audited hosts ({shown}): the audit writes its "
                         "metrics in one place (fix: set it once, in group_data/all.py or the inventory's group data)")
    value = values.pop() if values else None
    return Path(value) if value else None
