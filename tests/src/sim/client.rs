//! A simulated transactional producer: the request sequence of Kafka's clients (InitProducerId,
//! AddPartitionsToTxn v3, Produce, EndTxn v3 under TV1 / v5 under TV2) as a state machine the
//! world steps, with the fault harness's retry and outcome rules (`fault::client` and
//! `fault::workload`): retriable answers and timeouts are retried within a budget, an answer
//! after an unanswered attempt is indeterminate, and a commit never answered is never aborted.

use coordinator::{
    AddPartitionsToTxnRequest, EndTxnRequest, InitProducerIdRequest, Request, Response,
};
use txn_log::{ErrorCode, ProducerEpoch, ProducerId, TopicPartition, TxnVersion};

/// What a client wants sent next.
#[derive(Debug, Clone)]
pub enum Send {
    /// A request to the coordinator of the client's transactional id.
    Coordinator(Request),
    /// A transactional produce to the partition's leader.
    Produce(Produce),
}

/// A transactional produce of `values` to `partition` with sequence `seq`.
#[derive(Debug, Clone)]
pub struct Produce {
    /// Partition of the workload topic.
    pub partition: i32,
    /// Producer id.
    pub pid: i64,
    /// Producer epoch.
    pub epoch: i16,
    /// Base sequence.
    pub seq: i32,
    /// Values, one record each.
    pub values: Vec<String>,
}

/// An answer to the client's outstanding request.
#[derive(Debug, Clone)]
pub enum Answer {
    /// From the coordinator.
    Coordinator(Response),
    /// From a partition leader: the produce's error code.
    Produce(ErrorCode),
}

impl Answer {
    /// The answer's error code: the top-level one, else the first partition's error of an
    /// AddPartitionsToTxn answer (NONE when every partition was added).
    pub fn error_code(&self) -> ErrorCode {
        match self {
            Self::Produce(c) => *c,
            Self::Coordinator(r) => match r {
                Response::InitProducerId(r) => r.error,
                Response::AddPartitionsToTxn(r) if r.error != ErrorCode::NONE => r.error,
                Response::AddPartitionsToTxn(r) => r
                    .results
                    .iter()
                    .flat_map(|t| t.partitions.iter().map(|(_, c)| *c))
                    .find(|c| *c != ErrorCode::NONE)
                    .unwrap_or(ErrorCode::NONE),
                Response::EndTxn(r) => r.error,
                _ => ErrorCode::UNKNOWN_SERVER_ERROR,
            },
        }
    }
}

/// How the current operation ended.
enum OpEnd {
    Ok(Answer),
    /// A definite refusal (no unanswered attempt before it).
    Definite(ErrorCode),
    /// Budget spent, or a refusal after an unanswered attempt.
    Indeterminate,
}

/// Where the client is in its transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Phase {
    Init,
    /// Adding the partition of write `i`.
    Add(usize),
    /// Producing write `i`.
    Produce(usize),
    /// EndTxn; `aborting_failed` when the transaction failed before its end.
    End {
        commit: bool,
        aborting_failed: bool,
    },
    Done,
}

/// One transaction the client will run: its writes and whether it commits.
#[derive(Debug, Clone)]
pub struct Plan {
    /// (partition, value) per produce.
    pub writes: Vec<(i32, String)>,
    /// Commit (true) or abort.
    pub commit: bool,
}

/// What the client asks the world to record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A transaction starts with this (pid, epoch).
    Invoke {
        /// Index of the transaction in the client's plans.
        plan: usize,
        /// Producer id the transaction runs under.
        pid: i64,
        /// Producer epoch the transaction runs under.
        epoch: i16,
    },
    /// Writes of the running transaction (recorded before the produce is sent).
    Writes {
        /// Partition of the workload topic written.
        partition: i32,
        /// Values produced.
        values: Vec<String>,
    },
    /// The running transaction ended.
    Complete {
        /// What the client learned of its fate.
        outcome: crate::fault::history::Outcome,
        /// Why, when not plainly the answer to its EndTxn.
        note: String,
    },
    /// A (pid, epoch) was handed out by `api`; the operation was started at `invoke_ms`.
    Issued {
        /// Producer id handed out.
        pid: i64,
        /// Producer epoch handed out.
        epoch: i16,
        /// The API that handed it out (`InitProducerId` or `EndTxn`).
        api: &'static str,
        /// Simulated time (ms) the operation was first sent.
        invoke_ms: u64,
    },
}

