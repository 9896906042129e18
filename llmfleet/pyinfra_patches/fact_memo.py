"""Each fact read once per host while nothing has been run there: pyinfra 3 asks again every time.
And the facts a host was asked for last time, asked again in one round trip.

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

Prefetch: the facts read from a host before anything ran there are recorded at the end of the run
(the host's *hint*: llmfleet/hints.py, under ~/.cache/llmfleet/hints/facts/). The next run, at its
first fact read of that host, runs every hinted fact's own command in one shell, a subshell each (one round trip per
set of connector arguments, usually one), and each fact's own `process` reads its share of the
output, as pyinfra would have; only a fact whose command exits 0 is filled in this way; a failing,
missing-command or unprocessable one is left for pyinfra to read itself, with its own error
handling. The values are those of the host before anything ran there, which is what the memo holds
anyway, and they go with the memo when anything runs. A hint is only a list of what to ask: a stale
one costs a fact read in the batch that nobody uses (and is dropped from the next hint), a missing
one a read of its own. Facts run with a password, environment or stdin among their connector
arguments are never recorded (they would land in the file), nor facts whose arguments are not plain
literals.

The systemd unit facts among them (SystemdStatus and SystemdEnabled of the system manager, a unit
or a few named each: what pyinfra's systemd.service asks) are read by one `systemctl show` of every
unit, each fact given the lines its own command would print (_SystemdTogether): a lab host's ten
systemctl runs took 60 ms of its CPU, its whole batch 250 ms against 185 ms then. The file facts
(File, Directory, Link, Sha1File: what pyinfra's file operations ask) are read by one `stat` and
one `sha1sum` of every path likewise (_FilesTogether), and llmfleet's own host scripts run in one
interpreter, a forked child each (_ScriptsTogether).

LLMFLEET_FACT_MEMO=off turns both off (every fact read as pyinfra reads it); LLMFLEET_HINTS=off
turns off the prefetch only.
"""

from __future__ import annotations

import ast
import atexit
import functools
import importlib
import os
import re
import secrets
import shlex
import weakref
from typing import Any, Callable

from pyinfra import logger
from pyinfra.api import QuoteString, StringCommand
from pyinfra.api import command as pyinfra_command
from pyinfra.api import facts as pyinfra_facts
from pyinfra.api.arguments import CONNECTOR_ARGUMENT_KEYS
from pyinfra.api.host import Host
from pyinfra.facts import files as file_facts
from pyinfra.facts import systemd as systemd_facts

from llmfleet import hints, remote

ATTR = "_llmfleet_fact_memo"
KIND = "facts"  # their hints' folder (llmfleet/hints.py)
_INSTALLED: dict[str, Any] = {}
_MEMOS: weakref.WeakSet = weakref.WeakSet()  # every run's memo in this process: their hints are saved at exit

# connector arguments whose values must not land in a hint file, nor be taken from one
_SECRET_CONNECTOR = ("_sudo_password", "_su_password", "_env", "_stdin")
# a fact argument by such a name is never recorded either
_SECRET_NAME = re.compile(r"pass|secret|token|credential", re.I)


class _Memo:
    """One run's memo: host name -> {key: value}; the hosts fetching a fact or running a function;
    per host, the facts read before anything ran there (the next run's hint) and what the prefetch
    filled in."""

    def __init__(self) -> None:
        self.values: dict[str, dict[tuple, Any]] = {}
        self.fetching: set[str] = set()
        self.in_function: set[str] = set()
        self.touched: set[str] = set()
        self.first_reads: dict[str, dict[tuple, dict]] = {}
        self.prefetch_done: set[str] = set()
        self.from_batch: dict[str, set[tuple]] = {}  # per host, filled in by the prefetch and not yet asked for
        self.hits = 0
        self.misses = 0
        self.batches = 0  # prefetch round trips
        self.prefetched = 0  # facts filled in by them
        self.prefetch_hits = 0  # of those, asked for by the run
        self.joined = 0  # of those, read together with others (_SystemdTogether, _FilesTogether, _ScriptsTogether)

    def forget(self, host_name: str) -> None:
        if host_name not in self.fetching:
            self.values.pop(host_name, None)
            self.touched.add(host_name)

    def record(self, host_name: str, key: tuple) -> None:
        """A fact read before anything ran on the host: into its next hint, where it can be."""
        if host_name in self.touched or key in self.first_reads.get(host_name, ()):
            return
        entry = _entry(key)
        if entry is not None:
            self.first_reads.setdefault(host_name, {}).setdefault(key, entry)


