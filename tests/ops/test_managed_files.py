"""The managed_files component's end of a deploy, facts in and operations out: the manifest is
written root-only with every entry the deploy declared; a foreign drop-in override is commented out
and what reads it reloads (a unit restarted, systemd re-executed, grub regenerated); a vLLM unit
is left to its roll."""

from __future__ import annotations

import base64
import json
import zlib

import pytest

from llmfleet.managed_files import MANIFEST, Entry, file_entry
from operations import managed_files as ops


class FakeHost:
    name = "gpu-1"

    def __init__(self, facts: dict):
        self.facts, self.logged, self.noops = facts, [], []

    def get_fact(self, cls, **kwargs):
        value = self.facts[cls.__name__]
        return value(kwargs) if callable(value) else value

    def noop(self, text):
        self.noops.append(text)

    def log_styled(self, text, **_):
        self.logged.append(text)


def override(managed: str, folder: str, file: str, key: str = "k", value: str = "2", managed_value: str = "1"):
    return {"managed": managed, "folder": folder, "file": file, "line": 1, "key": key, "value": value,
            "managed_value": managed_value}


def ended(monkeypatch, settings, overrides: list[dict], declared: list[tuple[Entry, str | None]]):
    """The operations managed_files.written declares, as (operation, its arguments)."""
    from pyinfra.context import ctx_host

    calls: list[tuple[str, dict]] = []
    for module, names in ((ops.files, ("put", "directory")), (ops.server, ("shell",)),
                          (ops.systemd, ("service", "daemon_reload"))):
        for name in names:
            monkeypatch.setattr(module, name, lambda _n=name, **kw: calls.append((_n, kw)))
    asked: list[dict] = []
    fake = FakeHost({"ManagedDropins": lambda kw: asked.append(kw) or {"overrides": overrides, "unreadable": []},
                     "Which": "/usr/sbin/tool"})
    monkeypatch.setattr(ops, "_ENTRIES", {})
    monkeypatch.setattr(ops, "_DROPIN_CONTENT", {})
    with ctx_host.use(fake):
        for entry, content in declared:
            ops.recorded(entry, content)
        ops.written.__wrapped__(settings)
    return calls, fake, asked


SYSCTL = "/etc/sysctl.d/90-llmfleet.conf"


def test_the_manifest_is_written_root_only_with_every_declared_entry(monkeypatch, settings):
    declared = [(file_entry(SYSCTL, "vm.swappiness = 1\n", "sysctl drop-in", "644"), "vm.swappiness = 1\n"),
                (Entry("/data/models/m/current", "link", "model link", target="/data/models/m/2"), None)]
    calls, fake, asked = ended(monkeypatch, settings, [], declared)
    (manifest,) = [kw for op, kw in calls if op == "put"]
    assert (manifest["dest"], manifest["mode"], manifest["user"], manifest["group"]) == (MANIFEST, "600", "root",
                                                                                         "root")
    rows = json.loads(manifest["src"].getvalue())["entries"]
    assert [r["path"] for r in rows] == ["/data/models/m/current", SYSCTL]
    # the override check is given each drop-in file's managed content, and every managed path
    chain = json.loads(zlib.decompress(base64.b64decode(asked[0]["entries"].removeprefix("z:"))))
    assert {"path": SYSCTL, "folder": "sysctl", "content": "vm.swappiness = 1\n"} in chain
    assert {"path": "/data/models/m/current"} in chain
    assert fake.noops == ["managed files: no foreign drop-in file overrides a managed key"]
    assert not [c for c in calls if c[0] in ("shell", "service")]


def test_a_foreign_override_is_commented_out_and_each_reader_reloads(monkeypatch, settings):
    overrides = [override(SYSCTL, "sysctl", "/etc/sysctl.d/95-local.conf", "vm.swappiness", "60", "1"),
                 override("/etc/systemd/system/llmfleet-thp.service", "systemd_unit",
                          "/etc/systemd/system/llmfleet-thp.service.d/override.conf", "Service.Nice", "5", "not set"),
                 override("/etc/systemd/system.conf.d/90-llmfleet-limits.conf", "systemd_manager",
                          "/etc/systemd/system.conf.d/99-local.conf"),
                 override("/etc/default/grub.d/90-llmfleet.cfg", "grub", "/etc/default/grub.d/99-local.cfg")]
    calls, fake, _ = ended(monkeypatch, settings, overrides, [])
    shells = [kw["commands"][0] for op, kw in calls if op == "shell"]
    assert "managed_files_dropins" in shells[0] and "--repair" in shells[0]
    assert shells[1:] == ["systemctl daemon-reexec", "update-grub"]
    assert [(kw["service"], kw["restarted"], kw["daemon_reload"]) for op, kw in calls if op == "service"] == [
        ("llmfleet-thp.service", True, True)]
    assert any("/etc/sysctl.d/95-local.conf line 1: vm.swappiness = 60 overrides" in line for line in fake.logged)


@pytest.mark.parametrize("unit", ["vllm.service", "vllm-a.service"])
def test_a_vllm_unit_is_not_restarted_outside_its_roll(monkeypatch, settings, unit):
    overrides = [override(f"/etc/systemd/system/{unit}", "systemd_unit", f"/etc/systemd/system/{unit}.d/x.conf")]
    calls, fake, _ = ended(monkeypatch, settings, overrides, [])
    assert not [c for c in calls if c[0] == "service"]
    assert [op for op, _ in calls if op == "daemon_reload"] == ["daemon_reload"]
    assert any(f"{unit}: its drop-ins changed" in line for line in fake.logged)
