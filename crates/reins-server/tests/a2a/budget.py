"""A budget requirement with the real A2A client (a2a-sdk, JSON-RPC binding): a task
stops in TASK_STATE_INPUT_REQUIRED with a `budget` requirement before a tool starts;
an extension with a limit not above the spend is refused and changes nothing; so is
one above the agent's default by an approver who is no admin; the admin's extension,
sent to the second instance, lets the held call run; a later budget requirement
rejected ends the task COMPLETED with a message saying the budget ended it.

Run by tests/a2a.rs: `python budget.py <base url> <second base url>`; A2A_TOKEN is a
principal with the user and approver roles, A2A_ADMIN_TOKEN an admin. Both servers
share one store and allow one tool call per session by default.
"""

import json
import os
import sys
import uuid

from google.protobuf import json_format

from a2a.helpers.proto_helpers import new_data_part, new_text_part
from a2a.types.a2a_pb2 import GetTaskRequest, Message, Role, SendMessageRequest

from common import client, collect, expect, last_state, out, report, requirements_of

base, second = sys.argv[1], sys.argv[2]
token = os.environ["A2A_TOKEN"]
admin_token = os.environ["A2A_ADMIN_TOKEN"]


def send(parts, context_id="", task_id=""):
    return SendMessageRequest(message=Message(
        role=Role.ROLE_USER, message_id=str(uuid.uuid4()), context_id=context_id, task_id=task_id,
        parts=parts,
    ))


def decide(task, items, view_token):
    return send([new_data_part({"decisions": items, "view_token": view_token})],
                context_id=task["contextId"], task_id=task["id"])


async def delete_approved(c, file, context_id=""):
    """Sends `delete <file>` and approves its confirmation: the events of the decision."""
    paused = (await collect(c, send([new_text_part(f"delete {file}")], context_id=context_id)))[0]["task"]
    expect(paused["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", f"{file}: {paused}")
    data = requirements_of(paused["status"])
    req = data["requirements"][0]
    expect(req["kind"] == "confirmation", f"{file}: a confirmation first, got {req}")
    events = await collect(c, decide(paused, [{"requirement_id": req["id"], "action": "approve"}],
                                     data["view_token"]))
    return paused, events


async def main():
    a = await client(base, token, streaming=False)
    b = await client(second, token, streaming=False)

    first, events = await delete_approved(a, "a.txt")
    expect(last_state(events) == "TASK_STATE_COMPLETED", f"the first call fits: {events}")
    ctx = first["contextId"]

    # The second call is held back: the task waits for the budget.
    _, events = await delete_approved(a, "b.txt", ctx)
    expect(last_state(events) == "TASK_STATE_INPUT_REQUIRED", f"held: {events}")
    task = events[0]["task"]
    data = requirements_of(task["status"])
    req = data["requirements"][0]
    expect(req["kind"] == "budget", f"held: a budget requirement, got {req}")
    expect(req["budget"]["spent"]["tool_calls"] == 1 and req["budget"]["reached"] == ["tool_calls"],
           f"held: shows the spend {req}")
    out["budget_requirement"] = {"id": req["id"], "reason": req["reason"]}

    # A limit not above the spend: refused, the task unchanged.
    try:
        refused = await collect(a, decide(task, [{"requirement_id": req["id"], "action": "approve",
                                                   "edited_args": {"tool_calls": 1}}], data["view_token"]))
        expect(False, f"a low limit was accepted: {refused}")
    except Exception as e:  # the protocol's error
        if type(e).__name__ == "Failed":
            raise
        out["low_limit_error"] = str(e)
    now = json_format.MessageToDict(await b.get_task(GetTaskRequest(id=task["id"])))
    expect(now["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
           and requirements_of(now["status"])["view_token"] == data["view_token"],
           f"low: the task did not change: {now}")

    # Above the agent's default (one call), by an approver who is no admin: refused,
    # the task unchanged.
    extend = [{"requirement_id": req["id"], "action": "approve", "edited_args": {"tool_calls": 2}}]
    try:
        refused = await collect(b, decide(task, extend, data["view_token"]))
        expect(False, f"an approver extended above the default: {refused}")
    except Exception as e:  # the protocol's error
        if type(e).__name__ == "Failed":
            raise
        out["above_default_error"] = str(e)
    now = json_format.MessageToDict(await a.get_task(GetTaskRequest(id=task["id"])))
    expect(now["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
           and requirements_of(now["status"])["view_token"] == data["view_token"],
           f"above the default: the task did not change: {now}")

    # Extended by an admin, through the second instance: the held call runs.
    admin = await client(second, admin_token, streaming=False)
    events = await collect(admin, decide(task, extend, data["view_token"]))
    expect(last_state(events) == "TASK_STATE_COMPLETED", f"extended: {events}")

    # The third call: ended at the budget.
    _, events = await delete_approved(a, "c.txt", ctx)
    expect(last_state(events) == "TASK_STATE_INPUT_REQUIRED", f"held again: {events}")
    task = events[0]["task"]
    data = requirements_of(task["status"])
    req = data["requirements"][0]
    expect(req["kind"] == "budget", f"held again: {req}")
    events = await collect(a, decide(task, [{"requirement_id": req["id"], "action": "reject",
                                             "note": "enough"}], data["view_token"]))
    expect(last_state(events) == "TASK_STATE_COMPLETED", f"ended: {events}")
    final = json.dumps(events[0]["task"])
    expect("budget" in final, f"ended: the final message says the budget ended it: {final}")
    out["ended"] = True


report(main)
