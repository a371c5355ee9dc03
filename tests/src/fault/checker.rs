//! The checker: a pure function of a [`Record`] that counts anomalies per invariant class
//! (I1-I5, I8-I14 of `docs/reliability.md`; I10 from [`decisions`]) and keeps the
//! offending operations.
//!
//! It decides like Jepsen's Kafka checker (`jepsen.tests.kafka`): a value whose transaction is
//! definitely not committed must never be read (G1a); one (partition, offset) holds one value;
//! a value lives at one offset; after healing the final full read must contain every value of
//! every acknowledged commit and, for any transaction of which one value is visible, all of
//! them. Indeterminate transactions may or may not be visible, but never partially.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;

use super::decisions;
use super::history::{Issue, Outcome, Record, TxnOp, W3Record};

/// An invariant class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Anomaly {
    /// I1: a value of a transaction that did not commit was read (G1a).
    AbortedRead,
    /// I1: a value nobody wrote was read.
    GarbageRead,
    /// I2: some but not all values of a transaction are visible after healing.
    TornTransaction,
    /// I3: a value of an acknowledged commit is missing after healing.
    LostCommit,
    /// I4: one value at more than one offset.
    Duplicate,
    /// I5: one (partition, offset) with more than one value.
    InconsistentOffset,
    /// I8: epochs of a transactional id did not strictly increase, or a (pid, epoch) was
    /// issued twice.
    EpochReuse,
    /// I9: a produce with an epoch older than one already issued was accepted.
    ZombieWrite,
    /// I10: one transaction got both decisions (markers, or the coordinator's records).
    DecidedTwice,
    /// I10: a marker contradicts what the client was told (commit acknowledged, ABORT
    /// written; definitely aborted, COMMIT written).
    WrongDecision,
    /// I10: Complete* was persisted before a participant had the marker.
    CompleteBeforeAck,
    /// I11: a partition's LSO did not reach its high watermark after healing.
    HangingTransaction,
    /// I12: the reaper (or anything) aborted a transaction after its commit was acknowledged.
    PrepareAborted,
    /// I13: a persisted record is not a state the state table allows.
    InvalidPersistedState,
    /// I14: an acknowledged commit was lost across a SIGKILL of the coordinator.
    CommitLostAcrossKill,
    /// W3: an input record below the group's committed offset has no visible transform.
    W3LostTransform,
    /// W3: an input record was transformed more than once in the visible output.
    W3DuplicateTransform,
    /// W3: the committed offsets and the visible output disagree (output for input at or
    /// beyond the committed offset, a committed offset below an acknowledged commit's), or
    /// an OffsetFetch returned an offset the history does not allow (e.g. one of an aborted
    /// transaction).
    W3OffsetMismatch,
}

impl Anomaly {
    /// The invariant number and name.
    pub fn label(self) -> &'static str {
        match self {
            Self::AbortedRead => "I1 aborted-read",
            Self::GarbageRead => "I1 garbage-read",
            Self::TornTransaction => "I2 torn-transaction",
            Self::LostCommit => "I3 lost-commit",
            Self::Duplicate => "I4 duplicate",
            Self::InconsistentOffset => "I5 inconsistent-offset",
            Self::EpochReuse => "I8 epoch-reuse",
            Self::ZombieWrite => "I9 zombie-write",
            Self::DecidedTwice => "I10 decided-twice",
            Self::WrongDecision => "I10 wrong-decision",
            Self::CompleteBeforeAck => "I10 complete-before-ack",
            Self::HangingTransaction => "I11 hanging-transaction",
            Self::PrepareAborted => "I12 prepare-aborted",
            Self::InvalidPersistedState => "I13 invalid-persisted-state",
            Self::CommitLostAcrossKill => "I14 commit-lost-across-kill",
            Self::W3LostTransform => "W3 lost-transform",
            Self::W3DuplicateTransform => "W3 duplicate-transform",
            Self::W3OffsetMismatch => "W3 offset-mismatch",
        }
    }
}

/// The checker's verdict.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// Offending cases per class (each a one-line description naming the operations).
    pub anomalies: BTreeMap<Anomaly, Vec<String>>,
    /// Transactions in the history, by outcome.
    pub committed: usize,
    /// Definitely not committed.
    pub aborted: usize,
    /// Indeterminate or unfinished.
    pub indeterminate: usize,
    /// Indeterminate transactions found committed / not visible in the final read.
    pub indeterminate_visible: usize,
    /// Values read (all reads).
    pub reads: usize,
    /// What the I10 check looked at.
    pub i10: decisions::Counts,
    /// Faults injected.
    pub faults: usize,
    /// Persisted coordinator records audited.
    pub log_records: usize,
    /// W3 counts.
    pub w3: W3Counts,
}

/// What the checker saw of W3.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct W3Counts {
    /// Transform transactions committed.
    pub committed: usize,
    /// Transform transactions definitely not committed.
    pub aborted: usize,
    /// Transform transactions indeterminate or unfinished.
    pub indeterminate: usize,
    /// Input transactions (all outcomes).
    pub input_txns: usize,
    /// Input records below the final committed offsets, each checked for exactly one
    /// transform.
    pub inputs_checked: usize,
    /// Transformed values in the final output.
    pub outputs: usize,
    /// Offset fetches checked against the history.
    pub offset_checks: usize,
}

