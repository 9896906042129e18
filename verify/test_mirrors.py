"""mirrors: apt and pip on the host use the mirrors group data names, and those answer."""

from verify.helpers import expect, read_files, run_remote

APT_PROXY_FILE = "/etc/apt/apt.conf.d/01llmfleet-proxy"
APT_ACQUIRE_FILE = "/etc/apt/apt.conf.d/80llmfleet-acquire"
PIP_CONF = "/etc/pip.conf"

def _pip_conf(settings) -> dict[str, str]:
    want = {}
    if settings.pip_index_url:
        want["index-url"] = settings.pip_index_url
    if settings.pip_no_index:
        want["no-index"] = "true"
    if settings.pip_find_links:
        want["find-links"] = " ".join(settings.pip_find_links)
    if settings.pip_trusted_hosts:
        want["trusted-host"] = " ".join(settings.pip_trusted_hosts)
    return want


def _parse_ini(text: str | None) -> dict[str, str]:
    out = {}
    for line in (text or "").splitlines():
        if "=" in line and not line.lstrip().startswith("#"):
            key, value = line.split("=", 1)
            out[key.strip()] = value.strip()
    return out


def test_mirror_config(host, host_name, settings):
    files = read_files(host, APT_PROXY_FILE, PIP_CONF)
    if settings.apt_proxy:
        expect(host_name, "apt_proxy", f'Acquire::http::Proxy "{settings.apt_proxy}";',
               next((ln for ln in (files[APT_PROXY_FILE] or "").splitlines() if "Proxy" in ln), None))
    else:
        expect(host_name, f"apt_proxy (no {APT_PROXY_FILE})", None, files[APT_PROXY_FILE])
    expect(host_name, f"pip settings in {PIP_CONF}", _pip_conf(settings), _parse_ini(files[PIP_CONF]))


def _apt_options(text: str | None) -> dict[str, str]:
    """`Name "value";` lines of an apt.conf drop-in, as {name: value}."""
    out = {}
    for line in (text or "").splitlines():
        parts = line.strip().rstrip(";").split(None, 1)
        if len(parts) == 2 and not parts[0].startswith("//"):
            out[parts[0]] = parts[1].strip('"')
    return out


def test_apt_downloads_are_bounded(host, host_name, settings):
    """A silent connection is given up, a failed file tried again, pipelining as configured, and
    apt-get waits for a dpkg lock another apt holds."""
    want = {"Acquire::http::Timeout": str(settings.apt_http_timeout_s),
            "Acquire::https::Timeout": str(settings.apt_http_timeout_s),
            "Acquire::Retries": str(settings.apt_retries),
            "Acquire::http::Pipeline-Depth": str(settings.apt_http_pipeline_depth),
            "DPkg::Lock::Timeout": str(settings.apt_lock_timeout_s)}
    expect(host_name, f"apt download settings in {APT_ACQUIRE_FILE}", want,
           _apt_options(read_files(host, APT_ACQUIRE_FILE)[APT_ACQUIRE_FILE]))


def test_mirrors_answer(host, host_name, settings):
    """The configured mirrors answer from the host itself (a mirror down breaks every install)."""
    # A proxy is only connected to (any proxy software will do); URLs are fetched.
    checks = [f"tcp {settings.apt_proxy}"] if settings.apt_proxy else []
    checks += [f"get {u}" for u in settings.pip_find_links if u.startswith("http")]
    if settings.pip_index_url and settings.pip_index_url.startswith("http"):
        checks.append(f"get {settings.pip_index_url}")
    if not checks:
        return
    got = run_remote(host, "mirrors_reach", *checks)
    for check in checks:
        url = check.split(" ", 1)[1]
        expect(host_name, f"mirror {url} answers", 200, got[url])
