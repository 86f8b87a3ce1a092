"""
The live half of L{tests.unit.test_crash}: L{LiveRunIdTests}
(real processes, sockets or the real reactor; see that module for the rest).
"""

from __future__ import annotations

from twisted.trial.unittest import TestCase


class LiveRunIdTests(TestCase):
    """
    With real pi: a body revived after a restart numbers its runs on.
    """

    timeout = 120

    async def test_runIdsUniqueAcrossRevival(self) -> None:
        """
        A prompt, a restart (the body is gone), another prompt: the second
        run is C{run-2}, not a second C{run-1}, so a debit keyed by the run
        (C{run:<session>:<run>}) can never collide.
        """
        from tests.support.live import LiveHost, settledEvent

        host = await LiveHost(self).start()
        sid = await host.create()
        code, frame = await host.command(sid, "prompt", "p1", text="hello there")
        self.assertEqual(code, 202, frame)
        await host.waitFor(sid, settledEvent)
        await host.restart()
        cursor = len(host.events(sid))
        code, frame = await host.command(sid, "prompt", "p2", text="and again")
        self.assertEqual(code, 202, frame)
        await host.waitFor(sid, settledEvent, since=cursor)
        runs = [e["data"]["runId"] for e in host.events(sid) if e["type"] == "run.started"]
        self.assertEqual(runs, ["run-1", "run-2"])
