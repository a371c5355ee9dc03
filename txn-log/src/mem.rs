//! `MemTxnLog`: an in-memory [`TxnLog`] with a crash model, for engine tests, simulation and loom.
//!
//! # Crash model
//!
//! The log keeps two copies of its state:
//!
//! - **live**: what every operation sees (`load` reads it); each write applies here first;
//! - **durable**: what survives [`MemTxnLog::crash`].
//!
//! Every write (claim, append, block allocation) gets a sequence number. Writes become durable
//! strictly in that order (a prefix), which is what a log with fsync gives. In
//! [`Durability::Immediate`] (the default) a write is durable as soon as it is applied. In
//! [`Durability::Manual`] the test decides when: [`MemTxnLog::make_durable`] /
//! [`MemTxnLog::make_durable_prefix`]. The async trait methods resolve **only once their write
//! is durable** (obligation 1 of [`TxnLog`]); a write lost in a crash resolves with
//! [`LogError::Io`].
//!
//! [`MemTxnLog::crash`] models a process crash plus restart: live state is replaced by the
//! durable state, pending writes are dropped (their callers get `Io`), injected faults and the
//! poisoned flag are cleared (a new process starts healthy).
//!
//! # Loom
//!
//! Only [`crate::sync`] types are used, so the log runs inside `loom::model` under
//! `--cfg txn_loom`. The async methods never wait in `Immediate` mode: drive them with
//! [`block_on`] (a no-runtime poller), or use the synchronous twins
//! ([`MemTxnLog::claim_sync`], [`MemTxnLog::append_sync`], [`MemTxnLog::allocate_block_sync`],
//! [`MemTxnLog::load_sync`]), which apply the write and return a [`Ticket`] whose durability
//! can be queried with [`MemTxnLog::is_durable`].
//!
//! # Fault injection
//!
//! [`MemTxnLog::fail_next`] makes the next call of an operation fail: [`Fault::Io`] fails it
//! with nothing applied; [`Fault::Poison`] applies the write live (never durably), fails it
//! with `Io`, and poisons the log, as a failed fsync would. [`MemTxnLog::poison`] poisons
//! directly. While poisoned, every call returns [`LogError::Poisoned`].

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use async_trait::async_trait;

use crate::log::next_epoch;
use crate::sync::{Arc, Mutex};
use crate::{
    Appending, CoordinatorEpoch, LoadedPartition, LogEntry, LogError, LogOp, LogPartition,
    ProducerId, ProducerIdBlock, TransactionalId, TxnLog, TxnRecord, append_failed,
};

/// When writes to a [`MemTxnLog`] become durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// Every write is durable as soon as it is applied (the default).
    #[default]
    Immediate,
    /// Writes stay live-only until the test calls [`MemTxnLog::make_durable`] or
    /// [`MemTxnLog::make_durable_prefix`]; async calls stay pending until then.
    Manual,
}

/// An operation of the log, for [`MemTxnLog::fail_next`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum MemOp {
    /// `claim`.
    Claim,
    /// `append`.
    Append,
    /// `load`.
    Load,
    /// `allocate_block`.
    AllocateBlock,
}

/// An injected failure, for [`MemTxnLog::fail_next`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The call fails with [`LogError::Io`]; nothing is applied.
    Io,
    /// The write is applied live but never made durable, the call fails with [`LogError::Io`],
    /// and the log is poisoned (as after a failed fsync). For `load`, same as [`Fault::Io`]
    /// plus poisoning.
    Poison,
}

/// A handle on one applied write of a [`MemTxnLog`], to ask whether it is durable yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ticket {
    seq: u64,
    generation: u64,
}

/// The state of one log partition.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct PartitionState {
    epoch: Option<CoordinatorEpoch>,
    records: BTreeMap<TransactionalId, TxnRecord>,
}

/// Everything the log stores.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Store {
    partitions: BTreeMap<LogPartition, PartitionState>,
    next_producer_id: i64,
}

/// A write, replayable onto a [`Store`].
#[derive(Debug, Clone)]
enum Write {
    Claim(LogPartition, CoordinatorEpoch),
    Append(LogPartition, Vec<LogEntry>),
    Allocate { next_producer_id: i64 },
}

