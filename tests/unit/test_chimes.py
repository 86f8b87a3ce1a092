"""
Chimes, the room's policy and the capsule, through the routes.
"""

from __future__ import annotations

import json

from tests.support.routes import TAB1, RouteTestCase


class ChimeTests(RouteTestCase):
    """
    A collaborator's chime follows the room's policy.
    """

    def chime(self, sessionId: str, requestId: str, text: str = "try the red one", **who):
        return self.call(
            "POST", f"/sessions/{sessionId}/chimes",
            {"requestId": requestId, "author": "Bea", "text": text}, **who,
        )

    def test_suggestHeldUntilAccepted(self) -> None:
        """
        Under the default C{suggest}, another person's chime is held as
        pending (C{chime.received}); the driver's C{accept_chime} turns it
        into a command the model sees attributed to its author.
        """
        sid = self.create(**TAB1)
        code, frame = self.chime(sid, "ch-1", principal="bea")
        self.assertEqual(code, 202)
        self.assertEqual(frame["type"], "chime.accepted")
        chimeId = frame["value"]["chime"]["chimeId"]
        self.assertEqual(frame["value"]["chime"]["status"], "pending")
        self.assertNotIn("text", frame["value"]["chime"])
        snapshot = self.ok("GET", f"/sessions/{sid}", **TAB1)["value"]
        self.assertEqual([c["chimeId"] for c in snapshot["chimes"]], [chimeId])
        frame = self.ok("POST", f"/sessions/{sid}/commands",
                        {"type": "accept_chime", "requestId": "acc-1", "chimeId": chimeId}, **TAB1)
        command = frame["value"]["command"]
        self.assertEqual(command["chimeAuthor"], "Bea")
        self.assertEqual(command["text"], "try the red one")
        self.assertIn("chime.resolved", self.types(sid, **TAB1))
        self.refused("chime_not_pending", "POST", f"/sessions/{sid}/commands",
                     {"type": "reject_chime", "requestId": "rej-1", "chimeId": chimeId}, **TAB1)

    def test_observeRejects(self) -> None:
        """
        Under C{observe} a chime is refused (C{chime.rejected}).
        """
        sid = self.create(**TAB1)
        self.ok("POST", f"/sessions/{sid}/commands",
                {"type": "set_room_policy", "requestId": "pol", "policy": "observe"}, **TAB1)
        code, frame = self.chime(sid, "ch-1", principal="bea")
        self.assertEqual(frame["type"], "chime.rejected")

    def test_coDriveSubmitsUnderTheLease(self) -> None:
        """
        Under C{co-drive} the chime becomes a command at once, under the
        current driver's lease.
        """
        sid = self.create(**TAB1)
        self.ok("POST", f"/sessions/{sid}/commands",
                {"type": "set_room_policy", "requestId": "pol", "policy": "co-drive"}, **TAB1)
        code, frame = self.chime(sid, "ch-1", principal="bea")
        self.assertEqual(frame["value"]["chime"]["status"], "accepted")
        self.assertEqual(frame["value"]["command"]["by"], {"principal": "alice", "clientId": "tab-1"})

    def test_otherGraphNotFound(self) -> None:
        """
        Only someone on the session's graph may chime; elsewhere it is not
        found.
        """
        sid = self.create(**TAB1)
        self.refused("not_found", "POST", f"/sessions/{sid}/chimes",
                     {"requestId": "c", "author": "Bea", "text": "hi"}, principal="bea", graph="g2")

    def test_pendingChimeSurvivesRestart(self) -> None:
        """
        A pending chime is still pending, with its text, after a restart.
        """
        sid = self.create(**TAB1)
        code, frame = self.chime(sid, "ch-1", principal="bea")
        chimeId = frame["value"]["chime"]["chimeId"]
        self.h.restart()
        frame = self.ok("POST", f"/sessions/{sid}/commands",
                        {"type": "accept_chime", "requestId": "acc-1", "chimeId": chimeId}, **TAB1)
        self.assertEqual(frame["value"]["command"]["text"], "try the red one")


class CapsuleTests(RouteTestCase):
    """
    The capsule is bounded and carries nothing secret.
    """

    def test_capsuleSafe(self) -> None:
        """
        The capsule names the session, its posture and counts, claims no
        authority, and carries no command text.
        """
        sid = self.create(**TAB1)
        self.prompt(sid, "p1", "the secret plan", **TAB1)
        frame = self.ok("GET", f"/sessions/{sid}/capsule", **TAB1)
        capsule = frame["value"]
        self.assertEqual(capsule["format"], "sophia.vehicle-session-capsule.v2")
        self.assertEqual(capsule["identity"]["sessionId"], sid)
        self.assertEqual(capsule["authority"], {"mutations": False})
        self.assertEqual(capsule["commands"]["counts"], {"accepted": 1})
        self.assertNotIn("the secret plan", json.dumps(capsule))
        self.assertEqual(capsule["posture"]["leaseHolder"], {"principal": "alice", "clientId": "tab-1"})
        self.refused("not_found", "GET", f"/sessions/{sid}/capsule", principal="bob")


class ChimeDelegationTests(RouteTestCase):
    """
    Accepting a chime starts a body, so it needs a delegation token.
    """

    harnessSettings = {"mcpUrl": "http://127.0.0.1:9/mcp"}

    def test_acceptChimeNeedsAToken(self) -> None:
        """
        With graph tools configured and no token from the owner, accepting a
        chime is C{delegation_required}; with one it is accepted.
        """
        sid = self.create(**TAB1)
        code, frame = self.call("POST", f"/sessions/{sid}/chimes",
                                {"requestId": "ch", "author": "Bea", "text": "hi"}, principal="bea")
        chimeId = frame["value"]["chime"]["chimeId"]
        body = {"type": "accept_chime", "requestId": "acc", "chimeId": chimeId}
        self.refused("delegation_required", "POST", f"/sessions/{sid}/commands", body, **TAB1)
        self.ok("POST", f"/sessions/{sid}/commands", body, token="tok-1", **TAB1)
