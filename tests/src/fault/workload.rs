//! Seeded, time-bounded fault runs: W1 (transactional queue), W2 (producers fencing each
//! other), W3 (consume-transform-produce with the consumer offsets in the transaction), W5
//! (producers vanishing mid-transaction), W6 (dropped produce responses, idempotent retries)
//! against a
//! [`FaultCluster`], with a nemesis that kills, pauses and partitions processes through the
//! proxies; then healing, a final full read_committed read, a read_uncommitted read of every
//! partition with its markers and the daemon's transition trail (I10,
//! [`decisions`](super::decisions)), an offline audit of the coordinator log, and the
//! [`checker`](super::checker).
//!
//! Replay: the seed drives every random choice (fault schedule, transaction shapes, abort
//! decisions); thread interleavings and timings are not reproducible, so a replay re-runs the
//! same schedule, not the same execution.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use kafka_protocol::messages::ApiKey;
use tokio::sync::Mutex;
pub use txn_log::rng::Rng;
use txn_log::sync::Arc;

use super::checker::{Report, check};
use super::client::{ClientError, ClusterView, Fetcher, GroupOffsets, TxnProducer};
use super::cluster::{ClusterOptions, EtcdOptions, FaultCluster};
use super::history::{Accepted, History, OffsetCheck, Outcome, Read, Record};
use super::proxy::{ProxyStats, RequestClass};
use txn_log::TxnVersion;

/// A run length: `var` in seconds if it is set (and a number), else `default` seconds.
pub fn secs_from_env(var: &str, default: u64) -> Duration {
    Duration::from_secs(
        std::env::var(var)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default),
    )
}

/// The seed of a run: `TXN_FAULT_SEED` if set, else derived from the clock.
pub fn seed_from_env() -> u64 {
    std::env::var("TXN_FAULT_SEED")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or_else(|| {
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            Rng::new(u64::try_from(t.as_nanos() & u128::from(u64::MAX)).unwrap_or(1)).next_u64()
        })
}

/// Which faults the nemesis may inject.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// SIGKILL the daemon, restart it after a while.
    KillCoordinator,
    /// SIGSTOP the daemon, SIGCONT it after a while.
    PauseCoordinator,
    /// SIGKILL a refbroker, restart it.
    KillBroker,
    /// SIGSTOP a refbroker, SIGCONT it.
    PauseBroker,
    /// Blackhole the coordinator link for a while.
    BlackholeCoordinator,
    /// Refuse a broker link for a while (connections reset).
    PartitionBroker,
    /// Delay every request on a link.
    Delay,
    /// Hold the next EndTxn for seconds while later requests pass.
    HoldEndTxn,
    /// Hold the next Produce on a broker link (reordering).
    HoldProduce,
    /// W6: drop the responses of the next few Produce requests on a broker link.
    DropProduceResponses,
    /// Cluster mode: SIGKILL an etcd member, restart it after a while (sometimes two members
    /// for a short while: no quorum). Skipped with one daemon.
    KillEtcd,
    /// Cluster mode: SIGSTOP an etcd member, SIGCONT it after a while. Skipped with one
    /// daemon.
    PauseEtcd,
}

impl Fault {
    /// Every fault.
    pub const ALL: [Self; 10] = [
        Self::KillCoordinator,
        Self::PauseCoordinator,
        Self::KillBroker,
        Self::PauseBroker,
        Self::BlackholeCoordinator,
        Self::PartitionBroker,
        Self::Delay,
        Self::HoldEndTxn,
        Self::HoldProduce,
        Self::DropProduceResponses,
    ];

    /// Every fault of cluster mode: [`Self::ALL`] (on a daemon picked at random) and the etcd
    /// member faults.
    pub const CLUSTER: [Self; 12] = {
        let mut all = [Self::PauseEtcd; 12];
        let mut i = 0;
        while i < Self::ALL.len() {
            all[i] = Self::ALL[i];
            i += 1;
        }
        all[10] = Self::KillEtcd;
        all
    };

    /// A short name, for counts by kind (a `KillEtcd` that takes two members down is
    /// recorded as `kill-etcd-2`).
    pub fn kind(self) -> &'static str {
        match self {
            Self::KillCoordinator => "kill-daemon",
            Self::PauseCoordinator => "pause-daemon",
            Self::KillBroker => "kill-broker",
            Self::PauseBroker => "pause-broker",
            Self::BlackholeCoordinator => "blackhole-daemon",
            Self::PartitionBroker => "partition-broker",
            Self::Delay => "delay",
            Self::HoldEndTxn => "hold-endtxn",
            Self::HoldProduce => "hold-produce",
            Self::DropProduceResponses => "drop-produce-responses",
            Self::KillEtcd => "kill-etcd",
            Self::PauseEtcd => "pause-etcd",
        }
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Seed of every random choice.
    pub seed: u64,
    /// How long the workload runs under faults.
    pub duration: Duration,
    /// W1 producers (one transactional id each).
    pub producers: u32,
    /// W2 producers sharing one transactional id (`w2`), each restarting (a new producer
    /// instance, no pid/epoch) before a transaction with probability `restart_p`.
    pub shared_producers: u32,
    /// W2 restart probability per transaction.
    pub restart_p: f64,
    /// read_committed consumers polling during the run.
    pub consumers: u32,
    /// Probability that a W1 transaction is aborted on purpose.
    pub abort_p: f64,
    /// Run W5 (a producer vanishing mid-transaction, then a zombie write) every this often.
    pub w5_every: Option<Duration>,
    /// Faults the nemesis picks from (empty: no nemesis).
    pub faults: Vec<Fault>,
    /// Time between nemesis actions (a random value in this range, in ms).
    pub fault_interval_ms: (u64, u64),
    /// EndTxn semantics of the producers.
    pub tv: TxnVersion,
    /// Transaction timeout of W1 producers.
    pub txn_timeout_ms: i32,
    /// Cluster options.
    pub cluster: ClusterOptions,
    /// Run W3 (consume-transform-produce).
    pub w3: Option<W3Options>,
}

