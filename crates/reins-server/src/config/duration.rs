//! Durations in the configuration: `"500ms"`, `"15s"`, `"10m"`, `"1h"`, `"2d"`.

use std::time::Duration;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serializer};

/// Reads `"<number><unit>"` with unit `ms`, `s`, `m`, `h` or `d`.
pub(crate) fn parse(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let n: u64 = number.parse().map_err(|_| {
        format!("`{text}` is not a duration: write a whole number and a unit, e.g. \"15s\", \"10m\", \"500ms\"")
    })?;
    let secs = |k: u64| {
        n.checked_mul(k)
            .map(Duration::from_secs)
            .ok_or_else(|| format!("`{text}` is too long"))
    };
    match unit.trim() {
        "ms" => Ok(Duration::from_millis(n)),
        "s" => secs(1),
        "m" => secs(60),
        "h" => secs(3600),
        "d" => secs(86_400),
        other => Err(format!(
            "`{other}` in `{text}` is not a unit: use ms, s, m, h or d"
        )),
    }
}

/// How a duration is written back (the largest unit that divides it).
pub(crate) fn format(d: Duration) -> String {
    let ms = d.as_millis();
    if ms % 1000 != 0 {
        return format!("{ms}ms");
    }
    let s = d.as_secs();
    for (unit, k) in [("d", 86_400), ("h", 3600), ("m", 60)] {
        if s != 0 && s % k == 0 {
            return format!("{}{unit}", s / k);
        }
    }
    format!("{s}s")
}

pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let text = String::deserialize(d)?;
    parse(&text).map_err(D::Error::custom)
}

pub(crate) fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format(*d))
}

/// The same for `Option<Duration>`.
pub(crate) mod option {
    use super::*;

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Duration>, D::Error> {
        super::deserialize(d).map(Some)
    }

    pub(crate) fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => super::serialize(d, s),
            None => s.serialize_none(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_read_and_write_back() {
        for (text, d) in [
            ("500ms", Duration::from_millis(500)),
            ("15s", Duration::from_secs(15)),
            ("10m", Duration::from_secs(600)),
            ("2h", Duration::from_secs(7200)),
            ("1d", Duration::from_secs(86_400)),
        ] {
            assert_eq!(parse(text), Ok(d));
            assert_eq!(format(d), text);
        }
        assert!(parse("15").is_err());
        assert!(parse("s").is_err());
        assert!(parse("3 weeks").is_err());
    }
}
