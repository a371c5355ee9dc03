//! Planner scenarios (S92-S101: the marker cases of Kafka's `TransactionMarkerChannelManagerTest`)
//! with explicit time.

use std::collections::BTreeMap;

use kafka_protocol::messages::{WriteTxnMarkersRequest, WriteTxnMarkersResponse};
use txn_log::{
    CoordinatorEpoch, ErrorCode, LogPartition, ProducerEpoch, ProducerId, TopicPartition,
    TransactionalId, TxnResult, TxnVersion,
};

use super::planner::{Effect, Lookup, MarkerPlanner, Millis, PlannerConfig, RequestId, codes};
use super::{
    BrokerEndpoint, LeaderLookup, MarkerCompletion, MarkerOutcome, RefusedMarker, TxnMarkerRequest,
    build_response,
};

fn tp(topic: &str, p: i32) -> TopicPartition {
    TopicPartition::new(topic, p)
}

fn ep(node: i32) -> BrokerEndpoint {
    BrokerEndpoint::new(node, "127.0.0.1", 9000 + node as u16)
}

fn req(txn: &str, pid: i64, lp: u32, ce: i32, parts: &[TopicPartition]) -> TxnMarkerRequest {
    TxnMarkerRequest {
        transactional_id: TransactionalId::new(txn).expect("id"),
        producer_id: ProducerId(pid),
        producer_epoch: ProducerEpoch(0),
        coordinator_epoch: CoordinatorEpoch(ce),
        log_partition: LogPartition(lp),
        result: TxnResult::Commit,
        partitions: parts.to_vec(),
        txn_version: TxnVersion::V2,
    }
}

#[derive(Debug)]
struct Sent {
    node: i32,
    id: RequestId,
    request: WriteTxnMarkersRequest,
}

impl Sent {
    /// `(pid, [(topic, partition)])` per marker, in request order.
    fn markers(&self) -> Vec<(i64, Vec<(String, i32)>)> {
        self.request
            .markers
            .iter()
            .map(|m| {
                let tps = m
                    .topics
                    .iter()
                    .flat_map(|t| {
                        t.partition_indexes
                            .iter()
                            .map(|&p| (t.name.0.as_str().to_owned(), p))
                    })
                    .collect();
                (m.producer_id.0, tps)
            })
            .collect()
    }

    fn respond(&self, code: ErrorCode) -> WriteTxnMarkersResponse {
        build_response(&self.request, |_, _, _| code)
    }
}

struct Harness {
    p: MarkerPlanner,
    now: Millis,
    completions: Vec<MarkerCompletion>,
}

impl Harness {
    fn new() -> Self {
        Self::with(PlannerConfig::default())
    }

    fn with(config: PlannerConfig) -> Self {
        Self {
            p: MarkerPlanner::new(config),
            now: 0,
            completions: Vec::new(),
        }
    }

    fn submit(&mut self, r: TxnMarkerRequest) {
        self.p.submit(self.now, r).expect("accepted");
        self.drain();
    }

    /// Polls every effect; lookups are returned, sends too.
    fn poll(&mut self) -> (Vec<Lookup>, Vec<Sent>) {
        let mut lookups = Vec::new();
        let mut sends = Vec::new();
        while let Some(e) = self.p.poll_effect() {
            match e {
                Effect::Resolve { lookups: l } => lookups.extend(l),
                Effect::Send {
                    broker,
                    request_id,
                    request,
                    txn_versions,
                } => {
                    assert_eq!(
                        txn_versions,
                        vec![TxnVersion::V2; request.markers.len()],
                        "every marker's decision is TV2"
                    );
                    assert!(
                        request.markers.iter().all(|m| m.transaction_version == 2),
                        "and the request's fields say so (what v2 sends)"
                    );
                    sends.push(Sent {
                        node: broker.node_id,
                        id: request_id,
                        request,
                    });
                }
            }
        }
        self.drain();
        (lookups, sends)
    }

    /// Answers every lookup with `route` until only sends remain; returns the sends.
    fn route(&mut self, route: impl Fn(&TopicPartition) -> LeaderLookup) -> Vec<Sent> {
        let mut all = Vec::new();
        loop {
            let (lookups, sends) = self.poll();
            all.extend(sends);
            if lookups.is_empty() {
                return all;
            }
            for l in lookups {
                self.p
                    .handle_leader(self.now, &l.partition, route(&l.partition));
            }
        }
    }

