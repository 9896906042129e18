"""Fleet-wide defaults: every llmfleet setting, documented, with its default.

Override per group in ``group_data/<group>.py`` (a group is a list in an inventory file, or the
inventory file's own name) or per host in the inventory. ``llmfleet/settings.py`` says what a
valid value is; a deploy stops before touching any host when a value is not valid.
"""

# Log in as an unprivileged account and use sudo (pyinfra global argument). A fleet that logs in
# as root may set this to False.
_sudo = True

# ---------------------------------------------------------------------------------------------
# mirrors: where hosts get packages. Air-gapped fleets point these at their internal mirrors.
# ---------------------------------------------------------------------------------------------
# HTTP proxy for apt (e.g. an apt-cacher-ng at "http://apt-cache.internal:3142").
# None: apt uses the host's sources directly (and the proxy drop-in is removed).
apt_proxy = None
# pip's index (e.g. "https://pypi.internal/simple"). None: pip's own default.
pip_index_url = None
# Extra places pip looks for wheels (a folder URL served over HTTP, or file:// paths).
pip_find_links = []
# True: pip uses only pip_find_links, no index at all (a wheel folder as the whole mirror).
pip_no_index = False
# Hosts pip may reach over plain http (an internal mirror without TLS).
pip_trusted_hosts = []

# ---------------------------------------------------------------------------------------------
# base_packages: Debian/Ubuntu packages every GPU server needs.
# ---------------------------------------------------------------------------------------------
# numactl and pciutils: NUMA and PCIe inspection; python3-venv: vLLM's virtual environment.
base_packages = ["numactl", "pciutils", "python3-venv", "ca-certificates"]
# An apt index younger than this many seconds is not refreshed (keeps a no-change deploy quiet).
apt_cache_valid_s = 3600
# CPU frequency governor, where the host exposes cpufreq (bare metal; VMs usually don't).
# None leaves it alone. "performance" keeps clocks up between decode steps.
cpu_governor = "performance"

# ---------------------------------------------------------------------------------------------
# kernel_cmdline: parameters added to the kernel command line through a grub drop-in
# (/etc/default/grub.d/90-llmfleet.cfg, then update-grub). A value of None adds a bare flag.
# A change takes effect at the next boot: the deploy reboots the host (see reboot_* below).
# ---------------------------------------------------------------------------------------------
kernel_cmdline = {
    # THP stalls (compaction) hurt latency of large pinned allocations; off from boot.
    "transparent_hugepage": "never",
}
# Options, not defaults (add them to kernel_cmdline in a group's data when needed):
#   "systemd.unified_cgroup_hierarchy": "0"  forces cgroup v1. Only for an old container runtime
#       that cannot use cgroup v2; current systemd, Docker and Kubernetes run on v2, and v1 is
#       being removed from systemd. The design notes' advice to always force v1 is outdated.
#   "iommu": "pt"   IOMMU passthrough, on hosts where GPU peer-to-peer over PCIe is slow with
#       the IOMMU translating.
#   "pci": "realloc=off"  on some boards that misplace large GPU BARs.

# ---------------------------------------------------------------------------------------------
# reboot: a host reboots only when it must (its running kernel command line differs from the
# deployed one, or a package left /run/reboot-required); at most reboot_max_unavailable hosts
# are down at once; the roll stops at the first host that does not come back healthy (new boot
# id, systemd "running", the expected kernel command line), and later batches are not rebooted.
# pyinfra forms the batches from its active hosts in an order of its own choosing.
# ---------------------------------------------------------------------------------------------
reboot_max_unavailable = 1
# Seconds a host may take to come back (SSH answers with a new boot id and systemd is up).
reboot_timeout_s = 600
# Units stopped cleanly before the reboot (a serving vLLM gets to finish its requests).
reboot_stop_units = ["vllm.service"]

# ---------------------------------------------------------------------------------------------
# thp: transparent huge pages, set now in sysfs and at every boot (llmfleet-thp.service).
# ---------------------------------------------------------------------------------------------
thp_enabled = "never"
thp_defrag = "never"

# ---------------------------------------------------------------------------------------------
# limits: open files and locked memory for the service account (limits.d, for logins) and for
# every systemd service (system.conf.d DefaultLimit*, because services ignore limits.d).
# ---------------------------------------------------------------------------------------------
# The account vLLM runs as (created, without a login shell, if missing).
service_user = "vllm"
limits_nofile = 65536
# Bytes, or "unlimited" (pinned host memory for CUDA transfers).
limits_memlock = "unlimited"

# ---------------------------------------------------------------------------------------------
# sysctls: kernel settings, persisted in /etc/sysctl.d/90-llmfleet.conf and applied now.
# A name the host's kernel does not have stops the deploy before any change.
# ---------------------------------------------------------------------------------------------
sysctls = {
    # keep model weights and KV-cache host memory out of swap
    "vm.swappiness": 1,
    # many concurrent client connections to the API server
    "net.core.somaxconn": 4096,
    "net.ipv4.tcp_max_syn_backlog": 4096,
    # the API server and NCCL open many sockets and files
    "fs.file-max": 2097152,
}

# ---------------------------------------------------------------------------------------------
# chrony: time sync. Clock skew breaks request timeouts and TLS; verify fails above the offset.
# ---------------------------------------------------------------------------------------------
chrony_servers = ["0.debian.pool.ntp.org", "1.debian.pool.ntp.org"]
chrony_max_offset_ms = 50.0

# ---------------------------------------------------------------------------------------------
# kernel_modules: modules blacklisted (never loaded) and unloaded now if loaded.
# On hosts without InfiniBand, NCCL probes the IB verbs stack: blacklist it there, e.g.
# ["ib_uverbs", "rdma_ucm"]. Empty by default: a fleet with InfiniBand must not lose it.
# ---------------------------------------------------------------------------------------------
kernel_modules_blacklist = []
