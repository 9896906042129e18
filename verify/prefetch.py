"""The verify suite's commands on a host, asked in one round trip: what the same checks asked of
the host last time (its hint, llmfleet/hints.py) runs at the host's first command, each command in
a shell of its own, and each check is answered from it once.

A verify check is one command, or a few, each a round trip: over SSH with sudo, 26 commands a lab
container host (32 with vLLM), each an SSH session, a sudo (logged) and a shell on the host, and an
ssh process on the control machine: about 35 ms of the host's CPU per command with sudo, 10 ms
without (measured on the bench lab, benchmarks/fleet_scale.py). What the checks ask depends on
the host and its data, not on what they find, so what they asked last time is what they ask now.

The rules that keep an answer the one the check would have had:
- Only commands asked exactly once in the previous run of the same checks (the same test ids,
  whatever the hosts) are hinted: a command asked twice (a poll, a before/after pair) is always
  run where it is asked. A hinted command's result answers its first asking only; any later one
  runs it again.
- Commands asked by acceptance checks (`-m acceptance`: the throughput probe, the burn-in, which
  load the host and measure) are never hinted: they run where their check runs them.
- Only a command asked exactly as hinted (the same text, after testinfra's quoting) is answered;
  anything else runs on its own, as testinfra runs it. A stale hint costs a command nobody reads.
- The batch runs through the backend's own `run` (its sudo and user); each command gets
  `/bin/sh -c` as testinfra gives it and empty standard input; its exit status, standard output and
  error come back byte for byte (base64). A command that exited 255 (what ssh itself exits with on
  a failure, which testinfra raises as an error) and a batch that fails as a whole run again on
  their own.
- The host scripts among the commands (llmfleet.remote.python_script's, for python3) run in one
  interpreter, a forked child each (llmfleet/remote/run_scripts.py): the same answer without an
  interpreter start each, and without the interpreter's teardown at each script's end (the
  differences: for a script killed by a signal, no shell prints its "Terminated" line; objects
  still alive at the end are not finalized, which Python does not promise either).
The verify suite checks state and never changes it, so a command run a few seconds before its check
reads what the check would have read; the hints trade that moment for the round trips.

Hosts ahead: with several hosts in one run, testinfra checks them one after the other, and each
host's batch used to start at its first check, the control side waiting on it. `plan` (called
once the checks are collected, with the hosts in the order their checks run) starts the batches
of the first AHEAD hosts at once, in threads, and each host's first check starts the batch of the
host AHEAD places after it: a batch runs while the checks of the hosts before it run, never more
than AHEAD hosts before its own checks. A host's first check waits for its own batch.

LLMFLEET_HINTS=off: every command runs where it is asked.
"""

from __future__ import annotations

import hashlib
import secrets
import shlex
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from llmfleet import hints, remote
from llmfleet.remote import read_batch

KIND = "verify"
# A batch's size as sent, in bytes: the batch script quoted twice (shlex.quote: the control machine's
# `sh -c` running ssh takes the command, which holds the script quoted once for the host's login
# shell; under sudo the script goes in on standard input, printf's argument in that login shell:
# sudo_batch_command). Linux caps one argument at 128 KiB (MAX_ARG_STRLEN,
# include/uapi/linux/binfmts.h); the rest of the 131072 is left to ssh's own words and sudo's.
# The host scripts among the commands go in compressed (scripts_command): a lab host's 23 verify
# commands, 92 KB as they are asked, are a 26 KB batch as sent.
MAX_BATCH_BYTES = 120_000
BACKENDS = ("ssh", "local")  # testinfra backends whose `run` is wrapped (the rest run as they are)
# Hosts whose batch may run before their own checks, while the checks of the hosts before them run
# (`pytest verify/ --prefetch-ahead N`): a batch is mostly the host's work and a round trip.
AHEAD = 4


def shell_of(backend: Any) -> str:
    """The shell testinfra's own `run` gives a command: sudo's `/bin/sh -c`, the local backend's
    `/bin/sh` (subprocess's shell=True), else, over ssh, the login shell of the user ($SHELL)."""
    if backend.sudo or backend.NAME == "local":
        return "/bin/sh"
    return '"${SHELL:-/bin/sh}"'