    fn respond(&mut self, s: &Sent, code: ErrorCode) {
        let r = s.respond(code);
        self.p.handle_response(self.now, s.node, s.id, &r);
        self.drain();
    }

    fn fail(&mut self, s: &Sent) {
        self.p.handle_send_failed(self.now, s.node, s.id);
        self.drain();
    }

    /// Advances to the next timer and fires it.
    fn advance(&mut self) {
        let at = self.p.poll_timeout().expect("a timer is armed");
        assert!(at >= self.now);
        self.now = at;
        self.p.handle_timeout(self.now);
    }

    fn drain(&mut self) {
        while let Some(c) = self.p.poll_completion() {
            self.completions.push(c);
        }
    }

    fn outcomes(&self) -> Vec<(String, i32, MarkerOutcome)> {
        self.completions
            .iter()
            .map(|c| {
                (
                    c.transactional_id.as_str().to_owned(),
                    c.coordinator_epoch.0,
                    c.outcome,
                )
            })
            .collect()
    }
}

/// The TMCMT layout: topic1-0 on broker 1, topic1-1 on broker 2.
fn tmcmt(t: &TopicPartition) -> LeaderLookup {
    match t.partition {
        0 => LeaderLookup::Leader(ep(1)),
        _ => LeaderLookup::Leader(ep(2)),
    }
}

fn s(x: &str) -> String {
    x.to_owned()
}

#[test]
fn s92_one_request_per_broker_carries_many_transactions() {
    let mut h = Harness::new();
    h.submit(req("txnId1", 0, 0, 0, &[tp("topic1", 0), tp("topic1", 1)]));
    h.submit(req("txnId2", 1, 1, 0, &[tp("topic1", 0)]));
    let sends = h.route(tmcmt);
    assert_eq!(sends.len(), 2);
    let by_node: BTreeMap<i32, &Sent> = sends.iter().map(|s| (s.node, s)).collect();
    assert_eq!(
        by_node[&1].markers(),
        vec![(0, vec![(s("topic1"), 0)]), (1, vec![(s("topic1"), 0)])]
    );
    assert_eq!(by_node[&2].markers(), vec![(0, vec![(s("topic1"), 1)])]);
    let m = &by_node[&1].request.markers[0];
    assert!(m.transaction_result);
    assert_eq!(m.coordinator_epoch, 0);
    // Second generation is empty: one request in flight per broker, nothing else queued.
    assert!(h.p.poll_effect().is_none());
    assert!(h.completions.is_empty());
    for s in &sends {
        h.respond(s, codes::NONE);
    }
    assert_eq!(
        h.outcomes(),
        vec![
            (s("txnId2"), 0, MarkerOutcome::Completed),
            (s("txnId1"), 0, MarkerOutcome::Completed)
        ]
    );
    assert!(h.p.is_idle());
}

#[test]
fn s93_leader_unknown_topic_gone_drops_the_partition() {
    let mut h = Harness::new();
    h.submit(req("txnId1", 0, 0, 0, &[tp("topic1", 0), tp("topic1", 1)]));
    let sends = h.route(|t| {
        if t.partition == 0 {
            LeaderLookup::TopicGone
        } else {
            LeaderLookup::Leader(ep(2))
        }
    });
    assert_eq!(sends.len(), 1);
    assert_eq!(sends[0].node, 2);
    assert_eq!(sends[0].markers(), vec![(0, vec![(s("topic1"), 1)])]);
    assert_eq!(h.p.stats().markers_dropped, 1);
    h.respond(&sends[0], codes::NONE);
    assert_eq!(h.completions.len(), 1);
    assert_eq!(h.completions[0].outcome, MarkerOutcome::Completed);
    assert_eq!(h.completions[0].dropped_partitions, vec![tp("topic1", 0)]);
}

