# llmfleet: `make demo` (lab up, deploy, verify, report) and `make test` (all tests).
# Both install what they need: Debian packages (as root) and the Python environment in .venv.

VENV      := .venv
BIN       := $(VENV)/bin
# Debian packages the lab needs on this machine (see llmfleet/lab/config.py: TOOLS, VM_TOOLS), and
# the browser the audit page's test renders it in (tests/browser/). prometheus (with promtool),
# prometheus-node-exporter and rsyslog: the lab's Prometheus, audit node exporter and syslog
# receiver, and the unit tests' promtool, node exporter and rsyslogd -N1 (the lab runs its own on
# ports of its own: a system one the install starts can keep 9090, 9100 and 514). fio: the unit
# tests run the model storage's host script with it (tests/unit/test_onboarding_checks.py). haproxy:
# the unit tests check the gateway's rendered configuration with `haproxy -c` (tests/unit/test_gateway.py).
SYSDEPS   := systemd-container mmdebstrap openssh-client iproute2 chrony apt-cacher-ng \
             qemu-system-x86 qemu-utils e2fsprogs chromium prometheus prometheus-node-exporter rsyslog fio haproxy
DEMO_HOSTS ?= 3

.PHONY: demo test unit browser integration sysdeps venv lint settings-doc lab-down verify-device burnin-device device-site \
        device-wheels

