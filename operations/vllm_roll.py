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
import math
import sys
import time
from pathlib import Path
from typing import Callable

import gevent
from gevent import subprocess
from pyinfra import host as current_host
from pyinfra import logger
from pyinfra.api import FunctionCommand, StringCommand, operation

from llmfleet import frontdoor, gateway, prometheus, roll, rollout, vllm, vllm_layout
from llmfleet.facts import python_script
from llmfleet.probe.config import from_settings as probe_config
from llmfleet.probe.fleet import read_key_file
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


def _gate(state, host, causes: dict, limit: int | None = None, canary: dict | None = None) -> bool:
    """A serving host (`limit`: vllm_max_unavailable) holds a slot of the roll until it is ready
    again; a host that serves nothing now takes no capacity away and holds none. Outside a canary's
    cohort, a serving host first waits for the canary's verdict."""
    this = _roll()
    failed = _failed_rolls(state)
    if failed and not this.stopped():
        this.stop(failed[0])
    why = None
    if canary and canary["role"] == BASELINE and limit is not None:
        why = _await_verdict(host, canary)
    if not why:
        stopped = this.stopped() if limit is None else this.enter(host.name, limit, gevent.getcurrent())
        why = f"the roll stopped after {stopped}" if stopped else None
    if why:
        host.log_styled(f"vllm: not restarted: {why}; this host keeps serving the version it had", fg="red",
                        log_func=logger.error)
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


def _rotation(state, host, settings: Settings, word: str, weight: int = 100) -> dict:
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
        command = gateway.weight_command(settings, weight) if word != gateway.DRAIN and weight != 100 \
            else gateway.agent_command(settings, word)
        answer = _answer(host, command, "the gateway agent's command")
        if not answer["ok"]:
            return {"ok": False, "why": f"gateway: {answer['why']}", "note": ""}
        notes.append(f"gateway: {'drained' if word == gateway.DRAIN else 'back in rotation'} in {answer['seconds']}s"
                     + (f" at weight {weight}%" if word != gateway.DRAIN and weight != 100 else "")
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


def _wait_ready(state, host, settings: Settings, outcome: dict, rotation: bool, canary: dict | None = None) -> bool:
    """Ready (health and a 1-token completion), then back in the rotation it left (`rotation`),
    before its slot goes to the next host. A canary cohort's host comes back at its first share, and
    the canary's verdict decides whether it keeps what it serves now (_canary)."""
    outcome.update(_ready(host, settings))
    if outcome["ok"] and canary and canary["role"] == COHORT and rotation:
        return _canary(state, host, settings, outcome, canary)
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
def rolled_out(settings: Settings, causes: dict, can_switch_back: bool, limit: int | None = None,
               canary: dict | None = None):
    """
    Switch the host to what is staged (llmfleet/remote/vllm_switch.py), restart, and wait until it
    is ready; switch back and stop the roll when it is not.

    + settings: the host's settings
    + causes: what differs, by kind (restart_causes)
    + can_switch_back: a complete previous version (unit, environment and model links) is there
    + limit: serving hosts of the deploy restarting at once at most (vllm_max_unavailable); None
      where the host serves nothing now (and nothing fronting it sends it requests)
    + canary: the host's part in a canary (canary_plan), None in a rolling deploy
    """
    yield FunctionCommand(_gate, (causes, limit, canary), {})
    # a host that serves now leaves the rotation of what fronts it (the fleet gateway, a hook) first
    rotation = limit is not None and fronted(current_host.state, settings)
    if rotation:
        yield FunctionCommand(_out_of_rotation, (settings,), {})
    yield StringCommand(python_script("vllm_switch", *switch_args(settings, causes)))
    outcome: dict = {}
    yield FunctionCommand(_wait_ready, (settings, outcome, rotation, canary), {})
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
                 outcome: dict, canary: dict | None = None) -> bool:
    """The layout's units, switched already (no restart): a move from vllm.service stops it first
    (its GPUs are the instances'), then every instance starts; otherwise, with the front door
    serving the other instances, one at a time, in a canary its canary instances first, judged
    against the others (`_instance_canary`) before the rest restart. Dropped instances go last,
    drained first."""
    instances = {i.unit_name: i for i in vllm_layout.instances(settings) or []}
    if single:
        run(host, f"systemctl stop {vllm.UNIT_NAME}")
    serving = not single and any(run(host, f"systemctl is-active -q {u}")[0] for u in instances)
    if serving:
        plan = _instance_plan(host, settings, canary, units, dropped, instances)
        first = plan["cohort_units"] if plan else []
        order = first + [u for u in units if u not in first]
        for unit in order:
            result = _restart_instance(host, settings, instances[unit], drain=True)
            if not result["ok"]:
                outcome.update(result, rolled=order[:order.index(unit) + 1])
                return True
            if plan and unit == first[-1]:
                verdict = _instance_canary(host, settings, plan)
                if not verdict["passed"]:
                    outcome.update(ok=False, why=verdict["why"], label="canary failed", rolled=first)
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


