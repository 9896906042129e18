"""vllm: the vLLM OpenAI server as a hardened systemd unit (install, configure, activate).

install    a versioned environment per package set (envs/<id>, complete when marked), beside
           the one serving, with a record of every distribution it holds (ENV_RECORD, root-owned);
           the model in a versioned folder, verified by checksum.
configure  the unit, environment and API key file are rendered here, not yet written.
activate   what differs from what is active (the unit, the API key, the environment or model
           link) is staged, each as an operation named after what differs; the flags are checked
           with the host's own vLLM parser; then the roll (operations/vllm_roll.py) switches and
           restarts the hosts in batches, each ready before the next.

An environment changed by hand (a distribution upgraded, downgraded, removed or added) differs
from its record: the deploy reinstalls the recorded versions of what differs (`pip --no-deps`)
and removes what was added, in place, then restarts the host in its batch. In place rather than
a rebuild because the environment's path is fixed by its package set (the unit runs
envs/<id>/bin/python3), so a rebuild could only replace the folder under the running server;
the repair writes back the very files the running server was started from, so the service stays
up until its switch, which then restarts it on exactly the recorded versions. An environment made
before records has none: the next deploy records what it holds then, and says so.
"""

from __future__ import annotations

import functools
import hashlib
import json
import shlex
import weakref
from io import StringIO
from pathlib import Path
from urllib.parse import urlparse

import gevent
import gevent.event
from pyinfra import host, inventory, logger
from pyinfra.api import (
    FileUploadCommand,
    FunctionCommand,
    OperationValueError,
    StringCommand,
    deploy,
    operation,
)
from pyinfra.facts.files import File
from pyinfra.operations import files, server, systemd

from llmfleet import vllm, vllm_layout
from llmfleet.facts import NumaNodes, PortHolders, VllmEnvironment, VllmFlags, VllmState, python_script
from llmfleet.gpu_guardrails import precision_paths
from llmfleet.managed_files import Entry, file_entry
from llmfleet.schema import VllmInstance
from llmfleet.settings import Settings
from operations import managed_files, vllm_roll
from operations.gateway import inventory_hosts
from operations.vllm_roll import instances_rolled_out, rolled_out
from operations.vllm_roll import run as _run

MANIFEST = "SHA256SUMS"
ENV_RECORD = ".llmfleet-packages.json"  # in each environment, by llmfleet/remote/vllm_env_record.py
STAGED_KEY = f"{vllm.API_KEY_FILE}.new"
PIP = "-m pip {} -q --no-cache-dir --disable-pip-version-check"

def _paths(settings: Settings, instances: list[VllmInstance] | None = None) -> dict:
    paths: dict[str, str | list[str]] = {
        "unit": vllm.UNIT_PATH, "key_file": vllm.API_KEY_FILE, "venv_link": settings.vllm_venv,
        "model_link": vllm.model_link(settings), "env_dir": vllm.env_dir(settings),
        "model_dir": vllm.model_dir(settings)}
    if instances is not None:
        paths["units"] = [vllm.unit_path(i) for i in instances]
    return paths


def _sha(text: str | None) -> str | None:
    return hashlib.sha256(text.encode()).hexdigest() if text is not None else None


# ------------------------------------------------------------------------------------------------
# install
# ------------------------------------------------------------------------------------------------
def _record_env(settings: Settings, note: str) -> str:
    return python_script("vllm_env_record", vllm.env_dir(settings), "write", note)


