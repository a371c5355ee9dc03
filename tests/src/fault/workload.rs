//! Seeded, time-bounded fault runs: W1 (transactional queue), W5 (producers vanishing
//! mid-transaction), W6 (dropped produce responses, idempotent retries) against a
//! [`FaultCluster`], with a nemesis that kills, pauses and partitions processes through the
//! proxies; then healing, a final full read_committed read, an offline audit of the
//! coordinator log, and the [`checker`](super::checker).
//!
//! Replay: the seed drives every random choice (fault schedule, transaction shapes, abort
//! decisions); thread interleavings and timings are not reproducible, so a replay re-runs the
//! same schedule, not the same execution.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kafka_protocol::messages::ApiKey;
use tokio::sync::Mutex;
use txn_log::sync::Arc;

use super::checker::{Report, check};
use super::client::{ClientError, ClusterView, Fetcher, TxnProducer, TxnVersion};
use super::cluster::{ClusterOptions, FaultCluster};
use super::history::{Accepted, History, Outcome, Read, Record};
use super::proxy::{ProxyStats, RequestClass};

/// splitmix64: a small seeded generator (no dependency).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        // 53 bits of mantissa
        ((self.next_u64() >> 11) as f64 / (1u64 << 53) as f64) < p
    }

    /// A duration uniform in `[lo, hi]` milliseconds.
    pub fn millis(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(lo + self.below(hi.saturating_sub(lo) + 1))
    }
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
}

const TOPIC_PROBE: &str = "fault-probe";

/// How long a W1/W2 operation retries before it is indeterminate: shorter than the longest
/// faults, so that runs contain indeterminate commits (Jepsen's `:info`).
const OP_BUDGET: Duration = Duration::from_secs(3);

/// Runs the workload against a fresh cluster and checks the history.
pub async fn run(opts: RunOptions) -> anyhow::Result<RunResult> {
    println!(
        "fault run seed: {} (replay with TXN_FAULT_SEED={})",
        opts.seed, opts.seed
    );
    let cluster = FaultCluster::start(opts.cluster.clone()).await?;
    let view = ClusterView::discover(
        cluster.bootstrap(),
        &opts.cluster.topic,
        TOPIC_PROBE,
        Duration::from_secs(30),
    )
    .await?;
    let cluster = Arc::new(Mutex::new(cluster));
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
    if !opts.faults.is_empty() {
        let (c, h, o) = (cluster.clone(), h.clone(), opts.clone());
        tasks.spawn(async move { nemesis(c, h, o, deadline).await });
    }
    while let Some(r) = tasks.join_next().await {
        r??;
    }
    // Heal and let the reaper and marker retries finish.
    {
        let mut c = cluster.lock().await;
        tokio::task::block_in_place(|| c.heal())?;
    }
    h.fault("heal");
    final_read(&view, &h, &opts).await;
    let mut c = cluster.lock().await;
    let mut proxy_stats = vec![("coordinator".to_owned(), c.daemon_proxy.stats())];
    for (i, p) in c.broker_proxies.iter().enumerate() {
        proxy_stats.push((format!("broker-{}", i + 1), p.stats()));
    }
    for (name, st) in &proxy_stats {
        println!("proxy {name}: {st:?}");
    }
    c.stop();
    let copy = c.root().join("daemon-copy");
    super::audit::copy_dir(&c.daemon_data_dir(), &copy)?;
    let now_unix = i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis(),
    )
    .unwrap_or(i64::MAX);
    let mut record = h.snapshot();
    super::audit::audit_log(
        &copy,
        opts.cluster.txn_log_partitions,
        now_unix,
        15_000,
        &mut record,
    )
    .await?;
    let report = check(&record);
    println!("fault run seed {}: {report}", opts.seed);
    Ok(RunResult {
        seed: opts.seed,
        report,
        history: record,
        proxy_stats,
    })
}

