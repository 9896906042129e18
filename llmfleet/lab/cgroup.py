"""A cgroup of its own for each lab container.

systemd-nspawn with --keep-unit and --register=no puts the container in the cgroup of the process
that starts it, and the container's systemd makes its units' cgroups under it (nspawn's `payload`).
On a machine where every lab host is started from one cgroup (here: the root, no systemd on the
machine), the containers shared one tree: `/payload/system.slice/vllm.service` held the vLLM of
every container at once, and each container's systemd created and removed the others' unit
cgroups. Two containers booting together raced on them: a unit whose cgroup the other container
had just removed failed with status 219/CGROUP (systemd.exec(5)); when that unit was
systemd-user-sessions.service, /run/nologin stayed and the lab user's SSH logins were refused.

So the supervisor of each container moves itself, before it starts nspawn, into a cgroup named
after the host, in the hierarchies systemd tracks processes in: the cgroup2 (unified) one and, on a
machine with cgroup v1 (legacy or hybrid), the `name=systemd` one. Controllers' v1 hierarchies
are left as they are. A cgroup with no controllers enabled may hold a process beside its children
(cgroup v2's "no internal processes" rule binds only where controllers are enabled), which is what
nspawn itself relies on when it splits into `supervisor` and `payload`.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

LAB_PARENT = "llmfleet-lab"  # the folder of every lab container's cgroup, at each hierarchy's root


def tracking_mounts(mountinfo: str) -> list[Path]:
    """Mount points of the hierarchies systemd tracks processes in: every cgroup2 mount and the
    cgroup v1 `name=systemd` one (proc(5): mountinfo's fields; the super options follow ' - ')."""
    mounts = []
    for line in mountinfo.splitlines():
        pre, sep, post = line.partition(" - ")
        if not sep:
            continue
        fields, tail = pre.split(), post.split()
        if len(fields) < 5 or len(tail) < 3:
            continue
        point, fstype, options = fields[4], tail[0], tail[2].split(",")
        if fstype == "cgroup2" or (fstype == "cgroup" and "name=systemd" in options):
            mounts.append(Path(point.replace("\\040", " ")))
    return mounts


def _mounts() -> list[Path]:
    return tracking_mounts(Path("/proc/self/mountinfo").read_text())


def enter(name: str) -> list[str]:
    """Move this process into the cgroup `name` (made where missing) of each tracking hierarchy;
    returns what could not be done (without root or cgroupfs, the host runs where it was started)."""
    missed = []
    for mount in _mounts():
        group = mount / LAB_PARENT / name
        try:
            group.mkdir(parents=True, exist_ok=True)
            (group / "cgroup.procs").write_text(f"{os.getpid()}\n")
        except OSError as exc:
            missed.append(f"{group}: {exc.strerror}")
    return missed


def move_to(name: str, group: Path) -> None:
    """Every process now in the container cgroup `name` (its whole tree) into `group`, a cgroup of a
    controller's v1 hierarchy (made where missing): the benchmarks count or limit a lab host's CPU
    that way (a cpuacct or cpu group), and the processes it starts later inherit it. A process gone
    meanwhile is skipped."""
    group.mkdir(exist_ok=True)
    for mount in _mounts()[:1]:  # every tracking hierarchy holds the same processes
        for procs in (mount / LAB_PARENT / name).rglob("cgroup.procs"):
            for pid in procs.read_text().split():
                try:
                    (group / "cgroup.procs").write_text(pid)
                except OSError:
                    pass  # gone meanwhile


def _populated(group: Path) -> bool:
    events = group / "cgroup.events"  # cgroup2 only; a v1 cgroup is read by its procs
    try:
        if events.exists():
            return "populated 1" in events.read_text()
        return any((d / "cgroup.procs").read_text().strip() for d in [group, *group.rglob("*")]
                   if d.is_dir())
    except OSError:
        return False


def remove_children(name: str, wait_s: float = 10.0) -> list[str]:
    """Remove what a stopped host left under its cgroup (nspawn's `payload` and `supervisor`, the
    unit cgroups of the boot that ended), once its processes are gone (waited up to wait_s), so that
    the next boot starts from an empty tree. Returns the cgroups that could not be removed."""
    left = []
    for mount in _mounts():
        group = mount / LAB_PARENT / name
        if not group.is_dir():
            continue
        deadline = time.monotonic() + wait_s
        children = [d for d in group.iterdir() if d.is_dir()]
        while any(_populated(c) for c in children) and time.monotonic() < deadline:
            time.sleep(0.1)
        for child in children:
            left += _rmtree(child)
    return left


def remove(name: str) -> list[str]:
    """Remove the host's cgroup (after the host stopped); the lab's parent folder too once empty."""
    left = remove_children(name, wait_s=5.0)
    for mount in _mounts():
        group = mount / LAB_PARENT / name
        if group.is_dir():
            left += _rmtree(group)
        try:
            (mount / LAB_PARENT).rmdir()
        except OSError:
            pass
    return left


def _rmtree(group: Path) -> list[str]:
    """rmdir a cgroup, its children first (a cgroup's files go with its folder)."""
    left = []
    for child in sorted((d for d in group.rglob("*") if d.is_dir()), key=lambda p: -len(p.parts)):
        try:
            child.rmdir()
        except OSError as exc:
            left.append(f"{child}: {exc.strerror}")
    try:
        group.rmdir()
    except FileNotFoundError:
        pass
    except OSError as exc:
        left.append(f"{group}: {exc.strerror}")
    return left
