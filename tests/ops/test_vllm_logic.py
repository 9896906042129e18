"""The vllm component's decisions, facts in and causes and commands out: what differs and why a
restart is planned, what is staged and switched, how a hand-changed environment is repaired, and
the roll's commands (the switch a visible host-script command, the switch-back only when the
host did not get ready)."""

import json

import pytest
from pyinfra.api import FunctionCommand, StringCommand

from llmfleet import gateway, vllm
from llmfleet import roll as rolls
from operations import vllm as ops
from operations import vllm_roll as roll_ops

UNIT = "the rendered unit\n"
CLEAN_ENV = {"exists": True, "recorded": True, "added": {}, "removed": {}, "changed": {}}


def active(settings, **override) -> dict:
    """VllmState of a host serving exactly what the settings say."""
    return {"unit_sha256": ops._sha(UNIT), "key_sha256": ops._sha(vllm.api_key_env(settings)),
            "venv_target": vllm.env_dir(settings), "model_target": vllm.model_dir(settings), "env_ready": True,
            "model_ready": True, "active": "active", "enabled": "enabled"} | override


def test_a_host_as_deployed_has_no_cause_to_restart(settings):
    assert ops.restart_causes(settings, active(settings), CLEAN_ENV, UNIT) == {}


def test_a_removed_model_link_is_named_as_the_cause_not_the_unit(settings):
    causes = ops.restart_causes(settings, active(settings, model_target=None), CLEAN_ENV, UNIT)
    assert causes == {"model": f"the model link {vllm.model_link(settings)} is missing, not model tiny 2"}


def test_each_difference_is_a_cause_of_its_own(settings):
    state = active(settings, unit_sha256="0" * 64, venv_target="/opt/llmfleet/vllm/envs/old",
                   model_target="/data/models/tiny/1")
    causes = ops.restart_causes(settings, state, CLEAN_ENV, UNIT)
    assert sorted(causes) == ["environment", "model", "unit"]
    assert causes["unit"] == f"the unit {vllm.UNIT_PATH} is not the rendered one"
    assert causes["environment"].startswith(f"the environment link {settings.vllm_venv} points to "
                                            "/opt/llmfleet/vllm/envs/old, not environment ")
    assert causes["model"].endswith("points to /data/models/tiny/1, not model tiny 2")


def test_a_first_start_says_so(settings):
    causes = ops.restart_causes(settings, active(settings, unit_sha256=None), CLEAN_ENV, UNIT)
    assert causes == {"unit": f"first start: no unit {vllm.UNIT_PATH}"}


def test_a_stopped_service_is_the_cause_only_when_nothing_else_differs(settings):
    assert ops.restart_causes(settings, active(settings, active="failed"), CLEAN_ENV, UNIT) == {
        "service": "the service is failed/enabled, not active/enabled"}


def test_an_environment_changed_by_hand_is_a_cause_naming_each_distribution(settings):
    env = CLEAN_ENV | {"added": {"requests": "2.32.3"}, "removed": {"typing-extensions": "4.12.2"},
                       "changed": {"torch": ["2.9.0", "2.10.0"]}}
    causes = ops.restart_causes(settings, active(settings), env, UNIT)
    assert causes == {"packages": f"environment {vllm.env_id(settings)} differs from its record: "
                                  "typing-extensions: expected 4.12.2, actual not installed; "
                                  "torch: expected 2.9.0, actual 2.10.0; requests: expected not installed, "
                                  "actual 2.32.3"}


def test_an_environment_without_a_record_is_no_cause_to_restart(settings):
    env = CLEAN_ENV | {"recorded": False}
    assert ops.restart_causes(settings, active(settings), env, UNIT) == {}


def test_the_repair_puts_back_the_recorded_versions_without_dependencies_and_removes_what_was_added(settings):
    env = CLEAN_ENV | {"added": {"requests": "2.32.3"}, "removed": {"typing-extensions": "4.12.2"},
                       "changed": {"torch": ["2.9.0", "2.10.0"]}}
    python = f"{vllm.env_dir(settings)}/bin/python3"
    assert ops.repair_commands(settings, env) == [
        f"{python} -m pip install -q --no-cache-dir --disable-pip-version-check --no-deps torch==2.9.0 "
        "typing-extensions==4.12.2",
        f"{python} -m pip uninstall -y -q requests"]


def test_only_what_differs_is_switched(settings):
    assert roll_ops.switch_args(settings, {"model": "..."}) == [
        "switch", "--record", roll_ops.SWITCH_RECORD, "--service", "vllm.service", "--keep", vllm.CONF_DIR,
        "--link", vllm.model_link(settings)]
    args = roll_ops.switch_args(settings, {"unit": "...", "key": "...", "environment": "...", "packages": "..."})
    assert args[7:] == ["--unit", vllm.UNIT_PATH, "--remove", vllm.API_KEY_FILE, "--link", settings.vllm_venv]


