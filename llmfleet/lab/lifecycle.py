"""`llmfleet lab`: bring the lab up (idempotently, recovering from a crashed run) and down."""

from __future__ import annotations

import fcntl
import os
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

from llmfleet.errors import LabError
from llmfleet.lab import hosts as labhosts
from llmfleet.lab import net, services, serving, sh
from llmfleet.lab.config import (
    BRIDGE,
    GATEWAY_INDEX,
    LAB_USER,
    TOOLS,
    VM_TOOLS,
    LabNet,
    LabPaths,
    container_name,
    gateway_name,
    vm_name,
)
from llmfleet.lab.images import ensure_image
from llmfleet.lab.state import Host, LabState


def preflight(vm: bool) -> None:
    if os.geteuid() != 0:
        raise LabError("the lab needs root (it creates network namespaces, mounts and containers): "
                       "run it as root, e.g. `sudo .venv/bin/llmfleet lab up`")
    needed = dict(TOOLS)
    if vm:
        needed.update(VM_TOOLS)
    missing = {tool: pkg for tool, pkg in needed.items() if shutil.which(tool) is None}
    if missing:
        tools = ", ".join(sorted(missing))
        pkgs = " ".join(sorted(set(missing.values())))
        raise LabError(f"missing system tools: {tools}; install them with "
                       f"`apt-get install {pkgs}` (or `make sysdeps`)")


@contextmanager
def locked(paths: LabPaths):
    paths.lock_file.parent.mkdir(parents=True, exist_ok=True)
    with open(paths.lock_file, "w") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            raise LabError(f"another `llmfleet lab` command holds {paths.lock_file}; wait for it") from exc
        yield


def host_status(h: Host) -> str:
    if h.proc is None or not h.proc.alive():
        return "stopped"
    return "running" if services.tcp_open(h.address, h.ssh_port) else "booting"


def write_ssh_files(state: LabState, host_keys: dict[str, str], paths: LabPaths) -> None:
    """An OpenSSH config and known_hosts usable by ssh, pyinfra and testinfra (host keys checked)."""
    paths.ssh_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    known = {}
    if paths.known_hosts.exists():
        for line in paths.known_hosts.read_text().splitlines():
            names, key = line.split(" ", 1)
            known[names.split(",")[0]] = key
    known.update(host_keys)
    known = {n: k for n, k in known.items() if n in state.hosts}
    paths.known_hosts.write_text("".join(
        f"{n},{state.hosts[n].address} {k}\n" for n, k in sorted(known.items())))
    blocks = ["# Written by `llmfleet lab up`; removed by `llmfleet lab down`.\n"]
    for h in sorted(state.hosts.values(), key=lambda h: h.name):
        blocks.append(f"Host {h.name}\n  HostName {h.address}\n  Port {h.ssh_port}\n")
    blocks.append(
        "Host lab-*\n"
        f"  User {state.user}\n"
        f"  IdentityFile {paths.client_key}\n"
        "  IdentitiesOnly yes\n"
        f"  UserKnownHostsFile {paths.known_hosts}\n"
        "  StrictHostKeyChecking yes\n"
        "  BatchMode yes\n"
        # a connection (testinfra's shared one included) to a host that rebooted or was made
        # anew ends within 15 s instead of waiting on a dead TCP connection
        "  ServerAliveInterval 5\n"
        "  ServerAliveCountMax 3\n"
        "  LogLevel ERROR\n")
    paths.ssh_config.write_text("\n".join(blocks))
    # testinfra asks ssh for a control master (ControlMaster=auto, ControlPersist=60s) but names no
    # control path, so without one every check opens a connection of its own: a key exchange each,
    # slow on the emulated VM. Its config adds the path to the lab's; `lab ssh` and pyinfra keep a
    # connection each. `lab down` ends the masters with the lab's other processes (the state
    # folder is in their command line).
    paths.testinfra_ssh_config.write_text(
        "# Written by `llmfleet lab up` for `llmfleet lab hosts --testinfra`.\n"
        f"Include {paths.ssh_config}\n\n"
        f"Host lab-*\n  ControlPath {paths.ssh_dir}/cm-%C\n")


def _ensure_client_key(paths: LabPaths) -> None:
    paths.ssh_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    if not paths.client_key.exists():
        sh.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "llmfleet-lab",
                "-f", str(paths.client_key)])


