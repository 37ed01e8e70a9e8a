// The pending approvals: one card per requirement, refreshed live, and the decisions
// made on them (approve, possibly edited; reject with a note; user input; an external
// result; approve and grant for an hour; a budget extended with new limits or the run
// ended).
"use strict";

let inboxTimer = null;
function refreshInboxSoon() { clearTimeout(inboxTimer); inboxTimer = setTimeout(loadInbox, 150); }

// Whether a `changed` event of the inbox stream may move the cards shown. The event
// says what the session holds now (its open requirements): one that waits for
// nothing and has no card here — a run taking its steps — needs no read. Anything
// else (a call waiting, a card of that session shown, an event that names no
// session or says less) reads the inbox again.
function inboxMayHaveMoved(change) {
  if (!change || typeof change !== "object" || !change.session_id) return true;
  if (!Array.isArray(change.open_requirements) || change.open_requirements.length) return true;
  const prefix = change.session_id + "\u0000";
  return [...$("#inbox").children].some(c => (c.dataset.key || "").startsWith(prefix));
}

async function loadInbox() {
  const mine = $("#assigned-me") && $("#assigned-me").checked ? "&assigned=me" : "";
  const { status, data } = await api("GET", "/v1/requirements?status=pending&limit=100" + mine);
  if (status !== 200) return;
  const box = $("#inbox");
  const seen = new Set();
  for (const item of data.items) {
    const key = item.session_id + "\u0000" + item.requirement_id;
    seen.add(key);
    let card = [...box.children].find(c => c.dataset.key === key);
    if (!card) { card = renderCard(item); box.appendChild(card); }
    else if (!card.classList.contains("decided")) card.item = item; // keep edits, refresh the token
  }
  // A card whose decision is being sent (or was answered) stays: the requirement it
  // decides is no longer pending, and the card is where the answer shows.
  for (const card of [...box.children])
    if (!seen.has(card.dataset.key) && !card.classList.contains("decided") && !card.classList.contains("sending")) card.remove();
  for (const card of box.children) if (!card.classList.contains("decided")) { showQuorum(card, card.item); showNotified(card, card.item); }
  const n = data.items.length;
  $("#inbox-count").textContent = n ? `(${n})` : "";
  $("#inbox-empty").hidden = box.children.length > 0;
}

function renderCard(item) {
  const card = document.createElement("div");
  card.className = "card req-card";
  card.dataset.key = item.session_id + "\u0000" + item.requirement_id;
  card.dataset.req = item.requirement_id;
  card.dataset.session = item.session_id;
  card.item = item;
  const original = pretty(item.arguments);
  const expiry = item.expires_at ? ` · expires ${esc(when(item.expires_at))}` : "";
  let body = "";
  if (item.kind === "confirmation") {
    body = `<textarea class="args" spellcheck="false" aria-label="arguments">${esc(original)}</textarea>
      <div class="problem" hidden></div><div class="diff" hidden></div>
      <div class="actions">
        <button class="primary approve">Approve</button>
        <input type="text" class="note" placeholder="note for the model (why not)">
        <button class="danger reject">Reject</button>
      </div>`;
  } else if (item.kind === "user_input") {
    body = `<pre class="meta">${esc(original)}</pre><div class="input-slot"></div>
      <div class="problem" hidden></div>
      <div class="actions"><button class="primary provide">Provide input</button>
        <input type="text" class="note" placeholder="note (when rejecting)"><button class="danger reject">Reject</button></div>`;
  } else if (item.kind === "budget") {
    body = renderBudgetForm(item.arguments || {}) + `<div class="problem" hidden></div>
      <div class="actions"><button class="primary extend">Extend</button>
        <input type="text" class="note" placeholder="note (when ending the run)"><button class="danger reject">End the run</button></div>`;
  } else {
    body = `<pre class="meta">${esc(original)}</pre>
      <textarea class="external-output" placeholder="the tool's output"></textarea>
      <div class="actions"><button class="primary external">Submit result</button>
        <input type="text" class="note" placeholder="note (when rejecting)"><button class="danger reject">Reject</button></div>`;
  }
  card.innerHTML = `<div class="top"><span class="tool">${esc(item.tool)}</span><span class="kind">${esc(item.kind.replace("_", " "))}</span>
      <span class="quorum" hidden></span>
      <span class="meta">session <a class="open">${esc(item.session_id)}</a> · ${esc(when(item.created_at))}${expiry}</span></div>
    <div class="reason"></div><div class="notified" hidden></div>${body}<div class="status"></div>`;
  setInlineCode($(".reason", card), item.reason);
  const slot = $(".input-slot", card);
  if (slot) slot.replaceWith(renderInputForm(item.fields));
  showQuorum(card, item);
  showNotified(card, item);
  // A grant never stands in for a quorum: no shortcut on those cards.
  if (item.kind === "confirmation" && !item.quorum) {
    const b = document.createElement("button");
    b.className = "grant-1h";
    b.title = `approve this call, and let ${item.tool} run in ${item.session_id} without asking for the next hour (a standing grant you can revoke under Grants)`;
    b.textContent = "Approve & allow for 1 h";
    $(".actions", card).insertBefore(b, $(".note", card));
    b.onclick = () => approveAndGrant(card);
  }
  $(".open", card).onclick = () => openSession(item.session_id);
  const args = $(".args", card);
  if (args) args.addEventListener("input", () => validateArgs(card, original));
  const on = (sel, f) => { const b = $(sel, card); if (b) b.onclick = f; };
  on(".approve", () => {
    const edited = validateArgs(card, original);
    if (edited === undefined) return;
    const d = { requirement_id: item.requirement_id, action: "approve", shown_fingerprint: item.fingerprint };
    if (edited !== null) d.edited_args = edited;
    decide(card, d, "Approved");
  });
  on(".reject", () => {
    const note = $(".note", card).value.trim();
    const d = { requirement_id: item.requirement_id, action: "reject" };
    if (note) d.note = note;
    decide(card, d, "Rejected");
  });
  on(".provide", () => {
    const p = $(".problem", card);
    const values = readInputForm($(".input-form", card));
    // Rules on the whole answer (e.g. no other fields) once each field is right.
    const problems = values === null ? ["Nothing was sent: correct the fields marked above."]
      : checkSchema(values, card.item.fields, "");
    p.hidden = problems.length === 0; p.textContent = problems.join("; ");
    if (problems.length) return;
    decide(card, { requirement_id: item.requirement_id, action: "input", values, shown_fingerprint: item.fingerprint }, "Input sent");
  });
  on(".extend", () => {
    const limit = readBudgetForm(card);
    if (limit === undefined) return;
    decide(card, { requirement_id: item.requirement_id, action: "approve", edited_args: limit, shown_fingerprint: item.fingerprint }, "Extended");
  });
  on(".external", () => {
    const output = $(".external-output", card).value;
    decide(card, { requirement_id: item.requirement_id, action: "external_result", output }, "Result sent");
  });
  return card;
}

