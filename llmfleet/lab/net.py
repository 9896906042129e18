"""The lab's network: one bridge on the machine, each host in its own namespace (or a VM on a tap).

Hosts get an address on the lab subnet and **no default route**: they can reach each other and
the machine's services on the bridge address, and nothing else (a packet to any other address
fails at once with "network unreachable" inside the host).
"""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path

from llmfleet.errors import LabError
from llmfleet.lab import sh
from llmfleet.lab.config import BRIDGE, PREFIX, LabNet


def _links() -> list[dict]:
    return json.loads(sh.run(["ip", "-j", "addr", "show"]).stdout or "[]")


def link_exists(name: str) -> bool:
    return sh.ok(["ip", "link", "show", "dev", name])


def netns_list() -> list[str]:
    out = sh.run(["ip", "-j", "netns", "list"], check=False).stdout.strip()
    return [entry["name"] for entry in json.loads(out)] if out else []


def check_subnet_free(net: LabNet) -> None:
    """Fail if another interface of the machine already uses an address in the lab subnet."""
    for link in _links():
        if link.get("ifname") == BRIDGE:
            continue
        for addr in link.get("addr_info", []):
            if addr.get("family") != "inet":
                continue
            iface = ipaddress.IPv4Interface(f"{addr['local']}/{addr['prefixlen']}")
            if iface.network.overlaps(net.subnet):
                raise LabError(
                    f"the lab subnet {net.subnet} overlaps {iface} on interface {link['ifname']}; "
                    "choose a free one, e.g. LLMFLEET_LAB_SUBNET=10.78.0.0/24 llmfleet lab up")


def ensure_bridge(net: LabNet) -> None:
    if not link_exists(BRIDGE):
        sh.run(["ip", "link", "add", BRIDGE, "type", "bridge"])
    want = f"{net.gateway}/{net.subnet.prefixlen}"
    have = [f"{a['local']}/{a['prefixlen']}" for link in _links() if link.get("ifname") == BRIDGE
            for a in link.get("addr_info", []) if a.get("family") == "inet"]
    for other in have:
        if other != want:
            sh.run(["ip", "addr", "del", other, "dev", BRIDGE])
    if want not in have:
        sh.run(["ip", "addr", "add", want, "dev", BRIDGE])
    sh.run(["ip", "link", "set", BRIDGE, "up"])


def create_container_net(netns: str, veth: str, address: str, net: LabNet) -> None:
    """A namespace whose eth0 is one end of a veth pair; the other end joins the bridge."""
    delete_netns(netns)
    delete_link(veth)
    sh.run(["ip", "netns", "add", netns])
    sh.run(["ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", netns])
    sh.run(["ip", "link", "set", veth, "master", BRIDGE, "up"])
    sh.run(["ip", "-n", netns, "addr", "add", f"{address}/{net.subnet.prefixlen}", "dev", "eth0"])
    sh.run(["ip", "-n", netns, "link", "set", "eth0", "up"])
    sh.run(["ip", "-n", netns, "link", "set", "lo", "up"])


def create_tap(tap: str) -> None:
    delete_link(tap)
    if not Path("/dev/net/tun").exists():
        raise LabError("/dev/net/tun is missing: the VM host needs a tap device (modprobe tun)")
    sh.run(["ip", "tuntap", "add", "dev", tap, "mode", "tap"])
    sh.run(["ip", "link", "set", tap, "master", BRIDGE, "up"])


def delete_link(name: str) -> None:
    if link_exists(name):
        sh.run(["ip", "link", "del", name], check=False)


def delete_netns(name: str) -> None:
    if name in netns_list():
        sh.run(["ip", "netns", "del", name], check=False)


def sweep() -> list[str]:
    """Remove every namespace and link the lab names with its prefix; return what was removed."""
    removed = []
    for ns in netns_list():
        if ns.startswith(PREFIX + "-"):
            delete_netns(ns)
            removed.append(f"netns {ns}")
    for link in _links():
        name = link.get("ifname", "")
        if name.startswith(PREFIX + "-") and link_exists(name):
            delete_link(name)
            removed.append(f"link {name}")
    return removed
