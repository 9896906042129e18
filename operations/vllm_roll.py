"""vllm's roll: hosts switch to what operations/vllm.py staged (llmfleet/remote/vllm_switch.py) and
restart in batches of `vllm_max_unavailable`, each ready (/health, then a 1-token completion) before
the next batch; a host that does not get ready is switched back to what it served before, and the
roll stops: the hosts after it keep serving the old version. Hosts that do not serve now (a first
start, a stopped or failed service) lose no capacity by starting: they start first, all at once.

One roll for both shapes of a host: `rolled_out` for vllm.service, `instances_rolled_out` for a
serving layout's instances (one at a time behind the front door, each drained first). Both pass the
same gate (`_gate`), wait for the same readiness check (`_ready`) and end a failed roll the same way
(`_stopped`). The slots and the stop shared by every shard of a deploy are llmfleet/roll.py's.

A serving host without a layout leaves the rotation of what fronts it before its restart and
comes back once it is ready (`_rotation`): the fleet gateway, where the inventory has gateway hosts
(the host's agent says "drain", llmfleet/gateway.py), and gateway_drain_hook's command, where a
fleet's own load balancer fronts it. A layout host keeps serving through its front door.
"""

from __future__ import annotations

import json

import gevent
from gevent import subprocess
from pyinfra import host as current_host
from pyinfra import logger
from pyinfra.api import FunctionCommand, StringCommand, operation

from llmfleet import frontdoor, gateway, roll, vllm, vllm_layout
from llmfleet.facts import python_script
from llmfleet.schema import VllmInstance
from llmfleet.settings import Settings

SWITCH_RECORD = f"{vllm.CONF_DIR}/last-switch.json"  # what the last switch changed, for the switch-back

# One roll per pyinfra run, shared by the hosts' greenlets: for each host that passed the gate, the
# greenlet its roll runs in. A host failed when it started and did not finish, and its roll is over
# (its greenlet is done, or pyinfra failed the host: --serial runs every host in one greenlet);
# hosts of the same batch, or starting together, are still running theirs, and are no failure.
# The stop itself, and the slots that keep a serving host's restart within vllm_max_unavailable
# when hosts do not run in step, are llmfleet/roll.py's (shared by every shard of a deploy).
_ROLL: dict = {"started": {}, "finished": set()}
ROLL = roll.VLLM  # its slots and its stop (llmfleet/roll.py)


def _roll() -> roll.Roll:
    return roll.get(ROLL, gevent.sleep)  # waiting for a slot lets the other hosts' greenlets run


def _failed_rolls(state) -> list[str]:
    failed_hosts = {h.name for h in state.failed_hosts}
    return sorted(name for name, greenlet in _ROLL["started"].items()
                  if name not in _ROLL["finished"] and (greenlet.dead or name in failed_hosts))


def run(host, command: str, sudo: bool = True) -> tuple[bool, str]:
    """A command on the host now (inside an operation's function): whether it succeeded, and its output."""
    ok, output = host.run_shell_command(StringCommand(command), _sudo=sudo)
    return ok, "\n".join(output.stdout_lines + output.stderr_lines).strip()


def switch_args(settings: Settings, causes: dict) -> list[str]:
    """vllm_switch.py's arguments for what is staged (the unit, the key, the links)."""
    args = ["switch", "--record", SWITCH_RECORD, "--service", vllm.UNIT_NAME, "--keep", vllm.CONF_DIR]
    if "unit" in causes:
        args += ["--unit", vllm.UNIT_PATH]
    if "key" in causes:
        args += ["--file", vllm.API_KEY_FILE] if settings.vllm_api_key_file else ["--remove", vllm.API_KEY_FILE]
    if "environment" in causes:
        args += ["--link", settings.vllm_venv]
    if "model" in causes:
        args += ["--link", vllm.model_link(settings)]
    return args