/// A simulated client.
#[derive(Debug)]
pub struct Client {
    /// Transactional id.
    pub tid: String,
    /// Transaction version.
    pub tv: TxnVersion,
    /// Topic of the writes.
    topic: String,
    pid: i64,
    epoch: i16,
    seqs: std::collections::BTreeMap<i32, i32>,
    added: std::collections::BTreeSet<i32>,
    plans: Vec<Plan>,
    current: usize,
    phase: Phase,
    need_init: bool,
    op_started_ms: u64,
    op_attempts: u32,
    ambiguous: bool,
    /// Serial of the outstanding attempt (answers to older ones are ignored).
    pub serial: u64,
    /// Whether an attempt is on the wire.
    pub waiting: bool,
}

/// Attempts per operation before the client gives up (the fault client's budget).
pub const MAX_ATTEMPTS: u32 = 6;

impl Client {
    /// A client that will run `plans`.
    pub fn new(tid: String, tv: TxnVersion, topic: &str, plans: Vec<Plan>) -> Self {
        Self {
            tid,
            tv,
            topic: topic.to_owned(),
            pid: -1,
            epoch: -1,
            seqs: Default::default(),
            added: Default::default(),
            plans,
            current: 0,
            phase: Phase::Init,
            need_init: true,
            op_started_ms: 0,
            op_attempts: 0,
            ambiguous: false,
            serial: 0,
            waiting: false,
        }
    }

    /// Whether the client ran all its transactions.
    pub fn is_done(&self) -> bool {
        self.phase == Phase::Done
    }

    fn init_request(&self) -> Send {
        Send::Coordinator(Request::InitProducerId(InitProducerIdRequest {
            version: 4,
            transactional_id: Some(self.tid.clone()),
            transaction_timeout_ms: 3_000,
            producer_id: ProducerId(self.pid),
            producer_epoch: ProducerEpoch(self.epoch),
            enable_2pc: false,
            keep_prepared_txn: false,
        }))
    }

    fn end_request(&self, commit: bool) -> Send {
        Send::Coordinator(Request::EndTxn(EndTxnRequest {
            version: if self.tv.bumps_epoch_per_txn() { 5 } else { 3 },
            transactional_id: self.tid.clone(),
            producer_id: ProducerId(self.pid),
            producer_epoch: ProducerEpoch(self.epoch),
            committed: commit,
        }))
    }

    /// Starts the next operation; returns the request to send (None when done).
    pub fn next(&mut self, now: u64, events: &mut Vec<Event>) -> Option<Send> {
        loop {
            let send = match self.phase.clone() {
                Phase::Done => return None,
                Phase::Init => self.init_request(),
                Phase::Add(i) => {
                    let p = self.plans[self.current].writes[i].0;
                    if self.added.contains(&p) {
                        self.phase = Phase::Produce(i);
                        continue;
                    }
                    Send::Coordinator(Request::AddPartitionsToTxn(AddPartitionsToTxnRequest::add(
                        3,
                        &self.tid,
                        ProducerId(self.pid),
                        ProducerEpoch(self.epoch),
                        &[TopicPartition::new(&self.topic, p)],
                    )))
                }
                Phase::Produce(i) => {
                    let (p, v) = self.plans[self.current].writes[i].clone();
                    if self.op_attempts == 0 {
                        events.push(Event::Writes {
                            partition: p,
                            values: vec![v.clone()],
                        });
                    }
                    Send::Produce(Produce {
                        partition: p,
                        pid: self.pid,
                        epoch: self.epoch,
                        seq: self.seqs.get(&p).copied().unwrap_or(0),
                        values: vec![v],
                    })
                }
                Phase::End { commit, .. } => self.end_request(commit),
            };
            if self.op_attempts == 0 {
                self.op_started_ms = now;
                self.ambiguous = false;
            }
            self.op_attempts += 1;
            self.serial += 1;
            self.waiting = true;
            return Some(send);
        }
    }