def _instance_plan(host, settings: Settings, canary: dict | None, units: list[str], dropped: list[str],
                   instances: dict[str, VllmInstance]) -> dict | None:
    """A serving layout host's instance canary for this roll, or None (a rolling deploy, a layout of
    one instance, instances added or dropped in this deploy: the front door's servers change with
    its configuration after the roll, so no weight can be set on them yet). The cohort: the canary
    instances that change, else the first instance that does; the baseline: every other one."""
    names = sorted(i.name for i in instances.values())
    if not canary or not canary.get("frontdoor_url") or len(names) < 2 or not units:
        return None
    answer = _answer(host, frontdoor.admin_command("state"), "front door command")
    serving = set(answer.get("servers", {}))
    changing = sorted(instances[u].name for u in units)
    if dropped or not set(names) <= serving:
        host.log_styled(f"vllm: canary: {host.name}'s layout changes in this deploy (front door servers "
                        f"{sorted(serving)}, layout {names}): its instances roll one at a time without an instance "
                        "canary", fg="yellow", log_func=logger.warning)
        return None
    configured = rollout.instance_cohort(settings, names)
    cohort = [n for n in configured if n in changing] or changing[:1]
    baseline = [n for n in names if n not in cohort]
    if not baseline:
        return None
    unit_of = {i.name: u for u, i in instances.items()}
    return {"cohort": cohort, "baseline": baseline, "cohort_units": [unit_of[n] for n in cohort],
            "url": canary["frontdoor_url"]}


def _instance_canary(host, settings: Settings, plan: dict) -> dict:
    """A layout host's canary instances, ready on what is staged: each step's share of the front
    door's requests by their runtime weight (the others at 100), judged against the host's other
    instances (llmfleet/rollout.py), then back at full weight. {"passed", "why", "evidence"}."""
    cohort, baseline = plan["cohort"], plan["baseline"]
    url = settings.rollout_prometheus_url
    assert url is not None  # canary_plan refuses a canary without it

    def weigh(weight: int) -> None:
        for name in cohort:
            answer = _answer(host, frontdoor.admin_command("weight", name, str(weight)), "front door command")
            if not answer["ok"]:
                raise RuntimeError(f"the front door did not take {name}'s weight {weight}%: {answer['why']}")

    try:
        own = _own_traffic(url, [host.name], settings, time.time(), cohort + baseline)
        verdict = _steps(host, settings, [f"{host.name}/{n}" for n in cohort], [f"{host.name}/{n}" for n in baseline],
                         {"cohort": ([host.name], cohort), "baseline": ([host.name], baseline)}, frontdoor.BACKEND,
                         f"{host.name}'s front door requests", lambda _, weight: weigh(weight), own, plan["url"],
                         "host")
    except Exception as exc:  # noqa: BLE001 (any failure of the analysis is the canary's failure)
        verdict = {"passed": False, "why": f"the analysis failed on {host.name}: {type(exc).__name__}: {exc}",
                   "evidence": None}
    try:
        weigh(frontdoor.WEIGHT)
    except RuntimeError as exc:
        if verdict["passed"]:
            verdict = {"passed": False, "why": f"the canary passed, but {exc}", "evidence": verdict["evidence"]}
    if verdict["passed"]:
        host.log_styled(f"vllm: canary passed: {', '.join(cohort)} keep(s) what is staged, back at full weight; "
                        f"the other instances roll (evidence: {verdict['evidence']})", fg="green", log_func=logger.info)
    return verdict


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
    host.log_styled(f"vllm: {outcome.get('label', 'not ready')}: {why}; stopping the roll", fg="red",
                    log_func=logger.error)
    return False


