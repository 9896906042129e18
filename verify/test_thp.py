"""thp: transparent huge pages are as group data says, now and at every boot."""

import re

import pytest

from verify.helpers import CONTAINER_SKIP, expect, read_files

ENABLED = "/sys/kernel/mm/transparent_hugepage/enabled"
DEFRAG = "/sys/kernel/mm/transparent_hugepage/defrag"
UNIT = "llmfleet-thp.service"


def choice(raw):
    m = re.search(r"\[([^\]]+)\]", raw or "")
    return m.group(1) if m else raw


def test_thp_now(host, host_name, settings, is_container):
    if is_container:
        pytest.skip(CONTAINER_SKIP.format(what="transparent huge pages"))
    files = read_files(host, ENABLED, DEFRAG)
    expect(host_name, f"thp_enabled ({ENABLED})", settings.thp_enabled, choice(files[ENABLED]))
    expect(host_name, f"thp_defrag ({DEFRAG})", settings.thp_defrag, choice(files[DEFRAG]))


def test_thp_set_at_boot(host, host_name, settings):
    state = host.run(f"systemctl is-enabled {UNIT}; grep ExecStart= /etc/systemd/system/{UNIT}").stdout.split("\n", 1)
    expect(host_name, f"{UNIT} enabled", "enabled", state[0].strip())
    expect(host_name, f"{UNIT} sets thp_enabled, thp_defrag",
           [f"echo {settings.thp_enabled} > {ENABLED}", f"echo {settings.thp_defrag} > {DEFRAG}"],
           [part for part in (f"echo {settings.thp_enabled} > {ENABLED}", f"echo {settings.thp_defrag} > {DEFRAG}")
            if part in (state[1] if len(state) > 1 else "")])