def install_command(settings: Settings) -> str:
    """The shell command that makes an environment: a new venv, the packages, the removals.

    With `vllm_installer` (uv, pinned) pip installs only uv into the new venv, and uv installs the
    packages: it unpacks and byte-compiles wheels in parallel (vLLM's own install guide recommends
    it). uv does not read /etc/pip.conf, so it is given the same index settings the mirrors
    component writes there; its cache is a folder beside the environments (same filesystem: files
    are hard-linked, not copied twice), removed afterwards, like pip's `--no-cache-dir`.
    None: pip installs the packages itself."""
    env, q = vllm.env_dir(settings), shlex.quote
    python = f"{q(env)}/bin/python3"
    packages = " ".join(q(p) for p in settings.vllm_packages)
    removed = " ".join(q(p) for p in settings.vllm_pip_remove)
    steps = [f"rm -rf {q(env)}", f"mkdir -p {q(vllm.envs_dir(settings))}", f"python3 -m venv {q(env)}"]
    if settings.vllm_installer:
        cache = f"{env}.uv-cache"
        index = ([f"--index-url {q(settings.pip_index_url)}"] if settings.pip_index_url else []) \
            + (["--no-index"] if settings.pip_no_index else []) \
            + [f"--find-links {q(u)}" for u in settings.pip_find_links] \
            + [f"--allow-insecure-host {q(h)}" for h in settings.pip_trusted_hosts]
        # vllm_pip_remove: kept out of uv's resolution (never unpacked, compiled, then removed)
        excludes = f"{env}.uv-excludes"
        kept_out = [f"printf '%s\\n' {removed} > {q(excludes)}"] if removed else []
        steps += [f"{python} {PIP.format('install')} {q(settings.vllm_installer)}",
                  f"rm -rf {q(cache)}", *kept_out,
                  " ".join([f"{q(env)}/bin/uv pip install -q --python {python} --compile-bytecode",
                            f"--cache-dir {q(cache)}", *index,
                            *([f"--excludes {q(excludes)}"] if kept_out else []), packages]),
                  f"rm -rf {q(cache)}" + (f" {q(excludes)}" if kept_out else "")]
    else:
        steps.append(f"{python} {PIP.format('install')} {packages}")
        if removed:
            steps.append(f"{python} -m pip uninstall -y -q {removed}")
    return " && ".join(steps)


@operation(is_idempotent=False)
def environment_made(settings: Settings):
    """
    A new versioned environment: the packages, the removals, the record of what it holds, its
    marker; then the flags are checked with its own vLLM parser.

    + settings: the host's settings
    """
    tool = "uv pip" if settings.vllm_installer else "pip"
    yield StringCommand(install_command(settings))
    yield StringCommand(_record_env(settings, f"made by llmfleet: {tool} install " + " ".join(settings.vllm_packages)))
    yield StringCommand(f"touch {shlex.quote(vllm.env_dir(settings))}/.llmfleet-complete")
    yield FunctionCommand(_flags_checked_now, (settings,), {})


def repair_commands(settings: Settings, diff: dict) -> list[str]:
    """The pip commands that bring an environment back to its record (VllmEnvironment's diff):
    the recorded versions of what was changed or removed, without their dependencies (the record
    holds those too), and the removal of what was added."""
    q, python = shlex.quote, f"{shlex.quote(vllm.env_dir(settings))}/bin/python3"
    pins = {**diff["removed"], **{name: both[0] for name, both in diff["changed"].items()}}
    out = []
    if pins:
        out.append(f"{python} {PIP.format('install')} --no-deps "
                   + " ".join(q(f"{n}=={v}") for n, v in sorted(pins.items())))
    if diff["added"]:
        out.append(f"{python} -m pip uninstall -y -q " + " ".join(q(n) for n in sorted(diff["added"])))
    return out


def env_differences(diff: dict) -> list[str]:
    """Each distribution that differs from the record, as `name: expected X, actual Y`."""
    return ([f"{n}: expected {v}, actual not installed" for n, v in diff["removed"].items()]
            + [f"{n}: expected {e}, actual {a}" for n, (e, a) in diff["changed"].items()]
            + [f"{n}: expected not installed, actual {v}" for n, v in diff["added"].items()])


@operation(is_idempotent=False)
def environment_repaired(settings: Settings, diff: dict):
    """
    The environment back to its record: the recorded versions reinstalled, what was added
    removed, the result compared with the record again; then the flags are checked.

    + settings: the host's settings
    + diff: the environment against its record (fact VllmEnvironment)
    """
    for command in repair_commands(settings, diff):
        yield StringCommand(command)
    yield StringCommand(python_script("vllm_env_record", vllm.env_dir(settings), "check"))
    yield FunctionCommand(_flags_checked_now, (settings,), {})


@operation(is_idempotent=False)
def environment_recorded(settings: Settings):
    """
    A record for an environment made before llmfleet recorded them: what it holds now.

    + settings: the host's settings
    """
    yield StringCommand(_record_env(settings, "recorded by llmfleet from what the environment held: it was made "
                                              "before environments had records"))


def local_model_files(settings: Settings) -> dict[str, Path]:
    """Files of a file:// model source, checked here against its SHA256SUMS and the pinned sha256
    of SHA256SUMS before any host is touched (once per run, however many hosts need it)."""
    try:
        return _checked_model_files(vllm.model(settings).source, vllm.model(settings).sha256)
    except OperationValueError as exc:
        raise OperationValueError(f"host {host.name}: {exc}") from None