def test_a_parser_that_cannot_run_is_a_problem_that_names_the_environment(settings):
    problems = ops.flag_problems(settings, {"unreadable": "vLLM's parser does not load: ImportError: torch"})
    assert problems == [f"vllm_flags: could not run the vLLM parser in {vllm.env_dir(settings)}/bin/python3: "
                        "vLLM's parser does not load: ImportError: torch"]
    assert ops.flag_problems(settings, {"version": "0.19.1", "ok": True, "unknown": [], "options": [],
                                        "error": None}) == []


def roll(settings, can_switch_back: bool, ready: bool) -> list:
    """The roll's commands on one host whose readiness check answers `ready`."""
    gen = roll_ops.rolled_out._inner(settings=settings, causes={"model": "the model link is missing"},
                                can_switch_back=can_switch_back)
    out = []
    for command in gen:
        out.append(command)
        if isinstance(command, FunctionCommand) and command.function is roll_ops._wait_ready:
            command.args[1].update({"ok": ready, "seconds": 1.0, "why": "vllm.service exited while starting"})
    return out


def test_the_roll_switches_with_a_visible_host_script_and_stops_when_ready(settings):
    commands = roll(settings, can_switch_back=True, ready=True)
    kinds = [c.function.__name__ if isinstance(c, FunctionCommand) else "shell" for c in commands]
    assert kinds == ["_gate", "shell", "_wait_ready"]
    switch = str(commands[1])
    assert isinstance(commands[1], StringCommand) and " switch --record " in switch
    assert f"--link {vllm.model_link(settings)}" in switch and "vllm_switch" in switch


def test_a_host_that_does_not_get_ready_is_switched_back_and_stops_the_roll(settings):
    commands = roll(settings, can_switch_back=True, ready=False)
    assert [getattr(c, "function", None) for c in commands][-1] is roll_ops._stopped
    assert " back --record " in str(commands[3])


def test_a_first_start_that_does_not_get_ready_has_nothing_to_switch_back_to(settings):
    commands = roll(settings, can_switch_back=False, ready=False)
    assert len(commands) == 4 and commands[-1].function is roll_ops._stopped
    assert not any(" back --record " in str(c) for c in commands if isinstance(c, StringCommand))


class _Named:
    def __init__(self, name):
        self.name, self.logged = name, []

    def log_styled(self, text, **_):
        self.logged.append(text)


class _Greenlet:
    """What the gate reads of the greenlet a host's roll runs in."""

    def __init__(self):
        self.dead = False


@pytest.fixture
def gate(monkeypatch, tmp_path):
    """The gate as a host whose roll runs in `greenlet` meets it, in a roll of its own."""
    import gevent

    monkeypatch.setitem(roll_ops._ROLL, "started", {})
    monkeypatch.setitem(roll_ops._ROLL, "finished", set())
    monkeypatch.setattr(rolls, "_ROLLS", {})
    monkeypatch.setenv(rolls.ENV, str(tmp_path))

    def at(greenlet, state, host) -> bool:
        monkeypatch.setattr(gevent, "getcurrent", lambda: greenlet)
        return roll_ops._gate(state, host, {"model": "m"})
    return at


class _State:
    def __init__(self, failed=(), groups=()):
        self.failed_hosts = {_Named(n) for n in failed}
        self.inventory = [_Grouped(g) for g in groups]  # each host's groups


class _Grouped:
    def __init__(self, groups):
        self.groups = groups


def test_the_gate_stops_a_batch_after_a_host_whose_roll_ended_unfinished(gate):
    h1, h2, h3 = _Named("h1"), _Named("h2"), _Named("h3")
    g1, g2 = _Greenlet(), _Greenlet()
    assert gate(g1, _State(), h1) is True
    roll_ops._ROLL["finished"].add("h1")
    g1.dead = True
    assert gate(g2, _State(), h2) is True  # h1 finished: the roll goes on
    g2.dead = True  # h2's roll ended (its switch command failed) without finishing
    assert gate(_Greenlet(), _State(), h3) is False
    assert h3.logged == ["vllm: not restarted: the roll stopped after h2; this host keeps serving the version it had"]


def test_hosts_rolling_at_once_do_not_stop_each_other(gate):
    # a batch of vllm_max_unavailable > 1, or the hosts that do not serve starting together: each
    # passes the gate while the others are still in their roll
    hosts = [_Named(f"h{i}") for i in range(3)]
    assert all(gate(_Greenlet(), _State(), h) for h in hosts)
    assert rolls.get(roll_ops.ROLL).stopped() is None


def test_under_serial_a_host_pyinfra_failed_stops_the_roll(gate):
    main = _Greenlet()  # --serial: every host's operations run in the one main greenlet
    assert gate(main, _State(), _Named("h1")) is True
    assert gate(main, _State(failed=["h1"]), _Named("h2")) is False
    assert rolls.get(roll_ops.ROLL).stopped() == "h1"


