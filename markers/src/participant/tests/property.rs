//! Property test over random interleavings of produce (several producers, retries, epoch
//! bumps, zombies, gaps) and markers (TV0 and TV2, retries, stale coordinators), against a
//! model log built here. After every step:
//! - a read_committed consumer (Kafka's client algorithm: skip batches of producers with an
//!   aborted transaction in the Fetch's `aborted_transactions`, until their ABORT marker)
//!   never sees an aborted or open record, and sees every committed and non-transactional one
//!   below the LSO (reference I1, I2);
//! - the LSO never passes an open transaction nor an unreplicated marker, and equals the
//!   model's (I11's precondition);
//! - a retry is never appended twice (I4); stale producer or coordinator epochs are rejected (I9, S102).
//!
//! At the end the log is replayed into a fresh state, which must equal the live one.

use std::collections::HashSet;

use proptest::prelude::*;
use txn_log::{CoordinatorEpoch, ErrorCode, ProducerEpoch, ProducerId, TxnResult};

use crate::participant::*;

#[derive(Debug, Clone)]
enum Op {
    Produce { p: usize, n: i32 },
    Retry { p: usize, back: usize },
    EndTxn { p: usize, commit: bool },
    RetryMarker { p: usize },
    Bump { p: usize },
    Zombie { p: usize },
    Gap { p: usize, by: i32 },
    NonTxnInTxn { p: usize },
    StaleCoordinatorMarker { p: usize },
    CoordinatorFailover,
    Plain,
    Replicate { frac: u8 },
}

fn op() -> impl Strategy<Value = Op> {
    let p = 0..PRODUCERS;
    prop_oneof![
        8 => (p.clone(), 1..4i32).prop_map(|(p, n)| Op::Produce { p, n }),
        3 => (p.clone(), 0..8usize).prop_map(|(p, back)| Op::Retry { p, back }),
        4 => (p.clone(), any::<bool>()).prop_map(|(p, commit)| Op::EndTxn { p, commit }),
        1 => p.clone().prop_map(|p| Op::RetryMarker { p }),
        1 => p.clone().prop_map(|p| Op::Bump { p }),
        1 => p.clone().prop_map(|p| Op::Zombie { p }),
        1 => (p.clone(), 1..3i32).prop_map(|(p, by)| Op::Gap { p, by }),
        1 => p.clone().prop_map(|p| Op::NonTxnInTxn { p }),
        1 => p.prop_map(|p| Op::StaleCoordinatorMarker { p }),
        1 => Just(Op::CoordinatorFailover),
        1 => Just(Op::Plain),
        3 => any::<u8>().prop_map(|frac| Op::Replicate { frac }),
    ]
}

/// Producers 0: transactional TV0; 1, 2: transactional TV2; 3: idempotent, starting near
/// `i32::MAX` to cross the sequence wrap.
const PRODUCERS: usize = 4;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    NonTxn,
    Open,
    Committed,
    Aborted,
}

#[derive(Debug, Clone, Copy)]
struct Sent {
    epoch: i16,
    header: BatchHeader,
    base_offset: i64,
}

#[derive(Debug)]
struct Client {
    pid: ProducerId,
    tv: Option<TxnVersion>,
    epoch: i16,
    next_seq: i32,
    /// Model-log indices of this producer's batches in the open transaction.
    open: Vec<usize>,
    sent: Vec<Sent>,
    last_marker: Option<Marker>,
    /// Epoch the partition knows for this producer (from data or markers).
    part_epoch: Option<i16>,
    last_ce: Option<i32>,
}

struct Model {
    state: PartitionState,
    clients: Vec<Client>,
    /// (batch, status) in log order; status is meaningful for data batches only.
    log: Vec<(LogBatch, Status)>,
    ids: HashSet<(i64, i16, i32)>,
    /// (first offset, marker offset) of completed transactions.
    completed: Vec<(i64, i64)>,
    hw: i64,
    ce: i32,
}

fn code<T: std::fmt::Debug>(r: Result<T, ProduceError>) -> ErrorCode {
    r.expect_err("must be rejected").code()
}

impl Model {
    fn new() -> Self {
        let clients = (0..PRODUCERS)
            .map(|i| Client {
                pid: ProducerId(100 + i as i64),
                tv: match i {
                    0 => Some(TxnVersion::V0),
                    1 | 2 => Some(TxnVersion::V2),
                    _ => None,
                },
                epoch: 0,
                next_seq: if i == 3 { i32::MAX - 6 } else { 0 },
                open: Vec::new(),
                sent: Vec::new(),
                last_marker: None,
                part_epoch: None,
                last_ce: None,
            })
            .collect();
        Self {
            state: PartitionState::new(ParticipantConfig::default(), 0),
            clients,
            log: Vec::new(),
            ids: HashSet::new(),
            completed: Vec::new(),
            hw: 0,
            ce: 0,
        }
    }

