//! At most one log line a second for a kind of event that a client can cause at will (failed
//! logins, denied requests, refused outgoing connections); the others go to debug level, and
//! the next line says how many were held back.

use std::time::{SystemTime, UNIX_EPOCH};
use txn_log::sync::{AtomicU64, Ordering};

/// One event kind's limit: one line a second.
#[derive(Debug, Default)]
pub struct RateLimit {
    last_second: AtomicU64,
    suppressed: AtomicU64,
}

impl RateLimit {
    /// `Some(suppressed since the last line)` when a line may be logged now.
    pub fn allow(&self) -> Option<u64> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let last = self.last_second.load(Ordering::Relaxed);
        if last != now
            && self
                .last_second
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            Some(self.suppressed.swap(0, Ordering::Relaxed))
        } else {
            self.suppressed.fetch_add(1, Ordering::Relaxed);
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lets_one_through_a_second() {
        let r = RateLimit::default();
        assert_eq!(r.allow(), Some(0));
        assert_eq!(r.allow(), None);
    }
}
