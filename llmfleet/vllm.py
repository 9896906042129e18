"""The vLLM service as data: the command line, environment and unit rendered from group data, the
paths of the versioned environment and model, and the flag checks that need no host.

Pure functions of the settings: the deploy (operations/vllm.py), verify (verify/test_vllm.py) and
the monitoring hand-off use the same ones, so what is checked is what was rendered.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from llmfleet import compat, templates
from llmfleet.schema import flag_name

if TYPE_CHECKING:
    from llmfleet.schema import Settings, VllmInstance, VllmModel

UNIT_NAME = "vllm.service"
UNIT_PATH = f"/etc/systemd/system/{UNIT_NAME}"
CONF_DIR = "/etc/llmfleet/vllm"
API_KEY_FILE = f"{CONF_DIR}/api-key.env"  # root:root 0600, read by systemd (EnvironmentFile)
# an instance of a serving layout listens on the host only: clients reach it through the front door
INSTANCE_HOST = "127.0.0.1"
STATE_DIR_NAME = "vllm"  # /var/lib/vllm (StateDirectory), /var/cache/vllm (CacheDirectory)
# the flag check's answers that passed, kept on the host to be reused for the same inputs
# (llmfleet/remote/vllm_flags.py says which): root's only
FLAG_ANSWERS_DIR = "/var/cache/llmfleet/vllm-flags"
# flags llmfleet renders from their own settings; in vllm_flags they would be given twice
RESERVED_FLAGS = {"model": "vllm_model", "served-model-name": "vllm_served_model_name", "host": "vllm_host",
                  "port": "vllm_port", "api-key": "vllm_api_key_file"}


def flags(settings: Settings) -> dict:
    """vllm_flags, every name in the dash spelling (the schema's validator spells them so: flag_name)."""
    return dict(settings.vllm_flags)


def flag_args(settings: Settings) -> list[str]:
    """vllm_flags as arguments: True -> --flag, False -> --no-flag, None -> left out, lists repeat."""
    out: list[str] = []
    for name, value in flags(settings).items():
        if value is None:
            continue
        if value is True:
            out.append(f"--{name}")
        elif value is False:
            out.append(f"--no-{name}")
        elif isinstance(value, (list, tuple)):
            out += [f"--{name}", *[str(v) for v in value]]
        elif isinstance(value, dict):
            out += [f"--{name}", json.dumps(value, separators=(",", ":"))]
        else:
            out += [f"--{name}", str(value)]
    return out


def env_id(settings: Settings) -> str:
    """The versioned environment's name: a hash of what is installed into it."""
    spec = json.dumps({"packages": list(settings.vllm_packages), "remove": list(settings.vllm_pip_remove)})
    return hashlib.sha256(spec.encode()).hexdigest()[:12]


def envs_dir(settings: Settings) -> str:
    return str(Path(settings.vllm_venv).parent / "envs")


def env_dir(settings: Settings) -> str:
    """/opt/llmfleet/vllm/envs/<id>: one per package set; `vllm_venv` (a link) names the active one."""
    return f"{envs_dir(settings)}/{env_id(settings)}"


def model(settings: Settings) -> VllmModel:
    """The served model (validation refuses a serving host without one)."""
    if settings.vllm_model is None:
        raise ValueError("vllm_model = None: no model to serve (fix: set vllm_model, or vllm_enabled = False)")
    return settings.vllm_model


def model_root(settings: Settings) -> str:
    return f"{settings.vllm_models_dir}/{model(settings).name}"


def model_dir(settings: Settings) -> str:
    """/data/models/<name>/<version>; `current` beside it names the one served."""
    return f"{model_root(settings)}/{model(settings).version}"


def model_link(settings: Settings) -> str:
    return f"{model_root(settings)}/current"


@dataclass(frozen=True)
class Binding:
    """Where an instance's unit runs: CPUAffinity= and NUMAMask= (with NUMAPolicy=bind);
    llmfleet/vllm_layout.py's `binding` works it out from the host's NUMA nodes."""

    cpus: str
    nodes: str


def unit_name(instance: VllmInstance | None = None) -> str:
    """vllm.service without a layout; vllm-<name>.service for an instance of one."""
    return instance.unit_name if instance is not None else UNIT_NAME


def unit_path(instance: VllmInstance | None = None) -> str:
    return f"/etc/systemd/system/{unit_name(instance)}"


def server_args(settings: Settings, instance: VllmInstance | None = None) -> list[str]:
    """The server's whole argument list after `python -m vllm.entrypoints.openai.api_server`; for an
    instance of a layout, its own port on the host only and its parallel sizes."""
    if instance is None:
        where = ["--host", settings.vllm_host, "--port", str(settings.vllm_port)]
    else:
        where = ["--host", INSTANCE_HOST, "--port", str(instance.port),
                 "--tensor-parallel-size", str(instance.tensor_parallel_size)]
        if instance.pipeline_parallel_size > 1:
            where += ["--pipeline-parallel-size", str(instance.pipeline_parallel_size)]
    return ["--model", model_link(settings), "--served-model-name", settings.vllm_served_model_name, *where,
            *flag_args(settings)]


def command(settings: Settings, instance: VllmInstance | None = None) -> list[str]:
    # `python -m ...api_server` works for every vLLM build (the CPU build's `vllm` script does not)
    return [f"{env_dir(settings)}/bin/python3", "-m", "vllm.entrypoints.openai.api_server",
            *server_args(settings, instance)]


def instance_env(settings: Settings, instance: VllmInstance | None) -> dict[str, str]:
    """The unit's environment: vllm_env, and for an instance on GPUs the GPUs it may see, numbered
    as nvidia-smi numbers them (CUDA_DEVICE_ORDER=PCI_BUS_ID; CUDA's own order is fastest first)."""
    env = dict(settings.vllm_env)
    if instance is not None and instance.gpus:
        env |= {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in instance.gpus)}
    return env


