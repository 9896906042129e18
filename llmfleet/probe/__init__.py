"""The live generation throughput probe.

What a host can really carry: the highest request rate at which a latency SLA holds for a
realistic request mix, measured open loop against any OpenAI-compatible endpoint.

- ``config``: the request mix, SLOs (TTFT, TPOT, E2E at percentiles, per class and overall) and load
  settings (group data ``probe_*``), validated.
- ``prompts``: prompts of exact token lengths, each different (no prefix-cache flattery).
- ``client``: one streamed completion, timed from its intended send time.
- ``load``: a trial at one offered rate (Poisson or gamma arrivals), saturation detected.
- ``stats``: the metrics and their definitions, the SLO verdicts and goodput.
- ``trace``: request logs (simple JSONL/CSV, Mooncake) read and replayed at their own timing.
- ``mix``: a request mix learnt from a log (k-means on lengths, scikit-learn).
- ``server``: the server's view of a trial (its /metrics, sampled once a second).
- ``search``: effective throughput by bracketing and bisection with repeated trials.
- ``ceiling``: the memory-bandwidth ceiling of decode (a calculation, not a measurement).
- ``report``: the JSON report (schema: docs/probe-report.md), the terminal table, the picture,
  the baseline gate.
- ``standin``: a stand-in OpenAI endpoint (not vLLM) for what a real server cannot be made to do
  on demand: 200+ requests/s, stalls, malformed chunks.
"""