#[test]
fn s93_all_partitions_gone_completes_without_a_request() {
    let mut h = Harness::new();
    h.submit(req("txnId1", 0, 0, 0, &[tp("gone", 0), tp("gone", 1)]));
    let sends = h.route(|_| LeaderLookup::TopicGone);
    assert!(sends.is_empty());
    assert_eq!(
        h.outcomes(),
        vec![(s("txnId1"), 0, MarkerOutcome::Completed)]
    );
}

#[test]
fn s94_endpoint_temporarily_missing_is_retried_with_backoff() {
    let mut h = Harness::new();
    h.submit(req("txnId1", 0, 0, 0, &[tp("topic1", 0), tp("topic1", 1)]));
    h.submit(req("txnId2", 1, 1, 0, &[tp("topic1", 0)]));
    // topic1-0: no endpoint the first 4 times, then broker 1.
    let sends = h.route(|t| {
        if t.partition == 0 {
            LeaderLookup::Unknown
        } else {
            LeaderLookup::Leader(ep(2))
        }
    });
    assert_eq!(sends.len(), 1, "only broker 2 is sendable");
    assert_eq!(sends[0].node, 2);
    h.respond(&sends[0], codes::NONE);
    let mut delays = Vec::new();
    for _ in 0..3 {
        let before = h.now;
        h.advance();
        delays.push(h.now - before);
        let (lookups, sends) = h.poll();
        assert!(sends.is_empty());
        assert_eq!(lookups.len(), 1, "one lookup for the shared partition");
        assert!(lookups[0].refresh);
        h.p.handle_leader(h.now, &lookups[0].partition, LeaderLookup::Unknown);
    }
    assert_eq!(delays, vec![50, 100, 200], "exponential backoff");
    h.advance();
    let sends = h.route(tmcmt);
    assert_eq!(sends.len(), 1);
    assert_eq!(
        sends[0].markers(),
        vec![(0, vec![(s("topic1"), 0)]), (1, vec![(s("topic1"), 0)])]
    );
    h.respond(&sends[0], codes::NONE);
    assert_eq!(h.completions.len(), 2);
    assert!(
        h.completions
            .iter()
            .all(|c| c.outcome == MarkerOutcome::Completed)
    );
}

#[test]
fn s95_emigration_drops_the_log_partitions_markers() {
    let mut h = Harness::new();
    // Keep broker 1 busy so the next markers stay queued.
    h.submit(req("busy", 9, 2, 0, &[tp("topic1", 0)]));
    let busy = h.route(tmcmt);
    h.submit(req("txnId1", 0, 0, 0, &[tp("topic1", 0), tp("topic1", 1)]));
    h.submit(req("txnId2", 1, 1, 0, &[tp("topic1", 0)]));
    let sends = h.route(|_| LeaderLookup::Leader(ep(1)));
    assert!(sends.is_empty());
    assert_eq!(h.p.stats().brokers, vec![(1, 3, 1)]);
    h.p.cancel_log_partition(LogPartition(0));
    h.drain();
    assert_eq!(
        h.outcomes(),
        vec![(s("txnId1"), 0, MarkerOutcome::Cancelled)]
    );
    assert_eq!(h.p.stats().pending_decisions, 2);
    assert_eq!(h.p.stats().brokers, vec![(1, 1, 1)]);
    h.respond(&busy[0], codes::NONE);
    let (_, sends) = h.poll();
    assert_eq!(sends.len(), 1);
    assert_eq!(sends[0].markers(), vec![(1, vec![(s("topic1"), 0)])]);
    h.respond(&sends[0], codes::NONE);
    assert_eq!(
        h.outcomes(),
        vec![
            (s("txnId1"), 0, MarkerOutcome::Cancelled),
            (s("busy"), 0, MarkerOutcome::Completed),
            (s("txnId2"), 0, MarkerOutcome::Completed)
        ]
    );
    assert!(h.p.is_idle());
}

#[test]
fn s96_all_acks_complete_once() {
    let mut h = Harness::new();
    h.submit(req("txnId2", 1, 0, 0, &[tp("topic1", 0)]));
    let sends = h.route(tmcmt);
    h.respond(&sends[0], codes::NONE);
    // A duplicate answer for the same request changes nothing.
    h.respond(&sends[0], codes::NONE);
    assert_eq!(
        h.outcomes(),
        vec![(s("txnId2"), 0, MarkerOutcome::Completed)]
    );
    let st = h.p.stats();
    assert_eq!((st.markers_sent, st.markers_acked, st.completed), (1, 1, 1));
}

