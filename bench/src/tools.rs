//! Side modes: the fsync ceiling probe, the transactional-id generator for recovery runs and
//! the readiness probe.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use kafka_protocol::messages::{ApiKey, DescribeTransactionsRequest, TransactionalId as WireId};
use kafka_protocol::protocol::StrBytes;
use serde::Serialize;
use txn_log::{
    CoordinatorEpoch, ErrorCode, LogEntry, LogPartition, ProducerEpoch, ProducerId, SledConfig,
    SledTxnLog, SyncMode, TopicPartition, TransactionalId, TxnLog, TxnRecord, TxnState,
    java_string_hash, kafka_partition_for,
};

use crate::stats::{Lat, LatSummary};
use txn_testkit::client::Conn;

/// Result of `--fsync-probe`.
#[derive(Debug, Serialize)]
pub(crate) struct FsyncResult {
    pub(crate) dir: String,
    pub(crate) write_bytes: usize,
    pub(crate) ops: u64,
    pub(crate) seconds: f64,
    pub(crate) fsyncs_per_s: f64,
    pub(crate) latency: LatSummary,
    pub(crate) loadavg: f64,
}

/// A loop of `write(write_bytes)` + `fdatasync` appending to one file in `dir`, for `secs`.
pub(crate) fn fsync_probe(
    dir: &Path,
    secs: f64,
    write_bytes: usize,
) -> anyhow::Result<FsyncResult> {
    std::fs::create_dir_all(dir)?;
    let path = dir.join("txn-bench-fsync-probe");
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .open(&path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    let buf = vec![0xA5u8; write_bytes];
    let mut lat = Lat::default();
    let start = Instant::now();
    let until = Duration::from_secs_f64(secs);
    let mut ops = 0u64;
    while start.elapsed() < until {
        let t = Instant::now();
        f.write_all(&buf)?;
        f.sync_data()?;
        lat.record(t.elapsed());
        ops += 1;
    }
    let seconds = start.elapsed().as_secs_f64();
    drop(f);
    let _ = std::fs::remove_file(&path);
    #[allow(clippy::cast_precision_loss)]
    let rate = ops as f64 / seconds;
    Ok(FsyncResult {
        dir: dir.display().to_string(),
        write_bytes,
        ops,
        seconds,
        fsyncs_per_s: rate,
        latency: lat.summary(),
        loadavg: crate::stats::loadavg(),
    })
}

/// Result of `--generate-ids`.
#[derive(Debug, Serialize)]
pub(crate) struct GenerateResult {
    pub(crate) data_dir: String,
    pub(crate) ids: u64,
    pub(crate) log_partitions: u32,
    pub(crate) states: Vec<(String, u64)>,
    pub(crate) seconds: f64,
    pub(crate) data_dir_bytes: u64,
}

/// The generated id number `i` with `prefix`.
pub(crate) fn gen_id(prefix: &str, i: u64) -> String {
    format!("{prefix}{i:07}")
}

/// State of generated id `i`: 60% CompleteCommit, 20% CompleteAbort, 10% Empty, 10% Ongoing.
fn gen_state(i: u64) -> TxnState {
    match i % 10 {
        0..=5 => TxnState::CompleteCommit,
        6 | 7 => TxnState::CompleteAbort,
        8 => TxnState::Empty,
        _ => TxnState::Ongoing,
    }
}

/// Writes `n` transactional ids in mixed states through `SledTxnLog` into `dir` (the daemon's
/// `--data-dir`), at coordinator epoch 1 of every log partition.
pub(crate) async fn generate_ids(
    dir: &Path,
    n: u64,
    log_partitions: u32,
    prefix: &str,
    buffered: bool,
) -> anyhow::Result<GenerateResult> {
    let start = Instant::now();
    let mut cfg = SledConfig::new(dir);
    if buffered {
        cfg.sync_mode = SyncMode::OsBuffered;
    }
    let log = Arc::new(
        tokio::task::spawn_blocking(move || SledTxnLog::open(cfg))
            .await?
            .context("open SledTxnLog")?,
    );
    for p in 0..log_partitions {
        log.claim(LogPartition(p), CoordinatorEpoch(1)).await?;
    }
    let block = log
        .allocate_block(u32::try_from(n).context("too many ids")?, ProducerId(0))
        .await?;
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_millis();
    let now_ms = i64::try_from(now_ms)?;
    let mut per_partition: Vec<Vec<LogEntry>> = vec![Vec::new(); log_partitions as usize];
    let mut counts = [0u64; 4];
    let mut inflight = tokio::task::JoinSet::new();
    for i in 0..n {
        let id = gen_id(prefix, i);
        let p = kafka_partition_for(java_string_hash(&id), log_partitions);
        let state = gen_state(i);
        let ongoing = state == TxnState::Ongoing;
        let mut partitions = BTreeSet::new();
        if ongoing {
            partitions.insert(TopicPartition::new("bench", i32::try_from(i % 16)?));
        }
        let producer_id = ProducerId(block.first.0 + i64::try_from(i)?);
        let producer_epoch = ProducerEpoch(i16::try_from(i % 100)?);
        let rec = TxnRecord {
            state,
            partitions,
            txn_start_ms: if ongoing { now_ms } else { -1 },
            client_txn_version: txn_log::TxnVersion::V1,
            ..TxnRecord::initialized(producer_id, producer_epoch, 900_000, now_ms)
        };
        let entries = &mut per_partition[p as usize];
        entries.push(LogEntry::upsert(TransactionalId::new(id)?, rec));
        if entries.len() >= 2000 {
            let batch = std::mem::take(entries);
            let l = log.clone();
            inflight
                .spawn(async move { l.append(LogPartition(p), CoordinatorEpoch(1), batch).await });
            while inflight.len() >= 16 {
                if let Some(r) = inflight.join_next().await {
                    r??;
                }
            }
        }
    }
    for (p, batch) in per_partition.into_iter().enumerate() {
        if !batch.is_empty() {
            log.append(LogPartition(u32::try_from(p)?), CoordinatorEpoch(1), batch)
                .await?;
        }
    }
    while let Some(r) = inflight.join_next().await {
        r??;
    }
    let l = log.clone();
    tokio::task::spawn_blocking(move || l.shutdown()).await?;
    // The daemon records its partition count on first start; write the same file so that a
    // generated directory is refused under another `transaction.state.log.num.partitions`.
    std::fs::write(
        dir.join("txn-coordinator.partitions"),
        format!("transaction.state.log.num.partitions={log_partitions}\n"),
    )?;
    drop(log);
    for i in 0..10u64 {
        let s = gen_state(i);
        let k = match s {
            TxnState::CompleteCommit => 0,
            TxnState::CompleteAbort => 1,
            TxnState::Empty => 2,
            _ => 3,
        };
        counts[k] += n / 10 + u64::from(i < n % 10);
    }
    Ok(GenerateResult {
        data_dir: dir.display().to_string(),
        ids: n,
        log_partitions,
        states: vec![
            ("CompleteCommit".into(), counts[0]),
            ("CompleteAbort".into(), counts[1]),
            ("Empty".into(), counts[2]),
            ("Ongoing".into(), counts[3]),
        ],
        seconds: start.elapsed().as_secs_f64(),
        data_dir_bytes: dir_size(dir),
    })
}

fn dir_size(dir: &Path) -> u64 {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return 0;
    };
    rd.filter_map(Result::ok)
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_size(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

/// Result of `--wait-ready`.
#[derive(Debug, Serialize)]
pub(crate) struct ReadyResult {
    pub(crate) bootstrap: String,
    /// From this probe's start until the first ApiVersions answer.
    pub(crate) answered_ms: f64,
    /// From this probe's start until one generated id of every log partition was described.
    pub(crate) ready_ms: f64,
    pub(crate) probed_ids: usize,
    pub(crate) found_ids: usize,
}

/// Waits until the coordinator at `bootstrap` answers DescribeTransactions for one generated
/// id of each of the `log_partitions` log partitions without a load-in-progress error.
pub(crate) async fn wait_ready(
    bootstrap: &str,
    prefix: &str,
    ids: u64,
    log_partitions: u32,
    timeout: Duration,
) -> anyhow::Result<ReadyResult> {
    let start = Instant::now();
    // One sample id per log partition (the lowest-numbered generated id that maps to it).
    let mut sample: Vec<Option<String>> = vec![None; log_partitions as usize];
    let mut left = log_partitions;
    let mut i = 0u64;
    while left > 0 && i < ids.max(1) {
        let id = gen_id(prefix, i);
        let p = kafka_partition_for(java_string_hash(&id), log_partitions) as usize;
        if sample[p].is_none() {
            sample[p] = Some(id);
            left -= 1;
        }
        i += 1;
    }
    let sample: Vec<String> = sample.into_iter().flatten().collect();
    let mut conn = loop {
        match Conn::connect(bootstrap, "txn-bench-ready").await {
            Ok(c) => break c,
            Err(e) if start.elapsed() < timeout => {
                tracing::debug!(error = %e, "not up yet");
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            Err(e) => return Err(e),
        }
    };
    let answered_ms = start.elapsed().as_secs_f64() * 1000.0;
    conn.versions.pick(ApiKey::DescribeTransactions, 0, 0)?;
    loop {
        let req = DescribeTransactionsRequest::default().with_transactional_ids(
            sample
                .iter()
                .map(|s| WireId(StrBytes::from_string(s.clone())))
                .collect(),
        );
        let resp = conn.call(&req, 0).await?;
        let busy = resp.transaction_states.iter().any(|t| {
            matches!(
                ErrorCode(t.error_code),
                ErrorCode::COORDINATOR_LOAD_IN_PROGRESS
                    | ErrorCode::COORDINATOR_NOT_AVAILABLE
                    | ErrorCode::NOT_COORDINATOR
            )
        });
        if !busy {
            let found = resp
                .transaction_states
                .iter()
                .filter(|t| t.error_code == ErrorCode::NONE.code())
                .count();
            return Ok(ReadyResult {
                bootstrap: bootstrap.to_owned(),
                answered_ms,
                ready_ms: start.elapsed().as_secs_f64() * 1000.0,
                probed_ids: sample.len(),
                found_ids: found,
            });
        }
        if start.elapsed() > timeout {
            bail!("not ready after {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Result of `--load-probe`.
#[derive(Debug, Serialize)]
pub(crate) struct LoadProbeResult {
    pub(crate) data_dir: String,
    pub(crate) ids: u64,
    pub(crate) seconds: f64,
    pub(crate) ids_per_s: f64,
    /// RSS of this process before opening the log, KiB.
    pub(crate) rss_before_kib: u64,
    /// RSS with every loaded record held in memory, KiB.
    pub(crate) rss_loaded_kib: u64,
    /// RSS after the records were dropped (the log and its cache still open), KiB.
    pub(crate) rss_after_drop_kib: u64,
    /// RSS after the log was shut down and dropped as well, KiB: what the storage layer (and
    /// the allocator) did not give back.
    pub(crate) rss_after_close_kib: u64,
}

/// Opens the log in `dir` and loads every partition through `SledTxnLog::load` (all partitions at
/// once, as the daemon does at start) without a coordinator: the storage share of recovery time
/// and of memory.
pub(crate) async fn load_probe(dir: &Path, log_partitions: u32) -> anyhow::Result<LoadProbeResult> {
    let rss = || crate::stats::sample_pid(std::process::id()).map_or(0, |s| s.rss_kib);
    let rss_before_kib = rss();
    let start = Instant::now();
    // As the daemon opens it: every record is read at open (`SledConfig::preload`).
    let mut cfg = SledConfig::new(dir);
    cfg.preload = true;
    let log = Arc::new(tokio::task::spawn_blocking(move || SledTxnLog::open(cfg)).await??);
    let mut set = tokio::task::JoinSet::new();
    for p in 0..log_partitions {
        let l = log.clone();
        set.spawn(async move { l.load(LogPartition(p)).await });
    }
    let mut loaded = Vec::new();
    while let Some(r) = set.join_next().await {
        loaded.push(r??);
    }
    let seconds = start.elapsed().as_secs_f64();
    let ids: u64 = loaded.iter().map(|l| l.records.len() as u64).sum();
    let rss_loaded_kib = rss();
    drop(loaded);
    let rss_after_drop_kib = rss();
    let l = log.clone();
    tokio::task::spawn_blocking(move || l.shutdown()).await?;
    drop(log);
    let rss_after_close_kib = rss();
    #[allow(clippy::cast_precision_loss)]
    let ids_per_s = ids as f64 / seconds;
    Ok(LoadProbeResult {
        data_dir: dir.display().to_string(),
        ids,
        seconds,
        ids_per_s,
        rss_before_kib,
        rss_loaded_kib,
        rss_after_drop_kib,
        rss_after_close_kib,
    })
}
