"""The vllm component on a host with a serving layout, facts in and operations out: a first start
starts the instances together, a changed instance is the only one restarted (one at a time, in
batches of hosts), a move from vllm.service stops it first, an instance dropped from the layout
goes, a host as deployed plans nothing, and what the host cannot give refuses it before any
change; the switch's arguments for a layout."""

import pytest
from pyinfra.api import OperationValueError
from test_vllm_logic import UNIT, active, planned

from llmfleet import vllm, vllm_layout
from llmfleet.schema import VllmInstance
from operations import vllm as ops
from operations import vllm_roll as roll_ops

TWO = [{"name": "a", "gpus": [], "port": 8001, "cpus": "0"}, {"name": "b", "gpus": [], "port": 8002, "cpus": "1"}]
NODES = {0: "0-1"}
STARTED = "vllm: instances started together (nothing serves from them now)"
ROLLED = ("vllm: instances restarted one at a time, each drained in the front door first and back in it when ready; "
          "hosts in batches of vllm_max_unavailable (_parallel=1)")
MOVED = ("vllm: moved from vllm.service to the layout's instances (started together), hosts in batches of "
         "vllm_max_unavailable (_parallel=1)")
STAGED = "vllm: an instance's unit missing or not the rendered one: staged for its restart"


@pytest.fixture(scope="module")
def laid_out(settings):
    return settings.model_copy(update={"vllm_layout": [VllmInstance(**i) for i in TWO], "gpu_profile": None})


SHA = ops._sha(UNIT)


def units(sha_a=SHA, sha_b=SHA, active_b="active") -> dict:
    return {"vllm-a.service": {"sha256": sha_a, "active": "active" if sha_a else "inactive",
                               "enabled": "enabled" if sha_a else "disabled"},
            "vllm-b.service": {"sha256": sha_b, "active": active_b if sha_b else "inactive",
                               "enabled": "enabled" if sha_b else "disabled"}}


def state(settings, **override) -> dict:
    """VllmState of a layout host serving what the settings say (no vllm.service left)."""
    return active(settings, unit_sha256=None, active="inactive", enabled="not-found", units=units(),
                  instance_units=["vllm-a.service", "vllm-b.service"]) | override


def plan(laid_out, monkeypatch, **facts):
    holders = {"8000": [], "8001": [{"pid": 1, "command": "python3", "unit": "vllm-a.service"}]}
    return planned(laid_out, monkeypatch, **({"VllmState": state(laid_out), "NumaNodes": NODES,
                                              "PortHolders": holders} | facts))


def test_a_layout_host_as_deployed_plans_nothing_and_says_why(laid_out, monkeypatch):
    calls, fake = plan(laid_out, monkeypatch)
    assert calls == [] and fake.noops == ["vllm: the layout's 2 instances as deployed (units, environment and its "
                                          "packages, model and key); each active and enabled"]


def test_a_first_start_stages_every_instance_unit_and_starts_them_together(laid_out, monkeypatch):
    first = state(laid_out, units=units(sha_a=None, sha_b=None), instance_units=[], venv_target=None,
                  model_target=None)
    calls, fake = plan(laid_out, monkeypatch, VllmState=first)
    assert calls == [STAGED, STAGED, "vllm: environment link vllm_venv not at this package set's environment: staged "
                     "for the restart", "vllm: model link `current` missing or not at vllm_model's version: staged for "
                     "the restart", STARTED]
    assert any(line.startswith("vllm: vllm-b.service: restart planned: first start: no unit vllm-b.service")
               for line in fake.logged)


def test_one_changed_instance_is_the_only_one_staged_and_it_rolls_in_a_batch(laid_out, monkeypatch):
    calls, fake = plan(laid_out, monkeypatch, VllmState=state(laid_out, units=units(sha_b="0" * 64)))
    assert calls == [STAGED, ROLLED]
    assert "vllm: vllm-b.service: restart planned: the unit vllm-b.service is not the rendered one" in fake.logged


def test_a_shared_change_restarts_every_instance_one_at_a_time(laid_out, monkeypatch):
    calls, _ = plan(laid_out, monkeypatch, VllmState=state(laid_out, model_target="/data/models/tiny/1"))
    assert calls == ["vllm: model link `current` missing or not at vllm_model's version: staged for the restart",
                     ROLLED]


