"""State drift: the verify suite on every host, one pytest process per host, several at once.

Each host's checks gather their state in a few round trips (verify/: one command per component),
so a host costs the same whatever the fleet's size; hosts run in parallel (``workers``). Failures
come back with the verify suite's own message (host, setting, expected, actual). Acceptance checks
(``-m acceptance``: the throughput probe) are performance, not state: audits skip them."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from llmfleet.audit.model import Problem
from llmfleet.audit.testinfra import testinfra_url
from llmfleet.inventory import ROOT

_EXPECT = re.compile(r"expected (?P<expected>.+?), actual (?P<actual>.+)$")


def verify(inventory: str, hosts: list[dict], workers: int = 8, marker: str = "not acceptance",
           timeout_s: int = 1800, data: list[str] | None = None
           ) -> tuple[list[Problem], dict[str, int], dict[str, list[str]]]:
    """(problems, {host: checks run}, {host: notes})."""
    tmp = Path(tempfile.mkdtemp(prefix="llmfleet-audit-"))
    ssh_config = tmp / "ssh_config"
    ssh_config.touch()
    urls = {h["name"]: testinfra_url(h["name"], h["data"], ssh_config) for h in hosts}

    def one(name: str):
        results = tmp / f"{name}.jsonl"
        args = [sys.executable, "-m", "pytest", str(ROOT / "verify"), "-q", "-p", "no:cacheprovider",
                "-p", "llmfleet.audit.pytest_plugin", f"--hosts={urls[name]}", "--inventory", inventory,
                "-m", marker, "-o", "addopts="] + [a for kv in (data or []) for a in ("--data", kv)]
        proc = subprocess.run(args, capture_output=True, text=True, cwd=ROOT, timeout=timeout_s,
                              env={**os.environ, "LLMFLEET_AUDIT_RESULTS": str(results)})
        lines = [json.loads(x) for x in results.read_text().splitlines()] if results.is_file() else []
        return name, proc, lines

    problems, counts, notes = [], {}, {}
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        for name, proc, lines in pool.map(one, list(urls)):
            host_token = urls[name].split("?", 1)[0]
            counts[name] = sum(1 for r in lines if r["when"] == "call")
            skipped = [r for r in lines if r["outcome"] == "skipped"]
            reasons: dict[str, int] = {}
            for r in skipped:
                why = (r["message"] or "no reason given").removeprefix("Skipped: ")
                reasons[why] = reasons.get(why, 0) + 1
            for why, n in reasons.items():
                notes.setdefault(name, []).append(f"{n} verify check(s) skipped: {why}")
            for r in lines:
                if r["outcome"] != "failed":
                    continue
                check = r["nodeid"].replace(host_token, "").replace("[]", "").replace("[-", "[").replace("-]", "]")
                message = (r["message"] or "").strip().removeprefix("AssertionError: ").splitlines()
                first = message[0] if message else "failed"
                m = _EXPECT.search(first)
                problems.append(Problem(name, "state", check, first[:600],
                                        m.group("expected") if m else None, m.group("actual") if m else None))
            if not lines and proc.returncode != 0:
                problems.append(Problem(name, "state", "verify", "the verify suite did not run: "
                                        + (proc.stdout + proc.stderr).strip()[-400:]))
    return problems, counts, notes
