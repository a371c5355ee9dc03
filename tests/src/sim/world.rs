//! The simulated world: coordinators, the shared log, participants, clients and the network,
//! driven by one event queue on a seeded clock.

use std::collections::{BTreeMap, BTreeSet};

use coordinator::{
    AddPartitionsToTxnResponse, Config, EndTxnResponse, Engine, InitProducerIdResponse, IoId,
    MarkerCompletion, MarkerOutcome, Millis, ProducerIdAllocator, Request, RequestId, Response,
    TxnMarkerRequest,
};
use kafka_protocol::messages::{WriteTxnMarkersRequest, WriteTxnMarkersResponse};
use markers::apply::{ApplyError, markers_of, response_of};
use markers::participant::{
    BatchHeader, Marker, ParticipantConfig, PartitionState, ProduceDecision,
};
use markers::writer::{self as mw, BrokerEndpoint, LeaderLookup, MarkerPlanner, PlannerConfig};
use txn_log::mem::{Durability, Ticket};
use txn_log::rng::Rng;
use txn_log::{
    ErrorCode, LogOp, LogPartition, MemTxnLog, ProducerEpoch, ProducerId, TopicPartition,
    TransactionalId, TxnResult, TxnVersion,
};

use super::client::{self, Answer, Client, Plan, Produce, Send};
use crate::fault::checker::{self, Report};
use crate::fault::decisions::{self, LogItem, Observed, Transition};
use crate::fault::history::{Accepted, Issue, Outcome, Read, Record, TxnOp};

/// The topic the clients write.
const TOPIC: &str = "fq";
/// Mixed into the seed for the stream that draws a world's shape ([`Options::new`]).
const SHAPE_SEED: u64 = 0x5eed_5a9e;
/// A client's per-attempt timeout (ms).
const CLIENT_TIMEOUT_MS: u64 = 1_000;
/// Faults are injected until this time (ms); then the world heals and settles.
const FAULT_END_MS: u64 = 10_000;
/// The run stops here at the latest (ms); what is unfinished then is judged as it is.
const HARD_STOP_MS: u64 = 120_000;
/// An Ongoing record older than its timeout plus this at the end of a run was not reaped.
const AUDIT_SLACK_MS: i64 = 2_000;
/// A marker request unanswered this long fails as a whole (ms).
const MARKER_TIMEOUT_MS: u64 = 1_000;

/// A bug put back into the simulation's own components (never into production code).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mutant {
    /// The I10 ordering bug (loom mutant 4a): the marker delivery reports a decision
    /// complete while one partition still waits for its marker, so Complete* is written
    /// before every participant has its marker.
    EarlyComplete,
}

/// Which transaction versions the clients speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TvMix {
    /// Every client TV1.
    Tv1,
    /// Every client TV2.
    Tv2,
    /// Each client picks one.
    Mixed,
}

/// What one run simulates.
#[derive(Debug, Clone)]
pub struct Options {
    /// The seed of everything random.
    pub seed: u64,
    /// Coordinator nodes.
    pub nodes: usize,
    /// Transaction-log partitions.
    pub log_partitions: u32,
    /// Partitions of the workload topic.
    pub partitions: i32,
    /// Clients (one transactional id each).
    pub clients: usize,
    /// Transactions per client.
    pub txns_per_client: usize,
    /// Transaction versions of the clients.
    pub tv: TvMix,
    /// Inject faults (crashes, ownership moves, cuts, drops, long delays, held EndTxn).
    pub faults: bool,
    /// How often coordinators crash, move or are cut off (1-3): per 100 ms of the fault
    /// phase, a crash with `3 * level` %, a move with `4 * level` %, a cut with `2 * level` %.
    pub fault_level: u64,
    /// Hold TV1 clients' EndTxn past their timeout too (KAFKA-17754: a stale EndTxn ends
    /// the next transaction under TV1). Off by default: it is Apache Kafka's behaviour, not a
    /// bug of this coordinator; TV2 clients' EndTxn are held either way.
    pub hold_tv1_end_txn: bool,
    /// Hold TV1 clients' produce requests past their timeout too (the hanging transaction of
    /// TV1: the client aborts, the produce lands after the abort marker at the same epoch
    /// and opens a transaction no coordinator knows, which the producer's next marker closes).
    /// Off by default: it is Apache Kafka's TV1 behaviour without KIP-890 part 1 verification,
    /// which the simulated partitions do not do; TV2 clients' produce requests are held either
    /// way (the bumped epoch of the abort marker fences them).
    pub hold_tv1_produce: bool,
    /// A bug put back.
    pub mutant: Option<Mutant>,
}

impl Options {
    /// The default world for `seed`, its shape drawn from the seed: 1-3 coordinators, 1-3
    /// log partitions, 1-4 partitions, 2-5 clients of mixed versions running 4-12
    /// transactions each, with faults at level 1-3.
    pub fn new(seed: u64) -> Self {
        // Its own stream, so that the shape does not shift the world's draws.
        let mut shape = Rng::new(seed ^ SHAPE_SEED);
        Self {
            seed,
            nodes: 1 + shape.index(3),
            log_partitions: 1 + u32::try_from(shape.index(3)).unwrap_or(0),
            partitions: 1 + i32::try_from(shape.index(4)).unwrap_or(0),
            clients: 2 + shape.index(4),
            txns_per_client: 4 + shape.index(9),
            tv: TvMix::Mixed,
            faults: true,
            fault_level: 1 + shape.below(3),
            hold_tv1_end_txn: false,
            hold_tv1_produce: false,
            mutant: None,
        }
    }
}

