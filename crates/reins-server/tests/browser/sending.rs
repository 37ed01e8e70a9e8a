//! A decision in flight keeps its card: an inbox refresh that comes while the decision's
//! request is being answered (on the server the requirement is no longer pending) does
//! not take the card away; once the answer comes, the card says who approved it.
//! (Seen on Restate under load: the card vanished while it said "Sending…".)

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_card_stays_while_its_decision_is_answered() {
    let Some((chromium, chromedriver)) =
        chromium_or_skip("a_card_stays_while_its_decision_is_answered")
    else {
        return;
    };
    let s = start().await;
    let driver = start_driver(&chromedriver);
    let c = browser(&driver, &chromium).await;
    let rid = pause(&s, "alice/web-9", "delete slow.txt").await;
    c.goto(&format!("{}/#token={ANA}", s.base)).await.unwrap();
    c.wait()
        .for_element(Locator::Css(&card(&rid)))
        .await
        .unwrap();

    // The page sees the decision's answer only when the test lets it.
    c.execute(
        r#"const real = window.fetch;
           let release;
           const gate = new Promise(r => { release = r; });
           window.__release = () => release();
           window.__answered = new Promise(r => { window.__markAnswered = r; });
           window.fetch = async (url, opts) => {
             const resp = await real(url, opts);
             if (String(url).includes("/decisions")) { window.__markAnswered(); await gate; }
             return resp;
           };"#,
        vec![],
    )
    .await
    .unwrap();
    c.find(Locator::Css(&format!("{} .approve", card(&rid))))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    // The server applied the decision; the page still waits for its answer.
    c.execute_async(
        "window.__answered.then(() => arguments[arguments.length - 1](true))",
        vec![],
    )
    .await
    .unwrap();
    // A refresh now finds the requirement no longer pending: the card stays.
    c.execute_async(
        "loadInbox().then(() => arguments[arguments.length - 1](true))",
        vec![],
    )
    .await
    .unwrap();
    let status = c
        .find(Locator::Css(&format!("{} .status", card(&rid))))
        .await
        .expect("the card is still there")
        .text()
        .await
        .unwrap();
    assert_eq!(status, "Sending…");
    c.execute("window.__release()", vec![]).await.unwrap();
    wait_text(&c, &format!("{} .status", card(&rid)), |t| {
        t.contains("Approved by ana")
    })
    .await;
    assert_eq!(s.ran(), ["delete:slow.txt"]);
    c.close().await.unwrap();
}
