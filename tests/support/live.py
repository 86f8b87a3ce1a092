"""
A live host for integration tests: the real app and real pi children (the
pinned runtime in C{.venv/pi}) on loopback, against the scripted model.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path
from typing import Any, Callable

from treq.client import HTTPClient
from twisted.web.client import Agent, HTTPConnectionPool
from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.protocol import ProcessProtocol
from twisted.logger import formatEvent, globalLogPublisher
from twisted.internet.task import deferLater
from twisted.trial.unittest import SkipTest, TestCase

from vehicle._tap import buildHost
from vehicle.body._picommand import PiNotInstalled, findPi
from vehicle_local.standin import freeLoopbackPort
from vehicle.models import ModelCatalog
from vehicle.protocol import toObject
from vehicle.settings import Settings, defaultPiRoot
from vehicle_local.model import ScriptedModel
from vehicle.web import VehicleSite

from tests.support._headers import bytesNames
from tests.support.harness import SECRET, identity
from tests.support.schemas import assertValidEvent, assertValidFrame


def requirePi() -> None:
    try:
        findPi(defaultPiRoot())
    except PiNotInstalled as e:
        raise SkipTest(str(e))


class LiveHost:
    """
    One host in this process on a real port, with real pi bodies.
    """

    def __init__(self, testCase: TestCase, root: Path | None = None, **overrides: Any) -> None:
        self.testCase = testCase
        self.root = root or Path(testCase.mktemp()).absolute()
        #: A second provider in the catalogue (C{other/other-1}, the same
        #: scripted model reached with L{otherKey}, and with headers of its
        #: own: L{otherHeader}, which pi would read as a template if it
        #: were not sent as written, and one of its model's).
        self.otherProvider = bool(overrides.pop("otherProvider", False))
        #: A provider on another of pi's APIs (C{openai-responses},
        #: C{anthropic-messages} or C{google-generative-ai}): the scripted
        #: model behind that API,
        #: reached with L{apiKey}, its model L{apiModel}; with C{apiDefault},
        #: the host's default.
        self.thirdApi: str | None = overrides.pop("api", None)
        self.apiDefault = bool(overrides.pop("apiDefault", False))
        self.apiModel = {"anthropic-messages": "anth/claude-1",
                         "google-generative-ai": "goog/gemini-1",
                         "openai-responses": "resp/r-1"}.get(self.thirdApi or "", "")
        self.overrides = overrides
        self.key = "sk-live-" + secrets.token_hex(16)
        self.otherKey = "sk-other-" + secrets.token_hex(16)
        self.otherHeader = "hs$HOME!" + secrets.token_hex(8)
        self.apiKey = "sk-api-" + secrets.token_hex(16)
        self.model = ScriptedModel(reactor=reactor, slowDeltas=12, slowDelayMs=150)
        self.pool = HTTPConnectionPool(reactor, persistent=False)
        self.http = HTTPClient(Agent(reactor, pool=self.pool))

    async def start(self) -> "LiveHost":
        requirePi()
        # Everything the host logs, as text, for the leak scans.
        self.logLines: list[str] = []

        def observe(event: dict[str, Any]) -> None:
            text = formatEvent(event)
            if text:
                self.logLines.append(text)
            failure = event.get("log_failure")
            if failure is not None:
                self.logLines.append(failure.getTraceback())

        globalLogPublisher.addObserver(observe)
        self.testCase.addCleanup(globalLogPublisher.removeObserver, observe)
        self.modelPort = await self.model.listen(reactor)
        self.testCase.addCleanup(self.modelPort.stopListening)
        await self._startHost()
        return self

    def scriptedProvider(self) -> dict[str, Any]:
        """
        pi's provider entry for the scripted model (C{scripted/echo-1}),
        with the host's key.
        """
        return {
            "baseUrl": self.model.url,
            "api": "openai-completions",
            "apiKey": self.key,
            "models": [
                {
                    "id": "echo-1",
                    "name": "Echo",
                    "reasoning": False,
                    "input": ["text"],
                    "cost": {"input": 3, "output": 15, "cacheRead": 0, "cacheWrite": 0},
                    "contextWindow": 128000,
                    "maxTokens": 4096,
                }
            ],
        }

    async def _startHost(self) -> None:
        providers = {"scripted": self.scriptedProvider()}
        if self.otherProvider:
            other = self.scriptedProvider()
            other["apiKey"] = self.otherKey
            other["headers"] = {"x-other-secret": self.otherHeader}
            other["models"] = [{**other["models"][0], "id": "other-1", "name": "Other",
                                "headers": {"x-other-model": "other-1"}}]
            providers["other"] = other
        if self.thirdApi is not None:
            third = self.scriptedProvider()
            assert self.model.url is not None
            name, modelId = self.apiModel.split("/")
            third.update(api=self.thirdApi, apiKey=self.apiKey)
            if self.thirdApi == "anthropic-messages":
                # Its client adds /v1/messages to the host name itself.
                third["baseUrl"] = self.model.url.removesuffix("/v1")
            third["models"] = [{**third["models"][0], "id": modelId, "name": modelId}]
            providers[name] = third
        default = self.apiModel if self.apiDefault else "scripted/echo-1"
        catalog = ModelCatalog(providers, default)
        settings = Settings(
            secret=SECRET,
            dataDir=self.root,
            listen="tcp:0:interface=127.0.0.1",
            **self.overrides,
        )
        self.api, self.host = buildHost(settings, catalog, reactor)
        self.host.startService()
        self.site = VehicleSite(self.api.resource(), reactor)
        self.port = reactor.listenTCP(0, self.site, interface="127.0.0.1")
        self.url = f"http://127.0.0.1:{self.port.getHost().port}"
        self.testCase.addCleanup(self.stop)

    async def restart(self) -> None:
        await self.stop()
        await self._startHost()

    async def stop(self) -> None:
        if getattr(self, "port", None) is None:
            return
        port, self.port = self.port, None
        await port.stopListening()
        await self.host.stopService()
        # Let the model's side of each dead body's connection see its end.
        await sleep(0.1)

    async def call(self, method: str, path: str, body: Any = None,
                   headers: dict[str, str] | None = None, **who: Any) -> tuple[int, Any]:
        extra = headers or {}
        headers = identity(**who)
        headers["content-type"] = "application/json"
        headers.update(extra)
        data = json.dumps(body).encode() if body is not None else None
        response = await self.http.request(method, self.url + path, headers=bytesNames(headers),
                                           data=data)
        content = await response.content()
        frame = json.loads(content)
        # Every answer a live test sees is held to the protocol's schemas.
        assertValidFrame(self.testCase, frame)
        return response.code, frame

    async def create(self, **body: Any) -> str:
        body.setdefault("requestId", "create-" + secrets.token_hex(4))
        code, frame = await self.call("POST", "/sessions", body)
        assert code == 201, frame
        return frame["value"]["session"]["sessionId"]

    async def command(self, sessionId: str, kind: str, requestId: str, **fields: Any) -> tuple[int, Any]:
        return await self.call(
            "POST", f"/sessions/{sessionId}/commands", {"type": kind, "requestId": requestId, **fields}
        )

    async def waitFor(
        self,
        sessionId: str,
        predicate: Callable[[dict[str, Any]], bool],
        since: int = 0,
        timeout: float = 30.0,
        **who: Any,
    ) -> list[dict[str, Any]]:
        """
        Long-poll until an event matches; returns every event seen after
        C{since} up to and including it.
        """
        seen: list[dict[str, Any]] = []
        deadline = reactor.seconds() + timeout
        cursor = since
        while reactor.seconds() < deadline:
            code, frame = await self.call(
                "GET", f"/sessions/{sessionId}/events?since={cursor}&waitMs=2000", **who
            )
            assert code == 200, frame
            for event in frame["value"]["events"]:
                seen.append(event)
                if predicate(event):
                    return seen
            cursor = frame["value"]["cursor"]
        raise AssertionError(
            f"no matching event within {timeout}s; saw {[e['type'] for e in seen]}"
        )

    def events(self, sessionId: str) -> list[dict[str, Any]]:
        return [toObject(event) for event in self.registry().sessions[sessionId].feed.after(0, 10**9)[0]]

    def registry(self) -> Any:
        return self.api.registry


def sleep(seconds: float) -> Deferred:
    return deferLater(reactor, seconds, lambda: None)


def settledEvent(event: dict[str, Any]) -> bool:
    return event["type"] == "run.settled"


class SSEWatcher:
    """
    An SSE client on a session's events: parses messages as they arrive,
    each held to the schemas unless C{validate} is false (a benchmark in
    the host's own process, where the check's time would be the host's).
    """

    def __init__(self, host: LiveHost, sessionId: str, since: int = 0,
                 lastEventId: str | None = None, validate: bool = True,
                 headers: dict[str, str] | None = None, **who: Any) -> None:
        self.host = host
        self.headers = headers or {}
        self.validate = validate
        self.sessionId = sessionId
        self.since = since
        self.lastEventId = lastEventId
        self.who = who
        self.messages: list[dict[str, Any]] = []
        self.comments: list[str] = []
        self._buffer = b""
        self._waiters: list[tuple[Callable[[dict[str, Any]], bool], Deferred]] = []
        self.finished: Deferred | None = None

    async def start(self) -> "SSEWatcher":
        from treq import collect

        headers = identity(**self.who)
        headers.update(self.headers)
        headers["accept"] = "text/event-stream"
        if self.lastEventId is not None:
            headers["last-event-id"] = self.lastEventId
        self.response = await self.host.http.get(
            f"{self.host.url}/sessions/{self.sessionId}/events?since={self.since}",
            headers=bytesNames(headers),
        )
        self.finished = collect(self.response, self._data)
        self.finished.addErrback(lambda f: None)
        return self

    def _data(self, chunk: bytes) -> None:
        self._buffer += chunk
        while b"\n\n" in self._buffer:
            block, self._buffer = self._buffer.split(b"\n\n", 1)
            message: dict[str, Any] = {}
            for line in block.decode("utf-8").split("\n"):
                if line.startswith(":"):
                    self.comments.append(line[1:].strip())
                    continue
                field, _, value = line.partition(": ")
                message[field] = value
            if "data" in message:
                message["frame"] = json.loads(message["data"])
                # Every event a live SSE watch sees is held to the schemas.
                if self.validate:
                    assertValidEvent(self.host.testCase, message["frame"])
                self.messages.append(message)
                for predicate, d in list(self._waiters):
                    if predicate(message):
                        self._waiters.remove((predicate, d))
                        d.callback(message)

    def waitFor(self, predicate: Callable[[dict[str, Any]], bool], timeout: float = 30) -> Deferred:
        for message in self.messages:
            if predicate(message):
                return Deferred.fromCoroutine(_value(message))
        d: Deferred = Deferred()
        self._waiters.append((predicate, d))
        d.addTimeout(timeout, reactor)
        return d

    def close(self) -> None:
        """
        Hang up: the connection is closed (treq buffers the response: the
        transport is on Twisted's own, the innermost C{original}).
        """
        response = self.response
        while not hasattr(response, "_transport") and hasattr(response, "original"):
            response = response.original
        transport = getattr(response, "_transport", None)
        if transport is not None:
            transport.stopProducing()


async def _value(value: Any) -> Any:
    return value


class _Collector(ProcessProtocol):
    def __init__(self) -> None:
        self.output = bytearray()
        self.ended: Deferred = Deferred()

    def outReceived(self, data: bytes) -> None:
        self.output += data

    errReceived = outReceived

    def processEnded(self, reason: Any) -> None:
        self.ended.callback(reason.value)


class TwistdHost(LiveHost):
    """
    The host as operators run it: C{twistd -n vehicle} in its own process,
    with the model key handed over as C{$SCRIPTED_KEY} in a models file.
    """

    async def _startHost(self) -> None:
        import sys

        self.modelsFile = self.root.parent / (self.root.name + "-models.json")
        if not self.modelsFile.exists():
            self.modelsFile.write_text(json.dumps({"providers": {"scripted": {
                "baseUrl": self.model.url, "api": "openai-completions", "apiKey": "$SCRIPTED_KEY",
                "models": [{"id": "echo-1", "name": "Echo", "reasoning": False, "input": ["text"],
                            "cost": {"input": 3, "output": 15, "cacheRead": 0, "cacheWrite": 0},
                            "contextWindow": 128000, "maxTokens": 4096}]}}}))
        self.portNumber = freeLoopbackPort()
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "MNEMOSYNE_INTERNAL_SERVICE_SECRET": SECRET,
            "MNEMOSYNE_MCP_ACCESS_TOKEN": "gardend-own-token-never-used",
            "VEHICLE_MODELS": str(self.modelsFile),
            "VEHICLE_DEFAULT_MODEL": "scripted/echo-1",
            "SCRIPTED_KEY": self.key,
            **({"VEHICLE_PI_ROOT": os.environ["VEHICLE_PI_ROOT"]}
               if os.environ.get("VEHICLE_PI_ROOT") else {}),
            **{k: str(v) for k, v in self.overrides.items()},
        }
        twistd = str(Path(sys.prefix) / "bin" / "twistd")
        self.process = _Collector()
        self.transport = reactor.spawnProcess(
            self.process, twistd,
            [twistd, "-n", "--pidfile=", *getattr(self, "twistdArgs", ()), "vehicle",
             *getattr(self, "vehicleArgs", ()),
             "--listen", f"tcp:{self.portNumber}:interface=127.0.0.1",
             "--data-dir", str(self.root)],
            env=env,
        )
        self.url = f"http://127.0.0.1:{self.portNumber}"
        self.port = True
        self.testCase.addCleanup(self.stop)
        for _ in range(200):
            try:
                response = await self.http.get(self.url + "/health")
                await response.content()
                if response.code == 200:
                    return
            except Exception:
                pass
            if self.process.ended.called:
                break
            await sleep(0.1)
        raise AssertionError("twistd did not start:\n" + self.process.output.decode("utf-8", "replace"))

    async def stop(self, signal: str = "TERM") -> None:
        if not getattr(self, "port", None):
            return
        self.port = None
        if not self.process.ended.called:
            try:
                self.transport.signalProcess(signal)
            except Exception:
                pass
            await self.process.ended
        await sleep(0.1)

    async def kill(self) -> None:
        await self.stop("KILL")

    def registry(self) -> Any:
        raise NotImplementedError("the host runs in another process")


def startStandIn(testCase: TestCase, masterKey: str = "master-test", graphs: tuple[str, ...] = ("g1",)) -> Any:
    """
    The gardend stand-in on a loopback port for one test (gateway and
    MCP); point its gateway at a host with C{setServiceUrl}.
    """
    from vehicle_local.standin import Config, StandIn

    config = Config.fromJSON(
        {
            "masterKey": masterKey,
            "graphs": list(graphs),
            "tokens": [],
            "service": {"url": "http://127.0.0.1:9", "secret": SECRET},
        }
    )
    stand = StandIn(root=testCase.mktemp(), config=config, reactor=reactor)
    stand.listen(reactor, 0)
    testCase.addCleanup(stand.stopListening)
    return stand


async def waitUntil(predicate: Callable[[], bool], timeout: float = 60.0) -> None:
    """
    Poll C{predicate} on the reactor until it holds.
    """
    waited = 0.0
    while not predicate():
        if waited > timeout:
            raise AssertionError("the condition did not come about in time")
        await sleep(0.05)
        waited += 0.05


def pool(host: LiveHost) -> Any:
    spares = host.host.bodies.spares
    assert spares is not None
    return spares


async def readySpare(host: LiveHost) -> Any:
    """
    The spare that is ready first (waiting for it).
    """
    await waitUntil(lambda: bool(pool(host).ready))
    return pool(host).ready[0]


async def startedAtTheClaim(session: Any) -> int:
    """
    The pid of the body started for C{session} at its claim (waiting for
    it to tell its state); fails if none was.
    """
    ahead = session.conductor.life.claim.making
    assert ahead is not None, "nothing was made at the claim"
    await waitUntil(lambda: ahead.called)
    early = ahead.result
    assert early is not None, "no body was started at the claim"
    return int(early.body.transport.pid)
