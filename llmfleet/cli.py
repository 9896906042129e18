"""The `llmfleet` command."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from llmfleet.command import Group, console, err
from llmfleet.onboard import STAGES
from llmfleet.probe.cli import probe_group, tune_cmd


@click.group(cls=Group)
@click.version_option(package_name="llmfleet")
def main() -> None:
    """Converge and verify GPU servers for serving LLMs with vLLM."""


main.add_command(probe_group)  # llmfleet probe: llmfleet/probe/cli.py
main.add_command(tune_cmd)  # llmfleet tune: llmfleet/probe/cli.py, beside the probe it measures with


@main.group(cls=Group)
def lab() -> None:
    """Disposable local test hosts: containers (systemd-nspawn) and a VM (qemu)."""


def _log(msg: str) -> None:
    err.print(msg, highlight=False, markup=False)


def _status_table(rows: list[dict]) -> Table:
    table = Table(title="llmfleet lab")
    for col in ("name", "kind", "role", "address", "ssh_port", "state"):
        table.add_column(col)
    for r in rows:
        colour = {"running": "green", "booting": "yellow"}.get(r["state"], "red")
        table.add_row(r["name"], r["kind"], r["role"], r["address"], str(r["ssh_port"]),
                      f"[{colour}]{r['state']}[/]")
    return table


@lab.command("up")
@click.option("--hosts", "n_hosts", default=3, show_default=True, type=int,
              help="Container hosts to have running (lab-c1..lab-cN); running ones are kept.")
@click.option("--vm", is_flag=True, help="Also run one VM host (lab-vm1) with its own kernel.")
@click.option("--gateways", "n_gateways", default=0, show_default=True, type=int,
              help="Fleet gateway hosts to have running (lab-gw1..lab-gwN: containers in lab_gateways, in front of "
                   "the serving hosts).")
def lab_up(n_hosts: int, vm: bool, n_gateways: int) -> None:
    """Create the lab hosts (harmless when they already run; recovers from a killed run)."""
    from llmfleet import lab as labmod

    state = labmod.up(n_hosts, vm, log=_log, gateways=n_gateways)
    console.print(_status_table(labmod.status_rows(state)))


@lab.command("down")
def lab_down() -> None:
    """Remove every process, namespace, link, mount and file the lab made (caches stay)."""
    from llmfleet import lab as labmod

    removed = labmod.down(log=_log)
    console.print(f"lab down: removed {len(removed)} item(s)" + (": " + ", ".join(removed) if removed else ""))


@lab.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print name, kind, role, address, SSH port, state as JSON.")
def lab_status(as_json: bool) -> None:
    """List the lab hosts and their state."""
    from llmfleet import lab as labmod

    rows = labmod.status_rows(labmod.load())
    if as_json:
        click.echo(json.dumps({"hosts": rows}, indent=2))
    else:
        console.print(_status_table(rows))


@lab.command("hosts")
@click.option("--testinfra", "fmt", flag_value="testinfra", default=True,
              help="The value for `pytest verify/ --hosts=...` (default).")
@click.option("--names", "fmt", flag_value="names", help="One host name a line.")
def lab_hosts(fmt: str) -> None:
    """Print the lab hosts for other tools."""
    from llmfleet import lab as labmod

    state = labmod.load()
    if fmt == "names":
        click.echo("\n".join(r["name"] for r in labmod.status_rows(state)))
    else:
        click.echo(labmod.testinfra_hosts(state))


@lab.command("ssh", context_settings={"ignore_unknown_options": True})
@click.argument("name")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def lab_ssh(name: str, command: tuple[str, ...]) -> None:
    """Open a shell on lab host NAME (or run COMMAND there)."""
    from llmfleet.lab.lifecycle import ssh_command

    args = ssh_command(name, list(command))
    os.execvp(args[0], args)


@lab.command("wheels")
@click.argument("requirements", nargs=-1, required=True)
def lab_wheels(requirements: tuple[str, ...]) -> None:
    """Add wheels (with their dependencies) to the lab's package mirror."""
    from llmfleet.lab.wheels import add_wheels

    for line in add_wheels(list(requirements)):
        console.print(line, highlight=False)


@lab.command("service")
@click.argument("action", type=click.Choice(["stop", "start"]))
@click.argument("name")
def lab_service(action: str, name: str) -> None:
    """Stop or start one of the lab's services on this machine (ntp, apt_proxy, wheels, syslog,
    audit_metrics, prometheus), e.g. the syslog receiver, to see the hosts keep what they send."""
    from llmfleet.lab.lifecycle import service

    console.print(service(name, action, log=_log), highlight=False)


