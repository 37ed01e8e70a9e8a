"""Drives live reins-servers with the real A2A client (a2a-sdk, JSON-RPC binding).

Run by tests/a2a.rs: `python client.py <base url> <second base url>`; the token comes
from A2A_TOKEN (a principal with the user and approver roles) and A2A_OTHER (a user
that owns nothing here). Both servers share one store. Prints one JSON document with
what the Rust test asserts on; any failed expectation exits with status 1.
"""

import asyncio
import os
import sys

from google.protobuf import json_format

from a2a.utils.errors import A2AError
from a2a.helpers.proto_helpers import new_data_part, new_text_message
from a2a.types.a2a_pb2 import (
    SendMessageConfiguration,
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Role,
    SendMessageRequest,
)

from common import client, collect, expect, fail, last_state, out, report, state_name

base, second = sys.argv[1], sys.argv[2]
token, other = os.environ["A2A_TOKEN"], os.environ["A2A_OTHER"]


async def main():
    a = await client(base, token)
    card = a._card  # the resolved card (what the factory chose the transport from)
    out["card"] = json_format.MessageToDict(card)
    expect(card.capabilities.streaming, "the card declares streaming")
    expect(any(s.id == "delete_file" for s in card.skills), "the card lists the toolkit's tools")

    # A message that pauses: INPUT_REQUIRED with the requirements as a data part.
    events = await collect(a, SendMessageRequest(message=new_text_message("delete a.txt", role=Role.ROLE_USER)))
    expect(last_state(events) == "TASK_STATE_INPUT_REQUIRED", f"pause: {events}")
    task_id = events[0]["task"]["id"]
    context_id = events[0]["task"]["contextId"]
    status = events[-1]["statusUpdate"]["status"]
    data = [p["data"] for p in status["message"]["parts"] if "data" in p][0]
    req = data["requirements"][0]
    expect(req["tool_use"]["name"] == "delete_file", f"requirement: {req}")
    out["pause_events"] = events

    # The same task read from the second instance.
    b = await client(second, token, streaming=False)
    t = await b.get_task(GetTaskRequest(id=task_id))
    expect(state_name(t.status.state) == "TASK_STATE_INPUT_REQUIRED", f"get on the second instance: {t}")

    # The decision as a follow-up message on the task, streamed to COMPLETED.
    follow = Message(
        role=Role.ROLE_USER,
        message_id="decide-1",
        task_id=task_id,
        context_id=context_id,
        parts=[new_data_part({
            "decisions": [{"requirement_id": req["id"], "action": "approve", "edited_args": {"path": "b.txt"}}],
            "view_token": data["view_token"],
        })],
    )
    events = await collect(a, SendMessageRequest(message=follow))
    expect(last_state(events) == "TASK_STATE_COMPLETED", f"decide: {events}")
    answer = [e for e in events if "artifactUpdate" in e][0]["artifactUpdate"]["artifact"]["parts"][0]["text"]
    expect("deleted b.txt" in answer, f"answer: {answer}")
    out["decide_events"] = events

    # A new message on an ended task: the protocol's error. (The same message sent
    # again would be a retry, answered with the task.)
    try:
        late = Message(role=Role.ROLE_USER, message_id="late-1", task_id=task_id, context_id=context_id,
                       parts=[new_data_part({"note": "anything else?"})])
        await collect(a, SendMessageRequest(message=late))
        fail("a message on a completed task was accepted")
    except A2AError as e:
        out["ended_task_error"] = type(e).__name__

    # Cancel = interrupt: a slow tool, cancelled from the second instance's view of it.
    slow = await collect(
        await client(base, token, streaming=False),
        SendMessageRequest(
            message=new_text_message("slow news", role=Role.ROLE_USER),
            configuration=SendMessageConfiguration(return_immediately=True),
        ),
    )
    slow_id = slow[0]["task"]["id"]
    for _ in range(100):
        t = await a.get_task(GetTaskRequest(id=slow_id))
        if state_name(t.status.state) == "TASK_STATE_WORKING":
            break
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.3)
    canceled = await a.cancel_task(CancelTaskRequest(id=slow_id))
    expect(state_name(canceled.status.state) == "TASK_STATE_CANCELED", f"cancel: {canceled}")

    # A paused task cancelled: its calls rejected, nothing run.
    events = await collect(a, SendMessageRequest(message=new_text_message("delete z.txt", role=Role.ROLE_USER)))
    paused_id = events[0]["task"]["id"]
    canceled = await b.cancel_task(CancelTaskRequest(id=paused_id))
    expect(state_name(canceled.status.state) == "TASK_STATE_CANCELED", f"cancel paused: {canceled}")

    # Listing, from the second instance.
    listed = await b.list_tasks(ListTasksRequest())
    states = sorted(state_name(t.status.state) for t in listed.tasks)
    out["listed_states"] = states
    mine = await b.list_tasks(ListTasksRequest(context_id=context_id))
    expect(len(mine.tasks) == 1 and mine.tasks[0].id == task_id, f"list by context: {mine}")

    # Bad input: an unknown task, another user's task, a bad version.
    for who, tid in ((token, "t00.nope"), (other, task_id)):
        c = await client(base, who, streaming=False)
        try:
            await c.get_task(GetTaskRequest(id=tid))
            fail(f"get_task({tid}) as another principal was answered")
        except A2AError as e:
            out.setdefault("not_found_errors", []).append(type(e).__name__)


report(main)
