"""verify/prefetch.py through testinfra's own local backend and real commands: each command counts
its runs in a file and the backend's round trips are counted where testinfra makes them, so what
reaches the host is counted, not assumed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import testinfra.backend
from testinfra.host import Host

from llmfleet import hints
from llmfleet.remote import python_script
from verify import prefetch as pf

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def hint_folder(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("LLMFLEET_HINTS", str(tmp_path / "hints"))
    return tmp_path / "hints" / "verify"


def new_run(selection: list[str] | None = None) -> tuple[pf.Prefetch, Host, list[str]]:
    """A run of the verify suite as far as the prefetch sees it: its own Prefetch, a host with a
    backend of its own, and the list of the round trips that backend makes."""
    backend = testinfra.backend.get_backend("local://")
    trips: list[str] = []
    own = backend.run

    def counted(command, *args, **kwargs):
        trips.append(command)
        return own(command, *args, **kwargs)

    backend.run = counted  # type: ignore[method-assign]
    run = pf.Prefetch()
    run.select(selection or ["verify/test_x.py::test_a[local://]"])
    run.wrap(backend)
    return run, Host(backend), trips


def counting(path: Path, word: str) -> str:
    return f"echo {word} >> {path}; echo {word}"


def runs(path: Path) -> int:
    return len(path.read_text().splitlines())


def test_the_next_run_answers_every_command_asked_once_from_one_round_trip(tmp_path):
    log = tmp_path / "log"
    first, host, trips = new_run()
    assert [host.run(counting(log, w)).stdout for w in "abc"] == ["a\n", "b\n", "c\n"]
    first.finish()
    assert len(trips) == 3

    second, host2, trips2 = new_run()
    assert [host2.run(counting(log, w)).stdout for w in "abc"] == ["a\n", "b\n", "c\n"]
    assert len(trips2) == 1, trips2  # the batch; every answer from it
    assert runs(log) == 6  # each command ran again, once: answers are read afresh, never kept
    assert second.summary() == (f"llmfleet verify: 3 command(s) on 1 host(s), 3 of them answered by 1 batched "
                                f"round trip(s) (hints: {hints.folder('verify')})")


def test_exit_status_stdout_and_stderr_come_back_byte_for_byte():
    commands = ["printf 'no newline'", "printf '\\001\\377\\n\\n'; echo err >&2; exit 3", "true", "printf '%s' \"$0\"",
                "cat"]  # stdin: empty, as testinfra gives it
    first, host, _ = new_run()
    live = [host.run(c) for c in commands]
    first.finish()
    _, host2, trips = new_run()
    batched = [host2.run(c) for c in commands]
    assert len(trips) == 1
    assert [(r.rc, r.stdout_bytes, r.stderr_bytes) for r in batched] == \
        [(r.rc, r.stdout_bytes, r.stderr_bytes) for r in live]
    assert batched[1].rc == 3 and batched[1].stdout_bytes == b"\x01\xff\n\n" and batched[1].stderr_bytes == b"err\n"
    assert batched[0].command == live[0].command


def test_a_command_asked_twice_is_never_hinted_and_a_hinted_one_answers_its_first_asking_only(tmp_path):
    log = tmp_path / "log"
    first, host, _ = new_run()
    host.run(counting(log, "poll"))
    host.run(counting(log, "poll"))  # a poll: both must reach the host, now and next time
    host.run(counting(log, "once"))
    first.finish()
    _, host2, trips = new_run()
    host2.run(counting(log, "poll"))
    host2.run(counting(log, "once"))
    host2.run(counting(log, "once"))  # asked again: runs again
    assert trips[0].startswith("d=$(mktemp -d)") and "poll" not in trips[0]
    assert trips[1:] == [counting(log, "poll"), counting(log, "once")]
    assert log.read_text().split() == ["poll", "poll", "once", "once", "poll", "once"]


def test_commands_of_acceptance_checks_are_never_hinted(tmp_path):
    log = tmp_path / "log"
    first, host, _ = new_run()
    host.run(counting(log, "state"))
    first.acceptance = True
    host.run(counting(log, "load"))  # a probe, a burn-in: runs where its check runs it
    first.acceptance = False
    first.finish()
    _, host2, trips = new_run()
    host2.run(counting(log, "state"))
    host2.run(counting(log, "load"))
    assert len(trips) == 2 and "load" not in trips[0] and trips[1] == counting(log, "load")


def test_a_command_that_exits_255_runs_again_where_it_is_asked(tmp_path):
    log = tmp_path / "log"
    first, host, _ = new_run()
    host.run(f"{counting(log, 'x')}; exit 255")  # ssh's own failure status: testinfra raises it as an error
    host.run("true")
    first.finish()
    second, host2, trips = new_run()
    assert host2.run(f"{counting(log, 'x')}; exit 255").rc == 255
    assert host2.run("true").rc == 0
    assert len(trips) == 2 and runs(log) == 3  # the batch ran it, then it ran live
    assert second.summary().startswith("llmfleet verify: 2 command(s) on 1 host(s), 1 of them")


def test_another_selection_of_checks_has_a_hint_of_its_own(tmp_path):
    log = tmp_path / "log"
    first, host, _ = new_run(["verify/test_x.py::test_a[local://]", "verify/test_y.py::test_b[local://]"])
    host.run(counting(log, "a"))
    first.finish()
    _, host2, trips = new_run(["verify/test_x.py::test_a[local://]"])  # `pytest verify/test_x.py`
    host2.run(counting(log, "a"))
    assert trips == [counting(log, "a")]
    # the host part of a test id is not part of the selection: another audit's hosts share it
    _, host3, trips3 = new_run(["verify/test_y.py::test_b[ssh://other]", "verify/test_x.py::test_a[ssh://other]"])
    host3.run(counting(log, "a"))
    assert len(trips3) == 1 and trips3[0].startswith("d=$(mktemp -d)")


def test_commands_go_in_as_many_batches_as_the_argument_limit_needs(tmp_path, monkeypatch):
    def parts(commands, limit):
        return [part for part, _, _ in pf.batches(commands, limit=limit)]

    def size(commands):
        return pf.sent_size(pf.batch_script(commands, pf.new_mark()))

    words = [f"echo {w}" for w in "abcd"]
    assert parts(words, size(words)) == [words]
    assert parts(words, size(words) - 1) == [words[:2], words[2:]]
    assert parts(words, size(words[:1])) == [[w] for w in words]
    long = "echo " + "x" * 400
    assert parts([*words[:2], long], size(words[:2])) == [words[:1], words[1:2]]  # the long one runs alone
    assert pf.sent_size("é x") - pf.sent_size("e x") == 1  # bytes, as the kernel counts an argument
    log = tmp_path / "log"
    first, host, _ = new_run()
    words = [f"w{i}" for i in range(6)]
    for w in words:
        host.run(counting(log, w))
    first.finish()
    monkeypatch.setattr(pf, "MAX_BATCH_BYTES", size([counting(log, w) for w in words[:3]]))
    _, host2, trips = new_run()
    assert [host2.run(counting(log, w)).stdout for w in words] == [f"{w}\n" for w in words]
    assert len(trips) == 2


def test_host_scripts_count_as_sent_compressed_not_as_asked(tmp_path):
    """A lab host's verify commands were split by their size as asked (each host script carries the
    helpers: 92 KB), two batches where the script sent is 24 KB."""
    scripts = [python_script("read_files", f"/etc/file{i}") for i in range(20)]
    assert sum(len(c) for c in scripts) > pf.MAX_BATCH_BYTES
    ((part, mark, script),) = pf.batches(scripts)
    assert part == scripts and pf.sent_size(script) < pf.MAX_BATCH_BYTES / 4


def test_a_batch_that_fails_as_a_whole_leaves_every_command_to_run_where_it_is_asked(tmp_path, monkeypatch):
    log = tmp_path / "log"
    first, host, _ = new_run()
    host.run(counting(log, "a"))
    host.run(counting(log, "b"))
    first.finish()
    monkeypatch.setenv("TMPDIR", str(tmp_path / "no-such-folder"))  # the batch's mktemp fails
    second, host2, trips = new_run()
    assert host2.run(counting(log, "a")).stdout == "a\n"
    assert host2.run(counting(log, "b")).stdout == "b\n"
    assert len(trips) == 3 and runs(log) == 4
    assert "0 of them answered" in second.summary()


def test_a_damaged_hint_is_ignored(tmp_path, hint_folder):
    log = tmp_path / "log"
    first, host, _ = new_run()
    host.run(counting(log, "a"))
    first.finish()
    (path,) = hint_folder.iterdir()
    assert path.stat().st_mode & 0o077 == 0
    path.write_text("{not json")
    _, host2, trips = new_run()
    assert host2.run(counting(log, "a")).stdout == "a\n"
    assert trips == [counting(log, "a")]


def test_llmfleet_hints_off_leaves_testinfra_as_it_is(tmp_path, monkeypatch, hint_folder):
    monkeypatch.setenv("LLMFLEET_HINTS", "off")
    log = tmp_path / "log"
    first, host, trips = new_run()
    host.run(counting(log, "a"))
    first.finish()
    assert first.summary() is None and not hint_folder.exists() and len(trips) == 1


def test_the_verify_suite_prints_the_line_and_keeps_a_hint_per_host(tmp_path, hint_folder):
    """The plugin wiring of verify/conftest.py, run as users run it: `pytest verify/ --hosts=local://`
    twice (a check that needs no inventory host: the GPU profile of none skips), the second from
    one round trip."""
    args = [sys.executable, "-m", "pytest", "verify/test_base_packages.py", "-p", "no:cacheprovider", "-q",
            "--hosts=local://", "--inventory", "inventories/device.py", "-o", "addopts="]
    env = {"LLMFLEET_HINTS": str(tmp_path / "hints"), "PATH": "/usr/bin:/bin"}
    outs = [subprocess.run(args, cwd=ROOT, capture_output=True, text=True, env=env).stdout for _ in range(2)]
    assert "0 of them answered by 0 batched round trip(s)" in outs[0], outs[0][-2000:]
    line = next(ln for ln in outs[1].splitlines() if ln.startswith("llmfleet verify:"))
    asked = int(line.split()[2])
    assert asked > 0 and f"{asked} of them answered by 1 batched round trip(s)" in line, line
    assert len(list(hint_folder.iterdir())) == 1


def several(names: list[str]) -> tuple[pf.Prefetch, list[Host], list[list[str]], list]:
    """A run with several hosts (local backends, each named as a host of its own: its own hint)."""
    run = pf.Prefetch()
    run.select(["verify/test_x.py::test_a[local://]"])
    backends, trips = [], []
    for name in names:
        backend = testinfra.backend.get_backend("local://")
        backend.get_hostname = lambda name=name: name  # type: ignore[method-assign]
        seen: list[str] = []
        own = backend.run

        def counted(command, *args, __own=own, __seen=seen, **kwargs):
            __seen.append(command)
            return __own(command, *args, **kwargs)

        backend.run = counted  # type: ignore[method-assign]
        backends.append(backend)
        trips.append(seen)
    return run, [Host(b) for b in backends], trips, backends


def test_a_hosts_batch_runs_while_the_checks_of_the_hosts_before_it_run_never_more_than_ahead_of_its_own(
        tmp_path):
    log = tmp_path / "log"
    names = ["h1", "h2", "h3", "h4"]
    first, hosts, _, backends = several(names)
    first.plan(backends, ahead=0)  # each batch at its host's first check, as before
    for name, host in zip(names, hosts, strict=True):
        host.run(counting(log, name))
    first.finish()

    second, hosts, trips, backends = several(names)
    second.plan(backends, ahead=2)
    states = second.order
    assert [s.name for s in states] == [f"local:{n}" for n in names]
    assert [s.future is not None for s in states] == [True, True, False, False]  # the first two, at once
    states[0].future.result(), states[1].future.result()
    assert sorted(log.read_text().split()[4:]) == ["h1", "h2"]  # both batches ran before any check asked
    assert hosts[0].run(counting(log, "h1")).stdout == "h1\n"  # h1's first check: h3's batch starts
    assert [s.future is not None for s in states] == [True, True, True, False]
    for name, host in zip(names[1:], hosts[1:], strict=True):
        assert host.run(counting(log, name)).stdout == f"{name}\n"
    assert trips == [[t[0]] for t in trips] and all("@@llmfleet-verify-" in t[0] for t in trips)  # one batch each
    second.finish()
    assert runs(log) == 8  # each command ran once per run
    assert second.summary().startswith("llmfleet verify: 4 command(s) on 4 host(s), 4 of them answered by 4 ")


def test_a_batch_that_fails_in_its_thread_leaves_the_hosts_commands_to_run_where_they_are_asked(tmp_path):
    log = tmp_path / "log"
    first, hosts, _, backends = several(["h1", "h2"])
    first.plan(backends, ahead=0)
    for name, host in zip(["h1", "h2"], hosts, strict=True):
        host.run(counting(log, name))
    first.finish()

    second, hosts, trips, backends = several(["h1", "h2"])
    own = backends[1].run

    def refusing(command, *args, **kwargs):
        if "@@llmfleet-verify-" in command:
            raise RuntimeError("ssh: connect to host h2 port 22: Connection refused")
        return own(command, *args, **kwargs)

    backends[1].run = refusing  # type: ignore[method-assign]
    second.plan(backends, ahead=4)
    assert [h.run(counting(log, n)).stdout for n, h in zip(["h1", "h2"], hosts, strict=True)] == ["h1\n", "h2\n"]
    second.finish()
    assert runs(log) == 4 and second.hosts[id(backends[1])].answered == 0


def test_the_verify_suite_validates_a_hosts_settings_once_a_run_not_once_a_module(tmp_path):
    """verify/conftest.py's `settings`: module-scoped, it validated the host's data again in every
    module of checks; the settings are frozen, so each host's are validated once per run."""
    (tmp_path / "count_validate.py").write_text(
        "import llmfleet.settings as s\ncalls = []\noriginal = s.validate\n"
        "def validate(name, data):\n    calls.append(name)\n    return original(name, data)\n"
        "s.validate = validate\n"
        "def pytest_sessionfinish(session):\n    print('VALIDATED', len(calls), sorted(set(calls)))\n")
    args = [sys.executable, "-m", "pytest", "verify/test_base_packages.py", "verify/test_chrony.py",
            "verify/test_sysctls.py", "-p", "count_validate", "-p", "no:cacheprovider", "-q", "--hosts=local://",
            "--inventory", "inventories/device.py", "-o", "addopts="]
    env = {"LLMFLEET_HINTS": str(tmp_path / "hints"), "PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path)}
    out = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, env=env).stdout
    assert "VALIDATED 1 ['@local']" in out, out[-2000:]