/// W3: an input producer fills the topic `w3-in` (one partition per transformer) with unique
/// values in transactions; transformer *k* (transactional id `w3-k`) owns partition *k* for
/// the group `w3` (static assignment), and in each transaction reads a few records from the
/// group's committed offset with read_committed, writes `t:{value}@{txn}` to `w3-out` and
/// commits the new offset with `send_offsets`.
#[derive(Debug, Clone)]
pub struct W3Options {
    /// Transformers (and input partitions).
    pub transformers: u32,
    /// Partitions of the output topic.
    pub output_partitions: i32,
    /// Probability that an input or transform transaction is aborted on purpose.
    pub abort_p: f64,
    /// Probability, per transaction, that a transformer restarts first (a fresh instance:
    /// InitProducerId, then OffsetFetch to resume).
    pub restart_p: f64,
    /// Probability, per transaction, that a transformer crashes before its commit: a
    /// successor takes over, then the crashed instance sends its commit as a zombie.
    pub crash_p: f64,
}

impl Default for W3Options {
    /// The mixed-fault runs' W3: two transformers into three output partitions, 10 % of the
    /// transactions aborted, 5 % restarts and 5 % crashes.
    fn default() -> Self {
        Self {
            transformers: 2,
            output_partitions: 3,
            abort_p: 0.1,
            restart_p: 0.05,
            crash_p: 0.05,
        }
    }
}

const W3_INPUT: &str = "w3-in";
const W3_OUTPUT: &str = "w3-out";
const W3_GROUP: &str = "w3";

/// Where W3 runs: the input and output topics and the group coordinator.
#[derive(Debug, Clone)]
struct W3Views {
    input: ClusterView,
    output: ClusterView,
    group_coordinator: SocketAddr,
    bootstrap: SocketAddr,
}

/// The outcome of a run.
#[derive(Debug)]
pub struct RunResult {
    /// The seed.
    pub seed: u64,
    /// The checker's verdict.
    pub report: Report,
    /// The full history.
    pub history: Record,
    /// What each proxy did.
    pub proxy_stats: Vec<(String, ProxyStats)>,
    /// Where an invalid run's data directories and process logs were kept.
    pub kept: Option<std::path::PathBuf>,
}

const TOPIC_PROBE: &str = "fault-probe";

/// How long a W1/W2 operation retries before it is indeterminate: shorter than the longest
/// faults, so that runs contain indeterminate commits (Jepsen's `:info`).
const OP_BUDGET: Duration = Duration::from_secs(3);

/// A started fault cluster and the views of the topics the workloads use.
#[derive(Debug)]
pub struct Setup {
    cluster: Arc<Mutex<FaultCluster>>,
    view: ClusterView,
    w3: Option<W3Views>,
}

impl Setup {
    /// Starts the cluster of `opts` (with W3's topics when W3 runs) and discovers the topics.
    pub async fn start(opts: &RunOptions) -> anyhow::Result<Self> {
        Self::start_on(opts, None).await
    }

    /// [`Self::start`]; with `etcd`, in cluster mode (etcd members and several daemons on the
    /// etcd log), where the producers follow their coordinator with FindCoordinator asked of
    /// every broker and daemon (through their proxies).
    pub async fn start_on(opts: &RunOptions, etcd: Option<EtcdOptions>) -> anyhow::Result<Self> {
        let mut cluster_opts = opts.cluster.clone();
        if let Some(w3) = &opts.w3 {
            cluster_opts.extra_topics.extend([
                (W3_INPUT.to_owned(), i32::try_from(w3.transformers)?),
                (W3_OUTPUT.to_owned(), w3.output_partitions),
            ]);
        }
        let cluster = FaultCluster::start_on(cluster_opts, etcd).await?;
        // Cluster mode: FindCoordinator may be asked of any broker or daemon.
        let find_at: Vec<SocketAddr> = if cluster.etcd.is_some() {
            let mut at: Vec<SocketAddr> = cluster.broker_proxies.iter().map(|p| p.addr()).collect();
            at.extend((0..cluster.daemon_count()).map(|i| cluster.daemon_proxy_at(i).addr()));
            at
        } else {
            Vec::new()
        };
        let view = ClusterView::discover(
            cluster.bootstrap(),
            &opts.cluster.topic,
            TOPIC_PROBE,
            Duration::from_secs(30),
        )
        .await?
        .following(find_at.clone());
        let w3 = match &opts.w3 {
            Some(_) => {
                let mut v = W3Views::discover(cluster.bootstrap()).await?;
                v.input = v.input.following(find_at.clone());
                v.output = v.output.following(find_at);
                Some(v)
            }
            None => None,
        };
        Ok(Self {
            cluster: Arc::new(Mutex::new(cluster)),
            view,
            w3,
        })
    }

    /// The workload topic.
    pub fn view(&self) -> &ClusterView {
        &self.view
    }

    /// W3's output topic, when W3 runs.
    pub fn w3_output(&self) -> Option<&ClusterView> {
        self.w3.as_ref().map(|v| &v.output)
    }

