"""Machine-side services that lab hosts use instead of the outside world.

- NTP: chronyd serving the machine's clock (``local stratum``) on the bridge address, without
  steering the machine's own clock (``-x``). Lab hosts point chrony at it.
- apt proxy: apt-cacher-ng on the bridge address; lab hosts reach Debian's packages only
  through it (they have no route elsewhere), and packages are cached across runs.
- wheels: a folder of Python wheels served over HTTP, the lab's stand-in for an internal PyPI
  mirror; ``llmfleet lab wheels REQ...`` fills it.
- syslog: the central syslog receiver (the distribution's rsyslog, TCP) the hosts forward their
  logs to (group data log_forward_target); what it receives goes to ``syslog/received.log``.
- audit_metrics: a node exporter (the distribution's) with only its textfile collector, reading
  the folder the audits write their metrics into (group data audit_metrics_dir), as on the
  machine an operator runs the audits from.
- prometheus: the distribution's Prometheus, loading what `llmfleet monitoring` renders for the
  lab's inventory (rendered again, and Prometheus reloaded, at every `lab up`).

Every service listens on the bridge address only.
"""

from __future__ import annotations

import errno
import socket
import struct
import sys
import time

from llmfleet.errors import LabError
from llmfleet.lab import sh
from llmfleet.lab.config import (
    APT_PROXY_PORT,
    AUDIT_METRICS_PORT,
    NTP_PORT,
    PROMETHEUS_PORT,
    SYSLOG_PORT,
    WHEELS_PORT,
    LabPaths,
)
from llmfleet.lab.state import Service

# apt-cacher-ng (3.7.4, Debian 12) displaces a volatile file's download (an index: InRelease,
# Packages) whenever another client asks for the same file while that download has not received
# its upstream header yet: TFileItemRegistry::Create tests `now > m_nTimeDlStarted +
# ResponseFreezeDetectTime`, and m_nTimeDlStarted is still 0 then. Several lab hosts running
# `apt-get update` at once each start their own download of every index; a displaced one answers
# its client with a header and no body (225 bytes), apt 2.6 prints `Ign:` for that InRelease and
# in 3 of 8 trials of 6 clients at once waited forever (Acquire::http::Timeout never fired); two
# displacements in one second collide on one `<file>.<unix time>` name ("Failure to move file ... File
# exists"). With the freeze-detect time beyond every Unix time, a second client shares the
# pending download instead. What that time is for, a download stuck behind one very slow client
# for longer than the index's freshness, does not arise on the lab's own bridge.
ACNG_NEVER_DISPLACE_S = 2**31 - 1

# Names and ports, in one place (the deploy's lab group data reads them from the state).
SERVICES = {"ntp": ("udp", NTP_PORT), "apt_proxy": ("tcp", APT_PROXY_PORT), "wheels": ("tcp", WHEELS_PORT),
            "syslog": ("tcp", SYSLOG_PORT), "audit_metrics": ("tcp", AUDIT_METRICS_PORT),
            "prometheus": ("tcp", PROMETHEUS_PORT)}
# started after the hosts (it loads the monitoring rendered from the lab's inventory)
AFTER_HOSTS = ("prometheus",)


def syslog_received(paths: LabPaths):
    """What the lab's syslog receiver got: `<inventory host name> <app name> <message>` a line."""
    return paths.services_dir / "syslog" / "received.log"


def audit_metrics_dir(paths: LabPaths):
    """The textfile folder the audit_metrics node exporter reads (group_data/lab.py: audit_metrics_dir)."""
    return paths.services_dir / "audit_metrics" / "textfile"


def prometheus_config_dir(paths: LabPaths):
    """Where `lab up` writes what `llmfleet monitoring` renders for the lab; Prometheus loads it."""
    return paths.services_dir / "prometheus" / "config"


def port_holder(proto: str, port: int) -> str:
    out = sh.run(["ss", "-Hlnp", "-u" if proto == "udp" else "-t", f"sport = :{port}"], check=False).stdout
    return " ".join(out.split()) or "unknown process"


