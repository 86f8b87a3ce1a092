"""
Tests for L{vehicle.body.Conductor} (its life, delivery and settlement) with a fake pi: a real
session on a temp data dir and a L{MemoryReactorClock}, the harness's
L{FakeLauncher} for bodies, and pi's records fed in by hand.  Every event
the conductor makes is held to C{event.schema.json}.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from twisted.internet.defer import Deferred
from twisted.logger import globalLogPublisher
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from vehicle.body._conductor import TranscriptReader
from vehicle.body._life import HostClosing
from vehicle.body._spawner import BodyPaths, BodyPlan
from vehicle.protocol import toJSON, toObject

from tests.support.conductor import ConductorTestCase
from tests.support.fakepi import STATE, USAGE
from tests.support.pifiles import HEADER, assistant, encode, user, writePiFile
from tests.support.sparepool import RefusingSource


class PromptTests(ConductorTestCase):
    """
    A prompt's way through the body.
    """

    def test_lifecycle(self) -> None:
        """
        A prompt on a dormant session starts a body, asks pi C{get_state}
        then C{prompt}, and moves C{accepted -> delivered -> completed};
        the run's events carry its id, tools, turns and cost.
        """
        self.submit("prompt", "p1", text="hello")
        self.assertEqual(self.status("p1"), "accepted")
        self.assertEqual(len(self.launcher.spawned), 1)
        self.assertEqual(self.pi.kinds(), ["get_state"])
        self.assertEqual(self.conductor.bodyState(), "starting")

        self.pi.answer("get_state", STATE)
        self.assertEqual(self.pi.kinds(), ["get_state", "prompt"])
        self.assertEqual(self.pi.pending("prompt")["message"], "hello")
        self.assertNotIn("streamingBehavior", self.pi.pending("prompt"))
        self.assertEqual(self.data("body.materialized"), [{"kind": "rpc", "pid": 4242}])
        self.assertEqual(self.data("session.revived"), [])
        self.assertEqual(self.status("p1"), "accepted")

        self.pi.answer("prompt", {"disposition": "started"})
        self.assertEqual(self.status("p1"), "delivered")
        self.assertEqual(self.command("p1")["disposition"], "started")
        self.assertTrue(self.session.running())

        self.pi.agentStart()
        self.pi.user("hello")
        self.pi.assistant("Hi there.")
        self.pi.settle()
        self.assertEqual(self.status("p1"), "completed")
        self.assertEqual(self.statusEvents("p1"),
                         ["command.accepted", "command.delivered", "command.completed"])
        self.assertEqual(self.data("run.started"), [{"runId": "run-1", "tools": []}])
        self.assertEqual(self.data("run.settled"), [
            {"runId": "run-1", "aborted": False, "stopReason": "stop", "turns": 1,
             "costUsd": 0.001}])
        self.assertFalse(self.session.running())
        self.assertEqual(self.conductor.bodyState(), "live")
        # The text delta went to watchers only, never to the log.
        deltas = [e for e in self.seen if e["type"] == "message.delta"]
        self.assertEqual([d["data"]["text"] for d in deltas], ["Hi there."])
        self.assertNotIn("message.delta", [e["type"] for e in toJSON(self.session.feed.after(0)[0])])

    def test_secondPromptReusesTheBody(self) -> None:
        """
        A prompt after a settled run goes to the same live body: no new
        spawn, no second C{get_state}.
        """
        self.running()
        self.pi.settle()
        self.submit("prompt", "p2", text="again")
        self.assertEqual(len(self.launcher.spawned), 1)
        self.assertEqual(self.pi.kinds(), ["get_state", "prompt", "prompt"])
        self.assertEqual(self.pi.pending("prompt")["message"], "again")

    def test_handledByAnExtension(self) -> None:
        """
        A prompt pi answers C{handled} is delivered and completed at once:
        no run comes of it.
        """
        self.submit("prompt", "p1", text="/something")
        self.pi.answer("get_state", STATE)
        self.pi.answer("prompt", {"disposition": "handled"})
        self.assertEqual(self.status("p1"), "completed")
        self.assertEqual(self.command("p1")["disposition"], "handled")
        self.assertFalse(self.session.running())

    def test_refusedPromptFails(self) -> None:
        """
        A prompt pi refuses fails with pi's words, and the next command is
        still delivered.
        """
        self.submit("prompt", "p1", text="hello")
        self.pi.answer("get_state", STATE)
        self.pi.answer("prompt", success=False, error="No model selected")
        self.assertEqual(self.status("p1"), "failed")
        self.assertEqual(self.command("p1")["error"], "No model selected")
        self.assertFalse(self.session.running())
        self.submit("prompt", "p2", text="again")
        self.assertEqual(self.pi.pending("prompt")["message"], "again")

    def test_oneAtATime(self) -> None:
        """
        While the body starts, later commands wait: one spawn, and nothing
        but C{get_state} reaches pi.
        """
        self.submit("prompt", "p1", text="one")
        self.submit("follow_up", "f1", text="two")
        self.assertEqual(len(self.launcher.spawned), 1)
        self.assertEqual(self.pi.kinds(), ["get_state"])
        self.pi.answer("get_state", STATE)
        self.assertEqual(self.pi.kinds(), ["get_state", "prompt"])
        self.pi.answer("prompt", {"disposition": "started"})
        self.assertEqual(self.pi.kinds(), ["get_state", "prompt", "follow_up"])


class QueueTests(ConductorTestCase):
    """
    Text commands while a run goes on become pi's queue.
    """

    def test_publicRecordHoldsNoModelText(self) -> None:
        """
        The text the model is sent (with its C{[open in Garden: …]} note) is
        the conductor's own: the session's record of the command, which the
        snapshot shows, holds the person's words and their refs only, while
        the command waits in pi's queue and after it was delivered.
        """
        self.running()
        self.queue("follow_up", "f1", "more", contextRefs=["doc-1"])
        record = self.command("f1")
        self.assertNotIn("rendered", record)
        self.assertNotIn("[open in Garden", json.dumps(record))
        self.pi.user("more\n\n[open in Garden: doc-1]")
        self.assertEqual(self.status("f1"), "delivered")
        self.assertNotIn("[open in Garden", json.dumps(toJSON(self.session.commands())))

    def test_followUpAndSteerMatchedToTheirDelivery(self) -> None:
        """
        C{follow_up} and C{steer} while running are sent as pi's
        C{follow_up} and C{steer}, and a C{prompt} as a C{prompt} with
        C{streamingBehavior: followUp}; each is C{delivered} when pi's user
        message with its text (and its context note) ends, in pi's order,
        and all complete with the run.
        """
        self.running()
        self.queue("follow_up", "f1", "more", contextRefs=["doc-1"])
        self.queue("steer", "s1", "turn left")
        self.queue("prompt", "p2", "and then")
        sent = [(r["type"], r["message"]) for r in self.pi.requests()[2:]]
        self.assertEqual(sent, [
            ("follow_up", "more\n\n[open in Garden: doc-1]"),
            ("steer", "turn left"),
            ("prompt", "and then"),
        ])
        self.assertEqual(self.statusEvents("f1"), ["command.accepted"])

        self.pi.assistant("first answer")
        self.pi.user("turn left")
        self.assertEqual(self.status("s1"), "delivered")
        self.assertEqual(self.status("f1"), "queued")
        self.pi.assistant("left it is")
        self.pi.user("more\n\n[open in Garden: doc-1]")
        self.assertEqual(self.status("f1"), "delivered")
        self.pi.user("and then")
        self.assertEqual(self.status("p2"), "delivered")
        self.pi.assistant("done")
        self.pi.settle()
        for commandId in ("p1", "f1", "s1", "p2"):
            self.assertEqual(self.status(commandId), "completed", commandId)
        self.assertEqual(self.statusEvents("s1"),
                         ["command.accepted", "command.delivered", "command.completed"])
        self.assertEqual(self.data("queue.stranded"), [])

    def test_userMessageNotQueuedChangesNothing(self) -> None:
        """
        A user message whose text no queued command has (pi's own) moves
        no command.
        """
        self.running()
        self.queue("follow_up", "f1", "more")
        self.pi.user("something else")
        self.assertEqual(self.status("f1"), "queued")

    def test_queueUpdated(self) -> None:
        """
        pi's C{queue_update} is kept for C{inspect} and announced.
        """
        self.running()
        self.queue("follow_up", "f1", "more")
        self.pi.send({"type": "queue_update", "steering": [], "followUp": ["more"]})
        self.assertEqual(self.data("queue.updated"), [{"steering": [], "followUp": ["more"]}])
        d = self.conductor.snapshot()
        self.pi.answer("get_session_stats", {"tokens": {"total": 15}})
        snapshot = toObject(self.successResultOf(d))
        self.assertEqual(snapshot["queue"], {"steering": [], "followUp": ["more"]})
        self.assertEqual(snapshot["stats"], {"tokens": {"total": 15}})
        self.assertEqual(snapshot["tools"], [])

    def test_strandedAreDeliveredAgain(self) -> None:
        """
        A run that settles (not aborted) with commands still in pi's queue
        announces C{queue.stranded}, clears pi's queue and delivers them
        again, in order, as the next run's prompts.
        """
        self.running()
        self.queue("follow_up", "f1", "more")
        self.queue("steer", "s1", "also this")
        self.pi.assistant("done")
        self.pi.settle()
        self.assertEqual(self.status("p1"), "completed")
        self.assertEqual(self.data("queue.stranded"), [{"commandIds": ["f1", "s1"]}])
        self.assertEqual(self.pi.kinds()[-1], "clear_queue")
        self.pi.answer("clear_queue", {"steering": ["also this"], "followUp": ["more"]})
        self.assertEqual(self.pi.pending("prompt")["message"], "more")
        self.assertNotIn("streamingBehavior", self.pi.pending("prompt"))
        self.pi.answer("prompt", {"disposition": "started"})
        self.assertEqual(self.status("f1"), "delivered")
        self.pi.agentStart()
        self.pi.user("more")
        # The second is queued behind the new run, as pi's follow-up.
        self.assertEqual(self.pi.pending("steer")["message"], "also this")
        self.pi.answer("steer")
        self.pi.user("also this")
        self.assertEqual(self.status("s1"), "delivered")
        self.pi.assistant("ok")
        self.pi.settle()
        self.assertEqual(self.status("f1"), "completed")
        self.assertEqual(self.status("s1"), "completed")


class AbortTests(ConductorTestCase):
    """
    C{abort}: pi's queue cleared, then the run stopped.
    """

    def test_clearQueueThenAbort(self) -> None:
        """
        C{abort} while running sends C{clear_queue} and then C{abort}; the
        queued commands are cancelled, those not yet handed to pi too, the
        run's prompt ends C{aborted} and the abort C{completed}.
        """
        self.running()
        self.queue("follow_up", "f1", "more")
        self.submit("follow_up", "f2", text="even more")   # on its way to pi
        self.submit("follow_up", "f3", text="and more")    # waits behind it
        self.submit("abort", "a1")
        self.assertEqual(self.status("f3"), "cancelled")
        self.assertEqual(self.command("f3")["reason"], "abort")
        self.pi.answer("follow_up")
        self.assertEqual(self.pi.kinds()[-1], "clear_queue")
        self.pi.answer("clear_queue", {"steering": [], "followUp": ["more", "even more"]})
        for commandId in ("f1", "f2"):
            self.assertEqual(self.status(commandId), "cancelled", commandId)
        self.assertEqual(self.command("f1")["reason"], "aborted")
        self.assertNotIn("command.delivered", self.statusEvents("f2"))
        self.assertEqual(self.pi.kinds().count("follow_up"), 2)
        self.assertEqual(self.pi.kinds()[-2:], ["clear_queue", "abort"])
        self.assertEqual(self.status("a1"), "accepted")
        # pi answers an abort only once the run has settled.
        self.pi.send({"type": "message_end", "message": {
            "role": "assistant", "content": [], "usage": USAGE, "stopReason": "aborted"}})
        self.pi.settle(aborted=True)
        self.pi.answer("abort")
        self.assertEqual(self.status("p1"), "aborted")
        self.assertEqual(self.status("a1"), "completed")
        self.assertEqual(self.data("run.settled")[-1]["aborted"], True)
        self.assertEqual(self.data("queue.stranded"), [])
        self.assertFalse(self.session.running())

    def test_abortWithEmptyQueue(self) -> None:
        """
        With nothing queued, C{abort} sends only C{abort}.
        """
        self.running()
        self.submit("abort", "a1")
        self.assertEqual(self.pi.kinds(), ["get_state", "prompt", "abort"])

    def test_abortWhileIdle(self) -> None:
        """
        C{abort} with no run and no body has nothing to stop: it completes
        without starting a body.
        """
        self.submit("abort", "a1")
        self.assertEqual(self.status("a1"), "completed")
        self.assertEqual(self.launcher.spawned, [])

    def test_abortSlow(self) -> None:
        """
        When pi has not answered an abort after 5 s on the clock,
        C{abort.slow} says so (once); the abort completes when pi answers.
        """
        self.running()
        self.submit("abort", "a1")
        self.clock.advance(4.9)
        self.assertEqual(self.data("abort.slow"), [])
        self.clock.advance(0.1)
        self.assertEqual(self.data("abort.slow"), [{"afterMs": 5000}])
        self.clock.advance(30)
        self.assertEqual(len(self.data("abort.slow")), 1)
        self.pi.settle(aborted=True)
        self.pi.answer("abort")
        self.assertEqual(self.status("a1"), "completed")

    def test_abortAnsweredInTime(self) -> None:
        """
        An abort answered within 5 s makes no C{abort.slow}, ever.
        """
        self.running()
        self.submit("abort", "a1")
        self.clock.advance(1)
        self.pi.settle(aborted=True)
        self.pi.answer("abort")
        self.clock.advance(60)
        self.assertEqual(self.data("abort.slow"), [])


class CancelTests(ConductorTestCase):
    """
    C{cancel}: one queued command taken back out.
    """

    def test_cancelQueuedRequeuesTheRestInOrder(self) -> None:
        """
        Cancelling a command in pi's queue sends C{clear_queue}, then sends
        the others again in their order and kind; only the target is
        cancelled, and the others are still matched to their delivery.
        """
        self.running()
        self.queue("follow_up", "f1", "one")
        self.queue("follow_up", "f2", "two")
        self.queue("steer", "s3", "three")
        self.queue("prompt", "p4", "four")
        before = len(self.pi.requests())
        self.submit("cancel", "c1", targetCommandId="f2")
        self.assertEqual(self.pi.kinds()[before:], ["clear_queue"])
        self.pi.answer("clear_queue", {"steering": ["three"], "followUp": ["one", "two", "four"]})
        self.assertEqual(self.status("f2"), "cancelled")
        self.assertEqual(self.command("f2")["reason"], "cancelled")
        self.pi.answer("follow_up")
        self.pi.answer("steer")
        self.pi.answer("follow_up")
        resent = [(r["type"], r["message"]) for r in self.pi.requests()[before + 1:]]
        self.assertEqual(resent, [("follow_up", "one"), ("steer", "three"), ("follow_up", "four")])
        self.assertEqual(self.status("c1"), "completed")
        for commandId in ("f1", "s3", "p4"):
            self.assertIn(self.status(commandId), ("accepted", "queued"), commandId)
        self.pi.user("three")
        self.pi.user("one")
        self.pi.user("four")
        self.pi.settle()
        self.assertEqual([self.status(c) for c in ("f1", "s3", "p4")], ["completed"] * 3)
        self.assertEqual(self.status("f2"), "cancelled")

    def test_cancelBeforeItReachesPi(self) -> None:
        """
        A command still waiting in the host's own backlog is taken out
        without a word to pi.
        """
        self.running()
        self.submit("follow_up", "f1", text="one")   # its request is pending
        self.submit("follow_up", "f2", text="two")   # waits behind it
        self.submit("cancel", "c1", targetCommandId="f2")
        self.assertEqual(self.status("f2"), "cancelled")
        self.assertEqual(self.status("c1"), "completed")
        self.pi.answer("follow_up")
        self.assertEqual(self.pi.kinds(), ["get_state", "prompt", "follow_up"])

    def test_cancelNoLongerQueued(self) -> None:
        """
        A cancel whose target pi has delivered meanwhile fails
        C{not_cancellable}; the target is untouched.
        """
        self.running()
        self.queue("follow_up", "f1", "one")
        self.submit("follow_up", "f2", text="two")   # the pump is busy with it
        self.submit("cancel", "c1", targetCommandId="f1")
        self.pi.user("one")                          # pi delivers f1 first
        self.pi.answer("follow_up")
        self.assertEqual(self.status("c1"), "failed")
        self.assertEqual(self.command("c1")["code"], "not_cancellable")
        self.assertEqual(self.status("f1"), "delivered")
        self.assertNotIn("clear_queue", self.pi.kinds())

    def test_cancelWhileBeingDelivered(self) -> None:
        """
        A cancel of the prompt being handed to a body that is still
        starting tells the truth: either the prompt is cancelled and never
        reaches pi, or it runs and the cancel fails C{not_cancellable}.
        """
        self.submit("prompt", "p1", text="hello")
        self.submit("cancel", "c1", targetCommandId="p1")
        self.pi.answer("get_state", STATE)
        if self.status("p1") == "cancelled":
            self.assertNotIn("prompt", self.pi.kinds())
            self.assertEqual(self.status("c1"), "completed")
        else:
            self.pi.answer("prompt", {"disposition": "started"})
            self.assertEqual(self.status("p1"), "delivered")
            self.assertEqual(self.status("c1"), "failed")
            self.assertEqual(self.command("c1")["code"], "not_cancellable")



class BudgetTests(ConductorTestCase):
    """
    The extension's budget stop.
    """

    def test_budgetStopCancelsQueued(self) -> None:
        """
        pi's C{sophia.budget} notice becomes C{budget.exceeded} (with the
        run's id) and cancels the queued commands (C{budget_exceeded});
        the run settles aborted.
        """
        self.running()
        self.queue("follow_up", "f1", "more")
        report = {"reason": "max_turns", "turns": 12, "costUsd": 0.01, "maxTurns": 12,
                  "maxCostUsd": 0.25}
        self.pi.send({"type": "extension_ui_request", "id": "ui-1", "method": "notify",
                      "message": "sophia.budget " + json.dumps(report), "notifyType": "warning"})
        self.assertEqual(self.data("budget.exceeded"), [{**report, "runId": "run-1"}])
        self.assertEqual(self.pi.kinds()[-1], "clear_queue")
        self.pi.answer("clear_queue", {"steering": [], "followUp": ["more"]})
        self.assertEqual(self.status("f1"), "cancelled")
        self.assertEqual(self.command("f1")["reason"], "budget_exceeded")
        self.pi.settle(aborted=True)
        self.assertEqual(self.status("p1"), "aborted")
        self.assertEqual(self.data("run.settled")[-1]["aborted"], True)
        self.assertEqual(self.pi.uiAnswers(), [])
        self.assertEqual(self.pi.kinds().count("clear_queue"), 1)

    def test_budgetStopWithEmptyQueue(self) -> None:
        """
        With nothing queued the budget stop asks pi nothing more.
        """
        self.running()
        before = self.pi.kinds()
        report = {"reason": "max_cost", "turns": 2, "costUsd": 0.3, "maxTurns": 12,
                  "maxCostUsd": 0.25}
        self.pi.send({"type": "extension_ui_request", "id": "ui-1", "method": "notify",
                      "message": "sophia.budget " + json.dumps(report), "notifyType": "warning"})
        self.assertEqual(self.pi.kinds(), before)
        self.assertEqual(self.data("budget.exceeded")[0]["reason"], "max_cost")


class BodyExitTests(ConductorTestCase):
    """
    A body that dies unasked.
    """

    def test_exitMidRun(self) -> None:
        """
        A body that dies mid-run: C{body.exited} (exit code, signal, the
        tail of stderr), C{run.settled} with C{body_exited}, and every open
        command C{failed} with code C{body_exited}; the next prompt makes
        a new body.
        """
        self.running()
        self.queue("follow_up", "f1", "more")
        self.pi.exit(exitCode=1, stderr=b"x" * 5000 + b"fatal: out of memory\n")
        exited = self.data("body.exited")
        self.assertEqual(len(exited), 1)
        self.assertEqual(exited[0]["exitCode"], 1)
        self.assertIsNone(exited[0]["signal"])
        self.assertTrue(exited[0]["stderrTail"].endswith("fatal: out of memory\n"))
        self.assertLessEqual(len(exited[0]["stderrTail"]), 4096)
        self.assertEqual(self.data("run.settled"),
                         [{"runId": "run-1", "aborted": True, "stopReason": "body_exited", "costUsd": 0.0}])
        for commandId in ("p1", "f1"):
            self.assertEqual(self.status(commandId), "failed", commandId)
            self.assertEqual(self.command(commandId)["code"], "body_exited")
        self.assertEqual(self.conductor.bodyState(), "dormant")
        self.assertFalse(self.session.running())
        self.submit("prompt", "p2", text="again")
        self.assertEqual(len(self.launcher.spawned), 2)
        self.assertEqual(self.pi.kinds(), ["get_state"])

    def test_killedBySignal(self) -> None:
        """
        A body killed by a signal says which, with no exit code; with no
        run under way there is no C{run.settled}.
        """
        self.running()
        self.pi.settle()
        self.pi.exit(exitCode=None, signal=9)
        self.assertEqual(self.data("body.exited"),
                         [{"exitCode": None, "signal": 9, "stderrTail": ""}])
        self.assertEqual(len(self.data("run.settled")), 1)

    def test_exitWhileStarting(self) -> None:
        """
        A body that dies before answering C{get_state} fails the command
        it was starting for.
        """
        self.submit("prompt", "p1", text="hello")
        self.pi.exit(exitCode=2, stderr=b"pi: bad config\n")
        self.assertEqual(self.status("p1"), "failed")
        self.assertEqual(self.data("body.exited")[0]["stderrTail"], "pi: bad config\n")
        self.assertEqual(self.data("run.settled"), [])
        self.assertEqual(self.conductor.bodyState(), "dormant")


class IdleTests(ConductorTestCase):
    """
    A body with nothing to do is disposed after the idle time.
    """

    idleSeconds = 60.0

    def test_idleDormancy(self) -> None:
        """
        After C{idleSeconds} on the clock with no run, the body's stdin is
        closed and, once pi has ended, C{body.dormant} says C{idle} (and no
        C{body.exited}); the next prompt revives a new body.
        """
        self.running()
        self.clock.advance(1000)   # a long run is never idle
        self.assertEqual(self.conductor.bodyState(), "live")
        self.pi.settle()
        self.clock.advance(59)
        self.assertEqual(self.conductor.bodyState(), "live")
        self.assertNotIn(0, self.pi.transport.closed)
        self.clock.advance(1)
        self.assertEqual(self.conductor.bodyState(), "stopping")
        self.assertIn(0, self.pi.transport.closed)
        self.pi.exit(exitCode=0)
        self.assertEqual(self.data("body.dormant"), [{"reason": "idle"}])
        self.assertEqual(self.data("body.exited"), [])
        self.assertEqual(self.conductor.bodyState(), "dormant")
        self.submit("prompt", "p2", text="again")
        self.assertEqual(len(self.launcher.spawned), 2)

    def test_idleTermThenKill(self) -> None:
        """
        A body that ignores the end of its stdin is sent C{TERM} 3 s later.
        """
        self.running()
        self.pi.settle()
        self.clock.advance(60)
        self.clock.advance(2.9)
        self.assertEqual(self.pi.transport.signals, [])
        self.clock.advance(0.1)
        self.assertEqual(self.pi.transport.signals, ["TERM"])
        self.assertEqual(self.data("body.dormant"), [{"reason": "idle"}])

    def test_aPromptJustBeforeTheIdleTime(self) -> None:
        """
        A prompt given to pi just before the idle time, not yet answered
        when the time comes, keeps the body.
        """
        self.running()
        self.pi.settle()
        self.clock.advance(59.9)
        self.submit("prompt", "p2", text="again")
        self.assertEqual(self.pi.pending("prompt")["message"], "again")
        self.clock.advance(0.2)
        self.assertEqual(self.conductor.bodyState(), "live")
        self.assertNotIn(0, self.pi.transport.closed)

    def test_anExitTakesTheTimer(self) -> None:
        """
        A body that ends by itself while idle takes its idle timer with it.
        """
        self.running()
        self.pi.settle()
        self.assertIsNotNone(self.conductor.pump._idle)
        self.pi.exit(exitCode=1)
        self.assertEqual(self.conductor.bodyState(), "dormant")
        self.assertIsNone(self.conductor.pump._idle)

    def test_activityRearmsTheTimer(self) -> None:
        """
        A new command before the idle time ends keeps the body; the timer
        starts again when that run settles.
        """
        self.running()
        self.pi.settle()
        self.clock.advance(50)
        self.submit("prompt", "p2", text="again")
        self.pi.answer("prompt", {"disposition": "started"})
        self.pi.agentStart()
        self.clock.advance(50)
        self.pi.settle()
        self.clock.advance(59)
        self.assertEqual(self.conductor.bodyState(), "live")
        self.clock.advance(1)
        self.assertEqual(self.conductor.bodyState(), "stopping")


class ExtensionUITests(ConductorTestCase):
    """
    The extension's UI requests, answered by the host.
    """

    def ask(self, **request: Any) -> dict[str, Any]:
        self.pi.send({"type": "extension_ui_request", **request})
        answers = self.pi.uiAnswers()
        self.assertTrue(answers, "no answer was written")
        return answers[-1]

    def test_delegatedTokenAnswered(self) -> None:
        """
        C{input} titled C{sophia.delegated-token} is answered with the
        session's newest token, which is in no event.
        """
        self.running()
        self.session.delegatedToken = "tok-first"
        self.session.delegatedToken = "tok-newest-0123"
        answer = self.ask(id="ui-1", method="input", title="sophia.delegated-token",
                          placeholder='{"toolName":"x"}')
        self.assertEqual(answer, {"type": "extension_ui_response", "id": "ui-1",
                                  "value": "tok-newest-0123"})
        self.assertNotIn("tok-newest-0123", json.dumps(toJSON(self.session.feed.after(0)[0])))

    def test_delegatedTokenMissingCancelled(self) -> None:
        """
        Without a token the request is cancelled (the tool call then fails
        cleanly).
        """
        self.running()
        answer = self.ask(id="ui-2", method="input", title="sophia.delegated-token")
        self.assertEqual(answer, {"type": "extension_ui_response", "id": "ui-2",
                                  "cancelled": True})

    def test_otherRequestsCancelled(self) -> None:
        """
        Any other dialog is declined: C{input}/C{select}/C{editor}
        cancelled, C{confirm} not confirmed; none is logged as an event.
        """
        self.running()
        self.session.delegatedToken = "tok-x"
        for n, method in enumerate(("input", "select", "editor")):
            answer = self.ask(id=f"ui-{n}", method=method, title="Pick one")
            self.assertEqual(answer, {"type": "extension_ui_response", "id": f"ui-{n}",
                                      "cancelled": True})
        answer = self.ask(id="ui-c", method="confirm", title="Really?")
        self.assertEqual(answer, {"type": "extension_ui_response", "id": "ui-c",
                                  "confirmed": False})
        self.assertNotIn("ui.request", [e["type"] for e in self.seen])

    def test_fireAndForgetUnanswered(self) -> None:
        """
        C{notify} becomes C{body.notice}; C{setStatus} and its kind get no
        answer at all.
        """
        self.running()
        self.pi.send({"type": "extension_ui_request", "id": "n1", "method": "notify",
                      "message": "heads up", "notifyType": "info"})
        self.pi.send({"type": "extension_ui_request", "id": "n2", "method": "setStatus",
                      "statusKey": "k", "statusText": "busy"})
        self.assertEqual(self.pi.uiAnswers(), [])
        self.assertEqual(self.data("body.notice"), [{"message": "heads up", "notifyType": "info"}])


class ClosingTests(ConductorTestCase):
    """
    When the host stops, nothing more is delivered or started.
    """

    def test_closeWithCommandsWaiting(self) -> None:
        """
        With one prompt on its way (the body still starting) and one behind
        it, closing disposes the body, starts no other, and leaves both
        commands open for the next start to report interrupted.
        """
        self.submit("prompt", "p1", text="one")
        self.submit("prompt", "p2", text="two")
        self.assertEqual(len(self.launcher.spawned), 1)
        self.pi.pending("get_state")
        d = self.conductor.close()
        self.clock.advance(10)
        self.successResultOf(d)
        self.assertEqual(len(self.launcher.spawned), 1)
        self.assertEqual((self.status("p1"), self.status("p2")), ("accepted", "accepted"))
        self.assertEqual(self.conductor.state, "dormant")
        self.assertNotIn("command.failed", [e["type"] for e in self.durable()])


class ScrubTests(ConductorTestCase):
    """
    pi's own words reach events without the host's secrets.
    """

    def test_stderrAndErrorsScrubbed(self) -> None:
        """
        The delegation token quoted in pi's stderr or in a failed command's
        error is redacted in C{body.exited} and C{command.failed}.
        """
        self.session.delegatedToken = "gdt1.secret-token-value"
        self.submit("prompt", "p1", text="one")
        self.pi.answer("get_state", {})
        self.pi.answer("prompt", success=False, error="refused gdt1.secret-token-value")
        self.assertEqual(self.command("p1")["error"], "refused [redacted]")
        self.submit("prompt", "p2", text="two")
        self.pi.exit(exitCode=1, stderr=b"boom: gdt1.secret-token-value\n")
        [exited] = self.data("body.exited")
        self.assertNotIn("secret-token-value", exited["stderrTail"])
        self.assertIn("[redacted]", exited["stderrTail"])


class LifeTests(ConductorTestCase):
    """
    The body's life at its edges: a source or a launcher that fails, a
    session going, what counts as under way, where its bodies keep things.
    """

    def test_refusedWhenClosed(self) -> None:
        """
        A session closed (the host stopping) starts no body.
        """
        self.session._journal.closed = True
        life = self.conductor.life
        self.failureResultOf(Deferred.fromCoroutine(life.ensure()), HostClosing)
        self.assertEqual(life.state, "dormant")
        self.assertEqual(self.launcher.spawned, [])

    def test_refusedWhenClosing(self) -> None:
        """
        A host stopping (its conductors closing) starts no body.
        """
        life = self.conductor.life
        life.closing = True
        self.failureResultOf(Deferred.fromCoroutine(life.ensure()), HostClosing)
        self.assertEqual(self.launcher.spawned, [])

    def test_plannerFails(self) -> None:
        """
        A plan that cannot be made fails the start, and the body is dormant
        again.
        """
        async def refuse(session: Any) -> Any:
            raise RuntimeError("no box here")

        life = self.conductor.life
        life.planner = refuse
        self.failureResultOf(Deferred.fromCoroutine(life.ensure()), RuntimeError)
        self.assertEqual(life.state, "dormant")
        self.assertEqual(self.launcher.spawned, [])

    def test_stateRefused(self) -> None:
        """
        A body that will not tell its state is ended, and the start fails.
        """
        life = self.conductor.life
        started = Deferred.fromCoroutine(life.ensure())
        self.assertIsNone(life.live())  # starting: not live yet
        self.pi.answer("get_state", success=False, error="no state")
        self.failureResultOf(started)
        self.assertIn(0, self.pi.transport.closed)
        self.assertEqual((life.state, life.body), ("dormant", None))
        # TERM a second after its stdin closed, not before.
        self.clock.advance(0.9)
        self.assertEqual(self.pi.transport.signals, [])
        self.clock.advance(0.1)
        self.assertEqual(self.pi.transport.signals, ["TERM"])

    def test_closedWhilePlanned(self) -> None:
        """
        A host that began to stop while a body's plan was being made
        starts no body, and undoes what the plan set up.
        """
        planned: Deferred[BodyPlan] = Deferred()
        cleaned: list[bool] = []

        async def plan(session: Any) -> BodyPlan:
            return await planned

        life = self.conductor.life
        life.planner = plan
        started = Deferred.fromCoroutine(life.ensure())
        self.conductor.close()
        planned.callback(BodyPlan(cleanup=lambda: cleaned.append(True)))
        self.failureResultOf(started, HostClosing)
        self.assertEqual(cleaned, [True])
        self.assertEqual(self.launcher.spawned, [])
        self.assertEqual(life.state, "dormant")

    def test_longestSecretFirst(self) -> None:
        """
        A secret that holds another is redacted whole.
        """
        life = self.conductor.life
        self.session.delegatedToken = "token-abcdefgh"
        self.launcher.secrets = lambda: ["token-abcdefgh-and-more"]  # type: ignore[method-assign]
        self.assertEqual(life.scrub("x token-abcdefgh-and-more y"), "x [redacted] y")

    def test_cleanUpFailureLogged(self) -> None:
        """
        A plan's clean-up that fails later is logged as the conductor's.
        """
        events: list[dict[str, Any]] = []
        globalLogPublisher.addObserver(events.append)
        self.addCleanup(globalLogPublisher.removeObserver, events.append)
        failed: Deferred[None] = Deferred()
        self.conductor.life._cleanUp(BodyPlan(cleanup=lambda: failed))
        failed.errback(RuntimeError("the proxy would not close"))
        self.assertEqual(len(self.flushLoggedErrors(RuntimeError)), 1)
        self.assertIn("The conductor of {sessionId} failed",
                      [e.get("log_format") for e in events])

    def test_spareSourceFails(self) -> None:
        """
        A spare source that fails fails the start, and the body is dormant
        again.
        """
        life = self.conductor.life
        life.spares = RefusingSource(RuntimeError("no spares today"))
        self.failureResultOf(Deferred.fromCoroutine(life.ensure()), RuntimeError)
        self.assertEqual(life.state, "dormant")

    def test_spawnFails(self) -> None:
        """
        A body whose process could not be started is nothing to stop: the
        start fails and the session is dormant.
        """
        def refuse(protocol: Any, **kw: Any) -> Any:
            raise OSError("no such file")

        self.launcher.spawn = refuse  # type: ignore[method-assign]
        life = self.conductor.life
        self.failureResultOf(Deferred.fromCoroutine(life.ensure()), OSError)
        self.assertEqual((life.state, life.body), ("dormant", None))

    def test_queuedIsUnderWay(self) -> None:
        """
        A command in pi's queue alone (no run, nothing waiting) is under
        way.
        """
        self.running()
        life = self.conductor.life
        body = life.body
        assert body is not None
        body.run = None
        self.assertFalse(life.running())
        body.queued.append(self.session.findCommand("p1"))
        self.assertTrue(life.running())

    def test_noIdleTimerUnlessLive(self) -> None:
        """
        Only a live body is given an idle timer (not a dormant one, nor one
        starting).
        """
        life = self.conductor.life
        life.armIdle()
        self.assertIsNone(self.conductor.pump._idle)
        Deferred.fromCoroutine(life.ensure())
        self.assertEqual(life.state, "starting")
        life.armIdle()
        self.assertIsNone(self.conductor.pump._idle)

    def test_pathsKept(self) -> None:
        """
        The newest body's paths are the session's until another body's.
        """
        life = self.conductor.life
        first = life.sessionPaths()
        self.assertEqual(first, BodyPaths.forSession(self.session.directory))
        other = BodyPaths.forSession(Path(self.mktemp()))
        life.paths = other
        self.assertIs(life.sessionPaths(), other)

    def test_scrubbedFromEightCharacters(self) -> None:
        """
        A secret of eight characters or more is redacted; a shorter one
        (which could be any word) is not.
        """
        life = self.conductor.life
        self.session.delegatedToken = "abcdefgh"
        self.assertEqual(life.scrub("x abcdefgh y"), "x [redacted] y")
        self.session.delegatedToken = "abcdefg"
        self.assertEqual(life.scrub("x abcdefg y"), "x abcdefg y")

    def test_logFailure(self) -> None:
        """
        A failure handed to the life's logger is logged (and consumed);
        anything else is not.
        """
        life = self.conductor.life
        self.assertIsNone(life.logFailure(Failure(RuntimeError("lost"))))
        self.assertEqual(len(self.flushLoggedErrors(RuntimeError)), 1)
        self.assertIsNone(life.logFailure(None))
        self.assertEqual(self.flushLoggedErrors(), [])


class SettledObserver:
    """
    A session observer that keeps what each settled run told it.
    """

    def __init__(self) -> None:
        self.settles: list[dict[str, Any]] = []

    def created(self, session: Any) -> None:
        pass

    def renamed(self, session: Any) -> None:
        pass

    def settled(self, session: Any, info: dict[str, Any]) -> None:
        self.settles.append(info)

    def deleting(self, session: Any) -> None:
        return None

    def deleted(self, session: Any) -> None:
        pass


class SettledTests(ConductorTestCase):
    """
    The session's observers hear of every settled run, with what public
    accounting debits (C{seq}, C{costUsd}, C{aborted}).
    """

    def observe(self) -> list[dict[str, Any]]:
        observer = SettledObserver()
        self.registry.observers.add(observer)
        return observer.settles

    def test_settledRunObserved(self) -> None:
        """
        A run that settles tells the observers once, with the seq of its
        C{run.settled} event and its cost.
        """
        seen = self.observe()
        self.running()
        self.pi.assistant("done")
        self.pi.settle()
        [info] = seen
        self.assertFalse(info.aborted)
        self.assertGreater(info.costUsd or 0, 0)
        [settled] = self.durable("run.settled")
        self.assertEqual(info.seq, settled["seq"])

    def test_bodyDeathObserved(self) -> None:
        """
        When the body dies mid-run, the observers (the ledger's debit, the
        mirror) get the settled run, with what it cost so far.
        """
        seen = self.observe()
        self.running()
        self.pi.assistant("partial")
        self.pi.exit(exitCode=None, signal=9)
        [info] = seen
        self.assertTrue(info.aborted)
        self.assertGreater(info.costUsd or 0, 0)
        [settled] = self.durable("run.settled")
        self.assertEqual(info.seq, settled["seq"])


class TranscriptReaderTests(SynchronousTestCase):
    """
    L{TranscriptReader}: the snapshot's transcript read from pi's file only
    when it changed, and where it is told to read.
    """

    def setUp(self) -> None:
        self.piDir = Path(self.mktemp()) / "pi"
        self.piDir.mkdir(parents=True)
        self.reads: list[Deferred[Any]] = []

        def runInThread(f: Any, *args: Any) -> Deferred[Any]:
            # Held until the test lets it run, as a thread would be.
            held: Deferred[Any] = Deferred()
            held.addCallback(lambda _: f(*args))
            self.reads.append(held)
            return held

        self.reader = TranscriptReader(runInThread=runInThread)

    def read(self) -> Deferred[tuple[Any, ...]]:
        return Deferred.fromCoroutine(self.reader.read(self.piDir))

    def test_readOnlyWhenChanged(self) -> None:
        """
        The file is read off the reactor's thread the first time, not again
        while it is the same, and again once pi appended to it.
        """
        records = [HEADER, user("aaaa0001", None, 1, "hello")]
        path = writePiFile(self.piDir.parent, records)
        first = self.read()
        self.assertNoResult(first)
        self.reads[0].callback(None)
        [item] = self.successResultOf(first)
        self.assertEqual(item["text"], "hello")
        self.assertEqual(self.successResultOf(self.read()), (item,))
        self.assertEqual(len(self.reads), 1)
        with path.open("ab") as f:
            f.write(encode([assistant("aaaa0002", "aaaa0001", 2,
                                      [{"type": "text", "text": "hi"}])]))
        again = self.read()
        self.assertEqual(len(self.reads), 2)
        self.reads[1].callback(None)
        self.assertEqual([i["text"] for i in self.successResultOf(again)], ["hello", "hi"])

    def test_noFileYet(self) -> None:
        """
        Before pi wrote its file (or with no pi folder at all) the
        transcript is empty, and nothing is read.
        """
        self.assertEqual(self.successResultOf(self.read()), ())
        self.piDir.rmdir()
        self.assertEqual(self.successResultOf(self.read()), ())
        self.assertEqual(self.reads, [])

    def test_hereWithoutAThread(self) -> None:
        """
        With no thread to read in, the file is read at once.
        """
        writePiFile(self.piDir.parent, [HEADER, user("aaaa0001", None, 1, "hello")])
        items = self.successResultOf(
            Deferred.fromCoroutine(TranscriptReader().read(self.piDir)))
        self.assertEqual([i["text"] for i in items], ["hello"])
