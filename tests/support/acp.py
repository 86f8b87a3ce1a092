"""
Editors in the tests: L{Editor} drives a C{vehicle acp} child with the
official ACP client library (C{agent-client-protocol}, imported as
C{acp}), which is asyncio's; its loop runs in a thread of its own
(L{AsyncioThread}), and each step is awaited from trial as a L{Deferred}.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any, Awaitable, Callable

from acp import ClientSideConnection, RequestError
from acp.schema import ClientCapabilities, Implementation
from twisted.internet import reactor
from twisted.internet.defer import Deferred

from tests.support.live import sleep


#: The console script, as an editor's settings name it.
VEHICLE = str(Path(sys.prefix) / "bin" / "vehicle")


class AsyncioThread:
    """
    An asyncio loop in a daemon thread; L{run} hands it a coroutine and
    gives back a L{Deferred} of its result (fired in the reactor's thread).
    """

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coroutine: Awaitable[Any]) -> Deferred[Any]:
        future = asyncio.run_coroutine_threadsafe(coroutine, self.loop)  # type: ignore[arg-type]
        d: Deferred[Any] = Deferred()

        def settle(f: concurrent.futures.Future[Any]) -> None:
            error = f.exception()
            if error is not None:
                reactor.callFromThread(d.errback, error)
            else:
                reactor.callFromThread(d.callback, f.result())

        future.add_done_callback(settle)
        return d

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


class _Recorder:
    """
    The editor's side of the connection: keeps every C{session/update},
    and when it came (C{time.perf_counter}).
    """

    def __init__(self) -> None:
        self.updates: list[tuple[str, dict[str, Any]]] = []
        self.times: list[float] = []

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.times.append(time.perf_counter())
        self.updates.append((session_id, update.model_dump(by_alias=True, exclude_none=True)))

    async def request_permission(self, *args: Any, **kwargs: Any) -> Any:
        raise RequestError.method_not_found("session/request_permission")


def vehicleEditor(loop: AsyncioThread, gardend: str, token: str, *args: str,
                  home: str, graph: str = "g1") -> "Editor":
    """
    An editor of C{vehicle acp --gardend <gardend> --graph <graph> <args>},
    with C{token} as C{$VEHICLE_TOKEN} and C{home} as C{$HOME}.
    """
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": home, "VEHICLE_TOKEN": token}
    return Editor(loop, [VEHICLE, "acp", "--gardend", gardend, "--graph", graph, *args], env)


class Editor:
    """
    One editor: an ACP agent in a child (C{argv}, with C{env}) and the ACP
    client library's connection to it.

    @ivar updates: every C{session/update}, as C{(sessionId, update)} with
        the wire's field names.
    @ivar stderr: what the child wrote on standard error.
    """

    def __init__(self, loop: AsyncioThread, argv: list[str], env: dict[str, str]) -> None:
        self.loop = loop
        self.argv = argv
        self.env = env
        self.recorder = _Recorder()
        self.stderr = b""
        self.exitCode: int | None = None

    @property
    def updates(self) -> list[tuple[str, dict[str, Any]]]:
        return self.recorder.updates

    def start(self) -> Deferred[Any]:
        """
        Start the child and initialize: fires with C{initialize}'s answer.
        """
        return self.loop.run(self._start())

    async def _start(self) -> Any:
        self.process = await asyncio.create_subprocess_exec(
            *self.argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=self.env,
            limit=64 * 1024 * 1024,
        )
        self._stderr = asyncio.ensure_future(self._readStderr())
        assert self.process.stdin is not None and self.process.stdout is not None
        self.conn = ClientSideConnection(self.recorder, self.process.stdin, self.process.stdout)
        return await self.conn.initialize(
            protocol_version=1,
            client_capabilities=ClientCapabilities(),
            client_info=Implementation(name="vehicle-tests", title="The tests", version="1"),
        )

    async def _readStderr(self) -> None:
        assert self.process.stderr is not None
        while True:
            data = await self.process.stderr.read(4096)
            if not data:
                return
            self.stderr += data

    def do(self, step: Callable[[ClientSideConnection], Awaitable[Any]]) -> Deferred[Any]:
        """
        One step on the connection (C{lambda conn: conn.prompt(...)}).
        """

        async def run() -> Any:
            return await step(self.conn)

        return self.loop.run(run())

    def close(self) -> Deferred[int]:
        """
        Close the child's input, as an editor that quits: fires with its
        exit status.
        """

        async def close() -> int:
            assert self.process.stdin is not None
            self.process.stdin.close()
            code = await asyncio.wait_for(self.process.wait(), 30)
            await self._stderr
            await self.conn.close()
            self.exitCode = code
            return code

        return self.loop.run(close())

    def texts(self, sessionId: str, kind: str = "agent_message_chunk") -> str:
        """
        The text of every C{kind} chunk for C{sessionId}, joined.
        """
        return "".join(
            u["content"]["text"] for s, u in self.updates
            if s == sessionId and u["sessionUpdate"] == kind
        )

    def of(self, sessionId: str, kind: str) -> list[dict[str, Any]]:
        return [u for s, u in self.updates if s == sessionId and u["sessionUpdate"] == kind]

    async def waitFor(self, predicate: Callable[[], bool], what: str, timeout: float = 30) -> None:
        """
        Poll (from trial's side) until C{predicate} holds.
        """
        deadline = reactor.seconds() + timeout
        while reactor.seconds() < deadline:
            if predicate():
                return
            await sleep(0.05)
        raise AssertionError(f"never: {what}; updates {self.updates}; stderr {self.stderr!r}")
