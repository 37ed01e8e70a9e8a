//! Bad files refused with the key and the line; overrides naming their variable;
//! secrets read and never shown.

use super::*;

/// The key, line and message of a refusal (reading, then checking).
fn refusal(text: &str, base: &Path, env: &[(&str, &str)]) -> (String, Option<usize>, String) {
    let e = match Config::from_str_with_env(text, base, vars(env)).and_then(|c| c.check()) {
        Ok(()) => panic!("accepted:\n{text}"),
        Err(e) => e,
    };
    let ConfigError::Invalid { at, message } = &e else {
        panic!("not a placed error: {e}");
    };
    // The display names them too, whatever the source.
    let shown = e.to_string();
    assert!(shown.contains(&at.key), "{shown}");
    (at.key.clone(), at.line, message.clone())
}

#[test]
fn bad_files_are_refused_with_the_key_and_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path();
    std::fs::create_dir(base.join("bad-policies")).unwrap();
    std::fs::write(
        base.join("bad-policies/a.cedar"),
        "permit (\n  principal,\n  nope",
    )
    .unwrap();
    let cases: &[(&str, &str, Option<usize>, &str)] = &[
        // An unknown key, at any depth.
        (
            "[server]\nlisten = \"127.0.0.1:0\"\nlisen = 1\n",
            "server.lisen",
            Some(3),
            "unknown field `lisen`",
        ),
        (
            "# x\n\n[notifications.smtp]\nhost = \"x\"\n",
            "notifications.smtp",
            Some(3),
            "unknown field `smtp`",
        ),
        (
            "[storage]\nsqlite = \"x\"\n",
            "storage",
            Some(1),
            "unknown field `storage`",
        ),
        (
            "[auth.tokens.ops]\nroles = [\"admin\"]\ntoken_sha256 = \"00\"\ncolour = 1\n",
            "auth.tokens.ops.colour",
            Some(4),
            "unknown field",
        ),
        // A value of the wrong type.
        (
            "[server]\n\nlisten = 8080\n",
            "server.listen",
            Some(3),
            "invalid type",
        ),
        (
            "[budgets.default]\ntokens = \"many\"\n",
            "budgets.default.tokens",
            Some(2),
            "invalid type",
        ),
        (
            "[policies]\ndir = \"p\"\nwatch_interval = \"2 weeks\"\n",
            "policies.watch_interval",
            Some(3),
            "not a unit",
        ),
        (
            "[auth.tokens.ops]\nroles = [\"root\"]\ntoken_sha256 = \"00\"\n",
            "auth.tokens.ops.roles[0]",
            Some(2),
            "unknown variant `root`",
        ),
        // A missing key.
        (
            "[notifications.webhooks.ops]\nurl = \"http://127.0.0.1:1/\"\n",
            "notifications.webhooks.ops",
            Some(1),
            "missing field `secret`",
        ),
        // A missing secret, a secret written in the file, a secret file that is not there.
        (
            "[auth.tokens.ops]\nroles = [\"admin\"]\ntoken = { env = \"REINS_TEST_CONFIG_UNSET\" }\n",
            "auth.tokens.ops.token",
            Some(3),
            "REINS_TEST_CONFIG_UNSET is not set",
        ),
        (
            "[auth.tokens.ops]\nroles = [\"admin\"]\ntoken = \"s3cret-in-the-file\"\n",
            "auth.tokens.ops.token",
            Some(3),
            "not written in the file",
        ),
        (
            "[notifications.webhooks.ops]\nurl = \"http://127.0.0.1:1/\"\nsecret = { file = \"no-such-file\" }\n",
            "notifications.webhooks.ops.secret",
            Some(3),
            "cannot read the secret file",
        ),
        // Values that read but cannot be used.
        (
            "[notifications.webhooks.ops]\nurl = \"ftp://x\"\nsecret = { env = \"HOOK\" }\n",
            "notifications.webhooks.ops.url",
            Some(2),
            "not an http:// or https:// URL",
        ),
        (
            "[auth.tokens.ops]\nroles = [\"admin\"]\n",
            "auth.tokens.ops",
            Some(1),
            "either `token` or `token_sha256`",
        ),
        (
            "[store]\nsqlite = \"a.db\"\npostgres = { env = \"HOOK\" }\n",
            "store.postgres",
            Some(3),
            "not both",
        ),
        // A policy directory that cannot be read, and one whose policies do not load.
        (
            "[policies]\ndir = \"no-such-dir\"\n",
            "policies.dir",
            Some(2),
            "no-such-dir",
        ),
        (
            "\n[policies]\ndir = \"bad-policies\"\n",
            "policies.dir",
            Some(3),
            "a.cedar:3",
        ),
        (
            "[policies]\ndir = \"bad-policies\"\nshadow_dir = \"no-such-dir\"\n",
            "policies.shadow_dir",
            Some(3),
            "no-such-dir",
        ),
        (
            "[budgets.prices.\"gpt-4o\"]\ninput_per_million = -1.0\noutput_per_million = 1.0\n",
            "budgets.prices.gpt-4o.input_per_million",
            Some(2),
            "at least 0",
        ),
        (
            "[budgets.default]\ntokens = 10\nwall_time = \"1500ms\"\n",
            "budgets.default.wall_time",
            Some(3),
            "whole seconds; `1500ms` is not",
        ),
        (
            "[notifications.waiting.delete_file]\nescalate_after = \"10m\"\n",
            "notifications.waiting.delete_file.escalate_to",
            Some(1),
            "principals to tell",
        ),
        (
            "[driver]\ningress = \"http://127.0.0.1:8080\"\n",
            "driver.ingress",
            Some(2),
            "needs `kind = \"restate\"`",
        ),
        (
            "[driver]\nkind = \"kubernetes\"\n",
            "driver.kind",
            Some(2),
            "unknown variant",
        ),
        (
            "[notifications.email.smtp]\nhost = \"x\"\ntls = \"ssl\"\n",
            "notifications.email.smtp.tls",
            Some(3),
            "unknown variant",
        ),
        // TOML that does not parse.
        ("[server\nlisten = 1\n", "", Some(1), ""),
    ];
    for (text, key, line, fragment) in cases {
        let (k, l, m) = refusal(text, base, &[("HOOK", SECRET)]);
        assert_eq!((k.as_str(), l), (*key, *line), "{text}\n→ {m}");
        assert!(m.contains(fragment), "{text}\n→ {m}");
        assert!(!m.contains("s3cret-in-the-file"), "{m}");
    }
}

