//! [`RetryPolicy`]: exponential backoff with jitter for the phase of a model call
//! before its first chunk.

use std::future::Future;
use std::time::Duration;

use crate::{ModelError, Result};

/// When and how long to wait before trying a failed model request again.
///
/// Providers wrap only the "send the request and get the first chunk" phase in
/// [`RetryPolicy::run`]: once output has started, a failure is reported, never
/// retried (the caller may already have shown or acted on the partial output).
/// Only [retryable](ModelError::is_retryable) errors are retried.
///
/// The wait before attempt `n + 1` is `initial_backoff * 2^(n-1)`, capped at
/// `max_backoff`, scaled by a random factor in `1 ± jitter`; when the provider sent
/// `Retry-After`, the wait is at least that long. Retrying stops after
/// `max_attempts` attempts, or when the next wait would end past `max_elapsed` since
/// the first attempt.
///
/// ```
/// use std::time::Duration;
/// use reins_model::{ModelError, RetryPolicy};
///
/// let policy = RetryPolicy { jitter: 0.0, ..RetryPolicy::default() };
/// let busy = ModelError::Server { status: 503, message: "busy".into() };
/// assert_eq!(policy.backoff(1, &busy), Some(Duration::from_millis(500)));
/// assert_eq!(policy.backoff(2, &busy), Some(Duration::from_secs(1)));
/// assert_eq!(policy.backoff(4, &busy), None); // 4 attempts made: give up
///
/// let slow_down = ModelError::RateLimited { retry_after: Some(Duration::from_secs(7)), message: "later".into() };
/// assert_eq!(policy.backoff(1, &slow_down), Some(Duration::from_secs(7)));
/// assert_eq!(policy.backoff(1, &ModelError::Auth { message: "bad key".into() }), None);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    /// The most attempts in all (1 = no retries; 0 is treated as 1).
    pub max_attempts: u32,
    /// The wait after the first failure.
    pub initial_backoff: Duration,
    /// The longest computed wait (a provider's `Retry-After` may ask for longer).
    pub max_backoff: Duration,
    /// No new attempt starts if its wait would end later than this after the first.
    pub max_elapsed: Duration,
    /// The relative random spread of each wait, 0.0 to 1.0 (0.2 = ±20 %).
    pub jitter: f64,
}

impl Default for RetryPolicy {
    /// 4 attempts, 500 ms doubling to at most 20 s, 60 s in all, ±20 % jitter.
    fn default() -> Self {
        Self {
            max_attempts: 4,
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(20),
            max_elapsed: Duration::from_secs(60),
            jitter: 0.2,
        }
    }
}

impl RetryPolicy {
    /// A policy that never retries.
    pub fn none() -> Self {
        Self {
            max_attempts: 1,
            ..Self::default()
        }
    }

    /// How long to wait before the next attempt, after `attempt` attempts (1-based)
    /// have been made and the last failed with `err`; `None` to give up.
    pub fn backoff(&self, attempt: u32, err: &ModelError) -> Option<Duration> {
        if !err.is_retryable() || attempt >= self.max_attempts.max(1) {
            return None;
        }
        let exponent = attempt.saturating_sub(1).min(31);
        let base = self
            .initial_backoff
            .saturating_mul(1u32 << exponent)
            .min(self.max_backoff);
        let jitter = if self.jitter.is_finite() {
            self.jitter.clamp(0.0, 1.0)
        } else {
            0.0
        };
        let factor = 1.0 + jitter * (fastrand::f64() * 2.0 - 1.0);
        let wait = base.mul_f64(factor.max(0.0));
        Some(match err.retry_after() {
            Some(asked) => asked.max(wait),
            None => wait,
        })
    }

    /// Calls `f` until it succeeds, fails with an error that is not retryable, or the
    /// policy gives up; returns the last result. Waits with `tokio::time::sleep`.
    pub async fn run<F, Fut, T>(&self, mut f: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let start = tokio::time::Instant::now();
        let mut attempt: u32 = 0;
        loop {
            attempt = attempt.saturating_add(1);
            let err = match f().await {
                Ok(v) => return Ok(v),
                Err(e) => e,
            };
            let Some(wait) = self.backoff(attempt, &err) else {
                return Err(err);
            };
            if start.elapsed().saturating_add(wait) > self.max_elapsed {
                tracing::debug!(attempt, ?wait, "retry budget spent; giving up");
                return Err(err);
            }
            tracing::debug!(attempt, ?wait, error = %err, "model request failed; retrying");
            tokio::time::sleep(wait).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    fn server() -> ModelError {
        ModelError::Server {
            status: 500,
            message: "boom".into(),
        }
    }

    #[test]
    fn backoff_grows_and_is_capped_and_jitter_stays_in_range() {
        let p = RetryPolicy {
            max_attempts: u32::MAX,
            max_backoff: Duration::from_secs(3),
            ..RetryPolicy::default()
        };
        for _ in 0..100 {
            let w = p.backoff(1, &server()).unwrap();
            assert!(w >= Duration::from_millis(400) && w <= Duration::from_millis(600));
            let w = p.backoff(10, &server()).unwrap();
            assert!(w >= Duration::from_millis(2400) && w <= Duration::from_millis(3600));
        }
        assert!(p.backoff(u32::MAX - 1, &server()).is_some());
    }

    #[test]
    fn retry_after_is_honoured_even_above_max_backoff() {
        let p = RetryPolicy::default();
        let e = ModelError::RateLimited {
            retry_after: Some(Duration::from_secs(30)),
            message: String::new(),
        };
        assert_eq!(p.backoff(1, &e), Some(Duration::from_secs(30)));
    }

    #[test]
    fn none_never_retries() {
        assert_eq!(RetryPolicy::none().backoff(1, &server()), None);
    }

    #[tokio::test(start_paused = true)]
    async fn run_retries_retryable_errors_until_success() {
        let calls = AtomicU32::new(0);
        let out = RetryPolicy::default()
            .run(|| async {
                if calls.fetch_add(1, Ordering::SeqCst) < 2 {
                    Err(server())
                } else {
                    Ok(7)
                }
            })
            .await;
        assert_eq!(out, Ok(7));
        assert_eq!(calls.load(Ordering::SeqCst), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn run_stops_at_max_attempts_and_on_fatal_errors() {
        let calls = AtomicU32::new(0);
        let out: Result<()> = RetryPolicy::default()
            .run(|| async {
                calls.fetch_add(1, Ordering::SeqCst);
                Err(server())
            })
            .await;
        assert_eq!(out, Err(server()));
        assert_eq!(calls.load(Ordering::SeqCst), 4);

        let calls = AtomicU32::new(0);
        let out: Result<()> = RetryPolicy::default()
            .run(|| async {
                calls.fetch_add(1, Ordering::SeqCst);
                Err(ModelError::Auth {
                    message: "no".into(),
                })
            })
            .await;
        assert!(out.is_err());
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn run_respects_max_elapsed() {
        let calls = AtomicU32::new(0);
        let p = RetryPolicy {
            max_attempts: 100,
            max_elapsed: Duration::from_secs(5),
            ..RetryPolicy::default()
        };
        let _ = p
            .run(|| async {
                calls.fetch_add(1, Ordering::SeqCst);
                Err::<(), _>(ModelError::RateLimited {
                    retry_after: Some(Duration::from_secs(2)),
                    message: String::new(),
                })
            })
            .await;
        // Waits of 2 s each: attempts at 0, 2, 4; the next would start at 6 > 5.
        assert_eq!(calls.load(Ordering::SeqCst), 3);
    }
}
