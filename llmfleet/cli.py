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
            err.print(f"[bold red]error:[/] {exc}", highlight=False, markup=True, soft_wrap=True)
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


@main.command("probe")
@click.argument("url", required=False)
@click.option("--model", help="Served model name (URL mode).")
@click.option("--api-key-file", type=click.Path(dir_okay=False), help="File holding the API key (mode 600). "
              "Else LLMFLEET_API_KEY or OPENAI_API_KEY from the environment, else none.")
@click.option("--inventory", help="Probe every vLLM host of this pyinfra inventory with its group data.")
@click.option("--limit", multiple=True, help="With --inventory: only these hosts or groups (repeatable).")
@click.option("--search", "search_mode", is_flag=True, help="Search the effective throughput (else one check "
              "trial at probe_check_rps).")
@click.option("--rate", type=float, help="Offered rate (requests/s) of the check, or where the search starts.")
@click.option("--requests", type=click.IntRange(min=1), help="Measured requests per trial (no warm-up), "
              "instead of probe_duration_s x rate.")
@click.option("--duration", type=click.FloatRange(min=0, min_open=True), help="Measured seconds per trial "
              "(probe_duration_s).")
@click.option("--warmup", type=click.FloatRange(min=0), help="Warm-up seconds per trial (probe_warmup_s).")
@click.option("--repeats", type=click.IntRange(min=1), help="Trials per rate in a search (probe_repeats).")
@click.option("--fixed-lengths", help="IN,OUT: every request this many prompt and output tokens (a fixed "
              "workload, e.g. to compare with vllm bench serve).")
@click.option("--mix", "mix_file", type=click.Path(dir_okay=False), help="Request mix (JSON or YAML list of "
              "classes, as probe_mix); default: group data's.")