// A budget requirement's form: per limit, what was spent and the limit now, and an
// input with the new limit (the suggested one to start with; empty: unchanged).
const BUDGET_LIMITS = [["tokens", "tokens", 1], ["cost", "cost", 0], ["tool_calls", "tool calls", 1], ["wall_secs", "active seconds", 1]];
function renderBudgetForm(b) {
  const spent = b.spent || {}, limit = b.limit || {}, suggested = b.suggested || {}, reached = b.reached || [];
  const spentOf = k => k === "wall_secs" ? Math.floor((spent.wall_ms || 0) / 1000) : (spent[k] || 0);
  const rows = BUDGET_LIMITS.map(([k, label, whole]) => {
    const now = limit[k] === undefined ? "no limit" : limit[k];
    const value = suggested[k] === undefined ? "" : suggested[k];
    return `<label class="budget-limit${reached.includes(k) ? " reached" : ""}" data-limit="${k}">
      <span class="grow">${esc(label)} <span class="meta">spent ${esc(spentOf(k))} of ${esc(now)}${reached.includes(k) ? " · reached" : ""}</span></span>
      <input type="number" min="0" step="${whole ? 1 : "any"}" name="${k}" value="${esc(value)}" aria-label="new ${esc(label)} limit"></label>`;
  }).join("");
  return `<div class="budget-form"><div class="meta">New limits (empty: as it is):</div>${rows}</div>`;
}

// The new limit from a budget card's form, or undefined (with the problem shown).
function readBudgetForm(card) {
  const p = $(".problem", card), out = {}, problems = [];
  for (const [k, label, whole] of BUDGET_LIMITS) {
    const raw = $(`input[name="${k}"]`, card).value.trim();
    if (raw === "") continue;
    const n = Number(raw);
    if (!Number.isFinite(n) || n < 0 || (whole && !Number.isInteger(n))) {
      problems.push(`${label}: ${whole ? "a whole number" : "a number"} of at least 0`);
    } else out[k] = n;
  }
  p.hidden = problems.length === 0; p.textContent = problems.join("; ");
  return problems.length ? undefined : out;
}

// The edited arguments: null when unchanged, undefined when invalid.
function validateArgs(card, original) {
  const ta = $(".args", card), p = $(".problem", card), d = $(".diff", card);
  let value;
  try { value = JSON.parse(ta.value); }
  catch (e) {
    ta.classList.add("invalid"); p.hidden = false; p.textContent = "not valid JSON: " + e.message;
    d.hidden = true; setButtons(card, true, true); return undefined;
  }
  const problems = checkSchema(value, card.item.tool_schema, "");
  ta.classList.toggle("invalid", problems.length > 0);
  p.hidden = problems.length === 0; p.textContent = problems.join("; ");
  const now = pretty(value);
  const changed = now !== original;
  d.hidden = !changed;
  d.innerHTML = changed ? diffLines(original, now).map(([k, l]) =>
    `<div class="${k}">${k === "add" ? "+ " : "- "}${esc(l)}</div>`).join("") : "";
  const approve = $(".approve", card);
  if (approve) approve.textContent = changed ? "Approve edited" : "Approve";
  setButtons(card, problems.length > 0, true);
  if (problems.length) return undefined;
  return changed ? value : null;
}

