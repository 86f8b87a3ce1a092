"""
C{/metrics} scraped from C{twistd vehicle --metrics} (issue 19): the
figures move with the work (requests by route pattern, events written and
synced, a body and its run, an SSE watcher, a refused public turn), and no
label names a session.
"""

from __future__ import annotations

from twisted.trial.unittest import TestCase

from tests.support.fleet import FleetHost, Samples
from tests.support.live import SSEWatcher, sleep


def figure(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


class ScrapeTests(TestCase):
    timeout = 120

    async def test_figuresMoveWithTheWork(self) -> None:
        """
        A member's prompt watched over SSE, then a visitor's turn past its
        conversation's limit: each shows in the next scrape.
        """
        host = await FleetHost(self, metrics=True, VEHICLE_PUBLIC_SESSION_MAX_TURNS="1").start()
        before = await host.scrape()
        self.assertEqual(figure(before, "vehicle_sessions", body="dormant"), 0)

        sid = await host.create()
        watcher = await SSEWatcher(host, sid).start()
        self.addCleanup(watcher.close)
        await watcher.waitFor(lambda m: m.get("event") == "session.created")
        samples = await host.scrape()
        self.assertEqual(figure(samples, "vehicle_watchers", kind="stream"), 1)
        self.assertEqual(figure(samples, "vehicle_sessions", body="dormant"), 1)
        self.assertEqual(figure(samples, "vehicle_http_requests_total",
                                route="/sessions", method="POST", status="201"), 1)

        code, frame = await host.command(sid, "prompt", "p1", text="hello")
        self.assertEqual(code, 202, frame)
        samples = await host.scrape()
        self.assertEqual(figure(samples, "vehicle_runs"), 1)
        await watcher.waitFor(lambda m: m.get("event") == "run.settled")
        samples = await host.scrape()
        self.assertEqual(figure(samples, "vehicle_http_requests_total",
                                route="/sessions/<sessionId>/commands", method="POST",
                                status="202"), 1)
        self.assertEqual(figure(samples, "vehicle_runs"), 0)
        self.assertEqual(figure(samples, "vehicle_bodies", profile="chat"), 1)
        self.assertEqual(figure(samples, "vehicle_sessions", body="live"), 1)
        written = figure(samples, "vehicle_log_records_total", log="events")
        self.assertGreaterEqual(written, int(watcher.messages[-1]["id"]))
        # Group commit: each sync makes one or more records durable.
        syncs = figure(samples, "vehicle_log_fsync_duration_seconds_count", log="events")
        self.assertGreater(syncs, 0)
        self.assertLessEqual(syncs, written)

        visitorSid = await host.conversation()
        code, frame = await host.prompt(visitorSid)
        self.assertEqual(code, 202, frame)
        code, frame = await host.prompt(visitorSid)
        self.assertEqual((code, frame["code"]), (429, "session_turn_limit"))
        samples = await host.scrape()
        self.assertEqual(figure(samples, "vehicle_public_turns_refused_total",
                                reason="session_turn_limit"), 1)
        self.assertEqual(figure(samples, "vehicle_http_requests_total",
                                route="/sessions/<sessionId>/commands", method="POST",
                                status="429"), 1)
        self.assertGreater(figure(samples, "vehicle_log_records_total", log="ledger"), 0)

        watcher.close()
        for _ in range(50):
            samples = await host.scrape()
            if figure(samples, "vehicle_watchers", kind="stream") == 0:
                break
            await sleep(0.1)
        self.assertEqual(figure(samples, "vehicle_watchers", kind="stream"), 0)
        labels = " ".join(value for _, pairs in samples for _, value in pairs)
        for session in (sid, visitorSid):
            self.assertNotIn(session, labels)
