//! The server-rendered pages of the approval links: the confirmation page an email
//! link opens (what the call does, Approve and Reject forms), and the page that says
//! what happened. Plain HTML and CSS, no script; every value is escaped.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};

/// Escapes text for HTML content and attribute values.
pub(crate) fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:0;background:#f5f6f8;color:#1d2330}\
main{max-width:640px;margin:2rem auto;padding:0 1rem}\
.card{background:#fff;border:1px solid #d8dce3;border-radius:10px;padding:1.25rem 1.5rem}\
h1{font-size:1.3rem;margin:0 0 .75rem}\
dl{display:grid;grid-template-columns:max-content 1fr;gap:.35rem 1rem;margin:0 0 1rem}\
dt{color:#5b6475}dd{margin:0}\
pre{background:#f0f2f5;border-radius:6px;padding:.75rem;overflow:auto;white-space:pre-wrap;word-break:break-word}\
code{background:#f0f2f5;padding:0 .25rem;border-radius:4px}\
form{display:inline-block;margin:.5rem .75rem 0 0;vertical-align:top}\
textarea{display:block;width:18rem;max-width:100%;margin-bottom:.5rem}\
button{font-size:1rem;padding:.5rem 1.25rem;border-radius:6px;border:1px solid transparent;cursor:pointer}\
.approve{background:#1f7a3f;color:#fff}.reject{background:#fff;color:#a12626;border-color:#a12626}\
.ok{border-left:5px solid #1f7a3f}.refused{border-left:5px solid #a12626}\
.muted{color:#5b6475;font-size:.9rem}";

/// A whole page around `body`, answered with `status`, never cached, never sending the
/// link on as a referrer, and allowed to post forms to this server only.
pub(crate) fn page(status: StatusCode, title: &str, body: &str) -> Response {
    let html = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\
         <meta name=\"robots\" content=\"noindex\">\
         <title>{title} · reins</title><style>{STYLE}</style></head>\
         <body><main>{body}</main></body></html>",
        title = esc(title)
    );
    let mut res = (status, Html(html)).into_response();
    let h = res.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'",
        ),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    res
}

/// A page that says what happened (`ok`: the decision took effect) or why nothing did.
pub(crate) fn outcome(status: StatusCode, ok: bool, title: &str, detail: &str) -> Response {
    let class = if ok { "ok" } else { "refused" };
    let body = format!(
        "<div class=\"card {class}\" id=\"outcome\" data-status=\"{code}\"><h1>{t}</h1><p id=\"detail\">{d}</p>\
         <p class=\"muted\">Nothing else is needed from you here; this page can be closed.</p></div>",
        code = status.as_u16(),
        t = esc(title),
        d = esc(detail)
    );
    page(status, title, &body)
}
