"""The reboot roll's wait for a host to come back (operations/reboot.py `_wait_back`), against a
host that answers as a rebooting one does: the old system first, still shutting down, then
nothing, then the new boot. (The lab proves the whole roll; the old system's moment of cutting a
connection mid-command is a race the lab hits only now and then, so it is played here.)"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from llmfleet import roll
from operations import reboot

OLD, NEW = "0f0f-old", "1e1e-new"


class Cut(Exception):
    """What paramiko raises when the far end closes a channel under a command."""


@dataclass
class Host:
    """Each connect() takes the next of `answers`: "refused", "cut" (connects, then the command
    raises), a boot id, or a dict of command -> output for the checks after the boot id."""

    answers: list
    name: str = "lab-c1"
    connected: bool = True
    logged: list = field(default_factory=list)
    checks: dict = field(default_factory=lambda: {"is-system-running": "running", "/proc/cmdline": "ro quiet"})
    now: str | None = None

    def connect(self, show_errors=True):
        self.now = self.answers.pop(0) if self.answers else "refused"
        self.connected = self.now != "refused"

    def disconnect(self):
        self.connected = False

    def run_shell_command(self, command, _sudo=False):
        text = str(command)
        if self.now == "cut":
            raise Cut("SSH session not active")
        if "boot_id" in text:
            out = self.now
        else:
            out = next(v for k, v in self.checks.items() if k in text)
        return True, type("Out", (), {"stdout": out})()

    def log_styled(self, message, **_):
        self.logged.append(message)


@pytest.fixture(autouse=True)
def quick(monkeypatch, tmp_path):
    clock = [0.0]
    monkeypatch.setattr(reboot.time, "sleep", lambda s: clock.__setitem__(0, clock[0] + s))
    monkeypatch.setattr(reboot.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(roll, "_ROLLS", {})
    monkeypatch.setenv(roll.ENV, str(tmp_path))
    monkeypatch.setitem(reboot._BOOT_IDS, "lab-c1", OLD)


def test_a_connection_the_old_system_cuts_while_it_shuts_down_is_not_a_failed_reboot():
    host = Host(["cut", OLD, "refused", "cut", NEW])
    assert reboot._wait_back(None, host, [], 600) is True
    assert host.logged == ["rebooted and healthy"] and roll.get(reboot.ROLL).stopped() is None


def test_a_host_that_never_shows_a_new_boot_stops_the_roll_at_the_deadline():
    host = Host(["cut", OLD] + [OLD] * 400)
    assert reboot._wait_back(None, host, [], 60) is False
    assert roll.get(reboot.ROLL).stopped() == "lab-c1 did not come back within 60s (reboot_timeout_s)"


def test_a_new_boot_that_comes_up_degraded_stops_the_roll_and_names_the_failed_units():
    host = Host([NEW])
    host.checks = {"is-system-running": "degraded", "systemctl --failed": "broken-at-boot.service"}
    assert reboot._wait_back(None, host, [], 600) is False
    assert roll.get(reboot.ROLL).stopped() == "lab-c1 came back degraded (failed units: broken-at-boot.service)"


def test_a_check_cut_after_the_new_boot_is_seen_stops_the_roll_with_the_reason():
    host = Host([NEW])
    host.checks = {}  # the checks find nothing: the host answers no more
    assert reboot._wait_back(None, host, [], 600) is False
    assert roll.get(reboot.ROLL).stopped().startswith("lab-c1 could not be checked after its reboot")


def test_the_new_boot_must_carry_the_expected_kernel_command_line():
    host = Host([NEW])
    assert reboot._wait_back(None, host, ["transparent_hugepage=never"], 600) is False
    assert roll.get(reboot.ROLL).stopped() == ("lab-c1 came back without transparent_hugepage=never on its "
                                          "kernel command line")