impl Report {
    /// Whether no anomaly was found.
    pub fn is_valid(&self) -> bool {
        self.anomalies.values().all(Vec::is_empty)
    }

    /// The number of cases of `class`.
    pub fn count(&self, class: Anomaly) -> usize {
        self.anomalies.get(&class).map_or(0, Vec::len)
    }

    fn add(&mut self, class: Anomaly, case: String) {
        self.anomalies.entry(class).or_default().push(case);
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "transactions: {} committed, {} aborted, {} indeterminate ({} of them visible); \
             {} values read; {} faults; {} persisted records audited",
            self.committed,
            self.aborted,
            self.indeterminate,
            self.indeterminate_visible,
            self.reads,
            self.faults,
            self.log_records
        )?;
        let w = &self.w3;
        if w.input_txns + w.committed + w.aborted + w.indeterminate > 0 {
            writeln!(
                f,
                "W3: {} transforms committed, {} aborted, {} indeterminate; {} input \
                 transactions; {} input records below the committed offsets checked, {} \
                 outputs visible; {} offset fetches checked",
                w.committed,
                w.aborted,
                w.indeterminate,
                w.input_txns,
                w.inputs_checked,
                w.outputs,
                w.offset_checks
            )?;
        }
        let d = &self.i10;
        writeln!(
            f,
            "I10: {} markers, {} transactions closed by them; {} coordinator transitions, {} \
             Complete* checked on {} partitions ({} without their Prepare*, {} partitions \
             decided after their read)",
            d.markers,
            d.txns,
            d.transitions,
            d.completes,
            d.complete_partitions,
            d.unmatched_completes,
            d.decided_after_read
        )?;
        if self.is_valid() {
            return writeln!(f, "valid: no anomaly");
        }
        for (class, cases) in &self.anomalies {
            writeln!(f, "{}: {}", class.label(), cases.len())?;
            for c in cases.iter().take(10) {
                writeln!(f, "  {c}")?;
            }
        }
        Ok(())
    }
}

