"""Run on a host with the vLLM environment's python: check the server's command line with the vLLM
installed there, as the server itself checks it at start, without loading weights: its argument
parser, then its configuration classes.

Arguments: a JSON list of the server's arguments; optionally a JSON object of the unit's
environment (vllm_env, an instance's GPUs), set before vLLM is imported; optionally a JSON object
{"dir": a folder, "script": this script's sha256} where answers that passed are kept and reused.
An answer is reused only for the same inputs: this script, the interpreter, the name and version of
every package it can import, the arguments, the environment, the model folder's JSON files and
SHA256SUMS, the NVIDIA GPUs the kernel lists (each one's model) and the driver's version.
Importing vLLM and PyTorch to check flags that passed before costs about 10 s of CPU a run (a
deploy, a dry run, an audit); reading the package versions, a fraction of a second. A refusal is
never kept: it is checked again each time.

Prints one JSON object: {"version", "ok", "unknown": [flags], "options": [every option it knows], "error": the parser's
complaint or None, "config": what was built ("engine": the whole engine configuration; "scheduler":
SchedulerConfig alone, the model's config.json not being on the host yet; None: not built, the
parser refused), "config_error": vLLM's reason for refusing the configuration or None, "note",
"seconds", "reused": the time (UTC, ISO 8601) of the check whose answer this is, or None}, or
{"unreadable": why} when vLLM or its parser does not load. vLLM's own output (its logging,
warnings) goes to stderr: standard output holds that one line.
"""

import contextlib
import dataclasses
import datetime
import glob
import hashlib
import importlib
import importlib.metadata
import io
import json
import os
import sys
import time

from _helpers import nvidia_module  # llmfleet/remote/_helpers.py, sent along by python_script

START = time.monotonic()
# file descriptor 1 becomes stderr for everything vLLM, PyTorch or their C code print; the
# report alone goes to the real standard output
REPORT = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)


def first(*names):
    for module, attr in names:
        try:
            return getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError):
            continue
    raise ImportError("none of " + ", ".join(f"{m}.{a}" for m, a in names))


def report(answer):
    REPORT.write(json.dumps(answer) + "\n")
    REPORT.flush()


def reason(exc):
    """vLLM's reason: each message of a pydantic ValidationError (its config classes are pydantic
    dataclasses), else the exception's text."""
    errors = getattr(exc, "errors", None)
    messages = []
    if callable(errors):
        with contextlib.suppress(Exception):
            messages = [str(e.get("msg", "")).removeprefix("Value error, ") for e in errors()]
    text = "; ".join(m for m in messages if m) or str(exc).strip() or type(exc).__name__
    return text[:2000]


def scheduler_config(args, engine_args_class, usage_context):
    """Without the model's config.json (not on the host yet) vLLM cannot build the engine's
    configuration (nor EngineArgs, which may look the model up): SchedulerConfig alone, from the
    parsed flags' values, with the defaults
    create_engine_config gives what they leave out (EngineArgs.get_batch_defaults,
    _set_default_max_num_seqs_and_batched_tokens_args: vLLM 0.32.0 vllm/engine/arg_utils.py). What
    only the model knows is taken as what lets the check pass: its context length as the batch's
    token budget unless --max-model-len gives it, chunked prefill as on unless the flags turn it off."""
    scheduler = first(("vllm.config", "SchedulerConfig"), ("vllm.config.scheduler", "SchedulerConfig"))
    def flag(name):
        return getattr(args, name, None)

    world = (flag("pipeline_parallel_size") or 1) * (flag("tensor_parallel_size") or 1)
    tokens, seqs = {}, {}
    if hasattr(engine_args_class, "get_batch_defaults"):
        tokens, seqs = engine_args_class.get_batch_defaults(world)
    max_len = flag("max_model_len") if isinstance(flag("max_model_len"), int) and flag("max_model_len") > 0 else None
    chunked = flag("enable_chunked_prefill") is not False
    batched = flag("max_num_batched_tokens")
    if batched is None:
        batched = tokens.get(usage_context, getattr(scheduler, "DEFAULT_MAX_NUM_BATCHED_TOKENS", 2048))
        batched = batched if chunked or max_len is None else max(max_len, batched)
    max_seqs = flag("max_num_seqs") or seqs.get(usage_context, getattr(scheduler, "DEFAULT_MAX_NUM_SEQS", 128))
    given = {"max_num_batched_tokens": batched, "enable_chunked_prefill": chunked, "max_num_seqs": max_seqs,
             "max_model_len": max_len or batched, "is_encoder_decoder": False}
    for name in ("max_num_active_seqs", "long_prefill_token_threshold", "max_num_scheduled_tokens"):
        if flag(name) is not None:
            given[name] = flag(name)
    known = getattr(scheduler, "__dataclass_fields__", None) or {f.name: f for f in dataclasses.fields(scheduler)}
    scheduler(**{k: v for k, v in given.items() if k in known})


