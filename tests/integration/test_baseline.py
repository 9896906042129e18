"""The host baseline on the lab: deployed, verified, broken by hand and repaired, reboots rolled."""

from __future__ import annotations

import socket
import threading
import time

from harness import BIN, boot_ids, deploy_at_once, failure, lab_ssh, run, state

CONTAINERS = ["lab-c1", "lab-c2", "lab-c3"]


def test_first_deploy_reboots_only_the_host_whose_command_line_changed(deployed):
    changed = {n for n in deployed.boots_before if deployed.boots_before[n] != deployed.boots_after[n]}
    assert changed == {"lab-vm1"}, deployed.output[-3000:]
    assert "reboot: the running kernel command line lacks transparent_hugepage=never" in deployed.output
    # the blacklist written to the VM, its initramfs rebuilt with it (a container has none to rebuild)
    assert "module_blacklist | initramfs regenerated with the blacklist" in deployed.output
    cmdline = lab_ssh("lab-vm1", "cat /proc/cmdline").stdout.split()
    assert "transparent_hugepage=never" in cmdline
    thp = lab_ssh("lab-vm1", "cat /sys/kernel/mm/transparent_hugepage/enabled").stdout
    assert "[never]" in thp


# Each component broken by hand on one host: (component, host, command, text the failure must show).
BREAKS = [
    ("base_packages", "lab-c1", "sudo DEBIAN_FRONTEND=noninteractive apt-get remove -y -q numactl",
     "lab-c1: base_packages: numactl: expected installed, actual "),
    ("kernel_cmdline", "lab-vm1", "sudo rm /etc/default/grub.d/90-llmfleet.cfg",
     "lab-vm1: kernel_cmdline (next boot, /etc/default/grub.d/90-llmfleet.cfg): "
     "expected transparent_hugepage=never, actual none"),
    ("thp", "lab-vm1", "echo always | sudo tee /sys/kernel/mm/transparent_hugepage/enabled",
     "lab-vm1: thp_enabled (/sys/kernel/mm/transparent_hugepage/enabled): expected never, actual always"),
    ("limits", "lab-c1", "sudo sed -i 's/nofile 65536/nofile 1024/' /etc/security/limits.d/90-llmfleet.conf",
     "lab-c1: limits_nofile/limits_memlock for vllm (/etc/security/limits.d/90-llmfleet.conf): vllm soft nofile: "
     "expected 65536, actual 1024"),
    # (a container's /proc/sys is read-only: sysctls are the VM's to break)
    ("sysctls", "lab-vm1", "sudo sysctl -w vm.swappiness=60",
     "lab-vm1: sysctls in force (/proc/sys): vm.swappiness: expected 1, actual 60"),
    ("chrony", "lab-c3", "sudo systemctl stop chrony",
     "lab-c3: chrony service: expected active, actual inactive"),
    # the blacklist file on a container, the loaded module on the VM (a kernel of its own): loaded
    # by hand past the file's `install ... /bin/false` (modprobe --ignore-install), the VM's repair
    # unloads it without an initramfs to rebuild (that takes the VM 100 s under emulation; the
    # first deploy rebuilds it on the VM when it writes the file)
    ("module_blacklist", "lab-c2", "sudo rm /etc/modprobe.d/90-llmfleet-blacklist.conf",
     "lab-c2: module_blacklist (/etc/modprobe.d/90-llmfleet-blacklist.conf): expected blacklist ib_uverbs, "
     "blacklist rdma_ucm, install ib_uverbs, install rdma_ucm, actual none"),
    ("module_blacklist", "lab-vm1", "sudo modprobe --ignore-install ib_uverbs",
     "lab-vm1: module_blacklist loaded: expected none, actual ib_uverbs"),
    ("self_audit", "lab-c2", "sudo systemctl stop llmfleet-self-audit.timer",
     "lab-c2: self-audit timer: active: expected active, actual inactive"),
]


# the BREAKS that change a file the deploy manages (verify/test_managed_files.py: its manifest entry)
ALSO_MANAGED = [("lab-vm1", "/etc/default/grub.d/90-llmfleet.cfg"),
                ("lab-c1", "/etc/security/limits.d/90-llmfleet.conf"),
                ("lab-c2", "/etc/modprobe.d/90-llmfleet-blacklist.conf")]


