"""A second deploy leaves NVIDIA's repository alone: the source file the first deploy writes, read
back through pyinfra's own AptSources fact, is the source the operation asks for."""

import json
from pathlib import Path

from pyinfra.context import ctx_host, ctx_state
from pyinfra.facts.apt import AptSources
from pyinfra_testing.operations import parse_commands
from pyinfra_testing.util import FakeState, create_host

from operations.nvidia_driver import KEYRING, SOURCES_NAME, repository

FRESH = Path(__file__).parent / "operations" / "nvidia_driver.repository" / "fresh_install.json"
SOURCES = f"/etc/apt/sources.list.d/{SOURCES_NAME}.sources"


def run(facts: dict, url: str) -> tuple[list, str | None]:
    host = create_host(FakeState(), facts=facts)
    with ctx_state.use(host.state), ctx_host.use(host):
        commands = parse_commands(list(repository._inner(url=url)))
    return commands, host.noop_description


def test_the_source_written_on_a_fresh_host_reads_back_as_configured():
    case = json.loads(FRESH.read_text())
    facts, url = case["facts"], case["kwargs"]["url"]
    first, _ = run(facts, url)
    written = next(c[1] for c in first if isinstance(c, list) and c[0] == "upload" and c[2] == SOURCES)

    # the host after the first deploy: the AptSources fact's own command output, parsed by pyinfra
    listing = [f"##PYINFRA_FILE {SOURCES}", *written.splitlines()]
    facts["apt.AptSources"] = facts["apt.AptSources"] + [r.to_json() for r in AptSources().process(listing)]
    facts["files.File"][f"path={KEYRING}"] = {"mode": 644, "user": "root", "group": "root"}
    second, noop = run(facts, url)

    assert second == []
    assert noop == f"nvidia_driver: CUDA repository {url}/ configured, signed by {KEYRING}"
