"""Run on a host by the deploy and the audit (python3, standard library only): the foreign files (ones
llmfleet does not manage) in the load chain of llmfleet's managed drop-in files that override a managed
key, so that the value in effect at the next boot differs from the managed one while the live value may
still look right; with --repair, those lines commented out.

    managed_files_dropins.py [--root DIR] [--repair] ENTRIES

ENTRIES: a JSON list (or z:<base64 of its zlib-compressed text>: the deploy sends it so, as drop-in
contents can add up to tens of KB on a host with many units), or @FILE holding a JSON object whose
"entries" is that list (the manifest, /etc/llmfleet/managed-files.json; other keys of it and of its
entries are ignored). An entry: {"path": the managed file's absolute path, "folder": its kind (below),
"content": the managed content, optional}. At deploy time the file may not be written yet: "content"
stands for it, in its place in the load order; an entry without "content" is read from its path, and
skipped where that file is missing. Every entry's path is a managed file, whatever its "folder": never
foreign. With --root every absolute path (ENTRIES' @FILE too, where it is there) is read under DIR, and
the output names paths as on the host.

Prints {"overrides": [{"managed", "folder", "file", "line", "key", "value", "managed_value"}],
"unreadable": [{"file", "why"}]}, sorted. With --repair, each overriding line of a foreign file is
commented out in place (its other lines, owner and mode kept; a link's target is rewritten) as
`# llmfleet: <key> is managed in <managed> (<managed_value>); was: <the line>`, and it prints
{"repaired": [the same items], "units": [systemd units whose drop-ins changed: the caller daemon-reloads
and restarts them], "unreadable": [...]}: a second run finds none of them. An item with line 0 (a file
that masks the managed one, a grub file that changes the command line without an assignment line) cannot
be commented out: --repair lists it under "unreadable" with why.

The kinds, each read as its own tool reads its files (the sources are cited beside each rule):
sysctl, limits, systemd_manager, systemd_unit, modprobe, apt_preferences, apt_conf, grub.
"""

import argparse
import base64
import fnmatch
import json
import os
import re
import subprocess
import sys
import tempfile
import zlib

NOT_SET = "not set"


class Host:
    """The host's files as the tools see them (under --root), with the entries' managed content in place."""

    def __init__(self, root, entries):
        self.root = root
        self.managed = {e["path"] for e in entries}
        self.contents = {e["path"]: e["content"] for e in entries if isinstance(e.get("content"), str)}
        self.unreadable = {}
        self.cache = {}

    def fs(self, path):
        return os.path.join(self.root, path.lstrip("/")) if self.root else path

    def resolve(self, path):
        """The host path a file's links lead to (links followed inside the root; /dev/null stays itself)."""
        for _ in range(40):
            full = self.fs(path)
            if path == "/dev/null" or not os.path.islink(full):
                return path
            target = os.readlink(full)
            path = os.path.normpath(target if target.startswith("/") else os.path.join(os.path.dirname(path), target))
        return path

    def is_managed(self, path):
        return path in self.managed or self.resolve(path) in self.managed

    def exists(self, path):
        return path in self.contents or os.path.lexists(self.fs(path))

    def listdir(self, folder):
        """The names in a folder that are neither hidden nor folders (dangling links included: they land in
        "unreadable"), with the managed files of that folder not written yet; a missing folder has none."""
        names = {os.path.basename(p) for p in self.contents if os.path.dirname(p) == folder}
        try:
            found = os.listdir(self.fs(folder))
        except FileNotFoundError:
            return names
        except OSError as exc:
            self.unreadable[folder] = exc.strerror or str(exc)
            return names
        # hidden names are skipped by every reader here (systemd's conf_files_list, kmod's
        # conf_files_filter_out, apt's GetListOfFilesInDir, the shell globs of pam_limits and grub-mkconfig)
        full = self.fs(folder)
        return names | {n for n in found if not n.startswith(".") and not os.path.isdir(os.path.join(full, n))}

    def lines(self, path):
        """A file's lines (without line ends), or None where it cannot be read (noted in unreadable)."""
        if path in self.contents:
            return [line.rstrip("\r") for line in self.contents[path].split("\n")]
        if path not in self.cache:
            self.cache[path] = self._read(path)
        return self.cache[path]

    def _read(self, path):
        real = self.resolve(path)
        if real == "/dev/null":  # a link to /dev/null masks a file of its name: empty
            return []
        try:
            with open(self.fs(real), encoding="utf-8", errors="surrogateescape", newline="") as fh:
                return [line.rstrip("\r") for line in fh.read().split("\n")]
        except OSError as exc:
            self.unreadable[path] = exc.strerror or str(exc)
            return None


def item(entry, path, line, key, value, managed_value, fix=None, why=None):
    """One override; `fix`: the lines --repair comments out (the line alone when None), `why`: why it cannot."""
    return {"managed": entry["path"], "folder": entry["folder"], "file": path, "line": line, "key": key,
            "value": value, "managed_value": managed_value, "_fix": [line] if fix is None else fix, "_why": why}


def fold(value):
    return " ".join(value.split())


def dropins(host, folders, accept):
    """The files of `folders` whose names `accept` takes, sorted by name across the folders; a name in an
    earlier folder masks the same name in later ones (systemd's conf_files_list, kmod's
    conf_files_insert_sorted, procps' sysctl --system all do this)."""
    chosen = {}
    for folder in folders:
        for name in host.listdir(folder):
            if accept(name) and name not in chosen:
                chosen[name] = folder + "/" + name
    return [chosen[name] for name in sorted(chosen)]  # code point order: strcmp's on UTF-8 names