def recover(state: LabState | None, paths: LabPaths, log=print) -> LabState | None:
    """Clean up what a killed run left behind: dead hosts and, without a state file, every
    namespace, link and mount that carries the lab's names."""
    if state is None:
        leftovers = [f"process {pid}" for pid in sh.kill_strays(paths.state_dir)]
        leftovers += net.sweep()
        if paths.hosts_dir.exists():
            for d in paths.hosts_dir.iterdir():
                labhosts.remove_host_files(d)
                leftovers.append(f"files {d}")
        if leftovers:
            log("recovered from a previous lab that was not brought down: removed "
                + ", ".join(leftovers))
        return None
    for name, h in list(state.hosts.items()):
        if host_status(h) == "stopped":
            log(f"{name}: its process is gone (previous run killed?); cleaning it up")
            labhosts.stop_host(h, paths)
            del state.hosts[name]
    return state


# Each container's systemd and its services (journald, logind, udev's watchers...) take inotify
# instances of this machine's root user. The kernel's default of 128 (fs.inotify.max_user_instances)
# ran out at the 22nd container of benchmarks/fleet_scale.py's lab: its systemd exited at boot with
# "Failed to allocate manager object: Too many open files". Raised where lower (never lowered).
INOTIFY_INSTANCES = "/proc/sys/fs/inotify/max_user_instances"
INOTIFY_BASE, INOTIFY_PER_CONTAINER = 128, 16


def inotify_instances_needed(current: int, containers: int) -> int | None:
    """The value fs.inotify.max_user_instances must be raised to for `containers`, or None when it
    is high enough already."""
    needed = INOTIFY_BASE + INOTIFY_PER_CONTAINER * containers
    return needed if current < needed else None


def _inotify_room(containers: int, log) -> None:
    path = Path(INOTIFY_INSTANCES)
    raise_to = inotify_instances_needed(int(path.read_text()), containers)
    if raise_to:
        path.write_text(f"{raise_to}\n")
        log(f"fs.inotify.max_user_instances raised to {raise_to} for {containers} container(s) "
            f"({INOTIFY_PER_CONTAINER} each beside {INOTIFY_BASE})")


def up(n_hosts: int, vm: bool, log=print, gateways: int = 0) -> LabState:
    if n_hosts < 0 or n_hosts > 40:
        raise LabError(f"--hosts {n_hosts}: the lab runs 0 to 40 container hosts")
    if gateways < 0 or gateways > 4:
        raise LabError(f"--gateways {gateways}: the lab runs 0 to 4 gateway hosts")
    preflight(vm)
    paths, lnet = LabPaths.from_env(), LabNet.from_env()
    with locked(paths):
        state = recover(LabState.load(paths), paths, log)
        if state is not None and state.subnet != str(lnet.subnet):
            raise LabError(f"a lab is up on {state.subnet}, not {lnet.subnet}: "
                           "run `llmfleet lab down` first to change the subnet")
        net.check_subnet_free(lnet)
        if state is None:
            state = LabState(subnet=str(lnet.subnet), gateway=lnet.gateway, bridge=BRIDGE, user=LAB_USER)
        c_image, _ = ensure_image(paths, "container", log)
        v_image = ensure_image(paths, "vm", log)[0] if vm else None
        state.save(paths)
        net.ensure_bridge(lnet)
        _ensure_client_key(paths)
        for name in [n for n in services.SERVICES if n not in services.AFTER_HOSTS]:
            state.services[name] = services.ensure_service(
                name, state.services.get(name), lnet.gateway, str(lnet.subnet), paths)
        state.save(paths)
        serving.ensure_all(paths, log)  # vLLM wheels, the tiny model, an API key

        wanted = [(container_name(i), i, "container") for i in range(1, n_hosts + 1)]
        wanted += [(gateway_name(i), GATEWAY_INDEX + i, "container") for i in range(1, gateways + 1)]
        _inotify_room(len({w[0] for w in wanted} | {n for n, h in state.hosts.items() if h.kind == "container"}),
                      log)
        if vm:
            wanted.append((vm_name(1), 1, "vm"))
        new_keys: dict[str, str] = {}
        started: list[Host] = []
        try:
            for name, index, kind in wanted:
                if name in state.hosts:
                    continue
                if kind == "container":
                    h, key = labhosts.start_container(index, name, lnet.container_address(index),
                                                      c_image, paths, lnet)
                    if index > GATEWAY_INDEX:
                        h.role = "gateway"
                else:
                    assert v_image is not None  # a VM is wanted only with vm, and then its image was made
                    h, key = labhosts.start_vm(index, name, lnet.vm_address(index), v_image, paths, lnet)
                state.hosts[name] = h
                state.save(paths)  # recorded before waiting: a crash now is recoverable
                new_keys[name] = key
                started.append(h)
            write_ssh_files(state, new_keys, paths)
            t0 = time.monotonic()
            labhosts.wait_for_ssh(started, paths)
            if started:
                log(f"{len(started)} host(s) answered SSH after {time.monotonic() - t0:.1f}s")
        finally:
            state.save(paths)
        ensure_prometheus(state, paths, lnet, log)
        state.save(paths)
        extra = sorted(set(state.hosts) - {w[0] for w in wanted})
        if extra:
            log(f"also running from before: {', '.join(extra)} (`llmfleet lab down` removes all)")
        return state