/// S99: for {success, disconnect} of the stale request, reloaded at coordinator epoch 1:
/// exactly one completion at epoch 1 (plus the Cancelled of epoch 0).
#[test]
fn s99_stale_in_flight_marker_after_reload() {
    for disconnect in [false, true] {
        let mut h = Harness::new();
        h.submit(req("txnId1", 0, 0, 0, &[tp("topic1", 0)]));
        let old = h.route(tmcmt);
        assert_eq!(old.len(), 1);
        h.p.cancel_log_partition(LogPartition(0));
        h.submit(req("txnId1", 0, 0, 1, &[tp("topic1", 0)]));
        assert!(
            h.route(tmcmt).is_empty(),
            "broker 1 still has the old request"
        );
        if disconnect {
            h.fail(&old[0]);
        } else {
            h.respond(&old[0], codes::NONE);
        }
        assert_eq!(
            h.outcomes(),
            vec![(s("txnId1"), 0, MarkerOutcome::Cancelled)]
        );
        let (_, new) = h.poll();
        assert_eq!(new.len(), 1);
        assert_eq!(new[0].request.markers[0].coordinator_epoch, 1);
        h.respond(&new[0], codes::NONE);
        assert_eq!(
            h.outcomes(),
            vec![
                (s("txnId1"), 0, MarkerOutcome::Cancelled),
                (s("txnId1"), 1, MarkerOutcome::Completed)
            ],
            "disconnect={disconnect}"
        );
        assert_eq!(
            h.p.stats().markers_retried,
            0,
            "stale failure is not retried"
        );
    }
}

/// S100: a response handled while the same transaction is submitted again: one `Completed`.
#[test]
fn s100_single_completion_when_a_response_races_a_resubmit() {
    let mut h = Harness::new();
    h.submit(req("txnId1", 0, 0, 0, &[tp("topic1", 0)]));
    let old = h.route(tmcmt);
    h.submit(req("txnId1", 0, 0, 0, &[tp("topic1", 0)]));
    assert!(
        h.route(tmcmt).is_empty(),
        "broker 1 still has the old request"
    );
    h.respond(&old[0], codes::NONE);
    let (_, new) = h.poll();
    assert_eq!(new.len(), 1);
    h.respond(&new[0], codes::NONE);
    assert_eq!(
        h.outcomes(),
        vec![
            (s("txnId1"), 0, MarkerOutcome::Superseded),
            (s("txnId1"), 0, MarkerOutcome::Completed)
        ]
    );
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    Complete,
    Retry,
    Refused,
}

