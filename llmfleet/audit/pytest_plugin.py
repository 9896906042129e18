"""A pytest plugin the audit loads into the verify suite: every test's outcome as one JSON line in
$LLMFLEET_AUDIT_RESULTS (nodeid, outcome, the failure's first line, and the figures a check
recorded with pytest's `record_property`: the model storage's speed, the burn-in's TFLOP/s, ...)."""

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
        row = {"nodeid": report.nodeid, "when": report.when, "outcome": report.outcome, "message": message}
        if report.when == "call" and report.user_properties:
            row["properties"] = dict(report.user_properties)
        with open(path, "a") as f:
            f.write(json.dumps(row, default=str) + "\n")