@functools.lru_cache(maxsize=8)
def _checked_model_files(source: str, sha256: str | None) -> dict[str, Path]:
    root = Path(urlparse(source).path)
    manifest = root / MANIFEST
    where = f"vllm_model.source = {source!r}"
    if not manifest.is_file():
        raise OperationValueError(f"{where}: no {MANIFEST} in the folder (fix: cd {root} && sha256sum * > {MANIFEST})")
    got = hashlib.sha256(manifest.read_bytes()).hexdigest()
    if got != sha256:
        raise OperationValueError(f"vllm_model.sha256 = {sha256!r}: {root}/{MANIFEST} has sha256 {got} "
                                  "(fix: pin the sha256 of the model you mean to serve)")
    listed = {}
    for line in manifest.read_text().splitlines():
        digest, name = line.split(maxsplit=1)
        name = name.lstrip("*")
        path = root / name
        if not path.is_file() or hashlib.sha256(path.read_bytes()).hexdigest() != digest:
            raise OperationValueError(f"{where}: {name} does not match its {MANIFEST} entry "
                                      "(fix: restore the file, or rebuild the model and pin its new sha256)")
        listed[name] = path
    return listed


def model_synced(settings: Settings) -> None:
    model, dest = vllm.model(settings), vllm.model_dir(settings)
    q = shlex.quote(dest)
    label = f"model {model.name} {model.version}"
    scheme = urlparse(model.source).scheme
    files.directory(name=f"{label}: folder", path=dest, mode="755")
    if scheme == "file":
        for name, path in sorted(local_model_files(settings).items()):
            files.put(name=f"{label}: {name}", src=str(path), dest=f"{dest}/{name}", mode="644")
        files.put(name=f"{label}: {MANIFEST}", src=str(Path(urlparse(model.source).path) / MANIFEST),
                  dest=f"{dest}/{MANIFEST}", mode="644")
        verify = f"cd {q} && sha256sum --quiet -c {MANIFEST}"
    elif scheme in ("http", "https"):
        archive = f"{vllm.model_root(settings)}/.{model.version}.tar"
        files.download(name=f"{label}: archive (sha256 checked)", src=model.source, dest=archive,
                       sha256sum=model.sha256, mode="600")
        verify = f"tar -xf {shlex.quote(archive)} -C {q} && rm -f {shlex.quote(archive)}"
    else:  # hf://org/name at a pinned revision, through the vLLM environment's huggingface_hub
        repo = model.source.removeprefix("hf://")
        script = (f"from huggingface_hub import snapshot_download; snapshot_download({repo!r}, "
                  f"revision={model.revision!r}, local_dir={dest!r})")
        verify = f"{shlex.quote(vllm.env_dir(settings))}/bin/python3 -c {shlex.quote(script)}"
    server.shell(name=f"{label}: verified", commands=[f"{verify} && chmod -R a+rX {q} && touch {q}/.llmfleet-verified"])


# ------------------------------------------------------------------------------------------------
# activate
# ------------------------------------------------------------------------------------------------
def flag_problems(settings: Settings, report: dict) -> list[str]:
    """What the host's vLLM (fact VllmFlags: its parser, then its configuration classes) refuses,
    each with its fix."""
    if "unreadable" in report:
        return [f"vllm_flags: could not run the vLLM parser in {vllm.env_dir(settings)}/bin/python3: "
                f"{report['unreadable'][-500:]}"]
    return vllm.host_flag_problems(settings, report)


# The check's answer for an environment, shared by the hosts of this run (one per state, env,
# arguments, unit environment and GPU profile): hosts whose environment is the same package set (its
# path names it, envs/<id>) and holds exactly what its record says (VllmEnvironment: no package
# differs) hold the same vLLM, and with the same GPUs it builds the same configuration, so one
# host's check answers for all of them; the others wait for it instead of each importing
# vLLM and PyTorch at once (about 15 s of CPU a host). An answer that could not be read (the
# parser did not load there) or a host that failed to answer is no one else's: each host then
# reads its own.
_FLAG_ANSWERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def checked_args(settings: Settings) -> list[str]:
    """The arguments the flag check gives the host's vLLM: the server's, or in a layout its first
    instance's (the instances differ only in port and parallel sizes), with --model the folder of
    the version the restart serves (the `current` link may still name the one served now; vLLM
    reads the model's config.json from it, where it is on the host already)."""
    instances = vllm_layout.instances(settings)
    args = vllm.server_args(settings, instances[0] if instances else None)
    return [vllm.model_dir(settings) if i and args[i - 1] == "--model" else a for i, a in enumerate(args)]


