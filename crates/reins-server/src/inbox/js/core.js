// The inbox page's common parts: the page state, API calls with the bearer token,
// escaping and wording helpers, and Server-Sent Events over fetch. The page loads its
// scripts in order (core, schema, form, cards, session, lists, webhooks, policy, start); start.js signs in
// and wires the page up.
"use strict";
window.addEventListener("error", e => { window.__err = (window.__err || "") + e.message + "; "; });
window.addEventListener("unhandledrejection", e => { window.__err = (window.__err || "") + String(e.reason) + "; "; });
const $ = (s, el = document) => el.querySelector(s);
const state = { token: null, me: null, session: null, sessionAbort: null, inboxAbort: null, live: null };

async function api(method, path, body) {
  const res = await fetch(path, {
    method,
    headers: Object.assign({ "Authorization": "Bearer " + state.token },
                           body === undefined ? {} : { "Content-Type": "application/json" }),
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  let data = null;
  try { data = await res.json(); } catch (_) { /* empty body */ }
  return { status: res.status, data };
}

const enc = id => encodeURIComponent(id);
const esc = s => String(s).replace(/[&<>"']/g, c => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
const pretty = v => JSON.stringify(v, null, 2);
const when = t => t ? new Date(t).toLocaleString() : "";

// "1 call", "2 calls": a count with its noun.
const plural = (n, one, many) => `${n} ${Number(n) === 1 ? one : (many || one + "s")}`;

// Fills `el` with `text`, showing its `backtick` spans as <code>. Only text nodes are
// made, so nothing in `text` is read as HTML; an unpaired backtick stays as written.
function setInlineCode(el, text) {
  el.textContent = "";
  const parts = String(text == null ? "" : text).split("`");
  parts.forEach((part, i) => {
    if (i % 2 === 1 && (parts.length % 2 === 1 || i < parts.length - 1)) {
      const code = document.createElement("code");
      code.textContent = part;
      el.appendChild(code);
    } else if (part || i % 2 === 1) {
      el.appendChild(document.createTextNode((i % 2 === 1 ? "`" : "") + part));
    }
  });
}

function say(el, kind, text) {
  el.className = "status show " + kind;
  el.textContent = text;
}

function refusal(status, data) {
  const e = (data && data.error) || {};
  switch (e.code) {
    case "stale_view": return "Refused: this request changed since you opened it (someone else decided, or the run paused again). The inbox was refreshed; look again before deciding.";
    case "unknown_requirement": case "not_paused": return "Refused: this request was already decided (or is no longer pending).";
    case "expired": return "Refused: this request expired. " + (e.message || "");
    case "forbidden": return "Refused: you may not decide this. " + (e.message || "");
    case "busy": return "Refused: the session is busy with another run; try again in a moment.";
    case "already_decided": return "Refused: this request was already decided. " + (e.message || "");
    case "already_approved": return "Refused: you already approved this; it needs another approver. " + (e.message || "");
    // The message says why: a quorum the approval cannot count towards, a policy, a budget above the default.
    case "not_eligible": return "Refused: you may not decide this. " + (e.message || "");
    case "unknown_grant": return "Refused: no such grant (reload). " + (e.message || "");
    case "grant_revoked": return "Refused: that grant was already revoked. " + (e.message || "");
    case "invalid_grant": return "Refused: " + (e.message || "the grant is not valid");
    default: return `Refused (${status}): ${e.message || "unknown error"}`;
  }
}

// ---- SSE over fetch (EventSource cannot send the Authorization header) -------------
async function sse(path, onEvent, abort, lastId) {
  const headers = { "Authorization": "Bearer " + state.token, "Accept": "text/event-stream" };
  if (lastId) headers["Last-Event-ID"] = lastId;
  const res = await fetch(path, { headers, signal: abort.signal });
  if (!res.ok || !res.body) throw new Error("stream refused: " + res.status);
  const reader = res.body.getReader();
  const dec = new TextDecoder();
  let buf = "", last = lastId;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return last;
    buf += dec.decode(value, { stream: true });
    let at;
    while ((at = buf.indexOf("\n\n")) >= 0) {
      const block = buf.slice(0, at); buf = buf.slice(at + 2);
      let ev = "message", data = "", id = null;
      for (const line of block.split("\n")) {
        if (line.startsWith("event:")) ev = line.slice(6).trim();
        else if (line.startsWith("data:")) data += line.slice(5).replace(/^ /, "");
        else if (line.startsWith("id:")) id = line.slice(3).trim();
      }
      if (id) last = id;
      if (!data && ev === "message") continue;
      let parsed = data; try { parsed = JSON.parse(data); } catch (_) {}
      onEvent(ev, parsed);
    }
  }
}

// Keeps a stream open, reconnecting with Last-Event-ID.
function keepStreaming(path, onEvent, holder) {
  const abort = new AbortController();
  holder(abort);
  let lastId = null;
  (async () => {
    while (!abort.signal.aborted) {
      try { lastId = await sse(path, onEvent, abort, lastId); }
      catch (e) { if (abort.signal.aborted) return; }
      setLive(false);
      await new Promise(r => setTimeout(r, 1000));
    }
  })();
  return abort;
}

function setLive(on) { $("#live-dot").classList.toggle("live", on); }

