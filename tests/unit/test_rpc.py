"""
Tests for L{vehicle.body._rpc}: pi's RPC wire over a fake process transport.
"""

from __future__ import annotations

import json
from typing import Any

from twisted.internet.error import ProcessDone, ProcessTerminated
from twisted.internet.interfaces import IProcessTransport
from twisted.internet.task import Clock
from twisted.internet.testing import EventLoggingObserver
from twisted.logger import globalLogPublisher
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase
from zope.interface import implementer
from zope.interface.verify import verifyObject

from vehicle.body import MAX_LINE_BYTES, BodyExited, IBodySink, PiCommandError, PiProtocol

from tests.support.processes import FakeProcessTransport


@implementer(IBodySink)
class RecordingSink:
    """
    Keeps what the protocol hands to its sink.
    """

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.exits: list[tuple[int | None, int | None, str]] = []

    def piEvent(self, event: dict[str, Any]) -> None:
        self.events.append(event)

    def bodyExited(
        self, exitCode: int | None, signal: int | None, stderrTail: str
    ) -> None:
        self.exits.append((exitCode, signal, stderrTail))


def line(record: dict[str, Any]) -> bytes:
    """
    One record as pi writes it: compact JSON, raw non-ASCII, LF.
    """
    return json.dumps(record, ensure_ascii=False).encode("utf-8") + b"\n"


