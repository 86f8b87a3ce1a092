"""
L{UnixEndpoints}: an endpoint factory for L{twisted.web.client.Agent} that
reaches every URI through one Unix socket (a model proxy's), on the global
reactor.  Only the live tests use it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from twisted.internet import reactor
from twisted.internet.endpoints import UNIXClientEndpoint
from twisted.web.iweb import IAgentEndpointFactory
from zope.interface import implementer


@implementer(IAgentEndpointFactory)
class UnixEndpoints:
    def __init__(self, path: Path) -> None:
        self.path = path

    def endpointForURI(self, uri: Any) -> UNIXClientEndpoint:
        return UNIXClientEndpoint(reactor, str(self.path))