@lab.command("prometheus")
@click.option("--json", "as_json", is_flag=True, help="Print the address and the targets as JSON.")
@click.option("--settle", "settle_s", type=click.FloatRange(min=0), default=30, show_default=True,
              help="Seconds to wait, at most, for every target to be scraped and every rule evaluated since "
                   "this command began, so that the alerts judge the targets as they are now (0: no wait).")
def lab_prometheus(as_json: bool, settle_s: float) -> None:
    """The lab's Prometheus: its address, what it scrapes (job, host, target, health) and the alerts firing,
    as of a scrape and a rule evaluation after this command began (an audit just run is counted)."""
    from llmfleet.lab.prometheus import summary

    doc = summary(settle_s)
    if as_json:
        click.echo(json.dumps(doc, indent=2))
        return
    wide = Console(width=max(console.width, 140))
    wide.print(f"Prometheus: {doc['url']} (loads {doc['config']}; {doc['rules']} alert rules)", highlight=False)
    table = Table(title="what it scrapes")
    for col in ("job", "host", "target", "health", "last error"):
        table.add_column(col)
    for t in doc["targets"]:
        colour = "green" if t["health"] == "up" else "red"
        table.add_row(t["job"], t["host"], t["target"], f"[{colour}]{t['health']}[/]", t["error"])
    wide.print(table)
    def alerts(state: str) -> str:
        return ", ".join(f"{a['name']} ({a['host']})" for a in doc["alerts"] if a["state"] == state)

    if not doc["settled"]:
        wide.print(f"(not every target was scraped, and every rule evaluated, in the {settle_s:g} s waited: "
                   "the alerts below may judge older values)", highlight=False)
    wide.print(f"alerts firing: {alerts('firing') or 'none'}", highlight=False)
    if alerts("pending"):
        wide.print(f"alerts pending (they fire if they hold for their `for:`): {alerts('pending')}", highlight=False)


@main.command("monitoring")
@click.option("--inventory", default="inventories/lab.py", show_default=True, help="pyinfra inventory to read.")
@click.option("--out", "out_dir", default="monitoring", show_default=True, help="Folder for the rendered files.")
def monitoring_cmd(inventory: str, out_dir: str) -> None:
    """Render a Prometheus configuration for the inventory: prometheus.yml, the scrape targets of
    every exporter and vLLM endpoint, and the alert rules (GPUs, hosts, vLLM, audits)."""

    from llmfleet.inventory import validated
    from llmfleet.monitoring import hosts_from, write

    for path in write(inventory, hosts_from(validated(inventory)), Path(out_dir)):
        console.print(f"wrote {path}")


@main.command("layout")
@click.argument("inventory")
@click.option("--limit", multiple=True, help="Only these hosts or groups (repeatable).")
@click.option("--data", multiple=True, help="Override a setting for every host, as pyinfra's --data (repeatable), "
              "e.g. --data vllm_layout=4x2 to try a layout before writing it into group data.")
def layout_cmd(inventory: str, limit: tuple[str, ...], data: tuple[str, ...]) -> None:
    """What each serving host's layout resolves to (instances, GPUs, parallel sizes, NUMA nodes,
    ports), and the path its quantization and fp8 KV cache take on its GPUs, checked as the deploy
    checks it, without touching any host. Exit 1: a host's data is refused (each problem with its fix)."""
    from llmfleet import vllm_layout
    from llmfleet.gpu_guardrails import precision_paths
    from llmfleet.inventory import read as read_inventory
    from llmfleet.settings import SettingsError, validate

    refused = []
    wide = Console(width=max(console.width, 140))
    for h in read_inventory(inventory, data=list(data) or None, limit=list(limit) or None):
        try:
            settings = validate(h["name"], h["data"])
        except SettingsError as exc:
            refused.append(str(exc))
            continue
        if not settings.vllm_enabled:
            continue
        profile = settings.profile
        for path in precision_paths(settings):  # the kernels its quantization and fp8 KV cache get
            wide.print(f"{h['name']}: {path}", highlight=False)
        instances = vllm_layout.instances(settings)
        if instances is None:
            tp = settings.vllm_flags.get("tensor-parallel-size", 1)
            wide.print(f"{h['name']}: no layout: vllm.service on port {settings.vllm_port}, all "
                       f"{profile.count if profile else 0} GPUs, tensor-parallel size {tp}", highlight=False)
            continue
        table = Table(title=f"{h['name']}: vllm_layout = {settings.vllm_layout!r}, front door on port "
                            f"{settings.vllm_port} (metrics {settings.frontdoor_metrics_port})")
        for col in ("instance", "unit", "port", "GPUs", "TP x PP", "NUMA node", "memory per instance"):
            table.add_column(col)
        for inst in instances:
            nodes = vllm_layout.numa_nodes_of(profile, inst.gpus)
            memory = f"{len(inst.gpus) * profile.memory_mib / 1024:.0f} GiB" if profile else "-"
            table.add_row(inst.name, inst.unit_name, str(inst.port), ",".join(map(str, inst.gpus)) or "-",
                          f"{inst.tensor_parallel_size} x {inst.pipeline_parallel_size}",
                          ",".join(map(str, nodes)) or (f"CPUs {inst.cpus}" if inst.cpus else "not known"), memory)
        wide.print(table)
    for problem in refused:
        err.print(f"[bold red]refused:[/] {problem}", highlight=False, markup=True, soft_wrap=True)
    sys.exit(1 if refused else 0)