def test_every_component_broken_by_hand_is_named_then_repaired(lab, deployed):
    # clean, and it leaves each container's hint (verify/prefetch.py): the next runs are batched; the
    # emulated VM's clean run (about 50 s) is left out: the broken run leaves its hint
    lab.verify(kinds=("container",))
    for _, host, command, _ in BREAKS:
        lab_ssh(host, command)
    broken = lab.verify(check=False)
    assert broken.returncode == 1
    failed = [ln for ln in broken.stdout.splitlines() if ln.startswith("FAILED")]
    for component, host, _, message in BREAKS:
        assert message in broken.stdout, f"{component}: {message!r} not in verify output:\n{broken.stdout[-4000:]}"
        assert any(f"test_{component}" in ln and host in ln for ln in failed), (component, failed)
    # a break that changed a file the deploy manages is named by the host's manifest check too
    for host, path in ALSO_MANAGED:
        assert f"{host}: managed file: {path} (" in broken.stdout, (host, path, broken.stdout[-4000:])
        assert any("test_managed_files" in ln and host in ln for ln in failed), (host, failed)
    # exactly the broken (component, host) pairs fail, nothing else
    assert len(failed) == len(BREAKS) + len({host for host, _ in ALSO_MANAGED}), failed
    # the broken hosts' groups (no break is on the gateway: its run would only share the 2 cores with
    # the emulated VM, which sets the pace); the verify after it still checks every host
    deploy_at_once(("lab_containers", "lab_vms"))
    repaired = lab.verify()
    # the verify runs asked their hosts in batched round trips (verify/prefetch.py), from the hints
    # of the runs before: the broken state was found all the same, each break by its own check
    # (the containers' in both runs, the VM's in the repaired run)
    answered = {name: [int(ln.split(", ")[1].split()[0]) for ln in out.splitlines()
                       if ln.startswith("llmfleet verify:")] for name, out in (("broken", broken.stdout),
                                                                               ("repaired", repaired.stdout))}
    assert len(answered["broken"]) == 2 and answered["broken"][0] > 0, answered  # the containers' run first
    assert len(answered["repaired"]) == 2 and all(n > 0 for n in answered["repaired"]), answered


def _watch_ssh(addresses: dict[str, str], stop: threading.Event, record: list) -> None:
    """Record, every 0.1 s, which hosts do not accept a TCP connection on port 22 (and when)."""
    t0 = time.monotonic()
    while not stop.is_set():
        down = set()
        for name, addr in addresses.items():
            try:
                socket.create_connection((addr, 22), timeout=0.5).close()
            except OSError:
                down.add(name)
        record.append((round(time.monotonic() - t0, 1), down))
        time.sleep(0.1)


def _deploy_watched(lab, *extra: str):
    """A deploy of the containers, with which of them are down recorded throughout. Only the hosts
    the roll may reboot are watched: the emulated VM, outside the roll, can be slow to accept a
    connection on this loaded machine, and a slow VM is not a host the roll took down (it read as
    a second host down in one run of about ten)."""
    addresses = {n: h["address"] for n, h in state()["hosts"].items() if n in CONTAINERS}
    stop, record = threading.Event(), []
    watcher = threading.Thread(target=_watch_ssh, args=(addresses, stop, record))
    watcher.start()
    try:
        proc = run(str(BIN / "pyinfra"), "inventories/lab.py", "deploy.py", "-y", *extra, check=False)
    finally:
        stop.set()
        watcher.join()
    worst = max(record, key=lambda r: len(r[1]), default=(0.0, set()))
    return proc, len(worst[1]), f"at {worst[0]} s into the deploy, down: {sorted(worst[1])}"


def test_reboots_roll_in_batches_of_max_unavailable(lab, deployed):
    for name in CONTAINERS:
        lab_ssh(name, "sudo touch /run/reboot-required")
    before = boot_ids(CONTAINERS)
    # the containers only: the VM has nothing to reboot, and its emulated round trips are slow
    proc, most_down, when = _deploy_watched(lab, "--limit", "lab_containers", "--data", "reboot_max_unavailable=2")
    assert proc.returncode == 0, failure(proc)
    after = boot_ids(CONTAINERS)
    assert {n for n in before if before[n] != after[n]} == set(CONTAINERS)
    assert 1 <= most_down <= 2, f"{most_down} hosts were down at once (reboot_max_unavailable=2), {when}"
    # nothing left to reboot: the next plan of the hosts that rebooted has no reboot (the VM's dry
    # run would cost a minute of emulated round trips, and it was never asked to reboot)
    again = run(str(BIN / "pyinfra"), "inventories/lab.py", "deploy.py", "--dry", "--limit", "lab_containers")
    assert "reboot: /run/reboot-required" not in again.stdout + again.stderr