/// S101: every row of the response table.
#[test]
fn s101_response_errors_follow_the_table() {
    let rows: &[(ErrorCode, Expect)] = &[
        (codes::NONE, Expect::Complete),
        (codes::UNKNOWN_TOPIC_OR_PARTITION, Expect::Retry),
        (codes::NOT_LEADER_OR_FOLLOWER, Expect::Retry),
        (codes::NOT_ENOUGH_REPLICAS, Expect::Retry),
        (codes::NOT_ENOUGH_REPLICAS_AFTER_APPEND, Expect::Retry),
        (codes::REQUEST_TIMED_OUT, Expect::Retry),
        (codes::KAFKA_STORAGE_ERROR, Expect::Retry),
        (codes::INVALID_PRODUCER_EPOCH, Expect::Refused),
        (codes::TRANSACTION_COORDINATOR_FENCED, Expect::Refused),
        (codes::UNSUPPORTED_FOR_MESSAGE_FORMAT, Expect::Complete),
        (codes::UNSUPPORTED_VERSION, Expect::Complete),
        // Kafka: IllegalStateException. Here: retried and counted.
        (codes::UNKNOWN_SERVER_ERROR, Expect::Retry),
        (ErrorCode::CORRUPT_MESSAGE, Expect::Retry),
        (ErrorCode::MESSAGE_TOO_LARGE, Expect::Retry),
        (ErrorCode::RECORD_LIST_TOO_LARGE, Expect::Retry),
        (ErrorCode::INVALID_REQUIRED_ACKS, Expect::Retry),
    ];
    for &(code, expect) in rows {
        let mut h = Harness::new();
        h.submit(req("txnId1", 0, 0, 0, &[tp("topic1", 0), tp("topic1", 1)]));
        let sends = h.route(|_| LeaderLookup::Leader(ep(1)));
        assert_eq!(sends.len(), 1);
        // topic1-0 answers `code`, topic1-1 NONE.
        let r = build_response(&sends[0].request, |_, _, p| {
            if p == 0 { code } else { ErrorCode::NONE }
        });
        h.p.handle_response(h.now, 1, sends[0].id, &r);
        h.drain();
        match expect {
            Expect::Complete => {
                assert_eq!(
                    h.outcomes(),
                    vec![(s("txnId1"), 0, MarkerOutcome::Completed)],
                    "{code}"
                );
            }
            Expect::Refused => {
                assert_eq!(
                    h.outcomes(),
                    vec![(s("txnId1"), 0, MarkerOutcome::Refused)],
                    "{code}"
                );
                assert_eq!(
                    h.completions[0].refused_partitions,
                    vec![RefusedMarker {
                        partition: tp("topic1", 0),
                        error: code
                    }],
                    "{code}"
                );
                assert_eq!(h.p.stats().markers_refused, 1, "{code}");
                assert!(h.p.is_idle(), "{code}");
            }
            Expect::Retry => {
                assert!(h.completions.is_empty(), "{code}");
                let st = h.p.stats();
                assert_eq!(
                    (st.markers_retried, st.pending_partitions),
                    (1, 1),
                    "{code}"
                );
                let outside_table =
                    [codes::UNKNOWN_SERVER_ERROR.code(), 2, 10, 18, 21].contains(&code.code());
                assert_eq!(st.unexpected_errors, u64::from(outside_table), "{code}");
                h.advance();
                let (lookups, _) = h.poll();
                assert_eq!(lookups.len(), 1);
                assert_eq!(lookups[0].partition, tp("topic1", 0));
                assert!(lookups[0].refresh, "the leader is looked up again");
                h.p.handle_leader(h.now, &tp("topic1", 0), LeaderLookup::Leader(ep(1)));
                let (_, again) = h.poll();
                assert_eq!(again[0].markers(), vec![(0, vec![(s("topic1"), 0)])]);
                h.respond(&again[0], codes::NONE);
                assert_eq!(
                    h.outcomes(),
                    vec![(s("txnId1"), 0, MarkerOutcome::Completed)],
                    "{code}"
                );
            }
        }
    }
}

#[test]
fn s101_disconnect_retries_every_partition_of_the_request() {
    let mut h = Harness::new();
    h.submit(req("txnId1", 0, 0, 0, &[tp("topic1", 0), tp("topic1", 1)]));
    h.submit(req("txnId2", 1, 0, 0, &[tp("topic1", 0)]));
    let sends = h.route(|_| LeaderLookup::Leader(ep(1)));
    h.fail(&sends[0]);
    let st = h.p.stats();
    assert_eq!((st.markers_retried, st.requests_failed), (3, 1));
    assert!(h.completions.is_empty());
    h.advance();
    let again = h.route(|_| LeaderLookup::Leader(ep(1)));
    assert_eq!(again.len(), 1);
    assert_eq!(
        again[0].markers(),
        vec![
            (0, vec![(s("topic1"), 0), (s("topic1"), 1)]),
            (1, vec![(s("topic1"), 0)])
        ]
    );
    h.respond(&again[0], codes::NONE);
    assert_eq!(h.completions.len(), 2);
}

#[test]
fn s101_answer_missing_a_producer_is_retried_not_completed() {
    let mut h = Harness::new();
    h.submit(req("txnId1", 0, 0, 0, &[tp("topic1", 0)]));
    let sends = h.route(tmcmt);
    h.p.handle_response(h.now, 1, sends[0].id, &WriteTxnMarkersResponse::default());
    h.drain();
    assert!(h.completions.is_empty());
    assert_eq!(h.p.stats().unexpected_errors, 1);
    assert_eq!(h.p.stats().markers_retried, 1);
}

