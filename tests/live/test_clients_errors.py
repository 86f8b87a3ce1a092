"""
Each way a client cannot start, as a person meets it: C{.venv/bin/vehicle
ride} and C{vehicle tail} in a child process, given a URL without a scheme,
a port nobody listens on, a certificate nobody vouched for (or for another
name), no token, a wrong token.  Each ends within seconds, non-zero, with
its own one line on standard error and no traceback.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from twisted.internet import reactor
from twisted.trial.unittest import TestCase

from vehicle_local.standin import freeLoopbackPort

from tests.support._clients import Client, clientEnvironment, runClient
from tests.support._tls import ThrowawayCA, listenTLS
from tests.support.live import startStandIn


MASTER = "master-clients-errors"

#: Generous: a child's Python and Twisted start in about a second.
SECONDS = 10.0

RIDE = ("ride", "--graph", "g1", "--new")
TAIL = ("tail", "--graph", "g1", "--session", "s1")


class ClientErrorTests(TestCase):
    """
    Both clients, each error.
    """

    timeout = 120

    def assertOneLine(self, client: Client, *expected: str) -> str:
        """
        The child ended quickly and said one line on standard error holding
        each of C{expected}, with no traceback.
        """
        self.assertLess(client.elapsed, SECONDS)
        self.assertNotIn("Traceback", client.errorText)
        self.assertEqual(len(client.errorLines), 1, client.errorText)
        [line] = client.errorLines
        for text in expected:
            self.assertIn(text, line)
        return line

    async def both(self, gardend: str, code: int, *expected: str, **kw: Any) -> list[Client]:
        """
        Run ride and tail against C{gardend}; each ends with C{code} and one
        line holding C{expected}.  Returns both clients.
        """
        clients = []
        for args in (RIDE, TAIL):
            client = await runClient(self, args[0], "--gardend", gardend, *args[1:], **kw)
            status = await client.ended
            self.assertEqual(status, code, (args[0], client.errorText, client.lines))
            line = self.assertOneLine(client, *expected)
            self.assertTrue(line.startswith(f"vehicle {args[0]}: "), line)
            clients.append(client)
        return clients

    async def test_noScheme(self) -> None:
        """
        A URL without C{http://} or C{https://}: a usage error (2) naming
        what to write, before any connection.
        """
        ride, tail = await self.both("127.0.0.1:8700", 2, "--gardend must be a URL starting "
                                     "with http:// or https://", "try http://127.0.0.1:8700")
        self.assertEqual((ride.lines, tail.lines), ([], []))

    async def test_refused(self) -> None:
        """
        Nobody listening: 3, "connection refused" and where.  The ride's
        standard output has its frames still: the refusal, then closed.
        """
        port = freeLoopbackPort()
        ride, tail = await self.both(f"http://127.0.0.1:{port}", 3,
                                     f"cannot connect to 127.0.0.1:{port}: connection refused")
        frames = ride.frames()
        self.assertEqual([f["type"] for f in frames], ["error", "closed"])
        self.assertEqual(frames[0]["code"], "unreachable")
        self.assertEqual(frames[0]["details"]["reason"], "refused")
        self.assertEqual(tail.lines, [])

    async def test_untrustedCertificate(self) -> None:
        """
        gardend over https with a certificate from a CA the client was not
        told of: 3, a TLS failure, "certificate verify failed".
        """
        stand = startStandIn(self, masterKey=MASTER)
        ca = ThrowawayCA.make()
        _, port = listenTLS(reactor, stand.resource(), ca.serverCertificate("localhost", "127.0.0.1"), self)
        env = clientEnvironment(self, VEHICLE_TOKEN=MASTER)
        await self.both(f"https://127.0.0.1:{port}", 3, f"TLS failure with 127.0.0.1:{port}",
                        "certificate verify failed", env=env)
        self.assertEqual(stand.requestsSeen, [])

    async def test_certificateForAnotherName(self) -> None:
        """
        A certificate the CA signed, but for another name: 3, a TLS failure
        saying it is not this host's.
        """
        stand = startStandIn(self, masterKey=MASTER)
        ca = ThrowawayCA.make()
        caFile = ca.writePEM(_path(self, "ca.pem"))
        _, port = listenTLS(reactor, stand.resource(), ca.serverCertificate("other.example"), self)
        env = clientEnvironment(self, VEHICLE_TOKEN=MASTER)
        for args in (RIDE, TAIL):
            client = await runClient(self, args[0], "--gardend", f"https://127.0.0.1:{port}",
                                     "--ca-file", str(caFile), *args[1:], env=env)
            self.assertEqual(client.ended.result, 3, client.errorText)
            self.assertOneLine(client, "TLS failure", "its certificate is not for 127.0.0.1")

    async def test_missingToken(self) -> None:
        """
        No token for a gardend on this computer: 1, saying where a token
        comes from.
        """
        stand = startStandIn(self, masterKey=MASTER)
        await self.both(stand.url, 1, "no token: set VEHICLE_TOKEN or give --key-file")

    async def test_wrongToken(self) -> None:
        """
        A token gardend does not know: 1, saying the token was refused
        (and not echoing it).
        """
        stand = startStandIn(self, masterKey=MASTER)
        env = clientEnvironment(self, VEHICLE_TOKEN="not-the-key-0123")
        ride, tail = await self.both(stand.url, 1, "gardend refused the token (unauthorized)",
                                     env=env)
        for client in (ride, tail):
            self.assertNotIn("not-the-key-0123", client.errorText)

    async def test_unreadableCAFile(self) -> None:
        """
        A C{--ca-file} that cannot be read is a usage error (2).
        """
        for args in (RIDE, TAIL):
            client = await runClient(self, args[0], "--gardend", "https://127.0.0.1:1",
                                     "--ca-file", "/nonexistent/ca.pem", *args[1:])
            self.assertEqual(client.ended.result, 2, client.errorText)
            self.assertOneLine(client, "cannot read --ca-file /nonexistent/ca.pem")


def _path(testCase: TestCase, name: str) -> Path:
    folder = Path(testCase.mktemp())
    folder.mkdir(parents=True)
    return folder / name