impl Store {
    fn apply(&mut self, write: &Write) {
        match write {
            Write::Claim(p, e) => self.partitions.entry(*p).or_default().epoch = Some(*e),
            Write::Append(p, batch) => {
                let part = self.partitions.entry(*p).or_default();
                for entry in batch {
                    match &entry.op {
                        LogOp::Upsert(r) => {
                            part.records.insert(entry.id.clone(), r.clone());
                        }
                        LogOp::Tombstone => {
                            part.records.remove(&entry.id);
                        }
                    }
                }
            }
            Write::Allocate { next_producer_id } => self.next_producer_id = *next_producer_id,
        }
    }

    fn stored_epoch(&self, p: LogPartition) -> Option<CoordinatorEpoch> {
        self.partitions.get(&p).and_then(|s| s.epoch)
    }

    /// What a load of `p` reads from this store.
    fn loaded(&self, p: LogPartition) -> LoadedPartition {
        self.partitions
            .get(&p)
            .map_or_else(LoadedPartition::default, |s| LoadedPartition {
                coordinator_epoch: s.epoch,
                records: s
                    .records
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
            })
    }
}

#[derive(Debug, Default)]
struct Inner {
    mode: Durability,
    live: Store,
    durable: Store,
    /// Applied but not yet durable writes, oldest first, with their sequence numbers.
    pending: Vec<(u64, Write)>,
    next_seq: u64,
    /// Every write with `seq <= durable_seq` of the current generation is durable.
    durable_seq: u64,
    /// Crash count. `generation_durable_end[g]` is `durable_seq` when generation `g` crashed.
    generation: u64,
    generation_durable_end: Vec<u64>,
    faults: BTreeMap<MemOp, Fault>,
    poisoned: Option<String>,
    waiters: Vec<Waker>,
    crashes: u64,
    /// ACL bindings and SCRAM credentials, encoded as a store keeps them
    /// ([`crate::security`]). Durable at once: a crash keeps them.
    security: BTreeMap<Vec<u8>, Vec<u8>>,
}

impl Inner {
    fn check_poisoned(&self) -> Result<(), LogError> {
        match &self.poisoned {
            Some(reason) => Err(LogError::Poisoned {
                reason: reason.clone(),
            }),
            None => Ok(()),
        }
    }

    fn take_fault(&mut self, op: MemOp) -> Option<Fault> {
        self.faults.remove(&op)
    }

    /// Applies `write` live, queues it for durability and returns its ticket. In
    /// `Immediate` mode it is durable on return. `fault` is the already-taken injected fault.
    fn submit(&mut self, write: Write, fault: Option<Fault>) -> Result<Ticket, LogError> {
        match fault {
            Some(Fault::Io) => return Err(injected_io()),
            Some(Fault::Poison) => {
                // The write reaches the live state but its durability failed: it can never be
                // made durable, and nothing after it can be either.
                self.live.apply(&write);
                self.poisoned = Some("injected durability failure".into());
                return Err(injected_io());
            }
            None => {}
        }
        self.live.apply(&write);
        self.next_seq += 1;
        let ticket = Ticket {
            seq: self.next_seq,
            generation: self.generation,
        };
        self.pending.push((ticket.seq, write));
        if self.mode == Durability::Immediate {
            self.flush_prefix(usize::MAX);
        }
        Ok(ticket)
    }

    fn flush_prefix(&mut self, n: usize) -> usize {
        let n = n.min(self.pending.len());
        for (seq, write) in self.pending.drain(..n) {
            self.durable.apply(&write);
            self.durable_seq = seq;
        }
        if n > 0 {
            for w in self.waiters.drain(..) {
                w.wake();
            }
        }
        n
    }

    /// `Some(Ok)` durable, `Some(Err)` lost in a crash or poisoned, `None` still pending.
    fn ticket_status(&self, t: Ticket) -> Option<Result<(), LogError>> {
        if t.generation < self.generation {
            let end = self
                .generation_durable_end
                .get(usize::try_from(t.generation).unwrap_or(usize::MAX))
                .copied()
                .unwrap_or(0);
            return Some(if t.seq <= end {
                Ok(())
            } else {
                Err(crashed_io())
            });
        }
        if t.seq <= self.durable_seq {
            return Some(Ok(()));
        }
        if let Some(reason) = &self.poisoned {
            return Some(Err(LogError::Poisoned {
                reason: reason.clone(),
            }));
        }
        None
    }

