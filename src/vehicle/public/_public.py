# -*- test-case-name: tests.unit.test_public -*-
"""
Public sessions: who may open a conversation and on which door (their own
key, or an account's credit), the limits of every public turn (each
accepted credit turn holds its run's budget until its command ends), and
C{/account}.  What runs spend is kept by L{Accounting}, which hears of each
public conversation's life through L{Public}, a session observer.  Keys
callers bring live in memory only.
"""

from __future__ import annotations

from typing import Awaitable, TypeVar

from attrs import define, field, frozen
from twisted.internet.interfaces import IReactorTime

from vehicle.box import reachesThroughProxy
from vehicle.errors import VehicleError
from vehicle.metrics import Metrics, unserved
from vehicle.models import ModelCatalog
from vehicle.public._accounting import Accounting
from vehicle.public._contract import (
    GRANT_CONFLICT,
    GRANTED,
    REPEATED,
    RESERVED,
    LedgerStore,
    LedgerUnavailable,
    TurnAsk,
    turnKey,
)
from vehicle.protocol import CommandRequest, CreateRequest, Door, GrantRequest, JSONObject, RunBudget
from vehicle.session import Caller, RunSettled, Session
from vehicle.settings import PublicSettings


OUT_OF_CREDIT = (
    "out of credit: paste your OpenRouter key (send it as X-Model-Key) to keep talking"
)

T = TypeVar("T")


async def answered(pending: Awaitable[T]) -> T:
    """
    The ledger's answer, or C{ledger_unavailable} (503) when it cannot give
    one: public turns are refused at once, never left waiting.
    """
    try:
        return await pending
    except LedgerUnavailable as e:
        raise VehicleError(
            "ledger_unavailable",
            "the credit ledger cannot be reached right now; try again in a few seconds",
        ) from e


@frozen(kw_only=True)
class Reservation:
    """
    A public turn reserved for command C{command} of C{sessionId}:
    C{new} when this request reserved it (not a repeat of one already
    counted), so that only it may void it.
    """

    sessionId: str
    command: str
    new: bool

    @property
    def key(self) -> str:
        return turnKey(self.sessionId, self.command)


