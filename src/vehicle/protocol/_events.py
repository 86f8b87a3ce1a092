# -*- test-case-name: tests.unit.test_protocol -*-
"""
An event of a session's log (spec, "Watch"): numbered from 1 when durable,
unnumbered when ephemeral (C{message.delta} and C{thinking.delta}, streamed
and never written).
Its C{data} is the event type's own JSON (C{protocol/schemas/event.schema.json}
says what each carries).
"""

from __future__ import annotations

from attrs import frozen

from vehicle.protocol._commands import omitted
from vehicle.protocol._json import JSONObject


#: Every durable event type the host writes (spec, "Watch").
EVENT_TYPES = frozenset(
    """
    session.created session.revived session.shutdown session.forked session.cloned
    session.renamed session.deleted body.materialized body.dormant body.exited
    body.notice lease.claimed lease.renewed lease.released lease.revoked
    lease.expired command.accepted command.delivered command.completed
    command.aborted command.failed command.cancelled command.interrupted
    run.started run.ended run.settled run.error message.completed tool.started
    tool.result queue.updated queue.stranded budget.exceeded room.policy
    chime.received chime.resolved compaction.started compaction.ended
    retry.started extension.error abort.slow mirror.written mirror.failed
    """.split()
)

#: Ephemeral events: streamed to SSE watchers only, never logged.
#: C{thinking.delta} is this host's own: the model's reasoning as pi streams
#: it, beside the spec's C{message.delta} (docs/conformance.md).
EPHEMERAL_TYPES = frozenset({"message.delta", "thinking.delta"})

#: The events one durable step writes, in order: C{(type, data)} each.
Effects = list[tuple[str, JSONObject]]


@frozen(kw_only=True)
class Event:
    """
    One event of a session.

    @ivar seq: its place in the log, from 1; L{None} for an ephemeral one.
    @ivar timestamp: when it was written (ISO 8601, UTC, milliseconds).
    """

    seq: int | None = omitted()
    type: str
    timestamp: str
    sessionId: str
    data: JSONObject

    @property
    def durable(self) -> bool:
        return self.seq is not None