class PiProtocolTests(SynchronousTestCase):
    """
    L{PiProtocol} frames stdout, correlates responses and reports the end.
    """

    def setUp(self) -> None:
        self.sink = RecordingSink()
        self.transport = FakeProcessTransport()
        self.protocol = PiProtocol(self.sink)
        self.protocol.makeConnection(self.transport)

    def sent(self) -> list[dict[str, Any]]:
        """
        The records written to the child's stdin.
        """
        data = b"".join(self.transport.written)
        self.assertTrue(data.endswith(b"\n"))
        return [json.loads(piece) for piece in data.split(b"\n")[:-1]]

    def test_interfaces(self) -> None:
        """
        The fakes provide the interfaces the protocol relies on.
        """
        self.assertTrue(verifyObject(IProcessTransport, self.transport))
        self.assertTrue(verifyObject(IBodySink, self.sink))

    def test_defaultLineLimit(self) -> None:
        """
        Lines up to 64 MiB are accepted by default.
        """
        self.assertEqual(MAX_LINE_BYTES, 64 * 1024 * 1024)
        self.assertEqual(PiProtocol(self.sink)._maxLineBytes, MAX_LINE_BYTES)

    def test_requestWritesOneLineWithFreshId(self) -> None:
        """
        Each request is one ASCII JSON line with its own C{id}; a caller's
        C{id} is replaced.
        """
        self.protocol.request({"type": "get_state"})
        self.protocol.request({"type": "prompt", "message": "a\u2028b é", "id": "x"})
        self.assertEqual(
            self.sent(),
            [
                {"type": "get_state", "id": "h-1"},
                {"type": "prompt", "message": "a\u2028b é", "id": "h-2"},
            ],
        )
        for data in self.transport.written:
            data.decode("ascii")
            self.assertEqual(data.count(b"\n"), 1)
        self.assertEqual(self.protocol.pendingCount, 2)

    def test_outOfOrderResponses(self) -> None:
        """
        Responses are matched by C{id}, whatever their order.
        """
        first = self.protocol.request({"type": "prompt", "message": "hi"})
        second = self.protocol.request({"type": "get_state"})
        self.protocol.outReceived(
            line({"id": "h-2", "type": "response", "command": "get_state",
                  "success": True, "data": {"isStreaming": True}})
        )
        self.assertEqual(self.successResultOf(second), {"isStreaming": True})
        self.assertNoResult(first)
        self.protocol.outReceived(
            line({"id": "h-1", "type": "response", "command": "prompt",
                  "success": True, "data": {"disposition": "started"}})
        )
        self.assertEqual(self.successResultOf(first), {"disposition": "started"})
        self.assertEqual(self.sink.events, [])
        self.assertEqual(self.protocol.pendingCount, 0)

    def test_responseWithoutData(self) -> None:
        """
        A successful response without C{data} fires with an empty dict.
        """
        d = self.protocol.request({"type": "abort"})
        self.protocol.outReceived(
            line({"id": "h-1", "type": "response", "command": "abort", "success": True})
        )
        self.assertEqual(self.successResultOf(d), {})

    def test_failedCommand(self) -> None:
        """
        C{success: false} fails the request with L{PiCommandError} naming the
        command and pi's error.
        """
        d = self.protocol.request({"type": "prompt", "message": "again"})
        error = (
            "Agent is already processing. Specify streamingBehavior ('steer' or "
            "'followUp') to queue the message."
        )
        self.protocol.outReceived(
            line({"id": "h-1", "type": "response", "command": "prompt",
                  "success": False, "error": error})
        )
        failure = self.failureResultOf(d, PiCommandError)
        self.assertEqual(
            (failure.value.command, failure.value.error), ("prompt", error)
        )

    def test_unmatchedResponsesGoToSink(self) -> None:
        """
        Responses without an id (pi's parse error) or with an unknown id are
        handed to the sink.
        """
        parse = {"type": "response", "command": "parse", "success": False,
                 "error": "Failed to parse command: Unexpected end of JSON input"}
        stray = {"id": "h-99", "type": "response", "command": "x", "success": True}
        self.protocol.outReceived(line(parse) + line(stray))
        self.assertEqual(self.sink.events, [parse, stray])

    def test_recordSplitAcrossChunks(self) -> None:
        """
        A record arriving one byte at a time, a multi-byte character split
        between chunks, is delivered once, whole.
        """
        record = {"type": "message_update", "assistantMessageEvent":
                  {"type": "text_delta", "delta": "héllo €"}}
        for i, byte in enumerate(line(record)):
            self.protocol.outReceived(bytes([byte]))
            if i < len(line(record)) - 1:
                self.assertEqual(self.sink.events, [])
        self.assertEqual(self.sink.events, [record])

    def test_severalRecordsInOneChunk(self) -> None:
        """
        One chunk with several records (and the start of the next) delivers
        them in order, responses included.
        """
        d = self.protocol.request({"type": "prompt", "message": "hi"})
        data = (
            line({"id": "h-1", "type": "response", "command": "prompt",
                  "success": True, "data": {"disposition": "started"}})
            + line({"type": "agent_start"})
            + line({"type": "turn_start"})
            + b'{"type":"agent_'
        )
        self.protocol.outReceived(data)
        self.assertEqual(self.successResultOf(d), {"disposition": "started"})
        self.assertEqual(
            self.sink.events, [{"type": "agent_start"}, {"type": "turn_start"}]
        )
        self.protocol.outReceived(b'end"}\n')
        self.assertEqual(self.sink.events[-1], {"type": "agent_end"})

    def test_lineSeparatorsInsideStrings(self) -> None:
        """
        Raw U+2028 and U+2029 inside a JSON string do not end a record; a
        trailing CR is tolerated.
        """
        raw = (
            b'{"type":"message_end","message":{"role":"user","content":'
            b'[{"type":"text","text":"in\xe2\x80\xa8put\xe2\x80\xa9sep"}]}}\r\n'
        )
        self.protocol.outReceived(raw + line({"type": "turn_end"}))
        self.assertEqual(len(self.sink.events), 2)
        self.assertEqual(
            self.sink.events[0]["message"]["content"][0]["text"],
            "in\u2028put\u2029sep",
        )

    def test_notJsonIgnored(self) -> None:
        """
        A line that is not a JSON object is logged, shortened, and skipped;
        the records after it still arrive.
        """
        logged = EventLoggingObserver.createWithCleanup(self, globalLogPublisher)
        self.protocol.outReceived(
            b"Debugger listening " + b"x" * 1000 + b"\n[1,2]\n\xff\xfe\n"
            + line({"type": "agent_start"})
        )
        self.assertEqual(self.sink.events, [{"type": "agent_start"}])
        lines = [e["line"] for e in logged if "line" in e]
        self.assertEqual(len(lines), 3)
        self.assertTrue(lines[0].startswith("Debugger listening"))
        self.assertLessEqual(len(lines[0]), 200)
        self.assertEqual(self.protocol.ignoredLines, 3)

    def test_notJsonLogBounded(self) -> None:
        """
        A child that writes many lines that are not JSON fills the log with
        no more than a few of them.
        """
        logged = EventLoggingObserver.createWithCleanup(self, globalLogPublisher)
        self.protocol.outReceived(b"noise\n" * 1000)
        self.assertEqual(self.protocol.ignoredLines, 1000)
        self.assertEqual(len(logged), 21)

    def test_oversizedLineKillsChild(self) -> None:
        """
        A line longer than the limit, even before its LF arrives, is a
        protocol error: the child is killed, stdout is no longer read, and
        the error shows in the stderr tail.
        """
        logged = EventLoggingObserver.createWithCleanup(self, globalLogPublisher)
        protocol = PiProtocol(self.sink, maxLineBytes=100)
        protocol.makeConnection(self.transport)
        protocol.outReceived(line({"type": "agent_start"}))
        protocol.outReceived(b'{"type":"agent_end","messages":["' + b"x" * 60)
        self.assertEqual(self.transport.signals, [])
        protocol.outReceived(b"x" * 60)
        self.assertEqual(self.transport.signals, ["KILL"])
        self.assertIn("100 bytes", protocol.protocolError or "")
        protocol.outReceived(b'"]}\n' + line({"type": "turn_start"}))
        self.assertEqual(self.sink.events, [{"type": "agent_start"}])
        self.assertTrue(any("problem" in e for e in logged))
        protocol.processEnded(Failure(ProcessTerminated(signal=9)))
        self.assertIn("100 bytes", self.sink.exits[0][2])

    def test_oversizedLineInOneChunk(self) -> None:
        """
        A complete line over the limit in a single chunk is refused too.
        """
        protocol = PiProtocol(self.sink, maxLineBytes=100)
        protocol.makeConnection(self.transport)
        protocol.outReceived(b"{" + b" " * 200 + b"}\n")
        self.assertEqual(self.transport.signals, ["KILL"])
        self.assertEqual(self.sink.events, [])

    def test_lineAtLimitAccepted(self) -> None:
        """
        A line of exactly the limit (without its LF) is accepted.
        """
        protocol = PiProtocol(self.sink, maxLineBytes=100)
        protocol.makeConnection(self.transport)
        record = b'{"type":"x","pad":"' + b"p" * (100 - 21) + b'"}'
        self.assertEqual(len(record), 100)
        protocol.outReceived(record[:50])
        protocol.outReceived(record[50:] + b"\n")
        self.assertEqual(self.transport.signals, [])
        self.assertEqual(len(self.sink.events), 1)

    def test_stderrTailBounded(self) -> None:
        """
        Only the last 8 KiB of stderr are kept, decoded with replacement.
        """
        self.protocol.errReceived(b"\xff" + b"a" * 5000)
        self.assertTrue(self.protocol.stderrTail.startswith("\ufffd"))
        self.protocol.errReceived(b"b" * 5000)
        self.protocol.errReceived(b"the end\n")
        tail = self.protocol.stderrTail
        self.assertEqual(len(tail), 8192)
        self.assertTrue(tail.endswith("b" * 100 + "the end\n"))
        self.assertNotIn("\ufffd", tail)

    def test_processDoneFailsPending(self) -> None:
        """
        A clean exit tells the sink (exit code 0, stderr tail) and fails every
        pending request with L{BodyExited}.
        """
        first = self.protocol.request({"type": "prompt", "message": "hi"})
        second = self.protocol.request({"type": "get_state"})
        ended = self.protocol.whenEnded()
        self.protocol.errReceived(b"bye\n")
        self.protocol.processEnded(Failure(ProcessDone(0)))
        self.assertEqual(self.sink.exits, [(0, None, "bye\n")])
        for d in (first, second):
            failure = self.failureResultOf(d, BodyExited)
            exited = failure.value
            self.assertEqual(
                (exited.exitCode, exited.signal, exited.stderrTail), (0, None, "bye\n")
            )
        self.assertIsNone(self.successResultOf(ended))
        self.assertIsNone(self.successResultOf(self.protocol.ended))
        self.assertEqual(self.protocol.pendingCount, 0)

    def test_processTerminatedBySignal(self) -> None:
        """
        A child killed by a signal reports the signal and no exit code.
        """
        d = self.protocol.request({"type": "get_state"})
        self.protocol.processEnded(Failure(ProcessTerminated(signal=9)))
        self.assertEqual(self.failureResultOf(d, BodyExited).value.signal, 9)
        self.assertEqual(self.sink.exits, [(None, 9, "")])
        self.assertEqual((self.protocol.exitCode, self.protocol.signal), (None, 9))

    def test_processTerminatedWithCode(self) -> None:
        """
        A child exiting with a failure code reports it.
        """
        self.protocol.processEnded(Failure(ProcessTerminated(exitCode=1)))
        self.assertEqual(self.sink.exits, [(1, None, "")])

    def test_requestAfterEnd(self) -> None:
        """
        A request once the child has ended fails at once and writes nothing;
        C{send} is dropped.
        """
        self.protocol.processEnded(Failure(ProcessDone(0)))
        d = self.protocol.request({"type": "get_state"})
        self.failureResultOf(d, BodyExited)
        self.protocol.send({"type": "extension_ui_response", "id": "u", "value": "v"})
        self.assertEqual(self.transport.written, [])

    def test_lastRecordWithoutNewline(self) -> None:
        """
        A final record cut off only by the end of the stream is still read,
        before pending requests fail.
        """
        d = self.protocol.request({"type": "abort"})
        self.protocol.outReceived(
            b'{"id":"h-1","type":"response","command":"abort","success":true}'
        )
        self.assertNoResult(d)
        self.protocol.processEnded(Failure(ProcessDone(0)))
        self.assertEqual(self.successResultOf(d), {})

    def test_send(self) -> None:
        """
        C{send} writes one line and expects nothing back.
        """
        message = {"type": "extension_ui_response", "id": "5b44", "value": "tok-123"}
        self.protocol.send(message)
        self.assertEqual(self.sent(), [message])
        self.assertEqual(self.protocol.pendingCount, 0)


