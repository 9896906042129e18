# llmfleet: `make demo` (lab up, deploy, verify, report) and `make test` (all tests).
# Both install what they need: Debian packages (as root) and the Python environment in .venv.

VENV      := .venv
BIN       := $(VENV)/bin
# Debian packages the lab needs on this machine (see llmfleet/lab/config.py: TOOLS, VM_TOOLS).
SYSDEPS   := systemd-container mmdebstrap openssh-client iproute2 chrony apt-cacher-ng \
             qemu-system-x86 qemu-utils e2fsprogs
DEMO_HOSTS ?= 3

.PHONY: demo test unit integration sysdeps venv lint lab-down

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
	$(BIN)/llmfleet lab up --hosts $(DEMO_HOSTS) --vm
	$(BIN)/pyinfra inventories/lab.py deploy.py -y
	$(BIN)/pytest verify/ -p no:cacheprovider --hosts="$$($(BIN)/llmfleet lab hosts --testinfra)"
	$(BIN)/llmfleet lab status
	@echo "The lab stays up: try 'pyinfra inventories/lab.py exec -- uname -r'; remove it with 'make lab-down'."

unit: venv
	$(BIN)/pytest tests/unit -q -p no:cacheprovider
	# pyinfra-style operation and fact tests: a process of their own (pyinfra_cli patches gevent in)
	cd tests/ops && ../../$(BIN)/pytest -q -p no:cacheprovider .

integration: sysdeps venv
	$(BIN)/pytest tests/integration -q -p no:cacheprovider

test: lint unit integration

lint: venv
	$(BIN)/ruff check .

lab-down: venv
	$(BIN)/llmfleet lab down
