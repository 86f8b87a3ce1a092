# -*- test-case-name: tests.unit.test_http -*-
"""
The host's own HTTP client (treq over an Agent) that connects to an IP
address directly: a loopback URL never waits on the reactor's thread pool
for a name lookup, so a busy pool cannot make the model or MCP unreachable.
"""

from __future__ import annotations

from treq.client import HTTPClient
from twisted.internet.abstract import isIPAddress, isIPv6Address
from twisted.internet.endpoints import (
    HostnameEndpoint,
    TCP4ClientEndpoint,
    TCP6ClientEndpoint,
    wrapClientTLS,
)
from twisted.internet.interfaces import IStreamClientEndpoint
from twisted.web.client import URI, Agent, BrowserLikePolicyForHTTPS, HTTPConnectionPool
from twisted.web.iweb import IAgentEndpointFactory, IPolicyForHTTPS
from zope.interface import implementer

from vehicle._reactors import IClientReactor
from vehicle._sockets import NoDelayEndpoint


@implementer(IAgentEndpointFactory)
class DirectEndpoints:
    """
    IP literals straight to TCP; names through the usual resolver; TLS for
    C{https} as a browser would check it (C{tls}: another policy, e.g. one
    trusting a private CA).  C{timeout}: seconds to wait for a connection.
    Every connection sends each write at once (a model's stream of deltas
    through the proxy, L{vehicle._sockets}).
    """

    def __init__(
        self, reactor: IClientReactor, tls: IPolicyForHTTPS | None = None, timeout: float = 30
    ) -> None:
        self.reactor = reactor
        self.tls = tls if tls is not None else BrowserLikePolicyForHTTPS()
        self.timeout = timeout

    def endpointForURI(self, uri: URI) -> IStreamClientEndpoint:
        host = uri.host.decode("ascii")
        bare = host.strip("[]")
        if isIPAddress(bare):
            endpoint: IStreamClientEndpoint = TCP4ClientEndpoint(self.reactor, bare, uri.port, self.timeout)
        elif isIPv6Address(bare):
            endpoint = TCP6ClientEndpoint(self.reactor, bare, uri.port, self.timeout)
        else:
            endpoint = HostnameEndpoint(self.reactor, uri.host, uri.port, self.timeout)
        endpoint = NoDelayEndpoint(endpoint)
        if uri.scheme == b"https":
            endpoint = wrapClientTLS(self.tls.creatorForNetloc(uri.host, uri.port), endpoint)
        return endpoint


def httpClient(
    reactor: IClientReactor,
    persistent: bool = False,
    tls: IPolicyForHTTPS | None = None,
    timeout: float = 30,
    pool: HTTPConnectionPool | None = None,
) -> HTTPClient:
    """
    A treq client on L{DirectEndpoints} (C{tls}, C{timeout}: as there).
    """
    if pool is None:
        pool = HTTPConnectionPool(reactor, persistent=persistent)
    endpoints = DirectEndpoints(reactor, tls=tls, timeout=timeout)
    return HTTPClient(Agent.usingEndpointFactory(reactor, endpoints, pool=pool))
