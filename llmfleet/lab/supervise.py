"""Keeps a lab host running across reboots, as a server's firmware does.

    python -m llmfleet.lab.supervise container -- systemd-nspawn ...
    python -m llmfleet.lab.supervise vm --disk D --kernel K --initrd I --append A -- qemu-system-x86_64 ...

- container: systemd-nspawn exits with status 133 when the container reboots; start it again.
- vm: qemu runs with -no-reboot, so a guest reboot ends qemu; start it again with the kernel
  command line that the guest's own /boot/grub/grub.cfg now names (read from the disk image),
  so a deploy that changes grub's configuration and reboots gets what a real server would get.

SIGTERM (from `lab down`) is passed on to the host process and ends supervision.
"""

from __future__ import annotations

import argparse
import re
import signal
import subprocess
import sys
import time

NSPAWN_REBOOT_STATUS = 133  # systemd-nspawn(1): the container asked for a reboot

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


def main(argv: list[str]) -> int:
    if "--" not in argv:
        print("usage: supervise {container|vm} [options] -- COMMAND...", file=sys.stderr)
        return 2
    split = argv.index("--")
    ap = argparse.ArgumentParser()
    ap.add_argument("kind", choices=["container", "vm"])
    ap.add_argument("--disk")
    ap.add_argument("--append", default="")
    opts = ap.parse_args(argv[:split])
    command = argv[split + 1:]
    signal.signal(signal.SIGTERM, _on_term)
    signal.signal(signal.SIGINT, _on_term)
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
        time.sleep(0.5)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
