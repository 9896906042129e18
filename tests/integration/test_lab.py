"""The lab end to end: hosts come up, pyinfra and testinfra work over SSH, faults are handled."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from harness import BIN, LAB_ENV, N_CONTAINERS, N_GATEWAYS, PREFIX, lab_ssh, llmfleet, run, serving_containers, state

from llmfleet.lab import cgroup
from llmfleet.remote import python_script


def _cmdline(proc: Path) -> bytes:
    try:
        return (proc / "cmdline").read_bytes()
    except OSError:
        return b""


def netns_names() -> list[str]:
    out = subprocess.run(["ip", "-j", "netns", "list"], capture_output=True, text=True).stdout.strip()
    return [e["name"] for e in json.loads(out)] if out else []


def link_names() -> list[str]:
    return [e["ifname"] for e in json.loads(subprocess.run(["ip", "-j", "link"], capture_output=True,
                                                            text=True).stdout)]


def test_up_cleans_up_after_a_killed_lab(lab):
    assert "recovered from a previous lab" in lab.up_output
    assert f"{PREFIX}-lab-c9" not in netns_names()
    assert f"{PREFIX}-c9" not in link_names()


def test_status_json_lists_every_host(lab):
    hosts = json.loads(llmfleet("lab", "status", "--json").stdout)["hosts"]
    assert [(h["name"], h["kind"], h["role"], h["address"], h["ssh_port"], h["state"]) for h in hosts] == [
        ("lab-c1", "container", "serving", "10.78.0.11", 22, "running"),
        ("lab-c2", "container", "serving", "10.78.0.12", 22, "running"),
        ("lab-c3", "container", "serving", "10.78.0.13", 22, "running"),
        ("lab-gw1", "container", "gateway", "10.78.0.61", 22, "running"),
        ("lab-vm1", "vm", "serving", "10.78.0.101", 22, "running"),
    ]


def test_each_container_has_its_own_network_namespace(lab):
    hosts = state()["hosts"]
    namespaces = {h["netns"] for h in hosts.values() if h["kind"] == "container"}
    assert len(namespaces) == N_CONTAINERS + N_GATEWAYS and namespaces <= set(netns_names())


def test_each_container_keeps_its_units_in_a_cgroup_tree_of_its_own(lab):
    """The same unit started in two containers lands in two cgroups, each holding only its own
    process (before: one shared `/payload/system.slice/<unit>`, which made batch reboots fail
    units with 219/CGROUP; benchmarks/lab_container_reboots.sh counts them)."""
    unit = "llmfleet-cgroup-check"
    containers = [n for n, h in state()["hosts"].items() if h["kind"] == "container"][:2]
    for name in containers:
        lab_ssh(name, f"sudo systemd-run --quiet --unit={unit} sleep 600")
    try:
        mounts = cgroup.tracking_mounts(Path("/proc/self/mountinfo").read_text())
        for mount in mounts:
            held = {str(d.relative_to(mount)): (d / "cgroup.procs").read_text().split()
                    for d in mount.rglob(f"{unit}.service") if d.is_dir()}
            assert len(held) == len(containers) and all(len(p) == 1 for p in held.values()), (
                f"{mount}: expected {len(containers)} cgroups named {unit}.service with one process each, "
                f"found {held}")
    finally:
        for name in containers:
            lab_ssh(name, f"sudo systemctl stop {unit}", check=False)


def test_up_twice_is_harmless(lab):
    before = {n: h["proc"]["pid"] for n, h in state()["hosts"].items()}
    again = llmfleet("lab", "up", "--hosts", str(N_CONTAINERS), "--vm", "--gateways", str(N_GATEWAYS))
    after = {n: h["proc"]["pid"] for n, h in state()["hosts"].items()}
    assert after == before, "a second `lab up` must keep the running hosts"
    assert "answered SSH" not in again.stderr  # nothing was started


def test_pyinfra_answers_from_every_host_and_the_vm_has_its_own_kernel(lab):
    proc = run(str(BIN / "pyinfra"), "inventories/lab.py", "exec", "--", "uname", "-r")
    out = proc.stdout + proc.stderr
    kernels = {}
    for line in out.splitlines():
        line = line.strip()
        if line.startswith("[lab-") and "]" in line:
            name, rest = line[1:].split("]", 1)
            if rest.strip() and rest.strip()[0].isdigit():
                kernels[name] = rest.strip()
    assert set(kernels) == {"lab-c1", "lab-c2", "lab-c3", "lab-gw1", "lab-vm1"}, out
    machine = os.uname().release
    assert all(kernels[f"lab-c{i}"] == machine for i in range(1, 4))
    assert kernels["lab-vm1"] != machine


def test_deploy_then_verify_passes(lab, deployed):
    result = lab.verify(acceptance=True)
    assert " passed" in result.stdout and "failed" not in result.stdout


def test_second_deploy_changes_nothing(lab, deployed):
    plan = json.loads(lab.deploy("--dry", "--json").stdout)["plan"]
    assert plan, "the dry run planned no operation at all"
    changing = {p["name"]: p["hosts_with_change"] + p["hosts_with_conditional_change"]
                for p in plan if p["hosts_with_change"] or p["hosts_with_conditional_change"]}
    assert changing == {}


def test_a_dry_run_and_the_verify_suite_leave_the_hosts_auth_log_one_short_line_a_sudo(lab, deployed):
    """The fact batch and the verify batch go in on standard input: sudo logs the command it runs in
    full, 1 KB a line ("command continued"), and the batches on its command line wrote a lab
    host's auth log 150 such lines a dry run and verify."""
    url = next(u for u in lab.testinfra_hosts().split(",") if u.startswith("ssh://lab-c1?"))
    for _ in range(2):  # the first leaves each part's hint, if no earlier run did
        # the next whole second on the host's clock: the journal's --since counts in seconds, and
        # the second the last run ended in holds its last commands
        since = int(lab_ssh("lab-c1", "date +%s").stdout) + 1
        time.sleep(1.2)
        lab.deploy("--dry", "--limit", "lab-c1")
        run(str(BIN / "pytest"), "verify/test_sysctls.py", "verify/test_chrony.py", "-p", "no:cacheprovider", "-q",
            "-m", "not acceptance", f"--hosts={url}")
    log = lab_ssh("lab-c1", f"sudo journalctl --since @{since} --no-pager -o cat -t sudo").stdout
    commands = [ln for ln in log.splitlines() if "COMMAND=" in ln]
    assert commands and "command continued" not in log, log[-3000:]
    assert any(c.endswith("sh -c 'exec sh -s'") for c in commands), commands  # the dry run's fact batch
    assert any(c.endswith("/bin/sh -c 'exec /bin/sh -s'") for c in commands), commands  # the verify batch


