"""Run on a host with the vLLM environment's python: check command-line flags with the argument
parser of the vLLM installed there. Argument: a JSON list of arguments. Prints one JSON object:
{"version": ..., "ok": bool, "unknown": [flags], "options": [every option it knows], "error": str|None},
or {"unreadable": why} when vLLM or its parser does not load.
"""

import contextlib
import importlib
import io
import json
import sys


def first(*names):
    for module, attr in names:
        try:
            return getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError):
            continue
    raise ImportError("none of " + ", ".join(f"{m}.{a}" for m, a in names))


args = json.loads(sys.argv[1])
try:
    import vllm

    # where the OpenAI server's parser lives moved between releases
    make_arg_parser = first(("vllm.entrypoints.launchers.cli_args", "make_arg_parser"),
                            ("vllm.entrypoints.openai.cli_args", "make_arg_parser"))
    parser_class = first(("vllm.utils.argparse_utils", "FlexibleArgumentParser"),
                         ("vllm.utils", "FlexibleArgumentParser"))
    parser = make_arg_parser(parser_class())
except Exception as exc:  # noqa: BLE001 - an environment that cannot load vLLM says so, as data
    print(json.dumps({"unreadable": f"vLLM's parser does not load: {type(exc).__name__}: {exc}"}))
    sys.exit(0)
options = sorted({o for action in parser._actions for o in action.option_strings if o.startswith("--")})
unknown, error = [], None
err = io.StringIO()
try:
    with contextlib.redirect_stderr(err):
        _, unknown = parser.parse_known_args(args)
        if not unknown:
            parser.parse_args(args)
except SystemExit:  # argparse reports a bad value by exiting
    lines = err.getvalue().strip().splitlines()
    error = lines[-1].split(": error: ", 1)[-1] if lines else "invalid arguments"
print(json.dumps({"version": vllm.__version__, "ok": not unknown and error is None,
                  "unknown": [u for u in unknown if u.startswith("-")] or unknown, "options": options,
                  "error": error}))