_SAFE = re.compile(r"^[A-Za-z0-9_@%+=:,./-]+$")


def systemd_quote(word: str) -> str:
    """One word for a systemd command line or Environment= (quoted where needed, % and $ escaped)."""
    word = word.replace("%", "%%").replace("$", "$$")
    if _SAFE.match(word):
        return word
    return '"' + word.replace("\\", "\\\\").replace('"', '\\"') + '"'


def fabric_manager_host(settings: Settings) -> bool:
    """Whether the host's GPU profile has NVSwitches: its vLLM units order after Fabric Manager."""
    profile = settings.profile
    return profile is not None and profile.fabric_manager


def render_unit(settings: Settings, gpu: bool, instance: VllmInstance | None = None,
                binding: Binding | None = None) -> str:
    """The unit: vllm.service without a layout, or one instance's, bound to its CPUs and memory
    nodes through systemd's own properties (CPUAffinity=, NUMAPolicy=bind, NUMAMask=); on a GPU host
    of an NVSwitch profile, ordered after nvidia-fabricmanager.service."""
    env = templates.environment("vllm", systemd_quote=systemd_quote)
    return env.get_template(UNIT_NAME + ".j2").render(
        served_model_name=settings.vllm_served_model_name, vllm_version=settings.vllm_version, gpu=gpu,
        fabric_manager=gpu and fabric_manager_host(settings),
        instance=instance, binding=binding,
        user=settings.service_user, env=instance_env(settings, instance), api_key_file=API_KEY_FILE if
        settings.vllm_api_key_file else None,
        exec_start=" ".join(systemd_quote(w) for w in command(settings, instance)),
        start_timeout_s=settings.vllm_ready_timeout_s, limits_nofile=settings.limits_nofile,
        limits_memlock="infinity" if settings.limits_memlock == "unlimited" else settings.limits_memlock,
        start_limit_burst=settings.vllm_start_limit_burst, start_limit_interval_s=settings.vllm_start_limit_interval_s,
        state_dir=f"/var/lib/{STATE_DIR_NAME}", state_dir_name=STATE_DIR_NAME)


def api_key_env(settings: Settings) -> str | None:
    """The content of the root-only environment file (None: no API key)."""
    if not settings.vllm_api_key_file:
        return None
    key = Path(settings.vllm_api_key_file).read_text().strip()
    return f"VLLM_API_KEY={key}\n"


