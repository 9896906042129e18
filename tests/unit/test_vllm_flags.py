"""vllm_flags read one way: the schema spells every name with dashes (max_model_len ->
max-model-len), so settings, layout, probe and CLI see the same keys; a flag given in two spellings
is refused with the fix; and what the host's vLLM refuses when it builds its configuration at start
(llmfleet/remote/vllm_flags.py) is named with vLLM's reason and the values of the flags involved.
The host script runs here against a stand-in `vllm` package; tests/integration/test_vllm.py runs it
against the real pinned vLLM on lab hosts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from llmfleet import vllm
from llmfleet.cli import main
from llmfleet.facts import VllmFlags
from llmfleet.probe import fleet
from llmfleet.schema import defaults as schema_defaults
from llmfleet.schema import flag_name
from llmfleet.settings import SettingsError, settings_for, validate

MODEL = {"name": "m", "version": "1", "source": "https://models.internal/m-1.tar", "sha256": "a" * 64,
         "torch_dtype": "float16", "num_attention_heads": 40}


def data(flags: dict, **override) -> dict:
    """group_data/all.py's settings (8 x V100 SXM2) serving a 13B model, with these vllm_flags."""
    d = {k: v for k, v in schema_defaults().items() if not k.startswith("__")}
    return d | {"vllm_model": MODEL, "vllm_flags": flags} | override


def refused(flags: dict, **override) -> str:
    with pytest.raises(SettingsError) as exc:
        validate("gpu-7", data(flags, **override))
    assert str(exc.value).startswith("host gpu-7: ")
    return str(exc.value)


UNDERSCORED = {"dtype": "half", "tensor_parallel_size": 4, "--max_num_seqs": 16, "max_model_len": 8192}


def test_the_underscore_spelling_is_read_as_the_dash_one():
    assert flag_name("--max_model_len") == flag_name("max_model_len") == "max-model-len"
    settings = validate("gpu-7", data(UNDERSCORED))
    assert settings.vllm_flags == {"dtype": "half", "tensor-parallel-size": 4, "max-num-seqs": 16,
                                   "max-model-len": 8192}
    assert vllm.flag_args(settings) == ["--dtype", "half", "--tensor-parallel-size", "4", "--max-num-seqs", "16",
                                        "--max-model-len", "8192"]
    dashed = validate("gpu-7", data({"dtype": "half", "tensor-parallel-size": 4, "max-num-seqs": 16,
                                     "max-model-len": 8192}))
    assert vllm.render_unit(settings, gpu=True) == vllm.render_unit(dashed, gpu=True)


def test_the_settings_checks_read_the_underscore_spelling():
    # llmfleet/settings.py's probe check reads max-model-len: the mix's longest class does not fit 4096
    assert "beyond vllm_flags.max-model-len = 4096" in refused({"dtype": "half", "tensor_parallel_size": 8,
                                                                "max_model_len": 4096})
    # llmfleet/gpu_guardrails.py: a tensor-parallel size that does not divide the model's 40 heads
    assert "vllm_flags.tensor-parallel-size = 3: does not divide" in refused({"dtype": "half",
                                                                              "tensor_parallel_size": 3})
    # llmfleet/vllm_layout.py: a layout sets the parallel sizes, in either spelling
    assert "vllm_flags.tensor-parallel-size = 2: the layout sets it" in refused(
        {"dtype": "half", "tensor_parallel_size": 2}, vllm_layout="2x4")


def test_the_probe_reads_the_underscore_spelling():
    settings = validate("gpu-7", data(UNDERSCORED))
    assert fleet.target_of("gpu-7", settings, "10.0.0.7").tensor_parallel == 4


def test_llmfleet_layout_reads_the_underscore_spelling(monkeypatch):
    import llmfleet.inventory

    hosts = [{"name": "gpu-7", "groups": ["all"], "data": data(UNDERSCORED)}]
    monkeypatch.setattr(llmfleet.inventory, "read", lambda *a, **kw: hosts)
    result = CliRunner().invoke(main, ["layout", "inventories/prod.py"])
    assert result.exit_code == 0, result.output
    assert "gpu-7: no layout: vllm.service on port 8000, all 8 GPUs, tensor-parallel size 4" in result.output


