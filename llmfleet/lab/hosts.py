"""Lab hosts: containers (systemd-nspawn, systemd as PID 1, own network namespace) and VMs (qemu,
own kernel, on a tap device). Both are real Linux systems with systemd and sshd, reached over SSH
with a lab key and checked host keys.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

from llmfleet.errors import LabError
from llmfleet.lab import cgroup, net, sh
from llmfleet.lab.config import (
    CONTAINER_BOOT_TIMEOUT_S,
    LAB_UID,
    LAB_USER,
    PREFIX,
    QEMU_ACCEL,
    VM_BOOT_TIMEOUT_S,
    VM_CPUS,
    VM_DISK_SIZE,
    VM_MEMORY_MB,
    LabNet,
    LabPaths,
)
from llmfleet.lab.images import Image
from llmfleet.lab.state import Host

# Hosts run under a supervisor that starts them again when they reboot (llmfleet/lab/supervise.py).
SUPERVISE = [sys.executable, "-m", "llmfleet.lab.supervise"]
# The VM's kernel command line until its own grub.cfg names one (qemu's -kernel boot takes it from
# -append: root on the virtio disk, the console on the serial port).
# tsc=reliable: with two emulated CPUs the guest kernel marks the TSC unstable ("TSCs
# unsynchronized") and falls back to the HPET, whose every read is emulated; with the TSC it
# reads the time in user space. Measured on the lab VM: `sudo -n true` 480-600 ms
# with the HPET, 330-470 ms with the TSC; /usr/bin/true 135-145 ms, 95-106 ms.
VM_DEFAULT_APPEND = "root=/dev/vda rw console=ttyS0 edd=off tsc=reliable"


def host_dir(paths: LabPaths, name: str) -> Path:
    return paths.hosts_dir / name


def _console(paths: LabPaths, name: str) -> Path:
    return host_dir(paths, name) / "console.log"


def _mount_overlay(lower: Path, d: Path) -> Path:
    for sub in ("upper", "work", "root"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    root = d / "root"
    sh.run(["mount", "-t", "overlay", "overlay", "-o",
            f"lowerdir={lower},upperdir={d / 'upper'},workdir={d / 'work'}", str(root)])
    return root


def is_mounted(path: Path) -> bool:
    target = str(path.resolve()) if path.exists() else str(path)
    for line in Path("/proc/self/mounts").read_text().splitlines():
        if line.split()[1] == target:
            return True
    return False


def unmount(path: Path) -> None:
    if is_mounted(path):
        if not sh.ok(["umount", str(path)]):
            sh.run(["umount", "-l", str(path)], check=False)


def _personalise(root: Path, name: str, paths: LabPaths) -> str:
    """Write the host's name, its own SSH host key and the lab's login key; return the host key."""
    (root / "etc/hostname").write_text(name + "\n")
    hosts = root / "etc/hosts"
    hosts.write_text(f"127.0.0.1 localhost\n127.0.1.1 {name}\n::1 localhost ip6-localhost ip6-loopback\n")
    key = root / "etc/ssh/ssh_host_ed25519_key"
    for old in (key, key.with_suffix(".pub")):
        old.unlink(missing_ok=True)
    sh.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"root@{name}", "-f", str(key)])
    ssh_dir = root / "home" / LAB_USER / ".ssh"
    ssh_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    auth = ssh_dir / "authorized_keys"
    auth.write_text(paths.client_key.with_suffix(".pub").read_text())
    auth.chmod(0o600)
    for p in (ssh_dir, auth):
        os.chown(p, LAB_UID, LAB_UID)
    return " ".join(key.with_suffix(".pub").read_text().split()[:2])


def start_container(index: int, name: str, address: str, image: Image, paths: LabPaths,
                    lnet: LabNet) -> tuple[Host, str]:
    d = host_dir(paths, name)
    remove_host_files(d)
    d.mkdir(parents=True)
    netns, veth = f"{PREFIX}-{name}", f"{PREFIX}-c{index}"
    net.create_container_net(netns, veth, address, lnet)
    root = _mount_overlay(image.rootfs, d)
    host_key = _personalise(root, name, paths)
    args = [*SUPERVISE, "container", "--cgroup", container_cgroup(name), "--",
            "systemd-nspawn", "--boot", "--register=no", "--keep-unit", f"--machine={name}",
            "-D", str(root), f"--network-namespace-path=/run/netns/{netns}", "--console=read-only"]
    proc = sh.spawn(args, _console(paths, name), marker=f"--machine={name} ", cwd=d)
    host = Host(name=name, kind="container", address=address, image=image.path.name, netns=netns,
                link=veth, root=str(root), proc=proc)
    return host, host_key


def container_cgroup(name: str) -> str:
    """The container's own cgroup (llmfleet/lab/cgroup.py): named by the lab's prefix and the host,
    so that two labs on one machine (the demo's and the tests') do not share one either."""
    return f"{PREFIX}-{name}"


def start_vm(index: int, name: str, address: str, image: Image, paths: LabPaths,
             lnet: LabNet) -> tuple[Host, str]:
    d = host_dir(paths, name)
    remove_host_files(d)
    d.mkdir(parents=True)
    tap = f"{PREFIX}-vm{index}"
    mac = f"52:54:00:77:01:{index:02x}"
    root = _mount_overlay(image.rootfs, d)
    try:
        host_key = _personalise(root, name, paths)
        (root / "etc/systemd/network/10-lab.network").write_text(
            "# llmfleet lab: a static address on the lab subnet and no gateway\n"
            f"[Match]\nMACAddress={mac}\n\n[Network]\nAddress={address}/{lnet.subnet.prefixlen}\n")
        sh.run(["mke2fs", "-q", "-t", "ext4", "-d", str(root), str(d / "disk.img"), VM_DISK_SIZE])
    finally:
        unmount(root)
    shutil.rmtree(d / "upper", ignore_errors=True)
    shutil.rmtree(d / "work", ignore_errors=True)
    net.create_tap(tap)
    # The supervisor adds -append: grub's command line from the disk once the guest has one.
    args = [*SUPERVISE, "vm", "--disk", str(d / "disk.img"), "--append", VM_DEFAULT_APPEND, "--",
            "qemu-system-x86_64", "-name", name, "-no-reboot", *QEMU_ACCEL, "-m", str(VM_MEMORY_MB),
            "-smp", str(VM_CPUS), "-kernel", str(image.kernel), "-initrd", str(image.initrd),
            "-drive", f"file={d / 'disk.img'},format=raw,if=virtio",
            "-netdev", f"tap,id=n0,ifname={tap},script=no,downscript=no",
            "-device", f"virtio-net-pci,netdev=n0,mac={mac},romfile=",
            "-serial", f"file:{_console(paths, name)}", "-display", "none", "-monitor", "none"]
    proc = sh.spawn(args, d / "qemu.log", marker=f"-name {name} ", cwd=d)
    host = Host(name=name, kind="vm", address=address, image=image.path.name, link=tap, proc=proc)
    return host, host_key


def ssh_args(paths: LabPaths, name: str, *extra: str, connect_timeout: int = 3) -> list[str]:
    """ssh to a lab host. Readiness polls use a short connect timeout; a user's command a longer one
    (the emulated VM can take several seconds for the banner while the machine is busy)."""
    return ["ssh", "-F", str(paths.ssh_config), "-o", f"ConnectTimeout={connect_timeout}", *extra, name]


def wait_for_ssh(hosts: list[Host], paths: LabPaths) -> None:
    """Wait until every host accepts the lab key over SSH (checked host key) and systemd is up."""
    pending = {h.name: h for h in hosts}
    started = time.monotonic()
    while pending:
        for name, h in list(pending.items()):
            timeout = VM_BOOT_TIMEOUT_S if h.kind == "vm" else CONTAINER_BOOT_TIMEOUT_S
            if h.proc is None or not h.proc.alive():
                raise LabError(f"lab host {name} stopped while booting; its console says:\n  "
                               + console_tail(paths, name))
            probe = sh.run(ssh_args(paths, name) + ["systemctl is-system-running --wait >/dev/null; true"],
                           check=False, timeout=120)
            if probe.returncode == 0:
                del pending[name]
            elif time.monotonic() - started > timeout:
                raise LabError(f"lab host {name} ({h.address}) did not answer SSH within {timeout}s "
                               f"({probe.stderr.strip()[-200:]}); its console says:\n  "
                               + console_tail(paths, name))
        if pending:
            time.sleep(1)


def console_tail(paths: LabPaths, name: str, lines: int = 10) -> str:
    log = _console(paths, name)
    if not log.exists():
        return "(no console log)"
    return "\n  ".join(log.read_text(errors="replace").splitlines()[-lines:])


def stop_host(h: Host, paths: LabPaths) -> None:
    """Stop the host's process and remove its namespace, link, mount and files."""
    if h.proc is not None:
        # nspawn turns SIGTERM into a clean shutdown of the container's systemd; a lab VM is
        # disposable, so qemu is simply ended.
        h.proc.stop(grace_s=15 if h.kind == "container" else 2)
    # a host process whose supervisor was killed lives on: find it by its folder
    sh.kill_strays(host_dir(paths, h.name))
    if h.kind == "container":
        for line in cgroup.remove(container_cgroup(h.name)):
            print(f"lab: cgroup {line} was left", file=sys.stderr)
    if h.root:
        unmount(Path(h.root))
    if h.netns:
        net.delete_netns(h.netns)
    net.delete_link(h.link)
    remove_host_files(host_dir(paths, h.name))


def remove_host_files(d: Path) -> None:
    if d.exists():
        unmount(d / "root")
        if is_mounted(d / "root"):
            raise LabError(f"{d / 'root'} is still mounted; unmount it by hand (umount -l) and retry")
        shutil.rmtree(d)
