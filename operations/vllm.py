"""vllm: the vLLM OpenAI server as a hardened systemd unit (install, configure, activate).

install    a versioned environment per package set (envs/<id>, complete when marked), beside
           the one serving; the model in a versioned folder, verified by checksum.
configure  the unit, environment and API key file are rendered here, not yet written.
activate   when the unit, environment, model or key differ from what is active: the flags are
           checked with the host's own vLLM parser, then hosts switch and restart in batches of
           `vllm_max_unavailable`, each ready (/health, then a 1-token completion) before the
           next batch. A host that does not get ready is switched back to what it served before;
           the roll stops and the hosts after it keep serving the old version.
"""

from __future__ import annotations

import functools
import hashlib
import json
import shlex
from io import StringIO
from pathlib import Path
from urllib.parse import urlparse

from pyinfra import host, logger
from pyinfra.api import FunctionCommand, OperationValueError, StringCommand, deploy, operation
from pyinfra.facts.files import File
from pyinfra.operations import files, server, systemd

from llmfleet import vllm_service as vllm
from llmfleet.facts import VllmState, python_script
from llmfleet.settings import Settings

# One roll per pyinfra run, shared by the hosts' greenlets: set when a host fails to get ready.
_ROLL: dict[str, str | None] = {"stopped_by": None}
MANIFEST = "SHA256SUMS"


def _paths(settings: Settings) -> dict:
    return {"unit": vllm.UNIT_PATH, "key_file": vllm.API_KEY_FILE, "venv_link": settings.vllm_venv,
            "model_link": vllm.model_link(settings), "env_dir": vllm.env_dir(settings),
            "model_dir": vllm.model_dir(settings)}


def _sha(text: str | None) -> str | None:
    return hashlib.sha256(text.encode()).hexdigest() if text is not None else None


def _run(host, command: str, sudo: bool = True) -> tuple[bool, str]:
    ok, output = host.run_shell_command(StringCommand(command), _sudo=sudo)
    return ok, "\n".join(output.stdout_lines + output.stderr_lines).strip()


# ------------------------------------------------------------------------------------------------
# install
# ------------------------------------------------------------------------------------------------
def environment_installed(settings: Settings) -> None:
    env = vllm.env_dir(settings)
    q = shlex.quote
    packages = " ".join(q(p) for p in settings.vllm_packages)
    steps = [f"rm -rf {q(env)}", f"mkdir -p {q(vllm.envs_dir(settings))}", f"python3 -m venv {q(env)}",
             f"{q(env)}/bin/python3 -m pip install -q --no-cache-dir --disable-pip-version-check {packages}"]
    if settings.vllm_pip_remove:
        steps.append(f"{q(env)}/bin/python3 -m pip uninstall -y -q "
                     + " ".join(q(p) for p in settings.vllm_pip_remove))
    steps.append(f"touch {q(env)}/.llmfleet-complete")
    server.shell(name=f"vLLM environment {vllm.env_id(settings)} ({', '.join(settings.vllm_packages)})",
                 commands=[" && ".join(steps)])


def local_model_files(settings: Settings) -> dict[str, Path]:
    """Files of a file:// model source, checked here against its SHA256SUMS and the pinned sha256
    of SHA256SUMS before any host is touched (once per run, however many hosts need it)."""
    try:
        return _checked_model_files(settings.vllm_model.source, settings.vllm_model.sha256)
    except OperationValueError as exc:
        raise OperationValueError(f"host {host.name}: {exc}") from None


@functools.lru_cache(maxsize=8)
def _checked_model_files(source: str, sha256: str) -> dict[str, Path]:
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
    model, dest = settings.vllm_model, vllm.model_dir(settings)
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
def _check_flags(state, host, settings: Settings) -> bool:
    python = f"{vllm.env_dir(settings)}/bin/python3"
    ok, out = _run(host, f"cd / && {shlex.quote(python)} - {shlex.quote(json.dumps(vllm.server_args(settings)))} "
                         f"<<'LLMFLEET_EOF' 2>/dev/null\n"
                         f"{(Path(vllm.__file__).parent / 'remote' / 'vllm_flags.py').read_text()}LLMFLEET_EOF")
    try:
        report = json.loads(out.splitlines()[-1])
    except (ValueError, IndexError):
        host.log_styled(f"vllm_flags: could not run the vLLM parser in {python}: {out[-500:]}", fg="red",
                        log_func=logger.error)
        return False
    problems = vllm.host_flag_problems(settings, report)
    for problem in problems:
        host.log_styled(problem + "; the running service is left as it is", fg="red", log_func=logger.error)
    return not problems