# ---- a canary: who is in the cohort, and the others' wait for its verdict -------------------------

def _fleet(settings, layout=None, **data):
    """gw-1 and gpu-1 to gpu-3; gpu-3 with `layout` (vllm_layout) where given."""
    from llmfleet.settings import validate

    base = settings.model_dump() | data
    laid_out = base | {"vllm_layout": layout, "vllm_flags": base["vllm_flags"] | {"tensor-parallel-size": None}}
    gw = validate("gw-1", base | {"vllm_enabled": False})
    return [("gw-1", "10.0.0.9", gw, ["gateways"])] + [
        (f"gpu-{i}", f"10.0.0.{i}", validate(f"gpu-{i}", laid_out if layout and i == 3 else base), [])
        for i in (1, 2, 3)]


CANARY = {"rollout_strategy": "canary", "rollout_prometheus_url": "http://prom.internal:9090"}


def test_a_rolling_deploy_has_no_canary_plan(settings):
    assert roll_ops.canary_plan(settings, "gpu-1", _fleet(settings)) is None


def test_the_canary_plan_names_the_cohort_the_baseline_and_the_gateway(settings):
    fleet = _fleet(settings, **CANARY, rollout_canary_hosts=["gpu-2"])
    plan = roll_ops.canary_plan(fleet[2][2], "gpu-2", fleet)
    assert plan == {"role": "cohort", "cohort": ["gpu-2"], "baseline": ["gpu-1", "gpu-3"],
                    "gateway_url": "http://10.0.0.9:8000", "frontdoor_url": None}
    assert roll_ops.canary_plan(fleet[1][2], "gpu-1", fleet)["role"] == "baseline"


def test_a_canary_the_inventory_cannot_run_is_refused_before_any_operation(settings):
    fleet = [h for h in _fleet(settings, **CANARY) if h[0] != "gw-1"]
    with pytest.raises(ValueError, match=r"the inventory has no gateway hosts \(group 'gateways'\)"):
        roll_ops.canary_plan(fleet[0][2], "gpu-1", fleet)


TWO = [{"name": "a", "gpus": [0, 1, 2, 3], "port": 8001}, {"name": "b", "gpus": [4, 5, 6, 7], "port": 8002}]


def test_a_layout_host_of_two_instances_is_of_the_baseline_and_runs_its_instance_canary_at_its_front_door(settings):
    fleet = _fleet(settings, TWO, **CANARY)
    plan = roll_ops.canary_plan(fleet[3][2], "gpu-3", fleet)
    assert plan["role"] == "baseline" and plan["cohort"] == ["gpu-1"] and plan["frontdoor_url"] == "http://10.0.0.3:8000"
    assert roll_ops.canary_plan(fleet[1][2], "gpu-1", fleet)["frontdoor_url"] is None


def test_an_instance_canary_the_layout_cannot_run_is_refused_before_any_operation(settings):
    fleet = _fleet(settings, TWO, **CANARY, rollout_canary_instances=["c"])
    with pytest.raises(ValueError, match=r"gpu-3 serves no instance c \(fix: name instances of its vllm_layout"):
        roll_ops.canary_plan(fleet[3][2], "gpu-3", fleet)


@pytest.fixture
def baseline_gate(gate, monkeypatch):
    plan = {"role": "baseline", "cohort": ["gpu-1"], "baseline": ["gpu-2", "gpu-3"], "gateway_url": "http://gw:8000",
            "frontdoor_url": None}

    def at(host, **over) -> bool:
        import gevent

        monkeypatch.setattr(gevent, "getcurrent", lambda: _Greenlet())
        return roll_ops._gate(_State(), host, {"model": "m"}, 1, plan | over)
    return at


def test_a_layout_host_rolls_on_its_own_instance_canary_where_no_cohort_host_rolls(baseline_gate):
    h3 = _Named("gpu-3")
    assert baseline_gate(h3, frontdoor_url="http://10.0.0.3:8000") is True
    assert h3.logged[0] == ("vllm: canary: no cohort host rolls in this deploy: this host's canary instances judge the "
                            "change")


