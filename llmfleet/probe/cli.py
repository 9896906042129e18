"""`llmfleet probe`: measure what an endpoint or an inventory's hosts carry (`llmfleet probe
URL|--inventory INV ...`, the hidden subcommand `run`), or learn a request mix from a log
(`llmfleet probe mix LOG`). Registered on the `llmfleet` command by llmfleet/cli.py; the probe
itself is the rest of llmfleet/probe/."""

from __future__ import annotations

import functools
import sys
from dataclasses import dataclass
from pathlib import Path

import click
from rich.console import Console

from llmfleet.command import Group, console, err

# The options by topic: each topic is click's decorators composed once (_options), handing the
# command one object of that topic's values. Values are checked by click's types (exit 2 with
# the option and the value); combinations by _check_combinations; the steps are the functions
# after probe_cmd: targets, config, run, report, exit status.


def _options(name: str, cls, *params):
    """click's ``params`` composed into one decorator: the command gets their values as one ``cls``
    (a dataclass whose fields are the params' names), as its argument ``name``."""

    def decorate(f):
        @functools.wraps(f)
        def command(**values):
            own = {k: values.pop(k) for k in cls.__dataclass_fields__}
            return f(**values, **{name: cls(**own)})

        for param in reversed(params):
            command = param(command)
        return command

    return decorate


class _TokenPair(click.ParamType):
    """IN,OUT: two positive token counts."""

    name = "IN,OUT"

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        try:
            a, b = (int(x) for x in value.split(","))
        except ValueError:
            a = b = 0
        if a < 1 or b < 1:
            self.fail(f"{value!r}: expected IN,OUT token counts, e.g. 128,64", param, ctx)
        return a, b


class _Slo(click.ParamType):
    """METRIC_pQ_ms=LIMIT: one SLO."""

    name = "SLO"

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        from pydantic import TypeAdapter, ValidationError

        from llmfleet.probe.config import Slos

        key, _, limit = value.partition("=")
        try:
            ((k, v),) = TypeAdapter(Slos).validate_python({key.strip(): limit.strip()}).items()
        except (ValidationError, ValueError):
            self.fail(f"{value!r}: expected METRIC_pQ_ms=LIMIT with METRIC ttft, tpot or e2e, Q a percentile and "
                      "LIMIT in ms above 0, e.g. ttft_p99_ms=500", param, ctx)
        return k, v


class _HttpUrl(click.ParamType):
    name = "URL"

    def convert(self, value, param, ctx):
        from urllib.parse import urlparse

        u = urlparse(value)
        if u.scheme not in ("http", "https") or not u.netloc:
            self.fail(f"{value!r}: not an http(s) URL of a server (fix: e.g. http://host:8000)", param, ctx)
        return value.rstrip("/")


class _GpuProfileName(click.ParamType):
    """A name in the default gpu_profiles (llmfleet/gpu_profiles.yaml)."""

    name = "PROFILE"

    def convert(self, value, param, ctx):
        from llmfleet.schema import defaults

        names = sorted(defaults()["gpu_profiles"])
        if value not in names:
            self.fail(f"{value!r}: no such profile in llmfleet/gpu_profiles.yaml (fix: one of "
                      f"{', '.join(names)})", param, ctx)
        return value


_FILE = click.Path(exists=True, dir_okay=False, path_type=Path)


@dataclass(frozen=True)
class TargetOptions:
    url: str | None
    model: str | None
    api_key_file: Path | None
    inventory: str | None
    limit: tuple[str, ...]
    data: tuple[str, ...]
    instances: bool


@dataclass(frozen=True)
class TrialOptions:
    rate: float | None
    requests: int | None
    duration: float | None
    warmup: float | None
    fixed_lengths: tuple[int, int] | None
    no_stop_early: bool
    trace: Path | None
    speed: float | None
    no_server_view: bool


@dataclass(frozen=True)
class SearchOptions:
    search: bool
    repeats: int | None


@dataclass(frozen=True)
class WorkloadOptions:
    mix: Path | None
    slo: tuple[tuple[str, float], ...]
    goodput_min: float | None
    arrivals: str | None
    burstiness: float | None
    tokenizer: Path | None


@dataclass(frozen=True)
class CeilingOptions:
    gpu_profile: str | None
    tensor_parallel: int
    model_dir: Path | None


@dataclass(frozen=True)
class OutputOptions:
    out_dir: Path
    baseline: Path | None
    save_baseline: Path | None