def position(host, entry, chain, tool, masks=False):
    """The managed file's index in its load chain; where the tool does not read it, an item for the file
    that masks it (same name in an earlier folder: `masks`), else None and a note in unreadable."""
    for i, path in enumerate(chain):
        if path == entry["path"] or host.resolve(path) == entry["path"]:
            return i
    name = os.path.basename(entry["path"])
    masking = [p for p in chain if masks and os.path.basename(p) == name and not host.is_managed(p)]
    if masking:
        return item(entry, masking[0], 0, "*", "masked", "the managed file", [],
                    "masks the managed file (same name, read instead of it): remove or rename it")
    host.unreadable[entry["path"]] = "not read by " + tool + ": outside the folders it reads"
    return None


def foreign(host, chain):
    """(index, path, lines) of each foreign file of a chain that can be read."""
    for i, path in enumerate(chain):
        if not host.is_managed(path):
            lines = host.lines(path)
            if lines is not None:
                yield i, path, lines


# --- sysctl ---------------------------------------------------------------------------------------
# sysctl.d(5) (systemd): *.conf from /etc/sysctl.d, /run/sysctl.d, /usr/local/lib/sysctl.d,
# /usr/lib/sysctl.d (and /lib/sysctl.d on Debian), "sorted by their filename in lexicographic order,
# regardless of which of the directories they reside in"; a file in /etc masks one of the same name in the
# later folders; "the entry in the file with the lexicographically latest name will take precedence".
# Debian's /etc/sysctl.d/99-sysctl.conf links to /etc/sysctl.conf (the link's name orders it). procps'
# `sysctl --system` also reads /etc/sysctl.conf itself last: not modelled (unverified which one boots use
# where systemd-sysctl is absent).
SYSCTL_DIRS = ("/etc/sysctl.d", "/run/sysctl.d", "/usr/local/lib/sysctl.d", "/usr/lib/sysctl.d", "/lib/sysctl.d")
SWAP = str.maketrans("./", "/.")


def sysctl_key(raw):
    """A key as its /proc/sys path: sysctl.d(5) "If the first separator is a slash, remaining slashes and
    dots are left intact. If the first separator is a dot, dots and slashes are interchanged"."""
    first = re.search(r"[./]", raw)
    return raw.translate(SWAP) if first and first.group() == "." else raw


def parse_sysctl(lines):
    """[(line, key path, folded value, or None for a "-key" glob exclusion)]. sysctl.d(5): lines whose first
    non-blank is "#" or ";" are comments; "-" before a key ignores errors setting it (the same key); a "-key"
    without "=" excludes the key from globs."""
    out = []
    for n, line in enumerate(lines, 1):
        text = line.strip()
        if not text or text[0] in "#;":
            continue
        if "=" not in text:
            if text.startswith("-"):
                out.append((n, sysctl_key(text[1:].strip()), None))
            continue
        key, value = text.split("=", 1)
        key = key.strip()
        out.append((n, sysctl_key(key[1:] if key.startswith("-") else key), fold(value)))
    return out


def sysctl_overrides(mkey, key, value, after):
    """Whether a foreign line (key, value; `after`: read after ours) overrides managed key `mkey`.
    sysctl.d(5): "Keys for which an explicit pattern exists will be excluded from any glob matching": a
    foreign glob never beats a managed explicit key, and a foreign explicit key (or a "-key" exclusion)
    beats a managed glob wherever it is read."""
    if key == mkey:
        return after and value is not None
    glob = re.compile(r"[*?\[]")
    return bool(glob.search(mkey)) and not glob.search(key) and fnmatch.fnmatchcase(key, mkey)


def check_sysctl(host, entry):
    chain = dropins(host, SYSCTL_DIRS, lambda name: name.endswith(".conf"))
    pos = position(host, entry, chain, "systemd-sysctl", True)
    if not isinstance(pos, int):
        return [pos] if pos else []
    mine = {k: v for _, k, v in parse_sysctl(host.lines(entry["path"])) if v is not None}
    out = []
    for i, path, lines in foreign(host, chain):
        for n, key, value in parse_sysctl(lines):
            for mkey, mvalue in mine.items():
                if value != mvalue and sysctl_overrides(mkey, key, value, i > pos):
                    out.append(item(entry, path, n, key.translate(SWAP),  # as a person writes it: dotted
                                    "(excluded from the glob)" if value is None else value, mvalue))
    return out


# --- limits ---------------------------------------------------------------------------------------
# pam_limits(8): "limits are taken from the /etc/security/limits.conf config file. Then individual *.conf
# files from the /etc/security/limits.d/ directory are read. The files are parsed one after another in the
# order of "C" locale" (pam_limits.c read_limits_dir: qsort with strcmp). Builds with a vendor dir
# (%vendordir%/security/limits.d, not Debian's or Ubuntu's) are not modelled (unverified).
# pam_limits.c process_limit: a line applies unless the limit was already set from a more specific domain
# (`if (src_soft < source) return;` with user 0 < @group 1 < %group 2 < % 3 < * 4): a later line of the same
# domain overrides, a more specific domain overrides "*" wherever it is read, a less specific one never.
# Whether a user line overrides a managed @group line needs the group database: not checked.
LIMITS_FILE, LIMITS_DIR = "/etc/security/limits.conf", "/etc/security/limits.d"
LIMITS_INFINITY = {"-1": "unlimited", "infinity": "unlimited"}  # limits.conf(5): -1, unlimited, infinity