/// What a run produced.
#[derive(Debug)]
pub struct RunResult {
    /// The checker's verdict.
    pub report: Report,
    /// The history it judged.
    pub record: Record,
    /// Simulated time at the end (ms).
    pub end_ms: u64,
    /// Events processed.
    pub events: u64,
    /// What had not settled at the hard stop (None when the run settled before it).
    pub unsettled: Option<String>,
    /// A digest of the history and the verdict: two runs of one seed give the same digest.
    pub digest: u64,
}

impl RunResult {
    /// Whether the checker found no anomaly.
    pub fn is_valid(&self) -> bool {
        self.report.is_valid()
    }
}

/// One message on the simulated network.
#[derive(Debug)]
enum Msg {
    ToNode {
        node: usize,
        client: usize,
        serial: u64,
        request: Request,
    },
    ToClient {
        client: usize,
        serial: u64,
        answer: Answer,
    },
    Produce {
        client: usize,
        serial: u64,
        produce: Produce,
        sent_ms: u64,
    },
    Markers {
        node: usize,
        inc: u64,
        broker: i32,
        request_id: mw::RequestId,
        request: WriteTxnMarkersRequest,
        versions: Vec<TxnVersion>,
    },
    MarkersAnswer {
        node: usize,
        inc: u64,
        broker: i32,
        request_id: mw::RequestId,
        response: WriteTxnMarkersResponse,
    },
}

#[derive(Debug)]
enum Ev {
    Deliver(Msg),
    ClientSend(usize),
    ClientTimeout {
        client: usize,
        serial: u64,
    },
    MarkerTimeout {
        node: usize,
        inc: u64,
        broker: i32,
        request_id: mw::RequestId,
    },
    Flush,
    Tick,
    Fault,
    Restart(usize),
    Unload {
        node: usize,
        lp: u32,
    },
    Reload {
        node: usize,
        lp: u32,
    },
}

/// An append handed to the log, waiting to be durable.
struct PendingAppend {
    lp: u32,
    io: IoId,
    ticket: Ticket,
    transitions: Vec<Transition>,
}

/// A decision the EarlyComplete mutant watches: partitions not yet acknowledged.
struct Watched {
    request: TxnMarkerRequest,
    remaining: BTreeSet<TopicPartition>,
    reported: bool,
}

struct Node {
    up: bool,
    inc: u64,
    engines: BTreeMap<u32, Engine>,
    alloc: ProducerIdAllocator,
    planner: MarkerPlanner,
    next_request: u64,
    requests: BTreeMap<RequestId, (usize, u64)>,
    appends: Vec<PendingAppend>,
    watched: Vec<Watched>,
    early: Vec<MarkerCompletion>,
}

struct Partition {
    state: PartitionState,
    log: Vec<LogItem>,
}

struct World {
    o: Options,
    rng: Rng,
    now: u64,
    seq: u64,
    queue: BTreeMap<(u64, u64), Ev>,
    log: MemTxnLog,
    config: Config,
    nodes: Vec<Node>,
    owner: Vec<usize>,
    cut: Option<(usize, u64)>,
    parts: Vec<Partition>,
    clients: Vec<Client>,
    client_coord: Vec<Option<usize>>,
    client_txn: Vec<Option<usize>>,
    rec: Record,
    events: u64,
}

fn pid_block(log: &MemTxnLog) -> txn_log::ProducerIdBlock {
    let (block, _) = log
        .allocate_block_sync(1000, ProducerId(0))
        .expect("the mem log allocates");
    log.make_durable();
    block
}

impl World {
    fn new(o: Options) -> Self {
        let mut rng = Rng::new(o.seed);
        let log = MemTxnLog::with_durability(Durability::Manual);
        let config = Config {
            transaction_state_log_num_partitions: o.log_partitions,
            abort_timed_out_transaction_cleanup_interval_ms: 1_000,
            park_max_ms: if rng.chance(0.5) { 0 } else { 1_000 },
            ..Config::default()
        };
        let nodes = (0..o.nodes)
            .map(|_| Node {
                up: true,
                inc: 0,
                engines: BTreeMap::new(),
                alloc: ProducerIdAllocator::with_block(pid_block(&log)).expect("valid block"),
                planner: MarkerPlanner::new(PlannerConfig::default()),
                next_request: 1,
                requests: BTreeMap::new(),
                appends: Vec::new(),
                watched: Vec::new(),
                early: Vec::new(),
            })
            .collect();
        let participant = ParticipantConfig::default();
        let parts = (0..o.partitions)
            .map(|_| Partition {
                state: PartitionState::new(participant, 0),
                log: Vec::new(),
            })
            .collect();
        let mut clients = Vec::new();
        let mut counter = 0u64;
        for c in 0..o.clients {
            let tv = match o.tv {
                TvMix::Tv1 => TxnVersion::V1,
                TvMix::Tv2 => TxnVersion::V2,
                TvMix::Mixed if rng.chance(0.5) => TxnVersion::V1,
                TvMix::Mixed => TxnVersion::V2,
            };
            let p: Vec<Plan> = (0..o.txns_per_client)
                .map(|_| {
                    let n = 1 + rng.index(3);
                    let writes = (0..n)
                        .map(|_| {
                            counter += 1;
                            let part = i32::try_from(rng.index(o.partitions as usize)).unwrap_or(0);
                            (part, format!("{c}-{counter}"))
                        })
                        .collect();
                    Plan {
                        writes,
                        commit: !rng.chance(0.25),
                    }
                })
                .collect();
            clients.push(Client::new(format!("sim-{c}"), tv, TOPIC, p));
        }
        let owner = (0..o.log_partitions as usize)
            .map(|lp| lp % o.nodes)
            .collect();
        let n_clients = o.clients;
        Self {
            o,
            rng,
            now: 0,
            seq: 0,
            queue: BTreeMap::new(),
            log,
            config,
            nodes,
            owner,
            cut: None,
            parts,
            clients,
            client_coord: vec![None; n_clients],
            client_txn: vec![None; n_clients],
            rec: Record::default(),
            events: 0,
        }
    }

