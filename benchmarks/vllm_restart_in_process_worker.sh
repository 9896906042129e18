#!/bin/bash
# vLLM restarts on lab-c1, alternated: the default (API server, engine core and worker processes)
# against VLLM_ENABLE_V1_MULTIPROCESSING=0 (the worker in the engine core process: group_data/lab.py
# says why). Prints seconds from `systemctl restart` to a 1-token completion, and the processes.
#
#   LLMFLEET_LAB_DIR=... benchmarks/vllm_restart_in_process_worker.sh
#
# Needs a lab whose lab-c1 serves (e.g. `llmfleet lab up --hosts 1` and
# `pyinfra inventories/lab.py deploy.py -y --limit lab-c1`); the variant is a unit drop-in, removed
# at the end (the deploy's own unit is not touched).
LAB=${LLMFLEET_LAB_DIR:-/var/lib/llmfleet/lab}
C=$LAB/ssh/config
KEY=$(cat $LAB/api-key)
ADDR=$(python3 -c "import json;print(json.load(open('$LAB/state.json'))['hosts']['lab-c1']['address'])")
for variant in default uni default uni default uni; do
  # a drop-in's Environment= comes after the unit's: it decides, whatever group data rendered
  [ $variant = uni ] && v=0 || v=1
  ssh -F $C lab-c1 "sudo mkdir -p /etc/systemd/system/vllm.service.d && printf '[Service]\nEnvironment=VLLM_ENABLE_V1_MULTIPROCESSING=$v\n' | sudo tee /etc/systemd/system/vllm.service.d/bench.conf >/dev/null && sudo systemctl daemon-reload"
  s=$(date +%s%N)
  ssh -F $C lab-c1 'sudo systemctl restart vllm'
  until curl -sf -m 5 http://$ADDR:8000/v1/completions -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' -d '{"model":"tiny-llama","prompt":"a","max_tokens":1}' >/dev/null 2>&1; do sleep 1; done
  n=$(ssh -F $C lab-c1 'pgrep -u vllm -c python3; pgrep -u vllm -fc VLLM' | tr '\n' ' ')
  ms=$(( ($(date +%s%N) - s) / 1000000 ))
  echo "$variant: ready in $((ms / 1000)).$(printf %03d $((ms % 1000))) s (vllm-user python3 / VLLM:: processes: $n)"
done
ssh -F $C lab-c1 'sudo rm -f /etc/systemd/system/vllm.service.d/bench.conf && sudo systemctl daemon-reload'