/// Checks a history.
pub fn check(h: &Record) -> Report {
    let mut rep = Report {
        reads: h.reads.len(),
        faults: h.faults.len(),
        log_records: h.log_records_checked,
        ..Report::default()
    };
    // value -> transaction
    let mut writer: HashMap<&str, usize> = HashMap::new();
    for t in &h.txns {
        match t.outcome {
            Outcome::Committed => rep.committed += 1,
            Outcome::Aborted => rep.aborted += 1,
            Outcome::Indeterminate | Outcome::Invoked => rep.indeterminate += 1,
        }
        for (_, v) in &t.writes {
            writer.insert(v.as_str(), t.id);
        }
    }

    // I1 aborted / garbage reads; I5 inconsistent offsets; I4 duplicates.
    let mut at: BTreeMap<(i32, i64), BTreeSet<&str>> = BTreeMap::new();
    let mut where_: HashMap<&str, BTreeSet<(i32, i64)>> = HashMap::new();
    let mut reported_aborted: BTreeSet<&str> = BTreeSet::new();
    for r in &h.reads {
        at.entry((r.partition, r.offset))
            .or_default()
            .insert(r.value.as_str());
        where_
            .entry(r.value.as_str())
            .or_default()
            .insert((r.partition, r.offset));
        match writer.get(r.value.as_str()).map(|&i| &h.txns[i]) {
            None => {
                if reported_aborted.insert(r.value.as_str()) {
                    rep.add(
                        Anomaly::GarbageRead,
                        format!(
                            "{:?} at {}/{} read by process {} was never written",
                            r.value, r.partition, r.offset, r.process
                        ),
                    );
                }
            }
            Some(t) if t.outcome == Outcome::Aborted => {
                if reported_aborted.insert(r.value.as_str()) {
                    rep.add(
                        Anomaly::AbortedRead,
                        format!(
                            "{:?} at {}/{} read by process {} (final: {}); written by txn {} \
                             ({} pid {} epoch {}, aborted: {})",
                            r.value,
                            r.partition,
                            r.offset,
                            r.process,
                            r.final_read,
                            t.id,
                            t.tid,
                            t.pid,
                            t.epoch,
                            t.note
                        ),
                    );
                }
            }
            Some(_) => {}
        }
    }
    for ((p, o), vals) in &at {
        if vals.len() > 1 {
            rep.add(
                Anomaly::InconsistentOffset,
                format!("{p}/{o} holds {vals:?}"),
            );
        }
    }
    for (v, places) in &where_ {
        if places.len() > 1 {
            rep.add(Anomaly::Duplicate, format!("{v:?} at {places:?}"));
        }
    }

    // I2 / I3 / I14 against the final read (only partitions read in full).
    let final_parts: BTreeSet<i32> = h.final_partitions.iter().copied().collect();
    let visible: BTreeSet<&str> = h
        .reads
        .iter()
        .filter(|r| r.final_read)
        .map(|r| r.value.as_str())
        .collect();
    for t in &h.txns {
        let checked: Vec<&(i32, String)> = t
            .writes
            .iter()
            .filter(|(p, _)| final_parts.contains(p))
            .collect();
        if checked.is_empty() {
            continue;
        }
        let seen: Vec<&str> = checked
            .iter()
            .filter(|(_, v)| visible.contains(v.as_str()))
            .map(|(_, v)| v.as_str())
            .collect();
        let missing: Vec<&str> = checked
            .iter()
            .filter(|(_, v)| !visible.contains(v.as_str()))
            .map(|(_, v)| v.as_str())
            .collect();
        if !seen.is_empty() && !missing.is_empty() && t.outcome != Outcome::Committed {
            rep.add(
                Anomaly::TornTransaction,
                format!(
                    "txn {} ({} pid {} epoch {}, {:?}): visible {seen:?}, missing {missing:?}",
                    t.id, t.tid, t.pid, t.epoch, t.outcome
                ),
            );
        }
        if matches!(t.outcome, Outcome::Indeterminate | Outcome::Invoked) && !seen.is_empty() {
            rep.indeterminate_visible += 1;
        }
        if t.outcome == Outcome::Committed && !missing.is_empty() {
            let case = format!(
                "txn {} ({} pid {} epoch {}, committed at {} ms): missing {missing:?} of {} \
                 values",
                t.id,
                t.tid,
                t.pid,
                t.epoch,
                t.complete_ms,
                checked.len()
            );
            if !seen.is_empty() {
                rep.add(Anomaly::TornTransaction, case.clone());
            }
            if h.coordinator_kills.iter().any(|&k| k > t.complete_ms) {
                rep.add(Anomaly::CommitLostAcrossKill, case.clone());
            }
            rep.add(Anomaly::LostCommit, case);
        }
    }

    // I8: per (pid, epoch) at most one issuance; per tid, epochs of the same pid issued in
    // real-time order strictly increase.
    let mut by_pe: HashMap<(i64, i16), Vec<usize>> = HashMap::new();
    for (i, is) in h.issues.iter().enumerate() {
        by_pe.entry((is.pid, is.epoch)).or_default().push(i);
    }
    let mut dup: Vec<_> = by_pe.iter().filter(|(_, v)| v.len() > 1).collect();
    dup.sort();
    for ((pid, epoch), idx) in dup {
        let who: Vec<String> = idx
            .iter()
            .map(|&i| {
                let is = &h.issues[i];
                format!("{} by {} at {} ms", is.tid, is.api, is.complete_ms)
            })
            .collect();
        rep.add(
            Anomaly::EpochReuse,
            format!(
                "pid {pid} epoch {epoch} issued {} times: {who:?}",
                idx.len()
            ),
        );
    }
    // A pair (a, b) of one (tid, pid) with a done before b was sent and b's epoch not above
    // a's. Found per (tid, pid) by asking, for each b, the highest epoch done before it was
    // sent; the pairs of a (tid, pid) that has one are then listed.
    let mut by_tid_pid: HashMap<(&str, i64), Vec<&Issue>> = HashMap::new();
    for is in &h.issues {
        by_tid_pid
            .entry((is.tid.as_str(), is.pid))
            .or_default()
            .push(is);
    }
    let mut groups: Vec<_> = by_tid_pid.into_iter().collect();
    groups.sort_by_key(|(k, _)| *k);
    for (_, group) in groups {
        if !has_epoch_not_above_an_earlier_one(&group) {
            continue;
        }
        for a in &group {
            for b in &group {
                if a.complete_ms < b.invoke_ms && b.epoch <= a.epoch {
                    rep.add(
                        Anomaly::EpochReuse,
                        format!(
                            "{}: pid {} epoch {} ({} done at {} ms) then epoch {} ({} sent at {} \
                             ms)",
                            a.tid,
                            a.pid,
                            a.epoch,
                            a.api,
                            a.complete_ms,
                            b.epoch,
                            b.api,
                            b.invoke_ms
                        ),
                    );
                }
            }
        }
    }

    // I9: an accepted produce whose epoch is below an epoch of the same pid issued before the
    // produce was sent.
    let issued = EpochsIssued::new(&h.issues);
    for w in &h.accepted {
        if let Some(newer) = issued.newer_before(w.pid, w.epoch, w.invoke_ms) {
            rep.add(
                Anomaly::ZombieWrite,
                format!(
                    "produce {:?} to {} with pid {} epoch {} sent at {} ms accepted although \
                     epoch {} was issued at {} ms",
                    w.values,
                    w.partition,
                    w.pid,
                    w.epoch,
                    w.invoke_ms,
                    newer.epoch,
                    newer.complete_ms
                ),
            );
        }
    }

    // I11.
    for (p, lso, hw, detail) in &h.hangs {
        rep.add(
            Anomaly::HangingTransaction,
            format!("partition {p}: LSO {lso} < HW {hw} after healing ({detail})"),
        );
    }

    // I10 from the partitions' markers and the coordinator's transition trail.
    let (found, counts) = decisions::check(h);
    rep.i10 = counts;
    for (class, case) in found {
        rep.add(class, case);
    }

    // I12 / I13 from the offline log audit.
    for (class, text) in &h.log_findings {
        let a = match *class {
            "I12" => Anomaly::PrepareAborted,
            "I11" => Anomaly::HangingTransaction,
            _ => Anomaly::InvalidPersistedState,
        };
        rep.add(a, text.clone());
    }
    check_w3(&h.w3, &mut rep);
    rep
}