    fn header(&self, p: usize, epoch: i16, seq: i32, n: i32, transactional: bool) -> BatchHeader {
        let pid = self.clients[p].pid;
        let e = ProducerEpoch(epoch);
        if transactional {
            BatchHeader::transactional(pid, e, seq, n)
        } else {
            BatchHeader::idempotent(pid, e, seq, n)
        }
    }

    fn append_data(&mut self, p: Option<usize>, h: BatchHeader) {
        let ProduceDecision::Append(pending) = self.state.check_batch(&h).expect("accepted") else {
            panic!("fresh batch {h:?} taken for a duplicate");
        };
        let at = self.state.next_offset();
        let done = self.state.complete_append(pending, at).expect("recorded");
        assert_eq!(done.base_offset, at);
        let status = match p {
            None => Status::NonTxn,
            Some(p) => {
                let c = &mut self.clients[p];
                for i in 0..h.record_count {
                    let id = (c.pid.0, c.epoch, increment_sequence(h.base_sequence, i));
                    assert!(self.ids.insert(id), "record {id:?} appended twice");
                }
                c.sent.push(Sent {
                    epoch: c.epoch,
                    header: h,
                    base_offset: at,
                });
                c.next_seq = increment_sequence(c.next_seq, h.record_count);
                c.part_epoch = Some(c.epoch);
                if h.is_transactional {
                    c.open.push(self.log.len());
                    Status::Open
                } else {
                    Status::NonTxn
                }
            }
        };
        self.log.push((LogBatch::Data(h.at_offset(at)), status));
    }

    /// Appends the control batch of a checked marker at the next offset (encoded and parsed
    /// back, as a log would store it), completes it in the state and returns what it applied.
    fn append_marker(&mut self, pending: PendingMarker) -> MarkerApplied {
        let at = self.state.next_offset();
        let bytes = pending.control_batch(at, 0, at).encode().expect("encodes");
        let applied = self
            .state
            .complete_marker(pending, at, at)
            .expect("recorded");
        let (batch, _) = LogBatch::read_one(&bytes).expect("parses");
        self.log.push((batch, Status::NonTxn));
        applied
    }

    fn write_marker(&mut self, p: usize, m: Marker) -> Result<MarkerApplied, MarkerError> {
        let pending = self.state.check_marker(&m)?;
        let at = self.state.next_offset();
        let applied = self.append_marker(pending);
        let c = &mut self.clients[p];
        let open = std::mem::take(&mut c.open);
        assert_eq!(applied.completed.is_some(), !open.is_empty(), "{m:?}");
        if let Some(first) = open.first() {
            let first_offset = self.log[*first].0.header().base_offset;
            assert_eq!(
                applied.completed.map(|t| t.first_offset),
                Some(first_offset)
            );
            self.completed.push((first_offset, at));
        }
        let status = match m.result {
            TxnResult::Commit => Status::Committed,
            TxnResult::Abort => Status::Aborted,
        };
        for i in open {
            self.log[i].1 = status;
        }
        c.part_epoch = Some(m.producer_epoch.0);
        c.last_ce = Some(m.coordinator_epoch.0);
        c.last_marker = Some(m);
        Ok(applied)
    }

    fn marker(&self, p: usize, epoch: i16, ce: i32, result: TxnResult) -> Marker {
        let c = &self.clients[p];
        Marker {
            producer_id: c.pid,
            producer_epoch: ProducerEpoch(epoch),
            coordinator_epoch: CoordinatorEpoch(ce),
            result,
            txn_version: c.tv.unwrap_or(TxnVersion::V0),
        }
    }

