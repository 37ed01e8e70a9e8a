//! The cards' content in a real Chromium: a user-input form typed by the requirement's
//! JSON Schema (what the server stores and the tool runs with has the schema's types),
//! and reasons whose `code` spans show as code, never as HTML.

use std::sync::atomic::{AtomicU64, Ordering};

use reins_message::Role;
use reins_model::{ChatRequest, ScriptedModel, ScriptedResponse};
use reins_tool::{ToolError, ToolPolicy};
use serde_json::Value;

use super::*;

/// An order: the model names the item; a person supplies the rest.
#[derive(serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
struct OrderArgs {
    item: String,
    quantity: u32,
    price: f64,
    gift: bool,
    size: String,
    color: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    note: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tags: Option<Vec<String>>,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct WipeArgs {
    path: String,
}

/// What `order` asks a person for: one field of each kind the form handles.
fn order_fields() -> Value {
    json!({
        "type": "object",
        "properties": {
            "quantity": {"type": "integer", "minimum": 1, "default": 1, "description": "how many"},
            "price": {"type": "number", "description": "unit price"},
            "gift": {"type": "boolean", "description": "wrap it"},
            "size": {"type": "string", "enum": ["S", "M", "L"]},
            "color": {"type": "string", "default": "blue"},
            "note": {"type": "string", "description": "for the courier"},
            "tags": {"type": "array", "items": {"type": "string"}}
        },
        "required": ["quantity", "price", "gift", "size", "color"]
    })
}

/// The reason `wipe` gives: code spans, and HTML that must stay text.
const WIPE_REASON: &str = "wipes `<script>window.__pwned = 1</script>` and \
     <img src=x onerror=\"window.__pwned = 2\"> under `/tmp`";

/// The shared test model, plus `order X` (user input) and `wipe X` (a confirmation
/// with a reason full of markup).
fn respond_shop(req: &ChatRequest) -> ScriptedResponse {
    static N: AtomicU64 = AtomicU64::new(0);
    if let Some(last) = req.messages.iter().rev().find(|m| m.role != Role::System)
        && last.role == Role::User
    {
        let text = last.text();
        let id = format!("call_shop_{}", N.fetch_add(1, Ordering::Relaxed));
        if let Some(item) = text.strip_prefix("order ") {
            return ScriptedResponse::tool_call_with_id(id, "order", json!({"item": item}));
        }
        if let Some(path) = text.strip_prefix("wipe ") {
            return ScriptedResponse::tool_call_with_id(id, "wipe", json!({"path": path}));
        }
    }
    respond(req)
}

/// A server whose agent has the shared tools plus `order` and `wipe`.
async fn shop() -> TestServer {
    let ran: Ran = Default::default();
    let mut tools = toolkit(&ran);
    let r = ran.clone();
    tools
        .add(
            reins_tool::Toolkit::function("order", "Order something", move |a: OrderArgs, _| {
                let r = r.clone();
                async move {
                    let args = serde_json::to_string(&a).unwrap();
                    r.lock().unwrap().push(format!("order:{args}"));
                    Ok::<_, ToolError>(format!("ordered {} {}", a.quantity, a.item))
                }
            })
            .policy(ToolPolicy::user_input(order_fields())),
        )
        .unwrap();
    let r = ran.clone();
    tools
        .add(
            reins_tool::Toolkit::function("wipe", "Wipe a directory", move |a: WipeArgs, _| {
                let r = r.clone();
                async move {
                    r.lock().unwrap().push(format!("wipe:{}", a.path));
                    Ok::<_, ToolError>(format!("wiped {}", a.path))
                }
            })
            .policy(ToolPolicy::confirm().reason(WIPE_REASON)),
        )
        .unwrap();
    let (dir, store) = sqlite_store().await;
    let agent = reins_agent::Agent::builder()
        .model(ScriptedModel::from_fn(respond_shop))
        .toolkit(tools)
        .store_arc(store)
        .build()
        .unwrap();
    serve(agent, ran, Some(dir), |s| s).await
}

fn field(rid: &str, name: &str) -> String {
    format!("{} .field[data-name=\"{name}\"]", card(rid))
}

async fn value_of(c: &Client, css: &str) -> Value {
    c.execute(
        "const e = document.querySelector(arguments[0]); return e ? e.value : null",
        vec![json!(css)],
    )
    .await
    .unwrap()
}

async fn count(c: &Client, css: &str) -> usize {
    c.find_all(Locator::Css(css)).await.unwrap().len()
}

async fn retype(c: &Client, css: &str, text: &str) {
    let el = c.find(Locator::Css(css)).await.unwrap();
    el.clear().await.unwrap();
    el.send_keys(text).await.unwrap();
}

async fn click(c: &Client, css: &str) {
    c.find(Locator::Css(css))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
}

/// A user-input requirement whose schema has an integer (with a default), a number, a
/// boolean, a string enum, a string with a default, an optional string left empty and
/// an array: each gets its control, wrong values are named next to their field and
/// nothing is sent, and the values sent are typed, as the stored decision and the
/// tool's own arguments show; the tool runs once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typed_user_input_in_a_real_browser() {
    let Some((chromium, chromedriver)) = chromium_or_skip("typed_user_input_in_a_real_browser")
    else {
        return;
    };
    let shots = Shots::new();
    let s = shop().await;
    let r = pause(&s, "alice/order", "order tea").await;
    let driver = start_driver(&chromedriver);
    let c = browser(&driver, &chromium).await;
    // Tall enough for the whole form in the screenshot.
    c.set_window_size(1280, 1200).await.unwrap();
    c.goto(&format!("{}/#token={ANA}", s.base)).await.unwrap();
    c.wait().for_element(Locator::Css(&card(&r))).await.unwrap();