@pytest.mark.parametrize("flags,message", [
    ({"max_model_len": 4096, "max-model-len": 8192},
     "vllm_flags.max-model-len: given twice, as 'max_model_len' = 4096 and 'max-model-len' = 8192: vLLM reads "
     "each as --max-model-len, and the one last on its command line wins (fix: keep one, spelt 'max-model-len')"),
    ({"max-model-len": 8192, "--max_model_len": 8192},  # the same value: still two spellings
     "vllm_flags.max-model-len: given twice, as 'max-model-len' = 8192 and '--max_model_len' = 8192"),
    ({"max_num_seqs": 8, "max-num-seqs": 8, "--max-num-seqs": 16},
     "vllm_flags.max-num-seqs: given 3 times, as 'max_num_seqs' = 8, 'max-num-seqs' = 8 and '--max-num-seqs' = 16"),
])
def test_a_flag_in_two_spellings_is_refused_with_the_fix(flags, message):
    msg = refused({"dtype": "half", "tensor-parallel-size": 8} | flags)
    assert message in msg, msg
    assert "(fix it in group data)" not in msg  # the message names its own fix


def test_a_flag_in_two_spellings_stops_the_deploy_and_llmfleet_layout_naming_the_host(monkeypatch):
    from pyinfra.api.exceptions import OperationValueError

    twice = data({"dtype": "half", "tensor-parallel-size": 8, "max_model_len": 8192, "max-model-len": 8192})

    class Host:
        name = "gpu-7"

        class data:  # noqa: N801 - as pyinfra's host.data
            @staticmethod
            def dict():
                return twice

    with pytest.raises(OperationValueError, match=r"^host gpu-7: vllm_flags\.max-model-len: given twice"):
        settings_for(Host)
    import llmfleet.inventory

    monkeypatch.setattr(llmfleet.inventory, "read", lambda *a, **kw: [{"name": "gpu-7", "groups": [], "data": twice}])
    result = CliRunner().invoke(main, ["layout", "inventories/prod.py"])
    assert result.exit_code == 1
    assert "refused: host gpu-7: vllm_flags.max-model-len: given twice" in " ".join(result.output.split())


def test_what_vllm_refuses_at_start_is_named_with_its_reason_and_the_values_involved():
    settings = validate("gpu-7", data({"dtype": "half", "tensor-parallel-size": 8, "max-model-len": 8192,
                                       "max-num-batched-tokens": 4096, "enable-chunked-prefill": False}))
    reason = ("max_num_batched_tokens (4096) is smaller than max_model_len (8192). This effectively limits the "
              "maximum sequence length to max_num_batched_tokens and makes vLLM reject longer sequences. Please "
              "increase max_num_batched_tokens or decrease max_model_len.")
    report = {"version": "0.19.1", "ok": False, "unknown": [], "options": [], "error": None, "config": "engine",
              "config_error": reason}
    assert vllm.host_flag_problems(settings, report) == [
        f"vllm_flags: vLLM 0.19.1 refuses these flags at start: {reason} (fix: change max-model-len = 8192, "
        "max-num-batched-tokens = 4096 in vllm_flags as vLLM's reason says)"]
    partial = report | {"config": "scheduler"}
    assert vllm.host_flag_problems(settings, partial)[0].startswith(
        "vllm_flags: vLLM 0.19.1 refuses these flags at start (its SchedulerConfig: the model is not on the host "
        "yet): max_num_batched_tokens (4096)")
    tool = report | {"config_error": "Error: --enable-auto-tool-choice requires --tool-call-parser"}
    assert vllm.host_flag_problems(settings, tool) == [
        "vllm_flags: vLLM 0.19.1 refuses these flags at start: Error: --enable-auto-tool-choice requires "
        "--tool-call-parser (fix: change vllm_flags as vLLM's reason says)"]
    assert vllm.host_flag_problems(settings, report | {"ok": True, "config_error": None}) == []


