# -*- test-case-name: tests.live.test_escape -*-
"""
The escape suite: real pi bodies in a real bwrap box try to get out, and the
host judges every attempt on its own side (the files it can see, the sockets
it listens on, its own processes), never by a tool's exit code.

One body runs one probe script (L{PROBE}) that tries every trick in turn and
writes what it saw into its workspace; the host then counts escapes.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import sys
from pathlib import Path
from typing import Any

from twisted.internet import reactor
from twisted.trial.unittest import SkipTest, TestCase

from tests.support.live import LiveHost, settledEvent, sleep
from tests.support.scripted import bashMarker


#: The probe, run by pi's C{bash} tool inside the box (with the system's
#: python3, the only one the box can see).  It reads C{probe-config.json},
#: tries each thing the config names and writes C{probe-result.json}; the
#: memory of every other process it can see goes to C{dumps/}.
PROBE = r'''
import errno, json, os, socket, subprocess, sys, time

config = json.load(open("probe-config.json"))
result = {}


def attempt(function):
    try:
        return {"ok": True, "value": function()}
    except OSError as e:
        return {"ok": False, "errno": errno.errorcode.get(e.errno, str(e.errno)),
                "error": str(e)}


def write(path):
    with open(path, "a") as f:
        f.write("escaped\n")
    return path


def read(path):
    with open(path, "rb") as f:
        return f.read().decode("latin-1")


for name, path in config.get("write", {}).items():
    result["write:" + name] = attempt(lambda path=path: write(path))
for name, path in config.get("list", {}).items():
    result["list:" + name] = attempt(lambda path=path: sorted(os.listdir(path)))
for name, path in config.get("read", {}).items():
    result["read:" + name] = attempt(lambda path=path: read(path))

links = config.get("links")
if links:
    os.symlink(links["outside"], "link-outside")
    result["symlink:write-outside"] = attempt(lambda: write("link-outside"))
    os.symlink(links["etc"], "link-etc")
    result["symlink:write-etc"] = attempt(lambda: write("link-etc"))
    os.symlink(links["other"], "link-other")
    result["symlink:read-other"] = attempt(lambda: read("link-other"))
    os.symlink(links["otherDir"], "link-other-dir")
    result["symlink:list-other"] = attempt(lambda: sorted(os.listdir("link-other-dir")))
    result["hardlink:outside"] = attempt(lambda: os.link(links["outside"], "hard-outside"))
    result["hardlink:etc"] = attempt(lambda: os.link(links["etc"], "hard-etc"))
    result["hardlink:pi"] = attempt(lambda: os.link(links["piFile"], "hard-pi"))


def dump(pid, path):
    """Every readable, non-zero page of pid's memory, into path."""
    total = 0
    maps = open("/proc/%d/maps" % pid).read().splitlines()
    with open("/proc/%d/mem" % pid, "rb", 0) as mem, open(path, "wb") as out:
        for line in maps:
            fields = line.split()
            if not fields[1].startswith("r"):
                continue
            if len(fields) > 5 and fields[5] in ("[vvar]", "[vsyscall]"):
                continue
            start, end = (int(x, 16) for x in fields[0].split("-"))
            at = start
            while at < end:
                size = min(end - at, 1 << 20)
                try:
                    mem.seek(at)
                    chunk = mem.read(size)
                except (OSError, ValueError, OverflowError):
                    chunk = b""
                at += size
                for page in range(0, len(chunk), 4096):
                    piece = chunk[page:page + 4096]
                    if piece.count(0) != len(piece):
                        out.write(piece)
                        total += len(piece)
    return total


if config.get("proc"):
    os.makedirs("dumps", exist_ok=True)
    me = os.getpid()
    processes = {}
    for entry in sorted(os.listdir("/proc")):
        if not entry.isdigit() or int(entry) == me:
            continue
        pid = int(entry)
        processes[entry] = {
            "cmdline": attempt(lambda: read("/proc/%d/cmdline" % pid)),
            "exe": attempt(lambda: os.readlink("/proc/%d/exe" % pid)),
            "environ": attempt(lambda: read("/proc/%d/environ" % pid)),
            "mem": attempt(lambda: dump(pid, "dumps/mem-%d.bin" % pid)),
        }
    result["processes"] = processes
    result["ppid"] = os.getppid()
    result["status"] = read("/proc/self/status")
    result["uid"] = [os.getuid(), os.geteuid()]