_POSITIVE = click.FloatRange(min=0, min_open=True)
_target_options = _options(
    "targets", TargetOptions,
    click.argument("url", required=False, type=_HttpUrl()),
    click.option("--model", help="Served model name (URL mode)."),
    click.option("--api-key-file", type=_FILE, help="File holding the API key (mode 600). Else LLMFLEET_API_KEY "
                 "or OPENAI_API_KEY from the environment, else none (URL mode)."),
    click.option("--inventory", help="Probe every vLLM host of this pyinfra inventory with its group data."),
    click.option("--limit", multiple=True, help="With --inventory: only these hosts or groups (repeatable)."),
    click.option("--data", multiple=True, help="With --inventory: override a setting for every host, as pyinfra's "
                 "--data (repeatable)."),
    click.option("--instances", is_flag=True, help="With --inventory: also each instance of a host's serving layout "
                 "on its own (the front door's /instances/<name>/ route), at its share of probe_check_rps."))
_trial_options = _options(
    "trial", TrialOptions,
    click.option("--rate", type=_POSITIVE, help="Offered rate (requests/s) of the check, or where the search "
                 "starts."),
    click.option("--requests", type=click.IntRange(min=1), help="Measured requests per trial (no warm-up), "
                 "instead of probe_duration_s x rate."),
    click.option("--duration", type=_POSITIVE, help="Measured seconds per trial (probe_duration_s)."),
    click.option("--warmup", type=click.FloatRange(min=0), help="Warm-up seconds per trial (probe_warmup_s)."),
    click.option("--fixed-lengths", type=_TokenPair(), help="IN,OUT: every request this many prompt and output "
                 "tokens; without --mix, one greedy class (as vllm bench serve's random dataset)."),
    click.option("--no-stop-early", is_flag=True, help="Run every trial to its end even when the SLA is lost."),
    click.option("--trace", type=_FILE, help="Replay this request log at its own timing (JSONL or CSV: arrival_s, "
                 "prompt_tokens or prompt, output_tokens[, class, temperature, top_p]; or a Mooncake trace)."),
    click.option("--speed", type=_POSITIVE, help="With --trace: replay this many times faster (0.5: slower)."),
    click.option("--no-server-view", is_flag=True, help="Do not sample the endpoint's /metrics during trials."))
_search_options = _options(
    "search", SearchOptions,
    click.option("--search", is_flag=True, help="Search the effective throughput (else one check trial at "
                 "probe_check_rps)."),
    click.option("--repeats", type=click.IntRange(min=1), help="Trials per rate in a search (probe_repeats)."))
_workload_options = _options(
    "workload", WorkloadOptions,
    click.option("--mix", type=_FILE, help="Request mix (JSON or YAML list of classes, as probe_mix); default: "
                 "group data's."),
    click.option("--slo", type=_Slo(), multiple=True, help="An overall SLO, METRIC_pQ_ms=LIMIT (ttft, tpot or e2e, "
                 "e.g. ttft_p99_ms=500); repeatable; replaces probe_slo."),
    click.option("--goodput-min", type=click.FloatRange(min=0, max=1, min_open=True),
                 help="Share of requests that must meet every SLO (probe_goodput_min)."),
    click.option("--arrivals", type=click.Choice(["poisson", "gamma"]), help="Arrival process."),
    click.option("--burstiness", type=_POSITIVE, help="Gamma shape (with gamma)."),
    click.option("--tokenizer", type=click.Path(exists=True, path_type=Path),
                 help="tokenizer.json (or its folder) of the served model."))
_ceiling_options = _options(
    "ceiling", CeilingOptions,
    click.option("--gpu-profile", type=_GpuProfileName(), help="URL mode: a gpu_profiles name, for the decode "
                 "ceiling."),
    click.option("--tensor-parallel", type=click.IntRange(min=1), default=1, show_default=True,
                 help="URL mode: GPUs the model is split over, for the ceiling."),
    click.option("--model-dir", type=click.Path(exists=True, file_okay=False, path_type=Path),
                 help="URL mode: the model folder (config.json, weights), for the ceiling."))
_output_options = _options(
    "output", OutputOptions,
    click.option("--out-dir", type=click.Path(file_okay=False, path_type=Path), default="reports/probe",
                 show_default=True, help="Folder for report JSON and PNG."),
    click.option("--baseline", type=_FILE, help="Gate against this baseline file."),
    click.option("--save-baseline", type=click.Path(dir_okay=False, path_type=Path),
                 help="Record this run as the baseline."))