/// Splits a W3 output value `t:{input}@{transform txn}`.
fn parse_output(v: &str) -> Option<(&str, usize)> {
    let (input, txn) = v.strip_prefix("t:")?.rsplit_once('@')?;
    Some((input, txn.parse().ok()?))
}

/// W3 (consume-transform-produce): I1 / I3 / I4 / I5 on the input topic and on what the
/// transformers read, then exactly-once of the transforms against the group's final
/// committed offsets, and every OffsetFetch against the offsets the history allows.
fn check_w3(w: &W3Record, rep: &mut Report) {
    rep.w3.input_txns = w.inputs.len();
    rep.w3.offset_checks = w.offset_checks.len();
    for t in &w.transforms {
        match t.txn.outcome {
            Outcome::Committed => rep.w3.committed += 1,
            Outcome::Aborted => rep.w3.aborted += 1,
            Outcome::Indeterminate | Outcome::Invoked => rep.w3.indeterminate += 1,
        }
    }
    let input_writer: HashMap<&str, &TxnOp> = w
        .inputs
        .iter()
        .flat_map(|t| t.writes.iter().map(move |(_, v)| (v.as_str(), t)))
        .collect();
    // (partition, offset) -> value and value -> places in the final input.
    let mut input_at: HashMap<(i32, i64), &str> = HashMap::new();
    let mut input_where: BTreeMap<&str, Vec<(i32, i64)>> = BTreeMap::new();
    for (&p, recs) in &w.final_input {
        for (o, v) in recs {
            input_at.insert((p, *o), v.as_str());
            input_where.entry(v.as_str()).or_default().push((p, *o));
        }
    }
    // I1 on the input: in the final read and in what each transformer consumed.
    let mut judged: BTreeSet<&str> = BTreeSet::new();
    let final_reads = w
        .final_input
        .iter()
        .flat_map(|(p, recs)| recs.iter().map(move |(o, v)| (*p, *o, v, "the final read")));
    let transformer_reads = w.transforms.iter().flat_map(|t| {
        t.inputs
            .iter()
            .map(move |(o, v)| (t.partition, *o, v, t.txn.tid.as_str()))
    });
    for (p, o, v, reader) in final_reads.chain(transformer_reads) {
        match input_writer.get(v.as_str()) {
            None if judged.insert(v.as_str()) => rep.add(
                Anomaly::GarbageRead,
                format!("W3 input {v:?} at {p}/{o} read by {reader} was never written"),
            ),
            Some(t) if t.outcome == Outcome::Aborted && judged.insert(v.as_str()) => rep.add(
                Anomaly::AbortedRead,
                format!(
                    "W3 input {v:?} at {p}/{o} read by {reader}; written by input txn {} ({} \
                     pid {} epoch {}, aborted: {})",
                    t.id, t.tid, t.pid, t.epoch, t.note
                ),
            ),
            _ => {}
        }
        if let Some(fv) = input_at.get(&(p, o)).filter(|fv| **fv != v.as_str()) {
            rep.add(
                Anomaly::InconsistentOffset,
                format!("W3 input {p}/{o} read as {v:?} by {reader}, {fv:?} in the final read"),
            );
        }
    }
    for (v, places) in &input_where {
        if places.len() > 1 {
            rep.add(Anomaly::Duplicate, format!("W3 input {v:?} at {places:?}"));
        }
    }
    // I3 on the input.
    for t in w.inputs.iter().filter(|t| t.outcome == Outcome::Committed) {
        let missing: Vec<&str> = t
            .writes
            .iter()
            .filter(|(p, v)| w.final_input.contains_key(p) && !input_where.contains_key(v.as_str()))
            .map(|(_, v)| v.as_str())
            .collect();
        if !missing.is_empty() {
            rep.add(
                Anomaly::LostCommit,
                format!(
                    "W3 input txn {} ({} pid {} epoch {}): missing {missing:?}",
                    t.id, t.tid, t.pid, t.epoch
                ),
            );
        }
    }
    // Offset fetches during the run.
    for c in &w.offset_checks {
        if !c.allowed.contains(&c.observed) {
            rep.add(
                Anomaly::W3OffsetMismatch,
                format!(
                    "transformer {} partition {}: OffsetFetch at {} ms after txn {:?} returned \
                     {}, the history allows {:?}",
                    c.process, c.partition, c.at_ms, c.after_txn, c.observed, c.allowed
                ),
            );
        }
    }
    // The output, judged only when every output partition was read in full.
    if w.output_partitions <= 0
        || (0..w.output_partitions).any(|p| !w.final_output.contains_key(&p))
    {
        return;
    }
    let mut visible: BTreeSet<&str> = BTreeSet::new();
    let mut out_where: BTreeMap<&str, Vec<(i32, i64)>> = BTreeMap::new();
    // input value -> transform txns whose output of it is visible
    let mut transformed: HashMap<&str, BTreeSet<usize>> = HashMap::new();
    for (&p, recs) in &w.final_output {
        for (o, v) in recs {
            rep.w3.outputs += 1;
            visible.insert(v.as_str());
            out_where.entry(v.as_str()).or_default().push((p, *o));
            let writer = parse_output(v).and_then(|(input, k)| {
                let t = w.transforms.get(k)?;
                t.txn
                    .writes
                    .iter()
                    .any(|(_, wv)| wv == v)
                    .then_some((input, t))
            });
            match writer {
                None => rep.add(
                    Anomaly::GarbageRead,
                    format!("W3 output {v:?} at {p}/{o} was never written"),
                ),
                Some((_, t)) if t.txn.outcome == Outcome::Aborted => rep.add(
                    Anomaly::AbortedRead,
                    format!(
                        "W3 output {v:?} at {p}/{o} of aborted transform txn {} ({} pid {} \
                         epoch {}: {})",
                        t.txn.id, t.txn.tid, t.txn.pid, t.txn.epoch, t.txn.note
                    ),
                ),
                Some((input, t)) => {
                    transformed.entry(input).or_default().insert(t.txn.id);
                }
            }
        }
    }
    for (v, places) in &out_where {
        if places.len() > 1 {
            rep.add(Anomaly::Duplicate, format!("W3 output {v:?} at {places:?}"));
        }
    }
    // I2 / I3 of the transform transactions.
    for t in &w.transforms {
        let (seen, missing): (Vec<&str>, Vec<&str>) = t
            .txn
            .writes
            .iter()
            .map(|(_, v)| v.as_str())
            .partition(|v| visible.contains(v));
        if seen.is_empty() || missing.is_empty() {
            if t.txn.outcome == Outcome::Committed && !missing.is_empty() {
                rep.add(
                    Anomaly::LostCommit,
                    format!(
                        "W3 transform txn {} ({} pid {} epoch {}): missing {missing:?}",
                        t.txn.id, t.txn.tid, t.txn.pid, t.txn.epoch
                    ),
                );
            }
            continue;
        }
        rep.add(
            Anomaly::TornTransaction,
            format!(
                "W3 transform txn {} ({} pid {} epoch {}, {:?}): visible {seen:?}, missing \
                 {missing:?}",
                t.txn.id, t.txn.tid, t.txn.pid, t.txn.epoch, t.txn.outcome
            ),
        );
    }
    // Exactly once against the final committed offsets.
    for (&p, recs) in &w.final_input {
        let Some(&committed) = w.final_offsets.get(&p) else {
            continue;
        };
        for (o, v) in recs {
            let by: Vec<usize> = transformed
                .get(v.as_str())
                .map(|s| s.iter().copied().collect())
                .unwrap_or_default();
            if *o < committed {
                rep.w3.inputs_checked += 1;
                if by.is_empty() {
                    rep.add(
                        Anomaly::W3LostTransform,
                        format!(
                            "input {v:?} at {p}/{o} is below the committed offset {committed} \
                             and has no visible transform"
                        ),
                    );
                } else if by.len() > 1 {
                    rep.add(
                        Anomaly::W3DuplicateTransform,
                        format!("input {v:?} at {p}/{o} transformed by txns {by:?}"),
                    );
                }
            } else if !by.is_empty() {
                rep.add(
                    Anomaly::W3OffsetMismatch,
                    format!(
                        "input {v:?} at {p}/{o} is at or beyond the committed offset \
                         {committed}, but transformed by txns {by:?}"
                    ),
                );
            }
        }
        if let Some(t) = w
            .transforms
            .iter()
            .filter(|t| t.partition == p && t.txn.outcome == Outcome::Committed)
            .max_by_key(|t| t.to)
            .filter(|t| t.to > committed)
        {
            rep.add(
                Anomaly::W3OffsetMismatch,
                format!(
                    "partition {p}: committed offset {committed} is below {} of acknowledged \
                     transform txn {} ({} pid {} epoch {})",
                    t.to, t.txn.id, t.txn.tid, t.txn.pid, t.txn.epoch
                ),
            );
        }
    }
}

