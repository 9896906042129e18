"""base_packages: every package group data lists is installed."""

from verify.helpers import expect


def test_base_packages_installed(host, host_name, settings):
    names = [p.split("=", 1)[0] for p in settings.base_packages]
    out = host.run("dpkg-query -W -f '${Package} ${db:Status-Status}\\n' " + " ".join(names))
    status = dict(line.split(" ", 1) for line in out.stdout.splitlines() if " " in line)
    actual = {n: status.get(n, "not-installed") for n in names}
    expect(host_name, "base_packages", {n: "installed" for n in names}, actual)