#[test]
fn leader_move_goes_to_the_new_leader() {
    let mut h = Harness::new();
    h.submit(req("txnId1", 0, 0, 0, &[tp("topic1", 0)]));
    let sends = h.route(|_| LeaderLookup::Leader(ep(1)));
    h.respond(&sends[0], codes::NOT_LEADER_OR_FOLLOWER);
    h.advance();
    let sends = h.route(|_| LeaderLookup::Leader(ep(3)));
    assert_eq!(sends.len(), 1);
    assert_eq!(sends[0].node, 3);
    h.respond(&sends[0], codes::NONE);
    assert_eq!(
        h.outcomes(),
        vec![(s("txnId1"), 0, MarkerOutcome::Completed)]
    );
}

/// A refusal ends delivery to that one partition only: the decision's other partitions still
/// get their markers (a retried one included), and the decision finishes `Refused` once they
/// all have.
#[test]
fn a_refusal_stops_only_its_partition_and_the_others_are_delivered() {
    let mut h = Harness::new();
    h.submit(req("txnId1", 0, 0, 0, &[tp("topic1", 0), tp("topic1", 1)]));
    let sends = h.route(tmcmt);
    let b1 = sends.iter().find(|s| s.node == 1).expect("b1");
    let b2 = sends.iter().find(|s| s.node == 2).expect("b2");
    h.respond(b1, codes::INVALID_PRODUCER_EPOCH);
    assert!(h.outcomes().is_empty(), "topic1-1 is still owed its marker");
    h.respond(b2, codes::NOT_LEADER_OR_FOLLOWER);
    assert!(h.outcomes().is_empty(), "topic1-1 is retried, not given up");
    h.advance();
    let again = h.route(tmcmt);
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].node, 2, "only topic1-1 is sent again");
    h.respond(&again[0], codes::NONE);
    assert_eq!(h.outcomes(), vec![(s("txnId1"), 0, MarkerOutcome::Refused)]);
    assert_eq!(
        h.completions[0].refused_partitions,
        vec![RefusedMarker {
            partition: tp("topic1", 0),
            error: codes::INVALID_PRODUCER_EPOCH
        }]
    );
    assert_eq!(h.p.stats().refused, 1);
    assert!(h.p.is_idle());
}

#[test]
fn coordinator_epoch_change_supersedes_older_decisions_of_the_log_partition() {
    let mut h = Harness::new();
    h.submit(req("a", 0, 0, 0, &[tp("topic1", 0)]));
    h.submit(req("b", 1, 0, 1, &[tp("topic1", 0)]));
    h.submit(req("c", 2, 0, 0, &[tp("topic1", 0)]));
    assert_eq!(
        h.outcomes(),
        vec![
            (s("a"), 0, MarkerOutcome::Superseded),
            (s("c"), 0, MarkerOutcome::Superseded)
        ]
    );
    let sends = h.route(tmcmt);
    assert_eq!(sends[0].markers(), vec![(1, vec![(s("topic1"), 0)])]);
    h.respond(&sends[0], codes::NONE);
    assert_eq!(
        h.completions.last().map(|c| c.outcome),
        Some(MarkerOutcome::Completed)
    );
    assert_eq!(h.completions.len(), 3);
}

#[test]
fn empty_and_duplicate_partitions() {
    let mut h = Harness::new();
    h.submit(req("empty", 0, 0, 0, &[]));
    assert_eq!(
        h.outcomes(),
        vec![(s("empty"), 0, MarkerOutcome::Completed)]
    );
    h.submit(req("dup", 1, 0, 0, &[tp("t", 0), tp("t", 0), tp("t", 1)]));
    let sends = h.route(|_| LeaderLookup::Leader(ep(1)));
    assert_eq!(
        sends[0].markers(),
        vec![(1, vec![(s("t"), 0), (s("t"), 1)])]
    );
}

