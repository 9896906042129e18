"""llmfleet/remote/vllm_switch.py on its own: run as the deploy runs it (llmfleet.facts.python_script,
through a shell) against a temporary folder for the unit, key, links and records, with a small
script in place of systemctl that records each call."""

import json
import os
import subprocess
from pathlib import Path

import pytest

from llmfleet.facts import python_script


class Host:
    """A folder laid out as a serving host: unit, API key, environment and model links, and the
    deploy's staging folder."""

    def __init__(self, root: Path):
        self.root = root
        self.keep = root / "etc-llmfleet-vllm"
        self.unit = root / "systemd" / "vllm.service"
        self.key = self.keep / "api-key.env"
        self.venv = root / "opt" / "current"
        self.model = root / "models" / "current"
        self.record = self.keep / "last-switch.json"
        self.calls = root / "calls.log"
        self.systemctl = root / "systemctl"
        for d in (self.keep, self.unit.parent, self.venv.parent, self.model.parent):
            d.mkdir(parents=True, exist_ok=True)
        # a systemctl that records its arguments and fails the verbs listed in ./fail
        self.systemctl.write_text(f"#!/bin/sh\necho \"$*\" >> {self.calls}\n"
                                  f"grep -qx \"$1\" {root}/fail 2>/dev/null && exit 1\nexit 0\n")
        self.systemctl.chmod(0o755)

    def serving(self, unit="unit v1\n", key="VLLM_API_KEY=old\n", env="envs/a", model="models/1"):
        self.unit.write_text(unit)
        if key is not None:
            self.key.write_text(key)
            self.key.chmod(0o600)
        os.symlink(env, self.venv)
        os.symlink(model, self.model)

    def stage(self, unit=None, key=None, env=None, model=None):
        if unit is not None:
            (self.keep / "vllm.service.new").write_text(unit)
        if key is not None:
            (self.keep / "api-key.env.new").write_text(key)
            (self.keep / "api-key.env.new").chmod(0o600)
        for link, target in ((self.venv, env), (self.model, model)):
            if target is not None:
                os.symlink(target, f"{link}.new")

    def run(self, *args: str) -> tuple[int, dict]:
        command = python_script("vllm_switch", *args, "--record", str(self.record), "--service", "vllm.service",
                                "--systemctl", str(self.systemctl))
        proc = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=60)
        return proc.returncode, json.loads(proc.stdout.splitlines()[-1])

    def switch(self, *paths: str) -> tuple[int, dict]:
        return self.run("switch", "--keep", str(self.keep), *paths)

    def called(self) -> list[str]:
        return self.calls.read_text().splitlines() if self.calls.exists() else []


@pytest.fixture
def fleet_host(tmp_path) -> Host:
    return Host(tmp_path)


def test_a_switch_puts_the_staged_unit_key_and_links_in_place_and_restarts(fleet_host):
    h = fleet_host
    h.serving()
    h.stage(unit="unit v2\n", key="VLLM_API_KEY=new\n", env="envs/b", model="models/2")
    rc, out = h.switch("--unit", str(h.unit), "--file", str(h.key), "--link", str(h.venv), "--link", str(h.model))
    assert (rc, out["ok"], out["reloaded"]) == (0, True, True), out
    assert h.unit.read_text() == "unit v2\n" and h.key.read_text() == "VLLM_API_KEY=new\n"
    assert oct(h.key.stat().st_mode & 0o777) == "0o600"
    assert (os.readlink(h.venv), os.readlink(h.model)) == ("envs/b", "models/2")
    assert (h.keep / "vllm.service.prev").read_text() == "unit v1\n"
    assert (h.keep / "api-key.env.prev").read_text() == "VLLM_API_KEY=old\n"
    assert not list(h.keep.glob("*.new")) and not h.venv.with_name("current.new").exists()
    assert h.called() == ["daemon-reload", "enable -q vllm.service", "reset-failed vllm.service",
                          "restart vllm.service"]
    assert oct(h.record.stat().st_mode & 0o777) == "0o600"


def test_switching_back_restores_what_was_served_before(fleet_host):
    h = fleet_host
    h.serving()
    h.stage(unit="unit v2\n", key="VLLM_API_KEY=new\n", env="envs/b", model="models/2")
    h.switch("--unit", str(h.unit), "--file", str(h.key), "--link", str(h.venv), "--link", str(h.model))
    h.calls.unlink()
    rc, out = h.run("back")
    assert (rc, out["ok"], out["reloaded"]) == (0, True, True), out
    assert h.unit.read_text() == "unit v1\n" and h.key.read_text() == "VLLM_API_KEY=old\n"
    assert (os.readlink(h.venv), os.readlink(h.model)) == ("envs/a", "models/1")
    assert h.called() == ["daemon-reload", "reset-failed vllm.service", "restart vllm.service"]