    /// The outstanding attempt timed out: resend within the budget, or end the operation as
    /// indeterminate. A produce is not resent: its transaction fails (the Java producer's
    /// expired batch, an abortable error), while the request may still be on its way.
    pub fn timed_out(&mut self, events: &mut Vec<Event>) {
        self.waiting = false;
        self.ambiguous = true;
        if self.op_attempts < MAX_ATTEMPTS && !matches!(self.phase, Phase::Produce(_)) {
            return;
        }
        self.finish_op(OpEnd::Indeterminate, events);
    }

    /// A retriable answer: try again (the world calls [`Client::next`] after a backoff).
    fn retry(&mut self, events: &mut Vec<Event>) {
        self.waiting = false;
        if self.op_attempts >= MAX_ATTEMPTS {
            self.finish_op(OpEnd::Indeterminate, events);
        }
    }

    /// An answer to the outstanding attempt.
    pub fn answer(&mut self, answer: Answer, events: &mut Vec<Event>) {
        self.waiting = false;
        let code = answer.error_code();
        let ok = code == ErrorCode::NONE
            || (matches!(answer, Answer::Produce(_))
                && code == ErrorCode::DUPLICATE_SEQUENCE_NUMBER);
        if ok {
            self.finish_op(OpEnd::Ok(answer), events);
        } else if code.is_retried_by_producer() {
            self.retry(events);
        } else if self.ambiguous {
            self.finish_op(OpEnd::Indeterminate, events);
        } else {
            self.finish_op(OpEnd::Definite(code), events);
        }
    }

    /// Whether the client has an operation to (re)send now.
    pub fn wants_send(&self) -> bool {
        !self.waiting && self.phase != Phase::Done
    }

