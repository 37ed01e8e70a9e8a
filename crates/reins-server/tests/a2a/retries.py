"""Second callers with the real A2A client (a2a-sdk, JSON-RPC binding): a message sent
again with the same messageId (a client's retry after a timeout), on the same and on
the other instance, blocking and streamed; two identical sends racing; the same
decision message sent again; two approvers racing on two instances, and a late one.

Run by tests/a2a.rs: `python retries.py <base url> <second base url>`; A2A_TOKEN is a
principal with the user and approver roles, A2A_APPROVER an approver. Both servers
share one store. Every section runs; the report names the sections that failed, and
the script exits with status 1 if any did.
"""

import asyncio
import os
import sys
import traceback
import uuid

from a2a.helpers.proto_helpers import new_data_part, new_text_part
from a2a.types.a2a_pb2 import GetTaskRequest, Message, Role, SendMessageRequest
from a2a.utils.errors import A2AError, InvalidParamsError, UnsupportedOperationError

from common import client, collect, expect, fail, last_state, out, report, requirements_of

base, second = sys.argv[1], sys.argv[2]
token, approver = os.environ["A2A_TOKEN"], os.environ["A2A_APPROVER"]


def new_id(kind):
    return f"{kind}-{uuid.uuid4()}"


def text_message(text, message_id, context_id="", task_id=""):
    return SendMessageRequest(message=Message(
        role=Role.ROLE_USER, message_id=message_id, context_id=context_id, task_id=task_id,
        parts=[new_text_part(text)],
    ))


def decision_message(task, message_id, action="approve"):
    data = requirements_of(task["status"])
    return SendMessageRequest(message=Message(
        role=Role.ROLE_USER, message_id=message_id, task_id=task["id"], context_id=task["contextId"],
        parts=[new_data_part({
            "decisions": [{"requirement_id": r["id"], "action": action} for r in data["requirements"]],
            "view_token": data["view_token"],
        })],
    ))


def first_task(events):
    expect(events and "task" in events[0], f"the answer starts with the task: {events}")
    return events[0]["task"]


def final_task(events):
    """The task as the events leave it: the first task with the last status."""
    task = dict(first_task(events))
    for ev in events[1:]:
        if "statusUpdate" in ev:
            task["status"] = ev["statusUpdate"]["status"]
    return task


def pending_ids(task):
    return [r["id"] for r in requirements_of(task["status"])["requirements"]]


async def clients():
    return {
        "a": await client(base, token, streaming=False),
        "a_stream": await client(base, token),
        "b": await client(second, token, streaming=False),
        "b_stream": await client(second, token),
        "approver_b": await client(second, approver, streaming=False),
    }


async def retried_message_that_completes(c):
    """The same message three more times (blocking on A and B, streamed on A): one turn."""
    mid = new_id("retry")
    request = text_message("search cats", mid)
    first = first_task(await collect(c["a"], request))
    expect(first["status"]["state"] == "TASK_STATE_COMPLETED", f"first send: {first}")
    user = first["history"][0]
    expect(user["messageId"] == mid, f"the history keeps the client's messageId {mid}: {user}")
    for via in ("a", "b", "a_stream"):
        events = await collect(c[via], request)
        again = first_task(events)
        expect(again["id"] == first["id"] and again["contextId"] == first["contextId"],
               f"the retry on {via} is answered with the task it started: {again} vs {first['id']}")
        expect(last_state(events) == "TASK_STATE_COMPLETED", f"retry on {via}: {events}")
    t = await c["b"].get_task(GetTaskRequest(id=first["id"]))
    users = [m for m in t.history if m.role == Role.ROLE_USER]
    expect([m.message_id for m in users] == [mid], f"one user message, the client's id: {t.history}")
    # The same id for another message: refused, nothing runs.
    try:
        await collect(c["a"], text_message("search dogs instead", mid))
        fail("a different message under a used messageId was accepted")
    except InvalidParamsError as e:
        out["reused_id_error"] = e.message
    out["completed_task"] = first["id"]


