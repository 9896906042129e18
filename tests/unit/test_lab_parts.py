"""Lab building blocks that need no root: names, subnets, recipes, state, SSH files, ports."""

import socket
import subprocess
from pathlib import Path

import pytest

from llmfleet.errors import LabError
from llmfleet.lab import cgroup, images, services
from llmfleet.lab.config import LabNet, LabPaths
from llmfleet.lab.lifecycle import write_ssh_files
from llmfleet.lab.state import Host, LabState, Proc
from llmfleet.schema import defaults as schema_defaults


def test_subnet_from_env(monkeypatch):
    monkeypatch.setenv("LLMFLEET_LAB_SUBNET", "10.90.0.0/24")
    net = LabNet.from_env()
    assert (net.gateway, net.container_address(1), net.vm_address(1)) == ("10.90.0.1", "10.90.0.11", "10.90.0.101")


@pytest.mark.parametrize("bad", ["10.90.0.5/24", "not-a-net", "10.90.0.0/28"])
def test_bad_subnet_is_refused_with_fix(monkeypatch, bad):
    monkeypatch.setenv("LLMFLEET_LAB_SUBNET", bad)
    with pytest.raises(LabError, match="LLMFLEET_LAB_SUBNET"):
        LabNet.from_env()


def test_recipe_digest_changes_only_with_recipe():
    base = images.recipe("container")
    assert images.recipe("container").digest == base.digest
    changed = images.Recipe(**{**base.__dict__, "packages": base.packages + ["curl"]})
    assert changed.digest != base.digest
    assert images.recipe("vm").digest != base.digest


def test_the_containers_start_without_the_base_packages_so_the_deploy_installs_them():
    """The VM's image carries them (apt under emulation is slow); the install path is then proven
    on the containers only, so their image must lack every one of them."""

    wanted = set(schema_defaults()["base_packages"]) | {"chrony"}
    container, vm = images.recipe("container").packages, images.recipe("vm").packages
    assert wanted.isdisjoint(container), wanted & set(container)
    assert wanted <= set(vm), wanted - set(vm)


def test_proc_alive_checks_marker_and_stop_kills(tmp_path):
    proc = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        assert Proc(pid=proc.pid, marker="sleep 300").alive()
        assert not Proc(pid=proc.pid, marker="something-else").alive()  # PID reused by another program
        Proc(pid=proc.pid, marker="sleep 300").stop(grace_s=2)
        proc.wait(timeout=5)
        assert not Proc(pid=proc.pid, marker="sleep 300").alive()
    finally:
        proc.kill()


def test_ssh_files_check_host_keys(tmp_path):
    paths = LabPaths(state_dir=tmp_path / "lab", cache_dir=tmp_path / "cache")
    state = LabState(subnet="10.77.0.0/24", gateway="10.77.0.1", bridge="x-br0", user="fleet")
    state.hosts["lab-c1"] = Host(name="lab-c1", kind="container", address="10.77.0.11", image="i", link="x-c1")
    write_ssh_files(state, {"lab-c1": "ssh-ed25519 AAAAkey"}, paths)
    config = paths.ssh_config.read_text()
    assert "Host lab-c1\n  HostName 10.77.0.11" in config
    assert "StrictHostKeyChecking yes" in config and f"UserKnownHostsFile {paths.known_hosts}" in config
    assert paths.known_hosts.read_text() == "lab-c1,10.77.0.11 ssh-ed25519 AAAAkey\n"
    # a host that left the lab leaves known_hosts too
    del state.hosts["lab-c1"]
    write_ssh_files(state, {}, paths)
    assert paths.known_hosts.read_text() == ""


def test_testinfra_checks_of_a_host_share_one_connection_and_other_ssh_uses_do_not(tmp_path):
    """ssh's own reading of the two configs (`ssh -G`: the settings a connection would use)."""
    import subprocess

    paths = LabPaths(state_dir=tmp_path / "lab", cache_dir=tmp_path / "cache")
    state = LabState(subnet="10.77.0.0/24", gateway="10.77.0.1", bridge="x-br0", user="fleet")
    state.hosts["lab-c1"] = Host(name="lab-c1", kind="container", address="10.77.0.11", image="i", link="x-c1")
    write_ssh_files(state, {"lab-c1": "ssh-ed25519 AAAAkey"}, paths)

    def resolved(config) -> dict[str, str]:
        out = subprocess.run(["ssh", "-G", "-F", str(config), "lab-c1"], capture_output=True, text=True,
                             check=True).stdout
        return dict(line.split(" ", 1) for line in out.splitlines() if " " in line)

    testinfra, plain = resolved(paths.testinfra_ssh_config), resolved(paths.ssh_config)
    assert testinfra["controlpath"].startswith(f"{paths.ssh_dir}/cm-"), testinfra["controlpath"]
    assert "controlpath" not in plain  # `lab ssh` and the deploy keep a connection each
    for key in ("hostname", "user", "identityfile", "userknownhostsfile", "stricthostkeychecking",
                "serveraliveinterval"):
        assert testinfra[key] == plain[key], key  # everything else as the lab's own config says
    assert plain["hostname"] == "10.77.0.11" and plain["serveraliveinterval"] == "5"