async fn final_read(view: &ClusterView, h: &History, opts: &RunOptions) {
    let mut f = Fetcher::new(view.clone(), "final-reader");
    let within = Duration::from_millis(
        u64::try_from(opts.txn_timeout_ms).unwrap_or(10_000)
            + opts.cluster.reaper_interval_ms
            + 30_000,
    );
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
            if let Err(e) = p.add_partitions(&[part]).await {
                failed = Some(e);
                break;
            }
            let values = vec![value];
            h.add_writes(id, part, &values);
            let t0 = h.now_ms();
            match p.produce(part, &values, true).await {
                Ok(_) => h.accepted(Accepted {
                    tid: tid.clone(),
                    pid,
                    epoch,
                    partition: part,
                    values,
                    invoke_ms: t0,
                }),
                Err(e) => {
                    failed = Some(e);
                    break;
                }
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
                if o.tv == TxnVersion::Tv2 {
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
        if p.add_partitions(&[part]).await.is_ok() {
            h.add_writes(id, part, &values);
            let t0 = h.now_ms();
            if p.produce(part, &values, true).await.is_ok() {
                h.accepted(Accepted {
                    tid: tid.clone(),
                    pid,
                    epoch,
                    partition: part,
                    values,
                    invoke_ms: t0,
                });
            }
        }
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
        let t0 = h.now_ms();
        if p.produce(part, &zvalues, true).await.is_ok() {
            h.accepted(Accepted {
                tid: tid.clone(),
                pid,
                epoch,
                partition: part,
                values: zvalues,
                invoke_ms: t0,
            });
        }
        h.complete_txn(zid, Outcome::Aborted, "zombie write");
        tokio::time::sleep(every / 2).await;
    }
    Ok(())
}

async fn nemesis(
    cluster: Arc<Mutex<FaultCluster>>,
    h: History,
    o: RunOptions,
    deadline: Instant,
) -> anyhow::Result<()> {
    let mut rng = Rng::new(o.seed ^ 0x4E45_4D45_5349_5321);
    let brokers = u64::try_from(o.cluster.brokers).unwrap_or(1);
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
        let hold = rng.millis(300, 2500);
        let mut c = cluster.lock().await;
        match fault {
            Fault::KillCoordinator => {
                h.fault(format!("kill daemon for {hold:?}"));
                c.daemon.kill();
                h.coordinator_killed();
                drop(c);
                tokio::time::sleep(hold).await;
                let mut c = cluster.lock().await;
                tokio::task::block_in_place(|| c.daemon.restart(Duration::from_secs(30)))?;
            }
            Fault::PauseCoordinator => {
                h.fault(format!("pause daemon for {hold:?}"));
                c.daemon.pause()?;
                drop(c);
                tokio::time::sleep(hold).await;
                cluster.lock().await.daemon.resume()?;
            }
            Fault::KillBroker => {
                h.fault(format!("kill broker-{} for {hold:?}", b + 1));
                c.brokers[b].kill();
                drop(c);
                tokio::time::sleep(hold).await;
                let mut c = cluster.lock().await;
                tokio::task::block_in_place(|| c.brokers[b].restart(Duration::from_secs(30)))?;
            }
            Fault::PauseBroker => {
                h.fault(format!("pause broker-{} for {hold:?}", b + 1));
                c.brokers[b].pause()?;
                drop(c);
                tokio::time::sleep(hold).await;
                cluster.lock().await.brokers[b].resume()?;
            }
            Fault::BlackholeCoordinator => {
                h.fault(format!("blackhole coordinator link for {hold:?}"));
                c.daemon_proxy.set_blackhole(true);
                drop(c);
                tokio::time::sleep(hold).await;
                let c = cluster.lock().await;
                c.daemon_proxy.set_blackhole(false);
                c.daemon_proxy.sever();
            }
            Fault::PartitionBroker => {
                h.fault(format!("partition broker-{} for {hold:?}", b + 1));
                c.broker_proxies[b].set_down(true);
                drop(c);
                tokio::time::sleep(hold).await;
                cluster.lock().await.broker_proxies[b].set_down(false);
            }
            Fault::Delay => {
                let d = rng.millis(20, 300);
                h.fault(format!(
                    "delay {d:?} on broker-{} and coordinator links",
                    b + 1
                ));
                c.broker_proxies[b].set_delay(d);
                c.daemon_proxy.set_delay(d);
                drop(c);
                tokio::time::sleep(hold * 2).await;
                let c = cluster.lock().await;
                c.broker_proxies[b].set_delay(Duration::ZERO);
                c.daemon_proxy.set_delay(Duration::ZERO);
            }
            Fault::HoldEndTxn => {
                let committed = rng.chance(0.5);
                h.fault(format!(
                    "hold next EndTxn(committed={committed}) for {:?}",
                    hold * 2
                ));
                c.daemon_proxy
                    .hold(RequestClass::EndTxn { committed }, hold * 2, 1);
            }
            Fault::HoldProduce => {
                h.fault(format!(
                    "hold next Produce to broker-{} for {hold:?}",
                    b + 1
                ));
                c.broker_proxies[b].hold(RequestClass::Api(ApiKey::Produce), hold, 1);
            }
            Fault::DropProduceResponses => {
                let n = 1 + u32::try_from(rng.below(3)).unwrap_or(0);
                h.fault(format!(
                    "drop the next {n} Produce responses from broker-{}",
                    b + 1
                ));
                c.broker_proxies[b].drop_responses(ApiKey::Produce, n);
            }
        }
    }
    Ok(())
}
