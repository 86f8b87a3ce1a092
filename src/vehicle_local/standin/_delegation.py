# -*- test-case-name: tests.unit.test_gardend -*-
"""
Delegation tokens: opaque strings, HMAC-signed by the stand-in, that let a
service act on gardend's C{/mcp} for one caller, on one graph, with one role,
for an hour (a public caller's also reads every public graph). Verified
statelessly; never stored.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
from typing import Optional, Sequence

from attrs import field, frozen
from twisted.internet.interfaces import IReactorTime

from vehicle_local.standin._config import ROLES

_PREFIX = "gdt1"

#: How long a delegation token is good for, in seconds.
LIFETIME = 3600.0


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@frozen(kw_only=True)
class Delegation:
    """
    What a verified token says.

    @ivar principal: the caller it acts for (an C{x-user-id}).
    @ivar graphId: the one graph it reaches, or L{None} for the operator (the
        master key used directly on C{/mcp}).
    @ivar role: C{owner}, C{editor} or C{viewer}.
    @ivar via: C{service:<id>} for a delegation, L{None} for the operator.
    @ivar expires: POSIX time after which it is refused.
    @ivar reads: other graphs it may read (a public caller's: every public
        graph); empty for a member's.
    """

    principal: str
    graphId: Optional[str]
    role: str
    via: Optional[str]
    expires: float
    reads: tuple[str, ...] = ()


class DelegationRefused(Exception):
    """
    The token is malformed, forged or expired; C{args[0]} is a short code
    (C{invalid_token} or C{token_expired}).
    """


@frozen(kw_only=True)
class Delegations:
    """
    Mints and verifies delegation tokens with a key that lives only in this
    process's memory.
    """

    clock: IReactorTime
    key: bytes = field(factory=lambda: os.urandom(32), repr=False)
    lifetime: float = LIFETIME

    def _sign(self, body: str) -> str:
        return _b64(hmac.new(self.key, body.encode("ascii"), hashlib.sha256).digest())

    def mint(
        self,
        principal: str,
        graphId: str,
        role: str,
        service: str,
        reads: Sequence[str] = (),
    ) -> str:
        """
        A token for C{principal} on C{graphId} with C{role}, on behalf of
        C{service}, valid for L{lifetime} seconds from now.

        @param reads: other graphs the token may read (a viewer's only: a
            public caller's public graphs).
        """
        if role not in ROLES:
            raise ValueError(f"unknown role {role!r}")
        others = [g for g in dict.fromkeys(reads) if g != graphId]
        if others and role != "viewer":
            raise ValueError("only a viewer's token reads other graphs")
        now = self.clock.seconds()
        payload: dict[str, object] = {
            "sub": principal,
            "graph": graphId,
            "role": role,
            "svc": service,
            "iat": int(now),
            "exp": now + self.lifetime,
            "jti": _b64(os.urandom(9)),
        }
        if others:
            payload["reads"] = others
        body = (
            _PREFIX
            + "."
            + _b64(
                json.dumps(payload, separators=(",", ":"), sort_keys=True).encode(
                    "utf-8"
                )
            )
        )
        return body + "." + self._sign(body)

    def verify(self, token: str) -> Delegation:
        """
        Check C{token}'s signature and expiry.

        @raise DelegationRefused: when it is not one of ours or has expired.
        """
        parts = token.split(".")
        if len(parts) != 3 or parts[0] != _PREFIX:
            raise DelegationRefused("invalid_token")
        body = parts[0] + "." + parts[1]
        if not hmac.compare_digest(self._sign(body), parts[2]):
            raise DelegationRefused("invalid_token")
        try:
            payload = json.loads(_unb64(parts[1]))
            reads = payload.get("reads", [])
            if not isinstance(reads, list) or not all(
                isinstance(g, str) for g in reads
            ):
                raise DelegationRefused("invalid_token")
            delegation = Delegation(
                principal=str(payload["sub"]),
                graphId=str(payload["graph"]),
                role=str(payload["role"]),
                via="service:" + str(payload["svc"]),
                expires=float(payload["exp"]),
                reads=tuple(reads),
            )
        except (ValueError, KeyError, TypeError):
            raise DelegationRefused("invalid_token")
        if delegation.role not in ROLES or (
            delegation.reads and delegation.role != "viewer"
        ):
            raise DelegationRefused("invalid_token")
        if self.clock.seconds() >= delegation.expires:
            raise DelegationRefused("token_expired")
        return delegation
