"""The server's view of a trial: a real vLLM 0.32.0 /metrics page (tests/unit/data/, captured from the
CPU build serving the lab's tiny model during an overload) read by the names compat.METRICS gives
for that version; the summary and the causes it names for a lost SLA."""

from __future__ import annotations

from pathlib import Path

from llmfleet.probe import server

PAGE = Path(__file__).parent / "data" / "vllm-0.32.0-metrics.txt"


def test_the_names_of_the_pinned_version_are_found_on_its_own_page():
    names = server.names_for("0.32.0")
    assert names["queue"] == "vllm:num_requests_waiting" and names["kv_cache"] == "vllm:kv_cache_usage_perc"
    got = server.parse(PAGE.read_text(), names, "tiny-llama")
    expected = {"running", "queue", "kv_cache", "preemptions", "prefix_cache_queries", "prefix_cache_hits",
                "e2e_latency_sum", "e2e_latency_count", "ttft_sum", "ttft_count", "http_duration_sum",
                "http_duration_count"}
    assert set(got) == expected, set(got) ^ expected
    assert got["queue"] > 0 and got["running"] > 0 and got["e2e_latency_count"] > 0
    # the API server's histogram of /v1/completions only (not of /v1/models, /metrics ...)
    assert got["http_duration_count"] == 103 and round(got["http_duration_sum"], 3) == 119.945
    # vLLM 0.10 and older named KV cache usage differently (compat.METRICS)
    assert server.names_for("0.9.2")["kv_cache"] == "vllm:gpu_cache_usage_perc"
    # another model's series are not this one's (the API server's HTTP histogram has no model label)
    assert set(server.parse(PAGE.read_text(), names, "another-model")) == {"http_duration_sum", "http_duration_count"}


def test_a_trial_summary_names_the_queue_the_kv_cache_and_preemption():
    names = server.names_for("0.32.0")
    samples = [
        (0.0, {"running": 0, "queue": 0, "kv_cache": 0.0, "preemptions": 3, "prefix_cache_queries": 100,
               "prefix_cache_hits": 0, "e2e_latency_sum": 10.0, "e2e_latency_count": 100, "ttft_sum": 1.0,
               "ttft_count": 100}),
        (1.0, {"running": 8, "queue": 12, "kv_cache": 0.5, "preemptions": 3, "prefix_cache_queries": 600,
               "prefix_cache_hits": 250, "e2e_latency_sum": 12.0, "e2e_latency_count": 104, "ttft_sum": 1.2,
               "ttft_count": 104}),
        (2.0, {"running": 8, "queue": 30, "kv_cache": 0.95, "preemptions": 5, "prefix_cache_queries": 1100,
               "prefix_cache_hits": 500, "e2e_latency_sum": 15.0, "e2e_latency_count": 110, "ttft_sum": 2.0,
               "ttft_count": 110}),
    ]
    s = server.summarize(samples, "0.32.0", names)
    assert s["queue"] == {"mean": 14.0, "max": 30} and s["kv_cache"]["max"] == 0.95
    assert (s["preemptions"], s["prefix_cache_hit_rate"]) == (2, 0.5)
    assert s["e2e_latency_mean_ms"] == 500.0 and s["e2e_latency_requests"] == 10
    assert s["ttft_mean_ms"] == 100.0
    queue, kv, preempt = s["causes"]
    assert queue.startswith("queue: up to 30 requests waiting (mean 14.0) while up to 8 ran")
    assert kv.startswith("KV cache: up to 95% used") and preempt.startswith("preemption: 2 requests preempted")


def test_when_none_of_them_is_the_cause_it_says_so_with_the_numbers():
    names = server.names_for("0.32.0")
    samples = [(t, {"running": r, "queue": 0, "kv_cache": 0.04}) for t, r in ((0, 0), (1, 70), (2, 74))]
    [cause] = server.summarize(samples, "0.32.0", names)["causes"]
    assert cause.startswith("not the queue, the KV cache or preemption (waiting max 0, KV cache max 4%, "
                            "preemptions 0): up to 74 requests ran at once")
    assert server.summarize([], "0.32.0", names)["causes"] == []


def test_samples_from_several_servers_are_not_summed_up():
    """Through a front door, /metrics answers from whichever instance it picks: counters jump back and forth."""
    names = server.names_for("0.32.0")
    a = {"running": 3, "queue": 0, "kv_cache": 0.1, "preemptions": 0, "e2e_latency_sum": 50.0, "e2e_latency_count": 400}
    b = {"running": 1, "queue": 0, "kv_cache": 0.1, "preemptions": 0, "e2e_latency_sum": 20.0, "e2e_latency_count": 90}
    s = server.summarize([(0, a), (1, b), (2, a)], "0.32.0", names)
    assert s["samples"] == 3 and s["e2e_latency_mean_ms"] is None and s["queue"] is None and s["causes"] == []
    assert "counters went down between samples (e2e_latency_count, e2e_latency_sum): more than one server" in \
        s["errors"][-1]
