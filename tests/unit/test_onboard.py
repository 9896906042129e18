"""Onboarding's stage chain (llmfleet/onboard.py run_stages) with small real stages in place of the
lab's: what is recorded in <state>/hosts/<host>/onboarding.json, resuming, --stop-after, --restart,
a failing stage, an interrupt."""

from __future__ import annotations

import json

import pytest

from llmfleet.errors import OnboardError
from llmfleet.onboard import STAGES, Run, StageFailed, onboard, progress_path, run_stages


class Stages:
    """Three stages that note when they run; ``fail`` or ``interrupt`` name a stage that does so."""

    def __init__(self, fail: str | None = None, interrupt: str | None = None):
        self.ran: list[str] = []
        self.fail, self.interrupt = fail, interrupt

    def stage(self, name: str):
        def run(r: Run) -> dict | None:
            self.ran.append(name)
            if name == self.interrupt:
                raise KeyboardInterrupt
            if name == self.fail:
                raise StageFailed([f"{name} found a problem (fix: the fix)", "a second reason"])
            if name == "first":
                r.progress["first_extra"] = {"seen": True}  # a stage may keep a record of its own
            return {"result": f"{name} ok"} if name != "second" else None
        return run

    def table(self):
        return {n: self.stage(n) for n in ("first", "second", "third")}


@pytest.fixture
def run(tmp_path):
    lines: list[str] = []
    r = Run("inventories/x.py", {"name": "h1", "groups": [], "data": {}}, None, tmp_path / "state",
            tmp_path / "out", lines.append)
    r.lines = lines  # type: ignore[attr-defined]
    return r


def record(run: Run) -> dict:
    return json.loads(progress_path(run.state_dir, "h1").read_text())


def test_every_stage_runs_in_order_is_recorded_and_the_last_marks_the_host_onboarded(run):
    s = Stages()
    progress = run_stages(run, s.table())
    assert s.ran == ["first", "second", "third"]
    saved = record(run)
    assert saved == progress and list(saved["stages"]) == ["first", "second", "third"]
    assert saved["stages"]["first"]["result"] == "first ok" and set(saved["stages"]["second"]) == {"at"}
    assert saved["onboarded"] == saved["stages"]["third"]["at"] and saved["first_extra"] == {"seen": True}
    assert run.lines == ["h1: first ...", "h1: first: done", "h1: second ...", "h1: second: done",
                         "h1: third ...", "h1: third: done"]


def test_a_second_run_continues_from_the_stage_after_the_last_recorded_one(run):
    progress_path(run.state_dir, "h1").parent.mkdir(parents=True)
    progress_path(run.state_dir, "h1").write_text(json.dumps(
        {"host": "h1", "stages": {"first": {"at": "2026-01-02T03:04:05+00:00"}}}))
    s = Stages()
    run_stages(run, s.table())
    assert s.ran == ["second", "third"]
    assert run.lines[0] == "h1: first: done on 2026-01-02T03:04:05+00:00, skipped"
    assert record(run)["stages"]["first"] == {"at": "2026-01-02T03:04:05+00:00"}


def test_stop_after_stops_there_and_the_next_run_goes_on(run):
    s = Stages()
    progress = run_stages(run, s.table(), stop_after="second")
    assert s.ran == ["first", "second"] and "onboarded" not in progress
    assert run.lines[-1] == "h1: stopped after second as asked; run the same command again to continue"
    assert list(record(run)["stages"]) == ["first", "second"]
    run_stages(run, s.table())
    assert s.ran == ["first", "second", "third"] and record(run)["onboarded"]


def test_an_onboarded_host_has_nothing_to_do_unless_restarted(run):
    s = Stages()
    first = run_stages(run, s.table())
    run.lines.clear()
    assert run_stages(run, s.table()) == first and s.ran == ["first", "second", "third"]
    assert run.lines == [f"h1: onboarded on {first['onboarded']}; nothing to do (--restart to run every stage again)"]
    run_stages(run, s.table(), restart=True)
    assert s.ran == ["first", "second", "third"] * 2


def test_restart_forgets_what_was_done_before(run):
    s = Stages()
    run_stages(run, s.table(), stop_after="second")
    run_stages(run, s.table(), restart=True, stop_after="first")
    assert s.ran == ["first", "second", "first"]
    assert list(record(run)["stages"]) == ["first"]


def test_a_failing_stage_is_recorded_as_failed_with_its_reasons_and_the_host_is_not_onboarded(run):
    with pytest.raises(OnboardError) as exc:
        run_stages(run, Stages(fail="second").table())
    assert str(exc.value) == ("h1: onboarding stopped at second: second found a problem (fix: the fix); a second "
                              "reason (not onboarded; run again after the fix: it continues from second)")
    saved = record(run)
    assert list(saved["stages"]) == ["first"] and "onboarded" not in saved
    assert saved["failed"]["stage"] == "second"
    assert saved["failed"]["reasons"] == ["second found a problem (fix: the fix)", "a second reason"]
    # after the fix it continues from the failed stage, and the failure is no longer on record
    s = Stages()
    run_stages(run, s.table())
    assert s.ran == ["second", "third"] and "failed" not in record(run) and record(run)["onboarded"]


def test_an_interrupt_records_nothing_of_its_stage_and_says_how_to_continue(run):
    s = Stages(interrupt="second")
    with pytest.raises(KeyboardInterrupt):
        run_stages(run, s.table())
    assert run.lines[-1] == ("h1: interrupted during second; nothing of it is recorded: run the same command "
                             "again to continue from second")
    assert list(record(run)["stages"]) == ["first"]


def test_the_stages_are_in_the_documented_order_and_stop_after_offers_all_but_the_last():
    from llmfleet.cli import onboard_cmd

    assert list(STAGES) == ["preflight", "deploy", "verify", "acceptance", "record", "audit"]
    (option,) = [p for p in onboard_cmd.params if p.name == "stop_after"]
    assert list(option.type.choices) == ["preflight", "deploy", "verify", "acceptance", "record"]


def test_onboarding_takes_one_host_by_name_not_a_group(tmp_path):
    inv = tmp_path / "two.py"
    inv.write_text('gpus = ["gpu-1", "gpu-2"]\n')
    with pytest.raises(OnboardError, match=r"--limit gpus: onboarding takes one host by name \(it matched "
                                           r"gpu-1, gpu-2\)"):
        onboard(str(inv), "gpus", tmp_path / "state", tmp_path / "out")
    assert not (tmp_path / "state").exists()


def test_onboarding_refuses_a_host_whose_settings_are_invalid_before_any_stage(tmp_path):
    inv = tmp_path / "one.py"
    inv.write_text('gpus = [("gpu-1", {"vllm_port": 0})]\n')
    with pytest.raises(OnboardError, match=r"gpu-1.*vllm_port"):
        onboard(str(inv), "gpu-1", tmp_path / "state", tmp_path / "out")
    assert not (tmp_path / "state").exists()