def limits_rank(domain):
    if domain == "*":
        return 4
    if domain.startswith("%"):
        return 3 if domain == "%" else 2
    return 1 if domain.startswith("@") else 0


def parse_limits(lines):
    """[(line, domain, soft|hard, item, value)]: pam_limits.c parse_config_file cuts a line at "#", needs
    four fields, lowercases type, item and value; type "-" is both soft and hard."""
    out = []
    for n, line in enumerate(lines, 1):
        fields = line.split("#", 1)[0].split()
        if len(fields) != 4:
            continue
        domain, kind, name, value = fields[0], fields[1].lower(), fields[2].lower(), fields[3].lower()
        for t in ("soft", "hard") if kind == "-" else (kind,):
            if t in ("soft", "hard"):
                out.append((n, domain, t, name, value))
    return out


def check_limits(host, entry):
    chain = ([LIMITS_FILE] if host.exists(LIMITS_FILE) else []) + sorted(
        LIMITS_DIR + "/" + n for n in host.listdir(LIMITS_DIR) if n.endswith(".conf"))
    pos = position(host, entry, chain, "pam_limits")
    if pos is None:
        return []
    mine = {(d, t, k): v for _, d, t, k, v in parse_limits(host.lines(entry["path"]))}
    out = []
    for i, path, lines in foreign(host, chain):
        for n, domain, kind, name, value in parse_limits(lines):
            for (mdomain, mkind, mname), mvalue in sorted(mine.items()):
                same = LIMITS_INFINITY.get(value, value) == LIMITS_INFINITY.get(mvalue, mvalue)
                if (kind, name) != (mkind, mname) or same:
                    continue
                if (domain == mdomain and i > pos) or (mdomain == "*" and limits_rank(domain) < 4):
                    out.append(item(entry, path, n, f"{domain} {kind} {name}", value, mvalue))
    return out


# --- systemd's ini files --------------------------------------------------------------------------
def parse_ini(lines):
    """[(line numbers, "Section.Key", folded value)] of a systemd ini file (systemd.syntax(7)): "#" and ";"
    start comments; a line ending in a backslash goes on in the next one (comment lines between skipped)."""
    out, section, numbers, text = [], "", [], ""
    for n, line in enumerate(lines, 1):
        stripped = line.strip()
        if stripped[:1] in ("#", ";"):
            continue
        numbers.append(n)
        text = text + " " + stripped if text else stripped
        if text.endswith("\\"):
            text = text[:-1]
            continue
        whole, nums, numbers, text = text.strip(), numbers, [], ""
        if whole.startswith("[") and whole.endswith("]"):
            section = whole[1:-1].strip()
        elif "=" in whole:
            key, value = whole.split("=", 1)
            out.append((nums, section + "." + key.strip(), fold(value)))
    return out


def effective_list(parsed, key):
    """A list setting after the files: each assignment appends, an empty one resets (systemd.unit(5))."""
    out = []
    for _, _, assigns in parsed:
        for _, k, v in assigns:
            if k == key:
                out = [] if v == "" else out + [v]
    return out


def ini_overrides(host, entry, chain, pos, owned, is_list):
    """Overrides of systemd ini files read in `chain` order, the managed one at `pos`. A key's managed value
    is the one after the last managed file that sets it; a foreign file after that one overrides it by
    setting another value (single-valued keys), or, for list-valued keys, when the list in effect after all
    files differs from the list after that managed file. `owned`: llmfleet owns the whole unit (its unit
    file at `pos`), so every key a foreign drop-in sets counts, "not set" where the unit does not set it."""
    parsed = []
    for path in chain:
        lines = host.lines(path)
        parsed.append((path, host.is_managed(path), parse_ini(lines) if lines is not None else []))
    if owned:
        keys = {k for _, managed, assigns in parsed[pos + 1:] if not managed for _, k, _ in assigns}
    else:
        keys = {k for _, k, _ in parsed[pos][2]}
    out = []
    for key in sorted(keys):
        setters = [i for i, (_, managed, assigns) in enumerate(parsed)
                   if managed and any(k == key for _, k, _ in assigns)]
        last = max(setters + [pos])
        if is_list(key):
            mine = effective_list(parsed[:last + 1], key)
            if mine == effective_list(parsed, key):
                continue
            managed_value = "; ".join(mine) or NOT_SET
        else:
            values = [v for _, k, v in parsed[last][2] if k == key]
            managed_value = values[-1] if values else NOT_SET
        for path, managed, assigns in parsed[last + 1:]:
            for nums, k, v in assigns if not managed else ():
                if k == key and (is_list(key) or v != managed_value) and not (v == "" and managed_value == NOT_SET):
                    out.append(item(entry, path, nums[0], key, v, managed_value, nums))
    return out


# --- systemd_manager ------------------------------------------------------------------------------
# systemd-system.conf(5) and systemd's standard-conf: the main system.conf (the first of /etc/systemd,
# /run/systemd, /usr/local/lib/systemd, /usr/lib/systemd that has one), then system.conf.d/*.conf of those
# folders (and /lib/systemd on Debian), "sorted by their filename in lexicographic order, regardless of in
# which of the subdirectories they reside"; /etc masks a name in the later folders; "for options which
# accept just a single value, the entry in the file sorted last takes precedence, and for options which
# accept a list of values, entries are collected as they occur in the sorted files".
MANAGER_DIRS = ("/etc/systemd", "/run/systemd", "/usr/local/lib/systemd", "/usr/lib/systemd", "/lib/systemd")
MANAGER_LISTS = {"Manager.DefaultEnvironment", "Manager.CPUAffinity"}


