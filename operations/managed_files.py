"""managed_files: the one way the deploy writes what it manages, and the host's manifest of it.

Each component writes its files, links and folders through `put`, `template`, `directory`, `link`
and `absent` here: written with their mode, owner and group (so a deploy puts back a changed mode
or owner as well as content), and recorded as an entry of this host's manifest. What the vLLM roll
switches into place itself (units, the API key file, the environment and model links) is recorded
with `recorded` and its mode and owner kept with `attributes`. Each returns pyinfra's operation:
its `will_change` says what must restart or reload, in the component's own activate step.

`written` ends the deploy: a foreign file in a managed file's drop-in chain that overrides a
managed key is commented out (llmfleet/remote/managed_files_dropins.py; what then reloads: the
units whose drop-ins changed, systemd's manager, grub's configuration, the initramfs), and the
manifest is written (llmfleet/managed_files.py), which both audits compare the host with.
"""

from __future__ import annotations

import base64
import json
import zlib
from io import BytesIO, StringIO

from pyinfra import host, logger
from pyinfra.api import deploy
from pyinfra.facts.server import Which
from pyinfra.operations import files, server, systemd

from llmfleet import managed_files, templates
from llmfleet.facts import ManagedDropins, python_script
from llmfleet.managed_files import Entry
from llmfleet.settings import Settings

_ENTRIES: dict[str, dict[str, Entry]] = {}  # host name -> path -> entry, as this deploy declares them
_DROPIN_CONTENT: dict[str, dict[str, str]] = {}  # host name -> path -> managed content, drop-in files only


def recorded(entry: Entry, content: str | None = None) -> None:
    """Record an entry of this host's manifest (`content`: a drop-in file's managed text, for the
    override check before it is written)."""
    _ENTRIES.setdefault(host.name, {})[entry.path] = entry
    if content is not None and entry.folder is not None:
        _DROPIN_CONTENT.setdefault(host.name, {})[entry.path] = content


def put(name: str, dest: str, content: str | bytes, mode: str = "644", user: str = "root", group: str = "root",
        secret: bool = False):
    """A managed file with this content, mode, owner and group."""
    recorded(managed_files.file_entry(dest, content, name, mode, user, group, secret),
             content if isinstance(content, str) and not secret else None)
    src = BytesIO(content) if isinstance(content, bytes) else StringIO(content)
    return files.put(name=name, src=src, dest=dest, mode=mode, user=user, group=group)


def template(name: str, component: str, template_name: str, dest: str, mode: str = "644", user: str = "root",
             group: str = "root", **values):
    """A managed file rendered from templates/<component>/<template_name> (llmfleet/templates.py)."""
    return put(name, dest, templates.render(component, template_name, **values), mode=mode, user=user, group=group)


def directory(name: str, path: str, mode: str = "755", user: str = "root", group: str = "root"):
    recorded(Entry(path, "directory", name, mode=managed_files.octal(mode), user=user, group=group))
    return files.directory(name=name, path=path, mode=mode, user=user, group=group)


def link(name: str, path: str, target: str, user: str = "root", group: str = "root"):
    recorded(Entry(path, "link", name, target=target, user=user, group=group))
    return files.link(name=name, path=path, target=target, user=user, group=group)


def absent(name: str, path: str, directory: bool = False):
    """A file (or folder) the deploy removes: the audits report it if it comes back."""
    recorded(Entry(path, "absent", name))
    if directory:
        return files.directory(name=name, path=path, present=False)
    return files.file(name=name, path=path, present=False)


def attributes(name: str, path: str, mode: str, user: str = "root", group: str = "root"):
    """Mode and owner of a file another operation writes earlier in this deploy (the vLLM roll's
    units and API key file): put back where they differ, content left to that operation."""
    return files.file(name=name, path=path, mode=mode, user=user, group=group, touch=False)


@deploy("managed files")
def written(settings: Settings):
    """No foreign drop-in overrides a managed key (each one found is commented out, and what reads
    it reloads); then the manifest of what this deploy manages, root-only."""
    mine = _ENTRIES.get(host.name, {})
    content = _DROPIN_CONTENT.get(host.name, {})
    chain = "z:" + base64.b64encode(zlib.compress(json.dumps(
        [{"path": p, **({"folder": e.folder, "content": content[p]} if p in content else {})}
         for p, e in mine.items()]).encode(), 9)).decode()  # compressed: units add up (the script's ENTRIES)
    found = host.get_fact(ManagedDropins, entries=chain)
    overrides = found.get("overrides", [])
    if overrides:
        _repaired(overrides, chain)
    else:
        host.noop("managed files: no foreign drop-in file overrides a managed key")
    files.directory(name="llmfleet's configuration folder", path="/etc/llmfleet", mode="755", user="root",
                    group="root")
    files.put(name="the manifest of what the deploy manages (root only)",
              src=StringIO(managed_files.document(mine.values())), dest=managed_files.MANIFEST, mode="600",
              user="root", group="root")


def _repaired(overrides: list[dict], chain: str) -> None:
    for o in overrides:
        host.log_styled(f"managed files: {o['file']} line {o['line']}: {o['key']} = {o['value']} overrides "
                        f"{o['managed']} ({o['managed_value']}): commented out", fg="yellow", log_func=logger.warning)
    server.shell(name="managed files: foreign drop-in lines that override a managed key commented out",
                 commands=[python_script("managed_files_dropins", "--repair", chain)])
    folders = {o["folder"] for o in overrides}
    units = sorted({_unit_of(o["managed"]) for o in overrides if o["folder"] == "systemd_unit"})
    for unit in units:
        if unit.startswith("vllm"):  # a vLLM unit restarts only through the roll (operations/vllm_roll.py)
            host.log_styled(f"managed files: {unit}: its drop-ins changed; it reads them at its next restart "
                            "(a deploy that changes what it serves, or systemctl restart)", fg="yellow",
                            log_func=logger.warning)
            systemd.daemon_reload(name=f"systemd reads {unit}'s drop-ins again")
        else:
            systemd.service(name=f"{unit} restarted without the foreign drop-in", service=unit, restarted=True,
                            daemon_reload=True)
    if "systemd_manager" in folders:
        server.shell(name="systemd re-executes to read its default limits", commands=["systemctl daemon-reexec"])
    if "grub" in folders and host.get_fact(Which, command="update-grub"):
        server.shell(name="grub configuration regenerated without the foreign kernel parameters",
                     commands=["update-grub"])
    if "modprobe" in folders and host.get_fact(Which, command="update-initramfs"):
        server.shell(name="initramfs regenerated without the foreign module options", commands=["update-initramfs -u"])


def _unit_of(path: str) -> str:
    """The unit a managed unit file or unit drop-in belongs to."""
    rest = path.removeprefix(managed_files.UNIT_FOLDER)
    return rest.split("/")[0].removesuffix(".d")