def test_roll_stops_at_a_host_that_does_not_come_back_healthy(lab, deployed):
    """Every container would come back degraded; pyinfra orders a roll's batches as it likes, so
    whichever host goes first fails and the roll must stop there: the others keep their boot."""
    unit = "[Unit]\\nDescription=fails at boot\\n[Service]\\nType=oneshot\\nExecStart=/bin/false\\n" \
           "[Install]\\nWantedBy=multi-user.target\\n"
    for name in CONTAINERS:
        lab_ssh(name, f"printf '{unit}' | sudo tee /etc/systemd/system/broken-at-boot.service >/dev/null"
                      " && sudo systemctl enable broken-at-boot.service && sudo touch /run/reboot-required")
    before = boot_ids()
    try:
        proc, most_down, when = _deploy_watched(lab, "--limit", "lab_containers", "--data",
                                                "reboot_max_unavailable=1")
        out = proc.stdout + proc.stderr
        after = boot_ids()
        rebooted = [n for n in CONTAINERS if before[n] != after[n]]
        assert proc.returncode == 1
        assert len(rebooted) == 1, f"the roll went on after a failure: {rebooted} rebooted"
        first = rebooted[0]
        assert "came back degraded (failed units: broken-at-boot.service); stopping the roll" in out
        assert out.count(f"not rebooted: the roll stopped after {first} came back degraded") == 2, out[-3000:]
        assert before["lab-vm1"] == after["lab-vm1"]
        assert most_down <= 1, f"{most_down} hosts were down at once (reboot_max_unavailable=1), {when}"
    finally:
        for name in CONTAINERS:
            lab_ssh(name, "sudo systemctl disable broken-at-boot.service; sudo rm -f /run/reboot-required "
                          "/etc/systemd/system/broken-at-boot.service; sudo systemctl daemon-reload; "
                          "sudo systemctl reset-failed")


def _refused(lab, *data: str):
    # the containers: a refusal needs no kernel of its own, and pyinfra connects to every host it
    # deploys before it reads the deploy (an SSH handshake with the emulated VM costs seconds of CPU)
    proc = run(str(BIN / "pyinfra"), "inventories/lab.py", "deploy.py", "-y", "--limit", "lab_containers", *data,
               check=False)
    return proc.returncode, proc.stdout + proc.stderr


def test_bad_input_is_refused_before_any_host_changes(lab, deployed):
    cases = [
        (["--data", 'sysctls={"vm.no_such_knob": 1}'],
         "sysctls.vm.no_such_knob = 1: this host's kernel has no such sysctl (/proc/sys/vm/no_such_knob is missing)"),
        (["--data", "base_pakages=[]"], "unknown setting 'base_pakages' = []: did you mean 'base_packages'?"),
        (["--data", 'kernel_cmdline={"quiet;reboot": null}'], "kernel_cmdline.quiet;reboot = 'quiet;reboot'"),
        (["--data", "limits_nofile=lots"], "limits_nofile = 'lots': Input should be a valid integer"),
        (["--data", "chrony_servers=[]"], "chrony_servers = []: List should have at least 1 item"),
        # GPU guardrails: the same stop, for what a V100 cannot run
        (["--data", "gpu_profile=v100_sxm2_32gb_x8", "--data", 'vllm_flags={"dtype": "bfloat16"}'],
         "vllm_flags.dtype = 'bfloat16': bfloat16 needs compute capability 8.0, which Tesla V100-SXM2-32GB"),
        (["--data", "gpu_profile=v100_sxm2_32gb_x8", "--data", 'gpu_app_clocks={"memory": 2505, "graphics": 1177}'],
         "gpu_app_clocks = {'memory': 2505, 'graphics': 1177}: not a supported application clock pair"),
    ]
    for data, message in cases:
        code, out = _refused(lab, *data)
        assert code == 1 and message in out, (data, out[-2000:])
        assert "host lab-" in out
        assert "--> Starting operation" not in out, f"{data}: an operation ran despite bad input"


def test_preflight_fact_describes_each_host(lab, deployed):
    import json

    proc = run(str(BIN / "pyinfra"), "inventories/lab.py", "fact", "llmfleet.facts.Preflight", "--json")
    facts = json.loads(proc.stdout)["llmfleet.facts.Preflight"]
    assert set(facts) == {"lab-c1", "lab-c2", "lab-c3", "lab-gw1", "lab-vm1"}
    for name, fact in facts.items():
        assert (fact["os"], fact["os_version"]) == ("debian", "12"), name
        assert fact["sockets"] >= 1 and fact["numa_nodes"] >= 1 and fact["cpus"] >= 1, (name, fact)
    vm_devices = {(d["vendor"], d["device"]) for d in facts["lab-vm1"]["pci"]}
    assert ("0x1af4", "0x1000") in vm_devices  # the VM's virtio network card
    assert facts["lab-vm1"]["kernel"] != facts["lab-c1"]["kernel"]