STATE_DIR_HELP = ("Where onboarding records each host (hardware fingerprint, progress); audits compare with it. "
                  "Default: $LLMFLEET_STATE_DIR or fleet/.")


def _state_dir(value: str | None):
    from llmfleet.audit.fingerprint import state_dir

    return state_dir(value)


@main.command("audit")
@click.argument("inventory", required=False)
@click.option("--from-prometheus", "prometheus", metavar="URL", help="No host is asked: the report from the audit "
              "metrics Prometheus holds (every host's self-audit, the control machine's audits: the latest of each "
              "host), e.g. http://prometheus:9090. Config drift is only in the control machine's audits.")
@click.option("--limit", multiple=True, help="Only these hosts or groups (repeatable; with --from-prometheus: "
              "host names).")
@click.option("--waivers", "waivers_file", type=click.Path(dir_okay=False), help="Waivers (YAML): check, hosts, "
              "reason, expires.")
@click.option("--state-dir", help=STATE_DIR_HELP)
@click.option("--out-dir", default="reports/audit", show_default=True, help="Reports go to OUT/<timestamp>/.")
@click.option("--workers", type=click.IntRange(min=1), help="Verify processes run at once, the hosts dealt "
              "among them. Default: one per core of half this machine's cores (the dry run runs beside them "
              "on the other half; all of them with --skip config), at least 4 hosts each.")
@click.option("--skip", type=click.Choice(["hardware", "config", "state"]), multiple=True,
              help="Leave a kind of drift out (repeatable).")
@click.option("--data", multiple=True, help="Override a setting for every host, as pyinfra's --data (repeatable).")
@click.option("--shards", type=int, help="pyinfra processes the deploy's dry run is split into, run at once. "
              "Default: one per core of half this machine's cores (the verify suite runs beside them on the "
              "other half; all of them with --skip state), at least 4 hosts each.")
def audit_cmd(inventory, prometheus, limit, waivers_file, state_dir, out_dir, workers, skip, data, shards) -> None:
    """Which hosts no longer match what is declared, and how: config drift (the deploy's dry run),
    state drift (the verify suite), hardware drift (against the fingerprint recorded at onboarding).
    Exit 0: clean; 1: drift found (or a host unreachable, or a waiver expired); 2: could not run."""

    from llmfleet.audit import report
    from llmfleet.audit.run import audit, from_prometheus

    def log(message: str) -> None:
        err.print(message, highlight=False)

    waivers_path = Path(waivers_file) if waivers_file else None
    if prometheus:
        if inventory or workers or skip or data or shards:
            raise click.UsageError("--from-prometheus reads what Prometheus holds: no INVENTORY, --workers, --skip, "
                                   "--data or --shards (fix: llmfleet audit --from-prometheus URL [--limit HOST])")
        doc, paths = from_prometheus(prometheus, list(limit) or None, Path(out_dir), waivers_path, log=log)
    elif not inventory:
        raise click.UsageError("give an INVENTORY (llmfleet audit inventories/prod.py), or --from-prometheus URL")
    else:
        doc, paths = audit(inventory, list(limit) or None, _state_dir(state_dir), Path(out_dir), waivers_path,
                           workers, tuple(skip), log=log, data=list(data) or None, shards=shards)
    wide = Console(width=max(console.width, 140))
    for part in report.terminal(doc):
        wide.print(part, highlight=False)
    wide.print(f"reports: {paths['json']}, {paths['junit']}, {paths['html']}", highlight=False)
    sys.exit(doc["exit_status"])


