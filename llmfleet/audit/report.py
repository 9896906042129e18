"""The fleet report: JSON (for machines), JUnit XML (for CI systems), HTML (for people), a terminal
summary; kept in <out>/<timestamp>/, each new one saying what changed since the previous one."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from xml.etree import ElementTree as ET

from jinja2 import Environment

from llmfleet.audit.model import KINDS, HostResult, Problem, show

SCHEMA = "llmfleet-audit/1"


def build(inventory: str, limit: list[str] | None, results: dict[str, HostResult], extra: list[Problem],
          previous: dict | None, previous_path: str | None, created: str,
          kinds_run: tuple[str, ...] = ("hardware", "config", "state")) -> dict:
    """The report. What changed since the previous audit compares only what both looked at: a host
    left out by --limit, or a kind left out by --skip, is not 'resolved'."""
    hosts = {}
    for name, r in sorted(results.items()):
        hosts[name] = {"reachable": r.reachable, "checks_run": r.checks_run, "notes": r.notes,
                       "problems": [p.as_dict() for p in r.problems], "figures": r.figures}
    all_problems = [p for r in results.values() for p in r.problems] + extra
    open_problems = [p for p in all_problems if not p.waived]
    keys_now = {_key(p.as_dict()) for p in open_problems}
    changes: dict = {"previous": previous_path, "new": [], "resolved": []}
    if previous is not None:
        looked = set(kinds_run) | {"unreachable"}
        before = {_key(p): p for h in previous["hosts"].values() for p in h["problems"]
                  if not p.get("waived") and p["host"] in results and p["kind"] in looked}
        before |= {_key(p): p for p in previous.get("fleet_problems", []) if not p.get("waived")}
        changes["new"] = sorted(" | ".join(k) for k in keys_now - set(before))
        changes["resolved"] = sorted(" | ".join(k) for k in set(before) - keys_now)
    unreachable = [n for n, r in results.items() if not r.reachable]
    drift = [n for n, r in results.items() if r.reachable and r.open_problems]
    status = 2 if results and len(unreachable) == len(results) else (1 if open_problems else 0)
    return {
        "schema": SCHEMA, "created": created, "inventory": inventory, "limit": limit,
        "summary": {"hosts": len(results), "clean": len(results) - len(unreachable) - len(drift),
                    "with_drift": len(drift), "unreachable": len(unreachable),
                    "problems": len(open_problems), "waived": len(all_problems) - len(open_problems),
                    "by_kind": {k: sum(p.kind == k for p in open_problems) for k in KINDS}},
        "hosts": hosts,
        "fleet_problems": [p.as_dict() for p in extra],
        "changes_since_last": changes,
        "exit_status": status,
    }


def _key(p: dict) -> tuple[str, str, str]:
    return (p["host"], p["kind"], p["check"])


def latest(out_dir: Path) -> tuple[dict | None, str | None]:
    runs = sorted(d for d in out_dir.glob("*/audit.json")) if out_dir.is_dir() else []
    if not runs:
        return None, None
    return json.loads(runs[-1].read_text()), str(runs[-1])


def stamp() -> tuple[str, str]:
    now = dt.datetime.now(dt.UTC)
    return now.isoformat(timespec="seconds"), now.strftime("%Y%m%dT%H%M%S%fZ")


def write(doc: dict, folder: Path) -> dict[str, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = {"json": folder / "audit.json", "junit": folder / "junit.xml", "html": folder / "index.html"}
    paths["json"].write_text(json.dumps(doc, indent=2, default=str) + "\n")
    paths["junit"].write_bytes(junit(doc))
    paths["html"].write_text(html(doc))
    return paths


def rows(doc: dict) -> list[dict]:
    """Every problem of the report as a person reads it (the terminal list, the HTML table, JUnit):
    host, kind, what, expected, actual, repair, the waiver when there is one, and the check id (the one
    waivers name; `check_note` only where the row does not already say it)."""
    out = []
    for p in [p for h in doc["hosts"].values() for p in h["problems"]] + doc["fleet_problems"]:
        given = p["expected"] is not None or p["actual"] is not None
        r = {"host": p["host"], "kind": p["kind"], "check": p["check"], "waived": p["waived"],
             "what": p.get("what") or p["check"], "why": p.get("why") or ("" if given else p["message"]),
             "expected": show(p["expected"]) if given else "", "actual": show(p["actual"]) if given else "",
             "repair": p.get("repair") or "", "message": p["message"]}
        said = {r["what"], f"hardware: {r['what']}", f"deploy: {r['what']} | {r['expected']}"}
        r["check_note"] = "" if p["check"] in said else p["check"]
        out.append(r)
    return out


def junit(doc: dict) -> bytes:
    suites = ET.Element("testsuites", name="llmfleet audit", timestamp=doc["created"])
    by_host: dict[str, list[dict]] = {}
    for r in rows(doc):
        by_host.setdefault(r["host"], []).append(r)
    for name, h in doc["hosts"].items():
        probs = [r for r in by_host.get(name, []) if r["kind"] != "waiver"]
        suite = ET.SubElement(suites, "testsuite", name=name, tests=str(max(1, len(probs))),
                              failures=str(sum(1 for p in probs if not p["waived"] and p["kind"] != "unreachable")),
                              errors=str(sum(p["kind"] == "unreachable" for p in probs)),
                              skipped=str(sum(bool(p["waived"]) for p in probs)))
        if not probs:
            ET.SubElement(suite, "testcase", classname=name, name=f"clean ({h['checks_run']} checks)")
        repeated = {c for c in (p["check"] for p in probs) if sum(q["check"] == c for q in probs) > 1}
        for p in probs:  # a check that found several settings differ: one test case each, named by what
            case = ET.SubElement(suite, "testcase", classname=f"{name}.{p['kind']}",
                                 name=f"{p['check']}: {p['what']}" if p["check"] in repeated else p["check"])
            if p["waived"]:
                ET.SubElement(case, "skipped", message=f"waived: {p['waived']}")
            else:
                _failure(case, "error" if p["kind"] == "unreachable" else "failure", p)
    fleet = [r for r in rows(doc) if r["kind"] == "waiver"]
    if fleet:
        suite = ET.SubElement(suites, "testsuite", name="fleet", tests=str(len(fleet)), failures=str(len(fleet)))
        for p in fleet:
            _failure(ET.SubElement(suite, "testcase", classname="fleet.waiver", name=p["check"]), "failure", p)
    return ET.tostring(suites, encoding="utf-8", xml_declaration=True)


def _failure(case: ET.Element, tag: str, p: dict) -> None:
    said = f"{p['what']}: expected {p['expected']}, actual {p['actual']}" if p["expected"] or p["actual"] \
        else f"{p['what']}: {p['why']}"
    f = ET.SubElement(case, tag, message=said[:300])
    f.text = "\n".join(f"{k}: {p[k]}" for k in ("host", "what", "why", "expected", "actual", "repair") if p[k])


_HTML = Environment(autoescape=True).from_string("""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>llmfleet audit {{ doc.created }}</title>
<style>
body{font-family:system-ui,sans-serif;margin:2em;color:#222;line-height:1.4}
table{border-collapse:collapse;margin-bottom:1.5em}
td,th{border:1px solid #ccc;padding:6px 10px;text-align:left;vertical-align:top}
th{background:#eee}
#problems{width:100%}
#problems td:first-child,.kind{white-space:nowrap}
#problems td:last-child{min-width:24em}
#problems td.expected{color:#060}
#problems td.actual{color:#a00}
#problems tr.waived td{color:#777;background:#f6f6f6}
code{font-family:ui-monospace,monospace;font-size:90%;background:#f3f3f3;padding:1px 4px;word-break:break-word}
.clean{color:#060}.drift{color:#a00}
.sub{display:block;color:#666;font-size:85%}
.kind{font-weight:bold;display:block}
.w{white-space:nowrap}
#notes h3{font-size:100%;margin:1em 0 .3em}
#notes ul{margin:0;color:#444}
</style>
</head><body>
<h1>llmfleet audit: {{ doc.inventory }}</h1>
<p>{{ doc.created }}: {{ s.hosts }} hosts, {{ s.clean }} clean, {{ s.with_drift }} with drift,
{{ s.unreachable }} unreachable; {{ s.problems }} problems, {{ s.waived }} waived.
Exit status {{ doc.exit_status }}.</p>
<h2>Hosts</h2>
<table id="hosts"><tr><th>host</th><th>state</th><th>checks</th><th>problems</th></tr>
{% for name, h in doc.hosts.items() %}{% set live = h.problems|rejectattr('waived')|list %}<tr><td>{{ name }}</td>
<td class="{{ 'drift' if live else 'clean' }}">{{ 'unreachable' if not h.reachable
 else ('drift' if live else 'clean') }}</td><td>{{ h.checks_run }}</td>
<td>{{ live|length }}{% if h.problems|length > live|length %} ({{ h.problems|length - live|length }} waived)
{%- endif %}</td></tr>
{% endfor %}</table>
<h2>Problems</h2>
{% if rows %}<table id="problems">
<tr><th>host</th><th>kind</th><th>what</th><th>expected</th><th>actual</th><th>repair</th></tr>
{% for r in rows %}<tr class="{{ 'waived' if r.waived else 'open' }}"><td>{{ r.host }}</td>
<td><span class="kind">{{ r.kind }}</span>{% if r.waived %}<span class="sub">waived: {{ r.waived }}</span>
{%- endif %}</td>
<td>{{ r.what }}{% if r.why %}<span class="sub">{{ r.why }}</span>{% endif %}
{%- if r.check_note %}<span class="sub">check: {{ r.check_note }}</span>{% endif %}</td>
<td class="expected">{{ r.expected }}</td><td class="actual">{{ r.actual }}</td>
<td>{% if r.repair %}<code>{% for w in r.repair.split(' ') %}<span class="w">{{ w }}</span>{{ ' ' if not loop.last }}
{%- endfor %}</code>{% endif %}</td></tr>
{% endfor %}</table>{% else %}<p class="clean">none</p>{% endif %}
<h2>Since the last audit</h2>
{% if doc.changes_since_last.previous %}<p>compared with {{ doc.changes_since_last.previous }}</p>
<ul>{% for c in doc.changes_since_last.new %}<li class="drift">new: {{ c }}</li>{% endfor %}
{% for c in doc.changes_since_last.resolved %}<li class="clean">resolved: {{ c }}</li>{% endfor %}</ul>
{% else %}<p>no earlier audit</p>{% endif %}
{% if own or shared %}<h2>Notes</h2>
<section id="notes">
{% for name, ns in own.items() %}<h3 class="host-notes">notes on {{ name }}</h3>
<ul class="notes">{% for n in ns %}<li>{{ n }}</li>{% endfor %}</ul>
{% endfor %}{% for who, ns in shared %}<h3 class="shared-notes">notes on {{ who }}</h3>
<ul class="notes">{% for n in ns %}<li>{{ n }}</li>{% endfor %}</ul>
{% endfor %}</section>{% endif %}
</body></html>
""")


def html(doc: dict) -> str:
    """The page for people: the hosts, the problems, what changed since the last audit, then the notes."""
    own, shared = notes(doc)
    return _HTML.render(doc=doc, s=doc["summary"], rows=rows(doc), own=own, shared=shared)


def notes(doc: dict) -> tuple[dict[str, list[str]], list[tuple[str, list[str]]]]:
    """The hosts' notes, each said once: ({host: the notes no other host has}, [(who, the notes said on
    each of those hosts)]), who being 'every host', 'every reachable host' or 'N hosts: a, b'; the
    groups said on the most hosts first. The JSON keeps each host's full list."""
    on: dict[str, list[str]] = {}
    for name, h in doc["hosts"].items():
        for n in dict.fromkeys(h["notes"]):
            on.setdefault(n, []).append(name)
    own = {name: [n for n in dict.fromkeys(h["notes"]) if on[n] == [name]] for name, h in doc["hosts"].items()}
    groups: dict[tuple[str, ...], list[str]] = {}
    for n, names in on.items():
        if len(names) > 1:
            groups.setdefault(tuple(names), []).append(n)
    reachable = tuple(name for name, h in doc["hosts"].items() if h["reachable"])

    def who(names: tuple[str, ...]) -> str:
        if len(names) == len(doc["hosts"]):
            return "every host"
        return "every reachable host" if names == reachable else f"{len(names)} hosts: {', '.join(names)}"

    shared = [(who(names), ns) for names, ns in sorted(groups.items(), key=lambda g: -len(g[0]))]
    return {name: ns for name, ns in own.items() if ns}, shared


def terminal(doc: dict):
    from rich.table import Table
    from rich.text import Text

    t = Table(title=f"llmfleet audit: {doc['inventory']} ({doc['created']})", title_justify="left")
    for col in ("host", "state", "checks", "unreachable", "config", "state drift", "hardware", "waived"):
        t.add_column(col, justify="left" if col in ("host", "state") else "right")
    for name, h in doc["hosts"].items():
        live = [p for p in h["problems"] if not p["waived"]]
        state = "unreachable" if not h["reachable"] else ("drift" if live else "clean")
        style = {"clean": "green", "drift": "red", "unreachable": "bold red"}[state]
        t.add_row(name, Text(state, style=style), str(h["checks_run"]),
                  *[str(sum(p["kind"] == k for p in live)) for k in ("unreachable", "config", "state", "hardware")],
                  str(len(h["problems"]) - len(live)))
    out: list[Table | Text] = [t]
    for r in rows(doc):  # one block per problem: what, expected, actual, repair
        block = Text(style="dim" if r["waived"] else "")
        block.append(f"{r['host']}  {r['kind']}  ", style="bold" if r["waived"] else "bold red")
        block.append(r["what"], style="bold")
        for label, key in (("", "why"), ("expected", "expected"), ("actual", "actual"), ("repair", "repair"),
                           ("check", "check_note"), ("waived", "waived")):
            if r[key]:
                block.append(f"\n    {label:<9} {r[key]}" if label else f"\n    {r[key]}")
        out.append(block)
    ch = doc["changes_since_last"]
    if ch["previous"]:
        out.append(Text(f"since the last audit ({ch['previous']}): {len(ch['new'])} new, {len(ch['resolved'])} "
                        "resolved"))
        out += [Text(f"  new: {c}", style="red") for c in ch["new"]]
        out += [Text(f"  resolved: {c}", style="green") for c in ch["resolved"]]
    s = doc["summary"]
    verdict = {0: "clean", 1: "drift found", 2: "the audit could not run"}[doc["exit_status"]]
    out.append(Text(f"{s['hosts']} hosts: {s['clean']} clean, {s['with_drift']} with drift, {s['unreachable']} "
                    f"unreachable; {s['problems']} problems, {s['waived']} waived: {verdict}",
                    style="bold green" if doc["exit_status"] == 0 else "bold red"))
    return out