def memo_of(state) -> _Memo:
    memo = getattr(state, ATTR, None)
    if memo is None:
        memo = _Memo()
        setattr(state, ATTR, memo)
        _MEMOS.add(memo)
    return memo


def _key(state, host, cls, args, kwargs) -> tuple:
    """The fact, its own arguments, and the connector arguments it will run with (as pyinfra
    resolves them: the current operation's, overridden by the call's)."""
    fact_kwargs, global_kwargs = pyinfra_facts._handle_fact_kwargs(state, host, cls, args, kwargs)
    connector = {k: v for k, v in global_kwargs.items() if k in CONNECTOR_ARGUMENT_KEYS}
    own = {k: v for k, v in fact_kwargs.items() if k != "self"}  # getcallargs names the fact instance
    return (cls, repr(sorted(own.items())), repr(sorted(connector.items())))


@functools.lru_cache(maxsize=4096)
def _literal(text: str) -> Any:
    """The literal a key's text is the repr of (cached: every host's every read parses the same few
    texts; callers only read what it returns), or None."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None


@functools.lru_cache(maxsize=4096)
def _entry(key: tuple) -> dict | None:
    """A key as a hint file's entry, or None where it must not or cannot be written: a fact class
    not importable by its name, arguments that are not plain literals, secrets among them (worked
    out once per key; callers only read it)."""
    cls, own, connector = key
    if "<locals>" in cls.__qualname__:
        return None
    own_items, connector_items = _literal(own), _literal(connector)
    if own_items is None or connector_items is None:
        return None
    if repr(own_items) != own or repr(connector_items) != connector:  # not a plain literal's repr
        return None
    if any(_SECRET_NAME.search(str(k)) for k, _ in own_items):
        return None
    if any(k in _SECRET_CONNECTOR and v for k, v in connector_items):
        return None
    return {"fact": f"{cls.__module__}:{cls.__qualname__}", "kwargs": own, "connector": connector}


def _key_of(entry: dict) -> tuple | None:
    """A hint file's entry as a memo key, or None for one that no longer names a fact (the hint is
    a list of what to ask, never trusted further)."""
    try:
        module, _, qualname = entry["fact"].partition(":")
        cls: Any = importlib.import_module(module)
        for part in qualname.split("."):
            cls = getattr(cls, part)
        own, connector = entry["kwargs"], entry["connector"]
    except (KeyError, TypeError, AttributeError, ValueError, ImportError):
        return None
    if not (isinstance(cls, type) and issubclass(cls, pyinfra_facts.FactBase)):
        return None
    if not isinstance(own, str) or not isinstance(connector, str):
        return None
    key = (cls, own, connector)
    return key if _entry(key) == entry else None


def load_hint(host_name: str) -> list[tuple]:
    where = hints.folder(KIND)
    entries = hints.load(hints.path_for(where, host_name)) if where else []
    return [k for k in (_key_of(e) for e in entries if isinstance(e, dict)) if k is not None]


def save_hints(memo: _Memo) -> None:
    """Each host's facts read before anything ran there, as its next hint."""
    where = hints.folder(KIND)
    if where is None:
        return
    for host_name, reads in list(memo.first_reads.items()):
        hints.save(hints.path_for(where, host_name), list(reads.values()))


def _save_all() -> None:
    for memo in list(_MEMOS):
        save_hints(memo)


def _batch_command(parts: list[tuple[int, Any]], mark: str) -> StringCommand:
    """Each fact command in a subshell of its own (`( eval '<command>' ) </dev/null`: standard input
    empty, as pyinfra gives a fact, not the rest of the batch, which goes in on standard input), then
    a line `<mark> <i> <exit status>`. The batch runs in the shell pyinfra would give each fact (the
    connector's `_shell_executable`, default sh), so a subshell of it reads the command as `sh -c`
    would: parsed on its own (a syntax error ends that command only), and its exit, cd, variables
    and traps end with it. It saves a shell's start per fact: 67 facts of a lab container host,
    measured over ssh, took 60 ms of the host's CPU as `sh -c` and 28 ms as subshells."""
    bits: list[Any] = []
    for i, command in parts:
        bits += ["(", "eval", QuoteString(command), ")", "</dev/null", ";", "echo", f"'{mark} {i} '$?;"]
    return StringCommand(*bits)