    fn claim(&mut self, p: LogPartition, e: CoordinatorEpoch) -> Result<Ticket, LogError> {
        self.check_poisoned()?;
        if let Some(current) = self.live.stored_epoch(p)
            && e < current
        {
            return Err(LogError::Fenced {
                partition: p,
                current,
            });
        }
        let fault = self.take_fault(MemOp::Claim);
        self.submit(Write::Claim(p, e), fault)
    }

    fn claim_next(&mut self, p: LogPartition) -> Result<(CoordinatorEpoch, Ticket), LogError> {
        let next = next_epoch(p, self.live.stored_epoch(p))?;
        Ok((next, self.claim(p, next)?))
    }

    fn append(
        &mut self,
        p: LogPartition,
        e: CoordinatorEpoch,
        batch: Vec<LogEntry>,
    ) -> Result<Ticket, LogError> {
        self.check_poisoned()?;
        match self.live.stored_epoch(p) {
            Some(current) if e < current => {
                return Err(LogError::Fenced {
                    partition: p,
                    current,
                });
            }
            Some(current) if e == current => {}
            _ => {
                return Err(LogError::NotClaimed {
                    partition: p,
                    epoch: e,
                });
            }
        }
        let fault = self.take_fault(MemOp::Append);
        self.submit(Write::Append(p, batch), fault)
    }

    fn allocate(
        &mut self,
        len: u32,
        floor: ProducerId,
    ) -> Result<(ProducerIdBlock, Ticket), LogError> {
        self.check_poisoned()?;
        if len == 0 {
            return Err(LogError::InvalidArgument(
                "producer id block length must be positive".into(),
            ));
        }
        let first = self.live.next_producer_id.max(floor.0);
        let next = first
            .checked_add(i64::from(len))
            .ok_or_else(|| LogError::InvalidArgument("producer id space exhausted".into()))?;
        let fault = self.take_fault(MemOp::AllocateBlock);
        let ticket = self.submit(
            Write::Allocate {
                next_producer_id: next,
            },
            fault,
        )?;
        Ok((
            ProducerIdBlock {
                first: ProducerId(first),
                len,
            },
            ticket,
        ))
    }

    fn load(&mut self, p: LogPartition) -> Result<LoadedPartition, LogError> {
        self.check_poisoned()?;
        match self.take_fault(MemOp::Load) {
            Some(Fault::Io) => return Err(injected_io()),
            Some(Fault::Poison) => {
                self.poisoned = Some("injected read failure".into());
                return Err(injected_io());
            }
            None => {}
        }
        Ok(self.live.loaded(p))
    }
}

fn injected_io() -> LogError {
    LogError::from(std::io::Error::other("injected I/O failure (MemTxnLog)"))
}

fn crashed_io() -> LogError {
    LogError::from(std::io::Error::other(
        "write lost: the log crashed before it was durable (MemTxnLog)",
    ))
}

/// An in-memory [`TxnLog`] with a live/durable split; see the [module docs](self).
///
/// Cloning is cheap and shares the same log (like an `Arc`).
#[derive(Debug, Clone, Default)]
pub struct MemTxnLog {
    inner: Arc<Mutex<Inner>>,
}

impl MemTxnLog {
    /// An empty log in [`Durability::Immediate`] mode.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty log in the given durability mode.
    pub fn with_durability(mode: Durability) -> Self {
        let log = Self::new();
        log.inner.lock().mode = mode;
        log
    }

    /// Switches the durability mode. Switching to `Immediate` makes all pending writes durable.
    pub fn set_durability(&self, mode: Durability) {
        let mut inner = self.inner.lock();
        inner.mode = mode;
        if mode == Durability::Immediate {
            inner.flush_prefix(usize::MAX);
        }
    }

    /// Makes every applied write durable and wakes the waiting calls. Returns how many writes
    /// became durable. Does nothing while poisoned (the failed write blocks the rest).
    pub fn make_durable(&self) -> usize {
        self.make_durable_prefix(usize::MAX)
    }

    /// Makes the oldest `n` pending writes durable (writes become durable in order). Returns
    /// how many did. Does nothing while poisoned.
    pub fn make_durable_prefix(&self, n: usize) -> usize {
        let mut inner = self.inner.lock();
        if inner.poisoned.is_some() {
            return 0;
        }
        inner.flush_prefix(n)
    }

    /// Number of applied writes that are not durable yet.
    pub fn pending_writes(&self) -> usize {
        self.inner.lock().pending.len()
    }

