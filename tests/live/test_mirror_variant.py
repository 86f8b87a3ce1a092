"""
The mirror against a second MCP stand-in (L{tests.support._mcp_variant}) whose
answers nest otherwise and whose refusals use other words: every test of
L{tests.live.test_mirror.MirrorTests} runs again over it (issue 10, section 4).
"""

from __future__ import annotations

from tests.support._mcp_variant import VariantEndpoint, useVariant
from tests.live import test_mirror


class VariantMirrorTests(test_mirror.MirrorTests):
    """
    L{test_mirror.MirrorTests}, with the variant's C{/mcp} in place of the stand-in's.
    """

    def setUp(self) -> None:
        super().setUp()
        useVariant(self.standIn)

    async def test_variantIsInPlace(self) -> None:
        """
        The answers really differ: the workspace is wrapped and keyed by
        C{folderId}, and an existing folder is refused as a JSON-RPC error.
        """
        from vehicle.mirror import MCPClient, MirrorError
        from twisted.internet import reactor

        self.assertIsInstance(self.standIn.mcp, VariantEndpoint)
        client = MCPClient(url=self.standIn.mcpUrl, reactor=reactor)
        token = self.mint()
        await client.callTool(token, "create_folder", {"name": "x", "folderId": "f-x"})
        workspace = await client.callTool(token, "get_workspace", {})
        self.assertNotIn("folders", workspace)
        self.assertEqual(workspace["data"]["workspace"]["tree"]["nodes"][0]["folderId"], "f-x")
        try:
            await client.callTool(token, "create_folder", {"name": "x", "folderId": "f-x"})
        except MirrorError as e:
            self.assertEqual(e.code, "rpc_-32000")
        else:
            self.fail("an existing folder was made again")