@pytest.mark.parametrize("units,servers,dropped,expected", [
    # the canary instance first, the other instance its baseline
    (["vllm-a.service", "vllm-b.service"], ["a", "b"], [], (["a"], ["b"])),
    # only b changes: b is the cohort (a serves what it did, and is the baseline)
    (["vllm-b.service"], ["a", "b"], [], (["b"], ["a"])),
    # an instance the front door does not have yet, or one dropped: no weights to set, no instance canary
    (["vllm-a.service", "vllm-b.service"], ["a"], [], None),
    (["vllm-a.service"], ["a", "b"], ["vllm-c.service"], None),
])
def test_an_instance_canary_takes_the_canary_instances_that_change(settings, monkeypatch, units, servers, dropped,
                                                                   expected):
    from llmfleet.schema import VllmInstance

    monkeypatch.setattr(roll_ops, "_answer", lambda *_: {"ok": True, "servers": dict.fromkeys(servers, {})})
    instances = {f"vllm-{i['name']}.service": VllmInstance(**i) for i in TWO}
    plan = roll_ops._instance_plan(_Named("gpu-3"), settings.model_copy(update=CANARY), {"frontdoor_url": "http://x"},
                                   units, dropped, instances)
    assert (plan and (plan["cohort"], plan["baseline"])) == expected
    if plan:
        assert plan["cohort_units"] == [f"vllm-{n}.service" for n in plan["cohort"]]


def test_a_host_outside_the_cohort_rolls_on_the_canarys_pass(baseline_gate):
    roll_ops.canary_pending("gpu-1")
    roll_ops._write_json(roll_ops._canary_file("verdict"), {"passed": True, "why": "", "evidence": "e.json"})
    h2 = _Named("gpu-2")
    assert baseline_gate(h2) is True
    assert h2.logged[0] == "vllm: canary: waiting for the verdict on the cohort (gpu-1)"


def test_a_host_outside_the_cohort_keeps_its_version_when_the_canary_fails(baseline_gate):
    roll_ops.canary_pending("gpu-1")
    roll_ops._write_json(roll_ops._canary_file("verdict"), {"passed": False, "why": "at step 1: FAIL e2e",
                                                            "evidence": "e.json"})
    h2 = _Named("gpu-2")
    assert baseline_gate(h2) is False
    assert h2.logged[-1] == ("vllm: not restarted: the roll stopped after the canary failed: at step 1: FAIL e2e; "
                             "this host keeps serving the version it had")


def test_a_cohort_with_nothing_to_roll_leaves_the_others_unrestarted_naming_the_fix(baseline_gate):
    h2 = _Named("gpu-2")
    assert baseline_gate(h2) is False
    assert h2.logged == ["vllm: not restarted: the canary cohort (gpu-1) has nothing to roll in this deploy (--limit "
                         "leaves it out, or it serves what is staged already), so no canary can judge this change "
                         "(fix: a deploy that includes the cohort on its previous version, or --data "
                         "rollout_strategy=rolling to roll without a verdict); this host keeps serving the version it "
                         "had"]


class PlanHost:
    """pyinfra's `host` for the deploy code: facts from a dict, and a log."""

    name = "gpu-1"

    class Run:  # pyinfra's state: one run (the parser's answers are shared per run)
        pass

    def __init__(self, facts: dict):
        self.facts, self.logged, self.noops = facts, [], []
        self.state = self.Run()

    def get_fact(self, cls, **kwargs):
        return self.facts[cls.__name__]

    def noop(self, text):
        self.noops.append(text)

    def log_styled(self, text, **_):
        self.logged.append(text)


def planned(settings, monkeypatch, **facts) -> tuple[list[str], PlanHost]:
    """The operations serve() calls, by name, for the given facts."""
    from pyinfra.context import ctx_host

    calls = []
    for op in ("environment_made", "environment_repaired", "environment_recorded", "staged_unit", "staged_key",
               "staged_link", "rolled_out", "instances_rolled_out"):
        monkeypatch.setattr(ops, op, lambda name=None, _op=op, **kw: calls.append(
            name + (f" (_parallel={kw['_parallel']})" if "_parallel" in kw else "") if name else _op))
    monkeypatch.setattr(ops, "model_synced", lambda s: calls.append("model_synced"))
    monkeypatch.setattr(ops.vllm, "render_unit", lambda s, gpu, *instance: UNIT)
    fake = PlanHost({"VllmState": active(settings), "VllmEnvironment": CLEAN_ENV,
                     "VllmFlags": {"version": "0.19.1", "ok": True, "unknown": [], "options": [], "error": None},
                     "PortHolders": {str(settings.vllm_port): [SERVER]},
                     "File": None}  # (the units' and key file's mode and owner: operations/managed_files.py)
                    | facts)
    with ctx_host.use(fake):
        ops.serve.__wrapped__(settings, gpu=True)
    return calls, fake


SERVER = {"pid": 812, "command": "vllm", "unit": "vllm.service"}  # the running server holds its port
# group_data/all.py: vllm_max_unavailable = 1
RESTART = ("vllm: restart on what is staged, in batches of vllm_max_unavailable, each ready before the next "
           "(a canary's cohort first, the others on its verdict) (_parallel=1)")
START = "vllm: start on what is staged, at once on every host that does not serve now"


def test_a_deployed_host_plans_nothing_and_says_why(settings, monkeypatch):
    calls, fake = planned(settings, monkeypatch)
    assert calls == [] and fake.noops == ["vllm: unit, environment and its packages, model and key as deployed; "
                                          "service active and enabled"]


