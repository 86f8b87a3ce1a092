"""
Live: the README's first conversation is a real one.  The lines it shows
being typed are typed into the ride line C{scripts/run} prints, in a clean
clone, and the frames that come back are held against the ones the README
shows (ids, times and pids aside).

C{VEHICLE_README_WRITE=1} rewrites the README's transcript from the run
instead (then read the diff before committing it).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from treq.client import HTTPClient
from twisted.internet import reactor
from twisted.trial.unittest import TestCase
from twisted.web.client import Agent, HTTPConnectionPool

from vehicle_local.standin import freeLoopbackPort

from tests.support._localrun import REPO, LocalRun, Ride, cleanClone, personEnv
from tests.support.live import requirePi, sleep
from tests.support.schemas import assertValidFrame

README = REPO / "README.md"
START = "<!-- transcript: checked by tests/live/test_readme.py -->"
END = "<!-- /transcript -->"

_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")
_VOLATILE = re.compile(r"s[0-9a-f]{32}|ride-[0-9a-f]{16}|local-[A-Za-z0-9_-]+")
#: Numbers that differ from run to run.
_VOLATILE_NUMBERS = {"pid", "durationMs", "elapsedMs", "latencyMs"}


def transcript(text: str) -> tuple[str, list[str]]:
    """
    The README's transcript: the command line and the lines after it
    (typed requests and frames, in order).
    """
    block = text.split(START, 1)[1].split(END, 1)[0]
    lines = [l for l in block.splitlines() if l.strip() and not l.startswith("```")]
    command = lines[0]
    assert command.startswith("$ "), command
    return command[2:], lines[1:]


def normal(value: Any, key: str = "") -> Any:
    """
    C{value} with what differs between two runs replaced by placeholders.
    """
    if isinstance(value, dict):
        return {k: normal(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [normal(v) for v in value]
    if isinstance(value, str):
        if _TIME.match(value):
            return "<time>"
        return _VOLATILE.sub("<id>", value)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and key in _VOLATILE_NUMBERS:
        return "<n>"
    return value


class ReadmeTranscriptTests(TestCase):
    timeout = 300

    async def quiet(self, http: HTTPClient, url: str, key: str, sessionId: str) -> None:
        """
        Wait, as a person waits a moment, until the run has settled and the
        session has had nothing new for a second.
        """
        last, still = -1, 0
        for _ in range(300):
            response = await http.get(
                f"{url}/sessions/{sessionId}/events?since=0",
                headers={b"authorization": f"Bearer {key}".encode()},
            )
            events = json.loads(await response.content())["value"]["events"]
            settled = any(e["type"] == "run.settled" for e in events)
            cursor = events[-1]["seq"] if events else 0
            still = still + 1 if cursor == last else 0
            last = cursor
            if settled and still >= 5:
                return
            await sleep(0.2)
        raise AssertionError("the run never settled")

    async def test_firstConversation(self) -> None:
        requirePi()
        text = README.read_text("utf-8")
        command, lines = transcript(text)
        base = Path(self.mktemp()).absolute()
        base.mkdir(parents=True)
        (base / "tmp").mkdir()
        clone = await cleanClone(base / "vehicle")
        # Written on the default port, as the README's reader sees it.
        port = 8700 if os.environ.get("VEHICLE_README_WRITE") else freeLoopbackPort()
        run = LocalRun(clone, ["--port", str(port), "--data-dir", str(base / "data")],
                       personEnv(base / "tmp"))
        self.addCleanup(run.reap)
        await run.banner()
        line = run.rideLine()
        # The README's command is the banner's, with this run's key and port.
        self.assertEqual(
            re.sub(r"VEHICLE_TOKEN=\S+|127\.0\.0\.1:\d+", "<x>", command),
            re.sub(r"VEHICLE_TOKEN=\S+|127\.0\.0\.1:\d+", "<x>", line),
        )
        pool = HTTPConnectionPool(reactor, persistent=False)
        http = HTTPClient(Agent(reactor, pool=pool))
        ride = Ride(line, clone, personEnv(base / "tmp"))
        got: list[str] = []
        ready = await ride.frame(lambda f: f["type"] == "ready")
        sessionId = ready["value"]["session"]["sessionId"]
        got.append(json.dumps(ready, separators=(",", ":")))
        for typed in (l for l in lines if l.startswith('{"op"')):
            request = json.loads(typed)
            if request["op"] == "watch":
                await self.quiet(http, run.url(), run.masterKey(), sessionId)
            answer = await ride.send(request)
            got += [typed, json.dumps(answer, separators=(",", ":"))]
        self.assertEqual(await ride.end(), 0, ride.process.err.decode())
        closed = (await ride.frame(lambda f: f["type"] == "closed"))
        got.append(json.dumps(closed, separators=(",", ":")))
        self.assertEqual(await run.stop("INT"), 0)
        for frameLine in got:
            frame = json.loads(frameLine)
            if "protocol" in frame:
                assertValidFrame(self, frame)

        if os.environ.get("VEHICLE_README_WRITE"):
            block = "```console\n$ " + line + "\n" + "\n".join(got) + "\n```\n"
            head, rest = text.split(START, 1)
            README.write_text(head + START + "\n" + block + END + rest.split(END, 1)[1], "utf-8")
            return
        self.assertEqual([normal(json.loads(l)) for l in got],
                         [normal(json.loads(l)) for l in lines])