@operation(is_idempotent=False)
def instances_rolled_out(settings: Settings, causes: dict, dropped: list, single: bool, can_switch_back: bool,
                         limit: int | None = None, canary: dict | None = None):
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
    + canary: the host's part in a canary (canary_plan: a layout host is always of the baseline), None
      in a rolling deploy
    """
    yield FunctionCommand(_gate, ({u: "; ".join(why.values()) for u, why in causes.items()}
                                  | ({vllm.UNIT_NAME: "moving to vllm_layout"} if single else {})
                                  | {u: "dropped from vllm_layout" for u in dropped}, limit, canary), {})
    if causes:
        yield StringCommand(python_script("vllm_switch", *layout_switch_args(settings, causes)))
    outcome: dict = {}
    yield FunctionCommand(_roll_layout, (settings, list(causes), dropped, single, outcome, canary), {})
    if outcome.get("ok"):
        return
    if can_switch_back and causes:
        if single:  # before their units go: stopped and disabled, so no link of theirs is left behind
            yield StringCommand(f"systemctl disable -q --now {' '.join(causes)}")
        yield StringCommand(python_script("vllm_switch", "back", "--record", SWITCH_RECORD, "--no-restart",
                                          *[a for u in causes for a in ("--service", u)]))
        yield FunctionCommand(_back_layout, (settings, single, outcome), {})
    yield FunctionCommand(_stopped, (outcome, can_switch_back and bool(causes)), {})


# ------------------------------------------------------------------------------------------------
# a canary (rollout_strategy = "canary"; the logic and the evidence: llmfleet/rollout.py)
# ------------------------------------------------------------------------------------------------
# The cohort's hosts and the others meet through files beside the roll's slots (llmfleet/roll.py's
# folder, shared by every shard of one deploy):
#   vllm.canary.pending.<host>   a cohort host with a change to roll in this deploy (written while the
#                                deploy is prepared, before any host runs an operation)
#   vllm.canary.ready.<host>     that host is ready again and takes the first step's share
#   vllm.canary.step             the step now, {"index", "weight"}, written by the leader (the first
#                                cohort host by name), acknowledged by the others (vllm.canary.ack.<host>.<index>)
#   vllm.canary.verdict          {"passed", "why", "evidence"}: the other hosts roll only on a pass
COHORT, BASELINE = "cohort", "baseline"
ACK_TIMEOUT_S = 120.0  # a cohort host that does not take a step's weight in this time fails the canary


def _canary_file(name: str) -> Path:
    return roll.folder() / f"{ROLL}.canary.{name}"


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _write_json(path: Path, doc: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc))
    tmp.replace(path)


def canary_plan(settings: Settings, name: str, fleet: list[tuple[str, str, Settings, list[str]]]) -> dict | None:
    """The host's part in a canary, from the inventory (`fleet`: every host's name, address, settings
    and groups): {"role": "cohort" or "baseline", "cohort", "baseline", "gateway_url",
    "frontdoor_url"}; None for a rolling deploy. "frontdoor_url": where a host serving a layout of
    two or more instances runs its instance canary (None otherwise). ValueError naming every problem
    (llmfleet/rollout.py problems and instance_problems) and its fix."""
    if settings.rollout_strategy != rollout.CANARY:
        return None
    group = settings.gateway_group
    serving = [n for n, _, s, groups in fleet if s.vllm_enabled and group not in groups]
    layouts = [n for n, _, s, groups in fleet if s.vllm_enabled and group not in groups and vllm_layout.instances(s)]
    gateways = [(address, s.gateway_port) for _, address, s, groups in fleet if group in groups]
    problems = rollout.problems(settings, serving, layouts, bool(gateways))
    own = vllm_layout.instances(settings) or []
    problems += rollout.instance_problems(settings, name, [i.name for i in own])
    if problems:
        raise ValueError("; ".join(problems))
    members = rollout.cohort(settings, serving, layouts)
    address = next((a for n, a, _, _ in fleet if n == name), name)
    return {"role": COHORT if name in members else BASELINE, "cohort": members,
            "baseline": [h for h in serving if h not in members],
            "gateway_url": f"http://{gateways[0][0]}:{gateways[0][1]}" if gateways else None,
            "frontdoor_url": f"http://{address}:{settings.vllm_port}" if len(own) >= 2 else None}


def canary_pending(name: str) -> None:
    """A cohort host rolls in this deploy: the other hosts wait for the canary's verdict."""
    _canary_file(f"pending.{name}").touch()