def test_a_removed_model_link_plans_the_link_and_the_restart_and_no_check(settings, monkeypatch):
    calls, fake = planned(settings, monkeypatch, VllmState=active(settings, model_target=None))
    assert calls == ["vllm: model link `current` missing or not at vllm_model's version: staged for the restart",
                     RESTART]
    assert f"vllm: restart planned: the model link {vllm.model_link(settings)} is missing, not model tiny 2" \
        in fake.logged


def test_a_package_changed_by_hand_plans_the_repair_and_the_restart(settings, monkeypatch):
    env = CLEAN_ENV | {"changed": {"torch": ["2.9.0", "2.10.0"]}}
    calls, _ = planned(settings, monkeypatch, VllmEnvironment=env, VllmFlags=None)  # flags: checked after the repair
    assert calls == [f"vLLM environment {vllm.env_id(settings)}: packages differ from its record: the recorded "
                     "versions put back", RESTART]


def test_an_environment_made_before_records_is_recorded_with_a_note_and_not_restarted(settings, monkeypatch):
    calls, fake = planned(settings, monkeypatch, VllmEnvironment=CLEAN_ENV | {"recorded": False})
    assert calls == [f"vLLM environment {vllm.env_id(settings)}: no record of its packages (made before records): "
                     "recorded from what it holds"]
    assert any("was made before records; this deploy records what it holds now" in line for line in fake.logged)


def test_a_new_package_set_makes_its_environment_and_checks_the_flags_there(settings, monkeypatch):
    calls, _ = planned(settings, monkeypatch, VllmState=active(settings, env_ready=False, venv_target="/x/envs/old"),
                       VllmEnvironment=None, VllmFlags=None)
    assert calls == [f"vLLM environment {vllm.env_id(settings)} ({', '.join(settings.vllm_packages)})",
                     "vllm: environment link vllm_venv not at this package set's environment: staged for the restart",
                     RESTART]


def test_a_first_start_waits_for_no_batch(settings, monkeypatch):
    first = active(settings, unit_sha256=None, key_sha256=None, venv_target=None, model_target=None,
                   env_ready=False, model_ready=False, active="inactive", enabled="disabled")
    calls, _ = planned(settings, monkeypatch, VllmState=first, VllmEnvironment=None, VllmFlags=None)
    assert calls[-1] == START and not any("_parallel" in c for c in calls), calls


def test_a_failed_service_starts_at_once_and_a_serving_host_with_the_same_change_waits_for_its_batch(
        settings, monkeypatch):
    calls, _ = planned(settings, monkeypatch, VllmState=active(settings, active="failed"))
    assert calls == [START]
    calls, _ = planned(settings, monkeypatch, VllmState=active(settings, active="failed", model_target=None))
    assert calls[-1] == START
    calls, _ = planned(settings, monkeypatch, VllmState=active(settings, model_target=None))
    assert calls[-1] == RESTART


def test_flags_the_installed_parser_refuses_stop_the_deploy_before_any_operation(settings, monkeypatch):
    report = {"version": "0.19.1", "ok": False, "unknown": ["--max-num-seqz"], "options": ["--max-num-seqs"],
              "error": None}
    with pytest.raises(ops.OperationValueError) as exc:
        planned(settings, monkeypatch, VllmState=active(settings, unit_sha256="0" * 64), VllmFlags=report)
    assert str(exc.value) == ("host gpu-1: vllm_flags.max-num-seqz: vLLM 0.19.1 installed on the host has no "
                              "--max-num-seqz (fix: did you mean --max-num-seqs?); the running service is left as "
                              "it is")


def test_a_combination_vllm_refuses_at_start_stops_the_deploy_before_any_operation_with_vllms_reason(
        settings, monkeypatch):
    """The host's vLLM builds its configuration from the flags, as the server would at start, for
    the version the restart serves, in the unit's environment; its refusal stops the host."""
    asked = []

    def get_fact(self, cls, **kwargs):
        asked.append((cls.__name__, kwargs))
        return self.facts[cls.__name__]

    monkeypatch.setattr(PlanHost, "get_fact", get_fact)
    reason = ("max_num_batched_tokens (4096) is smaller than max_model_len (8192). This effectively limits the "
              "maximum sequence length to max_num_batched_tokens and makes vLLM reject longer sequences. Please "
              "increase max_num_batched_tokens or decrease max_model_len.")
    report = {"version": "0.32.0", "ok": False, "unknown": [], "options": ["--max-num-seqs"], "error": None,
              "config": "engine", "config_error": reason, "note": None}
    with pytest.raises(ops.OperationValueError) as exc:
        planned(settings, monkeypatch, VllmState=active(settings, unit_sha256="0" * 64), VllmFlags=report)
    assert str(exc.value) == (f"host gpu-1: vllm_flags: vLLM 0.32.0 refuses these flags at start: {reason} (fix: "
                              "change max-model-len = 8192 in vllm_flags as vLLM's reason says); the running "
                              "service is left as it is")
    (args, env), = [(kw["args"], kw["env"]) for name, kw in asked if name == "VllmFlags"]
    assert args[args.index("--model") + 1] == vllm.model_dir(settings) and env == dict(settings.vllm_env)