    fn at(&mut self, delay: u64, ev: Ev) {
        self.seq += 1;
        self.queue.insert((self.now + delay, self.seq), ev);
    }

    fn faulty(&self) -> bool {
        self.o.faults && self.now < FAULT_END_MS
    }

    fn fault(&mut self, kind: &'static str, what: String) {
        self.rec.faults.push((self.now, what));
        self.rec.fault_kinds.push((self.now, kind));
    }

    /// Sends `msg` between `ends` (the nodes involved, for cuts): delayed, sometimes long,
    /// sometimes dropped; `hold` names a request that may be held past the client's timeout.
    fn send(&mut self, ends: &[usize], msg: Msg, hold: Option<&'static str>) {
        let faulty = self.faulty();
        if faulty {
            let cut = self
                .cut
                .is_some_and(|(n, until)| self.now < until && ends.contains(&n));
            if cut || self.rng.chance(0.02) {
                return;
            }
        }
        let delay = if let Some(what) = hold.filter(|_| faulty && self.rng.chance(0.1)) {
            self.fault("hold", format!("{what} held past the client's timeout"));
            1_500 + self.rng.below(2_500)
        } else if faulty && self.rng.chance(0.05) {
            20 + self.rng.below(300)
        } else {
            1 + self.rng.below(15)
        };
        self.at(delay, Ev::Deliver(msg));
    }

    fn lp_of(&self, tid: &str) -> u32 {
        let id = TransactionalId::new(tid).expect("non-empty");
        self.config.partition_for(&id).0
    }

    // ===== clients =====

    fn client_send(&mut self, c: usize) {
        if !self.clients[c].wants_send() {
            return;
        }
        let mut evs = Vec::new();
        let send = self.clients[c].next(self.now, &mut evs);
        self.client_events(c, evs);
        let Some(send) = send else { return };
        let serial = self.clients[c].serial;
        match send {
            Send::Coordinator(request) => {
                let lp = self.lp_of(&self.clients[c].tid.clone()) as usize;
                let node = *self.client_coord[c].get_or_insert(self.owner[lp]);
                let hold = (matches!(request, Request::EndTxn(_))
                    && (self.clients[c].tv.bumps_epoch_per_txn() || self.o.hold_tv1_end_txn))
                    .then_some("EndTxn");
                self.send(
                    &[node],
                    Msg::ToNode {
                        node,
                        client: c,
                        serial,
                        request,
                    },
                    hold,
                );
            }
            Send::Produce(produce) => {
                let sent_ms = self.now;
                let hold = (self.clients[c].tv.bumps_epoch_per_txn() || self.o.hold_tv1_produce)
                    .then_some("Produce");
                let msg = Msg::Produce {
                    client: c,
                    serial,
                    produce,
                    sent_ms,
                };
                self.send(&[], msg, hold);
            }
        }
        self.at(CLIENT_TIMEOUT_MS, Ev::ClientTimeout { client: c, serial });
    }

    fn client_answer(&mut self, c: usize, serial: u64, answer: Answer) {
        let cl = &self.clients[c];
        if serial != cl.serial || !cl.waiting {
            return;
        }
        if matches!(answer, Answer::Coordinator(_))
            && matches!(
                answer.error_code(),
                ErrorCode::NOT_COORDINATOR
                    | ErrorCode::COORDINATOR_NOT_AVAILABLE
                    | ErrorCode::COORDINATOR_LOAD_IN_PROGRESS
            )
        {
            self.client_coord[c] = None;
        }
        let mut evs = Vec::new();
        self.clients[c].answer(answer, &mut evs);
        self.client_events(c, evs);
        let backoff = if self.clients[c].wants_send() {
            1 + self.rng.below(50)
        } else {
            0
        };
        self.at(backoff, Ev::ClientSend(c));
    }

    fn client_timeout(&mut self, c: usize, serial: u64) {
        let cl = &self.clients[c];
        if serial != cl.serial || !cl.waiting {
            return;
        }
        self.client_coord[c] = None;
        let mut evs = Vec::new();
        self.clients[c].timed_out(&mut evs);
        self.client_events(c, evs);
        let backoff = 1 + self.rng.below(50);
        self.at(backoff, Ev::ClientSend(c));
    }