def test_the_systemd_unit_facts_of_a_hint_read_together_are_what_pyinfra_reads_of_each(lab, tmp_path):
    """llmfleet/pyinfra_patches/fact_memo.py's _SystemdTogether on a real systemd: the first run reads each fact as
    pyinfra does (and records the hint), the second reads all of them in one batch, with one
    systemctl for the units, and gets the same values (an alias, a unit that does not exist, and units
    whose state and unit file state differ among them)."""
    def read() -> dict:
        out = run(str(BIN / "pyinfra"), "inventories/lab.py", "tests/integration/deploys/read_systemd_facts.py",
                  "--limit", "lab-c1", "--dry", LLMFLEET_HINTS=str(tmp_path / "hints")).stdout
        return json.loads(next(ln for ln in out.splitlines() if ln.startswith("FACTS ")).removeprefix("FACTS "))

    alone, together = read(), read()
    assert (alone["batches"], together["batches"], together["prefetched"], together["joined"]) == (0, 1, 13, 13), \
        (alone, together)
    assert together["values"] == alone["values"]
    values = alone["values"]
    assert values["sshd.service"] == [{"ssh.service": True}] * 2  # an alias: systemd names the unit
    assert values["e2scrub_all.service"] == [{"e2scrub_all.service": False}, {"e2scrub_all.service": True}]
    assert values["debug-shell.service"] == [{"debug-shell.service": False}] * 2
    assert values["two"] == {"ssh.service": True, "systemd-journald.service": True}


