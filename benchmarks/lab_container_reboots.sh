#!/bin/bash
# Reboots every container host of a lab at once, ROUNDS times, and counts the boots that came back
# with a failed unit (`systemctl --failed`) or refused the lab user's login: what a batch reboot
# of the reboot roll meets. With the containers sharing one cgroup tree (before
# llmfleet/lab/cgroup.py), two containers booting together raced on their units' cgroups
# (status=219/CGROUP; systemd-user-sessions.service among them left /run/nologin).
#
#   LLMFLEET_LAB_DIR=... ROUNDS=20 benchmarks/lab_container_reboots.sh
#
# Needs a lab with container hosts (`llmfleet lab up --hosts 3`); nothing is deployed.
LAB=${LLMFLEET_LAB_DIR:-/var/lib/llmfleet/lab}
ROUNDS=${ROUNDS:-20}
C=$LAB/ssh/config
HOSTS=$(python3 -c "import json;print(' '.join(n for n,h in json.load(open('$LAB/state.json'))['hosts'].items() if h['kind']=='container'))")
boots=0; bad=0; start=$(date +%s)
for i in $(seq "$ROUNDS"); do
  for h in $HOSTS; do
    old=$(ssh -F $C -o ConnectTimeout=3 $h cat /proc/sys/kernel/random/boot_id)
    echo "$h $old"
  done > /tmp/lab_reboots.$$
  for h in $HOSTS; do ssh -F $C $h 'sudo systemctl reboot' >/dev/null 2>&1 & done; wait
  while read -r h old; do
    deadline=$(( $(date +%s) + 120 ))
    until new=$(ssh -n -F $C -o ConnectTimeout=3 $h 'systemctl is-system-running --wait >/dev/null; cat /proc/sys/kernel/random/boot_id' 2>/dev/null) && [ -n "$new" ] && [ "$new" != "$old" ]; do
      if [ "$(date +%s)" -gt $deadline ]; then new="no login within 120 s"; break; fi
      sleep 1
    done
    boots=$((boots + 1))
    failed=$(ssh -n -F $C -o ConnectTimeout=3 $h 'systemctl --failed --no-legend --plain' 2>&1)
    if [ "$new" = "no login within 120 s" ] || [ -n "$failed" ]; then
      bad=$((bad + 1)); echo "round $i $h: ${failed:-$new}"
    fi
  done < /tmp/lab_reboots.$$
done
rm -f /tmp/lab_reboots.$$
echo "$boots boots in $ROUNDS rounds of $(echo $HOSTS | wc -w) containers at once, $bad with a failed unit or no login; $(( $(date +%s) - start )) s"
