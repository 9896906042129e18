"""`llmfleet probe`'s options: how each lands on the probe's config and run (click's CliRunner,
the probe run itself replaced by a recorder), and each bad value refused by click before
anything is measured (exit 2, naming the option and the value)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from llmfleet.cli import main
from llmfleet.probe import fleet, report
from llmfleet.probe import run as probe_run
from llmfleet.probe.config import ProbeConfig, RequestClass
from llmfleet.schema import defaults as schema_defaults

ROOT = Path(__file__).resolve().parents[2]
DEFAULTS = schema_defaults()
MIX = [{"name": "a", "share": 0.5, "prompt_tokens": [4, 8], "output_tokens": [6, 8]},
       {"name": "b", "share": 0.5, "prompt_tokens": 16, "output_tokens": 4, "slo": {"e2e_p95_ms": 700}}]


def group_data_config(**changed) -> ProbeConfig:
    """The probe config of group_data/all.py's probe_* defaults, with ``changed`` fields."""
    fields = {f: DEFAULTS[f"probe_{f}"] for f in ProbeConfig.model_fields}
    return ProbeConfig(**{**fields, **changed})


class FakeReport:
    def __init__(self, passed: bool):
        self.passed = passed

    def model_dump_json(self, indent=None) -> str:
        return json.dumps({"passed": self.passed})


@pytest.fixture
def runs(monkeypatch):
    """Every probe run the command starts, with its arguments; each passes unless its url says fail."""
    calls: list[dict] = []

    def run_probe(url, model, api_key, config, **kwargs):
        calls.append({"url": url, "model": model, "api_key": api_key, "config": config, **kwargs})
        return FakeReport(passed="fail" not in url)

    monkeypatch.setattr(probe_run, "run_probe", run_probe)
    monkeypatch.setattr(report, "plot", lambda rep, path: path.write_bytes(b"png"))
    monkeypatch.setattr(report, "table", lambda rep: [])
    saved: list[Path] = []
    monkeypatch.setattr(report, "save_baseline", lambda rep, path: saved.append(path))
    calls_and_saved = calls, saved
    return calls_and_saved


@pytest.fixture
def files(tmp_path):
    (tmp_path / "mix.json").write_text(json.dumps(MIX))
    (tmp_path / "tokenizer.json").write_text("{}")
    (tmp_path / "model").mkdir()
    (tmp_path / "baseline.json").write_text("{}")
    key = tmp_path / "key"
    key.write_text("VLLM_API_KEY=secret-1\n")
    key.chmod(0o600)
    return tmp_path


def probe(*args: str, env: dict | None = None):
    return CliRunner().invoke(main, ["probe", *args], env={"LLMFLEET_API_KEY": None, "OPENAI_API_KEY": None,
                                                           **(env or {})})