    fn client_events(&mut self, c: usize, evs: Vec<client::Event>) {
        let tid = self.clients[c].tid.clone();
        for ev in evs {
            match ev {
                client::Event::Invoke { pid, epoch, .. } => {
                    let id = self.rec.txns.len();
                    self.rec.txns.push(TxnOp {
                        id,
                        process: u32::try_from(c).unwrap_or(u32::MAX),
                        tid: tid.clone(),
                        pid,
                        epoch,
                        writes: Vec::new(),
                        outcome: Outcome::Invoked,
                        invoke_ms: self.now,
                        complete_ms: u64::MAX,
                        note: String::new(),
                    });
                    self.client_txn[c] = Some(id);
                }
                client::Event::Writes { partition, values } => {
                    if let Some(t) = self.client_txn[c].and_then(|i| self.rec.txns.get_mut(i)) {
                        t.writes.extend(values.into_iter().map(|v| (partition, v)));
                    }
                }
                client::Event::Complete { outcome, note } => {
                    if let Some(t) = self.client_txn[c]
                        .take()
                        .and_then(|i| self.rec.txns.get_mut(i))
                    {
                        t.outcome = outcome;
                        t.complete_ms = self.now;
                        t.note = note;
                    }
                }
                client::Event::Issued {
                    pid,
                    epoch,
                    api,
                    invoke_ms,
                } => self.rec.issues.push(Issue {
                    tid: tid.clone(),
                    pid,
                    epoch,
                    api,
                    invoke_ms,
                    complete_ms: self.now,
                }),
            }
        }
    }

    // ===== coordinators =====

    fn node_request(&mut self, n: usize, client: usize, serial: u64, request: Request) {
        if !self.nodes[n].up {
            return;
        }
        let lp = self.lp_of(&self.clients[client].tid.clone());
        let now = Millis(self.now as i64);
        let node = &mut self.nodes[n];
        let Some(engine) = node.engines.get_mut(&lp) else {
            let answer = not_coordinator(&request);
            self.send(
                &[n],
                Msg::ToClient {
                    client,
                    serial,
                    answer,
                },
                None,
            );
            return;
        };
        let to = RequestId(node.next_request);
        node.next_request += 1;
        node.requests.insert(to, (client, serial));
        engine.handle_request(now, to, request);
        self.drive(n, lp);
    }

    /// Executes the effects of engine `lp` of node `n`, then the planner's.
    fn drive(&mut self, n: usize, lp: u32) {
        self.drive_engine(n, lp);
        self.drive_planner(n);
    }

    /// Executes the effects of engine `lp` of node `n` until it has none.
    fn drive_engine(&mut self, n: usize, lp: u32) {
        let mut unloaded = false;
        loop {
            let Some(engine) = self.nodes[n].engines.get_mut(&lp) else {
                return;
            };
            let effects = engine.drain_effects();
            if effects.is_empty() {
                break;
            }
            for e in effects {
                match e {
                    coordinator::Effect::AppendLog {
                        io,
                        partition,
                        coordinator_epoch,
                        entries,
                    } => {
                        let transitions = transitions(&entries, self.now);
                        match self.log.append_sync(partition, coordinator_epoch, entries) {
                            Ok(ticket) => self.nodes[n].appends.push(PendingAppend {
                                lp,
                                io,
                                ticket,
                                transitions,
                            }),
                            Err(err) => {
                                if let Some(engine) = self.nodes[n].engines.get_mut(&lp) {
                                    engine.handle_append_failed(io, err);
                                }
                            }
                        }
                    }
                    coordinator::Effect::Respond { to, response } => {
                        if let Some((client, serial)) = self.nodes[n].requests.remove(&to) {
                            self.send(
                                &[n],
                                Msg::ToClient {
                                    client,
                                    serial,
                                    answer: Answer::Coordinator(response),
                                },
                                None,
                            );
                        }
                    }
                    coordinator::Effect::WriteMarkers(request) => self.submit(n, request),
                    coordinator::Effect::NeedProducerIds { block_size } => {
                        let (block, _) = self
                            .log
                            .allocate_block_sync(block_size, ProducerId(0))
                            .expect("the mem log allocates");
                        // Durable before use; acknowledged appends follow at the next flush.
                        self.log.make_durable();
                        let _ = self.nodes[n].alloc.add_block(block);
                    }
                    coordinator::Effect::Unloaded { .. } => unloaded = true,
                    _ => {}
                }
            }
        }
        if unloaded {
            self.drop_partition(n, lp);
            let delay = 20 + self.rng.below(200);
            self.at(delay, Ev::Reload { node: n, lp });
        }
    }

    fn submit(&mut self, n: usize, request: TxnMarkerRequest) {
        let now = self.now;
        let node = &mut self.nodes[n];
        if self.o.mutant == Some(Mutant::EarlyComplete) {
            node.watched
                .retain(|w| w.request.transactional_id != request.transactional_id);
            let mut w = Watched {
                remaining: request.partitions.iter().cloned().collect(),
                request: request.clone(),
                reported: false,
            };
            if w.remaining.len() <= 1 {
                w.reported = true;
                node.early
                    .push(MarkerCompletion::of(&request, MarkerOutcome::Completed));
            }
            node.watched.push(w);
        }
        if let Err(mw::SubmitError::Full(r)) = node.planner.submit(now, request) {
            // Never with the default limit; finish it as Kafka drops a decision it cannot hold.
            node.early
                .push(MarkerCompletion::of(&r, MarkerOutcome::Cancelled));
        }
    }

