"""
The codec on the write path, beside its floor: what an accepted prompt
costs to turn into the bytes the journal writes (its request's record,
holding the command whole, and its C{command.accepted} event) through the
protocol's values and codec, against the host's way before its values
(the floor): the same command, answer, record and event built as dicts
from the request dict, with the same fingerprint, then dumped.
Also the read back of the same record (C{recordOf}) against C{json.loads}.

    .venv/bin/python benchmarks/bench_codec.py [--runs N]

CPU only: no disk, no network.  Each figure is the best of N runs of 20,000
operations, in microseconds per operation.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from vehicle.protocol import (  # noqa: E402
    Answer,
    CommandAccepted,
    CommandRequest,
    Event,
    Holder,
    fromRequest,
    toObject,
)
from vehicle.session import Caller, fingerprint, isoTimestamp  # noqa: E402
from vehicle.session._command import acceptedData, commandOf  # noqa: E402
from vehicle.session._requests import recordOf, requestRecord  # noqa: E402

AT = "2026-12-01T10:00:00.000Z"
CALLER = Caller(principal="owner", clientId="ride-4f98c7508fd86045", role="owner", graphId="demo")
BODY = {"op": "prompt", "type": "prompt", "requestId": "p1",
        "text": "How many cows are in the field?"}


def withValues() -> bytes:
    """
    The new way: the request read once, the command built, the record and
    the event written through the codec.
    """
    request = fromRequest({k: v for k, v in BODY.items() if k != "op"}, CommandRequest)
    command = commandOf(request, CALLER.holder(), AT)
    sent = toObject(Answer(type="command.accepted", value=CommandAccepted(command=command)))
    record = requestRecord("command", CALLER, "p1", request.raw, sent, 1_796_000_000.0,
                           cursor=2, effects=[("command.accepted", acceptedData(command))],
                           command=command)
    event = Event(seq=3, type="command.accepted", timestamp=AT, sessionId="s1",
                  data=acceptedData(command))
    return (json.dumps(toObject(record), separators=(",", ":")).encode()
            + json.dumps(toObject(event), separators=(",", ":")).encode())


_RECORD = json.loads(withValues().split(b'}{"seq"')[0] + b"}")


def withDicts() -> bytes:
    """
    The floor, the host's way before its values: the same command, answer,
    record and event built as dicts from the request dict (the fingerprint
    and the timestamp computed as before), then dumped.
    """
    request = {k: v for k, v in BODY.items() if k != "op"}
    by = {"principal": CALLER.principal, "clientId": CALLER.clientId}
    command = {"commandId": request.get("commandId") or request["requestId"],
               "requestId": request["requestId"], "type": request["type"],
               "status": "accepted", "disposition": None, "acceptedAt": AT, "updatedAt": AT,
               "by": dict(by)}
    for key in ("text", "contextRefs", "targetCommandId", "entryId", "policy", "chimeId"):
        if key in request:
            command[key] = request[key]
    data = {"commandId": command["commandId"], "type": command["type"],
            "requestId": command["requestId"], "status": "accepted", "by": dict(by),
            "textBytes": len(command["text"].encode("utf-8"))}
    sent = {"type": "command.accepted", "value": {"command": dict(command)}}
    record = {"kind": "command", "requestId": "p1", "principal": CALLER.principal,
              "clientId": CALLER.clientId, "fingerprint": fingerprint(request, "commands"),
              "at": isoTimestamp(1_796_000_000.0), "body": request, "frame": sent,
              "cursor": 2, "effects": [["command.accepted", data]], "command": command}
    event = {"seq": 3, "type": "command.accepted", "timestamp": AT, "sessionId": "s1",
             "data": data}
    return (json.dumps(record, separators=(",", ":")).encode()
            + json.dumps(event, separators=(",", ":")).encode())


LINE = json.dumps(_RECORD, separators=(",", ":"))


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    assert Holder  # the values module is loaded before timing
    n = 20_000
    assert withValues() == withDicts(), "the two ways must write the same bytes"
    rows = []
    for name, fn, floorName, floor in (
        ("write: values + codec", withValues, "write: dicts + json.dumps", withDicts),
        ("read: recordOf", lambda: recordOf(json.loads(LINE)), "read: json.loads",
         lambda: json.loads(LINE)),
    ):
        fn()
        floor()
        mine = min(timeit.repeat(fn, number=n, repeat=args.runs)) / n * 1e6
        base = min(timeit.repeat(floor, number=n, repeat=args.runs)) / n * 1e6
        rows.append((name, mine, floorName, base))
    print(f"cores: {os.cpu_count()}; best of {args.runs} x {n}; microseconds per operation")
    for name, mine, floorName, base in rows:
        print(f"  {name:<24}{mine:8.1f} us   floor ({floorName}) {base:6.1f} us"
              f"   +{mine - base:.1f} us, x {mine / base:.2f}")


if __name__ == "__main__":
    main(sys.argv[1:])
