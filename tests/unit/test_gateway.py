"""The fleet gateway's pure parts (llmfleet/gateway.py): its HAProxy configuration over the
inventory's serving hosts, accepted by the distribution's HAProxy (`haproxy -c`); the agent's units;
what a gateway host cannot be; the drain hook's command; and the agent's host script
(llmfleet/remote/gateway_agent.py) against a stand-in for vLLM's /metrics (an HTTP server answering
the two gauges it reads; the lab's real vLLM answers them in tests/integration/test_vllm.py)."""

from __future__ import annotations

import http.server
import json
import subprocess
import threading

import pytest

from llmfleet import gateway
from llmfleet.remote import python_script
from llmfleet.schema import defaults as schema_defaults
from llmfleet.settings import SettingsError, validate

MODEL = {"name": "m", "version": "1", "source": "https://models.internal/m-1.tar", "sha256": "a" * 64,
         "torch_dtype": "float16", "num_attention_heads": 32}


def settings(**override):
    d = {k: v for k, v in schema_defaults().items() if not k.startswith("__")}
    return validate("gw-1", d | {"vllm_model": MODEL} | override)


def fleet():
    """An inventory: two serving hosts (one on another port), a gateway host, a host that does not serve."""
    return [("gpu-2", "10.0.0.12", settings(vllm_port=8100), ["v100", "serving"]),
            ("gpu-1", "10.0.0.11", settings(), ["v100", "serving"]),
            ("gw-1", "10.0.0.2", settings(vllm_enabled=False), ["gateways"]),
            ("build-1", "10.0.0.3", settings(vllm_enabled=False), ["tools"])]


def test_the_gateway_balances_over_every_serving_host_and_asks_each_ones_agent():
    servers = gateway.serving_hosts(fleet(), "gateways")
    assert servers == [gateway.Server("gpu-1", "10.0.0.11", 8000), gateway.Server("gpu-2", "10.0.0.12", 8100)]
    cfg = gateway.render_config(settings(vllm_enabled=False, gateway_check_interval_ms=500,
                                         gateway_agent_interval_ms=250), servers)
    lines = [ln.strip() for ln in cfg.splitlines()]
    for line in ("bind :8000", "bind :8405", "balance roundrobin", "option httpchk GET /health",
                 "http-check expect status 200",
                 "default-server weight 100 inter 500 fall 3 rise 2 agent-check agent-port 8406 agent-inter 250",
                 "server gpu-1 10.0.0.11:8000 check", "server gpu-2 10.0.0.12:8100 check",
                 "http-request use-service prometheus-exporter if { path /metrics }",
                 "stats socket /run/haproxy/admin.sock mode 660 level admin", "retries 3", "option redispatch 1"):
        assert line in lines, line
    assert "gw-1" not in cfg and "build-1" not in cfg
    # no frontend named as the backend: the runtime API's `show stat fleet` would read the frontend's
    # (empty) server list, and verify would see no server at all (seen on the lab's gateway)
    frontends = {ln.split()[1] for ln in lines if ln.startswith("frontend ")}
    assert gateway.BACKEND not in frontends and f"backend {gateway.BACKEND}" in lines


