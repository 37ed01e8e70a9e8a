// A budget requirement over AG-UI with the real client (@ag-ui/client's HttpAgent):
// the run pauses with a `reins:budget` interrupt before a tool starts; a limit not
// above the spend is refused (RUN_ERROR, nothing changes), and so is one above the
// agent's default from an approver who is no admin; an admin's extension lets the held
// call run; a later budget interrupt answered "not approved" ends the run with a final
// message saying so. Every event is checked against @ag-ui/core's schemas.
//
// Run by tests/agui.rs: `node budget.mjs <base url>` with AGUI_CAROL (a user who
// approves) and AGUI_ADMIN set. Prints one JSON document of facts; a failed expectation
// exits with status 1 and says which.

import { HttpAgent } from "@ag-ui/client";
import { EventSchema } from "@ag-ui/core/schemas";

const base = process.argv[2];
const token = process.env.AGUI_CAROL;
const adminToken = process.env.AGUI_ADMIN;
const out = { facts: {} };
const invalid = [];

function expect(cond, why) {
  if (!cond) {
    console.error(`agui budget client: ${why}`);
    console.log(JSON.stringify(out));
    process.exit(1);
  }
}

function teeFetch(sink) {
  return async (url, init) => {
    const res = await fetch(url, init);
    if (res.ok && res.body) {
      const copy = res.clone();
      sink.done = (async () => {
        const text = await copy.text().catch(() => "");
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

const sink = { events: [], done: Promise.resolve() };
const a = new HttpAgent({
  url: `${base}/agui`,
  threadId: "carol/budget",
  headers: { Authorization: `Bearer ${token}` },
  fetch: teeFetch(sink),
});

// The admin, on the same thread (deciding what carol's run waits for).
const admin = new HttpAgent({
  url: `${base}/agui`,
  threadId: "carol/budget",
  headers: { Authorization: `Bearer ${adminToken}` },
  fetch: teeFetch(sink),
});

async function run(params = {}, agent = a) {
  sink.events = [];
  let finished = null;
  let error = null;
  try {
    await agent.runAgent(params, {
      onRunFinishedEvent(p) {
        finished = { outcome: p.outcome, interrupts: p.interrupts };
      },
      onRunErrorEvent(p) {
        error = { code: p.event.code, message: p.event.message };
      },
    });
  } catch (e) {
    error = error ?? { code: "thrown", message: String(e?.message ?? e) };
  }
  await sink.done;
  return { finished, error, events: sink.events };
}

async function session() {
  const res = await fetch(`${base}/v1/sessions/${encodeURIComponent("carol/budget")}`, {
    headers: { Authorization: `Bearer ${token}` },
  });
  return res.json();
}

async function deleteApproved(file) {
  a.addMessage({ id: crypto.randomUUID(), role: "user", content: `delete ${file}` });
  const r1 = await run();
  const i = a.pendingInterrupts[0];
  expect(r1.finished?.outcome === "interrupt" && i?.reason === "tool_call", `${file}: ${JSON.stringify(r1)}`);
  return run({ resume: [{ interruptId: i.id, status: "resolved", payload: { approved: true } }] });
}

// The first call fits the budget (one tool call).
const first = await deleteApproved("a.txt");
expect(first.finished?.outcome === "success", `first: ${JSON.stringify(first)}`);

// The second is held back: a budget interrupt instead of the tool.
const held = await deleteApproved("b.txt");
expect(held.finished?.outcome === "interrupt", `held: ${JSON.stringify(held)}`);
expect(!held.events.some((e) => e.type === "TOOL_CALL_RESULT"), "held: the tool did not start");
const b = a.pendingInterrupts[0];
expect(b?.reason === "reins:budget", `held: a budget interrupt, got ${JSON.stringify(b)}`);
expect(b.responseSchema?.properties?.limit, "held: the schema offers a new limit");
expect(b.toolCallId === undefined, "held: a budget names no tool call");
const shown = b.metadata?.reins?.arguments;
expect(shown?.spent?.tool_calls === 1 && shown?.limit?.tool_calls === 1, `held: shows the spend ${JSON.stringify(shown)}`);
out.facts.budget_interrupt = { reason: b.reason, kind: b.metadata.reins.kind, message: b.message };

// A limit not above the spend: refused, the thread unchanged.
const before = await session();
const low = await run({ resume: [{ interruptId: b.id, status: "resolved", payload: { approved: true, limit: { tool_calls: 1 } } }] });
const after = await session();
expect(low.error, `low: refused ${JSON.stringify(low)}`);
expect(before.version === after.version, "low: the thread did not change");
out.facts.low_limit_error = low.error;

// Above the agent's default (one call), from carol, who approves but is no admin:
// refused, the thread unchanged.
const extend = { resume: [{ interruptId: b.id, status: "resolved", payload: { approved: true, limit: { tool_calls: 2 } } }] };
const mine = await run(extend);
const unchanged = await session();
expect(mine.error?.code === "not_eligible", `above the default: refused ${JSON.stringify(mine)}`);
expect(before.version === unchanged.version, "above the default: the thread did not change");
out.facts.above_default_error = mine.error;

// Extended by an admin: the held call runs. Carol's page then shows the thread as it
// now stands (the admin's view of it: nothing waits).
const extended = await run(extend, admin);
expect(extended.finished?.outcome === "success", `extended: ${JSON.stringify(extended)}`);
a.setMessages(admin.messages);
a.pendingInterrupts = admin.pendingInterrupts;
expect(extended.events.some((e) => e.type === "TOOL_CALL_RESULT" && e.content === "deleted b.txt"), "extended: the held call ran");

// The third call: the person ends the run at its budget.
const held2 = await deleteApproved("c.txt");
const c = a.pendingInterrupts[0];
expect(held2.finished?.outcome === "interrupt" && c?.reason === "reins:budget", `held again: ${JSON.stringify(held2)}`);
const ended = await run({ resume: [{ interruptId: c.id, status: "resolved", payload: { approved: false, note: "enough" } }] });
expect(ended.finished?.outcome === "success", `ended: ${JSON.stringify(ended)}`);
const snap = ended.events.find((e) => e.type === "MESSAGES_SNAPSHOT");
const last = snap?.messages.at(-1);
expect(last?.role === "assistant" && last.content.includes("budget"), `ended: the final message ${JSON.stringify(last)}`);
out.facts.final_message = last.content;

expect(invalid.length === 0, `events outside the schema: ${JSON.stringify(invalid)}`);
console.log(JSON.stringify(out));
