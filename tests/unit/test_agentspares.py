"""
Tests for spare agent bodies (L{vehicle.agent.AgentSpares}): a warm boxed
pi made for a session id of its own, its folders in the data dir bound where
that session's will be; taken by a new agent session, whose folders they
become by a rename (L{vehicle.agent.AgentProfile.makeFolders}); handed over
at the first command, or let go (a refusal, a loss, a delete, a long wait,
the host's stop), the session's first body then starting cold in the same
folders.

The host is the in-memory one (L{tests.unit.test_agent.AgentHarness}), its
pi children fakes on a memory reactor.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.error import CannotListenError
from twisted.trial.unittest import SynchronousTestCase

from vehicle.agent import SECCOMP_FD, AgentSpareProxy, AgentSpares
from vehicle.body import PRIMING_FOLDER
from vehicle.body import PRIMING_PROMPT, SPARE_BUDGET, Spare
from vehicle.body._spawner import BodyPaths, Launcher
from vehicle.box import BoxSpec, BoxSpecError, bwrapArgv, canonicalSpec
from vehicle.models import ModelCatalog

from tests.support._hints import assertAnnotationsResolve
from tests.support.box import BWRAP
from tests.support.fakepi import STATE
from tests.support.crashdriver import sendCut
from tests.support.harness import MODELS, Harness
from tests.support.agenthost import AgentHarness, ProbeSpawner
from tests.support.pirecords import answer, exited, kinds, record


KEY = MODELS["providers"]["scripted"]["apiKey"]
MODEL = "scripted/echo-1"


class SpareHarness(AgentHarness):
    """
    An agent host keeping one agent spare, which the test readies.
    """

    def __init__(self, testCase: SynchronousTestCase, root: Path | None = None,
                 **settings: Any) -> None:
        self.spawner = ProbeSpawner()
        Harness.__init__(self, testCase, root=root or Path(testCase.mktemp()).absolute(),
                         **settings)

    def spareTransport(self, index: int = -1) -> Any:
        return self.launcher.spawned[index]

    def ready(self, index: int = -1, ownFile: bool = True) -> Spare:
        """
        The newest spawned spare answers its state (its own session's file,
        which pi keeps in its pi folder) and settles its priming.
        """
        transport = self.spareTransport(index)
        spare = next(s for s in self.agent.spares.making  # type: ignore[union-attr]
                     if s.protocol.transport is transport)
        assert spare.inside is not None
        state = dict(STATE)
        if ownFile:
            own = spare.paths.piDir / "2026-12-02T00-00-00-000Z_spare.jsonl"
            own.write_text('{"type":"session","id":"spare"}\n{"type":"message"}\n')
            state["sessionFile"] = str(spare.inside.piDir / own.name)
        answer(transport, "get_state", state)
        answer(transport, "prompt", {"disposition": "started"})
        record(transport, {"type": "agent_settled", "aborted": False})
        answer(transport, "switch_session", {"cancelled": False})
        return spare


class HarnessTestCase(SynchronousTestCase):
    spares = 1

    def setUp(self) -> None:
        self.host = SpareHarness(self, agentSpareBodies=self.spares, spareRefillMs=60000)
        self.addCleanup(self.host.stop)
        self.data = self.host.root

    @property
    def pool(self) -> Any:
        return self.host.agent.spares

    def createAgent(self, requestId: str = "create-agent", **kw: Any) -> str:
        code, frame = self.host.createAgent(requestId, **kw)
        self.assertEqual(code, 201, frame)
        return frame["value"]["session"]["sessionId"]


def handOver(testCase: SynchronousTestCase, host: SpareHarness, sessionId: str,
             transport: Any) -> None:
    """
    The first command of C{sessionId}, which hands over the spare on
    C{transport}: it is given the session's facts and says it is on the
    file it was switched to while it waited.
    """
    code, frame = host.prompt(sessionId, "p1")
    testCase.assertEqual(code, 202, frame)
    target = next(r for r in transport.written if r["type"] == "switch_session")["sessionPath"]
    answer(transport, "prompt", {"disposition": "handled"})
    answer(transport, "get_state", {**STATE, "sessionFile": target})


class MakingTests(HarnessTestCase):
    """
    An agent spare is made for a session id of its own, in its own empty
    folders in the data dir, boxed where that session's will be, holding
    no key.
    """

    def test_madeForASessionId(self) -> None:
        """
        The host's start makes one spare: an agent body (its tools, its
        box, the seccomp program on its fd) with the spare's budget, whose
        folders are C{spares/<spareId>/pi} and C{.../workspace} (empty,
        private), seen inside where the session it reserved will keep its
        own, with providers and a bridge that hold its proxy's token and
        never the key.
        """
        [transport] = self.host.launcher.spawned
        [asked] = self.host.launcher.kwargs
        [spare] = self.pool.making
        self.assertIs(spare.protocol.transport, transport)
        sessionId = spare.sessionId
        assert sessionId is not None
        self.assertRegex(sessionId, "^s[0-9a-f]{32}$")
        self.assertEqual(asked["profile"], "agent")
        self.assertEqual(asked["budget"], SPARE_BUDGET)
        paths: BodyPaths = asked["paths"]
        folder = self.data / "spares" / spare.spareId
        self.assertEqual(paths, BodyPaths.forSession(folder, folder / "workspace"))
        for made in (self.data / "spares", folder, paths.piDir, paths.workDir):
            self.assertEqual(os.stat(made).st_mode & 0o777, 0o700)
        self.assertEqual(os.listdir(paths.workDir), [])
        self.assertEqual(asked["inside"], BodyPaths.forSession(
            self.data / "sessions" / sessionId, self.data / "workspaces" / sessionId))
        self.assertIn(SECCOMP_FD, asked["extraFDs"])
        self.assertIsNotNone(asked["wrap"])
        proxy = spare.proxy
        assert isinstance(proxy, AgentSpareProxy)
        token = proxy.proxy.token
        self.assertEqual(asked["providers"]["scripted"]["apiKey"], token)
        self.assertEqual(asked["bootExtra"], {
            "bridge": {"socket": str(proxy.proxy.socketPath), "port": 18080, "token": token},
            "spare": True,
        })
        self.assertNotIn(KEY, json.dumps(asked["providers"]))
        # Not even the token shows in a log line that names the proxy.
        self.assertNotIn(token, repr(proxy))
        self.assertIsNone(proxy.proxy.model)
        self.assertEqual(proxy.proxy.socketPath.parent.name, sessionId)
        # Nothing of the session exists yet.
        self.assertFalse((self.data / "sessions" / sessionId).exists())
        self.assertFalse((self.data / "workspaces" / sessionId).exists())

    def test_theBoxBindsTheSessionsPaths(self) -> None:
        """
        The spare's box binds its own folders at the session's paths and
        starts pi in the session's workspace; the data dir is masked.
        """
        [asked] = self.host.launcher.kwargs
        spare = self.pool.making[0]
        paths: BodyPaths = asked["paths"]
        inside: BodyPaths = asked["inside"]
        argv, env = asked["wrap"](["/bin/node", "pi.js"], {"HOME": str(inside.home)}, paths)
        real = lambda p: os.path.realpath(p)  # noqa: E731
        text = " ".join(argv)
        self.assertIn(f"--bind {real(paths.workDir)} {inside.workDir}", text)
        self.assertIn(f"--bind {real(paths.piDir)} {inside.piDir}", text)
        self.assertIn(f"--tmpfs {real(self.data)}", text)
        self.assertEqual(argv[argv.index("--chdir") + 1], str(inside.workDir))
        self.assertNotIn(f"{paths.workDir} {paths.workDir}", text)
        self.assertEqual(env, {"PATH": "/usr/bin:/bin"})
        self.assertIn(str(spare.proxy.proxy.socketPath.parent), text)  # type: ignore[attr-defined]

    def test_piIsToldTheInsidePaths(self) -> None:
        """
        A launcher given where pi sees its folders names those in pi's argv
        and environment, prepares the host's, and starts in the host's
        working folder (the box moves pi to its own).
        """
        spawned: list[Any] = []

        class Reactor:
            def spawnProcess(self, protocol: Any, executable: str, args: list[str],
                             env: dict[str, str], path: str, childFDs: Any) -> Any:
                spawned.append((args, env, path))
                return FakeTransport()

        class FakeTransport:
            pid = 1

            def writeToChild(self, fd: int, data: bytes) -> None:
                pass

            def closeChildFD(self, fd: int) -> None:
                pass

        root = Path(self.mktemp()).absolute()
        piRoot = self.host.agent.piRoot
        launcher = Launcher(reactor=Reactor(), models=ModelCatalog(
            json.loads(json.dumps(MODELS["providers"])), MODEL), piRoot=piRoot)  # type: ignore[arg-type]
        paths = BodyPaths.forSession(root / "spare", root / "spare" / "workspace")
        inside = BodyPaths.forSession(root / "sessions" / "s1", root / "workspaces" / "s1")
        launcher.spawn(object(), paths=paths, inside=inside, model=MODEL, profile="agent",  # type: ignore[arg-type]
                       budget=SPARE_BUDGET)
        [(args, env, path)] = spawned
        self.assertEqual(args[args.index("--session-dir") + 1], str(inside.piDir))
        self.assertEqual(env["HOME"], str(inside.home))
        self.assertEqual(env["PI_CODING_AGENT_DIR"], str(inside.agentDir))
        self.assertEqual(path, str(paths.workDir))
        self.assertTrue((paths.agentDir / "settings.json").is_file())
        self.assertFalse(inside.piDir.exists())


class NoSparesTests(SynchronousTestCase):
    """
    Agent spares are made only where a bwrap box binds them.
    """

    def test_offByDefault(self) -> None:
        host = SpareHarness(self)
        self.addCleanup(host.stop)
        self.assertIsNone(host.agent.spares)
        self.assertEqual(host.launcher.spawned, [])

    def test_noneStartedAtAClaim(self) -> None:
        """
        With no agent spares kept, a claim of a dormant agent conversation
        starts nothing (its command starts its body, as before).
        """
        host = SpareHarness(self)
        self.addCleanup(host.stop)
        code, frame = host.createAgent("create-agent")
        self.assertEqual(code, 201, frame)
        session = host.api.registry.sessions[frame["value"]["session"]["sessionId"]]
        (session.directory / "pi" / "conversation.jsonl").write_text(
            '{"type":"session","id":"x"}\n{"type":"message","id":"m1"}\n'
        )
        code, frame = host.call("POST", f"/sessions/{session.sessionId}/claim",
                                {"requestId": "c2"})
        self.assertEqual(code, 200, frame)
        self.assertEqual(host.launcher.spawned, [])

    def test_noBwrapNoSpares(self) -> None:
        """
        With agent bodies unboxed (the operator's choice) the pool stops
        at its first try, makes no folder, and is not retried.
        """
        host = SpareHarness(self, agentSpareBodies=1, isolation="none", agentUnisolated=True)
        self.addCleanup(host.stop)
        self.assertEqual(host.launcher.spawned, [])
        assert host.agent.spares is not None
        self.assertTrue(host.agent.spares.stopped)
        host.clock.advance(3600)
        self.assertEqual(host.launcher.spawned, [])
        self.assertFalse((host.root / "spares").exists())
        # Agent sessions start cold.
        code, frame = host.createAgent()
        self.assertEqual(code, 201, frame)

    def test_probeRefusedNoSpares(self) -> None:
        """
        A host whose box cannot be made keeps no agent spares.
        """
        host = SpareHarness(self)
        host.stop()
        host.spawner.refuse(b"bwrap: No permissions to creating new namespace")
        host.overrides = {"agentSpareBodies": 1}
        host.root = Path(self.mktemp()).absolute()
        host._start()
        self.addCleanup(host.stop)
        assert host.agent.spares is not None
        self.assertTrue(host.agent.spares.stopped)
        self.assertEqual(host.launcher.spawned, [])


class ReservationTests(HarnessTestCase):
    """
    A new agent session takes a ready spare: its id, its folders (renamed
    into place, their identities recorded after the move).
    """

    def test_theSessionBecomesTheSparesReservation(self) -> None:
        spare = self.host.ready()
        piInode = os.stat(spare.paths.piDir).st_ino
        workInode = os.stat(spare.paths.workDir).st_ino
        sessionId = self.createAgent()
        self.assertEqual(sessionId, spare.sessionId)
        self.assertEqual(self.pool.ready, [])
        self.assertIs(self.host.agent.reserved[sessionId], spare)
        sessionDir = self.data / "sessions" / sessionId
        workspace = self.data / "workspaces" / sessionId
        self.assertEqual(os.stat(sessionDir / "pi").st_ino, piInode)
        self.assertEqual(os.stat(workspace).st_ino, workInode)
        self.assertEqual(os.listdir(self.data / "spares" / spare.spareId), [])
        # Nothing of the spare's own session is in the session's pi folder:
        # only the new file pi was switched to while the spare waited.
        assert spare.prepared is not None
        self.assertEqual(list((sessionDir / "pi").glob("*.jsonl")),
                         [sessionDir / "pi" / spare.prepared.name])
        meta = json.loads((sessionDir / "meta.json").read_text())
        folders = meta["folders"]
        self.assertEqual((folders["pi"]["path"], folders["pi"]["inode"]),
                         (str(sessionDir / "pi"), piInode))
        self.assertEqual((folders["workspace"]["path"], folders["workspace"]["inode"]),
                         (str(workspace), workInode))
        # The folders are the host's: a body may start.
        self.host.agent.checkFolders(self.host.api.registry.sessions[sessionId])
        self.assertEqual(len(self.host.launcher.spawned), 1)

    def test_countedAsMadeAhead(self) -> None:
        """
        A spare held for a new session is counted among the bodies made
        ahead of a command (no longer a ready spare, not yet a body); once
        handed over, among the bodies.
        """
        self.host.ready()
        sample = self.host.host.sample()
        self.assertEqual((sample.spares, sample.ahead, sample.bodies), (1, 0, {}))
        sessionId = self.createAgent()
        sample = self.host.host.sample()
        self.assertEqual((sample.spares, sample.ahead, sample.bodies), (0, 1, {}))
        handOver(self, self.host, sessionId, self.host.spareTransport())
        sample = self.host.host.sample()
        self.assertEqual((sample.ahead, sample.bodies), (0, {"agent": 1}))

    def test_notReadyNoReservation(self) -> None:
        """
        A spare still being made is not taken: the session starts cold.
        """
        spare = self.pool.making[0]
        sessionId = self.createAgent()
        self.assertNotEqual(sessionId, spare.sessionId)
        self.assertEqual(self.host.agent.reserved, {})
        self.assertTrue((self.data / "workspaces" / sessionId).is_dir())

    def test_chatTakesNone(self) -> None:
        """
        A chat session leaves the spare.
        """
        spare = self.host.ready()
        self.host.create("chat-1")
        self.assertEqual(self.pool.ready, [spare])

    def test_anotherModelTakesIt(self) -> None:
        """
        An agent on another model of the host takes the spare, whose boot
        config lists every provider of the host through its proxy (the
        token, the bridge's address; never a key).
        """
        spare = self.host.ready()
        self.assertEqual(self.createAgent("other-1", model="scripted/echo-2"), spare.sessionId)
        providers = self.host.launcher.kwargs[-1]["providers"]
        self.assertEqual(sorted(providers), ["scripted"])
        self.assertEqual([m["id"] for m in providers["scripted"]["models"]], ["echo-1", "echo-2"])
        self.assertNotIn(KEY, json.dumps(providers))
        self.assertEqual(providers["scripted"]["apiKey"], spare.proxy.proxy.token)  # type: ignore[attr-defined]

    def test_aFailedCreateLeavesNothing(self) -> None:
        """
        A create that fails after the folders moved (the disk refuses the
        meta) removes the folder built aside and the workspace, and ends
        the spare; its own folder goes too.
        """
        spare = self.host.ready()
        transport = self.host.spareTransport()
        from vehicle.session import _session  # the maker writes the meta through it

        def refuse(*a: Any, **kw: Any) -> None:
            raise OSError(28, "No space left on device")

        self.patch(_session.Session, "writeMeta", refuse)
        code, frame = self.host.createAgent()
        self.assertEqual((code, frame["code"]), (503, "storage_unavailable"), frame)
        self.assertIn(0, transport.closed)
        exited(transport, 0)
        sessionId = spare.sessionId
        self.assertEqual([e for e in os.listdir(self.data / "sessions")], [])
        self.assertFalse((self.data / "workspaces" / str(sessionId)).exists())
        self.assertFalse((self.data / "spares" / spare.spareId).exists())
        self.assertEqual(self.host.agent.reserved, {})


class HandOffTests(HarnessTestCase):
    """
    The first command hands the reserved spare over; a refusal or a lost
    spare starts the body cold in the same folders.
    """

    def setUp(self) -> None:
        super().setUp()
        self.spare = self.host.ready()
        self.transport = self.host.spareTransport()
        self.sessionId = self.createAgent()
        self.session = self.host.api.registry.sessions[self.sessionId]
        self.piDir = self.session.directory / "pi"
        self.own = self.piDir / "2026-12-02T00-00-00-000Z_spare.jsonl"
        # The spare's own session was removed as its folders moved in; pi
        # may write it again (its priming's file) before it is handed over.
        self.assertFalse(self.own.exists())
        self.own.write_text('{"type":"session","id":"spare"}\n{"type":"message"}\n')

    def prompt(self, requestId: str = "p1") -> None:
        code, frame = self.host.prompt(self.sessionId, requestId)
        self.assertEqual(code, 202, frame)

    def switchRequest(self) -> dict[str, Any]:
        return next(r for r in self.transport.written if r["type"] == "switch_session")

    def test_handedOver(self) -> None:
        """
        The spare was switched, while it waited, to a new file where its
        session keeps its conversation (its header's cwd the workspace),
        never to the spare's own session, which goes; the first command
        hands it over with the session's facts, no switch; its proxy
        reaches the session's provider and is the session's body's; no
        body is spawned.
        """
        switches = kinds(self.transport).count("switch_session")
        target = Path(self.switchRequest()["sessionPath"])
        self.assertEqual(target.parent, self.piDir)
        self.assertNotEqual(target, self.own)
        header = json.loads(target.read_text().splitlines()[0])
        self.assertEqual(header["cwd"], str(self.data / "workspaces" / self.sessionId))
        self.prompt()
        self.assertEqual(kinds(self.transport).count("switch_session"), switches)
        self.assertTrue(self.transport.written[-1]["message"].startswith("/sophia-session {"))
        answer(self.transport, "prompt", {"disposition": "handled"})
        answer(self.transport, "get_state", {**STATE, "sessionFile": str(target)})
        self.assertFalse(self.own.exists())
        self.assertEqual(kinds(self.transport)[-1], "prompt")
        self.assertEqual(len(self.host.launcher.spawned), 1)
        self.assertEqual(self.host.agent.reserved, {})
        proxy = self.spare.proxy
        assert isinstance(proxy, AgentSpareProxy)
        self.assertIs(self.host.agent.proxies[self.sessionId], proxy.proxy)
        assert proxy.proxy.model is not None
        self.assertEqual(proxy.proxy.model.key, KEY)
        events = self.host.events(self.sessionId)
        materialized = [e for e in events if e["type"] == "body.materialized"]
        self.assertEqual(materialized[0]["data"]["box"], "bwrap")

    def test_setToItsModel(self) -> None:
        """
        A session on another model than the spare's is handed the spare,
        set to its own model once pi is on its file; one on the spare's
        own model is not set.
        """
        self.handOver()
        self.assertNotIn("set_model", kinds(self.transport))
        self.host.clock.advance(60)
        transport = self.host.spareTransport(-1)
        self.assertIsNot(transport, self.transport)
        self.host.ready()
        other = self.createAgent("other-1", model="scripted/echo-2")
        self.assertEqual(self.host.api.registry.sessions[other].meta.model, "scripted/echo-2")
        handOver(self, self.host, other, transport)
        self.assertEqual(kinds(transport)[-1], "set_model")
        self.assertEqual((transport.written[-1]["provider"], transport.written[-1]["modelId"]),
                         ("scripted", "echo-2"))
        answer(transport, "set_model", {"provider": "scripted", "id": "echo-2"})
        self.assertEqual(kinds(transport)[-1], "prompt")

    def test_noProbeToHandOver(self) -> None:
        """
        Handing the spare over starts no box, so bwrap is not probed on the
        first command's way (a body started cold is, as always).
        """
        probes = len(self.host.spawner.calls)
        self.handOver()
        self.assertEqual(len(self.host.spawner.calls), probes)
        self.assertEqual(len(self.host.launcher.spawned), 1)

    def test_aProbeBeforeAColdBody(self) -> None:
        """
        With the spare lost, the first command probes the box before the
        body it starts, and refuses when bwrap no longer makes one.
        """
        exited(self.transport, 1)
        self.host.spawner.refuse(b"bwrap: setting up uid map: Permission denied")
        code, frame = self.host.prompt(self.sessionId, "p1")
        self.assertEqual((code, frame["code"]), (503, "isolation_unavailable"), frame)

    def handOver(self) -> None:
        handOver(self, self.host, self.sessionId, self.transport)

    def test_itsEndKeepsTheFolders(self) -> None:
        """
        When the body the spare became is gone, its proxy closes and its
        own folder goes; the session's folders stay, still its own, and
        its next body starts cold in them, on its conversation's file.
        """
        self.handOver()
        sessionFile = self.switchRequest()["sessionPath"]
        self.transport.signalProcess("KILL")
        self.assertNotIn(self.sessionId, self.host.agent.proxies)
        self.assertFalse((self.data / "spares" / self.spare.spareId).exists())
        self.assertTrue(Path(sessionFile).exists())
        self.assertTrue((self.data / "workspaces" / self.sessionId).is_dir())
        self.host.agent.checkFolders(self.session)
        self.prompt("p2")
        self.assertEqual(len(self.host.launcher.spawned), 2)
        cold = self.host.launcher.kwargs[-1]
        self.assertIsNone(cold.get("inside"))
        self.assertEqual(cold["paths"].workDir, self.data / "workspaces" / self.sessionId)

    def claimedAfterItsEnd(self) -> Path:
        """
        The body the spare became is gone, with a conversation in pi's file;
        then its driver claims the session again: its file.
        """
        self.handOver()
        sessionFile = Path(self.switchRequest()["sessionPath"])
        with sessionFile.open("a") as f:
            f.write('{"type":"message","id":"m1","message":{"role":"user","content":"hi"}}\n')
        self.transport.signalProcess("KILL")
        code, frame = self.host.call("POST", f"/sessions/{self.sessionId}/claim",
                                     {"requestId": "c2"})
        self.assertEqual(code, 200, frame)
        return sessionFile

    def test_revivedStartsAtTheClaim(self) -> None:
        """
        A dormant agent conversation claimed, which no spare can serve (a
        box's binds are fixed when it starts), has its own body started in
        a box on its own folders at the claim, unannounced: pi starts a
        session of its own in the pi folder's C{.priming}, is primed there
        (its proxy reaching no provider) and switched to the conversation,
        and the folder goes.  Its command is sent to that body, whose proxy
        then reaches the session's provider, and no other starts.
        """
        sessionFile = self.claimedAfterItsEnd()
        self.assertEqual(len(self.host.launcher.spawned), 2)
        self.assertEqual(self.session.conductor.life.places.limit, 1)
        self.assertEqual(self.session.conductor.life.places.taken, 1)
        early = self.host.launcher.kwargs[-1]
        self.assertIsNone(early.get("inside"))
        self.assertEqual(early["profile"], "agent")
        self.assertEqual(early["paths"].piDir, self.piDir)
        self.assertEqual(early["paths"].workDir, self.data / "workspaces" / self.sessionId)
        self.assertIsNotNone(early["wrap"])
        priming = self.piDir / PRIMING_FOLDER
        self.assertEqual(early["freshIn"], priming)
        self.assertTrue(priming.is_dir())
        proxy = self.host.agent.proxies[self.sessionId]
        self.assertIsNone(proxy.model)
        transport = self.host.launcher.spawned[-1]
        answer(transport, "get_state", STATE)
        self.assertEqual(transport.written[-1]["message"], PRIMING_PROMPT)
        answer(transport, "prompt", {"disposition": "started"})
        record(transport, {"type": "agent_start"})
        record(transport, {"type": "agent_settled", "aborted": False})
        self.assertEqual(transport.written[-1]["type"], "switch_session")
        self.assertEqual(transport.written[-1]["sessionPath"], str(sessionFile))
        answer(transport, "switch_session", {"cancelled": False})
        answer(transport, "get_state", {**STATE, "sessionFile": str(sessionFile),
                                        "messageCount": 1})
        self.assertFalse(priming.exists())
        self.assertEqual(self.session.conductor.bodyState(), "dormant")
        self.assertIsNone(proxy.model)
        # A body made at the claim: counted as such, not as a session's body.
        sample = self.host.host.sample()
        self.assertEqual((sample.ahead, sample.bodies), (1, {}))
        # Its box runs already: the command probes none.
        probes = len(self.host.spawner.calls)
        self.prompt("p2")
        self.assertEqual(len(self.host.spawner.calls), probes)
        self.assertEqual(len(self.host.launcher.spawned), 2)
        self.assertEqual(kinds(transport),
                         ["get_state", "prompt", "switch_session", "get_state", "prompt"])
        self.assertIs(self.host.agent.proxies[self.sessionId], proxy)
        assert proxy.model is not None
        self.assertEqual(proxy.model.key, KEY)
        events = self.host.events(self.sessionId)
        revived = [e for e in events if e["type"] == "session.revived"]
        self.assertEqual(revived[-1]["data"], {"messageCount": 1})
        materialized = [e for e in events if e["type"] == "body.materialized"]
        self.assertEqual(materialized[-1]["data"]["box"], "bwrap")
        self.assertNotIn(PRIMING_PROMPT, json.dumps(events))
        sample = self.host.host.sample()
        self.assertEqual((sample.ahead, sample.bodies), (0, {"agent": 1}))

    def test_aProbeWhenTheEarlyBodyIsGone(self) -> None:
        """
        A body started at the claim that ended before the command is no
        box: the command probes before the body it starts.
        """
        self.claimedAfterItsEnd()
        transport = self.host.launcher.spawned[-1]
        answer(transport, "get_state", STATE)
        exited(transport, 1)
        probes = len(self.host.spawner.calls)
        self.prompt("p2")
        self.assertGreater(len(self.host.spawner.calls), probes)
        self.assertEqual(len(self.host.launcher.spawned), 3)

    def assertColdStart(self) -> None:
        """
        A body was spawned for the session (not the spare), in its folders,
        and the spare's own file is not what it resumes.
        """
        [cold] = [kw for kw in self.host.launcher.kwargs if kw["paths"].piDir == self.piDir]
        self.assertIsNone(cold.get("inside"))
        self.assertEqual(cold["budget"], self.session.meta.budget)
        self.assertIs(self.session.conductor.body.protocol.transport,  # type: ignore[union-attr]
                      self.host.launcher.spawned[self.host.launcher.kwargs.index(cold)])

    def test_aRefusedHandOff(self) -> None:
        """
        A spare that refuses its session is let go (its own file with it)
        and the body starts cold.
        """
        self.prompt()
        record(self.transport, {"type": "extension_error",
                                "extensionPath": "command:sophia-session",
                                "event": "command", "error": "refused"})
        answer(self.transport, "prompt", {"disposition": "handled"})
        self.assertColdStart()
        exited(self.transport, 0)
        self.assertFalse(self.own.exists())
        self.assertFalse((self.data / "spares" / self.spare.spareId).exists())

    def test_aLostSpare(self) -> None:
        """
        A spare that ended while it waited for its session's first command
        is not handed over: the body starts cold, and nothing of the spare
        stays in the session's folder.
        """
        exited(self.transport, 1)
        before = list(self.transport.written)
        self.prompt()
        self.assertEqual(self.transport.written, before)
        self.assertColdStart()
        self.assertFalse(self.own.exists())

    def test_tamperedFolders(self) -> None:
        """
        The folders are checked before a spare is handed over as before any
        body: a swapped workspace is C{body_tampered}, and the spare ends.
        """
        workspace = self.data / "workspaces" / self.sessionId
        workspace.rename(workspace.with_name("elsewhere"))
        workspace.mkdir()
        code, frame = self.host.prompt(self.sessionId, "p1")
        self.assertEqual((code, frame["code"]), (409, "body_tampered"), frame)
        self.assertIn(0, self.transport.closed)
        self.assertNotIn("/sophia-session", json.dumps(self.transport.written))

    def test_deletedBeforeItsFirstCommand(self) -> None:
        """
        A session deleted before its first command lets its spare go.
        """
        code, frame = self.host.call("DELETE", f"/sessions/{self.sessionId}")
        self.assertEqual(code, 200, frame)
        self.assertIn(0, self.transport.closed)
        self.assertEqual(self.host.agent.reserved, {})

    def test_heldTooLong(self) -> None:
        """
        A spare waits for its session's first command as long as a body
        idles, then ends; the first command then starts a body cold.
        """
        self.host.clock.advance(self.host.agent.spareHoldSeconds - 1)
        self.assertNotIn(0, self.transport.closed)
        self.host.clock.advance(1)
        self.assertIn(0, self.transport.closed)
        exited(self.transport, 0)
        self.assertFalse(self.own.exists())
        self.prompt()
        self.assertColdStart()


class StartStopTests(SynchronousTestCase):
    """
    A killed host's spare folders go at the next start; a stopping host
    ends its spares, ready or reserved, and their own folders.
    """

    def test_startRemovesLeftovers(self) -> None:
        host = SpareHarness(self)
        host.stop()
        left = host.root / "spares" / "spare-0123"
        (left / "pi" / "agent").mkdir(parents=True)
        (left / "workspace").mkdir()
        (left / "pi" / "own.jsonl").write_text("{}\n")
        host.restart()
        self.addCleanup(host.stop)
        self.assertEqual(os.listdir(host.root / "spares"), [])

    def test_stopEndsEverySpare(self) -> None:
        host = SpareHarness(self, agentSpareBodies=2, spareRefillMs=60000)
        first = host.ready(0)
        second = host.ready(1)
        code, frame = host.createAgent()
        self.assertEqual(code, 201, frame)
        reserved = frame["value"]["session"]["sessionId"]
        self.assertEqual(reserved, first.sessionId)
        host.host.stopService()
        for transport in host.launcher.spawned:
            self.assertIn(0, transport.closed)
            exited(transport, 0)
        self.assertEqual(host.agent.reserved, {})
        self.assertEqual(os.listdir(host.root / "spares"), [])
        # The reserved spare's session keeps its folders.
        self.assertTrue((host.root / "workspaces" / reserved).is_dir())
        self.assertTrue((host.root / "sessions" / reserved / "pi").is_dir())
        self.assertNotIn(second.sessionId, os.listdir(host.root / "sessions"))
        host.api.registry.close()
        host.agent.removeRunDir()


class CrashTests(SynchronousTestCase):
    """
    A host killed at any durable write of a create that took a spare
    (the folders moved, the session not yet published, or published)
    leaves nothing the next start does not clean: the session whole, its
    folders its own, or nothing of it at all.
    """

    def run_(self, cut: int | None) -> tuple[int, bool]:
        """
        Create an agent session on a ready spare, killed after sync C{cut}
        (never, with L{None}); start a new host; check what it serves.

        @return: the syncs the create made, and whether the session exists.
        """
        root = Path(self.mktemp()).absolute()
        root.mkdir(parents=True)
        h = SpareHarness(self, root, agentSpareBodies=1, spareRefillMs=60000)
        spare = h.ready()
        create = ("POST", "/sessions", {"requestId": "c1", "profile": "agent"}, {})
        syncs = sendCut(self, h, create, cut)
        after = SpareHarness(self, root, agentSpareBodies=1, spareRefillMs=60000)
        self.addCleanup(after.stop)
        sessionId = str(spare.sessionId)
        sessions = os.listdir(root / "sessions")
        self.assertIn(sessions, ([], [sessionId]))
        made = sessions == [sessionId]
        self.assertEqual(os.listdir(root / "workspaces"), [sessionId] if made else [])
        self.assertEqual(os.listdir(root / "spares"),
                         [s.spareId for s in after.agent.spares.making])  # type: ignore[union-attr]
        if made:
            session = after.api.registry.sessions[sessionId]
            after.agent.checkFolders(session)
            code, frame = after.prompt(sessionId, "p1")
            self.assertEqual(code, 202, frame)
        return syncs, made

    def test_everyCut(self) -> None:
        syncs, made = self.run_(None)
        self.assertTrue(made)
        outcomes = [self.run_(k)[1] for k in range(1, syncs + 1)]
        self.assertIn(False, outcomes)
        self.assertTrue(outcomes[-1])


class InsidePathTests(SynchronousTestCase):
    """
    A box may see its folders at other paths than the host's (a spare's,
    at its session's): bound there, started there, checked like them.
    """

    def spec(self, **kw: Any) -> BoxSpec:
        given: dict[str, Any] = dict(
            bwrap=BWRAP, workspace="/d/spares/x/workspace", piDir="/d/spares/x/pi",
            workspaceAt="/d/workspaces/s1", piDirAt="/d/sessions/s1/pi",
            hidden=["/d"], command=["node"],
        )
        given.update(kw)
        return BoxSpec(**given)

    def test_boundWhereTheBoxSeesThem(self) -> None:
        argv = bwrapArgv(self.spec())
        text = " ".join(argv)
        self.assertIn("--bind /d/spares/x/workspace /d/workspaces/s1"
                      " --bind /d/spares/x/pi /d/sessions/s1/pi --remount-ro /d", text)
        self.assertLess(text.index("--tmpfs /d "), text.index("--bind"))
        self.assertEqual(argv[argv.index("--chdir") + 1], "/d/workspaces/s1")

    def test_orderedByWhereTheyAreSeen(self) -> None:
        """
        Mounts are ordered by the path inside: a bind seen deeper comes
        after one seen above it, whatever its source.
        """
        argv = bwrapArgv(self.spec(workspaceAt="/d/w", piDirAt="/d/a/b/c/pi",
                                   workspace="/d/a/b/c/d/e/ws", piDir="/d/p"))
        binds = [argv[i + 2] for i, a in enumerate(argv) if a == "--bind"]
        self.assertEqual(binds, ["/d/w", "/d/a/b/c/pi"])

    def test_refused(self) -> None:
        for change in [
            {"workspaceAt": "d/ws"},
            {"piDirAt": "/d/../pi"},
            {"workspaceAt": "/"},
            {"piDirAt": "/d"},
            {"workspaceAt": "/d/sessions/s1/pi/ws"},
        ]:
            self.assertRaises(BoxSpecError, bwrapArgv, self.spec(**change))

    def test_canonicalKeepsTheInsidePaths(self) -> None:
        """
        The host's folders must exist and are made canonical; where the
        box sees them need not exist outside.
        """
        root = Path(self.mktemp()).absolute()
        (root / "ws").mkdir(parents=True)
        (root / "pi").mkdir()
        spec = canonicalSpec(BoxSpec(
            workspace=root / "ws", piDir=root / "pi", workspaceAt=root / "later" / "ws",
            piDirAt=root / "later" / "pi", command=["node"],
        ))
        self.assertEqual(spec.workspaceInside, root / "later" / "ws")
        self.assertEqual(spec.piDirInside, root / "later" / "pi")
        self.assertEqual(spec.workspace, Path(os.path.realpath(root / "ws")))


class SetUpFailureTests(SynchronousTestCase):
    """
    A spare whose proxy cannot listen leaves no folder behind.
    """

    def test_proxyRefused(self) -> None:
        host = SpareHarness(self)
        self.addCleanup(host.stop)
        profile = host.agent

        def refuse(address: str, *args: Any, **kw: Any) -> Any:
            raise CannotListenError(None, address, OSError("the socket's folder is gone"))

        profile.reactor.listenUNIX = refuse  # type: ignore[method-assign]
        setUp = Deferred.fromCoroutine(
            AgentSpares(profile=profile, newSessionId=lambda: "s" + "0" * 32)
            .setUp("spare-1"))
        self.failureResultOf(setUp, CannotListenError)
        self.assertEqual(os.listdir(host.root / "spares"), [])


class AnnotationTests(SynchronousTestCase):
    def test_annotationsResolve(self) -> None:
        """
        The agent spares' annotations are types (mypy's reading, checked
        at run time).
        """
        from vehicle.agent import _spares

        assertAnnotationsResolve(self, _spares)
