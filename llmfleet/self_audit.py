"""self_audit: each host audits itself on a timer, with no SSH in and no control machine, and writes
the same ``llmfleet_audit_*`` metrics a control machine's audit writes into its own node exporter's
textfile folder; Prometheus gathers the fleet's drift from every host (``llmfleet audit
--from-prometheus URL`` reads it back into the audit's report).

What the deploy puts on a host (operations/self_audit.py):

- ``/etc/llmfleet/self-audit/settings.json`` (root, 0600): the host's name, its inventory and its
  validated settings as the deploy resolved them (paths and values, never a secret: the API key
  stays in the key file the vLLM unit reads); ``fingerprint.json`` beside it, the hardware
  fingerprint recorded at onboarding, where there is one;
- a small Python environment (``self_audit_packages``: pytest, testinfra, pydantic, ... pinned, from
  the fleet's pip mirrors) and llmfleet's own code (the package, verify/, templates/) unpacked from
  one bundle whose name is its content's hash;
- ``llmfleet-self-audit.service`` (oneshot, idle I/O, low CPU priority) and its timer, every
  ``self_audit_interval_s`` (and ``self_audit_first_run_s`` after each boot).

A run: the verify suite on ``local://`` (``-m "not acceptance"``: the state checks a control audit
runs), read by the same code as the control audit's results (llmfleet/audit/state_drift.py), and the
hardware fingerprint now against the recorded one (llmfleet/audit/fingerprint.py): the same problems,
named the same way. Config drift (the deploy's dry run) needs pyinfra and the control machine's
inventory and stays with the control machine's audit, as do waivers (``--from-prometheus`` applies
them).
"""

from __future__ import annotations

import datetime as dt
import gzip
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from llmfleet import templates

if TYPE_CHECKING:
    from llmfleet.schema import Settings

ROOT = Path(__file__).resolve().parent.parent  # the repository (or the unpacked bundle on a host)
CONF_DIR = "/etc/llmfleet/self-audit"
SETTINGS_FILE = f"{CONF_DIR}/settings.json"
FINGERPRINT_FILE = f"{CONF_DIR}/fingerprint.json"
STATE_DIR = "/var/lib/llmfleet/self-audit"  # the last run's report (last.json)
METRICS_FILE = "llmfleet_self_audit.prom"  # in node_exporter_textfile_dir
UNIT = "llmfleet-self-audit"  # .service (oneshot) and .timer
SOURCE = "self"  # the metrics' source label
# what goes into the bundle: the package, the verify suite, the templates it renders, pytest's configuration
BUNDLE_PARTS = ("llmfleet", "verify", "templates", "pyproject.toml")
# verify modules a self-audit does not collect: acceptance only (performance, not state), and they
# would need the probe's HTTP client on every host
NOT_COLLECTED = ("verify/test_probe.py",)


def venv_dir(settings: Settings) -> str:
    """The environment of the pinned packages: a folder per set, so a change makes a new one."""
    digest = hashlib.sha256("\n".join(settings.self_audit_packages).encode()).hexdigest()[:12]
    return f"{settings.self_audit_dir}/venv-{digest}"


def src_dir(settings: Settings) -> str:
    return f"{settings.self_audit_dir}/src/{bundle_id()}"


def current_src(settings: Settings) -> str:
    return f"{settings.self_audit_dir}/src/current"


def _members(root: Path) -> list[Path]:
    out = []
    for part in BUNDLE_PARTS:
        path = root / part
        if path.is_file():
            out.append(path)
            continue
        out += sorted(p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts
                      and p.suffix not in (".pyc",))
    return out


