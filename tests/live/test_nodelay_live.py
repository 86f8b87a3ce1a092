"""
The sockets a delta crosses in a running stack send each write at once
(C{TCP_NODELAY}, L{vehicle._sockets}): read back from the real sockets of
the host's event stream, the scripted model's answer, the spare's proxy's
connection to the model, and the gardend stand-in's gateway.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

from twisted.trial.unittest import TestCase

from tests.support.live import LiveHost, SSEWatcher, readySpare, settledEvent, sleep, startStandIn


def recording(factory: Any) -> list[Any]:
    """
    Every protocol C{factory} builds from now on.
    """
    built: list[Any] = []
    original = factory.buildProtocol

    def buildProtocol(addr: Any) -> Any:
        protocol = original(addr)
        built.append(protocol)
        return protocol

    factory.buildProtocol = buildProtocol
    return built


def option(protocol: Any) -> int:
    """
    C{TCP_NODELAY} as the kernel has it on C{protocol}'s socket.
    """
    handle: socket.socket = protocol.transport.getHandle()
    return handle.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)


class StreamingSocketTests(TestCase):
    """
    Every streaming socket of the stack has C{TCP_NODELAY} set.
    """

    timeout = 90

    async def test_theStack(self) -> None:
        """
        A prompt on a spare's body, watched on SSE: the host's side of the
        event stream, the model's side of its answer, and the proxy's
        connection to the model all have the option set.
        """
        host = await LiveHost(self, spareBodies=1, spareRefillMs=60000).start()
        hostChannels = recording(host.site)
        modelChannels = recording(host.modelPort.factory)
        await readySpare(host)
        sid = await host.create()
        watcher = await SSEWatcher(host, sid).start()
        await host.command(sid, "prompt", "p1", text="hello")
        await watcher.waitFor(lambda m: m.get("event") == "run.settled")
        self.assertTrue(hostChannels)
        stream = [c for c in hostChannels if c.transport is not None and c.transport.connected]
        self.assertTrue(stream)
        self.assertEqual({option(c) for c in stream}, {1})
        self.assertTrue(modelChannels)
        self.assertEqual({option(c) for c in modelChannels if c.transport.connected}, {1})
        pool = host.host.bodies.proxyConnections
        kept = [p for ps in pool._connections.values() for p in ps]
        self.assertTrue(kept)
        self.assertEqual({option(p) for p in kept}, {1})
        watcher.close()
        await host.waitFor(sid, settledEvent)

    async def test_theGateway(self) -> None:
        """
        The stand-in's gateway: its side of a caller's connection.
        """
        stand = startStandIn(self)
        channels = recording(stand._port.factory)
        address = stand._port.getHost()
        client = socket.create_connection((address.host, address.port))
        self.addCleanup(client.close)
        client.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        while not channels or channels[0].transport is None:
            await sleep(0.01)
        self.assertEqual(option(channels[0]), 1)


def _peerSockets(pid: int) -> list[socket.socket]:
    """
    Copies of the established TCP sockets process C{pid} holds (through
    C{pidfd_getfd}: the test runs as the bodies' user).
    """
    import ctypes
    import os

    inodes = {}
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[3] == "01":  # ESTABLISHED
            inodes[fields[9]] = fields[1]
    libc = ctypes.CDLL(None, use_errno=True)
    pidfd = os.pidfd_open(pid)
    found = []
    try:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if not target.startswith("socket:[") or target[8:-1] not in inodes:
                continue
            copied = libc.syscall(438, pidfd, int(fd.name), 0)  # pidfd_getfd
            if copied >= 0:
                found.append(socket.socket(fileno=copied))
    finally:
        os.close(pidfd)
    return found


class BridgeTests(TestCase):
    """
    The extension's bridge to the proxy (in pi's own process) sends each
    delta on to pi at once.
    """

    timeout = 90

    async def test_theBridge(self) -> None:
        """
        Right after a run on a spare's body, every TCP connection pi's
        process holds (its model client's, and the bridge's side of it)
        has the option set.
        """
        host = await LiveHost(self, spareBodies=1, spareRefillMs=60000).start()
        spare = await readySpare(host)
        sid = await host.create()
        await host.command(sid, "prompt", "p1", text="hello")
        await host.waitFor(sid, settledEvent)
        sockets = _peerSockets(spare.transport.pid)
        self.assertGreaterEqual(len(sockets), 2)
        try:
            self.assertEqual(
                {s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) for s in sockets}, {1}
            )
        finally:
            for s in sockets:
                s.close()