def check_systemd_manager(host, entry):
    main = [d + "/system.conf" for d in MANAGER_DIRS if host.exists(d + "/system.conf")][:1]
    chain = main + dropins(host, [d + "/system.conf.d" for d in MANAGER_DIRS], lambda n: n.endswith(".conf"))
    pos = position(host, entry, chain, "systemd", True)
    if not isinstance(pos, int):
        return [pos] if pos else []
    return ini_overrides(host, entry, chain, pos, False, lambda key: key in MANAGER_LISTS)


# --- systemd_unit ---------------------------------------------------------------------------------
# systemd.unit(5), "System Unit Search Path": the folders below in order of precedence (/lib/systemd/system
# where /lib is not /usr/lib). Drop-ins: "Multiple drop-in files with different names are applied in
# lexicographic order, regardless of which of the directories they reside in"; one in /etc masks one of the
# same name in /run, and so on; a unit's drop-in folders are its own NAME.d, its template's, its dash
# prefixes' ("foo-bar-.service.d", "foo-.service.d": "equally named drop-in files further down the prefix
# hierarchy override those further up") and its type's ("service.d"): src/shared/dropin.c
# unit_file_find_dirs and unit_file_find_dropin_paths (type folders last, after every search path).
UNIT_DIRS = ("/etc/systemd/system.control", "/run/systemd/system.control", "/run/systemd/transient",
             "/run/systemd/generator.early", "/etc/systemd/system", "/etc/systemd/system.attached",
             "/run/systemd/system", "/run/systemd/system.attached", "/run/systemd/generator",
             "/usr/local/lib/systemd/system", "/usr/lib/systemd/system", "/lib/systemd/system",
             "/run/systemd/generator.late")
# settings that take a list (an empty assignment resets it): systemd.exec(5), systemd.service(5),
# systemd.unit(5), systemd.timer(5), systemd.socket(5); Condition*/Assert* too
UNIT_LISTS = set("""ExecStart ExecStartPre ExecStartPost ExecCondition ExecReload ExecStop ExecStopPost
Environment EnvironmentFile PassEnvironment UnsetEnvironment After Before Wants Requires Requisite BindsTo
PartOf Upholds Conflicts OnFailure OnSuccess WantedBy RequiredBy UpheldBy Also Alias Documentation
ReadWritePaths ReadOnlyPaths InaccessiblePaths ExecPaths NoExecPaths BindPaths BindReadOnlyPaths
TemporaryFileSystem DeviceAllow SupplementaryGroups AmbientCapabilities CapabilityBoundingSet
SystemCallFilter SystemCallArchitectures RestrictAddressFamilies IPAddressAllow IPAddressDeny LoadCredential
SetCredential LogExtraFields ListenStream ListenDatagram ListenSequentialPacket OnCalendar OnActiveSec
OnBootSec OnStartupSec OnUnitActiveSec OnUnitInactiveSec Sockets SuccessExitStatus RestartPreventExitStatus
RestartForceExitStatus""".split())


def unit_is_list(key):
    name = key.split(".", 1)[-1]
    return name in UNIT_LISTS or name.startswith(("Condition", "Assert"))


def dropin_names(unit):
    """dropin.c unit_file_find_dirs: NAME.d, the template's (for an instance), then the dash prefix's."""
    stem, _, kind = unit.rpartition(".")
    prefix, at, instance = stem.partition("@")
    out = [unit + ".d"]
    if at and instance:
        out += dropin_names(prefix + "@." + kind)
    chopped = prefix[:-1] if prefix.endswith("-") else prefix  # a trailing dash is chopped once
    dash = chopped.rfind("-")
    if dash > 0:
        out += dropin_names(chopped[:dash + 1] + ("@" + instance if at and instance else "") + "." + kind)
    return out


def unit_dropins(host, unit):
    names = dropin_names(unit)
    folders = [d + "/" + n for d in UNIT_DIRS for n in names] + [d + "/" + unit.rpartition(".")[2] + ".d"
                                                                  for d in UNIT_DIRS]
    return dropins(host, folders, lambda n: n.endswith(".conf"))


def check_systemd_unit(host, entry):
    path = entry["path"]
    folder = os.path.dirname(path)
    owned = not (folder.endswith(".d") and path.endswith(".conf"))
    unit = os.path.basename(path) if owned else os.path.basename(folder)[:-2]
    chain = ([path] if owned else []) + unit_dropins(host, unit)
    pos = 0 if owned else position(host, entry, chain, "systemd", True)
    if not isinstance(pos, int):
        return [pos] if pos else []
    out = ini_overrides(host, entry, chain, pos, owned, unit_is_list)
    for one in out:
        one["_unit"] = unit
    return out