def test_url_mode_with_every_option_maps_each_onto_the_config_and_the_run(runs, files):
    calls, saved = runs
    out = files / "out"
    result = probe("http://gpu-1:8000/", "--model", "m1", "--api-key-file", str(files / "key"),
                   "--search", "--rate", "3.5", "--duration", "7", "--warmup", "1.5", "--repeats", "3",
                   "--fixed-lengths", "128,64", "--mix", str(files / "mix.json"),
                   "--slo", "e2e_p95_ms=900", "--slo", "ttft_p99_ms=300", "--goodput-min", "0.8",
                   "--arrivals", "gamma", "--burstiness", "2.5", "--tokenizer", str(files / "tokenizer.json"),
                   "--gpu-profile", "h200_141gb_x1", "--tensor-parallel", "1", "--model-dir", str(files / "model"),
                   "--baseline", str(files / "baseline.json"), "--save-baseline", str(files / "new.json"),
                   "--out-dir", str(out), "--no-stop-early")
    assert result.exit_code == 0, result.output
    [call] = calls
    profile = call["gpu_profile"]  # group data's profile of that name, as a GpuProfile
    assert profile == type(profile)(**DEFAULTS["gpu_profiles"]["h200_141gb_x1"])
    mix = [RequestClass.model_validate(c) for c in MIX]
    assert call.pop("config") == group_data_config(mix=mix, slo={"e2e_p95_ms": 900.0, "ttft_p99_ms": 300.0},
                                                   goodput_min=0.8, arrivals="gamma", burstiness=2.5,
                                                   duration_s=7.0, warmup_s=1.5, repeats=3)
    assert call == {
        "url": "http://gpu-1:8000", "model": "m1", "api_key": "secret-1", "search_mode": True, "rate": 3.5,
        "requests": None, "fixed": {"prompt_tokens": 128, "output_tokens": 64},
        "tokenizer": files / "tokenizer.json", "host": None,
        "gpu_profile": profile, "tensor_parallel": 1,
        "model_dir": files / "model", "model_dtype": None, "baseline_file": files / "baseline.json",
        "show_progress": False, "stop_early": False, "trace": None, "speed": 1.0, "trace_warmup_s": 1.5,
        "server_view": True}
    assert json.loads((out / "gpu-1_8000.json").read_text()) == {"passed": True}
    assert (out / "gpu-1_8000.png").read_bytes() == b"png"
    assert saved == [files / "new.json"]


def test_url_mode_with_no_options_runs_one_check_with_group_datas_settings(runs, monkeypatch, tmp_path):
    calls, saved = runs
    monkeypatch.chdir(tmp_path)
    result = probe("http://gpu-1:8000", "--model", "m1", env={"OPENAI_API_KEY": "secret-2"})
    assert result.exit_code == 0, result.output
    [call] = calls
    assert call.pop("config") == group_data_config()
    assert call == {
        "url": "http://gpu-1:8000", "model": "m1", "api_key": "secret-2", "search_mode": False, "rate": None,
        "requests": None, "fixed": None, "tokenizer": None, "host": None, "gpu_profile": None,
        "tensor_parallel": 1, "model_dir": None, "model_dtype": None, "baseline_file": None,
        "show_progress": False, "stop_early": True, "trace": None, "speed": 1.0, "trace_warmup_s": 0.0,
        "server_view": True}
    assert (tmp_path / "reports" / "probe" / "gpu-1_8000.json").is_file() and saved == []


def test_gamma_arrivals_without_burstiness_take_burstiness_1_and_requests_replace_the_duration(runs, tmp_path):
    calls, _ = runs
    result = probe("http://gpu-1:8000", "--model", "m1", "--arrivals", "gamma", "--requests", "40",
                   "--out-dir", str(tmp_path))
    assert result.exit_code == 0, result.output
    assert calls[0]["config"] == group_data_config(arrivals="gamma", burstiness=1.0)
    assert calls[0]["requests"] == 40


def inventory_target(host: str, **changed) -> fleet.Target:
    fields = {"host": host, "url": f"http://{host}:8000", "model": "tiny", "api_key": f"key-{host}",
              "config": group_data_config(), "tokenizer": None, "model_dir": Path(f"/models/{host}"),
              "model_dtype": "float16", "gpu_profile": None, "tensor_parallel": 2,
              "baseline_file": Path(f"/baselines/{host}.json")}
    return fleet.Target(**{**fields, **changed})


