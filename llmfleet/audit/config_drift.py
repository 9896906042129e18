"""Config drift: what a deploy would change now, per host (`pyinfra INV deploy.py --dry --json`).

llmfleet's operations report a change only when the host differs from group data (a second
deploy plans nothing: tests/integration/test_lab.py), so every planned change is drift. An
operation whose change is decided only at run time (pyinfra's conditional changes, `_if`) is
listed as a note, not as drift; an operation that would always report a change (a raw shell
command) can be waived by its check id, e.g. `deploy: server.shell*`."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from llmfleet import fleetrun
from llmfleet.audit.model import Problem, deploy_command
from llmfleet.errors import AuditError
from llmfleet.inventory import limit_args, unmatched


def dry_run_args(inventory: str, hosts: list[str], data: list[str] | None = None) -> list[str]:
    """The deploy's dry run, without `-y`: with it pyinfra skips computing which operations would
    change (State(check_for_changes=not yes)) and every host looks clean
    (pyinfra 3.10.0, pyinfra_cli/cli.py). --dry never prompts."""
    return [sys.executable, "-m", "pyinfra", inventory, "deploy.py", "--dry", "--json", *limit_args(hosts)] + \
        [a for kv in (data or []) for a in ("--data", kv)]


def plan(inventory: str, hosts: list[str], data: list[str] | None = None,
         shards: int | None = None) -> tuple[list[Problem], dict, int]:
    """(problems, {host: notes}, operations planned): the dry run in shards run at once (one pyinfra
    process each, llmfleet/fleetrun.py), so the control machine's cores share it and a slow host
    holds back its own shard only."""
    if not hosts:
        return [], {}, 0
    parts = fleetrun.split(hosts, fleetrun.shard_count(len(hosts), shards))
    with tempfile.TemporaryDirectory(prefix="llmfleet-dry-run-") as tmp:
        done = fleetrun.run(lambda chosen: dry_run_args(inventory, chosen, data), parts, Path(tmp), timeout_s=3600)
        results = [_read(inventory, s.hosts, s.returncode or 0, s.doc, s.log_path.read_text() if s.log_path else "",
                         data) for s in done]
    problems = [p for r in results for p in r[0]]
    notes: dict[str, list[str]] = {}
    for r in results:
        for h, ns in r[1].items():
            notes.setdefault(h, []).extend(ns)
    return problems, notes, max(r[2] for r in results)


def _read(inventory: str, hosts: list[str], returncode: int, doc: dict | None, stderr: str,
          data: list[str] | None) -> tuple[list[Problem], dict, int]:
    """One dry run's plan as problems and notes."""
    unmatched(stderr)
    if doc is None or "plan" not in doc:
        raise AuditError(f"the deploy's dry run failed (exit {returncode}): {_last_error(stderr)}")
    problems: list[Problem] = []
    notes: dict[str, list[str]] = {}
    if returncode != 0:
        # a host whose operations could not be planned is not clean: say so, with pyinfra's line
        failed = fleetrun.host_errors(stderr, hosts)
        if not failed:
            raise AuditError(f"the deploy's dry run failed (exit {returncode}): {_last_error(stderr)}")
        for h, why in sorted(failed.items()):
            problems.append(Problem(h, "config", "deploy: dry run",
                                    f"the deploy could not be planned here: {why[:400]}", "a plan",
                                    f"an error: {why[:400]}", what="the deploy's plan",
                                    repair=f"{deploy_command(inventory, h, data)} --dry (and read its error)"))
    for op in doc["plan"]:
        for h in op["hosts_with_change"]:
            problems.append(changed(op, h, inventory, data))
        for h in op["hosts_with_conditional_change"]:
            notes.setdefault(h, []).append(f"decided at run time, not counted: {op['name']}")
    return problems, notes, len(doc["plan"])


# the operation's arguments that name what it manages (pyinfra's plan lists them as "key=value")
_SUBJECTS = ("dest", "path", "service", "user", "src")


def changed(op: dict, host: str, inventory: str, data: list[str] | None = None) -> Problem:
    """A planned change as a person reads it: what (the file or service the operation manages, else
    its component), expected (the operation's own name: the state it declares), the repair."""
    name = (op.get("names") or [op["name"]])[0]
    component, _, declared = name.rpartition(" | ")
    args = dict(a.split("=", 1) for a in op.get("args", []) if "=" in a)
    what = next((args[k] for k in _SUBJECTS if args.get(k)), component or declared)
    return Problem(host, "config", f"deploy: {op['name']}", f"{name}: the deploy would change this",
                   declared, "differs: the deploy would change it", what=what,
                   why=f"component {component}" if component and component != what else "",
                   repair=deploy_command(inventory, host, data))


def _last_error(stderr: str) -> str:
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    keep = [ln for ln in lines if "error" in ln.lower() or "host " in ln.lower()]
    return " | ".join((keep or lines)[-5:])[-1500:]