# --- modprobe -------------------------------------------------------------------------------------
# kmod libkmod.c default_config_paths: /etc/modprobe.d, /run/modprobe.d, /usr/local/lib/modprobe.d,
# /usr/lib/modprobe.d, /lib/modprobe.d; libkmod-config.c conf_files_list/conf_files_insert_sorted: *.conf
# (not starting with "."), sorted by name across the folders, "Ignoring duplicate config file" of a name
# already taken from an earlier folder. kmod_module_get_options joins every "options" line of the module in
# that order and the kernel applies the parameters one after another, the last one winning (kernel side:
# unverified here). kmod_module_get_install_commands: "find only the first command, as modprobe from
# module-init-tools does": the FIRST "install" line whose module pattern matches (fnmatch) wins, so a
# foreign one read BEFORE ours overrides ours. "blacklist" is additive: no file can take back another's
# blacklist, so it has no override here; what undoes a blacklisting install line (install MODULE
# /bin/false) is another install line read before it, which the "install" rule reports.
MODPROBE_DIRS = ("/etc/modprobe.d", "/run/modprobe.d", "/usr/local/lib/modprobe.d", "/usr/lib/modprobe.d",
                 "/lib/modprobe.d")
KERNEL_ARG = re.compile(r'(?:[^\s"]|"[^"]*")+')  # the kernel's next_arg: a double-quoted part keeps blanks


def underscores(name):
    """kmod's underscores(): "-" and "_" are the same in module names (not inside [...])."""
    out, depth = [], 0
    for ch in name:
        depth += ch == "["
        depth -= ch == "]" and depth > 0
        out.append("_" if ch == "-" and not depth else ch)
    return "".join(out)


def parse_modprobe(lines):
    """[(line numbers, command, module, the rest)]: kmod_config_parse; a line ending in a backslash goes on
    (freadline_wrapped); "#" in the first column starts a comment."""
    out, numbers, text = [], [], ""
    for n, line in enumerate(lines, 1):
        numbers.append(n)
        text += line
        if text.endswith("\\"):
            text = text[:-1]
            continue
        words, nums, numbers, text = text.split(None, 2), numbers, [], ""
        if len(words) >= 2 and not words[0].startswith("#"):
            out.append((nums, words[0], underscores(words[1]), words[2] if len(words) > 2 else ""))
    return out


def module_params(rest):
    """{param: value} of an options line (the kernel's parameq: "-" and "_" the same in names)."""
    out = {}
    for arg in KERNEL_ARG.findall(rest):
        name, _, value = arg.partition("=")
        out[name.replace("-", "_")] = value.strip('"')
    return out


def check_modprobe(host, entry):
    chain = dropins(host, MODPROBE_DIRS, lambda n: n.endswith(".conf") and len(n) > 5 and n[0] != ".")
    pos = position(host, entry, chain, "kmod", True)
    if not isinstance(pos, int):
        return [pos] if pos else []
    options, installs = {}, {}
    for _, cmd, module, rest in parse_modprobe(host.lines(entry["path"])):
        if cmd == "options":
            options.update({(module, p): v for p, v in module_params(rest).items()})
        elif cmd == "install":
            installs.setdefault(module, fold(rest))  # our own first install line is ours in effect
    out = []
    for i, path, lines in foreign(host, chain):
        for nums, cmd, module, rest in parse_modprobe(lines):
            if cmd == "options" and i > pos:
                for param, value in sorted(module_params(rest).items()):
                    mine = options.get((module, param))
                    if mine is not None and value != mine:
                        out.append(item(entry, path, nums[0], f"options {module} {param}", value, mine, nums))
            elif cmd == "install" and i < pos:
                for name, mine in sorted(installs.items()):
                    if fnmatch.fnmatchcase(name, module) and fold(rest) != mine:
                        out.append(item(entry, path, nums[0], f"install {name}", fold(rest), mine, nums))
    return out


# --- apt_preferences ------------------------------------------------------------------------------
# apt-pkg cachefile.cc BuildPolicy: ReadPinFile (/etc/apt/preferences) then ReadPinDir (preferences.d:
# GetListOfFilesInDir(Dir, "pref", true, true), i.e. apt_preferences(5) "parsed in alphanumeric ascending
# order ... either no or "pref" as filename extension and only contain alphanumeric, hyphen (-), underscore
# (_) and period (.) characters"); lines starting with "#" are comments (pkgTagFile::SUPPORT_COMMENTS).
# apt_preferences(5): "The first specific-form record matching an available package version determines
# the priority of the package version. Failing that, the priority of the package is defined as the maximum
# of all priorities defined by generic-form records matching the version" (policy.cc CreatePin keeps the
# first pin of a version). So a foreign specific record for the same packages read BEFORE ours wins over
# ours, one after ours does not (for the versions our Pin matches: which versions each Pin matches is not
# known here, so a different Pin or priority read before ours counts); for a managed "Package: *" record,
# a foreign "Package: *" record with the same Pin and a higher priority wins wherever it is read.
APT_PREFS, APT_PREFS_DIR = "/etc/apt/preferences", "/etc/apt/preferences.d"


def apt_part(name, ext):
    """fileutl.cc GetListOfFilesInDir: no leading ".", only [A-Za-z0-9_.-], not ending in ".", extension
    `ext` or none."""
    if name.startswith(".") or name.endswith(".") or not re.match(r"[A-Za-z0-9_.-]+\Z", name):
        return False
    return "." not in name or name.rsplit(".", 1)[1] == ext


