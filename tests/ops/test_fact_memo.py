"""llmfleet/factmemo.py on a real pyinfra State with the @local connector: each fact command counts
its own runs in a file, so what is asked of the host is counted, not assumed."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyinfra.api import Config, FunctionCommand, Inventory, State
from pyinfra.api.connect import connect_all
from pyinfra.api.facts import FactBase

from llmfleet import factmemo


class Counted(FactBase):
    """The file's line count, after appending a line to it: each run of the command shows."""

    def command(self, path: str, tag: str = "a") -> str:
        return f"echo {tag} >> {path}; wc -l < {path}"

    def process(self, output):
        return int(output[0])


@pytest.fixture
def run(tmp_path, monkeypatch):
    """(state, host, counter path) with the memo installed; pyinfra put back afterwards."""
    monkeypatch.delenv("LLMFLEET_FACT_MEMO", raising=False)
    factmemo.install()
    state = State(Inventory((["@local"], {})), Config())
    connect_all(state)
    host = state.inventory.get_host("@local")
    yield state, host, tmp_path / "runs"
    factmemo.uninstall()


def runs(path: Path) -> int:
    return len(path.read_text().splitlines())


def test_a_fact_asked_twice_with_nothing_run_between_runs_its_command_once(run):
    state, host, path = run
    assert host.get_fact(Counted, path=str(path)) == 1
    assert host.get_fact(Counted, path=str(path)) == 1
    assert runs(path) == 1
    assert factmemo.memo_of(state).hits == 1


def test_the_same_fact_with_other_arguments_is_asked_again(run):
    _, host, path = run
    host.get_fact(Counted, path=str(path), tag="a")
    host.get_fact(Counted, path=str(path), tag="b")
    assert runs(path) == 2


def test_a_command_run_on_the_host_makes_every_fact_be_asked_afresh(run):
    _, host, path = run
    host.get_fact(Counted, path=str(path))
    host.run_shell_command("true")  # what an operation's command does
    assert host.get_fact(Counted, path=str(path)) == 2
    assert runs(path) == 2


def test_a_function_command_empties_the_memo_and_its_own_fact_reads_are_never_memoized(run):
    state, host, path = run
    seen = []

    def poll(state, host):  # a function polling a fact: each read must reach the host
        seen.append(host.get_fact(Counted, path=str(path)))
        seen.append(host.get_fact(Counted, path=str(path)))

    host.get_fact(Counted, path=str(path))
    FunctionCommand(poll, (), {}).execute(state, host, {})
    assert seen == [2, 3]
    assert host.get_fact(Counted, path=str(path)) == 4  # afresh after the function, too


def test_connector_arguments_are_part_of_what_a_fact_is_asked_with(run):
    state, host, _ = run
    plain = factmemo._key(state, host, Counted, None, {"path": "/x"})
    as_root = factmemo._key(state, host, Counted, None, {"path": "/x", "_sudo": True})
    assert plain != as_root
    assert plain == factmemo._key(state, host, Counted, None, {"path": "/x"})


def test_llmfleet_fact_memo_off_leaves_pyinfra_asking_every_time(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMFLEET_FACT_MEMO", "off")
    factmemo.install()
    try:
        state = State(Inventory((["@local"], {})), Config())
        connect_all(state)
        host = state.inventory.get_host("@local")
        path = tmp_path / "runs"
        host.get_fact(Counted, path=str(path))
        host.get_fact(Counted, path=str(path))
        assert runs(path) == 2
    finally:
        factmemo.uninstall()
