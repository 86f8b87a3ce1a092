"""
The live half of L{tests.unit.test_agent}: L{LiveAgentTests}
(real processes, sockets or the real reactor; see that module for the rest).
"""

from __future__ import annotations

import os
from pathlib import Path

from twisted.trial.unittest import TestCase

from tests.support.live import LiveHost, settledEvent
from tests.support.scripted import bashMarker


class LiveAgentTests(TestCase):
    """
    The same refusals with real pi bodies and the real probe.
    """

    timeout = 90

    async def test_bwrapMissingForReal(self) -> None:
        """
        With the profile's bwrap path pointing nowhere, the real probe
        fails and creation is refused with C{isolation_unavailable} 503.
        """
        host = await LiveHost(self).start()
        host.host.bodies.agent.bwrap = "/nonexistent/bwrap"
        code, frame = await host.call(
            "POST", "/sessions", {"requestId": "c1", "profile": "agent"}
        )
        self.assertEqual((code, frame["code"]), (503, "isolation_unavailable"), frame)
        self.assertIn("/nonexistent/bwrap", frame["message"])

    async def test_tamperedBetweenPrompts(self) -> None:
        """
        A body cannot swap its own workspace (the tool's C{mv} of it
        fails; the host sees the same folder); once the body is dormant and
        the workspace is swapped for a symlink on the host, the next prompt
        is refused with C{body_tampered} 409, accepts nothing and starts no
        body.
        """
        host = await LiveHost(self).start()
        sid = await host.create(profile="agent")
        workspace = host.root / "workspaces" / sid
        before = os.lstat(workspace)
        command = "mv $PWD $PWD-moved; mkdir -p $PWD/../x; echo tried > tried.txt"
        await host.command(sid, "prompt", "p1", text="swap " + bashMarker(command))
        await host.waitFor(sid, settledEvent)
        after = os.lstat(workspace)
        self.assertEqual((after.st_dev, after.st_ino), (before.st_dev, before.st_ino))
        self.assertEqual((workspace / "tried.txt").read_text(), "tried\n")
        self.assertFalse(workspace.with_name(workspace.name + "-moved").exists())

        code, frame = await host.command(sid, "shutdown", "stop")
        self.assertEqual(code, 202, frame)
        events = await host.waitFor(sid, lambda e: e["type"] == "body.dormant")
        cursor = events[-1]["seq"]
        elsewhere = Path(self.mktemp()).absolute()
        elsewhere.mkdir()
        workspace.rename(workspace.with_name("moved-away"))
        workspace.symlink_to(elsewhere)
        code, frame = await host.call("POST", f"/sessions/{sid}/claim", {"requestId": "c2"})
        self.assertEqual(code, 200, frame)
        code, frame = await host.command(sid, "prompt", "p2", text="again")
        self.assertEqual((code, frame["code"]), (409, "body_tampered"), frame)
        self.assertEqual(frame["details"], {"folder": "workspace"})
        code, frame = await host.call("GET", f"/sessions/{sid}/events?since={cursor}")
        self.assertEqual(code, 200, frame)
        kinds = [e["type"] for e in frame["value"]["events"]]
        self.assertNotIn("command.accepted", kinds)
        self.assertNotIn("body.materialized", kinds)
        code, frame = await host.call("GET", f"/sessions/{sid}")
        self.assertNotIn("p2", [c["commandId"] for c in frame["value"]["commands"]])
        self.assertEqual(host.registry().sessions[sid].conductor.state, "dormant")
