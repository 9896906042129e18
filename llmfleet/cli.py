"""The `llmfleet` command."""

from __future__ import annotations

import json
import os
import sys

import click
from rich.console import Console
from rich.table import Table

from llmfleet.errors import LlmfleetError

console = Console()
err = Console(stderr=True)


class _Group(click.Group):
    """Turn LlmfleetError into one message and its exit status instead of a traceback."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except LlmfleetError as exc:
            err.print(f"[bold red]error:[/] {exc}", highlight=False, markup=True)
            sys.exit(exc.exit_code)


@click.group(cls=_Group)
@click.version_option(package_name="llmfleet")
def main() -> None:
    """Converge and verify GPU servers for serving LLMs with vLLM."""


@main.group(cls=_Group)
def lab() -> None:
    """Disposable local test hosts: containers (systemd-nspawn) and a VM (qemu)."""


def _log(msg: str) -> None:
    err.print(msg, highlight=False, markup=False)


def _status_table(rows: list[dict]) -> Table:
    table = Table(title="llmfleet lab")
    for col in ("name", "kind", "address", "ssh_port", "state"):
        table.add_column(col)
    for r in rows:
        colour = {"running": "green", "booting": "yellow"}.get(r["state"], "red")
        table.add_row(r["name"], r["kind"], r["address"], str(r["ssh_port"]),
                      f"[{colour}]{r['state']}[/]")
    return table


@lab.command("up")
@click.option("--hosts", "n_hosts", default=3, show_default=True, type=int,
              help="Container hosts to have running (lab-c1..lab-cN); running ones are kept.")
@click.option("--vm", is_flag=True, help="Also run one VM host (lab-vm1) with its own kernel.")
def lab_up(n_hosts: int, vm: bool) -> None:
    """Create the lab hosts (harmless when they already run; recovers from a killed run)."""
    from llmfleet import lab as labmod

    state = labmod.up(n_hosts, vm, log=_log)
    console.print(_status_table(labmod.status_rows(state)))


@lab.command("down")
def lab_down() -> None:
    """Remove every process, namespace, link, mount and file the lab made (caches stay)."""
    from llmfleet import lab as labmod

    removed = labmod.down(log=_log)
    console.print(f"lab down: removed {len(removed)} item(s)" + (": " + ", ".join(removed) if removed else ""))


@lab.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print name, kind, address, SSH port, state as JSON.")
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
    from llmfleet.lab.lab import ssh_command

    args = ssh_command(name, list(command))
    os.execvp(args[0], args)


@lab.command("wheels")
@click.argument("requirements", nargs=-1, required=True)
def lab_wheels(requirements: tuple[str, ...]) -> None:
    """Add wheels (with their dependencies) to the lab's package mirror."""
    from llmfleet.lab.wheels import add_wheels

    for line in add_wheels(list(requirements)):
        console.print(line, highlight=False)


if __name__ == "__main__":
    main()


@main.command("monitoring")
@click.option("--inventory", default="inventories/lab.py", show_default=True, help="pyinfra inventory to read.")
@click.option("--out", "out_dir", default="monitoring", show_default=True, help="Folder for the rendered files.")
def monitoring_cmd(inventory: str, out_dir: str) -> None:
    """Render Prometheus scrape targets and alert rules for the inventory's vLLM hosts."""
    import subprocess
    from pathlib import Path

    from llmfleet.monitoring import render
    from llmfleet.settings import SettingsError, validate

    proc = subprocess.run([sys.executable, "-m", "pyinfra", inventory, "debug-inventory", "--json"],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise LlmfleetError(f"cannot read inventory {inventory}: {proc.stderr.strip()[-500:]}")
    hosts = {}
    for h in json.loads(proc.stdout):
        try:
            hosts[h["name"]] = (validate(h["name"], h["data"]), h["data"].get("ssh_hostname") or h["name"])
        except SettingsError as exc:
            raise LlmfleetError(str(exc)) from None
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for name, content in render(inventory, hosts).items():
        (out / name).write_text(content)
        console.print(f"wrote {out / name}")
