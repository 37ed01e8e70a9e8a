//! The outbox in SQL (schema version 4): `reins_notices` (each notice, with whether it
//! was routed), `reins_deliveries` (one row per notice and destination, with a copy of
//! the notice, its state and its lease) and `reins_delivery_attempts` (the attempt
//! log). Times are computed from the caller's clock.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::{Arg, Cols, Exec, Row};
use crate::error::{Error, Result};
use crate::memory_outbox::settle;
use crate::notice::{
    AttemptOutcome, Delivery, DeliveryAttempt, DeliveryFilter, DeliveryState, Notice, Subscription,
};
use crate::sql::{encode_json, to_i64};
use crate::store::lease_end;

/// The SQL of the outbox steps in one dialect.
#[derive(Debug)]
pub(crate) struct OutboxSql {
    /// `(id, kind, session, requirement, created_at: Stamp, body)`; does nothing when
    /// the id is taken.
    pub insert_notice: &'static str,
    /// `(limit)` → body, oldest first.
    pub unrouted: &'static str,
    /// `(id)` → body.
    pub notice: &'static str,
    /// `(id)`: marks it routed.
    pub mark_routed: &'static str,
    /// `(id, notice_id, destination, session, requirement, now: Stamp, body)`; does
    /// nothing when the id is taken.
    pub insert_delivery: &'static str,
    /// `(owner, limit, now: Stamp, lease_until: Stamp)` → the claimed rows as
    /// `id, destination, state, attempts, next_at, lease_owner, lease_until, last_error, updated_at, body`; racing claimers never get the same row.
    pub claim: &'static str,
    /// `(id, owner, attempt, state, next_at: Stamp, error, now: Stamp)`: settles a
    /// delivery the owner leases for that attempt; changes 0 rows otherwise.
    pub settle: &'static str,
    /// `(delivery_id, attempt, owner, at: Stamp, outcome, error)`.
    pub log_attempt: &'static str,
    /// `(destination_prefix, session, requirement, notice, limit)` → rows as
    /// `id, destination, state, attempts, next_at, lease_owner, lease_until, last_error, updated_at, body`, newest first.
    pub list: &'static str,
    /// `list`'s parameters and a sixth, `sessions` → the same rows for the notices
    /// about one of the sessions named: a JSON array (SQLite) or a text array
    /// (PostgreSQL), see `ids_as_json`.
    pub list_for_sessions: &'static str,
    /// Whether `list_for_sessions` takes its ids as one JSON text.
    pub ids_as_json: bool,
    /// `(delivery_id)` → attempt, owner, at, outcome, error, oldest first.
    pub attempts: &'static str,
    /// `(id, now: Stamp)`: pending and due now.
    pub redeliver: &'static str,
    /// `(id, kind, created_at: Stamp, body)`: inserts or replaces.
    pub put_subscription: &'static str,
    /// `(kind)` → id, created_at, body, oldest first.
    pub subscriptions: &'static str,
    /// `(id)`.
    pub delete_subscription: &'static str,
    /// `(id)` → a row as `id, destination, state, attempts, next_at, lease_owner, lease_until, last_error, updated_at, body`.
    pub delivery: &'static str,
}

fn decode_notice(body: &str) -> Result<Notice> {
    serde_json::from_str(body).map_err(|e| Error::Corrupt {
        session: String::new(),
        detail: format!("outbox notice row does not parse: {e}"),
    })
}

fn decode_delivery(r: &Row) -> Result<Delivery> {
    let c = Cols::new(r, "", "outbox delivery row");
    let state = c.text(2)?;
    Ok(Delivery {
        id: c.text(0)?.to_owned(),
        destination: c.text(1)?.to_owned(),
        state: DeliveryState::parse(state).ok_or_else(|| Error::Corrupt {
            session: String::new(),
            detail: format!("outbox delivery row: unknown state `{state}`"),
        })?,
        attempts: u32::try_from(c.int(3)?).unwrap_or(0),
        next_at: c.time(4)?,
        lease_owner: c.opt_text(5)?.map(str::to_owned),
        lease_until: match r.get(6) {
            Some(super::Val::Null) | None => None,
            _ => Some(c.time(6)?),
        },
        last_error: c.opt_text(7)?.map(str::to_owned),
        updated_at: c.time(8)?,
        notice: decode_notice(c.text(9)?)?,
    })
}

