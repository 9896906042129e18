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
