"""llmfleet/pyinfra_patches/fact_memo.py on a real pyinfra State with the @local connector: each fact command counts
its own runs in a file, so what is asked of the host is counted, not assumed; the prefetch's round
trips are counted at the host's command runner."""

from __future__ import annotations

import base64
import hashlib
import json
import os
from pathlib import Path

import pytest
from pyinfra.api import Config, FunctionCommand, Inventory, State, StringCommand
from pyinfra.api.connect import connect_all
from pyinfra.api.facts import FactBase

from llmfleet import hints
from llmfleet.pyinfra_patches import fact_memo as factmemo


class Counted(FactBase):
    """The file's line count, after appending a line to it: each run of the command shows."""

    def command(self, path: str, tag: str = "a") -> str:
        return f"echo {tag} >> {path}; wc -l < {path}"

    def process(self, output):
        return int(output[0])


@pytest.fixture
def run(tmp_path, monkeypatch):
    """(state, host, counter path) with the memo installed; pyinfra put back afterwards."""
    monkeypatch.delenv("LLMFLEET_FACT_MEMO", raising=False)
    monkeypatch.setenv("LLMFLEET_HINTS", str(tmp_path / "hints"))
    factmemo.install()
    state = State(Inventory((["@local"], {})), Config())
    connect_all(state)
    host = state.inventory.get_host("@local")
    yield state, host, tmp_path / "runs"
    factmemo.uninstall()


def runs(path: Path) -> int:
    return len(path.read_text().splitlines())


def test_a_fact_asked_twice_with_nothing_run_between_runs_its_command_once(run):
    state, host, path = run
    assert host.get_fact(Counted, path=str(path)) == 1
    assert host.get_fact(Counted, path=str(path)) == 1
    assert runs(path) == 1
    assert factmemo.memo_of(state).hits == 1


def test_the_same_fact_with_other_arguments_is_asked_again(run):
    _, host, path = run
    host.get_fact(Counted, path=str(path), tag="a")
    host.get_fact(Counted, path=str(path), tag="b")
    assert runs(path) == 2


def test_a_command_run_on_the_host_makes_every_fact_be_asked_afresh(run):
    _, host, path = run
    host.get_fact(Counted, path=str(path))
    host.run_shell_command("true")  # what an operation's command does
    assert host.get_fact(Counted, path=str(path)) == 2
    assert runs(path) == 2


def test_a_function_command_empties_the_memo_and_its_own_fact_reads_are_never_memoized(run):
    state, host, path = run
    seen = []

    def poll(state, host):  # a function polling a fact: each read must reach the host
        seen.append(host.get_fact(Counted, path=str(path)))
        seen.append(host.get_fact(Counted, path=str(path)))

    host.get_fact(Counted, path=str(path))
    FunctionCommand(poll, (), {}).execute(state, host, {})
    assert seen == [2, 3]
    assert host.get_fact(Counted, path=str(path)) == 4  # afresh after the function, too


def test_connector_arguments_are_part_of_what_a_fact_is_asked_with(run):
    state, host, _ = run
    plain = factmemo._key(state, host, Counted, None, {"path": "/x"})
    as_root = factmemo._key(state, host, Counted, None, {"path": "/x", "_sudo": True})
    assert plain != as_root
    assert plain == factmemo._key(state, host, Counted, None, {"path": "/x"})