def _pending() -> list[str]:
    prefix = f"{ROLL}.canary.pending."
    return sorted(p.name.removeprefix(prefix) for p in roll.folder().glob(prefix + "*"))


def _await_verdict(host, canary: dict) -> str | None:
    """A host outside the cohort: None once the canary passed, else why it must not roll. Where no
    cohort host rolls in this deploy (--limit leaves the cohort out, or it serves what is staged
    already: a deploy stopped after its canary, or interrupted during it), nothing can judge the
    change: the host is not restarted, and the fix is the operator's choice."""
    if not _pending():
        if canary.get("frontdoor_url"):  # a layout host's own canary instances judge the change
            host.log_styled("vllm: canary: no cohort host rolls in this deploy: this host's canary instances judge "
                            "the change", fg="blue", log_func=logger.info)
            return None
        return (f"the canary cohort ({', '.join(canary['cohort'])}) has nothing to roll in this deploy (--limit leaves "
                "it out, or it serves what is staged already), so no canary can judge this change (fix: a deploy "
                "that includes the cohort on its previous version, or --data rollout_strategy=rolling to roll "
                "without a verdict)")
    host.log_styled(f"vllm: canary: waiting for the verdict on the cohort ({', '.join(canary['cohort'])})",
                    fg="blue", log_func=logger.info)
    while True:
        stopped = _roll().stopped()
        if stopped:
            return f"the roll stopped after {stopped}"
        verdict = _read_json(_canary_file("verdict"))
        if verdict:
            return None if verdict["passed"] else f"the roll stopped after the canary failed: {verdict['why']}"
        gevent.sleep(roll.POLL_S)