def _gate(state, host, causes: dict, limit: int | None = None) -> bool:
    """A serving host (`limit`: vllm_max_unavailable) holds a slot of the roll until it is ready
    again; a host that serves nothing now takes no capacity away and holds none."""
    this = _roll()
    failed = _failed_rolls(state)
    if failed and not this.stopped():
        this.stop(failed[0])
    why = this.stopped() if limit is None else this.enter(host.name, limit, gevent.getcurrent())
    if why:
        host.log_styled(f"vllm: not restarted: the roll stopped after {why}; this host keeps "
                        "serving the version it had", fg="red", log_func=logger.error)
        return False
    _ROLL["started"][host.name] = gevent.getcurrent()
    host.log_styled("vllm: restarting: " + "; ".join(causes.values()), fg="blue", log_func=logger.info)
    return True


def _ready(host, settings: Settings, instance: VllmInstance | None = None) -> dict:
    unit = vllm.unit_name(instance)
    port = instance.port if instance is not None else settings.vllm_port
    _, restarts = run(host, f"systemctl show -p NRestarts --value {unit}")
    key = vllm.API_KEY_FILE if settings.vllm_api_key_file else "-"
    return _answer(host, python_script("vllm_ready", str(port), settings.vllm_served_model_name,
                                       str(settings.vllm_ready_timeout_s), restarts.strip() or "0", key, unit),
                   "readiness check")


def _answer(host, command: str, what: str) -> dict:
    """A host script's one JSON line ({"ok", "seconds", "why", ...}), or a failed answer naming `what`
    did not run, with the end of its output."""
    _, out = run(host, command)
    try:
        return json.loads(out.splitlines()[-1])
    except (ValueError, IndexError):
        return {"ok": False, "seconds": 0, "why": f"{what} did not run: {out[-300:]}"}


def _has_gateways(state, settings: Settings) -> bool:
    """Gateway hosts in the inventory (those a --limit leaves out too)."""
    return gateway.has_gateways([list(h.groups) for h in state.inventory], settings.gateway_group)


def fronted(state, settings: Settings) -> bool:
    """Whether something fronts the hosts that a roll must take a host out of first: gateway hosts
    in the inventory, or gateway_drain_hook."""
    return bool(settings.gateway_drain_hook) or _has_gateways(state, settings)


def _rotation(state, host, settings: Settings, word: str) -> dict:
    """The host out of ("drain") or back into ("ready") the rotation of what fronts it:
    gateway_drain_hook's command, run here, then, where the inventory has gateway hosts, the host's
    agent (llmfleet/remote/gateway_agent.py: it also waits for the gateways to act, and after
    "drain" for the host's requests to finish). {"ok", "why", "note"}."""
    notes = []
    argv = gateway.hook_argv(settings, host.name, word)
    if argv:
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=settings.vllm_drain_timeout_s)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return {"ok": False, "why": f"gateway_drain_hook {' '.join(argv)}: {exc}", "note": ""}
        if proc.returncode != 0:
            return {"ok": False, "note": "", "why": f"gateway_drain_hook {' '.join(argv)} exited {proc.returncode}: "
                                                   f"{(proc.stdout + proc.stderr).strip()[-300:]}"}
        notes.append(f"gateway_drain_hook: {word}")
    if _has_gateways(state, settings):
        answer = _answer(host, gateway.agent_command(settings, word), "the gateway agent's command")
        if not answer["ok"]:
            return {"ok": False, "why": f"gateway: {answer['why']}", "note": ""}
        notes.append(f"gateway: {'drained' if word == gateway.DRAIN else 'back in rotation'} in {answer['seconds']}s"
                     + (f" ({answer['why']})" if answer.get("why") and answer["why"] != "drained" else ""))
    return {"ok": True, "why": "", "note": "; ".join(notes)}


def _stop_here(host, why: str) -> bool:
    """The roll stops at this host (its operation fails), the log saying why."""
    _roll().stop(host.name)
    host.log_styled(f"vllm: {why}; stopping the roll", fg="red", log_func=logger.error)
    return False


