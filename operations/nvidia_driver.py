"""nvidia_driver: the pinned NVIDIA driver from NVIDIA's CUDA repository, held, with nouveau
blacklisted and the DKMS module built for the running kernel (install, configure, activate).

The reboot that loads a new module is the reboot component's: `install()` returns the reasons
and deploy.py hands them to `reboot.reboot_if_needed`. On a host without an NVIDIA GPU nothing
is done, and the output says why.
"""

from __future__ import annotations

import shlex

from pyinfra import host, logger
from pyinfra.api import OperationValueError, StringCommand, deploy, operation
from pyinfra.facts.apt import noninteractive_apt
from pyinfra.operations import apt, files, server

from llmfleet import fabric_manager
from llmfleet.facts import NvidiaHost
from llmfleet.gpu_guardrails import driver_branch
from llmfleet.settings import Settings
from operations import apt_installed, managed_files

# CUDA repository folder per distribution (NVIDIA driver installation guide, r580: "Ubuntu",
# "Debian"; https://developer.download.nvidia.com/compute/cuda/repos/).
REPO_DISTROS = {
    ("ubuntu", "20.04"): "ubuntu2004",
    ("ubuntu", "22.04"): "ubuntu2204",
    ("ubuntu", "24.04"): "ubuntu2404",
    ("debian", "12"): "debian12",
}
# The compute-only driver (no X) per distribution family and kernel-module flavour, and the
# Debian version suffix of NVIDIA's packages there. Source: NVIDIA driver installation guide,
# r580, "Compute-only HPC node"; versions as in the CUDA repository's Packages index (an
# internal mirror carries the same; the lent H200's Ubuntu 24.04 has cuda-compat-13-0
# 580.95.05-0ubuntu1 from it). {branch} is the driver branch (580).
DRIVER_PACKAGES = {
    "ubuntu": {
        "proprietary": ["libnvidia-compute-{branch}", "nvidia-dkms-{branch}", "nvidia-utils-{branch}",
                        "nvidia-compute-utils-{branch}"],
        "open": ["libnvidia-compute-{branch}", "nvidia-dkms-{branch}-open", "nvidia-utils-{branch}",
                 "nvidia-compute-utils-{branch}"],
    },
    "debian": {
        "proprietary": ["nvidia-driver-cuda", "nvidia-kernel-dkms", "nvidia-persistenced"],
        "open": ["nvidia-driver-cuda", "nvidia-kernel-open-dkms", "nvidia-persistenced"],
    },
}
DEB_VERSION = {"ubuntu": "{version}-0ubuntu1", "debian": "{version}-1"}
REPO_KEY = "3bf863cc.pub"  # the CUDA repository signing key (ASCII-armoured), in each distribution folder
# pyinfra's apt.key dearmors the key (gpg, hence gnupg first) into /etc/apt/keyrings/ and leaves
# an existing keyring alone; apt.sources_file writes /etc/apt/sources.list.d/<name>.sources (deb822).
KEYRING = "/etc/apt/keyrings/llmfleet-nvidia-cuda.gpg"
SOURCES_NAME = "llmfleet-nvidia-cuda"
# What llmfleet wrote before it used apt.key and apt.sources_file: removed, because apt refuses a
# repository listed twice with two Signed-By keyrings ("Conflicting values set for option Signed-By").
OLD_REPOSITORY_FILES = ("/etc/apt/sources.list.d/llmfleet-nvidia-cuda.list",
                        "/usr/share/keyrings/llmfleet-nvidia-cuda.gpg",
                        "/usr/share/keyrings/llmfleet-nvidia-cuda.gpg.asc")
PREFERENCES = "/etc/apt/preferences.d/90-llmfleet-nvidia"
NOUVEAU = "/etc/modprobe.d/90-llmfleet-nouveau.conf"


def skipped(settings: Settings, component: str) -> bool:
    """True when the NVIDIA components do nothing on this host; the reason is printed for every
    run (not only with -v, as pyinfra's noop descriptions are)."""
    why = skip_reason(settings, component)
    if why:
        say(why)
    return why is not None


def say(why: str) -> None:
    """A component's reason for doing nothing (or less), printed on every run, not only with -v."""
    host.noop(why)
    host.log_styled(why, fg="yellow", log_func=logger.info)