def static_flag_problems(settings: Settings) -> list[str]:
    """Flags wrong for the pinned version, found without a host: reserved ones, the names the
    compatibility table knows to be misspelt, removed or never real, and values out of the range
    the table gives the option in that version (each with its fix)."""
    problems = []
    rules = compat.option_rules(settings.vllm_version)
    for name, value in flags(settings).items():
        if name in RESERVED_FLAGS:
            problems.append(f"vllm_flags.{name}: set by llmfleet from {RESERVED_FLAGS[name]} "
                            f"(fix: remove it from vllm_flags and set {RESERVED_FLAGS[name]})")
            continue
        row = compat.FLAG_FIXES.get(name)
        if row is not None and not compat.in_range(settings.vllm_version, row[0], row[1]):
            problems.append(f"vllm_flags.{name}: not an option of vLLM {settings.vllm_version} (fix: {row[2]})")
            continue
        rule = rules.get(name)
        if rule is not None and value is not None and not _takes(rule, value):
            problems.append(f"vllm_flags.{name} = {value!r}: vLLM {settings.vllm_version} takes "
                            f"{_describe_rule(rule)} ({rule.source}) (fix: e.g. {rule.example!r})")
    return problems


# vLLM's human_readable_int: "32k" (1000s), "32K" (1024s), "25.6k"
_HUMAN_READABLE = re.compile(r"(\d+(?:\.\d+)?)([kKmMgGtT])")


def _takes(rule: compat.OptionRule, value: object) -> bool:
    """Whether the option takes the value, by its rule."""
    if isinstance(value, bool):  # True renders as a bare --flag: never a value
        return False
    if rule.kind == "choice":
        return value in rule.choices and type(value) is type(rule.choices[0])
    if value in rule.also and not isinstance(value, float):
        return True
    if isinstance(value, str) and value.lower() in [a for a in rule.also if isinstance(a, str)]:
        return True  # vLLM compares 'auto' in any case
    if rule.kind == "int" and rule.human_readable and isinstance(value, str):
        return bool(_HUMAN_READABLE.fullmatch(value))
    if not isinstance(value, int if rule.kind == "int" else (int, float)):
        return False
    if rule.low is not None and (value < rule.low or (rule.low_open and value == rule.low)):
        return False
    return rule.high is None or value <= rule.high


def _describe_rule(rule: compat.OptionRule) -> str:
    if rule.kind == "choice":
        return "one of " + ", ".join(repr(c) for c in rule.choices)
    what = "a whole number" if rule.kind == "int" else "a number"
    if rule.low is not None:
        what += f" {'>' if rule.low_open else '>='} {rule.low:g}"
    if rule.high is not None:
        what += f" and <= {rule.high:g}"
    extra = [repr(a) for a in rule.also] + (["a size like '32k'"] if rule.human_readable else [])
    return what + (f", or {', '.join(extra)}" if extra else "")


def host_flag_problems(settings: Settings, report: dict) -> list[str]:
    """Problems the installed vLLM found, by its own parser and its own configuration classes
    (report: llmfleet/remote/vllm_flags.py's output), each with its fix."""
    problems = []
    options = report.get("options", [])
    for flag in report.get("unknown", []):
        name = flag_name(flag.split("=", 1)[0])
        row = compat.FLAG_FIXES.get(name)
        close = difflib.get_close_matches(f"--{name}", options, n=1, cutoff=0.75)
        fix = row[2] if row else (f"did you mean {close[0]}?" if close else "see `python -m "
                                  "vllm.entrypoints.openai.api_server --help` in the vLLM environment")
        problems.append(f"vllm_flags.{name}: vLLM {report.get('version')} installed on the host has no {flag} "
                        f"(fix: {fix})")
    if report.get("error"):
        problems.append(f"vllm_flags: vLLM {report.get('version')} refuses the arguments: {report['error']}")
    if report.get("config_error"):
        problems.append(config_problem(settings, report))
    return problems


def config_problem(settings: Settings, report: dict) -> str:
    """vLLM's refusal of the configuration the flags make, in its own words, with the value of each
    flag its reason names (vLLM names options as its config fields do, max_num_batched_tokens, or as
    its parser does, --enable-auto-tool-choice)."""
    reason = str(report["config_error"])
    named = [f"{name} = {value!r}" for name, value in flags(settings).items() if re.search(
        rf"(?<![\w-])(?:--)?(?:{re.escape(name)}|{re.escape(name.replace('-', '_'))})(?![\w-])", reason)]
    partial = (" (its SchedulerConfig: the model is not on the host yet)" if report.get("config") == "scheduler"
               else "")
    fix = (f"change {', '.join(named)} in vllm_flags as vLLM's reason says" if named
           else "change vllm_flags as vLLM's reason says")
    return f"vllm_flags: vLLM {report.get('version')} refuses these flags at start{partial}: {reason} (fix: {fix})"
