//! The marker writer driver against scripted in-process brokers, on paused tokio time.
#![cfg(feature = "net")]

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use kafka_protocol::messages::{WriteTxnMarkersRequest, WriteTxnMarkersResponse};
use markers::writer::{
    BrokerEndpoint, InProcessTransport, LeaderLookup, LocalMarkerHandler, MarkerCompletion,
    MarkerOutcome, MarkerTransport, MarkerWriter, RoutingTransport, StaticLeaderResolver,
    TransportError, TrySubmitError, TxnMarkerRequest, WriterConfig, build_response, codes,
};
use tokio::sync::{Semaphore, mpsc};
use txn_log::sync::Mutex;
use txn_log::{
    CoordinatorEpoch, ErrorCode, LogPartition, ProducerEpoch, ProducerId, TopicPartition,
    TransactionalId, TxnResult, TxnVersion,
};

fn tp(topic: &str, p: i32) -> TopicPartition {
    TopicPartition::new(topic, p)
}

fn ep(node: i32) -> BrokerEndpoint {
    BrokerEndpoint::new(node, "in-process", 0)
}

fn req(txn: &str, pid: i64, lp: u32, ce: i32, parts: &[TopicPartition]) -> TxnMarkerRequest {
    TxnMarkerRequest {
        transactional_id: TransactionalId::new(txn).expect("id"),
        producer_id: ProducerId(pid),
        producer_epoch: ProducerEpoch(3),
        coordinator_epoch: CoordinatorEpoch(ce),
        log_partition: LogPartition(lp),
        result: TxnResult::Abort,
        partitions: parts.to_vec(),
        txn_version: TxnVersion::V2,
    }
}

/// What a scripted broker does with one partition marker.
type Script = dyn Fn(i32, i64, &str, i32) -> ErrorCode + Send + Sync;

/// Scripted in-process brokers: per-partition answer codes, brokers that are down (every call
/// fails as a disconnect), and a log of `(node, pid, topic, partition)` received.
struct Brokers {
    script: Mutex<Box<Script>>,
    down: Mutex<HashSet<i32>>,
    log: Mutex<Vec<(i32, i64, String, i32)>>,
    calls: Mutex<BTreeMap<i32, usize>>,
    versions_seen: Mutex<Vec<TxnVersion>>,
}

impl Brokers {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            script: Mutex::new(Box::new(|_, _, _, _| codes::NONE)),
            down: Mutex::new(HashSet::new()),
            log: Mutex::new(Vec::new()),
            calls: Mutex::new(BTreeMap::new()),
            versions_seen: Mutex::new(Vec::new()),
        })
    }

    fn script(&self, f: impl Fn(i32, i64, &str, i32) -> ErrorCode + Send + Sync + 'static) {
        *self.script.lock() = Box::new(f);
    }

    fn received(&self, node: i32) -> Vec<(i64, String, i32)> {
        self.log
            .lock()
            .iter()
            .filter(|e| e.0 == node)
            .map(|e| (e.1, e.2.clone(), e.3))
            .collect()
    }

    fn transport(self: &Arc<Self>) -> Arc<dyn MarkerTransport> {
        let me = self.clone();
        Arc::new(InProcessTransport::from_fn(
            move |broker, request, versions| me.handle(broker, &request, versions),
        ))
    }

    fn handle(
        &self,
        broker: &BrokerEndpoint,
        request: &WriteTxnMarkersRequest,
        versions: &[TxnVersion],
    ) -> Result<WriteTxnMarkersResponse, TransportError> {
        let node = broker.node_id;
        *self.calls.lock().entry(node).or_default() += 1;
        if self.down.lock().contains(&node) {
            return Err(TransportError::Disconnected {
                node_id: node,
                reason: "scripted down".into(),
            });
        }
        self.versions_seen.lock().extend_from_slice(versions);
        let script = self.script.lock();
        Ok(build_response(request, |pid, topic, p| {
            self.log.lock().push((node, pid.0, topic.to_owned(), p));
            script(node, pid.0, topic, p)
        }))
    }
}

fn config() -> WriterConfig {
    WriterConfig {
        request_timeout: Duration::from_secs(24 * 3600),
        ..WriterConfig::default()
    }
}