def config_checked(args):
    """vLLM's configuration built from the parsed arguments as the server builds it at start (vLLM
    0.32.0 vllm/entrypoints/launchers/api_server/entry.py: main's validate_parsed_serve_args, then
    build_async_engine_client's AsyncEngineArgs.from_cli_args and create_engine_config, before any
    engine process or weight): (what was built, vLLM's reason or None, a note)."""
    try:
        validate = first(("vllm.entrypoints.launchers.cli_args", "validate_parsed_serve_args"),
                         ("vllm.entrypoints.openai.cli_args", "validate_parsed_serve_args"))
        engine_args_class = first(("vllm.engine.arg_utils", "AsyncEngineArgs"))
        usage_context = first(("vllm.usage.usage_lib", "UsageContext")).OPENAI_API_SERVER
    except ImportError as exc:
        return None, None, f"vLLM's configuration was not built ({exc}): its parser alone checked the flags"
    model = getattr(args, "model", None) or ""
    whole = not (model.startswith("/") and not os.path.isfile(os.path.join(model, "config.json")))
    try:
        validate(args)
        if whole:
            engine_args_class.from_cli_args(args).create_engine_config(usage_context=usage_context)
        else:
            scheduler_config(args, engine_args_class, usage_context)
    except Exception as exc:  # noqa: BLE001 - vLLM's refusal, as data
        return ("engine" if whole else "scheduler"), reason(exc), None
    if whole:
        return "engine", None, None
    return "scheduler", None, (f"{model}/config.json is not on the host yet: only vLLM's SchedulerConfig was built; "
                               "the rest of vLLM's configuration is checked when the server starts")


def cache_key(args, env, script):
    """What the answer depends on, hashed (the module's docstring lists it), or None where it cannot
    be read."""
    try:
        packages = sorted({(d.metadata["Name"] or "", d.version) for d in importlib.metadata.distributions()})
        model = args[args.index("--model") + 1] if "--model" in args[:-1] else ""
        files = {}
        for path in sorted(glob.glob(os.path.join(glob.escape(model), "*.json")) +
                           [os.path.join(model, "SHA256SUMS")]) if model else []:
            with contextlib.suppress(OSError), open(path, "rb") as f:
                files[os.path.basename(path)] = hashlib.sha256(f.read()).hexdigest()
        # the NVIDIA GPUs the kernel lists, each with its model (a board swapped in the same slot is
        # another input), and the driver's version
        gpus = []
        for path in sorted(glob.glob("/proc/driver/nvidia/gpus/*/information")):
            with contextlib.suppress(OSError), open(path) as f:
                gpus.append([os.path.basename(os.path.dirname(path)), f.read()])
        gpus.append(["driver", nvidia_module()])
    except (OSError, ValueError, TypeError):
        return None
    inputs = {"script": script, "python": os.path.realpath(sys.executable), "version": list(sys.version_info),
              "packages": packages, "args": args, "env": env, "model": files, "gpus": gpus}
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()


def reused(cache, key):
    """The answer kept for `key`, or None."""
    try:
        with open(os.path.join(cache, key + ".json")) as f:
            answer = json.load(f)
    except (OSError, ValueError):
        return None
    return answer if isinstance(answer, dict) and answer.get("ok") is True else None


def keep(cache, key, answer, most=64):
    """Keeps an answer that passed (root's only: 0700 folder, 0600 file, written whole then renamed),
    and the `most` newest answers only."""
    with contextlib.suppress(OSError):
        os.makedirs(cache, mode=0o700, exist_ok=True)
        os.chmod(cache, 0o700)
        path = os.path.join(cache, key + ".json")
        fd = os.open(path + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(answer, f)
        os.replace(path + ".tmp", path)
        kept = sorted(glob.glob(os.path.join(glob.escape(cache), "*.json")), key=os.path.getmtime)
        for old in kept[:-most]:
            os.unlink(old)


args = json.loads(sys.argv[1])
unit_env = json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}
reuse = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}
key = cache_key(args, unit_env, reuse["script"]) if reuse else None
if key:
    kept = reused(reuse["dir"], key)
    if kept is not None:
        report(kept | {"seconds": round(time.monotonic() - START, 1)})
        sys.exit(0)
os.environ.update(unit_env)
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
try:
    import vllm

    # where the OpenAI server's parser lives moved between releases
    make_arg_parser = first(("vllm.entrypoints.launchers.cli_args", "make_arg_parser"),
                            ("vllm.entrypoints.openai.cli_args", "make_arg_parser"))
    parser_class = first(("vllm.utils.argparse_utils", "FlexibleArgumentParser"),
                         ("vllm.utils", "FlexibleArgumentParser"))
    parser = make_arg_parser(parser_class())
except Exception as exc:  # noqa: BLE001 - an environment that cannot load vLLM says so, as data
    report({"unreadable": f"vLLM's parser does not load: {type(exc).__name__}: {exc}"})
    sys.exit(0)
options = sorted({o for action in parser._actions for o in action.option_strings if o.startswith("--")})
unknown, error, parsed = [], None, None
err = io.StringIO()
try:
    with contextlib.redirect_stderr(err):
        _, unknown = parser.parse_known_args(args)
        if not unknown:
            parsed = parser.parse_args(args)
except SystemExit:  # argparse reports a bad value by exiting
    lines = err.getvalue().strip().splitlines()
    error = lines[-1].split(": error: ", 1)[-1] if lines else "invalid arguments"
built, config_error, note = config_checked(parsed) if parsed is not None else (None, None, None)
answer = {"version": vllm.__version__, "ok": not unknown and error is None and config_error is None,
          "unknown": [u for u in unknown if u.startswith("-")] or unknown, "options": options, "error": error,
          "config": built, "config_error": config_error, "note": note,
          "seconds": round(time.monotonic() - START, 1), "reused": None}
report(answer)
if key and answer["ok"]:
    keep(reuse["dir"], key, answer | {"reused": datetime.datetime.now(datetime.timezone.utc).isoformat(
        timespec="seconds")})
