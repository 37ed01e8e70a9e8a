"""Agno's AgentOS serving the workload of reins-server's `server_bench`, for a
side-by-side comparison (`cargo xtask bench --server`).

One agent with one tool (`lookup`) and a scripted model: every model call sleeps
20 ms (asyncio, like a network round trip), then asks for `lookup` when the run has
no tool result yet, and answers "done" once it has. No network model, no telemetry.
AgentOS (FastAPI) serves it with uvicorn on 127.0.0.1, one process, one worker.

Usage (the bench harness runs it):
    python agentos_server.py --port-file FILE [--db memory|sqlite] [--dir DIR]
It writes the port it listens on to FILE once it is ready, and exits when its stdin
closes. The harness posts to `/agents/bench/runs` (form fields `message`,
`session_id`, `stream=false`).
"""

import argparse
import asyncio
import json
import os
import socket
import sys
import threading
import uuid

os.environ.setdefault("AGNO_TELEMETRY", "false")

import uvicorn  # noqa: E402
from agno.agent import Agent  # noqa: E402
from agno.models.base import Model  # noqa: E402
from agno.models.message import MessageMetrics  # noqa: E402
from agno.models.response import ModelResponse  # noqa: E402
from agno.os import AgentOS  # noqa: E402

MODEL_LATENCY_S = 0.020


def lookup(q: str) -> str:
    """Look something up."""
    return f"found {q}"


class SleepyScriptedModel(Model):
    """20 ms per answer; a `lookup` call first, then the text "done"."""

    def __init__(self):
        super().__init__(id="scripted-20ms", name="scripted-20ms", provider="bench")

    @staticmethod
    def _answer(messages):
        has_result = any(getattr(m, "role", None) == "tool" for m in (messages or []))
        if has_result:
            return ModelResponse(role="assistant", content="done", response_usage=MessageMetrics())
        call = {
            "id": f"call_{uuid.uuid4().hex[:12]}",
            "type": "function",
            "function": {"name": "lookup", "arguments": json.dumps({"q": "x"})},
        }
        return ModelResponse(role="assistant", tool_calls=[call], response_usage=MessageMetrics())

    def invoke(self, *args, **kwargs):
        import time

        time.sleep(MODEL_LATENCY_S)
        return self._answer(kwargs.get("messages"))

    async def ainvoke(self, *args, **kwargs):
        await asyncio.sleep(MODEL_LATENCY_S)
        return self._answer(kwargs.get("messages"))

    def invoke_stream(self, *args, **kwargs):
        yield self.invoke(*args, **kwargs)

    async def ainvoke_stream(self, *args, **kwargs):
        yield await self.ainvoke(*args, **kwargs)

    def _parse_provider_response(self, response, **kwargs):
        return response

    def _parse_provider_response_delta(self, response):
        return response


def build_db(kind, directory):
    if kind == "memory":
        from agno.db.in_memory import InMemoryDb

        return InMemoryDb()
    if kind == "sqlite":
        from agno.db.sqlite import SqliteDb

        return SqliteDb(db_file=os.path.join(directory, "agentos.db"))
    raise SystemExit(f"unknown db `{kind}` (memory or sqlite)")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port-file", required=True)
    p.add_argument("--db", default="memory")
    p.add_argument("--dir", default=".")
    a = p.parse_args()

    db = build_db(a.db, a.dir)
    agent = Agent(
        id="bench",
        name="bench",
        model=SleepyScriptedModel(),
        tools=[lookup],
        db=db,
        telemetry=False,
    )
    agent_os = AgentOS(id="bench-os", agents=[agent], db=db, telemetry=False)
    app = agent_os.get_app()

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(4096)
    port = sock.getsockname()[1]

    config = uvicorn.Config(app, log_level="warning", access_log=False, backlog=4096)
    server = uvicorn.Server(config)

    def watch_stdin():
        while sys.stdin.buffer.read(64):
            pass
        os._exit(0)

    threading.Thread(target=watch_stdin, daemon=True).start()

    async def serve():
        task = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started:
            await asyncio.sleep(0.05)
        with open(a.port_file + ".tmp", "w") as f:
            f.write(str(port))
        os.replace(a.port_file + ".tmp", a.port_file)
        await task

    asyncio.run(serve())


if __name__ == "__main__":
    main()