    // A control per kind, defaults filled in, required fields marked and first (in the
    // order of the schema's `required`).
    let order: Value = c
        .execute(
            "return [...document.querySelectorAll(arguments[0])].map(f => f.dataset.name)",
            vec![json!(format!("{} .field", card(&r)))],
        )
        .await
        .unwrap();
    assert_eq!(
        order,
        json!(["quantity", "price", "gift", "size", "color", "note", "tags"])
    );
    let gift = format!("{} input[type=\"checkbox\"]", field(&r, "gift"));
    assert_eq!(count(&c, &gift).await, 1, "a boolean is a checkbox");
    let size = format!("{} select", field(&r, "size"));
    assert_eq!(count(&c, &size).await, 1, "an enum is a select");
    let tags = format!("{} textarea", field(&r, "tags"));
    assert_eq!(count(&c, &tags).await, 1, "an array is a JSON text box");
    let quantity = format!("{} .input-field", field(&r, "quantity"));
    let price = format!("{} .input-field", field(&r, "price"));
    let color = format!("{} .input-field", field(&r, "color"));
    assert_eq!(value_of(&c, &quantity).await, "1", "the integer's default");
    assert_eq!(value_of(&c, &color).await, "blue", "the string's default");
    for name in ["quantity", "price", "gift", "size", "color"] {
        assert_eq!(
            count(&c, &format!("{} .req", field(&r, name))).await,
            1,
            "{name}"
        );
    }
    for name in ["note", "tags"] {
        assert_eq!(
            count(&c, &format!("{} .req", field(&r, name))).await,
            0,
            "{name}"
        );
        assert_eq!(
            count(&c, &format!("{} .opt", field(&r, name))).await,
            1,
            "{name}"
        );
    }

    // Wrong values: each field says why, next to it, and nothing is sent.
    retype(&c, &quantity, "3.5").await;
    retype(&c, &price, "two").await;
    retype(&c, &tags, "[\"fragile\"").await;
    click(&c, &format!("{} .provide", card(&r))).await;
    let problem = |name: &str| format!("{} .field-problem", field(&r, name));
    wait_text(&c, &problem("quantity"), |t| {
        t.contains("\"3.5\" is not a whole number")
    })
    .await;
    wait_text(&c, &problem("price"), |t| {
        t.contains("\"two\" is not a number")
    })
    .await;
    wait_text(&c, &problem("tags"), |t| t.contains("not valid JSON")).await;
    wait_text(&c, &problem("size"), |t| t.contains("required")).await;
    wait_text(&c, &format!("{} .problem", card(&r)), |t| {
        t.contains("Nothing was sent")
    })
    .await;
    for name in ["gift", "color", "note"] {
        let shown = c
            .find(Locator::Css(&problem(name)))
            .await
            .unwrap()
            .is_displayed()
            .await
            .unwrap();
        assert!(!shown, "{name} is fine");
    }
    shots.take(&c, "user-input.png").await;
    let (_, audit) = s.get(ANA, "/v1/sessions/alice%2Forder/decisions").await;
    assert_eq!(audit["decisions"], json!([]), "nothing was sent: {audit}");
    assert!(s.ran().is_empty());