def test_inventory_mode_probes_every_target_with_the_options_over_its_own_settings(runs, monkeypatch, tmp_path):
    calls, _ = runs
    asked = []
    own = group_data_config(slo={"e2e_p95_ms": 5000.0}, repeats=1)

    def targets(inventory, limit=None, instances=False, data=None):
        asked.append((inventory, limit, instances, data))
        return [inventory_target("gpu-1", config=own), inventory_target("gpu-2-fail")]

    monkeypatch.setattr(fleet, "targets", targets)
    baseline = tmp_path / "baseline.json"
    baseline.write_text("{}")
    result = probe("--inventory", "inventories/prod.py", "--limit", "gpu-1", "--limit", "gpus", "--warmup", "0",
                   "--tokenizer", str(tmp_path), "--baseline", str(baseline), "--out-dir", str(tmp_path / "out"))
    assert result.exit_code == 1, result.output  # one target's SLA did not hold
    assert asked == [("inventories/prod.py", ["gpu-1", "gpus"], False, None)]
    assert [c["host"] for c in calls] == ["gpu-1", "gpu-2-fail"]
    assert calls[0]["config"] == group_data_config(slo={"e2e_p95_ms": 5000.0}, repeats=1, warmup_s=0.0)
    assert calls[1]["config"] == group_data_config(warmup_s=0.0)
    for c in calls:
        host = c["host"]
        assert (c["url"], c["model"], c["api_key"]) == (f"http://{host}:8000", "tiny", f"key-{host}")
        assert (c["tokenizer"], c["baseline_file"]) == (tmp_path, baseline)
        assert (c["model_dir"], c["model_dtype"], c["tensor_parallel"]) == (Path(f"/models/{host}"), "float16", 2)
        assert json.loads((tmp_path / "out" / f"{host}.json").read_text())["passed"] == (host == "gpu-1")


def test_instances_are_probed_after_their_host_each_with_a_report_of_its_own(runs, monkeypatch, tmp_path):
    calls, _ = runs
    asked = []
    host = inventory_target("gpu-1")

    def targets(inventory, limit=None, instances=False, data=None):
        asked.append((instances, data))
        return [host, *fleet.instance_targets(host, layout_settings())]

    monkeypatch.setattr(fleet, "targets", targets)
    result = probe("--inventory", "inventories/prod.py", "--instances", "--data", "vllm_layout=2x4", "--out-dir",
                   str(tmp_path))
    assert result.exit_code == 0, result.output
    assert asked == [(True, ["vllm_layout=2x4"])]
    assert [(c["host"], c["url"]) for c in calls] == [
        ("gpu-1", "http://gpu-1:8000"), ("gpu-1/a", "http://gpu-1:8000/instances/a"),
        ("gpu-1/b", "http://gpu-1:8000/instances/b")]
    assert sorted(p.name for p in tmp_path.glob("*.json")) == ["gpu-1.a.json", "gpu-1.b.json", "gpu-1.json"]


def layout_settings():
    """8 x V100 SXM2 as two instances of four GPUs (the 13B model of tests/unit/test_vllm_layout.py)."""
    from llmfleet.settings import validate

    d = {k: v for k, v in DEFAULTS.items() if not k.startswith("__")}
    d["vllm_model"] = {"name": "m", "version": "1", "source": "https://models.internal/m-1.tar", "sha256": "a" * 64,
                       "torch_dtype": "float16", "num_attention_heads": 40}
    d["vllm_flags"] = {k: v for k, v in d["vllm_flags"].items() if k != "tensor-parallel-size"}
    return validate("gpu-1", d | {"vllm_layout": "2x4"})


def test_each_instance_is_measured_at_its_gpus_share_of_the_check_rate_without_the_hosts_baseline(tmp_path):
    host = inventory_target("gpu-1", config=group_data_config(check_rps=10.0))
    host.baseline_file = tmp_path / "baseline.json"
    a, b = fleet.instance_targets(host, layout_settings())
    assert (a.host, a.url, a.config.check_rps, a.tensor_parallel, a.baseline_file) == (
        "gpu-1/a", "http://gpu-1:8000/instances/a", 5.0, 4, None)
    assert (b.host, b.config.check_rps, b.api_key, b.model) == ("gpu-1/b", 5.0, host.api_key, host.model)
    assert host.config.check_rps == 10.0 and host.url == "http://gpu-1:8000"  # the host's own target unchanged
    hand = layout_settings().model_copy(update={"vllm_layout": None})
    assert fleet.instance_targets(host, hand) == []  # no layout: the host is its one instance