def test_a_check_without_the_model_on_the_host_says_what_it_could_not_check(settings, monkeypatch):
    note = (f"{vllm.model_dir(settings)}/config.json is not on the host yet: only vLLM's SchedulerConfig was built; "
            "the rest of vLLM's configuration is checked when the server starts")
    report = {"version": "0.32.0", "ok": True, "unknown": [], "options": [], "error": None, "config": "scheduler",
              "config_error": None, "note": note}
    calls, fake = planned(settings, monkeypatch, VllmState=active(settings, unit_sha256="0" * 64), VllmFlags=report)
    assert calls[-1] == RESTART and f"vllm: flags: {note}" in fake.logged


def test_a_key_file_left_behind_and_a_missing_key_file_are_named(settings, tmp_path):
    causes = ops.restart_causes(settings, active(settings, key_sha256="0" * 64), CLEAN_ENV, UNIT)
    assert causes == {"key": f"the API key file {vllm.API_KEY_FILE} is there, and vllm_api_key_file is None"}
    key = tmp_path / "api-key"
    key.write_text("secret-key-value\n")
    key.chmod(0o600)
    with_key = settings.model_copy(update={"vllm_api_key_file": str(key)})
    causes = ops.restart_causes(with_key, active(with_key, key_sha256=None), CLEAN_ENV, UNIT)
    assert causes == {"key": f"the API key file {vllm.API_KEY_FILE} is missing"}
    assert "secret-key-value" not in str(causes)


def test_hosts_of_one_environment_share_one_parser_answer_and_a_failed_read_is_no_one_elses(settings):
    """shared_flag_report: the first host's read answers for the hosts after it (they wait for it,
    in their own greenlets), per run; an unreadable answer or a read that raised is read again by
    each host; other flags are another answer."""
    import gevent

    class Run:  # a pyinfra state: the answers are per run
        pass

    reads = []

    def reader(name, answer):
        def read():
            reads.append(name)
            gevent.sleep(0.01)  # the fact's command on the host: the others ask meanwhile
            if isinstance(answer, Exception):
                raise answer
            return answer
        return read

    ok = {"version": "0.32.0", "ok": True, "unknown": [], "options": ["--dtype"], "error": None}
    run = Run()
    got = [g.get() for g in [gevent.spawn(ops.shared_flag_report, run, settings, reader(n, ok))
                             for n in ("gpu-1", "gpu-2", "gpu-3")]]
    assert got == [ok, ok, ok] and reads == ["gpu-1"]
    # another run reads again
    reads.clear()
    assert ops.shared_flag_report(Run(), settings, reader("gpu-1", ok)) == ok and reads == ["gpu-1"]
    # an answer that could not be read is each host's own
    reads.clear()
    unreadable = {"unreadable": "vLLM's parser does not load: ImportError: torch"}
    run = Run()
    assert ops.shared_flag_report(run, settings, reader("gpu-1", unreadable)) == unreadable
    assert ops.shared_flag_report(run, settings, reader("gpu-2", ok)) == ok
    assert reads == ["gpu-1", "gpu-2"]
    # a host whose read failed: the one waiting for it reads its own
    reads.clear()
    run = Run()
    first = gevent.spawn(ops.shared_flag_report, run, settings, reader("gpu-1", OSError("connection lost")))
    second = gevent.spawn(ops.shared_flag_report, run, settings, reader("gpu-2", ok))
    gevent.joinall([first, second])
    assert isinstance(first.exception, OSError) and second.value == ok and reads == ["gpu-1", "gpu-2"]
    # other flags: another answer
    reads.clear()
    run = Run()
    other = settings.model_copy(update={"vllm_flags": settings.vllm_flags | {"max-num-seqs": 16}})
    ops.shared_flag_report(run, settings, reader("gpu-1", ok))
    ops.shared_flag_report(run, other, reader("gpu-2", ok))
    assert reads == ["gpu-1", "gpu-2"]


