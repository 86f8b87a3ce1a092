"""
Integration: public conversations with real pi, on the caller's own key
(through a proxy that holds it) and on an account's credit.
"""

from __future__ import annotations

from typing import Any

import json

from twisted.internet.defer import Deferred, gatherResults
from twisted.trial.unittest import TestCase

from attrs import evolve
from vehicle_local.model import Error
from vehicle_local.model._model import StreamedError

from tests.support.live import LiveHost, settledEvent, waitUntil
from tests.support.public import ACCOUNT, VISITOR, account, visitor
from tests.support.public import PUBLIC as ROUTE_PUBLIC


#: Credit enough for a run or two: a scripted run costs $0.00375.
PUBLIC = evolve(ROUTE_PUBLIC, signupGrantUsd=0.005, turnsPerDay=100, sessionMaxTurns=40)
OWN_KEY = "sk-or-own-key-5f3a9c0e1d"


def assertKeyNowhere(testCase: TestCase, host: LiveHost, sid: str) -> None:
    """
    The caller's key is in no file of the host, no event and no log line.
    """
    for path in host.root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            testCase.assertNotIn(OWN_KEY.encode(), path.read_bytes(), str(path))
    testCase.assertNotIn(OWN_KEY, json.dumps(host.events(sid)))
    testCase.assertNotIn(OWN_KEY, "\n".join(host.logLines))



def heldBudgets(rows: list[Any]) -> list[str]:
    """
    The holds the ledger's rows made: each credit turn's row holds its
    run's budget (C{holdUsd}), a hold of an older ledger is a row of its own.
    """
    return [f"hold:{r['session']}:{r['command']}" for r in rows
            if r["type"] == "turn" and r.get("holdUsd")] + [
        r["key"] for r in rows if r["type"] == "hold"]


def endedHolds(rows: list[Any]) -> list[str]:
    """
    Every end of a hold the rows say: a release, or a debit that ended the
    holds of its session's finished commands with it.
    """
    return [r["hold"] for r in rows if r["type"] == "release"] + [
        hold for r in rows if r["type"] == "debit" for hold in r.get("holds", [])]

class OwnKeyTests(TestCase):
    """
    A byok conversation runs on the caller's key, held in memory only.
    """

    timeout = 90

    async def test_ownKeyThroughTheProxy(self) -> None:
        """
        The model sees the caller's key (not the house key); a provider
        error quoting it reaches pi scrubbed; the key is in no file, event
        or log line; after a restart a turn needs the key again.
        """
        host = await LiveHost(self, public=PUBLIC).start()
        who = dict(VISITOR, headers=visitor(OWN_KEY))
        code, frame = await host.call("POST", "/sessions", {"requestId": "c1"}, **who)
        self.assertEqual(code, 201, frame)
        sid = frame["value"]["session"]["sessionId"]
        await host.call("POST", f"/sessions/{sid}/commands",
                        {"type": "prompt", "requestId": "p1", "text": "hello"}, **who)
        events = await host.waitFor(sid, settledEvent, **who)
        self.assertEqual(events[-1]["data"].get("stopReason"), "stop", events[-1])
        headers, _ = host.model.requests[-1]
        self.assertEqual(headers["authorization"], "Bearer " + OWN_KEY)

        host.model.enqueue(Error(401, f"Invalid API key {OWN_KEY} for this account"))
        cursor = host.registry().sessions[sid].cursor
        await host.call("POST", f"/sessions/{sid}/commands",
                        {"type": "prompt", "requestId": "p2", "text": "again"}, **who)
        events = await host.waitFor(sid, settledEvent, since=cursor, **who)
        self.assertIn("run.error", [e["type"] for e in events])
        piFile = next((host.registry().sessions[sid].directory / "pi").glob("*.jsonl"))
        self.assertIn(b"[redacted]", piFile.read_bytes())
        assertKeyNowhere(self, host, sid)

        await host.restart()
        code, frame = await host.call("POST", f"/sessions/{sid}/commands",
                                      {"type": "prompt", "requestId": "p3", "text": "back"},
                                      **dict(VISITOR, headers=visitor()))
        self.assertEqual((code, frame["code"]), (402, "model_key_required"))
        code, frame = await host.call("POST", f"/sessions/{sid}/commands",
                                      {"type": "prompt", "requestId": "p3", "text": "back"}, **who)
        self.assertEqual(code, 202, frame)


    async def test_ownKeyOnASpare(self) -> None:
        """
        With a spare ready, a byok conversation takes it (its id, its
        process, no pi started for it): the model sees the caller's key,
        never the house's, and the key is in no file, event or log line.
        """
        host = await LiveHost(self, public=PUBLIC, spareBodies=1, spareRefillMs=60000).start()
        pool = host.host.bodies.spares
        await waitUntil(lambda: bool(pool.ready))
        [spare] = pool.ready
        who = dict(VISITOR, headers=visitor(OWN_KEY))
        code, frame = await host.call("POST", "/sessions", {"requestId": "c1"}, **who)
        self.assertEqual(code, 201, frame)
        sid = frame["value"]["session"]["sessionId"]
        self.assertEqual((sid, frame["value"]["session"]["funding"]), (spare.sessionId, "byok"))
        await host.call("POST", f"/sessions/{sid}/commands",
                        {"type": "prompt", "requestId": "p1", "text": "hello"}, **who)
        events = await host.waitFor(sid, settledEvent, **who)
        self.assertEqual(events[-1]["data"].get("stopReason"), "stop", events[-1])
        [materialized] = [e for e in events if e["type"] == "body.materialized"]
        self.assertEqual(materialized["data"]["pid"], spare.transport.pid)
        self.assertEqual([h["authorization"] for h, _ in host.model.requests],
                         ["Bearer " + OWN_KEY])
        assertKeyNowhere(self, host, sid)


