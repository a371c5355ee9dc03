//! Time for the shell: a [`Clock`] trait with the wall clock and a manual clock for tests.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use txn_log::sync::Mutex;

use crate::Millis;

/// A boxed, sendable future (what [`Clock::sleep_until`] returns).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The source of time of a [`crate::shell::Coordinator`]. Engines are fed `now_ms()`; a timer
/// is armed with `sleep_until`, and the clock is read again when it fires.
pub trait Clock: Send + Sync + 'static {
    /// Milliseconds since the Unix epoch. Never decreases.
    fn now_ms(&self) -> Millis;

    /// Resolves once `now_ms() >= deadline` may hold (callers re-read `now_ms`).
    fn sleep_until(&self, deadline: Millis) -> BoxFuture<'static, ()>;
}

/// The wall clock, made non-decreasing (a clock step backwards holds time still).
#[derive(Debug, Default)]
pub struct SystemClock {
    last: Mutex<i64>,
}

impl SystemClock {
    /// A new wall clock.
    pub fn new() -> Self {
        Self::default()
    }
}

impl Clock for SystemClock {
    fn now_ms(&self) -> Millis {
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        let mut last = self.last.lock();
        *last = (*last).max(wall);
        Millis(*last)
    }

    fn sleep_until(&self, deadline: Millis) -> BoxFuture<'static, ()> {
        let now = self.now_ms();
        let wait = u64::try_from(deadline.0.saturating_sub(now.0)).unwrap_or(0);
        Box::pin(tokio::time::sleep(Duration::from_millis(wait)))
    }
}

/// A clock that moves only when told to ([`ManualClock::advance`]); sleepers wake when the
/// time they wait for is reached.
#[derive(Debug, Clone)]
pub struct ManualClock {
    now: Arc<tokio::sync::watch::Sender<i64>>,
}

impl ManualClock {
    /// A manual clock at `start_ms`.
    pub fn new(start_ms: i64) -> Self {
        Self {
            now: Arc::new(tokio::sync::watch::Sender::new(start_ms)),
        }
    }

    /// Moves time forward by `ms` (negative values are ignored).
    pub fn advance(&self, ms: i64) {
        self.now.send_modify(|t| *t = t.saturating_add(ms.max(0)));
    }

    /// Sets the time to `ms` if that is later than now.
    pub fn set(&self, ms: i64) {
        self.now.send_modify(|t| *t = (*t).max(ms));
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> Millis {
        Millis(*self.now.borrow())
    }

    fn sleep_until(&self, deadline: Millis) -> BoxFuture<'static, ()> {
        let mut rx = self.now.subscribe();
        Box::pin(async move {
            // `wait_for` returns Err only if the sender is gone; then nobody can move time.
            if rx.wait_for(|t| *t >= deadline.0).await.is_err() {
                std::future::pending::<()>().await;
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn manual_clock_wakes_sleepers_at_their_deadline() {
        let clock = ManualClock::new(100);
        let sleeper = tokio::spawn(clock.sleep_until(Millis(150)));
        clock.advance(49);
        tokio::task::yield_now().await;
        assert!(!sleeper.is_finished());
        clock.advance(1);
        sleeper.await.expect("sleeper");
        assert_eq!(clock.now_ms(), Millis(150));
    }

    #[test]
    fn system_clock_never_goes_back() {
        let c = SystemClock::new();
        let a = c.now_ms();
        let b = c.now_ms();
        assert!(b >= a);
    }
}