for name, address in config.get("tcp", {}).items():
    def tcp(address=address):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.settimeout(3)
        try:
            s.connect(tuple(address))
        finally:
            s.close()
        return "connected"
    result["tcp:" + name] = attempt(tcp)

for name, path in config.get("unix", {}).items():
    def unix(path=path):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(3)
        here = os.getcwd()
        try:
            if path.startswith("@"):
                s.connect("\0" + path[1:])
            else:
                # A long path is reached from its folder (sun_path is short).
                os.chdir(os.path.dirname(path))
                s.connect(os.path.basename(path))
            s.sendall(b"escaped\n")
        finally:
            os.chdir(here)
            s.close()
        return "connected"
    result["unix:" + name] = attempt(unix)

for name, program in config.get("setuid", {}).items():
    code = ("import os, json; st = open('/proc/self/status').read(); "
            "w = None\n"
            "try:\n open(%r, 'a').write('escaped')\n w = 'wrote'\n"
            "except OSError as e:\n w = str(e)\n"
            "print(json.dumps({'uid': os.getuid(), 'euid': os.geteuid(), 'status': st, 'write': w}))"
            % config["setuidTarget"])
    run = subprocess.run([program, "-c", code], capture_output=True, text=True)
    result["setuid:" + name] = {"rc": run.returncode, "out": run.stdout, "err": run.stderr[-2000:]}

for name, command in config.get("spawn", {}).items():
    subprocess.Popen(command, shell=True, stdin=subprocess.DEVNULL,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                     start_new_session=True)
    result["spawn:" + name] = "started"

if config.get("proxy"):
    # Take the proxy's token from pi's memory and ask the model directly,
    # past pi and its budget.
    import http.client, re
    token = None
    for entry in os.listdir("/proc"):
        if entry.isdigit() and os.readlink("/proc/%s/exe" % entry).endswith("/node"):
            dump(int(entry), "pi-memory.bin")
            found = re.search(rb"vbt-[A-Za-z0-9_-]{40,}", open("pi-memory.bin", "rb").read())
            token = found.group().decode() if found else None
            os.unlink("pi-memory.bin")
    result["proxy:token"] = bool(token)
    if token:
        def ask():
            connection = http.client.HTTPConnection("127.0.0.1", config["proxy"], timeout=10)
            connection.request(
                "POST", "/v1/chat/completions",
                body=json.dumps({"model": "echo-1", "stream": False, "messages": [
                    {"role": "user", "content": "unmetered"}]}),
                headers={"authorization": "Bearer " + token,
                         "content-type": "application/json"})
            response = connection.getresponse()
            return [response.status, response.read().decode("utf-8", "replace")[:500]]
        result["proxy:ask"] = attempt(ask)
        result["proxy:askAgain"] = attempt(ask)
        if config.get("proxyLate"):
            # Ask again once the run is over, from a process left behind.
            if os.fork() == 0:
                os.setsid()
                time.sleep(config["proxyLate"])
                with open("proxy-late.json.tmp", "w") as f:
                    json.dump(attempt(ask), f)
                os.rename("proxy-late.json.tmp", "proxy-late.json")
                os._exit(0)

with open("probe-result.json.tmp", "w") as f:
    json.dump(result, f)