/// The highest epoch among some issuances done before a given time: (completion time, highest
/// epoch done by then) in completion order, searched by binary search. I8 and I9 ask it.
#[derive(Default)]
struct HighestDone(Vec<(u64, i16)>);

impl HighestDone {
    fn new<'a>(issues: impl IntoIterator<Item = &'a Issue>) -> Self {
        let mut done: Vec<(u64, i16)> = issues
            .into_iter()
            .map(|i| (i.complete_ms, i.epoch))
            .collect();
        done.sort_by_key(|d| d.0);
        let mut max = i16::MIN;
        for d in &mut done {
            max = max.max(d.1);
            d.1 = max;
        }
        Self(done)
    }

    /// The highest epoch done strictly before `t` (`None`: none was).
    fn before(&self, t: u64) -> Option<i16> {
        let n = self.0.partition_point(|(at, _)| *at < t);
        self.0.get(n.checked_sub(1)?).map(|d| d.1)
    }
}

/// Whether some issuance of `group` (one tid and pid) was sent after another one was done with
/// an epoch at least as high.
fn has_epoch_not_above_an_earlier_one(group: &[&Issue]) -> bool {
    let done = HighestDone::new(group.iter().copied());
    group
        .iter()
        .any(|b| done.before(b.invoke_ms).is_some_and(|e| b.epoch <= e))
}

