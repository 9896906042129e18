"""State drift: the verify suite on every host, in ``workers`` pytest processes at once, each with a
share of the hosts (dealt round-robin, one after the other in its process).

Each host's checks gather their state in a few round trips (verify/: one command per component),
so a host costs the same whatever the fleet's size. A pytest process costs more than a host's
checks (measured on the bench lab, benchmarks/fleet_scale.py: 3.1 s of CPU for a process with one
host, 6.8 s for one with eight), so hosts share processes rather than each starting its own. Failures
come back with the verify suite's own message, one line per setting that differs
(`host: setting: expected X, actual Y`: verify/conftest.py's `expect`), read here into one problem
per line, with the command that repairs it. Acceptance checks (``-m acceptance``: the throughput
probe) are performance, not state: audits skip them."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from llmfleet import fleetrun
from llmfleet.audit.model import Problem, deploy_command
from llmfleet.audit.testinfra import FOLDER_PATH_MAX, testinfra_url
from llmfleet.inventory import ROOT

# one line of a verify failure: "[host[ GPU i]: ]what: expected X, actual Y" (verify/conftest.py: expect)
_DIFFERS = re.compile(r"(?P<what>.+?): expected (?P<expected>.*?), actual:? (?P<actual>.*)")


# verify checks whose failure a deploy cannot repair (the deploy repairs every other one)
GPU_HARDWARE = tuple(f"verify/test_gpu_health.py::{t}" for t in (
    "test_pci_gpu_count", "test_count_and_model", "test_memory", "test_ecc", "test_memory_error_management",
    "test_pcie_link", "test_nvlink", "test_no_xid_errors"))
MIRRORS_ANSWER = "verify/test_mirrors.py::test_mirrors_answer"


def repair_for(check: str, inventory: str, host: str, data: list[str] | None = None) -> str:
    """The command (or step) that repairs a failed verify check on a host."""
    if check in GPU_HARDWARE:
        return (f"a deploy does not repair GPU hardware: look at the GPUs of {host} (nvidia-smi -q; the kernel "
                f"log: journalctl -k | grep -i xid); a replaced part is recorded with llmfleet onboard {inventory} "
                f"--limit {host} --restart")
    if check == MIRRORS_ANSWER:
        return f"a deploy does not make a mirror answer: check the mirror, and the network from {host} to it"
    return deploy_command(inventory, host, data)


def failures(host: str, check: str, message: str, repair: str) -> list[Problem]:
    """A failed verify check as problems: one per line that says what differs, expected and actual;
    one with the failure's first line when none does."""
    text = message.strip()
    for prefix in ("AssertionError: ", "Failed: "):
        text = text.removeprefix(prefix)
    lines = []
    for line in text.splitlines():
        if line.startswith("assert "):  # pytest's own explanation of a plain assert follows
            break
        lines.append(line.strip())
    out = []
    for line in lines:
        rest = line.removeprefix(f"{host}: ") if line.startswith(f"{host}: ") else line.removeprefix(f"{host} ")
        m = _DIFFERS.fullmatch(rest)
        if m:
            out.append(Problem(host, "state", check, line[:600], m["expected"], m["actual"], what=m["what"],
                               repair=repair))
    if not out:
        first = next((ln for ln in lines if ln), "failed")
        out.append(Problem(host, "state", check, first[:600], what=check.rpartition("::")[2] or check,
                           why=first.removeprefix(f"{host}: ")[:600], repair=repair))
    return out


def host_of(nodeid: str, tokens: dict[str, str]) -> str | None:
    """The host a verify test ran on, from its id's parameters (testinfra's host id, e.g.
    "ssh://lab-c1", alone or joined with others by "-"): the longest token that is a whole part, so
    "ssh://lab-c1" is not taken for "ssh://lab-c10"."""
    params = nodeid[nodeid.find("[") + 1:-1] if nodeid.endswith("]") else ""
    found = [t for t in tokens if params == t or params.startswith(t + "-") or params.endswith("-" + t)
             or f"-{t}-" in params]
    return tokens[max(found, key=len)] if found else None


def verify(inventory: str, hosts: list[dict], workers: int = 8, marker: str = "not acceptance",
           timeout_s: int = 1800, data: list[str] | None = None, figures: dict[str, dict] | None = None
           ) -> tuple[list[Problem], dict[str, int], dict[str, list[str]]]:
    """(problems, {host: checks run}, {host: notes}); with ``figures``, what the checks recorded
    (record_property: the weights load time, the model storage, the burn-in, ...) is added to it as
    {host: {name: value}}. Its ssh settings and the checks' results go to a temporary folder (0700),
    removed when it returns."""
    with tempfile.TemporaryDirectory(prefix=FOLDER_PREFIX, dir=folder_root()) as folder:
        return _verify(Path(folder), inventory, hosts, workers, marker, timeout_s, data, figures)


