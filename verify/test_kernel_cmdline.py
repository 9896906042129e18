"""kernel_cmdline: the running kernel command line carries the parameters group data lists."""

import pytest

from verify.helpers import CONTAINER_SKIP, cmdline_tokens, expect, read_files

GRUB_DROPIN = "/etc/default/grub.d/90-llmfleet.cfg"


def test_running_cmdline_has_parameters(host, host_name, settings, is_container):
    if is_container:
        pytest.skip(CONTAINER_SKIP.format(what="the kernel command line"))
    files = read_files(host, "/proc/cmdline", GRUB_DROPIN)
    running = (files["/proc/cmdline"] or "").split()
    want = cmdline_tokens(settings.kernel_cmdline)
    expect(host_name, "kernel_cmdline (running, /proc/cmdline)", want, [t for t in want if t in running])
    dropin = next((ln for ln in (files[GRUB_DROPIN] or "").splitlines() if ln.startswith("GRUB_CMDLINE_LINUX=")), "")
    deployed = dropin.split("=", 1)[1].strip('"').replace("$GRUB_CMDLINE_LINUX", "").split() if dropin else []
    expect(host_name, f"kernel_cmdline (next boot, {GRUB_DROPIN})", want, deployed)