@cache
def bundle() -> bytes:
    """llmfleet's code for a host as one gzip'd tar, the same bytes for the same files (names sorted,
    times, owners and modes fixed): a deploy uploads it only when the code changed."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in _members(ROOT):
            info = tarfile.TarInfo(str(path.relative_to(ROOT)))
            data = path.read_bytes()
            info.size, info.mtime, info.mode, info.uid, info.gid = len(data), 0, 0o644, 0, 0
            tar.addfile(info, io.BytesIO(data))
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", mtime=0) as gz:
        gz.write(raw.getvalue())
    return out.getvalue()


@cache
def bundle_id() -> str:
    return hashlib.sha256(bundle()).hexdigest()[:16]


def settings_document(host: str, inventory: str, settings: Settings, groups: list[str] | None = None) -> str:
    """What the deploy writes to SETTINGS_FILE: the host, its inventory, its groups (the fleet
    gateway's hosts are a group's), its settings (JSON), but those that only pace a deploy
    (schema.PACES_A_DEPLOY: the host's state does not depend on them, so a deploy run with another
    pace leaves the file as it was)."""
    from llmfleet.schema import paces_a_deploy  # (the deploy's side: the module loads lightly on a host)

    pacing = paces_a_deploy()
    data = {k: v for k, v in settings.model_dump(mode="json").items() if k not in pacing}
    return json.dumps({"host": host, "inventory": inventory, "groups": sorted(groups or []), "data": data},
                      indent=1) + "\n"  # in the settings' own order: vllm_flags renders in it


def command(settings: Settings) -> str:
    """The service's ExecStart: this module, with the environment's python, from the unpacked code."""
    return (f"{venv_dir(settings)}/bin/python3 -m llmfleet.self_audit --settings {SETTINGS_FILE} "
            f"--out {settings.node_exporter_textfile_dir}")


def units(settings: Settings) -> dict[str, str]:
    """{unit file name: content} of the service and its timer."""
    return {f"{UNIT}.service": templates.render("self_audit", "llmfleet-self-audit.service.j2",
                                                command=command(settings), src=current_src(settings)),
            f"{UNIT}.timer": templates.render("self_audit", "llmfleet-self-audit.timer.j2",
                                              interval_s=settings.self_audit_interval_s,
                                              first_s=settings.self_audit_first_run_s)}


# ------------------------------------------------------------------------------------------------
# a run, on the host
# ------------------------------------------------------------------------------------------------
def verify_results(src: Path, settings_file: Path, state: Path) -> tuple[list[dict], str, int]:
    """The verify suite on this host, in this process (one interpreter a run): (the result lines of
    llmfleet/audit/pytest_plugin.py, what went wrong where it could not run, pytest's exit status).
    Its commands go in one batch from the second run on (verify/prefetch.py, hints in ``state``)."""
    import contextlib

    import pytest

    results = state / "results.jsonl"
    results.unlink(missing_ok=True)
    args = ["verify", "-q", "-p", "no:cacheprovider", "-p", "llmfleet.audit.pytest_plugin", "--hosts=local://",
            "--settings-file", str(settings_file), "-m", "not acceptance", "-o", "addopts=",
            *[f"--ignore={p}" for p in NOT_COLLECTED]]
    os.environ.update({"LLMFLEET_AUDIT_RESULTS": str(results), "LLMFLEET_HINTS": str(state / "hints")})
    output = io.StringIO()
    cwd = os.getcwd()
    os.chdir(src)
    try:
        with contextlib.redirect_stdout(output):
            status = int(pytest.main(args))
    except Exception as exc:  # noqa: BLE001 - any reason the suite could not run is the report's
        status, output = 3, io.StringIO(f"{type(exc).__name__}: {exc}")
    finally:
        os.chdir(cwd)
    lines = [json.loads(x) for x in results.read_text().splitlines()] if results.is_file() else []
    results.unlink(missing_ok=True)
    return lines, output.getvalue().strip(), status


def hardware(host: str, inventory: str, fingerprint_file: Path) -> tuple[list, int, list[str]]:
    """The hardware fingerprint now against the recorded one: (problems, fields compared, notes)."""
    from llmfleet.audit import fingerprint
    from llmfleet.remote import python_script

    if not fingerprint_file.is_file():
        return [], 0, [f"no hardware fingerprint recorded (fix: llmfleet onboard {inventory} --limit {host}, then "
                       "deploy: the deploy copies it here)"]
    recorded = json.loads(fingerprint_file.read_text())
    proc = subprocess.run(["sh", "-c", python_script("audit_fingerprint")], capture_output=True, text=True,
                          timeout=300)
    now = json.loads(proc.stdout)
    problems = fingerprint.compare(host, recorded, now)
    for p in problems:
        p.repair = fingerprint.repair(inventory, host)
    return problems, fingerprint.field_count(recorded), []


def run(settings_file: Path, out_dir: Path, fingerprint_file: Path = Path(FINGERPRINT_FILE),
        src: Path = ROOT, state: Path | None = None) -> dict:
    """One self-audit: the report of this host (as llmfleet/audit/report.py's, for one host), its
    metrics written into ``out_dir`` (replaced whole) and the report into STATE_DIR/last.json."""
    from llmfleet.audit import metrics, state_drift

    doc_in = json.loads(settings_file.read_text())
    host, inventory = doc_in["host"], doc_in["inventory"]
    state = state or Path(STATE_DIR)
    state.mkdir(parents=True, exist_ok=True)
    lines, output, status = verify_results(src, settings_file, state)
    problems, checks, notes, figures = state_drift.read_results(host, "[local]", lines, inventory)  # testinfra's id of local://
    if not lines and status != 0:
        problems.append(state_drift.did_not_run(host, output[-400:], f"journalctl -u {UNIT}.service on {host}"))
    found, fields, hw_notes = hardware(host, inventory, fingerprint_file)
    created = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    doc = {"created": created, "inventory": inventory, "source": SOURCE,
           "hosts": {host: {"reachable": True, "checks_run": checks + fields, "notes": notes + hw_notes,
                            "problems": [p.as_dict() for p in problems + found], "figures": figures}}}
    write_atomic(out_dir / METRICS_FILE, metrics.host_text(doc, host, source=SOURCE), 0o644)
    write_atomic(state / "last.json", json.dumps(doc, indent=1, default=str) + "\n", 0o644)
    return doc


def write_atomic(path: Path, text: str, mode: int) -> None:
    """Written beside it, then renamed: a reader (the textfile collector) never sees half a file."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.chmod(mode)
    tmp.replace(path)


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m llmfleet.self_audit", description=__doc__.split("\n")[0])
    parser.add_argument("--settings", type=Path, default=Path(SETTINGS_FILE))
    parser.add_argument("--fingerprint", type=Path, default=Path(FINGERPRINT_FILE))
    parser.add_argument("--out", type=Path, required=True, help="the node exporter's textfile folder")
    parser.add_argument("--state", type=Path, default=Path(STATE_DIR), help="the last report and the hints")
    args = parser.parse_args(argv)
    doc = run(args.settings, args.out, args.fingerprint, state=args.state)
    host = next(iter(doc["hosts"].values()))
    print(f"self-audit: {len(host['problems'])} problem(s), {host['checks_run']} check(s); metrics in "
          f"{args.out / METRICS_FILE}")
    for p in host["problems"]:
        print(f"  {p['kind']}: {p['message']}")
    return 0  # problems are the metrics' news; a run that cannot finish exits non-zero by itself


if __name__ == "__main__":
    sys.exit(main())
