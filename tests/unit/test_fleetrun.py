"""llmfleet/fleetrun.py: shards, and a host's outcome read from pyinfra's own JSON results, with a
real pyinfra run under --no-wait (which exits 0 when an operation fails: the reason the outcome is
read from the results)."""

from __future__ import annotations

import sys

import pytest

from llmfleet import fleetrun
from llmfleet.errors import LlmfleetError


def test_shards_are_one_per_core_of_at_least_four_hosts_and_never_more_than_hosts():
    assert fleetrun.shard_count(1, cores=8) == 1
    assert fleetrun.shard_count(24, cores=2) == 2
    assert fleetrun.shard_count(24, cores=8) == 6  # four hosts a shard at least
    assert fleetrun.shard_count(500, cores=8) == 8
    assert fleetrun.shard_count(3, asked=5) == 3
    with pytest.raises(LlmfleetError, match="--shards 0: a run needs at least one shard"):
        fleetrun.shard_count(3, asked=0)


def test_hosts_are_dealt_round_robin_so_each_shard_gets_some_of_every_group():
    names = ["v1", "v2", "v3", "a1", "a2", "a3", "h1"]
    assert fleetrun.split(names, 3) == [["v1", "a1", "h1"], ["v2", "a2"], ["v3", "a3"]]
    assert fleetrun.split(names[:2], 3) == [["v1"], ["v2"]]
    assert sorted(sum(fleetrun.split(names, 4), [])) == sorted(names)


FAILING = '''
from pyinfra.operations import server
server.shell(name="first", commands=["true"])
server.shell(name="breaks", commands=["exit 3"])
server.shell(name="never reached", commands=["true"])
'''


@pytest.mark.parametrize("no_wait", [True, False], ids=["no_wait", "in_step"])
def test_a_host_an_operation_failed_on_is_failed_even_where_pyinfra_exits_0(tmp_path, no_wait):
    deploy = tmp_path / "deploy.py"
    deploy.write_text(FAILING)

    def argv(hosts):
        return [sys.executable, "-m", "pyinfra", *hosts, str(deploy), "-y", "--json",
                *(["--no-wait"] if no_wait else [])]

    # in a folder of its own: the project's group data (sudo on every host) is not this test's
    shard = fleetrun.run(argv, [["@local"]], tmp_path / "logs", cwd=tmp_path)[0]
    if no_wait:
        assert shard.returncode == 0  # pyinfra 3.10 under --no-wait: the host's failure is not in its exit status
    outcome = fleetrun.outcome(shard)["@local"]
    if no_wait:
        assert outcome["ok"] is False and outcome["failed"] == "breaks", outcome
        assert outcome["changed"] == ["first"]
    else:  # in step, with its only host failed, pyinfra stops before its results ("No hosts remaining")
        assert outcome["ok"] is False and outcome["failed"].startswith("Error: executed 0 commands"), outcome
        assert "pyinfra exited 1 without results" in outcome["failed"]
    assert "breaks" in (tmp_path / "logs" / "shard-1.log").read_text()


def test_a_shard_that_left_no_results_fails_each_of_its_hosts_naming_its_log(tmp_path):
    shard = fleetrun.run(lambda hosts: [sys.executable, "-c", "import sys; sys.exit('no inventory')"],
                         [["h1", "h2"]], tmp_path)[0]
    out = fleetrun.outcome(shard)
    assert not out["h1"]["ok"] and not out["h2"]["ok"]
    assert out["h1"]["failed"] == f"pyinfra exited 1 without results (its log: {tmp_path / 'shard-1.log'})"


def test_the_audit_gives_its_dry_run_and_its_verify_suite_half_the_cores_each_as_they_run_at_once():
    from llmfleet.audit.run import cores_of_parts

    assert cores_of_parts(cores=2) == (1, 1)
    assert cores_of_parts(cores=8) == (4, 4)
    assert cores_of_parts(cores=1) == (1, 1)
    assert cores_of_parts(cores=5) == (2, 3)
    assert cores_of_parts(("config",), cores=8) == (8, 8)  # a part left out leaves every core to the other
    assert cores_of_parts(("state",), cores=2) == (2, 2)
    # 24 hosts on 2 cores: one dry-run shard and one verify process, not two of each
    assert [fleetrun.shard_count(24, None, c) for c in cores_of_parts(cores=2)] == [1, 1]
    assert [fleetrun.shard_count(500, None, c) for c in cores_of_parts(cores=8)] == [4, 4]
