"""The Python scripts llmfleet runs on hosts, and the one way to run them.

Every `<name>.py` here runs on a host, never on the control machine and never imported: the
deploy's facts and operations (pyinfra), the audit and onboarding, and the verify suite
(testinfra's `host.run`) all run it through `python_script()`, which returns one shell command.
`parse()` reads such a command back, and `scripts_command()` runs several of them in one
interpreter, a forked child each (`run_scripts.py`: the verify suite's batch, verify/prefetch.py).
The scripts need only the host's Python standard library (those run with the vLLM environment's
python may import what it has: torch, nvidia-ml-py, vllm), and each prints one JSON object.

`_helpers.py` holds what the scripts share: small helpers, and the readers of host state that
more than one script needs (the NVIDIA GPUs on the PCI bus, the loaded NVIDIA kernel module, the
API key file), so that the deploy and the verify suite read those facts the same way. A script
imports it as any module (`from _helpers import rd`); `python_script` sends it along, and from
this folder a script also runs as it is (`python3 llmfleet/remote/pci_gpus.py`).
"""

from __future__ import annotations

import ast
import base64
import functools
import hashlib
import json
import re
import shlex
import zlib
from pathlib import Path

FOLDER = Path(__file__).parent
HELPERS = "_helpers"
PYTHON = "python3"  # the host's own interpreter, whose scripts run together (not a vLLM environment's)
_END = "LLMFLEET_EOF"  # the heredoc's end marker


def script_names() -> list[str]:
    """The names of the scripts here (what `python_script` accepts)."""
    return sorted(p.stem for p in FOLDER.glob("*.py") if not p.stem.startswith("_"))


def helpers_source() -> str:
    return (FOLDER / f"{HELPERS}.py").read_text()


def prelude(helpers: str) -> str:
    """The line python_script puts before each script: the helpers' source (`helpers`) becomes the
    module _helpers before the script runs (one stream: standard input)."""
    return (f"import sys, types; sys.modules[{HELPERS!r}] = types.ModuleType({HELPERS!r}); "
            f"exec(compile({helpers!r}, {HELPERS + '.py'!r}, 'exec'), sys.modules[{HELPERS!r}].__dict__); "
            "del sys, types\n")


def source_sha256(name: str) -> str:
    """The sha256 of what `python_script(name)` sends: a host script that keeps answers keys them by it."""
    return hashlib.sha256((prelude(helpers_source()) + (FOLDER / f"{name}.py").read_text()).encode()).hexdigest()


def python_script(name: str, *args: str, python: str = "python3") -> str:
    """A shell command that runs llmfleet/remote/<name>.py (with `_helpers.py`) on a host with the
    interpreter `python` (python3, or e.g. the vLLM environment's `<venv>/bin/python3`) and the
    arguments `args`, quoted for the shell; the script's source goes in on standard input, so
    nothing is copied to the host first."""
    path = FOLDER / f"{name}.py"
    if name.startswith("_") or not path.is_file():
        raise ValueError(f"no host script {name!r} in {FOLDER} (there are: {', '.join(script_names())})")
    source = prelude(helpers_source()) + path.read_text()
    if not source.endswith("\n"):
        source += "\n"
    if any(line == _END for line in source.splitlines()):
        raise ValueError(f"host script {name!r} has a line {_END!r}, which would end its heredoc early")
    quoted = "".join(" " + shlex.quote(a) for a in args)
    return f"{shlex.quote(python)} -{quoted} <<'{_END}'\n{source}{_END}"


def parse(command: str) -> tuple[str, list[str], str] | None:
    """(python, args, source) of a command that `python_script` made, exactly as it made it; None
    for any other command (one whose first line the shell would expand, for one)."""
    first, newline, rest = command.partition("\n")
    tail = f" <<'{_END}'"
    if not newline or not first.endswith(tail) or not rest.endswith("\n" + _END):
        return None
    source = rest[: -len(_END)]
    if any(line == _END for line in source.splitlines()):
        return None
    try:
        words = shlex.split(first[: -len(tail)])
    except ValueError:
        return None
    if len(words) < 2 or words[1] != "-":
        return None
    python, args = words[0], words[2:]
    if f"{shlex.quote(python)} -{''.join(' ' + shlex.quote(a) for a in args)}{tail}" != first:
        return None  # not as python_script quotes it: the shell may read it otherwise
    return python, args, source


def python3_script(command: str) -> tuple[list[str], str] | None:
    """(args, source) of a python_script command for the host's python3 (PYTHON): one that
    scripts_command can run together with others; None for any other command."""
    parsed = parse(command)
    return (parsed[1], parsed[2]) if parsed is not None and parsed[0] == PYTHON else None


@functools.lru_cache(maxsize=256)
def imported(source: str) -> frozenset[str]:
    """The modules a script imports at its top level (`import x.y`, `from x import y`); each script's
    source is parsed once per process, however many hosts' batches carry it."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return frozenset()
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return frozenset(names - {HELPERS, "__future__"})


def scripts_command(scripts: list[tuple[int, list[str], str]], mark: str, python: str = PYTHON) -> str:
    """One command that runs several scripts of `python` (each (i, args, source), as `parse` reads
    python_script's commands) in one interpreter, a forked child each (run_scripts.py), printing
    each one's `<mark> <i> <exit status>`, stdout and stderr in base64 as verify/prefetch.py's batch
    does.
    The helpers go in once: the runner is itself a python_script, whose prelude makes the module
    _helpers before it starts, and a script that starts with the same prelude goes without it (a
    line left empty in its place, so that a traceback's line numbers stay); its forked child has
    the runner's _helpers (a lab host's 12 verify scripts: 12 compiles of the helpers, 0.9 ms
    each, and 6 KB each of the batch)."""
    modules = sorted(set().union(*(imported(source) for _, _, source in scripts)))
    first = prelude(helpers_source())
    entries = [[i, args, "\n" + source[len(first):], True] if source.startswith(first) else [i, args, source, False]
               for i, args, source in scripts]
    payload = base64.b64encode(zlib.compress(json.dumps(
        {"modules": modules, "scripts": entries}).encode(), 9)).decode()
    return python_script("run_scripts", mark, payload, python=python)


def read_batch(output: str, mark: str, count: int) -> dict[int, tuple[int, bytes, bytes]]:
    """{i: (exit status, stdout, stderr)} of what run_scripts.py prints (and verify/prefetch.py's
    shell batch, which prints the same): `<mark> <i> <exit status>` lines, each followed by its
    stdout and stderr in base64; what does not parse is left out."""
    pattern = re.compile(rf"^{re.escape(mark)} (\d+) (\d+)$")
    lines = output.split("\n")
    out: dict[int, tuple[int, bytes, bytes]] = {}
    for n, line in enumerate(lines):
        m = pattern.match(line)
        if m is None or n + 2 >= len(lines):
            continue
        i = int(m[1])
        if i >= count:
            continue
        try:
            out[i] = (int(m[2]), base64.b64decode(lines[n + 1], validate=True),
                      base64.b64decode(lines[n + 2], validate=True))
        except (ValueError, IndexError):
            continue
    return out