def test_a_move_from_a_serving_vllm_service_starts_the_instances_together_in_its_batch(laid_out, monkeypatch):
    before = state(laid_out, unit_sha256="f" * 64, active="active", enabled="enabled",
                   units=units(sha_a=None, sha_b=None), instance_units=[])
    holders = {"8000": [{"pid": 7, "command": "python3", "unit": "vllm.service"}]}
    calls, fake = plan(laid_out, monkeypatch, VllmState=before, PortHolders=holders)
    assert calls == [STAGED, STAGED, MOVED]
    assert any(line.startswith("vllm: moving to vllm_layout: vllm.service is stopped and removed") for line in
               fake.logged)
    stopped = state(laid_out, unit_sha256="f" * 64, active="failed", enabled="enabled",
                    units=units(sha_a=None, sha_b=None), instance_units=[])
    calls, _ = plan(laid_out, monkeypatch, VllmState=stopped, PortHolders={})
    assert calls == [STAGED, STAGED, STARTED]  # a vllm.service that serves nothing: no capacity to keep


def test_an_instance_dropped_from_the_layout_is_planned_for_removal(laid_out, monkeypatch):
    more = state(laid_out, instance_units=["vllm-a.service", "vllm-b.service", "vllm-c.service"])
    calls, fake = plan(laid_out, monkeypatch, VllmState=more)
    assert calls == [ROLLED]
    assert "vllm: vllm-c.service is no longer in vllm_layout: drained, stopped and removed" in fake.logged


def test_a_port_of_an_instance_held_by_another_process_refuses_the_host(laid_out, monkeypatch):
    squatter = {"pid": 4242, "command": "nginx", "unit": "nginx.service"}
    with pytest.raises(OperationValueError) as exc:
        plan(laid_out, monkeypatch, VllmState=state(laid_out, units=units(sha_b="0" * 64)),
             PortHolders={"8002": [squatter]})
    assert str(exc.value) == ("host gpu-1: the port of vllm_layout instance b = 8002 is held on the host by nginx "
                              "(pid 4242, unit nginx.service), not by vllm-b.service: the server could not listen on "
                              "it (fix: stop or move that process, or set the port of vllm_layout instance b to a "
                              "free port); nothing was changed")


def test_the_front_door_port_may_be_held_by_haproxy_or_by_the_vllm_service_it_replaces(laid_out, monkeypatch):
    for unit in ("haproxy.service", "vllm.service"):
        holders = {"8000": [{"pid": 7, "command": "x", "unit": unit}], "8404": [{"pid": 7, "command": "x",
                                                                                "unit": "haproxy.service"}]}
        calls, _ = plan(laid_out, monkeypatch, VllmState=state(laid_out, units=units(sha_b="0" * 64)),
                        PortHolders=holders)
        assert calls[-1] == ROLLED
    holders = {"8404": [{"pid": 9, "command": "node_exporter", "unit": "vllm.service"}]}
    with pytest.raises(OperationValueError, match="frontdoor_metrics_port = 8404 is held on the host by "
                                                  "node_exporter"):
        plan(laid_out, monkeypatch, VllmState=state(laid_out, units=units(sha_b="0" * 64)), PortHolders=holders)


def test_cpus_the_host_does_not_have_refuse_it_before_any_change(laid_out, monkeypatch):
    with pytest.raises(OperationValueError) as exc:
        plan(laid_out, monkeypatch, NumaNodes={0: "0"})
    assert "vllm_layout[1] (b).cpus = '1': CPUs 1 are not on gpu-1 (its NUMA nodes hold 0)" in str(exc.value)
    assert str(exc.value).endswith("; nothing was changed")


def test_the_switch_of_a_layout_moves_every_staged_unit_and_restarts_none(laid_out):
    causes = {"vllm-a.service": {"unit": "x", "model": "y"}, "vllm-b.service": {"model": "y"}}
    assert roll_ops.layout_switch_args(laid_out, causes) == [
        "switch", "--record", roll_ops.SWITCH_RECORD, "--keep", vllm.CONF_DIR, "--no-restart",
        "--service", "vllm-a.service", "--service", "vllm-b.service", "--unit", "/etc/systemd/system/vllm-a.service",
        "--link", vllm.model_link(laid_out)]


def test_instance_units_are_bound_to_their_cpus_from_the_host_nodes(laid_out):
    texts = ops.unit_texts(laid_out, False, vllm_layout.instances(laid_out), NODES)
    assert "CPUAffinity=0\nNUMAPolicy=bind\nNUMAMask=0\n" in texts["vllm-a.service"]
    assert "CPUAffinity=1\n" in texts["vllm-b.service"] and "--port 8002" in texts["vllm-b.service"]


def test_no_layout_keeps_reading_the_single_unit_only(settings):
    assert "units" not in ops._paths(settings)
    one = settings.model_copy(update={"vllm_layout": [VllmInstance(**TWO[0])]})
    assert ops._paths(one, vllm_layout.instances(one))["units"] == ["/etc/systemd/system/vllm-a.service"]
