"""Serving layouts (llmfleet/vllm_layout.py): derived from the GPU profile, and every bad layout refused
with the host, the setting, the value and the fix, before any host is touched."""

from pathlib import Path

import pytest

from llmfleet import vllm_layout
from llmfleet.schema import defaults as schema_defaults
from llmfleet.settings import SettingsError, validate

ROOT = Path(__file__).resolve().parents[2]
MODEL = {"name": "m", "version": "1", "source": "https://models.internal/m-1.tar", "sha256": "a" * 64,
         "torch_dtype": "float16", "num_attention_heads": 40}  # a 13B model: 40 heads


def data(**override) -> dict:
    """group_data/all.py (8 x V100 SXM2, the DGX-1 cube-mesh) serving a 13B model."""
    d = schema_defaults()
    d = {k: v for k, v in d.items() if not k.startswith("__")} | {"vllm_model": MODEL}
    d["vllm_flags"] = {k: v for k, v in d["vllm_flags"].items() if k != "tensor-parallel-size"}
    return d | override


def ok(**override):
    return validate("gpu-3", data(**override))


def refused(**override) -> str:
    with pytest.raises(SettingsError) as exc:
        validate("gpu-3", data(**override))
    assert str(exc.value).startswith("host gpu-3: ")
    return str(exc.value)


def groups(settings) -> list[list[int]]:
    return [i.gpus for i in vllm_layout.instances(settings)]


def test_no_layout_is_the_single_unit_of_before():
    settings = validate("gpu-3", data(vllm_flags={"tensor-parallel-size": 8, "dtype": "half"},
                                      vllm_model=MODEL | {"num_attention_heads": 32}))
    assert vllm_layout.instances(settings) is None
    assert vllm_layout.service_ports(settings) == {"vllm_port": 8000, "gateway_agent_port": 8406,
                                              "host_service_ports.node_exporter": 9100,
                                              "host_service_ports.prometheus": 9090,
                                              "host_service_ports.dcgm_exporter": 9400}


def test_shorthands_on_the_dgx1_cube_mesh_follow_its_nvlink_and_numa_nodes():
    four_by_two = ok(vllm_layout="4x2")
    assert groups(four_by_two) == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert [(i.name, i.port, i.tensor_parallel_size, i.unit_name) for i in vllm_layout.instances(four_by_two)][:2] == \
        [("a", 8001, 2, "vllm-a.service"), ("b", 8002, 2, "vllm-b.service")]
    assert groups(ok(vllm_layout="2x4")) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert groups(ok(vllm_layout="8x1", vllm_layout_first_port=9001)) == [[g] for g in range(8)]
    assert [i.port for i in vllm_layout.instances(ok(vllm_layout="2x4", vllm_layout_first_port=7000))] == [7000, 7001]


def test_a_shorthand_that_does_not_fit_the_board_is_refused_with_the_groups_that_do():
    # 8 GPUs as one: the cube-mesh leaves pairs without NVLink (0-5, 0-6, ...), and it spans both nodes
    msg = refused(vllm_layout="1x8")
    assert "vllm_layout = '1x8': there are no 1 disjoint groups of 8 GPUs NVLink-connected and on one NUMA node" \
        in msg and "the groups of 8 that are: none" in msg
    assert "vllm_layout_numa_span" not in msg  # spanning the nodes would not connect 0-5 either
    # 2 x 4 with a group across the nodes would fit if spanning were allowed (0,1,2,3 and 4,5,6,7 do):
    # the fix names it only where it would help
    msg = refused(vllm_layout="2x4", gpu_profiles=data()["gpu_profiles"] | {"v100_sxm2_32gb_x8": data()[
        "gpu_profiles"]["v100_sxm2_32gb_x8"] | {"gpu_numa_nodes": [0, 0, 0, 1, 0, 1, 1, 1]}})
    assert "or vllm_layout_numa_span = True to let groups span NUMA nodes" in msg
    assert groups(ok(vllm_layout="1x4")) == [[0, 1, 2, 3]]
    msg = refused(vllm_layout="3x4")
    assert "3 x 4 = 12 GPUs, more than the 8 of Tesla V100-SXM2-32GB" in msg


def test_a_shorthand_needs_a_gpu_profile():
    msg = refused(vllm_layout="2x1", gpu_profile=None)
    assert "vllm_layout = '2x1': a shorthand derives instances from the GPU profile" in msg
    assert "fix: list the instances, with 'cpus'" in msg