def skip_reason(settings: Settings, component: str) -> str | None:
    """Why the NVIDIA components do nothing on this host (None: they run)."""
    facts = host.get_fact(NvidiaHost)
    profile = settings.profile
    if not facts["pci_gpus"]:
        why = f"{component}: skipped: no NVIDIA GPU on this host (no PCI display device of vendor 0x10de)"
        if profile is not None:
            why += (f", but gpu_profile {settings.gpu_profile!r} expects {profile.count} x {profile.model_name}: "
                    "check the hardware (lspci -d 10de:) or set gpu_profile = None; verify will fail")
        return why
    if profile is None:
        return (f"{component}: skipped: {len(facts['pci_gpus'])} NVIDIA GPU(s) found but gpu_profile is None: "
                f"set gpu_profile to one of {', '.join(sorted(settings.gpu_profiles))}")
    return None


def repo_distro(facts: dict, host_name: str) -> str:
    """The CUDA repository folder for the host's distribution (ubuntu2204, debian12, ...)."""
    key = (facts["os"], facts["os_version"])
    if key not in REPO_DISTROS:
        supported = ", ".join(f"{o} {v}" for o, v in REPO_DISTROS)
        raise OperationValueError(f"host {host_name}: nvidia_driver: {facts['os']} {facts['os_version']} is not a "
                                  f"distribution llmfleet installs the NVIDIA driver on (supported: {supported})")
    return REPO_DISTROS[key]


def driver_packages(os_id: str, flavour: str, version: str) -> dict[str, str]:
    """{package: exact Debian version} of the driver for a distribution family and flavour."""
    branch = driver_branch(version)
    deb_version = DEB_VERSION[os_id].format(version=version)
    return {name.format(branch=branch): deb_version for name in DRIVER_PACKAGES[os_id][flavour]}


@operation()
def repository(url: str):
    """
    NVIDIA's CUDA repository is an apt source: its signing key (pyinfra's apt.key) and a deb822
    source signed by that key (apt.sources_file); apt reads its index again when either changed.
    The files of the one-line source this replaces are removed first.

    + url: the repository folder for the host's distribution (.../ubuntu2204/x86_64)
    """
    commands: list = []
    for path in OLD_REPOSITORY_FILES:
        commands += files.file._inner(path=path, present=False)
    commands += apt.key._inner(src=f"{url}/{REPO_KEY}", dest=KEYRING)
    # a flat repository: the suite is the path "/", and there are no components
    commands += apt.sources_file._inner(filename=SOURCES_NAME, uris=[f"{url}/"], suites=["/"], signed_by=KEYRING)
    if not commands:
        host.noop(f"nvidia_driver: CUDA repository {url}/ configured, signed by {KEYRING}")
        return
    yield from commands
    yield from apt.update._inner()


@operation()
def installed(packages: dict[str, str], label: str, remove: list[str] | None = None):
    """
    The packages are installed at exactly these versions and held (apt-mark hold), so neither
    `apt upgrade` nor unattended-upgrades moves them; a wrong version is replaced (up or down). They
    move together, in one apt transaction: the driver and, on an NVSwitch board, Fabric Manager and
    NSCQ at the same version, never one without the others.

    + packages: {package: exact Debian version}
    + label: what the packages are, for the output
    + remove: installed packages these replace (another branch's names): removed in the same transaction
    """
    facts = host.get_fact(NvidiaHost)
    have, held = facts["packages"], set(facts["held"])
    wrong = {p: v for p, v in packages.items() if have.get(p) != v}
    gone = sorted(p for p in remove or [] if p in have)
    if wrong or gone:
        moving = sorted(p for p in [*packages, *gone] if p in held)
        if moving:
            yield StringCommand("apt-mark unhold " + " ".join(moving))
        # apt's `name-` removes a package in the same transaction that installs the others
        specs = " ".join([shlex.quote(f"{p}={v}") for p, v in sorted(packages.items())] + [f"{p}-" for p in gone])
        yield StringCommand(noninteractive_apt("install -q --no-install-recommends --allow-downgrades "
                                               f"--allow-change-held-packages {specs}"))
        yield StringCommand("apt-mark hold " + " ".join(sorted(packages)))
        return
    unheld = sorted(p for p in packages if p not in held)
    if unheld:
        yield StringCommand("apt-mark hold " + " ".join(unheld))
        return
    host.noop(f"{label}: {', '.join(f'{p}={v}' for p, v in sorted(packages.items()))} installed and held")


@operation()
def dkms_built(kernel: str):
    """
    The NVIDIA DKMS module is built and installed for the running kernel (headers installed first).

    + kernel: the running kernel release (uname -r)
    """
    facts = host.get_fact(NvidiaHost)
    if any(line.split(":")[-1].strip() == "installed" for line in facts["dkms"]):
        host.noop(f"nvidia_driver: DKMS module installed for kernel {kernel}")
        return
    yield StringCommand(noninteractive_apt("install -q " + shlex.quote(f"linux-headers-{kernel}")))
    yield StringCommand("dkms autoinstall -k " + shlex.quote(kernel))