def _canary(state, host, settings: Settings, outcome: dict, canary: dict) -> bool:
    """A cohort host, ready on what is staged: back in the gateway at the first step's weight, its
    slot free for the next cohort host; then the analysis (the leader) or the leader's steps (the
    others), and the verdict. A pass: full weight, the host's roll done. A failure: `outcome` not ok,
    so the operation switches the host back to what it served (and back to full weight)."""
    members, base = canary["cohort"], canary["baseline"]
    weight = rollout.weight_for(settings.rollout_steps[0], len(members), len(base))
    back = _rotation(state, host, settings, "ready", weight)
    if not back["ok"]:
        return _stop_here(host, f"ready in {outcome['seconds']}s, but not back in rotation: {back['why']}")
    host.log_styled(f"vllm: ready in {outcome['seconds']}s (health and a 1-token completion); {back['note']}",
                    fg="blue", log_func=logger.info)
    _roll().leave(host.name)
    _canary_file(f"ready.{host.name}").touch()
    pending = _pending()
    try:
        verdict = _lead(host, settings, canary, pending) if host.name == pending[0] else _follow(host, settings, state)
    except Exception as exc:  # noqa: BLE001 (any failure of the analysis is the canary's failure)
        verdict = {"passed": False, "why": f"the analysis failed on {host.name}: {type(exc).__name__}: {exc}",
                   "evidence": None}
        _write_json(_canary_file("verdict"), verdict)
    if verdict["passed"]:
        full = _rotation(state, host, settings, "ready")
        if not full["ok"]:
            return _stop_here(host, f"the canary passed, but the host is not back at full weight: {full['why']}")
        _ROLL["finished"].add(host.name)
        host.log_styled(f"vllm: {full['note']}", fg="blue", log_func=logger.info)
        host.log_styled(f"vllm: canary passed: {host.name} keeps what is staged, back at full weight (evidence: "
                        f"{verdict['evidence']})", fg="green", log_func=logger.info)
        return True
    outcome.update(ok=False, why=verdict["why"], label="canary failed")
    return True  # the operation goes on to switch back, then stops the roll


def _follow(host, settings: Settings, state) -> dict:
    """A cohort host that is not the leader: each step's weight as the leader writes it, until the verdict."""
    applied = 0
    while True:
        verdict = _read_json(_canary_file("verdict"))
        if verdict:
            return verdict
        why = _roll().stopped()
        if why:
            return {"passed": False, "why": f"the roll stopped: {why}", "evidence": None}
        step = _read_json(_canary_file("step"))
        if step and step["index"] > applied:
            moved = _rotation(state, host, settings, "ready", step["weight"])
            if not moved["ok"]:
                return {"passed": False, "why": f"{host.name} did not take step {step['index'] + 1}'s weight: "
                                                f"{moved['why']}", "evidence": None}
            applied = step["index"]
            _canary_file(f"ack.{host.name}.{applied}").touch()
        gevent.sleep(roll.POLL_S)


def _prometheus(url: str, expr: str, at: float) -> float | None:
    """One instant query's single value at `at` (Unix time): None where it has no series or NaN
    (llmfleet/prometheus.py; an error fails the canary, naming rollout_prometheus_url)."""
    try:
        result = prometheus.query(url, expr, at=at, timeout_s=15)
    except prometheus.PrometheusError as exc:
        raise RuntimeError(f"rollout_prometheus_url: {exc}") from None
    if not result:
        return None
    value = float(result[0]["value"][1])
    return None if math.isnan(value) else value


def _sleep_until(t: float) -> None:
    while time.time() < t:
        gevent.sleep(min(1.0, max(0.0, t - time.time())))


def _lead(host, settings: Settings, canary: dict, pending: list[str]) -> dict:
    """The leader: once every cohort host is ready, each step in turn (its weight on every cohort
    host, the warm-up, the window with synthetic load where the fleet's traffic is thin, both sides
    from Prometheus, the gates), the evidence written, the verdict for every host."""
    members, base = canary["cohort"], canary["baseline"]
    url = settings.rollout_prometheus_url
    assert url is not None  # canary_plan refuses a canary without it
    while not all(_canary_file(f"ready.{h}").exists() for h in pending):
        why = _roll().stopped()
        if why:
            verdict = {"passed": False, "why": f"a cohort host did not get ready: {why}", "evidence": None}
            _write_json(_canary_file("verdict"), verdict)
            return verdict
        gevent.sleep(roll.POLL_S)
    # the fleet's own traffic, read once before any synthetic load of this canary (which would count)
    own = _own_traffic(url, members + base, settings, time.time())

    def take(index: int, weight: int) -> None:  # the first step's weight: each cohort host's as it got ready
        if index:
            _write_json(_canary_file("step"), {"index": index, "weight": weight})
            moved = _rotation(current_host.state, host, settings, "ready", weight)
            if not moved["ok"]:
                raise RuntimeError(f"{host.name} did not take the weight {weight}%: {moved['why']}")
            _await_acks(index, [h for h in pending if h != host.name])

    verdict = _steps(host, settings, members, base, {"cohort": (members, None), "baseline": (base, None)},
                     gateway.BACKEND, "the gateway's requests", take, own, canary["gateway_url"])
    _write_json(_canary_file("verdict"), verdict)
    return verdict