def test_the_telemetry_units_states_are_what_systemctl_is_active_and_is_enabled_print(lab):
    """llmfleet/remote/telemetry_state.py reads its units' states with one `systemctl show`: on a real
    systemd each is what `systemctl is-active` and `systemctl is-enabled` print of it (an active and
    enabled unit, a static one, a disabled one, a failed transient one: "failed" by name), and a unit
    systemd does not know is inactive and disabled."""
    units = ["ssh.service", "e2scrub_all.service", "debug-shell.service", "llmfleet-test-failed.service",
             "no-such-llmfleet-unit.service"]
    lab_ssh("lab-c1", "sudo systemd-run --quiet --unit=llmfleet-test-failed.service false; for i in $(seq 50); do "
                      "test \"$(systemctl is-active llmfleet-test-failed.service)\" = failed && break; sleep 0.2; done")
    try:
        state = json.loads(lab_ssh("lab-c1", python_script("telemetry_state", json.dumps({"units": units}))).stdout)
        printed = lab_ssh("lab-c1", "; ".join(f"echo $(systemctl is-active {u}) $(systemctl is-enabled {u} 2>/dev/null)"
                                              for u in units)).stdout.splitlines()
    finally:
        lab_ssh("lab-c1", "sudo systemctl reset-failed llmfleet-test-failed.service", check=False)
    # is-enabled prints nothing on standard output for a unit systemd does not know: "disabled" then
    expected = {u: {"active": words[0], "enabled": words[1] if len(words) > 1 else "disabled"}
                for u, words in zip(units, (line.split() for line in printed), strict=True)}
    assert state["units"] == expected
    assert expected["ssh.service"] == {"active": "active", "enabled": "enabled"}
    assert expected["llmfleet-test-failed.service"]["active"] == "failed"
    assert expected["no-such-llmfleet-unit.service"] == {"active": "inactive", "enabled": "disabled"}


def test_hosts_reach_only_each_other_and_the_machine(lab):
    script = (
        "import socket\n"
        "for addr in [('10.78.0.12', 22), ('10.78.0.1', 3143), ('192.0.2.1', 80)]:\n"
        "    try: socket.create_connection(addr, 3).close(); print(addr[0], 'ok')\n"
        "    except OSError as e: print(addr[0], e.strerror)\n"
    )
    out = lab_ssh("lab-c1", f"python3 -c \"{script}\"").stdout
    assert "10.78.0.12 ok" in out and "10.78.0.1 ok" in out
    assert "192.0.2.1 Network is unreachable" in out  # no route: the packet is never sent


def test_lab_ntp_server_answers_hosts(lab):
    script = (
        "import socket,struct,time\n"
        "s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); s.settimeout(3)\n"
        "s.sendto(b'\\x1b'+47*b'\\0',('10.78.0.1',123)); d=s.recv(48)\n"
        "print(abs(struct.unpack('!I',d[40:44])[0]-2208988800-time.time()))\n"
    )
    for name in ("lab-c1", "lab-vm1"):
        offset = float(lab_ssh(name, f"python3 -c \"{script}\"").stdout.strip())
        assert offset < 5, f"{name}: lab NTP server time differs by {offset}s"


def test_wheel_mirror_serves_pip_on_hosts(lab, deployed):
    llmfleet("lab", "wheels", "six==1.16.0", timeout=600)
    out = lab_ssh("lab-c1", "rm -rf /tmp/v && python3 -m venv /tmp/v && /tmp/v/bin/pip install six==1.16.0"
                  " && /tmp/v/bin/python -c 'import six; print(six.__version__)'", timeout=600)
    assert "Looking in links: http://10.78.0.1:8470/" in out.stdout
    assert out.stdout.strip().endswith("1.16.0")


def test_apt_get_waits_for_a_dpkg_lock_another_apt_holds(lab, deployed):
    """The mirrors component's DPkg::Lock::Timeout: an install while another apt holds the lock
    (apt-daily's `apt-get check` once failed a deploy's install here) waits for it, where
    apt-get's own default (0) fails at once with "Could not get lock"."""
    out = lab_ssh("lab-c2", "sudo python3 -c 'import fcntl, time\n"
                            "f = open(\"/var/lib/dpkg/lock-frontend\", \"w\")\n"
                            "fcntl.lockf(f, fcntl.LOCK_EX)\n"
                            "time.sleep(5)' & sleep 1; "
                            "sudo apt-get -q -y -o DPkg::Lock::Timeout=0 install numactl; echo \"default rc=$?\"; "
                            "start=$(date +%s); sudo apt-get -q -y install numactl; "
                            "echo \"deployed rc=$? waited=$(( $(date +%s) - start ))\"; wait", check=False)
    lines = out.stdout.strip().splitlines() + out.stderr.strip().splitlines()
    assert "default rc=100" in lines and "Could not get lock /var/lib/dpkg/lock-frontend" in out.stderr, lines
    deployed = next(ln for ln in lines if ln.startswith("deployed rc="))
    assert deployed.startswith("deployed rc=0 ") and int(deployed.split("waited=")[1]) >= 2, lines[-10:]