/// Writes notices (inside the caller's transaction).
pub(crate) async fn insert_notices<E: Exec>(
    e: &mut E,
    d: &OutboxSql,
    notices: &[Notice],
) -> Result<()> {
    for n in notices {
        let body = encode_json("notice", n)?;
        e.run(
            d.insert_notice,
            &[
                Arg::Text(&n.id),
                Arg::Text(n.kind.as_str()),
                Arg::OptText(n.session.as_deref()),
                Arg::OptText(n.requirement.as_deref()),
                Arg::Stamp(n.created_at),
                Arg::Text(&body),
            ],
        )
        .await?;
    }
    Ok(())
}

/// Notices not yet routed.
pub(crate) async fn unrouted<E: Exec>(
    e: &mut E,
    d: &OutboxSql,
    limit: usize,
) -> Result<Vec<Notice>> {
    let rows = e
        .rows(d.unrouted, &[Arg::Int(to_i64(limit as u64))])
        .await?;
    rows.iter()
        .map(|r| decode_notice(Cols::new(r, "", "outbox notice row").text(0)?))
        .collect()
}

/// Routes a notice (inside the caller's transaction).
pub(crate) async fn route<E: Exec>(
    e: &mut E,
    d: &OutboxSql,
    notice: &str,
    destinations: &[String],
) -> Result<()> {
    let rows = e.rows(d.notice, &[Arg::Text(notice)]).await?;
    let Some(row) = rows.first() else {
        return Err(Error::DeliveryNotFound {
            id: notice.to_owned(),
        });
    };
    let body = Cols::new(row, "", "outbox notice row").text(0)?.to_owned();
    let n = decode_notice(&body)?;
    let now = Utc::now();
    for dest in destinations {
        let id = Delivery::id_for(notice, dest);
        e.run(
            d.insert_delivery,
            &[
                Arg::Text(&id),
                Arg::Text(notice),
                Arg::Text(dest),
                Arg::OptText(n.session.as_deref()),
                Arg::OptText(n.requirement.as_deref()),
                Arg::Stamp(now),
                Arg::Text(&body),
            ],
        )
        .await?;
    }
    e.run(d.mark_routed, &[Arg::Text(notice)]).await?;
    Ok(())
}

/// Claims due deliveries (inside the caller's write transaction).
pub(crate) async fn claim_deliveries<E: Exec>(
    e: &mut E,
    d: &OutboxSql,
    owner: &str,
    limit: usize,
    lease: Duration,
) -> Result<Vec<Delivery>> {
    let now = Utc::now();
    let rows = e
        .rows(
            d.claim,
            &[
                Arg::Text(owner),
                Arg::Int(to_i64(limit as u64)),
                Arg::Stamp(now),
                Arg::Stamp(lease_end(now, lease)),
            ],
        )
        .await?;
    let mut out = rows
        .iter()
        .map(decode_delivery)
        .collect::<Result<Vec<_>>>()?;
    out.sort_by(|a, b| a.next_at.cmp(&b.next_at).then(a.id.cmp(&b.id)));
    Ok(out)
}

/// Records an attempt (inside the caller's write transaction).
pub(crate) async fn record_attempt<E: Exec>(
    e: &mut E,
    d: &OutboxSql,
    delivery: &str,
    owner: &str,
    attempt: u32,
    outcome: AttemptOutcome,
) -> Result<bool> {
    let now = Utc::now();
    let (state, next_at, error, word) = settle(outcome, now);
    let changed = e
        .run(
            d.settle,
            &[
                Arg::Text(delivery),
                Arg::Text(owner),
                Arg::Int(i64::from(attempt)),
                Arg::Text(state.as_str()),
                Arg::Stamp(next_at),
                Arg::OptText(error.as_deref()),
                Arg::Stamp(now),
            ],
        )
        .await?;
    if changed != 1 {
        return Ok(false);
    }
    e.run(
        d.log_attempt,
        &[
            Arg::Text(delivery),
            Arg::Int(i64::from(attempt)),
            Arg::Text(owner),
            Arg::Stamp(now),
            Arg::Text(word),
            Arg::OptText(error.as_deref()),
        ],
    )
    .await?;
    Ok(true)
}

