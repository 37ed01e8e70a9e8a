// The views (Pending, Sessions, Grants, Webhooks, Policy shadow) and the URL that says which is shown, the
// sessions list and the grants list.
"use strict";

// ---- views and the URL ----------------------------------------------------------------
// The view, the filters and the open session live in the query string, so a link
// shows the same screen: ?view=sessions&status=paused&tool=send_email&session=alice%2Fchat-1
const VIEWS = ["pending", "sessions", "grants", "webhooks", "shadow"];

function setParams(changes, push) {
  const p = new URLSearchParams(location.search);
  for (const [k, v] of Object.entries(changes)) {
    if (v === null || v === undefined || v === "") p.delete(k); else p.set(k, v);
  }
  const qs = p.toString();
  const url = location.pathname + (qs ? "?" + qs : "");
  if (url === location.pathname + location.search) return;
  history[push ? "pushState" : "replaceState"](null, "", url);
}

function currentView() {
  const v = new URLSearchParams(location.search).get("view");
  return VIEWS.includes(v) ? v : "pending";
}

function route() {
  const p = new URLSearchParams(location.search);
  const view = currentView();
  for (const v of VIEWS) $("#pane-" + v).hidden = v !== view;
  for (const a of document.querySelectorAll("#nav a")) a.classList.toggle("active", a.dataset.view === view);
  if (view === "sessions") {
    $("#f-status").value = p.get("status") || "";
    $("#f-principal").value = p.get("principal") || "";
    $("#f-tool").value = p.get("tool") || "";
    loadSessions(false);
  }
  if (view === "grants") {
    $("#g-tool").value = p.get("gtool") || "";
    $("#g-principal").value = p.get("gprincipal") || "";
    $("#g-session").value = p.get("gsession") || "";
    $("#g-revoked").checked = p.get("revoked") === "1";
    loadGrants();
  }
  if (view === "webhooks") loadWebhooks();
  if (view === "shadow") {
    $("#s-session").value = p.get("ssession") || "";
    $("#s-tool").value = p.get("stool") || "";
    loadShadow(false);
  }
  const sid = p.get("session");
  if (sid) openSession(sid);
}

// ---- the sessions list ----------------------------------------------------------------
const sessionsState = { cursor: null, loaded: 0, seq: 0 };
let sessionsTimer = null;
function refreshSessionsSoon() {
  if (currentView() !== "sessions") return;
  clearTimeout(sessionsTimer);
  sessionsTimer = setTimeout(() => loadSessions(false, true), 300);
}

function sessionsQuery(cursor, limit) {
  const p = new URLSearchParams(location.search);
  const q = new URLSearchParams();
  for (const k of ["status", "principal", "tool"]) if (p.get(k)) q.set(k, p.get(k));
  q.set("limit", String(limit));
  if (cursor) q.set("cursor", cursor);
  return "/v1/sessions?" + q.toString();
}

// `more`: the next page after those shown; `keep`: reload as many as are shown.
async function loadSessions(more, keep) {
  const seq = ++sessionsState.seq;
  const limit = keep ? Math.min(200, Math.max(50, sessionsState.loaded)) : 50;
  const { status, data } = await api("GET", sessionsQuery(more ? sessionsState.cursor : null, limit));
  if (seq !== sessionsState.seq) return;
  const box = $("#sessions"), msg = $("#sessions-msg");
  if (status !== 200) {
    say(msg, "err", (data && data.error && data.error.message) || `the list was refused (${status})`);
    box.innerHTML = ""; $("#sessions-more").hidden = true; $("#sessions-empty").hidden = true;
    return;
  }
  msg.className = "status";
  if (!more) { box.innerHTML = ""; sessionsState.loaded = 0; }
  for (const row of data.sessions) box.appendChild(renderSessionRow(row));
  sessionsState.loaded += data.sessions.length;
  sessionsState.cursor = data.next_cursor || null;
  $("#sessions-more").hidden = !data.next_cursor;
  $("#sessions-empty").hidden = box.children.length > 0;
  $("#sessions-count").textContent = box.children.length ? `(${box.children.length}${data.next_cursor ? "+" : ""})` : "";
}

