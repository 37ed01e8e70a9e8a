// The open session: its conversation streamed live, Stop and a message box, its
// timeline with a fork point per turn, and its audit trail.
"use strict";

// ---- the session view ---------------------------------------------------------------
function openSession(id) {
  if (!id) return;
  if (state.session === id) return;
  state.session = id;
  setParams({ session: id }, false);
  for (const r of document.querySelectorAll("#sessions .srow")) r.classList.toggle("selected", r.dataset.id === id);
  $("#session-id").value = id;
  $("#session-view").hidden = false;
  $("#audit-view").hidden = false;
  $("#audit").innerHTML = "";
  $("#sv-id").textContent = id;
  $("#transcript").innerHTML = "";
  state.live = null;
  if (state.sessionAbort) state.sessionAbort.abort();
  loadSession();
  keepStreaming(`/v1/sessions/${enc(id)}/events`, onSessionEvent, a => state.sessionAbort = a);
}

function onSessionEvent(ev, data) {
  if (ev === "text_delta") {
    if (!state.live) {
      state.live = document.createElement("div");
      state.live.className = "m assistant live";
      $("#transcript").appendChild(state.live);
    }
    state.live.textContent += data.text;
    setStatus("running");
  } else if (ev === "run_started" || ev === "resumed" || ev === "tool_execution_started") {
    setStatus("running");
    if (ev === "tool_execution_started") note(`running ${data.name}…`);
  } else if (ev === "tool_execution_chunk") {
    note(data.text);
  } else if (["state", "output", "error", "paused", "completed", "cancelled", "tool_execution_finished"].includes(ev)) {
    if (ev === "state" && data && data.session_id !== state.session) return;
    loadSession();
  }
}

function note(text) {
  let n = $("#transcript .progress");
  if (!n) { n = document.createElement("div"); n.className = "m toolresult progress"; $("#transcript").appendChild(n); }
  n.textContent = text;
}

function setStatus(s) {
  const p = $("#sv-status");
  p.textContent = s; p.className = "pill " + s;
  $("#stop").disabled = s !== "running";
}

let loading = null;
async function loadSession() {
  const id = state.session;
  if (!id) return;
  if (loading) { loading.again = true; return; }
  loading = { again: false };
  try {
    const { status, data } = await api("GET", `/v1/sessions/${enc(id)}`);
    if (id !== state.session) return;
    if (status !== 200) {
      $("#transcript").innerHTML = `<div class="empty">${esc(status === 404 ? "No such session yet: send a message to start it." : refusal(status, data))}</div>`;
      setStatus("idle");
      return;
    }
    setStatus(data.status);
    renderTranscript(data.messages);
    showOrigin(id);
    loadAudit(id);
  } finally {
    const again = loading.again; loading = null;
    if (again) loadSession();
  }
}

function renderTranscript(messages) {
  const t = $("#transcript");
  t.innerHTML = "";
  state.live = null;
  let turn = 0;
  for (const m of messages) {
    const blocks = m.content || [];
    if (m.role === "user" && !blocks.some(b => b.type === "tool_result")) {
      // A turn begins: a fork can start just before it.
      const bar = document.createElement("div");
      bar.className = "turn";
      bar.dataset.turn = turn;
      bar.innerHTML = `<span>turn ${turn + 1}</span><button class="fork-here" title="a new session with the turns before this one; calls this session made from here on are served from its record, not run again">Fork here</button>`;
      const n = turn;
      $(".fork-here", bar).onclick = () => forkAt(n);
      t.appendChild(bar);
      turn += 1;
    }
    for (const b of blocks) {
      const div = document.createElement("div");
      if (b.type === "text" && b.text) {
        div.className = "m " + (m.role === "user" ? "user" : "assistant");
        div.textContent = b.text;
      } else if (b.type === "tool_use") {
        div.className = "m toolcall";
        div.textContent = `→ ${b.name} ${JSON.stringify(b.input)}`;
      } else if (b.type === "tool_result") {
        div.className = "m toolresult";
        const o = (b.outcome && b.outcome.status) || "success";
        const text = (b.output || []).filter(x => x.type === "text").map(x => x.text).join("\n");
        const edited = b.metadata && b.metadata.executed_input ? `\n(ran with edited arguments ${JSON.stringify(b.metadata.executed_input)})` : "";
        const by = b.metadata && b.metadata.decided_by ? ` · by ${b.metadata.decided_by}` : "";
        const replayed = b.metadata && b.metadata.replayed_from ? ` <span class="replayed" title="served from the record of ${esc(b.metadata.replayed_session || "")}, not run again">replayed</span>` : "";
        div.innerHTML = `← ${esc(b.name)} <span class="outcome ${esc(o)}">${esc(o)}</span>${replayed}${esc(by)}\n${esc(text)}${esc(edited)}`;
      } else continue;
      t.appendChild(div);
    }
  }
  t.scrollTop = t.scrollHeight;
}

// ---- forks ------------------------------------------------------------------------
async function showOrigin(id) {
  const { status, data } = await api("GET", `/v1/sessions/${enc(id)}/turns`);
  if (id !== state.session) return;
  const el = $("#sv-origin");
  const o = status === 200 && data.forked_from;
  el.hidden = !o;
  if (!o) return;
  el.innerHTML = `Forked from <a class="open-source">${esc(o.source)}</a> after ${esc(plural(o.at, "message"))} · ${esc(o.served_calls)} of ${esc(plural(o.recorded_calls, "recorded call"))} replayed`;
  $(".open-source", el).onclick = () => openSession(o.source);
}