/// The deliveries a filter admits, newest first.
pub(crate) async fn list_deliveries<E: Exec>(
    e: &mut E,
    d: &OutboxSql,
    f: &DeliveryFilter,
) -> Result<Vec<Delivery>> {
    let limit = if f.limit == 0 {
        i64::MAX
    } else {
        to_i64(f.limit as u64)
    };
    let mut args = vec![
        Arg::OptText(f.destination_prefix.as_deref()),
        Arg::OptText(f.session.as_deref()),
        Arg::OptText(f.requirement.as_deref()),
        Arg::OptText(f.notice.as_deref()),
        Arg::Int(limit),
    ];
    let json;
    let sql = match &f.sessions {
        None => d.list,
        Some(ids) if ids.is_empty() => return Ok(Vec::new()),
        Some(ids) => {
            args.push(if d.ids_as_json {
                json = encode_json("session ids", ids)?;
                Arg::Text(&json)
            } else {
                Arg::Texts(ids)
            });
            d.list_for_sessions
        }
    };
    let rows = e.rows(sql, &args).await?;
    rows.iter().map(decode_delivery).collect()
}

/// A delivery's attempt log.
pub(crate) async fn delivery_attempts<E: Exec>(
    e: &mut E,
    d: &OutboxSql,
    delivery: &str,
) -> Result<Vec<DeliveryAttempt>> {
    let rows = e.rows(d.attempts, &[Arg::Text(delivery)]).await?;
    rows.iter()
        .map(|r| {
            let c = Cols::new(r, "", "outbox attempt row");
            Ok(DeliveryAttempt {
                delivery_id: delivery.to_owned(),
                attempt: u32::try_from(c.int(0)?).unwrap_or(0),
                owner: c.text(1)?.to_owned(),
                at: c.time(2)?,
                outcome: c.text(3)?.to_owned(),
                error: c.opt_text(4)?.map(str::to_owned),
            })
        })
        .collect()
}

/// Makes a delivery due again (inside the caller's write transaction).
pub(crate) async fn redeliver<E: Exec>(
    e: &mut E,
    d: &OutboxSql,
    delivery: &str,
    now: DateTime<Utc>,
) -> Result<Delivery> {
    if e.run(d.redeliver, &[Arg::Text(delivery), Arg::Stamp(now)])
        .await?
        != 1
    {
        return Err(Error::DeliveryNotFound {
            id: delivery.to_owned(),
        });
    }
    let rows = e.rows(d.delivery, &[Arg::Text(delivery)]).await?;
    rows.first()
        .map(decode_delivery)
        .transpose()?
        .ok_or_else(|| Error::DeliveryNotFound {
            id: delivery.to_owned(),
        })
}

/// Stores a subscription.
pub(crate) async fn put_subscription<E: Exec>(
    e: &mut E,
    d: &OutboxSql,
    s: &Subscription,
) -> Result<()> {
    let body = encode_json("subscription", &s.body)?;
    e.run(
        d.put_subscription,
        &[
            Arg::Text(&s.id),
            Arg::Text(&s.kind),
            Arg::Stamp(s.created_at),
            Arg::Text(&body),
        ],
    )
    .await?;
    Ok(())
}

/// The subscriptions of a kind.
pub(crate) async fn subscriptions<E: Exec>(
    e: &mut E,
    d: &OutboxSql,
    kind: &str,
) -> Result<Vec<Subscription>> {
    let rows = e.rows(d.subscriptions, &[Arg::Text(kind)]).await?;
    rows.iter()
        .map(|r| {
            let c = Cols::new(r, "", "subscription row");
            Ok(Subscription {
                id: c.text(0)?.to_owned(),
                kind: kind.to_owned(),
                created_at: c.time(1)?,
                body: serde_json::from_str(c.text(2)?).map_err(|e| Error::Corrupt {
                    session: String::new(),
                    detail: format!("subscription row does not parse: {e}"),
                })?,
            })
        })
        .collect()
}

/// Deletes a subscription.
pub(crate) async fn delete_subscription<E: Exec>(
    e: &mut E,
    d: &OutboxSql,
    id: &str,
) -> Result<bool> {
    Ok(e.run(d.delete_subscription, &[Arg::Text(id)]).await? > 0)
}