#[test]
fn overrides_name_their_variable() {
    let base = Path::new(".");
    let text = "[server]\nlisten = \"127.0.0.1:0\"\n";
    let e = Config::from_str_with_env(text, base, vars(&[("REINS_SERVER__LISTEN", "nowhere")]))
        .unwrap_err();
    assert_eq!((e.key(), e.line()), (Some("server.listen"), None));
    assert!(e.to_string().starts_with("REINS_SERVER__LISTEN"), "{e}");
    let e =
        Config::from_str_with_env(text, base, vars(&[("REINS_SERVER__LISEN", "x")])).unwrap_err();
    assert_eq!(e.key(), Some("server.lisen"));
    assert!(e.to_string().contains("REINS_SERVER__LISEN"), "{e}");
    // Someone else's REINS_ variables are not read.
    let c = Config::from_str_with_env(
        text,
        base,
        vars(&[("REINS_STORE_URL", "x"), ("REINS_NOT_A_SECTION__X", "1")]),
    )
    .unwrap();
    assert_eq!(c.server.listen.unwrap().to_string(), "127.0.0.1:0");
}

#[test]
fn secrets_are_read_and_never_shown_and_overrides_win() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ana.token"), "ana-file-token\n").unwrap();
    let text = r#"
[server]
listen = "127.0.0.1:0"

[auth.tokens.ops]
roles = ["admin"]
token = { env = "OPS_TOKEN" }

[auth.tokens.ana]
roles = ["approver"]
token = { file = "ana.token" }

[auth.tokens.alice]
roles = ["user"]
token_sha256 = "0000000000000000000000000000000000000000000000000000000000000000"

[notifications.webhooks.ops]
url = "http://127.0.0.1:1/hook"
secret = { env = "HOOK" }
"#;
    let c = Config::from_str_with_env(
        text,
        dir.path(),
        vars(&[
            ("OPS_TOKEN", "ops-env-token"),
            ("HOOK", SECRET),
            ("REINS_SERVER__LISTEN", "127.0.0.1:4444"),
            ("REINS_AUTH__TOKENS__ALICE__TOKEN", "alice-var-token"),
            ("REINS_AUTH__TOKENS__ALICE__TOKEN_SHA256", "\"\""),
        ]),
    );
    // Both token and token_sha256 for alice now: refused at the principal.
    let c = c.unwrap();
    assert_eq!(c.server.listen.unwrap().port(), 4444);
    let e = c.check().unwrap_err();
    assert_eq!(e.key(), Some("auth.tokens.alice"));
    let c = Config::from_str_with_env(
        &text.replace(
            "token_sha256 = \"0000000000000000000000000000000000000000000000000000000000000000\"\n",
            "",
        ),
        dir.path(),
        vars(&[
            ("OPS_TOKEN", "ops-env-token"),
            ("HOOK", SECRET),
            ("REINS_AUTH__TOKENS__ALICE__TOKEN", "alice-var-token"),
        ]),
    )
    .unwrap();
    c.check().unwrap();
    assert_eq!(
        c.auth.tokens["ana"].token.as_ref().unwrap().expose(),
        "ana-file-token"
    );
    let shown = format!("{}\n{c:?}", c.redacted());
    for secret in ["ops-env-token", "ana-file-token", "alice-var-token", SECRET] {
        assert!(!shown.contains(secret), "{secret} shown:\n{shown}");
    }
    assert!(shown.contains("<redacted: env OPS_TOKEN>"), "{shown}");
    assert!(shown.contains("<redacted: file ana.token>"), "{shown}");
    assert!(
        shown.contains("<redacted: REINS_AUTH__TOKENS__ALICE__TOKEN>"),
        "{shown}"
    );
    // The redacted form is a configuration again (with its defaults spelled out).
    assert!(shown.contains("sweep_interval = \"15s\""), "{shown}");
}