    fn drive_planner(&mut self, n: usize) {
        let now = self.now;
        loop {
            let mut progressed = false;
            while let Some(effect) = self.nodes[n].planner.poll_effect() {
                progressed = true;
                match effect {
                    mw::Effect::Resolve { lookups } => {
                        for l in lookups {
                            let leader = BrokerEndpoint::new(l.partition.partition, "sim", 0);
                            self.nodes[n].planner.handle_leader(
                                now,
                                &l.partition,
                                LeaderLookup::Leader(leader),
                            );
                        }
                    }
                    mw::Effect::Send {
                        broker,
                        request_id,
                        request,
                        txn_versions,
                    } => {
                        let inc = self.nodes[n].inc;
                        self.send(
                            &[n],
                            Msg::Markers {
                                node: n,
                                inc,
                                broker: broker.node_id,
                                request_id,
                                request,
                                versions: txn_versions,
                            },
                            None,
                        );
                        self.at(
                            MARKER_TIMEOUT_MS,
                            Ev::MarkerTimeout {
                                node: n,
                                inc,
                                broker: broker.node_id,
                                request_id,
                            },
                        );
                    }
                }
            }
            let mut done: Vec<MarkerCompletion> = std::mem::take(&mut self.nodes[n].early);
            while let Some(c) = self.nodes[n].planner.poll_completion() {
                let node = &mut self.nodes[n];
                let watched = node
                    .watched
                    .iter()
                    .position(|w| same_decision(&w.request, &c));
                match watched.map(|i| node.watched.remove(i)) {
                    Some(w) if w.reported => {}
                    _ => done.push(c),
                }
            }
            for c in done {
                progressed = true;
                let lp = c.log_partition.0;
                if let Some(engine) = self.nodes[n].engines.get_mut(&lp) {
                    engine.handle_markers_done(Millis(now as i64), c);
                    self.drive_engine(n, lp);
                }
            }
            if !progressed {
                return;
            }
        }
    }

    /// Node `n` no longer serves log partition `lp`: its engine, appends and marker
    /// decisions go (the planner's Cancelled completions are polled and find no engine).
    fn drop_partition(&mut self, n: usize, lp: u32) {
        let node = &mut self.nodes[n];
        node.engines.remove(&lp);
        node.appends.retain(|a| a.lp != lp);
        node.planner.cancel_log_partition(LogPartition(lp));
        node.watched.retain(|w| w.request.log_partition.0 != lp);
        self.drive_planner(n);
    }

    fn load(&mut self, n: usize, lp: u32) {
        let (epoch, _) = self
            .log
            .claim_next_sync(LogPartition(lp))
            .expect("the mem log claims");
        self.log.make_durable();
        self.settle_appends();
        let loaded = self
            .log
            .load_sync(LogPartition(lp))
            .expect("the mem log loads");
        let node = &mut self.nodes[n];
        let mut engine = Engine::new(LogPartition(lp), self.config.clone(), node.alloc.clone());
        engine.handle_load(Millis(self.now as i64), epoch, loaded);
        node.engines.insert(lp, engine);
        self.drive(n, lp);
    }

    /// Acknowledges every append that became durable, fails those lost in a crash.
    fn settle_appends(&mut self) {
        for n in 0..self.nodes.len() {
            let pending = std::mem::take(&mut self.nodes[n].appends);
            let mut keep = Vec::new();
            let mut touched = BTreeSet::new();
            for a in pending {
                match self.log.is_durable(a.ticket) {
                    Ok(false) => keep.push(a),
                    Ok(true) => {
                        if let Some(engine) = self.nodes[n].engines.get_mut(&a.lp) {
                            engine.handle_append_done(a.io);
                            for mut t in a.transitions {
                                t.durable_ms = self.now as i64;
                                self.rec.decisions.transitions.push(t);
                            }
                            touched.insert(a.lp);
                        }
                    }
                    Err(err) => {
                        if let Some(engine) = self.nodes[n].engines.get_mut(&a.lp) {
                            engine.handle_append_failed(a.io, err);
                            touched.insert(a.lp);
                        }
                    }
                }
            }
            keep.extend(std::mem::take(&mut self.nodes[n].appends));
            self.nodes[n].appends = keep;
            for lp in touched {
                self.drive(n, lp);
            }
        }
    }

    fn crash(&mut self, n: usize) {
        let node = &mut self.nodes[n];
        node.up = false;
        node.inc += 1;
        node.engines.clear();
        node.appends.clear();
        node.requests.clear();
        node.watched.clear();
        node.early.clear();
        node.planner = MarkerPlanner::new(PlannerConfig::default());
        self.log.crash();
        self.rec.coordinator_kills.push(self.now);
        self.fault(
            "kill-daemon",
            format!("coordinator {n} crashed with the log"),
        );
        self.settle_appends();
        let delay = 100 + self.rng.below(1_500);
        self.at(delay, Ev::Restart(n));
    }

    fn restart(&mut self, n: usize) {
        if self.nodes[n].up {
            return;
        }
        self.nodes[n].up = true;
        let block = pid_block(&self.log);
        self.settle_appends();
        self.nodes[n].alloc = ProducerIdAllocator::with_block(block).expect("valid block");
        for lp in 0..self.o.log_partitions {
            if self.owner[lp as usize] == n {
                self.load(n, lp);
            }
        }
    }

