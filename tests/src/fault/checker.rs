//! The checker: a pure function of a [`Record`] that counts anomalies per invariant class
//! (I1-I5, I8, I9, I11-I14 of `docs/reliability.md`) and keeps the offending operations.
//!
//! It decides like Jepsen's Kafka checker (`jepsen.tests.kafka`): a value whose transaction is
//! definitely not committed must never be read (G1a); one (partition, offset) holds one value;
//! a value lives at one offset; after healing the final full read must contain every value of
//! every acknowledged commit and, for any transaction of which one value is visible, all of
//! them. Indeterminate transactions may or may not be visible, but never partially.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;

use super::history::{Outcome, Record};

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
    /// I11: a partition's LSO did not reach its high watermark after healing.
    HangingTransaction,
    /// I12: the reaper (or anything) aborted a transaction after its commit was acknowledged.
    PrepareAborted,
    /// I13: a persisted record is not a state the state table allows.
    InvalidPersistedState,
    /// I14: an acknowledged commit was lost across a SIGKILL of the coordinator.
    CommitLostAcrossKill,
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
            Self::HangingTransaction => "I11 hanging-transaction",
            Self::PrepareAborted => "I12 prepare-aborted",
            Self::InvalidPersistedState => "I13 invalid-persisted-state",
            Self::CommitLostAcrossKill => "I14 commit-lost-across-kill",
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
    /// Faults injected.
    pub faults: usize,
    /// Persisted coordinator records audited.
    pub log_records: usize,
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
    for a in &h.issues {
        for b in &h.issues {
            if a.tid == b.tid && a.pid == b.pid && a.complete_ms < b.invoke_ms && b.epoch <= a.epoch
            {
                rep.add(
                    Anomaly::EpochReuse,
                    format!(
                        "{}: pid {} epoch {} ({} done at {} ms) then epoch {} ({} sent at {} ms)",
                        a.tid, a.pid, a.epoch, a.api, a.complete_ms, b.epoch, b.api, b.invoke_ms
                    ),
                );
            }
        }
    }

    // I9: an accepted produce whose epoch is below an epoch of the same pid issued before the
    // produce was sent.
    for w in &h.accepted {
        if let Some(newer) = h
            .issues
            .iter()
            .find(|is| is.pid == w.pid && is.epoch > w.epoch && is.complete_ms < w.invoke_ms)
        {
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

    // I12 / I13 from the offline log audit.
    for (class, text) in &h.log_findings {
        let a = match *class {
            "I12" => Anomaly::PrepareAborted,
            "I11" => Anomaly::HangingTransaction,
            _ => Anomaly::InvalidPersistedState,
        };
        rep.add(a, text.clone());
    }
    rep
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fault::history::{Accepted, Issue, Read, TxnOp};

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