class _ProbeGroup(Group):
    """`llmfleet probe [URL] ...` measures (its hidden subcommand `run`); `llmfleet probe mix LOG` learns a
    mix. Anything that is not a subcommand's name goes to `run`."""

    def parse_args(self, ctx, args):
        if not args or args[0] not in self.commands:
            args = ["run", *args]
        return super().parse_args(ctx, args)


class _ProbeRun(click.Command):
    """Usage reads `llmfleet probe [OPTIONS] [URL]`, as the user typed it."""

    def format_usage(self, ctx, formatter):
        path = ctx.parent.command_path if ctx.parent else ctx.command_path
        formatter.write_usage(path, " ".join(self.collect_usage_pieces(ctx)))


@click.group("probe", cls=_ProbeGroup)
def probe_group() -> None:
    """Measure what an endpoint carries (`llmfleet probe URL|--inventory INV ...`, see
    `llmfleet probe --help`), or learn a request mix from a log (`llmfleet probe mix LOG`)."""


@probe_group.command("run", cls=_ProbeRun, hidden=True)
@_target_options
@_trial_options
@_search_options
@_workload_options
@_ceiling_options
@_output_options
def probe_cmd(targets: TargetOptions, trial: TrialOptions, search: SearchOptions, workload: WorkloadOptions,
              ceiling: CeilingOptions, output: OutputOptions) -> None:
    """Measure what an endpoint really carries: latency of a realistic mix at an offered rate, the
    effective throughput under the SLOs and goodput (--search), or a replayed request log (--trace).
    Exit 0: the SLA (and baseline) held; 1: it did not; 2: the probe could not run (the message says
    why). SIGTERM or a first Ctrl-C ends it early: no request is sent after it, those in flight finish,
    the trial is judged and reported on what it sent, and targets not reached yet are not probed (exit
    1). `llmfleet probe mix LOG --classes 5` proposes a probe_mix learnt from a request log."""
    from llmfleet.probe import load

    _check_combinations(targets, trial, search, ceiling)
    overrides = _config_overrides(trial, search, workload)
    hosts = _probe_targets(targets, workload, ceiling, output, overrides)
    load.stop_on_signals()
    reports, skipped = [], []
    for t in hosts:
        if load.STOP.is_set():
            skipped.append(t.host or t.url)
            continue
        reports.append(_report(t, _run(t, trial, search), output))
    if skipped:
        console.print(f"not probed (stopped by a signal): {', '.join(skipped)}")
    sys.exit(0 if all(rep.passed for rep in reports) and not skipped else 1)


def _check_combinations(targets: TargetOptions, trial: TrialOptions, search: SearchOptions,
                        ceiling: CeilingOptions) -> None:
    """Options that cannot go together (click's usage error, exit 2), before anything is read."""
    if bool(targets.url) == bool(targets.inventory):
        raise click.UsageError("give either a URL (with --model) or --inventory INV (fix: llmfleet probe "
                               "http://host:8000 --model NAME, or llmfleet probe --inventory inventories/lab.py)")
    if trial.trace:
        clash = [name for name, given in (("--search", search.search), ("--rate", trial.rate),
                                          ("--fixed-lengths", trial.fixed_lengths), ("--duration", trial.duration))
                 if given]
        if clash:
            raise click.UsageError(f"--trace with {', '.join(clash)}: a trace brings its own timing and lengths (fix: "
                                   "--speed to replay it faster or slower, --requests N for its first N requests)")
    elif trial.speed:
        raise click.UsageError(f"--speed {trial.speed:g} without --trace: it scales a trace's timing (fix: --rate for "
                               "a synthetic schedule)")
    if trial.requests and search.search:
        raise click.UsageError(f"--requests {trial.requests} with --search: a search needs sustained load, which "
                               "a fixed count is not at high rates (fix: --duration SECONDS, or leave --requests out)")
    if targets.url:
        if not targets.model:
            raise click.UsageError(f"{targets.url}: --model is missing (fix: the served model name; GET "
                                   f"{targets.url}/v1/models lists it)")
        if targets.limit:
            raise click.UsageError(f"--limit {','.join(targets.limit)} with a URL: --limit chooses hosts of an "
                                   "inventory (fix: --inventory INV --limit HOST, or leave --limit out)")
        if targets.data:
            raise click.UsageError(f"--data {' '.join(targets.data)} with a URL: --data sets inventory hosts' group "
                                   "data (fix: --inventory INV --data KEY=VALUE, or the URL mode's own options)")
        if targets.instances:
            raise click.UsageError("--instances with a URL: a host's instances come from its vllm_layout in an "
                                   "inventory (fix: --inventory INV --instances, or the instance's own URL, "
                                   "http://HOST:PORT/instances/NAME)")
        return
    from click.core import ParameterSource

    source = click.get_current_context().get_parameter_source
    given = {"--model": targets.model, "--api-key-file": targets.api_key_file, "--gpu-profile": ceiling.gpu_profile,
             "--model-dir": ceiling.model_dir,
             "--tensor-parallel": source("tensor_parallel") == ParameterSource.COMMANDLINE or None}
    url_only = [name for name, value in given.items() if value is not None]
    if url_only:
        raise click.UsageError(f"{', '.join(url_only)} with --inventory: for a URL only; each inventory host's "
                               f"come from its group data (fix: leave {', '.join(url_only)} out, or probe one URL)")