def test_uv_installs_the_packages_with_the_mirrors_index_settings_and_a_cache_it_removes(settings):
    s = settings.model_copy(update={"pip_index_url": "https://pypi.internal/simple", "pip_no_index": False,
                                    "pip_find_links": ["http://10.0.0.1:8080/"], "pip_trusted_hosts": ["10.0.0.1"]})
    env = vllm.env_dir(s)
    steps = ops.install_command(s).split(" && ")
    assert steps[:3] == [f"rm -rf {env}", f"mkdir -p {vllm.envs_dir(s)}", f"python3 -m venv {env}"]
    # pip (reading /etc/pip.conf, the mirrors component's) installs only the pinned uv
    assert steps[3] == f"{env}/bin/python3 -m pip install -q --no-cache-dir --disable-pip-version-check uv==0.13.9"
    # uv reads no pip.conf: the same index settings are its arguments
    assert steps[4:] == [
        f"rm -rf {env}.uv-cache",
        f"{env}/bin/uv pip install -q --python {env}/bin/python3 --compile-bytecode --cache-dir {env}.uv-cache "
        "--index-url https://pypi.internal/simple --find-links http://10.0.0.1:8080/ --allow-insecure-host 10.0.0.1 "
        "vllm==0.19.1",
        f"rm -rf {env}.uv-cache"]


def test_uv_keeps_the_packages_to_remove_out_of_its_resolution(settings):
    s = settings.model_copy(update={"pip_no_index": True, "vllm_pip_remove": ["torchvision", "triton"]})
    env = vllm.env_dir(s)
    assert ops.install_command(s).split(" && ")[4:] == [
        f"rm -rf {env}.uv-cache",
        f"printf '%s\\n' torchvision triton > {env}.uv-excludes",
        f"{env}/bin/uv pip install -q --python {env}/bin/python3 --compile-bytecode --cache-dir {env}.uv-cache "
        f"--no-index --excludes {env}.uv-excludes vllm==0.19.1",
        f"rm -rf {env}.uv-cache {env}.uv-excludes"]


def test_without_an_installer_pip_installs_the_packages_and_the_removals_follow(settings):
    s = settings.model_copy(update={"vllm_installer": None, "pip_no_index": True,
                                    "vllm_pip_remove": ["torchvision"]})
    env = vllm.env_dir(s)
    assert ops.install_command(s).split(" && ")[3:] == [
        f"{env}/bin/python3 -m pip install -q --no-cache-dir --disable-pip-version-check vllm==0.19.1",
        f"{env}/bin/python3 -m pip uninstall -y -q torchvision"]


def test_a_port_held_by_another_process_stops_the_host_before_any_operation_and_names_the_holder(
        settings, monkeypatch):
    squatter = {"pid": 4242, "command": "nginx", "unit": "nginx.service"}
    with pytest.raises(ops.OperationValueError) as exc:
        planned(settings, monkeypatch, VllmState=active(settings, model_target=None),
                PortHolders={str(settings.vllm_port): [squatter]})
    assert str(exc.value) == (f"host gpu-1: vllm_port = {settings.vllm_port} is held on the host by nginx (pid 4242, "
                              "unit nginx.service), not by vllm.service: the server could not listen on it (fix: "
                              "stop or move that process, or set vllm_port to a free port); nothing was changed")


@pytest.mark.parametrize("holders", [{}, "own"])
def test_a_free_port_or_one_the_running_server_holds_is_no_problem(settings, monkeypatch, holders):
    holders = {str(settings.vllm_port): [SERVER]} if holders == "own" else holders
    calls, _ = planned(settings, monkeypatch, VllmState=active(settings, model_target=None), PortHolders=holders)
    assert calls[-1] == RESTART


def test_a_serving_host_holds_a_slot_of_the_roll_until_it_is_ready_and_a_host_serving_nothing_holds_none(
        gate, monkeypatch):
    h1, h2 = _Named("h1"), _Named("h2")
    assert roll_ops._gate(_State(), h1, {"model": "m"}, 1) is True  # vllm_max_unavailable 1
    assert roll_ops._gate(_State(), h2, {"model": "m"}) is True  # a first start: no capacity taken
    assert rolls.get(roll_ops.ROLL).holders() == ["h1"]
    monkeypatch.setattr(roll_ops, "_ready",
                        lambda host, settings, instance=None: {"ok": True, "seconds": 1.0, "why": ""})
    roll_ops._wait_ready(_State(), h1, None, {}, False)
    assert rolls.get(roll_ops.ROLL).holders() == []


# --- a serving host out of what fronts it (the fleet gateway, a drain hook) during its restart ----
GATEWAYS = (["v100"], ["v100"], ["gateways"])  # the inventory: two serving hosts and a gateway host


def test_a_roll_takes_a_host_out_of_rotation_only_where_something_fronts_it(settings):
    assert roll_ops.fronted(_State(groups=GATEWAYS), settings)
    assert not roll_ops.fronted(_State(groups=(["v100"], ["tools"])), settings)
    assert roll_ops.fronted(_State(groups=(["v100"],)), settings.model_copy(update={"gateway_drain_hook": ["lb"]}))


