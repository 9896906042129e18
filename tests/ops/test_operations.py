"""Operation tests in pyinfra's own style: facts in, commands out (tests/ops/operations/<op>/*.json).

For the logic that needs a kernel or hardware the lab lacks. Runs in its own pytest process:
pyinfra-testing imports pyinfra_cli, which monkey-patches the process with gevent.
"""

from pathlib import Path

from pyinfra_testing.operations import make_operation_tests

TESTS_BASE = Path(__file__).parent / "operations"

for op_path in sorted(d.name for d in TESTS_BASE.iterdir() if d.is_dir()):
    locals()[op_path] = make_operation_tests("operations", op_path, TESTS_BASE / op_path)
