// Drives a live reins-server with the real AG-UI client (@ag-ui/client's HttpAgent)
// and checks every event the server sends against @ag-ui/core's schemas.
//
// Run by tests/agui.rs: `node client.mjs <base url>`; tokens come from the
// environment (AGUI_CAROL, AGUI_ALICE, AGUI_BOB). Prints one JSON document: the events
// of each scenario (as the server sent them) and the facts the Rust test asserts on.
// Any failed expectation exits with status 1 and says which.

import { HttpAgent } from "@ag-ui/client";
import { EventSchema } from "@ag-ui/core/schemas";

const base = process.argv[2];
const tokens = {
  carol: process.env.AGUI_CAROL,
  alice: process.env.AGUI_ALICE,
  bob: process.env.AGUI_BOB,
};
const out = { scenarios: {}, facts: {} };
const invalid = [];

function fail(why) {
  console.error(`agui client: ${why}`);
  console.log(JSON.stringify(out));
  process.exit(1);
}

function expect(cond, why) {
  if (!cond) fail(why);
}

// What the server sent, read from the raw SSE body beside the client (a tee), so that
// the schema check sees the bytes on the wire, not the client's processed copy.
function teeFetch(sink) {
  return async (url, init) => {
    const res = await fetch(url, init);
    if (res.ok && res.body) {
      const copy = res.clone();
      sink.done = (async () => {
        let text = "";
        try {
          text = await copy.text();
        } catch {
          // Aborted: keep what arrived.
        }
        for (const block of text.split("\n\n")) {
          const data = block
            .split("\n")
            .filter((l) => l.startsWith("data:"))
            .map((l) => l.slice(5).replace(/^ /, ""))
            .join("\n");
          if (!data) continue;
          const ev = JSON.parse(data);
          const check = EventSchema.safeParse(ev);
          if (!check.success) {
            invalid.push({ event: ev, issues: check.error.issues });
          }
          sink.events.push(ev);
        }
      })();
    }
    return res;
  };
}

function agent(thread, who) {
  const sink = { events: [], done: Promise.resolve() };
  const a = new HttpAgent({
    url: `${base}/agui`,
    threadId: thread,
    headers: { Authorization: `Bearer ${tokens[who]}` },
    fetch: teeFetch(sink),
  });
  a.sink = sink;
  return a;
}