def check_port_free(proto: str, address: str, port: int) -> None:
    kind = socket.SOCK_DGRAM if proto == "udp" else socket.SOCK_STREAM
    with socket.socket(socket.AF_INET, kind) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((address, port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                raise LabError(
                    f"port {port}/{proto} on {address} is taken ({port_holder(proto, port)}); "
                    "the lab's services need it: stop that process, or move the lab to another "
                    "subnet with LLMFLEET_LAB_SUBNET") from exc
            raise


def ntp_query(address: str, port: int = NTP_PORT, timeout: float = 1.0) -> float:
    """Ask an NTP server for its time (SNTP client request); return the server's Unix time."""
    packet = b"\x1b" + 47 * b"\0"  # LI=0, version 3, mode 3 (client)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(timeout)
        s.sendto(packet, (address, port))
        data, _ = s.recvfrom(512)
    seconds, fraction = struct.unpack("!II", data[40:48])
    return seconds - 2208988800 + fraction / 2**32


def tcp_open(address: str, port: int) -> bool:
    try:
        with socket.create_connection((address, port), timeout=0.5):
            return True
    except OSError:
        return False


def healthy(name: str, svc: Service) -> bool:
    if not svc.proc.alive():
        return False
    if name == "ntp":
        try:
            ntp_query(svc.address, svc.port)
            return True
        except OSError:
            return False
    return tcp_open(svc.address, svc.port)


def _command(name: str, address: str, subnet: str, paths: LabPaths) -> tuple[list[str], str]:
    d = paths.services_dir / name
    d.mkdir(parents=True, exist_ok=True)
    if name == "ntp":
        conf = d / "chrony.conf"
        conf.write_text(
            "# llmfleet lab NTP server: serves this machine's clock to the lab hosts\n"
            "local stratum 8\n"
            f"allow {subnet}\n"
            f"bindaddress {address}\n"
            f"port {NTP_PORT}\n"
            "cmdport 0\n"
            f"driftfile {d}/drift\n"
            f"pidfile {d}/chronyd.pid\n")
        return ["chronyd", "-d", "-x", "-u", "root", "-f", str(conf)], str(conf)
    if name == "apt_proxy":
        # Our own config: plain proxy mode, no remapping to mirror lists (those name mirrors the
        # machine may not reach); requests go to the hosts the lab hosts' apt sources name.
        cache = paths.apt_cache_dir
        cache.mkdir(parents=True, exist_ok=True)
        conf = d / "acng.conf"
        conf.write_text(
            "# llmfleet lab apt proxy\n"
            f"CacheDir: {cache}\nLogDir: {d}\nSupportDir: /usr/lib/apt-cacher-ng\n"
            f"Port: {APT_PROXY_PORT}\nBindAddress: {address}\n"
            f"PidFile: {d}/acng.pid\nSocketPath: {d}/acng.socket\nExThreshold: 4\n"
            f"ResponseFreezeDetectTime: {ACNG_NEVER_DISPLACE_S}\n")
        return ["apt-cacher-ng", "-c", str(d), "ForeGround=1"], str(d)
    if name == "wheels":
        paths.wheels_dir.mkdir(parents=True, exist_ok=True)
        return [sys.executable, "-m", "http.server", "--bind", address, "--directory",
                str(paths.wheels_dir), str(WHEELS_PORT)], str(paths.wheels_dir)
    if name == "syslog":
        conf = d / "rsyslog.conf"
        conf.write_text(
            "# llmfleet lab syslog receiver: what the hosts forward (TCP, octet-counted), one line each\n"
            f'global(workDirectory="{d}")\n'
            'module(load="imtcp")\n'
            'template(name="received" type="string" string="%HOSTNAME% %APP-NAME% %msg%\\n")\n'
            'ruleset(name="received") {\n'
            f'    action(type="omfile" file="{syslog_received(paths)}" template="received" flushOnTXEnd="on")\n'
            "}\n"
            f'input(type="imtcp" address="{address}" port="{SYSLOG_PORT}" ruleset="received")\n')
        return ["rsyslogd", "-n", "-f", str(conf), "-i", str(d / "rsyslogd.pid")], str(conf)
    if name == "audit_metrics":
        audit_metrics_dir(paths).mkdir(parents=True, exist_ok=True)
        return ["prometheus-node-exporter", f"--web.listen-address={address}:{AUDIT_METRICS_PORT}",
                "--collector.disable-defaults", "--collector.textfile",
                f"--collector.textfile.directory={audit_metrics_dir(paths)}"], str(audit_metrics_dir(paths))
    if name == "prometheus":
        config = prometheus_config_dir(paths) / "prometheus.yml"
        return ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={d / 'data'}",
                "--storage.tsdb.retention.time=1d", f"--web.listen-address={address}:{PROMETHEUS_PORT}"], str(config)
    raise ValueError(name)


def reload(svc: Service) -> None:
    """A running service reads its configuration again (Prometheus: SIGHUP)."""
    import os
    import signal

    os.kill(svc.proc.pid, signal.SIGHUP)


def ensure_service(name: str, current: Service | None, address: str, subnet: str,
                   paths: LabPaths) -> Service:
    """Reuse a healthy service, else (re)start it; fail with the service's log if it won't come up."""
    proto, port = SERVICES[name]
    if current is not None and (current.address, current.port) == (address, port) and healthy(name, current):
        return current
    if current is not None:
        current.proc.stop()
    check_port_free(proto, address, port)
    args, marker = _command(name, address, subnet, paths)
    log = paths.services_dir / name / "log"
    svc = Service(name=name, address=address, port=port, proc=sh.spawn(args, log, marker, cwd=log.parent))
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if healthy(name, svc):
            return svc
        if not svc.proc.alive():
            break
        time.sleep(0.2)
    svc.proc.stop()
    tail = "\n  ".join(log.read_text(errors="replace").splitlines()[-8:]) if log.exists() else ""
    raise LabError(f"the lab's {name} service did not come up on {address}:{port}/{proto}:\n  {tail}")
