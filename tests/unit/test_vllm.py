"""The vLLM service as data: flags, unit, paths, bad input, monitoring (no host needed)."""

import os
from pathlib import Path

import pytest
import yaml

from llmfleet import monitoring, vllm
from llmfleet.schema import defaults as schema_defaults
from llmfleet.settings import SettingsError, validate

ROOT = Path(__file__).resolve().parents[2]
MODEL = {"name": "llama-3.1-8b-instruct", "version": "2024-07-23", "source": "https://models.internal/l.tar",
         "sha256": "a" * 64, "torch_dtype": "bfloat16", "num_attention_heads": 32}


def data(**override) -> dict:
    d = schema_defaults()
    return {k: v for k, v in d.items() if not k.startswith("__")} | {"vllm_model": MODEL} | override


def settings(**override):
    return validate("gpu-1", data(**override))


def refused(**override) -> str:
    with pytest.raises(SettingsError) as exc:
        validate("gpu-1", data(**override))
    return str(exc.value)


def test_flags_render_as_arguments():
    s = settings(vllm_flags={"dtype": "half", "max_model_len": 8192, "enable-prefix-caching": True,
                             "enable-chunked-prefill": False, "quantization": None, "tensor-parallel-size": 8})
    assert vllm.flag_args(s) == ["--dtype", "half", "--max-model-len", "8192", "--enable-prefix-caching",
                                 "--no-enable-chunked-prefill", "--tensor-parallel-size", "8"]
    cmd = vllm.command(s)
    assert cmd[:3] == [f"/opt/llmfleet/vllm/envs/{vllm.env_id(s)}/bin/python3", "-m",
                       "vllm.entrypoints.openai.api_server"]
    assert cmd[3:11] == ["--model", "/data/models/llama-3.1-8b-instruct/current", "--served-model-name", "default",
                         "--host", "0.0.0.0", "--port", "8000"]


def test_environment_id_follows_the_package_set():
    a, b = settings(), settings(vllm_packages=["vllm==0.19.1", "nvidia-ml-py==13.580.82"])
    assert vllm.env_id(a) != vllm.env_id(b) and len(vllm.env_id(a)) == 12
    assert vllm.env_id(a) == vllm.env_id(settings())


def test_unit_is_hardened_and_holds_no_secret(tmp_path):
    key = tmp_path / "key"
    key.write_text("sk-very-secret\n")
    key.chmod(0o600)
    s = settings(vllm_api_key_file=str(key), vllm_env={"NCCL_DEBUG": "WARN", "ODD": "a b %x"})
    unit = vllm.render_unit(s, gpu=True)
    assert "sk-very-secret" not in unit
    assert f"EnvironmentFile={vllm.API_KEY_FILE}" in unit
    for line in ("NoNewPrivileges=yes", "ProtectSystem=strict", "PrivateTmp=yes", "Restart=on-failure",
                 "StartLimitBurst=5", "TimeoutStartSec=900", "LimitNOFILE=65536", "LimitMEMLOCK=infinity",
                 "User=vllm", "Environment=NCCL_DEBUG=WARN", 'Environment="ODD=a b %%x"',
                 "After=network-online.target nvidia-persistenced.service llmfleet-gpu-clocks.service"):
        assert line + "\n" in unit, line
    assert "ExecStart=" + " ".join(vllm.command(s)) + "\n" in unit
    assert vllm.api_key_env(s) == "VLLM_API_KEY=sk-very-secret\n"


def test_an_instance_unit_has_its_gpus_port_sizes_and_numa_binding_and_all_the_single_unit_has(tmp_path):
    from llmfleet import vllm_layout

    key = tmp_path / "key"
    key.write_text("sk-very-secret\n")
    key.chmod(0o600)
    s = settings(vllm_layout="4x2", vllm_api_key_file=str(key), vllm_model=MODEL | {"torch_dtype": "float16"},
                 vllm_flags={"dtype": "half", "max-model-len": 8192})
    c = vllm_layout.instances(s)[2]
    bound = vllm_layout.binding(c, s.gpu_profiles[s.gpu_profile], {0: "0-19,40-59", 1: "20-39,60-79"})
    unit = vllm.render_unit(s, gpu=True, instance=c, binding=bound)
    assert vllm.unit_path(c) == "/etc/systemd/system/vllm-c.service"
    assert "Description=vLLM OpenAI API server (default, vLLM 0.19.1), instance c on port 8003\n" in unit
    for line in ("Environment=CUDA_DEVICE_ORDER=PCI_BUS_ID", "Environment=CUDA_VISIBLE_DEVICES=4,5",
                 "CPUAffinity=20-39,60-79", "NUMAPolicy=bind", "NUMAMask=1"):
        assert line + "\n" in unit, line
    args = vllm.server_args(s, c)
    assert args[4:10] == ["--host", "127.0.0.1", "--port", "8003", "--tensor-parallel-size", "2"]
    assert "--pipeline-parallel-size" not in args
    assert "ExecStart=" + " ".join(vllm.command(s, c)) + "\n" in unit
    # everything the single unit has: hardening, limits, key file, restart policy
    single = vllm.render_unit(s, gpu=True)
    kept = [ln for ln in single.splitlines() if not ln.startswith(("Description=", "ExecStart="))]
    assert [ln for ln in kept if ln not in unit.splitlines()] == []
    assert "sk-very-secret" not in unit and f"EnvironmentFile={vllm.API_KEY_FILE}\n" in unit
    # the single unit is not bound and sees every GPU
    assert "CPUAffinity" not in single and "CUDA_VISIBLE_DEVICES" not in single


