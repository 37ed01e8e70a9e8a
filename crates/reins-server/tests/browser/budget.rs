//! A budget requirement's card, in a real Chromium: it shows what was spent against
//! each limit, refuses a limit that is not a whole number in the page, and extends the
//! budget with the person's own limit; the run goes on.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_is_extended_with_a_custom_limit_in_a_real_browser() {
    let Some((chromium, chromedriver)) =
        chromium_or_skip("a_budget_is_extended_with_a_custom_limit_in_a_real_browser")
    else {
        return;
    };
    let s = start().await;
    let runs = format!("/v1/sessions/{}/runs", enc("alice/spend-1"));
    let (st, out) = s
        .post(
            ALICE,
            &runs,
            json!({"message": "hello there friend", "budget": {"tokens": 5}}),
        )
        .await;
    assert_eq!(st, 200, "{out}");
    let (st, out) = s.post(ALICE, &runs, json!({"message": "again"})).await;
    assert_eq!(st, 200, "{out}");
    assert_eq!(out["requirements"][0]["kind"], "budget", "{out}");
    let rid = out["requirements"][0]["id"].as_str().unwrap().to_owned();

    let driver = start_driver(&chromedriver);
    let c = browser(&driver, &chromium).await;
    c.goto(&format!("{}/#token={ANA}", s.base)).await.unwrap();
    let tokens = format!("{} label[data-limit=\"tokens\"]", card(&rid));
    c.wait().for_element(Locator::Css(&tokens)).await.unwrap();
    let text = wait_text(&c, &tokens, |t| t.contains("reached")).await;
    assert!(text.contains("spent 6 of 5"), "{text}");
    let input = c
        .find(Locator::Css(&format!("{tokens} input")))
        .await
        .unwrap();
    // The suggested limit to start with; a fraction is refused in the page.
    assert_eq!(input.prop("value").await.unwrap().as_deref(), Some("12"));
    input.clear().await.unwrap();
    input.send_keys("2.5").await.unwrap();
    let extend = format!("{} .extend", card(&rid));
    c.find(Locator::Css(&extend))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_text(&c, &format!("{} .problem", card(&rid)), |t| {
        t.contains("whole number")
    })
    .await;
    input.clear().await.unwrap();
    input.send_keys("500").await.unwrap();
    c.find(Locator::Css(&extend))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_text(&c, &format!("{} .status", card(&rid)), |t| {
        t.contains("Extended by ana")
    })
    .await;
    wait_text(&c, "#transcript", |t| t.contains("echo: again")).await;
    let (_, trail) = s
        .get(
            ALICE,
            &format!("/v1/sessions/{}/decisions", enc("alice/spend-1")),
        )
        .await;
    assert_eq!(
        trail["decisions"][0]["executed_input"],
        json!({"tokens": 500}),
        "{trail}"
    );
    c.close().await.unwrap();
}