def _split(lines: list[str], mark: str) -> dict[int, tuple[int, list[str]]]:
    """{i: (exit status, stdout lines)} of a batch's output; a command's last line without a newline
    ends where its mark begins."""
    pattern = re.compile(rf"^(.*){re.escape(mark)} (\d+) (\d+)$")
    out: dict[int, tuple[int, list[str]]] = {}
    buffer: list[str] = []
    for line in lines:
        m = pattern.match(line)
        if m is None:
            buffer.append(line)
            continue
        if m[1]:
            buffer.append(m[1])
        out[int(m[2])] = (int(m[3]), buffer)
        buffer = []
    return out


# A systemd unit's name as systemctl takes it, with no pattern in it (a pattern lists units by the
# host's state, not by the arguments' order).
_UNIT = re.compile(r"[A-Za-z0-9:_.@\\-]+")


def _if_present(requires: Any, command: Any) -> StringCommand:
    """The command as pyinfra's _get_fact wraps a fact's with its required command: where that is
    missing, pyinfra's marker instead, which reads as missing."""
    return StringCommand("if", "command", "-v", requires, ">/dev/null", "2>&1;", "then", "(", command, ");",
                         "else", "echo", f"'{pyinfra_facts._MISSING_COMMAND_MARKER}';", "fi")


def _show(units: list[str], keys: list[str]) -> StringCommand:
    """pyinfra 3.10's SystemdStatus/SystemdEnabled command (facts/systemd.py) for the system manager,
    its state properties `keys`."""
    return StringCommand("systemctl", "show", "--all", "--property", "Id",
                         *[a for k in keys for a in ("--property", k)], *[QuoteString(u) for u in units])


def _systemd_units(fact: Any, own: dict, command: Any) -> list[str] | None:
    """The units of a SystemdStatus or SystemdEnabled fact of the system manager, named one by one,
    whose command is still `_show`'s; None for any other fact (or a pyinfra that reads it otherwise)."""
    if type(fact) not in (systemd_facts.SystemdStatus, systemd_facts.SystemdEnabled) or \
            own.get("user_mode") or own.get("machine") or own.get("user_name"):
        return None
    services = own.get("services")
    units = [services] if isinstance(services, str) else services if isinstance(services, (list, tuple)) else None
    if not units or not all(isinstance(u, str) and _UNIT.fullmatch(u) for u in units):
        return None
    if not isinstance(command, StringCommand) or \
            command.get_raw_value() != _show(list(units), [fact.state_key]).get_raw_value():
        return None
    return list(units)


class _SystemdTogether:
    """The systemd unit facts of a host's hint (pyinfra's systemd.service asks SystemdStatus and
    SystemdEnabled of each unit it manages: ten on a lab host, a systemctl each, 7 ms of the host's
    CPU apiece) read by one `systemctl show` of every unit and both properties. systemctl prints a
    block per unit named, in the order named, blocks apart by an empty line; each fact is given the
    blocks of its own units with its own properties (Id and its state), the lines its own command
    prints, and its own `process` reads them. Output that is not one block per unit fills nothing:
    each fact is then read on its own by pyinfra."""

    def __init__(self, members: list[tuple[tuple, Any, list[str]]]) -> None:
        self.members = members
        self.units = list(dict.fromkeys(u for _, _, units in members for u in units))
        keys = list(dict.fromkeys(fact.state_key for _, fact, _ in members))
        self.command = _if_present("systemctl", _show(self.units, keys))

    def read(self, lines: list[str]) -> dict[tuple, Any]:
        blocks: list[list[str]] = [[]]
        for line in lines:
            if line.strip():
                blocks[-1].append(line)
            elif blocks[-1]:
                blocks.append([])
        blocks = [b for b in blocks if b]
        if len(blocks) != len(self.units) or not all(b[0].startswith("Id=") for b in blocks):
            return {}
        of_unit = dict(zip(self.units, blocks, strict=True))
        out: dict[tuple, Any] = {}
        for key, fact, units in self.members:
            own: list[str] = []
            for j, unit in enumerate(units):
                own += [""] * bool(j) + [ln for ln in of_unit[unit] if ln.split("=", 1)[0] in ("Id", fact.state_key)]
            try:
                out[key] = fact.process(own)
            except Exception:  # noqa: BLE001 - pyinfra's own read reports it
                continue
        return out


