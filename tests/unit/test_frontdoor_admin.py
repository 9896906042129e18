"""The front door's runtime-API script (llmfleet/remote/frontdoor_admin.py) as a host runs it,
against a stand-in for HAProxy's admin socket (a UNIX socket answering `show stat` with the CSV
HAProxy 2.6 prints; the real HAProxy answers it in the lab test of a host's move to a layout):
`serving` waits until every server is UP and fails, naming each one's status, when one is not."""

from __future__ import annotations

import json
import socket
import subprocess
import threading
from pathlib import Path

import pytest

from llmfleet.remote import python_script

# `show stat vllm_instances 4 -1`: the header HAProxy prints, then one row a server (fields cut
# after the ones the script reads: pxname, svname, qcur, scur, status at their real positions)
HEADER = ("# pxname,svname,qcur,qmax,scur,smax,slim,stot,bin,bout,dreq,dresp,ereq,econ,eresp,wretr,wredis,"
          "status,weight")


def row(server: str, status: str, sessions: int = 0) -> str:
    return f"vllm_instances,{server},0,0,{sessions},0,,0,0,0,,0,,0,0,0,0,{status},1"


class StandInSocket:
    """Answers each `show stat` with the next of ``tables`` (the last one repeats)."""

    def __init__(self, path: Path, tables: list[list[str]]):
        self.path, self.tables, self.asked = path, tables, 0
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(str(path))
        self.sock.listen()
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.recv(4096)
                table = self.tables[min(self.asked, len(self.tables) - 1)]
                self.asked += 1
                conn.sendall(("\n".join([HEADER, *table]) + "\n\n").encode())


def serving(path: Path, timeout_s: float) -> subprocess.CompletedProcess:
    return subprocess.run(["sh", "-c", python_script("frontdoor_admin", "serving", str(path), "vllm_instances",
                                                     str(timeout_s))], capture_output=True, text=True, timeout=60)


@pytest.fixture
def admin(tmp_path):
    made = []

    def make(tables):
        made.append(StandInSocket(tmp_path / "admin.sock", tables))
        return tmp_path / "admin.sock"
    yield make
    for s in made:
        s.sock.close()


def test_serving_waits_until_every_instance_is_up(admin):
    path = admin([[row("a", "UP"), row("b", "DOWN")], [row("a", "UP"), row("b", "UP 1/2")],
                  [row("a", "UP"), row("b", "UP")]])
    proc = serving(path, 10)
    out = json.loads(proc.stdout)
    assert proc.returncode == 0 and out["ok"], proc.stdout + proc.stderr
    assert {n: s["status"] for n, s in out["servers"].items()} == {"a": "UP", "b": "UP 1/2"}


def test_serving_fails_naming_the_instance_that_is_not_up(admin):
    path = admin([[row("a", "UP"), row("b", "DOWN", sessions=2)]])
    proc = serving(path, 1)
    out = json.loads(proc.stdout)
    assert proc.returncode == 1 and not out["ok"]
    assert out["why"] == "not every instance UP in the front door within 1s: a UP, b DOWN"


def test_serving_fails_when_the_front_door_does_not_answer(tmp_path):
    proc = serving(tmp_path / "nothing.sock", 1)
    assert proc.returncode == 1
    assert "(front door) not answering" in json.loads(proc.stdout)["why"]