@operation(is_idempotent=False)
def flags_valid(settings: Settings):
    """
    The rendered flags pass the argument parser of the vLLM installed in the new environment.

    + settings: the host's settings
    """
    yield FunctionCommand(_check_flags, (settings,), {})


def _gate(state, host) -> bool:
    if _ROLL["stopped_by"]:
        host.log_styled(f"vllm: not restarted: the roll stopped after {_ROLL['stopped_by']}; this host keeps "
                        "serving the version it had", fg="red", log_func=logger.error)
        return False
    return True


def _put_secret(host, content: str, dest: str) -> bool:
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


def _relink(host, link: str, target: str) -> bool:
    """Point a link at a target atomically (a new link renamed over the old)."""
    q = shlex.quote
    ok, _ = _run(host, f"ln -sfn {q(target)} {q(link)}.new && mv -T {q(link)}.new {q(link)}")
    return ok


def _switch(host, unit_text: str, key_env: str | None, links: dict[str, str]) -> bool:
    key, prev_key = vllm.API_KEY_FILE, vllm.API_KEY_FILE + ".prev"
    ok, _ = _run(host, f"install -d -m 755 {vllm.CONF_DIR} && if [ -e {vllm.UNIT_PATH} ]; then "
                       f"cp -a {vllm.UNIT_PATH} {vllm.CONF_DIR}/vllm.service.prev; fi && rm -f {prev_key} && "
                       f"if [ -e {key} ]; then cp -a {key} {prev_key}; fi")
    if not ok or not host.put_file(StringIO(unit_text), vllm.UNIT_PATH, _sudo=True):
        return False
    if key_env is not None:
        if not _put_secret(host, key_env, vllm.API_KEY_FILE):
            return False
    else:
        _run(host, f"rm -f {vllm.API_KEY_FILE}")
    if not all(_relink(host, link, target) for link, target in links.items()):
        return False
    ok, _ = _run(host, f"chmod 644 {vllm.UNIT_PATH} && systemctl daemon-reload && systemctl enable -q "
                       f"{vllm.UNIT_NAME} && systemctl reset-failed {vllm.UNIT_NAME} 2>/dev/null; "
                       f"systemctl restart {vllm.UNIT_NAME}")
    return ok


def _ready(host, settings: Settings) -> dict:
    _, restarts = _run(host, f"systemctl show -p NRestarts --value {vllm.UNIT_NAME}")
    key = vllm.API_KEY_FILE if settings.vllm_api_key_file else "-"
    ok, out = _run(host, python_script("vllm_ready", str(settings.vllm_port), settings.vllm_served_model_name,
                                       str(settings.vllm_ready_timeout_s), restarts.strip() or "0", key))
    try:
        return json.loads(out.splitlines()[-1])
    except (ValueError, IndexError):
        return {"ok": False, "seconds": 0, "why": f"readiness check did not run: {out[-300:]}"}