    fn finish_op(&mut self, end: OpEnd, events: &mut Vec<Event>) {
        use crate::fault::history::Outcome;
        self.op_attempts = 0;
        self.waiting = false;
        match (self.phase.clone(), end) {
            (Phase::Init, OpEnd::Ok(Answer::Coordinator(Response::InitProducerId(r)))) => {
                self.pid = r.producer_id.0;
                self.epoch = r.producer_epoch.0;
                self.seqs.clear();
                self.added.clear();
                self.need_init = false;
                events.push(Event::Issued {
                    pid: self.pid,
                    epoch: self.epoch,
                    api: "InitProducerId",
                    invoke_ms: self.op_started_ms,
                });
                self.start_txn(events);
            }
            (Phase::Init, OpEnd::Definite(code))
                if code == ErrorCode::PRODUCER_FENCED
                    || code == ErrorCode::INVALID_PRODUCER_EPOCH
                    || code == ErrorCode::INVALID_TXN_STATE =>
            {
                // KIP-360: a stale (pid, epoch) is refused; start over without it.
                self.pid = -1;
                self.epoch = -1;
            }
            (Phase::Init, _) => {}
            (Phase::Add(i), OpEnd::Ok(_)) => {
                let p = self.plans[self.current].writes[i].0;
                self.added.insert(p);
                self.phase = Phase::Produce(i);
            }
            (Phase::Produce(i), OpEnd::Ok(_)) => {
                let p = self.plans[self.current].writes[i].0;
                let seq = self.seqs.entry(p).or_insert(0);
                *seq = seq.wrapping_add(1);
                let n = self.plans[self.current].writes.len();
                self.phase = if i + 1 < n {
                    Phase::Add(i + 1)
                } else {
                    Phase::End {
                        commit: self.plans[self.current].commit,
                        aborting_failed: false,
                    }
                };
            }
            (Phase::Add(_) | Phase::Produce(_), _) => {
                // Commit never sent: whatever happens next, this transaction must not commit.
                self.phase = Phase::End {
                    commit: false,
                    aborting_failed: true,
                };
            }
            (
                Phase::End {
                    commit,
                    aborting_failed,
                },
                end,
            ) => {
                let (outcome, note) = match (&end, commit) {
                    (OpEnd::Ok(_), true) => (Outcome::Committed, ""),
                    (OpEnd::Ok(_), false) if !aborting_failed => (Outcome::Aborted, ""),
                    (_, false) => (Outcome::Aborted, "aborted after a failure"),
                    (OpEnd::Definite(_), true) => (Outcome::Aborted, "commit refused"),
                    (OpEnd::Indeterminate, true) => (Outcome::Indeterminate, "commit unanswered"),
                };
                if let OpEnd::Ok(Answer::Coordinator(Response::EndTxn(r))) = &end
                    && self.tv.bumps_epoch_per_txn()
                    && r.producer_id.0 >= 0
                {
                    if r.producer_id.0 != self.pid || r.producer_epoch.0 != self.epoch {
                        self.seqs.clear();
                    }
                    self.pid = r.producer_id.0;
                    self.epoch = r.producer_epoch.0;
                    if !aborting_failed {
                        events.push(Event::Issued {
                            pid: self.pid,
                            epoch: self.epoch,
                            api: "EndTxn",
                            invoke_ms: self.op_started_ms,
                        });
                    }
                }
                let failed = !matches!(end, OpEnd::Ok(_)) || aborting_failed;
                events.push(Event::Complete {
                    outcome,
                    note: note.to_owned(),
                });
                self.added.clear();
                self.current += 1;
                self.need_init = failed;
                if self.current >= self.plans.len() {
                    self.phase = Phase::Done;
                } else if self.need_init {
                    self.phase = Phase::Init;
                } else {
                    self.start_txn(events);
                }
            }
            (Phase::Done, _) => {}
        }
    }

    fn start_txn(&mut self, events: &mut Vec<Event>) {
        if self.current >= self.plans.len() {
            self.phase = Phase::Done;
            return;
        }
        events.push(Event::Invoke {
            plan: self.current,
            pid: self.pid,
            epoch: self.epoch,
        });
        self.phase = Phase::Add(0);
    }
}

#[cfg(test)]
mod tests {
    use coordinator::{AddPartitionsToTxnResponse, EndTxnResponse, InitProducerIdResponse};

    use super::*;
    use crate::fault::history::Outcome;

    fn client(tv: TxnVersion, plans: Vec<Plan>) -> Client {
        Client::new("t".into(), tv, "fq", plans)
    }

    fn plan(commit: bool) -> Plan {
        Plan {
            writes: vec![(0, "v".into())],
            commit,
        }
    }

    fn answer(c: &mut Client, a: Answer) -> Vec<Event> {
        let mut events = Vec::new();
        c.answer(a, &mut events);
        events
    }

    fn coordinator_ok(r: Response) -> Answer {
        Answer::Coordinator(r)
    }

    fn added() -> Answer {
        coordinator_ok(Response::AddPartitionsToTxn(AddPartitionsToTxnResponse {
            error: ErrorCode::NONE,
            results: Vec::new(),
        }))
    }

    /// Sends the next request and returns it with the events it recorded.
    fn next(c: &mut Client) -> (Option<Send>, Vec<Event>) {
        let mut events = Vec::new();
        (c.next(0, &mut events), events)
    }

