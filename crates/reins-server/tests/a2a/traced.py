"""Sends a message that pauses and then its approval with the real A2A client
(a2a-sdk, JSON-RPC binding), each through an httpx client that sends a W3C
`traceparent` header, as an instrumented caller does: TRACEPARENT_SEND on the message,
TRACEPARENT_DECIDE on the approval.

Run by tests/trace_context.rs: `python traced.py <base url> <second base url>`; the
token comes from A2A_TOKEN (a user who also approves). Prints one JSON document.
"""

import os
import sys

import httpx

from a2a.client import ClientConfig, create_client
from a2a.helpers.proto_helpers import new_data_part, new_text_message
from a2a.types.a2a_pb2 import Message, Role, SendMessageRequest

from common import collect, expect, last_state, out, report

base = sys.argv[1]
token = os.environ["A2A_TOKEN"]


async def traced(traceparent):
    headers = {"Authorization": f"Bearer {token}", "traceparent": traceparent}
    http = httpx.AsyncClient(headers=headers, timeout=30)
    return await create_client(base, client_config=ClientConfig(streaming=True, httpx_client=http))


async def main():
    a = await traced(os.environ["TRACEPARENT_SEND"])
    events = await collect(a, SendMessageRequest(message=new_text_message("delete a.txt", role=Role.ROLE_USER)))
    expect(last_state(events) == "TASK_STATE_INPUT_REQUIRED", f"pause: {events}")
    task = events[0]["task"]
    status = events[-1]["statusUpdate"]["status"]
    data = [p["data"] for p in status["message"]["parts"] if "data" in p][0]
    req = data["requirements"][0]

    b = await traced(os.environ["TRACEPARENT_DECIDE"])
    follow = Message(
        role=Role.ROLE_USER,
        message_id="decide-traced",
        task_id=task["id"],
        context_id=task["contextId"],
        parts=[new_data_part({
            "decisions": [{"requirement_id": req["id"], "action": "approve"}],
            "view_token": data["view_token"],
        })],
    )
    events = await collect(b, SendMessageRequest(message=follow))
    expect(last_state(events) == "TASK_STATE_COMPLETED", f"decide: {events}")
    out["context_id"] = task["contextId"]


report(main)