def checked_env(settings: Settings) -> dict[str, str]:
    """The unit's environment, which the check runs vLLM in (vllm_env; in a layout, its first
    instance's GPUs): vLLM reads its settings from there too (VLLM_CPU_KVCACHE_SPACE, ...)."""
    instances = vllm_layout.instances(settings)
    return vllm.instance_env(settings, instances[0] if instances else None)


def shared_flag_report(state, settings: Settings, read) -> dict:
    """The VllmFlags answer for this host's environment and arguments: `read()` on the first host
    that asks in this run, the same answer for the hosts after it."""
    answers = _FLAG_ANSWERS.setdefault(state, {})
    key = (vllm.env_dir(settings), json.dumps(checked_args(settings)), json.dumps(checked_env(settings)),
           settings.gpu_profile)
    pending = answers.get(key)
    if pending is not None:
        answer = pending.get()
        return answer if answer is not None else read()
    pending = answers[key] = gevent.event.AsyncResult()
    try:
        answer = read()
    except BaseException:
        pending.set(None)
        raise
    pending.set(None if "unreadable" in answer else answer)
    return answer


def _flags_checked_now(state, host, settings: Settings) -> bool:
    """At run time, for an environment made or repaired in this deploy."""
    command = VllmFlags().command(f"{vllm.env_dir(settings)}/bin/python3", checked_args(settings),
                                  checked_env(settings))
    _, out = _run(host, command)
    report = VllmFlags().process(out.splitlines())
    problems = flag_problems(settings, report)
    for problem in problems:
        host.log_styled(problem + "; the running service is left as it is", fg="red", log_func=logger.error)
    _log_partial_check(host, report)
    return not problems


def _log_partial_check(host, report: dict) -> None:
    """Says so where vLLM could check only part of its configuration (the model not on the host yet),
    and where the answer is one the host kept from an earlier check of the same inputs."""
    if report.get("note"):
        host.log_styled(f"vllm: flags: {report['note']}", fg="yellow", log_func=logger.info)
    if report.get("reused") and report.get("ok"):
        host.log(f"vllm: flags: passed vLLM {report.get('version')}'s check at {report['reused']}, reused (the same "
                 "vLLM packages, arguments, environment and model config)", log_func=logger.info)


def restart_causes(settings: Settings, state: dict, env: dict, unit_text: str) -> dict[str, str]:
    """What differs from what is active, by kind (unit, key, environment, model, packages,
    service), each saying what differs: the facts VllmState and VllmEnvironment in, causes out."""
    causes = {}
    if state["unit_sha256"] != _sha(unit_text):
        causes["unit"] = (f"the unit {vllm.UNIT_PATH} is not the rendered one" if state["unit_sha256"]
                          else f"first start: no unit {vllm.UNIT_PATH}")
    causes |= shared_causes(settings, state, env)
    if not causes and (state["active"] != "active" or state["enabled"] != "enabled"):
        causes["service"] = f"the service is {state['active']}/{state['enabled']}, not active/enabled"
    return causes


def shared_causes(settings: Settings, state: dict, env: dict) -> dict[str, str]:
    """What differs that every unit of the host uses: the key, the environment and its packages,
    the model (restart_causes; in a layout, a cause of every instance)."""
    causes = {}
    if state["key_sha256"] != _sha(vllm.api_key_env(settings)):
        if not settings.vllm_api_key_file:
            causes["key"] = f"the API key file {vllm.API_KEY_FILE} is there, and vllm_api_key_file is None"
        else:
            causes["key"] = (f"the API key file {vllm.API_KEY_FILE} " + ("is missing" if state["key_sha256"] is None
                             else "does not hold vllm_api_key_file's key"))
    if state["venv_target"] != vllm.env_dir(settings):
        now = f"points to {state['venv_target']}" if state["venv_target"] else "is missing"
        causes["environment"] = (f"the environment link {settings.vllm_venv} {now}, not environment "
                                 f"{vllm.env_id(settings)} ({', '.join(settings.vllm_packages)})")
    if state["model_target"] != vllm.model_dir(settings):
        now = f"points to {state['model_target']}" if state["model_target"] else "is missing"
        causes["model"] = (f"the model link {vllm.model_link(settings)} {now}, not model "
                           f"{vllm.model(settings).name} {vllm.model(settings).version}")
    if env.get("recorded") and (env["added"] or env["removed"] or env["changed"]):
        causes["packages"] = (f"environment {vllm.env_id(settings)} differs from its record: "
                              + "; ".join(env_differences(env)))
    return causes


