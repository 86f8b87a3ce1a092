"""
The live half of L{tests.unit.test_ride}: L{RideProcessTests}
(real processes, sockets or the real reactor; see that module for the rest).
"""

from __future__ import annotations

import json
from typing import Any

from twisted.trial.unittest import TestCase

from tests.support.live import LiveHost, requirePi, startStandIn
from tests.support._clients import Client, clientEnvironment
from tests.support.ride import MODEL_KEY, startRider


class RideProcessTests(TestCase):
    """
    The console script, in a child process, against a live host with real
    pi behind the gardend stand-in.
    """

    timeout = 60

    async def test_rideThroughGardend(self) -> None:
        """
        C{vehicle ride --new}: ready, a prompt, watches until the run
        settles, an inspect that shows the reply, then the end of the input:
        closed last, the lease released.  The token and model key come from
        the environment, never the arguments; the client id reaches the host.
        """
        requirePi()
        stand = startStandIn(self, masterKey="master-ride-test")
        host = await LiveHost(self).start()
        stand.setServiceUrl(host.url)

        def onFrame(rider: Client, frame: dict[str, Any]) -> None:
            if frame["type"] == "ready":
                rider.send({"op": "prompt", "requestId": "p1", "text": "how many cows?"})
            elif frame["type"] in ("command.accepted", "watch.completed"):
                events = frame["value"].get("events", []) if frame["type"] == "watch.completed" else []
                if any(e["type"] == "run.settled" for e in events):
                    rider.send({"op": "inspect", "requestId": "i1"})
                else:
                    rider.send({"op": "watch", "requestId": f"w{len(rider.lines)}", "waitMs": 5000})
            elif frame["type"] == "session.snapshot":
                rider.transport.closeStdin()
            elif frame["type"] == "error":
                rider.transport.closeStdin()

        argv = ["--gardend", stand.url, "--graph", "g1",
                "--new", "--client-id", "ride-int-1", "--title", "Cows"]
        env = clientEnvironment(
            self, VEHICLE_TOKEN="master-ride-test", VEHICLE_MODEL_KEY=MODEL_KEY
        )
        rider = startRider(self, onFrame, *argv, env=env)
        code = await rider.ended
        self.assertEqual(code, 0, rider.errorText)
        for arg in argv:
            self.assertNotIn(MODEL_KEY, arg)
            self.assertNotIn("master-ride-test", arg)

        frames = rider.frames()
        types = [f["type"] for f in frames]
        self.assertEqual(types[0], "ready", frames)
        self.assertEqual(types[-1], "closed", frames)
        self.assertNotIn("error", types, frames)
        ready = frames[0]["value"]
        sid = ready["session"]["sessionId"]
        self.assertEqual(ready["clientId"], "ride-int-1")
        self.assertTrue(ready["holdsLease"])
        accepted = [f for f in frames if f["type"] == "command.accepted"]
        self.assertEqual([f["requestId"] for f in accepted], ["p1"])
        watches = [f for f in frames if f["type"] == "watch.completed"]
        self.assertTrue(all(f["requestId"].startswith("w") for f in watches))
        seen = [e for f in watches for e in f["value"]["events"]]
        self.assertIn("run.settled", [e["type"] for e in seen])
        seqs = [e["seq"] for e in seen]
        self.assertEqual(seqs, sorted(set(seqs)))  # each event once, in order
        [snapshot] = [f for f in frames if f["type"] == "session.snapshot"]
        self.assertEqual(snapshot["requestId"], "i1")
        self.assertIn("how many cows?", json.dumps(snapshot["value"]["transcript"]))
        self.assertEqual(frames[-1]["value"]["reason"], "end_of_input")
        self.assertTrue(frames[-1]["value"]["released"])

        self.assertIsNone(host.registry().sessions[sid].currentLease())
        forwarded = stand.requestsSeen
        self.assertTrue(forwarded)
        self.assertTrue(all(r["headers"].get("x-vehicle-client-id") == "ride-int-1" for r in forwarded))
        self.assertEqual(forwarded[-1]["method"], "POST")
        self.assertTrue(forwarded[-1]["path"].endswith("/release"))
        self.assertNotIn(MODEL_KEY, json.dumps(frames))