    /// Ends a run: heals every fault, reads every topic until it is stable (W1's final read,
    /// W3's), stops the daemon, then reads every partition with its markers (I10), stops the
    /// brokers, audits the coordinator log and checks the history.
    ///
    /// The daemon stops before the partitions are read, so that every Complete* in its trail
    /// was issued before the read began: a transaction decided later (a reaper abort, a held
    /// EndTxn delivered after healing) would otherwise be judged against a log read before its
    /// markers were written. An invalid run keeps its data directories and logs.
    pub async fn finish(self, h: History, opts: &RunOptions) -> anyhow::Result<RunResult> {
        {
            let mut c = self.cluster.lock().await;
            tokio::task::block_in_place(|| c.heal())?;
            c.wait_etcd(Duration::from_secs(30)).await?;
        }
        h.fault("heal");
        final_read(&self.view, &h, opts).await;
        if let (Some(w3), Some(v)) = (&opts.w3, &self.w3) {
            w3_final_read(v, w3, &h, opts).await?;
        }
        let endpoints = self.cluster.lock().await.etcd_endpoints();
        if let Some(e) = &endpoints {
            // Cluster mode: a decision whose markers are all written may still wait for its
            // Complete* append (etcd round trips, a partition moving after a restart); give
            // the daemons a bounded while before they stop, so I11's "a Prepare* left in the
            // log" judges a settled log. What is still prepared then is reported by the audit.
            wait_decisions_complete(e, opts, Duration::from_secs(30)).await;
        }
        {
            let mut c = self.cluster.lock().await;
            for i in 0..c.daemon_count() {
                c.daemon_at(i).kill();
            }
        }
        h.fault("daemon stopped for the I10 read");
        let mut views = vec![&self.view];
        views.extend(self.w3.iter().flat_map(|v| [&v.input, &v.output]));
        let mut logs = super::decisions::read_logs(&views, Duration::from_secs(60)).await;
        logs.topic.clone_from(&self.view.topic);
        logs.w3_topics = self
            .w3
            .as_ref()
            .map(|v| (v.input.topic.clone(), v.output.topic.clone()));
        let mut c = self.cluster.lock().await;
        let mut proxy_stats = vec![("coordinator".to_owned(), c.daemon_proxy.stats())];
        for i in 1..c.daemon_count() {
            proxy_stats.push((format!("coordinator-{i}"), c.daemon_proxy_at(i).stats()));
        }
        for (i, p) in c.broker_proxies.iter().enumerate() {
            proxy_stats.push((format!("broker-{}", i + 1), p.stats()));
        }
        for (name, st) in &proxy_stats {
            println!("proxy {name}: {st:?}");
        }
        c.stop();
        let now_unix = i64::try_from(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_millis(),
        )
        .unwrap_or(i64::MAX);
        let mut record = h.snapshot();
        match endpoints {
            None => {
                let copy = c.root().join("daemon-copy");
                super::audit::copy_dir(&c.daemon_data_dir(), &copy)?;
                super::audit::audit_log(
                    &copy,
                    opts.cluster.txn_log_partitions,
                    now_unix,
                    15_000,
                    &mut record,
                )
                .await?;
            }
            Some(e) => {
                super::audit::audit_etcd(
                    e.split(',').map(str::to_owned).collect(),
                    opts.cluster.txn_log_partitions,
                    now_unix,
                    15_000,
                    &mut record,
                )
                .await?;
            }
        }
        record.decisions = logs;
        if c.daemon_count() == 1 {
            super::decisions::load_trail(c.daemon_log(), &mut record.decisions)?;
        } else {
            super::decisions::load_trails(c.daemon_logs(), &mut record.decisions)?;
        }
        let report = check(&record);
        println!("fault run seed {}: {report}", opts.seed);
        let kept = if report.is_valid() {
            None
        } else {
            let dir = c.keep_files();
            println!(
                "fault run seed {}: INVALID; data directories and logs kept in {}",
                opts.seed,
                dir.display()
            );
            Some(dir)
        };
        Ok(RunResult {
            seed: opts.seed,
            report,
            history: record,
            proxy_stats,
            kept,
        })
    }
}