def test_the_distributions_haproxy_accepts_the_configuration(tmp_path):
    cfg = tmp_path / "haproxy.cfg"
    cfg.write_text(gateway.render_config(settings(vllm_enabled=False), gateway.serving_hosts(fleet(), "gateways"))
                   .replace("chroot /var/lib/haproxy\n", "").replace("stats socket /run/haproxy/admin.sock",
                                                                      f"stats socket {tmp_path}/admin.sock"))
    proc = subprocess.run(["haproxy", "-c", "-f", str(cfg)], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_agents_socket_answers_with_its_state_file():
    units = gateway.render_agent(settings(gateway_agent_port=8466))
    socket_unit = units["/etc/systemd/system/llmfleet-gateway-agent.socket"]
    service = units["/etc/systemd/system/llmfleet-gateway-agent@.service"]
    assert "ListenStream=8466" in socket_unit and "Accept=yes" in socket_unit
    assert "ExecStart=/bin/cat /var/lib/llmfleet/gateway-agent/state" in service
    assert "StandardOutput=socket" in service and "DynamicUser=yes" in service


def test_a_gateway_host_that_serves_or_shares_a_port_is_refused_with_the_fix():
    assert gateway.problems(settings(vllm_enabled=False), is_gateway=True) == []
    assert gateway.problems(settings(), is_gateway=False) == []
    (serves,) = gateway.problems(settings(), is_gateway=True)
    assert serves.startswith("the host is in gateway_group 'gateways' and vllm_enabled is True") and "fix:" in serves
    (port,) = gateway.problems(settings(vllm_enabled=False, gateway_metrics_port=9100), is_gateway=True)
    assert port == ("port 9100 is taken twice on the gateway host: by gateway_metrics_port and by "
                    "host_service_ports.node_exporter (fix: give each its own port)")


def test_the_agent_port_is_one_of_a_serving_hosts_ports():
    with pytest.raises(SettingsError, match=r"port 9100 is taken twice on the host: by gateway_agent_port and by "
                                            r"host_service_ports.node_exporter"):
        settings(gateway_agent_port=9100)


def test_the_drain_hook_gets_the_host_and_the_state():
    assert gateway.hook_argv(settings(), "gpu-1", "drain") is None
    s = settings(gateway_drain_hook=["/usr/local/bin/lb", "set", "{host}", "{state}", "--pool=llm-{host}"])
    assert gateway.hook_argv(s, "gpu-1", "drain") == ["/usr/local/bin/lb", "set", "gpu-1", "drain", "--pool=llm-gpu-1"]
    assert gateway.hook_argv(s, "gpu-1", "ready")[3] == "ready"


def test_the_inventory_has_gateways_only_with_a_host_in_the_group():
    assert gateway.has_gateways([g for *_, g in fleet()], "gateways")
    assert not gateway.has_gateways([["v100"], ["tools"]], "gateways")


# --- the agent's host script, against a stand-in for vLLM's /metrics ------------------------------
class StandInMetrics(http.server.BaseHTTPRequestHandler):
    """Answers /metrics with vllm:num_requests_running and vllm:num_requests_waiting, each the next
    of the server's `counts` (the last one repeats)."""

    def do_GET(self):  # noqa: N802 - http.server's name
        counts = self.server.counts  # type: ignore[attr-defined]
        running, waiting = counts[min(self.server.asked, len(counts) - 1)]  # type: ignore[attr-defined]
        self.server.asked += 1  # type: ignore[attr-defined]
        body = (f'# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{{engine="0",model_name="m"}} '
                f'{running}.0\nvllm:num_requests_waiting{{engine="0",model_name="m"}} {waiting}.0\n'
                'vllm:num_requests_waiting_by_reason{reason="capacity"} 7.0\n').encode()
        self.send_response(200)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def metrics():
    def serve(counts):
        server = http.server.HTTPServer(("127.0.0.1", 0), StandInMetrics)
        server.counts, server.asked = counts, 0  # type: ignore[attr-defined]
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server.server_address[1]

    servers: list = []
    yield serve
    for s in servers:
        s.shutdown()


def agent(*args: str) -> dict:
    command = python_script("gateway_agent", *args)
    proc = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=60)
    return json.loads(proc.stdout.splitlines()[-1])


def test_drain_says_drain_then_waits_until_the_hosts_requests_are_done(tmp_path, metrics):
    state = tmp_path / "agent" / "state"
    port = metrics([(2, 1), (1, 0), (0, 0)])
    answer = agent("drain", str(state), "0.1", str(port), "30")
    assert answer["ok"] and answer["why"] == "drained" and answer["requests"] == 0, answer
    assert state.read_text() == "drain\n" and oct(state.stat().st_mode & 0o777) == "0o644"
    answer = agent("ready", str(state), "0.1")
    assert answer["ok"] and state.read_text() == "ready 100%\n"


def test_drain_gives_up_waiting_after_the_timeout_and_says_how_many_were_left(tmp_path, metrics):
    answer = agent("drain", str(tmp_path / "state"), "0", str(metrics([(3, 2)])), "1")
    assert answer["ok"] and answer["requests"] == 5, answer
    assert answer["why"] == "5 request(s) still running or waiting after 1 s (vllm_drain_timeout_s): restarted anyway"


def test_drain_of_a_host_whose_vllm_does_not_answer_has_nothing_to_wait_for(tmp_path):
    answer = agent("drain", str(tmp_path / "state"), "0", "9", "30")
    assert answer["ok"] and answer["requests"] is None and "does not answer" in answer["why"], answer



def test_a_held_host_stays_drained_through_a_rolls_ready_until_its_release(tmp_path, metrics):
    state = tmp_path / "agent" / "state"
    port = metrics([(0, 0)])
    answer = agent("hold", str(state), "0", str(port), "30", "llmfleet tune since 2026-12-07T13:00:00+00:00")
    assert answer["ok"] and state.read_text() == "drain\n", answer
    # a roll of the host (a tune's candidate deploy) puts it back as it ends: the hold keeps it out
    answer = agent("ready", str(state), "0")
    assert answer["ok"] and state.read_text() == "drain\n", answer
    assert answer["why"].startswith("held out of rotation by llmfleet tune since 2026-12-07T13:00:00+00:00"), answer
    answer = agent("release", str(state), "0")
    assert answer["ok"] and state.read_text() == "ready 100%\n" and not (state.parent / "hold").exists(), answer
    assert agent("ready", str(state), "0", "50")["ok"] and state.read_text() == "ready 50%\n"  # an ordinary roll again
