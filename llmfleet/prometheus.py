"""Prometheus's HTTP API as llmfleet asks it: an instant query (/api/v1/query), for the audit's
`--from-prometheus` and a canary's gates. Each caller turns PrometheusError into its own error."""

from __future__ import annotations

import json
import urllib.parse
import urllib.request

from llmfleet.errors import LlmfleetError


class PrometheusError(LlmfleetError):
    """Prometheus did not answer, or refused the query; the message names the URL and the query."""


def query(url: str, promql: str, at: float | None = None, timeout_s: float = 30) -> list[dict]:
    """An instant query, at Unix time `at` (None: now): [{"metric": {label: value}, "value": [t, "v"]}, ...]."""
    params = {"query": promql} | ({"time": f"{at:.3f}"} if at is not None else {})
    full = f"{url.rstrip('/')}/api/v1/query?" + urllib.parse.urlencode(params)
    try:
        with urllib.request.urlopen(full, timeout=timeout_s) as r:
            body = json.loads(r.read().decode())
    except (OSError, ValueError) as exc:
        raise PrometheusError(f"{url}: the query {promql!r} did not answer ({exc})") from None
    if body.get("status") != "success":
        raise PrometheusError(f"{url}: {promql!r}: {body.get('error', body)}")
    return body["data"]["result"]
