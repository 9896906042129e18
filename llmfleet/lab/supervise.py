"""Keeps a lab host running across reboots, as a server's firmware does.

    python -m llmfleet.lab.supervise container -- systemd-nspawn ...
    python -m llmfleet.lab.supervise vm --disk D --kernel K --initrd I --append A -- qemu-system-x86_64 ...

- container: systemd-nspawn exits with status 133 when the container reboots; start it again.
  With --cgroup NAME, the supervisor first moves itself into a cgroup of that name, so that each
  container's systemd has a tree of its own (llmfleet/lab/cgroup.py says why), and before each
  new boot it removes what the ended boot left there.
- vm: qemu runs with -no-reboot, so a guest reboot ends qemu; start it again with the kernel
  command line that the guest's own /boot/grub/grub.cfg now names (read from the disk image),
  so a deploy that changes grub's configuration and reboots gets what a real server would get.

SIGTERM (from `lab down`) is passed on to the host process and ends supervision.

The emulated VM runs at a higher CPU priority than the rest of the machine (VM_NICE): a real
server's CPUs are its own, but qemu's emulation shares this machine's cores with the container
hosts, their vLLM servers and pyinfra, and with the kernel's autogroups each of those sessions got
an equal share, so the VM, alone on the critical path of every deploy it is in, ran at a fraction
of a core whenever the containers were busy.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import time

from llmfleet.lab import cgroup

NSPAWN_REBOOT_STATUS = 133  # systemd-nspawn(1): the container asked for a reboot
# The VM's nice value: a CPU weight of 9548 against 1024 for nice 0 (the kernel's
# sched_prio_to_weight table), so a busy VM gets a core while the others share the rest. It is
# set both on the process (inherited by qemu and its vCPU threads) and on its session's autogroup
# (sched(7): with autogroups on, as on Debian's kernels, only the group's nice counts between
# sessions).
VM_NICE = -10

_stopping = False
_child: subprocess.Popen | None = None


def _on_term(signum, frame):
    global _stopping
    _stopping = True
    if _child is not None and _child.poll() is None:
        _child.send_signal(signum)


def grub_cmdline(disk: str) -> str | None:
    """Arguments of the first `linux` line of the disk's /boot/grub/grub.cfg (None: no grub.cfg)."""
    proc = subprocess.run(["debugfs", "-R", "cat /boot/grub/grub.cfg", disk], capture_output=True, text=True)
    for line in proc.stdout.splitlines():
        m = re.match(r"\s*linux\s+(\S+)\s*(.*)$", line)
        if m:
            return m.group(2).strip()
    return None


def prioritise(nice: int) -> list[str]:
    """This process (and what it starts) at `nice`, and its session's autogroup too; returns what
    could not be set (no autogroups in this kernel, or no privilege), which only makes the VM slower."""
    missed = []
    try:
        os.setpriority(os.PRIO_PROCESS, 0, nice)
    except OSError as exc:
        missed.append(f"nice {nice}: {exc.strerror}")
    try:
        with open("/proc/self/autogroup", "w") as f:
            f.write(str(nice))
    except OSError as exc:
        missed.append(f"autogroup nice {nice}: {exc.strerror}")
    for line in missed:
        print(f"[supervise] could not set {line}", flush=True)
    return missed


def main(argv: list[str]) -> int:
    if "--" not in argv:
        print("usage: supervise {container|vm} [options] -- COMMAND...", file=sys.stderr)
        return 2
    split = argv.index("--")
    ap = argparse.ArgumentParser()
    ap.add_argument("kind", choices=["container", "vm"])
    ap.add_argument("--disk")
    ap.add_argument("--append", default="")
    ap.add_argument("--cgroup")
    opts = ap.parse_args(argv[:split])
    command = argv[split + 1:]
    signal.signal(signal.SIGTERM, _on_term)
    signal.signal(signal.SIGINT, _on_term)
    if opts.kind == "vm":
        prioritise(VM_NICE)
    if opts.cgroup:
        for line in cgroup.enter(opts.cgroup):
            print(f"[supervise] could not enter cgroup {line}", flush=True)
    global _child
    while True:
        args = list(command)
        if opts.kind == "vm":
            append = grub_cmdline(opts.disk) or opts.append
            args += ["-append", append]
            print(f"[supervise] booting with: {append}", flush=True)
        _child = subprocess.Popen(args)
        status = _child.wait()
        if _stopping:
            return 0
        rebooted = status == NSPAWN_REBOOT_STATUS if opts.kind == "container" else status == 0
        if not rebooted:
            print(f"[supervise] host process exited with {status}; not restarting", flush=True)
            return status
        print("[supervise] host rebooted; starting it again", flush=True)
        if opts.cgroup:
            for line in cgroup.remove_children(opts.cgroup):
                print(f"[supervise] left from the last boot: cgroup {line}", flush=True)
        time.sleep(0.5)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