def test_llmfleet_fact_memo_off_leaves_pyinfra_asking_every_time(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMFLEET_FACT_MEMO", "off")
    factmemo.install()
    try:
        state = State(Inventory((["@local"], {})), Config())
        connect_all(state)
        host = state.inventory.get_host("@local")
        path = tmp_path / "runs"
        host.get_fact(Counted, path=str(path))
        host.get_fact(Counted, path=str(path))
        assert runs(path) == 2
    finally:
        factmemo.uninstall()


class Lines(FactBase):
    """Output exactly as given (printf): blank lines, no final newline."""

    def command(self, text: str) -> str:
        return f"printf '{text}'"

    def process(self, output):
        return list(output)


class FailsOnce(FactBase):
    """Exits 1 the first time (and leaves a flag), answers "yes" afterwards."""

    def command(self, flag: str) -> str:
        return f"if test -e {flag}; then echo yes; else touch {flag}; exit 1; fi"

    def process(self, output):
        return output[0]


class Slow(FactBase):
    def command(self) -> str:
        return "sleep 3; echo late"

    def process(self, output):
        return output[0]


class Missing(FactBase):
    def requires_command(self, **kwargs) -> str:
        return "llmfleet-no-such-command"

    def command(self) -> str:
        return "llmfleet-no-such-command"

    def process(self, output):
        return "read"

    def default(self):
        return "absent"


def new_run() -> tuple[State, object]:
    """A second run of the same process: a State of its own, as the next `pyinfra` would have."""
    state = State(Inventory((["@local"], {})), Config())
    connect_all(state)
    return state, state.inventory.get_host("@local")


def round_trips(host, monkeypatch) -> list[str]:
    """Every command the host is given from now on, as text (with what goes in on its standard input)."""
    seen: list[str] = []
    original = type(host).run_shell_command

    def counting(self, command, *args, **kwargs):
        seen.append(str(command) + (f" <<< {kwargs['_stdin']}" if kwargs.get("_stdin") else ""))
        return original(self, command, *args, **kwargs)

    monkeypatch.setattr(type(host), "run_shell_command", counting)
    return seen


def finish(state) -> None:
    factmemo.save_hints(factmemo.memo_of(state))


def test_the_next_run_asks_every_fact_read_before_anything_ran_in_one_round_trip(run, tmp_path, monkeypatch):
    state, host, path = run
    first = [host.get_fact(Counted, path=str(path), tag=t) for t in "abc"]
    finish(state)
    assert runs(path) == 3

    state2, host2 = new_run()
    seen = round_trips(host2, monkeypatch)
    again = [host2.get_fact(Counted, path=str(path), tag=t) for t in "abc"]
    assert len(seen) == 1, seen  # the three commands in one shell
    assert runs(path) == 6  # each fact's own command ran once more: the values are read, not kept
    assert again == [c + 3 for c in first]
    memo = factmemo.memo_of(state2)
    assert (memo.batches, memo.prefetched, memo.prefetch_hits, memo.misses) == (1, 3, 3, 0)


def test_a_prefetched_fact_is_read_afresh_once_a_command_ran_on_the_host(run, monkeypatch):
    state, host, path = run
    host.get_fact(Counted, path=str(path))
    finish(state)
    state2, host2 = new_run()
    assert host2.get_fact(Counted, path=str(path)) == 2  # from the batch
    host2.run_shell_command("true")
    assert host2.get_fact(Counted, path=str(path)) == 3
    assert runs(path) == 3


def test_facts_read_after_a_command_are_not_hinted_and_unused_hints_are_dropped(run, monkeypatch):
    state, host, path = run
    host.get_fact(Counted, path=str(path), tag="before")
    host.get_fact(Counted, path=str(path), tag="unused-next-time")
    host.run_shell_command("true")
    host.get_fact(Counted, path=str(path), tag="after")
    finish(state)
    hint = factmemo.load_hint("@local")
    assert sorted(k[1] for k in hint) == sorted(factmemo._key(state, host, Counted, None, {"path": str(path),
                                                                                         "tag": t})[1]
                                                for t in ("before", "unused-next-time"))
    state2, host2 = new_run()
    host2.get_fact(Counted, path=str(path), tag="before")
    finish(state2)
    assert [k[1] for k in factmemo.load_hint("@local")] == [
        factmemo._key(state2, host2, Counted, None, {"path": str(path), "tag": "before"})[1]]


def test_output_without_a_final_newline_and_blank_lines_read_as_pyinfra_reads_them(run, monkeypatch):
    state, host, _ = run
    texts = ["a\\n\\nb", "a\\nb\\n\\n", "", "\\n"]
    direct = [host.get_fact(Lines, text=t) for t in texts]
    finish(state)
    state2, host2 = new_run()
    seen = round_trips(host2, monkeypatch)
    assert [host2.get_fact(Lines, text=t) for t in texts] == direct
    assert direct[0] == ["a", "", "b"]
    assert len(seen) == 1 and factmemo.memo_of(state2).prefetched == len(texts)


def test_a_fact_failing_in_the_batch_is_left_to_pyinfra_which_reads_it_itself(run, tmp_path, monkeypatch):
    state, host, _ = run
    flag = tmp_path / "flag"
    host.get_fact(Counted, path=str(tmp_path / "n"))
    host.get_fact(FailsOnce, flag=str(flag), _ignore_errors=True)  # fails: pyinfra logs it, the default
    host.get_fact(Missing)
    finish(state)
    flag.unlink()
    state2, host2 = new_run()
    seen = round_trips(host2, monkeypatch)
    assert host2.get_fact(FailsOnce, flag=str(flag)) == "yes"  # the batch's run failed; this read is pyinfra's
    assert host2.get_fact(Missing) == "absent"
    # the batch, then each of the two alone: pyinfra's own handling of a failure and of a missing command
    assert len(seen) == 3 and "@@llmfleet-fact" in seen[0] and "@@llmfleet-fact" not in seen[1] + seen[2]
    assert factmemo.memo_of(state2).prefetched == 1  # Counted only


def test_a_batch_that_times_out_leaves_every_fact_of_it_to_pyinfra_and_the_others_are_still_filled_in(run):
    state, host, path = run
    host.get_fact(Counted, path=str(path))
    host.get_fact(Slow, _timeout=1, _ignore_errors=True)  # times out: pyinfra logs it, the default
    finish(state)
    state2, host2 = new_run()
    assert host2.get_fact(Counted, path=str(path)) == 2  # from its batch: the slow one runs in a batch of its own
    assert host2.get_fact(Slow, _timeout=1, _ignore_errors=True) is None  # pyinfra's own read, timed out again
    memo = factmemo.memo_of(state2)
    assert (memo.batches, memo.prefetched) == (2, 1)


def test_a_password_among_the_connector_arguments_never_reaches_the_hint_file(run, tmp_path):
    state, host, path = run
    host.get_fact(Counted, path=str(path), _sudo_password="hunter2-secret")
    host.get_fact(Counted, path=str(path), tag="plain")
    finish(state)
    files = list((tmp_path / "hints" / "facts").iterdir())
    assert files and all("hunter2" not in f.read_text() for f in files)
    assert all(f.stat().st_mode & 0o077 == 0 for f in files)
    assert len(factmemo.load_hint("@local")) == 1


def test_a_hint_that_names_no_fact_or_is_not_json_is_ignored(run, tmp_path, monkeypatch):
    folder = tmp_path / "hints" / "facts"
    folder.mkdir(parents=True)
    bad = [{"fact": "no.such.module:Fact", "kwargs": "[]", "connector": "[]"},
           {"fact": "os:path", "kwargs": "[]", "connector": "[]"},
           {"fact": f"{__name__}:Counted", "kwargs": "__import__('os')", "connector": "[]"}]
    hints.path_for(folder, "@local").write_text(json.dumps(bad))
    state, host, path = run
    assert factmemo.load_hint("@local") == []
    hints.path_for(folder, "@local").write_text("{not json")
    assert factmemo.load_hint("@local") == []
    assert host.get_fact(Counted, path=str(path)) == 1


def test_llmfleet_hints_off_reads_each_fact_on_its_own(run, monkeypatch):
    state, host, path = run
    host.get_fact(Counted, path=str(path))
    finish(state)
    monkeypatch.setenv("LLMFLEET_HINTS", "off")
    state2, host2 = new_run()
    seen = round_trips(host2, monkeypatch)
    host2.get_fact(Counted, path=str(path))
    assert seen == [] or len(seen) == 1 and "@@llmfleet-fact" not in seen[0]
    assert factmemo.memo_of(state2).batches == 0


class Echo(FactBase):
    """Whatever the command prints (its first line)."""

    def command(self, text: str) -> str:
        return text

    def process(self, output):
        return output[0] if output else ""


def test_each_fact_in_the_batch_runs_apart_its_exit_cd_variables_and_syntax_errors_stay_its_own(run, tmp_path,
                                                                                               monkeypatch):
    state, host, _ = run
    texts = ['cd /; X=leaked; trap "echo trapped" EXIT; echo first',
             'echo "${X:-unset} $(pwd)"',
             "if then fi",  # a syntax error: that fact alone fails
             "exit 3",
             'echo "after $0"']
    direct = [host.get_fact(Echo, text=t, _ignore_errors=True) for t in texts]
    finish(state)
    state2, host2 = new_run()
    seen = round_trips(host2, monkeypatch)
    again = [host2.get_fact(Echo, text=t, _ignore_errors=True) for t in texts]
    assert again == direct, (again, direct)
    assert again[1] == f"unset {Path.cwd()}" and again[4].startswith("after ")
    memo = factmemo.memo_of(state2)
    assert memo.batches == 1 and memo.prefetched == 3  # the two failing ones are left to pyinfra
    assert len(seen) == 3, seen  # the batch, then each failing fact read on its own


def prefetch_item(cls, **own):
    """A prefetch item of a fact as prefetch() makes it: (key, fact, command, arguments, requires)."""
    from pyinfra.api import facts as pyinfra_facts

    fact = cls()
    return (("key", cls.__name__, repr(sorted(own.items()))), fact,
            pyinfra_facts._make_command(fact.command, own), own,
            pyinfra_facts._make_command(fact.requires_command, own))


def test_systemd_unit_facts_of_the_system_manager_named_one_by_one_are_read_together_and_no_others():
    from pyinfra.facts.systemd import SystemdEnabled, SystemdStatus

    joined = [prefetch_item(SystemdStatus, services=["a.service"]), prefetch_item(SystemdEnabled, services="a.service"),
              prefetch_item(SystemdStatus, services=["b.service", "c@x.service"])]
    apart = [prefetch_item(SystemdStatus, services=["*.service"]),  # a pattern: units by the host's state
             prefetch_item(SystemdStatus, services=["a.service"], user_mode=True),  # a user manager
             prefetch_item(SystemdStatus, services=["a.service"], machine="m"),
             prefetch_item(SystemdStatus),  # every unit
             prefetch_item(SystemdStatus, services=["a b.service"])]
    readers = factmemo._readers(joined + apart)
    assert [r[2] for r in readers] == [False] * len(apart) + [True]
    assert str(readers[-1][0]).count("systemctl show") == 1
    assert "--property SubState --property UnitFileState a.service b.service c@x.service" in \
        readers[-1][0].get_raw_value()
    # a fact whose command pyinfra builds otherwise (another pyinfra) is read on its own
    changed = joined[0][:2] + (StringCommand("systemctl", "show", "a.service"),) + joined[0][3:]
    assert [r[2] for r in factmemo._readers([changed, joined[1]])] == [False, False]


def test_systemd_units_read_together_give_each_fact_its_own_blocks_and_odd_output_fills_nothing():
    from pyinfra.facts.systemd import SystemdEnabled, SystemdStatus

    items = [prefetch_item(SystemdStatus, services=["a.service"]),
             prefetch_item(SystemdEnabled, services=["a.service"]),
             prefetch_item(SystemdStatus, services=["b.service", "a.service"])]
    together = factmemo._SystemdTogether([(k, f, u) for k, f, c, own, _ in items
                                          if (u := factmemo._systemd_units(f, own, c)) is not None])
    shown = ["Id=a.service", "SubState=running", "UnitFileState=disabled", "",
             "Id=b.service", "SubState=dead", "UnitFileState=enabled"]
    values = together.read(shown)
    assert values == {items[0][0]: {"a.service": True}, items[1][0]: {"a.service": False},
                      items[2][0]: {"b.service": False, "a.service": True}}
    for odd in (shown[:3], shown + ["", "Id=c.service", "SubState=dead"], ["Failed to connect to bus"]):
        assert together.read(odd) == {}  # not one block per unit: each fact read by pyinfra itself


def test_the_batch_goes_in_on_standard_input_and_the_command_sudo_would_log_is_short(run, tmp_path, monkeypatch):
    """sudo logs the command it runs in full, 1 KB a line: a batch on its command line wrote a lab
    host's auth log 18 "command continued" lines a dry run. What each fact reads on standard input
    is empty, as pyinfra gives it, not the rest of the batch."""
    state, host, path = run
    long = "y" * 40_000  # past what the shell reads of its script at a time
    host.get_fact(Stdin)
    host.get_fact(Lines, text=long)
    host.get_fact(Counted, path=str(path), tag="a")
    finish(state)
    state2, host2 = new_run()
    seen = round_trips(host2, monkeypatch)
    assert host2.get_fact(Stdin) == "" and host2.get_fact(Lines, text=long) == [long]
    assert len(seen) == 1 and seen[0].startswith("exec sh -s <<< ") and "@@llmfleet-fact" in seen[0]
    assert factmemo.memo_of(state2).prefetched == 3


class Stdin(FactBase):
    """What the fact's command reads on its standard input."""

    def command(self) -> str:
        return "cat"

    def process(self, output):
        return "\n".join(output)

    def default(self):
        return ""


def test_file_facts_of_a_hint_read_by_one_stat_and_one_sha1sum_are_what_pyinfra_reads_of_each(run, tmp_path,
                                                                                                 monkeypatch):
    """_FilesTogether on this machine's GNU stat and sha1sum: a file (a space and a quote in its
    name), a directory, a link, a path that does not exist, each asked as pyinfra's file operations
    ask them; the second run reads all of them in one round trip, with one stat and one sha1sum."""
    from pyinfra.facts.files import Directory, File, Link, Sha1File

    state, host, _ = run
    files = tmp_path / "files"
    files.mkdir()
    plain, quoted, folder = files / "a b.conf", files / "it's", files / "dir"
    plain.write_text("content\n")
    quoted.write_text("other\n")
    plain.chmod(0o640)
    for f in (plain, quoted):  # sha1sum reads them: an access time past the change keeps relatime from moving it
        os.utime(f, (f.stat().st_mtime + 60, f.stat().st_mtime))
    folder.mkdir()
    (files / "link").symlink_to(plain)
    missing = files / "missing"
    asked = [(File, plain), (File, folder), (Directory, folder), (Directory, plain), (Link, files / "link"),
             (File, missing), (Directory, missing), (Sha1File, plain), (Sha1File, quoted), (Sha1File, missing),
             (Sha1File, folder)]
    alone = [host.get_fact(cls, path=str(p)) for cls, p in asked]
    finish(state)
    state2, host2 = new_run()
    seen = round_trips(host2, monkeypatch)
    together = [host2.get_fact(cls, path=str(p)) for cls, p in asked]
    assert together == alone
    assert alone[0]["mode"] == 640 and alone[1] is False and alone[2]["mode"] and alone[3] is False
    assert alone[4]["link_target"] == str(plain) and alone[5] is None and alone[6] is None
    assert alone[7] == hashlib.sha1(b"content\n").hexdigest() and alone[8] == hashlib.sha1(b"other\n").hexdigest()
    assert alone[9] is None and alone[10] is None
    memo = factmemo.memo_of(state2)
    assert len(seen) == 1 and (memo.batches, memo.prefetched, memo.joined) == (1, len(asked), len(asked)), seen
    assert seen[0].count("sha1sum") == 1 and seen[0].count("stat -c") == 1


def test_file_facts_whose_lines_do_not_count_up_are_left_to_pyinfra():
    from pyinfra.facts.files import File, Sha1File

    items = [prefetch_item(File, path="/a"), prefetch_item(File, path="/b"), prefetch_item(Sha1File, path="/a"),
             prefetch_item(Sha1File, path="/c")]
    together = factmemo._FilesTogether([(k, f, *found) for k, f, c, own, _ in items
                                        if (found := factmemo._file_path(f, own, c)) is not None])
    assert len(together.members) == 4
    line = "user=root group=root mode=-rw-r--r-- atime=1 mtime=2 ctime=3 size=4 '/a'"
    sha = "a" * 40 + "  /a"
    good = ["10", line, together.mark, "10", sha]
    values = list(together.read(good).values())
    assert values[0]["user"] == "root" and values[0]["size"] == 4 and values[1:] == [None, "a" * 40, None]
    # stat printed no line for /a (it failed there): the stat facts are left, the sha1 ones still read
    assert list(together.read(["10", together.mark, "10", sha])) == [items[2][0], items[3][0]]
    assert together.read(["11", line]) == {}  # no mark: nothing
    assert factmemo._file_path(File(), {"path": "~/x"}, File().command("~/x")) is None  # the shell expands it
    changed = StringCommand("stat", "/a")
    assert factmemo._file_path(File(), {"path": "/a"}, changed) is None  # pyinfra's command changed


class ReadFiles(FactBase):
    """A host script of llmfleet's (llmfleet.remote.python_script), as llmfleet's own facts are."""

    def command(self, path: str) -> str:
        from llmfleet.remote import python_script

        return python_script("read_files", path)

    def process(self, output):
        return json.loads("\n".join(output))


class ProcValues(ReadFiles):
    def command(self, path: str) -> str:
        from llmfleet.remote import python_script

        return python_script("proc_values", path)


def test_host_script_facts_of_a_hint_run_in_one_interpreter_and_read_as_pyinfra_reads_each(run, tmp_path,
                                                                                             monkeypatch):
    state, host, path = run
    (tmp_path / "a").write_text("first\n")
    (tmp_path / "b").write_text("it's\nsecond")
    asked = [(ReadFiles, {"path": str(tmp_path / "a")}), (ReadFiles, {"path": str(tmp_path / "b")}),
             (ReadFiles, {"path": str(tmp_path / "missing")}), (ProcValues, {"path": "/proc/sys/kernel/ostype"})]
    alone = [host.get_fact(cls, **own) for cls, own in asked] + [host.get_fact(Counted, path=str(path))]
    finish(state)
    state2, host2 = new_run()
    seen = round_trips(host2, monkeypatch)
    together = [host2.get_fact(cls, **own) for cls, own in asked] + [host2.get_fact(Counted, path=str(path))]
    assert together[:4] == alone[:4] and together[4] == alone[4] + 1
    assert alone[1] == {str(tmp_path / "b"): "it's\nsecond"} and alone[3]["/proc/sys/kernel/ostype"][0] == "Linux"
    memo = factmemo.memo_of(state2)
    assert len(seen) == 1 and (memo.batches, memo.prefetched, memo.joined) == (1, 5, 4), seen
    assert seen[0].count("\nLLMFLEET_EOF") == 1  # one interpreter: the runner's, the scripts its payload


def test_host_scripts_that_fail_or_print_what_does_not_read_are_left_to_pyinfra():
    from llmfleet import remote

    items = [prefetch_item(ReadFiles, path="/a"), prefetch_item(ReadFiles, path="/b"),
             prefetch_item(ReadFiles, path="/c"), prefetch_item(ReadFiles, path="/d")]
    readers = factmemo._readers(items + [prefetch_item(Counted, path="/e")])
    assert [r[2] for r in readers] == [False, True]  # the shell fact alone, the four scripts together
    together = factmemo._readers(items)[0][1].__self__
    assert [m[0] for m in together.members] == [i[0] for i in items]

    def line(i, rc, out):
        return [f"{together.mark} {i} {rc}", base64.b64encode(out).decode(), ""]

    lines = line(0, 0, b'{"/a": "x"}\n') + line(1, 1, b'{"/b": "y"}\n') + line(2, 0, b"not json\n") + ["noise"]
    assert together.read(lines) == {items[0][0]: {"/a": "x"}}  # failed, unreadable, missing: to pyinfra
    # a fact that requires a command, or another interpreter's script, runs apart
    assert factmemo._script(items[0][2], "python3") is None
    assert factmemo._script(remote.python_script("read_files", "/a", python="/opt/env/bin/python3"), None) is None
