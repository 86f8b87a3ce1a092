"""
Logs a machine reads: C{twistd vehicle --log-format json} (issue 19,
section 2): the option, and what the observer writes, read back.
"""

from __future__ import annotations

import io
import json
import os

from twisted.logger import Logger, LogPublisher, eventsFromJSONLogFile
from twisted.python import usage
from twisted.scripts.twistd import ServerOptions
from twisted.trial.unittest import SynchronousTestCase

from vehicle import _logs
from vehicle._tap import Options


class OptionTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.patch(os, "environ", {"MNEMOSYNE_INTERNAL_SERVICE_SECRET": "s"})
        self.where = ["--listen", "tcp:0:interface=127.0.0.1", "--data-dir", self.mktemp()]

    def test_jsonReplacesTheLogger(self) -> None:
        """
        C{--log-format json} makes twistd start the JSON observer, in place
        of the one C{--logger} named (the manifest's); text, the default,
        leaves it.
        """
        server = ServerOptions()
        server.parseOptions(["--logger=vehicle._logs.observer", "vehicle", "--log-format", "json",
                             *self.where])
        self.assertIs(server["logger"], _logs.jsonObserver)
        server = ServerOptions()
        server.parseOptions(["--logger=vehicle._logs.observer", "vehicle", *self.where])
        self.assertIs(server["logger"], _logs.observer)

    def test_otherFormatsRefused(self) -> None:
        server = ServerOptions()
        self.assertRaises(usage.UsageError, server.parseOptions,
                          ["vehicle", "--log-format", "xml", *self.where])
        self.assertEqual(Options()["log-format"], "text")


class JsonObserverTests(SynchronousTestCase):
    def test_oneObjectALineReadBack(self) -> None:
        """
        Each event is one JSON line; read back, it carries its own keys,
        the session its request's path names, and its request's id.
        """
        out = io.StringIO()
        publisher = LogPublisher(_logs.jsonObserver(out))
        log = Logger(observer=publisher, namespace="vehicle.test")
        log.info("Session {sessionId}: recovered", sessionId="s1")
        log.error("Unexpected failure answering {uri}", uri=b"/g/g1/sessions/s2/commands",
                  requestId="req-9")
        log.info("Spawned pi in {workDir}", workDir="/d/sessions/s3/work")
        log.info("Starting factory {f}", f="x")
        lines = out.getvalue().rstrip("\n").split("\n")
        self.assertEqual(len(lines), 3)
        for line in lines:
            json.loads(line.strip("\x1e"))
        out.seek(0)
        events = list(eventsFromJSONLogFile(out))
        self.assertEqual([(e.get("sessionId"), e.get("requestId")) for e in events],
                         [("s1", None), ("s2", "req-9"), ("s3", None)])
        self.assertEqual(events[0]["log_namespace"], "vehicle.test")
