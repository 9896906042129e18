"""Shared fixtures of the verify suite: `pytest verify/ --hosts=... [--inventory inventories/X.py]`.

Expected values come from the same group data the deploy used: the inventory's resolved data
(llmfleet/inventory.py: `pyinfra INV debug-inventory --json`, read once per run), validated by
llmfleet's settings schema.
Every check gathers a host's state in one remote command and asserts on it, and every failure
names the host, the setting, the expected and the actual value (the helpers: verify/helpers.py).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from llmfleet.errors import InventoryError
from llmfleet.inventory import read as read_inventory
from llmfleet.settings import Settings, SettingsError, validate
from verify.helpers import run_remote
from verify.prefetch import AHEAD as PREFETCH_AHEAD
from verify.prefetch import Prefetch

ROOT = Path(__file__).resolve().parent.parent


_PREFETCH = Prefetch()  # this run's batched commands (verify/prefetch.py)
_CONTAINER: dict[str, bool] = {}  # host -> whether it is a container host
_SETTINGS: dict[str, Settings] = {}  # host -> its validated settings (frozen), once per host and run


def pytest_collection_finish(session):
    _PREFETCH.select([item.nodeid for item in session.items])
    hosts: dict[int, object] = {}  # testinfra's hosts, in the order their checks run
    for item in session.items:
        found = getattr(item, "callspec", None) and item.callspec.params.get("_testinfra_host")
        if found is not None:
            hosts.setdefault(id(found), found)
    _PREFETCH.plan([h.backend for h in hosts.values()], session.config.getoption("--prefetch-ahead"))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _PREFETCH.acceptance = item.get_closest_marker("acceptance") is not None
    yield
    _PREFETCH.acceptance = False


def pytest_sessionfinish(session):
    _PREFETCH.finish()


def pytest_terminal_summary(terminalreporter):
    line = _PREFETCH.summary()
    if line:
        terminalreporter.write_line(line)


@pytest.fixture(scope="module")
def host(_testinfra_host):
    """testinfra's host, its commands answered from one batched round trip where verify/prefetch.py's
    rules allow."""
    _PREFETCH.wrap(_testinfra_host.backend)
    return _testinfra_host


def pytest_addoption(parser):
    parser.addoption("--inventory", default=os.environ.get("LLMFLEET_INVENTORY", "inventories/lab.py"),
                     help="pyinfra inventory whose group data holds the expected state "
                          "(default: inventories/lab.py)")
    parser.addoption("--prefetch-ahead", type=int, default=PREFETCH_AHEAD, metavar="N",
                     help="hosts whose batched commands start while the checks of the hosts before them "
                          f"run, at most N ahead of their own checks (default {PREFETCH_AHEAD}; 0: each "
                          "host's batch starts at its first check; verify/prefetch.py)")
    parser.addoption("--settings-file", metavar="PATH",
                     help="a host checking itself (--hosts=local://): its name, inventory and settings as the deploy "
                          "wrote them (llmfleet/self_audit.py: /etc/llmfleet/self-audit/settings.json), instead of "
                          "--inventory")
    parser.addoption("--data", action="append", default=[], metavar="KEY=VALUE",
                     help="override a setting for every host, as pyinfra's --data does (repeatable), "
                          "e.g. --data gpu_profile=v100_sxm2_32gb_x8")


@pytest.fixture(scope="session")
def self_audit_host(request) -> dict | None:
    """With --settings-file: {"host", "inventory", "data"} of the host checking itself; else None."""
    path = request.config.getoption("--settings-file")
    if not path:
        return None
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        pytest.exit(f"--settings-file {path}: cannot be read ({exc})", returncode=2)


@pytest.fixture(scope="session")
def inventory_data(request, self_audit_host) -> dict[str, dict]:
    if self_audit_host is not None:
        return {self_audit_host["host"]: {"name": self_audit_host["host"], "groups": self_audit_host.get("groups", []),
                                          "data": self_audit_host["data"]}}
    try:
        found = read_inventory(request.config.getoption("--inventory"), request.config.getoption("--data"))
    except InventoryError as exc:
        pytest.exit(str(exc), returncode=2)
    return {h["name"]: h for h in found}


@pytest.fixture(scope="module")
def host_name(host, self_audit_host) -> str:
    # testinfra's local backend is pyinfra's @local host, or the host checking itself (its inventory name)
    if host.backend.NAME == "local":
        return self_audit_host["host"] if self_audit_host is not None else "@local"
    return host.backend.get_hostname()


@pytest.fixture(scope="module")
def host_data(host_name, inventory_data, request) -> dict:
    if host_name not in inventory_data:
        pytest.fail(f"host {host_name} is not in inventory {request.config.getoption('--inventory')} "
                    f"(it has: {', '.join(sorted(inventory_data))}); pass the right --inventory")
    return inventory_data[host_name]["data"]


@pytest.fixture(scope="module")
def host_groups(host_name, inventory_data) -> list[str]:
    """The host's inventory groups (a host checking itself: as the deploy wrote them)."""
    return list(inventory_data.get(host_name, {}).get("groups") or [])


@pytest.fixture(scope="module")
def settings(host_name, host_data, self_audit_host) -> Settings:
    # validated once per host and run, not once per module (21 modules: 10 ms of the control
    # machine's CPU a host); a host whose data is refused fails each module's checks, as before
    if host_name not in _SETTINGS and self_audit_host is not None:
        # the deploy validated them, with the checks across settings that need the control machine (the
        # API key file there): the schema's own check is what is left
        _SETTINGS[host_name] = Settings.model_validate(host_data)
    if host_name not in _SETTINGS:
        try:
            _SETTINGS[host_name] = validate(host_name, host_data)
        except SettingsError as exc:
            pytest.fail(str(exc))
    return _SETTINGS[host_name]


@pytest.fixture(scope="module")
def is_container(host) -> bool:
    """A container host shares the kernel of the machine it runs on: kernel-level settings
    (command line, THP, module loading, most sysctls) are not its own, and the checks of them
    report a skip with that reason there, never a pass."""
    name = host.backend.get_hostname()
    if name not in _CONTAINER:  # asked once per host and run, not once per module
        _CONTAINER[name] = host.run("systemd-detect-virt --container").stdout.strip() not in ("", "none")
    return _CONTAINER[name]


@pytest.fixture(scope="module")
def gpu_profile(settings):
    """The host's GPU profile; a host whose data says it has no GPU skips the GPU checks (and
    test_gpu_health.py::test_no_unexpected_gpu proves it has none)."""
    profile = settings.profile
    if profile is None:
        pytest.skip("gpu_profile is None in this host's data: a host without GPUs")
    return profile


@pytest.fixture(scope="module")
def gpu_state(host, host_name, settings, gpu_profile) -> dict:
    """The host's GPU state (NVML, driver files, kernel log, PyTorch) in one round trip, read with
    the vLLM environment's python (`vllm_venv`: it has nvidia-ml-py and torch); the kernel log
    needs root (`?sudo=true` in --hosts, or root's login). Read-only."""
    python = f"{settings.vllm_venv}/bin/python3"
    if host.run("test -x %s", python).rc != 0:
        pytest.fail(f"{host_name}: vllm_venv: expected a python at {python}, actual: none "
                    "(deploy the vLLM environment, or point vllm_venv at one with nvidia-ml-py and torch)")
    state = run_remote(host, "gpu_state", python=python)
    if "error" in state["nvml"]:
        pytest.fail(f"{host_name}: NVML: expected to answer, actual: {state['nvml']['error']}")
    return state