URL = ("http://gpu-1:8000", "--model", "m1")


@pytest.mark.parametrize(("args", "option", "value"), [
    ((*URL, "--rate", "0"), "--rate", "0"),
    ((*URL, "--rate", "-2"), "--rate", "-2"),
    ((*URL, "--rate", "fast"), "--rate", "fast"),
    ((*URL, "--requests", "0"), "--requests", "0"),
    ((*URL, "--requests", "2.5"), "--requests", "2.5"),
    ((*URL, "--duration", "0"), "--duration", "0"),
    ((*URL, "--warmup", "-1"), "--warmup", "-1"),
    ((*URL, "--repeats", "0"), "--repeats", "0"),
    ((*URL, "--fixed-lengths", "128"), "--fixed-lengths", "'128'"),
    ((*URL, "--fixed-lengths", "0,64"), "--fixed-lengths", "'0,64'"),
    ((*URL, "--fixed-lengths", "a,b"), "--fixed-lengths", "'a,b'"),
    ((*URL, "--fixed-lengths", "1,2,3"), "--fixed-lengths", "'1,2,3'"),
    ((*URL, "--slo", "e2e_p95_ms=0"), "--slo", "'e2e_p95_ms=0'"),
    ((*URL, "--slo", "latency_p95_ms=10"), "--slo", "'latency_p95_ms=10'"),
    ((*URL, "--slo", "ttft_p95=10"), "--slo", "'ttft_p95=10'"),
    ((*URL, "--goodput-min", "1.5"), "--goodput-min", "1.5"),
    ((*URL, "--arrivals", "uniform"), "--arrivals", "'uniform'"),
    ((*URL, "--burstiness", "0"), "--burstiness", "0"),
    ((*URL, "--tensor-parallel", "0"), "--tensor-parallel", "0"),
    ((*URL, "--gpu-profile", "v100"), "--gpu-profile", "'v100': no such profile"),
    (("gpu-1:8000", "--model", "m1"), "URL", "'gpu-1:8000': not an http(s) URL"),
])
def test_a_bad_option_value_is_a_usage_error_naming_the_option_and_the_value(runs, args, option, value):
    calls, _ = runs
    result = probe(*args)
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert "Invalid value for" in text and option in text and value in text, text
    assert "Traceback" not in text and calls == []


@pytest.mark.parametrize("option", ["--mix", "--tokenizer", "--model-dir", "--baseline", "--api-key-file"])
def test_a_file_or_folder_option_that_names_nothing_is_a_usage_error(runs, option, tmp_path):
    calls, _ = runs
    missing = tmp_path / "nothing-here"
    result = probe(*URL, option, str(missing))
    text = " ".join(result.output.split())
    assert result.exit_code == 2 and f"Invalid value for '{option}'" in text and str(missing) in text, text
    assert "does not exist" in text and calls == []


@pytest.mark.parametrize(("option", "kind"), [("--mix", "directory"), ("--baseline", "directory"),
                                              ("--save-baseline", "directory"), ("--model-dir", "file"),
                                              ("--out-dir", "file")])
def test_a_file_option_given_a_folder_or_a_folder_option_given_a_file_is_a_usage_error(runs, option, kind, files):
    calls, _ = runs
    path = files if kind == "directory" else files / "baseline.json"
    result = probe(*URL, option, str(path))
    text = " ".join(result.output.split())
    assert result.exit_code == 2 and f"Invalid value for '{option}'" in text and f"is a {kind}" in text, text
    assert calls == []


