"""llmfleet/roll.py: a batched roll's promise (at most N hosts out at once, the first failure stops
it) across the greenlets of one pyinfra process and across the processes of a sharded deploy, with
real lock files and real processes."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time

import gevent
import pytest

from llmfleet.roll import Roll


def test_hosts_of_one_process_not_in_step_hold_at_most_limit_slots_at_once(tmp_path):
    r = Roll("vllm", tmp_path, gevent.sleep)
    out, peak = [], [0]

    def host(name: str) -> None:
        assert r.enter(name, 2, gevent.getcurrent()) is None
        out.append(name)
        peak[0] = max(peak[0], len(r.held))
        gevent.sleep(0.05)
        r.leave(name)

    t0 = time.monotonic()
    gevent.joinall([gevent.spawn(host, f"h{i}") for i in range(6)], raise_error=True)
    assert sorted(out) == [f"h{i}" for i in range(6)] and peak[0] == 2
    assert time.monotonic() - t0 >= 0.05 * 3  # six hosts, two at a time


def _hold(folder: str, name: str, limit: int, started, release) -> None:
    r = Roll("reboot", __import__("pathlib").Path(folder))
    assert r.enter(name, limit) is None
    started.set()
    release.wait(30)
    r.leave(name)


def test_processes_of_one_deploy_share_the_slots_and_name_their_holders(tmp_path):
    ctx = multiprocessing.get_context("fork")
    release = ctx.Event()
    shards = []
    for name in ("a1", "b1"):
        started = ctx.Event()
        p = ctx.Process(target=_hold, args=(str(tmp_path), name, 2, started, release))
        p.start()
        assert started.wait(10)
        shards.append(p)
    here = Roll("reboot", tmp_path, sleep=lambda s: (_ for _ in ()).throw(TimeoutError("waited for a slot")))
    assert sorted(here.holders()) == ["a1", "b1"]
    with pytest.raises(TimeoutError, match="waited for a slot"):  # both slots held in other processes
        here.enter("c1", 2)
    release.set()
    for p in shards:
        p.join(10)
    assert here.enter("c1", 2) is None and here.holders() == ["c1"]


def test_a_slot_of_a_killed_process_is_free_again(tmp_path):
    ctx = multiprocessing.get_context("fork")
    started, release = ctx.Event(), ctx.Event()
    p = ctx.Process(target=_hold, args=(str(tmp_path), "a1", 1, started, release))
    p.start()
    assert started.wait(10)
    os.kill(p.pid, signal.SIGKILL)
    p.join(10)
    assert Roll("reboot", tmp_path).enter("b1", 1) is None


def test_a_stop_in_one_process_stops_hosts_of_another_even_one_waiting_for_a_slot(tmp_path):
    first, other = Roll("vllm", tmp_path), Roll("vllm", tmp_path, gevent.sleep)
    assert first.enter("a1", 1) is None
    waiting = gevent.spawn(other.enter, "b1", 1)
    gevent.sleep(0.2)
    assert not waiting.ready()  # a1 holds the one slot
    first.stop("a1", "came back degraded")
    first.stop("a2", "a later failure")  # the first stop is the one recorded
    assert waiting.get(timeout=5) == "a1 came back degraded"
    assert other.enter("c1", 1) == "a1 came back degraded"


def test_a_holder_whose_greenlet_died_mid_roll_stops_it_and_frees_its_slot(tmp_path):
    r = Roll("vllm", tmp_path, gevent.sleep)
    crashed = gevent.spawn(lambda: None)
    crashed.join()
    assert r.enter("h1", 1, crashed) is None
    assert r.enter("h2", 1, gevent.getcurrent()) == "h1"
    assert r.holders() == []


def test_a_roll_without_slots_is_refused(tmp_path):
    with pytest.raises(ValueError, match="at least one slot, not 0"):
        Roll("vllm", tmp_path).enter("h1", 0)