@pytest.mark.parametrize("instances,expected", [
    # GPU sets disjoint and within the profile's count
    ([{"name": "a", "gpus": [0, 1], "port": 8001}, {"name": "b", "gpus": [1, 2], "port": 8002}],
     "vllm_layout[1] (b).gpus = [1, 2]: GPU 1 is instance a's too (fix: each GPU in one instance only)"),
    ([{"name": "a", "gpus": [6, 8], "port": 8001}],
     "vllm_layout[0] (a).gpus = [6, 8]: GPU [8] beyond the 8 GPUs of profile v100_sxm2_32gb_x8 (indexes 0-7)"),
    ([{"name": "a", "gpus": [], "port": 8001}], "an instance on a Tesla V100-SXM2-32GB host needs GPUs"),
    ([{"name": "a", "gpus": [0, 0], "port": 8001}], "(a).gpus = [0, 0]: names a GPU twice"),
    # parallel sizes match the GPU count and divide the attention heads (40: not by 8 or 3)
    ([{"name": "a", "gpus": [0, 1, 2], "port": 8001, "pipeline_parallel_size": 2}],
     "vllm_layout[0] (a).pipeline_parallel_size = 2: does not divide its 3 GPUs (fix: a divisor of 3)"),
    ([{"name": "a", "gpus": [0, 1, 2], "port": 8001}],
     "(a).gpus = [0, 1, 2]: tensor-parallel size 3 (3 GPUs / 1 pipeline stages) does not divide the model's 40 "
     "attention heads (vllm_model.num_attention_heads) (fix: a tensor-parallel size in [1, 2, 4, 5, 8])"),
    # a group across a pair without NVLink: refused with the groups that are
    ([{"name": "a", "gpus": [0, 5], "port": 8001, "pipeline_parallel_size": 1}],
     "vllm_layout[0] (a).gpus = [0, 5]: not every pair of these GPUs is NVLink-connected on v100_sxm2_32gb_x8 "
     "(its nvlink_pairs); tensor parallelism would run its all-reduce over PCIe (fix: a group that is: [0,1], "
     "[0,2], [0,3], [0,4], [1,2], [1,3], [1,5]"),
    # a group across NUMA nodes (0-4 is NVLink, but GPU 4 is on the second CPU)
    ([{"name": "a", "gpus": [0, 4], "port": 8001}],
     "vllm_layout[0] (a).gpus = [0, 4]: spans NUMA nodes [0, 1] (gpu_numa_nodes of v100_sxm2_32gb_x8) (fix: GPUs "
     "of one node: [0,1], [0,2], [0,3], [1,2], [1,3], [2,3], [4,5], [4,6], [4,7], [5,6], [5,7], [6,7], or "
     "vllm_layout_numa_span = True to serve it across nodes)"),
    # names
    ([{"name": "a", "gpus": [0], "port": 8001}, {"name": "a", "gpus": [1], "port": 8002}],
     "vllm_layout = 'a': two instances have this name"),
    # every port the host's services use is unique
    ([{"name": "a", "gpus": [0], "port": 8000}],
     "port 8000 is taken twice on the host: by vllm_port and by vllm_layout instance a"),
    ([{"name": "a", "gpus": [0], "port": 8001}, {"name": "b", "gpus": [1], "port": 9100}],
     "port 9100 is taken twice on the host: by vllm_layout instance b and by host_service_ports.node_exporter"),
    ([{"name": "a", "gpus": [0], "port": 8404}],
     "port 8404 is taken twice on the host: by vllm_layout instance a and by frontdoor_metrics_port"),
])
def test_each_bad_layout_is_refused_naming_setting_value_and_fix(instances, expected):
    assert expected in refused(vllm_layout=instances)


def test_a_numa_span_passes_when_the_data_says_so():
    settings = ok(vllm_layout=[{"name": "a", "gpus": [0, 4], "port": 8001}], vllm_layout_numa_span=True)
    assert groups(settings) == [[0, 4]]
    # and the shorthand may then use groups across nodes, still NVLink-connected
    assert groups(ok(vllm_layout="4x2", vllm_layout_numa_span=True)) == [[0, 1], [2, 3], [4, 5], [6, 7]]


def test_the_layout_sets_the_parallel_sizes_so_vllm_flags_may_not():
    msg = refused(vllm_layout="4x2", vllm_flags={"tensor-parallel-size": 2})
    assert ("vllm_flags.tensor-parallel-size = 2: the layout sets it for each instance from its GPUs (fix: leave it "
            "out of vllm_flags ('tensor-parallel-size': None)") in msg
    ok(vllm_layout="4x2", vllm_flags={"tensor-parallel-size": None})


def test_the_port_of_an_exporter_is_checked_without_a_layout_too():
    assert "port 9100 is taken twice on the host: by vllm_port and by host_service_ports.node_exporter" in \
        refused(vllm_port=9100)


def test_a_host_without_gpus_lists_cpu_bound_instances():
    settings = ok(gpu_profile=None, vllm_layout=[{"name": "a", "gpus": [], "port": 8001, "cpus": "0"},
                                                 {"name": "b", "gpus": [], "port": 8002, "cpus": "1"}])
    assert [i.cpus for i in vllm_layout.instances(settings)] == ["0", "1"]
    assert "this host has no GPU profile" in refused(
        gpu_profile=None, vllm_layout=[{"name": "a", "gpus": [0], "port": 8001}])