def ensure_prometheus(state: LabState, paths: LabPaths, lnet: LabNet, log=print) -> None:
    """The lab's Prometheus loads what `llmfleet monitoring` renders for the lab's inventory now
    (written again at each `lab up`: hosts come and go), reloaded when it was running."""
    from llmfleet import monitoring
    from llmfleet.inventory import validated

    if not state.hosts:
        log("no lab hosts: the lab's Prometheus is not started")
        return
    inventory = "inventories/lab.py"
    monitoring.write(inventory, monitoring.hosts_from(validated(inventory)), services.prometheus_config_dir(paths))
    current = state.services.get("prometheus")
    svc = services.ensure_service("prometheus", current, lnet.gateway, str(lnet.subnet), paths)
    if current is not None and svc is current:
        services.reload(svc)
    state.services["prometheus"] = svc


def service(name: str, action: str, log=print) -> str:
    """Stop or start one of the lab's machine-side services (to see what the hosts do without it)."""
    paths, lnet = LabPaths.from_env(), LabNet.from_env()
    if name not in services.SERVICES:
        raise LabError(f"no lab service named {name!r}; the lab has: {', '.join(services.SERVICES)}")
    with locked(paths):
        state = LabState.load(paths)
        if state is None:
            raise LabError("no lab is up: run `llmfleet lab up` first")
        current = state.services.get(name)
        if action == "stop":
            if current is not None:
                current.proc.stop(grace_s=5)
            return f"{name}: stopped"
        if name in services.AFTER_HOSTS:
            ensure_prometheus(state, paths, lnet, log)
        else:
            state.services[name] = services.ensure_service(name, current, lnet.gateway, str(lnet.subnet), paths)
        state.save(paths)
        svc = state.services[name]
        return f"{name}: running on {svc.address}:{svc.port}"


def down(log=print) -> list[str]:
    """Remove every process, namespace, link, mount and file the lab made; return what was removed."""
    paths = LabPaths.from_env()
    if os.geteuid() != 0:
        raise LabError("the lab needs root: run `llmfleet lab down` as root")
    removed: list[str] = []
    with locked(paths):
        state = LabState.load(paths)
        if state is not None:
            # all at once: a container's systemd takes seconds to shut its services down (up to
            # the 15 s grace), and the hosts do not wait on each other
            hosts = list(state.hosts.values())
            with ThreadPoolExecutor(max_workers=max(1, len(hosts))) as pool:
                list(pool.map(lambda h: labhosts.stop_host(h, paths), hosts))
            removed += [f"host {h.name}" for h in hosts]
            for name, svc in state.services.items():
                svc.proc.stop(grace_s=5)
                removed.append(f"service {name}")
        if net.link_exists(BRIDGE):
            net.delete_link(BRIDGE)
            removed.append(f"bridge {BRIDGE}")
        sh.kill_strays(paths.state_dir)
        removed += net.sweep()
        if paths.hosts_dir.exists():
            for d in paths.hosts_dir.iterdir():
                labhosts.remove_host_files(d)
        if paths.state_dir.exists():
            shutil.rmtree(paths.state_dir)
            removed.append(f"dir {paths.state_dir}")
    paths.lock_file.unlink(missing_ok=True)
    return removed


def load() -> LabState:
    state = LabState.load(LabPaths.from_env())
    if state is None:
        raise LabError("no lab is up: run `llmfleet lab up` first")
    return state


def status_rows(state: LabState) -> list[dict]:
    paths = LabPaths.from_env()
    return [
        {"name": h.name, "kind": h.kind, "role": h.role, "address": h.address, "ssh_port": h.ssh_port,
         "state": host_status(h), "user": state.user, "image": h.image,
         "ssh_config": str(paths.ssh_config)}
        for h in sorted(state.hosts.values(), key=lambda h: (h.kind != "container", h.name))
    ]


def testinfra_hosts(state: LabState) -> str:
    """testinfra's host URLs for the lab, through the ssh config that shares one connection per
    host among its checks (write_ssh_files)."""
    paths = LabPaths.from_env()
    return ",".join(f"ssh://{r['name']}?ssh_config={paths.testinfra_ssh_config}&sudo=true"
                    for r in status_rows(state))


def ssh_command(name: str, command: list[str]) -> list[str]:
    state = load()
    if name not in state.hosts:
        raise LabError(f"no lab host named {name!r}; the lab has: {', '.join(sorted(state.hosts))}")
    return labhosts.ssh_args(LabPaths.from_env(), name, "-t" if not command else "-T",
                              connect_timeout=30) + command
