//! The history of a fault run: every transaction with its writes and outcome, every
//! producer id / epoch issued, every accepted produce, every read, and what the run observed
//! about liveness and the coordinator's log.

use std::sync::Arc;
use std::time::Instant;

use txn_log::sync::Mutex;

/// How a transaction ended, from the client's point of view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Still running (the run ended first): treated as indeterminate.
    Invoked,
    /// EndTxn(commit) was acknowledged.
    Committed,
    /// Definitely not committed: EndTxn(commit) was never sent, or was definitely refused.
    Aborted,
    /// EndTxn(commit) was sent and not (definitely) answered: may have committed.
    Indeterminate,
}

/// One transaction.
#[derive(Debug, Clone)]
pub struct TxnOp {
    /// Index in the history.
    pub id: usize,
    /// The client process (worker) that ran it.
    pub process: u32,
    /// Transactional id.
    pub tid: String,
    /// Producer id and epoch the writes carried.
    pub pid: i64,
    /// Producer epoch the writes carried.
    pub epoch: i16,
    /// Values written, with their partition (including writes whose produce failed).
    pub writes: Vec<(i32, String)>,
    /// Outcome.
    pub outcome: Outcome,
    /// Milliseconds since the run started, at invoke and at completion.
    pub invoke_ms: u64,
    /// Completion time (`u64::MAX` if never completed).
    pub complete_ms: u64,
    /// Free-form note (the error that ended it).
    pub note: String,
}

/// A producer id and epoch handed to a client (InitProducerId, or EndTxn v5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issue {
    /// Transactional id.
    pub tid: String,
    /// Producer id.
    pub pid: i64,
    /// Epoch.
    pub epoch: i16,
    /// Which API issued it.
    pub api: &'static str,
    /// When the request was sent.
    pub invoke_ms: u64,
    /// When the answer arrived.
    pub complete_ms: u64,
}

/// A produce the broker accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Accepted {
    /// Transactional id.
    pub tid: String,
    /// Producer id.
    pub pid: i64,
    /// Epoch.
    pub epoch: i16,
    /// Partition.
    pub partition: i32,
    /// Values.
    pub values: Vec<String>,
    /// When the request was sent.
    pub invoke_ms: u64,
}

/// One value a read_committed consumer delivered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Read {
    /// The consumer process.
    pub process: u32,
    /// Partition.
    pub partition: i32,
    /// Offset.
    pub offset: i64,
    /// Value.
    pub value: String,
    /// Part of the final (after healing) full read.
    pub final_read: bool,
}

/// Everything recorded during a run.
#[derive(Debug, Clone, Default)]
pub struct Record {
    /// Transactions.
    pub txns: Vec<TxnOp>,
    /// Producer ids / epochs issued.
    pub issues: Vec<Issue>,
    /// Accepted produce requests.
    pub accepted: Vec<Accepted>,
    /// Reads.
    pub reads: Vec<Read>,
    /// Partitions whose LSO did not reach the high watermark after healing: (partition, lso,
    /// hw, detail).
    pub hangs: Vec<(i32, i64, i64, String)>,
    /// Times (ms) at which the coordinator was SIGKILLed.
    pub coordinator_kills: Vec<u64>,
    /// Offline audit findings of the coordinator log (I12 / I13), as (class, text).
    pub log_findings: Vec<(&'static str, String)>,
    /// Persisted records audited.
    pub log_records_checked: usize,
    /// Faults injected, as text, in order.
    pub faults: Vec<(u64, String)>,
    /// Partitions that were read in full after healing.
    pub final_partitions: Vec<i32>,
}

/// A shared, append-only history.
#[derive(Debug, Clone)]
pub struct History {
    start: Instant,
    inner: Arc<Mutex<Record>>,
}

impl Default for History {
    fn default() -> Self {
        Self::new()
    }
}

impl History {
    /// An empty history starting now.
    pub fn new() -> Self {
        Self {
            start: Instant::now(),
            inner: Arc::new(Mutex::new(Record::default())),
        }
    }

    /// Milliseconds since the start.
    pub fn now_ms(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Starts a transaction; returns its id.
    pub fn invoke_txn(&self, process: u32, tid: &str, pid: i64, epoch: i16) -> usize {
        let now = self.now_ms();
        let mut r = self.inner.lock();
        let id = r.txns.len();
        r.txns.push(TxnOp {
            id,
            process,
            tid: tid.to_owned(),
            pid,
            epoch,
            writes: Vec::new(),
            outcome: Outcome::Invoked,
            invoke_ms: now,
            complete_ms: u64::MAX,
            note: String::new(),
        });
        id
    }

    /// Adds writes to transaction `id` (before the produce is sent).
    pub fn add_writes(&self, id: usize, partition: i32, values: &[String]) {
        let mut r = self.inner.lock();
        if let Some(t) = r.txns.get_mut(id) {
            t.writes
                .extend(values.iter().map(|v| (partition, v.clone())));
        }
    }

    /// Completes transaction `id`.
    pub fn complete_txn(&self, id: usize, outcome: Outcome, note: impl Into<String>) {
        let now = self.now_ms();
        let mut r = self.inner.lock();
        if let Some(t) = r.txns.get_mut(id) {
            t.outcome = outcome;
            t.complete_ms = now;
            t.note = note.into();
        }
    }

    /// Records an issued (pid, epoch).
    pub fn issued(&self, tid: &str, pid: i64, epoch: i16, api: &'static str, invoke_ms: u64) {
        let now = self.now_ms();
        self.inner.lock().issues.push(Issue {
            tid: tid.to_owned(),
            pid,
            epoch,
            api,
            invoke_ms,
            complete_ms: now,
        });
    }

    /// Records an accepted produce.
    pub fn accepted(&self, a: Accepted) {
        self.inner.lock().accepted.push(a);
    }

    /// Records reads.
    pub fn reads(&self, reads: impl IntoIterator<Item = Read>) {
        self.inner.lock().reads.extend(reads);
    }

    /// Records an injected fault.
    pub fn fault(&self, what: impl Into<String>) {
        let now = self.now_ms();
        self.inner.lock().faults.push((now, what.into()));
    }

    /// Records a SIGKILL of the coordinator.
    pub fn coordinator_killed(&self) {
        let now = self.now_ms();
        self.inner.lock().coordinator_kills.push(now);
    }

    /// Mutates the record directly (final reads, hangs, log audit).
    pub fn with<T>(&self, f: impl FnOnce(&mut Record) -> T) -> T {
        f(&mut self.inner.lock())
    }

    /// A copy of everything recorded.
    pub fn snapshot(&self) -> Record {
        self.inner.lock().clone()
    }
}