def instance_causes(settings: Settings, state: dict, env: dict, unit_texts: dict[str, str]) -> dict[str, dict]:
    """A layout's instances that need a (re)start, by unit name, each with what differs: its unit,
    what every instance uses (shared_causes), or its service not active and enabled. The facts
    VllmState (with "units") and VllmEnvironment in; unit_texts: unit name -> rendered unit."""
    shared = shared_causes(settings, state, env)
    out = {}
    for unit, text in unit_texts.items():
        now = state["units"].get(unit, {"sha256": None, "active": "inactive", "enabled": "disabled"})
        causes = {}
        if now["sha256"] != _sha(text):
            causes["unit"] = (f"the unit {unit} is not the rendered one" if now["sha256"]
                              else f"first start: no unit {unit}")
        causes |= shared
        if not causes and (now["active"] != "active" or now["enabled"] != "enabled"):
            causes["service"] = f"{unit} is {now['active']}/{now['enabled']}, not active/enabled"
        if causes:
            out[unit] = causes
    return out


def _put_secret(state, host, content: str, dest: str) -> bool:
    """Upload a secret without it ever being readable by others: into a 0700 folder of the login
    user, then installed root:root 0600 and the copy removed."""
    ok, home = _run(host, "install -d -m 700 \"$HOME/.llmfleet\" && echo \"$HOME\"", sudo=False)
    if not ok:
        return False
    tmp = f"{home.splitlines()[-1]}/.llmfleet/upload.env"
    if not host.put_file(StringIO(content), tmp):
        return False
    ok, _ = _run(host, f"install -D -m 600 -o root -g root {shlex.quote(tmp)} {shlex.quote(dest)}; "
                       f"r=$?; rm -f {shlex.quote(tmp)}; exit $r")
    return ok


@operation(is_idempotent=False)
def staged_unit(unit_text: str, unit: str = vllm.UNIT_NAME):
    """
    The rendered unit, staged for the switch.

    + unit_text: the rendered unit
    + unit: its name (vllm.service, or an instance's vllm-<name>.service)
    """
    staged = f"{vllm.CONF_DIR}/{unit}.new"
    yield StringCommand(f"install -d -m 755 {vllm.CONF_DIR}")
    yield FileUploadCommand(StringIO(unit_text), staged)
    yield StringCommand(f"chmod 644 {staged}")


@operation(is_idempotent=False)
def staged_key(settings: Settings):
    """
    The API key file, staged for the switch (root:root 0600; the key is never an argument or in
    the output).

    + settings: the host's settings
    """
    yield FunctionCommand(_stage_key, (settings,), {})


def _stage_key(state, host, settings: Settings) -> bool:
    key_env = vllm.api_key_env(settings)  # read here, at run time: the key is never an argument
    return key_env is not None and _put_secret(state, host, key_env, STAGED_KEY)


@operation(is_idempotent=False)
def staged_link(link: str, target: str):
    """
    A link staged beside the one it replaces at the switch (<link>.new).

    + link: the link the switch replaces
    + target: where it will point
    """
    yield StringCommand(f"ln -sfn {shlex.quote(target)} {shlex.quote(link + '.new')}")


def _ports_checked(settings: Settings) -> None:
    """Before a start or restart: a port the deploy is to listen on that another process holds
    stops the host, before anything on it changes."""
    ports = sorted(vllm_layout.port_owners(settings))
    problems = vllm_layout.held_port_problems(settings, host.get_fact(PortHolders, ports=ports))
    for problem in problems:
        host.log_styled(f"Error: {problem}", fg="red", log_func=logger.error)
    if problems:
        raise OperationValueError(f"host {host.name}: " + "; ".join(problems) + "; nothing was changed")


