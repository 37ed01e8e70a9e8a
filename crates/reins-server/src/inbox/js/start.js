// Signing in, and the page's start. A token is kept (in this browser's local storage)
// only once the server accepted it: one from a link's `#token=` is tried first and
// replaces the stored one only when it works, so a bad link never signs a person out.
"use strict";

const TOKEN_KEY = "reins-token";

// The token a link carries in its `#token=` fragment, taken out of the address bar.
function tokenFromLink() {
  const m = location.hash.match(/^#(?:.*&)?token=([^&]*)/);
  if (!m) return null;
  history.replaceState(null, "", location.pathname + location.search);
  try { return decodeURIComponent(m[1]).trim(); } catch (_) { return m[1].trim(); }
}

// Who `token` belongs to (`GET /v1/me`): `{status, data}`, status 0 when the server
// did not answer.
async function whoIs(token) {
  try {
    const res = await fetch("/v1/me", { headers: { "Authorization": "Bearer " + token } });
    let data = null;
    try { data = await res.json(); } catch (_) { /* empty body */ }
    return { status: res.status, data };
  } catch (_) {
    return { status: 0, data: null };
  }
}

// Why a token was not taken, for a sentence "The token … ".
function notTaken(r) {
  if (r.status === 401 || r.status === 403) return `was not accepted by this server (${r.status})`;
  if (r.status === 0) return "could not be checked: the server did not answer";
  return `could not be checked (the server answered ${r.status})`;
}

function showLogin(problem) {
  $("#app").hidden = true;
  $("#nav").hidden = true;
  $("#login").hidden = false;
  if (problem) say($("#login-status"), "err", problem);
  else $("#login-status").className = "status err";
  $("#token-input").focus();
}

function showNotice(text) {
  $("#notice-text").textContent = text;
  $("#notice").hidden = !text;
}

async function start() {
  const linked = tokenFromLink();
  const stored = localStorage.getItem(TOKEN_KEY);
  let refusedLink = null;
  if (linked && linked !== stored) {
    const r = await whoIs(linked);
    if (r.status === 200) return signIn(linked, r.data, null);
    refusedLink = `The token in the link ${notTaken(r)}.`;
  }
  if (!stored) return showLogin(refusedLink);
  const r = await whoIs(stored);
  if (r.status !== 200) {
    const which = linked === stored ? "The token in the link" : "The token kept in this browser";
    return showLogin([refusedLink, `${which} ${notTaken(r)}; paste a new one.`].filter(Boolean).join(" "));
  }
  signIn(stored, r.data, refusedLink && `${refusedLink} You are still signed in as ${r.data.principal.name} with the token kept in this browser.`);
}

// Opens the inbox as `me`, keeping `token` for the next visit.
async function signIn(token, me, notice) {
  if (state.me) return;
  localStorage.setItem(TOKEN_KEY, token);
  state.token = token;
  state.me = me;
  $("#login").hidden = true;
  $("#app").hidden = false;
  showNotice(notice);
  $("#who").textContent = `${me.principal.name} (${me.principal.roles.join(", ")})`;
  $("#nav").hidden = false;
  $("#assigned-me").onchange = () => { $("#inbox").replaceChildren(); loadInbox(); };
  $("#nav-webhooks").hidden = !isAdmin();
  $("#nav-shadow").hidden = !isAdmin();
  await loadInbox();
  keepStreaming("/v1/events", (ev, data) => {
    setLive(true);
    if (ev === "changed") {
      if (inboxMayHaveMoved(data)) refreshInboxSoon();
      refreshSessionsSoon();
    }
  }, a => state.inboxAbort = a);
  route();
}

// A link opened in this tab while the page is open changes only the fragment, so the
// page is not loaded again: its token is checked here, and kept (with a reload as its
// principal) only when the server accepts it.
window.addEventListener("hashchange", async () => {
  const linked = tokenFromLink();
  if (!linked || linked === state.token) return;
  const r = await whoIs(linked);
  if (r.status === 200) { localStorage.setItem(TOKEN_KEY, linked); location.reload(); return; }
  const refused = `The token in the link ${notTaken(r)}.`;
  if (state.me) showNotice(`${refused} You are still signed in as ${state.me.principal.name}.`);
  else say($("#login-status"), "err", refused);
});

for (const a of document.querySelectorAll("#nav a")) {
  a.onclick = e => { e.preventDefault(); setParams({ view: a.dataset.view }, true); route(); };
}
window.addEventListener("popstate", route);
$("#session-filters").addEventListener("submit", e => {
  e.preventDefault();
  setParams({ view: "sessions", status: $("#f-status").value, principal: $("#f-principal").value.trim(),
              tool: $("#f-tool").value.trim() }, true);
  loadSessions(false);
});
$("#f-status").addEventListener("change", () => $("#f-apply").click());
$("#f-clear").onclick = () => {
  setParams({ status: null, principal: null, tool: null }, true);
  route();
};
$("#sessions-more").onclick = () => loadSessions(true);
$("#grant-filters").addEventListener("submit", e => {
  e.preventDefault();
  setParams({ view: "grants", gtool: $("#g-tool").value.trim(), gprincipal: $("#g-principal").value.trim(),
              gsession: $("#g-session").value.trim(), revoked: $("#g-revoked").checked ? "1" : null }, true);
  loadGrants();
});
$("#g-revoked").addEventListener("change", () => $("#g-apply").click());
$("#g-clear").onclick = () => {
  setParams({ gtool: null, gprincipal: null, gsession: null, revoked: null }, true);
  route();
};

$("#token-save").onclick = async () => {
  const t = $("#token-input").value.trim();
  if (!t) { say($("#login-status"), "err", "Paste a token first."); return; }
  const b = $("#token-save");
  b.disabled = true;
  const r = await whoIs(t);
  b.disabled = false;
  if (r.status !== 200) { say($("#login-status"), "err", `That token ${notTaken(r)}; nothing was kept.`); return; }
  signIn(t, r.data, null);
};
$("#token-input").addEventListener("keydown", e => { if (e.key === "Enter") $("#token-save").click(); });
$("#notice-close").onclick = () => showNotice(null);
$("#open-session").onclick = () => { state.session = null; openSession($("#session-id").value.trim()); };
$("#session-id").addEventListener("keydown", e => { if (e.key === "Enter") $("#open-session").click(); });
$("#send").onclick = send;
$("#say").addEventListener("keydown", e => { if (e.key === "Enter") send(); });
$("#stop").onclick = stop;
wireShadow();
start();