def _steps(host, settings: Settings, members: list[str], base: list[str],
           sides: dict[str, tuple[list[str], list[str] | None]], backend: str, where: str,
           take: Callable[[int, int], None], own: float, synthetic_url: str, whose: str = "fleet") -> dict:
    """A canary's analysis, for a cohort of hosts at the gateway or of a layout host's instances at
    its front door: for each step, its weight (`take`), the warm-up (first step), the window with
    synthetic load (through `synthetic_url`) where the own traffic is thin, both sides (`sides`:
    hosts and instances, llmfleet/rollout.py selectors) from Prometheus, the gates; the evidence
    written. {"passed", "why", "evidence"}."""
    url = settings.rollout_prometheus_url
    assert url is not None  # canary_plan refuses a canary without it
    evidence = rollout.Evidence(started=time.time(), cohort=members, baseline=base, prometheus=url)
    json_path, png_path = rollout.evidence_paths(settings, Path.cwd(), evidence.started, members)
    scrape_s = settings.monitoring_scrape_interval_s
    steps = list(settings.rollout_steps)
    synthetic_from = None  # the first step that needed synthetic load: every later one gets it too
    for index, share in enumerate(steps):
        weight = rollout.weight_for(share, len(members), len(base))
        achieved = rollout.share_of(weight, len(members), len(base))
        take(index, weight)
        warmup = settings.rollout_warmup_s if index == 0 else 0
        load_start = time.time()
        window_start = load_start + warmup
        window_end = window_start + settings.rollout_step_s
        thin = _thin(own, settings, achieved, synthetic_from is not None, whose)
        if thin["synthetic"] and synthetic_from is None:
            synthetic_from = index
        host.log_styled(f"vllm: canary: step {index + 1} of {len(steps)}: {', '.join(members)} take(s) "
                        f"{achieved:.1f}% of {where} (weight {weight}%, asked {share:g}%); "
                        + (f"warm-up {warmup}s, then " if warmup else "")
                        + f"a {settings.rollout_step_s}s window, "
                        + (f"with synthetic load ({thin['why']})" if thin["synthetic"] else
                           f"on the {whose}'s own traffic ({thin['why']})"),
                        fg="blue", log_func=logger.info)
        servers = {side: instances or hosts for side, (hosts, instances) in sides.items()}
        synthetic = _synthetic(settings, synthetic_url, warmup + settings.rollout_step_s, index, servers, warmup) \
            if thin["synthetic"] else None
        _sleep_until(window_end + scrape_s + 1)  # Prometheus holds the window's last samples
        window = settings.rollout_step_s
        measured = {side: rollout.measure(lambda q, at: _prometheus(url, q, at), hosts, window_end, window, backend,
                                          instances) for side, (hosts, instances) in sides.items()}
        gates = settings.rollout_gates.model_dump()
        verdicts = rollout.judge(gates, measured["cohort"], measured["baseline"], settings.rollout_min_requests)
        if synthetic:  # the probe's classes: the synthetic answers by side (the fleet's own carry no class)
            verdicts += rollout.class_verdicts(gates, synthetic.get("by_side", {}), settings.rollout_min_class_requests,
                                               settings.rollout_class_significance)
        step = rollout.Step(share, weight, round(achieved, 2), window_start, window_end, synthetic, measured["cohort"],
                            measured["baseline"], verdicts,
                            {side: rollout.queries(hosts, window, backend, instances)
                             for side, (hosts, instances) in sides.items()})
        evidence.steps.append(step)
        for v in verdicts:
            host.log_styled(f"vllm: canary: step {index + 1}: {v.line()}", fg="green" if v.passed else "red",
                            log_func=logger.info if v.passed else logger.error)
        if not step.passed:
            break
    evidence.verdict = "passed" if all(s.passed for s in evidence.steps) else "failed"
    rollout.write(evidence, json_path, png_path)
    if evidence.verdict == "passed":
        return {"passed": True, "why": "", "evidence": str(json_path)}
    last = evidence.steps[-1]
    failed = "; ".join(v.line() for v in last.verdicts if not v.passed)
    return {"passed": False, "evidence": str(json_path),
            "why": f"at step {len(evidence.steps)} ({last.achieved_pct:.1f}% of the requests): {failed} "
                   f"(evidence: {json_path}, {png_path.name})"}