def _flags_checked(settings: Settings, state: dict, causes: dict) -> None:
    """The environment is there as recorded: its vLLM checks the flags now, before any change, as
    the server would at start (its parser, then its configuration classes, in the unit's
    environment; once for the hosts of one environment: shared_flag_report). After a repair, or in
    a new environment, they are checked there at run time (_flags_checked_now)."""
    if not state["env_ready"] or "packages" in causes:
        # vLLM cannot be asked here: no environment yet (a fresh host, a new package set), or one
        # whose packages differ from its record. environment_made/environment_repaired ask it at run
        # time, once the environment is there, still before any restart (_flags_checked_now)
        return
    report = shared_flag_report(host.state, settings, lambda: host.get_fact(
        VllmFlags, python=f"{vllm.env_dir(settings)}/bin/python3", args=checked_args(settings),
        env=checked_env(settings)))
    _log_partial_check(host, report)
    problems = flag_problems(settings, report)
    for problem in problems:  # one line per host, which the audit's dry run reads (config_drift.py)
        host.log_styled(f"Error: {problem}", fg="red", log_func=logger.error)
    if problems:
        raise OperationValueError(f"host {host.name}: " + "; ".join(problems)
                                  + "; the running service is left as it is")


@deploy("vllm")
def serve(settings: Settings, gpu: bool):
    """Install, configure and (when anything differs) roll out the vLLM service; what it manages
    in the host's manifest, its mode and owner put back after the roll."""
    _serve(settings, gpu)
    if settings.vllm_enabled:
        _managed(settings, gpu)


def _serve(settings: Settings, gpu: bool) -> None:
    if not settings.vllm_enabled:
        why = "vllm: skipped: vllm_enabled is False for this host"
        host.noop(why)
        host.log_styled(why, fg="yellow", log_func=logger.info)
        if host.get_fact(File, path=vllm.UNIT_PATH):  # it served before: it must not any more
            systemd.service(name="vllm: stopped and disabled (vllm_enabled is False)", service=vllm.UNIT_NAME,
                            running=False, enabled=False)
        return
    if gpu:  # which kernels the quantization and an fp8 KV cache get on these GPUs (llmfleet/gpu_guardrails.py)
        for path in precision_paths(settings):
            host.log_styled(f"vllm: {path}", log_func=logger.info)
    _canary(settings)  # a canary the inventory cannot run stops the deploy before any host is touched
    instances = vllm_layout.instances(settings)
    state = host.get_fact(VllmState, paths=_paths(settings, instances))
    if not state["model_ready"] and urlparse(vllm.model(settings).source).scheme == "file":
        local_model_files(settings)  # a wrong pin or a damaged model stops the deploy before any change
    # a model from a folder or an archive is put in place before a new environment is made, so the
    # flag check made then builds vLLM's whole configuration from its config.json; one from the hub
    # is fetched with the environment's huggingface_hub, after it
    model_first = urlparse(vllm.model(settings).source).scheme != "hf"
    if not state["model_ready"] and model_first:
        model_synced(settings)
    env = host.get_fact(VllmEnvironment, env_dir=vllm.env_dir(settings)) if state["env_ready"] else {}
    label = f"vLLM environment {vllm.env_id(settings)}"
    if not state["env_ready"]:
        environment_made(name=f"{label} ({', '.join(settings.vllm_packages)})", settings=settings)
    elif not env["recorded"]:
        host.log_styled(f"vllm: {label} has no record of its packages ({ENV_RECORD}): it was made before "
                        "records; this deploy records what it holds now, and compares with that from then on",
                        fg="yellow", log_func=logger.warning)
        environment_recorded(name=f"{label}: no record of its packages (made before records): recorded from "
                                  "what it holds", settings=settings)
    elif env["added"] or env["removed"] or env["changed"]:
        environment_repaired(name=f"{label}: packages differ from its record: the recorded versions put back",
                             settings=settings, diff=env)
    if not state["model_ready"] and not model_first:
        model_synced(settings)

    if instances is not None:
        _serve_layout(settings, gpu, state, env, instances)
        return
    unit_text = vllm.render_unit(settings, gpu)
    causes = restart_causes(settings, state, env, unit_text)
    if not causes:
        host.noop("vllm: unit, environment and its packages, model and key as deployed; service active and enabled")
        return
    _ports_checked(settings)
    _flags_checked(settings, state, causes)
    # each difference staged by an operation of its own, named after it (the dry run's plan names
    # an operation once for all hosts, so a name never holds one host's state)
    if "unit" in causes:
        staged_unit(name=f"vllm: unit {vllm.UNIT_PATH} missing or not the rendered one: staged for the restart",
                    unit_text=unit_text)
    _stage_shared(settings, set(causes))
    for cause in causes.values():
        host.log_styled(f"vllm: restart planned: {cause}", fg="blue", log_func=logger.info)
    can_switch_back = bool(state["unit_sha256"] and state["venv_target"] and state["model_target"])
    if state["active"] != "active":
        # it does not serve now (a first start, a stopped or failed service): starting it takes no
        # capacity away, so it waits for no batch; these hosts start first, together, and one that
        # does not get ready stops the roll of the serving hosts after them
        rolled_out(name="vllm: start on what is staged, at once on every host that does not serve now",
                   settings=settings, causes=causes, can_switch_back=can_switch_back)
    else:
        canary = _canary(settings)
        if canary and canary["role"] == vllm_roll.COHORT:
            vllm_roll.canary_pending(host.name)
        rolled_out(name="vllm: restart on what is staged, in batches of vllm_max_unavailable, each ready before the "
                        "next (a canary's cohort first, the others on its verdict)", settings=settings, causes=causes,
                   can_switch_back=can_switch_back, limit=settings.vllm_max_unavailable, canary=canary,
                   **_in_batches(settings, canary))