@deploy("nvidia_driver")
def install(settings: Settings) -> list[str]:
    """Repository, pinned and held driver, nouveau off, DKMS for the running kernel.

    Returns why the host must reboot for the driver (empty: the loaded module is the installed one).
    """
    if skipped(settings, "nvidia_driver"):
        return []
    facts = host.get_fact(NvidiaHost)
    distro = repo_distro(facts, host.name)
    repo = f"{settings.nvidia_repo_url.rstrip('/')}/{distro}/x86_64"
    packages = driver_packages(facts["os"], settings.nvidia_driver_flavour, settings.nvidia_driver_version)
    # on an NVSwitch board, Fabric Manager and NSCQ at the driver's version, in the driver's transaction
    fm_packages, replaced = fabric_packages(settings, facts)

    # repository (configure): gnupg for apt.key's dearmor, then key, source and pin
    apt_installed("gnupg for the repository key", ["gnupg"], settings.apt_cache_valid_s, no_recommends=True)
    repository(name="CUDA repository", url=repo)
    # apt reads preferences at every install: a changed pin needs no index refresh
    managed_files.template("driver version pinned", "nvidia_driver", "90-llmfleet-nvidia.pref.j2", PREFERENCES,
                           version=settings.nvidia_driver_version)
    # nouveau must never claim the GPUs (and must not come back from the initramfs)
    nouveau = managed_files.template("nouveau blacklisted", "nvidia_driver", "90-llmfleet-nouveau.conf.j2", NOUVEAU)
    # install: the running kernel's headers first (the DKMS build in the driver's postinst needs them)
    apt.packages(name=f"kernel headers for {facts['kernel']}", packages=[f"linux-headers-{facts['kernel']}"],
                 no_recommends=True)
    what = f"NVIDIA driver {settings.nvidia_driver_version} ({settings.nvidia_driver_flavour})"
    transaction = installed(name=what + (" with Fabric Manager and NSCQ" if fm_packages else ""),
                            packages=packages | fm_packages, label="nvidia_driver", remove=replaced)
    # the driver's own packages decide the initramfs, DKMS and reboot; Fabric Manager alone (held at
    # another version) needs none of them, only its service restarted (operations/fabric_manager.py)
    driver_changes = transaction.will_change and moves(facts["packages"], packages)
    if nouveau.will_change or driver_changes:
        server.shell(name="initramfs regenerated (nouveau blacklist, NVIDIA modules)", commands=["update-initramfs -u"])
    if not driver_changes:
        dkms_built(name=f"DKMS module for kernel {facts['kernel']}", kernel=facts["kernel"])
    return reboot_reasons(settings, facts, driver_changes)


def moves(installed: dict[str, str], packages: dict[str, str]) -> bool:
    """Whether installing `packages` changes any of them (installed: package -> version on the host)."""
    return any(installed.get(p) != v for p, v in packages.items())


def fabric_packages(settings: Settings, facts: dict) -> tuple[dict[str, str], list[str]]:
    """Fabric Manager's packages at the driver's version where the profile has NVSwitches (empty
    otherwise), and the installed ones of another branch's name they replace. A profile that does not
    match the NVSwitches on the host's PCI bus stops the deploy here, before any change."""
    profile = settings.profile
    assert profile is not None and settings.gpu_profile is not None  # skipped() returned before otherwise
    problems = fabric_manager.host_problems(host.name, settings.gpu_profile, profile.nvswitches,
                                            len(facts["pci_nvswitches"]))
    if problems:
        raise OperationValueError("; ".join(problems))
    if not profile.fabric_manager:
        return {}, []
    wanted = fabric_manager.packages(settings.nvidia_driver_version)
    return wanted, fabric_manager.replaced(facts["packages"], wanted)


def reboot_reasons(settings: Settings, facts: dict, changing: bool) -> list[str]:
    """Why the running kernel module is not the driver this deploy leaves installed."""
    module = facts["module"]
    want = settings.nvidia_driver_version
    if changing:
        return [f"NVIDIA driver {want} ({settings.nvidia_driver_flavour}) installed: its kernel module loads at boot"]
    if module is None:
        return ["the NVIDIA kernel module is not loaded"]
    why = []
    if module["version"] != want:
        why.append(f"NVIDIA kernel module {module['version']} is loaded, {want} is installed")
    if module["flavour"] != settings.nvidia_driver_flavour:
        why.append(f"the {module['flavour']} NVIDIA kernel module is loaded, "
                   f"{settings.nvidia_driver_flavour} is installed")
    return why
