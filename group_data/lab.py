"""Settings for the local lab (group `lab`, from inventories/lab.py).

Lab hosts reach nothing but each other and this machine, so they use the machine's services as
an air-gapped fleet uses its internal mirrors.
"""

from llmfleet.lab.inventory import gateway, service_url

# apt through the machine's apt-cacher-ng.
apt_proxy = service_url("apt_proxy")
# pip only from the machine's wheel folder (`llmfleet lab wheels REQ...` fills it).
pip_find_links = [service_url("wheels")] if service_url("wheels") else []
pip_no_index = True
pip_trusted_hosts = [gateway()] if gateway() else []
# time from the machine's NTP server (the only one lab hosts can reach)
chrony_servers = [gateway()] if gateway() else ["127.0.0.1"]
# lab hosts have no InfiniBand: the blacklist is exercised on them
kernel_modules_blacklist = ["ib_uverbs", "rdma_ucm"]
# lab hosts have no GPU: the NVIDIA components say so and do nothing
gpu_profile = None