def _out_of_rotation(state, host, settings: Settings) -> bool:
    """Before the restart: out of the rotation of what fronts the host; where that fails, the host
    is not restarted and the roll stops."""
    out = _rotation(state, host, settings, gateway.DRAIN)
    if not out["ok"]:
        return _stop_here(host, f"not restarted: could not take the host out of rotation: {out['why']}")
    host.log_styled(f"vllm: {out['note']}", fg="blue", log_func=logger.info)
    return True


def _wait_ready(state, host, settings: Settings, outcome: dict, rotation: bool) -> bool:
    """Ready (health and a 1-token completion), then back in the rotation it left (`rotation`),
    before its slot goes to the next host."""
    outcome.update(_ready(host, settings))
    if outcome["ok"]:
        if rotation:
            back = _rotation(state, host, settings, "ready")
            if not back["ok"]:
                return _stop_here(host, f"ready in {outcome['seconds']}s, but not back in rotation: {back['why']}")
            host.log_styled(f"vllm: {back['note']}", fg="blue", log_func=logger.info)
        _ROLL["finished"].add(host.name)
        _roll().leave(host.name)
        host.log_styled(f"vllm: ready in {outcome['seconds']}s (health and a 1-token completion)", fg="green",
                        log_func=logger.info)
    return True  # not ready: the operation goes on to switch back, then stops the roll


def _back(state, host, settings: Settings, outcome: dict, rotation: bool) -> bool:
    """After the switch back (vllm_switch.py restarted vllm.service on what it served): is it ready?
    Serving again, it goes back into the rotation it left."""
    outcome["again"] = _ready(host, settings)
    if outcome["again"]["ok"] and rotation:
        back = _rotation(state, host, settings, "ready")
        if not back["ok"]:
            outcome["again"] = {"ok": False, "why": f"serving, but not back in rotation: {back['why']}"}
    return True


@operation(is_idempotent=False)
def rolled_out(settings: Settings, causes: dict, can_switch_back: bool, limit: int | None = None):
    """
    Switch the host to what is staged (llmfleet/remote/vllm_switch.py), restart, and wait until it
    is ready; switch back and stop the roll when it is not.

    + settings: the host's settings
    + causes: what differs, by kind (restart_causes)
    + can_switch_back: a complete previous version (unit, environment and model links) is there
    + limit: serving hosts of the deploy restarting at once at most (vllm_max_unavailable); None
      where the host serves nothing now (and nothing fronting it sends it requests)
    """
    yield FunctionCommand(_gate, (causes, limit), {})
    # a host that serves now leaves the rotation of what fronts it (the fleet gateway, a hook) first
    rotation = limit is not None and fronted(current_host.state, settings)
    if rotation:
        yield FunctionCommand(_out_of_rotation, (settings,), {})
    yield StringCommand(python_script("vllm_switch", *switch_args(settings, causes)))
    outcome: dict = {}
    yield FunctionCommand(_wait_ready, (settings, outcome, rotation), {})
    if outcome.get("ok"):
        return
    if can_switch_back:
        yield StringCommand(python_script("vllm_switch", "back", "--record", SWITCH_RECORD,
                                          "--service", vllm.UNIT_NAME))
        yield FunctionCommand(_back, (settings, outcome, rotation), {})
    yield FunctionCommand(_stopped, (outcome, can_switch_back), {})


def layout_switch_args(settings: Settings, causes: dict[str, dict]) -> list[str]:
    """vllm_switch.py's arguments for a layout: every staged unit and what the instances share,
    switched at once with no restart (the roll restarts the instances one at a time)."""
    shared = {k for why in causes.values() for k in why}
    args = ["switch", "--record", SWITCH_RECORD, "--keep", vllm.CONF_DIR, "--no-restart"]
    for unit in causes:
        args += ["--service", unit]
    for unit, why in causes.items():
        if "unit" in why:
            args += ["--unit", f"/etc/systemd/system/{unit}"]
    if "key" in shared:
        args += ["--file", vllm.API_KEY_FILE] if settings.vllm_api_key_file else ["--remove", vllm.API_KEY_FILE]
    if "environment" in shared:
        args += ["--link", settings.vllm_venv]
    if "model" in shared:
        args += ["--link", vllm.model_link(settings)]
    return args