def _file_path(fact: Any, own: dict, command: Any) -> tuple[str, str] | None:
    """("stat", path) of a File, Directory or Link fact, ("sha1", path) of a Sha1File fact, whose
    command is still pyinfra 3.10's (facts/files.py) for a path the shell does not expand (no
    leading ~) on one line; None for any other fact."""
    path = own.get("path")
    if not isinstance(path, str) or not path or path.startswith("~") or "\n" in path or \
            not isinstance(command, StringCommand):
        return None
    q = shlex.quote(path)
    if type(fact) in (file_facts.File, file_facts.Directory, file_facts.Link):
        kind, expected = "stat", (f"! (test -e {q} || test -L {q} ) || ( {file_facts.LINUX_STAT_COMMAND} {q} 2> "
                                  f"/dev/null || {file_facts.BSD_STAT_COMMAND} {q} || {file_facts.LS_COMMAND} {q} )")
    elif type(fact) is file_facts.Sha1File:
        kind, expected = "sha1", (f"test -e {q} && ( sha1sum {q} 2> /dev/null || shasum {q} 2> /dev/null || sha1 "
                                  f"{q} 2> /dev/null ) || true")
    else:
        return None
    return (kind, path) if command.get_raw_value() == expected else None


class _FilesTogether:
    """The file facts of a host's hint (File, Directory and Link: what pyinfra's files.put,
    files.template and files.directory ask; Sha1File: whether a file's content differs) read by one
    GNU `stat` and one `sha1sum` of every path: a lab host's dry run asked 44 of them, each a
    subshell or two and a stat or a sha1sum of its own. Each path is tested first in the shell
    (stat: it exists, or is a link, as its fact's command tests it; sha1sum: it is a file, the paths
    sha1sum prints a line for) and printed as a flag; stat and sha1sum then print a line per path
    flagged, in the order given, the line that path's own command prints, and its fact's `process`
    reads it (a path not flagged: no line, the fact's default, as alone). A section whose lines do not count up (a stat
    that failed on a path, no GNU stat: the fact's own command would have tried BSD stat and ls)
    fills nothing: each of its facts is then read by pyinfra itself."""

    def __init__(self, members: list[tuple[tuple, Any, str, str]]) -> None:
        self.members = members
        self.paths = {kind: list(dict.fromkeys(p for _, _, k, p in members if k == kind)) for kind in ("stat", "sha1")}
        self.mark = f"@@llmfleet-files-{secrets.token_hex(6)}@@"
        # sha1sum prints no line for a path that exists and is no file (a directory): its fact's
        # own command prints none either, so such a path is flagged as one without a line
        tests = {"stat": 'test -e "$p" || test -L "$p"', "sha1": 'test -f "$p"'}
        tools = {"stat": file_facts.LINUX_STAT_COMMAND, "sha1": "sha1sum"}
        parts = []
        for kind, paths in self.paths.items():
            if not paths:
                parts.append("echo")
                continue
            parts.append(f"set --; for p in {' '.join(shlex.quote(p) for p in paths)}; do if {tests[kind]}; then "
                         f'printf 1; set -- "$@" "$p"; else printf 0; fi; done; echo; '
                         f'if test $# -gt 0; then {tools[kind]} "$@" 2>/dev/null; fi')
        self.command = f"{parts[0]}; echo {self.mark}; {parts[1]}; true"

    def read(self, lines: list[str]) -> dict[tuple, Any]:
        if self.mark not in lines:
            return {}
        at = lines.index(self.mark)
        found: dict[str, dict[str, list[str]]] = {}
        for kind, section in (("stat", lines[:at]), ("sha1", lines[at + 1:])):
            paths = self.paths[kind]
            flags, shown = (section[0], section[1:]) if section else ("", [])
            if len(flags) != len(paths) or set(flags) - {"0", "1"} or flags.count("1") != len(shown):
                continue
            out = iter(shown)
            found[kind] = {p: [next(out)] if flag == "1" else [] for p, flag in zip(paths, flags, strict=True)}
        values: dict[tuple, Any] = {}
        for key, fact, kind, path in self.members:
            if kind not in found:
                continue
            own = found[kind][path]
            try:
                values[key] = fact.process(own) if own else fact.default()
            except Exception:  # noqa: BLE001 - pyinfra's own read reports it
                continue
        return values


