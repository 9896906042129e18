"""chrony: running, using the configured servers, synchronised within the offset limit."""

from verify.helpers import expect, read_files


def test_chrony_synchronised(host, host_name, settings):
    conf = read_files(host, "/etc/chrony/chrony.conf")["/etc/chrony/chrony.conf"] or ""
    servers = [ln.split()[1] for ln in conf.splitlines() if ln.startswith("server ")]
    expect(host_name, "chrony_servers (/etc/chrony/chrony.conf)", list(settings.chrony_servers), servers)
    expect(host_name, "chrony service", "active", host.run("systemctl is-active chrony").stdout.strip())
    # chrony polls a new server within seconds (iburst); allow it that long to select a source
    out = host.run("chronyc waitsync 30 0 0 1 >/dev/null; chronyc -n tracking; echo '-- sources'; "
                   "chronyc -n sources").stdout
    tracking, _, sources = out.partition("-- sources")
    fields = {k.strip(): v.strip() for k, v in (ln.split(":", 1) for ln in tracking.splitlines() if ":" in ln)}
    # not synchronised: what chrony makes of each server says why (Reach 0: no answer; ? or x: answers
    # it does not use), so the message carries them (the lines below chronyc's ==== rule)
    seen = [" ".join(ln.split()) for ln in sources.partition("\n===")[2].splitlines()[1:] if ln.strip()]
    what = "chrony leap status (synchronised)"
    if fields.get("Leap status") != "Normal":
        what = f"{what[:-1]}; its sources, chronyc -n sources: {'; '.join(seen) or 'none'})"
    expect(host_name, what, "Normal", fields.get("Leap status"))
    seconds, _, direction = fields.get("System time", "nan seconds").partition(" seconds ")
    offset_ms = abs(float(seconds)) * 1000
    assert offset_ms <= settings.chrony_max_offset_ms, (
        f"{host_name}: chrony offset: expected <= {settings.chrony_max_offset_ms} ms (chrony_max_offset_ms), "
        f"actual {offset_ms:.3f} ms {direction}")
