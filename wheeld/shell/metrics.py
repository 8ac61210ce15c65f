"""The OpenMetrics endpoint: what a table does, for Prometheus to scrape (docs/metrics.md).

Imported only when ``metrics.listen`` is set: prometheus_client costs start-up
time that a daemon without an endpoint should not pay.

The registry is wheeld's own, never prometheus_client's global one. Counters
that only the daemon sees happen (results, no-spins, the time from a decision
to the broker's PUBACK) are kept as they happen, from effects the daemon
handles anyway; everything else (the decoder's counters, the link, the broker,
the outbox, the journal's size) is read when scraped, so the per-frame path
does nothing for metrics at all.

Served by a small HTTP server on the daemon's own event loop rather than
prometheus_client's threaded one: a scrape then reads the pipeline and the
journal in the thread that changes them, with no lock and no torn read. So
that scrapes cost the game loop little however many come, an exposition is
rendered at most once per ``SCRAPE_CACHE_S`` (per format) and its bytes served
to every scrape meanwhile; and the server (``wheeld.shell.http_server``) keeps its
slots for scrapers that ask and read, whatever idle or dripping connections
there are.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator, Sequence
from http import HTTPStatus
from typing import Any

import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    InfoMetricFamily,
    Metric,
)

from wheeld.config import is_loopback, split_listen
from wheeld.core.events import REASONS
from wheeld.core.health import HEALTH_STATES, LINK_STATES, Readings
from wheeld.core.messages import ENDING_EVENTS
from wheeld.shell.http_server import Answer, HttpServer, Limits, Request
from wheeld.shell.journal import OutboxEntry
from wheeld.shell.readiness import listen_refusal
from wheeld.shell.scheduler import Scheduler
from wheeld.table.effects import GameRecord, Outgoing
from wheeld.table.pipeline import TablePipeline

#: From a decision journaled to its PUBACK: milliseconds on a LAN, minutes while
#: the broker is away (the outbox keeps it), so the buckets span both.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
#: Decisions awaiting their PUBACK whose journaling time is kept; past this (a broker
#: away for days) the oldest are forgotten, and their latency is not observed.
MAX_TIMED_DECISIONS = 1000
#: What a scraper is granted. Its request head within 8 KiB and 5 s (Prometheus sends
#: a few hundred bytes at once); its answer taken within 10 s (Prometheus's own
#: scrape timeout). Prometheus scrapes one at a time, an HA pair two: 64 slots leave
#: room for a person with curl, and past them the idlest connection makes room.
LIMITS = Limits(
    head_timeout_s=5.0,
    max_head_bytes=8192,
    max_connections=64,
    backlog=128,
    write_timeout_s=10.0,
)
#: An exposition is rendered at most once per this many seconds, per format; scrapes
#: meanwhile get the same bytes (Prometheus scrapes every 15 s or more).
SCRAPE_CACHE_S = 1.0
METRICS_PATH = "/metrics"
#: The game events that end a game, as the journal names them (GameRecord.event).
_ENDINGS = ENDING_EVENTS


class TableMetrics:
    """The table's metrics in a registry of their own.

    ``readings`` gives the daemon's figures at scrape time; ``clock`` is monotonic.
    """

    def __init__(
        self,
        pipeline: TablePipeline,
        readings: Callable[[], Readings],
        *,
        info: dict[str, str],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        # The *_created series say when each counter began: the process's start,
        # which process_start_time_seconds says better. One table, one process.
        prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]
        self.registry = CollectorRegistry(auto_describe=False)
        self._game_topic = f"{pipeline.settings.base_topic}/game"
        self._clock = clock
        self.results = Counter(
            "wheeld_results", "Games ended with a winning number", registry=self.registry
        )
        self.no_spins = Counter(
            "wheeld_no_spins", "Games voided, by first cause", ["reason"], registry=self.registry
        )
        for reason in REASONS:
            self.no_spins.labels(reason)  # every cause from 0, so rate() sees the first one
        self.ack_latency = Histogram(
            "wheeld_decision_ack_seconds",
            "From a result or no-spin journaled to the broker's PUBACK of its <base>/game message",
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.registry.register(_ScrapedCollector(pipeline, readings, info))
        #: Outbox entry id of a decision's <base>/game message -> when it was journaled.
        self._journaled_at: dict[int, float] = {}

    def decided(
        self, games: Sequence[GameRecord], messages: Sequence[Outgoing], ids: Sequence[int]
    ) -> None:
        """Decisions were journaled; ``ids`` are the outbox ids of ``messages``, in order."""
        if not games:
            return
        now = self._clock()
        # One <base>/game message per game record, in the same order.
        records = iter(games)
        for message, entry_id in zip(messages, ids, strict=False):
            if message.topic != self._game_topic:
                continue
            game = next(records, None)
            if game is None or game.event not in _ENDINGS:
                continue
            if game.event == "result":
                self.results.inc()
            else:
                self.no_spins.labels(_reason(game.payload)).inc()
            if len(self._journaled_at) >= MAX_TIMED_DECISIONS:
                del self._journaled_at[next(iter(self._journaled_at))]
            self._journaled_at[entry_id] = now

    def acknowledged(self, entry: OutboxEntry) -> None:
        """The broker acknowledged an outbox entry (the publisher's ``on_acknowledged``)."""
        journaled = self._journaled_at.pop(entry.id, None)
        if journaled is not None:
            self.ack_latency.observe(max(0.0, self._clock() - journaled))

    def exposition(self, accept: str) -> tuple[bytes, str]:
        """The scrape's body and content type: OpenMetrics if ``accept`` asks for it."""
        encoder, content_type = choose_encoder(accept)
        return encoder(self.registry), content_type


def _reason(payload: str) -> str:
    """A no_spin payload's first cause (signed or not, ``reason`` is a top-level member)."""
    with contextlib.suppress(ValueError, AttributeError):
        reason = json.loads(payload).get("reason")
        if isinstance(reason, str):
            return reason
    return "unknown"


class _ScrapedCollector:
    """What is read at scrape time: the decoder, the engine's refusals and the daemon's readings."""

    def __init__(
        self, pipeline: TablePipeline, readings: Callable[[], Readings], info: dict[str, str]
    ) -> None:
        self._pipeline = pipeline
        self._readings = readings
        self._info = info

    def collect(self) -> Iterator[Metric]:
        pipeline = self._pipeline
        readings = self._readings()
        condition = readings.condition
        yield InfoMetricFamily(
            "wheeld", "The software, the table and the wheel's driver", self._info
        )

        counters = pipeline.view.decoder_counters()
        yield CounterMetricFamily(
            "wheeld_wheel_frames",
            "Frames the wheel's decoder accepted",
            value=counters.get("frames", 0),
        )
        decoder = CounterMetricFamily(
            "wheeld_wheel_decoder",
            "The decoder's other counters, named as in <base>/wheel: bad frames by kind, "
            "garbage bytes, sequence gaps (and a driver's own)",
            labels=["kind"],
        )
        for name, value in counters.items():
            if name != "frames":
                decoder.add_metric([name], value)
        yield decoder
        refused = CounterMetricFamily(
            "wheeld_wheel_events_refused",
            "Wheel events refused for the phase they came in",
            labels=["phase", "event"],
        )
        for (phase, event), count in pipeline.view.refused_events().items():
            refused.add_metric([phase, event], count)
        yield refused

        link = GaugeMetricFamily(
            "wheeld_wheel_link", "The wheel link's state: 1 for the current one", labels=["state"]
        )
        for state in LINK_STATES:
            link.add_metric([state], 1 if condition.link == state else 0)
        yield link
        if readings.last_frame_age_s is not None:
            yield GaugeMetricFamily(
                "wheeld_wheel_last_frame_age_seconds",
                "Seconds since the wheel last sent anything",
                value=readings.last_frame_age_s,
            )
        yield GaugeMetricFamily(
            "wheeld_broker_connected",
            "1 while connected to the MQTT broker",
            value=1 if condition.broker == "connected" else 0,
        )
        if readings.outbox is not None:
            yield GaugeMetricFamily(
                "wheeld_outbox_pending",
                "Journaled messages waiting for the broker's acknowledgement",
                value=readings.outbox,
            )
        yield GaugeMetricFamily(
            "wheeld_journal_bytes",
            "The journal's size on disk (database and write-ahead log)",
            value=readings.journal_bytes,
        )
        faults = GaugeMetricFamily(
            "wheeld_fault_active", "Faults and alerts set now (1 each)", labels=["fault"]
        )
        for fault in (*condition.faults, *condition.alerts):
            faults.add_metric([fault], 1)
        yield faults
        health = GaugeMetricFamily(
            "wheeld_health",
            "The health <base>/health says: 1 for the current state",
            labels=["state"],
        )
        for health_state in HEALTH_STATES:
            health.add_metric([health_state], 1 if condition.state == health_state else 0)
        yield health


class MetricsEndpoint:
    """``GET /metrics`` on ``metrics.listen``, served on the daemon's event loop.

    ``clock`` is monotonic: it says when a cached exposition is stale.
    """

    def __init__(
        self,
        listen: str,
        metrics: TableMetrics,
        *,
        log: Any,
        limits: Limits = LIMITS,
        cache_s: float = SCRAPE_CACHE_S,
        clock: Callable[[], float] = time.monotonic,
        scheduler: Scheduler | None = None,
    ) -> None:
        self.listen = listen
        self._metrics = metrics
        self._log = log
        self._cache_s = cache_s
        self._clock = clock
        #: Per content type: when the exposition was last rendered, and its body.
        self._rendered: dict[str, tuple[float, bytes]] = {}
        # The daemon's scheduler: the connections' deadlines among its other timers.
        self.server = HttpServer("metrics", self._route, limits, log=log, scheduler=scheduler)

    async def start(self) -> None:
        """Listen; OSError with one line naming ``metrics.listen`` if the address is refused.

        Two daemons on one machine must not share a port: a port in use is a
        configuration problem, said at start, never a scrape of the wrong table.
        """
        host, port = split_listen(self.listen)
        try:
            await self.server.start(host, port)
        except OSError as exc:
            why = listen_refusal(exc.errno, exc.strerror or str(exc))
            raise OSError(f"metrics.listen: {self.listen}: {why}") from None
        if not is_loopback(host):
            self._log.warning(
                "metrics endpoint reachable from other machines: firewall it, or listen on "
                "127.0.0.1",
                listen=self.listen,
            )
        self._log.info("metrics endpoint listening", listen=self.listen, path=METRICS_PATH)

    async def close(self) -> None:
        await self.server.close()

    def _route(self, request: Request) -> Answer:
        if request.path != METRICS_PATH:
            return Answer(HTTPStatus.NOT_FOUND, f"the metrics are at {METRICS_PATH}\n".encode())
        body, content_type = self._exposition(request.headers.get("accept", ""))
        return Answer(HTTPStatus.OK, body, content_type)

    def _exposition(self, accept: str) -> tuple[bytes, str]:
        """The exposition ``accept`` asks for: rendered again only when the last is stale."""
        now = self._clock()
        # By the format chosen, not the header: every Accept gets one of two formats.
        chosen = choose_encoder(accept)[1]
        cached = self._rendered.get(chosen)
        if cached is not None and now - cached[0] < self._cache_s:
            return cached[1], chosen
        body, content_type = self._metrics.exposition(accept)
        self._rendered[chosen] = (now, body)
        return body, content_type
