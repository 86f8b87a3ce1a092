"""
The crash-injection driver (L{tests.unit.test_crash} tells the method):
a package registers its mutating routes with L{scenario}, subclasses
L{CrashDriver} and gives the subclass a test per route with
L{addCrashTests}.  Each test runs its route on an in-memory host
(L{tests.support.harness.Harness}) killed, or cut off as by a power loss
(L{tests.support._crashfs}), at its durable writes, then restarted and
retried; the state must be the request's done or not done, never half.
"""

from __future__ import annotations

import gc
import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable

from attrs import field, frozen
from twisted.logger import Logger
from twisted.trial.unittest import SynchronousTestCase

from tests.support._crashfs import Crash, CrashFiles
from tests.support.harness import Harness
from tests.support.syncloop import loopbackWriter
from vehicle.store import GroupWriter


LONG = os.environ.get("VEHICLE_LONG_PROOFS") == "1"

#: Events a request's own step writes (the conductor's later news about
#: bodies and runs is not the request's effect, and a restart reports the
#: open commands interrupted).
EFFECTS = frozenset({
    "session.created", "session.forked", "session.cloned", "session.renamed",
    "session.deleted", "lease.claimed", "lease.renewed", "lease.released",
    "lease.revoked", "command.accepted", "room.policy", "chime.received",
    "chime.resolved",
})

#: Fields that differ from run to run without meaning anything.
VOLATILE = frozenset({
    "timestamp", "at", "acceptedAt", "updatedAt", "claimedAt", "expiresAt",
    "receivedAt", "createdAt", "deletedAt", "cursor",
})

_IDS = re.compile(r"^(s[0-9a-f]{32}|chime-[0-9a-f]{12})(-\d+)?$")

Request = tuple[str, str, Any, dict[str, Any]]


@frozen
class Scenario:
    """
    One mutating request: C{setup} prepares a host and returns what the
    request needs; C{request} makes C{(method, path, body, who)} of it.
    C{lease}: compare who holds the lease (not for commands whose body
    gives it back later).
    """

    name: str
    setup: Callable[[Harness], dict[str, Any]]
    request: Callable[[dict[str, Any]], Request]
    lease: bool = True
    #: The host's settings (L{Harness} overrides: public mode, ...).
    settings: dict[str, Any] = field(factory=dict)
    #: More state to compare, from the restarted host (a ledger's rows).
    extra: Callable[[Harness], Any] | None = None


SCENARIOS: dict[str, Scenario] = {}


def scenario(name: str, setup: Callable[[Harness], dict[str, Any]],
             request: Callable[[dict[str, Any]], Request], lease: bool = True,
             settings: dict[str, Any] | None = None,
             extra: Callable[[Harness], Any] | None = None) -> str:
    """
    Add a route to the crash-injection driver (another package's routes too:
    a public grant or turn needs C{settings} for public mode, and compares
    its ledger with C{extra}).  Add the test with L{addCrashTests}; the
    name is returned.
    """
    SCENARIOS[name] = Scenario(name, setup, request, lease, settings or {}, extra)
    return name


class Normalizer:
    """
    Replaces the ids a run makes up (sessions, chimes) by their order of
    appearance, and drops times: two runs that did the same compare equal.
    """

    def __init__(self) -> None:
        self.names: dict[str, str] = {}

    def __call__(self, value: Any) -> Any:
        if isinstance(value, dict):
            return {k: self(v) for k, v in sorted(value.items()) if k not in VOLATILE}
        if isinstance(value, (list, tuple)):
            return [self(v) for v in value]
        if isinstance(value, str):
            match = _IDS.match(value)
            if match:
                base = self.names.setdefault(match.group(1), f"<id{len(self.names) + 1}>")
                return base + (match.group(2) or "")
        return value


def send(h: Harness, request: Request) -> tuple[int, dict[str, Any]] | None:
    """
    Send one request; L{None} when the host was killed while answering it.
    """
    method, path, body, who = request
    try:
        d = h.request(method, path, body, **who)
        h.stub.flush()
    except Crash:
        return None
    results: list[Any] = []
    d.addBoth(results.append)
    if not results or not hasattr(results[0], "code"):
        return None
    response = results[0]
    content: list[Any] = []
    response.content().addBoth(content.append)
    if not content or not isinstance(content[0], bytes):
        return None
    try:
        return response.code, json.loads(content[0])
    except ValueError:
        return None  # the dead host's last words


