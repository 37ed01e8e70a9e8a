"""ListTasks and the card's input modes with the real A2A client (a2a-sdk, JSON-RPC
binding): `statusTimestampAfter` applied, pages that stay right while tasks are added
between them, page tokens that are not this caller's refused; JSON input (a data part,
or a text part of media type application/json) on a new message and as the decision
on a paused task.

Run by tests/a2a.rs: `python tasks.py <base url> <second base url>`; A2A_TOKEN is a
principal with the user and approver roles, A2A_OTHER another user. Both servers
share one store. Every section runs; the report names the sections that failed.
"""

import asyncio
import json
import os
import sys
import time
import traceback
import uuid

from google.protobuf.timestamp_pb2 import Timestamp

from a2a.helpers.proto_helpers import new_data_part, new_text_part
from a2a.types.a2a_pb2 import ListTasksRequest, Message, Role, SendMessageRequest
from a2a.utils.errors import InvalidParamsError

from common import client, collect, expect, fail, last_state, out, report, requirements_of

base, second = sys.argv[1], sys.argv[2]
token, other = os.environ["A2A_TOKEN"], os.environ["A2A_OTHER"]


def send(parts, context_id="", task_id=""):
    return SendMessageRequest(message=Message(
        role=Role.ROLE_USER, message_id=str(uuid.uuid4()), context_id=context_id, task_id=task_id,
        parts=parts,
    ))


def text(t):
    return send([new_text_part(t)])


def at(seconds):
    ts = Timestamp()
    ts.FromNanoseconds(int(seconds * 1e9))
    return ts


async def all_pages(c, page_size, between=None, **filters):
    """Every page of a listing; `between` runs after the first page."""
    ids, token_, pages = [], "", 0
    while True:
        page = await c.list_tasks(ListTasksRequest(page_size=page_size, page_token=token_, **filters))
        ids.extend(t.id for t in page.tasks)
        pages += 1
        token_ = page.next_page_token
        if pages == 1 and between:
            await between()
        if not token_:
            return ids, pages
        expect(pages < 100, "the pages never end")


async def status_timestamp_after(a, b):
    for n in range(3):
        expect(last_state(await collect(a, text(f"hello {n}"))) == "TASK_STATE_COMPLETED", "echo")
    everything = await b.list_tasks(ListTasksRequest())
    future = await b.list_tasks(ListTasksRequest(status_timestamp_after=at(time.time() + 3600)))
    expect(len(future.tasks) == 0 and future.total_size == 0,
           f"a future statusTimestampAfter listed {len(future.tasks)} of {len(everything.tasks)} tasks")
    await asyncio.sleep(0.05)
    cut = time.time()
    await asyncio.sleep(0.05)
    newer = [(await collect(a, text(f"after {n}")))[0]["task"]["id"] for n in range(2)]
    since = await b.list_tasks(ListTasksRequest(status_timestamp_after=at(cut)))
    expect(sorted(t.id for t in since.tasks) == sorted(newer),
           f"statusTimestampAfter: {[t.id for t in since.tasks]} vs {newer}")
    expect(since.total_size == 2, f"totalSize counts the filtered tasks: {since.total_size}")
    # Equal to a task's own status timestamp: it is listed (greater than or equal).
    newest = since.tasks[0]
    exact = await b.list_tasks(ListTasksRequest(status_timestamp_after=newest.status.timestamp))
    expect(newest.id in [t.id for t in exact.tasks], f"a task at exactly the time: {exact}")


async def pages_while_tasks_are_added(a, b):
    for n in range(5):
        await collect(a, text(f"to page {n}"))
    before = await b.list_tasks(ListTasksRequest(page_size=100))
    expect(len(before.tasks) >= 5, f"enough tasks to page: {len(before.tasks)}")
    added = []

    async def add():
        for n in range(2):
            added.append((await collect(a, text(f"between {n}")))[0]["task"]["id"])

    ids, pages = await all_pages(b, 2, between=add)
    expect(pages >= 3, f"pages: {pages}")
    expect(len(ids) == len(set(ids)), f"a task listed twice across pages: {ids}")
    missing = [t.id for t in before.tasks if t.id not in ids]
    expect(not missing, f"tasks missing across pages: {missing}")
    expect(not (set(ids) - {t.id for t in before.tasks}),
           f"tasks added after the first page showed on later pages: {set(ids) - {t.id for t in before.tasks}}")
    # Newest first, throughout.
    listed = await b.list_tasks(ListTasksRequest(page_size=100))
    stamps = [t.status.timestamp.ToNanoseconds() for t in listed.tasks]
    expect(stamps == sorted(stamps, reverse=True), "newest first")


async def page_tokens_that_are_not_ours(a, b, bob):
    for n in range(2):
        await collect(bob, text(f"bob {n}"))
    theirs = (await bob.list_tasks(ListTasksRequest(page_size=1))).next_page_token
    expect(theirs, "bob's first page has a next page")
    ours = (await b.list_tasks(ListTasksRequest(page_size=1))).next_page_token
    expect(ours, "our first page has a next page")
    refused = {}
    for name, tok in (("numeric", "1"), ("garbled", "not-a-token!"), ("truncated", ours[:-2]),
                      ("another principal's", theirs)):
        try:
            page = await b.list_tasks(ListTasksRequest(page_size=1, page_token=tok))
            fail(f"the {name} page token {tok!r} was accepted: {len(page.tasks)} tasks")
        except InvalidParamsError as e:
            refused[name] = e.message
    out["refused_page_tokens"] = refused


async def json_input(a):
    # A new message that is a JSON document (a data part): the model reads it.
    events = await collect(a, send([new_data_part({"query": "weather", "city": "Oslo"})]))
    expect(last_state(events) == "TASK_STATE_COMPLETED", f"a data part as a new message: {events}")
    task = events[0]["task"]
    expect("Oslo" in json.dumps(task.get("artifacts", [])), f"the model saw the JSON: {task}")
    # A decision as a text part of media type application/json, on a paused task.
    paused = (await collect(a, text("delete j.txt")))[0]["task"]
    expect(paused["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", f"pause: {paused}")
    data = requirements_of(paused["status"])
    decision = json.dumps({
        "decisions": [{"requirement_id": data["requirements"][0]["id"], "action": "approve"}],
        "view_token": data["view_token"],
    })
    part = new_text_part(decision, media_type="application/json")
    events = await collect(a, send([part], context_id=paused["contextId"], task_id=paused["id"]))
    expect(last_state(events) == "TASK_STATE_COMPLETED", f"a JSON text decision: {events}")


async def main():
    a = await client(base, token, streaming=False)
    b = await client(second, token, streaming=False)
    bob = await client(base, other, streaming=False)
    card = a._card
    out["input_modes"] = list(card.default_input_modes)
    failures = {}

    async def section(name, run):
        try:
            await run
        except Exception as e:  # a failed expectation or an unexpected error
            failures[name] = f"{type(e).__name__}: {e}"
            traceback.print_exc()

    await section("status_timestamp_after", status_timestamp_after(a, b))
    await section("pages_while_tasks_are_added", pages_while_tasks_are_added(a, b))
    await section("page_tokens_that_are_not_ours", page_tokens_that_are_not_ours(a, b, bob))
    await section("json_input", json_input(a))
    out["failures"] = failures
    expect(not failures, f"sections failed: {sorted(failures)}")


report(main)
