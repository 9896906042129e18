"""The commands the documentation shows work as shown: each `make verify-device` line (its DATA
exactly as written) resolves inventories/device.py into settings that validate, and every
`llmfleet ...` line of the README names commands and options that exist."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import click
import pytest

from llmfleet.cli import main
from llmfleet.settings import validate

ROOT = Path(__file__).resolve().parents[2]
VERIFY_DEVICE = re.compile(r"""make verify-device(?: \[?DATA=(["'])(?P<data>.*?)\1\]?)?""")
DOCUMENTS = ("inventories/device.py", "Makefile", "README.md")


def verify_device_lines() -> list[tuple[str, str]]:
    """(document, DATA) for every `make verify-device` the documents show, DATA as written."""
    found = [(doc, m["data"] or "") for doc in DOCUMENTS
             for m in VERIFY_DEVICE.finditer((ROOT / doc).read_text())]
    return sorted(set(found))


def test_the_documents_show_verify_device_with_and_without_a_v100_profile():
    data = {d for _, d in verify_device_lines()}
    assert "" in data and any("gpu_profile=v100_sxm2_32gb_x8" in d for d in data), data


def pyinfra_data(data: str) -> list[str]:
    """DATA as verify's --data options (pytest's, handed on to pyinfra as they are)."""
    args = shlex.split(data)
    pairs = args[1::2]
    assert args[::2] == ["--data"] * len(pairs) and all("=" in kv for kv in pairs), \
        f"DATA={data!r}: expected --data KEY=VALUE pairs"
    return args


@pytest.mark.parametrize(("document", "data"), verify_device_lines())
def test_each_documented_verify_device_data_resolves_to_settings_that_validate(document, data):
    args = pyinfra_data(data)
    proc = subprocess.run([sys.executable, "-m", "pyinfra", *args, "inventories/device.py", "debug-inventory",
                           "--json"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    hosts = json.loads(proc.stdout)
    assert hosts, f"{document}: inventories/device.py lists no host"
    for h in hosts:
        settings = validate(h["name"], h["data"])  # raises, naming each problem, where the data cannot run
        for kv in args[1::2]:  # what DATA sets is what the host got
            key, value = kv.split("=", 1)
            assert str(getattr(settings, key)) == value, (document, key)


README_CODE = re.compile(r"```sh\n(.*?)```|`([^`\n]+)`", re.S)
LLMFLEET = re.compile(r"(?:^|[\s(\"'/])llmfleet ((?:[^#)\"`|;&\n])+)")


def readme_llmfleet_commands() -> list[str]:
    """Every `llmfleet ...` command line in the README's code (blocks and inline), optional
    parts ([--json], [--limit GROUP]) included, comments left out."""
    text = (ROOT / "README.md").read_text()
    code = "\n".join(m[1] or m[2] for m in README_CODE.finditer(text))
    return [m.group(1).replace("[", "").replace("]", "").strip() for m in LLMFLEET.finditer(code)]


def test_the_readme_shows_llmfleet_commands():
    commands = {c.split()[0] for c in readme_llmfleet_commands()}
    assert {"lab", "probe", "audit", "onboard", "monitoring"} <= commands, commands


def parse(line: str) -> dict:
    """`llmfleet LINE` through click's own parser, command by command: every command and option
    must exist, get as many values as it takes, and every required argument be there. Values are
    not converted, so a file the README leaves to the reader (mix.yaml) need not exist here."""
    ctx = main.make_context("llmfleet", shlex.split(line))
    cmd: click.Command = main
    while isinstance(cmd, click.Group):
        args = [*ctx._protected_args, *ctx.args]
        assert args, f"llmfleet {line}: names no command of {ctx.command_path}"
        name, sub, rest = cmd.resolve_command(ctx, args)
        if isinstance(sub, click.Group):
            ctx = sub.make_context(name, rest, parent=ctx)
        else:
            ctx = click.Context(sub, info_name=name, parent=ctx, **sub.context_settings)
            values, extra, _ = sub.make_parser(ctx).parse_args(rest)
            missing = [p.name for p in sub.params if p.required and values.get(p.name) in (None, ())]
            assert not missing, f"llmfleet {line}: {ctx.command_path} needs {missing}"
            assert not extra or ctx.allow_extra_args, f"llmfleet {line}: unexpected {extra}"
            return values
        cmd = sub
    raise AssertionError(f"llmfleet {line}: ends at the group {ctx.command_path}")


@pytest.mark.parametrize("line", readme_llmfleet_commands())
def test_each_llmfleet_command_line_in_the_readme_parses(line):
    parse(line)


def test_a_command_line_with_a_wrong_option_or_command_does_not_parse():
    with pytest.raises(click.NoSuchOption):
        parse("probe --inventory inventories/lab.py --limt lab-c1")
    with pytest.raises(click.BadOptionUsage):
        parse("probe --inventory")
    with pytest.raises(click.UsageError, match="No such command 'upp'"):
        parse("lab upp --hosts 3")
    with pytest.raises(AssertionError, match=r"needs \['host'\]"):
        parse("onboard inventories/prod.py")