os.rename("probe-result.json.tmp", "probe-result.json")
print("probe done")
'''


class Listener:
    """
    A socket the host listens on and never accepts from until asked: a
    connection from the box is judged by what is waiting in its backlog.
    """

    def __init__(self, family: int, address: Any) -> None:
        self.socket = socket.socket(family, socket.SOCK_STREAM)
        if family == socket.AF_UNIX and not address.startswith("\0"):
            # A long path is bound through its folder's descriptor.
            folder = os.open(os.path.dirname(address), os.O_RDONLY | os.O_DIRECTORY)
            try:
                self.socket.bind(f"/proc/self/fd/{folder}/{os.path.basename(address)}")
            finally:
                os.close(folder)
        else:
            self.socket.bind(address)
        self.socket.listen(16)
        self.socket.setblocking(False)
        self.address = self.socket.getsockname()

    def connections(self) -> int:
        count = 0
        while True:
            try:
                connection, _ = self.socket.accept()
            except (BlockingIOError, InterruptedError):
                return count
            connection.close()
            count += 1

    def close(self) -> None:
        self.socket.close()


def procMarkers(marker: str) -> list[int]:
    """
    The host's processes whose command line holds C{marker}.
    """
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmdline:
            found.append(int(entry))
    return found


def fileState(path: Path) -> Any:
    """
    What the host sees at C{path}: its bytes, or C{None} when absent.
    """
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


class Box:
    """
    One live host with two agent sessions: C{A}, whose body runs the probe,
    and C{B}, another session whose folders A must not see.
    """

    def __init__(self, testCase: TestCase, **overrides: Any) -> None:
        self.testCase = testCase
        self.outside = Path(testCase.mktemp()).absolute()
        self.outside.mkdir(parents=True)
        self.profile = self.outside / "gardend-profile"
        self.profile.mkdir()
        (self.profile / "keys.json").write_text('{"secret": "gardend-profile-secret"}')
        self.canary = self.outside / "canary.txt"
        self.canary.write_text("canary\n")
        overrides.setdefault("boxHidden", (self.profile,))
        self.host = LiveHost(testCase, **overrides)
        self.tag = secrets.token_hex(6)

    async def start(self) -> "Box":
        if not Path("/usr/bin/bwrap").exists():
            raise SkipTest("bwrap is not installed")
        await self.host.start()
        self.a = await self.host.create(profile="agent")
        self.b = await self.host.create(profile="agent")
        root = self.host.root
        self.wsA = root / "workspaces" / self.a
        self.wsB = root / "workspaces" / self.b
        (self.wsB / "secret-b.txt").write_text("session B's secret\n")
        self.piB = root / "sessions" / self.b / "pi"
        self.piB.mkdir(parents=True, exist_ok=True)
        (self.piB / "b-pi.txt").write_text("session B's pi file\n")
        return self

    def agent(self) -> Any:
        return self.host.host.bodies.agent

    async def probe(self, config: dict[str, Any], timeout: float = 60.0) -> dict[str, Any]:
        """
        Run L{PROBE} with C{config} in A's box; return what it wrote.
        """
        (self.wsA / "probe.py").write_text(PROBE)
        (self.wsA / "probe-config.json").write_text(json.dumps(config))
        code, frame = await self.host.command(
            self.a, "prompt", "probe-" + secrets.token_hex(3),
            text="probe " + bashMarker("python3 probe.py"),
        )
        assert code == 202, frame
        events = await self.host.waitFor(self.a, settledEvent, timeout=timeout)
        result = self.wsA / "probe-result.json"
        if not result.exists():
            tools = [e for e in events if e["type"].startswith("tool.")]
            raise AssertionError(f"the probe wrote no result; tool events: {tools}")
        return json.loads(result.read_text())


class Escapes:
    """
    The tally: every check made, and the ones that found a way out.
    """

    def __init__(self) -> None:
        self.checks = 0
        self.found: list[str] = []

    def check(self, what: str, escaped: bool, detail: Any = "") -> None:
        self.checks += 1
        if escaped:
            self.found.append(f"{what}: {str(detail)[:300]}")


def parseStatus(text: str) -> dict[str, str]:
    """
    C{/proc/<pid>/status} as a dict of stripped values.
    """
    return {
        name: value.strip()
        for name, _, value in (line.partition(":") for line in text.splitlines())
    }


class EscapeTests(TestCase):
    """
    Nothing an agent body does gets out of its box.
    """

    timeout = 120

    async def test_noEscapes(self) -> None:
        """
        One body tries every trick: writes to the host's C{/etc}, the repo,
        the data dir, another session's folders and the host's C{/tmp} and
        C{/dev/shm}; reading another session, the home folder and the
        gardend profile; symlinks and hardlinks out; reading every
        process's environment and memory for the key; TCP to the host's
        loopback and an abstract Unix socket; its capabilities and a setuid
        binary.  The host counts what got out on its side: zero.
        """
        box = await Box(self).start()
        host = box.host
        root = host.root
        repoFile = Path(__file__).absolute().parent / f"escape-{box.tag}.txt"
        etcFile = Path("/etc") / f"vehicle-escape-{box.tag}"
        hostTmp = Path("/tmp") / f"vehicle-escape-{box.tag}"
        hostShm = Path("/dev/shm") / f"vehicle-escape-{box.tag}"
        proxyDir = box.agent().runDir() / box.a
        # A canary the box can see (the system folders are always shown).
        etcCanary = Path("/etc") / f"vehicle-canary-{box.tag}"
        etcCanary.write_text("canary\n")
        rootFile = Path("/") / f"vehicle-escape-{box.tag}"
        created = [repoFile, etcFile, etcCanary, rootFile, hostTmp, hostShm,
                   proxyDir / "escape.txt"]
        self.addCleanup(lambda: [p.unlink() for p in created if p.exists()])

        writeTargets = {
            "etc": str(etcFile),
            "root": str(rootFile),
            "repo": str(repoFile),
            "canary": str(box.canary),
            "dataDir": str(root / "escape.txt"),
            "sessions": str(root / "sessions" / "escape.txt"),
            "ownSessionDir": str(root / "sessions" / box.a / "escape.txt"),
            "otherWorkspace": str(box.wsB / "secret-b.txt"),
            "otherWorkspaceNew": str(box.wsB / "escape.txt"),
            "otherPi": str(box.piB / "b-pi.txt"),
            "hostTmp": str(hostTmp),
            "hostShm": str(hostShm),
            "proxyDir": str(proxyDir / "escape.txt"),
            "profile": str(box.profile / "keys.json"),
        }
        before = {name: fileState(Path(p)) for name, p in writeTargets.items()}

        # Listeners on the host: TCP on its loopback, and an abstract socket.
        tcp = Listener(socket.AF_INET, ("127.0.0.1", 0))
        self.addCleanup(tcp.close)
        abstract = Listener(socket.AF_UNIX, f"\0vehicle-escape-{box.tag}")
        self.addCleanup(abstract.close)

        # Setuid copies of python, made by the host in A's workspace.
        python = Path(os.path.realpath("/usr/bin/python3"))
        setuid = {}
        for name, uid in (("root", 0), ("nobody", 65534)):
            copy = box.wsA / f"suid-python-{name}"
            shutil.copy2(python, copy)
            os.chown(copy, uid, 0)
            os.chmod(copy, 0o4755)
            setuid[name] = "./" + copy.name

        config = {
            "write": writeTargets,
            "list": {
                "home": str(Path.home()),
                "dataDir": str(root),
                "workspaces": str(root / "workspaces"),
                "otherWorkspace": str(box.wsB),
                "otherPi": str(box.piB),
                "profile": str(box.profile),
                "hostTmp": "/tmp",
            },
            "read": {
                "otherSecret": str(box.wsB / "secret-b.txt"),
                "otherPi": str(box.piB / "b-pi.txt"),
                "profileKeys": str(box.profile / "keys.json"),
                "bashrc": str(Path.home() / ".bashrc"),
                "proc1environ": "/proc/1/environ",
            },
            "links": {
                "outside": str(box.canary),
                "etc": str(etcCanary),
                "other": str(box.wsB / "secret-b.txt"),
                "otherDir": str(box.wsB),
                "piFile": str(root / "sessions" / box.a / "pi" / "agent" / "settings.json"),
            },
            "proc": True,
            "tcp": {
                "listener": ["127.0.0.1", tcp.address[1]],
                "vehicle": ["127.0.0.1", host.port.getHost().port],
                "model": ["127.0.0.1", host.modelPort.getHost().port],
            },
            "unix": {"abstract": f"@vehicle-escape-{box.tag}"},
            "setuid": setuid,
            "setuidTarget": str(etcFile),
        }
        out = await box.probe(config)
        self.addCleanup(shutil.rmtree, box.wsA / "dumps", True)
        escapes = Escapes()

        # Writes: the host's file is what it was (absent, or unchanged).
        for name, path in writeTargets.items():
            escapes.check(f"write {name}", fileState(Path(path)) != before[name], path)

        # Reading: nothing of the home folder, the data dir, B or the profile.
        homeEntries = set(os.listdir(Path.home()))
        seenHome = set(out["list:home"].get("value") or [])
        escapes.check("list home", bool(seenHome & homeEntries), sorted(seenHome & homeEntries))
        for name in ("otherWorkspace", "otherPi", "profile"):
            escapes.check(f"list {name}", bool(out[f"list:{name}"].get("value")),
                          out[f"list:{name}"])
        seenWorkspaces = set(out["list:workspaces"].get("value") or [])
        escapes.check("list workspaces", bool(seenWorkspaces - {box.a}), seenWorkspaces)
        seenRoot = set(out["list:dataDir"].get("value") or [])
        escapes.check("list data dir", bool(seenRoot - {"sessions", "workspaces"}), seenRoot)
        for name in ("otherSecret", "otherPi", "profileKeys", "bashrc"):
            escapes.check(f"read {name}", out[f"read:{name}"]["ok"], out[f"read:{name}"])
        # The box's /tmp is its own: only what the box made (jiti's cache,
        # the proxy's mount point, the probe's file) and nothing of the host's.
        ownTmp = {"jiti", proxyDir.parent.name, hostTmp.name}
        # When the data dir itself lives under /tmp (a clone in a temporary
        # folder), the path down to the box's own folders is made inside its
        # /tmp as empty mount points: that first step is the box's own too.
        root = Path(os.path.realpath(box.host.root))
        if root.parts[:2] == ("/", "tmp") and len(root.parts) > 2:
            ownTmp.add(root.parts[2])
        seenTmp = set(out["list:hostTmp"].get("value") or [])
        hostTmpEntries = set(os.listdir("/tmp")) - ownTmp
        escapes.check("list host /tmp", bool(seenTmp & hostTmpEntries), sorted(seenTmp & hostTmpEntries))

        # Symlinks: writing through one to a file the box sees (in /etc) is
        # EROFS, to one it does not see (in the repo) EROFS or ENOENT, and
        # both files are unchanged; one to another session finds nothing.
        outcome = out["symlink:write-etc"]
        escapes.check("symlink write /etc, not EROFS", outcome.get("errno") != "EROFS", outcome)
        outcome = out["symlink:write-outside"]
        if Path(os.path.realpath(box.canary)).parts[:2] == ("/", "tmp"):
            # Under /tmp the path lands in the box's private /tmp: the write
            # may succeed there; what counts is the host's file, checked below.
            pass
        else:
            escapes.check("symlink write repo", outcome.get("errno") not in ("EROFS", "ENOENT"),
                          outcome)
        for canary in (box.canary, etcCanary):
            escapes.check(f"symlink write {canary}", canary.read_text() != "canary\n",
                          canary.read_text())
        escapes.check("symlink read other", out["symlink:read-other"]["ok"],
                      out["symlink:read-other"])
        escapes.check("symlink list other", bool(out["symlink:list-other"].get("value")),
                      out["symlink:list-other"])
        # Hardlinks to a file outside the workspace: EXDEV (or EPERM; or
        # ENOENT for a file the box does not see).
        for name, refusals in (("etc", {"EXDEV", "EPERM"}), ("pi", {"EXDEV", "EPERM"}),
                               ("outside", {"EXDEV", "EPERM", "ENOENT"})):
            outcome = out[f"hardlink:{name}"]
            escapes.check(f"hardlink {name}", outcome.get("errno") not in refusals, outcome)
        for name in ("hard-outside", "hard-etc", "hard-pi"):
            escapes.check(f"hardlink {name} on the host", os.path.lexists(box.wsA / name), "")

        # The key: in no process's environment, command line or memory.
        keyForms = (
            host.key.encode(),
            host.key.encode("utf-16-le"),
            host.key[len("sk-live-"):].encode(),
        )
        environ1 = out["read:proc1environ"]
        escapes.check(
            "/proc/1/environ holds more than PATH",
            environ1.get("value", "").strip("\0") != "PATH=/usr/bin:/bin",
            environ1,
        )
        processes = out["processes"]
        for entry, info in processes.items():
            for part in ("cmdline", "environ"):
                text = info[part].get("value") or ""
                escapes.check(f"key in /proc/{entry}/{part}", host.key in text, "")
        dumps = sorted((box.wsA / "dumps").glob("mem-*.bin"))
        for path in dumps:
            data = path.read_bytes()
            for form in keyForms:
                escapes.check(f"key in the memory of {path.stem}", form in data, len(data))
        hostPython = os.path.realpath(sys.executable)
        for entry, info in processes.items():
            escapes.check(f"host process {entry} visible",
                          info["exe"].get("value") == hostPython, info["exe"])

        # No network: nothing reached the host's listeners.
        for name in ("listener", "vehicle", "model"):
            escapes.check(f"tcp {name}", out[f"tcp:{name}"]["ok"], out[f"tcp:{name}"])
        escapes.check("tcp listener backlog", tcp.connections() > 0, "")
        escapes.check("abstract unix socket", abstract.connections() > 0, out["unix:abstract"])

        # Capabilities zero, no new privileges.
        status = parseStatus(out["status"])
        for cap in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
            escapes.check(cap, int(status[cap], 16) != 0, status[cap])
        escapes.check("NoNewPrivs", status["NoNewPrivs"] != "1", status["NoNewPrivs"])
        # Setuid binaries: no capabilities, no change of user, no write.
        for name in setuid:
            run = out[f"setuid:{name}"]
            self.assertEqual(run["rc"], 0, run)
            seen = json.loads(run["out"])
            inner = parseStatus(seen["status"])
            escapes.check(f"setuid {name} caps", int(inner["CapEff"], 16) != 0, inner["CapEff"])
            escapes.check(f"setuid {name} euid", seen["euid"] != seen["uid"], seen)
            escapes.check(f"setuid {name} write", seen["write"] == "wrote", seen)
        escapes.check("setuid write on the host", etcFile.exists(), "")

        self.maxDiff = None
        self.assertEqual(escapes.found, [], f"{len(escapes.found)} of {escapes.checks} escaped")

        # The controls: the box had its own /tmp; pi's memory was readable
        # and holds the proxy's token, so the scan above saw pi, and a token
        # is all there was to find; few processes are visible.
        self.assertTrue(out["write:hostTmp"]["ok"], out["write:hostTmp"])
        proxy = box.agent().proxies.get(box.a)
        self.assertIsNotNone(proxy, "the body's proxy is gone while its body lives")
        piPids = [
            entry for entry, info in processes.items()
            if (info["exe"].get("value") or "").endswith("/node")
        ]
        self.assertEqual(len(piPids), 1, {e: i["exe"] for e, i in processes.items()})
        self.assertTrue(processes[piPids[0]]["mem"]["ok"], processes[piPids[0]]["mem"])
        piMemory = (box.wsA / "dumps" / f"mem-{piPids[0]}.bin").read_bytes()
        self.assertTrue(proxy.token.encode() in piMemory, "the proxy's token is not in pi's memory")
        self.assertLess(len(processes), 30, sorted(processes))
        self.assertGreater(escapes.checks, 50)


class PlantedSocketTests(TestCase):
    """
    A Unix socket some host service left on the filesystem.
    """

    timeout = 90

    async def reached(self, places: dict[str, Path]) -> dict[str, Any]:
        """
        Listen on a Unix socket at each place, have a body connect to each,
        and return the ones whose backlog (on the host) shows the box.
        """
        box = await Box(self).start()
        listeners = {}
        for name, path in places.items():
            if name == "dataDir":
                path = places[name] = box.host.root / path
            listener = Listener(socket.AF_UNIX, str(path))
            self.addCleanup(path.unlink, True)
            self.addCleanup(listener.close)
            listeners[name] = listener
        out = await box.probe({"unix": {name: str(path) for name, path in places.items()}})
        return {
            name: out[f"unix:{name}"]
            for name, listener in listeners.items()
            if listener.connections() > 0
        }

    async def test_hiddenFolders(self) -> None:
        """
        Sockets in folders the box does not see (the host's C{/tmp}, behind
        the box's private one; the data dir, behind its tmpfs) are out of
        reach.
        """
        tag = secrets.token_hex(6)
        reached = await self.reached({
            "hostTmp": Path("/tmp") / f"vehicle-escape-{tag}.sock",
            "dataDir": Path("planted.sock"),
        })
        self.assertEqual(reached, {})

    async def test_visibleFolders(self) -> None:
        """
        Sockets in the host's folders outside the system ones (C{/run},
        where D-Bus and docker keep theirs; the test's own temp folder in
        the repo) are out of reach: a read-only bind would not stop
        C{connect()}, so the box must not show these folders at all.
        """
        tag = secrets.token_hex(6)
        outside = Path(self.mktemp()).absolute()
        outside.mkdir(parents=True)
        reached = await self.reached({
            "run": Path("/run") / f"vehicle-escape-{tag}.sock",
            "testTemp": outside / "planted.sock",
        })
        self.assertEqual(reached, {}, f"the box reached planted sockets: {sorted(reached)}")



class ProxyTests(TestCase):
    """
    The proxy gives the box the model, and nothing but the model.
    """

    timeout = 90

    async def test_toolUsesProxyPastBudget(self) -> None:
        """
        A tool that takes the proxy's token out of pi's memory and asks the
        model itself is metered by the proxy: the run's model requests, pi's
        and the tool's together, never pass the run's turn budget, and a
        process left behind gets nothing once the run is over.
        """
        box = await Box(self, maxTurns=2).start()
        before = len(box.host.model.requests)
        out = await box.probe({"proxy": 18080, "proxyLate": 2})
        self.assertTrue(out["proxy:token"], "the probe found no token in pi's memory")
        served = box.host.model.requests[before:]
        self.assertLessEqual(len(served), 2, [json.dumps(b)[:200] for _, b in served])
        asks = [out["proxy:ask"], out["proxy:askAgain"]]
        self.assertIn(429, [a.get("value", [None])[0] for a in asks if a.get("ok")], asks)
        late = box.wsA / "proxy-late.json"
        for _ in range(100):
            if late.exists():
                break
            await sleep(0.1)
        answer = json.loads(late.read_text())
        self.assertEqual(answer["value"][0], 429, answer)
        self.assertEqual(len(box.host.model.requests), before + len(served))


class DescendantTests(TestCase):
    """
    Nothing a tool starts outlives its body.
    """

    timeout = 90

    async def spawnDescendants(self, box: Box) -> list[str]:
        """
        Have a tool start grandchildren that try to get away (a new
        session, nohup, a double fork); check on the host that they run.

        @return: their markers (unique C{sleep} arguments).
        """
        base = 1000 + secrets.randbelow(10**6)
        markers = [f"{base}.{n}4242" for n in range(3)]
        out = await box.probe({
            "spawn": {
                "setsid": f"setsid sleep {markers[0]}",
                "nohup": f"nohup sleep {markers[1]}",
                "doubleFork": f"(sleep {markers[2]} &) ; exit 0",
            }
        })
        self.assertEqual(set(out), {"spawn:setsid", "spawn:nohup", "spawn:doubleFork"})
        for marker in markers:
            self.addCleanup(killMarker, marker)
        await waitUntil(lambda: all(procMarkers(m) for m in markers), 5.0)
        self.assertEqual([m for m in markers if not procMarkers(m)], [],
                         "the grandchildren did not start")
        return markers

    async def assertAllGone(self, markers: list[str], within: float = 4.0) -> None:
        gone = await waitUntil(lambda: not any(procMarkers(m) for m in markers), within)
        self.assertTrue(gone, {m: procMarkers(m) for m in markers})

    async def test_shutdown(self) -> None:
        """
        After C{shutdown}, every descendant is gone within 4 seconds.
        """
        box = await Box(self).start()
        markers = await self.spawnDescendants(box)
        code, frame = await box.host.command(box.a, "shutdown", "stop-1")
        self.assertEqual(code, 202, frame)
        await box.host.waitFor(box.a, lambda e: e["type"] == "body.dormant")
        await self.assertAllGone(markers)

    async def test_idle(self) -> None:
        """
        When the body goes dormant for idleness, every descendant is gone
        within 4 seconds.
        """
        box = await Box(self, bodyIdleMs=1500).start()
        markers = await self.spawnDescendants(box)
        events = await box.host.waitFor(box.a, lambda e: e["type"] == "body.dormant")
        self.assertEqual(events[-1]["data"]["reason"], "idle")
        await self.assertAllGone(markers)

    async def test_bodyKilled(self) -> None:
        """
        When the body's process is killed outright (SIGKILL to the process
        the host spawned), every descendant is gone within 4 seconds.
        """
        box = await Box(self).start()
        markers = await self.spawnDescendants(box)
        conductor = box.host.registry().sessions[box.a].conductor
        os.kill(conductor.transport.pid, 9)
        await box.host.waitFor(box.a, lambda e: e["type"] == "body.exited")
        await self.assertAllGone(markers)


async def waitUntil(predicate: Any, within: float) -> bool:
    """
    Poll C{predicate} every 0.1 s for C{within} seconds.
    """
    deadline = reactor.seconds() + within
    while True:
        if predicate():
            return True
        if reactor.seconds() >= deadline:
            return False
        await sleep(0.1)


def killMarker(marker: str) -> None:
    for pid in procMarkers(marker):
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass
