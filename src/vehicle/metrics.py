# -*- test-case-name: tests.unit.test_metrics -*-
"""
What an operator scrapes (issue 19): the host's figures in Prometheus's
text format, on an endpoint of their own (C{twistd vehicle --metrics
ENDPOINT}), never through gardend.

This is the one module that imports C{prometheus_client}.  The packages tell
L{Metrics} what happened, by name (L{Metrics.requestAnswered},
L{Metrics.appended}, L{Metrics.boxProbed}, ...); the figures that are a
state rather than a count of happenings (sessions, bodies, runs, watchers)
are read from the host when scraped (L{Metrics.sample}).  Each L{Metrics}
owns the L{CollectorRegistry} it is given, so a test makes its own and
reads it back; the host makes one and serves it (L{metricsSite}).

What is counted where:

  - requests: the web package's metered front (C{web/_metered.py}), by route
    pattern (C{/sessions/<sessionId>}, never a session's id), method and
    status, with their latency;
  - events written and the fsync latency: the store's log, at each
    append and each sync (C{store/_jsonl.JsonlLog.write}, C{.sync}; one
    sync covers a batch of appends: C{store/_writer}), by log
    (C{events}, C{commands}, C{ledger});
  - box probes: C{agent/_profile.AgentProfile.decide};
  - mirror writes and failures: C{mirror/_mirror.Mirror._pass}, C{._fail};
  - public turns refused, by their error code: C{public/_public.Public.reserveTurn};
  - the ledger's latency: C{public/_postgres.PostgresLedger._answer} (each
    transaction; the file ledger's is its log's fsync);
  - sessions, bodies, spare bodies, runs, watchers, writes owed to the
    ledger: sampled at each scrape from C{host/_service.HostService.sample}.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, Mapping

from attrs import Factory, define, field, frozen
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from twisted.internet.interfaces import IReactorTime
from twisted.web.resource import Resource
from twisted.web.server import Request, Site


#: Latency buckets (seconds) of a request and of the ledger: a route
#: answers in milliseconds, a long-poll waits up to 30 s.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                   10.0, 30.0)
#: An fsync's buckets: from a cache's microseconds to a stalled disk's second.
SYNC_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                0.25, 0.5, 1.0)

#: The route label of a request no route took (not found, a refusal
#: before routing): never the raw path.
UNMATCHED = "unmatched"


@frozen(kw_only=True)
class HostSample:
    """
    The host's state at a scrape.

    @ivar sessions: the sessions this host holds, by their body's state
        (C{dormant}, C{starting}, C{live}, C{stopping}).
    @ivar bodies: the pi processes, by profile (C{chat}, C{agent}).
    @ivar runs: the runs under way.
    @ivar streams: the open SSE streams.
    @ivar polls: the long-polls waiting for an event.
    @ivar owed: ledger writes waiting for the ledger to answer again.
    @ivar spares: spare bodies started ahead and not yet a session's.
    @ivar ahead: bodies made for one session before its first command: a
        spare held for a new session, or one made at a dormant session's
        claim (a spare switched to its file, or its own body started).
    """

    sessions: Mapping[str, int] = Factory(dict)
    bodies: Mapping[str, int] = Factory(dict)
    runs: int = 0
    streams: int = 0
    polls: int = 0
    owed: int = 0
    spares: int = 0
    ahead: int = 0


#: Every state a session's body may be in: each is written, zero or not.
BODY_STATES = ("dormant", "starting", "live", "stopping")
PROFILES = ("chat", "agent")


@define(eq=False)
class _Sampled:
    """
    The figures read from the host at each scrape (a collector of the
    registry's): nothing is kept between scrapes.
    """

    read: Callable[[], HostSample] | None = None

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        if self.read is None:
            return
        sample = self.read()
        sessions = GaugeMetricFamily(
            "vehicle_sessions", "Sessions this host holds, by their body's state",
            labels=["body"])
        for state in sorted(set(BODY_STATES) | set(sample.sessions)):
            sessions.add_metric([state], sample.sessions.get(state, 0))
        yield sessions
        bodies = GaugeMetricFamily(
            "vehicle_bodies", "pi processes serving sessions, by profile", labels=["profile"])
        for profile in sorted(set(PROFILES) | set(sample.bodies)):
            bodies.add_metric([profile], sample.bodies.get(profile, 0))
        yield bodies
        yield GaugeMetricFamily("vehicle_runs", "Runs under way", value=sample.runs)
        watchers = GaugeMetricFamily(
            "vehicle_watchers", "Clients watching a session's events, by how",
            labels=["kind"])
        watchers.add_metric(["stream"], sample.streams)
        watchers.add_metric(["poll"], sample.polls)
        yield watchers
        yield GaugeMetricFamily(
            "vehicle_ledger_writes_owed",
            "Ledger writes (charges, releases) waiting for the ledger to answer again",
            value=sample.owed)
        yield GaugeMetricFamily(
            "vehicle_bodies_spare", "Spare bodies started ahead and not yet given to a session",
            value=sample.spares)
        yield GaugeMetricFamily(
            "vehicle_bodies_ahead",
            "Bodies made for a session before its first command (a spare held for a new"
            " session, or one made at a dormant session's claim)",
            value=sample.ahead)


@define(eq=False)
class Metrics:
    """
    The host's figures, kept in C{registry}: the packages tell it what
    happened; L{sample} reads the rest at each scrape.
    """

    registry: CollectorRegistry = field(factory=CollectorRegistry)
    _sampled: _Sampled = field(init=False, factory=_Sampled)
    _requests: Counter = field(init=False)
    _latency: Histogram = field(init=False)
    _records: Counter = field(init=False)
    _syncs: Histogram = field(init=False)
    _probes: Counter = field(init=False)
    _mirror: Counter = field(init=False)
    _refused: Counter = field(init=False)
    _ledger: Histogram = field(init=False)
    #: Each series by its metric and labels, looked up once (L{_series}).
    _children: dict[tuple[Counter | Histogram, tuple[str, ...]], Any] = field(
        init=False, factory=dict)

    def __attrs_post_init__(self) -> None:
        r = self.registry
        self._requests = Counter(
            "vehicle_http_requests", "HTTP requests answered, by route pattern, method and status",
            ["route", "method", "status"], registry=r)
        self._latency = Histogram(
            "vehicle_http_request_duration_seconds",
            "Time from a request's arrival to its answer's end (a stream's whole life), by route",
            ["route", "method"], buckets=LATENCY_BUCKETS, registry=r)
        self._records = Counter(
            "vehicle_log_records", "Records appended to the append-only logs (events written: "
            "log=\"events\")", ["log"], registry=r)
        self._syncs = Histogram(
            "vehicle_log_fsync_duration_seconds", "Time each fsync of a log took", ["log"],
            buckets=SYNC_BUCKETS, registry=r)
        self._probes = Counter(
            "vehicle_box_probes", "Probes of the agent's box (bwrap), by outcome", ["outcome"],
            registry=r)
        self._mirror = Counter(
            "vehicle_mirror_writes", "Mirror passes that wrote a session's document, by outcome",
            ["outcome"], registry=r)
        self._refused = Counter(
            "vehicle_public_turns_refused", "Public turns refused, by error code", ["reason"],
            registry=r)
        self._ledger = Histogram(
            "vehicle_ledger_duration_seconds",
            "Time the shared ledger (PostgreSQL) took to answer, by operation and outcome",
            ["operation", "outcome"], buckets=LATENCY_BUCKETS, registry=r)
        r.register(self._sampled)

    # -- what happened --------------------------------------------------------

    def _series(self, metric: Counter | Histogram, *labels: str) -> Any:
        """
        C{metric}'s series of C{labels}, found by its labels once and kept:
        C{labels()} takes a lock and checks its arguments at every call,
        and the packages tell of a happening many times a second (each
        request, each record); the labels are few (routes, methods,
        statuses, logs, outcomes).
        """
        key = (metric, labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def requestAnswered(self, route: str, method: str, status: int, seconds: float) -> None:
        """
        A request was answered (or its client went away): C{route} is the
        pattern that took it (L{UNMATCHED} if none did).
        """
        self._series(self._requests, route, method, str(status)).inc()
        self._series(self._latency, route, method).observe(seconds)

    def appended(self, log: str, records: int) -> None:
        """
        C{records} records appended to C{log} (C{events}, C{commands},
        C{ledger}) with one write.
        """
        self._series(self._records, log).inc(records)

    def synced(self, log: str, seconds: float) -> None:
        """
        One fsync of C{log} took C{seconds}.
        """
        self._series(self._syncs, log).observe(seconds)

    def boxProbed(self, ok: bool) -> None:
        self._series(self._probes, "passed" if ok else "failed").inc()

    def mirrorWrote(self, ok: bool) -> None:
        """
        A mirror pass wrote its session's document (C{ok}), or failed.
        """
        self._series(self._mirror, "written" if ok else "failed").inc()

    def turnRefused(self, reason: str) -> None:
        """
        A public turn was refused with the error code C{reason}.
        """
        self._series(self._refused, reason).inc()

    def ledgerAnswered(self, operation: str, seconds: float, outcome: str) -> None:
        """
        The ledger answered C{operation} (C{ok}), could not be reached
        (C{unavailable}) or failed (C{error}) after C{seconds}.
        """
        self._series(self._ledger, operation, outcome).observe(seconds)

    # -- what is read at a scrape ----------------------------------------------

    def sample(self, read: Callable[[], HostSample]) -> None:
        """
        Read the host's state with C{read} at every scrape (one reader:
        a later call replaces it).
        """
        self._sampled.read = read

    def exposition(self, accept: str | None = None) -> tuple[bytes, str]:
        """
        The figures as a scrape reads them: the body and its content type
        (Prometheus's text format, or OpenMetrics when C{accept} asks).
        """
        encoder, contentType = choose_encoder(accept or "")
        return encoder(self.registry), contentType


_unserved: Metrics | None = None


def unserved() -> Metrics:
    """
    The figures of parts made without a L{Metrics} of their own (tests,
    tools): kept, never served.
    """
    global _unserved
    if _unserved is None:
        _unserved = Metrics()
    return _unserved


class MetricsPage(Resource):
    """
    C{/metrics}: the figures, rendered on the reactor's thread.

    prometheus_client's own Twisted resource (C{prometheus_client.twisted.
    MetricsResource}) renders in the reactor's thread pool; the figures
    sampled here read the host's sessions, which only the reactor's thread
    may touch, so this page renders the same exposition where it is asked.
    """

    isLeaf = True

    def __init__(self, metrics: Metrics) -> None:
        Resource.__init__(self)
        self._metrics = metrics

    def render_GET(self, request: Request) -> bytes:
        accept = request.getHeader(b"accept")
        body, contentType = self._metrics.exposition(
            accept.decode("latin-1") if accept is not None else None)
        request.setHeader(b"content-type", contentType.encode("ascii"))
        return body


class _QuietSite(Site):
    """
    A site that writes no access log line per scrape.
    """

    noisy = False

    def __init__(self, resource: Resource, reactor: IReactorTime) -> None:
        Site.__init__(self, resource, reactor=reactor)

    def log(self, request: object) -> None:
        pass


def metricsSite(metrics: Metrics, reactor: IReactorTime) -> Site:
    """
    The metrics endpoint's site: C{/metrics} and nothing else.
    """
    root = Resource()
    root.putChild(b"metrics", MetricsPage(metrics))
    return _QuietSite(root, reactor)


__all__ = [
    "BODY_STATES",
    "HostSample",
    "Metrics",
    "MetricsPage",
    "UNMATCHED",
    "metricsSite",
    "unserved",
]
