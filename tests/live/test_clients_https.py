"""
Both clients over https, certificates verified, as a person runs them: a
throwaway CA made in the test signs the certificate of a TLS listener in
front of the gardend stand-in's gateway, which forwards to a live host
(real pi, the scripted model); the clients trust that CA by C{--ca-file}.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from twisted.internet import reactor
from twisted.trial.unittest import TestCase

from tests.support._clients import Client, clientEnvironment, startClient
from tests.support._tls import ThrowawayCA, listenTLS
from tests.support.live import LiveHost, requirePi, startStandIn


MASTER = "master-clients-https"
MODEL_KEY = "sk-or-own-key-https-0123"


class HTTPSTests(TestCase):
    """
    C{vehicle ride} and C{vehicle tail} over https with a private CA.
    """

    timeout = 90

    async def gardendOverTLS(self) -> tuple[Any, LiveHost, str, Path]:
        requirePi()
        stand = startStandIn(self, masterKey=MASTER)
        host = await LiveHost(self).start()
        stand.setServiceUrl(host.url)
        ca = ThrowawayCA.make()
        folder = Path(self.mktemp())
        folder.mkdir(parents=True)
        caFile = ca.writePEM(folder / "ca.pem")
        _, port = listenTLS(reactor, stand.resource(), ca.serverCertificate("localhost"), self)
        return stand, host, f"https://localhost:{port}", caFile

    async def test_rideAndTailOverHTTPS(self) -> None:
        """
        A whole conversation over https (new, prompt, watch to settle, the
        answer in the inspect, rename) while a tail over https follows the
        same session; the ride ends 0 with the lease released, the tail
        prints the run and stops at the delete, 0.
        """
        stand, host, gardend, caFile = await self.gardendOverTLS()
        env = clientEnvironment(self, VEHICLE_TOKEN=MASTER, VEHICLE_MODEL_KEY=MODEL_KEY)
        tail: list[Client] = []

        def onFrame(rider: Client, line: str) -> None:
            frame = json.loads(line)
            kind = frame["type"]
            if kind == "ready":
                sid = frame["value"]["session"]["sessionId"]
                tail.append(startClient(self, "tail", "--gardend", gardend, "--graph", "g1",
                                        "--session", sid, "--ca-file", str(caFile), env=env,
                                        stdin=None))
                rider.send({"op": "prompt", "requestId": "p1", "text": "how many cows?"})
            elif kind == "command.accepted" or (
                kind == "watch.completed"
                and not any(e["type"] == "run.settled" for e in frame["value"]["events"])
            ):
                rider.send({"op": "watch", "requestId": f"w{len(rider.lines)}", "waitMs": 5000})
            elif kind == "watch.completed":
                rider.send({"op": "inspect", "requestId": "i1"})
            elif kind == "session.snapshot":
                rider.send({"op": "rename", "requestId": "r1", "title": "Cows over TLS"})
            else:
                rider.transport.closeStdin()

        ride = startClient(self, "ride", "--gardend", gardend, "--graph", "g1", "--new",
                           "--ca-file", str(caFile), env=env, onLine=onFrame, stdin=None)
        self.assertEqual(await ride.ended, 0, ride.errorText)
        self.assertEqual(ride.errorText, "")
        frames = ride.frames()
        types = [f["type"] for f in frames]
        self.assertEqual(types[0], "ready")
        self.assertEqual(types[-1], "closed")
        self.assertNotIn("error", types, frames)
        [snapshot] = [f for f in frames if f["type"] == "session.snapshot"]
        said = json.dumps(snapshot["value"]["transcript"])
        self.assertIn("Hello from the scripted model (you said: 'how many cows?')", said)
        self.assertIn("session.renamed", types)
        self.assertTrue(frames[-1]["value"]["released"])
        sid = frames[0]["value"]["session"]["sessionId"]

        [follower] = tail
        await follower.waitForLine(lambda line: "session.renamed" in line)
        code, frame = await host.call("DELETE", f"/sessions/{sid}", principal="owner")
        self.assertEqual(code, 200, frame)
        self.assertEqual(await follower.ended, 0, follower.errorText)
        self.assertEqual(follower.errorText, "")
        seqs = [int(line.split(" ", 1)[0]) for line in follower.lines]
        self.assertEqual(seqs, list(range(1, len(seqs) + 1)))
        printed = [line.split(" ")[1] for line in follower.lines]
        for kind in ("run.started", "run.settled", "session.renamed", "lease.released",
                     "session.deleted"):
            self.assertIn(kind, printed)
        # Every request reached the host through the stand-in's TLS front.
        self.assertTrue(stand.requestsSeen)