function renderSessionRow(row) {
  const div = document.createElement("div");
  div.className = "card srow" + (row.id === state.session ? " selected" : "");
  div.tabIndex = 0;
  div.dataset.id = row.id;
  div.dataset.status = row.status;
  const waits = row.pending_count
    ? `<span class="waits">waits on ${esc(plural(row.pending_count, "call"))}: ${esc(row.pending_tools.join(", "))}</span>` : "";
  div.innerHTML = `<div class="top"><span class="sid">${esc(row.id)}</span><span class="pill ${esc(row.status)}">${esc(row.status)}</span></div>
    <div class="meta">${row.principal ? "owner " + esc(row.principal) + " · " : ""}${esc(plural(row.message_count, "message"))} · last activity ${esc(when(row.updated_at))}</div>${waits}`;
  const open = () => { state.session = null; openSession(row.id); };
  div.onclick = open;
  div.addEventListener("keydown", e => { if (e.key === "Enter") open(); });
  return div;
}

// ---- grants -------------------------------------------------------------------------
// The grants' filters are `gtool`, `gprincipal`, `gsession` and `revoked=1` in the URL.
async function loadGrants() {
  const p = new URLSearchParams(location.search);
  const q = new URLSearchParams();
  if (p.get("gtool")) q.set("tool", p.get("gtool"));
  if (p.get("gprincipal")) q.set("principal", p.get("gprincipal"));
  if (p.get("gsession")) q.set("session", p.get("gsession"));
  if (p.get("revoked") === "1") q.set("include_revoked", "true");
  const { status, data } = await api("GET", "/v1/grants?" + q.toString());
  const box = $("#grants"), msg = $("#grants-msg");
  if (status !== 200) { say(msg, "err", refusal(status, data)); box.innerHTML = ""; return; }
  msg.className = "status";
  box.innerHTML = "";
  // Newest first: the one just made is on top.
  for (const g of data.grants.slice().reverse()) box.appendChild(renderGrant(g));
  $("#grants-empty").hidden = data.grants.length > 0;
  $("#grants-count").textContent = data.grants.length ? `(${data.grants.length})` : "";
}

function renderGrant(g) {
  const div = document.createElement("div");
  div.className = "card grant";
  div.dataset.id = g.id;
  div.dataset.tool = g.tool;
  div.dataset.state = g.state;
  const scope = [g.principal ? "principal " + esc(g.principal) : "any principal",
                 g.session ? "session " + esc(g.session) : "any session"].join(" · ");
  const conds = (g.conditions || []).map(c => `<div class="cond">${esc(c.pointer || "(arguments)")} ${esc(c.op)} ${esc(JSON.stringify(c.value))}</div>`).join("");
  const life = g.state === "revoked"
    ? `revoked by ${esc(g.revoked_by || "?")} ${esc(when(g.revoked_at))}`
    : (g.expires_at ? `${g.state === "expired" ? "expired" : "expires"} ${esc(when(g.expires_at))}` : "never expires");
  const deny = g.effect === "deny"
    ? `<span class="tag deny" title="a standing rejection: calls in its scope are rejected without asking">deny rule</span>` : "";
  div.innerHTML = `<div class="top"><span class="tool">${esc(g.tool)}</span>${deny}<span class="pill ${esc(g.state)}">${esc(g.state)}</span>
      <span class="meta">${scope}</span></div>
    ${conds || `<div class="meta">any arguments</div>`}
    <div class="meta">made by ${esc(g.created_by || "?")} ${esc(when(g.created_at))} · ${life}${g.note ? " · " + esc(g.note) : ""}</div>
    <div class="meta">id ${esc(g.id)}</div>
    <div class="actions">${g.state === "revoked" ? "" : `<button class="danger revoke">Revoke</button>`}</div>
    <div class="status"></div>`;
  const b = $(".revoke", div);
  if (b) b.onclick = async () => {
    b.disabled = true;
    const { status, data } = await api("DELETE", `/v1/grants/${enc(g.id)}`);
    if (status === 200) {
      say($(".status", div), "ok", `Revoked by ${data.revoked_by || "you"}: calls of ${g.tool} ${g.effect === "deny" ? "are no longer rejected; they" : ""} ask again.`);
      setTimeout(loadGrants, 1500);
    } else {
      say($(".status", div), "err", refusal(status, data));
      b.disabled = false;
    }
  };
  return div;
}

