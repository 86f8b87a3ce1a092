# -*- test-case-name: tests.test_http -*-
"""
The host's own HTTP client (treq over an Agent) that connects to an IP
address directly: a loopback URL never waits on the reactor's thread pool
for a name lookup, so a busy pool cannot make the model or MCP unreachable.
"""

from __future__ import annotations

from typing import Any

from treq.client import HTTPClient
from twisted.internet.abstract import isIPAddress, isIPv6Address
from twisted.internet.endpoints import (
    HostnameEndpoint,
    TCP4ClientEndpoint,
    TCP6ClientEndpoint,
    wrapClientTLS,
)
from twisted.web.client import Agent, BrowserLikePolicyForHTTPS, HTTPConnectionPool
from twisted.web.iweb import IAgentEndpointFactory
from zope.interface import implementer


@implementer(IAgentEndpointFactory)
class DirectEndpoints:
    """
    IP literals straight to TCP; names through the usual resolver; TLS for
    C{https} as a browser would check it.
    """

    def __init__(self, reactor: Any) -> None:
        self.reactor = reactor
        self.tls = BrowserLikePolicyForHTTPS()

    def endpointForURI(self, uri: Any) -> Any:
        host = uri.host.decode("ascii")
        bare = host.strip("[]")
        if isIPAddress(bare):
            endpoint: Any = TCP4ClientEndpoint(self.reactor, bare, uri.port)
        elif isIPv6Address(bare):
            endpoint = TCP6ClientEndpoint(self.reactor, bare, uri.port)
        else:
            endpoint = HostnameEndpoint(self.reactor, uri.host, uri.port)
        if uri.scheme == b"https":
            endpoint = wrapClientTLS(self.tls.creatorForNetloc(uri.host, uri.port), endpoint)
        return endpoint


def httpClient(reactor: Any, persistent: bool = False) -> HTTPClient:
    """
    A treq client on L{DirectEndpoints}.
    """
    pool = HTTPConnectionPool(reactor, persistent=persistent)
    return HTTPClient(Agent.usingEndpointFactory(reactor, DirectEndpoints(reactor), pool=pool))