# --- the host script, against a stand-in vllm package with vLLM 0.32.0's entry points ------------
FAKE_VLLM = {
    "__init__.py": "import os\n__version__ = '0.32.0'\nprint('INFO banner: vLLM logs to standard output')\n",
    "utils/__init__.py": "",
    "utils/argparse_utils.py": "import argparse\nclass FlexibleArgumentParser(argparse.ArgumentParser):\n    pass\n",
    "entrypoints/__init__.py": "",
    "entrypoints/launchers/__init__.py": "",
    "entrypoints/launchers/cli_args.py": """import argparse
def make_arg_parser(parser):
    for name in ("--model", "--served-model-name", "--host"):
        parser.add_argument(name)
    for name in ("--port", "--max-model-len", "--max-num-seqs", "--max-num-batched-tokens"):
        parser.add_argument(name, type=int)
    parser.add_argument("--enable-chunked-prefill", action=argparse.BooleanOptionalAction)
    return parser
def validate_parsed_serve_args(args):
    pass
""",
    "usage/__init__.py": "",
    "usage/usage_lib.py": "import enum\nclass UsageContext(enum.Enum):\n    OPENAI_API_SERVER = 'openai'\n",
    "config/__init__.py": """import dataclasses
@dataclasses.dataclass
class SchedulerConfig:
    max_model_len: dataclasses.InitVar[int]
    is_encoder_decoder: dataclasses.InitVar[bool]
    max_num_batched_tokens: int = 2048
    max_num_seqs: int = 128
    enable_chunked_prefill: bool = True
    def __post_init__(self, max_model_len, is_encoder_decoder):
        if self.max_num_batched_tokens < max_model_len and not self.enable_chunked_prefill:
            raise ValueError(f"max_num_batched_tokens ({self.max_num_batched_tokens}) is smaller than "
                             f"max_model_len ({max_model_len}).")
""",
    "engine/__init__.py": "",
    "engine/arg_utils.py": """import json, os
from vllm.config import SchedulerConfig
class AsyncEngineArgs:
    def __init__(self, args):
        self.args = args
    @classmethod
    def from_cli_args(cls, args):
        return cls(args)
    @classmethod
    def get_batch_defaults(cls, world_size):
        return {}, {}
    def create_engine_config(self, usage_context=None):
        print("engine config: more logging on standard output")
        with open(os.path.join(self.args.model, "config.json")) as f:
            derived = json.load(f)["max_position_embeddings"]
        max_len = self.args.max_model_len or derived
        if max_len > derived:
            raise ValueError(f"User-specified max_model_len ({max_len}) is greater than the derived "
                             f"max_model_len ({derived})")
        if os.environ.get("VLLM_CPU_KVCACHE_SPACE") != "1":
            raise ValueError("not run in the unit's environment")
        SchedulerConfig(max_len, False, max_num_batched_tokens=self.args.max_num_batched_tokens or max(2048, max_len),
                        enable_chunked_prefill=self.args.enable_chunked_prefill is not False)
""",
}


@pytest.fixture
def fake_vllm(tmp_path) -> Path:
    for name, text in FAKE_VLLM.items():
        path = tmp_path / "site" / "vllm" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"max_position_embeddings": 1024}))
    return tmp_path


def check(root: Path, model: str, *flags: str, env: dict | None = None) -> tuple[dict, str]:
    """The fact's command run here (the stand-in vllm first on the path; the answers it keeps in
    root/answers): its answer and raw stdout."""
    args = ["--model", model, "--host", "0.0.0.0", "--port", "8000", *flags]
    command = VllmFlags().command(sys.executable, args, env or {"VLLM_CPU_KVCACHE_SPACE": "1"},
                                  answers_dir=str(root / "answers"))
    out = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=60,
                         env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(root / "site")}).stdout
    return VllmFlags().process(out.splitlines()), out