#[test]
fn requests_are_bounded_and_one_producer_id_per_request() {
    let mut h = Harness::with(PlannerConfig {
        max_markers_per_request: 2,
        ..PlannerConfig::default()
    });
    for i in 0..5 {
        h.submit(req(&format!("t{i}"), i, 0, 0, &[tp("x", 0)]));
    }
    // Same producer id under another transactional id (cannot be told apart in an answer).
    h.submit(req("other", 0, 1, 0, &[tp("x", 0)]));
    let mut sizes = Vec::new();
    let mut sends = h.route(|_| LeaderLookup::Leader(ep(1)));
    while let Some(sent) = sends.pop() {
        let pids: Vec<i64> = sent.markers().iter().map(|m| m.0).collect();
        let mut dedup = pids.clone();
        dedup.sort_unstable();
        dedup.dedup();
        assert_eq!(dedup.len(), pids.len(), "{pids:?}");
        sizes.push(pids.len());
        h.respond(&sent, codes::NONE);
        sends.extend(h.poll().1);
    }
    assert_eq!(sizes.iter().sum::<usize>(), 6);
    assert!(sizes.iter().all(|&n| n <= 2), "{sizes:?}");
    assert_eq!(h.completions.len(), 6);
}

#[test]
fn submit_refuses_beyond_the_bound() {
    let mut p = MarkerPlanner::new(PlannerConfig {
        max_pending_decisions: 2,
        ..PlannerConfig::default()
    });
    p.submit(0, req("a", 0, 0, 0, &[tp("x", 0)])).expect("a");
    p.submit(0, req("b", 1, 0, 0, &[tp("x", 0)])).expect("b");
    assert!(p.submit(0, req("c", 2, 0, 0, &[tp("x", 0)])).is_err());
}

/// A broker down for a long time: memory stays proportional to the pending partitions and
/// the backoff is capped; when it comes back every decision completes exactly once.
#[test]
fn broker_down_for_hours_then_back() {
    let mut h = Harness::new();
    let n = 50;
    for i in 0..n {
        h.submit(req(
            &format!("t{i}"),
            i,
            (i % 3) as u32,
            0,
            &[tp("x", (i % 4) as i32), tp("y", 0)],
        ));
    }
    let pending = h.p.stats().pending_partitions;
    assert_eq!(pending, 100);
    let mut sends = h.route(|_| LeaderLookup::Leader(ep(1)));
    let mut failures = 0;
    while h.now < 3 * 3_600_000 {
        for s in sends.drain(..) {
            h.fail(&s);
            failures += 1;
        }
        let st = h.p.stats();
        assert_eq!(st.pending_partitions, pending);
        assert_eq!(
            st.awaiting_leader, pending,
            "each partition has exactly one retry entry"
        );
        let before = h.now;
        h.advance();
        assert!(h.now - before <= 5_000, "backoff is capped");
        sends = h.route(|_| LeaderLookup::Leader(ep(1)));
    }
    assert!(failures > 2_000, "{failures}");
    assert!(h.completions.is_empty());
    while let Some(s) = sends.pop() {
        h.respond(&s, codes::NONE);
        sends.extend(h.poll().1);
        while sends.is_empty() && h.p.poll_timeout().is_some() {
            h.advance();
            sends = h.route(|_| LeaderLookup::Leader(ep(1)));
        }
    }
    assert_eq!(h.completions.len(), n as usize);
    assert!(
        h.completions
            .iter()
            .all(|c| c.outcome == MarkerOutcome::Completed)
    );
    assert!(h.p.is_idle());
}

