"""llmfleet tune's search on a known landscape (no server): the space and its errors, hill climbing
from the current configuration, early stopping, failed candidates, resuming from the journal, the
intervals, the Pareto front and the group-data snippet."""

from __future__ import annotations

import ast
import math

import pytest

from llmfleet import tune

SPACE = {"flags": {"max-num-seqs": [32, 8, 16, 64], "max-num-batched-tokens": {"min": 256, "max": 1024, "step": 256}},
         "layouts": ["1x8", "2x4"]}


def landscape(c: tune.Candidate) -> float:
    """Effective throughput of a candidate: best at max-num-seqs 32, 768 tokens, layout 2x4."""
    f = dict(c.flags)
    bonus = 20 if c.layout == "2x4" else 0
    return 100 - abs(f["max-num-seqs"] - 32) - abs(f["max-num-batched-tokens"] - 768) / 16 + bonus


def measurer(calls: list, fail: set[str] = frozenset()):
    def measure(c: tune.Candidate, floor: float | None) -> tune.Trial:
        calls.append((c, floor))
        if c.describe() in fail:
            return tune.Trial(c.key, c.describe(), tune.FAILED, reason="the server exited 1: out of memory", starts=1)
        rps = landscape(c)
        if floor is not None and rps < floor:
            return tune.Trial(c.key, c.describe(), tune.BEATEN, reason=f"did not hold {floor:g} req/s", starts=1)
        return tune.Trial(c.key, c.describe(), tune.MEASURED, rps, 1000 / rps, starts=1)
    return measure


def test_the_space_orders_numbers_expands_ranges_and_names_its_grid():
    space = tune.Space.parse(SPACE)
    assert space.flags == {"max-num-seqs": [8, 16, 32, 64], "max-num-batched-tokens": [256, 512, 768, 1024]}
    assert len(space.grid()) == 4 * 4 * 2 and len({c.key for c in space.grid()}) == 32


@pytest.mark.parametrize("raw,message", [
    ({"flags": {"max-num-seqs": {"min": 8, "max": 4, "step": 4}}}, "min <= max and a positive step"),
    ({"flags": {"max-num-seqs": {"min": 8, "max": 64}}}, "a range is {'min', 'max', 'step'}"),
    ({"flags": {"max-num-seqs": [8, 8]}}, "a list of distinct values"),
    ({"flags": {}}, "nothing to search"),
    ({"flag": {}}, "unknown key(s) ['flag']"),
])
def test_a_space_that_cannot_be_searched_is_refused_with_its_fix(raw, message):
    with pytest.raises(tune.SpaceError, match="tune_space") as exc:
        tune.Space.parse(raw)
    assert message in str(exc.value)


def test_hill_climbing_finds_the_grids_best_with_fewer_starts(tmp_path):
    space = tune.Space.parse(SPACE)
    calls: list = []
    journal = tune.Journal(tmp_path / "journal.jsonl")
    start = space.nearest({"max-num-seqs": 8, "max-num-batched-tokens": 300}, None)
    best = tune.search(space, start, measurer(calls), journal, max_starts=100)
    grid_best = max(space.grid(), key=landscape)
    assert best.key == grid_best.key and best.effective_rps == landscape(grid_best)
    assert journal.starts <= len(space.grid()) / 2, journal.starts
    # the incumbent was searched in full; every other candidate first had to hold the incumbent's rate
    assert calls[0] == (start, None) and all(floor is not None for _, floor in calls[1:])
    assert any(t.status == tune.BEATEN for t in journal.trials.values())


def test_a_candidate_that_fails_is_recorded_with_the_servers_reason_and_the_search_goes_on(tmp_path):
    space = tune.Space.parse(SPACE)
    journal = tune.Journal(tmp_path / "journal.jsonl")
    start = space.nearest({"max-num-seqs": 16, "max-num-batched-tokens": 768}, None)
    failing = tune.Candidate((("max-num-seqs", 32), ("max-num-batched-tokens", 768)), "1x8")
    best = tune.search(space, start, measurer([], {failing.describe()}), journal, max_starts=100)
    assert journal.trials[failing.key].status == tune.FAILED
    assert journal.trials[failing.key].reason == "the server exited 1: out of memory"
    assert best.status == tune.MEASURED and best.key != failing.key


