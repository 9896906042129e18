"""reboot: nothing left that a reboot would change. No package asked for one, the running kernel
command line carries the kernel_cmdline settings, and the loaded NVIDIA kernel module is the one
installed for the running kernel (the reasons operations/reboot.py reboots for)."""

import pytest

from verify.helpers import CONTAINER_SKIP, cmdline_tokens, expect, module_flavour, read_files, run_remote

REBOOT_REQUIRED = "/run/reboot-required"


def test_no_reboot_requested(host, host_name):
    files = read_files(host, REBOOT_REQUIRED, REBOOT_REQUIRED + ".pkgs")
    asked = None
    if files[REBOOT_REQUIRED] is not None:
        asked = "present, asked for by: " + (" ".join(sorted(set((files[REBOOT_REQUIRED + ".pkgs"] or "").split())))
                                             or "no package named")
    expect(host_name, f"{REBOOT_REQUIRED} (a package asked for a reboot)", None, asked)


def test_running_cmdline_needs_no_reboot(host, host_name, settings, is_container):
    if is_container:
        pytest.skip(CONTAINER_SKIP.format(what="the kernel command line"))
    running = (read_files(host, "/proc/cmdline")["/proc/cmdline"] or "").split()
    expect(host_name, "kernel_cmdline parameters a reboot would bring (missing from /proc/cmdline)", [],
           [t for t in cmdline_tokens(settings.kernel_cmdline) if t not in running])


def test_loaded_nvidia_module_is_the_installed_one(host, host_name, gpu_profile, is_container):
    if is_container:
        pytest.skip(CONTAINER_SKIP.format(what="the loaded kernel module"))
    modules = run_remote(host, "nvidia_driver_modules")
    loaded, installed = modules["loaded"], modules["installed"]
    assert installed, f"{host_name}: NVIDIA kernel module for the running kernel: expected installed " \
                      "(modinfo nvidia), actual: none (is the driver's DKMS module built?)"
    want = {"version": installed["version"], "flavour": module_flavour(installed["license"])}
    got = {"version": loaded["version"], "flavour": loaded["flavour"]} if loaded else None
    expect(host_name, "NVIDIA kernel module (loaded, as installed for the running kernel: version, flavour)",
           want, got)