/// Waits (bounded by `within`) until the log in etcd at `endpoints` holds no Prepare*
/// record; logs what remains.
async fn wait_decisions_complete(endpoints: &str, opts: &RunOptions, within: Duration) {
    let end = Instant::now() + within;
    let eps: Vec<String> = endpoints.split(',').map(str::to_owned).collect();
    let mut last = Vec::new();
    while Instant::now() < end {
        match super::audit::etcd_log(eps.clone()).await {
            Ok(log) => match super::audit::prepared(&log, opts.cluster.txn_log_partitions).await {
                Ok(p) if p.is_empty() => return,
                Ok(p) => last = p,
                Err(e) => last = vec![e.to_string()],
            },
            Err(e) => last = vec![e.to_string()],
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    println!("decisions still prepared after {within:?}: {last:?}");
}

/// Runs the workload against a fresh cluster and checks the history.
pub async fn run(opts: RunOptions) -> anyhow::Result<RunResult> {
    run_on(opts, None).await
}

/// [`run`]; with `etcd`, in cluster mode (see [`Setup::start_on`]).
pub async fn run_on(opts: RunOptions, etcd: Option<EtcdOptions>) -> anyhow::Result<RunResult> {
    println!(
        "fault run seed: {} (replay with TXN_FAULT_SEED={})",
        opts.seed, opts.seed
    );
    let setup = Setup::start_on(&opts, etcd).await?;
    let (view, cluster) = (setup.view.clone(), setup.cluster.clone());
    let h = History::new();
    let deadline = Instant::now() + opts.duration;
    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..opts.producers {
        let (view, h, o) = (view.clone(), h.clone(), opts.clone());
        let tid = format!("w1-{w}");
        tasks.spawn(async move { w1_producer(w, tid, 0.0, view, h, o, deadline).await });
    }
    for w in 0..opts.shared_producers {
        let (view, h, o) = (view.clone(), h.clone(), opts.clone());
        let restart_p = opts.restart_p;
        tasks.spawn(async move {
            w1_producer(200 + w, "w2".into(), restart_p, view, h, o, deadline).await
        });
    }
    for c in 0..opts.consumers {
        let (view, h) = (view.clone(), h.clone());
        tasks.spawn(async move { consumer(1000 + c, view, h, deadline).await });
    }
    if let Some(every) = opts.w5_every {
        let (view, h, o) = (view.clone(), h.clone(), opts.clone());
        tasks.spawn(async move { w5_vanishing(view, h, o, deadline, every).await });
    }
    if let (Some(w3), Some(v)) = (&opts.w3, &setup.w3) {
        let (input, hs, o, w) = (v.input.clone(), h.clone(), opts.clone(), w3.clone());
        tasks.spawn(async move { w3_source(input, hs, o, w, deadline).await });
        for k in 0..w3.transformers {
            let (v, h, o, w) = (v.clone(), h.clone(), opts.clone(), w3.clone());
            tasks.spawn(async move { w3_transformer(k, v, h, o, w, deadline).await });
        }
    }
    if !opts.faults.is_empty() {
        let (c, h, o) = (cluster.clone(), h.clone(), opts.clone());
        tasks.spawn(async move { nemesis(c, h, o, deadline).await });
    }
    while let Some(r) = tasks.join_next().await {
        r??;
    }
    drop(cluster);
    setup.finish(h, &opts).await
}

async fn final_read(view: &ClusterView, h: &History, opts: &RunOptions) {
    let mut f = Fetcher::new(view.clone(), "final-reader");
    let within = final_read_within(opts);
    for p in 0..opts.cluster.partitions {
        match f.read_all_stable(p, within).await {
            Ok(records) => {
                h.reads(records.into_iter().map(|d| Read {
                    process: 999,
                    partition: p,
                    offset: d.offset,
                    value: d.value,
                    final_read: true,
                }));
                h.with(|r| r.final_partitions.push(p));
            }
            Err((lso, hw, detail)) => h.with(|r| r.hangs.push((p, lso, hw, detail))),
        }
    }
}

/// How long a final read waits for a partition's LSO to reach its high watermark.
fn final_read_within(opts: &RunOptions) -> Duration {
    Duration::from_millis(
        u64::try_from(opts.txn_timeout_ms).unwrap_or(10_000)
            + opts.cluster.reaper_interval_ms
            + 30_000,
    )
}

impl W3Views {
    async fn discover(bootstrap: SocketAddr) -> anyhow::Result<Self> {
        let within = Duration::from_secs(30);
        let input = ClusterView::discover(bootstrap, W3_INPUT, TOPIC_PROBE, within).await?;
        let output = ClusterView::discover(bootstrap, W3_OUTPUT, TOPIC_PROBE, within).await?;
        let group = GroupOffsets::discover(bootstrap, W3_GROUP, "w3-discover", within).await?;
        Ok(Self {
            input,
            output,
            group_coordinator: group.coordinator(),
            bootstrap,
        })
    }

    async fn group(&self, client_id: &str, deadline: Instant) -> Option<GroupOffsets> {
        let within = deadline.saturating_duration_since(Instant::now());
        let mut g = GroupOffsets::discover(self.bootstrap, W3_GROUP, client_id, within)
            .await
            .ok()?;
        g.op_budget = OP_BUDGET;
        Some(g)
    }
}

/// W3 after healing: reads every input and output partition in full and the group's
/// committed offsets.
async fn w3_final_read(
    v: &W3Views,
    w3: &W3Options,
    h: &History,
    opts: &RunOptions,
) -> anyhow::Result<()> {
    let within = final_read_within(opts);
    let inputs = i32::try_from(w3.transformers)?;
    h.with(|r| r.w3.output_partitions = w3.output_partitions);
    for (view, parts, is_input) in [
        (&v.input, inputs, true),
        (&v.output, w3.output_partitions, false),
    ] {
        let mut f = Fetcher::new(view.clone(), "w3-final-reader");
        for p in 0..parts {
            match f.read_all_stable(p, within).await {
                Ok(records) => {
                    let recs = records.into_iter().map(|d| (d.offset, d.value)).collect();
                    h.with(|r| {
                        let into = if is_input {
                            &mut r.w3.final_input
                        } else {
                            &mut r.w3.final_output
                        };
                        into.insert(p, recs);
                    });
                }
                Err((lso, hw, detail)) => {
                    h.with(|r| {
                        r.hangs
                            .push((p, lso, hw, format!("{}: {detail}", view.topic)))
                    });
                }
            }
        }
    }
    let deadline = Instant::now() + within;
    if let Some(mut g) = v.group("w3-final-reader", deadline).await {
        g.op_budget = within;
        for p in 0..inputs {
            if let Ok(o) = g.committed(W3_INPUT, p).await {
                h.with(|r| r.w3.final_offsets.insert(p, o));
            }
        }
    }
    Ok(())
}

/// The W3 input producer: transactions of 1-4 unique values `s{n}` to one input partition.
async fn w3_source(
    view: ClusterView,
    h: History,
    o: RunOptions,
    w3: W3Options,
    deadline: Instant,
) -> anyhow::Result<()> {
    let mut rng = Rng::new(o.seed ^ 0x5733_5352_4300);
    let tid = "w3-source";
    let process = 350;
    let mut p = TxnProducer::new(view, tid, o.txn_timeout_ms, o.tv);
    p.op_budget = OP_BUDGET;
    let mut counter = 0u64;
    let mut need_init = true;
    while Instant::now() < deadline {
        if need_init {
            if !init_until(&mut p, &h, deadline).await {
                break;
            }
            need_init = false;
        }
        let (pid, epoch) = p.pid_epoch();
        let id = h.w3_invoke_input(process, tid, pid, epoch);
        let part = i32::try_from(rng.below(u64::from(w3.transformers)))?;
        let values: Vec<String> = (0..1 + rng.below(4))
            .map(|_| {
                counter += 1;
                format!("s{counter}")
            })
            .collect();
        let sent = send_in_txn(&mut p, &h, tid, part, values, |v| {
            h.w3_input_writes(id, part, v)
        });
        if let Err(e) = sent.await {
            let _ = p.end(false).await;
            h.w3_complete_input(id, Outcome::Aborted, e.to_string());
            need_init = true;
            continue;
        }
        let commit = !rng.chance(w3.abort_p);
        let t0 = h.now_ms();
        match p.end(commit).await {
            Ok(()) => {
                let outcome = if commit {
                    Outcome::Committed
                } else {
                    Outcome::Aborted
                };
                h.w3_complete_input(id, outcome, "");
                if o.tv.bumps_epoch_per_txn() {
                    let (np, ne) = p.pid_epoch();
                    h.issued(tid, np, ne, "EndTxn", t0);
                }
            }
            Err(e) => {
                let outcome = if !commit || e.is_definite() {
                    Outcome::Aborted
                } else {
                    Outcome::Indeterminate
                };
                h.w3_complete_input(id, outcome, e.to_string());
                need_init = true;
            }
        }
        // Slower than the transformers, so that most input gets consumed.
        tokio::time::sleep(rng.millis(40, 120)).await;
    }
    Ok(())
}

/// W3 transformer `process`'s input `partition` as its group commits it: the offsets the
/// group may hold for it (`None`: unknown, after a zombie commit that got no definite answer;
/// -1 is "nothing committed").
struct W3Input {
    group: GroupOffsets,
    process: u32,
    partition: i32,
    allowed: Option<Vec<i64>>,
}

impl W3Input {
    /// Fetches the committed offset (retried until `deadline`: `None` then), records it as a
    /// check against the allowed offsets when those are known, and makes it the only allowed
    /// offset.
    async fn resume(
        &mut self,
        h: &History,
        after_txn: Option<usize>,
        deadline: Instant,
    ) -> Option<i64> {
        while Instant::now() < deadline {
            match self.group.committed(W3_INPUT, self.partition).await {
                Ok(observed) => {
                    if let Some(allowed) = self.allowed.take() {
                        h.w3_offset_check(OffsetCheck {
                            process: self.process,
                            partition: self.partition,
                            allowed,
                            observed,
                            after_txn,
                            at_ms: 0,
                        });
                    }
                    self.allowed = Some(vec![observed]);
                    return Some(observed);
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
        None
    }
}

/// W3 transformer `k`: owns input partition `k`. A fresh instance initializes (fencing its
/// predecessor) and resumes from the group's committed offset; every such OffsetFetch is
/// checked against the offsets the history allows.
async fn w3_transformer(
    k: u32,
    v: W3Views,
    h: History,
    o: RunOptions,
    w3: W3Options,
    deadline: Instant,
) -> anyhow::Result<()> {
    let mut rng = Rng::new(o.seed ^ (u64::from(k) + 1).wrapping_mul(0xD6E8_FEB8_6659_FD93));
    let tid = format!("w3-{k}");
    let process = 300 + k;
    let part = i32::try_from(k)?;
    let out_parts = u64::try_from(w3.output_partitions)?;
    let new_instance = || {
        let mut p = TxnProducer::new(v.output.clone(), &tid, o.txn_timeout_ms, o.tv);
        p.op_budget = OP_BUDGET;
        p
    };
    let Some(group) = v.group(&tid, deadline).await else {
        return Ok(());
    };
    let mut input = W3Input {
        group,
        process,
        partition: part,
        allowed: Some(vec![-1]),
    };
    let mut fetcher = Fetcher::new(v.input.clone(), &format!("{tid}-consumer"));
    let mut p = new_instance();
    let mut last_txn: Option<usize> = None;
    let mut position = 0i64;
    let (mut need_init, mut need_resume) = (true, true);
    while Instant::now() < deadline {
        if rng.chance(w3.restart_p) {
            p = new_instance();
            need_init = true;
        }
        if need_init {
            if !init_until(&mut p, &h, deadline).await {
                break;
            }
            need_init = false;
            need_resume = true;
        }
        if need_resume {
            let Some(committed) = input.resume(&h, last_txn, deadline).await else {
                break;
            };
            position = committed.max(0);
            need_resume = false;
        }
        let Ok(fetched) = fetcher.fetch(part, position).await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let take = usize::try_from(1 + rng.below(4))?;
        let inputs: Vec<(i64, String)> = fetched
            .records
            .into_iter()
            .take(take)
            .map(|d| (d.offset, d.value))
            .collect();
        let Some(to) = inputs.last().map(|(o, _)| o + 1) else {
            // Nothing to deliver (aborted records, markers): move past them.
            position = position.max(fetched.next_offset);
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let (pid, epoch) = p.pid_epoch();
        let id = h.w3_invoke_transform(
            process,
            &tid,
            (pid, epoch),
            part,
            (position, to),
            inputs.clone(),
        );
        last_txn = Some(id);
        let mut outputs: BTreeMap<i32, Vec<String>> = BTreeMap::new();
        for (_, value) in &inputs {
            let op = i32::try_from(rng.below(out_parts))?;
            outputs
                .entry(op)
                .or_default()
                .push(format!("t:{value}@{id}"));
        }
        let mut failed: Option<ClientError> = None;
        for (op, values) in outputs {
            let sent = send_in_txn(&mut p, &h, &tid, op, values, |v| h.w3_outputs(id, op, v));
            if let Err(e) = sent.await {
                failed = Some(e);
                break;
            }
        }
        if failed.is_none() {
            failed = p
                .send_offsets(v.group_coordinator, W3_GROUP, W3_INPUT, &[(part, to)])
                .await
                .err();
        }
        if let Some(e) = failed {
            // Commit never sent: the next OffsetFetch must return the pre-transaction offset.
            let _ = p.end(false).await;
            h.w3_complete_transform(id, Outcome::Aborted, e.to_string());
            need_init = true;
            continue;
        }
        if rng.chance(w3.crash_p) {
            // The instance crashes before its commit; a successor fences it (aborting the
            // open transaction) and resumes; then the crashed instance commits as a zombie.
            let mut zombie = std::mem::replace(&mut p, new_instance());
            zombie.drop_connections();
            if !init_until(&mut p, &h, deadline).await {
                h.w3_complete_transform(id, Outcome::Aborted, "crashed");
                break;
            }
            need_init = false;
            let Some(committed) = input.resume(&h, last_txn, deadline).await else {
                h.w3_complete_transform(id, Outcome::Aborted, "crashed");
                break;
            };
            position = committed.max(0);
            match zombie.end(true).await {
                Ok(()) => {
                    h.w3_complete_transform(id, Outcome::Committed, "zombie commit accepted");
                    input.allowed = None;
                }
                Err(e) if e.is_definite() => {
                    h.w3_complete_transform(id, Outcome::Aborted, format!("zombie: {e}"));
                }
                Err(e) => {
                    h.w3_complete_transform(id, Outcome::Indeterminate, format!("zombie: {e}"));
                    input.allowed = None;
                }
            }
            continue;
        }
        let commit = !rng.chance(w3.abort_p);
        let t0 = h.now_ms();
        match p.end(commit).await {
            Ok(()) => {
                if o.tv.bumps_epoch_per_txn() {
                    let (np, ne) = p.pid_epoch();
                    h.issued(&tid, np, ne, "EndTxn", t0);
                }
                if commit {
                    h.w3_complete_transform(id, Outcome::Committed, "");
                    input.allowed = Some(vec![to]);
                    position = to;
                } else {
                    // An abort on purpose: resume from (and check) the committed offset.
                    h.w3_complete_transform(id, Outcome::Aborted, "");
                    need_resume = true;
                }
            }
            Err(e) if !commit || e.is_definite() => {
                h.w3_complete_transform(id, Outcome::Aborted, e.to_string());
                need_init = true;
            }
            Err(e) => {
                // Never abort after an unanswered commit: re-initialize; either offset may
                // be the committed one.
                h.w3_complete_transform(id, Outcome::Indeterminate, e.to_string());
                if let Some(a) = input.allowed.as_mut() {
                    a.push(to);
                }
                need_init = true;
            }
        }
    }
    Ok(())
}

/// One send of a transaction: AddPartitionsToTxn for `partition` (if new to the transaction),
/// `record_writes` (the history learns what the transaction writes before it is sent), then
/// the Produce, recorded as accepted when the broker acknowledged it.
async fn send_in_txn(
    p: &mut TxnProducer,
    h: &History,
    tid: &str,
    partition: i32,
    values: Vec<String>,
    record_writes: impl FnOnce(&[String]),
) -> Result<(), ClientError> {
    p.add_partitions(&[partition]).await?;
    record_writes(&values);
    produce_recorded(p, h, tid, partition, values).await
}

/// The Produce of `values` to `partition` with `p`'s producer id and epoch, recorded as
/// accepted when the broker acknowledged it.
async fn produce_recorded(
    p: &mut TxnProducer,
    h: &History,
    tid: &str,
    partition: i32,
    values: Vec<String>,
) -> Result<(), ClientError> {
    let (pid, epoch) = p.pid_epoch();
    let t0 = h.now_ms();
    p.produce(partition, &values, true).await?;
    h.accepted(Accepted {
        tid: tid.to_owned(),
        pid,
        epoch,
        partition,
        values,
        invoke_ms: t0,
    });
    Ok(())
}

/// Initializes (or re-initializes) the producer until it succeeds or the deadline passes.
async fn init_until(p: &mut TxnProducer, h: &History, deadline: Instant) -> bool {
    while Instant::now() < deadline {
        let t0 = h.now_ms();
        match p.init().await {
            Ok((pid, epoch)) => {
                h.issued(p.tid(), pid, epoch, "InitProducerId", t0);
                return true;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
    false
}

/// W1 (and W2 when `tid` is shared and `restart_p > 0`).
async fn w1_producer(
    w: u32,
    tid: String,
    restart_p: f64,
    view: ClusterView,
    h: History,
    o: RunOptions,
    deadline: Instant,
) -> anyhow::Result<()> {
    let mut rng = Rng::new(o.seed ^ (u64::from(w) + 1).wrapping_mul(0xA24B_AED4_963E_E407));
    let mut p = TxnProducer::new(view.clone(), &tid, o.txn_timeout_ms, o.tv);
    p.op_budget = OP_BUDGET;
    let partitions = u64::try_from(o.cluster.partitions).unwrap_or(1);
    let mut counter = 0u64;
    let mut need_init = true;
    while Instant::now() < deadline {
        if restart_p > 0.0 && rng.chance(restart_p) {
            // W2: this producer "restarts": a new instance that knows no pid/epoch.
            p = TxnProducer::new(view.clone(), &tid, o.txn_timeout_ms, o.tv);
            p.op_budget = OP_BUDGET;
            need_init = true;
        }
        if need_init {
            if !init_until(&mut p, &h, deadline).await {
                break;
            }
            need_init = false;
        }
        let (pid, epoch) = p.pid_epoch();
        let id = h.invoke_txn(w, &tid, pid, epoch);
        let sends = 1 + rng.below(4);
        let mut failed: Option<ClientError> = None;
        for _ in 0..sends {
            let part = i32::try_from(rng.below(partitions)).unwrap_or(0);
            counter += 1;
            let value = format!("{w}-{counter}");
            let sent = send_in_txn(&mut p, &h, &tid, part, vec![value], |v| {
                h.add_writes(id, part, v)
            });
            if let Err(e) = sent.await {
                failed = Some(e);
                break;
            }
        }
        if let Some(e) = failed {
            // Commit never sent: whatever happens next, this transaction must not commit.
            let _ = p.end(false).await;
            h.complete_txn(id, Outcome::Aborted, e.to_string());
            need_init = true;
            continue;
        }
        let commit = !rng.chance(o.abort_p);
        let t0 = h.now_ms();
        match p.end(commit).await {
            Ok(()) => {
                h.complete_txn(
                    id,
                    if commit {
                        Outcome::Committed
                    } else {
                        Outcome::Aborted
                    },
                    "",
                );
                if o.tv.bumps_epoch_per_txn() {
                    let (np, ne) = p.pid_epoch();
                    h.issued(&tid, np, ne, "EndTxn", t0);
                }
            }
            Err(e) if !commit => {
                h.complete_txn(id, Outcome::Aborted, e.to_string());
                need_init = true;
            }
            Err(e) if e.is_definite() => {
                h.complete_txn(id, Outcome::Aborted, e.to_string());
                need_init = true;
            }
            Err(e) => {
                // Never abort after an unanswered commit (KAFKA-17754): re-initialize.
                h.complete_txn(id, Outcome::Indeterminate, e.to_string());
                need_init = true;
            }
        }
    }
    Ok(())
}

async fn consumer(c: u32, view: ClusterView, h: History, deadline: Instant) -> anyhow::Result<()> {
    let mut f = Fetcher::new(view.clone(), &format!("consumer-{c}"));
    let mut pos: BTreeMap<i32, i64> = view.leaders.keys().map(|p| (*p, 0)).collect();
    while Instant::now() < deadline {
        for (p, off) in &mut pos {
            if let Ok(r) = f.fetch(*p, *off).await {
                h.reads(r.records.into_iter().map(|d| Read {
                    process: c,
                    partition: *p,
                    offset: d.offset,
                    value: d.value,
                    final_read: false,
                }));
                *off = (*off).max(r.next_offset);
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// W5: a producer opens a transaction, writes one value and vanishes. The reaper must abort
/// it (the value must never be read, the LSO must move). Then a new producer takes the id
/// over, and the vanished one comes back as a zombie with its old epoch: the write must be
/// refused (I9).
async fn w5_vanishing(
    view: ClusterView,
    h: History,
    o: RunOptions,
    deadline: Instant,
    every: Duration,
) -> anyhow::Result<()> {
    let mut rng = Rng::new(o.seed ^ 0x5555);
    let mut k = 0u32;
    let partitions = u64::try_from(o.cluster.partitions).unwrap_or(1);
    let timeout_ms = 1500;
    while Instant::now() + Duration::from_millis(4 * timeout_ms) < deadline {
        k += 1;
        let tid = format!("w5-{k}");
        let process = 500 + k;
        let mut p = TxnProducer::new(view.clone(), &tid, i32::try_from(timeout_ms)?, o.tv);
        if !init_until(&mut p, &h, deadline).await {
            break;
        }
        let (pid, epoch) = p.pid_epoch();
        let part = i32::try_from(rng.below(partitions)).unwrap_or(0);
        let id = h.invoke_txn(process, &tid, pid, epoch);
        let values = vec![format!("w5-{k}-a")];
        // Whether it got in or not, the producer vanishes with the transaction open.
        let _ = send_in_txn(&mut p, &h, &tid, part, values, |v| {
            h.add_writes(id, part, v)
        })
        .await;
        p.drop_connections();
        h.complete_txn(id, Outcome::Aborted, "producer vanished");
        // Let the reaper abort it, then a successor takes the id over.
        tokio::time::sleep(Duration::from_millis(2 * timeout_ms) + every / 2).await;
        let mut successor = TxnProducer::new(view.clone(), &tid, i32::try_from(timeout_ms)?, o.tv);
        if !init_until(&mut successor, &h, deadline).await {
            break;
        }
        // The zombie: old pid/epoch, next sequence, straight to the partition.
        let zid = h.invoke_txn(process, &tid, pid, epoch);
        let zvalues = vec![format!("w5-{k}-zombie")];
        h.add_writes(zid, part, &zvalues);
        // Refused or accepted, the history judges what the zombie got in.
        let _ = produce_recorded(&mut p, &h, &tid, part, zvalues).await;
        h.complete_txn(zid, Outcome::Aborted, "zombie write");
        tokio::time::sleep(every / 2).await;
    }
    Ok(())
}

/// The nemesis. With one daemon its faults are as documented in `docs/reliability.md`
/// ("Nemesis"). In cluster mode each daemon fault hits a daemon picked at random (a kill
/// lasts 1-6 s, so its partitions move; half the pauses outlast the lease), and the etcd
/// faults kill or pause one member (a kill takes a second member down for 0.5-1.5 s in 15%
/// of the cases: no quorum for a while). Faults run one after another (a hold-type fault is
/// armed and the nemesis moves on), so at most one etcd member is down at a time except in
/// those short two-member kills.
async fn nemesis(
    cluster: Arc<Mutex<FaultCluster>>,
    h: History,
    o: RunOptions,
    deadline: Instant,
) -> anyhow::Result<()> {
    let mut rng = Rng::new(o.seed ^ 0x4E45_4D45_5349_5321);
    let brokers = u64::try_from(o.cluster.brokers).unwrap_or(1);
    let (daemons, lease_ms, members) = {
        let c = cluster.lock().await;
        let e = c.etcd.as_ref();
        (
            u64::try_from(c.daemon_count()).unwrap_or(1),
            e.map_or(0, |e| e.options.lease_ms),
            e.map_or(0, |e| u64::try_from(e.etcd.len()).unwrap_or(0)),
        )
    };
    let clustered = members > 0;
    // leave the last part of the run fault-free so the workload settles under healing
    let stop = deadline - o.duration / 8;
    let mut deck: Vec<Fault> = Vec::new();
    while Instant::now() < stop {
        tokio::time::sleep(rng.millis(o.fault_interval_ms.0, o.fault_interval_ms.1)).await;
        if Instant::now() >= stop || rng.chance(0.15) {
            continue;
        }
        // Draw from a shuffled deck of the enabled faults so every kind occurs each round.
        if deck.is_empty() {
            deck = o.faults.clone();
            for i in (1..deck.len()).rev() {
                let j = usize::try_from(rng.below(i as u64 + 1)).unwrap_or(0);
                deck.swap(i, j);
            }
        }
        let Some(fault) = deck.pop() else { continue };
        let b = usize::try_from(rng.below(brokers)).unwrap_or(0);
        let mut hold = rng.millis(300, 2500);
        // Cluster mode only (single-daemon runs draw exactly what they drew before).
        let d = if clustered {
            usize::try_from(rng.below(daemons)).unwrap_or(0)
        } else {
            0
        };
        let kind = fault.kind();
        let mut c = cluster.lock().await;
        let dname = c.daemon_at(d).name().to_owned();
        let link = if clustered {
            format!("{dname} link")
        } else {
            "coordinator link".to_owned()
        };
        match fault {
            Fault::KillCoordinator => {
                if clustered {
                    hold = rng.millis(1000, 6000);
                }
                h.fault_of(kind, format!("kill {dname} for {hold:?}"));
                c.daemon_at(d).kill();
                h.coordinator_killed();
                drop(c);
                tokio::time::sleep(hold).await;
                let mut c = cluster.lock().await;
                tokio::task::block_in_place(|| c.daemon_at(d).restart(Duration::from_secs(30)))?;
            }
            Fault::PauseCoordinator => {
                let mut past = "";
                if clustered && rng.chance(0.5) {
                    hold = rng.millis(lease_ms + 500, lease_ms + 3000);
                    past = " (past the lease)";
                }
                h.fault_of(kind, format!("pause {dname} for {hold:?}{past}"));
                c.daemon_at(d).pause()?;
                drop(c);
                tokio::time::sleep(hold).await;
                cluster.lock().await.daemon_at(d).resume()?;
            }
            Fault::KillBroker => {
                h.fault_of(kind, format!("kill broker-{} for {hold:?}", b + 1));
                c.brokers[b].kill();
                drop(c);
                tokio::time::sleep(hold).await;
                let mut c = cluster.lock().await;
                tokio::task::block_in_place(|| c.brokers[b].restart(Duration::from_secs(30)))?;
            }
            Fault::PauseBroker => {
                h.fault_of(kind, format!("pause broker-{} for {hold:?}", b + 1));
                c.brokers[b].pause()?;
                drop(c);
                tokio::time::sleep(hold).await;
                cluster.lock().await.brokers[b].resume()?;
            }
            Fault::BlackholeCoordinator => {
                h.fault_of(kind, format!("blackhole {link} for {hold:?}"));
                c.daemon_proxy_at(d).set_blackhole(true);
                drop(c);
                tokio::time::sleep(hold).await;
                let c = cluster.lock().await;
                c.daemon_proxy_at(d).set_blackhole(false);
                c.daemon_proxy_at(d).sever();
            }
            Fault::PartitionBroker => {
                h.fault_of(kind, format!("partition broker-{} for {hold:?}", b + 1));
                c.broker_proxies[b].set_down(true);
                drop(c);
                tokio::time::sleep(hold).await;
                cluster.lock().await.broker_proxies[b].set_down(false);
            }
            Fault::Delay => {
                let d_ms = rng.millis(20, 300);
                let links = if clustered {
                    format!("{dname} links")
                } else {
                    "coordinator links".to_owned()
                };
                h.fault_of(
                    kind,
                    format!("delay {d_ms:?} on broker-{} and {links}", b + 1),
                );
                c.broker_proxies[b].set_delay(d_ms);
                c.daemon_proxy_at(d).set_delay(d_ms);
                drop(c);
                tokio::time::sleep(hold * 2).await;
                let c = cluster.lock().await;
                c.broker_proxies[b].set_delay(Duration::ZERO);
                c.daemon_proxy_at(d).set_delay(Duration::ZERO);
            }
            Fault::HoldEndTxn => {
                let committed = rng.chance(0.5);
                let at = if clustered {
                    format!(" at {dname}")
                } else {
                    String::new()
                };
                h.fault_of(
                    kind,
                    format!(
                        "hold next EndTxn(committed={committed}){at} for {:?}",
                        hold * 2
                    ),
                );
                c.daemon_proxy_at(d)
                    .hold(RequestClass::EndTxn { committed }, hold * 2, 1);
            }
            Fault::HoldProduce => {
                h.fault_of(
                    kind,
                    format!("hold next Produce to broker-{} for {hold:?}", b + 1),
                );
                c.broker_proxies[b].hold(RequestClass::Api(ApiKey::Produce), hold, 1);
            }
            Fault::DropProduceResponses => {
                let n = 1 + u32::try_from(rng.below(3)).unwrap_or(0);
                h.fault_of(
                    kind,
                    format!("drop the next {n} Produce responses from broker-{}", b + 1),
                );
                c.broker_proxies[b].drop_responses(ApiKey::Produce, n);
            }
            Fault::KillEtcd => {
                let Some(e) = c.etcd.as_mut() else { continue };
                let m = usize::try_from(rng.below(members)).unwrap_or(0);
                let hold = rng.millis(500, 4000);
                let second = (members > 2 && rng.chance(0.15)).then(|| {
                    let k = usize::try_from(1 + rng.below(members - 1)).unwrap_or(1);
                    ((m + k) % e.etcd.len(), rng.millis(500, 1500))
                });
                match second {
                    Some((m2, short)) => h.fault_of(
                        "kill-etcd-2",
                        format!(
                            "kill etcd member m{m} for {hold:?}, and m{m2} with it for {short:?} (no quorum)"
                        ),
                    ),
                    None => h.fault_of(kind, format!("kill etcd member m{m} for {hold:?}")),
                }
                e.etcd.kill(m);
                if let Some((m2, short)) = second {
                    e.etcd.kill(m2);
                    drop(c);
                    tokio::time::sleep(short).await;
                    let mut c = cluster.lock().await;
                    if let Some(e) = c.etcd.as_mut() {
                        e.etcd.restart(m2)?;
                    }
                    drop(c);
                    tokio::time::sleep(hold.saturating_sub(short)).await;
                } else {
                    drop(c);
                    tokio::time::sleep(hold).await;
                }
                let mut c = cluster.lock().await;
                if let Some(e) = c.etcd.as_mut() {
                    e.etcd.restart(m)?;
                }
            }
            Fault::PauseEtcd => {
                let Some(e) = c.etcd.as_mut() else { continue };
                let m = usize::try_from(rng.below(members)).unwrap_or(0);
                let hold = rng.millis(500, 3000);
                h.fault_of(kind, format!("pause etcd member m{m} for {hold:?}"));
                e.etcd.pause(m)?;
                drop(c);
                tokio::time::sleep(hold).await;
                let mut c = cluster.lock().await;
                if let Some(e) = c.etcd.as_mut() {
                    e.etcd.resume(m)?;
                }
            }
        }
    }
    Ok(())
}
