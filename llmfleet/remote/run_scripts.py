"""Run on a host by the verify suite's batch (verify/prefetch.py): several host scripts, each as
`python3 - ARGS <<'LLMFLEET_EOF'` would run it, in one interpreter instead of one each.

argv: the batch's mark, and the scripts (base64 of zlib of JSON: {"modules": [...], "scripts":
[[i, [args], source, whether python_script's prelude was taken off], ...]}). This runner is itself
a python_script, so its own prelude made the module _helpers before it started: a script sent
without its prelude has them as its prelude would have made them, and one sent with its own, or
none, has what it makes. The standard-library modules named in "modules" (what the scripts
import) are imported once here; then each script runs in a child of
this process (fork), so each has a process of its own as it would have had: standard input empty,
its standard output and error in files, sys.argv ["-", *args], its own `__main__`, and an exit as
Python's own (SystemExit's code or message, a traceback and 1 for an exception, atexit handlers
and threads waited for). What a script changes in the process, it changes in its child only.
For each, in order, it prints what the shell's batch prints for a command:
`\\n<mark> <i> <exit status>\\n<stdout in base64>\\n<stderr in base64>\\n`. A script killed by a
signal exits 128 + the signal's number, as a shell reports it; what is missing then is the
shell's own line about it ("Terminated" from `sh -c`), as no shell ran it.

A child ends as the interpreter ends a program, less its teardown: SystemExit's code or message as
Python handles it, then what Python's exit does that a caller sees (the threads still running
joined, the atexit handlers run, standard output and error flushed: 120 if standard output cannot
be), then os._exit, as multiprocessing's forked children end (multiprocessing/popen_fork.py).
The teardown (every module's objects released, page by page copied from the parent as their
reference counts change) cost 13 ms of the host's CPU a script, more than the script itself (a
lab host's 12 verify scripts: 170 ms). Objects still alive at the end are not finalized, which
Python does not promise either (a `__del__` then, an unclosed file's unflushed buffer): the
scripts close what they open (`with`).

It is the interpreter startup that this saves: a lab host's verify batch ran 12 scripts, about 30 ms
of the host's CPU each to start (benchmarks/fleet_scale.py measures the whole)."""
import atexit
import base64
import json
import os
import shutil
import sys
import tempfile
import types
import zlib

HELPERS = "_helpers"  # made by this runner's own prelude (llmfleet.remote.python_script)


def child(args, source, out, err, with_helpers):
    """The script in this (forked) process; never returns: it ends as `python3 -` would end."""
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    os.dup2(os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), 1)
    os.dup2(os.open(err, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), 2)
    if not with_helpers:
        sys.modules.pop(HELPERS, None)  # a script that did not make them has none, or makes its own
    main = types.ModuleType("__main__")
    sys.modules["__main__"] = main
    sys.argv = ["-", *args]
    try:
        exec(compile(source, "<stdin>", "exec"), main.__dict__)
        code = 0
    except SystemExit as exc:
        code = exc.code
    except BaseException as exc:  # as Python's own: the traceback (from the script's frames), exit 1
        tb = exc.__traceback__.tb_next if exc.__traceback__ else None  # from the script's own frame
        sys.excepthook(type(exc), exc.with_traceback(tb), tb)
        code = 1
    end(code)


def end(code):
    """Exit as Python exits with SystemExit(code) (pythonrun.c: a code neither None nor a number is
    printed to standard error, exit 1; then Py_FinalizeEx: threads joined, atexit, the standard
    streams flushed), without the interpreter's teardown."""
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:
        try:
            print(code, file=sys.stderr)
        except Exception:  # noqa: BLE001 - Python ignores it too
            pass
        status = 1
    threading = sys.modules.get("threading")
    if threading is not None:
        threading._shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):  # pylifecycle.c flush_std_files: 120 where one fails
        if stream is None or getattr(stream, "closed", False):
            continue
        try:
            stream.flush()
        except Exception as exc:  # noqa: BLE001 - said as Python says it (sys.unraisablehook's default)
            status = 120
            if stream is sys.stdout:
                import traceback
                print(f"Exception ignored in: {stream!r}", *traceback.format_exception_only(exc), sep="\n",
                      end="", file=sys.stderr)
                sys.stderr.flush()
    os._exit(status & 0xFF)


def exit_status(status):
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


def b64(path):
    with open(path, "rb") as f:
        return base64.b64encode(f.read()).decode()


mark, payload = sys.argv[1:3]
batch = json.loads(zlib.decompress(base64.b64decode(payload)))
stdlib = getattr(sys, "stdlib_module_names", ())  # Python 3.10+; older: each script imports its own
for name in batch["modules"]:
    if name.split(".")[0] in stdlib:
        try:
            __import__(name)
        except Exception:  # noqa: BLE001 - the script's own import will say so
            pass
parent = os.getpid()
folder = tempfile.mkdtemp(prefix="llmfleet-scripts-")  # 0700
try:
    for i, args, source, with_helpers in batch["scripts"]:
        out, err = f"{folder}/{i}.out", f"{folder}/{i}.err"
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            child(args, source, out, err, with_helpers)
        _, status = os.waitpid(pid, 0)
        sys.stdout.write(f"\n{mark} {i} {exit_status(status)}\n{b64(out)}\n{b64(err)}\n")
finally:
    if os.getpid() == parent:  # a child's exit passes through here too
        shutil.rmtree(folder, ignore_errors=True)