def parse_prefs(lines):
    """[{"fields": {lowercase name: value}, "lines": [numbers]}] of the records that have a Package."""
    records, current, last = [], None, None
    for n, line in enumerate(lines, 1):
        if not line.strip():
            current = None
            continue
        if line.startswith("#"):
            continue
        if current is None:
            current = {"fields": {}, "lines": []}
            records.append(current)
        current["lines"].append(n)
        if line[0] in " \t" and last in current["fields"]:
            current["fields"][last] += " " + line.strip()
            continue
        name, _, value = line.partition(":")
        last = name.strip().lower()
        current["fields"][last] = value.strip()
    return [r for r in records if r["fields"].get("package")]


def pin(record):
    fields = record["fields"]
    return f"Pin: {fold(fields.get('pin', ''))} Pin-Priority: {fields.get('pin-priority', '').strip()}"


def package_matches(pattern, name):
    """apt_preferences(5): a name, a glob(7) or a /regular expression/ (policy.cc CreatePin)."""
    if len(pattern) > 1 and pattern.startswith("/") and pattern.endswith("/"):
        try:
            return re.search(pattern[1:-1], name) is not None
        except re.error:
            return False
    if re.search(r"[*?\[]", pattern):
        return fnmatch.fnmatchcase(name, pattern)
    return pattern == name


def packages_overlap(ours, theirs):
    plain = re.compile(r"[^*?\[/]+\Z")
    return ours == theirs or any(a == b or (plain.match(b) and package_matches(a, b))
                                 or (plain.match(a) and package_matches(b, a))
                                 for a in ours.split() for b in theirs.split())


def priority(record):
    try:
        return int(record["fields"].get("pin-priority", "0"))
    except ValueError:
        return 0


def check_apt_preferences(host, entry):
    chain = ([APT_PREFS] if host.exists(APT_PREFS) else []) + sorted(
        APT_PREFS_DIR + "/" + n for n in host.listdir(APT_PREFS_DIR) if apt_part(n, "pref"))
    pos = position(host, entry, chain, "apt")
    if pos is None:
        return []
    out = []
    for mine in parse_prefs(host.lines(entry["path"])):
        package = mine["fields"]["package"]
        for i, path, lines in foreign(host, chain):
            for record in parse_prefs(lines):
                theirs = record["fields"]["package"]
                if package == "*":
                    hit = theirs == "*" and fold(record["fields"].get("pin", "")) == fold(
                        mine["fields"].get("pin", "")) and priority(record) > priority(mine)
                else:
                    hit = i < pos and theirs != "*" and packages_overlap(package, theirs)
                if hit and pin(record) != pin(mine):
                    out.append(item(entry, path, record["lines"][0], "Package: " + package, pin(record), pin(mine),
                                    record["lines"]))
    return out


# --- apt_conf -------------------------------------------------------------------------------------
# apt.conf(5): the files of Dir::Etc::Parts (/etc/apt/apt.conf.d) "in alphanumeric ascending order which
# have either no or "conf" as filename extension and which only contain alphanumeric, hyphen (-),
# underscore (_) and period (.) characters", then the main file Dir::Etc::main (/etc/apt/apt.conf)
# (apt-pkg init.cc pkgInitConfig reads them in that order). "Lines starting with // are treated as comments
# (ignored), as well as all text between /* and */ ... Lines starting with # are also treated as comments";
# "#clear is used to erase a part of the configuration tree"; "Case is not significant in names of
# configuration items"; an option is "overridden by addressing a new value to" it: the later one wins.
# List items ("A::B:: ..." or a bare "value"; in a scope) add to a list: not overrides.
APT_CONF, APT_CONF_DIR = "/etc/apt/apt.conf", "/etc/apt/apt.conf.d"
APT_TOKENS = re.compile(r'(?m)^[ \t]*#clear\b[^\n;]*|^[ \t]*#[^\n]*|//[^\n]*|/\*.*?\*/|"[^"\n]*"|[{};]'
                        r'|[^\s{};"]+', re.S)


def apt_statements(text):
    """[(words: [(line, token)], scope names)] of an apt.conf text, each statement ended by ";"."""
    out, stack, words, line, at = [], [], [], 1, 0
    for m in APT_TOKENS.finditer(text):
        line += text.count("\n", at, m.start())
        at, tok = m.start(), m.group()
        if tok.startswith(("//", "/*")) or (tok.lstrip().startswith("#") and not tok.lstrip().startswith("#clear")):
            continue
        if tok == "{":
            stack.append(words[0][1] if words else "")
            words = []
        elif tok == "}":
            stack = stack[:-1]
            words = []
        elif tok == ";":
            out.append((words, list(stack)))
            words = []
        else:
            words.append((line, tok.strip()))
    return out


def parse_apt_conf(lines):
    """[(line numbers, key, value or None for #clear)] of the assignments of an apt.conf file."""
    out = []
    for words, stack in apt_statements("\n".join(lines)):
        if not words:
            continue
        nums = sorted({n for n, _ in words})
        if words[0][1].startswith("#clear"):
            name = words[0][1][len("#clear"):].strip() or (words[1][1] if len(words) > 1 else "")
            out.append((nums, "::".join(stack + [name]).strip(":"), None))
        elif len(words) >= 2 and not words[0][1].startswith('"') and not words[0][1].endswith("::"):
            out.append((nums, "::".join([s for s in stack if s] + [words[0][1]]), words[1][1].strip('"')))
    return out


def braces_balanced(lines):
    text = re.sub(r'"[^"]*"|//.*', "", "\n".join(lines))
    return text.count("{") == text.count("}")