def test_under_sudo_the_batch_goes_in_on_standard_input_and_sudo_is_given_a_short_command(tmp_path, monkeypatch):
    """sudo logs every command it runs in full, 1 KB a line ("command continued"): a batch on its
    command line filled the host's auth log. A stand-in for sudo (this machine has none; root's sudo
    runs the command as given) records what sudo would have logged, and runs it."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    said = tmp_path / "sudo-commands"
    (bin_dir / "sudo").write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> {said}\nexec "$@"\n')
    (bin_dir / "sudo").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    commands = ["printf '\\001\\377\\n'; echo err >&2; exit 3", "cat", "id -u", "echo " + "long " * 4000]

    def sudo_run() -> tuple[pf.Prefetch, Host]:
        backend = testinfra.backend.get_backend("local://", sudo=True)
        run = pf.Prefetch()
        run.select(["verify/test_x.py::test_a[local://]"])
        run.wrap(backend)
        return run, Host(backend)

    first, host = sudo_run()
    live = [host.run(c) for c in commands]
    first.finish()
    assert len(said.read_text().splitlines()) == len(commands)  # each on sudo's command line, as testinfra runs it
    said.unlink()
    second, host2 = sudo_run()
    batched = [host2.run(c) for c in commands]
    assert [(r.rc, r.stdout_bytes, r.stderr_bytes) for r in batched] == \
        [(r.rc, r.stdout_bytes, r.stderr_bytes) for r in live]
    assert said.read_text() == "/bin/sh -c exec /bin/sh -s\n"  # one sudo, a short command: the batch on its stdin
    assert "4 of them answered by 1 batched round trip(s)" in (second.summary() or "")