    fn tick(&mut self) {
        let now = self.now;
        for n in 0..self.nodes.len() {
            if !self.nodes[n].up {
                continue;
            }
            let due: Vec<u32> = self.nodes[n]
                .engines
                .iter()
                .filter(|(_, e)| e.poll_timeout().is_some_and(|t| t.0 <= now as i64))
                .map(|(lp, _)| *lp)
                .collect();
            for lp in due {
                if let Some(e) = self.nodes[n].engines.get_mut(&lp) {
                    e.handle_timeout(Millis(now as i64));
                }
                self.drive(n, lp);
            }
            if self.nodes[n]
                .planner
                .poll_timeout()
                .is_some_and(|t| t <= now)
            {
                self.nodes[n].planner.handle_timeout(now);
                self.drive_planner(n);
            }
        }
    }

    fn inject(&mut self) {
        if !self.faulty() {
            return;
        }
        let r = self.rng.below(100);
        let k = self.o.fault_level;
        if r < 3 * k {
            let n = self.rng.index(self.nodes.len());
            if self.nodes[n].up {
                self.crash(n);
            }
        } else if r < 7 * k && self.nodes.len() > 1 {
            let lp = self.rng.index(self.owner.len());
            let to = self.rng.index(self.nodes.len());
            let from = self.owner[lp];
            if to != from && self.nodes[to].up {
                self.owner[lp] = to;
                self.fault(
                    "move",
                    format!("log partition {lp} moves from coordinator {from} to {to}"),
                );
                let lp = u32::try_from(lp).unwrap_or(0);
                self.load(to, lp);
                let delay = self.rng.below(300);
                self.at(delay, Ev::Unload { node: from, lp });
            }
        } else if r < 9 * k {
            let n = self.rng.index(self.nodes.len());
            let until = self.now + 200 + self.rng.below(1_300);
            self.cut = Some((n, until));
            self.fault(
                "partition",
                format!("coordinator {n} cut off until {until} ms"),
            );
        }
    }

    // ===== participants =====

    /// A produce of `client` reaches its partition's leader.
    fn produce(&mut self, client: usize, serial: u64, produce: Produce, sent_ms: u64) {
        let Produce {
            partition,
            pid,
            epoch,
            seq,
            values,
        } = produce;
        let part = &mut self.parts[partition as usize];
        let n = i32::try_from(values.len()).unwrap_or(i32::MAX);
        let header = BatchHeader::transactional(ProducerId(pid), ProducerEpoch(epoch), seq, n);
        let code = match part.state.check_batch(&header) {
            Ok(ProduceDecision::Append(pending)) => {
                let base = part.state.next_offset();
                match part.state.complete_append(pending, base) {
                    Ok(_) => {
                        part.log.push(LogItem::Data {
                            offset: base,
                            pid,
                            epoch,
                            values: values.clone(),
                        });
                        let end = part.state.next_offset();
                        part.state.advance_high_watermark(end);
                        self.rec.accepted.push(Accepted {
                            tid: self.clients[client].tid.clone(),
                            pid,
                            epoch,
                            partition,
                            values,
                            invoke_ms: sent_ms,
                        });
                        ErrorCode::NONE
                    }
                    Err(_) => ErrorCode::UNKNOWN_SERVER_ERROR,
                }
            }
            Ok(ProduceDecision::Duplicate(_)) => ErrorCode::NONE,
            Err(e) => e.code(),
        };
        self.send(
            &[],
            Msg::ToClient {
                client,
                serial,
                answer: Answer::Produce(code),
            },
            None,
        );
    }

    fn write_markers(&mut self, msg: Msg) {
        let Msg::Markers {
            node,
            inc,
            broker,
            request_id,
            request,
            versions,
        } = msg
        else {
            return;
        };
        let now = self.now as i64;
        let results: Vec<Result<(), ApplyError>> = markers_of(&request, &versions)
            .into_iter()
            .map(|(tp, marker)| self.apply_marker(tp.partition, &marker, now))
            .collect();
        let response = response_of(&request, &results);
        self.send(
            &[node],
            Msg::MarkersAnswer {
                node,
                inc,
                broker,
                request_id,
                response,
            },
            None,
        );
    }

    /// Writes `marker` to partition `p` (a broker's `WriteTxnMarkers` for one partition).
    fn apply_marker(&mut self, p: i32, marker: &Marker, now: i64) -> Result<(), ApplyError> {
        let part = usize::try_from(p)
            .ok()
            .and_then(|p| self.parts.get_mut(p))
            .ok_or(ApplyError::UnknownPartition)?;
        let pending = part.state.check_marker(marker)?;
        let at = part.state.next_offset();
        let applied = part
            .state
            .complete_marker(pending, at, now)
            .map_err(|_| ApplyError::Code(ErrorCode::UNKNOWN_SERVER_ERROR))?;
        part.log.push(LogItem::Marker(decisions::Marker {
            offset: applied.offset,
            pid: marker.producer_id.0,
            epoch: marker.producer_epoch.0,
            commit: marker.result == TxnResult::Commit,
            coordinator_epoch: marker.coordinator_epoch.0,
            timestamp_ms: now,
        }));
        let end = part.state.next_offset();
        part.state.advance_high_watermark(end);
        Ok(())
    }