    fn step(&mut self, op: &Op) {
        match *op {
            Op::Produce { p, n } => {
                let c = &self.clients[p];
                let h = self.header(p, c.epoch, c.next_seq, n, c.tv.is_some());
                self.append_data(Some(p), h);
            }
            Op::Retry { p, back } => {
                let c = &self.clients[p];
                if c.sent.is_empty() {
                    return;
                }
                let s = c.sent[c.sent.len() - 1 - back % c.sent.len()];
                let part = c.part_epoch.expect("sent implies known");
                let verdict = self.state.check_batch(&s.header);
                if s.epoch < part {
                    assert_eq!(code(verdict), 47, "stale retry {s:?}");
                    return;
                }
                let window: Vec<i64> = c
                    .sent
                    .iter()
                    .filter(|x| x.epoch == part)
                    .rev()
                    .take(BATCHES_RETAINED)
                    .map(|x| x.base_offset)
                    .collect();
                if window.contains(&s.base_offset) {
                    match verdict {
                        Ok(ProduceDecision::Duplicate(d)) => {
                            assert_eq!(d.base_offset, s.base_offset)
                        }
                        other => panic!("retry {s:?} not a duplicate: {other:?}"),
                    }
                } else {
                    assert_eq!(code(verdict), 45, "retry outside the window {s:?}");
                }
            }
            Op::EndTxn { p, commit } => {
                let c = &self.clients[p];
                let Some(tv) = c.tv else { return };
                let epoch = if tv.bumps_epoch_per_txn() {
                    c.epoch + 1
                } else {
                    c.epoch
                };
                let result = if commit {
                    TxnResult::Commit
                } else {
                    TxnResult::Abort
                };
                let m = self.marker(p, epoch, self.ce, result);
                self.write_marker(p, m).expect("marker accepted");
                if tv.bumps_epoch_per_txn() {
                    let c = &mut self.clients[p];
                    c.epoch = epoch;
                    c.next_seq = 0;
                }
            }
            Op::RetryMarker { p } => {
                let c = &self.clients[p];
                let (Some(m), Some(tv), Some(part)) = (c.last_marker, c.tv, c.part_epoch) else {
                    return;
                };
                let open = !c.open.is_empty();
                if !tv.bumps_epoch_per_txn() && open {
                    // a TV0 marker cannot tell a retry from the next transaction's end:
                    // the coordinator never resends once the next transaction started.
                    return;
                }
                let stale = m.producer_epoch.0 < part || (tv.bumps_epoch_per_txn() && open);
                let r = self.state.check_marker(&m);
                if stale {
                    assert_eq!(r.expect_err("stale marker retry").code(), 47, "{m:?}");
                } else {
                    let applied = self.append_marker(r.expect("idempotent marker retry"));
                    assert_eq!(applied.completed, None);
                }
            }
            Op::Bump { p } => {
                let c = &self.clients[p];
                if c.epoch > 1000 {
                    return;
                }
                let mut next = c.epoch + 1;
                if c.tv.is_some() && !c.open.is_empty() {
                    // InitProducerId fences: abort with epoch + 1, the new instance gets + 2
                    let m = self.marker(p, c.epoch + 1, self.ce, TxnResult::Abort);
                    self.write_marker(p, m).expect("fencing abort accepted");
                    next += 1;
                }
                let c = &mut self.clients[p];
                c.epoch = next;
                c.next_seq = 0;
            }
            Op::Zombie { p } => {
                let c = &self.clients[p];
                let Some(part) = c.part_epoch.filter(|&e| e > 0) else {
                    return;
                };
                let h = self.header(p, part - 1, 0, 1, c.tv.is_some());
                assert_eq!(code(self.state.check_batch(&h)), 47, "zombie batch");
                if c.tv.is_some() {
                    let m = self.marker(p, part - 1, self.ce, TxnResult::Commit);
                    let e = self.state.check_marker(&m).expect_err("zombie marker");
                    assert_eq!(e.code(), 47);
                }
            }
            Op::Gap { p, by } => {
                let c = &self.clients[p];
                if c.part_epoch.is_none() {
                    return; // an unknown producer may start anywhere
                }
                let seq = increment_sequence(c.next_seq, by);
                let h = self.header(p, c.epoch, seq, 1, c.tv.is_some());
                assert_eq!(code(self.state.check_batch(&h)), 45, "gap");
            }
            Op::NonTxnInTxn { p } => {
                let c = &self.clients[p];
                if c.tv.is_none() || c.open.is_empty() {
                    return;
                }
                let h = self.header(p, c.epoch, c.next_seq, 1, false);
                assert_eq!(code(self.state.check_batch(&h)), 48);
            }
            Op::StaleCoordinatorMarker { p } => {
                let c = &self.clients[p];
                let (Some(tv), Some(ce)) = (c.tv, c.last_ce) else {
                    return;
                };
                if ce == 0 {
                    return;
                }
                let epoch = if tv.bumps_epoch_per_txn() {
                    c.epoch + 1
                } else {
                    c.epoch
                };
                let m = self.marker(p, epoch, ce - 1, TxnResult::Commit);
                let e = self.state.check_marker(&m).expect_err("zombie coordinator");
                assert_eq!(e.code(), 52);
            }
            Op::CoordinatorFailover => self.ce += 1,
            Op::Plain => self.append_data(None, BatchHeader::plain(1)),
            Op::Replicate { frac } => {
                let boundaries: Vec<i64> = self
                    .log
                    .iter()
                    .map(|(b, _)| b.header().last_offset() + 1)
                    .filter(|&o| o > self.hw)
                    .collect();
                if boundaries.is_empty() {
                    return;
                }
                self.hw = boundaries[usize::from(frac) * boundaries.len() / 256];
                self.state.advance_high_watermark(self.hw);
            }
        }
    }