async def retried_message_on_a_paused_context(c):
    """A message that pauses, sent again: the same task, still one pending call."""
    mid = new_id("pause")
    request = text_message("delete p.txt", mid)
    first = final_task(await collect(c["a_stream"], request))
    expect(first["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", f"pause: {first}")
    calls = pending_ids(first)
    expect(len(calls) == 1, f"one pending call: {first}")
    for via in ("a", "b_stream", "b"):
        again = final_task(await collect(c[via], request))
        expect(again["id"] == first["id"], f"retry on {via}: {again['id']} vs {first['id']}")
        expect(again["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", f"retry on {via}: {again}")
        expect(pending_ids(again) == calls, f"retry on {via} added a call: {pending_ids(again)} vs {calls}")
    t = await c["b"].get_task(GetTaskRequest(id=first["id"]))
    expect(len(t.status.message.parts) == 2, f"get: {t}")
    out["paused_context"] = first["contextId"]


async def racing_identical_sends(c):
    """The same message at once on A, B and A again (its run is slow: the others arrive
    while it executes): one turn, every caller gets its task."""
    mid = new_id("race")
    request = text_message("slowly search dogs", mid)
    answers = await asyncio.gather(collect(c["a"], request), collect(c["b"], request),
                                   collect(c["a_stream"], request))
    ids = {first_task(ev)["id"] for ev in answers}
    expect(len(ids) == 1, f"racing sends answered with different tasks: {ids}")
    expect(all(last_state(ev) == "TASK_STATE_COMPLETED" for ev in answers), f"racing sends: {answers}")
    # On a paused context: a new message raced twice closes the pause once and pauses once.
    base = final_task(await collect(c["a_stream"], text_message("delete r.txt", new_id("race-base"))))
    expect(base["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", f"pause: {base}")
    request = text_message("slowly delete q.txt", new_id("race-paused"), context_id=base["contextId"])
    answers = await asyncio.gather(collect(c["a_stream"], request), collect(c["b_stream"], request))
    tasks = [final_task(ev) for ev in answers]
    expect(len({t["id"] for t in tasks}) == 1, f"racing sends on a paused context: {tasks}")
    expect(all(t["status"]["state"] == "TASK_STATE_INPUT_REQUIRED" for t in tasks), f"{tasks}")
    t = await c["b"].get_task(GetTaskRequest(id=tasks[0]["id"]))
    data = [p for p in t.status.message.parts if p.HasField("data")]
    reqs = data[0].data.struct_value.fields["requirements"].list_value.values
    expect(len(reqs) == 1, f"one pending call after racing sends, not {len(reqs)}: {t}")
    out["raced_context"] = base["contextId"]


async def retried_decision(c):
    """A decision message sent again (same messageId), on the other instance: its task."""
    paused = final_task(await collect(c["a_stream"], text_message("delete d.txt", new_id("gated"))))
    expect(paused["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", f"pause: {paused}")
    request = decision_message(paused, new_id("decide"))
    first = await collect(c["a"], request)
    expect(last_state(first) == "TASK_STATE_COMPLETED", f"decision: {first}")
    for via in ("b", "a_stream"):
        events = await collect(c[via], request)
        expect(first_task(events)["id"] == paused["id"], f"decision retry on {via}: {events}")
        expect(last_state(events) == "TASK_STATE_COMPLETED", f"decision retry on {via}: {events}")


async def racing_approvals(c):
    """Two approvers deciding at once on two instances: one wins, the other gets the
    documented A2A error naming who decided; a late third gets the same."""
    losers = []
    for n in range(3):
        # Rounds 1 and 2 are slow: the winner's run still works when the loser decides.
        text = f"delete race{n}.txt" if n == 0 else f"slowly delete race{n}.txt"
        paused = final_task(await collect(c["a_stream"], text_message(text, new_id("gate"))))
        expect(paused["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", f"pause: {paused}")
        answers = await asyncio.gather(
            collect(c["a"], decision_message(paused, new_id("carol"))),
            collect(c["approver_b"], decision_message(paused, new_id("ana"))),
            return_exceptions=True,
        )
        wins = [a for a in answers if not isinstance(a, BaseException)]
        lost = [a for a in answers if isinstance(a, BaseException)]
        expect(len(wins) == 1 and len(lost) == 1, f"round {n}: {answers!r}")
        expect(last_state(wins[0]) == "TASK_STATE_COMPLETED", f"round {n}: the winner's task: {wins[0]}")
        e = lost[0]
        expect(isinstance(e, UnsupportedOperationError),
               f"round {n}: the loser got {type(e).__name__}: {e!r}")
        expect("already decided" in e.message, f"round {n}: {e.message}")
        expect(e.data and e.data.get("decidedBy") in ("carol", "ana") and e.data.get("decision") == "approve",
               f"round {n}: the error names the decision that took effect: {e.data!r}")
        losers.append({"message": e.message, "data": e.data, "context": paused["contextId"]})
        # Late: after the winner's run ended.
        try:
            await collect(c["approver_b"], decision_message(paused, new_id("late")))
            fail(f"round {n}: a late approval was accepted")
        except UnsupportedOperationError as late:
            expect(late.data == e.data, f"round {n}: late {late.data!r} vs racing {e.data!r}")
        except A2AError as late:
            fail(f"round {n}: the late approval got {type(late).__name__}: {late!r}")
    out["losers"] = losers


async def main():
    c = await clients()
    failures = {}

    async def section(name, run):
        try:
            return await run
        except Exception as e:  # a failed expectation or an unexpected error
            failures[name] = f"{type(e).__name__}: {e}"
            traceback.print_exc()
        return None

    await section("retried_message_that_completes", retried_message_that_completes(c))
    await section("retried_message_on_a_paused_context", retried_message_on_a_paused_context(c))
    await section("racing_identical_sends", racing_identical_sends(c))
    await section("retried_decision", retried_decision(c))
    await section("racing_approvals", racing_approvals(c))
    out["failures"] = failures
    expect(not failures, f"sections failed: {sorted(failures)}")


report(main)