    fn markers_answer(&mut self, msg: Msg) {
        let Msg::MarkersAnswer {
            node: n,
            inc,
            broker,
            request_id,
            response,
        } = msg
        else {
            return;
        };
        if !self.nodes[n].up || self.nodes[n].inc != inc {
            return;
        }
        if self.o.mutant == Some(Mutant::EarlyComplete) {
            let node = &mut self.nodes[n];
            for m in &response.markers {
                for t in &m.topics {
                    for p in &t.partitions {
                        if p.error_code != 0 {
                            continue;
                        }
                        let tp = TopicPartition::new(t.name.0.as_str(), p.partition_index);
                        for w in node
                            .watched
                            .iter_mut()
                            .filter(|w| w.request.producer_id.0 == m.producer_id.0)
                        {
                            w.remaining.remove(&tp);
                            if w.remaining.len() <= 1 && !w.reported {
                                w.reported = true;
                                node.early.push(MarkerCompletion::of(
                                    &w.request,
                                    MarkerOutcome::Completed,
                                ));
                            }
                        }
                    }
                }
            }
        }
        let now = self.now;
        self.nodes[n]
            .planner
            .handle_response(now, broker, request_id, &response);
        self.drive_planner(n);
    }

    // ===== the run =====

    fn step(&mut self, ev: Ev) {
        match ev {
            Ev::Deliver(msg) => match msg {
                Msg::ToNode {
                    node,
                    client,
                    serial,
                    request,
                } => self.node_request(node, client, serial, request),
                Msg::ToClient {
                    client,
                    serial,
                    answer,
                } => self.client_answer(client, serial, answer),
                Msg::Produce {
                    client,
                    serial,
                    produce,
                    sent_ms,
                } => self.produce(client, serial, produce, sent_ms),
                m @ Msg::Markers { .. } => self.write_markers(m),
                m @ Msg::MarkersAnswer { .. } => self.markers_answer(m),
            },
            Ev::ClientSend(c) => self.client_send(c),
            Ev::ClientTimeout { client, serial } => self.client_timeout(client, serial),
            Ev::MarkerTimeout {
                node,
                inc,
                broker,
                request_id,
            } => {
                if self.nodes[node].up && self.nodes[node].inc == inc {
                    let now = self.now;
                    self.nodes[node]
                        .planner
                        .handle_send_failed(now, broker, request_id);
                    self.drive_planner(node);
                }
            }
            Ev::Flush => {
                let pending = self.log.pending_writes();
                let n = if self.faulty() && self.rng.chance(0.3) {
                    self.rng.index(pending + 1)
                } else {
                    pending
                };
                self.log.make_durable_prefix(n);
                self.settle_appends();
                let delay = 1 + self.rng.below(10);
                self.at(delay, Ev::Flush);
            }
            Ev::Tick => {
                self.tick();
                self.at(10, Ev::Tick);
            }
            Ev::Fault => {
                self.inject();
                self.at(100, Ev::Fault);
            }
            Ev::Restart(n) => self.restart(n),
            Ev::Unload { node, lp } => {
                if self.owner[lp as usize] != node && self.nodes[node].engines.contains_key(&lp) {
                    if let Some(e) = self.nodes[node].engines.get_mut(&lp) {
                        e.handle_unload();
                    }
                    self.drop_partition(node, lp);
                }
            }
            Ev::Reload { node, lp } => {
                if self.nodes[node].up
                    && self.owner[lp as usize] == node
                    && !self.nodes[node].engines.contains_key(&lp)
                {
                    self.load(node, lp);
                }
            }
        }
    }

    /// What has not settled yet (None once clients are done, nothing is pending anywhere
    /// and every partition is stable).
    fn unsettled(&self) -> Option<String> {
        if let Some(c) = self.clients.iter().find(|c| !c.is_done()) {
            return Some(format!("client {} not done: {c:?}", c.tid));
        }
        for (i, n) in self.nodes.iter().enumerate() {
            if !n.up || !n.appends.is_empty() || !n.planner.is_idle() {
                return Some(format!(
                    "coordinator {i}: up {}, {} appends pending, marker writer idle {}: {:?}",
                    n.up,
                    n.appends.len(),
                    n.planner.is_idle(),
                    n.planner.stats()
                ));
            }
            for (lp, e) in &n.engines {
                if let Some((id, r)) = e
                    .records()
                    .find(|(_, r)| r.state.is_prepare() || r.state == txn_log::TxnState::Ongoing)
                {
                    return Some(format!("coordinator {i} log partition {lp}: {id:?} {r:?}"));
                }
            }
        }
        self.parts.iter().enumerate().find_map(|(i, p)| {
            (p.state.last_stable_offset() < p.state.high_watermark()).then(|| {
                format!(
                    "partition {i}: LSO {} < HW {}",
                    p.state.last_stable_offset(),
                    p.state.high_watermark()
                )
            })
        })
    }

    fn run(mut self) -> RunResult {
        for lp in 0..self.o.log_partitions {
            let n = self.owner[lp as usize];
            self.load(n, lp);
        }
        for c in 0..self.clients.len() {
            let d = self.rng.below(100);
            self.at(d, Ev::ClientSend(c));
        }
        self.at(1, Ev::Flush);
        self.at(10, Ev::Tick);
        self.at(100, Ev::Fault);
        let mut healed = false;
        let mut unsettled = None;
        while let Some(((t, _), ev)) = self.queue.pop_first() {
            self.now = t;
            if !healed && t >= FAULT_END_MS {
                healed = true;
                self.cut = None;
                for n in 0..self.nodes.len() {
                    self.restart(n);
                }
            }
            self.events += 1;
            self.step(ev);
            if healed && self.events.is_multiple_of(64) && self.unsettled().is_none() {
                break;
            }
            if t >= HARD_STOP_MS {
                unsettled = self.unsettled();
                break;
            }
        }
        self.finish(unsettled)
    }