def batch_script(commands: list[str], mark: str, shell: str = "/bin/sh") -> str:
    """One shell script that runs each command in its own `<shell> -c` with empty standard input
    and prints, per command, `<mark> <i> <exit status>`, then its stdout and stderr in base64.
    The host scripts among them (llmfleet.remote.python_script's commands for `python3`, two or
    more) run in one interpreter instead, a process each (llmfleet/remote/run_scripts.py), which
    prints the same."""
    scripts = [(i, *found) for i, command in enumerate(commands) if (found := remote.python3_script(command))]
    if len(scripts) < 2:
        scripts = []
    together = {i for i, _, _ in scripts}
    lines = ['d=$(mktemp -d) || exit 97', "trap 'rm -rf \"$d\"' EXIT"]
    for i, command in enumerate(commands):
        if i not in together:
            lines.append(f'{shell} -c {shlex.quote(command)} >"$d/o" 2>"$d/e" </dev/null; r=$?; '
                         f"printf '\\n{mark} {i} %d\\n' \"$r\"; base64 -w0 \"$d/o\"; echo; base64 -w0 \"$d/e\"; echo")
    if scripts:
        lines.append(remote.scripts_command(scripts, mark))
    return "\n".join(lines) + "\n"


def sent_size(script: str) -> int:
    """A batch script's size as sent, in bytes: quoted twice (MAX_BATCH_BYTES)."""
    return len(shlex.quote(shlex.quote(script)).encode())


def new_mark() -> str:
    return f"@@llmfleet-verify-{secrets.token_hex(6)}@@"


def batches(commands: list[str], shell: str = "/bin/sh", limit: int | None = None) -> list[tuple[list[str], str, str]]:
    """The commands as batches of at most `limit` bytes as sent (MAX_BATCH_BYTES), each
    (commands, mark, script): all in one where they fit (the host scripts among them compressed
    together), else each half the same way, in order. A command too long for a batch alone is left
    out: it runs where it is asked."""
    limit = limit or MAX_BATCH_BYTES
    if not commands:
        return []
    mark = new_mark()
    script = batch_script(commands, mark, shell)
    if sent_size(script) <= limit:
        return [(commands, mark, script)]
    if len(commands) == 1:
        return []
    half = len(commands) // 2
    return batches(commands[:half], shell, limit) + batches(commands[half:], shell, limit)


def sudo_batch_command(backend: Any, script: str) -> str:
    """The command that runs a batch under the backend's sudo with the script on standard input:
    `printf '%s' SCRIPT | sudo [-u USER] /bin/sh -c 'exec /bin/sh -s'` (testinfra's own sudo form).
    sudo logs each command it runs in full, a line of about 1 KB at a time ("command continued"):
    a lab host's batch of 100 KB on its command line wrote 130 such lines to the host's auth log
    each run and cost 40 ms of its CPU; on standard input it leaves one short line."""
    return f"printf '%s' {shlex.quote(script)} | {backend.get_sudo_command('exec /bin/sh -s', backend.sudo_user)}"


def run_batch(state: "HostCommands", script: str) -> Any:
    """Run a batch as the backend runs a command, under its sudo with the script on standard input
    (`sudo_batch_command`), else as its own `run` would."""
    backend = state.backend
    if not backend.sudo:
        return state.run(script)
    command = sudo_batch_command(backend, script)
    return backend.run_ssh(command) if backend.NAME == "ssh" else backend.run_local(command)


class HostCommands:
    """One host's commands in this run: what the batch answered (each once), what was asked."""

    def __init__(self, backend: Any, run: Any, name: str) -> None:
        self.backend, self.run, self.name = backend, run, name
        self.answers: dict[str, tuple[int, bytes, bytes]] = {}
        self.asked: Counter[str] = Counter()  # in the order first asked
        self.not_hinted: set[str] = set()
        self.batches = 0
        self.answered = 0
        self.future: Future | None = None  # its batch, started ahead of its checks