sysdeps:
	@missing=$$(for p in $(SYSDEPS); do \
	  dpkg-query -W -f='$${db:Status-Status}' $$p 2>/dev/null | grep -qx installed || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing system packages:" $$missing; \
	  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$missing; \
	else echo "system packages: present"; fi

$(BIN)/.installed: pyproject.toml
	test -x $(BIN)/python || python3 -m venv $(VENV)
	$(BIN)/pip install -q -e '.[test]'
	touch $@

venv: $(BIN)/.installed

demo: sysdeps venv
	$(BIN)/llmfleet lab up --hosts $(DEMO_HOSTS) --vm --gateways 1
	$(BIN)/llmfleet deploy inventories/lab.py  # the hosts not waiting for each other: the VM does not hold the containers back
	$(BIN)/pytest verify/ -p no:cacheprovider -m "not acceptance" --hosts="$$($(BIN)/llmfleet lab hosts --testinfra)"
	$(BIN)/llmfleet lab status
	@echo "What each serving host carries (the throughput probe, one short trial per host; reports in reports/probe/):"
	$(BIN)/llmfleet probe --inventory inventories/lab.py --limit lab_containers
	@echo "The fleet audit (hardware, config and state drift per host; reports in reports/audit/):"
	$(BIN)/llmfleet audit inventories/lab.py
	@echo "Each container host serves the lab's tiny model; a completion from lab-c1:"
	@curl -sS http://10.77.0.11:8000/v1/completions -H "Authorization: Bearer $$(cat /var/lib/llmfleet/lab/api-key)" \
	  -H 'Content-Type: application/json' -d '{"model": "tiny-llama", "prompt": "The fleet", "max_tokens": 8}'; echo
	@echo "The same through the fleet gateway (lab-gw1: HAProxy in front of every serving host; a roll drains each host there first):"
	@curl -sS http://10.77.0.61:8000/v1/completions -H "Authorization: Bearer $$(cat /var/lib/llmfleet/lab/api-key)" \
	  -H 'Content-Type: application/json' -d '{"model": "tiny-llama", "prompt": "The fleet", "max_tokens": 8}'; echo
	@echo "Try it yourself:"
	@echo "  curl http://10.77.0.11:8000/v1/completions -H \"Authorization: Bearer \$$(cat /var/lib/llmfleet/lab/api-key)\" -H 'Content-Type: application/json' -d '{\"model\": \"tiny-llama\", \"prompt\": \"The fleet\", \"max_tokens\": 8}'"
	@echo "The lab stays up: try 'pyinfra inventories/lab.py exec -- uname -r'; remove it with 'make lab-down'."
	@echo "The lab's Prometheus (it loads what 'llmfleet monitoring --inventory inventories/lab.py' renders):"
	$(BIN)/llmfleet lab prometheus

# (sysdeps: promtool, the node exporter and rsyslogd check what tests/unit/test_monitoring.py and
# test_telemetry.py render)
unit: sysdeps venv
	$(BIN)/pytest tests/unit -q -p no:cacheprovider -n auto
	# pyinfra-style operation and fact tests: a process of their own (pyinfra_cli patches gevent in)
	cd tests/ops && ../../$(BIN)/pytest -q -p no:cacheprovider -p no:anyio .

# the audit's HTML page as a person sees it: rendered by headless Chromium (a Debian package)
browser: sysdeps venv
	$(BIN)/pytest tests/browser -q -p no:cacheprovider

integration: sysdeps venv
	$(BIN)/pytest tests/integration -q -p no:cacheprovider --durations=30

test: lint unit browser integration

# import cycles: between modules, then between packages (each subpackage one node, each core module
# its own: the core imports no feature package that imports the core); mypy: pyproject's [tool.mypy] files
lint: venv
	$(BIN)/ruff check .
	$(BIN)/python tests/import_cycles.py llmfleet
	$(BIN)/python tests/import_cycles.py --packages llmfleet
	$(BIN)/mypy

# docs/settings.md: every setting with its type, default and documentation, from llmfleet/schema.py
settings-doc: venv
	$(BIN)/python -m llmfleet.settings_reference > docs/settings.md

lab-down: venv
	$(BIN)/llmfleet lab down

# The GPU checks of verify/ on a machine with an NVIDIA GPU, checked from itself (testinfra's
# local backend, pyinfra's @local), with inventories/device.py's data. Read-only. For the lent
# H200, `make device-wheels` here first puts what its python3 lacks into .whl/ (carry it along);
# then, there, one command:
#   make verify-device [DATA='--data gpu_profile=v100_sxm2_32gb_x8 --data nvidia_driver_flavour=proprietary']
# (the second: its GPU checks fail as a V100 host's would; inventories/device.py says why). The CUDA
# smoke test is verify/test_gpu_health.py's. The burn-in (onboarding acceptance) runs there on its own,
# for BURNIN_S seconds, printing TFLOP/s, temperatures, clocks, power and clock event reasons over the
# run (read-only: compute only):
#   make burnin-device [BURNIN_S=60]
GPU_VERIFY := verify/test_gpu_health.py verify/test_nvidia_driver.py verify/test_nvidia_persistence.py \
              verify/test_gpu_clocks.py verify/test_fabric_manager.py verify/test_gpu_interconnect.py
DEVICE_PY  ?= python3
BURNIN_S   ?= 60
device-site:
	@if [ -d .whl ]; then $(DEVICE_PY) -m pip install -q --no-index --no-deps --no-compile --upgrade \
	  --target .device-site .whl/*.whl; fi

verify-device: device-site
	PYTHONPATH=$(CURDIR)/.device-site$${PYTHONPATH:+:$$PYTHONPATH} $(DEVICE_PY) -m pytest $(GPU_VERIFY) \
	  -p no:cacheprovider -q -rfEP --hosts=local:// --inventory inventories/device.py $(DATA)

burnin-device: device-site
	PYTHONPATH=$(CURDIR)/.device-site$${PYTHONPATH:+:$$PYTHONPATH} $(DEVICE_PY) -m pytest verify/test_gpu_burnin.py \
	  -p no:cacheprovider -q -rfEP -s --hosts=local:// --inventory inventories/device.py \
	  --data gpu_burnin_duration_s=$(BURNIN_S) $(DATA)

device-wheels: venv
	rm -rf .whl && $(BIN)/pip download -q -d .whl --only-binary=:all: --python-version 3.12 \
	  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
	  --platform manylinux_2_26_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
	  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
	  pyinfra==3.10.0 pytest-testinfra==10.2.2 pydantic
