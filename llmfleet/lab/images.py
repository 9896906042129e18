"""Host images for the lab: Debian root file systems built with mmdebstrap, cached by recipe.

An image is rebuilt only when its recipe changes: the directory name carries a hash of the
recipe (suite, packages, hooks and the machine's apt sources), so a changed recipe builds a
new image and an unchanged one is reused as it is.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from llmfleet.errors import LabError
from llmfleet.lab import sh
from llmfleet.lab.config import LAB_UID, LAB_USER, LabPaths

# A minbase bookworm (mmdebstrap --variant=minbase) with systemd, sshd and python3 boots under
# `systemd-nspawn --boot`; a kernel package is added only for the VM image (it makes it ~740 MB).
CONTAINER_PACKAGES = [
    "systemd", "systemd-sysv", "dbus", "openssh-server", "python3", "sudo",
    "iproute2", "udev", "kmod", "procps",
]
# grub2-common brings update-grub: the VM's kernel command line is managed through grub as on a
# real server, and the lab boots the VM with what the VM's grub.cfg says (llmfleet/lab/supervise.py).
VM_EXTRA_PACKAGES = ["linux-image-amd64", "e2fsprogs", "grub2-common"]
# What the deploy would otherwise install on the VM under software emulation, where apt is slow:
# in a first deploy of the test lab base_packages took 231 s and chrony 64 s on the VM,
# 23 s and 2 s on the containers, and every host waits for the VM at each operation. The VM is in
# the lab for what needs a kernel of its own (grub and the kernel command line, reboots, sysctls,
# modules, THP); installing packages is proven on the containers, which start from minbase
# without these (group_data/all.py: base_packages). On the VM the deploy finds them installed.
# The telemetry components' packages (node_exporter, log_forwarding) likewise, and model_storage's fio
# (with its libraries, about 30 packages on a minbase: 7 s of dpkg on a container).
VM_PREINSTALLED = ["numactl", "pciutils", "python3-venv", "ca-certificates", "chrony",
                   "prometheus-node-exporter", "rsyslog", "fio"]

_SSHD_DROPIN = (
    "# llmfleet lab: key-only logins\n"
    "PasswordAuthentication no\n"
    "KbdInteractiveAuthentication no\n"
    "PermitRootLogin prohibit-password\n"
    "HostKey /etc/ssh/ssh_host_ed25519_key\n"
)

# Hooks run by mmdebstrap with "$1" = the new root. Part of the recipe: changing one rebuilds.
COMMON_HOOKS = [
    f'chroot "$1" useradd --create-home --uid {LAB_UID} --shell /bin/bash {LAB_USER}',
    f'echo "{LAB_USER} ALL=(ALL) NOPASSWD:ALL" > "$1/etc/sudoers.d/{LAB_USER}"',
    f'chmod 0440 "$1/etc/sudoers.d/{LAB_USER}"',
    'rm -f "$1"/etc/ssh/ssh_host_*',
    f"printf '{_SSHD_DROPIN}' > \"$1/etc/ssh/sshd_config.d/llmfleet-lab.conf\"",
    ': > "$1/etc/machine-id"',
    'echo lab > "$1/etc/hostname"',
]
VM_HOOKS = [
    'chroot "$1" systemctl enable systemd-networkd',
    # the serial console the lab logs, kept in whatever command line grub generates
    'mkdir -p "$1/etc/default/grub.d" "$1/boot/grub"',
    # tsc=reliable: the time from the TSC, not the emulated HPET (llmfleet/lab/hosts.py says why)
    "printf 'GRUB_CMDLINE_LINUX=\"console=ttyS0 edd=off tsc=reliable\"\\nGRUB_CMDLINE_LINUX_DEFAULT=\"\"\\n' "
    '> "$1/etc/default/grub.d/00-lab.cfg"',
    "echo '/dev/vda / ext4 defaults 0 1' > \"$1/etc/fstab\"",
    # Under software emulation an initramfs with every module takes minutes to rebuild; the VM
    # needs only what its own (virtio) devices use.
    "echo MODULES=dep > \"$1/etc/initramfs-tools/conf.d/90-lab.conf\"",
    # The apt lists mmdebstrap read, kept (--skip=cleanup/apt/lists) and stamped as pyinfra's
    # apt.update reads them (cache_time): like a server whose installer just ran apt-get update,
    # the VM's first deploy does not parse Debian's indexes again under emulation (3 to 4 min).
    'mkdir -p "$1/var/lib/apt/periodic" && touch "$1/var/lib/apt/periodic/update-success-stamp"',
]


def machine_apt_sources() -> tuple[str, str]:
    """The machine's own Debian suite and apt sources: the lab uses the registry the machine uses."""
    release = dict(
        line.split("=", 1) for line in Path("/etc/os-release").read_text().splitlines() if "=" in line
    )
    suite = release.get("VERSION_CODENAME", "").strip('"')
    if not suite:
        raise LabError("cannot tell this machine's Debian suite from /etc/os-release (VERSION_CODENAME)")
    candidates = sorted(Path("/etc/apt/sources.list.d").glob("*.sources"))
    candidates += [Path("/etc/apt/sources.list")]
    for path in candidates:
        if path.is_file() and any(
            line.strip() and not line.lstrip().startswith("#") for line in path.read_text().splitlines()
        ):
            return suite, str(path)
    raise LabError("this machine has no apt sources (/etc/apt/sources.list[.d]); the lab builds "
                   "its images from the same Debian registry the machine uses")


