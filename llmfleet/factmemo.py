"""Each fact read once per host while nothing has been run there: pyinfra 3 asks again every time.

pyinfra 3.10 keeps no fact cache (pyinfra/api/facts.py `_get_fact` runs the fact's command on each
call): a no-change run of deploy.py asked one lab host 95 facts in a dry run and 119 with `-y` (the
generators of the operations whose `will_change` decides another are run twice), of which 69
differed; `apt.packages` alone asks `dpkg -l` ten times. Each command is a round trip and, on the
host, an SSH session, sudo and a shell (about 25 ms of the host's CPU on the lab's containers).

`install()` (deploy.py calls it first) wraps pyinfra's fact reader with a memo kept on the run's
State, per host, keyed by the fact, its arguments and the connector arguments it runs with (sudo,
user, shell). A host's memo is emptied whenever anything else touches that host: any command,
upload, download or rsync run through the host (every operation's commands, and the functions of
`python.call`/`server.reboot`), and before and after each function command, whose function may
change the host by any route. So a fact read after a change is read afresh, as without the memo;
a no-change run reads each fact once. Facts read inside a function command are not memoized (a
function may poll a fact until it changes).

LLMFLEET_FACT_MEMO=off turns it off (every fact read as pyinfra reads it).
"""

from __future__ import annotations

import os
from typing import Any

from pyinfra.api import command as pyinfra_command
from pyinfra.api import facts as pyinfra_facts
from pyinfra.api.arguments import CONNECTOR_ARGUMENT_KEYS
from pyinfra.api.host import Host

ATTR = "_llmfleet_fact_memo"
_INSTALLED: dict[str, Any] = {}


class _Memo:
    """One run's memo: host name -> {key: value}; the hosts fetching a fact or running a function."""

    def __init__(self) -> None:
        self.values: dict[str, dict[tuple, Any]] = {}
        self.fetching: set[str] = set()
        self.in_function: set[str] = set()
        self.hits = 0
        self.misses = 0

    def forget(self, host_name: str) -> None:
        if host_name not in self.fetching:
            self.values.pop(host_name, None)


def memo_of(state) -> _Memo:
    memo = getattr(state, ATTR, None)
    if memo is None:
        memo = _Memo()
        setattr(state, ATTR, memo)
    return memo


def _key(state, host, cls, args, kwargs) -> tuple:
    """The fact, its own arguments, and the connector arguments it will run with (as pyinfra
    resolves them: the current operation's, overridden by the call's)."""
    fact_kwargs, global_kwargs = pyinfra_facts._handle_fact_kwargs(state, host, cls, args, kwargs)
    connector = {k: v for k, v in global_kwargs.items() if k in CONNECTOR_ARGUMENT_KEYS}
    own = {k: v for k, v in fact_kwargs.items() if k != "self"}  # getcallargs names the fact instance
    return (cls, repr(sorted(own.items())), repr(sorted(connector.items())))


def install() -> None:
    """Wrap pyinfra's fact reader and the host's commands (once per process); a no-op when
    LLMFLEET_FACT_MEMO=off."""
    if _INSTALLED or os.environ.get("LLMFLEET_FACT_MEMO", "on").lower() in ("off", "0", "no", "false"):
        return
    read = pyinfra_facts._get_fact
    _INSTALLED["_get_fact"] = read

    def memo_get_fact(state, host, cls, args=None, kwargs=None, *rest, **more):
        memo = memo_of(state)
        name = host.name
        if name in memo.in_function:
            return read(state, host, cls, args, kwargs, *rest, **more)
        key = _key(state, host, cls, args, kwargs)
        values = memo.values.setdefault(name, {})
        if key in values:
            memo.hits += 1
            return values[key]
        memo.fetching.add(name)
        try:
            value = read(state, host, cls, args, kwargs, *rest, **more)
        finally:
            memo.fetching.discard(name)
        memo.misses += 1
        memo.values.setdefault(name, {})[key] = value
        return value

    pyinfra_facts._get_fact = memo_get_fact

    for method in ("run_shell_command", "put_file", "get_file", "rsync"):
        original = getattr(Host, method)
        _INSTALLED[method] = original

        def touching(self, *args, __original=original, **kwargs):
            memo_of(self.state).forget(self.name)
            return __original(self, *args, **kwargs)

        setattr(Host, method, touching)

    function_execute = pyinfra_command.FunctionCommand.execute
    _INSTALLED["FunctionCommand.execute"] = function_execute

    def execute(self, state, host, connector_arguments):
        memo = memo_of(state)
        memo.forget(host.name)
        memo.in_function.add(host.name)
        try:
            return function_execute(self, state, host, connector_arguments)
        finally:
            memo.in_function.discard(host.name)
            memo.forget(host.name)

    pyinfra_command.FunctionCommand.execute = execute  # type: ignore[method-assign]


def uninstall() -> None:
    """Put pyinfra back as it was (the tests use it)."""
    if not _INSTALLED:
        return
    pyinfra_facts._get_fact = _INSTALLED.pop("_get_fact")
    for method in ("run_shell_command", "put_file", "get_file", "rsync"):
        setattr(Host, method, _INSTALLED.pop(method))
    pyinfra_command.FunctionCommand.execute = _INSTALLED.pop("FunctionCommand.execute")  # type: ignore[method-assign]
