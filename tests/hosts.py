"""Other hosts for the tests: Linux network namespaces joined to this one by veth pairs.

Each `Host` is a namespace with its own loopback and one address, 10.231.N.2, whose
peer on this side is 10.231.N.1 (a /30 of its own). A fence route makes the whole
10.231.0.0/16 unreachable from here except through those veth pairs, so nothing a
test sends to a host that is gone (or not yet up) can leave the machine. Commands run
"on" a host through `ip netns exec`, which keeps this machine's files and processes:
a namespace stands for another host's network only, which is what these tests cross.

Made with Debian's iproute2 as root; where that is refused, `hosts_or_skip` skips the
test with the reason.
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

FENCE = "10.231.0.0/16"
_numbers = itertools.count(1 + (os.getpid() % 40) * 6)
_fenced = False


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def namespaces_unavailable() -> str | None:
    """Why no namespace can be made here, or None when they can."""
    if shutil.which("ip") is None:
        return "iproute2's `ip` is not installed"
    if os.geteuid() != 0:
        return "network namespaces need root"
    probe = f"mlxlab-probe-{os.getpid()}"
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"`ip netns add` is refused here: {made.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


def _fence() -> None:
    """The /16 unreachable but through the hosts' own /30 routes (more specific)."""
    global _fenced
    if not _fenced:
        added = _ip("route", "add", "unreachable", FENCE, check=False)
        _fenced = added.returncode == 0 or "File exists" in added.stderr
        if not _fenced:
            raise RuntimeError(f"cannot fence {FENCE}: {added.stderr.strip()}")


@dataclass
class Host:
    """A namespace standing for another host; `address` is its own, `gateway` ours."""

    name: str
    number: int
    processes: list[subprocess.Popen] = field(default_factory=list)

    @property
    def address(self) -> str:
        return f"10.231.{self.number}.2"

    @property
    def gateway(self) -> str:
        return f"10.231.{self.number}.1"

    @property
    def outer(self) -> str:  # this side's end of the veth pair
        return f"mlxh{os.getpid() % 10000}n{self.number}"

    @property
    def inner(self) -> str:
        return f"mlxi{os.getpid() % 10000}n{self.number}"

    def up(self) -> Host:
        _fence()
        _ip("netns", "add", self.name)
        _ip("-n", self.name, "link", "set", "lo", "up")
        _ip("link", "add", self.outer, "type", "veth", "peer", "name", self.inner)
        _ip("link", "set", self.inner, "netns", self.name)
        _ip("addr", "add", f"{self.gateway}/30", "dev", self.outer)
        _ip("link", "set", self.outer, "up")
        _ip("-n", self.name, "addr", "add", f"{self.address}/30", "dev", self.inner)
        _ip("-n", self.name, "link", "set", self.inner, "up")
        route = _ip("route", "get", self.address).stdout
        assert f"dev {self.outer}" in route, route  # never anywhere but the veth
        return self

    def popen(self, argv: list[str], *, log: Path, env: dict, cwd: Path) -> subprocess.Popen:
        """A process on this host (its pid is the command's: `ip netns exec` execs it)."""
        with open(log, "ab") as out:
            process = subprocess.Popen(
                ["ip", "netns", "exec", self.name, *argv],
                cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        self.processes.append(process)
        return process

    def run(self, argv: list[str], **kwargs) -> subprocess.CompletedProcess:
        return subprocess.run(["ip", "netns", "exec", self.name, *argv], **kwargs)

    def cut(self) -> None:
        """The host drops off the network (no FIN, no RST): its link goes down."""
        _ip("-n", self.name, "link", "set", self.inner, "down")

    def mend(self) -> None:
        _ip("-n", self.name, "link", "set", self.inner, "up")

    def down(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.kill()
                process.wait(10)
        _ip("link", "del", self.outer, check=False)  # its peer goes with it
        _ip("netns", "del", self.name, check=False)


@dataclass
class SwitchedHost(Host):
    """A host on a shared segment (a Network's bridge), at 10.231.N.(index + 2)."""

    index: int = 0

    @property
    def address(self) -> str:
        return f"10.231.{self.number}.{self.index + 2}"

    @property
    def gateway(self) -> str:
        return f"10.231.{self.number}.1"

    def up(self) -> SwitchedHost:
        raise NotImplementedError("made by Network")

    def down(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.kill()
                process.wait(10)
        _ip("netns", "del", self.name, check=False)


class Network:
    """Several hosts on one segment (a bridge in a namespace of its own), which this host
    joins at 10.231.N.1: the hosts reach each other, and this host reaches them all."""

    def __init__(self, label: str, count: int) -> None:
        _fence()
        self.number = next(_numbers)
        tag = f"{os.getpid() % 10000}n{self.number}"
        self.switch = f"mlxlab-{label}-sw-{os.getpid()}-{self.number}"
        self.hosts: list[SwitchedHost] = []
        self.outer = f"mlxh{tag}"
        _ip("netns", "add", self.switch)
        _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.switch, "link", "set", "br0", "up")
        self._plug(self.outer, f"mlxs{tag}", None)
        _ip("addr", "add", f"10.231.{self.number}.1/24", "dev", self.outer)
        _ip("link", "set", self.outer, "up")
        for index in range(count):
            name = f"mlxlab-{label}-{os.getpid()}-{self.number}-{index}"
            host = SwitchedHost(name, self.number, index=index)
            _ip("netns", "add", name)
            _ip("-n", name, "link", "set", "lo", "up")
            inner = f"mlxi{tag}x{index}"
            self._plug(inner, f"mlxs{tag}x{index}", name)
            _ip("-n", name, "addr", "add", f"{host.address}/24", "dev", inner)
            _ip("-n", name, "link", "set", inner, "up")
            self.hosts.append(host)
        route = _ip("route", "get", self.hosts[0].address).stdout
        assert f"dev {self.outer}" in route, route

    def _plug(self, end: str, port: str, namespace: str | None) -> None:
        """A veth pair: `end` here or in `namespace`, `port` on the bridge."""
        _ip("link", "add", end, "type", "veth", "peer", "name", port)
        _ip("link", "set", port, "netns", self.switch)
        _ip("-n", self.switch, "link", "set", port, "master", "br0")
        _ip("-n", self.switch, "link", "set", port, "up")
        if namespace is not None:
            _ip("link", "set", end, "netns", namespace)

    def down(self) -> None:
        for host in self.hosts:
            host.down()
        _ip("link", "del", self.outer, check=False)
        _ip("netns", "del", self.switch, check=False)


def new_host(label: str) -> Host:
    number = next(_numbers)
    return Host(f"mlxlab-{label}-{os.getpid()}-{number}", number).up()


def hosts_or_skip() -> None:
    reason = namespaces_unavailable()
    if reason is not None:
        pytest.skip(f"no network namespaces to stand for other hosts: {reason}")


def unfence() -> None:
    global _fenced
    if _fenced:
        _ip("route", "del", "unreachable", FENCE, check=False)
        _fenced = False


PYTHON = sys.executable
