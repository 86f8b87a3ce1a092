"""
Benchmark (b) of issue 16: a new conversation's first word.  From the
request that makes a session to the first text delta of its first prompt,
on the same scripted model (in a process of its own), side by side in one
run:

- C{host, no spare}: a live host with no spares (its body is started at
  the prompt: Node boots pi);
- C{host, a spare ready}: a live host with one spare, ready before each
  sample (the spare is handed over at the prompt);
- the floors: C{pi started alone} (spawn C{pi --mode rpc} with vehicle's
  extension, prompt at once, to its first delta) and C{a warm pi} (a
  prompt to a pi that has answered one before);
- C{opencode} (C{opencode serve}: C{POST /session}, then a prompt, to the
  first C{message.part.delta} of its event stream), installed with npm
  into a temporary folder at each run (never by the tests or setup);
- rivet's C{sandbox-agent}: installed the same way; it runs an agent it
  downloads itself, which it cannot here (see docs/performance.md): the
  reason is printed.

With C{--agent} the sessions are agent sessions (in a bwrap box): C{host,
no spare} starts the box and pi at the prompt, C{host, a spare ready} hands
over a boxed spare made for the session's id; the peers are not run (they
have no box), and the floors are pi's, unboxed.

With C{--own-key} the sessions are a visitor's on its own key (the host in
public mode): the spare's proxy reaches the model with the visitor's key
once handed over; the peers are not run.

With C{--other-model} the hosts' catalogue has a second provider (the same
scripted model, its own key) and the sessions are on its model,
C{other/other-1}: a spare is started on the default and set to the
session's model at the hand-off.

With C{--revive} the sessions are dormant chat conversations (one prompt
answered, then shut down), claimed and prompted: on a host with no spare,
and on one with a spare ready, prompted at once after the claim (timed
from the claim) and C{--typing-ms} after it (timed from the prompt: the
spare was switched to the conversation's file while its driver typed).

Usage: .venv/bin/python benchmarks/bench_newsession.py [--runs N] [--no-peers] [--agent]
       [--own-key] [--other-model] [--revive [--typing-ms MS]] [--refill-ms MS]
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "src"), str(ROOT)]

from twisted.internet.defer import Deferred  # noqa: E402
from twisted.internet.task import deferLater, react  # noqa: E402

from attrs import evolve  # noqa: E402

from benchmarks._common import BenchCase, postRaw, uncheckedWatcher  # noqa: E402
from benchmarks.bench_delta import Direct, hostWith, startModel, waitForSpare  # noqa: E402
from tests.support.public import SCRIPTED  # noqa: E402

OPENCODE = "opencode-ai@1.18.33"
SANDBOX_AGENT = "@sandbox-agent/cli@0.4.2"


#: A visitor on its own key (C{--own-key}): who, and the headers gardend
#: adds for such a caller.
VISITOR = {"principal": "anon:bench", "role": "viewer", "client": "tab-bench"}
VISITOR_HEADERS = {"x-sophia-caller-kind": "anonymous", "x-sophia-public-graphs": "g1",
                   "x-model-key": "sk-bench-visitor-key-0123"}


#: The model of the sessions with C{--other-model} (L{OTHER}), else the default.
MODEL: dict[str, str] = {}
OTHER = "other/other-1"


async def hostSample(host: Any, profile: str | None = None, ownKey: bool = False) -> float:
    """
    Create a session (of C{profile}; C{ownKey}: a visitor's, on its own
    key), prompt it at once, until the first delta on SSE.
    """
    who: dict[str, Any] = dict(VISITOR, headers=VISITOR_HEADERS) if ownKey else {}
    start = time.perf_counter()
    created = await postRaw(host, "/sessions", {
        "requestId": "create-" + secrets.token_hex(4), **({"profile": profile} if profile else {}),
        **MODEL,
    }, **who)
    sid = created["value"]["session"]["sessionId"]
    watcher = await uncheckedWatcher(host, sid, **who).start()
    return await firstDelta(host, sid, watcher, "p1", "hello", **who) - start


async def firstDelta(host: Any, sid: str, watcher: Any, requestId: str, text: str,
                     **who: Any) -> float:
    """
    Prompt C{sid} with C{text}: when C{watcher} had its first delta (once
    the run settled, and the watcher closed).
    """
    await postRaw(host, f"/sessions/{sid}/commands",
                  {"type": "prompt", "requestId": requestId, "text": text}, **who)
    await watcher.waitFor(lambda m: m.get("event") == "message.delta")
    first = time.perf_counter()
    await watcher.waitFor(lambda m: m.get("event") == "run.settled")
    watcher.close()
    return first


async def dormantSession(host: Any, profile: str | None = None) -> str:
    """
    A conversation of one prompt (of C{profile}) whose body was shut down
    (C{--revive}): dormant, its lease let go, pi's file holding its
    conversation.
    """
    created = await postRaw(host, "/sessions", {
        "requestId": "create-" + secrets.token_hex(4), **({"profile": profile} if profile else {}),
        **MODEL,
    })
    sid = created["value"]["session"]["sessionId"]
    watcher = await uncheckedWatcher(host, sid).start()
    await postRaw(host, f"/sessions/{sid}/commands",
                  {"type": "prompt", "requestId": "p1", "text": "hello"})
    await watcher.waitFor(lambda m: m.get("event") == "run.settled")
    await postRaw(host, f"/sessions/{sid}/commands", {"type": "shutdown", "requestId": "s1"})
    await watcher.waitFor(lambda m: m.get("event") == "body.dormant")
    watcher.close()
    return sid


async def reviveSample(reactor: Any, host: Any, sid: str, typing: float) -> float:
    """
    Claim the dormant C{sid} and prompt it, until the first delta on SSE:
    from the claim when the prompt follows at once (C{typing} 0), else from
    the prompt sent C{typing} seconds after the claim (its driver typing).
    """
    start = time.perf_counter()
    claimed = await postRaw(host, f"/sessions/{sid}/claim",
                            {"requestId": "c-" + secrets.token_hex(4)})
    cursor = claimed["value"]["session"]["cursor"]
    watcher = await uncheckedWatcher(host, sid, since=cursor).start()
    if typing:
        await deferLater(reactor, typing, lambda: None)
        start = time.perf_counter()
    return await firstDelta(host, sid, watcher, "p2", "hello again") - start


async def revive(reactor: Any, args: argparse.Namespace, cold: Any, warm: Any,
                 results: dict[str, list[float]]) -> None:
    """
    C{--revive}: a dormant conversation claimed and prompted, on a host
    with no spare and on one with a spare ready (prompted at once, and
    after C{--typing-ms}); the floors beside them.  With C{--agent} no
    spare serves it (an agent spare serves a new session only): a host
    that keeps agent spares starts the session's own body at the claim,
    as a chat host does with C{--none-ready}.
    """
    typing = args.typing_ms / 1000

    async def ready(host: Any) -> None:
        # With --none-ready the warm host's one spare was taken by the first
        # session made, and none is made again: each claim starts the body.
        if not args.none_ready:
            await waitForSpare(host, args.agent)

    profile = "agent" if args.agent else None
    await reviveSample(reactor, cold, await dormantSession(cold, profile), 0)  # warm-ups
    await waitForSpare(warm, args.agent)  # the first session made takes it
    await reviveSample(reactor, warm, await dormantSession(warm, profile), 0)
    for _ in range(args.runs):
        sessions = [await dormantSession(cold, profile), await dormantSession(warm, profile),
                    await dormantSession(warm, profile)]
        results.setdefault("host, no spare", []).append(
            await reviveSample(reactor, cold, sessions[0], 0))
        await ready(warm)
        results.setdefault("host, a spare, prompt at once", []).append(
            await reviveSample(reactor, warm, sessions[1], 0))
        await ready(warm)
        results.setdefault(f"host, a spare, prompt {args.typing_ms} ms after", []).append(
            await reviveSample(reactor, warm, sessions[2], typing))
        results.setdefault("pi started alone", []).append(
            await coldPi(reactor, cold.scriptedProvider()))


async def coldPi(reactor: Any, provider: dict[str, Any]) -> float:
    """
    The floor of a body started at the prompt: spawn pi, prompt it.
    """
    direct = Direct()
    start = time.perf_counter()
    await direct.start(reactor, provider)  # its state, then a first prompt
    first = direct.firstOfWarmUp - start
    await direct.stop(reactor)
    return first


def install(folder: Path, package: str) -> Path:
    """
    C{npm install} C{package} into C{folder}; its bin folder.
    """
    subprocess.run(
        ["npm", "install", "--no-audit", "--no-fund", "--prefix", str(folder), package],
        check=True, capture_output=True, timeout=600,
    )
    return folder / "node_modules"


class OpenCode:
    """
    C{opencode serve} on the scripted model, driven over its HTTP API.
    """

    def __init__(self, modules: Path, modelUrl: str, folder: Path) -> None:
        binary = modules / "opencode-linux-x64" / "bin" / "opencode"
        binary.chmod(0o755)
        work, home = folder / "work", folder / "home"
        work.mkdir(parents=True)
        home.mkdir()
        (work / "opencode.json").write_text(json.dumps({
            "provider": {"scripted": {
                "npm": "@ai-sdk/openai-compatible", "name": "Scripted",
                "options": {"baseURL": modelUrl, "apiKey": "sk-scripted"},
                "models": {"echo-1": {"name": "Echo"}},
            }},
            "model": "scripted/echo-1", "autoupdate": False, "share": "disabled",
        }))
        from vehicle_local.standin import freeLoopbackPort

        self.port = freeLoopbackPort()
        self.process = subprocess.Popen(
            [str(binary), "serve", "--port", str(self.port), "--hostname", "127.0.0.1"],
            cwd=work, env={**os.environ, "HOME": str(home), "OPENCODE_DISABLE_AUTOUPDATE": "1"},
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )

    def sample(self) -> float:
        """
        A new session and its first prompt, to the first text delta (a
        blocking client in threads: opencode is another process).
        """
        import http.client
        import threading

        first: list[float] = []
        ready = threading.Event()

        def listen() -> None:
            connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
            connection.request("GET", "/event")
            response = connection.getresponse()
            ready.set()
            while not first:
                line = response.fp.readline()
                if not line:
                    return
                if line.startswith(b"data:") and b'"message.part.delta"' in line:
                    first.append(time.perf_counter())
            connection.close()

        def post(path: str, body: Any) -> Any:
            connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
            connection.request("POST", path, json.dumps(body), {"content-type": "application/json"})
            answer = connection.getresponse().read()
            connection.close()
            return json.loads(answer or b"null")

        thread = threading.Thread(target=listen, daemon=True)
        thread.start()
        ready.wait(30)
        start = time.perf_counter()
        sid = post("/session", {})["id"]
        post(f"/session/{sid}/prompt_async", {
            "parts": [{"type": "text", "text": "hello"}],
            "model": {"providerID": "scripted", "modelID": "echo-1"},
        })
        thread.join(60)
        return first[0] - start

    def waitUp(self) -> None:
        import urllib.request

        for _ in range(300):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.port}/doc", timeout=1).read()
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("opencode serve did not come up")

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(10)


def sandboxAgent(modules: Path, folder: Path) -> str:
    """
    Try to make sandbox-agent run pi (or opencode) offline: the reason it
    cannot, in its own words.
    """
    binary = modules / "@sandbox-agent" / "cli-linux-x64" / "bin" / "sandbox-agent"
    binary.chmod(0o755)
    home = folder / "home"
    home.mkdir(parents=True)
    reasons = []
    for agent in ("pi", "opencode"):
        done = subprocess.run([str(binary), "install-agent", agent], env={**os.environ, "HOME": str(home)},
                              capture_output=True, text=True, timeout=120)
        if done.returncode == 0:
            return ""
        error = [line for line in done.stderr.splitlines() + done.stdout.splitlines() if "error" in line]
        reasons.append(f"install-agent {agent}: {error[-1].split('error=', 1)[-1] if error else done.returncode}")
    return "; ".join(reasons)


def line(name: str, times: list[float], floor: float | None) -> str:
    median = statistics.median(times)
    ratio = f"  x {median / floor:6.2f} the cold floor" if floor else ""
    return (f"  {name:<26} {median * 1000:8.1f} ms  ({min(times) * 1000:.1f}-"
            f"{max(times) * 1000:.1f}){ratio}")


async def main(reactor: Any, args: argparse.Namespace) -> None:
    load = os.getloadavg()
    case = BenchCase("vehicle-bench-new-")
    model, modelUrl = await startModel(reactor)
    peers = Path(tempfile.mkdtemp(prefix="vehicle-bench-peers-"))
    results: dict[str, list[float]] = {}
    notes: list[str] = []
    try:
        profile = "agent" if args.agent else None
        # A visitor's own key needs the public side (limits no run reaches).
        public: dict[str, Any] = (
            {"public": evolve(SCRIPTED, turnsPerDay=100_000)} if args.own_key else {})
        if args.other_model:
            MODEL["model"] = OTHER
            public["otherProvider"] = True
        cold = await hostWith(case, modelUrl, **public)
        # The pool's own pause before a refill (the host's default unless
        # --refill-ms says otherwise): a refill started at the hand-off
        # boots Node beside the handed body's first run.
        refill = {} if args.refill_ms is None else {"spareRefillMs": args.refill_ms}
        if args.none_ready:
            refill = {"spareRefillMs": 3_600_000}
        warm = await hostWith(case, modelUrl, **refill, **public,
                              **({"agentSpareBodies": 1} if args.agent else {"spareBodies": 1}))
        opencode = None
        if not (args.no_peers or args.agent or args.own_key or args.revive):
            try:
                modules = install(peers / "opencode", OPENCODE)
                opencode = OpenCode(modules, modelUrl, peers / "opencode-run")
                opencode.waitUp()
                opencode.sample()  # its first session loads the provider: not counted
            except Exception as e:  # noqa: BLE001 - a peer that cannot run is reported
                notes.append(f"opencode could not run: {e}")
                opencode = None
            try:
                reason = sandboxAgent(install(peers / "sandbox-agent", SANDBOX_AGENT),
                                      peers / "sandbox-agent-run")
                if reason:
                    notes.append(f"sandbox-agent cannot run offline here: {reason}")
            except Exception as e:  # noqa: BLE001
                notes.append(f"sandbox-agent could not be installed: {e}")
        own = args.own_key
        if args.revive:
            await revive(reactor, args, cold, warm, results)
        else:
            await hostSample(cold, profile, own)  # warm-ups, not counted
            await waitForSpare(warm, args.agent)
            await hostSample(warm, profile, own)
        for _ in range(0 if args.revive else args.runs):
            results.setdefault("host, no spare", []).append(await hostSample(cold, profile, own))
            await waitForSpare(warm, args.agent)
            results.setdefault("host, a spare ready", []).append(
                await hostSample(warm, profile, own))
            results.setdefault("pi started alone", []).append(
                await coldPi(reactor, cold.scriptedProvider()))
            if opencode is not None:
                results.setdefault("opencode 1.18.33", []).append(
                    await Deferred.fromCoroutine(_inThread(reactor, opencode.sample)))
        direct = await Direct().start(reactor, cold.scriptedProvider())
        results["a warm pi (a prompt)"] = [await direct.prompt(f"hi {n}") for n in range(args.runs)]
        await direct.stop(reactor)
        if opencode is not None:
            opencode.stop()
    finally:
        await case.cleanup()
        model.signalProcess("TERM")
        shutil.rmtree(peers, ignore_errors=True)
    after = os.getloadavg()
    floor = statistics.median(results["pi started alone"])
    kind = ("agent session (bwrap)" if args.agent
            else "visitor's session on its own key" if args.own_key else "session")
    if args.other_model:
        kind += f" on {OTHER} (spares started on the default)"
    if args.revive:
        print(f"a dormant {kind} revived: claim + prompt (or the prompt, sent after the "
              f"claim) -> first text delta; median of {args.runs} (min-max)")
    else:
        print(f"a new {kind}: create + prompt -> first text delta; median of {args.runs} (min-max)")
    print(f"{os.cpu_count()} cores; load average {load[0]:.2f} before, {after[0]:.2f} after")
    for name in ("pi started alone", "a warm pi (a prompt)", "host, no spare",
                 "host, a spare ready", "host, a spare, prompt at once",
                 f"host, a spare, prompt {args.typing_ms} ms after", "opencode 1.18.33"):
        if name in results:
            print(line(name, results[name], floor))
    for note in notes:
        print(f"  {note}")


async def _inThread(reactor: Any, f: Any) -> Any:
    from twisted.internet.threads import deferToThread

    return await deferToThread(f)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--no-peers", action="store_true")
    parser.add_argument("--agent", action="store_true")
    parser.add_argument("--own-key", action="store_true",
                        help="a visitor's session on its own key (public mode)")
    parser.add_argument("--other-model", action="store_true",
                        help=f"sessions on {OTHER}, a second provider's model")
    parser.add_argument("--revive", action="store_true",
                        help="a dormant session claimed and prompted (with --agent: an agent's)")
    parser.add_argument("--typing-ms", type=int, default=300,
                        help="with --revive: the pause between the claim and the prompt")
    parser.add_argument("--none-ready", action="store_true",
                        help="with --revive: no spare is ready at the claims (the first session"
                             " takes the only one): the body is started at each claim")
    parser.add_argument("--refill-ms", type=int, default=None,
                        help="the spare pool's pause before a refill (default: the host's)")
    arguments = parser.parse_args()
    react(lambda reactor: Deferred.fromCoroutine(main(reactor, arguments)))
