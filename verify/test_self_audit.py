"""self_audit: the host's own audit is installed as the deploy rendered it: its timer enabled and
active, its units, its environment and the code of this llmfleet in use, the host's settings
root-only; and its last run, if there was one, succeeded and wrote its metrics."""

import json

import pytest

from llmfleet import self_audit
from verify.helpers import expect, run_remote

TIMER = f"{self_audit.UNIT}.timer"
SERVICE = f"{self_audit.UNIT}.service"


@pytest.fixture(scope="module")
def state(host, settings):
    if not settings.self_audit_enabled:
        pytest.skip("self_audit_enabled is False: no self-audit on this host")
    units = self_audit.units(settings)
    return run_remote(host, "telemetry_state", json.dumps({
        "units": [TIMER],
        "files": [f"/etc/systemd/system/{n}" for n in units] + [self_audit.SETTINGS_FILE,
                                                                 f"{self_audit.venv_dir(settings)}/.complete"],
        "check": [["stat", "-c", "%a %U:%G", self_audit.SETTINGS_FILE],
                  ["readlink", self_audit.current_src(settings)],
                  ["systemctl", "show", "--property=Result,ExecMainStatus", SERVICE]]}))


def test_the_self_audit_timer_runs_the_units_the_deploy_rendered(host_name, settings, state):
    expect(host_name, "self-audit timer", {"active": "active", "enabled": "enabled"}, state["units"][TIMER])
    for name, content in self_audit.units(settings).items():
        found = state["files"][f"/etc/systemd/system/{name}"]
        expect(host_name, f"/etc/systemd/system/{name} (self_audit_interval_s, self_audit_dir)", content,
               found["content"] if found else None)


def test_the_self_audit_runs_this_llmfleet_in_its_own_environment(host_name, settings, state):
    expect(host_name, f"self-audit environment of self_audit_packages ({self_audit.venv_dir(settings)})",
           "complete", "complete" if state["files"][f"{self_audit.venv_dir(settings)}/.complete"] else "missing")
    link = state["checks"][1]
    expect(host_name, f"self-audit code in use ({self_audit.current_src(settings)})", self_audit.src_dir(settings),
           link["output"].strip() if link["rc"] == 0 else "missing")


def test_the_host_settings_of_the_self_audit_are_root_only(host_name, settings, state):
    mode = state["checks"][0]
    expect(host_name, f"{self_audit.SETTINGS_FILE} mode and owner", "600 root:root",
           mode["output"].strip() if mode["rc"] == 0 else "missing")
    found = state["files"][self_audit.SETTINGS_FILE]
    deployed = json.loads(found["content"]) if found else {}
    expect(host_name, f"{self_audit.SETTINGS_FILE}: host", host_name, deployed.get("host"))
    # (its settings are the last deploy's, --data included: what the host judges itself against)
    expect(host_name, f"{self_audit.SETTINGS_FILE}: settings", "present", "present" if deployed.get("data") else "none")


def test_the_last_self_audit_run_succeeded(host_name, state):
    shown = dict(line.split("=", 1) for line in state["checks"][2]["output"].splitlines() if "=" in line)
    expect(host_name, f"{SERVICE}: result of its last run", "success", shown.get("Result"))
