//! `txn-bench`: drives Kafka transactions over the wire protocol against any Kafka-compatible
//! cluster and reports committed txn/s, per-request latency quantiles, server CPU per 1000
//! transactions and server peak RSS. See `docs/performance.md` and `bench/run.sh`.
//!
//! Each producer has its own transactional id and its own connections (coordinator and
//! partition leaders), runs FindCoordinator and InitProducerId once, then loops
//! AddPartitionsToTxn -> Produce (one transactional v2 record batch per partition, correct
//! sequences) -> EndTxn. Every request waits for its response before the next (like a Kafka
//! client with `max.in.flight = 1` and no linger).
//!
//! Side modes: `--fsync-probe DIR` (the disk's write+fdatasync rate), `--generate-ids N`
//! (fill a daemon data directory through `SledTxnLog`), `--wait-ready` (time until a
//! coordinator serves every log partition), `--plot-from` (draw saved JSON results),
//! `--null-broker` (a data broker that stores nothing, to measure a coordinator alone).

mod null_broker;
mod plot;
mod producer;
mod report;
mod stats;
mod tools;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Parser;
use tokio::time::Instant;

use crate::producer::{Params, ProducerStats, Window};
use crate::report::{RunResult, ServerUsage, ShellCost};

#[derive(Debug, Parser)]
#[command(
    name = "txn-bench",
    version,
    about = "Kafka transaction benchmark (AddPartitionsToTxn -> Produce -> EndTxn loops)"
)]
struct Cli {
    /// Any broker of the cluster.
    #[arg(long, default_value = "127.0.0.1:9092", value_name = "HOST:PORT")]
    bootstrap: String,
    /// Concurrent producers, each with its own transactional id.
    #[arg(long, default_value_t = 16)]
    producers: usize,
    /// Run these producer counts one after the other (e.g. 1,16,64,256); overrides --producers.
    #[arg(long, value_delimiter = ',')]
    sweep: Vec<usize>,
    /// Distinct partitions written by each transaction.
    #[arg(long, default_value_t = 1)]
    partitions_per_txn: usize,
    /// Records per partition per transaction (one batch).
    #[arg(long, default_value_t = 1)]
    records_per_txn: usize,
    /// Value size of each record, bytes.
    #[arg(long, default_value_t = 100)]
    record_size: usize,
    /// Measured seconds per run.
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Seconds run before measuring (after every producer is initialised).
    #[arg(long, default_value_t = 2.0)]
    warmup: f64,
    /// Topic to write to.
    #[arg(long, default_value = "txn-bench")]
    topic: String,
    /// Create the topic with this many partitions if it does not exist (CreateTopics).
    #[arg(long)]
    create_partitions: Option<i32>,
    /// Transaction version: 1 = EndTxn <= v4 (epoch fixed), 2 = EndTxn v5 (the epoch bumps on
    /// every EndTxn and the response carries the new one).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=2))]
    txn_version: u8,
    /// Fraction of transactions ended with an abort instead of a commit.
    #[arg(long, default_value_t = 0.0)]
    abort_fraction: f64,
    /// Pace all producers together to this many transactions per second (default: as fast as
    /// each producer's round trips allow).
    #[arg(long)]
    rate: Option<f64>,
    /// transaction.timeout.ms sent in InitProducerId.
    #[arg(long, default_value_t = 60_000)]
    transaction_timeout_ms: i32,
    /// Prefix of the transactional ids (a run suffix and the producer index are appended).
    #[arg(long, default_value = "txn-bench")]
    txn_id_prefix: String,
    /// Label of this run in tables, JSON and plots.
    #[arg(long, default_value = "run")]
    label: String,
    /// A server process to measure (CPU in the window, peak RSS); repeatable.
    #[arg(long = "server-pid")]
    server_pids: Vec<u32>,
    /// JSON on stdout instead of the table.
    #[arg(long)]
    json: bool,
    /// Also write the JSON result to this file.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Draw throughput vs producers and the EndTxn latency CDF into this PNG.
    #[arg(long, value_name = "FILE.png")]
    plot: Option<PathBuf>,
    /// Title of the plot.
    #[arg(long, default_value = "txn-bench")]
    plot_title: String,
    /// Mode: draw --plot from these saved JSON result files instead of running.
    #[arg(long, value_delimiter = ',', value_name = "FILE.json")]
    plot_from: Vec<PathBuf>,
    /// Mode: measure write + fdatasync per operation in DIR for --duration seconds.
    #[arg(long, value_name = "DIR")]
    fsync_probe: Option<PathBuf>,
    /// Bytes per write of --fsync-probe.
    #[arg(long, default_value_t = 512)]
    fsync_write_bytes: usize,
    /// Mode: write this many transactional ids in mixed states into --data-dir (SledTxnLog).
    #[arg(long, value_name = "N")]
    generate_ids: Option<u64>,
    /// Data directory of --generate-ids (the daemon's --data-dir).
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// transaction.state.log.num.partitions of the coordinator.
    #[arg(long, default_value_t = 50)]
    log_partitions: u32,
    /// Prefix of generated ids (--generate-ids, --wait-ready).
    #[arg(long, default_value = "gen-")]
    gen_prefix: String,
    /// --generate-ids: write without fsync (faster set-up; the daemon reads the same data).
    #[arg(long)]
    gen_buffered: bool,
    /// Mode: wait until --bootstrap serves every log partition (DescribeTransactions of one
    /// generated id per partition); prints the elapsed time. Uses --generate-ids as the count.
    #[arg(long)]
    wait_ready: bool,
    /// Mode: read every log partition of --data-dir through SledTxnLog::load (no coordinator)
    /// and report the time and this process's RSS: the storage share of recovery.
    #[arg(long)]
    load_probe: bool,
    /// Mode: serve a null data broker (leads every partition of --topic, acknowledges Produce
    /// and WriteTxnMarkers without storing anything) on HOST:PORT, to measure a coordinator
    /// without a participant's disk; FindCoordinator answers --coordinator.
    #[arg(long, value_name = "HOST:PORT")]
    null_broker: Option<String>,
    /// The coordinator the null broker sends transactional clients to.
    #[arg(long, value_name = "HOST:PORT")]
    coordinator: Option<String>,
    /// --null-broker: also tell the requests answered and this process's CPU seconds, one line
    /// per connection to HOST:PORT (read by --null-broker-stats).
    #[arg(long, value_name = "HOST:PORT")]
    stats_listen: Option<String>,
    /// The null broker's --stats-listen address: report its CPU per answered request beside
    /// the servers' CPU per transaction (the coordinator's overhead over a server that only
    /// answers).
    #[arg(long, value_name = "HOST:PORT")]
    null_broker_stats: Option<String>,
    /// Kafka client security key for the connections to the transaction coordinator
    /// (repeatable): `security.protocol=SASL_SSL`, `ssl.truststore.location=CA.pem`,
    /// `ssl.endpoint.identification.algorithm=`, `sasl.mechanism=SCRAM-SHA-512`,
    /// `sasl.jaas.config=...ScramLoginModule required username="u" password="p";`, read by the
    /// daemon's own client code (`coordinator::server::outgoing`). The bootstrap and the data
    /// brokers stay plaintext.
    #[arg(long = "coordinator-security", value_name = "KEY=VALUE")]
    coordinator_security: Vec<String>,
    /// Give up --wait-ready after this many seconds.
    #[arg(long, default_value_t = 300)]
    ready_timeout: u64,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    if !cli.plot_from.is_empty() {
        let mut all = Vec::new();
        for f in &cli.plot_from {
            let text = std::fs::read_to_string(f).with_context(|| format!("{}", f.display()))?;
            let v: serde_json::Value = serde_json::from_str(&text)?;
            let rs = v.get("results").cloned().unwrap_or(v);
            let rs: Vec<RunResult> =
                serde_json::from_value(rs).with_context(|| format!("{}", f.display()))?;
            all.extend(rs);
        }
        let out = cli
            .plot
            .clone()
            .context("--plot-from needs --plot FILE.png")?;
        plot::plot(&all, &out, &cli.plot_title)?;
        eprintln!("wrote {}", out.display());
        return Ok(());
    }
    if let Some(dir) = &cli.fsync_probe {
        let r = tools::fsync_probe(dir, cli.duration, cli.fsync_write_bytes)?;
        emit(&cli, &serde_json::to_value(&r)?)?;
        if !cli.json {
            println!(
                "fsync probe {}: {} x ({} B write + fdatasync) in {:.1} s = {:.0}/s, p50 {} µs, p99 {} µs, p99.9 {} µs (load {:.2})",
                r.dir,
                r.ops,
                r.write_bytes,
                r.seconds,
                r.fsyncs_per_s,
                r.latency.p50_us,
                r.latency.p99_us,
                r.latency.p999_us,
                r.loadavg
            );
        }
        return Ok(());
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    if let Some(listen) = &cli.null_broker {
        let coordinator = cli
            .coordinator
            .clone()
            .context("--null-broker needs --coordinator HOST:PORT")?;
        return rt.block_on(null_broker::serve(
            listen,
            &cli.topic,
            cli.create_partitions.unwrap_or(16),
            &coordinator,
            cli.stats_listen.as_deref(),
        ));
    }
    if cli.load_probe {
        let dir = cli
            .data_dir
            .clone()
            .context("--load-probe needs --data-dir")?;
        let r = rt.block_on(tools::load_probe(&dir, cli.log_partitions))?;
        emit(&cli, &serde_json::to_value(&r)?)?;
        if !cli.json {
            println!(
                "load probe: {} ids in {:.2} s = {:.0} ids/s; RSS {} KiB before, {} KiB loaded, {} KiB after dropping the records, {} KiB after closing the log",
                r.ids,
                r.seconds,
                r.ids_per_s,
                r.rss_before_kib,
                r.rss_loaded_kib,
                r.rss_after_drop_kib,
                r.rss_after_close_kib
            );
        }
        return Ok(());
    }
    if let Some(n) = cli.generate_ids.filter(|_| !cli.wait_ready) {
        let dir = cli
            .data_dir
            .clone()
            .context("--generate-ids needs --data-dir")?;
        let r = rt.block_on(tools::generate_ids(
            &dir,
            n,
            cli.log_partitions,
            &cli.gen_prefix,
            cli.gen_buffered,
        ))?;
        emit(&cli, &serde_json::to_value(&r)?)?;
        if !cli.json {
            println!(
                "generated {} ids in {} log partitions in {:.1} s ({:?}); data dir {} MiB",
                r.ids,
                r.log_partitions,
                r.seconds,
                r.states,
                r.data_dir_bytes >> 20
            );
        }
        return Ok(());
    }
    if cli.wait_ready {
        let r = rt.block_on(tools::wait_ready(
            &cli.bootstrap,
            &cli.gen_prefix,
            cli.generate_ids.unwrap_or(1_000_000),
            cli.log_partitions,
            Duration::from_secs(cli.ready_timeout),
        ))?;
        emit(&cli, &serde_json::to_value(&r)?)?;
        if !cli.json {
            println!(
                "ready after {:.0} ms (first answer after {:.0} ms); {}/{} sample ids found",
                r.ready_ms, r.answered_ms, r.found_ids, r.probed_ids
            );
        }
        return Ok(());
    }
    if !(0.0..=1.0).contains(&cli.abort_fraction) {
        bail!("--abort-fraction must be within 0..=1");
    }
    if cli.partitions_per_txn == 0 || cli.records_per_txn == 0 {
        bail!("--partitions-per-txn and --records-per-txn must be positive");
    }
    let results = rt.block_on(run_all(&cli))?;
    let doc = serde_json::json!({ "results": results });
    if cli.json {
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        report::print_table(&results);
    }
    if let Some(out) = &cli.out {
        std::fs::write(out, serde_json::to_string_pretty(&doc)?)
            .with_context(|| format!("writing {}", out.display()))?;
    }
    if let Some(p) = &cli.plot {
        plot::plot(&results, p, &cli.plot_title)?;
        eprintln!("wrote {}", p.display());
    }
    let committed: u64 = results.iter().map(|r| r.committed).sum();
    if committed == 0 {
        bail!("no transaction committed");
    }
    Ok(())
}

fn emit(cli: &Cli, v: &serde_json::Value) -> anyhow::Result<()> {
    if cli.json {
        println!("{}", serde_json::to_string_pretty(v)?);
    }
    if let Some(out) = &cli.out {
        std::fs::write(out, serde_json::to_string_pretty(v)?)?;
    }
    Ok(())
}

async fn run_all(cli: &Cli) -> anyhow::Result<Vec<RunResult>> {
    let mut nparts = cli.partitions_per_txn.max(1);
    if let Some(n) = cli.create_partitions {
        nparts = nparts.max(usize::try_from(n).unwrap_or(1));
    }
    let layout = txn_testkit::client::topic_layout(
        &cli.bootstrap,
        &cli.topic,
        cli.create_partitions
            .or(Some(i32::try_from(nparts.max(16)).unwrap_or(16))),
    )
    .await?;
    if layout.leaders.len() < cli.partitions_per_txn {
        bail!(
            "topic {} has {} partitions, fewer than --partitions-per-txn {}",
            cli.topic,
            layout.leaders.len(),
            cli.partitions_per_txn
        );
    }
    let mut security = std::collections::HashMap::new();
    for kv in &cli.coordinator_security {
        let (k, v) = kv
            .split_once('=')
            .with_context(|| format!("--coordinator-security {kv:?} is not KEY=VALUE"))?;
        security.insert(k.to_owned(), v.to_owned());
    }
    let coordinator_connector =
        coordinator::server::outgoing::ClientSecurity::from_keys("", |k| security.get(k).cloned())
            .context("--coordinator-security")?
            .connector();
    let counts = if cli.sweep.is_empty() {
        vec![cli.producers]
    } else {
        cli.sweep.clone()
    };
    let run_tag = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() % 100_000_000);
    let mut results = Vec::new();
    for (i, &n) in counts.iter().enumerate() {
        if n == 0 {
            bail!("producer count must be positive");
        }
        let params = Arc::new(Params {
            bootstrap: cli.bootstrap.clone(),
            layout: layout.clone(),
            txn_id_prefix: format!("{}-{run_tag}-{i}", cli.txn_id_prefix),
            txn_version: cli.txn_version,
            partitions_per_txn: cli.partitions_per_txn,
            records_per_txn: cli.records_per_txn,
            record_size: cli.record_size,
            abort_fraction: cli.abort_fraction,
            #[allow(clippy::cast_precision_loss)]
            interval: cli
                .rate
                .filter(|r| *r > 0.0)
                .map(|r| Duration::from_secs_f64(n as f64 / r)),
            transaction_timeout_ms: cli.transaction_timeout_ms,
            coordinator_connector: coordinator_connector.clone(),
        });
        let r = run_one(cli, n, params).await?;
        eprintln!(
            "{} producers={} ppt={}: {:.0} committed txn/s, EndTxn p99 {} µs",
            r.label, r.producers, r.partitions_per_txn, r.committed_per_s, r.end_txn.p99_us
        );
        results.push(r);
    }
    Ok(results)
}