def outcome(answer: tuple[int, dict[str, Any]] | None) -> Any:
    if answer is None:
        return None
    code, frame = answer
    return (code, frame.get("type"), frame.get("code"))


class Run:
    """
    One run of a scenario: set up, send the request with a cut at sync
    C{k} ("before": kill before it; L{None}: kill just after it), kill,
    start a new host, send it again, look.
    """

    def __init__(self, case: SynchronousTestCase, s: Scenario, cut: int | str | None,
                 mode: str, writer: Callable[[], GroupWriter] | None = None) -> None:
        self.case = case
        root = Path(case.mktemp())
        root.mkdir(parents=True)
        files = CrashFiles(root, mode)
        files.install(case.patch)
        case.addCleanup(files.uninstall)
        h = Harness(case, root, writer=writer, **s.settings)
        ctx = s.setup(h)
        request = s.request(ctx)
        files.arm(None if cut in (None, "before") else cut)
        self.first = None if cut == "before" else send(h, request)
        self.syncs = files.syncs
        self.cutInside = files.crashed
        files.kill()
        files.revive()
        gc.collect()
        case.flushLoggedErrors(Crash)
        self.host = Harness(case, root, writer=writer, **s.settings)
        self.after = outcome(send(self.host, request))
        self.state = look(case, self.host, s)
        self.files = files
        self.host.stop()


def sendCut(case: SynchronousTestCase, h: Harness, request: Request, cut: int | None) -> int:
    """
    Send C{request} to C{h} with the power cut after sync C{cut} (never,
    with L{None}), then kill it: the files are as the power left them.

    @return: the syncs the request made before the cut.
    """
    files = CrashFiles(h.root)
    files.install(case.patch)
    case.addCleanup(files.uninstall)
    files.arm(cut)
    send(h, request)
    syncs = files.syncs
    files.kill()
    files.revive()
    files.uninstall()
    case.flushLoggedErrors(Crash)
    return syncs


def look(case: SynchronousTestCase, h: Harness, s: Scenario) -> Any:
    """
    The state a person (and the disk) would see, normalized; checks what
    must hold whatever the outcome.
    """
    norm = Normalizer()
    root = h.root
    code, listing = h.call("GET", "/sessions")
    assert code == 200, listing
    sessions = []
    for summary in listing["value"]["sessions"]:
        sid = summary["sessionId"]
        code, frame = h.call("GET", f"/sessions/{sid}/events?since=0")
        events = frame["value"]["events"]
        case.assertEqual([e["seq"] for e in events], list(range(1, len(events) + 1)),
                         "the seqs have a gap or a duplicate")
        code, snap = h.call("GET", f"/sessions/{sid}")
        value = snap["value"]
        meta = json.loads((root / "sessions" / sid / "meta.json").read_text())
        case.assertEqual(meta["title"], value["session"]["title"],
                         "meta.json and the title served differ")
        sessions.append(norm({
            "id": sid,
            "title": value["session"]["title"],
            "roomPolicy": value["session"]["roomPolicy"],
            "lease": (value["session"]["lease"] or {}).get("clientId") if s.lease else None,
            "commands": sorted((c["commandId"], c["type"], c.get("text")) for c in value["commands"]),
            "chimes": sorted(c["author"] for c in value["chimes"]),
            "effects": [(e["type"], e["data"]) for e in events if e["type"] in EFFECTS
                        and (e["data"].get("reason") != "shutdown")],
        }))
    sessions.sort(key=lambda x: json.dumps(x, sort_keys=True))
    extra = norm(s.extra(h)) if s.extra is not None else None
    trash = []
    for entry in sorted(os.listdir(root / "trash")):
        path = root / "trash" / entry
        case.assertTrue((path / "deleted.json").is_file(), f"trash/{entry} has no deleted.json")
        lines = (path / "events.jsonl").read_text().splitlines()
        trash.append([json.loads(x)["type"] for x in lines
                      if json.loads(x)["type"] in EFFECTS])
    for entry in os.listdir(root / "sessions"):
        case.assertFalse(entry.startswith("."), f"a half-made folder is left: {entry}")
        case.assertTrue((root / "sessions" / entry / "meta.json").is_file())
    for entry in os.listdir(root / "workspaces"):
        case.assertTrue((root / "sessions" / entry).is_dir(), f"an orphan workspace: {entry}")
    for directory, _, names in os.walk(root):
        if "/home" in directory or "/agent" in directory:
            continue
        for name in names:
            case.assertFalse(name.endswith(".tmp"), f"a temporary file is left: {directory}/{name}")
            case.assertFalse(".broken" in name and "public" not in directory,
                             f"a torn log: {directory}/{name}")
    return {"sessions": sessions, "trash": trash, "extra": extra}