# ------------------------------------------------------------------------------------------------
# a serving layout: an instance per unit, behind the host's front door (operations/frontdoor.py)
# ------------------------------------------------------------------------------------------------
def unit_texts(settings: Settings, gpu: bool, instances: list[VllmInstance], node_cpus: dict) -> dict[str, str]:
    """Each instance's rendered unit, by unit name, bound to its NUMA node (fact NumaNodes)."""
    profile = settings.profile
    return {i.unit_name: vllm.render_unit(settings, gpu, i, vllm_layout.binding(i, profile, node_cpus))
            for i in instances}


def _serve_layout(settings: Settings, gpu: bool, state: dict, env: dict, instances: list[VllmInstance]) -> None:
    node_cpus = host.get_fact(NumaNodes)
    problems = vllm_layout.binding_problems(host.name, instances, node_cpus)
    if problems:
        raise OperationValueError(f"host {host.name}: " + "; ".join(problems) + "; nothing was changed")
    texts = unit_texts(settings, gpu, instances, node_cpus)
    causes = instance_causes(settings, state, env, texts)
    dropped = [u for u in state["instance_units"] if u not in texts]
    single = state["unit_sha256"] is not None  # the vllm.service of before the layout
    if not causes and not dropped and not single:
        host.noop(f"vllm: the layout's {len(instances)} instances as deployed (units, environment and its packages, "
                  "model and key); each active and enabled")
        return
    if causes:
        _ports_checked(settings)
        _flags_checked(settings, state, {k: v for c in causes.values() for k, v in c.items()})
    for unit, why in causes.items():
        if "unit" in why:
            staged_unit(name="vllm: an instance's unit missing or not the rendered one: staged for its restart",
                        unit_text=texts[unit], unit=unit)
    _stage_shared(settings, set(shared_causes(settings, state, env)))
    for unit, why in causes.items():
        host.log_styled(f"vllm: {unit}: restart planned: " + "; ".join(why.values()), fg="blue", log_func=logger.info)
    if single:
        host.log_styled(f"vllm: moving to vllm_layout: {vllm.UNIT_NAME} is stopped and removed, then the instances "
                        "start on its GPUs and the front door takes its port", fg="blue", log_func=logger.info)
    for unit in dropped:
        host.log_styled(f"vllm: {unit} is no longer in vllm_layout: drained, stopped and removed", fg="blue",
                        log_func=logger.info)
    serving = state["active"] == "active" or any(state["units"].get(u, {}).get("active") == "active" for u in texts)
    can_switch_back = bool(state["venv_target"] and state["model_target"])
    if serving and not single:
        instances_rolled_out(name="vllm: instances restarted one at a time, each drained in the front door first and "
                                  "back in it when ready; hosts in batches of vllm_max_unavailable",
                             settings=settings, causes=causes, dropped=dropped, single=single,
                             can_switch_back=can_switch_back, limit=settings.vllm_max_unavailable,
                             canary=_canary(settings), **_in_batches(settings, _canary(settings)))
    elif single and state["active"] == "active":
        # a move from a serving vllm.service: the host answers nothing from vllm.service's stop until
        # its instances are up (19.7 s in the lab, README's layout benchmark), so it takes the host's
        # capacity away like a restart does: hosts move in batches of vllm_max_unavailable
        instances_rolled_out(name="vllm: moved from vllm.service to the layout's instances (started together), "
                                  "hosts in batches of vllm_max_unavailable",
                             settings=settings, causes=causes, dropped=dropped, single=single,
                             can_switch_back=can_switch_back, limit=settings.vllm_max_unavailable,
                             canary=_canary(settings), **_in_batches(settings, _canary(settings)))
    else:
        # nothing serves from these instances now (a first start, or a move from a vllm.service that
        # does not serve): they start together, and one that does not get ready stops the roll
        instances_rolled_out(name="vllm: instances started together (nothing serves from them now)",
                             settings=settings, causes=causes, dropped=dropped, single=single,
                             can_switch_back=can_switch_back)