def _config_overrides(trial: TrialOptions, search: SearchOptions, workload: WorkloadOptions) -> dict:
    """The ProbeConfig fields the options set, over each host's (or group data's) own."""
    from llmfleet.probe.config import RequestClass, load_mix

    given = {"slo": dict(workload.slo) or None, "goodput_min": workload.goodput_min, "arrivals": workload.arrivals,
             "burstiness": workload.burstiness, "duration_s": trial.duration, "warmup_s": trial.warmup,
             "repeats": search.repeats}
    overrides: dict[str, object] = {k: v for k, v in given.items() if v is not None}
    if workload.arrivals == "gamma" and workload.burstiness is None:
        overrides["burstiness"] = 1.0
    if workload.mix:
        overrides["mix"] = load_mix(workload.mix)
    elif trial.fixed_lengths:
        # fixed lengths alone: one greedy class, as vllm bench serve's random dataset (range ratio 0)
        p, o = trial.fixed_lengths
        overrides["mix"] = [RequestClass.model_validate({"name": "fixed", "share": 1.0, "prompt_tokens": p,
                                                         "output_tokens": o, "temperature": 0.0})]
    return overrides


def _configured(config, overrides: dict):
    """``config`` with ``overrides``, validated (ProbeError naming each setting that does not hold)."""
    from pydantic import ValidationError

    from llmfleet.probe.config import ProbeConfig, ProbeError, describe

    try:
        return ProbeConfig(**{**config.model_dump(), **overrides})
    except ValidationError as exc:
        raise ProbeError(describe(exc)) from None


def _probe_targets(targets: TargetOptions, workload: WorkloadOptions, ceiling: CeilingOptions, output: OutputOptions,
                   overrides: dict):
    """What to measure: the URL with group data's probe settings, or every vLLM host of the inventory
    with its own; the options' overrides on each."""
    from llmfleet.probe import fleet

    if targets.inventory:
        hosts = fleet.targets(targets.inventory, list(targets.limit) or None, instances=targets.instances,
                              data=list(targets.data) or None)
        for t in hosts:
            t.config = _configured(t.config, overrides)
            t.tokenizer = workload.tokenizer or t.tokenizer
            t.baseline_file = output.baseline or t.baseline_file
        return hosts
    from llmfleet.schema import Settings

    defaults = Settings()  # what URL mode measures with: the default probe_* settings and gpu_profiles
    key = fleet.read_key_file(targets.api_key_file, "--api-key-file") if targets.api_key_file \
        else fleet.key_from_environment()
    profile = defaults.gpu_profiles[ceiling.gpu_profile] if ceiling.gpu_profile else None
    config = _configured(fleet.from_settings(defaults), overrides)
    assert targets.url is not None and targets.model is not None  # _check_combinations: URL mode needs both
    return [fleet.Target(None, targets.url, targets.model, key, config, workload.tokenizer, ceiling.model_dir, None,
                         profile, ceiling.tensor_parallel, output.baseline)]


def _run(t, trial: TrialOptions, search: SearchOptions):
    """One target's probe: a check trial, or the search."""
    from llmfleet.probe import run

    fixed = None
    if trial.fixed_lengths:
        fixed = {"prompt_tokens": trial.fixed_lengths[0], "output_tokens": trial.fixed_lengths[1]}
    return run.run_probe(t.url, t.model, t.api_key, t.config, search_mode=search.search, rate=trial.rate,
                         requests=trial.requests, fixed=fixed, tokenizer=t.tokenizer, host=t.host,
                         gpu_profile=t.gpu_profile, tensor_parallel=t.tensor_parallel, model_dir=t.model_dir,
                         model_dtype=t.model_dtype, baseline_file=t.baseline_file,
                         show_progress=sys.stderr.isatty(), stop_early=not trial.no_stop_early, trace=trial.trace,
                         speed=trial.speed or 1.0, trace_warmup_s=trial.warmup or 0.0,
                         server_view=not trial.no_server_view)


