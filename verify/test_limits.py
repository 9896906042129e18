"""limits: the service account's limits for logins and the default limits of systemd services."""

from verify.helpers import expect, read_files

LIMITS_FILE = "/etc/security/limits.d/90-llmfleet.conf"


def systemd_value(value) -> str:
    return "infinity" if value == "unlimited" else str(value)


def test_limits(host, host_name, settings):
    user = settings.service_user
    files = read_files(host, LIMITS_FILE)
    lines = {tuple(ln.split()[:3]): ln.split()[3] for ln in (files[LIMITS_FILE] or "").splitlines()
             if ln.strip() and not ln.startswith("#") and len(ln.split()) == 4}
    want = {(user, kind, item): str(value) for kind in ("soft", "hard")
            for item, value in (("nofile", settings.limits_nofile), ("memlock", settings.limits_memlock))}
    expect(host_name, f"limits_nofile/limits_memlock for {user} ({LIMITS_FILE})", want,
           {k: lines.get(k) for k in want})
    manager = host.run("systemctl show --property DefaultLimitNOFILE --property DefaultLimitMEMLOCK").stdout
    got = dict(ln.split("=", 1) for ln in manager.splitlines() if "=" in ln)
    expect(host_name, "systemd DefaultLimitNOFILE (limits_nofile)", systemd_value(settings.limits_nofile),
           got.get("DefaultLimitNOFILE"))
    expect(host_name, "systemd DefaultLimitMEMLOCK (limits_memlock)", systemd_value(settings.limits_memlock),
           got.get("DefaultLimitMEMLOCK"))
    expect(host_name, f"service_user {user} exists", True, host.user(user).exists)