class Prefetch:
    """This pytest run's prefetch: each wrapped host's commands, the checks' selection, whether the
    current check is an acceptance check."""

    def __init__(self) -> None:
        self.selection = ""
        self.acceptance = False
        self.hosts: dict[int, HostCommands] = {}
        self.where = hints.folder(KIND)
        self.order: list[HostCommands] = []  # the hosts in the order their checks run
        self.ahead = AHEAD
        self.pool: ThreadPoolExecutor | None = None

    def plan(self, backends: list[Any], ahead: int = AHEAD) -> None:
        """The run's hosts, in the order their checks run: the batches of the first `ahead` start now,
        each in a thread of its own (0: each host's batch starts at its first check)."""
        for backend in backends:
            self.wrap(backend)
        self.order = [self.hosts[id(b)] for b in backends if id(b) in self.hosts]
        self.ahead = max(0, ahead)
        if self.order and self.ahead:
            self.pool = ThreadPoolExecutor(max_workers=self.ahead, thread_name_prefix="llmfleet-prefetch")
            self.start(self.ahead)

    def start(self, upto: int) -> None:
        """Start the batches of the first `upto` hosts of the order that have none yet."""
        if self.pool is None:
            return
        for state in self.order[:upto]:
            if state.future is None and not state.asked:
                state.future = self.pool.submit(self.fetch, state)

    def select(self, test_ids: list[str]) -> None:
        """The checks this run asks for (their ids without the host part): a hint per selection."""
        names = sorted({t.split("[", 1)[0] for t in test_ids})
        self.selection = hashlib.sha1("\n".join(names).encode()).hexdigest()

    def wrap(self, backend: Any) -> None:
        """Answer the backend's commands from its host's batch where the rules allow (once per
        backend object: testinfra keeps one per host for the whole run)."""
        if self.where is None or backend.NAME not in BACKENDS or id(backend) in self.hosts:
            return
        own = backend.run
        state = self.hosts[id(backend)] = HostCommands(backend, own, f"{backend.NAME}:{backend.get_hostname()}")

        def run(command: str, *args: str, **kwargs: Any):
            if kwargs:
                return own(command, *args, **kwargs)
            return self.ask(state, backend.quote(command, *args), command, args)

        backend.run = run

    def ask(self, state: HostCommands, text: str, command: str, args: tuple) -> Any:
        if not state.asked:  # the host's first command
            if state.future is not None:
                state.future.result()  # its batch, started ahead (fetch never raises for a host's failure)
            else:
                self.fetch(state)
            if state in self.order:
                self.start(self.order.index(state) + 1 + self.ahead)
        state.asked[text] += 1
        if self.acceptance:
            state.not_hinted.add(text)
        answer = state.answers.pop(text, None)
        if answer is None:
            return state.run(command, *args)
        state.answered += 1
        rc, out, err = answer
        return state.backend.result(rc, state.backend.encode(state.backend.get_command(command, *args)), out, err)

    def fetch(self, state: HostCommands) -> None:
        """Run the host's hinted commands, in as few round trips as fit (usually one)."""
        assert self.where is not None
        hinted = [c for c in hints.load(hints.path_for(self.where, state.name, self.selection)) if isinstance(c, str)]
        for part, mark, script in batches(hinted, shell_of(state.backend)):
            state.batches += 1
            try:
                result = run_batch(state, script)
            except Exception:  # noqa: BLE001 - no connection, ssh failed: each command runs where it is asked
                continue
            if result.rc != 0:
                continue
            for i, (rc, out, err) in read_batch(result.stdout_bytes.decode("utf-8", "replace"), mark,
                                                len(part)).items():
                if rc != 255:
                    state.answers[part[i]] = (rc, out, err)

    def finish(self) -> None:
        """Each host's hint for the next run of these checks: what was asked exactly once, outside
        acceptance checks. A batch started for a host none of whose checks ran is waited for."""
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.pool = None
        if self.where is None:
            return
        for state in self.hosts.values():
            if not state.asked:
                continue
            keep = [c for c, n in state.asked.items() if n == 1 and c not in state.not_hinted]
            hints.save(hints.path_for(self.where, state.name, self.selection), keep)

    def summary(self) -> str | None:
        """One line for the end of the run, or None when nothing was asked."""
        states = [s for s in self.hosts.values() if s.asked]
        if not states:
            return None
        asked = sum(sum(s.asked.values()) for s in states)
        answered = sum(s.answered for s in states)
        batches = sum(s.batches for s in states)
        return (f"llmfleet verify: {asked} command(s) on {len(states)} host(s), {answered} of them answered by "
                f"{batches} batched round trip(s) (hints: {self.where})")