async fn run_one(cli: &Cli, n: usize, params: Arc<Params>) -> anyhow::Result<RunResult> {
    // Phase 1: set up every producer (at most 64 handshakes at a time).
    let sem = Arc::new(tokio::sync::Semaphore::new(64));
    let mut setups = tokio::task::JoinSet::new();
    for idx in 0..n {
        let (p, sem) = (params.clone(), sem.clone());
        setups.spawn(async move {
            let _permit = sem.acquire_owned().await;
            (idx, producer::setup(idx, p).await)
        });
    }
    let mut ready = Vec::with_capacity(n);
    let mut failed = 0usize;
    let mut first_error: Option<String> = None;
    while let Some(r) = setups.join_next().await {
        match r? {
            (_, Ok(p)) => ready.push(p),
            (idx, Err(e)) => {
                failed += 1;
                if first_error.is_none() {
                    first_error = Some(format!("producer {idx} setup: {e:#}"));
                }
            }
        }
    }
    if ready.is_empty() {
        bail!(
            "no producer could be set up: {}",
            first_error.unwrap_or_default()
        );
    }

    // Phase 2: run them all; measure inside the window.
    let start = Instant::now();
    let w = Window {
        from: start + Duration::from_secs_f64(cli.warmup),
        to: start + Duration::from_secs_f64(cli.warmup + cli.duration),
    };
    let mut runs = tokio::task::JoinSet::new();
    for p in ready {
        runs.spawn(p.run(w));
    }
    tokio::time::sleep_until(w.from).await;
    let n0 = null_sample(cli).await?;
    let s0: Vec<_> = cli
        .server_pids
        .iter()
        .map(|&p| stats::sample_pid(p))
        .collect();
    let c0 = stats::sample_pid(std::process::id());
    let m0 = stats::machine_ticks();
    let load0 = stats::loadavg();
    tokio::time::sleep_until(w.to).await;
    let s1: Vec<_> = cli
        .server_pids
        .iter()
        .map(|&p| stats::sample_pid(p))
        .collect();
    let c1 = stats::sample_pid(std::process::id());
    let m1 = stats::machine_ticks();
    let load1 = stats::loadavg();
    let n1 = null_sample(cli).await?;
    let window_s = w.to.duration_since(w.from).as_secs_f64();

    let mut total = ProducerStats::default();
    while let Some(r) = runs.join_next().await {
        let s = r?;
        if s.fatal.is_some() {
            failed += 1;
        }
        total.merge(&s);
    }
    if first_error.is_none() {
        first_error = total.fatal.clone().or(total.first_error.clone());
    }

    #[allow(clippy::cast_precision_loss)]
    let committed_f = total.committed as f64;
    let mut servers = Vec::new();
    let mut server_cpu = 0.0;
    for (i, &pid) in cli.server_pids.iter().enumerate() {
        let (a, b) = (s0[i].unwrap_or_default(), s1[i].unwrap_or_default());
        let cpu = (b.cpu_s - a.cpu_s).max(0.0);
        server_cpu += cpu;
        #[allow(clippy::cast_precision_loss)]
        servers.push(ServerUsage {
            pid,
            name: stats::pid_name(pid),
            cpu_s: cpu,
            cpu_s_per_1000_txn: if total.committed > 0 {
                cpu * 1000.0 / committed_f
            } else {
                0.0
            },
            rss_mib: b.rss_kib as f64 / 1024.0,
            peak_rss_mib: b.hwm_kib as f64 / 1024.0,
        });
    }
    let null_broker = match (n0, n1) {
        (Some(a), Some(b)) => Some(null_broker::NullBrokerUsage::between(a, b)),
        _ => None,
    };
    let shell = ShellCost::of(
        server_cpu,
        total.committed + total.aborted,
        cli.txn_version,
        null_broker.as_ref(),
    );
    let client_cpu = (c1.unwrap_or_default().cpu_s - c0.unwrap_or_default().cpu_s).max(0.0);
    let ncpu = stats::ncpu();
    #[allow(clippy::cast_precision_loss)]
    let (busy, other) = {
        let total_ticks = m1.1.saturating_sub(m0.1) as f64;
        let busy_ticks = m1.0.saturating_sub(m0.0) as f64;
        if total_ticks > 0.0 {
            let busy = busy_ticks / total_ticks;
            let ours = (server_cpu + client_cpu) * stats::MACHINE_HZ / total_ticks;
            (busy, (busy - ours).max(0.0))
        } else {
            (0.0, 0.0)
        }
    };
    #[allow(clippy::cast_precision_loss)]
    Ok(RunResult {
        label: cli.label.clone(),
        bootstrap: cli.bootstrap.clone(),
        producers: n,
        partitions_per_txn: cli.partitions_per_txn,
        records_per_txn: cli.records_per_txn,
        record_size: cli.record_size,
        txn_version: cli.txn_version,
        abort_fraction: cli.abort_fraction,
        rate: cli.rate,
        duration_s: window_s,
        committed: total.committed,
        aborted: total.aborted,
        committed_per_s: committed_f / window_s,
        records_per_s: total.records as f64 / window_s,
        retries: total.retries,
        errors: total.errors,
        reinits: total.reinits,
        failed_producers: failed,
        first_error,
        add_partitions: total.add.summary(),
        produce: total.produce.summary(),
        end_txn: total.end.summary(),
        txn: total.txn.summary(),
        end_txn_cdf: total.end.cdf(),
        servers,
        null_broker,
        shell,
        client_cpu_s: client_cpu,
        machine_busy: busy,
        other_busy: other,
        loadavg_start: load0,
        loadavg_end: load1,
        ncpu,
    })
}

/// The null broker's counters, if `--null-broker-stats` names it.
async fn null_sample(cli: &Cli) -> anyhow::Result<Option<null_broker::NullSample>> {
    match &cli.null_broker_stats {
        Some(at) => Ok(Some(null_broker::NullSample::read(at).await?)),
        None => Ok(None),
    }
}