def test_the_host_is_drained_at_the_gateway_through_its_agent_before_the_restart(settings, monkeypatch):
    ran = []
    monkeypatch.setattr(roll_ops, "run", lambda host, command, sudo=True: (
        ran.append(command) or (True, json.dumps({"ok": True, "seconds": 2.5, "why": "drained", "requests": 0}))))
    h1 = _Named("gpu-1")
    assert roll_ops._out_of_rotation(_State(groups=GATEWAYS), h1, settings) is True
    (command,) = ran
    assert command == gateway.agent_command(settings, "drain")
    assert " drain /var/lib/llmfleet/gateway-agent/state 2.0 8000 120 " in command  # twice agent-inter; the timeout
    assert h1.logged == ["vllm: gateway: drained in 2.5s"]
    ran.clear()
    assert roll_ops._out_of_rotation(_State(groups=(["v100"],)), h1, settings) is True and ran == []


def test_a_hook_that_fails_leaves_the_host_unrestarted_and_stops_the_roll(settings, gate, monkeypatch):
    hooked = settings.model_copy(update={"gateway_drain_hook": ["sh", "-c", "echo pool busy >&2; exit 3", "{host}"]})
    h1 = _Named("gpu-1")
    assert roll_ops._out_of_rotation(_State(), h1, hooked) is False
    assert h1.logged == ["vllm: not restarted: could not take the host out of rotation: gateway_drain_hook sh -c "
                         "echo pool busy >&2; exit 3 gpu-1 exited 3: pool busy; stopping the roll"]
    assert rolls.get(roll_ops.ROLL).stopped() == "gpu-1"


def test_the_hook_is_called_with_the_host_and_the_state(settings, tmp_path):
    said = tmp_path / "said"
    hooked = settings.model_copy(update={"gateway_drain_hook": ["sh", "-c", f"echo \"$0 $1\" >> {said}", "{host}",
                                                                "{state}"]})
    assert roll_ops._rotation(_State(), _Named("gpu-1"), hooked, "drain") == \
        {"ok": True, "why": "", "note": "gateway_drain_hook: drain"}
    assert roll_ops._rotation(_State(), _Named("gpu-1"), hooked, "ready")["ok"]
    assert said.read_text() == "gpu-1 drain\ngpu-1 ready\n"


def test_a_ready_host_is_back_in_rotation_before_its_slot_goes_to_the_next(settings, gate, monkeypatch):
    h1 = _Named("h1")
    assert roll_ops._gate(_State(), h1, {"model": "m"}, 1) is True
    monkeypatch.setattr(roll_ops, "_ready",
                        lambda host, settings, instance=None: {"ok": True, "seconds": 1.0, "why": ""})
    held_then = []
    monkeypatch.setattr(roll_ops, "_rotation", lambda state, host, settings, word: (
        held_then.append((word, rolls.get(roll_ops.ROLL).holders())) or {"ok": True, "why": "", "note": "back"}))
    assert roll_ops._wait_ready(_State(groups=GATEWAYS), h1, settings, {}, True) is True
    assert held_then == [("ready", ["h1"])] and rolls.get(roll_ops.ROLL).holders() == []


@pytest.mark.parametrize("passed", [True, False])
def test_a_layout_hosts_canary_instance_restarts_first_and_the_others_only_on_a_pass(settings, monkeypatch, gate,
                                                                                    passed):
    from llmfleet import vllm_layout

    layout = _fleet(settings, TWO, **CANARY)[3][2]
    restarted, judged = [], []
    monkeypatch.setattr(roll_ops, "run", lambda host, command, sudo=True: (True, ""))  # every instance active
    monkeypatch.setattr(roll_ops, "_answer", lambda *_: {"ok": True, "servers": {"a": {}, "b": {}}})
    monkeypatch.setattr(roll_ops, "_restart_instance",
                        lambda host, s, inst, drain: restarted.append(inst.name) or {"ok": True, "seconds": 1})
    verdict = {"passed": passed, "why": "" if passed else "at step 1 (24.8% of the requests): FAIL ttft_p95_ratio",
               "evidence": "e.json"}
    monkeypatch.setattr(roll_ops, "_instance_canary",
                        lambda host, s, plan: judged.append((list(restarted), plan["cohort"])) or verdict)
    outcome: dict = {}
    units = [i.unit_name for i in vllm_layout.instances(layout) or []]
    roll_ops._roll_layout(_State(), _Named("gpu-3"), layout, units, [], False, outcome,
                          {"frontdoor_url": "http://10.0.0.3:8000"})
    assert judged == [(["a"], ["a"])]  # judged once a (and only a) served the change
    if passed:
        assert restarted == ["a", "b"] and outcome["ok"] is True
    else:  # b never restarted; the operation switches the host back and restarts a alone
        assert restarted == ["a"]
        assert outcome == {"ok": False, "why": verdict["why"], "label": "canary failed", "rolled": ["vllm-a.service"]}
