// The policy shadow view (admins): where the shadow Cedar policy set would have answered
// differently from the active one — the session, the tool and its arguments, what the
// active set decided (and what happened) beside what the shadow set would have decided,
// with the policy ids and when. Newest first, a page at a time.
"use strict";

const shadowState = { cursor: null, seq: 0 };

function shadowQuery(cursor) {
  const p = new URLSearchParams(location.search);
  const q = new URLSearchParams();
  if (p.get("ssession")) q.set("session", p.get("ssession"));
  if (p.get("stool")) q.set("tool", p.get("stool"));
  if (cursor) q.set("cursor", cursor);
  const qs = q.toString();
  return "/v1/policy/shadow" + (qs ? "?" + qs : "");
}

async function loadShadow(more) {
  const box = $("#shadow"), msg = $("#shadow-msg"), seq = ++shadowState.seq;
  const { status, data } = await api("GET", shadowQuery(more ? shadowState.cursor : null));
  if (seq !== shadowState.seq) return;
  if (!more) box.textContent = "";
  if (status !== 200) { say(msg, "err", refusal(status, data)); return; }
  msg.className = "status";
  $("#shadow-sets").textContent = !data.configured
    ? "This server was not given Cedar policies (Server::policy)."
    : `Active: ${data.active_policies.join(", ") || "no policies"} · shadow: ${data.shadow_policies ? (data.shadow_policies.join(", ") || "no policies") : "none set"}`;
  for (const d of data.differences) box.appendChild(renderShadow(d));
  shadowState.cursor = data.next_cursor || null;
  $("#shadow-more").hidden = !data.next_cursor;
  $("#shadow-empty").hidden = box.children.length > 0;
}

function verdictCell(a) {
  const ids = a.policies.length ? a.policies.map(p => `<code>${esc(p)}</code>`).join(", ") : `<span class="meta">no policy</span>`;
  const note = a.note ? `<div class="meta">${esc(a.note)}</div>` : "";
  return `<span class="verdict v-${esc(a.verdict)}">${esc(a.verdict)}</span> ${ids}${note}`;
}

const QUESTIONS = { call: "run without asking?", decide: "may decide?", grant: "may grant?" };

function renderShadow(d) {
  const row = document.createElement("tr");
  row.className = "shadow-diff";
  row.dataset.session = d.session_id;
  row.dataset.call = d.call;
  row.innerHTML = `<td class="meta">${esc(when(d.at))}</td>
    <td>${d.session_id ? `<a href="#" class="open">${esc(d.session_id)}</a>` : `<span class="meta">—</span>`}
      ${d.principal ? `<div class="meta">${esc(d.principal)}</div>` : ""}</td>
    <td><strong>${esc(d.tool)}</strong> <span class="meta">${esc(QUESTIONS[d.question] || d.question)}</span>
      <div class="args">${esc(d.arguments)}</div></td>
    <td class="active">${verdictCell(d.active)}</td>
    <td class="shadow">${verdictCell(d.shadow)}</td>`;
  const open = $(".open", row);
  if (open) open.onclick = e => { e.preventDefault(); openSession(d.session_id); };
  return row;
}

function wireShadow() {
  $("#shadow-more").onclick = () => loadShadow(true);
  $("#shadow-filters").onsubmit = e => {
    e.preventDefault();
    setParams({ ssession: $("#s-session").value.trim(), stool: $("#s-tool").value.trim() }, true);
    loadShadow(false);
  };
  $("#s-clear").onclick = () => {
    $("#s-session").value = ""; $("#s-tool").value = "";
    setParams({ ssession: null, stool: null }, true);
    loadShadow(false);
  };
}