def _roll_out(state, host, settings: Settings, unit_text: str, previous: dict) -> bool:
    key_env = vllm.api_key_env(settings)  # read here, at the switch: the key is never an argument
    links = {settings.vllm_venv: vllm.env_dir(settings), vllm.model_link(settings): vllm.model_dir(settings)}
    try:
        if not _switch(host, unit_text, key_env, links):
            return _stop(host, "could not switch to the new version")
        ready = _ready(host, settings)
        if ready["ok"]:
            host.log_styled(f"vllm: ready in {ready['seconds']}s (health and a 1-token completion)", fg="green",
                            log_func=logger.info)
            return True
        why = ready["why"]
        if previous.get("unit_existed") and previous.get("venv_target") and previous.get("model_target"):
            key, prev_key = vllm.API_KEY_FILE, vllm.API_KEY_FILE + ".prev"
            _run(host, f"cp -a {vllm.CONF_DIR}/vllm.service.prev {vllm.UNIT_PATH} && "
                       f"if [ -e {prev_key} ]; then cp -a {prev_key} {key}; else rm -f {key}; fi")
            back = {settings.vllm_venv: previous["venv_target"], vllm.model_link(settings): previous["model_target"]}
            for link, target in back.items():
                _relink(host, link, target)
            _run(host, f"systemctl daemon-reload && systemctl reset-failed {vllm.UNIT_NAME}; "
                       f"systemctl restart {vllm.UNIT_NAME}")
            again = _ready(host, settings)
            why += ("; switched back to the previous version, which is serving again" if again["ok"]
                    else f"; switched back to the previous version, which is not ready either: {again['why']}")
        return _stop(host, why)
    except Exception as exc:  # noqa: BLE001 - pyinfra would log and carry on; the roll must stop
        return _stop(host, f"could not be rolled out ({exc})")


def _stop(host, why: str) -> bool:
    _ROLL["stopped_by"] = host.name
    host.log_styled(f"vllm: not ready: {why}; stopping the roll", fg="red", log_func=logger.error)
    return False


@operation(is_idempotent=False)
def rolled_out(settings: Settings, unit_text: str, previous: dict, reasons: list[str]):
    """
    Switch the host to the rendered unit, environment, model and API key, restart, and wait until
    it is ready; switch back and stop the roll when it is not.

    + settings: the host's settings
    + unit_text: the rendered unit
    + previous: what was active (fact VllmState), to switch back to
    + reasons: why the host restarts (shown in the output)
    """
    yield FunctionCommand(_gate, (), {})
    yield FunctionCommand(_roll_out, (settings, unit_text, previous), {})


@deploy("vllm")
def serve(settings: Settings, gpu: bool):
    """Install, configure and (when anything changed) roll out the vLLM service."""
    if not settings.vllm_enabled:
        why = "vllm: skipped: vllm_enabled is False for this host"
        host.noop(why)
        host.log_styled(why, fg="yellow", log_func=logger.info)
        if host.get_fact(File, path=vllm.UNIT_PATH):  # it served before: it must not any more
            systemd.service(name="vllm: stopped and disabled (vllm_enabled is False)", service=vllm.UNIT_NAME,
                            running=False, enabled=False)
        return
    state = host.get_fact(VllmState, paths=_paths(settings))
    if not state["model_ready"] and urlparse(settings.vllm_model.source).scheme == "file":
        local_model_files(settings)  # a wrong pin or a damaged model stops the deploy before any change
    if not state["env_ready"]:
        environment_installed(settings)
    if not state["model_ready"]:
        model_synced(settings)

    unit_text = vllm.render_unit(settings, gpu)
    key_sha = _sha(vllm.api_key_env(settings))
    why = []
    if state["unit_sha256"] != _sha(unit_text):
        why.append("the unit changed" if state["unit_sha256"] else "first start")
    if state["venv_target"] != vllm.env_dir(settings):
        why.append(f"environment {vllm.env_id(settings)} ({', '.join(settings.vllm_packages)})")
    if state["model_target"] != vllm.model_dir(settings):
        why.append(f"model {settings.vllm_model.name} {settings.vllm_model.version}")
    if state["key_sha256"] != key_sha:
        why.append("the API key changed")
    if not why and (state["active"] != "active" or state["enabled"] != "enabled"):
        why.append(f"the service is {state['active']}/{state['enabled']}")
    if not why:
        host.noop("vllm: unit, environment, model and key as deployed; service active and enabled")
        return
    flags_valid(name="vllm: flags accepted by the installed vLLM's parser", settings=settings)
    rolled_out(name="vllm: restart: " + "; ".join(why), settings=settings, unit_text=unit_text,
               previous={"unit_existed": state["unit_sha256"] is not None, "venv_target": state["venv_target"],
                         "model_target": state["model_target"]},
               reasons=why, _parallel=settings.vllm_max_unavailable)