def _fleet() -> list[tuple[str, str, Settings, list[str]]]:
    """Every host of the inventory, read once per inventory (operations/gateway.py inventory_hosts)."""
    key = tuple(id(h) for h in inventory)
    if key not in _FLEET:
        _FLEET.clear()
        _FLEET[key] = inventory_hosts()
    return _FLEET[key]


_FLEET: dict[tuple, list] = {}


def _canary(settings: Settings) -> dict | None:
    """The host's part in a canary (operations/vllm_roll.py canary_plan), None in a rolling deploy; a
    canary the inventory cannot run stops the deploy before any host is touched."""
    if settings.rollout_strategy != "canary":
        return None
    try:
        return vllm_roll.canary_plan(settings, host.name, _fleet())
    except ValueError as exc:
        raise OperationValueError(f"host {host.name}: {exc}; nothing was changed") from None


def _in_batches(settings: Settings, canary: dict | None) -> dict:
    """pyinfra's batches of vllm_max_unavailable hosts in a rolling deploy. A canary runs every host's
    roll at once: the cohort's hosts take the roll's slots first, wherever they are in the
    inventory, and the others wait for the verdict before they take one (llmfleet/roll.py's slots
    keep vllm_max_unavailable either way)."""
    return {} if canary else {"_parallel": settings.vllm_max_unavailable}


def _stage_shared(settings: Settings, causes: set[str]) -> None:
    """What every unit of the host shares, staged where it differs (its restart follows): the API
    key, the environment link, the model link. One operation each, named after the difference."""
    if "key" in causes and settings.vllm_api_key_file:
        staged_key(name="vllm: API key file not vllm_api_key_file's key: staged for the restart", settings=settings)
    if "environment" in causes:
        staged_link(name="vllm: environment link vllm_venv not at this package set's environment: staged for the "
                         "restart", link=settings.vllm_venv, target=vllm.env_dir(settings))
    if "model" in causes:
        staged_link(name="vllm: model link `current` missing or not at vllm_model's version: staged for the restart",
                    link=vllm.model_link(settings), target=vllm.model_dir(settings))


def _managed(settings: Settings, gpu: bool) -> None:
    """Record in the host's manifest what the roll switches into place (units, API key file,
    environment and model links, the model's SHA256SUMS), and put back the mode and owner of the
    units and the key file where they differ (their content is the roll's: restart_causes)."""
    instances = vllm_layout.instances(settings)
    units = ({vllm.UNIT_PATH: vllm.render_unit(settings, gpu)} if instances is None else
             {vllm.unit_path(i): text for i, text in zip(instances, unit_texts(
                 settings, gpu, instances, host.get_fact(NumaNodes)).values(), strict=True)})
    for path, text in units.items():
        managed_files.recorded(file_entry(path, text, f"vllm: unit {path} (rolled out)", "644"), text)
    key = vllm.api_key_env(settings)
    if key is None:
        managed_files.recorded(Entry(vllm.API_KEY_FILE, "absent", "vllm: no API key file (vllm_api_key_file None)"))
    else:
        managed_files.recorded(file_entry(vllm.API_KEY_FILE, key, "vllm: API key file (vllm_api_key_file)", "600",
                                          secret=True))
        units[vllm.API_KEY_FILE] = key
    managed_files.recorded(Entry(settings.vllm_venv, "link", "vllm: environment link (vllm_venv)",
                                 target=vllm.env_dir(settings), user="root", group="root"))
    managed_files.recorded(Entry(vllm.model_link(settings), "link", "vllm: model link `current` (vllm_model)",
                                 target=vllm.model_dir(settings), user="root", group="root"))
    model = vllm.model(settings)
    if model.sha256:
        managed_files.recorded(Entry(f"{vllm.model_dir(settings)}/{MANIFEST}", "file",
                                     f"model {model.name} {model.version}: {MANIFEST} (vllm_model.sha256)",
                                     sha256=model.sha256))
    for path in units:
        mode = "600" if path == vllm.API_KEY_FILE else "644"
        if host.get_fact(File, path=path) is not None:  # a missing one is the roll's to write, with these
            managed_files.attributes(f"vllm: {path} is root's, mode {mode}", path, mode)