    // Corrected: a field's message goes as it is fixed.
    retype(&c, &quantity, "3").await;
    wait_text(&c, &field(&r, "quantity"), |t| !t.contains("whole number")).await;
    retype(&c, &price, "2.5").await;
    retype(&c, &tags, "[\"fragile\", \"gift\"]").await;
    c.find(Locator::Css(&size))
        .await
        .unwrap()
        .select_by_label("M")
        .await
        .unwrap();
    click(&c, &gift).await;
    click(&c, &format!("{} .provide", card(&r))).await;
    wait_text(&c, &format!("{} .status", card(&r)), |t| {
        t.contains("Input sent by ana")
    })
    .await;

    // What the server stored, and what the tool ran with: the schema's types, the
    // default kept, the empty optional field left out.
    let want = json!({"item": "tea", "quantity": 3, "price": 2.5, "gift": true,
                      "size": "M", "color": "blue", "tags": ["fragile", "gift"]});
    let (st, audit) = s.get(ANA, "/v1/sessions/alice%2Forder/decisions").await;
    assert_eq!(st, 200, "{audit}");
    let decisions = audit["decisions"].as_array().unwrap();
    assert_eq!(decisions.len(), 1, "{audit}");
    let stored = &decisions[0]["executed_input"];
    assert_eq!(stored, &want, "{audit}");
    assert!(stored["quantity"].is_u64(), "an integer: {stored}");
    assert!(stored["price"].is_f64(), "a number: {stored}");
    assert!(stored["gift"].is_boolean(), "a boolean: {stored}");
    assert!(
        stored.get("note").is_none(),
        "the empty optional field: {stored}"
    );
    let ran = s.ran();
    assert_eq!(ran.len(), 1, "the tool ran once: {ran:?}");
    let args: Value = serde_json::from_str(ran[0].strip_prefix("order:").unwrap()).unwrap();
    assert_eq!(args, want);
    wait_text(&c, "#transcript", |t| t.contains("ordered 3 tea")).await;
    let err: Value = c
        .execute("return window.__err || null", vec![])
        .await
        .unwrap();
    assert_eq!(err, Value::Null, "no script errors");
    c.close().await.unwrap();
}

/// A reason's `code` spans show as code; whatever else it holds stays text: a
/// `<script>` or an `<img onerror>` in a reason is shown, never run or made an element.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reasons_show_code_not_html_in_a_real_browser() {
    let Some((chromium, chromedriver)) =
        chromium_or_skip("reasons_show_code_not_html_in_a_real_browser")
    else {
        return;
    };
    let s = shop().await;
    let wipe = pause(&s, "alice/wipe", "wipe /tmp/cache").await;
    let del = pause(&s, "alice/del", "delete a.txt").await;
    let driver = start_driver(&chromedriver);
    let c = browser(&driver, &chromium).await;
    c.goto(&format!("{}/#token={ANA}", s.base)).await.unwrap();

    let reason = format!("{} .reason", card(&wipe));
    let text = wait_text(&c, &reason, |t| !t.is_empty()).await;
    assert_eq!(
        text,
        "wipes <script>window.__pwned = 1</script> and \
         <img src=x onerror=\"window.__pwned = 2\"> under /tmp"
    );
    let codes = c
        .find_all(Locator::Css(&format!("{reason} code")))
        .await
        .unwrap();
    let mut shown = Vec::new();
    for code in codes {
        shown.push(code.text().await.unwrap());
    }
    assert_eq!(shown, ["<script>window.__pwned = 1</script>", "/tmp"]);
    for tag in ["script", "img"] {
        assert_eq!(count(&c, &format!("{reason} {tag}")).await, 0, "no <{tag}>");
    }
    // The default reason names its tool as code.
    let plain = format!("{} .reason", card(&del));
    let text = wait_text(&c, &plain, |t| !t.is_empty()).await;
    assert_eq!(text, "delete_file requires confirmation");
    let code = c
        .find(Locator::Css(&format!("{plain} code")))
        .await
        .unwrap();
    assert_eq!(code.text().await.unwrap(), "delete_file");

    let pwned: Value = c
        .execute(
            "return window.__pwned === undefined ? null : window.__pwned",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(pwned, Value::Null, "nothing in a reason ran");
    let err: Value = c
        .execute("return window.__err || null", vec![])
        .await
        .unwrap();
    assert_eq!(err, Value::Null, "no script errors");
    c.close().await.unwrap();
}
