"""Stage "removed", so last: `lab down` removes every process, namespace, link, mount and file the lab made."""

import json
import subprocess
from pathlib import Path

import pytest
from harness import LAB_ENV, PREFIX, llmfleet

from llmfleet.lab import cgroup

pytestmark = pytest.mark.lab_stage("removed")


def test_down_leaves_nothing_behind(lab):
    lab_dir = LAB_ENV["LLMFLEET_LAB_DIR"]
    pids = [h["proc"]["pid"] for h in json.loads((Path(lab_dir) / "state.json").read_text())["hosts"].values()]
    llmfleet("lab", "down")
    assert not Path(lab_dir).exists()
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert f"{PREFIX}-" not in netns and f"{PREFIX}-" not in links
    assert lab_dir not in Path("/proc/self/mounts").read_text()
    cgroups = [str(d) for m in cgroup.tracking_mounts(Path("/proc/self/mountinfo").read_text())
               for d in (m / cgroup.LAB_PARENT).glob(f"{PREFIX}-*")]
    assert cgroups == [], "the containers' cgroups must go with them"
    # (ps cuts lines at 80 columns when its output is not a terminal: read /proc instead)
    leftovers = []
    for entry in Path("/proc").iterdir():
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if entry.name.isdigit() and lab_dir in cmdline:
            leftovers.append(f"{entry.name}: {cmdline}")
    assert leftovers == []
    for pid in pids:
        assert not Path(f"/proc/{pid}/cmdline").exists() or b"nspawn" not in Path(f"/proc/{pid}/cmdline").read_bytes()
    # a second `down` has nothing left to do and says so
    assert "removed 0 item(s)" in llmfleet("lab", "down").stdout
