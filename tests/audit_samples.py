"""Audit reports with drift of every kind, made by the functions the audit uses (the deploy's plan
entry as pyinfra prints it, verify failures as `expect` words them, a fingerprint comparison, a
waiver), for the unit tests and the browser test of the HTML page."""

from __future__ import annotations

import copy
import datetime as dt

from llmfleet.audit import fingerprint, report, waivers
from llmfleet.audit.config_drift import changed
from llmfleet.audit.model import HostResult, deploy_command
from llmfleet.audit.run import hardware_repair, unreachable, waiver_repair
from llmfleet.audit.state_drift import failures

INVENTORY = "inventories/lab.py"
# a deploy's dry-run plan entry as pyinfra prints it (pyinfra_cli/prints.py: build_plan_json); an
# operation with a name= of its own has no args there (pyinfra attaches them to unnamed ones only)
SYSCTL_OP = {"op_hash": "a1", "name": "sysctls | sysctl drop-in", "names": ["sysctls | sysctl drop-in"],
             "args": [], "hosts_with_change": ["lab-c1"], "hosts_with_conditional_change": []}
UNNAMED_OP = {"op_hash": "b2", "name": "sysctls | files.put (src=x.conf, dest=/etc/sysctl.d/90-llmfleet.conf)",
              "names": ["sysctls | files.put"], "args": ["src=x.conf", "dest=/etc/sysctl.d/90-llmfleet.conf"],
              "hosts_with_change": ["lab-c1"], "hosts_with_conditional_change": []}
NVLINK = {f"GPU{i}": {f"GPU{j}": ("X" if i == j else "NV2") for j in range(4)} for i in range(4)}
FINGERPRINT = {"system": {"vendor": "Supermicro", "product": "SYS-4029GP", "serial": "S1"}, "nvlink": NVLINK}


def verify_helpers():
    """verify/helpers.py, where the verify suite's `expect` and `expect_each` live."""
    from verify import helpers

    return helpers


def expect_message(host: str, setting: str, expected, actual, fails: bool = True) -> str:
    """verify's `expect` on these values: its failure message ("" when it passes)."""
    try:
        verify_helpers().expect(host, setting, expected, actual)
    except AssertionError as exc:
        assert fails, str(exc)
        return str(exc)
    assert not fails, "expect() passed on values that differ"
    return ""


def every_kind(hostile: str = "") -> dict:
    """The report of an audit that found config, state (dict values), hardware and unreachable
    drift, a waived problem and an expired waiver; `hostile` is put into a value a host reports."""
    results = {n: HostResult(n, checks_run=40) for n in ("lab-c1", "lab-c2", "lab-c3")}
    add = lambda p: results[p.host].problems.append(p)  # noqa: E731
    add(changed(SYSCTL_OP, "lab-c1", INVENTORY))
    limits = expect_message("lab-c1", "limits (/etc/security/limits.d/90-llmfleet.conf)",
                            {("vllm", "soft", "nofile"): "65536", ("vllm", "hard", "nofile"): "65536"},
                            {("vllm", "soft", "nofile"): None, ("vllm", "hard", "nofile"): "65536"})
    for p in failures("lab-c1", "verify/test_limits.py::test_limits", "AssertionError: " + limits,
                      deploy_command(INVENTORY, "lab-c1")):
        add(p)
    if hostile:
        bad = expect_message("lab-c1", "chrony_servers", ["ntp.example"], [hostile])
        for p in failures("lab-c1", "verify/test_chrony.py::test_chrony_configured", "AssertionError: " + bad,
                          deploy_command(INVENTORY, "lab-c1")):
            add(p)
    now = copy.deepcopy(FINGERPRINT)
    now["nvlink"]["GPU1"]["GPU2"] = "SYS"
    for p in fingerprint.compare("lab-c2", FINGERPRINT, now):
        p.repair = hardware_repair(INVENTORY, "lab-c2")
        add(p)
    sysctls = expect_message("lab-c2", "sysctls in force (/proc/sys)", {"vm.swappiness": "1"}, {"vm.swappiness": "37"})
    for p in failures("lab-c2", "verify/test_sysctls.py::test_sysctls_in_force", "AssertionError: " + sysctls,
                      deploy_command(INVENTORY, "lab-c2")):
        add(p)
    w = waivers.Waiver(check="verify/test_sysctls.py::*", hosts="lab-c2", reason="swappiness trial OPS-1",
                       expires=dt.date(2099, 12, 31))
    old = waivers.Waiver(check="deploy: chrony*", hosts="lab-c*", reason="old exception", expires=dt.date(2026, 1, 1))
    expired = waivers.apply([p for r in results.values() for p in r.problems], [w, old], dt.date(2026, 11, 29))
    for p in expired:
        p.repair = waiver_repair("waivers.yml")
    results["lab-c3"].reachable = False
    results["lab-c3"].problems.append(unreachable(INVENTORY, "lab-c3", "Connection refused"))
    return report.build(INVENTORY, None, results, expired, None, None, "2026-11-29T10:00:00+00:00")
