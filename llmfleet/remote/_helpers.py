"""Put in front of every llmfleet/remote/<name>.py by llmfleet.facts.python_script: the helpers
the host-side scripts share (standard library only)."""

import subprocess


def sh(args):
    """A command's stdout, or "" when it is missing, fails or takes over 60 s."""
    try:
        proc = subprocess.run(args, capture_output=True, text=True, timeout=60)
        return proc.stdout if proc.returncode == 0 else ""
    except (OSError, subprocess.TimeoutExpired):
        return ""


def rd(path):
    """A file's stripped content, or None when it cannot be read."""
    try:
        return open(path).read().strip()
    except OSError:
        return None