def test_taken_port_is_named():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        with pytest.raises(LabError) as exc:
            services.check_port_free("udp", "127.0.0.1", port)
    assert f"port {port}/udp on 127.0.0.1 is taken" in str(exc.value)
    assert "LLMFLEET_LAB_SUBNET" in str(exc.value)


def test_ntp_query_reads_server_time():
    """The SNTP client against a tiny server on loopback that answers a fixed timestamp."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as srv:
        srv.bind(("127.0.0.1", 0))
        port = srv.getsockname()[1]
        import threading

        def answer():
            _, addr = srv.recvfrom(48)
            reply = bytearray(48)
            reply[40:44] = (2208988800 + 1_000_000_000).to_bytes(4, "big")
            srv.sendto(bytes(reply), addr)

        t = threading.Thread(target=answer)
        t.start()
        assert services.ntp_query("127.0.0.1", port) == pytest.approx(1_000_000_000)
        t.join()


def test_state_roundtrip(tmp_path):
    paths = LabPaths(state_dir=tmp_path / "lab", cache_dir=tmp_path / "cache")
    assert LabState.load(paths) is None
    state = LabState(subnet="10.77.0.0/24", gateway="10.77.0.1", bridge="x-br0", user="fleet")
    state.save(paths)
    assert LabState.load(paths) == state
    assert Path(paths.state_file).stat().st_mode & 0o777 in (0o644, 0o600)


def test_the_vm_supervisor_raises_its_process_and_its_sessions_autogroup_above_the_rest():
    """In a session of its own (an autogroup's nice is its whole session's): what the lab's VM
    supervisor sets before it starts qemu, read back from /proc by the process it starts."""
    import os
    import subprocess
    import sys

    from llmfleet.lab.supervise import VM_NICE

    code = ("import json, subprocess, sys; from llmfleet.lab.supervise import prioritise;"
            "missed = prioritise(int(sys.argv[1]));"
            "out = subprocess.run(['sh', '-c', 'cat /proc/$$/autogroup; cut -d\" \" -f19 /proc/$$/stat'],"
            " capture_output=True, text=True).stdout; print(json.dumps(missed)); print(out)")
    p = subprocess.run([sys.executable, "-c", code, str(VM_NICE)], capture_output=True, text=True,
                       start_new_session=True, check=True)
    missed, autogroup, nice = p.stdout.splitlines()[:3]
    if os.geteuid() != 0:
        assert "Permission denied" in missed  # an unprivileged user may not raise a priority, and is told
        return
    assert missed == "[]", p.stdout
    assert autogroup.endswith(f"nice {VM_NICE}") and int(nice) == VM_NICE, p.stdout
    assert VM_NICE < 0


HYBRID = """\
25 30 0:22 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755
26 25 0:23 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw,nsdelegate
27 25 0:24 / /sys/fs/cgroup/systemd rw,nosuid,nodev,noexec,relatime shared:11 - cgroup cgroup rw,xattr,name=systemd
30 25 0:27 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:14 - cgroup cgroup rw,memory
"""
UNIFIED = "31 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate\n"


@pytest.mark.parametrize("mountinfo, expected", [
    (HYBRID, ["/sys/fs/cgroup/unified", "/sys/fs/cgroup/systemd"]),
    (UNIFIED, ["/sys/fs/cgroup"]),
    ("22 1 0:5 / /proc rw - proc proc rw\n", []),
])
def test_a_container_gets_a_cgroup_in_the_hierarchies_systemd_tracks_and_not_in_the_controllers(
        mountinfo, expected):
    assert [str(p) for p in cgroup.tracking_mounts(mountinfo)] == expected


def test_inotify_instances_are_raised_for_many_containers_and_never_lowered():
    from llmfleet.lab.lifecycle import inotify_instances_needed

    assert inotify_instances_needed(128, 3) == 176  # the kernel's default is short of 3 containers' room
    assert inotify_instances_needed(128, 24) == 512  # 24 ran out at the 22nd container with 128
    assert inotify_instances_needed(8192, 24) is None
