//! Producer-id allocation from durably reserved blocks, shared by every engine of a process.
//!
//! The shell refills the allocator from `TxnLog::allocate_block(block_size)`. Protocol:
//! 1. An engine (or the shell itself) takes ids with [`ProducerIdAllocator::next_id`].
//! 2. [`ProducerIdAllocator::begin_refill`] returns `true` exactly once per needed block (when
//!    the current block is 90 % used, as Kafka's prefetch, or empty and no block is queued);
//!    engines turn that into [`crate::Effect::NeedProducerIds`].
//! 3. The shell calls `allocate_block` and then [`ProducerIdAllocator::add_block`], or
//!    [`ProducerIdAllocator::refill_failed`] on error (a later `begin_refill` asks again).
//!
//! While no id is available, callers answer COORDINATOR_LOAD_IN_PROGRESS, as Kafka does while
//! a block is being fetched.

use txn_log::{ProducerId, ProducerIdBlock};

use crate::sync::{Arc, Mutex};

/// Why [`ProducerIdAllocator::add_block`] refused a block (Kafka's `testInvalidRanges`; test
/// `s110_invalid_ranges_rejected`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidBlock {
    /// Negative first id, zero length, or an end beyond `i64::MAX`.
    #[error("producer id block {0:?} is malformed")]
    Malformed(ProducerIdBlock),
    /// The block overlaps or precedes ids already handed out.
    #[error("producer id block {block:?} does not start after the last known id {last_end}")]
    NotIncreasing {
        /// The refused block.
        block: ProducerIdBlock,
        /// One past the highest id of the blocks seen so far.
        last_end: i64,
    },
}

#[derive(Debug, Default)]
struct State {
    /// Next id to hand out and one past the last id of the current block.
    next: i64,
    end: i64,
    /// Start of the current block (for the prefetch threshold).
    first: i64,
    queued: Option<ProducerIdBlock>,
    refill_in_flight: bool,
    /// One past the highest id of every block accepted so far.
    high_water: i64,
}

/// A clonable handle on the process-wide producer-id pool.
#[derive(Debug, Clone, Default)]
pub struct ProducerIdAllocator {
    inner: Arc<Mutex<State>>,
}

impl ProducerIdAllocator {
    /// An empty allocator: the first caller gets `None` and `begin_refill` asks for a block.
    pub fn new() -> Self {
        Self::default()
    }

    /// An allocator that starts with `block` (tests, benches, or a shell that fetched one).
    pub fn with_block(block: ProducerIdBlock) -> Result<Self, InvalidBlock> {
        let a = Self::new();
        a.add_block(block)?;
        Ok(a)
    }

    /// Takes the next id, or `None` if no block is available.
    pub fn next_id(&self) -> Option<ProducerId> {
        let mut s = self.inner.lock();
        if s.next >= s.end {
            let block = s.queued.take()?;
            s.first = block.first.0;
            s.next = block.first.0;
            s.end = block.end();
        }
        let id = s.next;
        s.next += 1;
        Some(ProducerId(id))
    }

    /// Whether the caller should fetch a block now. Returns `true` at most once until the
    /// block arrives ([`Self::add_block`]) or the fetch fails ([`Self::refill_failed`]).
    pub fn begin_refill(&self) -> bool {
        let mut s = self.inner.lock();
        if s.refill_in_flight || s.queued.is_some() {
            return false;
        }
        let size = s.end - s.first;
        let used = s.next - s.first;
        // Kafka prefetches at 90 % of the block (`PidPrefetchThreshold`).
        let needs = s.next >= s.end || used.saturating_mul(10) >= size.saturating_mul(9);
        if needs {
            s.refill_in_flight = true;
        }
        needs
    }

    /// Adds a freshly reserved block (queued behind the current one).
    pub fn add_block(&self, block: ProducerIdBlock) -> Result<(), InvalidBlock> {
        let mut s = self.inner.lock();
        if block.first.0 < 0
            || block.len == 0
            || block.first.0.checked_add(i64::from(block.len)).is_none()
        {
            s.refill_in_flight = false;
            return Err(InvalidBlock::Malformed(block));
        }
        if block.first.0 < s.high_water {
            s.refill_in_flight = false;
            return Err(InvalidBlock::NotIncreasing {
                block,
                last_end: s.high_water,
            });
        }
        s.high_water = block.end();
        s.refill_in_flight = false;
        if s.next >= s.end && s.queued.is_none() {
            s.first = block.first.0;
            s.next = block.first.0;
            s.end = block.end();
        } else {
            assert!(
                s.queued.is_none(),
                "a second block was queued without being requested"
            );
            s.queued = Some(block);
        }
        Ok(())
    }

    /// The fetch started by [`Self::begin_refill`] failed; a later call may ask again.
    pub fn refill_failed(&self) {
        self.inner.lock().refill_in_flight = false;
    }

    /// Ids available without a refill.
    pub fn available(&self) -> u64 {
        let s = self.inner.lock();
        let current = u64::try_from(s.end - s.next).unwrap_or(0);
        current + s.queued.map_or(0, |b| u64::from(b.len))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(first: i64, len: u32) -> ProducerIdBlock {
        ProducerIdBlock {
            first: ProducerId(first),
            len,
        }
    }

    /// One block yields consecutive ids, then the allocator runs dry.
    #[test]
    fn hands_out_consecutive_ids_then_runs_dry() {
        let a = ProducerIdAllocator::with_block(block(1000, 3)).expect("valid");
        let ids: Vec<_> = (0..3).map(|_| a.next_id()).collect();
        assert_eq!(
            ids,
            vec![
                Some(ProducerId(1000)),
                Some(ProducerId(1001)),
                Some(ProducerId(1002))
            ]
        );
        assert_eq!(a.next_id(), None);
        assert!(a.begin_refill());
        assert!(!a.begin_refill(), "only one fetch in flight");
        a.add_block(block(5000, 2)).expect("valid");
        assert_eq!(a.next_id(), Some(ProducerId(5000)));
    }

    #[test]
    fn prefetches_at_ninety_percent() {
        let a = ProducerIdAllocator::with_block(block(0, 10)).expect("valid");
        for _ in 0..8 {
            a.next_id();
            assert!(!a.begin_refill());
        }
        a.next_id();
        assert!(a.begin_refill());
        a.add_block(block(10, 10)).expect("valid");
        assert_eq!(a.next_id(), Some(ProducerId(9)));
        assert_eq!(a.next_id(), Some(ProducerId(10)), "queued block follows");
        assert_eq!(a.available(), 9);
    }

    /// S110: invalid ranges are refused.
    #[test]
    fn s110_invalid_ranges_rejected() {
        let a = ProducerIdAllocator::new();
        assert!(a.add_block(block(-1, 10)).is_err());
        assert!(a.add_block(block(0, 0)).is_err());
        assert!(a.add_block(block(i64::MAX - 1, 10)).is_err());
        a.add_block(block(100, 10)).expect("valid");
        assert!(matches!(
            a.add_block(block(50, 10)),
            Err(InvalidBlock::NotIncreasing { .. })
        ));
        assert_eq!(a.next_id(), Some(ProducerId(100)));
    }

    #[test]
    fn failed_refill_can_be_retried() {
        let a = ProducerIdAllocator::new();
        assert!(a.begin_refill());
        a.refill_failed();
        assert!(a.begin_refill());
    }
}