@pytest.mark.parametrize(("args", "message"), [
    ((), "give either a URL (with --model) or --inventory INV"),
    (("http://gpu-1:8000", "--inventory", "inventories/lab.py"), "give either a URL (with --model) or --inventory"),
    (("http://gpu-1:8000",), "http://gpu-1:8000: --model is missing (fix: the served model name"),
    ((*URL, "--search", "--requests", "5"), "--requests 5 with --search: a search needs sustained load"),
    ((*URL, "--limit", "lab-c1"), "--limit lab-c1 with a URL: --limit chooses hosts of an inventory"),
    (("--inventory", "inventories/lab.py", "--gpu-profile", "h200_141gb_x1", "--tensor-parallel", "1"),
     "--gpu-profile, --tensor-parallel with --inventory: for a URL only; each inventory host's come from its "
     "group data"),
    (("--inventory", "inventories/lab.py", "--model", "m1"), "--model with --inventory"),
    ((*URL, "--data", "probe_check_rps=3"), "--data probe_check_rps=3 with a URL: --data sets inventory hosts'"),
    ((*URL, "--instances"), "--instances with a URL: a host's instances come from its vllm_layout in an inventory"),
    ((*URL, "--trace", "pyproject.toml", "--search", "--rate", "3"), "--trace with --search, --rate: a trace brings "
     "its own timing and lengths (fix: --speed to replay it faster or slower"),
    ((*URL, "--speed", "2"), "--speed 2 without --trace: it scales a trace's timing"),
])
def test_options_that_cannot_go_together_are_a_usage_error(runs, args, message):
    calls, _ = runs
    result = probe(*args)
    text = " ".join(result.output.split())
    assert result.exit_code == 2 and f"Error: {message}" in text, text
    assert calls == []


def test_fixed_lengths_without_a_mix_are_one_greedy_class_as_vllm_bench(runs, tmp_path):
    """Not the fleet's five classes made identical (temperature 0.7, their SLOs): one class, greedy, the
    overall SLOs only."""
    calls, _ = runs
    result = probe(*URL, "--fixed-lengths", "128,64", "--out-dir", str(tmp_path))
    assert result.exit_code == 0, result.output
    [call] = calls
    fixed = RequestClass(name="fixed", share=1.0, prompt_tokens=128, output_tokens=64, temperature=0.0)
    assert call["config"].mix == [fixed] and call["config"].slo == DEFAULTS["probe_slo"]
    assert call["fixed"] == {"prompt_tokens": 128, "output_tokens": 64}


def test_a_trace_replay_passes_the_file_speed_and_warm_up(runs, tmp_path):
    calls, _ = runs
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 3}\n')
    result = probe(*URL, "--trace", str(trace), "--speed", "2.5", "--warmup", "1", "--out-dir", str(tmp_path))
    assert result.exit_code == 0, result.output
    [call] = calls
    assert (call["trace"], call["speed"], call["trace_warmup_s"]) == (trace, 2.5, 1.0)


def test_probe_help_is_the_measuring_commands_and_usage_reads_as_typed(runs):
    result = probe("--help")
    assert result.exit_code == 0 and "--trace" in result.output and "Usage: main probe [OPTIONS] [URL]" in result.output
    assert "llmfleet probe mix LOG" in " ".join(result.output.split())


def test_probe_mix_prints_group_data_and_writes_a_mix_file(tmp_path):
    log = tmp_path / "log.csv"
    rows = ["arrival_s,prompt_tokens,output_tokens,temperature"]
    rows += [f"{i},{20 + i % 5},{10 + i % 3},0.7" for i in range(30)]
    rows += [f"{30 + i},{900 + 10 * (i % 7)},{300 + i % 11},0" for i in range(10)]
    log.write_text("\n".join(rows) + "\n")
    out = tmp_path / "mix.yaml"
    result = CliRunner().invoke(main, ["probe", "mix", str(log), "--classes", "2", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "probe_mix = [" in result.output and "'name': 'short', 'share': 0.75" in result.output
    from llmfleet.probe.config import load_mix

    mix = load_mix(out)
    assert [(c.name, c.share, c.temperature) for c in mix] == [("short", 0.75, 0.7), ("long", 0.25, 0.0)]
    result = CliRunner().invoke(main, ["probe", "mix", str(log), "--classes", "99"])
    assert result.exit_code == 2 and "--classes" in result.output