    /// Simulates a crash and restart: live state becomes the durable state, pending writes are
    /// dropped (their waiting calls fail with `Io`), faults and poisoning are cleared.
    pub fn crash(&self) {
        let mut inner = self.inner.lock();
        inner.pending.clear();
        inner.live = inner.durable.clone();
        let end = inner.durable_seq;
        inner.generation_durable_end.push(end);
        inner.generation += 1;
        inner.faults.clear();
        inner.poisoned = None;
        inner.crashes += 1;
        for w in inner.waiters.drain(..) {
            w.wake();
        }
    }

    /// How many times [`MemTxnLog::crash`] was called.
    pub fn crash_count(&self) -> u64 {
        self.inner.lock().crashes
    }

    /// Makes the next call of `op` that passes its checks (not poisoned, not fenced, valid
    /// arguments) fail with `fault`. One shot; replaces an earlier fault for the same `op`.
    pub fn fail_next(&self, op: MemOp, fault: Fault) {
        self.inner.lock().faults.insert(op, fault);
    }

    /// Poisons the log: every later call fails with [`LogError::Poisoned`] until a crash.
    pub fn poison(&self, reason: impl Into<String>) {
        let mut inner = self.inner.lock();
        if inner.poisoned.is_none() {
            inner.poisoned = Some(reason.into());
        }
        for w in inner.waiters.drain(..) {
            w.wake();
        }
    }

    /// Whether the log is poisoned.
    pub fn is_poisoned(&self) -> bool {
        self.inner.lock().poisoned.is_some()
    }

    /// `claim` without waiting: fences and applies the claim, returns its [`Ticket`].
    pub fn claim_sync(
        &self,
        partition: LogPartition,
        epoch: CoordinatorEpoch,
    ) -> Result<Ticket, LogError> {
        self.inner.lock().claim(partition, epoch)
    }

    /// `claim_next` without waiting: picks and claims the next epoch under one lock, returns
    /// it with its [`Ticket`].
    pub fn claim_next_sync(
        &self,
        partition: LogPartition,
    ) -> Result<(CoordinatorEpoch, Ticket), LogError> {
        self.inner.lock().claim_next(partition)
    }

    /// `append` without waiting: checks the epoch and applies the batch atomically (both under
    /// one lock), returns its [`Ticket`].
    pub fn append_sync(
        &self,
        partition: LogPartition,
        epoch: CoordinatorEpoch,
        batch: Vec<LogEntry>,
    ) -> Result<Ticket, LogError> {
        self.inner.lock().append(partition, epoch, batch)
    }

    /// `allocate_block` without waiting: reserves the block live, returns it with its
    /// [`Ticket`]. Do not hand out its ids before the ticket is durable.
    pub fn allocate_block_sync(
        &self,
        len: u32,
        floor: ProducerId,
    ) -> Result<(ProducerIdBlock, Ticket), LogError> {
        self.inner.lock().allocate(len, floor)
    }

    /// `load`, synchronously (reads the live state).
    pub fn load_sync(&self, partition: LogPartition) -> Result<LoadedPartition, LogError> {
        self.inner.lock().load(partition)
    }

    /// Whether the write behind `ticket` is durable: `Ok(true)` durable, `Ok(false)` not yet,
    /// `Err` lost in a crash (`Io`) or blocked by poisoning (`Poisoned`).
    pub fn is_durable(&self, ticket: Ticket) -> Result<bool, LogError> {
        match self.inner.lock().ticket_status(ticket) {
            Some(Ok(())) => Ok(true),
            Some(Err(e)) => Err(e),
            None => Ok(false),
        }
    }

    /// The durable state of `partition`: what a [`MemTxnLog::crash`] would leave.
    pub fn durable_snapshot(&self, partition: LogPartition) -> LoadedPartition {
        self.inner.lock().durable.loaded(partition)
    }

    /// Waits until the write behind `ticket` is durable (or lost / poisoned).
    pub fn wait_durable(&self, ticket: Ticket) -> WaitDurable {
        WaitDurable {
            log: self.clone(),
            ticket,
        }
    }
}

/// The future returned by [`MemTxnLog::wait_durable`].
#[derive(Debug)]
#[must_use = "futures do nothing unless polled"]
pub struct WaitDurable {
    log: MemTxnLog,
    ticket: Ticket,
}

