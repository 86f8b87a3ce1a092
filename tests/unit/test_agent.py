# -*- test-case-name: tests.unit.test_agent -*-
"""
The agent profile through the host's routes: who may create and drive one,
the isolation decision (with the probe simulated), tampered folders, what
the summary and listing say, the plan each boxed body gets, and where a
deleted agent's workspace goes.

The host is the in-memory one of L{tests.support.harness} on a
L{MemoryReactorClock}; the bwrap probe is answered by a fake spawner put in
the L{AgentProfile} that C{buildHost} wired (C{HostService.host.agent}).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from twisted.internet.defer import Deferred
from twisted.trial.unittest import SynchronousTestCase

from vehicle.agent import BRIDGE_PORT
from vehicle.body import PRIMING_FOLDER
from vehicle.box import PROBE_ARGS
from vehicle.models import ModelCatalog
from vehicle.settings import SettingsError

from tests.support.agenthost import AgentHarness
from tests.support.harness import MODELS


class CreationTests(SynchronousTestCase):
    """
    Who may make an agent session, and when the host refuses to.
    """

    def setUp(self) -> None:
        self.host = AgentHarness(self)
        self.addCleanup(self.host.stop)

    def assertError(self, answer: tuple[int, Any], status: int, code: str) -> dict[str, Any]:
        got, frame = answer
        self.assertEqual((got, frame.get("type"), frame.get("code")), (status, "error", code), frame)
        return frame

    def test_ownerCreates(self) -> None:
        """
        The graph's owner gets an agent session boxed by bwrap, after one
        probe of the box with the probe's own flags and environment (one
        more than the host's probe at start-up, made the same way); its
        workspace exists, private to the host.
        """
        self.assertEqual(len(self.host.spawner.calls), 1)
        code, frame = self.host.createAgent()
        self.assertEqual(code, 201, frame)
        session = frame["value"]["session"]
        self.assertEqual((session["profile"], session["isolation"]), ("agent", "bwrap"))
        startup, creation = self.host.spawner.calls
        for executable, args, env in (startup, creation):
            self.assertEqual(args, [executable, *PROBE_ARGS])
            self.assertEqual(env, {"PATH": "/usr/bin:/bin"})
        workspace = self.host.root / "workspaces" / session["sessionId"]
        self.assertTrue(workspace.is_dir())
        self.assertEqual(workspace.stat().st_mode & 0o777, 0o700)

    def test_notOwnerForbidden(self) -> None:
        """
        An editor or a viewer asking for an agent session gets
        C{forbidden_profile} 403, and nothing is made (no session, no
        workspace, no probe beyond the host's one at start-up).
        """
        startup = list(self.host.spawner.calls)
        self.assertEqual(len(startup), 1)
        for role in ("editor", "viewer"):
            frame = self.assertError(
                self.host.createAgent(f"create-{role}", role=role), 403, "forbidden_profile"
            )
            self.assertEqual(frame["details"], {"role": role})
        code, frame = self.host.call("GET", "/sessions")
        self.assertEqual(frame["value"]["sessions"], [])
        self.assertEqual(os.listdir(self.host.root / "workspaces"), [])
        self.assertEqual(self.host.spawner.calls, startup)

    def test_editorMayCreateChat(self) -> None:
        """
        The same editor may still create a chat session: the refusal is
        about the profile only.
        """
        session = self.host.create(role="editor")
        self.assertEqual(session["profile"], "chat")
        self.assertNotIn("isolation", session)

    def test_bwrapMissing(self) -> None:
        """
        A host whose bwrap is missing refuses with C{isolation_unavailable}
        503, saying so; nothing is made.
        """
        self.host.spawner.missing()
        frame = self.assertError(self.host.createAgent(), 503, "isolation_unavailable")
        self.assertIn("bwrap not found", frame["message"])
        self.assertEqual(os.listdir(self.host.root / "workspaces"), [])
        self.assertEqual(self.host.call("GET", "/sessions")[1]["value"]["sessions"], [])

    def test_bwrapRefused(self) -> None:
        """
        A bwrap that cannot make its namespaces (AppArmor, a container)
        gives C{isolation_unavailable} 503 with bwrap's own first line.
        """
        self.host.spawner.refuse(b"\nbwrap: setting up uid map: Permission denied\n")
        frame = self.assertError(self.host.createAgent(), 503, "isolation_unavailable")
        self.assertIn("bwrap: setting up uid map: Permission denied", frame["message"])

    def test_probesCounted(self) -> None:
        """
        Each probe of the box is counted for an operator by its outcome:
        the one at start passed, one refused by bwrap failed.
        """
        samples = self.host.api.metrics.registry.get_sample_value
        self.assertEqual(samples("vehicle_box_probes_total", {"outcome": "passed"}), 1)
        self.host.spawner.refuse(b"bwrap: setting up uid map: Permission denied\n")
        self.host.createAgent()
        self.assertEqual(samples("vehicle_box_probes_total", {"outcome": "failed"}), 1)

    def test_probeAgainAfterRefusal(self) -> None:
        """
        The probe is not cached: once bwrap works again, the same request
        creates the session.
        """
        self.host.spawner.missing()
        self.assertError(self.host.createAgent("again"), 503, "isolation_unavailable")
        self.host.spawner.allow()
        code, frame = self.host.createAgent("again")
        self.assertEqual(code, 201, frame)

    def test_microvmRefused(self) -> None:
        """
        C{microvm} is refused as not implemented, without a probe.
        """
        host = AgentHarness(self, isolation="microvm")
        self.addCleanup(host.stop)
        frame = self.assertError(host.createAgent(), 503, "isolation_unavailable")
        self.assertIn("not implemented", frame["message"])
        self.assertEqual(host.spawner.calls, [])

    def test_noneRefusedWithoutFlag(self) -> None:
        """
        C{none} is refused unless the operator set
        C{VEHICLE_AGENT_UNISOLATED=1}; the message says how.
        """
        host = AgentHarness(self, isolation="none")
        self.addCleanup(host.stop)
        frame = self.assertError(host.createAgent(), 503, "isolation_unavailable")
        self.assertIn("VEHICLE_AGENT_UNISOLATED", frame["message"])

    def test_noneWithFlag(self) -> None:
        """
        With the operator's flag, C{none} is accepted and labelled so, with
        no probe.
        """
        host = AgentHarness(self, isolation="none", agentUnisolated=True)
        self.addCleanup(host.stop)
        code, frame = host.createAgent()
        self.assertEqual(code, 201, frame)
        self.assertEqual(frame["value"]["session"]["isolation"], "none")
        self.assertEqual(host.spawner.calls, [])

    def test_aModelNoProxyReaches(self) -> None:
        """
        A boxed agent on a model whose API its proxy does not speak is
        refused with C{model_unavailable}, naming the API and the models it
        may use; nothing is made.  A chat session on that model, and an
        agent that is not boxed (it holds the key), are made.
        """
        bedrock = {"bed": {"baseUrl": "http://127.0.0.1:9", "api": "bedrock-converse-stream",
                           "models": [{"id": "b-1"}]}}
        host = AgentHarness(self, providers=bedrock)
        self.addCleanup(host.stop)
        frame = self.assertError(host.createAgent(model="bed/b-1"), 400, "model_unavailable")
        self.assertIn("bedrock-converse-stream", frame["message"])
        self.assertEqual(frame["details"]["models"], ["scripted/echo-1", "scripted/echo-2"])
        self.assertEqual(host.call("GET", "/sessions")[1]["value"]["sessions"], [])
        self.assertEqual(host.create(model="bed/b-1")["profile"], "chat")
        code, _ = host.createAgent("on-echo", model="scripted/echo-2")
        self.assertEqual(code, 201)
        unboxed = AgentHarness(self, providers=bedrock, isolation="none", agentUnisolated=True)
        self.addCleanup(unboxed.stop)
        code, frame = unboxed.createAgent(model="bed/b-1")
        self.assertEqual(code, 201, frame)

    def test_seatbeltOffMac(self) -> None:
        """
        C{seatbelt} on Linux is refused: it needs macOS.
        """
        host = AgentHarness(self, isolation="seatbelt")
        self.addCleanup(host.stop)
        frame = self.assertError(host.createAgent(), 503, "isolation_unavailable")
        self.assertIn("macOS", frame["message"])

    def test_summaryAndListing(self) -> None:
        """
        The creation answer, C{inspect}, the listing and the capsule carry
        C{profile} and C{isolation}; a chat session has no C{isolation};
        host paths (the recorded folders) are not shown.
        """
        code, frame = self.host.createAgent()
        agentId = frame["value"]["session"]["sessionId"]
        chatId = self.host.create("create-chat")["sessionId"]
        code, frame = self.host.call("GET", f"/sessions/{agentId}")
        summary = frame["value"]["session"]
        self.assertEqual((summary["profile"], summary["isolation"]), ("agent", "bwrap"))
        self.assertNotIn("folders", summary)
        self.assertNotIn(str(self.host.root), json.dumps(summary))
        code, frame = self.host.call("GET", "/sessions")
        listed = {s["sessionId"]: s for s in frame["value"]["sessions"]}
        self.assertEqual(listed[agentId]["profile"], "agent")
        self.assertEqual(listed[agentId]["isolation"], "bwrap")
        self.assertEqual(listed[chatId]["profile"], "chat")
        self.assertNotIn("isolation", listed[chatId])
        code, frame = self.host.call("GET", f"/sessions/{agentId}/capsule")
        self.assertEqual(code, 200, frame)
        capsule = json.dumps(frame["value"])
        self.assertIn('"profile": "agent"', capsule)
        self.assertIn('"isolation": "bwrap"', capsule)


class DrivingTests(SynchronousTestCase):
    """
    Driving an agent session: the owner only, and only a body in its box
    on the folders the host made.
    """

    def setUp(self) -> None:
        self.host = AgentHarness(self)
        self.addCleanup(self.host.stop)
        code, frame = self.host.createAgent()
        assert code == 201, frame
        self.sessionId = frame["value"]["session"]["sessionId"]
        self.workspace = self.host.root / "workspaces" / self.sessionId
        self.piDir = self.host.root / "sessions" / self.sessionId / "pi"

    def test_promptAfterRoleDrop(self) -> None:
        """
        The owner, now only an editor, may not prompt: C{access_reduced}
        403, and no body is started.
        """
        code, frame = self.host.prompt(self.sessionId, "p1", role="editor")
        self.assertEqual((code, frame["code"]), (403, "access_reduced"), frame)
        self.assertEqual(frame["details"], {"role": "editor"})
        self.assertEqual(self.host.launcher.spawned, [])

    def test_claimAfterRoleDrop(self) -> None:
        """
        Nor claim the lease (after releasing it as owner).
        """
        code, frame = self.host.call(
            "POST", f"/sessions/{self.sessionId}/release", {"requestId": "r1"}
        )
        self.assertEqual(code, 200, frame)
        code, frame = self.host.call(
            "POST", f"/sessions/{self.sessionId}/claim", {"requestId": "c1"}, role="editor"
        )
        self.assertEqual((code, frame["code"]), (403, "access_reduced"), frame)

    def test_ownerStillReads(self) -> None:
        """
        Reading is not driving: an editor still inspects the session.
        """
        code, frame = self.host.call("GET", f"/sessions/{self.sessionId}", role="editor")
        self.assertEqual(code, 200, frame)

    def test_boxedPlan(self) -> None:
        """
        The owner's prompt starts a body with the plan of a box: a fresh
        probe (besides the route's check of the dormant body, which probes
        too), the workspace as its working folder, a wrapper into bwrap,
        providers that hold the proxy's token and the bridge's loopback
        address (never the key or the provider's URL), and the bridge to
        the proxy's socket in the boot config.
        """
        probes = len(self.host.spawner.calls)
        code, frame = self.host.prompt(self.sessionId, "p1")
        self.assertEqual(code, 202, frame)
        self.assertEqual(len(self.host.spawner.calls), probes + 2)
        [spawn] = self.host.launcher.spawned
        proxy = self.host.agent.proxies[self.sessionId]
        kwargs = self.host.launcher.kwargs[-1]
        self.assertEqual(kwargs["paths"].workDir, self.workspace)
        self.assertEqual(kwargs["profile"], "agent")
        providers = kwargs["providers"]
        self.assertEqual(list(providers), ["scripted"])
        self.assertEqual(providers["scripted"]["apiKey"], proxy.token)
        self.assertEqual(providers["scripted"]["baseUrl"], f"http://127.0.0.1:{BRIDGE_PORT}/v1")
        realKey = MODELS["providers"]["scripted"]["apiKey"]
        self.assertNotIn(realKey, json.dumps(providers))
        self.assertEqual(
            kwargs["bootExtra"],
            {"bridge": {"socket": str(proxy.socketPath), "port": BRIDGE_PORT, "token": proxy.token}},
        )
        self.assertIsNotNone(kwargs["wrap"])
        self.assertEqual(self.host.clock.unixServers[-1][0], str(proxy.socketPath))
        self.assertEqual(self.host.clock.unixServers[-1][3], 0o600)

    def test_wrapper(self) -> None:
        """
        The wrapper puts pi inside bwrap with the body's folders bound, the
        proxy's folder bound read-only, the home and data dir masked, and
        gives bwrap itself only C{PATH}.
        """
        self.host.prompt(self.sessionId, "p1")
        kwargs = self.host.launcher.kwargs[-1]
        paths = kwargs["paths"]
        paths.prepare()
        proxy = self.host.agent.proxies[self.sessionId]
        argv, env = kwargs["wrap"](["/bin/node", "pi.js"], {"HOME": str(paths.home)}, paths)
        self.assertEqual(env, {"PATH": "/usr/bin:/bin"})
        self.assertEqual(argv[0], self.host.agent.bwrap)
        self.assertEqual(argv[-3:], ["--", "/bin/node", "pi.js"])
        text = " ".join(argv)
        workspace = os.path.realpath(self.workspace)
        piDir = os.path.realpath(self.piDir)
        root = os.path.realpath(self.host.root)
        socketDir = os.path.realpath(proxy.socketPath.parent)
        self.assertIn(f"--bind {workspace} {workspace}", text)
        self.assertIn(f"--bind {piDir} {piDir}", text)
        self.assertIn(f"--ro-bind {socketDir} {socketDir}", text)
        self.assertIn(f"--tmpfs {root}", text)
        self.assertIn(f"--tmpfs {Path.home()}", text)
        self.assertIn("--unshare-net", argv)
        self.assertIn("--die-with-parent", argv)

    def test_proxyClosedWhenDormant(self) -> None:
        """
        When the body ends, its proxy is closed and forgotten.
        """
        self.host.prompt(self.sessionId, "p1")
        proxy = self.host.agent.proxies[self.sessionId]
        port = proxy.port
        self.host.launcher.spawned[-1].signalProcess("KILL")
        self.assertNotIn(self.sessionId, self.host.agent.proxies)
        self.assertTrue(port.stopped)

    def test_planAhead(self) -> None:
        """
        The plan of a body started at a claim: the session's box and
        folders, pi started fresh in the pi folder's own C{.priming} (what
        a killed host left there gone; a link a body put there removed,
        its target untouched), and a proxy that reaches no provider until
        the body is adopted, then the session's, with the key.
        """
        agent = self.host.agent
        session = self.host.api.registry.sessions[self.sessionId]
        priming = self.piDir / PRIMING_FOLDER
        priming.mkdir()
        (priming / "left.jsonl").write_text("{}\n")
        plan = self.successResultOf(Deferred.fromCoroutine(agent.planAhead(session)))
        self.assertEqual(plan.primingDir, priming)
        self.assertEqual(list(priming.iterdir()), [])
        self.assertEqual(os.stat(priming).st_mode & 0o777, 0o700)
        self.assertEqual(plan.workDir, self.workspace)
        self.assertEqual(plan.box, "bwrap")
        proxy = agent.proxies[self.sessionId]
        self.assertIsNone(proxy.model)
        assert plan.onAdopt is not None
        plan.onAdopt()
        assert proxy.model is not None
        self.assertEqual(proxy.model.key, MODELS["providers"]["scripted"]["apiKey"])
        elsewhere = Path(self.mktemp())
        elsewhere.mkdir()
        (elsewhere / "keep").write_text("kept")
        shutil.rmtree(priming)
        priming.symlink_to(elsewhere)
        plan = self.successResultOf(Deferred.fromCoroutine(agent.planAhead(session)))
        self.assertFalse(priming.is_symlink())
        self.assertTrue(priming.is_dir())
        self.assertEqual((elsewhere / "keep").read_text(), "kept")
        # The command's own plan is not primed.
        plan = self.successResultOf(Deferred.fromCoroutine(agent.plan(session)))
        self.assertIsNone(plan.primingDir)
        self.assertIsNone(plan.onAdopt)
        self.assertIsNotNone(agent.proxies[self.sessionId].model)

    def test_lateCleanUpSparesTheNewest(self) -> None:
        """
        A body's plan undone after a newer body's proxy opened (a body
        started at a claim, ended late) closes its own proxy only: the
        newer stays the session's, open.
        """
        agent = self.host.agent
        session = self.host.api.registry.sessions[self.sessionId]
        first = self.successResultOf(Deferred.fromCoroutine(agent.plan(session)))
        older = agent.proxies[self.sessionId]
        second = self.successResultOf(Deferred.fromCoroutine(agent.plan(session)))
        newest = agent.proxies[self.sessionId]
        self.assertIsNot(newest, older)
        assert first.cleanup is not None and second.cleanup is not None
        first.cleanup()
        self.assertIs(agent.proxies[self.sessionId], newest)
        self.assertEqual((older.state, newest.state), ("closed", "open"))
        second.cleanup()
        self.assertNotIn(self.sessionId, agent.proxies)
        self.assertEqual(newest.state, "closed")

    def assertRefused(self, requestId: str, status: int, code: str) -> dict[str, Any]:
        """
        A prompt to the dormant body is refused at the route with C{status}
        and C{code}: nothing is logged (no C{command.accepted}, no event at
        all), the command is not in the snapshot, and no body or proxy is
        started.

        @return: the error frame.
        """
        before = self.host.events(self.sessionId)
        got, frame = self.host.prompt(self.sessionId, requestId)
        self.assertEqual(
            (got, frame.get("type"), frame.get("code"), frame.get("requestId")),
            (status, "error", code, requestId),
            frame,
        )
        after = self.host.events(self.sessionId)
        self.assertNotIn("command.accepted", [e["type"] for e in after])
        self.assertEqual(after, before)
        self.assertNotIn(requestId, self.host.commandIds(self.sessionId))
        self.assertEqual(self.host.launcher.spawned, [])
        self.assertNotIn(self.sessionId, self.host.agent.proxies)
        return frame

    def assertAcceptedOnRetry(self, requestId: str) -> None:
        """
        The refused request was not remembered: the same C{requestId}, sent
        again, is accepted and starts one body.
        """
        code, frame = self.host.prompt(self.sessionId, requestId)
        self.assertEqual((code, frame.get("type")), (202, "command.accepted"), frame)
        self.assertEqual(len(self.host.launcher.spawned), 1)
        self.assertIn(requestId, self.host.commandIds(self.sessionId))

    def test_probeBeforeEachBody(self) -> None:
        """
        A host whose box broke after creation starts no body: the prompt is
        refused with C{isolation_unavailable} 503 and bwrap's reason; once
        the box works again, the same request is accepted (the probe is not
        cached).
        """
        self.host.spawner.refuse(b"bwrap: Creating new namespace failed: Operation not permitted\n")
        frame = self.assertRefused("p1", 503, "isolation_unavailable")
        self.assertIn("Operation not permitted", frame["message"])
        self.host.spawner.allow()
        self.assertAcceptedOnRetry("p1")

    def assertTampered(self, folder: str, restore: Any = None) -> None:
        """
        A prompt now starts no body: it is refused at the route with
        C{body_tampered} 409 naming C{folder}.  If C{restore} puts the
        host's own folder back, the same request is then accepted.
        """
        frame = self.assertRefused("p-tampered", 409, "body_tampered")
        self.assertIn(f"the agent's {folder} folder", frame["message"])
        self.assertEqual(frame["details"], {"folder": folder})
        if restore is not None:
            restore()
            self.assertAcceptedOnRetry("p-tampered")

    def test_workspaceSymlink(self) -> None:
        """
        A workspace replaced by a symlink (to a folder the body should not
        have) is C{body_tampered}.
        """
        elsewhere = Path(self.mktemp())
        elsewhere.mkdir()
        self.workspace.rename(self.workspace.with_name("moved-away"))
        self.workspace.symlink_to(elsewhere.absolute())

        def restore() -> None:
            self.workspace.unlink()
            self.workspace.with_name("moved-away").rename(self.workspace)

        self.assertTampered("workspace", restore)

    def test_workspaceReplaced(self) -> None:
        """
        A workspace replaced by another real folder (a new inode) is
        C{body_tampered}.
        """
        self.workspace.rename(self.workspace.with_name("moved-away"))
        self.workspace.mkdir(mode=0o700)

        def restore() -> None:
            self.workspace.rmdir()
            self.workspace.with_name("moved-away").rename(self.workspace)

        self.assertTampered("workspace", restore)

    def test_workspaceGone(self) -> None:
        """
        A workspace that is gone is C{body_tampered} too (never recreated
        silently): asked again, the host refuses again.
        """
        shutil.rmtree(self.workspace)
        self.assertTampered("workspace")
        self.assertFalse(self.workspace.exists())
        self.assertTampered("workspace")
        self.assertFalse(self.workspace.exists())

    def test_piFolderSymlink(self) -> None:
        """
        The pi folder replaced by a symlink is C{body_tampered}.
        """
        self.piDir.rename(self.piDir.with_name("pi-away"))
        self.piDir.symlink_to(self.piDir.with_name("pi-away"))

        def restore() -> None:
            self.piDir.unlink()
            self.piDir.with_name("pi-away").rename(self.piDir)

        self.assertTampered("pi", restore)

    def test_deleteMovesWorkspaceToTrash(self) -> None:
        """
        Deleting an agent session moves its workspace into its trash
        directory as C{workspace/}, contents and all.
        """
        (self.workspace / "notes.txt").write_text("kept\n")
        (self.workspace / "sub").mkdir()
        (self.workspace / "link").symlink_to("/etc/passwd")
        code, frame = self.host.call("DELETE", f"/sessions/{self.sessionId}")
        self.assertEqual(code, 200, frame)
        trashed = self.host.root / "trash" / frame["value"]["trashedAs"]
        self.assertFalse(self.workspace.exists())
        self.assertEqual((trashed / "workspace" / "notes.txt").read_text(), "kept\n")
        self.assertTrue((trashed / "workspace" / "sub").is_dir())
        self.assertEqual(os.readlink(trashed / "workspace" / "link"), "/etc/passwd")
        self.assertTrue((trashed / "deleted.json").exists())


class SeatbeltTests(SynchronousTestCase):
    """
    On macOS the agent's box is seatbelt: wired here, tested as an argv and
    a profile (it cannot run on Linux).
    """

    def test_seatbeltPlan(self) -> None:
        """
        With C{VEHICLE_ISOLATION=seatbelt} on darwin, no probe runs, the body
        is wrapped in C{sandbox-exec} with every path a parameter and its own
        C{TMPDIR}, and the bridge takes a free port (a seatbelt box shares the
        host's loopback) in place of the 0 in the providers' URL.
        """
        host = AgentHarness(self, isolation="seatbelt")
        self.addCleanup(host.stop)
        host.agent.platform = "darwin"
        probes = len(host.spawner.calls)
        code, frame = host.createAgent()
        self.assertEqual(code, 201, frame)
        self.assertEqual(frame["value"]["session"]["isolation"], "seatbelt")
        sessionId = frame["value"]["session"]["sessionId"]
        code, frame = host.prompt(sessionId, "p1")
        self.assertEqual(code, 202, frame)
        self.assertEqual(len(host.spawner.calls), probes)
        kwargs = host.launcher.kwargs[-1]
        self.assertEqual(kwargs["bootExtra"]["bridge"]["port"], 0)
        self.assertEqual(kwargs["providers"]["scripted"]["baseUrl"], "http://127.0.0.1:0/v1")
        paths = kwargs["paths"]
        argv, env = kwargs["wrap"](["/bin/node", "pi.js"], {"HOME": str(paths.home)}, paths)
        self.assertEqual(argv[0], "/usr/bin/sandbox-exec")
        self.assertEqual(argv[-3:], ["--", "/bin/node", "pi.js"])
        profile = argv[argv.index("-p") + 1]
        self.assertIn("(deny default)", profile)
        self.assertNotIn(str(paths.workDir), profile)
        self.assertIn(f"WORKSPACE={paths.workDir}", argv)
        self.assertEqual(env["TMPDIR"], str(paths.piDir / "tmp"))


class ModelCatalogTests(SynchronousTestCase):
    """
    L{ModelCatalog.load} reads a pi-format C{models.json}: keys from the
    environment (then removed from it), and a clean refusal for a file it
    cannot use.
    """

    def write(self, document: object) -> Path:
        path = Path(self.mktemp())
        path.write_text(json.dumps(document), "utf-8")
        return path

    def test_keysFromEnvironment(self) -> None:
        """
        A C{"$NAME"} key is read from the environment, which then no longer
        holds it; the first model is the default, and a model without an id
        is no model.
        """
        environ = {"SCRIPTED_KEY": "sk-scripted-secret", "OTHER": "x"}
        path = self.write({"providers": {"scripted": {
            "baseUrl": "http://127.0.0.1:1/v1", "api": "openai-completions",
            "apiKey": "$SCRIPTED_KEY", "models": [{"id": "echo-1"}, {"name": "no id"}],
        }}})
        catalog = ModelCatalog.load(path, None, environ)
        self.assertEqual(environ, {"OTHER": "x"})
        self.assertEqual(catalog.names(), ["scripted/echo-1"])
        self.assertEqual(catalog.default, "scripted/echo-1")
        self.assertEqual(catalog.secrets(), ["sk-scripted-secret"])
        name, spec = catalog.providerFor("scripted/echo-1")
        self.assertEqual((name, spec["apiKey"]), ("scripted", "sk-scripted-secret"))
        self.assertNotIn("_keyVariable", spec)

    def test_headers(self) -> None:
        """
        A provider's and a model's C{headers} are read as its key is (a
        C{"$NAME"} value from the environment, which then no longer holds
        it); a request for the model carries the provider's with the
        model's over them, and a body that reaches its models through a
        proxy is given none of them, nor the key.
        """
        environ = {"HEADER_SECRET": "h-secret-value", "OTHER": "x"}
        path = self.write({"providers": {
            "scripted": {
                "baseUrl": "http://127.0.0.1:1/v1", "api": "openai-completions",
                "apiKey": "sk-key", "headers": {"x-secret": "$HEADER_SECRET", "x-team": "a"},
                "models": [{"id": "echo-1", "headers": {"x-team": "b", "x-model": "m"}},
                           {"id": "echo-2"}],
            },
            "other": {
                "baseUrl": "http://127.0.0.1:2/v1", "api": "openai-completions",
                "apiKey": "sk-other", "models": [{"id": "o-1"}],
            },
        }})
        catalog = ModelCatalog.load(path, None, environ)
        self.assertEqual(environ, {"OTHER": "x"})
        self.assertEqual(
            catalog.headersFor("scripted/echo-1"),
            {"x-secret": "h-secret-value", "x-team": "b", "x-model": "m"},
        )
        self.assertEqual(
            catalog.headersFor("scripted/echo-2"), {"x-secret": "h-secret-value", "x-team": "a"}
        )
        self.assertEqual(catalog.headersFor("other/o-1"), {})
        proxied = catalog.throughProxy("http://127.0.0.1:0/v1", "token")
        self.assertEqual(set(proxied), {"scripted", "other"})
        text = json.dumps(proxied)
        for secret in ("h-secret-value", "sk-key", "sk-other", "x-team", "headers"):
            self.assertNotIn(secret, text)
        self.assertEqual(
            [m["id"] for m in proxied["scripted"]["models"]], ["echo-1", "echo-2"]
        )
        self.assertEqual(proxied["scripted"]["apiKey"], "token")
        # pi's own copy (a body that holds the key) keeps them as written.
        _, spec = catalog.providerFor("scripted/echo-1")
        self.assertEqual(spec["headers"], {"x-secret": "h-secret-value", "x-team": "a"})

    def test_apiOf(self) -> None:
        """
        A model's API is its own C{api}, else its provider's; none when
        neither names one.
        """
        catalog = ModelCatalog({
            "p": {"baseUrl": "u", "api": "anthropic-messages",
                  "models": [{"id": "a"}, {"id": "b", "api": "openai-responses"}]},
            "q": {"baseUrl": "u", "models": [{"id": "c"}]},
        }, "p/a")
        self.assertEqual(
            [catalog.apiOf(name) for name in ("p/a", "p/b", "q/c")],
            ["anthropic-messages", "openai-responses", None],
        )

    def test_badHeadersRefused(self) -> None:
        """
        Headers pi could not send (not an object, a name that is no HTTP
        token, a value that is not text or breaks the line, a reference to
        an unset variable) are a L{SettingsError} naming where they are.
        """
        provider = {"baseUrl": "u", "api": "a", "apiKey": "k", "models": [{"id": "m"}]}
        for headers, onModel in [
            ("not an object", False),
            ({"bad name": "v"}, False),
            ({"x-n": 1}, True),
            ({"x-n": "line\r\nx-injected: 1"}, False),
            ({"x-n": "$UNSET_HEADER"}, True),
            ({"x-n": "$BROKEN"}, False),
        ]:
            spec = dict(provider)
            if onModel:
                spec["models"] = [{"id": "m", "headers": headers}]
            else:
                spec["headers"] = headers
            with self.assertRaises(SettingsError, msg=repr(headers)) as raised:
                ModelCatalog.load(
                    self.write({"providers": {"p": spec}}), None, {"BROKEN": "a\nb"}
                )
            self.assertIn("model p/m" if onModel else "provider 'p'", str(raised.exception))

    def test_unusableFileRefused(self) -> None:
        """
        No providers, a provider that is not an object, a key whose
        variable is unset, and a default not in the file are each a
        L{SettingsError}.
        """
        provider = {"baseUrl": "u", "api": "a", "apiKey": "$UNSET", "models": [{"id": "m"}]}
        for document, default in [
            ({"providers": {}}, None),
            ([1, 2], None),
            ({"providers": {"scripted": "not an object"}}, None),
            ({"providers": {"scripted": provider}}, None),
            ({"providers": {"scripted": {**provider, "apiKey": "k"}}}, "scripted/other"),
        ]:
            with self.assertRaises(SettingsError, msg=repr(document)):
                ModelCatalog.load(self.write(document), default, {})