def test_the_host_script_builds_vllms_configuration_in_the_units_environment(fake_vllm):
    answer, out = check(fake_vllm, str(fake_vllm / "model"), "--max-model-len", "1024")
    assert out.count("\n") == 1, out  # vLLM's own output went to stderr
    assert answer["ok"] and answer["config"] == "engine" and answer["config_error"] is None, answer
    answer, _ = check(fake_vllm, str(fake_vllm / "model"), "--max-model-len", "1024", "--max-num-batched-tokens",
                      "512", "--no-enable-chunked-prefill")
    assert not answer["ok"] and answer["config_error"] == ("max_num_batched_tokens (512) is smaller than "
                                                           "max_model_len (1024)."), answer
    answer, _ = check(fake_vllm, str(fake_vllm / "model"), "--max-model-len", "4096")
    assert answer["config_error"] == "User-specified max_model_len (4096) is greater than the derived max_model_len " \
                                     "(1024)", answer
    answer, _ = check(fake_vllm, str(fake_vllm / "model"), "--max-model-len", "lots")
    assert answer["error"] == "argument --max-model-len: invalid int value: 'lots'" and answer["config"] is None


def test_without_the_model_on_the_host_only_the_scheduler_config_is_built_and_the_answer_says_so(fake_vllm):
    missing = str(fake_vllm / "models" / "m" / "2")
    answer, _ = check(fake_vllm, missing, "--max-model-len", "4096")
    assert answer["ok"] and answer["config"] == "scheduler", answer
    assert answer["note"].startswith(f"{missing}/config.json is not on the host yet: only vLLM's SchedulerConfig")
    answer, _ = check(fake_vllm, missing, "--max-model-len", "1024", "--max-num-batched-tokens", "512",
                      "--no-enable-chunked-prefill")
    assert answer["config_error"] == "max_num_batched_tokens (512) is smaller than max_model_len (1024).", answer


def kept(root: Path) -> list[Path]:
    return sorted((root / "answers").glob("*.json"))


def test_an_answer_that_passed_is_kept_for_root_and_reused_without_importing_vllm(fake_vllm):
    model = str(fake_vllm / "model")
    first, _ = check(fake_vllm, model, "--max-model-len", "1024")
    assert first["ok"] and first["reused"] is None, first
    (answer,) = kept(fake_vllm)
    assert (oct((fake_vllm / "answers").stat().st_mode & 0o777), oct(answer.stat().st_mode & 0o777)) == \
        ("0o700", "0o600")
    # vLLM gone: the same inputs are answered from what was kept, without importing it
    (fake_vllm / "site" / "vllm").rename(fake_vllm / "site" / "vllm-away")
    again, _ = check(fake_vllm, model, "--max-model-len", "1024")
    assert again["ok"] and again["reused"] and again["config"] == "engine", again
    assert {k: v for k, v in again.items() if k not in ("reused", "seconds")} == \
        {k: v for k, v in first.items() if k not in ("reused", "seconds")}


@pytest.mark.parametrize("change", ["arguments", "environment", "model config", "package version"])
def test_any_other_input_is_checked_afresh(fake_vllm, change):
    model = str(fake_vllm / "model")
    check(fake_vllm, model, "--max-model-len", "1024")
    flags, env = ["--max-model-len", "1024"], None
    if change == "arguments":
        flags = ["--max-model-len", "1000"]
    elif change == "environment":
        env = {"VLLM_CPU_KVCACHE_SPACE": "1", "OMP_NUM_THREADS": "1"}
    elif change == "model config":
        (fake_vllm / "model" / "config.json").write_text(json.dumps({"max_position_embeddings": 2048}))
    else:  # a package installed beside it (its metadata, as pip leaves it)
        dist = fake_vllm / "site" / "extra-1.0.dist-info"
        dist.mkdir()
        (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: extra\nVersion: 1.0\n")
    answer, _ = check(fake_vllm, model, *flags, env=env)
    assert answer["ok"] and answer["reused"] is None, answer
    assert len(kept(fake_vllm)) == 2


def test_a_refusal_is_never_kept(fake_vllm):
    for _ in range(2):
        answer, _ = check(fake_vllm, str(fake_vllm / "model"), "--max-model-len", "4096")
        assert not answer["ok"] and answer["reused"] is None, answer
    assert kept(fake_vllm) == []