def check_apt_conf(host, entry):
    chain = sorted(APT_CONF_DIR + "/" + n for n in host.listdir(APT_CONF_DIR) if apt_part(n, "conf"))
    chain += [APT_CONF] if host.exists(APT_CONF) else []
    pos = position(host, entry, chain, "apt")
    if pos is None:
        return []
    mine = {}
    for _, key, value in parse_apt_conf(host.lines(entry["path"])):
        if value is not None:
            mine[key.lower()] = (key, value)
    out = []
    for i, path, lines in foreign(host, chain):
        for nums, key, value in parse_apt_conf(lines) if i > pos else ():
            for low, (mkey, mvalue) in sorted(mine.items()):
                cleared = value is None and (low == key.lower() or low.startswith(key.lower() + "::"))
                if cleared or (value is not None and key.lower() == low and value != mvalue):
                    fix = nums if braces_balanced([lines[n - 1] for n in nums]) else []
                    why = None if fix else f"line {nums[0]} opens or closes a scope: edit it by hand"
                    out.append(item(entry, path, nums[0], mkey, "#clear " + key if cleared else value, mvalue,
                                    fix, why))
    return out


# --- grub -----------------------------------------------------------------------------------------
# grub-mkconfig: `if test -f ${sysconfdir}/default/grub ; then . ${sysconfdir}/default/grub; fi; for x in
# ${sysconfdir}/default/grub.d/*.cfg ; do if [ -e "${x}" ]; then . "${x}"; fi; done`: sourced in that order
# by a shell, the last assignment winning. The glob sorts in grub-mkconfig's locale; here in C (byte)
# order, as `env -i bash` globs (unverified where a host's locale collates the names otherwise). The kernel
# takes the last occurrence of a parameter on its command line, GRUB_CMDLINE_LINUX then
# GRUB_CMDLINE_LINUX_DEFAULT (10_linux: "${GRUB_CMDLINE_LINUX} ${GRUB_CMDLINE_LINUX_DEFAULT}"). A file
# sourced before ours that sets a conflicting parameter in GRUB_CMDLINE_LINUX_DEFAULT is not reported.
GRUB_FILE, GRUB_DIR = "/etc/default/grub", "/etc/default/grub.d"
GRUB_VARS = ("GRUB_CMDLINE_LINUX", "GRUB_CMDLINE_LINUX_DEFAULT")
GRUB_EVAL = ('set +e; exec 3>&1 >/dev/null 2>&1 </dev/null; for __llmfleet_file in "$@"; do . "$__llmfleet_file"; '
             'printf "%s\\0%s\\0" "${GRUB_CMDLINE_LINUX-}" "${GRUB_CMDLINE_LINUX_DEFAULT-}" >&3; done')
GRUB_ASSIGN = re.compile(r"\s*(?:export\s+)?(GRUB_CMDLINE_LINUX(?:_DEFAULT)?)\+?=")


