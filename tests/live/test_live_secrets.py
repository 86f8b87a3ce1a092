"""
Integration: the model key and the host's restart, with the host run as
operators run it (twistd in its own process).
"""

from __future__ import annotations

import os
from pathlib import Path

from twisted.trial.unittest import TestCase

from tests.support.live import TwistdHost, settledEvent, sleep


def _pids(root: Path) -> list[int]:
    """
    Every process whose command line mentions C{root} (pi children run
    with their session folders there) and their descendants.
    """
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            cwd = os.readlink(entry / "cwd")
        except OSError:
            continue
        if str(root).encode() in cmdline or cwd.startswith(str(root)):
            found.append(int(entry.name))
    return found


class KeyTests(TestCase):
    """
    The model key reaches pi over fd 3 only.
    """

    timeout = 120

    async def test_keyNowhere(self) -> None:
        """
        After a full run (prompt, tool call, settle), the key is in no file
        of the data dir, no line the host logged, no event, and in neither
        the environment nor the command line of any child.
        """
        host = await TwistdHost(self).start()
        sid = await host.create()
        await host.command(sid, "prompt", "p1", text="call a tool [[TOOL:nothing]]")
        events = await host.waitFor(sid, settledEvent)
        headers, _ = host.model.requests[-1]
        self.assertEqual(headers["authorization"], "Bearer " + host.key)
        key = host.key.encode()
        # The host's own environment is where the operator put the key;
        # every process it started is scanned.
        pids = [p for p in _pids(host.root) if p != host.transport.pid]
        self.assertTrue(pids, "no pi child found to scan")
        for pid in pids:
            for name in ("environ", "cmdline"):
                try:
                    content = Path(f"/proc/{pid}/{name}").read_bytes()
                except OSError:
                    continue
                self.assertNotIn(key, content, f"/proc/{pid}/{name}")
        for path in host.root.rglob("*"):
            if path.is_file() and not path.is_symlink():
                self.assertNotIn(key, path.read_bytes(), str(path))
        self.assertNotIn(key, repr(events).encode())
        await host.stop()
        self.assertNotIn(key, bytes(host.process.output))
        self.assertNotIn(b"gardend-own-token-never-used", bytes(host.process.output))


class JsonLogTests(TestCase):
    """
    C{--log-format json} under the manifest's C{--logger}: every line the
    host writes is one JSON object, and no secret is in any (issue 19).
    """

    timeout = 120

    async def test_jsonLogReadBackWithoutSecrets(self) -> None:
        """
        After a full run and a restart that finishes an interrupted command,
        the host's output reads back as JSON events, one a line; an event
        about the session carries its C{sessionId}; the model key, the service
        secret and gardend's own token are in none.
        """
        import io
        import json

        from twisted.logger import eventsFromJSONLogFile

        from tests.support.harness import SECRET

        host = TwistdHost(self)
        host.twistdArgs = ("--logger=vehicle._logs.observer",)
        host.vehicleArgs = ("--log-format", "json")
        await host.start()
        sid = await host.create()
        await host.command(sid, "prompt", "p1", text="first [[SLOW]]")
        await host.waitFor(sid, lambda e: e["type"] == "run.started")
        await host.kill()
        first = bytes(host.process.output)
        await host.restart()
        await host.stop()
        output = first + bytes(host.process.output)
        for secret in (host.key, SECRET, "gardend-own-token-never-used"):
            self.assertNotIn(secret.encode(), output)
        text = output.decode("utf-8")
        lines = [line for line in text.split("\n") if line.strip()]
        self.assertTrue(lines)
        for line in lines:
            self.assertIsInstance(json.loads(line.strip("\x1e")), dict, line)
        events = list(eventsFromJSONLogFile(io.StringIO(text)))
        self.assertEqual(len(events), len(lines))
        self.assertTrue(any("vehicle" in e.get("log_format", "") and "serving" in e["log_format"]
                            for e in events))
        from twisted.logger import formatEvent

        for event in events:
            if sid in formatEvent(event):
                self.assertEqual(event.get("sessionId"), sid, event)


class HostRestartTests(TestCase):
    """
    kill -9 of the host mid-run: commands are interrupted, the session
    carries on.
    """

    timeout = 120

    async def test_hostKilledMidRun(self) -> None:
        """
        The open prompt is reported interrupted after the restart; its pi
        child does not outlive the host for long; the next prompt works and
        sees the conversation.
        """
        host = await TwistdHost(self).start()
        sid = await host.create()
        await host.command(sid, "prompt", "p1", text="first [[SLOW]]")
        events = await host.waitFor(sid, lambda e: e["type"] == "run.started")
        piPid = next(e for e in events if e["type"] == "body.materialized")["data"]["pid"]
        await host.kill()
        for _ in range(50):
            if not Path(f"/proc/{piPid}").exists():
                break
            await sleep(0.1)
        self.assertFalse(Path(f"/proc/{piPid}").exists(), "pi outlived its host")
        await host.restart()
        code, frame = await host.call("GET", f"/sessions/{sid}")
        self.assertEqual(code, 200, frame)
        statuses = {c["commandId"]: c["status"] for c in frame["value"]["commands"]}
        self.assertEqual(statuses["p1"], "interrupted")
        cursor = frame["value"]["session"]["cursor"]
        code, frame = await host.command(sid, "prompt", "p2", text="second")
        self.assertEqual(code, 202, frame)
        events = await host.waitFor(sid, settledEvent, since=cursor)
        self.assertFalse(events[-1]["data"]["aborted"])