// One run: what the client saw finish it, and the raw events of this run.
async function run(a, params = {}) {
  a.sink.events = [];
  let finished = null;
  let error = null;
  let failed = null;
  try {
    await a.runAgent(params, {
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
  return { finished, error, failed, events: a.sink.events };
}

function say(a, text) {
  a.addMessage({ id: crypto.randomUUID(), role: "user", content: text });
}

const types = (events) => events.map((e) => e.type);

async function session(thread) {
  const res = await fetch(`${base}/v1/sessions/${encodeURIComponent(thread)}`, {
    headers: { Authorization: `Bearer ${tokens.carol}` },
  });
  return res.json();
}

// 1. A run that pauses; the interrupt read by the client; approved.
{
  const a = agent("carol/approve", "carol");
  say(a, "delete a.txt");
  const r1 = await run(a);
  expect(r1.finished?.outcome === "interrupt", `approve: first run ${JSON.stringify(r1)}`);
  expect(a.pendingInterrupts.length === 1, "approve: the client holds one pending interrupt");
  const i = a.pendingInterrupts[0];
  expect(i.reason === "tool_call" && i.toolCallId === i.id, "approve: a tool_call interrupt");
  const r2 = await run(a, { resume: [{ interruptId: i.id, status: "resolved", payload: { approved: true } }] });
  expect(r2.finished?.outcome === "success", `approve: resumed run ${JSON.stringify(r2)}`);
  expect(a.pendingInterrupts.length === 0, "approve: nothing pending after the resume");
  out.scenarios.approve = [r1.events, r2.events];

  // 5. The identical resume again (a second tab, a retry): harmless.
  const b = agent("carol/approve", "carol");
  b.messages = structuredClone(a.messages);
  const before = await session("carol/approve");
  const r3 = await run(b, { resume: [{ interruptId: i.id, status: "resolved", payload: { approved: true } }] });
  const after = await session("carol/approve");
  expect(r3.finished?.outcome === "success", `replay: ${JSON.stringify(r3)}`);
  expect(before.version === after.version, "replay: the thread did not change");
  out.scenarios.replay = [r3.events];

  // 4. A resume built from a stale view (the same interrupt, answered otherwise): refused.
  const r4 = await run(b, { resume: [{ interruptId: i.id, status: "resolved", payload: { approved: false, note: "no" } }] });
  const after2 = await session("carol/approve");
  expect(r4.error?.code === "stale_resume", `stale: ${JSON.stringify(r4)}`);
  expect(after2.version === after.version, "stale: the thread did not change");
  out.scenarios.stale = [r4.events];
}

// 2. Approve with edited arguments.
{
  const a = agent("carol/edit", "carol");
  say(a, "delete b.txt");
  const r1 = await run(a);
  const i = a.pendingInterrupts[0];
  expect(i?.responseSchema?.properties?.editedArgs, "edit: the schema offers editedArgs");
  const r2 = await run(a, {
    resume: [{ interruptId: i.id, status: "resolved", payload: { approved: true, editedArgs: { path: "c.txt" } } }],
  });
  const result = r2.events.find((e) => e.type === "TOOL_CALL_RESULT");
  expect(result?.content === "deleted c.txt", `edit: ${JSON.stringify(r2)}`);
  out.scenarios.edit = [r1.events, r2.events];
}

// 3. Reject with a note.
{
  const a = agent("carol/reject", "carol");
  say(a, "delete d.txt");
  await run(a);
  const i = a.pendingInterrupts[0];
  const r2 = await run(a, {
    resume: [{ interruptId: i.id, status: "resolved", payload: { approved: false, note: "keep it" } }],
  });
  // A rejected call never ran: no TOOL_CALL_RESULT (the spec's "not executed"), but
  // the transcript holds the honest result the model saw.
  expect(!r2.events.some((e) => e.type === "TOOL_CALL_RESULT"), "reject: nothing ran");
  const snap = r2.events.find((e) => e.type === "MESSAGES_SNAPSHOT");
  const tool = snap?.messages.find((m) => m.role === "tool" && m.toolCallId === i.id);
  expect(tool?.content.includes("keep it") && tool.error === "rejected", `reject: ${JSON.stringify(r2)}`);
  out.scenarios.reject = [r2.events];
}

// 6. User input with its schema; 8. pending interrupts block new input.
{
  const a = agent("carol/input", "carol");
  say(a, "book dinner");
  const r1 = await run(a);
  const i = a.pendingInterrupts[0];
  expect(i?.reason === "input_required" && i.responseSchema?.required?.[0] === "date", `input: ${JSON.stringify(r1)}`);
  const other = agent("carol/input", "carol");
  other.messages = structuredClone(a.messages);
  say(other, "never mind");
  const blocked = await run(other);
  expect(blocked.error?.code === "pending_interrupts", `blocked: ${JSON.stringify(blocked)}`);
  const partial = await run(a, { resume: [] });
  expect(partial.failed || partial.error, "input: an empty resume is refused");
  const r2 = await run(a, { resume: [{ interruptId: i.id, status: "resolved", payload: { date: "friday" } }] });
  const result = r2.events.find((e) => e.type === "TOOL_CALL_RESULT");
  expect(result?.content === "booked dinner on friday", `input: ${JSON.stringify(r2)}`);
  out.scenarios.input = [r1.events, r2.events];
  out.scenarios.pending_blocks_input = [blocked.events];
}

// 7. A frontend tool: the client runs it and sends its result.
{
  const tools = [
    {
      name: "pick_color",
      description: "Ask the person to pick a color",
      parameters: { type: "object", properties: { hint: { type: "string" } } },
    },
  ];
  const a = agent("carol/frontend", "carol");
  say(a, "ui sky");
  const r1 = await run(a, { tools });
  expect(r1.finished?.outcome === "success" && r1.finished.pending?.length === 1, `frontend: ${JSON.stringify(r1)}`);
  const call = r1.finished.pending[0];
  a.addMessage({ id: crypto.randomUUID(), role: "tool", toolCallId: call, content: "blue" });
  const r2 = await run(a, { tools });
  const text = r2.events.filter((e) => e.type === "TEXT_MESSAGE_CONTENT").map((e) => e.delta).join("");
  expect(text.includes("pick_color") && text.includes("blue"), `frontend: ${JSON.stringify(r2)}`);
  out.scenarios.frontend_tool = [r1.events, r2.events];
}

// 9. The client aborts mid-run: that is an interrupt.
{
  const a = agent("carol/abort", "carol");
  say(a, "slow news");
  const started = run(a);
  // The tee reads the body only at its end: watch the thread for the running tool.
  for (let n = 0; n < 200; n++) {
    const s = await session("carol/abort");
    if (s.status === "running" && (s.version ?? 0) > 0) break;
    await new Promise((r) => setTimeout(r, 25));
  }
  await new Promise((r) => setTimeout(r, 200));
  a.abortRun();
  await started;
  let s = null;
  for (let n = 0; n < 200; n++) {
    s = await session("carol/abort");
    if (s.status !== "running") break;
    await new Promise((r) => setTimeout(r, 50));
  }
  expect(s.status === "idle", `abort: the run stopped (${JSON.stringify(s)})`);
  const b = agent("carol/abort", "carol");
  const reload = await run(b);
  const snap = reload.events.find((e) => e.type === "MESSAGES_SNAPSHOT");
  const tool = snap?.messages.find((m) => m.role === "tool");
  expect(tool?.error === "interrupted", `abort: ${JSON.stringify(reload)}`);
  out.scenarios.abort_reload = [reload.events];
}

// 10. Bad input: another user's thread, a user who may not decide, an unknown interrupt,
// a body that is not a RunAgentInput.
{
  const bob = agent("carol/approve", "bob");
  say(bob, "hello");
  const r = await run(bob);
  expect(r.failed?.includes("403"), `wrong principal: ${JSON.stringify(r)}`);
  out.facts.wrong_principal = r.failed;

  const alice = agent("alice/x", "alice");
  say(alice, "delete z.txt");
  const r1 = await run(alice);
  const i = alice.pendingInterrupts[0];
  const r2 = await run(alice, { resume: [{ interruptId: i.id, status: "resolved", payload: { approved: true } }] });
  expect(r2.failed?.includes("403"), `not an approver: ${JSON.stringify(r2)}`);
  out.facts.not_an_approver = r2.failed;
  expect(r1.finished?.outcome === "interrupt", "alice's run paused");

  const c = agent("carol/approve", "carol");
  const r3 = await run(c, { resume: [{ interruptId: "nope", status: "cancelled" }] });
  expect(r3.error?.code === "unknown_interrupt", `unknown interrupt: ${JSON.stringify(r3)}`);
  out.scenarios.unknown_interrupt = [r3.events];

  const res = await fetch(`${base}/agui`, {
    method: "POST",
    headers: { Authorization: `Bearer ${tokens.carol}`, "Content-Type": "application/json" },
    body: JSON.stringify({ threadId: "carol/x", messages: "no" }),
  });
  out.facts.malformed_status = res.status;
  out.facts.malformed_body = await res.json();
}

// 11. Two identical resumes at once (a double click, a retry racing the original): one
// applies, the other is a harmless replay answered with the same outcome, never an error.
{
  const a = agent("carol/race", "carol");
  say(a, "delete race.txt");
  const r1 = await run(a);
  expect(r1.finished?.outcome === "interrupt", `race: first run ${JSON.stringify(r1)}`);
  const i = a.pendingInterrupts[0];
  const b = agent("carol/race", "carol");
  b.messages = structuredClone(a.messages);
  const answer = { resume: [{ interruptId: i.id, status: "resolved", payload: { approved: true } }] };
  const [ra, rb] = await Promise.all([run(a, answer), run(b, answer)]);
  for (const r of [ra, rb]) {
    expect(r.error === null && r.failed === null, `race: an identical resume got ${JSON.stringify(r)}`);
    expect(r.finished?.outcome === "success", `race: ${JSON.stringify(r)}`);
  }
  out.facts.race = [ra, rb].map((r) => r.finished?.outcome);
}

out.facts.invalid_events = invalid;
expect(invalid.length === 0, `events that fail @ag-ui/core's schemas: ${JSON.stringify(invalid)}`);
console.log(JSON.stringify(out));
