"""cpu_governor: every CPU runs the governor group data names (where the host exposes cpufreq)."""

import pytest

from verify.helpers import expect


def test_cpu_governor(host, host_name, settings):
    if settings.cpu_governor is None:
        pytest.skip("cpu_governor = None: left alone by design")
    out = host.run("cat /sys/devices/system/cpu/cpu*/cpufreq/scaling_governor 2>/dev/null").stdout.split()
    if not out:
        pytest.skip("this host exposes no cpufreq (VM or container): no governor to check")
    expect(host_name, "cpu_governor (per CPU)", [settings.cpu_governor] * len(out), out)