class StreamedKeyTests(TestCase):
    """
    A provider that quotes the caller's key inside a 200 stream.
    """

    timeout = 90

    async def test_keyInA200StreamNeverRecorded(self) -> None:
        """
        The provider answers 200 and then an error event quoting the key it
        was sent, a few bytes at a time: pi records the error with the key
        redacted, and the key is in no file, event or log line.
        """
        host = await LiveHost(self, public=PUBLIC).start()
        who = dict(VISITOR, headers=visitor(OWN_KEY))
        code, frame = await host.call("POST", "/sessions", {"requestId": "c1"}, **who)
        self.assertEqual(code, 201, frame)
        sid = frame["value"]["session"]["sessionId"]
        host.model.enqueue(StreamedError("Invalid API key {key} for this account", pieceBytes=4))
        await host.call("POST", f"/sessions/{sid}/commands",
                        {"type": "prompt", "requestId": "p1", "text": "hello"}, **who)
        await host.waitFor(sid, settledEvent, **who)
        headers, _ = host.model.requests[-1]
        self.assertEqual(headers["authorization"], "Bearer " + OWN_KEY)
        piFile = next((host.registry().sessions[sid].directory / "pi").glob("*.jsonl"))
        self.assertIn(b"Invalid API key [redacted] for this account", piFile.read_bytes())
        assertKeyNowhere(self, host, sid)


class CreditTests(TestCase):
    """
    A credit conversation is debited what each run cost.
    """

    timeout = 90

    async def test_creditDebitedUntilOut(self) -> None:
        """
        Each run is debited pi's cost; a run may take the balance below
        zero, after which a turn is out_of_credit.
        """
        host = await LiveHost(self, public=PUBLIC).start()
        who = dict(ACCOUNT, headers=account())
        code, frame = await host.call("POST", "/sessions", {"requestId": "c1"}, **who)
        sid = frame["value"]["session"]["sessionId"]
        self.assertEqual(frame["value"]["session"]["funding"], "credit")
        n = 0
        while True:
            n += 1
            code, frame = await host.call("POST", f"/sessions/{sid}/commands",
                                          {"type": "prompt", "requestId": f"p{n}", "text": "hi"},
                                          **who)
            if code != 202:
                break
            await host.waitFor(sid, lambda e: e["type"] == "command.completed"
                                        and e["data"]["commandId"] == f"p{n}", **who)
            self.assertLess(n, 5, "credit never ran out")
        self.assertEqual((code, frame["code"]), (402, "out_of_credit"))
        self.assertIn("X-Model-Key", frame["message"])
        code, frame = await host.call("GET", "/account", **who)
        credit = frame["value"]["credit"]
        self.assertLess(credit["balanceUsd"], 0)
        self.assertAlmostEqual(credit["spentUsd"], 0.00375 * (n - 1), places=6)
        rows = [json.loads(line) for line in (host.root / "public" / "ledger.jsonl").read_text().splitlines()]
        self.assertEqual(sum(1 for r in rows if r["type"] == "debit"), n - 1)
        self.assertEqual(sum(1 for r in rows if r["type"] == "turn"), n - 1)
        # Each accepted turn held its run's budget (its turn row says how
        # much), and each hold ended once, when its command completed with
        # real pi: by a release, or with its run's debit.
        holds = heldBudgets(rows)
        self.assertEqual(len(holds), n - 1)
        self.assertEqual(sorted(endedHolds(rows)), sorted(holds))
        self.assertLessEqual({r["reason"] for r in rows if r["type"] == "release"}, {"completed"})

    async def test_concurrentTurnsHoldTheBudget(self) -> None:
        """
        Twelve turns sent at once on twelve conversations of one account,
        with $0.03 of credit and a $0.01 run budget: three are accepted,
        each holding its budget from acceptance; the three real runs
        settle, each hold ends once, each run is debited once, and the
        balance stays above zero.
        """
        budget = evolve(PUBLIC, signupGrantUsd=0.03, runMaxCostUsd=0.01)
        host = await LiveHost(self, public=budget).start()
        who = dict(ACCOUNT, headers=account())
        sids = []
        for n in range(12):
            code, frame = await host.call("POST", "/sessions", {"requestId": f"c{n}"}, **who)
            self.assertEqual(code, 201, frame)
            sids.append(frame["value"]["session"]["sessionId"])
        answers = await gatherResults([
            Deferred.fromCoroutine(host.call(
                "POST", f"/sessions/{sid}/commands",
                {"type": "prompt", "requestId": "p1", "text": "hi"}, **who))
            for sid in sids
        ])
        accepted = [sid for sid, (code, _) in zip(sids, answers) if code == 202]
        self.assertEqual(len(accepted), 3, answers)
        self.assertEqual({frame["code"] for code, frame in answers if code != 202},
                         {"out_of_credit"})
        for sid in accepted:
            await host.waitFor(sid, lambda e: e["type"] == "command.completed", **who)
        rows = [json.loads(line) for line in
                (host.root / "public" / "ledger.jsonl").read_text().splitlines()]
        holds = heldBudgets(rows)
        self.assertEqual(len(holds), 3)
        self.assertEqual(sorted(endedHolds(rows)), sorted(holds))
        self.assertEqual(len([r for r in rows if r["type"] == "debit"]), 3)
        code, frame = await host.call("GET", "/account", **who)
        self.assertAlmostEqual(frame["value"]["credit"]["balanceUsd"], 0.03 - 3 * 0.00375, places=6)