def _admin(host, command: str, name: str, timeout_s: int) -> dict:
    """frontdoor_admin.py on the host: the instance out of (drain) or into (ready) rotation."""
    return _answer(host, frontdoor.admin_command(command, name, str(timeout_s)), "front door command")


def _restart_instance(host, settings: Settings, inst: VllmInstance, drain: bool) -> dict:
    """One instance: drained in the front door (bounded), restarted, ready (/health and a 1-token
    completion on its port), back in rotation once the front door has it UP."""
    if drain:
        drained = _admin(host, "drain", inst.name, settings.vllm_drain_timeout_s)
        if not drained["ok"]:
            return drained
        note = drained.get("skipped") or drained.get("why") or f"drained in {drained['seconds']}s"
        host.log_styled(f"vllm: {inst.unit_name}: {note}", fg="blue", log_func=logger.info)
    ok, out = run(host, f"systemctl enable -q {inst.unit_name} && systemctl reset-failed {inst.unit_name}; "
                         f"systemctl restart {inst.unit_name}")
    if not ok:
        return {"ok": False, "seconds": 0, "why": f"systemctl restart {inst.unit_name} failed: {out[-300:]}"}
    ready = _ready(host, settings, inst)
    if not ready["ok"]:
        return ready | {"why": f"{inst.unit_name}: {ready['why']}"}
    back = _admin(host, "ready", inst.name, frontdoor.up_wait_s(settings))
    if not back["ok"]:
        return back | {"why": f"{inst.unit_name}: ready, but {back['why']}"}
    host.log_styled(f"vllm: {inst.unit_name}: ready in {ready['seconds']}s, back in the front door", fg="green",
                    log_func=logger.info)
    return {"ok": True, "seconds": ready["seconds"], "why": ""}


def _start_together(host, settings: Settings, units: list[str], instances: dict[str, VllmInstance]) -> dict:
    if not units:  # a move that stopped half-way: the instances serve already, vllm.service is left
        return {"ok": True, "why": ""}
    names = " ".join(units)
    ok, out = run(host, f"systemctl enable -q {names} && systemctl reset-failed {names}; systemctl restart {names}")
    if not ok:
        return {"ok": False, "why": f"systemctl restart {names} failed: {out[-300:]}"}
    for unit in units:
        ready = _ready(host, settings, instances[unit])
        if not ready["ok"]:
            return ready | {"why": f"{unit}: {ready['why']}"}
        host.log_styled(f"vllm: {unit}: ready (started {ready['seconds']}s before this check ended)", fg="green",
                        log_func=logger.info)
    return {"ok": True, "why": ""}


def _roll_layout(state, host, settings: Settings, units: list[str], dropped: list[str], single: bool,
                 outcome: dict) -> bool:
    """The layout's units, switched already (no restart): a move from vllm.service stops it first
    (its GPUs are the instances'), then every instance starts; otherwise, with the front door
    serving the other instances, one at a time. Dropped instances go last, drained first."""
    instances = {i.unit_name: i for i in vllm_layout.instances(settings) or []}
    if single:
        run(host, f"systemctl stop {vllm.UNIT_NAME}")
    serving = not single and any(run(host, f"systemctl is-active -q {u}")[0] for u in instances)
    if serving:
        for unit in units:
            result = _restart_instance(host, settings, instances[unit], drain=True)
            if not result["ok"]:
                outcome.update(result, rolled=units[:units.index(unit) + 1])
                return True
    else:
        result = _start_together(host, settings, units, instances)
        if not result["ok"]:
            outcome.update(result, rolled=units)
            return True
    for unit in dropped:
        name = unit.removeprefix("vllm-").removesuffix(".service")
        _admin(host, "drain", name, settings.vllm_drain_timeout_s)
        run(host, f"systemctl disable -q --now {unit}; rm -f /etc/systemd/system/{unit}")
    if single:
        run(host, f"systemctl disable -q {vllm.UNIT_NAME}; rm -f {vllm.UNIT_PATH}")
    if single or dropped:
        run(host, "systemctl daemon-reload")
    outcome["ok"] = True
    _ROLL["finished"].add(host.name)
    _roll().leave(host.name)
    return True