/// The epochs issued per producer id, for I9's question "was an epoch above this one issued
/// before this produce was sent?" in a binary search instead of a scan of every issuance.
struct EpochsIssued<'a> {
    by_pid: HashMap<i64, PidIssues<'a>>,
}

/// One producer id's issuances.
#[derive(Default)]
struct PidIssues<'a> {
    /// In history order.
    order: Vec<&'a Issue>,
    highest_done: HighestDone,
}

impl<'a> EpochsIssued<'a> {
    fn new(issues: &'a [Issue]) -> Self {
        let mut by_pid: HashMap<i64, PidIssues<'a>> = HashMap::new();
        for is in issues {
            by_pid.entry(is.pid).or_default().order.push(is);
        }
        for p in by_pid.values_mut() {
            p.highest_done = HighestDone::new(p.order.iter().copied());
        }
        Self { by_pid }
    }

    /// The first issuance (in history order) of `pid` with an epoch above `epoch`, done before
    /// `before_ms`.
    fn newer_before(&self, pid: i64, epoch: i16, before_ms: u64) -> Option<&'a Issue> {
        let p = self.by_pid.get(&pid)?;
        if p.highest_done.before(before_ms)? <= epoch {
            return None;
        }
        p.order
            .iter()
            .copied()
            .find(|is| is.epoch > epoch && is.complete_ms < before_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fault::history::{Accepted, OffsetCheck, Read, TransformOp, TxnOp};

    fn txn(id: usize, outcome: Outcome, writes: &[(i32, &str)]) -> TxnOp {
        TxnOp {
            id,
            process: 0,
            tid: "t".into(),
            pid: 1,
            epoch: 0,
            writes: writes.iter().map(|(p, v)| (*p, (*v).to_owned())).collect(),
            outcome,
            invoke_ms: 10 * id as u64,
            complete_ms: 10 * id as u64 + 5,
            note: String::new(),
        }
    }

    fn read(p: i32, o: i64, v: &str, final_read: bool) -> Read {
        Read {
            process: 9,
            partition: p,
            offset: o,
            value: v.into(),
            final_read,
        }
    }

    fn base() -> Record {
        Record {
            txns: vec![
                txn(0, Outcome::Committed, &[(0, "a"), (1, "b")]),
                txn(1, Outcome::Aborted, &[(0, "c")]),
                txn(2, Outcome::Indeterminate, &[(0, "d"), (1, "e")]),
            ],
            reads: vec![read(0, 0, "a", true), read(1, 0, "b", true)],
            final_partitions: vec![0, 1],
            ..Record::default()
        }
    }

    #[test]
    fn a_clean_history_is_valid() {
        let r = check(&base());
        assert!(r.is_valid(), "{r}");
        assert_eq!((r.committed, r.aborted, r.indeterminate), (3 - 2, 1, 1));
        // an indeterminate transaction may be fully visible
        let mut h = base();
        h.reads.push(read(0, 1, "d", true));
        h.reads.push(read(1, 1, "e", true));
        let r = check(&h);
        assert!(r.is_valid(), "{r}");
        assert_eq!(r.indeterminate_visible, 1);
    }

    #[test]
    fn aborted_and_garbage_reads_are_found() {
        let mut h = base();
        h.reads.push(read(0, 1, "c", false));
        h.reads.push(read(0, 2, "zz", false));
        let r = check(&h);
        assert_eq!(r.count(Anomaly::AbortedRead), 1, "{r}");
        assert_eq!(r.count(Anomaly::GarbageRead), 1, "{r}");
    }

    #[test]
    fn torn_transactions_are_found() {
        let mut h = base();
        h.reads.push(read(0, 1, "d", true));
        let r = check(&h);
        assert_eq!(r.count(Anomaly::TornTransaction), 1, "{r}");
        // a committed one partially visible is torn and lost
        let mut h = base();
        h.reads.retain(|r| r.value != "b");
        let r = check(&h);
        assert_eq!(r.count(Anomaly::TornTransaction), 1, "{r}");
        assert_eq!(r.count(Anomaly::LostCommit), 1, "{r}");
    }

    #[test]
    fn lost_commits_and_kills_are_found() {
        let mut h = base();
        h.reads.clear();
        h.coordinator_kills.push(100);
        let r = check(&h);
        assert_eq!(r.count(Anomaly::LostCommit), 1, "{r}");
        assert_eq!(r.count(Anomaly::CommitLostAcrossKill), 1, "{r}");
        assert_eq!(r.count(Anomaly::TornTransaction), 0, "{r}");
        // a partition not read in full is not judged
        let mut h = base();
        h.reads.retain(|r| r.partition != 1);
        h.final_partitions = vec![0];
        assert!(check(&h).is_valid());
    }

    #[test]
    fn duplicates_and_inconsistent_offsets_are_found() {
        let mut h = base();
        h.reads.push(read(0, 5, "a", true));
        h.reads.push(read(1, 0, "d", false));
        let r = check(&h);
        assert_eq!(r.count(Anomaly::Duplicate), 1, "{r}");
        assert_eq!(r.count(Anomaly::InconsistentOffset), 1, "{r}");
    }

    fn issue(tid: &str, pid: i64, epoch: i16, t: u64) -> Issue {
        Issue {
            tid: tid.into(),
            pid,
            epoch,
            api: "InitProducerId",
            invoke_ms: t,
            complete_ms: t + 1,
        }
    }

    #[test]
    fn epoch_reuse_and_regression_are_found() {
        let mut h = base();
        h.issues = vec![
            issue("t", 1, 0, 0),
            issue("t", 1, 1, 10),
            issue("u", 2, 0, 5),
        ];
        assert!(check(&h).is_valid());
        h.issues.push(issue("u", 1, 1, 20));
        let r = check(&h);
        assert_eq!(r.count(Anomaly::EpochReuse), 1, "{r}");
        let mut h = base();
        h.issues = vec![issue("t", 1, 3, 0), issue("t", 1, 2, 10)];
        assert_eq!(check(&h).count(Anomaly::EpochReuse), 1);
    }

    #[test]
    fn zombie_writes_are_found() {
        let mut h = base();
        h.issues = vec![issue("t", 1, 0, 0), issue("t", 1, 1, 10)];
        let w = |epoch, invoke_ms| Accepted {
            tid: "t".into(),
            pid: 1,
            epoch,
            partition: 0,
            values: vec!["x".into()],
            invoke_ms,
        };
        h.accepted = vec![w(0, 5), w(1, 20)];
        assert!(check(&h).is_valid());
        h.accepted.push(w(0, 30));
        assert_eq!(check(&h).count(Anomaly::ZombieWrite), 1);
    }

    /// I8's and I9's searches give what the pairwise definitions give, on random
    /// histories with overlapping requests, repeated epochs and several pids per tid.
    #[test]
    fn the_epoch_checks_agree_with_the_pairwise_definitions() {
        let mut rng = crate::fault::workload::Rng::new(7);
        for _ in 0..500 {
            let n = 1 + rng.below(12) as usize;
            let issues: Vec<Issue> = (0..n)
                .map(|_| {
                    let invoke_ms = rng.below(100);
                    Issue {
                        tid: ["t", "u"][rng.below(2) as usize].into(),
                        pid: 1 + rng.below(2) as i64,
                        epoch: rng.below(5) as i16,
                        api: "InitProducerId",
                        invoke_ms,
                        complete_ms: invoke_ms + rng.below(30),
                    }
                })
                .collect();
            let mut groups: HashMap<(&str, i64), Vec<&Issue>> = HashMap::new();
            for is in &issues {
                groups
                    .entry((is.tid.as_str(), is.pid))
                    .or_default()
                    .push(is);
            }
            for g in groups.values() {
                let pairwise = g.iter().any(|a| {
                    g.iter()
                        .any(|b| a.complete_ms < b.invoke_ms && b.epoch <= a.epoch)
                });
                assert_eq!(has_epoch_not_above_an_earlier_one(g), pairwise, "{g:?}");
            }
            let issued = EpochsIssued::new(&issues);
            for _ in 0..20 {
                let (pid, epoch, at) =
                    (1 + rng.below(3) as i64, rng.below(5) as i16, rng.below(140));
                let first = issues
                    .iter()
                    .find(|is| is.pid == pid && is.epoch > epoch && is.complete_ms < at);
                assert_eq!(issued.newer_before(pid, epoch, at), first, "{issues:?}");
            }
        }
    }

    /// A W3 history: input partition 0 holds s1, s2, (aborted s3), s4; transform txn 0
    /// committed s1, s2 up to offset 2; txn 1 (s4) was aborted on purpose, the OffsetFetch
    /// after it returned 2; txn 2 committed s4 up to offset 5.
    fn w3_base() -> Record {
        let out =
            |id: usize, outcome, outputs: &[(i32, &str)], from, to, inputs: &[(i64, &str)]| {
                TransformOp {
                    txn: TxnOp {
                        tid: "w3-0".into(),
                        ..txn(id, outcome, outputs)
                    },
                    partition: 0,
                    from,
                    to,
                    inputs: inputs.iter().map(|(o, v)| (*o, (*v).to_owned())).collect(),
                }
            };
        let recs = |r: &[(i64, &str)]| -> Vec<(i64, String)> {
            r.iter().map(|(o, v)| (*o, (*v).to_owned())).collect()
        };
        Record {
            w3: W3Record {
                inputs: vec![
                    txn(0, Outcome::Committed, &[(0, "s1"), (0, "s2")]),
                    txn(1, Outcome::Aborted, &[(0, "s3")]),
                    txn(2, Outcome::Committed, &[(0, "s4")]),
                ],
                transforms: vec![
                    out(
                        0,
                        Outcome::Committed,
                        &[(0, "t:s1@0"), (1, "t:s2@0")],
                        0,
                        2,
                        &[(0, "s1"), (1, "s2")],
                    ),
                    out(1, Outcome::Aborted, &[(0, "t:s4@1")], 2, 5, &[(4, "s4")]),
                    out(2, Outcome::Committed, &[(1, "t:s4@2")], 2, 5, &[(4, "s4")]),
                ],
                offset_checks: vec![OffsetCheck {
                    process: 300,
                    partition: 0,
                    allowed: vec![2],
                    observed: 2,
                    after_txn: Some(1),
                    at_ms: 40,
                }],
                final_input: BTreeMap::from([(0, recs(&[(0, "s1"), (1, "s2"), (4, "s4")]))]),
                final_output: BTreeMap::from([
                    (0, recs(&[(0, "t:s1@0")])),
                    (1, recs(&[(0, "t:s2@0"), (2, "t:s4@2")])),
                ]),
                output_partitions: 2,
                final_offsets: BTreeMap::from([(0, 5)]),
            },
            ..Record::default()
        }
    }

    #[test]
    fn a_clean_w3_history_is_valid() {
        let r = check(&w3_base());
        assert!(r.is_valid(), "{r}");
        let want = W3Counts {
            committed: 2,
            aborted: 1,
            indeterminate: 0,
            input_txns: 3,
            inputs_checked: 3,
            outputs: 3,
            offset_checks: 1,
        };
        assert_eq!(r.w3, want);
        assert!(r.to_string().contains("W3: 2 transforms committed"), "{r}");
        // input beyond the committed offset without output is fine (not consumed yet)
        let mut h = w3_base();
        h.w3.transforms[2].txn.outcome = Outcome::Indeterminate;
        h.w3.final_output.get_mut(&1).expect("p1").pop();
        h.w3.final_offsets.insert(0, 2);
        let r = check(&h);
        assert!(r.is_valid(), "{r}");
        assert_eq!(r.w3.inputs_checked, 2);
    }

    #[test]
    fn w3_lost_transforms_are_found() {
        // the offset of txn 2 is committed (indeterminate commit) but its output is not visible
        let mut h = w3_base();
        h.w3.transforms[2].txn.outcome = Outcome::Indeterminate;
        h.w3.final_output.get_mut(&1).expect("p1").pop();
        let r = check(&h);
        assert_eq!(r.count(Anomaly::W3LostTransform), 1, "{r}");
        assert_eq!(r.count(Anomaly::LostCommit), 0, "{r}");
        assert_eq!(r.anomalies.values().map(Vec::len).sum::<usize>(), 1, "{r}");
    }

    #[test]
    fn w3_duplicate_transforms_are_found() {
        let mut h = w3_base();
        let mut again = h.w3.transforms[2].clone();
        again.txn.id = 3;
        again.txn.writes = vec![(0, "t:s4@3".into())];
        h.w3.transforms.push(again);
        h.w3.final_output
            .get_mut(&0)
            .expect("p0")
            .push((1, "t:s4@3".into()));
        let r = check(&h);
        assert_eq!(r.count(Anomaly::W3DuplicateTransform), 1, "{r}");
        assert!(!r.is_valid());
    }

    #[test]
    fn w3_offset_mismatches_are_found() {
        // the committed offset went back below txn 2's: s4's output is beyond it
        let mut h = w3_base();
        h.w3.final_offsets.insert(0, 2);
        let r = check(&h);
        assert_eq!(r.count(Anomaly::W3OffsetMismatch), 2, "{r}");
        // the offset of aborted txn 1 was visible after its abort
        let mut h = w3_base();
        h.w3.offset_checks[0].observed = 5;
        let r = check(&h);
        assert_eq!(r.count(Anomaly::W3OffsetMismatch), 1, "{r}");
        assert!(r.to_string().contains("W3 offset-mismatch: 1"), "{r}");
    }

    #[test]
    fn w3_aborted_reads_and_lost_inputs_are_found() {
        // the aborted transform's output is visible
        let mut h = w3_base();
        h.w3.final_output
            .get_mut(&0)
            .expect("p0")
            .push((1, "t:s4@1".into()));
        let r = check(&h);
        assert_eq!(r.count(Anomaly::AbortedRead), 1, "{r}");
        // a transformer consumed an aborted input value
        let mut h = w3_base();
        h.w3.transforms[1].inputs.push((2, "s3".into()));
        let r = check(&h);
        assert_eq!(r.count(Anomaly::AbortedRead), 1, "{r}");
        // a committed input value is missing from the input topic
        let mut h = w3_base();
        h.w3.final_input.get_mut(&0).expect("p0").remove(1);
        let r = check(&h);
        assert_eq!(r.count(Anomaly::LostCommit), 1, "{r}");
        // the output is not judged unless every output partition was read
        let mut h = w3_base();
        h.w3.final_output.remove(&1);
        h.w3.final_offsets.insert(0, 2);
        assert!(check(&h).is_valid());
    }

    #[test]
    fn hangs_and_log_findings_are_counted() {
        let mut h = base();
        h.hangs.push((0, 3, 7, "x".into()));
        h.log_findings.push(("I12", "a".into()));
        h.log_findings.push(("I13", "b".into()));
        let r = check(&h);
        assert_eq!(r.count(Anomaly::HangingTransaction), 1);
        assert_eq!(r.count(Anomaly::PrepareAborted), 1);
        assert_eq!(r.count(Anomaly::InvalidPersistedState), 1);
        assert!(!r.is_valid());
        assert!(r.to_string().contains("I11 hanging-transaction: 1"));
    }
}