def _report(t, rep, output: OutputOptions):
    """The report as JSON and a picture in the output folder, the table on the terminal, and the
    baseline recorded when asked."""
    from llmfleet.probe import report

    # a host's file, or <host>.<instance> for an instance of its layout (fleet.instance_targets)
    name = t.host.replace("/", ".") if t.host else t.url.split("//", 1)[1].replace(":", "_").replace("/", "_")
    wide = Console(width=max(console.width, 130))
    output.out_dir.mkdir(parents=True, exist_ok=True)
    (output.out_dir / f"{name}.json").write_text(rep.model_dump_json(indent=2) + "\n")
    report.plot(rep, output.out_dir / f"{name}.png")
    for part in report.table(rep):
        wide.print(part, highlight=False)
    wide.print(f"report: {output.out_dir / (name + '.json')}, picture: {output.out_dir / (name + '.png')}",
               highlight=False)
    if output.save_baseline:
        report.save_baseline(rep, output.save_baseline)
        wide.print(f"baseline recorded: {output.save_baseline}")
    return rep


@probe_group.command("mix")
@click.argument("log", type=_FILE)
@click.option("--classes", type=click.IntRange(min=1, max=20), default=5, show_default=True,
              help="How many request classes to learn.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write the mix as YAML, for `llmfleet probe --mix FILE`.")
@click.option("--seed", type=int, default=0, show_default=True, help="k-means' random seed (results repeat).")
def probe_mix_cmd(log: Path, classes: int, out: Path | None, seed: int) -> None:
    """Learn a request mix from a request log (the formats of --trace): k-means on prompt and output
    lengths (scikit-learn), each cluster a class with its share, length ranges and sampling
    settings. Prints the probe_mix group data it proposes."""
    from llmfleet.probe import mix

    learnt = mix.learn(log, classes, seed)
    click.echo(mix.as_group_data(learnt), nl=False)
    if out:
        out.write_text(mix.as_yaml(learnt))
        err.print(f"mix file: {out} (llmfleet probe URL --mix {out})", highlight=False)


# ---- llmfleet tune ----------------------------------------------------------------------------------

@click.command("tune")
@click.argument("inventory")
@click.option("--limit", "limit", multiple=True, required=True,
              help="The host to tune (one); with --confirm, the hosts or groups to confirm on (repeatable).")
@click.option("--data", multiple=True, help="Override a setting, as pyinfra's --data (repeatable): part of the "
              "host's configured state, which the tune starts from and puts back.")
@click.option("--max-starts", type=click.IntRange(min=0), help="Server starts the search may spend (tune_max_starts).")
@click.option("--out-of-service", is_flag=True, help="The host serves no one: tune it although nothing fronts it.")
@click.option("--out-dir", type=click.Path(file_okay=False, path_type=Path),
              help="Folder of the journal and the report (tune_dir).")
@click.option("--confirm", "confirm", type=_FILE, help="A tune's report (JSON): probe its configuration briefly "
              "on every host of --limit, at its effective rate, and name the outliers.")
def tune_cmd(inventory: str, limit: tuple[str, ...], data: tuple[str, ...], max_starts: int | None,
             out_of_service: bool, out_dir: Path | None, confirm: Path | None) -> None:
    """Search vLLM flags, environment and serving layouts on one host (tune_space in group data)
    for the highest effective throughput under the group's mix and SLOs (the probe's search), and
    write the winner as group data with its provenance, or say the current configuration is best.
    The host is taken out of service first (held out of the gateway's rotation) and put back in
    its configured state at the end, serving. Each trial goes to a journal: an interrupted tune
    run again resumes. Exit 0: done; 1: stopped (a signal, or --confirm found outliers); 2: it
    could not run."""
    from llmfleet.probe import load, tune_host
    from llmfleet.probe.config import from_settings

    if confirm:
        sys.exit(_confirm(inventory, list(limit), list(data), confirm))
    if len(limit) != 1:
        raise click.UsageError(f"--limit {' '.join(limit)}: tune one host at a time (fix: --limit HOST; --confirm "
                               "takes several)")
    th = tune_host.prepare(inventory, limit[0], list(data), out_of_service,
                           log=lambda m: err.print(m, highlight=False, markup=False, soft_wrap=True))
    folder = out_dir or _project_path(th.settings.tune_dir)
    folder.mkdir(parents=True, exist_ok=True)
    load.stop_on_signals()
    doc = tune_host.run(th, from_settings(th.settings), folder, max_starts)
    _write_tune(doc, folder)