impl Future for WaitDurable {
    type Output = Result<(), LogError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut inner = self.log.inner.lock();
        match inner.ticket_status(self.ticket) {
            Some(r) => Poll::Ready(r),
            None => {
                inner.waiters.push(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

#[async_trait]
impl TxnLog for MemTxnLog {
    async fn claim(
        &self,
        partition: LogPartition,
        epoch: CoordinatorEpoch,
    ) -> Result<(), LogError> {
        let ticket = self.claim_sync(partition, epoch)?;
        self.wait_durable(ticket).await
    }

    async fn claim_next(&self, partition: LogPartition) -> Result<CoordinatorEpoch, LogError> {
        let (epoch, ticket) = self.claim_next_sync(partition)?;
        self.wait_durable(ticket).await?;
        Ok(epoch)
    }

    fn append(
        &self,
        partition: LogPartition,
        epoch: CoordinatorEpoch,
        batch: Vec<LogEntry>,
    ) -> Appending {
        match self.append_sync(partition, epoch, batch) {
            Ok(ticket) => Box::pin(self.wait_durable(ticket)),
            Err(e) => append_failed(e),
        }
    }

    async fn load(&self, partition: LogPartition) -> Result<LoadedPartition, LogError> {
        self.load_sync(partition)
    }

    async fn allocate_block(
        &self,
        len: u32,
        floor: ProducerId,
    ) -> Result<ProducerIdBlock, LogError> {
        let (block, ticket) = self.allocate_block_sync(len, floor)?;
        self.wait_durable(ticket).await?;
        Ok(block)
    }
}

/// Polls `fut` to completion on the current thread without any runtime.
///
/// Works for any future that is woken from another thread or completes without waiting
/// (every [`MemTxnLog`] call in [`Durability::Immediate`] mode completes on the first poll,
/// so under loom it never parks). Parks the thread between polls.
pub fn block_on<F: Future>(fut: F) -> F::Output {
    // `Waker` needs a `std::sync::Arc`; this is a thread-parking waker, not shared state
    // of the log, so the loom facade does not apply.
    use std::sync::Arc as StdArc;
    struct ThreadWaker(std::thread::Thread);
    impl std::task::Wake for ThreadWaker {
        fn wake(self: StdArc<Self>) {
            self.0.unpark();
        }
        fn wake_by_ref(self: &StdArc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(StdArc::new(ThreadWaker(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut fut = std::pin::pin!(fut);
    loop {
        if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park();
    }
}

/// Polls `fut` once with a no-op waker: `Some(output)` if it completed.
///
/// For loom models and tests of [`Durability::Manual`]: a call that is still waiting for
/// durability returns `None`.
pub fn poll_once<F: Future + Unpin>(fut: &mut F) -> Option<F::Output> {
    let mut cx = Context::from_waker(Waker::noop());
    match Pin::new(fut).poll(&mut cx) {
        Poll::Ready(v) => Some(v),
        Poll::Pending => None,
    }
}

#[cfg(all(test, not(txn_loom)))]
mod tests {
    use super::*;
    use crate::ProducerEpoch;

    fn rec(pid: i64) -> TxnRecord {
        TxnRecord {
            client_txn_version: crate::TxnVersion::V2,
            ..TxnRecord::initialized(ProducerId(pid), ProducerEpoch(0), 60_000, 0)
        }
    }

    fn tid(s: &str) -> TransactionalId {
        TransactionalId::new(s).unwrap()
    }

    const P: LogPartition = LogPartition(3);

    #[test]
    fn manual_mode_holds_calls_until_durable_and_crash_drops_pending() {
        let log = MemTxnLog::with_durability(Durability::Manual);
        let mut claim = log.claim(P, CoordinatorEpoch(1));
        assert!(
            poll_once(&mut claim).is_none(),
            "claim resolved before durable"
        );
        assert_eq!(log.make_durable(), 1);
        assert!(matches!(poll_once(&mut claim), Some(Ok(()))));

        let mut a = log.append(
            P,
            CoordinatorEpoch(1),
            vec![LogEntry::upsert(tid("a"), rec(1))],
        );
        assert!(poll_once(&mut a).is_none());
        // Live reads see it; the durable state does not.
        assert_eq!(log.load_sync(P).unwrap().records.len(), 1);
        assert!(log.durable_snapshot(P).records.is_empty());
        log.crash();
        assert!(matches!(poll_once(&mut a), Some(Err(LogError::Io(_)))));
        let loaded = log.load_sync(P).unwrap();
        assert!(loaded.records.is_empty());
        assert_eq!(loaded.coordinator_epoch, Some(CoordinatorEpoch(1)));
    }

    #[test]
    fn durable_prefix_is_in_order_and_tickets_survive_later_crashes() {
        let log = MemTxnLog::with_durability(Durability::Manual);
        let t0 = log.claim_sync(P, CoordinatorEpoch(0)).unwrap();
        let t1 = log
            .append_sync(
                P,
                CoordinatorEpoch(0),
                vec![LogEntry::upsert(tid("a"), rec(1))],
            )
            .unwrap();
        let t2 = log
            .append_sync(
                P,
                CoordinatorEpoch(0),
                vec![LogEntry::upsert(tid("b"), rec(2))],
            )
            .unwrap();
        assert_eq!(log.make_durable_prefix(2), 2);
        assert!(log.is_durable(t0).unwrap());
        assert!(log.is_durable(t1).unwrap());
        assert!(!log.is_durable(t2).unwrap());
        log.crash();
        assert!(log.is_durable(t1).unwrap());
        assert!(log.is_durable(t2).is_err());
        // New writes after the crash get fresh tickets; the lost one stays lost.
        let t3 = log
            .append_sync(P, CoordinatorEpoch(0), vec![LogEntry::tombstone(tid("a"))])
            .unwrap();
        log.make_durable();
        assert!(log.is_durable(t3).unwrap());
        assert!(log.is_durable(t2).is_err());
        assert!(log.load_sync(P).unwrap().records.is_empty());
    }

    #[test]
    fn poison_fault_fails_the_call_and_every_later_one_until_crash() {
        let log = MemTxnLog::new();
        block_on(log.claim(P, CoordinatorEpoch(0))).unwrap();
        log.fail_next(MemOp::Append, Fault::Poison);
        let r = block_on(log.append(
            P,
            CoordinatorEpoch(0),
            vec![LogEntry::upsert(tid("a"), rec(1))],
        ));
        assert!(matches!(r, Err(LogError::Io(_))), "{r:?}");
        assert!(matches!(
            block_on(log.load(P)),
            Err(LogError::Poisoned { .. })
        ));
        assert!(matches!(
            block_on(log.allocate_block(10, ProducerId(0))),
            Err(LogError::Poisoned { .. })
        ));
        log.crash();
        assert!(block_on(log.load(P)).unwrap().records.is_empty());
    }

    #[test]
    fn io_fault_applies_nothing() {
        let log = MemTxnLog::new();
        block_on(log.claim(P, CoordinatorEpoch(0))).unwrap();
        log.fail_next(MemOp::Append, Fault::Io);
        let r = block_on(log.append(
            P,
            CoordinatorEpoch(0),
            vec![LogEntry::upsert(tid("a"), rec(1))],
        ));
        assert!(matches!(r, Err(LogError::Io(_))));
        assert!(!log.is_poisoned());
        assert!(block_on(log.load(P)).unwrap().records.is_empty());
        log.fail_next(MemOp::AllocateBlock, Fault::Io);
        assert!(block_on(log.allocate_block(5, ProducerId(0))).is_err());
        assert_eq!(
            block_on(log.allocate_block(5, ProducerId(0)))
                .unwrap()
                .first,
            ProducerId(0)
        );
    }
}

#[async_trait]
impl crate::SecurityStore for MemTxnLog {
    async fn load_security(&self) -> Result<crate::SecuritySnapshot, LogError> {
        let inner = self.inner.lock();
        crate::security::decode_snapshot(inner.security.iter().map(Ok))
    }

    async fn apply_security(&self, changes: &[crate::SecurityChange]) -> Result<(), LogError> {
        let writes = changes
            .iter()
            .map(crate::security::encode_change)
            .collect::<Result<Vec<_>, _>>()?;
        let mut inner = self.inner.lock();
        inner.check_poisoned()?;
        for (k, v) in writes {
            match v {
                Some(v) => inner.security.insert(k, v),
                None => inner.security.remove(&k),
            };
        }
        Ok(())
    }
}

impl MemTxnLog {
    /// Replaces the stored value of a security key (`crate::security`) with `value` as is, to
    /// test that corruption is detected.
    #[cfg(feature = "testing")]
    pub fn put_raw_security(&self, key: Vec<u8>, value: Vec<u8>) {
        self.inner.lock().security.insert(key, value);
    }
}