async function forkAt(turn) {
  const source = state.session;
  const id = `${source}-fork${turn + 1}-${Date.now().toString(36)}`;
  const { status, data } = await api("POST", `/v1/sessions/${enc(source)}/fork`, { new_session_id: id, before_turn: turn });
  if (status !== 201) { say($("#sv-msg"), "err", refusal(status, data)); return; }
  openSession(id);
  const n = data.recorded_calls;
  const calls = n ? `: ${plural(n, "call")} it made from there on ${n === 1 ? "is" : "are"} served from its record if asked again.`
    : " (it made no calls from there on).";
  say($("#sv-msg"), "ok", `Forked ${source} before turn ${turn + 1} into ${id}${calls}`);
}

async function send() {
  const text = $("#say").value.trim();
  if (!text || !state.session) return;
  $("#say").value = "";
  setStatus("running");
  const { status, data } = await api("POST", `/v1/sessions/${enc(state.session)}/runs`, { message: text });
  if (status !== 200) say($("#sv-msg"), "err", refusal(status, data));
  else $("#sv-msg").className = "status";
  loadSession();
}

async function stop() {
  if (!state.session) return;
  $("#stop").disabled = true;
  const { status, data } = await api("POST", `/v1/sessions/${enc(state.session)}/interrupt`);
  if (status === 202) say($("#sv-msg"), "ok", `Stop requested (${data.delivered}); the run ends at its next checkpoint.`);
  else say($("#sv-msg"), "err", refusal(status, data));
}

// ---- the audit trail ----------------------------------------------------------------
// Who decided what and when: every decision on the session's requirements, applied or
// refused, with the fingerprint of the arguments shown and (after an edit) of those
// that ran; calls reconciled after a crash and calls served from a fork's record.
async function loadAudit(id) {
  const { status, data } = await api("GET", `/v1/sessions/${enc(id)}/decisions`);
  if (id !== state.session) return;
  const box = $("#audit");
  if (status !== 200) { box.innerHTML = `<div class="empty">${esc(refusal(status, data))}</div>`; return; }
  const list = data.decisions || [];
  $("#audit-count").textContent = list.length ? `(${list.length})` : "";
  if (!list.length) { box.innerHTML = `<div class="empty">No decisions yet.</div>`; return; }
  box.innerHTML = "";
  for (const d of list) box.appendChild(renderAuditEntry(d));
}

const short = fp => fp ? String(fp).slice(0, 12) + "…" : "";

function renderAuditEntry(d) {
  const div = document.createElement("div");
  const refused = d.verdict === "refused";
  div.className = "audit-entry " + (refused ? "refused" : "applied");
  div.dataset.seq = d.seq;
  div.dataset.requirement = d.requirement_id;
  const who = d.actor && d.actor.principal ? d.actor.principal : (d.via === "recovery" ? "reins (recovery)" : "unknown");
  const tags = [];
  tags.push(refused ? `<span class="tag refused" title="${esc(d.detail || "")}">refused: ${esc(d.reason || "")}</span>` : `<span class="tag applied">applied</span>`);
  if (d.via === "recovery" || d.kind === "reconcile") tags.push(`<span class="tag reconciled" title="the process died while the call ran; the tool was asked whether it happened">reconciled</span>`);
  if (d.via === "replay" || d.via === "fork" || d.decision === "replayed") tags.push(`<span class="tag replayed" title="served from the record of the session this one was forked from, not run again">replayed</span>`);
  if (d.grant_id || d.via === "grant") tags.push(`<span class="tag grant" title="no one was asked: a standing grant allowed it">grant ${esc(d.grant_id || "")}</span>`);
  if (d.via === "policy") tags.push(`<span class="tag grant" title="the application's approval policy decided">policy</span>`);
  if (d.quorum) tags.push(`<span class="tag" title="approvals counted towards the quorum">${esc(d.quorum.approvals)} of ${esc(plural(d.quorum.needed, "approval"))}</span>`);
  const shown = pretty(d.shown_input);
  let args = "";
  if (d.executed_input !== undefined && d.executed_input !== null) {
    const ran = pretty(d.executed_input);
    args = `<div class="meta">arguments shown → executed:</div><div class="diff">${diffLines(shown, ran).map(([k, l]) =>
      `<div class="${k}">${k === "add" ? "+ " : "- "}${esc(l)}</div>`).join("")}</div>`;
  } else {
    args = `<div class="args">${esc(JSON.stringify(d.shown_input))}</div>`;
  }
  const fps = d.shown_fingerprint ? `<div class="fp">shown ${esc(d.shown_fingerprint)}${d.executed_fingerprint ? `<br>executed ${esc(d.executed_fingerprint)} (edited)` : ""}</div>` : "";
  div.innerHTML = `<div><span class="meta">#${esc(d.seq)} · ${esc(when(d.at))}</span> ${tags.join("")}</div>
    <div><span class="who">${esc(who)}</span> — ${esc(d.decision)} <span class="tool">${esc(d.tool_name)}</span>
      <span class="meta">(${esc(String(d.kind).replace("_", " "))}, via ${esc(d.via)}, ${esc(d.requirement_id)})</span></div>
    ${args}${fps}${d.note ? `<div class="meta">note: <span class="note-text"></span></div>` : ""}`;
  if (d.note) setInlineCode($(".note-text", div), d.note);
  return div;
}

