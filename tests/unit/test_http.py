"""
The host's HTTP client: IP literals go straight to TCP.
"""

from __future__ import annotations

from twisted.internet.endpoints import HostnameEndpoint, TCP4ClientEndpoint, TCP6ClientEndpoint
from twisted.internet.testing import MemoryReactorClock
from twisted.trial.unittest import SynchronousTestCase
from twisted.web.client import URI

from vehicle._sockets import NoDelayEndpoint
from vehicle._http import DirectEndpoints


class DirectEndpointsTests(SynchronousTestCase):
    """
    L{DirectEndpoints} never asks a resolver about an IP address.
    """

    def endpoint(self, url: str):
        """
        The TCP endpoint for C{url}, under the wrapper that sets
        C{TCP_NODELAY} on its connections (and under TLS for C{https}).
        """
        endpoint = DirectEndpoints(MemoryReactorClock()).endpointForURI(URI.fromBytes(url.encode()))
        if url.startswith("https:"):
            self.assertIsInstance(endpoint._wrappedEndpoint, NoDelayEndpoint)
            return endpoint
        self.assertIsInstance(endpoint, NoDelayEndpoint)
        return endpoint.wrapped

    def test_ipv4(self) -> None:
        """
        An IPv4 literal is a plain TCP endpoint on that address and port.
        """
        endpoint = self.endpoint("http://127.0.0.1:8123/v1")
        self.assertIsInstance(endpoint, TCP4ClientEndpoint)
        self.assertEqual((endpoint._host, endpoint._port), ("127.0.0.1", 8123))

    def test_ipv6(self) -> None:
        """
        An IPv6 literal is a TCP6 endpoint.
        """
        self.assertIsInstance(self.endpoint("http://[::1]:8123/mcp"), TCP6ClientEndpoint)

    def test_name(self) -> None:
        """
        A name goes through the usual resolving endpoint.
        """
        self.assertIsInstance(self.endpoint("http://localhost:8123/"), HostnameEndpoint)

    def test_https(self) -> None:
        """
        C{https} is wrapped in TLS, whatever the host.
        """
        endpoint = self.endpoint("https://openrouter.ai/api/v1")
        self.assertNotIsInstance(endpoint, HostnameEndpoint)
        self.assertIsInstance(endpoint._wrappedEndpoint.wrapped, HostnameEndpoint)
