"""
A pool of chat spares on a fake launcher, its proxies fakes, for the spare
tests (L{tests.unit.test_spares}, L{tests.unit.test_preparedspares}).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from twisted.internet.defer import Deferred, succeed
from twisted.internet.testing import MemoryReactorClock
from twisted.trial.unittest import SynchronousTestCase

from vehicle.body import ChatSpares, SparePool
from vehicle.session import Caller, Registry
from vehicle.store import DataDir

from tests.support.fakepi import STATE
from tests.support.harness import FakeLauncher, FakePiTransport, newSession
from tests.support.pirecords import answer, record


ALICE = Caller(principal="alice", clientId="tab-1", role="owner", graphId="g1")
MODEL = "scripted/echo-1"
KEY = "sk-test-key-0123456789"
PROVIDER = {
    "baseUrl": "http://127.0.0.1:9/v1", "api": "openai-completions", "apiKey": KEY,
    "models": [{"id": "echo-1"}],
}


#: The graph's MCP endpoint the pool's spares are told of.
MCP_URL = "http://127.0.0.1:7/mcp"


class RefusingSource:
    """
    A spare source (L{vehicle.body.SpareSource}) that raises C{error} when
    asked for a spare.
    """

    def __init__(self, error: Exception) -> None:
        self.error = error

    async def spareFor(self, session: Any) -> Any:
        raise self.error


class FakeProxy:
    """
    A spare's proxy: its token in the providers, what it was handed, and
    whether it was closed.
    """

    def __init__(self, spareId: str) -> None:
        self.spareId = spareId
        self.providers: dict[str, Any] = {"scripted": {**PROVIDER, "apiKey": f"vbt-{spareId}"}}
        self.bootExtra: dict[str, Any] = {"bridge": {"socket": f"/run/{spareId}.sock", "port": 0}}
        self.handed: list[Any] = []
        self.closed = 0

    def handTo(self, session: Any) -> None:
        self.handed.append(session)

    def close(self) -> Deferred[None]:
        self.closed += 1
        return succeed(None)


class PoolTestCase(SynchronousTestCase):
    """
    A pool of spares on a fake launcher, its proxies fakes.
    """

    size = 1
    prime = True

    def setUp(self) -> None:
        self.clock = MemoryReactorClock()
        self.clock.advance(1_796_000_000)
        self.root = Path(self.mktemp())
        self.root.mkdir()
        self.launcher = FakeLauncher(mcpUrl=MCP_URL)
        self.proxies: list[FakeProxy] = []
        self.pool = self.makePool()
        self.dataDir = DataDir(Path(self.mktemp()))
        self.dataDir.ensure()
        self.registry = Registry(dataDir=self.dataDir, clock=self.clock)
        self.addCleanup(self.registry.close)

    def makePool(self, **kw: Any) -> SparePool:
        async def openProxy(spareId: str) -> FakeProxy:
            proxy = FakeProxy(spareId)
            self.proxies.append(proxy)
            return proxy

        settings: dict[str, Any] = dict(
            launcher=self.launcher, clock=self.clock, size=self.size, model=MODEL,
            kind=ChatSpares(root=lambda: self.root, openProxy=openProxy,
                            mcpUrl=self.launcher.mcpUrl, **self.kindSettings()),
            refillSeconds=2.0, prime=self.prime,
        )
        settings.update(kw)
        return SparePool(**settings)

    def kindSettings(self) -> dict[str, Any]:
        """
        More of the spares' kind's settings (none here).
        """
        return {}

    def session(self, model: str = MODEL, **meta: Any) -> Any:
        return newSession(self.registry, ALICE, model=model, **meta)

    def readyOne(self, index: int = -1) -> FakePiTransport:
        """
        The newest spawned spare answers its state and settles its priming.
        """
        transport = self.launcher.spawned[index]
        answer(transport, "get_state", STATE)
        if self.prime:
            answer(transport, "prompt", {"disposition": "started"})
            record(transport, {"type": "agent_settled", "aborted": False})
        return transport