def test_an_interrupted_search_resumes_without_measuring_again(tmp_path):
    space = tune.Space.parse(SPACE)
    path = tmp_path / "journal.jsonl"
    start = space.nearest({"max-num-seqs": 8, "max-num-batched-tokens": 256}, None)
    first: list = []
    tune.search(space, start, measurer(first), tune.Journal(path), max_starts=3)  # stopped at its budget
    again: list = []
    best = tune.search(space, start, measurer(again), tune.Journal(path), max_starts=100)
    assert {c.key for c, _ in first}.isdisjoint({c.key for c, _ in again})  # nothing measured twice
    assert best.effective_rps == max(landscape(c) for c in space.grid())


def test_a_start_that_does_not_serve_stops_the_search_naming_it(tmp_path):
    space = tune.Space.parse(SPACE)
    start = space.nearest({"max-num-seqs": 8, "max-num-batched-tokens": 256}, None)
    with pytest.raises(tune.SpaceError, match="did not measure: the server exited 1"):
        tune.search(space, start, measurer([], {start.describe()}), tune.Journal(tmp_path / "j.jsonl"), max_starts=9)


def test_the_interval_is_students_t():
    mean, half = tune.interval([10.0, 12.0, 11.0])
    assert mean == 11.0 and half == pytest.approx(4.303 * 1.0 / math.sqrt(3))
    assert tune.interval([5.0]) == (5.0, math.inf)


def test_the_pareto_front_keeps_what_nothing_beats_on_both():
    def t(key, rps, p95):
        return tune.Trial(key, key, tune.MEASURED, rps, p95)
    trials = [t("a", 10, 500), t("b", 12, 700), t("c", 9, 600), t("d", 12, 650), tune.Trial("e", "e", tune.FAILED)]
    assert [x.key for x in tune.pareto(trials)] == ["d", "a"]


def test_the_snippet_is_group_data_with_its_provenance():
    c = tune.Candidate((("max-num-seqs", 32), ("enable-chunked-prefill", True), ("max-num-batched-tokens", None)),
                       "2x4", (("VLLM_CPU_KVCACHE_SPACE", "4"),))
    text = tune.snippet(c, {"dtype": "float16", "max-num-seqs": 8, "max-num-batched-tokens": 512},
                        {"OMP_NUM_THREADS": "1"}, {"host": "gpu-7", "date": "2026-12-07"}, layouts=True)
    assert text.splitlines()[:2] == ["# llmfleet tune: host: gpu-7", "# llmfleet tune: date: 2026-12-07"]
    values: dict = {}
    exec(compile(ast.parse(text), "snippet", "exec"), {}, values)  # noqa: S102 (our own rendering)
    # a None value leaves the flag out (vLLM's default), whatever group data had
    assert values == {"vllm_flags": {"dtype": "float16", "max-num-seqs": 32, "enable-chunked-prefill": True},
                      "vllm_env": {"OMP_NUM_THREADS": "1", "VLLM_CPU_KVCACHE_SPACE": "4"}, "vllm_layout": "2x4"}
    # a winner on vllm.service says so where the space had layouts, and nothing where it had none
    plain = tune.Candidate((("max-num-seqs", 32),), None)
    assert "vllm_layout = None" in tune.snippet(plain, {}, {}, {}, layouts=True)
    assert "vllm_layout" not in tune.snippet(plain, {}, {}, {}, layouts=False)