class CrashDriver(SynchronousTestCase):
    """
    The driver: L{drive} runs one scenario, killed at each of its durable
    writes (the first and the last in the default run; all with
    C{VEHICLE_LONG_PROOFS=1}).  Another package subclasses it, registers its
    routes with L{scenario} and gives the subclass their tests with
    L{addCrashTests}; C{mode = "power"} runs them under a power cut.
    """

    mode = "kill"
    #: The sync helper's way (L{tests.support.syncloop}) instead of a
    #: writer that writes at once.
    helper = False
    _log = Logger()

    def setUp(self) -> None:
        # A host thrown away as if killed leaves its proxies' run folder, as a
        # killed host does; a later host of this same process cannot sweep
        # it (its pid is alive). Keep them in a short folder of this test's.
        runs = tempfile.mkdtemp(prefix="vc-")
        self.addCleanup(shutil.rmtree, runs, True)
        self.patch(tempfile, "tempdir", runs)

    def drive(self, name: str) -> None:
        s = SCENARIOS[name]
        writer = (lambda: loopbackWriter(self)) if self.helper else None
        done = Run(self, s, None, self.mode, writer)
        notDone = Run(self, s, "before", self.mode, writer)
        self.assertFalse(done.cutInside)
        self.assertGreater(done.syncs, 0, f"{name} wrote nothing durable")
        if self.helper and name != "create":
            # (A new session's folder is built aside and written in place:
            # no batch.)
            batches = [m for link in self.__dict__.get("loopbacks", []) for m in link.sent
                       if m[0] == "batch"]
            self.assertNotEqual(batches, [], f"{name}: no batch went through the helper")
        allowed = {
            "done": (done.after, done.state),
            "not done": (notDone.after, notDone.state),
        }
        cuts = range(1, done.syncs + 1) if LONG else sorted({1, done.syncs})
        for k in cuts:
            cut = Run(self, s, k, self.mode, writer)
            self.assertTrue(cut.cutInside, f"{name}: no sync {k} of {done.syncs}")
            matches = [label for label, (after, state) in allowed.items()
                       if (cut.after, cut.state) == (after, state)]
            if not matches:
                self.fail(
                    f"{name}, {self.mode} after sync {k} of {done.syncs}: the retry answered "
                    f"{cut.after}, and the state is neither the request done nor not done:\n"
                    + "\n".join(
                        f"against {label} (answer {after}):\n" + _diff(state, cut.state)
                        for label, (after, state) in allowed.items()
                    )
                )
        self._log.info(
            "crash figures: {name} {mode}: {cut} of {syncs} boundaries cut, {retries} retries",
            name=name, mode=self.mode, cut=len(cuts), syncs=done.syncs, retries=len(cuts) + 2,
        )


def _diff(expected: Any, actual: Any) -> str:
    """
    The lines that differ between two states, as a unified diff.
    """
    import difflib

    return "\n".join(difflib.unified_diff(
        json.dumps(expected, indent=1, sort_keys=True).splitlines(),
        json.dumps(actual, indent=1, sort_keys=True).splitlines(),
        "expected", "after the cut", lineterm="", n=2,
    ))


def addCrashTests(cls: type, names: Any = None) -> None:
    """
    Give C{cls} (a L{CrashDriver}) a test for each scenario named (all by
    default).
    """
    for name in names if names is not None else SCENARIOS:
        def test(self: CrashDriver, name: str = name) -> None:
            self.drive(name)
        test.__doc__ = f"{name}: cut at its durable writes, restarted, retried: all or nothing."
        setattr(cls, f"test_{name}", test)
