"""
The live half of L{tests.unit.test_hardening}: L{LiveHardeningTests}
(real processes, sockets or the real reactor; see that module for the rest).
"""

from __future__ import annotations

import json
import os

from twisted.trial.unittest import TestCase

from tests.support.live import LiveHost, settledEvent
from tests.support.schemas import assertValidEvent


class LiveHardeningTests(TestCase):
    """
    With real pi bodies: the host's stop, and a takeover mid-run.
    """

    timeout = 60

    async def test_hostStopDisposesBodies(self) -> None:
        """
        When the host stops, each live body is disposed (C{body.dormant},
        reason C{host_stopping}, as the log's last word) and its pi is gone.
        """
        host = await LiveHost(self).start()
        sid = await host.create()
        await host.command(sid, "prompt", "p1", text="hello")
        events = await host.waitFor(sid, settledEvent)
        pid = [e for e in events if e["type"] == "body.materialized"][0]["data"]["pid"]
        self.assertIsInstance(pid, int)
        os.kill(pid, 0)   # alive
        await host.stop()
        lines = (host.root / "sessions" / sid / "events.jsonl").read_text().splitlines()
        logged = [json.loads(line) for line in lines]
        for event in logged:
            assertValidEvent(self, event)
        self.assertEqual(logged[-1]["type"], "body.dormant")
        self.assertEqual(logged[-1]["data"], {"reason": "host_stopping"})
        self.assertNotIn("body.exited", [e["type"] for e in logged])
        self.assertRaises(ProcessLookupError, os.kill, pid, 0)

    async def test_runCarriesOnAfterTakeover(self) -> None:
        """
        A takeover does not stop the run; the old holder can no longer
        drive it, the new one steers it and then aborts it.
        """
        host = await LiveHost(self).start()
        code, frame = await host.call("POST", "/sessions", {"requestId": "create-1"}, client="tab-1")
        sid = frame["value"]["session"]["sessionId"]
        base = f"/sessions/{sid}/commands"
        code, frame = await host.call("POST", base, {"type": "prompt", "requestId": "p1",
                                                     "text": "long one [[SLOW]]"}, client="tab-1")
        self.assertEqual(code, 202, frame)
        await host.waitFor(sid, lambda e: e["type"] == "run.started")
        code, frame = await host.call("POST", f"/sessions/{sid}/claim",
                                      {"requestId": "claim-2", "takeover": True}, client="tab-2")
        self.assertEqual(code, 200, frame)
        self.assertEqual(frame["value"]["tookOverFrom"], {"principal": "alice", "clientId": "tab-1"})
        code, frame = await host.call("POST", base, {"type": "steer", "requestId": "s-old",
                                                     "text": "from the old tab"}, client="tab-1")
        self.assertEqual((code, frame.get("code")), (409, "lease_held"))
        code, frame = await host.call("POST", base, {"type": "steer", "requestId": "s1",
                                                     "text": "now slowly [[SLOW]]"}, client="tab-2")
        self.assertEqual(code, 202, frame)
        await host.waitFor(sid, lambda e: e["type"] == "command.delivered"
                           and e["data"]["commandId"] == "s1")
        session = host.registry().sessions[sid]
        self.assertEqual(session.findCommand("p1").status, "delivered")   # still running
        code, frame = await host.call("POST", base, {"type": "abort", "requestId": "a1"},
                                      client="tab-2")
        self.assertEqual(code, 202, frame)
        events = await host.waitFor(sid, settledEvent)
        settled = [e for e in events if e["type"] == "run.settled"]
        self.assertEqual(len(settled), 1)
        self.assertTrue(settled[0]["data"]["aborted"])
        await host.waitFor(sid, lambda e: e["type"] == "command.completed"
                           and e["data"]["commandId"] == "a1")
        self.assertEqual(session.findCommand("p1").status, "aborted")
        self.assertEqual(session.findCommand("s1").status, "aborted")
        users = [e["data"]["text"] for e in host.events(sid)
                 if e["type"] == "message.completed" and e["data"]["role"] == "user"]
        self.assertEqual(users, ["long one [[SLOW]]", "now slowly [[SLOW]]"])