    fn expected_lso(&self) -> i64 {
        let open = self
            .log
            .iter()
            .filter(|(_, s)| *s == Status::Open)
            .map(|(b, _)| b.header().base_offset);
        let unreplicated = self
            .completed
            .iter()
            .filter(|(_, marker)| *marker >= self.hw)
            .map(|(first, _)| *first);
        open.chain(unreplicated)
            .chain([self.hw])
            .min()
            .unwrap_or(self.hw)
    }

    /// A read_committed consumer fetching from `from` up to the LSO, filtering with the
    /// aborted transactions the state returns (Kafka's `CompletedFetch` algorithm).
    fn consume(&self, from: i64) -> Vec<usize> {
        let read = self.state.read_committed(from, i64::MAX);
        let mut aborted = read.aborted.clone();
        aborted.sort_by_key(|t| t.first_offset);
        let mut aborted = aborted.into_iter().peekable();
        let mut active: HashSet<ProducerId> = HashSet::new();
        let mut seen = Vec::new();
        for (i, (batch, _)) in self.log.iter().enumerate() {
            let h = batch.header();
            if h.last_offset() < from || h.base_offset >= read.last_stable_offset {
                continue;
            }
            while let Some(t) = aborted.next_if(|t| t.first_offset <= h.last_offset()) {
                active.insert(t.producer_id);
            }
            match batch {
                LogBatch::Control {
                    record:
                        ControlRecord::EndTxn {
                            result: TxnResult::Abort,
                            ..
                        },
                    ..
                } => {
                    active.remove(&h.producer_id);
                }
                LogBatch::Control { .. } => {}
                LogBatch::Data(h) => {
                    if !(h.is_transactional && active.contains(&h.producer_id)) {
                        seen.push(i);
                    }
                }
            }
        }
        seen
    }

    fn check(&self) {
        let lso = self.state.last_stable_offset();
        assert_eq!(lso, self.expected_lso(), "LSO");
        assert!(lso <= self.hw);
        for (b, s) in &self.log {
            if *s == Status::Open {
                assert!(
                    lso <= b.header().base_offset,
                    "LSO {lso} passed an open txn {b:?}"
                );
            }
        }
        let starts: Vec<i64> = [0, self.log.len() / 2]
            .iter()
            .filter_map(|&i| self.log.get(i).map(|(b, _)| b.header().base_offset))
            .collect();
        for from in starts {
            let seen = self.consume(from);
            for &i in &seen {
                let (b, s) = &self.log[i];
                assert!(
                    matches!(s, Status::NonTxn | Status::Committed),
                    "read_committed from {from} returned {s:?} batch {b:?}"
                );
            }
            for (i, (b, s)) in self.log.iter().enumerate() {
                let h = b.header();
                let visible = matches!(b, LogBatch::Data(_))
                    && matches!(s, Status::NonTxn | Status::Committed)
                    && h.base_offset >= from
                    && h.last_offset() < lso;
                if visible {
                    assert!(
                        seen.contains(&i),
                        "committed batch {b:?} lost (from {from})"
                    );
                }
            }
        }
    }

    fn finish(&mut self) {
        self.hw = self.state.next_offset();
        self.state.advance_high_watermark(self.hw);
        self.check();
        let mut replayed = PartitionState::replay(
            ParticipantConfig::default(),
            0,
            self.log.iter().map(|(b, _)| b.clone()),
        )
        .expect("replay");
        replayed.advance_high_watermark(self.hw);
        assert_eq!(
            replayed.last_stable_offset(),
            self.state.last_stable_offset()
        );
        assert_eq!(
            replayed.read_committed(0, i64::MAX),
            self.state.read_committed(0, i64::MAX)
        );
        for (pid, e) in self.state.producers() {
            assert_eq!(
                replayed.producer(pid),
                Some(e),
                "producer {pid} after replay"
            );
        }
        assert_eq!(replayed.producers().count(), self.state.producers().count());
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn random_interleavings_keep_read_committed_and_fencing_sound(ops in proptest::collection::vec(op(), 1..160)) {
        let mut m = Model::new();
        for op in &ops {
            m.step(op);
            m.check();
        }
        m.finish();
    }
}