struct Setup {
    writer: MarkerWriter,
    rx: mpsc::Receiver<MarkerCompletion>,
    resolver: Arc<StaticLeaderResolver>,
}

fn setup(transport: Arc<dyn MarkerTransport>, config: WriterConfig) -> Setup {
    let resolver = Arc::new(StaticLeaderResolver::new(LeaderLookup::Leader(ep(1))));
    let (tx, rx) = mpsc::channel(16);
    let writer = MarkerWriter::spawn(resolver.clone(), transport, config, tx);
    Setup {
        writer,
        rx,
        resolver,
    }
}

impl Setup {
    /// Submits `request` to the writer, waiting for room, and expects it taken.
    async fn submit(&self, request: TxnMarkerRequest) {
        self.writer.submit(request).await.expect("submit");
    }
}

/// Receives `n` completions (bounded in virtual time), then checks that no other follows.
async fn completions(rx: &mut mpsc::Receiver<MarkerCompletion>, n: usize) -> Vec<MarkerCompletion> {
    let mut out = Vec::new();
    for _ in 0..n {
        let c = tokio::time::timeout(Duration::from_secs(7 * 24 * 3600), rx.recv())
            .await
            .expect("a completion arrives")
            .expect("channel open");
        out.push(c);
    }
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(rx.try_recv().is_err(), "exactly {n} completions");
    out
}

fn outcomes(cs: &[MarkerCompletion]) -> BTreeMap<(String, i32), MarkerOutcome> {
    let mut m = BTreeMap::new();
    for c in cs {
        let prev = m.insert(
            (
                c.transactional_id.as_str().to_owned(),
                c.coordinator_epoch.0,
            ),
            c.outcome,
        );
        assert!(prev.is_none(), "two completions for one decision: {c:?}");
    }
    m
}

fn key(t: &str, ce: i32) -> (String, i32) {
    (t.to_owned(), ce)
}

#[tokio::test(start_paused = true)]
async fn s92_two_brokers_two_transactions_sharing_a_partition() {
    let brokers = Brokers::new();
    let mut s = setup(brokers.transport(), config());
    s.resolver.set(tp("topic1", 1), LeaderLookup::Leader(ep(2)));
    s.submit(req("txnId1", 0, 0, 0, &[tp("topic1", 0), tp("topic1", 1)]))
        .await;
    s.submit(req("txnId2", 1, 1, 0, &[tp("topic1", 0)])).await;
    let cs = completions(&mut s.rx, 2).await;
    let o = outcomes(&cs);
    assert_eq!(o[&key("txnId1", 0)], MarkerOutcome::Completed);
    assert_eq!(o[&key("txnId2", 0)], MarkerOutcome::Completed);
    let mut b1 = brokers.received(1);
    b1.sort();
    assert_eq!(b1, vec![(0, "topic1".into(), 0), (1, "topic1".into(), 0)]);
    assert_eq!(brokers.received(2), vec![(0, "topic1".into(), 1)]);
    let seen = brokers.versions_seen.lock().clone();
    assert!(
        !seen.is_empty() && seen.iter().all(|&v| v == TxnVersion::V2),
        "{seen:?}"
    );
    let st = s.writer.stats();
    assert_eq!((st.markers_sent, st.markers_acked, st.completed), (3, 3, 2));
    assert_eq!(st.pending_decisions, 0);
}

#[tokio::test(start_paused = true)]
async fn leader_moves_after_not_leader() {
    let brokers = Brokers::new();
    let mut s = setup(brokers.transport(), config());
    let resolver = s.resolver.clone();
    // Broker 1 lost leadership of t-0 to broker 2.
    brokers.script(move |node, _, _, _| {
        if node == 1 {
            resolver.set(tp("t", 0), LeaderLookup::Leader(ep(2)));
            codes::NOT_LEADER_OR_FOLLOWER
        } else {
            codes::NONE
        }
    });
    s.submit(req("a", 7, 0, 0, &[tp("t", 0)])).await;
    let cs = completions(&mut s.rx, 1).await;
    assert_eq!(cs[0].outcome, MarkerOutcome::Completed);
    assert_eq!(brokers.received(1), vec![(7, "t".into(), 0)]);
    assert_eq!(brokers.received(2), vec![(7, "t".into(), 0)]);
    assert_eq!(s.writer.stats().markers_retried, 1);
}