def test_a_link_switch_alone_restarts_without_a_daemon_reload(fleet_host):
    h = fleet_host
    h.serving()
    h.stage(model="models/2")
    rc, out = h.switch("--link", str(h.model))
    assert (rc, out["ok"], out["reloaded"], out["switched"]) == (0, True, False, [str(h.model)]), out
    assert os.readlink(h.model) == "models/2" and os.readlink(h.venv) == "envs/a"
    assert h.unit.read_text() == "unit v1\n" and h.key.read_text() == "VLLM_API_KEY=old\n"
    assert "daemon-reload" not in h.called() and h.called()[-1] == "restart vllm.service"


def test_a_restaged_unit_with_the_same_content_is_not_reloaded(fleet_host):
    h = fleet_host
    h.serving()
    h.stage(unit="unit v1\n")
    rc, out = h.switch("--unit", str(h.unit))
    assert (rc, out["reloaded"]) == (0, False), out
    assert "daemon-reload" not in h.called()


def test_a_missing_link_is_put_back_and_switching_back_removes_it_again(fleet_host):
    h = fleet_host
    h.serving()
    h.model.unlink()  # the served model's `current` removed by hand
    h.stage(model="models/1")
    rc, out = h.switch("--link", str(h.model))
    assert (rc, out["ok"]) == (0, True) and os.readlink(h.model) == "models/1", out
    rc, out = h.run("back")
    assert rc == 0 and not os.path.lexists(h.model), out


def test_the_key_is_removed_at_the_switch_and_restored_by_the_switch_back(fleet_host):
    h = fleet_host
    h.serving()
    rc, out = h.switch("--remove", str(h.key))
    assert (rc, out["ok"]) == (0, True) and not h.key.exists(), out
    rc, out = h.run("back")
    assert rc == 0 and h.key.read_text() == "VLLM_API_KEY=old\n", out


def test_a_first_start_switched_back_leaves_no_unit_behind(fleet_host):
    h = fleet_host
    h.stage(unit="unit v1\n", env="envs/a", model="models/1")
    rc, out = h.switch("--unit", str(h.unit), "--link", str(h.venv), "--link", str(h.model))
    assert rc == 0 and h.unit.read_text() == "unit v1\n", out
    rc, out = h.run("back")
    assert rc == 0 and not h.unit.exists() and not os.path.lexists(h.venv) and not os.path.lexists(h.model), out


def test_nothing_changes_when_something_named_is_not_staged(fleet_host):
    h = fleet_host
    h.serving()
    h.stage(unit="unit v2\n")  # the environment link is named below but was not staged
    rc, out = h.switch("--unit", str(h.unit), "--link", str(h.venv))
    assert (rc, out["ok"]) == (1, False) and f"the link {h.venv}" in out["why"], out
    assert h.unit.read_text() == "unit v1\n" and os.readlink(h.venv) == "envs/a"
    assert h.called() == [] and not h.record.exists()


def test_a_failed_restart_is_reported_with_systemctl_s_verb(fleet_host):
    h = fleet_host
    h.serving()
    h.stage(model="models/2")
    (h.root / "fail").write_text("restart\n")
    rc, out = h.switch("--link", str(h.model))
    assert (rc, out["ok"]) == (1, False) and out["why"].startswith("systemctl restart vllm.service failed"), out
    assert h.record.exists()  # what was switched is known, so the deploy can switch back


def test_a_layout_switch_moves_every_instance_unit_and_restarts_none_and_back_restores_each(fleet_host):
    h = fleet_host
    h.serving()
    second = h.unit.with_name("vllm-b.service")
    first = h.unit.with_name("vllm-a.service")
    first.write_text("a v1\n")
    second.write_text("b v1\n")
    (h.keep / "vllm-a.service.new").write_text("a v2\n")
    (h.keep / "vllm-b.service.new").write_text("b v2\n")
    h.stage(model="models/2")
    command = python_script("vllm_switch", "switch", "--keep", str(h.keep), "--no-restart", "--unit", str(first),
                            "--unit", str(second), "--link", str(h.model), "--record", str(h.record),
                            "--service", "vllm-a.service", "--service", "vllm-b.service",
                            "--systemctl", str(h.systemctl))
    proc = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=60)
    out = json.loads(proc.stdout.splitlines()[-1])
    assert (proc.returncode, out["ok"], out["reloaded"]) == (0, True, True), out
    assert (first.read_text(), second.read_text(), os.readlink(h.model)) == ("a v2\n", "b v2\n", "models/2")
    assert h.called() == ["daemon-reload"]  # the roll restarts the instances one at a time itself
    proc = subprocess.run(["sh", "-c", command.replace(" switch ", " back ", 1)], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (first.read_text(), second.read_text(), os.readlink(h.model)) == ("a v1\n", "b v1\n", "models/1")
    assert h.called() == ["daemon-reload", "daemon-reload"]