def test_an_instance_with_pipeline_stages_and_one_without_a_known_numa_node():
    from llmfleet import vllm_layout

    s = settings(gpu_profile="v100_pcie_32gb_x8", vllm_model=MODEL | {"torch_dtype": "float16"},
                 vllm_flags={"dtype": "half"},
                 vllm_layout=[{"name": "big", "gpus": [0, 1, 2, 3], "port": 8001, "pipeline_parallel_size": 2}])
    big = vllm_layout.instances(s)[0]
    assert vllm.server_args(s, big)[8:12] == ["--tensor-parallel-size", "2", "--pipeline-parallel-size", "2"]
    unit = vllm.render_unit(s, gpu=True, instance=big, binding=None)
    assert "# not bound: the GPU profile does not say which NUMA node its GPUs are on" in unit
    assert "CPUAffinity" not in unit


def test_systemd_quoting():
    assert vllm.systemd_quote("--max-model-len") == "--max-model-len"
    assert vllm.systemd_quote('{"a": 1}') == '"{\\"a\\": 1}"'
    assert vllm.systemd_quote("50%") == "50%%" and vllm.systemd_quote("$HOME") == '"$$HOME"'


@pytest.mark.parametrize("flags,version,expected", [
    ({"scheduler-policy": "fcfs"}, "0.19.1",
     "vllm_flags.scheduler-policy: not an option of vLLM 0.19.1 (fix: the option is --scheduling-policy"),
    ({"max_waiting_time": 5}, "0.19.1", "vllm_flags.max-waiting-time: not an option"),
    ({"--ray-address": "auto"}, "0.19.1", "Ray reads RAY_ADDRESS; set it in vllm_env"),
    ({"prefix_cache_capacity": 10}, "0.19.1", "vllm_flags.prefix-cache-capacity: not an option"),
    ({"use-v2-block-manager": True}, "0.10.1", "vllm_flags.use-v2-block-manager: not an option of vLLM 0.10.1 "
                                               "(fix: removed in 0.10.0"),
    ({"disable-log-requests": True}, "0.19.1", "removed in 0.17.0"),
    ({"swap-space": 4}, "0.19.1", "removed in 0.18.0"),
    ({"port": 9000}, "0.19.1", "vllm_flags.port: set by llmfleet from vllm_port"),
    ({"api-key": "x"}, "0.19.1", "vllm_flags.api-key: set by llmfleet from vllm_api_key_file"),
])
def test_known_bad_flags_are_refused_before_any_host(flags, version, expected):
    msg = refused(vllm_flags={"dtype": "half", "tensor-parallel-size": 8} | flags, vllm_version=version,
                  vllm_packages=[f"vllm=={version}"])
    assert expected in msg


def test_flags_valid_in_their_versions_pass():
    settings(vllm_flags={"dtype": "half", "tensor-parallel-size": 8, "use-v2-block-manager": True},
             vllm_version="0.9.2", vllm_packages=["vllm==0.9.2"])
    settings(vllm_flags={"dtype": "half", "tensor-parallel-size": 8, "swap-space": 4}, vllm_version="0.17.1",
             vllm_packages=["vllm==0.17.1"])