#[tokio::test(start_paused = true)]
async fn s93_topic_deletion_drops_partitions() {
    let brokers = Brokers::new();
    let mut s = setup(brokers.transport(), config());
    s.resolver.set(tp("deleted", 0), LeaderLookup::TopicGone);
    s.submit(req("a", 1, 0, 0, &[tp("deleted", 0), tp("kept", 0)]))
        .await;
    let cs = completions(&mut s.rx, 1).await;
    assert_eq!(cs[0].outcome, MarkerOutcome::Completed);
    assert_eq!(cs[0].dropped_partitions, vec![tp("deleted", 0)]);
    assert_eq!(brokers.received(1), vec![(1, "kept".into(), 0)]);
    assert_eq!(s.writer.stats().markers_dropped, 1);
}

#[tokio::test(start_paused = true)]
async fn s101_a_refused_partition_ends_the_decision_refused_after_the_others() {
    for code in [
        codes::TRANSACTION_COORDINATOR_FENCED,
        codes::INVALID_PRODUCER_EPOCH,
    ] {
        let brokers = Brokers::new();
        brokers.script(move |_, _, _, p| if p == 1 { code } else { codes::NONE });
        let mut s = setup(brokers.transport(), config());
        s.submit(req("a", 1, 4, 0, &[tp("t", 0), tp("t", 1)])).await;
        let cs = completions(&mut s.rx, 1).await;
        assert_eq!(cs[0].outcome, MarkerOutcome::Refused, "{code}");
        assert_eq!(cs[0].log_partition, LogPartition(4));
        let refused: Vec<_> = cs[0]
            .refused_partitions
            .iter()
            .map(|r| (&r.partition, r.error))
            .collect();
        assert_eq!(refused, vec![(&tp("t", 1), code)], "{code}");
        assert_eq!(
            brokers.received(1),
            vec![(1, "t".into(), 0), (1, "t".into(), 1)],
            "each partition sent once: t-1 is not retried"
        );
        assert_eq!(s.writer.stats().planner.refused, 1);
    }
}

#[tokio::test(start_paused = true)]
async fn broker_down_for_an_hour_then_back() {
    let brokers = Brokers::new();
    brokers.down.lock().insert(1);
    let mut s = setup(brokers.transport(), config());
    for i in 0..20 {
        s.submit(req(&format!("t{i}"), i, 0, 0, &[tp("t", (i % 3) as i32)]))
            .await;
    }
    tokio::time::sleep(Duration::from_secs(3600)).await;
    let st = s.writer.stats();
    assert_eq!(st.pending_decisions, 20);
    assert_eq!(
        st.pending_partitions, 20,
        "memory follows pending work, not retries"
    );
    assert!(st.markers_retried >= 20 * 100, "{}", st.markers_retried);
    let calls_while_down = brokers.calls.lock()[&1];
    // Backoff is capped at 5 s: an hour is at least 720 rounds, and rounds are batched.
    assert!(calls_while_down >= 700, "{calls_while_down}");
    assert!(calls_while_down <= 2 * 3600 / 5 + 20, "{calls_while_down}");
    assert!(s.rx.try_recv().is_err());
    brokers.down.lock().clear();
    let cs = completions(&mut s.rx, 20).await;
    assert!(cs.iter().all(|c| c.outcome == MarkerOutcome::Completed));
    assert_eq!(outcomes(&cs).len(), 20);
    assert_eq!(s.writer.stats().pending_partitions, 0);
}

