"""A2A push notifications with the real A2A client (a2a-sdk): a task started with a
push configuration pushes every state change (INPUT_REQUIRED, WORKING, COMPLETED) to a
receiver on loopback, with the configured token and authentication, whether its call
is approved or rejected; a second configuration is created, read, listed and deleted
through the client's calls, and a deleted one receives nothing.

Run by tests/a2a.rs: `python push.py <base url> <second base url>`; A2A_TOKEN is a
principal with the user and approver roles. Prints one JSON document.
"""

import asyncio
import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from a2a.helpers.proto_helpers import new_data_part, new_text_message
from a2a.types.a2a_pb2 import (
    AuthenticationInfo,
    DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest,
    ListTaskPushNotificationConfigsRequest,
    Message,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    TaskPushNotificationConfig,
)
from a2a.utils.errors import A2AError

from common import client, collect, expect, fail, last_state, out, report, requirements_of

base, second = sys.argv[1], sys.argv[2]
token = os.environ["A2A_TOKEN"]

received = []
lock = threading.Lock()


class Receiver(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        with lock:
            received.append({
                "path": self.path,
                "token": self.headers.get("X-A2A-Notification-Token"),
                "authorization": self.headers.get("Authorization"),
                "body": json.loads(body),
            })
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *_):
        pass


async def main():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    a = await client(base, token)
    out["push_capability"] = a._card.capabilities.push_notifications

    config = TaskPushNotificationConfig(
        url=url + "/first", token="tok-1",
        authentication=AuthenticationInfo(scheme="Bearer", credentials="push-secret"))
    request = SendMessageRequest(
        message=new_text_message("delete a.txt", role=Role.ROLE_USER),
        configuration=SendMessageConfiguration(task_push_notification_config=config))
    events = await collect(a, request)
    expect(last_state(events) == "TASK_STATE_INPUT_REQUIRED", f"pause: {events}")
    task_id = events[0]["task"]["id"]
    context_id = events[0]["task"]["contextId"]
    data = requirements_of(events[-1]["statusUpdate"]["status"])

    # A second configuration, through the client's calls, on the other instance.
    b = await client(second, token, streaming=False)
    made = await b.create_task_push_notification_config(
        TaskPushNotificationConfig(task_id=task_id, id="second", url=url + "/second", token="tok-2"))
    expect(made.id == "second" and made.task_id == task_id, f"created: {made}")
    got = await a.get_task_push_notification_config(
        GetTaskPushNotificationConfigRequest(task_id=task_id, id="second"))
    expect(got.url == url + "/second", f"got: {got}")
    listed = await a.list_task_push_notification_configs(
        ListTaskPushNotificationConfigsRequest(task_id=task_id))
    out["listed"] = sorted(c.url.rsplit("/", 1)[1] for c in listed.configs)
    await b.delete_task_push_notification_config(
        DeleteTaskPushNotificationConfigRequest(task_id=task_id, id="second"))
    listed = await a.list_task_push_notification_configs(
        ListTaskPushNotificationConfigsRequest(task_id=task_id))
    out["listed_after_delete"] = [c.url.rsplit("/", 1)[1] for c in listed.configs]
    try:
        await a.get_task_push_notification_config(
            GetTaskPushNotificationConfigRequest(task_id=task_id, id="second"))
        fail("a deleted config was found")
    except A2AError as e:
        out["deleted_error"] = type(e).__name__
    try:
        await a.create_task_push_notification_config(
            TaskPushNotificationConfig(task_id=task_id, url="not a url"))
        fail("a config with a bad url was accepted")
    except A2AError as e:
        out["bad_url_error"] = type(e).__name__

    # The decision, as a follow-up message: the task works, then completes.
    follow = Message(
        role=Role.ROLE_USER, message_id="push-decide-1", task_id=task_id, context_id=context_id,
        parts=[new_data_part({
            "decisions": [{"requirement_id": data["requirements"][0]["id"], "action": "approve"}],
            "view_token": data["view_token"],
        })])
    events = await collect(a, SendMessageRequest(message=follow))
    expect(last_state(events) == "TASK_STATE_COMPLETED", f"decide: {events}")

    # Another task, whose call is rejected: it works, then completes, as an approved one.
    request = SendMessageRequest(
        message=new_text_message("delete b.txt", role=Role.ROLE_USER),
        configuration=SendMessageConfiguration(task_push_notification_config=TaskPushNotificationConfig(
            url=url + "/rejected", token="tok-3")))
    events = await collect(a, request)
    expect(last_state(events) == "TASK_STATE_INPUT_REQUIRED", f"pause to reject: {events}")
    rejected_id = events[0]["task"]["id"]
    waits = requirements_of(events[-1]["statusUpdate"]["status"])
    reject = Message(
        role=Role.ROLE_USER, message_id="push-reject-1", task_id=rejected_id,
        context_id=events[0]["task"]["contextId"],
        parts=[new_data_part({
            "decisions": [{"requirement_id": waits["requirements"][0]["id"], "action": "reject",
                           "note": "keep b.txt"}],
            "view_token": waits["view_token"],
        })])
    events = await collect(a, SendMessageRequest(message=reject))
    expect(last_state(events) == "TASK_STATE_COMPLETED", f"reject: {events}")

    # Until every state change of both tasks arrived (deliveries come in any order).
    every = {"TASK_STATE_INPUT_REQUIRED", "TASK_STATE_WORKING", "TASK_STATE_COMPLETED"}
    for _ in range(100):
        with lock:
            seen = {(r["path"], r["body"]["statusUpdate"]["status"]["state"]) for r in received}
        if all((p, s) in seen for p in ("/first", "/rejected") for s in every):
            break
        await asyncio.sleep(0.1)
    await asyncio.sleep(0.5)
    with lock:
        out["received"] = list(received)
    out["task_id"] = task_id
    out["rejected_task_id"] = rejected_id
    server.shutdown()


report(main)
