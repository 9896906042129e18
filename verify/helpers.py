"""What the verify checks share: running a host script in one round trip, reading files, and
asserting with a message that names host, setting, expected and actual.

The expected values are verify's own (from the settings); only the host-side readers
(llmfleet/remote/) are shared with the deploy, so both read a host the same way.
"""

from __future__ import annotations

import json

from llmfleet.audit.model import show, show_key  # how values read in a report (no Python reprs)
from llmfleet.remote import python_script

CONTAINER_SKIP = "container host: shares the machine's kernel, so {what} is the VM/bare-metal host's to prove"


def run_remote(host, script: str, *args: str, python: str = "python3"):
    """Run llmfleet/remote/<script>.py on the host with args, in one round trip; return its JSON."""
    return json.loads(host.check_output(python_script(script, *args, python=python)))


def read_files(host, *paths: str) -> dict[str, str | None]:
    """Contents of several files on the host in one round trip (None for a missing file)."""
    return run_remote(host, "read_files", *paths)


def expect(host_name: str, setting: str, expected, actual) -> None:
    """Assert with a message that names host, setting, expected and actual, as a person reads them
    (no Python reprs); for dicts, one line per key that differs:
    `lab-c1: limits (/etc/...): vllm soft nofile: expected 65536, actual not set`."""
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


def expect_each(host_name: str, setting: str, expected, actual_by_gpu: dict[int, object]) -> None:
    """Assert one value on every GPU; the message lists each GPU that differs, with expected and actual
    as a person reads them (no Python reprs)."""
    wrong = [f"{host_name} GPU {i}: {setting}: expected {show(expected)}, actual {show(actual)}"
             for i, actual in sorted(actual_by_gpu.items()) if actual != expected]
    assert not wrong, "\n".join(wrong)


def cmdline_tokens(params: dict) -> list[str]:
    """kernel_cmdline's {name: value or None} as kernel command line tokens, sorted: name=value, or name."""
    return [name if value is None else f"{name}={value}" for name, value in sorted(params.items())]


def dpkg_states(output: str, names: list[str]) -> dict[str, str]:
    """Each package's "<selection> <status>" from `dpkg-query -W -f '${Package} ${db:Status-Want}
    ${db:Status-Status}\\n'` output ("hold installed": installed and held), "not installed" for a
    package dpkg does not list."""
    listed = {}
    for line in output.splitlines():
        parts = line.split()
        if len(parts) == 3:
            listed[parts[0]] = f"{parts[1]} {parts[2]}"
    return {n: listed.get(n, "not installed") for n in names}


# MODULE_LICENSE of NVIDIA's open kernel modules (github.com/NVIDIA/open-gpu-kernel-modules,
# kernel-open/nvidia/nv.c); the proprietary ones carry "NVIDIA".
OPEN_MODULE_LICENSE = "Dual MIT/GPL"


def module_flavour(license_: str | None) -> str | None:
    """The flavour of an NVIDIA kernel module file from its license (`modinfo -F license nvidia`):
    "open" or "proprietary", None when there is no module file (as the loaded module's banner says
    "Open Kernel Module" or not)."""
    if not license_:
        return None
    return "open" if license_.strip() == OPEN_MODULE_LICENSE else "proprietary"
