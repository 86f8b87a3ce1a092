"""
The host's figures (issue 19): L{vehicle.metrics.Metrics} on a registry of
each test's own, told by the packages what happened and read from the host at
a scrape, and served as Prometheus's text format on C{/metrics}.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families
from treq.testing import StubTreq
from twisted.internet.defer import fail, succeed
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from vehicle._tap import Options, makeService
from vehicle.metrics import HostSample, Metrics, metricsSite
from vehicle.public import LedgerUnavailable, PostgresLedger, TurnAsk
from vehicle.settings import Settings, SettingsError
from vehicle.store import JsonlLog, observeLogs

from tests.support.harness import SECRET
from tests.support.public import PUBLIC
from tests.support.routes import RouteTestCase


def scrape(testCase: SynchronousTestCase, metrics: Metrics, accept: str | None = None
           ) -> tuple[int, str, dict[tuple[str, tuple[tuple[str, str], ...]], float]]:
    """
    C{GET /metrics} from C{metrics}' site: the status, the content type,
    and every sample by its name and labels.
    """
    stub = StubTreq(metricsSite(metrics, Clock()).resource)
    headers = {b"accept": [accept.encode()]} if accept else {}
    response = testCase.successResultOf(stub.get("http://metrics/metrics", headers=headers))
    body = testCase.successResultOf(response.content()).decode("utf-8")
    contentType = response.headers.getRawHeaders(b"content-type")[0].decode()
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    if response.code == 200 and "openmetrics" not in contentType:
        for family in text_string_to_metric_families(body):
            for sample in family.samples:
                samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    testCase.scraped = body  # type: ignore[attr-defined]
    return response.code, contentType, samples


def value(metrics: Metrics, name: str, **labels: str) -> float:
    """
    One sample of C{metrics}' registry, 0 when it has none yet.
    """
    found = metrics.registry.get_sample_value(name, labels)
    return found if found is not None else 0.0


class MetricsTests(SynchronousTestCase):
    """
    Each thing a package tells moves its figure, in the registry the
    L{Metrics} was given.
    """

    def setUp(self) -> None:
        self.registry = CollectorRegistry()
        self.metrics = Metrics(registry=self.registry)

    def test_ownRegistry(self) -> None:
        """
        The figures are kept in the registry given, and in no other
        L{Metrics}' (a test's own is its own).
        """
        other = Metrics()
        self.metrics.appended("events", 1)
        self.assertEqual(value(self.metrics, "vehicle_log_records_total", log="events"), 1)
        self.assertEqual(value(other, "vehicle_log_records_total", log="events"), 0)

    def test_happenings(self) -> None:
        """
        A request, a record, an fsync, a probe, a mirror write and failure,
        a refused turn, a ledger answer and the spares each move their own
        series.
        """
        m = self.metrics
        m.requestAnswered("/sessions", "POST", 201, 0.003)
        m.requestAnswered("/sessions", "POST", 201, 0.2)
        m.synced("events", 0.0004)
        m.boxProbed(True)
        m.boxProbed(False)
        m.mirrorWrote(True)
        m.mirrorWrote(False)
        m.mirrorWrote(False)
        m.turnRefused("daily_turn_limit")
        m.ledgerAnswered("reserveTurn", 0.02, "ok")
        self.assertEqual(value(m, "vehicle_http_requests_total",
                               route="/sessions", method="POST", status="201"), 2)
        self.assertEqual(value(m, "vehicle_http_request_duration_seconds_bucket",
                               route="/sessions", method="POST", le="0.005"), 1)
        self.assertAlmostEqual(value(m, "vehicle_http_request_duration_seconds_sum",
                                     route="/sessions", method="POST"), 0.203)
        self.assertEqual(value(m, "vehicle_log_fsync_duration_seconds_count", log="events"), 1)
        self.assertEqual(value(m, "vehicle_box_probes_total", outcome="passed"), 1)
        self.assertEqual(value(m, "vehicle_box_probes_total", outcome="failed"), 1)
        self.assertEqual(value(m, "vehicle_mirror_writes_total", outcome="written"), 1)
        self.assertEqual(value(m, "vehicle_mirror_writes_total", outcome="failed"), 2)
        self.assertEqual(value(m, "vehicle_public_turns_refused_total",
                               reason="daily_turn_limit"), 1)
        self.assertEqual(value(m, "vehicle_ledger_duration_seconds_count",
                               operation="reserveTurn", outcome="ok"), 1)

    def test_requestsApart(self) -> None:
        """
        Requests are counted apart by route, method and status (each
        series found once and kept), their latency by route and method;
        records by their log.
        """
        m = self.metrics
        for route, method, status in [("/sessions", "POST", 201), ("/sessions", "POST", 400),
                                      ("/sessions", "GET", 200), ("/account", "GET", 200),
                                      ("/sessions", "POST", 201)]:
            m.requestAnswered(route, method, status, 0.5)
        for log in ("events", "commands", "events"):
            m.appended(log, 1)
        requests, latency = "vehicle_http_requests_total", "vehicle_http_request_duration_seconds"
        for name, labels, expected in [
            ("vehicle_log_records_total", {"log": "events"}, 2),
            ("vehicle_log_records_total", {"log": "commands"}, 1),
            (requests, {"route": "/sessions", "method": "POST", "status": "201"}, 2),
            (requests, {"route": "/sessions", "method": "POST", "status": "400"}, 1),
            (requests, {"route": "/sessions", "method": "GET", "status": "200"}, 1),
            (requests, {"route": "/account", "method": "GET", "status": "200"}, 1),
            (latency + "_count", {"route": "/sessions", "method": "POST"}, 3),
            (latency + "_bucket", {"route": "/sessions", "method": "GET", "le": "0.5"}, 1),
            (latency + "_bucket", {"route": "/sessions", "method": "GET", "le": "0.25"}, 0),
            (latency + "_sum", {"route": "/account", "method": "GET"}, 0.5),
        ]:
            self.assertEqual(value(m, name, **labels), expected, (name, labels))

    def test_sampledAtEachScrape(self) -> None:
        """
        The host's state is read when scraped, every body state and profile
        written even at zero; a later reading replaces the figures.
        """
        state = {"runs": 1}
        self.metrics.sample(lambda: HostSample(
            sessions={"dormant": 2, "live": 1}, bodies={"chat": 1}, runs=state["runs"],
            streams=4, polls=5, owed=6, spares=7, ahead=8,
        ))
        code, contentType, samples = scrape(self, self.metrics)
        self.assertEqual(code, 200)
        self.assertTrue(contentType.startswith("text/plain; version=0.0.4"), contentType)
        self.assertEqual(samples[("vehicle_sessions", (("body", "dormant"),))], 2)
        self.assertEqual(samples[("vehicle_sessions", (("body", "live"),))], 1)
        self.assertEqual(samples[("vehicle_sessions", (("body", "starting"),))], 0)
        self.assertEqual(samples[("vehicle_bodies", (("profile", "agent"),))], 0)
        self.assertEqual(samples[("vehicle_runs", ())], 1)
        self.assertEqual(samples[("vehicle_watchers", (("kind", "stream"),))], 4)
        self.assertEqual(samples[("vehicle_watchers", (("kind", "poll"),))], 5)
        self.assertEqual(samples[("vehicle_ledger_writes_owed", ())], 6)
        self.assertEqual(samples[("vehicle_bodies_spare", ())], 7)
        self.assertEqual(samples[("vehicle_bodies_ahead", ())], 8)
        state["runs"] = 0
        self.assertEqual(scrape(self, self.metrics)[2][("vehicle_runs", ())], 0)

    def test_openMetricsWhenAsked(self) -> None:
        """
        A scraper that asks for OpenMetrics gets it; C{/metrics} is the only
        page.
        """
        code, contentType, _ = scrape(self, self.metrics,
                                      accept="application/openmetrics-text; version=1.0.0")
        self.assertEqual(code, 200)
        self.assertIn("application/openmetrics-text", contentType)
        self.assertTrue(self.scraped.endswith("# EOF\n"))  # type: ignore[attr-defined]
        stub = StubTreq(metricsSite(self.metrics, Clock()).resource)
        response = self.successResultOf(stub.get("http://metrics/sessions"))
        self.assertEqual(response.code, 404)


class LogObservationTests(SynchronousTestCase):
    """
    The store's logs tell of every record appended and every fsync, at
    their one append and one sync.
    """

    def test_appendAndSync(self) -> None:
        """
        Two synced appends and one unsynced, then a sync: three records,
        three fsyncs, under the log's name; two lines in one write: two
        records more.
        """
        metrics = Metrics(registry=CollectorRegistry())
        self.addCleanup(observeLogs, observeLogs(metrics))
        log, _ = JsonlLog.open(self.mktempDir() / "events.jsonl", seqField="seq")
        self.addCleanup(log.close)
        log.append({"seq": 1})
        log.append({"seq": 2})
        log.append({"seq": 3}, sync=False)
        self.assertEqual(value(metrics, "vehicle_log_records_total", log="events"), 3)
        self.assertEqual(value(metrics, "vehicle_log_fsync_duration_seconds_count", log="events"), 2)
        log.sync()
        self.assertEqual(value(metrics, "vehicle_log_fsync_duration_seconds_count", log="events"), 3)
        log.write(log.line({"seq": 4}), log.line({"seq": 5}))
        self.assertEqual(value(metrics, "vehicle_log_records_total", log="events"), 5)

    def mktempDir(self) -> Any:
        from pathlib import Path

        path = Path(self.mktemp())
        path.mkdir(parents=True)
        return path


class _Runner:
    """
    A ledger's transaction runner that answers, or cannot reach the
    database, as told.
    """

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.down = False

    def run(self, interaction: Any) -> Any:
        self.clock.advance(0.25)
        if self.down:
            import psycopg

            return fail(psycopg.OperationalError("connection refused"))
        return succeed("reserved")

    def close(self) -> None:
        pass


class LedgerLatencyTests(SynchronousTestCase):
    """
    PostgreSQL's every transaction is timed, by operation and outcome.
    """

    def test_answeredAndUnavailable(self) -> None:
        """
        A turn reserved (after the schema's migration) and one refused for
        a database out of reach are each timed under their outcome.
        """
        clock = Clock()
        metrics = Metrics(registry=CollectorRegistry())
        runner = _Runner(clock)
        ledger = PostgresLedger(runner=runner, clock=clock, host="h", metrics=metrics)
        ask = TurnAsk(principal="p", session="s", command="c", funding="credit", day="d",
                      turnsPerDay=1, sessionMaxTurns=1)
        self.assertEqual(self.successResultOf(ledger.reserveTurn(ask)), "reserved")
        runner.down = True
        self.failureResultOf(ledger.reserveTurn(ask), LedgerUnavailable)
        self.assertEqual(value(metrics, "vehicle_ledger_duration_seconds_count",
                               operation="migrate", outcome="ok"), 1)
        self.assertEqual(value(metrics, "vehicle_ledger_duration_seconds_sum",
                               operation="reserveTurn", outcome="ok"), 0.25)
        self.assertEqual(value(metrics, "vehicle_ledger_duration_seconds_count",
                               operation="reserveTurn", outcome="unavailable"), 1)


class ScrapeTests(RouteTestCase):
    """
    A host in memory, scraped: its figures move with the work, and no
    label carries a session's id.
    """

    harnessSettings = {"public": PUBLIC}

    @property
    def metrics(self) -> Metrics:
        return self.h.api.metrics

    def test_requestsByRoutePattern(self) -> None:
        """
        A create and a prompt are counted under their route's pattern, with
        their status; a path no route takes is C{unmatched}; no session id
        is in any label.
        """
        sid = self.h.create()["sessionId"]
        self.prompt(sid, "p1")
        self.refused("not_found", "GET", "/nowhere/" + sid)
        _, _, samples = scrape(self, self.metrics)
        self.assertEqual(samples[("vehicle_http_requests_total", (
            ("method", "POST"), ("route", "/sessions"), ("status", "201")))], 1)
        self.assertEqual(samples[("vehicle_http_requests_total", (
            ("method", "POST"), ("route", "/sessions/<sessionId>/commands"),
            ("status", "202")))], 1)
        self.assertEqual(samples[("vehicle_http_requests_total", (
            ("method", "GET"), ("route", "unmatched"), ("status", "404")))], 1)
        self.assertNotIn(sid, self.scraped)  # type: ignore[attr-defined]

    def counted(self, method: str, path: str, **kw: Any) -> tuple[str, str]:
        """
        The route and method labels under which one request of C{method}
        on C{path} was counted (the one label set that moved).
        """
        def counts() -> dict[tuple[tuple[str, str], ...], float]:
            return {labels: v for (name, labels), v in scrape(self, self.metrics)[2].items()
                    if name == "vehicle_http_requests_total"}

        before = counts()
        self.h.stub.flush()
        self.successResultOf(self.h.request(method, path, **kw))
        self.h.stub.flush()
        moved = [dict(labels) for labels, v in counts().items() if v != before.get(labels, 0)]
        self.assertEqual(len(moved), 1, (method, path, moved))
        return moved[0]["route"], moved[0]["method"]

    def test_routeAsTheRouterMatchesIt(self) -> None:
        """
        Every request is counted under the pattern of the route the router
        matches for its method and path (the route names itself as it takes
        the request; no second match is made), for every route of the app
        and for HEAD, OPTIONS, a method no route takes, a trailing slash and
        paths of no route, which are C{unmatched}.
        """
        from werkzeug.exceptions import HTTPException

        from vehicle.web import VehicleAPI

        sid = self.h.create()["sessionId"]
        adapter = VehicleAPI.router.url_map.bind("host")

        def expected(method: str, path: str) -> str:
            try:
                rule, _ = adapter.match(path, method=method, return_rule=True)
            except HTTPException:
                return "unmatched"
            return str(rule.rule)

        asked = [("OPTIONS", f"/sessions/{sid}"), ("PUT", "/sessions"), ("GET", "/sessions/"),
                 ("GET", f"/sessions/{sid}/"), ("GET", "/nowhere"), ("BREW", "/sessions"),
                 ("GET", "/sessions//commands"), ("HEAD", "/health")]
        patterns = set()
        for rule in VehicleAPI.router.url_map.iter_rules():
            patterns.add(rule.rule)
            for method in sorted(rule.methods or ()):
                asked.append((method, rule.rule.replace("<sessionId>", sid)))
        self.assertEqual(len(patterns), 11)
        seen = set()
        for method, path in asked:
            route, label = self.counted(method, path, body={})
            self.assertEqual(route, expected(method, path), (method, path))
            self.assertEqual(label, method if method != "BREW" else "other")
            seen.add(route)
        self.assertEqual(seen, patterns | {"unmatched"})

    def test_eventsWrittenAndSynced(self) -> None:
        """
        A session made and prompted writes its events (each counted) and
        syncs them (each fsync timed): the events of its folder built aside
        with one sync, each later step with its own.
        """
        before = value(self.metrics, "vehicle_log_records_total", log="events")
        syncsBefore = value(self.metrics, "vehicle_log_fsync_duration_seconds_count", log="events")
        sid = self.h.create()["sessionId"]
        made = value(self.metrics, "vehicle_log_records_total", log="events") - before
        synced = value(self.metrics, "vehicle_log_fsync_duration_seconds_count", log="events")
        self.assertEqual((made, synced - syncsBefore), (2, 1))
        self.prompt(sid, "p1")
        written = value(self.metrics, "vehicle_log_records_total", log="events") - before
        self.assertEqual(written, self.h.api.registry.sessions[sid].cursor)
        self.assertGreater(written, made)
        self.assertGreaterEqual(
            value(self.metrics, "vehicle_log_fsync_duration_seconds_count", log="events") - synced,
            1)

    def test_sessionsBodiesAndRuns(self) -> None:
        """
        A new session is dormant; prompted, its body starts and a run is
        under way.
        """
        sid = self.h.create()["sessionId"]
        samples = scrape(self, self.metrics)[2]
        self.assertEqual(samples[("vehicle_sessions", (("body", "dormant"),))], 1)
        self.assertEqual(samples[("vehicle_bodies", (("profile", "chat"),))], 0)
        self.prompt(sid, "p1")
        samples = scrape(self, self.metrics)[2]
        self.assertEqual(samples[("vehicle_sessions", (("body", "dormant"),))], 0)
        self.assertEqual(samples[("vehicle_bodies", (("profile", "chat"),))], 1)
        self.assertEqual(samples[("vehicle_runs", ())], 1)

    def test_watchers(self) -> None:
        """
        A long-poll waiting and an SSE stream open are counted while they
        last.
        """
        sid = self.h.create()["sessionId"]
        cursor = self.h.api.registry.sessions[sid].cursor
        self.h.request("GET", f"/sessions/{sid}/events?since={cursor}&waitMs=5000")
        self.h.request("GET", f"/sessions/{sid}/events",
                       headers={"accept": "text/event-stream"})
        samples = scrape(self, self.metrics)[2]
        self.assertEqual(samples[("vehicle_watchers", (("kind", "poll"),))], 1)
        self.assertEqual(samples[("vehicle_watchers", (("kind", "stream"),))], 1)
        self.h.clock.advance(5)
        self.h.api.stopStreams()
        self.h.stub.flush()
        samples = scrape(self, self.metrics)[2]
        self.assertEqual(samples[("vehicle_watchers", (("kind", "poll"),))], 0)
        self.assertEqual(samples[("vehicle_watchers", (("kind", "stream"),))], 0)


class MetricsOptionTests(SynchronousTestCase):
    """
    C{--metrics} (or C{VEHICLE_METRICS}) serves C{/metrics} on an endpoint
    of its own; without it, nothing is served.
    """

    def settings(self, env: dict[str, str], metrics: str | None = None) -> Settings:
        env = {"MNEMOSYNE_INTERNAL_SERVICE_SECRET": SECRET, "PORT": "8080",
               "VEHICLE_DATA_DIR": self.mktemp(), **env}
        return Settings.fromEnvironment(env, metrics=metrics)

    def test_offByDefault(self) -> None:
        self.assertIsNone(self.settings({}).metricsListen)

    def test_optionWinsOverTheVariable(self) -> None:
        """
        The option, then the variable.
        """
        env = {"VEHICLE_METRICS": "tcp:9464:interface=127.0.0.1"}
        self.assertEqual(self.settings(env).metricsListen, "tcp:9464:interface=127.0.0.1")
        self.assertEqual(self.settings(env, "unix:/tmp/m.sock").metricsListen, "unix:/tmp/m.sock")

    def test_notAStreamEndpoint(self) -> None:
        """
        An endpoint that is not tcp, tcp6 or unix is refused at start.
        """
        with self.assertRaises(SettingsError):
            self.settings({}, "udp:9464")

    def test_servedOnItsOwnPort(self) -> None:
        """
        With C{--metrics}, the host listens on a second port whose site
        serves C{/metrics}; without it, on its own port only.
        """
        import os

        from twisted.internet.testing import MemoryReactorClock

        self.patch(os, "environ", {"MNEMOSYNE_INTERNAL_SERVICE_SECRET": SECRET})
        for given, ports in ((None, [4321]), ("tcp:9464:interface=127.0.0.1", [4321, 9464])):
            options = Options()
            args = ["--listen", "tcp:4321:interface=127.0.0.1", "--data-dir", self.mktemp()]
            options.parseOptions(args + (["--metrics", given] if given else []))
            reactor = MemoryReactorClock()
            service = makeService(options, reactor)
            service.startService()
            self.assertEqual([port for port, _, _, _ in reactor.tcpServers], ports)
            if given:
                site = reactor.tcpServers[1][1]
                response = self.successResultOf(
                    StubTreq(site.resource).get("http://metrics/metrics"))
                self.assertEqual(response.code, 200)
                self.assertIn(b"vehicle_sessions{body=\"dormant\"} 0.0",
                              self.successResultOf(response.content()))
            self.successResultOf(service.stopService())
