"""A client's view of the lab's vLLM hosts during a change: every 0.5 s, a 1-token completion to
each host; the timeline of who answered (Poller). And an open-loop client of one endpoint, the
fleet gateway (OpenLoop). Used by the rolling-restart tests and benchmark."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request


def complete(address: str, key: str | None, model: str, port: int = 8000, max_tokens: int = 1,
             timeout: float = 5) -> int | str:
    """Tokens a completion returned, or the error (HTTP status or exception name)."""
    body = json.dumps({"model": model, "prompt": "The fleet", "max_tokens": max_tokens, "ignore_eos": True}).encode()
    req = urllib.request.Request(f"http://{address}:{port}/v1/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    if key:
        req.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.load(r)["usage"]["completion_tokens"]
    except urllib.error.HTTPError as exc:
        return f"HTTP {exc.code}"
    except OSError as exc:
        return type(exc).__name__


class Poller:
    def __init__(self, hosts: dict[str, str], key: str | None, model: str, interval_s: float = 0.5):
        self.hosts, self.key, self.model, self.interval_s = hosts, key, model, interval_s
        self.timeline: list[tuple[float, list[str]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        t0 = time.monotonic()
        while not self._stop.is_set():
            results: dict[str, int | str] = {}

            def ask(name: str, address: str, out: dict = results) -> None:
                out[name] = complete(address, self.key, self.model)

            threads = [threading.Thread(target=ask, args=(n, a)) for n, a in self.hosts.items()]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            self.timeline.append((round(time.monotonic() - t0, 2), sorted(n for n, r in results.items() if r == 1)))
            self._stop.wait(self.interval_s)

    def __enter__(self) -> Poller:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def fewest(self) -> int:
        return min(len(up) for _, up in self.timeline)

    def longest_below(self, n: int) -> float:
        """The longest stretch (seconds) during which fewer than n hosts answered."""
        longest, since = 0.0, None
        for t, up in self.timeline:
            if len(up) < n and since is None:
                since = t
            elif len(up) >= n and since is not None:
                longest, since = max(longest, t - since), None
        if since is not None:
            longest = max(longest, self.timeline[-1][0] - since)
        return round(longest, 2)


class OpenLoop:
    """An open-loop client: a completion of max_tokens to one endpoint every 1/rate s, each on its own
    thread, whatever the answers before it (a client that waited for answers would send less while
    the server is slow, and hide failures); every request's send time and result."""

    def __init__(self, address: str, key: str | None, model: str, rate: float = 2.0, port: int = 8000,
                 timeout: float = 60, max_tokens: int = 1):
        self.address, self.key, self.model = address, key, model
        self.rate, self.port, self.timeout, self.max_tokens = rate, port, timeout, max_tokens
        self.results: list[tuple[float, int | str]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._ticker = threading.Thread(target=self._run, daemon=True)

    def _one(self, sent: float) -> None:
        result = complete(self.address, self.key, self.model, port=self.port, max_tokens=self.max_tokens,
                          timeout=self.timeout)
        with self._lock:
            self.results.append((sent, result))

    def _run(self) -> None:
        t0 = time.monotonic()
        n = 0
        while not self._stop.is_set():
            t = threading.Thread(target=self._one, args=(round(time.monotonic() - t0, 2),), daemon=True)
            t.start()
            self._threads.append(t)
            n += 1
            self._stop.wait(max(0.0, t0 + n / self.rate - time.monotonic()))

    def start(self) -> None:
        self._ticker.start()

    def started(self) -> bool:
        return self._ticker.is_alive() or self._stop.is_set()

    def stop(self) -> None:
        """No more sends; every request sent has its answer (a client that never started: nothing)."""
        self._stop.set()
        if self._ticker.ident is not None:
            self._ticker.join()
        for t in self._threads:
            t.join()

    def __enter__(self) -> OpenLoop:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def failed(self) -> list[tuple[float, int | str]]:
        """The requests that did not get their max_tokens tokens: (send time, what came back)."""
        return sorted((t, r) for t, r in self.results if r != self.max_tokens)
