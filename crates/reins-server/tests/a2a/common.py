"""What the A2A client scripts share: a client per server and token, sending and
collecting a message's events, reading a task's state, and the report.

Each script runs its `main` through `report`: it prints one JSON document (`out`) with
what the Rust test asserts on, and exits with status 1 when an expectation failed.
"""

import asyncio
import json
import sys

import httpx
from google.protobuf import json_format

from a2a.client import ClientConfig, create_client
from a2a.types.a2a_pb2 import TaskState

out = {}


class Failed(Exception):
    """An expectation that did not hold."""


def fail(why):
    raise Failed(why)


def expect(cond, why):
    if not cond:
        fail(why)


def report(main):
    """Runs `main()`, prints `out`; a failed expectation is on stderr and exits with 1."""
    try:
        asyncio.run(main())
    except Failed as e:
        print(f"a2a client: {e}", file=sys.stderr)
        print(json.dumps(out))
        sys.exit(1)
    print(json.dumps(out))


async def client(url, tok, streaming=True):
    http = httpx.AsyncClient(headers={"Authorization": f"Bearer {tok}"}, timeout=30)
    return await create_client(url, client_config=ClientConfig(streaming=streaming, httpx_client=http))


def state_name(s):
    return TaskState.Name(s)


async def collect(c, request):
    """Every StreamResponse of a send, as dicts."""
    events = []
    async for ev in c.send_message(request):
        events.append(json_format.MessageToDict(ev))
    return events


def last_state(events):
    """The last task state the events of a send show."""
    for ev in reversed(events):
        for key in ("statusUpdate", "task"):
            if key in ev:
                return ev[key]["status"]["state"]
    return None


def requirements_of(status):
    """The requirements (and view token) of an INPUT_REQUIRED status, as the data part gives them."""
    data = [p["data"] for p in status.get("message", {}).get("parts", []) if "data" in p]
    return data[0] if data else {"requirements": [], "view_token": None}