def test_host_parser_report_names_the_flag_and_the_closest_option():
    s = settings()
    report = {"version": "0.19.1", "unknown": ["--max-num-seqz"], "options": ["--max-num-seqs", "--max-model-len"],
              "error": None}
    assert vllm.host_flag_problems(s, report) == [
        "vllm_flags.max-num-seqz: vLLM 0.19.1 installed on the host has no --max-num-seqz "
        "(fix: did you mean --max-num-seqs?)"]
    report = {"version": "0.19.1", "unknown": [], "options": [], "error": "argument --max-model-len: invalid int"}
    assert vllm.host_flag_problems(s, report) == [
        "vllm_flags: vLLM 0.19.1 refuses the arguments: argument --max-model-len: invalid int"]


@pytest.mark.parametrize("override,expected", [
    ({"vllm_model": None}, "vllm_model = None: no model to serve"),
    ({"vllm_model": MODEL | {"sha256": None}}, "vllm_model.sha256 = None: a https source must be pinned"),
    ({"vllm_model": MODEL | {"source": "hf://meta-llama/Llama-3.1-8B-Instruct", "sha256": None}},
     "vllm_model.revision = None: a Hugging Face model must be pinned to a commit"),
    ({"vllm_model": MODEL | {"source": "ftp://x/y"}}, "vllm_model.source = 'ftp://x/y'"),
    ({"vllm_packages": ["vllm==0.18.0"]}, "pins vllm==0.18.0 but vllm_version = '0.19.1' (fix: make them the same)"),
    ({"vllm_packages": ["torch==2.10.0"]}, "pins no vllm (fix: add 'vllm==0.19.1')"),
    ({"vllm_packages": ["vllm>=0.19"]}, "vllm_packages.0 = 'vllm>=0.19': not a pinned requirement"),
    ({"vllm_env": {"HF_TOKEN": "hf_abc"}}, "vllm_env.HF_TOKEN: looks like a secret"),
    ({"vllm_env": {"A": "x\nExecStartPre=/bin/sh"}}, "vllm_env.A = 'x\\nExecStartPre=/bin/sh': not one line"),
    ({"vllm_port": 70000}, "vllm_port = 70000"),
    ({"vllm_flags": {"dtype": "half\nUser=root", "tensor-parallel-size": 8}}, "vllm_flags.dtype"),
    ({"vllm_alerts": {"queue_waiting": 50, "kv_cache_usage": 1.5, "error_ratio": 0.05, "e2e_latency_p95_s": 30}},
     "vllm_alerts.kv_cache_usage = 1.5"),
])
def test_service_settings_refused(override, expected):
    assert expected in refused(**override)


def test_api_key_file_must_exist_and_be_private(tmp_path):
    key = tmp_path / "key"
    assert "cannot be read here" in refused(vllm_api_key_file=str(key))
    key.write_text("k\n")
    os.chmod(key, 0o644)
    assert f"readable by others (mode 644) (fix: chmod 600 {key})" in refused(vllm_api_key_file=str(key))
    key.write_text("\n")
    os.chmod(key, 0o600)
    assert "empty (fix: put the key in it" in refused(vllm_api_key_file=str(key))


def test_disabled_host_needs_no_model():
    validate("gpu-1", data(vllm_enabled=False, vllm_model=None))


def test_monitoring_names_follow_each_hosts_version():
    old = settings(vllm_version="0.10.1", vllm_packages=["vllm==0.10.1"])
    new = settings()
    off = settings(vllm_enabled=False)
    files = monitoring.render("inventories/prod.py", {"gpu-1": (old, "10.0.0.1"), "gpu-2": (new, "10.0.0.2"),
                                                      "gpu-3": (off, "10.0.0.3")})
    targets = yaml.safe_load(files["vllm-targets.yml"])
    assert [t["targets"] for t in targets] == [["10.0.0.1:8000"], ["10.0.0.2:8000"]]
    rules = yaml.safe_load(files["vllm-alerts.yml"])
    by_version = {g["name"]: " ".join(r["expr"] for r in g["rules"]) for g in rules["groups"]}
    assert "vllm:gpu_cache_usage_perc" in by_version["llmfleet-vllm-0.10.1"]
    assert "vllm:kv_cache_usage_perc" in by_version["llmfleet-vllm-0.19.1"]
    assert "vllm:kv_cache_usage_perc" not in by_version["llmfleet-vllm-0.10.1"]
    assert "engine_" not in files["vllm-alerts.yml"]
    for g in rules["groups"]:
        assert {r["alert"] for r in g["rules"]} == {"VllmDown", "VllmQueueBacklog", "VllmKvCacheFull",
                                                      "VllmErrorRate", "VllmLatencyHigh"}
    scrape = {j["job_name"]: j for j in yaml.safe_load(files["prometheus.yml"])["scrape_configs"]}
    assert scrape["vllm"]["file_sd_configs"] == [{"files": ["vllm-targets.yml"]}]