mod prop {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        Submit { txn: u8, parts: u8, ce: i32 },
        Cancel(u8),
        Lookup(u8),
        Respond { code_pick: u8 },
        Fail,
        Advance,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (0u8..4, 0u8..16, 0i32..3).prop_map(|(txn, parts, ce)| Op::Submit { txn, parts, ce }),
            1 => (0u8..2).prop_map(Op::Cancel),
            3 => (0u8..5).prop_map(Op::Lookup),
            3 => (0u8..8).prop_map(|code_pick| Op::Respond { code_pick }),
            1 => Just(Op::Fail),
            2 => Just(Op::Advance),
        ]
    }

    const CODES: [ErrorCode; 8] = [
        ErrorCode::NONE,
        ErrorCode::NONE,
        ErrorCode::NONE,
        ErrorCode::NOT_LEADER_OR_FOLLOWER,
        ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode::INVALID_PRODUCER_EPOCH,
        ErrorCode::UNSUPPORTED_FOR_MESSAGE_FORMAT,
        ErrorCode::REQUEST_TIMED_OUT,
    ];

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        /// Whatever the interleaving, every submit gets exactly one completion once brokers
        /// answer, and the planner ends idle.
        #[test]
        fn exactly_one_completion_per_submit(ops in proptest::collection::vec(op(), 1..80)) {
            let mut h = Harness::new();
            let mut submitted = 0usize;
            let mut in_flight: Vec<Sent> = Vec::new();
            let mut lookups: Vec<Lookup> = Vec::new();
            for op in ops {
                match op {
                    Op::Submit { txn, parts, ce } => {
                        let tps: Vec<TopicPartition> = (0..4)
                            .filter(|i| parts & (1 << i) != 0)
                            .map(|i| tp("t", i))
                            .collect();
                        h.submit(req(&format!("x{txn}"), i64::from(txn), u32::from(txn % 2), ce, &tps));
                        submitted += 1;
                    }
                    Op::Cancel(lp) => h.p.cancel_log_partition(LogPartition(u32::from(lp))),
                    Op::Lookup(pick) => {
                        if let Some(l) = lookups.pop() {
                            let answer = match pick {
                                0 => LeaderLookup::Unknown,
                                1 => LeaderLookup::TopicGone,
                                n => LeaderLookup::Leader(ep(i32::from(n))),
                            };
                            h.p.handle_leader(h.now, &l.partition, answer);
                        }
                    }
                    Op::Respond { code_pick } => {
                        if !in_flight.is_empty() {
                            let s = in_flight.remove(0);
                            h.respond(&s, CODES[usize::from(code_pick)]);
                        }
                    }
                    Op::Fail => {
                        if let Some(s) = in_flight.pop() {
                            h.fail(&s);
                        }
                    }
                    Op::Advance => {
                        if h.p.poll_timeout().is_some() {
                            h.advance();
                        }
                    }
                }
                let (l, s) = h.poll();
                lookups.extend(l);
                in_flight.extend(s);
            }
            // Heal: every lookup answers broker 1, every request is acknowledged.
            for _ in 0..10_000 {
                for l in lookups.drain(..) {
                    h.p.handle_leader(h.now, &l.partition, LeaderLookup::Leader(ep(1)));
                }
                for s in std::mem::take(&mut in_flight) {
                    h.respond(&s, codes::NONE);
                }
                let (l, s) = h.poll();
                lookups.extend(l);
                in_flight.extend(s);
                if lookups.is_empty() && in_flight.is_empty() {
                    if h.p.poll_timeout().is_some() {
                        h.advance();
                    } else {
                        break;
                    }
                }
            }
            prop_assert_eq!(h.completions.len(), submitted);
            prop_assert!(h.p.is_idle());
            prop_assert_eq!(h.p.stats().pending_partitions, 0);
        }
    }
}

/// The version sent to a broker: the highest both list, v1 when the broker lists no more (or
/// nothing, or answers with an error).
#[cfg(feature = "net")]
#[test]
fn write_txn_markers_version_follows_the_brokers_api_versions() {
    use kafka_protocol::messages::ApiKey;
    use kafka_protocol::messages::ApiVersionsResponse;
    use kafka_protocol::messages::api_versions_response::ApiVersion;

    use super::write_txn_markers_version;
    let listing = |max: i16| {
        ApiVersionsResponse::default().with_api_keys(vec![
            ApiVersion::default()
                .with_api_key(ApiKey::Metadata as i16)
                .with_max_version(12),
            ApiVersion::default()
                .with_api_key(ApiKey::WriteTxnMarkers as i16)
                .with_min_version(1)
                .with_max_version(max),
        ])
    };
    assert_eq!(write_txn_markers_version(&listing(1)), 1, "Kafka 4.0/4.1");
    assert_eq!(write_txn_markers_version(&listing(2)), 2, "Kafka 4.2");
    assert_eq!(write_txn_markers_version(&listing(5)), 2, "newer: ours");
    assert_eq!(write_txn_markers_version(&listing(0)), 1, "pre-4.0: v1");
    assert_eq!(
        write_txn_markers_version(&ApiVersionsResponse::default()),
        1
    );
    assert_eq!(
        write_txn_markers_version(&listing(2).with_error_code(35)),
        1,
        "an error answer lists nothing usable"
    );
}