def _back_layout(state, host, settings: Settings, single: bool, outcome: dict) -> bool:
    """After the switch back: what was rolled restarts on what it served before (one at a time
    behind the front door), or vllm.service serves again after a move that failed."""
    instances = {i.unit_name: i for i in vllm_layout.instances(settings) or []}
    rolled = outcome.get("rolled", [])
    if single:  # the instances were stopped and disabled before their units were switched back
        run(host, f"systemctl start {vllm.UNIT_NAME}")
        again = _ready(host, settings)
    else:
        again = {"ok": True, "why": ""}
        for unit in rolled:
            result = _restart_instance(host, settings, instances[unit], drain=True) if unit in instances else again
            if not result["ok"]:
                again = result
    outcome["again"] = again
    return True


def _stopped(state, host, outcome: dict, switched_back: bool) -> bool:
    """The end of a roll that failed on this host (vllm.service or a layout's instances alike): the
    roll stops, and the log says why and whether the previous version serves again."""
    why = outcome["why"]
    if switched_back:
        again = outcome.get("again", {"ok": False, "why": "not checked"})
        why += ("; switched back to the previous version, which is serving again" if again["ok"]
                else f"; switched back to the previous version, which is not ready either: {again['why']}")
    _roll().stop(host.name)
    host.log_styled(f"vllm: not ready: {why}; stopping the roll", fg="red", log_func=logger.error)
    return False


@operation(is_idempotent=False)
def instances_rolled_out(settings: Settings, causes: dict, dropped: list, single: bool, can_switch_back: bool,
                         limit: int | None = None):
    """
    Switch a layout host to what is staged (no restart), then restart its instances (one at a time
    behind the front door, or together where none serves), each ready before the next; switch
    back and stop the roll when one is not.

    + settings: the host's settings
    + causes: the instances to restart, by unit, each with what differs (instance_causes)
    + dropped: instance units no longer in the layout
    + single: vllm.service (before the layout) is there, to be stopped and removed
    + can_switch_back: a previous environment and model (links) are there
    + limit: serving hosts of the deploy rolling at once at most (vllm_max_unavailable); None where
      the instances serve nothing now
    """
    yield FunctionCommand(_gate, ({u: "; ".join(why.values()) for u, why in causes.items()}
                                  | ({vllm.UNIT_NAME: "moving to vllm_layout"} if single else {})
                                  | {u: "dropped from vllm_layout" for u in dropped}, limit), {})
    if causes:
        yield StringCommand(python_script("vllm_switch", *layout_switch_args(settings, causes)))
    outcome: dict = {}
    yield FunctionCommand(_roll_layout, (settings, list(causes), dropped, single, outcome), {})
    if outcome.get("ok"):
        return
    if can_switch_back and causes:
        if single:  # before their units go: stopped and disabled, so no link of theirs is left behind
            yield StringCommand(f"systemctl disable -q --now {' '.join(causes)}")
        yield StringCommand(python_script("vllm_switch", "back", "--record", SWITCH_RECORD, "--no-restart",
                                          *[a for u in causes for a in ("--service", u)]))
        yield FunctionCommand(_back_layout, (settings, single, outcome), {})
    yield FunctionCommand(_stopped, (outcome, can_switch_back and bool(causes)), {})