def test_a_flag_left_out_and_environment_variables_are_points_of_the_space():
    space = tune.Space.parse({"flags": {"max-num-seqs": [8, 4], "max-num-batched-tokens": [512, None]},
                              "env": {"VLLM_CPU_KVCACHE_SPACE": ["1", "0"]}, "layouts": ["1x2", "2x1"]})
    assert space.flags["max-num-batched-tokens"] == [None, 512]  # the flag left out first, then numbers up
    assert len(space.grid()) == 16 and len({c.key for c in space.grid()}) == 16
    configured = {"dtype": "float32", "max-num-seqs": 8}
    start = space.nearest(configured, "1x2", {"VLLM_CPU_KVCACHE_SPACE": "1", "OMP_NUM_THREADS": "1"})
    assert start.flags == (("max-num-seqs", 8), ("max-num-batched-tokens", None)) and start.env == (
        ("VLLM_CPU_KVCACHE_SPACE", "1"),)
    # the configured state itself: measured as it serves, nothing to start
    assert space.is_exactly(start, configured, "1x2", {"VLLM_CPU_KVCACHE_SPACE": "1", "OMP_NUM_THREADS": "1"})
    assert not space.is_exactly(start, configured | {"max-num-batched-tokens": 1024}, "1x2",
                                {"VLLM_CPU_KVCACHE_SPACE": "1"})
    described = [c.describe() for c in space.neighbours(start)]
    assert described == [
        "max-num-seqs 4, max-num-batched-tokens default, VLLM_CPU_KVCACHE_SPACE=1; layout 1x2",
        "max-num-seqs 8, max-num-batched-tokens 512, VLLM_CPU_KVCACHE_SPACE=1; layout 1x2",
        "max-num-seqs 8, max-num-batched-tokens default, VLLM_CPU_KVCACHE_SPACE=0; layout 1x2",
        "max-num-seqs 8, max-num-batched-tokens default, VLLM_CPU_KVCACHE_SPACE=1; layout 2x1"]
    # a layout of instances in few words
    assert tune.layout_words([{"name": "a", "gpus": [0, 1], "port": 8001}, {"name": "b", "gpus": [], "cpus": "2"}]) \
        == "a GPUs 0,1 + b CPUs 2"


@pytest.mark.parametrize("raw,message", [
    ({"env": {"VLLM_CPU_KVCACHE_SPACE": [1, 2]}}, "a list of distinct strings"),
    ({"layouts": ["2x1", "2x1"]}, "each layout once"),
    ({"layouts": [None, "2x1"]}, "None (vllm.service) beside serving layouts: a deploy moves a host from vllm.service "
     "to a layout but not back"),
    ([1, 2], "a mapping of 'flags', 'env' and 'layouts'"),
])
def test_environment_and_layouts_that_cannot_be_searched_are_refused(raw, message):
    with pytest.raises(tune.SpaceError) as exc:
        tune.Space.parse(raw)
    assert message in str(exc.value)


@pytest.mark.parametrize("preemptions,requests,kv,expected", [
    (0, 100, 0.5, ""),
    (6, 100, 0.5, "6 preemptions over 100 requests (0.060 a request, above tune_max_preemptions_per_request 0.05)"),
    (0, 100, 0.97, "KV cache peak 97.0%: less than tune_min_kv_headroom 5% left"),
    (None, 100, None, ""),  # no server view: nothing to judge by
])
def test_a_trial_is_rejected_for_preemptions_or_a_full_kv_cache(preemptions, requests, kv, expected):
    assert tune.rejection(preemptions, requests, kv, max_preemptions_per_request=0.05, min_kv_headroom=0.05) == expected


def test_the_top_candidates_rank_by_the_mean_of_every_measurement():
    a = tune.Trial("a", "a", tune.MEASURED, 10.0, 500, repeats=[6.0, 7.0])  # lucky first search
    b = tune.Trial("b", "b", tune.MEASURED, 9.0, 600, repeats=[9.0, 9.5])
    c = tune.Trial("c", "c", tune.REJECTED, 12.0, 400, reason="KV cache")
    assert [t.key for t in tune.ranked([a, b, c])] == ["b", "a"]
    assert tune.measurements(a) == [10.0, 6.0, 7.0]


def test_the_mix_hash_changes_with_the_mix_and_the_slos():
    mix = [{"name": "chat", "share": 1.0}]
    assert tune.mix_hash(mix, {"e2e_p95_ms": 800}) == tune.mix_hash(mix, {"e2e_p95_ms": 800})
    assert tune.mix_hash(mix, {"e2e_p95_ms": 800}) != tune.mix_hash(mix, {"e2e_p95_ms": 900})