def _script(command: Any, requires: Any) -> tuple[list[str], str] | None:
    """(args, source) of a fact whose command is a host script of llmfleet's for python3
    (remote.python3_script) and which requires no command; None for any other."""
    return remote.python3_script(command) if isinstance(command, str) and not requires else None


class _ScriptsTogether:
    """The host scripts among a host's hinted facts (llmfleet's own facts: NvidiaHost, VllmState,
    VllmEnvironment on a bench-lab vLLM host, more on a GPU host) run in one interpreter, a forked
    child each (llmfleet/remote/run_scripts.py, as the verify suite's batch runs its scripts):
    an interpreter's start saved per script past the first (about 20 ms of the host's CPU). Each
    fact's `process` reads its own script's standard output, split into lines as pyinfra splits a
    command's; a script that did not exit 0, or output that does not read back, fills nothing, and
    pyinfra reads that fact itself."""

    def __init__(self, members: list[tuple[tuple, Any, list[str], str]]) -> None:
        self.members = members
        self.mark = f"@@llmfleet-scripts-{secrets.token_hex(6)}@@"
        self.command = remote.scripts_command([(i, args, source) for i, (_, _, args, source) in enumerate(members)],
                                              self.mark)

    def read(self, lines: list[str]) -> dict[tuple, Any]:
        answers = remote.read_batch("\n".join(lines), self.mark, len(self.members))
        values: dict[tuple, Any] = {}
        for i, (key, fact, _, _) in enumerate(self.members):
            rc, out, _ = answers.get(i, (None, b"", b""))
            if rc != 0:
                continue
            try:
                text = out.decode("utf-8")
                own = text.split("\n")[:-1] if text.endswith("\n") else text.split("\n")
                values[key] = fact.process(own) if own else fact.default()
            except Exception:  # noqa: BLE001 - pyinfra's own read reports it
                continue
        return values


def _readers(items: list[tuple[tuple, Any, Any, dict, Any]]) -> list[tuple[Any, Callable[[list[str]], dict], bool]]:
    """(command, reader of its output lines -> {key: value}, whether it reads facts together) for a
    batch: one per fact; the systemd unit facts together (_SystemdTogether), the file facts together
    (_FilesTogether), and llmfleet's host scripts together (_ScriptsTogether), where there are two
    or more of them."""
    systemd = [(key, fact, units) for key, fact, command, own, _ in items
               if (units := _systemd_units(fact, own, command)) is not None]
    files = [(key, fact, *found) for key, fact, command, own, _ in items
             if (found := _file_path(fact, own, command)) is not None]
    scripts = [(key, fact, *script) for key, fact, command, _, requires in items
               if (script := _script(command, requires)) is not None]
    together: list[Any] = ([_SystemdTogether(systemd)] if len(systemd) > 1 else []) + \
        ([_FilesTogether(files)] if len(files) > 1 else []) + ([_ScriptsTogether(scripts)] if len(scripts) > 1 else [])
    joined = {m[0] for t in together for m in t.members}
    out: list[tuple[Any, Callable[[list[str]], dict], bool]] = []
    for key, fact, command, _, requires in items:
        if key in joined:
            continue
        if requires:
            command = _if_present(requires, command)

        def one(lines: list[str], key=key, fact=fact) -> dict:
            try:
                return {key: fact.process(lines) if lines else fact.default()}
            except Exception:  # noqa: BLE001 - FactProcessError or worse: pyinfra's own read reports it
                return {}

        out.append((command, one, False))
    out += [(t.command, t.read, True) for t in together]
    return out


