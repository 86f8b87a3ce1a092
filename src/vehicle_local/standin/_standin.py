# -*- test-case-name: tests.unit.test_gardend,tests.unit.test_manifest -*-
"""
The whole stand-in assembled: the store, the delegation key, C{/mcp} and the
gateway on one loopback port, with the handles tests reach for (the audit,
documents, offline switch, minted tokens, the headers the host was sent).
"""

from __future__ import annotations

import random
import secrets
import socket
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence

from attrs import define, field
from twisted.internet.address import IPv4Address
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IListeningPort, IReactorTCP, IReactorTime
from twisted.web.resource import IResource
from twisted.web.server import Site
from treq.client import HTTPClient

from vehicle._sockets import NoDelayHTTPChannel
from vehicle._reactors import IHostReactor
from vehicle.protocol import JSONObject, toObject
from vehicle_local.standin._config import Config
from vehicle_local.standin._delegation import Delegations
from vehicle_local.standin._gateway import SERVICE_ID, Gateway, SeenRequest
from vehicle_local._supervise import Echo, Named, ServiceFailed, Supervised
from vehicle_local.standin._manifest import Manifest
from vehicle_local.standin._mcp import MCPEndpoint
from vehicle_local.standin._page import Page, PageLogin
from vehicle_local.standin._store import FolderStore


@define
class StandIn:
    """
    A gardend for one service, over a folder-backed workspace.

    @ivar root: the workspace's directory.
    @ivar reactor: for the gateway's outgoing requests.
    @ivar clock: for token lifetimes and timestamps (the reactor by default).
    @ivar http: the gateway's HTTP client, for forwarding and health checks
        (treq's over the reactor by default).
    """

    root: Path = field(converter=Path)
    config: Config
    reactor: IHostReactor
    clock: Optional[IReactorTime] = None
    http: Optional[HTTPClient] = None
    store: FolderStore = field(init=False)
    delegations: Delegations = field(init=False)
    mcp: MCPEndpoint = field(init=False)
    gateway: Gateway = field(init=False)
    page: Page = field(init=False)
    _port: Optional[IListeningPort] = field(init=False, default=None)

    def __attrs_post_init__(self) -> None:
        clock = self.clock if self.clock is not None else self.reactor
        self.store = FolderStore(root=self.root, clock=clock)
        self.delegations = Delegations(clock=clock)
        self.mcp = MCPEndpoint(
            config=self.config, store=self.store, delegations=self.delegations
        )
        self.gateway = Gateway(
            config=self.config,
            mcp=self.mcp,
            delegations=self.delegations,
            reactor=self.reactor,
            client=self.http,
        )
        self.page = Page(
            config=self.config, login=PageLogin(masterKey=self.config.masterKey, clock=clock)
        )

    def resource(self) -> IResource:
        """
        The gateway, C{/mcp} and the page as one web resource (for
        C{StubTreq}).
        """
        return self.page.front(self.gateway.router.resource())

    def listen(self, reactor: IReactorTCP | None = None, port: int = 0) -> IListeningPort:
        """
        Serve on C{127.0.0.1:port} (any free port for 0).
        """
        reactor = reactor if reactor is not None else self.reactor
        site = Site(self.resource())
        # The gateway relays the host's event streams: each delta at once.
        site.protocol = NoDelayHTTPChannel  # type: ignore[assignment]  # Site's type names its H2 wrapper only
        self._port = reactor.listenTCP(
            port, site, interface="127.0.0.1"  # type: ignore[arg-type]  # Twisted types it as a factory of its default protocol; a Site makes HTTP channels
        )
        return self._port

    def stopListening(self) -> Deferred[None] | None:
        """
        Stop serving; a L{Deferred} that fires when the port is closed.
        """
        port, self._port = self._port, None
        return port.stopListening() if port is not None else None

    @property
    def url(self) -> str:
        """
        C{http://127.0.0.1:<port>} once listening.
        """
        if self._port is None:
            raise RuntimeError("not listening")
        address = self._port.getHost()
        assert isinstance(address, IPv4Address)
        return f"http://127.0.0.1:{address.port}"

    @property
    def mcpUrl(self) -> str:
        """
        The MCP endpoint (the host's C{MNEMOSYNE_MCP_URL}).
        """
        return self.url + "/mcp"

    @property
    def requestsSeen(self) -> list[SeenRequest]:
        """
        Every request forwarded to the host: C{{"method", "path", "headers"}}.
        """
        return self.gateway.requestsSeen

    def serviceFor(
        self,
        manifest: Manifest,
        *,
        dataDir: Path,
        logPath: Path,
        baseEnv: Mapping[str, str],
        profileId: str = "local",
        echo: Optional[Echo] = None,
    ) -> Supervised:
        """
        The service as gardend starts it, not started yet: a private
        loopback C{PORT}, its C{DATA_DIR}, the secret, C{/mcp} and the rest
        injected over the manifest's C{env}; C{command args} run in
        C{workingDir}; healthy once C{healthPath} answers 200.  It is to
        start once the stand-in serves (its URLs are in the environment).

        @param baseEnv: what the operator passes on (C{PATH}, model settings).
        """
        port = freeLoopbackPort()

        def environment() -> Mapping[str, str]:
            # As it starts: the stand-in is serving by then, its URL known.
            injected = {
                "PORT": str(port),
                "DATA_DIR": str(dataDir),
                "MNEMOSYNE_MCP_URL": self.mcpUrl,
                "MNEMOSYNE_MCP_ACCESS_TOKEN": secrets.token_urlsafe(24),
                "MNEMOSYNE_INTERNAL_SERVICE_SECRET": self.config.service.secret,
                "GARDEN_LOOPBACK_API_URL": self.url,
                "GARDEN_SERVICE_ID": manifest.serviceId,
                "GARDEN_PROFILE_ID": profileId,
            }
            Path(dataDir).mkdir(parents=True, exist_ok=True)
            return manifest.environment(baseEnv, injected)

        return Supervised(
            name=manifest.serviceId,
            command=manifest.command,
            args=manifest.args,
            environment=environment,
            cwd=manifest.workingDir,
            logPath=logPath,
            reactor=self.reactor,
            url=f"http://127.0.0.1:{port}",
            healthPath=manifest.healthPath,
            echo=echo,
        )

    async def front(self, service: Supervised, healthSeconds: float = 60.0) -> None:
        """
        Wait until the started C{service} is healthy, then point the
        gateway at it.

        @raise ServiceFailed: when it ends or stays unhealthy first.
        """
        assert self.gateway.client is not None and service.url is not None
        await service.whenHealthy(self.gateway.client, healthSeconds)
        self.setServiceUrl(service.url)

    async def launch(
        self,
        manifest: Manifest,
        *,
        dataDir: Path,
        logPath: Path,
        baseEnv: Mapping[str, str],
        healthSeconds: float = 60.0,
    ) -> Supervised:
        """
        Start the service from its manifest (L{serviceFor}) and front it
        once it is healthy (L{front}); stop it with its C{stopService}.

        @raise ServiceFailed: when it ends or stays unhealthy first (it is
            stopped by then).
        """
        service = self.serviceFor(manifest, dataDir=dataDir, logPath=logPath, baseEnv=baseEnv)
        service.startService()
        try:
            await self.front(service, healthSeconds)
        except ServiceFailed:
            await service.stopService()
            raise
        return service

    def serving(self, port: int) -> Named:
        """
        A service serving the stand-in on C{127.0.0.1:port} while it runs.
        """
        return _Serving(standIn=self, port=port)

    def setServiceUrl(self, url: str) -> None:
        """
        Point the gateway at the host (once its port is known).
        """
        self.gateway.serviceUrl = url.rstrip("/")

    def setOffline(self, offline: bool) -> None:
        """
        While offline, C{/mcp} answers 503.
        """
        self.mcp.offline = offline

    def mintDelegation(
        self, principal: str, graph: str, role: str, reads: Sequence[str] = ()
    ) -> str:
        """
        A delegation token, as the gateway would hand the host (C{reads}:
        the other graphs a public caller's token reads).
        """
        return self.delegations.mint(principal, graph, role, SERVICE_ID, reads=reads)

    # What a test reads of the workspace: each record as JSON, as its file
    # holds it.

    def audit(self) -> list[JSONObject]:
        """
        gardend's audit log of writes, oldest first.
        """
        return self.store.audit()

    def document(self, graph: str, documentId: str) -> Optional[JSONObject]:
        """
        A stored document, or L{None}.
        """
        document = self.store.document(graph, documentId)
        return toObject(document) if document is not None else None

    def folder(self, graph: str, folderId: str) -> Optional[JSONObject]:
        """
        A stored folder, or L{None}.
        """
        folder = self.store.folder(graph, folderId)
        return toObject(folder) if folder is not None else None

    def wires(self, graph: str) -> list[JSONObject]:
        """
        The graph's wires.
        """
        return [toObject(wire) for wire in self.store.wires(graph)]

    def trash(self, graph: str, documentId: str) -> None:
        """
        Put a document in the Trash (it still takes writes).
        """
        self.store.trash(graph, documentId)


