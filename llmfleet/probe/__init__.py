"""The live generation throughput probe (issue 6).

What a host can really carry: the highest request rate at which a latency SLA holds for a
realistic request mix, measured open loop against any OpenAI-compatible endpoint.

- ``config``: the request mix, SLOs and load settings (group data ``probe_*``), validated.
- ``prompts``: prompts of exact token lengths, each different (no prefix-cache flattery).
- ``client``: one streamed completion, timed from its intended send time.
- ``load``: a trial at one offered rate (Poisson or gamma arrivals), saturation detected.
- ``stats``: the metrics and their definitions.
- ``search``: effective throughput by bracketing and bisection with repeated trials.
- ``ceiling``: the memory-bandwidth ceiling of decode (a calculation, not a measurement).
- ``report``: the JSON report (schema: docs/probe-report.md), the terminal table, the picture,
  the baseline gate.
- ``standin``: a stand-in OpenAI endpoint (not vLLM) for what a real server cannot be made to do
  on demand: 200+ requests/s, stalls, malformed chunks.
"""