def _project_path(path: str) -> Path:
    from llmfleet.inventory import ROOT

    p = Path(path)
    return p if p.is_absolute() else ROOT / p


def _write_tune(doc: dict, folder: Path) -> None:
    """The report as JSON, PNG and a table; the snippet in its own file."""
    import json

    from rich.table import Table

    from llmfleet import tune
    from llmfleet.probe import tune_host

    name = doc["host"]
    (folder / f"{name}.json").write_text(json.dumps(doc, indent=2, default=str) + "\n")
    tune_host.plot(doc, folder / f"{name}.png")
    table = Table(title=f"llmfleet tune: {name} ({doc['out_of_service']})")
    for col in ("candidate", "status", "effective req/s", "95% CI", "P95 e2e ms", "starts", "reason"):
        table.add_column(col)
    for t in doc["trials"]:
        values = tune.measurements(tune.Trial(**t))
        mean, half = tune.figures(tune.Trial(**t)) if values else (None, None)
        ci = f"+/- {half:.2g} (n={len(values)})" if half not in (None, float("inf")) else ""
        table.add_row(t["candidate"], t["status"], f"{mean:.3g}" if mean is not None else "-", ci,
                      f"{t['p95_ms']:.0f}" if t["p95_ms"] is not None else "-", str(t["starts"]), t["reason"][:120])
    Console(width=max(console.width, 160)).print(table)
    console.print(f"{doc['starts']} server start(s) against a {doc['grid_size']}-point grid, {doc['seconds']:.0f} s",
                  highlight=False)
    console.print(doc["statement"], highlight=False)
    if doc["snippet"]:
        (folder / f"{name}.snippet.py").write_text(doc["snippet"])
        console.print("the winner as group data:\n" + doc["snippet"], highlight=False, markup=False)
        console.print(f"snippet: {folder / (name + '.snippet.py')}", highlight=False)
    console.print(f"report: {folder / (name + '.json')}, picture: {folder / (name + '.png')}", highlight=False)


def _confirm(inventory: str, limit: list[str], data: list[str], path: Path) -> int:
    """Probe the tuned configuration briefly on each host at its effective rate; 1 if a host does
    not serve it or stands out (llmfleet/probe/tune_host.py outliers)."""
    import json

    from llmfleet.inventory import validated
    from llmfleet.probe import fleet, tune_host
    from llmfleet.probe import run as probe_run

    doc = json.loads(path.read_text())
    winner = doc.get("winner")
    if not winner:
        raise tune_host.TuneError(f"--confirm {path}: the tune has no winner (fix: a tune's report with one)")
    rate = winner["effective_rps_mean"]
    results: dict[str, dict] = {}
    differ: dict[str, str] = {}
    tolerance = None
    for h, settings in validated(inventory, data, limit):
        if not settings.vllm_enabled:
            continue
        tolerance = settings.tune_confirm_tolerance if tolerance is None else tolerance
        why = tune_host.not_serving(settings, winner)
        if why:
            differ[h["name"]] = why
            continue
        t = fleet.target_of(h["name"], settings, h["data"].get("ssh_hostname") or h["name"])
        rep = probe_run.run_probe(t.url, t.model, t.api_key, fleet.from_settings(settings), rate=rate, host=h["name"])
        o = rep.trials[-1].overall if rep.trials else None
        results[h["name"]] = {"passed": rep.passed, "p95_ms": o.e2e_ms.p95 if o else None, "reasons": rep.reasons}
    odd = tune_host.outliers(results, tolerance or 0.25)
    for name, r in results.items():
        p95 = f"{r['p95_ms']:.0f} ms" if r["p95_ms"] is not None else "-"
        console.print(f"{name}: {rate:g} req/s: P95 e2e {p95}: " + (f"OUTLIER: {odd[name]}" if name in odd else "ok"),
                      highlight=False)
    for name, why in differ.items():
        console.print(f"{name}: does not serve the tuned configuration: {why} (fix: the snippet in its group data, "
                      "then a deploy)", highlight=False)
    console.print(f"confirmed on {len(results) - len(odd)} of {len(results) + len(differ)} host(s) at {rate:g} req/s "
                  f"({winner['candidate']})", highlight=False)
    return 1 if odd or differ else 0