#[tokio::test(start_paused = true)]
async fn stats_show_the_queue_per_broker_while_it_is_down() {
    let brokers = Brokers::new();
    brokers.down.lock().insert(2);
    let mut s = setup(brokers.transport(), config());
    s.resolver.set(tp("t", 1), LeaderLookup::Leader(ep(2)));
    s.submit(req("a", 1, 0, 0, &[tp("t", 0), tp("t", 1)])).await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    let st = s.writer.stats();
    assert_eq!(st.pending_partitions, 1);
    assert_eq!(st.markers_acked, 1);
    assert!(st.requests_failed > 0);
    assert!(s.rx.try_recv().is_err());
    s.writer.cancel_log_partition(LogPartition(0));
    let cs = completions(&mut s.rx, 1).await;
    assert_eq!(cs[0].outcome, MarkerOutcome::Cancelled);
    assert_eq!(s.writer.stats().pending_partitions, 0);
}

/// An in-process broker that holds every request until released, announcing arrivals.
struct Gate {
    arrived: mpsc::UnboundedSender<i32>,
    release: Semaphore,
}

#[async_trait]
impl LocalMarkerHandler for Gate {
    async fn write_markers(
        &self,
        _broker: &BrokerEndpoint,
        request: WriteTxnMarkersRequest,
        _txn_versions: Vec<TxnVersion>,
    ) -> Result<WriteTxnMarkersResponse, TransportError> {
        let ce = request.markers.first().map_or(-1, |m| m.coordinator_epoch);
        let _ = self.arrived.send(ce);
        self.release.acquire().await.expect("open").forget();
        Ok(build_response(&request, |_, _, _| codes::NONE))
    }
}

fn gate() -> (Arc<Gate>, mpsc::UnboundedReceiver<i32>) {
    let (tx, rx) = mpsc::unbounded_channel();
    (
        Arc::new(Gate {
            arrived: tx,
            release: Semaphore::new(0),
        }),
        rx,
    )
}

/// A writer whose only broker is the in-process `gate`.
fn gated_setup(gate: &Arc<Gate>, config: WriterConfig) -> Setup {
    setup(Arc::new(InProcessTransport::new(gate.clone())), config)
}

/// S99: the answer to a marker sent at coordinator epoch 0 arrives after the log partition
/// was unloaded and reloaded at epoch 1: one Cancelled (epoch 0), one Completed (epoch 1).
#[tokio::test(start_paused = true)]
async fn s99_response_races_unload_and_reload() {
    let (g, mut arrived) = gate();
    let mut s = gated_setup(&g, config());
    s.submit(req("txnId1", 0, 0, 0, &[tp("topic1", 0)])).await;
    assert_eq!(arrived.recv().await, Some(0));
    s.writer.cancel_log_partition(LogPartition(0));
    s.submit(req("txnId1", 0, 0, 1, &[tp("topic1", 0)])).await;
    let first = s.rx.recv().await.expect("cancelled");
    assert_eq!(
        (first.coordinator_epoch.0, first.outcome),
        (0, MarkerOutcome::Cancelled)
    );
    g.release.add_permits(1);
    assert_eq!(
        arrived.recv().await,
        Some(1),
        "the reloaded decision is sent after"
    );
    g.release.add_permits(1);
    let cs = completions(&mut s.rx, 1).await;
    assert_eq!(
        (cs[0].coordinator_epoch.0, cs[0].outcome),
        (1, MarkerOutcome::Completed)
    );
}

/// S100: the same transaction submitted again while its markers are in flight: the first
/// decision is superseded, one Completed follows.
#[tokio::test(start_paused = true)]
async fn s100_resubmit_while_in_flight_completes_once() {
    let (g, mut arrived) = gate();
    let mut s = gated_setup(&g, config());
    s.submit(req("txnId1", 0, 0, 0, &[tp("topic1", 0)])).await;
    assert_eq!(arrived.recv().await, Some(0));
    s.submit(req("txnId1", 0, 0, 0, &[tp("topic1", 0)])).await;
    // The writer task polls the in-flight request itself: wait for the resubmission to be
    // taken (it supersedes the first decision at once) before the broker answers.
    let first = s.rx.recv().await.expect("superseded");
    assert_eq!(first.outcome, MarkerOutcome::Superseded);
    g.release.add_permits(2);
    let cs = completions(&mut s.rx, 1).await;
    assert_eq!(cs[0].outcome, MarkerOutcome::Completed);
}