    /// I11-I13 on what the log persisted: the durable image a crash of every coordinator
    /// would leave, audited like the fault harness audits a daemon's log.
    fn audit_log(&mut self, end_ms: u64) {
        self.log.crash();
        let audit = crate::fault::audit::audit_records(
            &self.log,
            self.o.log_partitions,
            i64::try_from(end_ms).unwrap_or(i64::MAX),
            AUDIT_SLACK_MS,
            &mut self.rec,
        );
        match futures_util::FutureExt::now_or_never(audit) {
            Some(Ok(())) => {}
            Some(Err(e)) => self
                .rec
                .log_findings
                .push(("I13", format!("log audit failed: {e}"))),
            None => self
                .rec
                .log_findings
                .push(("I13", "the log audit did not finish at once".into())),
        }
    }

    fn finish(mut self, unsettled: Option<String>) -> RunResult {
        let end = self.now;
        let mut obs = Observed {
            topic: TOPIC.to_owned(),
            ..Observed::default()
        };
        for (p, part) in self.parts.iter().enumerate() {
            let p = i32::try_from(p).unwrap_or(0);
            let lso = part.state.last_stable_offset();
            let hw = part.state.high_watermark();
            if lso < hw {
                self.rec.hangs.push((
                    p,
                    lso,
                    hw,
                    format!(
                        "open transactions: {:?}",
                        part.state.open_transactions().collect::<Vec<_>>()
                    ),
                ));
            }
            let aborted = part.state.read_committed(0, lso).aborted;
            for item in &part.log {
                let LogItem::Data {
                    offset,
                    pid,
                    values,
                    ..
                } = item
                else {
                    continue;
                };
                if *offset >= lso {
                    continue;
                }
                let skip = aborted.iter().any(|a| {
                    a.producer_id.0 == *pid && a.first_offset <= *offset && *offset <= a.last_offset
                });
                if skip {
                    continue;
                }
                for (i, v) in values.iter().enumerate() {
                    self.rec.reads.push(Read {
                        process: 0,
                        partition: p,
                        offset: offset + i as i64,
                        value: v.clone(),
                        final_read: true,
                    });
                }
            }
            obs.logs.insert((TOPIC.to_owned(), p), part.log.clone());
            obs.read_from_ms
                .insert((TOPIC.to_owned(), p), end as i64 + 1);
            self.rec.final_partitions.push(p);
        }
        obs.transitions = std::mem::take(&mut self.rec.decisions.transitions);
        self.rec.decisions = obs;
        self.audit_log(end);
        let report = checker::check(&self.rec);
        let digest = digest(&self.rec, &report, end, self.events);
        RunResult {
            report,
            record: self.rec,
            end_ms: end,
            events: self.events,
            unsettled,
            digest,
        }
    }
}

/// A digest of a run's history, verdict, end time and event count.
fn digest(rec: &Record, report: &Report, end_ms: u64, events: u64) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::hash::DefaultHasher::new();
    format!("{rec:?}\n{report}").hash(&mut h);
    (end_ms, events).hash(&mut h);
    h.finish()
}

fn same_decision(r: &TxnMarkerRequest, c: &MarkerCompletion) -> bool {
    r.transactional_id == c.transactional_id
        && r.producer_id == c.producer_id
        && r.producer_epoch == c.producer_epoch
        && r.coordinator_epoch == c.coordinator_epoch
        && r.result == c.result
}

/// The trail entries of an append (what the daemon logs as `txn_transition`).
fn transitions(entries: &[txn_log::LogEntry], now: u64) -> Vec<Transition> {
    entries
        .iter()
        .filter_map(|e| match &e.op {
            LogOp::Upsert(r) => Some(Transition {
                tid: e.id.to_string(),
                pid: r.producer_id.0,
                epoch: r.producer_epoch.0,
                state: r.state,
                partitions: r
                    .partitions
                    .iter()
                    .map(|tp| (tp.topic.clone(), tp.partition))
                    .collect(),
                txn_start_ms: r.txn_start_ms,
                txn_version: u8::try_from(r.client_txn_version.0).unwrap_or(0),
                issued_ms: now as i64,
                durable_ms: now as i64,
            }),
            LogOp::Tombstone => None,
        })
        .collect()
}

/// NOT_COORDINATOR for a request that reached a node without the partition.
fn not_coordinator(request: &Request) -> Answer {
    let error = ErrorCode::NOT_COORDINATOR;
    Answer::Coordinator(match request {
        Request::InitProducerId(_) => {
            Response::InitProducerId(InitProducerIdResponse::error(error))
        }
        Request::EndTxn(_) => Response::EndTxn(EndTxnResponse::error(error)),
        Request::AddPartitionsToTxn(r) => {
            Response::AddPartitionsToTxn(AddPartitionsToTxnResponse::all(r, error))
        }
        _ => Response::AddOffsetsToTxn(error),
    })
}

/// Runs one seed and checks its history.
pub fn run(o: Options) -> RunResult {
    World::new(o).run()
}