    #[test]
    fn a_tv2_commit_runs_the_four_requests_and_takes_the_bumped_epoch() {
        let mut c = client(TxnVersion::V2, vec![plan(true)]);
        let (send, _) = next(&mut c);
        assert!(matches!(
            send,
            Some(Send::Coordinator(Request::InitProducerId(_)))
        ));
        let ev = answer(
            &mut c,
            coordinator_ok(Response::InitProducerId(InitProducerIdResponse::ok(
                ProducerId(5),
                ProducerEpoch(0),
            ))),
        );
        assert!(ev.contains(&Event::Invoke {
            plan: 0,
            pid: 5,
            epoch: 0
        }));
        let (send, _) = next(&mut c);
        assert!(matches!(
            send,
            Some(Send::Coordinator(Request::AddPartitionsToTxn(_)))
        ));
        answer(&mut c, added());
        let (send, ev) = next(&mut c);
        let Some(Send::Produce(p)) = send else {
            panic!("a produce, not {send:?}");
        };
        assert_eq!((p.pid, p.epoch, p.seq), (5, 0, 0));
        assert!(matches!(
            ev.as_slice(),
            [Event::Writes { partition: 0, .. }]
        ));
        answer(&mut c, Answer::Produce(ErrorCode::NONE));
        let (send, _) = next(&mut c);
        let Some(Send::Coordinator(Request::EndTxn(end))) = send else {
            panic!("an EndTxn, not {send:?}");
        };
        assert_eq!((end.version, end.committed), (5, true));
        let ev = answer(
            &mut c,
            coordinator_ok(Response::EndTxn(EndTxnResponse {
                error: ErrorCode::NONE,
                producer_id: ProducerId(5),
                producer_epoch: ProducerEpoch(1),
            })),
        );
        assert!(ev.iter().any(|e| matches!(
            e,
            Event::Issued {
                epoch: 1,
                api: "EndTxn",
                ..
            }
        )));
        assert!(ev.iter().any(|e| matches!(
            e,
            Event::Complete {
                outcome: Outcome::Committed,
                ..
            }
        )));
        assert!(c.is_done());
    }

    /// Answers InitProducerId (pid 5, epoch 0) and AddPartitionsToTxn; the first produce is
    /// then on the wire.
    fn to_first_produce(c: &mut Client) {
        next(c);
        answer(
            c,
            coordinator_ok(Response::InitProducerId(InitProducerIdResponse::ok(
                ProducerId(5),
                ProducerEpoch(0),
            ))),
        );
        next(c);
        answer(c, added());
        next(c);
    }

    #[test]
    fn a_produce_timeout_aborts_the_transaction_and_re_initializes() {
        let mut c = client(TxnVersion::V1, vec![plan(true), plan(true)]);
        to_first_produce(&mut c);
        c.timed_out(&mut Vec::new());
        let (send, _) = next(&mut c);
        let Some(Send::Coordinator(Request::EndTxn(end))) = send else {
            panic!("an EndTxn, not {send:?}");
        };
        assert_eq!((end.version, end.committed), (3, false));
        let ev = answer(
            &mut c,
            coordinator_ok(Response::EndTxn(EndTxnResponse::error(ErrorCode::NONE))),
        );
        assert!(ev.contains(&Event::Complete {
            outcome: Outcome::Aborted,
            note: "aborted after a failure".into()
        }));
        let (send, _) = next(&mut c);
        assert!(matches!(
            send,
            Some(Send::Coordinator(Request::InitProducerId(_)))
        ));
    }

    #[test]
    fn an_unanswered_commit_is_indeterminate_after_the_budget() {
        let mut c = client(TxnVersion::V2, vec![plan(true)]);
        to_first_produce(&mut c);
        answer(&mut c, Answer::Produce(ErrorCode::NONE));
        let mut events = Vec::new();
        for _ in 0..MAX_ATTEMPTS {
            let (send, _) = next(&mut c);
            assert!(matches!(send, Some(Send::Coordinator(Request::EndTxn(_)))));
            c.timed_out(&mut events);
        }
        assert!(events.contains(&Event::Complete {
            outcome: Outcome::Indeterminate,
            note: "commit unanswered".into()
        }));
        assert!(c.is_done());
    }
}
