"""How testinfra reaches an inventory host: a host URL, and its ssh settings in an OpenSSH config."""

from __future__ import annotations

import re
from pathlib import Path

from llmfleet.errors import AuditError
from llmfleet.schema import KEX_ALGORITHMS

# The control socket's name in its folder (%C: a 40-character hash of the connection). ssh makes the
# socket at that path plus a 17-character suffix, and a socket's path is at most 107 bytes
# (sun_path, sys/un.h): past that ssh refuses to run at all ("ControlPath too long").
CONTROL_NAME = "cm-%C"
FOLDER_PATH_MAX = 107 - 17 - len("/cm-") - 40  # the longest folder path the sockets leave room for


KEX_SETTING = "audit_ssh_kex_algorithms"


def check(hosts: list[dict]) -> None:
    """Each host's ssh settings of the audit that go into its ssh config, before any host is asked:
    a value that is not one (a line of its own, say) stops the audit, named."""
    for h in hosts:
        value = h["data"].get(KEX_SETTING)
        if value is not None and not (isinstance(value, str) and re.fullmatch(KEX_ALGORITHMS, value)):
            raise AuditError(f"host {h['name']}: {KEX_SETTING} = {value!r} is not an ssh KexAlgorithms list "
                             "(fix: names separated by commas, after an optional + - or ^, e.g. "
                             "-sntrup761x25519-sha512*, or None for ssh's default; group_data/all.py)")


def testinfra_url(name: str, data: dict, ssh_config: Path) -> str:
    """A testinfra host URL for an inventory host; its ssh settings go to ``ssh_config`` (appended),
    so that testinfra's host name is the inventory name (verify/conftest.py maps it back), with a
    control socket beside it so that a host's checks share one connection."""
    if name.startswith("@local"):
        return "local://"
    check([{"name": name, "data": data}])
    lines = [f"Host {name}"]
    if data.get("ssh_hostname"):
        lines.append(f"  HostName {data['ssh_hostname']}")
    for key, opt in (("ssh_port", "Port"), ("ssh_user", "User"), ("ssh_key", "IdentityFile"),
                     ("ssh_known_hosts_file", "UserKnownHostsFile")):
        if data.get(key):
            lines.append(f"  {opt} {data[key]}")
    if data.get("ssh_strict_host_key_checking"):
        lines.append(f"  StrictHostKeyChecking {data['ssh_strict_host_key_checking']}")
    lines.append("  ConnectTimeout 10")
    if data.get(KEX_SETTING):
        lines.append(f"  KexAlgorithms {data[KEX_SETTING]}")
    # one SSH connection per host for all its checks (testinfra asks for ControlMaster=auto but
    # gives no ControlPath, so without this line every command would open a connection)
    lines.append(f"  ControlPath {ssh_config.parent}/{CONTROL_NAME}")
    with ssh_config.open("a") as f:
        f.write("\n".join(lines) + "\n")
    sudo = "&sudo=true" if data.get("ssh_user") not in (None, "root") else ""
    return f"ssh://{name}?ssh_config={ssh_config}{sudo}"