@click.option("--slo-p95-ms", type=click.FloatRange(min=0, min_open=True), help="P95 end-to-end SLO (ms).")
@click.option("--arrivals", type=click.Choice(["poisson", "gamma"]), help="Arrival process.")
@click.option("--burstiness", type=click.FloatRange(min=0, min_open=True), help="Gamma shape (with gamma).")
@click.option("--tokenizer", type=click.Path(), help="tokenizer.json (or its folder) of the served model.")
@click.option("--gpu-profile", help="URL mode: a gpu_profiles name, for the decode ceiling.")
@click.option("--tensor-parallel", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--model-dir", type=click.Path(file_okay=False), help="URL mode: the model folder (config.json, "
              "weights), for the ceiling.")
@click.option("--baseline", type=click.Path(dir_okay=False), help="Gate against this baseline file.")
@click.option("--save-baseline", type=click.Path(dir_okay=False), help="Record this run as the baseline.")
@click.option("--out-dir", default="reports/probe", show_default=True, help="Folder for report JSON and PNG.")
@click.option("--no-stop-early", is_flag=True, help="Run every trial to its end even when the SLA is lost.")
def probe_cmd(url, model, api_key_file, inventory, limit, search_mode, rate, requests, duration, warmup, repeats,
              fixed_lengths, mix_file,
              slo_p95_ms, arrivals, burstiness, tokenizer, gpu_profile, tensor_parallel, model_dir, baseline,
              save_baseline, out_dir, no_stop_early) -> None:
    """Measure what an endpoint really carries: latency of a realistic mix at an offered rate, or the
    effective throughput under the SLA (--search). Exit 0: the SLA (and baseline) held; 1: it did
    not; 2: the probe could not run (the message says why)."""
    from pathlib import Path

    from pydantic import ValidationError

    from llmfleet.probe import fleet, report
    from llmfleet.probe.config import ProbeConfig, ProbeError, describe, load_mix
    from llmfleet.probe.run import run_probe

    if bool(url) == bool(inventory):
        raise ProbeError("give either a URL (with --model) or --inventory INV (fix: llmfleet probe "
                         "http://host:8000 --model NAME, or llmfleet probe --inventory inventories/lab.py)")
    if requests and search_mode:
        raise ProbeError(f"--requests {requests} with --search: a search needs sustained load, which a fixed "
                         "count is not at high rates (fix: --duration SECONDS, or leave --requests out)")
    fixed = None
    if fixed_lengths:
        try:
            a, b = (int(x) for x in fixed_lengths.split(","))
            assert a > 0 and b > 0
        except (ValueError, AssertionError):
            raise ProbeError(f"--fixed-lengths {fixed_lengths!r}: expected IN,OUT token counts, e.g. 128,64") from None
        fixed = {"prompt_tokens": a, "output_tokens": b}
    overrides = {k: v for k, v in {"slo_p95_e2e_ms": slo_p95_ms, "arrivals": arrivals, "burstiness": burstiness,
                                   "duration_s": duration, "warmup_s": warmup, "repeats": repeats}.items()
                 if v is not None}
    if arrivals == "gamma" and burstiness is None:
        overrides["burstiness"] = 1.0
    if mix_file:
        overrides["mix"] = load_mix(Path(mix_file))

    def adjust(config: ProbeConfig) -> ProbeConfig:
        try:
            return ProbeConfig(**{**config.model_dump(), **overrides})
        except ValidationError as exc:
            raise ProbeError(describe(exc)) from None

    if url:
        if not model:
            raise ProbeError(f"{url}: --model is missing (fix: the served model name; GET {url}/v1/models lists it)")
        key = fleet.read_key_file(api_key_file, "--api-key-file") if api_key_file else fleet.key_from_environment()
        import runpy

        from llmfleet.settings import Settings
        defaults = {k: v for k, v in runpy.run_path(str(fleet.ROOT / "group_data" / "all.py")).items()
                    if k in Settings.model_fields}
        profile = None
        if gpu_profile:
            from llmfleet.schema import GpuProfile
            if gpu_profile not in defaults["gpu_profiles"]:
                raise ProbeError(f"--gpu-profile {gpu_profile!r}: no such profile (fix: one of "
                                 f"{', '.join(sorted(defaults['gpu_profiles']))})")
            profile = GpuProfile(**defaults["gpu_profiles"][gpu_profile])
        try:
            config = adjust(fleet.from_settings(defaults))
        except ValidationError as exc:
            raise ProbeError(describe(exc)) from None
        targets = [fleet.Target(None, url.rstrip("/"), model, key, config, Path(tokenizer) if tokenizer else None,
                                Path(model_dir) if model_dir else None, None, profile, tensor_parallel,
                                Path(baseline) if baseline else None)]
    else:
        targets = fleet.targets(inventory, list(limit) or None)
        for t in targets:
            t.config = adjust(t.config)
            if tokenizer:
                t.tokenizer = Path(tokenizer)
            if baseline:
                t.baseline_file = Path(baseline)
    out = Path(out_dir)
    failed = False
    wide = Console(width=max(console.width, 130))
    for t in targets:
        name = t.host or t.url.split("//", 1)[1].replace(":", "_").replace("/", "_")
        rep = run_probe(t.url, t.model, t.api_key, t.config, search_mode=search_mode, rate=rate, requests=requests,
                        fixed=fixed, tokenizer=t.tokenizer, host=t.host, gpu_profile=t.gpu_profile,
                        tensor_parallel=t.tensor_parallel, model_dir=t.model_dir, model_dtype=t.model_dtype,
                        baseline_file=t.baseline_file, show_progress=sys.stderr.isatty(),
                        stop_early=not no_stop_early)
        out.mkdir(parents=True, exist_ok=True)
        (out / f"{name}.json").write_text(rep.model_dump_json(indent=2) + "\n")
        report.plot(rep, out / f"{name}.png")
        for part in report.table(rep):
            wide.print(part, highlight=False)
        wide.print(f"report: {out / (name + '.json')}, picture: {out / (name + '.png')}", highlight=False)
        if save_baseline:
            report.save_baseline(rep, Path(save_baseline))
            wide.print(f"baseline recorded: {save_baseline}")
        failed |= not rep.passed
    sys.exit(1 if failed else 0)


STATE_DIR_HELP = ("Where onboarding records each host (hardware fingerprint, progress); audits compare with it. "
                  "Default: $LLMFLEET_STATE_DIR or fleet/.")


def _state_dir(value: str | None):
    from pathlib import Path

    return Path(value or os.environ.get("LLMFLEET_STATE_DIR") or "fleet")


@main.command("audit")
@click.argument("inventory")
@click.option("--limit", multiple=True, help="Only these hosts or groups (repeatable).")
@click.option("--waivers", "waivers_file", type=click.Path(dir_okay=False), help="Waivers (YAML): check, hosts, "
              "reason, expires.")
@click.option("--state-dir", help=STATE_DIR_HELP)
@click.option("--out-dir", default="reports/audit", show_default=True, help="Reports go to OUT/<timestamp>/.")
@click.option("--workers", type=click.IntRange(min=1), default=8, show_default=True,
              help="Hosts verified at once.")
@click.option("--skip", type=click.Choice(["hardware", "config", "state"]), multiple=True,
              help="Leave a kind of drift out (repeatable).")
@click.option("--data", multiple=True, help="Override a setting for every host, as pyinfra's --data (repeatable).")
def audit_cmd(inventory, limit, waivers_file, state_dir, out_dir, workers, skip, data) -> None:
    """Which hosts no longer match what is declared, and how: config drift (the deploy's dry run),
    state drift (the verify suite), hardware drift (against the fingerprint recorded at onboarding).
    Exit 0: clean; 1: drift found (or a host unreachable, or a waiver expired); 2: could not run."""
    from pathlib import Path

    from llmfleet.audit import report
    from llmfleet.audit.run import audit

    doc, paths = audit(inventory, list(limit) or None, _state_dir(state_dir), Path(out_dir),
                       Path(waivers_file) if waivers_file else None, workers, tuple(skip),
                       log=lambda m: err.print(m, highlight=False), data=list(data) or None)
    wide = Console(width=max(console.width, 140))
    for part in report.terminal(doc):
        wide.print(part, highlight=False)
    wide.print(f"reports: {paths['json']}, {paths['junit']}, {paths['html']}", highlight=False)
    sys.exit(doc["exit_status"])


@main.command("onboard")
@click.argument("inventory")
@click.option("--limit", "host", required=True, help="The host to onboard (its inventory name).")
@click.option("--state-dir", help=STATE_DIR_HELP)
@click.option("--out-dir", default="reports/audit", show_default=True, help="Where its first audit report goes.")
@click.option("--restart", is_flag=True, help="Run every stage again, from preflight.")
@click.option("--stop-after", type=click.Choice(["preflight", "deploy", "verify", "acceptance", "record"]),
              help="Stop after this stage (run again to continue).")
def onboard_cmd(inventory, host, state_dir, out_dir, restart, stop_after) -> None:
    """Bring a new server in: preflight, deploy, verify, acceptance probe, record its hardware
    fingerprint, first audit. Resumable: running it again continues where it stopped."""
    from pathlib import Path

    from llmfleet.audit.onboard import onboard

    progress = onboard(inventory, host, _state_dir(state_dir), Path(out_dir), restart, stop_after,
                       log=lambda m: console.print(m, highlight=False))
    if progress.get("onboarded"):
        console.print(f"[bold green]{host}: onboarded[/] ({progress['onboarded']})", highlight=False)


if __name__ == "__main__":
    main()
