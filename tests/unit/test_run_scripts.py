"""Several host scripts in one interpreter (llmfleet/remote/run_scripts.py, through verify/prefetch.py's
batch), run with this machine's shell and python3: each script's exit status, standard output and
error are byte for byte what the same command gives run on its own, for the ways a Python program
ends (normally, sys.exit with a number or a message, an exception, a signal, atexit handlers and
threads still running); each runs in a process of its own that shares one interpreter start; and
what is not a python_script command for python3 runs in the shell as before."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import llmfleet.remote as remote
from verify import prefetch as pf

MARK = "@@llmfleet-verify-test@@"

# name -> source: each a way a Python program ends or behaves, as a host script
SCRIPTS = {
    "plain": 'import json, sys\nprint(json.dumps({"argv": sys.argv}))\n',
    "exit_number": 'import sys\nprint("out"); print("err", file=sys.stderr)\nsys.exit(4)\n',
    "exit_message": 'import sys\nsys.exit("no such thing: the fix is elsewhere")\n',
    "exception": 'print("before")\nx = {}\nx["missing"]\n',
    "stdin": 'import sys\nprint(repr(sys.stdin.read()))\n',
    "atexit": 'import atexit\natexit.register(lambda: print("at exit"))\nprint("main")\n',
    "thread": 'import threading, time\n'
              'def late():\n    time.sleep(0.2)\n    print("thread done", flush=True)\n'
              'threading.Thread(target=late).start()\nprint("main done")\n',
    "signal": 'import os, signal\nprint("dying", flush=True)\nos.kill(os.getpid(), signal.SIGTERM)\n',
    "binary": 'import sys\nsys.stdout.buffer.write(bytes(range(256)))\n',
    "marks_json": 'import json\njson.leaked_by_a_script = True\nprint("set")\n',
    "sees_json": 'import json\nprint(hasattr(json, "leaked_by_a_script"))\n',
    "parent": 'import os\nprint(os.getppid())\n',
    "helpers": 'from _helpers import rd\nimport sys\nprint(rd(sys.argv[1]))\n',
    "unflushable": 'import sys\nsys.stdout = open("/dev/full", "w")\nsys.stdout.write("lost")\n',
    "not_int_code": 'import sys\nsys.exit(["a", 1])\n',
    "negative_code": 'import sys\nsys.exit(-1)\n',
}


@pytest.fixture
def folder(tmp_path, monkeypatch) -> Path:
    """A host-script folder of these scripts, with the real _helpers.py and run_scripts.py."""
    where = tmp_path / "remote"
    where.mkdir()
    for name in ("_helpers.py", "run_scripts.py"):
        shutil.copy(remote.FOLDER / name, where / name)
    for name, source in SCRIPTS.items():
        (where / f"{name}.py").write_text(source)
    monkeypatch.setattr(remote, "FOLDER", where)
    return where


def alone(command: str) -> tuple[int, bytes, bytes]:
    """The command as testinfra runs it on its own: `/bin/sh -c`, standard input empty."""
    proc = subprocess.run(["/bin/sh", "-c", command], capture_output=True, stdin=subprocess.DEVNULL, timeout=60)
    return proc.returncode, proc.stdout, proc.stderr


def runners(script: str) -> int:
    """How many interpreters the batch starts for scripts together (run_scripts.py's own command)."""
    return sum(1 for line in script.splitlines() if line.startswith("python3 - "))


def batched(commands: list[str], env: dict | None = None) -> tuple[str, dict[int, tuple[int, bytes, bytes]]]:
    script = pf.batch_script(commands, MARK)
    proc = subprocess.run(["/bin/sh", "-c", script], capture_output=True, timeout=120, env=env)
    return script, pf.read_batch(proc.stdout.decode("utf-8", "replace"), MARK, len(commands))


def test_each_script_answers_byte_for_byte_as_it_does_alone_however_it_ends(folder, tmp_path):
    (tmp_path / "f").write_text("content\n")
    commands = [remote.python_script(n) for n in SCRIPTS if n not in ("plain", "helpers", "parent")]
    commands += [remote.python_script("plain", "it's", "$HOME", 'a "b"', ""),
                 remote.python_script("helpers", str(tmp_path / "f")), "echo shell; exit 3"]
    script, answers = batched(commands)
    assert runners(script) == 1  # every script in the one interpreter
    names = [*[n for n in SCRIPTS if n not in ("plain", "helpers", "parent")], "plain", "helpers", "shell"]
    for i, command in enumerate(commands):
        if names[i] == "signal":  # the one difference: the shell's own report of a signal, not the script's
            rc, out, err = alone(command)
            assert answers[i] == (rc, out, b"") and err.strip().endswith(b"Terminated")
            continue
        assert answers[i] == alone(command), command.splitlines()[0]
    by_name = {name: answers[i] for i, name in enumerate(names)}
    assert by_name["exit_number"][0] == 4
    assert by_name["exit_message"] == (1, b"", b"no such thing: the fix is elsewhere\n")
    assert by_name["exception"][0] == 1 and by_name["exception"][2].endswith(b"KeyError: 'missing'\n")
    assert by_name["stdin"][1] == b"''\n"
    assert by_name["atexit"][1] == b"main\nat exit\n"
    assert by_name["thread"][1] == b"main done\nthread done\n"
    assert by_name["signal"] == (143, b"dying\n", b"")  # as the shell reports SIGTERM
    assert by_name["binary"][1] == bytes(range(256))
    assert by_name["sees_json"][1] == b"False\n"  # what one script changes stays in its own process
    assert by_name["helpers"][1] == b"content\n"
    assert by_name["shell"] == (3, b"shell\n", b"")
    assert by_name["unflushable"][0] == 120 and by_name["unflushable"][2].startswith(b"Exception ignored in: ")
    assert by_name["not_int_code"] == (1, b"", b"['a', 1]\n")
    assert by_name["negative_code"][0] == 255


def test_a_script_ends_without_the_interpreters_teardown_but_with_what_a_caller_sees_of_its_exit(folder):
    """The child skips Python's teardown (os._exit after the exit's own steps), which cost more of
    the host's CPU than the scripts: an object still alive at the end is not finalized (Python does
    not promise it either), while atexit handlers, threads and buffered output still are."""
    source = ('import atexit, sys\nclass Last:\n    def __del__(self):\n        print("finalized")\n'
              'last = Last()\natexit.register(print, "at exit")\nsys.stdout.write("buffered")\n')
    (folder / "teardown.py").write_text(source)
    commands = [remote.python_script("teardown"), remote.python_script("plain")]
    _, answers = batched(commands)
    assert alone(commands[0]) == (0, b"bufferedat exit\nfinalized\n", b"")  # Python's own teardown
    assert answers[0] == (0, b"bufferedat exit\n", b"")


def test_the_scripts_are_children_of_one_python_not_one_python_each(folder):
    commands = [remote.python_script("parent"), remote.python_script("parent")]
    _, answers = batched(commands)
    parents = {int(answers[i][1]) for i in range(2)}
    assert len(parents) == 1, "each script started an interpreter of its own"
    alone_parents = {int(alone(c)[1]) for c in commands}
    assert len(alone_parents) == 2  # on its own, each is a python of its own under a shell of its own


def test_what_is_not_a_python3_host_script_runs_in_the_shell_as_before(folder):
    venv = remote.python_script("plain", "x", python=sys.executable)  # a vLLM environment's python
    expanded = remote.python_script("plain").replace("python3 -", 'python3 - "$HOME"', 1)  # the shell expands it
    assert remote.parse(venv)[:2] == (sys.executable, ["x"])
    assert remote.parse(expanded) is None
    assert remote.parse("echo hi") is None
    one = [remote.python_script("plain"), "true"]  # one script alone: no interpreter to share
    for commands in ([venv, expanded, remote.python_script("plain")], one):
        script, answers = batched(commands)
        assert runners(script) == 0
        assert all(answers[i] == alone(c) for i, c in enumerate(commands))


def test_parse_reads_back_what_python_script_made(folder):
    command = remote.python_script("plain", "a b", "it's", "", "--x=$y")
    python, args, source = remote.parse(command)
    assert (python, args) == ("python3", ["a b", "it's", "", "--x=$y"])
    assert source.endswith(SCRIPTS["plain"]) and source.startswith("import sys, types; sys.modules['_helpers']")
    assert remote.parse(command + "\necho more") is None
    assert remote.parse(command.replace("<<'LLMFLEET_EOF'", "<<LLMFLEET_EOF", 1)) is None


def test_a_runner_that_cannot_start_leaves_its_scripts_unanswered_so_they_run_where_asked(folder, tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text("#!/bin/sh\nexit 1\n")
    (bin_dir / "python3").chmod(0o755)
    commands = [remote.python_script("plain"), remote.python_script("stdin"), "echo shell"]
    for tool in ("sh", "base64", "mktemp", "rm", "printf", "echo"):
        found = shutil.which(tool)
        if found:
            (bin_dir / tool).symlink_to(found)
    _, answers = batched(commands, env={"PATH": str(bin_dir)})
    assert sorted(answers) == [2]  # the shell's command only: the scripts are asked again on their own
    assert answers[2] == (0, b"shell\n", b"")


def test_the_modules_the_scripts_import_are_named_for_the_runner():
    assert remote.imported("import json, os.path\nfrom urllib import request\nfrom . import x\n"
                           "from _helpers import rd\nfrom __future__ import annotations\ndef f():\n    import csv\n") \
        == {"json", "os.path", "urllib"}
    assert remote.imported("this is not python") == set()


def test_the_helpers_go_in_once_and_a_script_without_this_prelude_has_what_it_makes(folder):
    """scripts_command sends the helpers once and each script without python_script's prelude; a
    script that made no helpers, or other ones (a hint of an older llmfleet), answers as it does alone."""
    import base64
    import json
    import zlib

    commands = [remote.python_script("helpers", "/etc/hostname"), remote.python_script("exception")]
    no_helpers = "python3 - <<'LLMFLEET_EOF'\nimport sys\nprint('_helpers' in sys.modules)\nLLMFLEET_EOF"
    helpers = (remote.FOLDER / "_helpers.py").read_text()
    older = helpers.replace("def rd(path):", "def rd(path):\n    return 'older'\n\n\ndef rd_now(path):", 1)
    assert older != helpers
    commands += [no_helpers] + [
        remote.python_script(name, "/etc/hostname").replace(remote.prelude(helpers), remote.prelude(older))
                 for name in ("plain", "helpers")]
    script, answers = batched(commands)
    runner = script[script.index("python3 - "):script.rindex("LLMFLEET_EOF") + len("LLMFLEET_EOF")]
    _, (_, payload), _ = remote.parse(runner)
    batch = json.loads(zlib.decompress(base64.b64decode(payload)))
    assert set(batch) == {"modules", "scripts"} and runner.count(repr(helpers)) == 1  # the runner's own prelude
    assert [flag for *_, flag in batch["scripts"]] == [True, True, False, False, False]
    assert not any(repr(helpers) in source for _, _, source, _ in batch["scripts"])
    assert [answers[i] for i in range(5)] == [alone(c) for c in commands]
    assert answers[2][1] == b"False\n" and answers[4][1] == b"older\n"