def _await_acks(index: int, others: list[str]) -> None:
    deadline = time.time() + ACK_TIMEOUT_S
    while not all(_canary_file(f"ack.{h}.{index}").exists() for h in others):
        if time.time() > deadline:
            late = [h for h in others if not _canary_file(f"ack.{h}.{index}").exists()]
            raise RuntimeError(f"{', '.join(late)} did not take step {index + 1}'s weight in {ACK_TIMEOUT_S:g}s")
        gevent.sleep(roll.POLL_S)


def _own_traffic(url: str, hosts: list[str], settings: Settings, at: float, instances: list[str] | None = None
                 ) -> float:
    """The fleet's own traffic: requests its serving hosts (or a layout host's instances) finished
    per second over the window before the analysis (the cohort's own restart included: its clients
    went to the others meanwhile)."""
    return _prometheus(url, rollout.fleet_rate_query(hosts, settings.rollout_step_s, instances), at) or 0.0


def _thin(rate: float, settings: Settings, achieved_pct: float, already: bool, whose: str = "fleet") -> dict:
    """Whether the fleet's own traffic (`rate`, requests per second) would give the cohort
    rollout_min_requests in a window at this step's share: if not, the window gets synthetic load
    (and so does every later one: `already`, the load of an earlier step is not the fleet's)."""
    expected = rate * achieved_pct / 100 * settings.rollout_step_s
    short = expected < settings.rollout_min_requests
    why = (f"the {whose} finished {rate:.2f} requests/s over the {settings.rollout_step_s}s before the analysis: about "
           f"{expected:.0f} for the cohort in a window, {'fewer than' if short else 'at least'} rollout_min_requests "
           f"= {settings.rollout_min_requests}")
    thin = already or short
    return {"synthetic": thin, "why": why, "rate": rate}


def _synthetic(settings: Settings, gateway_url: str, duration_s: float, index: int,
               sides: dict[str, list[str]] | None = None, window_from_s: float = 0.0) -> dict:
    """The group's probe mix through the gateway (or a layout host's front door) at
    rollout_synthetic_rps for `duration_s` (llmfleet/probe/synthetic.py, a process of its own; the
    API key on its stdin): what it sent."""
    key = read_key_file(settings.vllm_api_key_file, "vllm_api_key_file") if settings.vllm_api_key_file else None
    request = {"url": gateway_url, "model": settings.vllm_served_model_name, "api_key": key,
               "config": probe_config(settings).model_dump(mode="json"), "rate": settings.rollout_synthetic_rps,
               "duration_s": duration_s, "seed": settings.probe_seed + index, "sides": sides or {},
               "window_from_s": window_from_s}
    proc = subprocess.Popen([sys.executable, "-m", "llmfleet.probe.synthetic"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(json.dumps(request))
    if proc.returncode != 0:
        raise RuntimeError(f"the synthetic load through {gateway_url} failed (exit {proc.returncode}): "
                           f"{err.strip()[-400:]}")
    return json.loads(out.strip().splitlines()[-1])
