//! The history of a fault run: every transaction with its writes and outcome, every
//! producer id / epoch issued, every accepted produce, every read, and what the run observed
//! about liveness and the coordinator's log.

use std::collections::BTreeMap;
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

impl TxnOp {
    fn invoked(id: usize, process: u32, tid: &str, pid: i64, epoch: i16, now: u64) -> Self {
        Self {
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
        }
    }

    fn complete(&mut self, outcome: Outcome, now: u64, note: String) {
        self.outcome = outcome;
        self.complete_ms = now;
        self.note = note;
    }
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

/// One W3 transaction of a transformer: read `inputs` from an input partition, write
/// `txn.writes` to the output topic, commit the group offset `to`, all in one transaction.
#[derive(Debug, Clone)]
pub struct TransformOp {
    /// The transaction (its writes are the transformed values, with output partitions).
    pub txn: TxnOp,
    /// The input partition.
    pub partition: i32,
    /// The consumer position the inputs were read from.
    pub from: i64,
    /// The offset the transaction commits for the group (after its last input).
    pub to: i64,
    /// The input records it consumed, as (offset, value).
    pub inputs: Vec<(i64, String)>,
}

/// An OffsetFetch a W3 transformer made on (re)starting or after an abort, with the offsets
/// the history allows at that moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetCheck {
    /// The transformer.
    pub process: u32,
    /// The input partition.
    pub partition: i32,
    /// The offsets the group may hold: the last acknowledged commit's, plus those of
    /// indeterminate commits since (`-1`: none committed yet).
    pub allowed: Vec<i64>,
    /// What OffsetFetch returned.
    pub observed: i64,
    /// The transformer's last transaction before the fetch.
    pub after_txn: Option<usize>,
    /// When the answer arrived.
    pub at_ms: u64,
}

/// What W3 (consume-transform-produce) recorded.
#[derive(Debug, Clone, Default)]
pub struct W3Record {
    /// Transactions of the input producer (writes are (input partition, value)).
    pub inputs: Vec<TxnOp>,
    /// Transactions of the transformers (`txn.id` indexes this list).
    pub transforms: Vec<TransformOp>,
    /// Offset fetches checked against the history.
    pub offset_checks: Vec<OffsetCheck>,
    /// After healing: the read_committed contents of each input partition read in full, as
    /// (offset, value).
    pub final_input: BTreeMap<i32, Vec<(i64, String)>>,
    /// After healing: the same for the output partitions.
    pub final_output: BTreeMap<i32, Vec<(i64, String)>>,
    /// Partitions of the output topic (the output is judged only when all were read).
    pub output_partitions: i32,
    /// After healing: the group's committed offset per input partition (`-1`: none).
    pub final_offsets: BTreeMap<i32, i64>,
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
    /// I10: the partitions' logs and the coordinator's transition trail.
    pub decisions: super::decisions::Observed,
    /// Faults injected, as text, in order.
    pub faults: Vec<(u64, String)>,
    /// The nemesis's faults by kind (`Fault::kind`), in order: (ms, kind).
    pub fault_kinds: Vec<(u64, &'static str)>,
    /// Wall clock (ms since the Unix epoch) when the run started: the origin of the run's
    /// relative times, to place the daemon's and brokers' wall-clock times among the faults.
    pub start_unix_ms: i64,
    /// Partitions that were read in full after healing.
    pub final_partitions: Vec<i32>,
    /// W3.
    pub w3: W3Record,
}

impl Record {
    /// The faults injected, counted and one per line with their time, for a test's output.
    pub fn faults_injected(&self) -> String {
        let mut out = format!("faults injected: {}", self.faults.len());
        for (ms, fault) in &self.faults {
            out.push_str(&format!("\n  {ms} ms: {fault}"));
        }
        out
    }
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
        let start_unix_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        Self {
            start: Instant::now(),
            inner: Arc::new(Mutex::new(Record {
                start_unix_ms,
                ..Record::default()
            })),
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
        r.txns
            .push(TxnOp::invoked(id, process, tid, pid, epoch, now));
        id
    }

    /// Starts a transaction of the W3 input producer; returns its id.
    pub fn w3_invoke_input(&self, process: u32, tid: &str, pid: i64, epoch: i16) -> usize {
        let now = self.now_ms();
        let mut r = self.inner.lock();
        let id = r.w3.inputs.len();
        r.w3.inputs
            .push(TxnOp::invoked(id, process, tid, pid, epoch, now));
        id
    }

    /// Adds input writes to W3 input transaction `id` (before the produce is sent).
    pub fn w3_input_writes(&self, id: usize, partition: i32, values: &[String]) {
        if let Some(t) = self.inner.lock().w3.inputs.get_mut(id) {
            t.writes
                .extend(values.iter().map(|v| (partition, v.clone())));
        }
    }

    /// Completes W3 input transaction `id`.
    pub fn w3_complete_input(&self, id: usize, outcome: Outcome, note: impl Into<String>) {
        let now = self.now_ms();
        if let Some(t) = self.inner.lock().w3.inputs.get_mut(id) {
            t.complete(outcome, now, note.into());
        }
    }

    /// Starts a W3 transform transaction that consumed `inputs` (offset, value) of
    /// `partition` from position `from` and will commit `to`; returns its id.
    pub fn w3_invoke_transform(
        &self,
        process: u32,
        tid: &str,
        (pid, epoch): (i64, i16),
        partition: i32,
        (from, to): (i64, i64),
        inputs: Vec<(i64, String)>,
    ) -> usize {
        let now = self.now_ms();
        let mut r = self.inner.lock();
        let id = r.w3.transforms.len();
        r.w3.transforms.push(TransformOp {
            txn: TxnOp::invoked(id, process, tid, pid, epoch, now),
            partition,
            from,
            to,
            inputs,
        });
        id
    }

    /// Adds output writes to W3 transform transaction `id` (before the produce is sent).
    pub fn w3_outputs(&self, id: usize, partition: i32, values: &[String]) {
        if let Some(t) = self.inner.lock().w3.transforms.get_mut(id) {
            t.txn
                .writes
                .extend(values.iter().map(|v| (partition, v.clone())));
        }
    }

    /// Completes W3 transform transaction `id`.
    pub fn w3_complete_transform(&self, id: usize, outcome: Outcome, note: impl Into<String>) {
        let now = self.now_ms();
        if let Some(t) = self.inner.lock().w3.transforms.get_mut(id) {
            t.txn.complete(outcome, now, note.into());
        }
    }

    /// Records a W3 offset fetch (its `at_ms` is set to now).
    pub fn w3_offset_check(&self, mut c: OffsetCheck) {
        c.at_ms = self.now_ms();
        self.inner.lock().w3.offset_checks.push(c);
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
            t.complete(outcome, now, note.into());
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

    /// Records an injected fault of the nemesis and its kind.
    pub fn fault_of(&self, kind: &'static str, what: impl Into<String>) {
        let now = self.now_ms();
        let mut r = self.inner.lock();
        r.faults.push((now, what.into()));
        r.fault_kinds.push((now, kind));
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
