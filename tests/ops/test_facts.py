"""Fact tests in pyinfra's own style: command output in, parsed fact out (tests/ops/facts/<fact>/*.json)."""

from pathlib import Path

from pyinfra_testing.facts import make_fact_tests

TESTS_BASE = Path(__file__).parent / "facts"

for fact_path in sorted(d.name for d in TESTS_BASE.iterdir() if d.is_dir()):
    locals()[fact_path] = make_fact_tests("llmfleet", fact_path, TESTS_BASE / fact_path)
