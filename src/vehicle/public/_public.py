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

from typing import Any

from attrs import define, field

from vehicle.errors import VehicleError
from vehicle.models import ModelCatalog
from vehicle.public._accounting import Accounting
from vehicle.public._ledger import Ledger
from vehicle.protocol import CreateRequest, Door, GrantRequest, JSONObject, RunBudget
from vehicle.session import Caller, RunSettled, Session
from vehicle.settings import PublicSettings


OUT_OF_CREDIT = (
    "out of credit: paste your OpenRouter key (send it as X-Model-Key) to keep talking"
)


@define(eq=False)
class Public:
    """
    The public doors and their ledger: who may open a conversation and
    take a turn, and C{/account}.  It follows every public conversation's
    life as a session observer; what its runs cost is kept by its
    L{Accounting}.
    """

    settings: PublicSettings
    ledger: Ledger
    models: ModelCatalog
    #: sessionId -> the newest key its owner sent (memory only).
    _keys: dict[str, str] = field(factory=dict, repr=False)
    accounting: Accounting = field(init=False)

    @accounting.default
    def _newAccounting(self) -> Accounting:
        return Accounting(ledger=self.ledger)

    # -- the doors ----------------------------------------------------------

    def doors(self) -> dict[str, Any]:
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

    def see(self, caller: Caller) -> None:
        """
        The first time the host sees a verified account, it gets the signup
        credit (once: the grant's key is the principal).
        """
        if caller.kind == "account" and caller.emailVerified and self.settings.signupGrantUsd > 0:
            self.ledger.grant(
                caller.principal, self.settings.signupGrantUsd, "signup",
                f"signup:{caller.principal}",
            )

    def chooseDoor(self, caller: Caller, request: CreateRequest) -> Door:
        """
        For a public caller's new session: the model, the funding and the
        run budget.

        @raise VehicleError: C{model_key_required}, C{model_not_allowed},
            C{email_unverified}, C{out_of_credit}, C{credit_pool_exhausted}.
        """
        self.requireEnabled()
        self.see(caller)
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
        self.checkCredit(caller)
        return Door(model=model, funding="credit", budget=budget)

    def checkCredit(self, caller: Caller) -> None:
        if not caller.emailVerified:
            raise VehicleError(
                "email_unverified", "an account whose email is not verified has no credit yet"
            )
        # Every accepted credit turn holds its run's budget until its
        # command ends, so runs not yet started count too; a run is checked
        # before it starts, so the balance may end below zero by at most
        # one run's budget.
        self.accounting.releaseStrays()
        if self.ledger.balance(caller.principal) - self.ledger.held(caller.principal) <= 0:
            raise VehicleError("out_of_credit", OUT_OF_CREDIT)
        if self.ledger.poolToday() + self.ledger.held() >= self.settings.creditDailyCapUsd:
            raise VehicleError(
                "credit_pool_exhausted",
                "today's credit-funded conversations have reached their cap; an own key "
                "still works",
            )

    # -- turns ----------------------------------------------------------------

    def checkTurn(self, session: Session, caller: Caller) -> None:
        """
        Before a public turn (prompt, follow-up or steer) is accepted.
        """
        self.requireEnabled()
        self.see(caller)
        if self.ledger.turnsToday(caller.principal) >= self.settings.turnsPerDay:
            raise VehicleError(
                "daily_turn_limit",
                f"you have used today's {self.settings.turnsPerDay} turns",
                {"turnsPerDay": self.settings.turnsPerDay},
            )
        if self.ledger.sessionTurns[session.sessionId] >= self.settings.sessionMaxTurns:
            raise VehicleError(
                "session_turn_limit",
                f"this conversation has had its {self.settings.sessionMaxTurns} turns",
                {"sessionMaxTurns": self.settings.sessionMaxTurns},
            )
        if session.meta.funding == "byok":
            self.rememberKey(session, caller)
            if session.sessionId not in self._keys:
                raise VehicleError(
                    "model_key_required",
                    "this conversation runs on your own key: send it as X-Model-Key",
                    {"doors": self.doors()},
                )
        elif session.meta.funding == "credit":
            self.checkCredit(caller)

    def turnTaken(self, session: Session, caller: Caller, commandId: str) -> None:
        """
        A public turn was accepted as command C{commandId}: count it and,
        on credit, hold its run's budget in the same reactor turn as
        L{checkTurn} (nothing can come between the check and the hold),
        keyed by the command.
        """
        if session.meta.funding == "credit":
            command = session.findCommand(commandId)
            # A command that already ended (its body could not start) has
            # no run to hold for.
            if command is not None and command.open:
                self.ledger.hold(
                    session.meta.principal, self._runBudget(session), session.sessionId,
                    commandId,
                )
        self.ledger.turn(caller.principal, session.sessionId, session.meta.funding or "", commandId)

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

    # -- /account -------------------------------------------------------------

    def account(self, caller: Caller) -> dict[str, Any]:
        if not caller.public:
            return {"kind": "member", "principal": caller.principal}
        self.requireEnabled()
        self.see(caller)
        out: dict[str, Any] = {
            "kind": caller.kind,
            "principal": caller.principal,
            "turnsToday": self.ledger.turnsToday(caller.principal),
            "turnsPerDay": self.settings.turnsPerDay,
            "sessionMaxTurns": self.settings.sessionMaxTurns,
            "doors": self.doors(),
            "byok": {"provider": self.settings.provider, "defaultModel": self.settings.defaultModel},
        }
        if caller.kind == "account":
            granted = round(self.ledger.granted[caller.principal], 9)
            spent = round(self.ledger.spent[caller.principal], 9)
            out.update(
                {
                    "email": caller.email,
                    "emailVerified": caller.emailVerified,
                    "credit": {
                        "balanceUsd": round(granted - spent, 9),
                        "grantedUsd": granted,
                        "spentUsd": spent,
                        "defaultModel": self.settings.creditDefaultModel,
                        "models": list(self.settings.creditModels),
                        "poolOpenToday": self.ledger.poolToday() < self.settings.creditDailyCapUsd,
                    },
                }
            )
        return out

    def grant(self, caller: Caller, request: GrantRequest) -> JSONObject:
        if caller.public or caller.principal != "owner":
            raise VehicleError("forbidden", "only the owner may grant credit")
        key = f"{request.source}:{request.idempotencyKey}"
        known = self.ledger.grants.get(key)
        if known is not None and known != (request.principal, float(request.amountUsd)):
            raise VehicleError(
                "request_id_conflict",
                "that idempotencyKey was already used for another grant",
                {"idempotencyKey": request.idempotencyKey},
            )
        created = self.ledger.grant(
            request.principal, float(request.amountUsd), request.source, key, request.note
        )
        return {
            "principal": request.principal,
            "granted": created,
            "balanceUsd": self.ledger.balance(request.principal),
        }
