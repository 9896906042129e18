"""A pytest plugin the audit loads into the verify suite: every test's outcome as one JSON line in
$LLMFLEET_AUDIT_RESULTS (nodeid, outcome, the failure's first line)."""

from __future__ import annotations

import json
import os


def pytest_runtest_logreport(report):
    path = os.environ.get("LLMFLEET_AUDIT_RESULTS")
    if not path:
        return
    if report.when == "call" or report.outcome != "passed":
        message = None
        if report.outcome == "failed":
            crash = getattr(report.longrepr, "reprcrash", None)
            message = crash.message if crash else str(report.longrepr)[-1000:]
        elif report.outcome == "skipped" and isinstance(report.longrepr, tuple):
            message = report.longrepr[2]
        with open(path, "a") as f:
            f.write(json.dumps({"nodeid": report.nodeid, "when": report.when, "outcome": report.outcome,
                                "message": message}) + "\n")