def prefetch(state, host, memo: _Memo, keys: list[tuple]) -> None:
    """Run the hinted facts' commands on the host in one shell per set of connector arguments, and
    fill the memo with each one that exits 0 and processes."""
    groups: dict[str, list[tuple[tuple, Any, Any, dict, Any]]] = {}  # (key, fact, command, arguments, requires)
    values = memo.values.setdefault(host.name, {})
    memo.first_reads.setdefault(host.name, {})  # rewritten at the end even if nothing of it was asked for
    for key in keys:
        cls, own, connector = key
        if key in values:
            continue
        fact = cls()
        if fact.shell_executable or dict(_literal(connector)).get("_get_pty") or \
                type(fact).check_preconditions is not pyinfra_facts.FactBase.check_preconditions:
            continue  # a shell of its own, a terminal, or preconditions: pyinfra reads it as it would
        try:
            args = dict(_literal(own))
            command = pyinfra_facts._make_command(fact.command, args)
            requires = pyinfra_facts._make_command(fact.requires_command, args)
        except Exception:  # noqa: BLE001 - a fact whose arguments changed: pyinfra reads it, or says why
            continue
        groups.setdefault(connector, []).append((key, fact, command, args, requires))
    for connector, items in groups.items():
        mark = f"@@llmfleet-fact-{secrets.token_hex(6)}@@"
        connector_args = dict(_literal(connector))
        readers = _readers(items)
        memo.batches += 1
        script = _batch_command([(i, c) for i, (c, _, _) in enumerate(readers)], mark).get_raw_value()
        try:
            # the script on standard input, the command a short one: sudo logs the command it runs in
            # full, 1 KB a line ("command continued": 18 lines of a lab host's auth log a batch)
            status, output = host.run_shell_command(
                StringCommand("exec", connector_args.get("_shell_executable") or "sh", "-s"),
                **{**connector_args, "_stdin": script})
        except Exception as exc:  # noqa: BLE001 - a timeout, a lost connection: pyinfra reads each fact itself
            logger.debug(f"fact prefetch on {host.name} did not answer ({exc!r}): each fact is read on its own")
            continue
        if not status:
            continue
        results = _split(output.stdout_lines, mark)
        for i, (_, read, joined) in enumerate(readers):
            rc, lines = results.get(i, (None, []))
            if rc != 0 or lines == [pyinfra_facts._MISSING_COMMAND_MARKER]:
                continue
            filled = read(lines)
            for key, value in filled.items():
                values[key] = value
                memo.from_batch.setdefault(host.name, set()).add(key)
                memo.prefetched += 1
            memo.joined += len(filled) if joined else 0


def install() -> None:
    """Wrap pyinfra's fact reader and the host's commands (once per process); a no-op when
    LLMFLEET_FACT_MEMO=off."""
    if _INSTALLED or os.environ.get("LLMFLEET_FACT_MEMO", "on").lower() in hints.OFF:
        return
    read = pyinfra_facts._get_fact
    _INSTALLED["_get_fact"] = read

    def memo_get_fact(state, host, cls, args=None, kwargs=None, *rest, **more):
        memo = memo_of(state)
        name = host.name
        if name in memo.in_function:
            return read(state, host, cls, args, kwargs, *rest, **more)
        if name not in memo.prefetch_done and name not in memo.touched and host.connected:
            memo.prefetch_done.add(name)
            keys = load_hint(name)
            if keys:
                memo.fetching.add(name)
                try:
                    prefetch(state, host, memo, keys)
                finally:
                    memo.fetching.discard(name)
        key = _key(state, host, cls, args, kwargs)
        values = memo.values.setdefault(name, {})
        if key in values:
            memo.hits += 1
            if key in memo.from_batch.get(name, ()):
                memo.from_batch[name].discard(key)
                memo.prefetch_hits += 1
            memo.record(name, key)
            return values[key]
        memo.record(name, key)  # before the read: its own command must not count as a touch
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
    atexit.register(_save_all)


def uninstall() -> None:
    """Put pyinfra back as it was (the tests use it)."""
    if not _INSTALLED:
        return
    pyinfra_facts._get_fact = _INSTALLED.pop("_get_fact")
    for method in ("run_shell_command", "put_file", "get_file", "rsync"):
        setattr(Host, method, _INSTALLED.pop(method))
    pyinfra_command.FunctionCommand.execute = _INSTALLED.pop("FunctionCommand.execute")  # type: ignore[method-assign]
    atexit.unregister(_save_all)
