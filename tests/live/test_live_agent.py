"""
Integration: agent sessions, with pi's tools inside a real bwrap box and the
model reached only through the host's proxy.
"""

from __future__ import annotations

import os

from twisted.trial.unittest import TestCase

from tests.support.live import LiveHost, settledEvent
from tests.support.scripted import bashMarker


class AgentTests(TestCase):
    """
    An agent body runs pi's tools in its box.
    """

    timeout = 90

    async def test_toolWritesWorkspace(self) -> None:
        """
        The model's bash call runs in the workspace, whose file the host
        sees; the body materialized in a bwrap box; the model saw only the
        proxy's token, never the key.
        """
        host = await LiveHost(self).start()
        sid = await host.create(profile="agent")
        code, frame = await host.call("GET", f"/sessions/{sid}")
        self.assertEqual(frame["value"]["session"]["isolation"], "bwrap")
        await host.command(sid, "prompt", "p1", text="make a file " + bashMarker("echo hi > made.txt"))
        events = await host.waitFor(sid, settledEvent)
        materialized = next(e for e in events if e["type"] == "body.materialized")
        self.assertEqual(materialized["data"]["box"], "bwrap")
        workspace = host.root / "workspaces" / sid
        self.assertEqual((workspace / "made.txt").read_text(), "hi\n")
        for headers, _ in host.model.requests:
            self.assertEqual(headers["authorization"], "Bearer " + host.key)

    async def test_abortDuringToolCall(self) -> None:
        """
        Abort while a tool runs: the run settles aborted, and the next prompt
        runs normally (pi's history stays acceptable to the provider: every
        tool call has its result).
        """
        host = await LiveHost(self).start()
        sid = await host.create(profile="agent")
        await host.command(sid, "prompt", "p1", text="wait " + bashMarker("sleep 20"))
        await host.waitFor(sid, lambda e: e["type"] == "tool.started")
        code, frame = await host.command(sid, "abort", "a1")
        self.assertEqual(code, 202, frame)
        events = await host.waitFor(sid, settledEvent)
        self.assertTrue(events[-1]["data"]["aborted"])
        cursor = events[-1]["seq"]
        await host.command(sid, "prompt", "p2", text="are we fine?")
        events = await host.waitFor(sid, settledEvent, since=cursor)
        self.assertFalse(events[-1]["data"]["aborted"], events[-1])
        self.assertNotIn("run.error", [e["type"] for e in events])
        body = host.model.requests[-1][1]
        roles = [m["role"] for m in body["messages"]]
        self.assertIn("tool", roles)

    async def test_cloneCopiesWorkspace(self) -> None:
        """
        A clone of an agent session gets a snapshot of the workspace: files
        copied, a link copied as a link (never followed), later changes in
        either not seen by the other; its body runs in its own box.
        """
        host = await LiveHost(self).start()
        sid = await host.create(profile="agent")
        await host.command(sid, "prompt", "p1",
                           text="set up " + bashMarker("echo one > a.txt && ln -s /etc/hostname link"))
        await host.waitFor(sid, settledEvent)
        code, frame = await host.command(sid, "clone", "c1")
        self.assertEqual(code, 201, frame)
        clone = frame["value"]["session"]
        self.assertEqual(clone["profile"], "agent")
        source = host.root / "workspaces" / sid
        copy = host.root / "workspaces" / clone["sessionId"]
        self.assertEqual((copy / "a.txt").read_text(), "one\n")
        self.assertTrue((copy / "link").is_symlink())
        self.assertEqual(os.readlink(copy / "link"), "/etc/hostname")
        (source / "a.txt").write_text("changed\n")
        self.assertEqual((copy / "a.txt").read_text(), "one\n")
        await host.command(clone["sessionId"], "prompt", "p2", text="add " + bashMarker("echo two > b.txt"))
        events = await host.waitFor(clone["sessionId"], settledEvent)
        self.assertFalse(events[-1]["data"]["aborted"])
        self.assertTrue((copy / "b.txt").exists())
        self.assertFalse((source / "b.txt").exists())

    async def test_seccompInTheBox(self) -> None:
        """
        The body and its tools run under the box's seccomp filter: a new
        user namespace and a raw packet socket are refused, ordinary work is
        not (the tool ran, pi answered).
        """
        host = await LiveHost(self).start()
        sid = await host.create(profile="agent")
        probe = ("grep Seccomp: /proc/self/status > sc.txt; "
                 "python3 -c 'import socket; socket.socket(socket.AF_PACKET)' 2> packet.txt; "
                 "unshare -U true 2> unshare.txt; echo done > done.txt")
        await host.command(sid, "prompt", "p1", text="probe " + bashMarker(probe))
        events = await host.waitFor(sid, settledEvent)
        self.assertFalse(events[-1]["data"]["aborted"])
        workspace = host.root / "workspaces" / sid
        self.assertEqual((workspace / "done.txt").read_text(), "done\n")
        self.assertEqual((workspace / "sc.txt").read_text().split(), ["Seccomp:", "2"])
        self.assertIn("Address family not supported", (workspace / "packet.txt").read_text())
        self.assertIn("Operation not permitted", (workspace / "unshare.txt").read_text())
