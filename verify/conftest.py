"""Shared fixtures of the verify suite: `pytest verify/ --hosts=... [--inventory inventories/X.py]`.

Expected values come from the same group data the deploy used: the inventory's resolved data
(`pyinfra INV debug-inventory --json`, read once per run), validated by llmfleet's settings schema.
Every check gathers a host's state in one remote command and asserts on it, and every failure
names the host, the setting, the expected and the actual value.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from llmfleet.settings import Settings, SettingsError, validate  # noqa: E402


def pytest_addoption(parser):
    parser.addoption("--inventory", default=os.environ.get("LLMFLEET_INVENTORY", "inventories/lab.py"),
                     help="pyinfra inventory whose group data holds the expected state "
                          "(default: inventories/lab.py)")


@pytest.fixture(scope="session")
def inventory_data(request) -> dict[str, dict]:
    inventory = request.config.getoption("--inventory")
    pyinfra = Path(sys.executable).with_name("pyinfra")
    proc = subprocess.run([str(pyinfra), inventory, "debug-inventory", "--json"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        pytest.exit(f"cannot read inventory {inventory}: {proc.stderr.strip()[-500:]}", returncode=2)
    return {h["name"]: h for h in json.loads(proc.stdout)}


@pytest.fixture(scope="module")
def host_name(host) -> str:
    return host.backend.get_hostname()


@pytest.fixture(scope="module")
def host_data(host_name, inventory_data, request) -> dict:
    if host_name not in inventory_data:
        pytest.fail(f"host {host_name} is not in inventory {request.config.getoption('--inventory')} "
                    f"(it has: {', '.join(sorted(inventory_data))}); pass the right --inventory")
    return inventory_data[host_name]["data"]


@pytest.fixture(scope="module")
def settings(host_name, host_data) -> Settings:
    try:
        return validate(host_name, host_data)
    except SettingsError as exc:
        pytest.fail(str(exc))


def run_remote(host, script: str, *args: str):
    """Run verify/remote/<script>.py on the host with args, in one round trip; return its JSON."""
    source = (Path(__file__).parent / "remote" / f"{script}.py").read_text()
    return json.loads(host.check_output("python3 -c %s" + " %s" * len(args), source, *args))


def read_files(host, *paths: str) -> dict[str, str | None]:
    """Contents of several files on the host in one round trip (None for a missing file)."""
    return run_remote(host, "read_files", *paths)


def expect(host_name: str, setting: str, expected, actual) -> None:
    """Assert with a message that names host, setting, expected and actual."""
    assert actual == expected, f"{host_name}: {setting}: expected {expected!r}, actual {actual!r}"


@pytest.fixture(scope="module")
def is_container(host) -> bool:
    """A container host shares the kernel of the machine it runs on: kernel-level settings
    (command line, THP, module loading, most sysctls) are not its own, and the checks of them
    report a skip with that reason there, never a pass."""
    out = host.run("systemd-detect-virt --container").stdout.strip()
    return out not in ("", "none")


CONTAINER_SKIP = "container host: shares the machine's kernel, so {what} is the VM/bare-metal host's to prove"
