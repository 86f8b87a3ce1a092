"""
Tests for L{vehicle._sockets}: streaming sockets send each small write at
once (C{TCP_NODELAY}), on a real loopback connection and on the parts that
set it.
"""

from __future__ import annotations

import array
import fcntl
import socket
from typing import Any

from twisted.internet.defer import succeed
from twisted.internet.protocol import Factory, Protocol
from twisted.internet.tcp import Server
from twisted.internet.testing import MemoryReactor, StringTransport
from twisted.trial.unittest import SynchronousTestCase

from vehicle._sockets import NoDelayEndpoint, NoDelayHTTPChannel, noDelay


#: Linux's ioctl for the bytes a socket holds that it has not sent yet.
SIOCOUTQNSD = 0x894B


def unsent(sock: socket.socket) -> int:
    held = array.array("i", [0])
    fcntl.ioctl(sock.fileno(), SIOCOUTQNSD, held)
    return held[0]


class TCPTransport(StringTransport):
    """
    A transport that is TCP: it records C{setTcpNoDelay}.
    """

    def __init__(self, fails: bool = False) -> None:
        super().__init__()
        self.noDelay: list[bool] = []
        self.fails = fails

    def setTcpNoDelay(self, enabled: bool) -> None:
        if self.fails:
            raise OSError("the socket is closed")
        self.noDelay.append(enabled)


class NoDelayTests(SynchronousTestCase):
    """
    L{noDelay} sets the option where there is one.
    """

    def test_tcp(self) -> None:
        transport = TCPTransport()
        self.assertTrue(noDelay(transport))
        self.assertEqual(transport.noDelay, [True])

    def test_notTCP(self) -> None:
        self.assertFalse(noDelay(StringTransport()))
        self.assertFalse(noDelay(None))

    def test_closed(self) -> None:
        self.assertFalse(noDelay(TCPTransport(fails=True)))

    def test_channel(self) -> None:
        """
        An HTTP channel of L{NoDelayHTTPChannel} sets it as it connects,
        and is an HTTP channel all the same.
        """
        channel = NoDelayHTTPChannel()
        transport = TCPTransport()
        channel.makeConnection(transport)
        self.assertEqual(transport.noDelay, [True])
        self.assertTrue(channel.connected)

    def test_endpoint(self) -> None:
        """
        L{NoDelayEndpoint} sets it on each connection it makes, and gives
        the protocol as the endpoint it wraps gave it.
        """
        protocol = Protocol()
        transport = TCPTransport()
        protocol.makeConnection(transport)

        class Endpoint:
            def connect(self, factory: Any) -> Any:
                return succeed(protocol)

        made = self.successResultOf(NoDelayEndpoint(Endpoint()).connect(Factory()))
        self.assertIs(made, protocol)
        self.assertEqual(transport.noDelay, [True])


class LoopbackTests(SynchronousTestCase):
    """
    On a real loopback connection, a small write behind one the peer has
    not acknowledged leaves at once when Twisted's TCP transport had
    L{noDelay}, and is held without it.
    """

    def pair(self, setNoDelay: bool) -> tuple[socket.socket, socket.socket]:
        listener = socket.socket()
        self.addCleanup(listener.close)
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        client = socket.create_connection(listener.getsockname())
        self.addCleanup(client.close)
        accepted, address = listener.accept()
        self.addCleanup(accepted.close)
        server = Server(accepted, Protocol(), address, None, 1, MemoryReactor())
        if setNoDelay:
            self.assertTrue(noDelay(server))
        # A few questions and answers: the client now delays its ACKs.
        for _ in range(20):
            client.sendall(b"?")
            accepted.recv(16)
            accepted.sendall(b"a" * 100)
            received = 0
            while received < 100:
                received += len(client.recv(4096))
        return accepted, client

    def writeTwice(self, accepted: socket.socket) -> int:
        accepted.sendall(b"delta one ")
        accepted.sendall(b"delta two ")
        return unsent(accepted)

    def test_sentAtOnce(self) -> None:
        accepted, client = self.pair(setNoDelay=True)
        self.assertEqual(
            accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY), 1
        )
        self.assertEqual(self.writeTwice(accepted), 0)
        self.assertEqual(client.recv(20, socket.MSG_WAITALL), b"delta one delta two ")

    def test_heldWithoutIt(self) -> None:
        """
        The control: with Nagle's algorithm on, the writes wait.
        """
        accepted, _ = self.pair(setNoDelay=False)
        self.assertEqual(accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY), 0)
        self.assertGreater(self.writeTwice(accepted), 0)


class WhereItIsSetTests(SynchronousTestCase):
    """
    The project's streaming parts use L{vehicle._sockets}.
    """

    def test_clients(self) -> None:
        """
        The host's HTTP client (the proxy's, the gateway's) connects each
        URL through L{NoDelayEndpoint} (under TLS for C{https}).
        """
        from twisted.web.client import URI

        from vehicle._http import DirectEndpoints

        endpoints = DirectEndpoints(MemoryReactor())
        for url in (b"http://127.0.0.1:9/v1", b"http://[::1]:9/", b"http://model.test:9/"):
            self.assertIsInstance(endpoints.endpointForURI(URI.fromBytes(url)), NoDelayEndpoint)
        tls = endpoints.endpointForURI(URI.fromBytes(b"https://127.0.0.1:9/"))
        self.assertIsInstance(tls._wrappedEndpoint, NoDelayEndpoint)  # type: ignore[attr-defined]  # wrapClientTLS's

    def test_servers(self) -> None:
        """
        The scripted model's site and the stand-in's answer on
        L{NoDelayHTTPChannel}s; the host's channel sets it as it connects.
        """
        from vehicle.web._limits import GuardedChannel
        from vehicle_local.model import ScriptedModel
        from vehicle_local.standin import Config, StandIn

        memory = MemoryReactor()
        ScriptedModel(reactor=memory).listen(memory)
        config = Config.fromJSON({"masterKey": "m", "graphs": ["g1"], "tokens": [],
                                  "service": {"url": "http://127.0.0.1:9", "secret": "s"}})
        StandIn(root=self.mktemp(), config=config, reactor=memory).listen(memory, 0)
        sites = [server[1] for server in memory.tcpServers]
        self.assertEqual(len(sites), 2)
        for site in sites:
            self.assertIs(site.protocol, NoDelayHTTPChannel)
        channel = GuardedChannel()
        transport = TCPTransport()
        channel.makeConnection(transport)
        self.assertIn(True, transport.noDelay)