@main.command("deploy")
@click.argument("inventory")
@click.option("--limit", multiple=True, help="Only these hosts or groups (repeatable).")
@click.option("--data", multiple=True, help="Override a setting for every host, as pyinfra's --data (repeatable).")
@click.option("--shards", type=int, help="pyinfra processes run at once, each on a share of the hosts. Default: "
              "one per core of this machine, at least 4 hosts each.")
@click.option("--in-step", is_flag=True, help="One pyinfra process, every host waiting for all at each operation "
              "(as plain `pyinfra INV deploy.py -y`).")
@click.option("--out-dir", default="reports/deploy", show_default=True, help="Logs and summary go to OUT/<timestamp>/.")
def deploy_cmd(inventory, limit, data, shards, in_step, out_dir) -> None:
    """Converge the hosts as `pyinfra INVENTORY deploy.py -y` does, without the slowest host setting the
    pace: hosts run their operations without waiting for each other (pyinfra --no-wait), in shards of
    one pyinfra process each, while the reboot and vLLM rolls keep reboot_max_unavailable and
    vllm_max_unavailable across the whole fleet. Settings of every host are checked before any host is
    touched. Exit 0: every host converged; 1: a host failed (named, with the operation)."""

    from llmfleet import fleetrun

    summary = fleetrun.deploy(inventory, list(limit) or None, list(data), shards, Path(out_dir), in_step,
                              log=_log)
    hosts = summary["hosts"]
    changed = {h: o for h, o in hosts.items() if o["ok"] and o["changed"]}
    for h, o in sorted(changed.items()):
        console.print(f"{h}: changed by {len(o['changed'])} operation(s): " + "; ".join(o["changed"][:3])
                      + (" ..." if len(o["changed"]) > 3 else ""), highlight=False)
    for h in summary["failed"]:
        o = hosts[h]
        console.print(f"[bold red]{h}: failed[/] at: {o['failed']} (shard {o['shard']}: its log "
                      f"{summary['shards'][o['shard'] - 1]['log']})", highlight=False)
    for roll_name in ("reboot", "vllm"):
        if summary[f"{roll_name}_roll_stopped"]:
            console.print(f"[bold red]the {roll_name} roll stopped after {summary[f'{roll_name}_roll_stopped']}[/]: "
                          "the hosts after it were left as they were", highlight=False)
    per = ", ".join(f"shard {s['index']} {len(s['hosts'])} host(s) {s['seconds']} s" for s in summary["shards"])
    console.print(f"deploy: {len(hosts) - len(summary['failed'])} of {len(hosts)} host(s) converged "
                  f"({len(changed)} changed) in {summary['seconds']} s ({per}); summary {summary['path']}",
                  highlight=False)
    sys.exit(1 if summary["failed"] else 0)


@main.command("onboard")
@click.argument("inventory")
@click.option("--limit", "host", required=True, help="The host to onboard (its inventory name).")
@click.option("--state-dir", help=STATE_DIR_HELP)
@click.option("--out-dir", default="reports/audit", show_default=True, help="Where its first audit report goes.")
@click.option("--restart", is_flag=True, help="Run every stage again, from preflight.")
@click.option("--stop-after", type=click.Choice(list(STAGES)[:-1]),
              help="Stop after this stage (run again to continue).")
@click.option("--recheck", is_flag=True,
              help="On an onboarded host: run the acceptance checks again, keep the result beside the one "
                   "kept at onboarding and compare with it (exit 1 when a figure is worse beyond "
                   "acceptance_tolerance).")
def onboard_cmd(inventory, host, state_dir, out_dir, restart, stop_after, recheck) -> None:
    """Bring a new server in: preflight (with the model storage's speed), deploy, verify, acceptance
    (GPU interconnect, model storage, DCGM's long diagnostic, burn-in, probe), record its hardware
    fingerprint and acceptance result, first audit. Resumable: running it again continues where it
    stopped."""

    from llmfleet.onboard import onboard
    from llmfleet.onboard import recheck as recheck_host

    if recheck:
        differences = recheck_host(inventory, host, _state_dir(state_dir), Path(out_dir),
                                   log=lambda m: console.print(m, highlight=False))
        for d in differences:
            console.print(f"{host}: {d.what}: at acceptance {d.kept}, now {d.now} ({d.why})", highlight=False)
        if differences:
            sys.exit(1)
        console.print(f"[bold green]{host}: as good as at acceptance[/]", highlight=False)
        return
    progress = onboard(inventory, host, _state_dir(state_dir), Path(out_dir), restart, stop_after,
                       log=lambda m: console.print(m, highlight=False))
    if progress.get("onboarded"):
        console.print(f"[bold green]{host}: onboarded[/] ({progress['onboarded']})", highlight=False)


if __name__ == "__main__":
    main()