FOLDER_PREFIX = "llmfleet-audit-"  # the folder also holds ssh's control sockets (audit/testinfra.py)


def folder_root(root: str | None = None) -> str:
    """Where the verify part's folder goes: the temporary folder (TMPDIR), or /tmp where TMPDIR's
    path is too long for ssh's control sockets (mkdtemp adds 8 characters to the prefix)."""
    root = root or tempfile.gettempdir()
    return root if len(root) + 1 + len(FOLDER_PREFIX) + 8 <= FOLDER_PATH_MAX else "/tmp"


def _verify(tmp: Path, inventory: str, hosts: list[dict], workers: int, marker: str, timeout_s: int,
            data: list[str] | None, figures: dict[str, dict] | None
            ) -> tuple[list[Problem], dict[str, int], dict[str, list[str]]]:
    ssh_config = tmp / "ssh_config"
    ssh_config.touch()
    urls = {h["name"]: testinfra_url(h["name"], h["data"], ssh_config) for h in hosts}

    tokens = {urls[n].split("?", 1)[0]: n for n in urls}

    def one(i: int, names: list[str]) -> list[tuple[str, subprocess.CompletedProcess, list[dict]]]:
        results = tmp / f"part-{i}.jsonl"
        args = [sys.executable, "-m", "pytest", str(ROOT / "verify"), "-q", "-p", "no:cacheprovider",
                "-p", "llmfleet.audit.pytest_plugin", f"--hosts={','.join(urls[n] for n in names)}",
                "--inventory", inventory, "-m", marker, "-o", "addopts="] + \
            [a for kv in (data or []) for a in ("--data", kv)]
        proc = subprocess.run(args, capture_output=True, text=True, cwd=ROOT, timeout=timeout_s * len(names),
                              env={**os.environ, "LLMFLEET_AUDIT_RESULTS": str(results)})
        rows = [json.loads(x) for x in results.read_text().splitlines()] if results.is_file() else []
        by_host: dict[str, list[dict]] = {n: [] for n in names}
        for r in rows:
            host = host_of(r["nodeid"], tokens)
            if host in by_host:
                by_host[host].append(r)
        return [(n, proc, by_host[n]) for n in names]

    parts = fleetrun.split(list(urls), max(1, workers))
    problems: list[Problem] = []
    counts: dict[str, int] = {}
    notes: dict[str, list[str]] = {}
    with ThreadPoolExecutor(max_workers=max(1, len(parts))) as pool:
        for name, proc, lines in [x for part in pool.map(one, range(len(parts)), parts) for x in part]:
            found, counts[name], host_notes, host_figures = read_results(
                name, urls[name].split("?", 1)[0], lines, inventory, data)
            problems += found
            if host_notes:
                notes[name] = host_notes
            if figures is not None:
                figures.setdefault(name, {}).update(host_figures)
            if not lines and proc.returncode != 0:
                output = (proc.stdout + proc.stderr).strip()[-400:]
                problems.append(did_not_run(name, output, f"pytest verify/ --hosts={urls[name].split('?')[0]} "
                                            f"--inventory {inventory} (and read why it stops)"))
    return problems, counts, notes


def did_not_run(name: str, output: str, repair: str) -> Problem:
    return Problem(name, "state", "verify", "the verify suite did not run: " + output, "the verify suite runs",
                   "it did not run", what="the verify suite", why=output, repair=repair)


def read_results(name: str, host_token: str, lines: list[dict], inventory: str, data: list[str] | None = None
                 ) -> tuple[list[Problem], int, list[str], dict]:
    """One host's verify results (llmfleet/audit/pytest_plugin.py's lines) as (problems, checks run,
    notes, figures): what the control machine's audit and the host's own self-audit
    (llmfleet/self_audit.py) both report, the same way."""
    count = sum(1 for r in lines if r["when"] == "call")
    figures: dict = {}
    for r in lines:
        figures.update(r.get("properties") or {})
    reasons: dict[str, int] = {}
    for r in lines:
        if r["outcome"] == "skipped":
            why = (r["message"] or "no reason given").removeprefix("Skipped: ")
            reasons[why] = reasons.get(why, 0) + 1
    notes = [f"{n} verify check(s) skipped: {why}" for why, n in reasons.items()]
    problems: list[Problem] = []
    for r in lines:
        if r["outcome"] != "failed":
            continue
        check = r["nodeid"].replace(host_token, "").replace("[]", "").replace("[-", "[").replace("-]", "]")
        problems += failures(name, check, r["message"] or "", repair_for(check, inventory, name, data))
    return problems, count, notes, figures