@dataclass(frozen=True)
class Recipe:
    kind: str  # "container" or "vm"
    suite: str
    sources_file: str
    sources: str
    packages: list[str] = field(default_factory=list)
    hooks: list[str] = field(default_factory=list)
    skip: list[str] = field(default_factory=list)  # mmdebstrap --skip=..., part of the recipe
    version: int = 1

    @property
    def digest(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:16]


def recipe(kind: str) -> Recipe:
    suite, sources_file = machine_apt_sources()
    packages = list(CONTAINER_PACKAGES)
    hooks = list(COMMON_HOOKS)
    if kind == "vm":
        packages += VM_EXTRA_PACKAGES + VM_PREINSTALLED
        hooks += VM_HOOKS
    # the VM keeps the apt lists mmdebstrap read (VM_HOOKS stamps them)
    skip = ["cleanup/apt/lists"] if kind == "vm" else []
    return Recipe(kind=kind, suite=suite, sources_file=sources_file,
                  sources=Path(sources_file).read_text(), packages=packages, hooks=hooks, skip=skip)


@dataclass(frozen=True)
class Image:
    kind: str
    path: Path

    @property
    def rootfs(self) -> Path:
        return self.path / "rootfs"

    @property
    def kernel(self) -> Path:
        return self.path / "vmlinuz"

    @property
    def initrd(self) -> Path:
        return self.path / "initrd.img"


def image_dir(paths: LabPaths, r: Recipe) -> Path:
    return paths.images_dir / f"{r.kind}-{r.digest}"


def ensure_image(paths: LabPaths, kind: str, log=print) -> tuple[Image, bool]:
    """Return the cached image for the current recipe, building it first if needed.

    Returns (image, built) where built says whether a build happened.
    """
    r = recipe(kind)
    final = image_dir(paths, r)
    if (final / "recipe.json").is_file():
        return Image(kind, final), False
    paths.images_dir.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(final.name + ".building")
    if tmp.exists():  # a build that was killed: start it again
        shutil.rmtree(tmp)
    tmp.mkdir()
    log(f"building {kind} image {final.name} (cached after this)...")
    started = time.monotonic()
    args = ["mmdebstrap", "--variant=minbase", "--include=" + ",".join(r.packages)]
    args += [f"--skip={step}" for step in r.skip]
    args += [f"--customize-hook={hook}" for hook in r.hooks]
    args += [r.suite, str(tmp / "rootfs"), r.sources_file]
    try:
        sh.run(args, timeout=1800)
        if kind == "vm":
            _extract_boot_files(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    (tmp / "recipe.json").write_text(json.dumps(asdict(r), indent=2, sort_keys=True))
    tmp.rename(final)
    log(f"built {kind} image in {time.monotonic() - started:.1f}s")
    return Image(kind, final), True


def _extract_boot_files(build_dir: Path) -> None:
    boot = build_dir / "rootfs" / "boot"
    kernels = sorted(boot.glob("vmlinuz-*"))
    initrds = sorted(boot.glob("initrd.img-*"))
    if not kernels or not initrds:
        raise LabError(f"the VM image has no kernel/initrd in {boot}: is linux-image-amd64 installed?")
    shutil.copy2(kernels[-1], build_dir / "vmlinuz")
    shutil.copy2(initrds[-1], build_dir / "initrd.img")