@define(eq=False)
class Public:
    """
    The public doors and their ledger: who may open a conversation and
    take a turn, and C{/account}.  It follows every public conversation's
    life as a session observer; what its runs cost is kept by its
    L{Accounting}.
    """

    settings: PublicSettings
    ledger: LedgerStore
    models: ModelCatalog
    clock: IReactorTime
    #: Where public turns refused are counted.
    metrics: Metrics = field(factory=unserved)
    #: sessionId -> the newest key its owner sent (memory only).
    _keys: dict[str, str] = field(factory=dict, repr=False)
    #: The accounts whose signup grant this host has seen made.
    _seen: set[str] = field(factory=set)
    accounting: Accounting = field(init=False)

    @accounting.default
    def _newAccounting(self) -> Accounting:
        return Accounting(ledger=self.ledger, clock=self.clock)

    # -- the doors ----------------------------------------------------------

    def doors(self) -> JSONObject:
        return {
            "byok": {
                "header": "X-Model-Key",
                "provider": self.settings.provider,
                "defaultModel": self.settings.defaultModel,
            },
            "account": {
                "header": "Authorization: Bearer <Sophia account ID token>",
                "signupGrantUsd": self.settings.signupGrantUsd,
                "models": list(self.settings.creditModels),
            },
        }

    def requireEnabled(self) -> None:
        if not self.settings.enabled:
            raise VehicleError("not_public", "public sessions are off on this host")

    async def see(self, caller: Caller) -> None:
        """
        The first time the host sees a verified account, it gets the signup
        credit (once: the grant's key is the principal).
        """
        if (
            caller.kind == "account" and caller.emailVerified and self.settings.signupGrantUsd > 0
            and caller.principal not in self._seen
        ):
            await answered(self.ledger.addGrant(
                caller.principal, self.settings.signupGrantUsd, "signup",
                f"signup:{caller.principal}",
            ))
            self._seen.add(caller.principal)

    async def chooseDoor(self, caller: Caller, request: CreateRequest) -> Door:
        """
        For a public caller's new session: the model, the funding and the
        run budget.

        @raise VehicleError: C{model_key_required}, C{model_not_allowed},
            C{email_unverified}, C{out_of_credit}, C{credit_pool_exhausted},
            C{ledger_unavailable}.
        """
        self.requireEnabled()
        requested = request.model
        budget = RunBudget(maxTurns=self.settings.runMaxTurns, maxCostUsd=self.settings.runMaxCostUsd)
        if caller.modelKey:
            model = requested or self.settings.defaultModel
            if model.split("/", 1)[0] != self.settings.provider:
                raise VehicleError(
                    "model_not_allowed",
                    f"an own key runs models of {self.settings.provider} only",
                    {"provider": self.settings.provider},
                )
            if self.settings.provider not in self.models.providers:
                raise VehicleError(
                    "model_unavailable", "this host cannot reach the public provider", status=503
                )
            if not reachesThroughProxy(self.models, model):
                # An own key is only ever held by a body's proxy.
                raise VehicleError(
                    "model_unavailable",
                    f"this host cannot reach {model!r} with your key: its API "
                    f"({self.models.apiOf(model)}) is not one its model proxy speaks",
                    status=503,
                )
            return Door(model=model, funding="byok", budget=budget)
        if caller.kind != "account":
            raise VehicleError(
                "model_key_required",
                "bring your own OpenRouter key (send it as X-Model-Key), or sign in with a "
                "Sophia account to use its credit",
                {"doors": self.doors()},
            )
        model = requested or self.settings.creditDefaultModel
        if model not in self.settings.creditModels:
            raise VehicleError(
                "model_not_allowed",
                "that model is not on the credit list",
                {"models": list(self.settings.creditModels)},
            )
        if not self.models.has(model):
            raise VehicleError("model_unavailable", f"the model {model!r} is not on this host", status=503)
        await self.checkCredit(caller)
        return Door(model=model, funding="credit", budget=budget)

    def _requireVerified(self, caller: Caller) -> None:
        if not caller.emailVerified:
            raise VehicleError(
                "email_unverified", "an account whose email is not verified has no credit yet"
            )

    async def checkCredit(self, caller: Caller) -> None:
        """
        Before a credit conversation is made: is there credit, and room in
        today's pool?  (Its turns are checked again, atomically, as each is
        reserved.)
        """
        self._requireVerified(caller)
        await self.see(caller)
        await self.accounting.releaseStrays()
        figures = await answered(self.ledger.figures(caller.principal))
        if figures.balanceUsd - figures.heldUsd <= 0:
            raise self._refusal("out_of_credit")
        if figures.poolTodayUsd + figures.heldAllUsd >= self.settings.creditDailyCapUsd:
            raise self._refusal("credit_pool_exhausted")

    def _refusal(self, code: str) -> VehicleError:
        if code == "daily_turn_limit":
            return VehicleError(
                "daily_turn_limit",
                f"you have used today's {self.settings.turnsPerDay} turns",
                {"turnsPerDay": self.settings.turnsPerDay},
            )
        if code == "session_turn_limit":
            return VehicleError(
                "session_turn_limit",
                f"this conversation has had its {self.settings.sessionMaxTurns} turns",
                {"sessionMaxTurns": self.settings.sessionMaxTurns},
            )
        if code == "out_of_credit":
            return VehicleError("out_of_credit", OUT_OF_CREDIT)
        return VehicleError(
            "credit_pool_exhausted",
            "today's credit-funded conversations have reached their cap; an own key "
            "still works",
        )

    # -- turns ----------------------------------------------------------------

    async def reserveTurn(
        self, session: Session, caller: Caller, request: CommandRequest
    ) -> Reservation:
        """
        Before a public turn (prompt, follow-up or steer) is accepted: in
        one step of the ledger, check the day's and the conversation's
        turns and, on credit, the credit and the day's pool, then count the
        turn and hold its run's budget, keyed by the command.

        @raise VehicleError: the limit that refuses it, or
            C{ledger_unavailable}; each refusal is counted by its code.
        """
        try:
            return await self._reserveTurn(session, caller, request)
        except VehicleError as e:
            self.metrics.turnRefused(e.code)
            raise

    async def _reserveTurn(
        self, session: Session, caller: Caller, request: CommandRequest
    ) -> Reservation:
        self.requireEnabled()
        credit = session.meta.funding == "credit"
        if session.meta.funding == "byok":
            self.rememberKey(session, caller)
            if session.sessionId not in self._keys:
                raise VehicleError(
                    "model_key_required",
                    "this conversation runs on your own key: send it as X-Model-Key",
                    {"doors": self.doors()},
                )
        elif credit:
            self._requireVerified(caller)
        await self.see(caller)
        if credit:
            await self.accounting.releaseStrays()
        command = request.id
        outcome = await answered(self.ledger.reserveTurn(TurnAsk(
            principal=caller.principal,
            session=session.sessionId,
            command=command,
            funding=session.meta.funding or "",
            day=self.ledger.today(),
            turnsPerDay=self.settings.turnsPerDay,
            sessionMaxTurns=self.settings.sessionMaxTurns,
            holdUsd=self._runBudget(session) if credit else 0.0,
            dailyCapUsd=self.settings.creditDailyCapUsd,
        )))
        if outcome not in (RESERVED, REPEATED):
            raise self._refusal(outcome)
        return Reservation(sessionId=session.sessionId, command=command, new=outcome == RESERVED)

    async def voidTurn(self, session: Session, reservation: Reservation) -> None:
        """
        The reserved turn's command was not accepted: its count and hold are
        undone (owed, should the ledger be out of reach now).
        """
        if reservation.new:
            await self.accounting.void(session, reservation.command)

    def _runBudget(self, session: Session) -> float:
        return float(session.meta.maxCostUsd or self.settings.runMaxCostUsd)

    def rememberKey(self, session: Session, caller: Caller) -> None:
        if caller.modelKey and caller.principal == session.meta.principal:
            self._keys[session.sessionId] = caller.modelKey

    def keyFor(self, session: Session) -> str | None:
        return self._keys.get(session.sessionId)

    # -- a public conversation's life (a L{vehicle.session.SessionObserver}) --

    def created(self, session: Session) -> None:
        if session.meta.funding is not None:
            self.accounting.follow(session)

    def renamed(self, session: Session) -> None:
        pass

    def settled(self, session: Session, run: RunSettled) -> None:
        if session.meta.funding is not None:
            self.accounting.settled(session, run)

    def deleting(self, session: Session) -> JSONObject | None:
        return None

    def deleted(self, session: Session) -> None:
        if session.meta.funding is not None:
            self._keys.pop(session.sessionId, None)
            self.accounting.forget(session)

    def stop(self) -> None:
        """
        The host stops: no more retries; the ledger lets go.
        """
        self.accounting.stop()
        self.ledger.close()

    # -- /account -------------------------------------------------------------

    async def account(self, caller: Caller) -> JSONObject:
        if not caller.public:
            return {"kind": "member", "principal": caller.principal}
        self.requireEnabled()
        await self.see(caller)
        figures = await answered(self.ledger.figures(caller.principal))
        out: JSONObject = {
            "kind": caller.kind,
            "principal": caller.principal,
            "turnsToday": figures.turnsToday,
            "turnsPerDay": self.settings.turnsPerDay,
            "sessionMaxTurns": self.settings.sessionMaxTurns,
            "doors": self.doors(),
            "byok": {"provider": self.settings.provider, "defaultModel": self.settings.defaultModel},
        }
        if caller.kind == "account":
            out.update(
                {
                    "email": caller.email,
                    "emailVerified": caller.emailVerified,
                    "credit": {
                        "balanceUsd": figures.balanceUsd,
                        "grantedUsd": figures.grantedUsd,
                        "spentUsd": figures.spentUsd,
                        "defaultModel": self.settings.creditDefaultModel,
                        "models": list(self.settings.creditModels),
                        "poolOpenToday": figures.poolTodayUsd < self.settings.creditDailyCapUsd,
                    },
                }
            )
        return out

    async def grant(self, caller: Caller, request: GrantRequest) -> JSONObject:
        if caller.public or caller.principal != "owner":
            raise VehicleError("forbidden", "only the owner may grant credit")
        key = f"{request.source}:{request.idempotencyKey}"
        outcome = await answered(self.ledger.addGrant(
            request.principal, float(request.amountUsd), request.source, key, request.note
        ))
        if outcome == GRANT_CONFLICT:
            raise VehicleError(
                "request_id_conflict",
                "that idempotencyKey was already used for another grant",
                {"idempotencyKey": request.idempotencyKey},
            )
        figures = await answered(self.ledger.figures(request.principal))
        return {
            "principal": request.principal,
            "granted": outcome == GRANTED,
            "balanceUsd": figures.balanceUsd,
        }
