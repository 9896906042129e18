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
    parser.addoption("--data", action="append", default=[], metavar="KEY=VALUE",
                     help="override a setting for every host, as pyinfra's --data does (repeatable), "
                          "e.g. --data gpu_profile=v100_sxm2_32gb_x8")


@pytest.fixture(scope="session")
def inventory_data(request) -> dict[str, dict]:
    inventory = request.config.getoption("--inventory")
    data = [arg for kv in request.config.getoption("--data") for arg in ("--data", kv)]
    proc = subprocess.run([sys.executable, "-m", "pyinfra", *data, inventory, "debug-inventory", "--json"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        pytest.exit(f"cannot read inventory {inventory}: {proc.stderr.strip()[-500:]}", returncode=2)
    return {h["name"]: h for h in json.loads(proc.stdout)}


@pytest.fixture(scope="module")
def host_name(host) -> str:
    # testinfra's local backend is pyinfra's @local host
    return "@local" if host.backend.NAME == "local" else host.backend.get_hostname()


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


def run_remote(host, script: str, *args: str, python: str = "python3"):
    """Run verify/remote/<script>.py on the host with args, in one round trip; return its JSON."""
    source = (Path(__file__).parent / "remote" / f"{script}.py").read_text()
    return json.loads(host.check_output("%s -c %s" + " %s" * len(args), python, source, *args))


def read_files(host, *paths: str) -> dict[str, str | None]:
    """Contents of several files on the host in one round trip (None for a missing file)."""
    return run_remote(host, "read_files", *paths)


def expect(host_name: str, setting: str, expected, actual) -> None:
    """Assert with a message that names host, setting, expected and actual, as a person reads them
    (no Python reprs); for dicts, one line per key that differs:
    `lab-c1: limits (/etc/...): vllm soft nofile: expected 65536, actual not set`."""
    from llmfleet.audit.model import show, show_key

    if actual == expected:
        return
    lines = []

    def differ(what: str, want, got) -> None:
        if isinstance(want, dict) and isinstance(got, dict):
            for k in [*want, *(k for k in got if k not in want)]:
                if want.get(k) != got.get(k):
                    differ(f"{what}: {show_key(k)}" if what else show_key(k), want.get(k), got.get(k))
        else:
            lines.append(f"{host_name}: {what}: expected {show(want)}, actual {show(got)}")

    differ(setting, expected, actual)
    raise AssertionError("\n".join(lines))


@pytest.fixture(scope="module")
def is_container(host) -> bool:
    """A container host shares the kernel of the machine it runs on: kernel-level settings
    (command line, THP, module loading, most sysctls) are not its own, and the checks of them
    report a skip with that reason there, never a pass."""
    out = host.run("systemd-detect-virt --container").stdout.strip()
    return out not in ("", "none")


CONTAINER_SKIP = "container host: shares the machine's kernel, so {what} is the VM/bare-metal host's to prove"


def expect_each(host_name: str, setting: str, expected, actual_by_gpu: dict[int, object]) -> None:
    """Assert one value on every GPU; the message lists each GPU that differs, with expected and actual
    as a person reads them (no Python reprs)."""
    from llmfleet.audit.model import show

    wrong = [f"{host_name} GPU {i}: {setting}: expected {show(expected)}, actual {show(actual)}"
             for i, actual in sorted(actual_by_gpu.items()) if actual != expected]
    assert not wrong, "\n".join(wrong)


@pytest.fixture(scope="module")
def gpu_profile(settings):
    """The host's GPU profile; a host whose data says it has no GPU skips the GPU checks (and
    test_gpu_health.py::test_no_unexpected_gpu proves it has none)."""
    from llmfleet.gpu import profile_of

    profile = profile_of(settings)
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