def test_monitoring_scrapes_each_instance_of_a_layout_through_its_front_door():
    laid_out = settings(vllm_layout="2x4", vllm_model=MODEL | {"torch_dtype": "float16"}, vllm_flags={"dtype": "half"})
    files = monitoring.render("inventories/prod.py", {"gpu-1": (laid_out, "10.0.0.1"),
                                                      "gpu-2": (settings(), "10.0.0.2")})
    targets = yaml.safe_load(files["vllm-targets.yml"])
    assert [(t["targets"], t["labels"].get("vllm_instance"), t["labels"].get("gpus"),
             t["labels"].get("__metrics_path__")) for t in targets] == [
        (["10.0.0.1:8404"], "a", "0,1,2,3", "/instances/a/metrics"),
        (["10.0.0.1:8404"], "b", "4,5,6,7", "/instances/b/metrics"),
        (["10.0.0.2:8000"], None, None, None)]
    assert targets[0]["labels"]["host"] == "gpu-1" and targets[0]["labels"]["instance"] == "gpu-1/a"
    assert yaml.safe_load(files["frontdoor-targets.yml"]) == [{"targets": ["10.0.0.1:8404"],
                                                               "labels": {"host": "gpu-1",
                                                                          "gpu_profile": "v100_sxm2_32gb_x8"}}]
    jobs = yaml.safe_load(files["prometheus.yml"])["scrape_configs"]
    assert [j["job_name"] for j in jobs] == ["node", "dcgm", "vllm", "frontdoor"]


GOLDEN = ROOT / "tests" / "unit" / "data" / "vllm_units"


def test_a_unit_without_nvswitch_renders_byte_for_byte_as_before_fabric_manager():
    """tests/unit/data/vllm_units/ holds the units as rendered before the fabric_manager component
    (a V100 host's defaults, a host without GPUs, a layout instance): a host without NVSwitch sees no change,
    so a deploy restarts nothing there."""
    from llmfleet import vllm_layout

    s = settings()
    assert vllm.render_unit(s, gpu=True) == (GOLDEN / "gpu.service").read_text()
    assert vllm.render_unit(s, gpu=False) == (GOLDEN / "nogpu.service").read_text()
    s2 = settings(vllm_layout="4x2", vllm_model=MODEL | {"torch_dtype": "float16"},
                  vllm_flags={"dtype": "half", "max-model-len": 8192})
    c = vllm_layout.instances(s2)[2]
    bound = vllm_layout.binding(c, s2.gpu_profiles[s2.gpu_profile], {0: "0-19,40-59", 1: "20-39,60-79"})
    assert vllm.render_unit(s2, gpu=True, instance=c, binding=bound) == \
        (GOLDEN / "instance.service").read_text()


def test_on_an_nvswitch_board_the_units_start_after_fabric_manager():
    from llmfleet import vllm_layout

    s = settings(gpu_profile="h100_sxm5_80gb_x8", nvidia_driver_flavour="open", cuda_toolkit_version="13.0")
    unit = vllm.render_unit(s, gpu=True)
    assert ("After=network-online.target nvidia-persistenced.service llmfleet-gpu-clocks.service "
            "nvidia-fabricmanager.service\n") in unit
    assert "Wants=network-online.target nvidia-fabricmanager.service\n" in unit
    # every line of the unit without NVSwitch is still there, but the two it extends
    before = settings(gpu_profile="h200_141gb_x1", nvidia_driver_flavour="open", cuda_toolkit_version="13.0",
                      vllm_flags={"tensor-parallel-size": 1})
    plain = vllm.render_unit(before, gpu=True)
    assert [ln for ln in plain.splitlines() if ln not in unit.splitlines()] == [
        "After=network-online.target nvidia-persistenced.service llmfleet-gpu-clocks.service",
        "Wants=network-online.target", "ExecStart=" + " ".join(vllm.command(before))]
    # an instance of a layout too; and a host without GPUs (the lab) never waits for it
    s4 = settings(gpu_profile="h100_sxm5_80gb_x8", nvidia_driver_flavour="open", cuda_toolkit_version="13.0",
                  vllm_layout="4x2", vllm_flags={"tensor-parallel-size": None})
    inst = vllm_layout.instances(s4)[0]
    assert "nvidia-fabricmanager.service" in vllm.render_unit(s4, gpu=True, instance=inst, binding=None)
    assert "fabricmanager" not in vllm.render_unit(s, gpu=False)
