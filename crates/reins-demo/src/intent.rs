//! What the offline model understands of a person's request: a few verbs and their
//! objects, good enough for the demo's three tools.

/// One thing the person asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Intent {
    /// Delete a file from the sandbox.
    Delete { path: String },
    /// Send an email.
    Email {
        to: String,
        subject: String,
        body: String,
    },
    /// Search the web.
    Search { query: String, slow: bool },
    /// "What happened?": recount the last tool results.
    Recap,
    /// Something the model cannot do; the text asks for what is missing.
    Clarify(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verb {
    Delete,
    Email,
    Search,
}

const FILLERS: &[&str] = &[
    "the", "file", "files", "my", "please", "a", "an", "called", "named", "that", "this", "old",
];

fn clean(word: &str) -> String {
    let punct = |c: char| {
        matches!(
            c,
            '"' | '\'' | '`' | ',' | ';' | ':' | '!' | '?' | '(' | ')' | '<' | '>'
        )
    };
    let mut w = word;
    loop {
        let next = w.trim_matches(punct).trim_end_matches('.');
        if next == w {
            return w.to_owned();
        }
        w = next;
    }
}

fn lower(word: &str) -> String {
    clean(word).to_lowercase()
}

fn verb_at(words: &[&str], i: usize) -> Option<Verb> {
    let w = lower(words.get(i)?);
    match w.as_str() {
        "delete" | "remove" | "rm" | "erase" | "trash" => Some(Verb::Delete),
        "email" | "e-mail" | "mail" | "send" => Some(Verb::Email),
        "search" | "find" | "google" | "lookup" | "research" => Some(Verb::Search),
        "look" if words.get(i + 1).is_some_and(|n| lower(n) == "up") => Some(Verb::Search),
        _ => None,
    }
}

/// Splits a request into the things it asks for, in order.
pub fn parse(text: &str) -> Vec<Intent> {
    let lowered = text.to_lowercase();
    let recap = ["what happened", "what did you do", "status", "recap"];
    if recap.iter().any(|p| lowered.contains(p)) {
        return vec![Intent::Recap];
    }
    let words: Vec<&str> = text.split_whitespace().collect();
    // verb, where its words start (after the previous request), verb index, end
    let mut segments: Vec<(Verb, usize, usize, usize)> = Vec::new();
    let mut i = 0;
    let mut from = 0;
    while i < words.len() {
        if let Some(v) = verb_at(&words, i) {
            // The segment runs until a connective followed by another verb.
            let mut end = words.len();
            let mut j = i + 1;
            while j < words.len() {
                let w = words[j];
                let lw = lower(w);
                let connective = matches!(lw.as_str(), "and" | "then" | "also")
                    || w.ends_with(';')
                    || w.ends_with(',');
                if connective {
                    let mut k = j + 1;
                    while k < words.len()
                        && matches!(lower(words[k]).as_str(), "then" | "also" | "please")
                    {
                        k += 1;
                    }
                    if verb_at(&words, k).is_some() {
                        end = if w.ends_with(';') || w.ends_with(',') {
                            j + 1
                        } else {
                            j
                        };
                        break;
                    }
                }
                j += 1;
            }
            segments.push((v, from, i, end));
            i = end.max(i + 1);
            from = i;
        } else {
            i += 1;
        }
    }
    segments
        .into_iter()
        .map(|(verb, from, at, end)| {
            let seg = &words[at..end];
            match verb {
                Verb::Delete => delete(&seg[1..]),
                Verb::Email => email(seg),
                Verb::Search => search(seg, is_slow(&words[from..end])),
            }
        })
        .collect()
}

fn delete(rest: &[&str]) -> Intent {
    let candidates: Vec<String> = rest
        .iter()
        .map(|w| clean(w))
        .filter(|w| !w.is_empty() && !FILLERS.contains(&w.to_lowercase().as_str()))
        .collect();
    let path = candidates
        .iter()
        .find(|w| w.contains('.') || w.contains('/'))
        .or_else(|| candidates.first());
    match path {
        Some(p) => Intent::Delete { path: p.clone() },
        None => Intent::Clarify(
            "Which file should I delete? Say, for example, `delete temp.txt`.".to_owned(),
        ),
    }
}

fn email(seg: &[&str]) -> Intent {
    let lw: Vec<String> = seg.iter().map(|w| lower(w)).collect();
    let to = seg
        .iter()
        .map(|w| clean(w))
        .find(|w| w.contains('@'))
        .or_else(|| {
            lw.iter()
                .position(|w| w == "to")
                .and_then(|p| seg.get(p + 1))
                .map(|w| clean(w))
        });
    let Some(to) = to.filter(|t| !t.is_empty()) else {
        return Intent::Clarify(
            "Who should I email? Give an address, e.g. `email bob@example.com about lunch`."
                .to_owned(),
        );
    };
    let body_at = lw
        .iter()
        .position(|w| w == "saying" || w == "that")
        .map(|p| p + 1);
    let about_at = lw.iter().position(|w| w == "about").map(|p| p + 1);
    let subject = match about_at {
        Some(a) => {
            let end = body_at.map_or(seg.len(), |b| b.saturating_sub(1)).max(a);
            let s = seg[a..end].join(" ");
            let s = s.trim_end_matches(['.', '!', '?']).to_owned();
            if s.is_empty() {
                "A note from SafeAgent".to_owned()
            } else {
                capitalize(&s)
            }
        }
        None => "A note from SafeAgent".to_owned(),
    };
    let body = match body_at {
        Some(b) if b < seg.len() => capitalize(&seg[b..].join(" ")),
        _ => format!(
            "Hello,\n\nYou asked me to pass this on: \"{}\".\n\n(sent by SafeAgent, the reins demo)",
            seg.join(" ")
        ),
    };
    Intent::Email { to, subject, body }
}

fn is_slow(words: &[&str]) -> bool {
    words
        .iter()
        .any(|w| matches!(lower(w).as_str(), "slow" | "slowly"))
}

fn search(seg: &[&str], slow: bool) -> Intent {
    let skip = if lower(seg[0]) == "look" { 2 } else { 1 };
    let mut rest: Vec<String> = seg[skip.min(seg.len())..]
        .iter()
        .filter(|w| !matches!(lower(w).as_str(), "slow" | "slowly"))
        .map(|w| w.trim_end_matches(['.', '!', '?']).to_owned())
        .collect();
    while rest.first().is_some_and(|w| {
        matches!(
            w.to_lowercase().as_str(),
            "for" | "the" | "web" | "online" | "about" | "on" | "up" | "me" | "please" | "a"
        )
    }) {
        rest.remove(0);
    }
    let query = rest.join(" ");
    if query.is_empty() {
        Intent::Clarify(
            "What should I search for? Say, for example, `search for rust agents`.".to_owned(),
        )
    } else {
        Intent::Search { query, slow }
    }
}

fn capitalize(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn del(p: &str) -> Intent {
        Intent::Delete { path: p.into() }
    }

    #[test]
    fn understands_single_requests() {
        assert_eq!(parse("delete temp.txt"), [del("temp.txt")]);
        assert_eq!(
            parse("Please remove the file `notes.md`."),
            [del("notes.md")]
        );
        assert_eq!(parse("delete ../sessions.db"), [del("../sessions.db")]);
        assert_eq!(
            parse("do a slow search for rust agent frameworks"),
            [Intent::Search {
                query: "rust agent frameworks".into(),
                slow: true
            }]
        );
        assert_eq!(
            parse("look up the weather"),
            [Intent::Search {
                query: "weather".into(),
                slow: false
            }]
        );
        match &parse("email bob@example.com about the Q3 report saying it is ready")[..] {
            [Intent::Email { to, subject, body }] => {
                assert_eq!(to, "bob@example.com");
                assert_eq!(subject, "The Q3 report");
                assert_eq!(body, "It is ready");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(parse("what happened?"), [Intent::Recap]);
        assert!(parse("hello there").is_empty());
    }

    #[test]
    fn splits_requests_joined_by_and() {
        let got = parse("search for salt and pepper and delete temp.txt");
        assert_eq!(
            got,
            [
                Intent::Search {
                    query: "salt and pepper".into(),
                    slow: false
                },
                del("temp.txt")
            ]
        );
        assert_eq!(parse("delete a.txt, then remove b.txt").len(), 2);
    }

    #[test]
    fn asks_when_something_is_missing() {
        assert!(matches!(&parse("delete")[..], [Intent::Clarify(_)]));
        assert!(matches!(&parse("send an email")[..], [Intent::Clarify(_)]));
        assert!(matches!(&parse("search")[..], [Intent::Clarify(_)]));
    }
}