@define(eq=False)
class _Serving(Named):
    """
    The stand-in listening while the service runs (L{StandIn.serving}).
    """

    standIn: StandIn
    port: int
    name: str = "gardend"

    def startService(self) -> None:
        self.standIn.listen(port=self.port)
        Named.startService(self)

    def stopService(self) -> Deferred[None] | None:
        Named.stopService(self)
        return self.standIn.stopListening()


#: Where Linux says which ports it hands out itself.
_EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")

#: The lowest port L{freeLoopbackPort} picks (above the usual services').
_LOWEST = 10000

#: Ports this process has handed out already, never handed out again.
_handedOut: set[int] = set()


def _ephemeralStart(rangeFile: Path) -> int:
    """
    The first port of the kernel's ephemeral range: read from Linux's
    C{rangeFile}, else the start of the range most systems use (49152).
    """
    try:
        return int(rangeFile.read_text("ascii").split()[0])
    except (OSError, ValueError, IndexError):
        return 49152


def freeLoopbackPort(
    choose: Callable[[int, int], int] = random.SystemRandom().randrange,
    rangeFile: Path = _EPHEMERAL,
) -> int:
    """
    A loopback port free right now, for a child to listen on (gardend
    picks the service's port; the tests pick theirs).

    It is drawn at random from below the kernel's ephemeral range, never
    from it: a port the kernel hands out (to any process's listener on
    port 0, such as a server of a test running beside this one, or to an
    outgoing connection) comes from that range, so between this check and
    the child's own bind only another caller of this function could take
    it, and within this process none does.

    @param choose: picks a port in C{[low, high)}.
    @param rangeFile: where the kernel names its ephemeral range.
    """
    high = _ephemeralStart(rangeFile)
    for _ in range(200):
        port = choose(_LOWEST, high) if high - _LOWEST >= 1000 else 0
        if port in _handedOut:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            port = int(s.getsockname()[1])
        _handedOut.add(port)
        return port
    raise OSError("no free loopback port below the ephemeral range")
