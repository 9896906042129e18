"""mirrors: apt and pip on the host use the mirrors group data names, and those answer."""

import json

from conftest import expect, read_files

APT_PROXY_FILE = "/etc/apt/apt.conf.d/01llmfleet-proxy"
PIP_CONF = "/etc/pip.conf"

_PROBE = (
    "import json,sys,urllib.request\n"
    "out={}\n"
    "for u in sys.argv[1:]:\n"
    "    try: out[u]=urllib.request.urlopen(u,timeout=10).status\n"
    "    except Exception as e: out[u]=repr(e)\n"
    "print(json.dumps(out))\n"
)


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


def test_mirrors_answer(host, host_name, settings):
    """The configured mirrors answer from the host itself (a mirror down breaks every install)."""
    urls = []
    if settings.apt_proxy:
        urls.append(settings.apt_proxy.rstrip("/") + "/acng-report.html")
    urls += [u for u in settings.pip_find_links if u.startswith("http")]
    if settings.pip_index_url:
        urls.append(settings.pip_index_url)
    if not urls:
        return
    got = json.loads(host.check_output("python3 -c %s " + " ".join(["%s"] * len(urls)), _PROBE, *urls))
    for url in urls:
        status = got[url]
        # apt-cacher-ng answers its report page with 200, or 404 where the page is disabled:
        # either proves a live proxy. Anything else (refused, timeout, 5xx) is a dead mirror.
        assert status in (200, 404), f"{host_name}: mirror {url}: expected an answer, actual {status}"