#[tokio::test(start_paused = true)]
async fn backpressure_and_release_on_completion() {
    let (g, mut arrived) = gate();
    let mut s = gated_setup(
        &g,
        WriterConfig {
            max_pending_decisions: 2,
            ..config()
        },
    );
    s.writer
        .try_submit(req("a", 0, 0, 0, &[tp("t", 0)]))
        .expect("a");
    s.writer
        .try_submit(req("b", 1, 1, 0, &[tp("t", 0)]))
        .expect("b");
    assert!(matches!(
        s.writer.try_submit(req("c", 2, 1, 0, &[tp("t", 0)])),
        Err(TrySubmitError::Full(_))
    ));
    assert_eq!(arrived.recv().await, Some(0));
    // A blocked submit proceeds once a completion has been delivered.
    let w = s.writer.clone();
    let blocked = tokio::spawn(async move { w.submit(req("c", 2, 1, 0, &[tp("t", 0)])).await });
    tokio::task::yield_now().await;
    assert!(!blocked.is_finished());
    s.writer.cancel_log_partition(LogPartition(0));
    let c = s.rx.recv().await.expect("a cancelled");
    assert_eq!(
        (c.transactional_id.as_str(), c.outcome),
        ("a", MarkerOutcome::Cancelled)
    );
    blocked.await.expect("join").expect("submitted");
    g.release.add_permits(10);
    let cs = completions(&mut s.rx, 2).await;
    let o = outcomes(&cs);
    assert_eq!(o[&key("b", 0)], MarkerOutcome::Completed);
    assert_eq!(o[&key("c", 0)], MarkerOutcome::Completed);
}

#[tokio::test(start_paused = true)]
async fn routing_transport_sends_local_broker_in_process() {
    let local = Brokers::new();
    let remote = Brokers::new();
    let t = Arc::new(RoutingTransport::new(
        1,
        local.transport(),
        remote.transport(),
    ));
    let mut s = setup(t, config());
    s.resolver.set(tp("t", 1), LeaderLookup::Leader(ep(2)));
    s.submit(req("a", 5, 0, 0, &[tp("t", 0), tp("t", 1)])).await;
    let cs = completions(&mut s.rx, 1).await;
    assert_eq!(cs[0].outcome, MarkerOutcome::Completed);
    assert_eq!(local.received(1), vec![(5, "t".into(), 0)]);
    assert!(local.received(2).is_empty());
    assert_eq!(remote.received(2), vec![(5, "t".into(), 1)]);
}

#[tokio::test(start_paused = true)]
async fn request_timeout_is_retried() {
    let (g, mut arrived) = gate();
    let mut s = gated_setup(
        &g,
        WriterConfig {
            request_timeout: Duration::from_secs(30),
            ..config()
        },
    );
    s.submit(req("a", 0, 0, 0, &[tp("t", 0)])).await;
    assert_eq!(arrived.recv().await, Some(0));
    // Never released: the first call times out (virtual 30 s), the retry is answered.
    assert_eq!(arrived.recv().await, Some(0));
    g.release.add_permits(1);
    let cs = completions(&mut s.rx, 1).await;
    assert_eq!(cs[0].outcome, MarkerOutcome::Completed);
    let st = s.writer.stats();
    assert_eq!((st.requests_failed, st.markers_retried), (1, 1));
}

/// A panicking in-process handler fails that request (retried); it does not wedge the broker.
#[tokio::test(start_paused = true)]
async fn panicking_handler_is_a_failed_request() {
    let calls = Arc::new(Mutex::new(0u32));
    let c = calls.clone();
    let transport = Arc::new(InProcessTransport::from_fn(move |_, request, _| {
        let n = {
            let mut n = c.lock();
            *n += 1;
            *n
        };
        assert!(n > 1, "scripted panic on the first call");
        Ok(build_response(&request, |_, _, _| codes::NONE))
    }));
    let mut s = setup(transport, config());
    s.submit(req("a", 0, 0, 0, &[tp("t", 0)])).await;
    let cs = completions(&mut s.rx, 1).await;
    assert_eq!(cs[0].outcome, MarkerOutcome::Completed);
    assert_eq!(*calls.lock(), 2);
    assert_eq!(s.writer.stats().requests_failed, 1);
}