def test_host_keys_are_checked(lab, tmp_path):
    cfg = Path(LAB_ENV["LLMFLEET_LAB_DIR"]) / "ssh"
    wrong = tmp_path / "known_hosts"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "k")], check=True)
    wrong.write_text("lab-c1,10.78.0.11 " + " ".join((tmp_path / "k.pub").read_text().split()[:2]) + "\n")
    proc = subprocess.run(["ssh", "-F", str(cfg / "config"), "-o", f"UserKnownHostsFile={wrong}", "lab-c1", "true"],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 255 and "Host key verification failed" in proc.stderr


def test_password_login_is_refused(lab):
    out = lab_ssh("lab-c1", "sudo sshd -T | grep -E '^(passwordauthentication|kbdinteractiveauthentication) '")
    assert out.stdout.split() == ["passwordauthentication", "no", "kbdinteractiveauthentication", "no"]


# Stage "grown": a crashed container comes back as a fresh host, with nothing deployed on it, so
# this runs after the tests that expect every host deployed (the vLLM tests would otherwise deploy
# lab-c3 anew: 229 s in a full run). By then the fleet tests have added lab-c4.
@pytest.mark.lab_stage("grown")
def test_crashed_host_is_reported_and_recovered(lab):
    pids = {n: h["proc"]["pid"] for n, h in state()["hosts"].items()}
    containers = len(serving_containers())
    os.kill(pids["lab-c3"], signal.SIGKILL)
    rows = {h["name"]: h["state"] for h in json.loads(llmfleet("lab", "status", "--json").stdout)["hosts"]}
    assert rows["lab-c3"] == "stopped"
    up = llmfleet("lab", "up", "--hosts", str(containers), "--vm", "--gateways", str(N_GATEWAYS))
    assert "lab-c3: its process is gone" in up.stderr
    after = {n: h["proc"]["pid"] for n, h in state()["hosts"].items()}
    assert after["lab-c3"] != pids["lab-c3"]
    assert {n: p for n, p in after.items() if n != "lab-c3"} == {n: p for n, p in pids.items() if n != "lab-c3"}
    assert lab_ssh("lab-c3", "systemctl is-system-running").stdout.strip() == "running"
    # the old lab-c3 (its supervisor was killed, the container itself lived on) is gone: one
    # systemd-nspawn for this lab's lab-c3 remains, the new one (a demo or bench lab beside this one
    # has a lab-c3 of its own, under its own directory)
    root = f"\0-D\0{LAB_ENV['LLMFLEET_LAB_DIR']}/hosts/lab-c3/root\0".encode()
    nspawns = [p for p in Path("/proc").iterdir() if p.name.isdigit() and b"--machine=lab-c3\0" in
               _cmdline(p) and _cmdline(p).startswith(b"systemd-nspawn") and root in _cmdline(p)]
    assert len(nspawns) == 1


def test_not_root_is_refused_clearly(lab):
    # In a new user namespace the process is not root (euid 65534) but can still read the checkout.
    proc = subprocess.run(["unshare", "--user", "--", str(BIN / "llmfleet"), "lab", "up"],
                          capture_output=True, text=True, env={**os.environ, **LAB_ENV})
    assert proc.returncode == 2 and "the lab needs root" in proc.stderr


def test_missing_tool_names_the_package(lab, tmp_path):
    (tmp_path / "bin").mkdir()
    os.symlink(shutil.which("python3"), tmp_path / "bin" / "python3")
    proc = subprocess.run([str(BIN / "llmfleet"), "lab", "up", "--vm"], capture_output=True, text=True,
                          env={**os.environ, **LAB_ENV, "PATH": str(tmp_path / "bin")})
    assert proc.returncode == 2
    assert "missing system tools:" in proc.stderr and "mmdebstrap" in proc.stderr
    assert "apt-get install" in proc.stderr and "qemu-system-x86" in proc.stderr


def test_occupied_subnet_is_refused_before_anything_is_made(lab, tmp_path):
    subprocess.run(["ip", "link", "add", "lltxdummy", "type", "bridge"], check=True)
    try:
        subprocess.run(["ip", "addr", "add", "10.79.0.5/24", "dev", "lltxdummy"], check=True)
        proc = run(str(BIN / "llmfleet"), "lab", "up", "--hosts", "1", check=False,
                   LLMFLEET_LAB_DIR=str(tmp_path / "lab"), LLMFLEET_LAB_SUBNET="10.79.0.0/24",
                   LLMFLEET_LAB_PREFIX="lltx")
        assert proc.returncode == 2
        assert "the lab subnet 10.79.0.0/24 overlaps 10.79.0.5/24 on interface lltxdummy" in proc.stderr
        assert "LLMFLEET_LAB_SUBNET=" in proc.stderr
        assert not any(n.startswith("lltx-") for n in link_names() + netns_names())
    finally:
        subprocess.run(["ip", "link", "del", "lltxdummy"], check=False)
