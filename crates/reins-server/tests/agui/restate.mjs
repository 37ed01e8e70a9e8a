// Drives a reins-server that fronts a Restate deployment (Server::backend) with the
// real AG-UI client (@ag-ui/client's HttpAgent), and checks every event the server
// sends against @ag-ui/core's schemas. Run by reins-restate's tests/server.rs (it
// shares this folder's node_modules): `node restate.mjs <base url>`, the token in
// AGUI_CAROL (a user who owns `carol/…` threads and may approve). The service is
// reins-restate's demo (`stream N` answers in N chunks; `delete PATH` calls a tool
// that needs approval; `use TOOL` calls a tool the request offers). Prints one JSON document: the facts the Rust test asserts on.

import { HttpAgent } from "@ag-ui/client";
import { EventSchema } from "@ag-ui/core/schemas";

const base = process.argv[2];
const token = process.env.AGUI_CAROL;
const out = {};
const invalid = [];

function fail(why) {
  console.error(`agui client (restate): ${why}`);
  console.log(JSON.stringify(out));
  process.exit(1);
}

function expect(cond, why) {
  if (!cond) fail(why);
}

// The raw SSE body beside the client (a tee): the schema check sees the wire's bytes.
function teeFetch(sink) {
  return async (url, init) => {
    const res = await fetch(url, init);
    if (res.ok && res.body) {
      const copy = res.clone();
      sink.done = (async () => {
        const text = await copy.text();
        for (const block of text.split("\n\n")) {
          const data = block
            .split("\n")
            .filter((l) => l.startsWith("data:"))
            .map((l) => l.slice(5).replace(/^ /, ""))
            .join("\n");
          if (!data) continue;
          const ev = JSON.parse(data);
          const check = EventSchema.safeParse(ev);
          if (!check.success) invalid.push({ event: ev, issues: check.error.issues });
          sink.events.push(ev);
        }
      })();
    }
    return res;
  };
}

function agent(thread) {
  const sink = { events: [], done: Promise.resolve() };
  const a = new HttpAgent({
    url: `${base}/agui`,
    threadId: thread,
    headers: { Authorization: `Bearer ${token}` },
    fetch: teeFetch(sink),
  });
  a.sink = sink;
  return a;
}

async function run(a, params = {}) {
  a.sink.events = [];
  let finished = null;
  let error = null;
  let failed = null;
  const deltas = [];
  try {
    await a.runAgent(params, {
      onTextMessageContentEvent(p) {
        deltas.push(p.event.delta);
      },
      onRunFinishedEvent(p) {
        finished = { outcome: p.outcome, interrupts: p.interrupts, pending: p.pendingToolCallIds };
      },
      onRunErrorEvent(p) {
        error = { code: p.event.code, message: p.event.message };
      },
      onRunFailed(p) {
        failed = String(p.error?.message ?? p.error);
      },
    });
  } catch (e) {
    failed = failed ?? String(e?.message ?? e);
  }
  await a.sink.done;
  return { finished, error, failed, deltas, events: a.sink.events };
}

function say(a, text) {
  a.addMessage({ id: crypto.randomUUID(), role: "user", content: text });
}

const types = (events) => events.map((e) => e.type);

// 1. A streamed answer: one TEXT_MESSAGE_CONTENT per delta the model streamed, before
// the stored transcript.
{
  const a = agent("carol/agui-stream");
  say(a, "stream 5");
  const r = await run(a);
  expect(r.finished?.outcome === "success", `stream: ${JSON.stringify(r)}`);
  out.stream_deltas = r.deltas;
  out.stream_types = types(r.events);
  const last = a.messages[a.messages.length - 1];
  out.stream_last_message = { role: last?.role, content: last?.content };
}

// 2. A pause as an interrupt, approved with a resume: the tool's result streams.
{
  const a = agent("carol/agui-approve");
  say(a, "delete a.txt");
  const r1 = await run(a);
  expect(r1.finished?.outcome === "interrupt", `approve: first run ${JSON.stringify(r1)}`);
  expect(a.pendingInterrupts.length === 1, "approve: one pending interrupt");
  const i = a.pendingInterrupts[0];
  const r2 = await run(a, { resume: [{ interruptId: i.id, status: "resolved", payload: { approved: true } }] });
  expect(r2.finished?.outcome === "success", `approve: resumed ${JSON.stringify(r2)}`);
  out.approve_types = [types(r1.events), types(r2.events)];
  out.approve_result = r2.events.find((e) => e.type === "TOOL_CALL_RESULT")?.content ?? null;
  out.approve_text = r2.deltas.join("");
}

// 3. Client-side tools: the backend's turn offers them to the model and pauses on a
// call of one; the client's tool message with the result goes on.
{
  const tools = [{ name: "pick_color", description: "Pick a color", parameters: { type: "object", properties: {} } }];
  const a = agent("carol/agui-tools");
  say(a, "use pick_color");
  const r1 = await run(a, { tools });
  expect(r1.finished?.outcome === "success" && r1.finished.pending?.length === 1, `tools: ${JSON.stringify(r1)}`);
  const call = r1.finished.pending[0];
  a.addMessage({ id: crypto.randomUUID(), role: "tool", toolCallId: call, content: "blue" });
  const r2 = await run(a, { tools });
  expect(r2.finished?.outcome === "success", `tools: resumed ${JSON.stringify(r2)}`);
  const snap = r2.events.find((e) => e.type === "MESSAGES_SNAPSHOT");
  out.tools_pending = r1.finished.pending;
  out.tools_answer = snap?.messages[snap.messages.length - 1]?.content ?? null;
  out.tools_error = r1.error ?? r2.error;
}

out.invalid_events = invalid;
expect(invalid.length === 0, `events that fail @ag-ui/core's schemas: ${JSON.stringify(invalid)}`);
console.log(JSON.stringify(out));
