// The webhooks view (admins): each webhook subscriber with its filters, and its latest
// deliveries with the state of each attempt; a delivery can be sent again.
"use strict";

const isAdmin = () => !!(state.me && state.me.principal.roles.includes("admin"));

async function loadWebhooks() {
  const box = $("#webhooks"), msg = $("#webhooks-msg");
  const { status, data } = await api("GET", "/v1/webhooks");
  box.textContent = "";
  if (status !== 200) { say(msg, "err", refusal(status, data)); return; }
  msg.className = "status";
  $("#webhooks-empty").hidden = data.webhooks.length > 0;
  $("#webhooks-count").textContent = data.webhooks.length ? `(${data.webhooks.length})` : "";
  for (const w of data.webhooks) {
    const card = renderWebhook(w);
    box.appendChild(card);
    const r = await api("GET", `/v1/webhooks/${enc(w.id)}/deliveries`);
    const list = $(".wh-deliveries", card);
    if (r.status !== 200) { list.textContent = refusal(r.status, r.data); continue; }
    if (!r.data.deliveries.length) list.innerHTML = `<div class="meta">No deliveries yet.</div>`;
    for (const d of r.data.deliveries) list.appendChild(renderDelivery(w, d));
  }
}

function renderWebhook(w) {
  const el = document.createElement("div");
  el.className = "card webhook";
  el.dataset.webhook = w.id;
  const filters = [
    w.event_types.length ? "events: " + w.event_types.join(", ") : "every event",
    w.tools.length ? "tools: " + w.tools.join(", ") : null,
    w.session_prefix ? `sessions: ${w.session_prefix}…` : null,
  ].filter(Boolean).join(" · ");
  el.innerHTML = `<div class="top"><span class="tool">${esc(w.url)}</span>
      <span class="meta">${esc(w.id)}</span></div>
    <div class="meta">${esc(filters)} · ${plural(w.live_secrets, "signing secret")}${w.description ? " · " + esc(w.description) : ""}</div>
    <h3 style="margin-top:.6rem">Deliveries</h3><div class="wh-deliveries"></div>`;
  return el;
}

function renderDelivery(w, d) {
  const el = document.createElement("div");
  el.className = "audit-entry wh-delivery " + (d.state === "delivered" ? "applied" : d.state === "dead" ? "refused" : "");
  el.dataset.notice = d.notice.id;
  el.dataset.state = d.state;
  const about = [d.notice.session, d.notice.tool].filter(Boolean).map(esc).join(" · ");
  const attempts = d.attempt_log.map(a =>
    `<div class="fp">#${a.attempt} ${esc(when(a.at))} · ${esc(a.outcome)}${a.error ? " · " + esc(a.error) : ""}</div>`).join("");
  el.innerHTML = `<div class="row"><span class="grow"><strong>${esc(d.notice.kind)}</strong>
      <span class="tag ${d.state === "delivered" ? "applied" : d.state === "dead" ? "refused" : ""}">${esc(d.state)}</span>
      <span class="meta">${about}</span></span>
      <button class="redeliver">Redeliver</button></div>
    <div class="fp">${esc(d.notice.id)} · ${plural(d.attempts, "attempt")}</div>${attempts}
    <div class="status"></div>`;
  $(".redeliver", el).onclick = async () => {
    const b = $(".redeliver", el);
    b.disabled = true;
    const r = await api("POST", `/v1/webhooks/${enc(w.id)}/deliveries/${enc(d.notice.id)}/redeliver`);
    if (r.status === 200) {
      say($(".status", el), "ok", "Queued again; it is sent within a moment.");
      setTimeout(loadWebhooks, 1500);
    } else {
      b.disabled = false;
      say($(".status", el), "err", refusal(r.status, r.data));
    }
  };
  return el;
}