class TerminateTests(SynchronousTestCase):
    """
    L{PiProtocol.terminate} closes stdin, then escalates to TERM and KILL.
    """

    def setUp(self) -> None:
        self.clock = Clock()
        self.sink = RecordingSink()
        self.transport = FakeProcessTransport()
        self.protocol = PiProtocol(self.sink)
        self.protocol.makeConnection(self.transport)

    def test_escalation(self) -> None:
        """
        stdin is closed at once, TERM follows after the grace period, KILL
        after another; the Deferred fires when the process ends.
        """
        d = self.protocol.terminate(self.clock, graceSeconds=3)
        self.assertTrue(self.transport.stdinClosed)
        self.assertEqual(self.transport.signals, [])
        self.clock.advance(2.9)
        self.assertEqual(self.transport.signals, [])
        self.clock.advance(0.1)
        self.assertEqual(self.transport.signals, ["TERM"])
        self.clock.advance(3)
        self.assertEqual(self.transport.signals, ["TERM", "KILL"])
        self.assertNoResult(d)
        self.protocol.processEnded(Failure(ProcessTerminated(signal=9)))
        self.assertIsNone(self.successResultOf(d))
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_exitOnEndOfInput(self) -> None:
        """
        A child that exits when its stdin closes gets no signal, and the
        timers are cancelled.
        """
        d = self.protocol.terminate(self.clock)
        self.protocol.processEnded(Failure(ProcessDone(0)))
        self.assertIsNone(self.successResultOf(d))
        self.assertEqual(self.clock.getDelayedCalls(), [])
        self.clock.advance(100)
        self.assertEqual(self.transport.signals, [])

    def test_exitedAlreadyTrapped(self) -> None:
        """
        A child that is gone before its end is reported does not make the
        signal fail.
        """
        d = self.protocol.terminate(self.clock, graceSeconds=1)
        self.transport.exited = True
        self.clock.advance(1)
        self.clock.advance(1)
        self.assertEqual(self.transport.signals, [])
        self.assertNoResult(d)
        self.protocol.processEnded(Failure(ProcessDone(0)))
        self.successResultOf(d)

    def test_terminateTwice(self) -> None:
        """
        A second terminate waits for the same end and sets no new timers.
        """
        first = self.protocol.terminate(self.clock)
        second = self.protocol.terminate(self.clock)
        self.assertEqual(len(self.clock.getDelayedCalls()), 2)
        self.protocol.processEnded(Failure(ProcessDone(0)))
        self.successResultOf(first)
        self.successResultOf(second)

    def test_terminateEnded(self) -> None:
        """
        Terminating a child that has ended fires at once.
        """
        self.protocol.processEnded(Failure(ProcessDone(0)))
        self.successResultOf(self.protocol.terminate(self.clock))
        self.assertFalse(self.transport.stdinClosed)

    def test_requestWhileStopping(self) -> None:
        """
        A request made after stdin was closed is not written and fails with
        L{BodyExited} when the child ends.
        """
        self.protocol.terminate(self.clock)
        d = self.protocol.request({"type": "get_state"})
        self.assertEqual(self.transport.written, [])
        self.assertNoResult(d)
        self.protocol.processEnded(Failure(ProcessDone(0)))
        self.failureResultOf(d, BodyExited)