def grub_states(host, chain):
    """[(GRUB_CMDLINE_LINUX, GRUB_CMDLINE_LINUX_DEFAULT) after sourcing each file of `chain`], by bash with
    an empty environment sourcing nothing but the files (the managed content not written yet from a
    temporary file); None where bash cannot run."""
    temps, files = [], []
    try:
        for path in chain:
            if path in host.contents:
                with tempfile.NamedTemporaryFile("w", suffix=".cfg", delete=False) as fh:
                    fh.write(host.contents[path])
                temps.append(fh.name)
            files.append(temps[-1] if path in host.contents else host.fs(host.resolve(path)))
        proc = subprocess.run(["env", "-i", "bash", "--noprofile", "--norc", "-c", GRUB_EVAL, "bash"] + files,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        host.unreadable[chain[0]] = f"bash could not source the grub files: {exc}"
        return None
    finally:
        for name in temps:
            os.unlink(name)
    fields = proc.stdout.decode("utf-8", "surrogateescape").split("\0")
    states = [(fields[2 * i], fields[2 * i + 1]) for i in range(len(fields) // 2)]
    if len(states) < len(chain):
        host.unreadable[chain[len(states)]] = "sourcing it stopped the shell"
    return states


def assignment_lines(lines, names):
    """The lines of a shell file's assignments to the variables `names`, a quoted value's further lines
    included."""
    out, quote, going = [], None, False
    for n, line in enumerate(lines, 1):
        if not going:
            m = GRUB_ASSIGN.match(line)
            if not m or m.group(1) not in names:
                continue
        out.append(n)
        escaped = False
        for ch in line:
            if escaped:
                escaped = False
            elif ch == "\\" and quote != "'":
                escaped = True
            elif ch in "\"'" and quote in (None, ch):
                quote = None if quote else ch
        going = quote is not None or line.endswith("\\")
    return out


def grub_value(state, var, token):
    """What the kernel gets for the token's parameter: its last occurrence, "missing" where it is gone (or
    gone from `var`)."""
    name = token.split("=", 1)[0].replace("-", "_")
    last = [w for w in (state[0] + " " + state[1]).split() if w.split("=", 1)[0].replace("-", "_") == name]
    if token not in state[GRUB_VARS.index(var)].split() and (not last or last[-1] == token):
        return "missing"
    return last[-1] if last else "missing"


def tokens_added(before, after):
    rest, out = before.split(), []
    for word in after.split():
        if word in rest:
            rest.remove(word)
        else:
            out.append(word)
    return out


def check_grub(host, entry):
    chain = ([GRUB_FILE] if host.exists(GRUB_FILE) else []) + [
        GRUB_DIR + "/" + n for n in sorted(host.listdir(GRUB_DIR)) if n.endswith(".cfg")]
    pos = position(host, entry, chain, "grub-mkconfig")
    for path in chain:
        host.lines(path)  # one bash cannot read is skipped by it (as by grub-mkconfig's shell): named here
    states = grub_states(host, chain) if pos is not None else None
    if not states or len(states) <= pos:
        return []
    before = states[pos - 1] if pos else ("", "")
    tokens = [(GRUB_VARS[v], t) for v in (0, 1) for t in tokens_added(before[v], states[pos][v])]
    out = []
    for i in range(pos + 1, len(states)):
        path = chain[i]
        changed = [GRUB_VARS[v] for v in (0, 1) if states[i - 1][v] != states[i][v]]
        if host.is_managed(path) or not changed:
            continue
        fix = assignment_lines(host.lines(path) or [], changed)
        for var, token in tokens:
            got = grub_value(states[i], var, token)
            if got != token:
                why = None if fix else "changes " + " and ".join(changed) + " without an assignment line"
                out.append(item(entry, path, fix[0] if fix else 0, token.split("=", 1)[0], got, token, fix, why))
    return out


CHECKS = {"sysctl": check_sysctl, "limits": check_limits, "systemd_manager": check_systemd_manager,
          "systemd_unit": check_systemd_unit, "modprobe": check_modprobe,
          "apt_preferences": check_apt_preferences, "apt_conf": check_apt_conf, "grub": check_grub}


# --- the driver -----------------------------------------------------------------------------------
def comment(one, line):
    return f"# llmfleet: {one['key']} is managed in {one['managed']} ({one['managed_value']}); was: {line}"


def rewrite(path, fixes):
    """Comment out lines of a file in place ({line number: item}): the same inode, so owner and mode stay."""
    with open(path, "r+", encoding="utf-8", errors="surrogateescape", newline="") as fh:
        parts = fh.read().split("\n")
        for n, one in sorted(fixes.items()):
            if 0 < n <= len(parts) and not parts[n - 1].startswith("# llmfleet: "):
                end = "\r" if parts[n - 1].endswith("\r") else ""
                parts[n - 1] = comment(one, parts[n - 1].rstrip("\r")) + end
        fh.seek(0)
        fh.write("\n".join(parts))
        fh.truncate()


def repair(host, items):
    """Comment out every overriding line; {"repaired", "units", "unreadable"}."""
    fixes, failed = {}, set()
    for one in items:
        if not one["_fix"]:
            host.unreadable.setdefault(one["file"], one["_why"] or "cannot be commented out")
        for n in one["_fix"]:
            fixes.setdefault(one["file"], {}).setdefault(n, one)
    for path, lines in sorted(fixes.items()):
        try:
            rewrite(host.fs(host.resolve(path)), lines)
        except OSError as exc:
            host.unreadable[path] = "cannot rewrite it: " + (exc.strerror or str(exc))
            failed.add(path)
    done = [one for one in items if one["_fix"] and one["file"] not in failed]
    return {"repaired": public(done), "units": sorted({one["_unit"] for one in done if one.get("_unit")}),
            "unreadable": unreadable(host)}


def public(items):
    out = {json.dumps({k: v for k, v in one.items() if not k.startswith("_")}, sort_keys=True) for one in items}
    return sorted((json.loads(text) for text in out),
                  key=lambda o: (o["managed"], o["file"], o["line"], o["key"], str(o["value"])))


def unreadable(host):
    return [{"file": path, "why": why} for path, why in sorted(host.unreadable.items())]


def load_entries(arg, root):
    """The entries of ENTRIES (a JSON list, or @FILE with {"entries": [...]}) that have an absolute path."""
    if arg.startswith("@"):
        under = os.path.join(root, arg[1:].lstrip("/")) if root else arg[1:]
        with open(under if os.path.exists(under) else arg[1:]) as fh:
            data = json.load(fh)
        data = data.get("entries", []) if isinstance(data, dict) else data
    elif arg.startswith("z:"):
        data = json.loads(zlib.decompress(base64.b64decode(arg[2:])).decode())
    else:
        data = json.loads(arg)
    if not isinstance(data, list):
        raise ValueError("ENTRIES is not a list")
    return [dict(e, path=os.path.normpath(e["path"])) for e in data
            if isinstance(e, dict) and isinstance(e.get("path"), str) and e["path"].startswith("/")]


def main(argv):
    parser = argparse.ArgumentParser(prog="managed_files_dropins")
    parser.add_argument("--root", default="", help="read every absolute path under this folder (tests)")
    parser.add_argument("--repair", action="store_true", help="comment out the overriding lines")
    parser.add_argument("entries", help="a JSON list of entries, or @FILE holding {\"entries\": [...]}")
    args = parser.parse_args(argv)
    try:
        entries = load_entries(args.entries, args.root)
    except (OSError, ValueError, zlib.error) as exc:
        print(json.dumps({"error": f"cannot read ENTRIES: {exc}"}))
        return 2
    host = Host(args.root, entries)
    items = []
    for entry in entries:
        check = CHECKS.get(entry.get("folder"))
        if check is not None and host.exists(entry["path"]) and host.lines(entry["path"]) is not None:
            items.extend(check(host, entry))
    if args.repair:
        print(json.dumps(repair(host, items)))
    else:
        print(json.dumps({"overrides": public(items), "unreadable": unreadable(host)}))
    return 0


sys.exit(main(sys.argv[1:]))
