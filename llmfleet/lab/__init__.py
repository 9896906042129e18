"""The local lab: disposable Linux hosts (systemd-nspawn containers and a qemu VM) to deploy to."""

from llmfleet.lab.lifecycle import down, load, status_rows, testinfra_hosts, up

__all__ = ["down", "load", "status_rows", "testinfra_hosts", "up"]
