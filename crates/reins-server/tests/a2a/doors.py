"""The A2A door of reins-restate's door suite (tests/doors.rs), with the real client
(a2a-sdk, JSON-RPC binding), on whichever driver runs the server's sessions: a message
that pauses (INPUT_REQUIRED), the same message sent again (a client's retry: its task,
still one pending call), the approval as a follow-up message (COMPLETED), and the
decision message sent again (its task, nothing decided twice).

    python doors.py <base url> <base url>

A2A_TOKEN is a principal with the user and approver roles. Prints one JSON report;
exits with status 1 when an expectation failed.
"""

import os
import sys
import uuid

from a2a.helpers.proto_helpers import new_data_part, new_text_part
from a2a.types.a2a_pb2 import Message, Role, SendMessageRequest

from common import client, collect, expect, out, report, requirements_of

base = sys.argv[1]
token = os.environ["A2A_TOKEN"]


def task_of(events):
    """The task as a send's events leave it: the first task with the last status."""
    expect(events and "task" in events[0], f"the answer starts with the task: {events}")
    task = dict(events[0]["task"])
    for ev in events[1:]:
        if "statusUpdate" in ev:
            task["status"] = ev["statusUpdate"]["status"]
    return task


async def main():
    c = await client(base, token, streaming=False)
    pause = SendMessageRequest(message=Message(
        role=Role.ROLE_USER, message_id=f"door-{uuid.uuid4()}",
        parts=[new_text_part("delete a2a.txt")],
    ))
    paused = task_of(await collect(c, pause))
    expect(paused["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", f"pause: {paused}")
    pending = requirements_of(paused["status"])
    calls = [r["id"] for r in pending["requirements"]]
    expect(len(calls) == 1, f"one pending call: {paused}")

    # The client retries the same message: its task, still the one call.
    again = task_of(await collect(c, pause))
    expect(again["id"] == paused["id"], f"the retry's task: {again['id']} vs {paused['id']}")
    expect(again["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", f"retry: {again}")
    expect([r["id"] for r in requirements_of(again["status"])["requirements"]] == calls,
           f"the retry added a call: {again}")

    decide = SendMessageRequest(message=Message(
        role=Role.ROLE_USER, message_id=f"decide-{uuid.uuid4()}",
        task_id=paused["id"], context_id=paused["contextId"],
        parts=[new_data_part({
            "decisions": [{"requirement_id": calls[0], "action": "approve"}],
            "view_token": pending["view_token"],
        })],
    ))
    approved = task_of(await collect(c, decide))
    expect(approved["status"]["state"] == "TASK_STATE_COMPLETED", f"approval: {approved}")
    # The decision message again: its task, completed; nothing is decided again.
    repeated = task_of(await collect(c, decide))
    expect(repeated["id"] == paused["id"], f"the repeated decision's task: {repeated}")
    expect(repeated["status"]["state"] == "TASK_STATE_COMPLETED", f"repeated: {repeated}")

    out["task"] = paused["id"]
    out["context"] = paused["contextId"]
    out["answer"] = " ".join(
        p.get("text", "") for a in approved.get("artifacts", []) for p in a.get("parts", [])
    )


report(main)