def test_all_problems_are_reported_at_once():
    msg = refused(vllm_layout=[{"name": "a", "gpus": [0, 5], "port": 9090}, {"name": "b", "gpus": [5], "port": 8002}],
                  vllm_flags={"pipeline-parallel-size": 2})
    assert "vllm_flags.pipeline-parallel-size = 2" in msg and "GPU 5 is instance a's too" in msg
    assert "not every pair" in msg and "port 9090 is taken twice" in msg


def test_the_binding_is_the_numa_node_of_the_gpus_or_the_cpus_given():
    settings = ok(vllm_layout="4x2")
    profile = settings.gpu_profiles[settings.gpu_profile]
    nodes = {0: "0-19,40-59", 1: "20-39,60-79"}
    a, _, c, _ = vllm_layout.instances(settings)
    assert vllm_layout.binding(a, profile, nodes) == vllm_layout.Binding(cpus="0-19,40-59", nodes="0")
    assert vllm_layout.binding(c, profile, nodes) == vllm_layout.Binding(cpus="20-39,60-79", nodes="1")
    cpu_bound = vllm_layout.instances(ok(gpu_profile=None, vllm_layout=[{"name": "a", "gpus": [], "port": 8001,
                                                                    "cpus": "1"}]))[0]
    assert vllm_layout.binding(cpu_bound, None, {0: "0-1"}) == vllm_layout.Binding(cpus="1", nodes="0")
    # a profile that does not say where its GPUs are: not bound
    pcie = ok(gpu_profile="v100_pcie_32gb_x8", vllm_layout=[{"name": "a", "gpus": [0, 1], "port": 8001}])
    assert vllm_layout.binding(vllm_layout.instances(pcie)[0], pcie.gpu_profiles["v100_pcie_32gb_x8"], nodes) is None


def test_cpus_the_host_lacks_are_named_at_deploy():
    inst = vllm_layout.instances(ok(gpu_profile=None, vllm_layout=[{"name": "a", "gpus": [], "port": 8001,
                                                               "cpus": "1-3"}]))
    assert vllm_layout.binding_problems("lab-c1", inst, {0: "0-1"}) == [
        "vllm_layout[0] (a).cpus = '1-3': CPUs 2-3 are not on lab-c1 (its NUMA nodes hold 0-1) (fix: CPUs the "
        "host has)"]


@pytest.mark.parametrize("text,cpus", [("0-3,8", [0, 1, 2, 3, 8]), ("5", [5]), ("0-1,1-2", [0, 1, 2]), ("", [])])
def test_cpu_lists_read_and_written_as_the_kernel_does(text, cpus):
    assert vllm_layout.parse_cpulist(text) == cpus
    assert vllm_layout.parse_cpulist(vllm_layout.format_cpulist(cpus)) == cpus


def test_the_front_door_balances_over_the_instances_and_holds_no_secret(tmp_path):
    from llmfleet import frontdoor

    key = tmp_path / "key"
    key.write_text("sk-very-secret\n")
    key.chmod(0o600)
    settings = ok(vllm_layout="2x4", vllm_api_key_file=str(key), frontdoor_timeout_s=1200)
    cfg = frontdoor.render_config(settings, vllm_layout.instances(settings))
    lines = [ln.strip() for ln in cfg.splitlines()]
    for line in ("bind 0.0.0.0:8000", "bind 0.0.0.0:8404", "balance roundrobin", "option httpchk GET /health",
                 "http-check expect status 200", "default-server inter 2000 fall 3 rise 2 weight 100",
                 "server a 127.0.0.1:8001 check", "server b 127.0.0.1:8002 check",
                 "timeout client 1200s", "timeout server 1200s",
                 "http-request use-service prometheus-exporter if { path /metrics }",
                 "stats socket /run/haproxy/admin.sock mode 660 level admin"):
        assert line in lines, line
    assert "sk-very-secret" not in cfg and "server c" not in cfg
    # each instance's own metrics through the metrics port (instances listen on the host only)
    assert "use_backend metrics_a if { path /instances/a/metrics }" in lines
    assert cfg.count("http-request set-path /metrics") == 2
    # each instance on its own through the service port (the probe per instance): the prefix is
    # taken off before the request reaches it, and the key is still its to check
    assert "use_backend instance_b if { path_beg /instances/b/ }" in lines
    assert "http-request replace-path /instances/b(/.*) \\1" in lines
    single = ok(vllm_flags={"dtype": "half", "tensor-parallel-size": 8}, vllm_model=MODEL | {"num_attention_heads": 32})
    with pytest.raises(ValueError, match="no vllm_layout"):
        frontdoor.render_config(single, vllm_layout.instances(single))