function setButtons(card, disableApprove, enableOthers) {
  const a = $(".approve", card); if (a) a.disabled = disableApprove;
  if (enableOthers) { const r = $(".reject", card); if (r) r.disabled = false; }
}

// "Notified: email → ana, rita · delivered 12:01": who was told it waits, how, and
// where each delivery stands.
function showNotified(card, item) {
  const n = $(".notified", card);
  if (!n) return;
  const list = item.notified || [];
  n.hidden = list.length === 0;
  n.innerHTML = list.length ? "Notified: " + list.map(d => {
    const what = d.notice === "requirement.escalated" ? " (escalated)" : "";
    const tries = d.attempts > 1 ? `, ${plural(d.attempts, "attempt")}` : "";
    return `<span class="delivery ${esc(d.state)}" data-channel="${esc(d.channel)}" title="${esc(d.error || "")}">` +
      `${esc(d.channel)}${what} → ${esc(d.to.join(", ") || "—")} · ${esc(d.state)} ${esc(when(d.at))}${tries}</span>`;
  }).join(" · ") : "";
}

// "1 of 2 approvals (ana)": where a quorum stands.
function showQuorum(card, item) {
  const q = $(".quorum", card);
  if (!q) return;
  q.hidden = !item.quorum;
  if (!item.quorum) return;
  const by = item.quorum.approvals.map(a => a.by);
  q.textContent = `${by.length} of ${plural(item.quorum.needed, "approval")}${by.length ? " (" + by.join(", ") + ")" : ""}`;
  q.title = item.quorum.roles && item.quorum.roles.length ? `approvers with the ${item.quorum.roles.length === 1 ? "role" : "roles"}: ${item.quorum.roles.join(", ")}` : "distinct approvers";
}

async function approveAndGrant(card) {
  const item = card.item;
  const st = $(".status", card);
  const edited = validateArgs(card, pretty(item.arguments));
  if (edited === undefined) return;
  for (const b of card.querySelectorAll("button")) b.disabled = true;
  say(st, "warn", "Creating the grant…");
  const { status, data } = await api("POST", "/v1/grants", {
    tool: item.tool, session: item.session_id, ttl_seconds: 3600,
    note: `from the inbox, approving ${item.requirement_id}`,
  });
  if (status !== 201) {
    say(st, "err", "The grant was refused: " + refusal(status, data));
    for (const b of card.querySelectorAll("button")) b.disabled = false;
    return;
  }
  card.grant = data;
  const d = { requirement_id: item.requirement_id, action: "approve", shown_fingerprint: item.fingerprint };
  if (edited !== null) d.edited_args = edited;
  await decide(card, d, "Approved");
  const until = data.expires_at ? new Date(data.expires_at).toLocaleTimeString() : "revoked";
  const note = document.createElement("div");
  note.className = "meta granted";
  note.textContent = `Grant ${data.id}: ${item.tool} runs in ${item.session_id} without asking until ${until} (revoke it under Grants).`;
  st.after(note);
}

async function decide(card, decision, done) {
  const item = card.item;
  for (const b of card.querySelectorAll("button")) b.disabled = true;
  const st = $(".status", card);
  say(st, "warn", "Sending…");
  card.classList.add("sending");
  openSession(item.session_id);
  const { status, data } = await api("POST", `/v1/sessions/${enc(item.session_id)}/decisions`,
    { view_token: item.view_token, decisions: [decision] });
  card.classList.remove("sending");
  const me = state.me ? state.me.principal.name : "you";
  const stillPending = status === 200 && item.quorum && decision.action === "approve" && data.status === "paused" &&
    (data.requirements || []).some(r => r.id === item.requirement_id);
  if (stillPending) {
    // One approval of several: the card stays, with the new count.
    const got = item.quorum.approvals.length + 1;
    say(st, "ok", `${done} by ${me}: ${got} of ${plural(item.quorum.needed, "approval")}. The call runs when another approver approves.`);
    // Approving twice does not count; rejecting still closes it.
    const r = $(".reject", card); if (r) r.disabled = false;
    refreshInboxSoon();
  } else if (status === 200) {
    card.classList.add("decided");
    say(st, "ok", `${done} by ${me} — the run ${data.status === "paused" ? "paused again" : data.status}.`);
    setTimeout(() => { card.remove(); $("#inbox-empty").hidden = $("#inbox").children.length > 0; }, 4000);
  } else {
    say(st, "err", refusal(status, data));
    if (status === 409 || status === 404 || (data && data.error && data.error.code === "expired")) {
      card.classList.add("decided");
    } else {
      for (const b of card.querySelectorAll("button")) b.disabled = false;
    }
  }
  loadSession();
  refreshInboxSoon();
}

