//! Offline audit of the coordinator's sled transaction log (I12, I13, and I11 in the log):
//! copy the data directory of a stopped daemon, open the copy with
//! [`txn_log::SledTxnLog::open_path`], load every partition and check each persisted record.
//!
//! The sled log keeps the latest record of every transactional id, not the transitions, so
//! I13 is checked as "every persisted record is a state the table allows, with the fields
//! that state requires" (the codec's `TxnRecord::check_persistable`, which refuses such a
//! record on load, plus a positive timeout), and I12 against the history: a transactional id whose last
//! acknowledged operation was a commit must not end up aborted at an epoch no one was issued
//! after that commit.
//!
//! In cluster mode the log is in etcd: [`audit_etcd`] reads it (read-only: `load` claims
//! nothing) with the same checks, after the daemons stopped.

use std::collections::HashMap;
use std::path::Path;

use txn_log::{EtcdConfig, EtcdTxnLog, LogError, LogPartition, SledTxnLog, TxnLog, TxnState};

use super::history::{Outcome, Record};

/// Copies a directory tree.
pub fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        let target = to.join(e.file_name());
        if e.file_type()?.is_dir() {
            copy_dir(&e.path(), &target)?;
        } else {
            std::fs::copy(e.path(), target)?;
        }
    }
    Ok(())
}

/// Audits a copy of the daemon's log in `copy` (`partitions` txn-log partitions) against the
/// history, adding findings to `h.log_findings`. `quiescent_ms`: the run ended this long after
/// the last fault healed and every client stopped, so no Prepare* may remain and no Ongoing
/// may be older than its timeout plus this slack.
pub async fn audit_log(
    copy: &Path,
    partitions: u32,
    now_unix_ms: i64,
    quiescent_slack_ms: i64,
    h: &mut Record,
) -> anyhow::Result<()> {
    let path = copy.to_path_buf();
    let log = tokio::task::spawn_blocking(move || SledTxnLog::open_path(path)).await??;
    let r = audit_records(&log, partitions, now_unix_ms, quiescent_slack_ms, h).await;
    tokio::task::spawn_blocking(move || log.shutdown()).await?;
    r
}

/// Audits the log in etcd at `endpoints` (prefix `/txn-coordinator`, the daemons' default)
/// like [`audit_log`].
pub async fn audit_etcd(
    endpoints: Vec<String>,
    partitions: u32,
    now_unix_ms: i64,
    quiescent_slack_ms: i64,
    h: &mut Record,
) -> anyhow::Result<()> {
    let log = etcd_log(endpoints).await?;
    audit_records(&log, partitions, now_unix_ms, quiescent_slack_ms, h).await
}

/// A reader of the daemons' log in etcd (default prefix, 5 s requests).
pub async fn etcd_log(endpoints: Vec<String>) -> anyhow::Result<EtcdTxnLog> {
    Ok(EtcdTxnLog::connect(EtcdConfig::new(endpoints)).await?)
}

/// The (partition, transactional id, state) of every Prepare* record in `log`.
pub async fn prepared(log: &dyn TxnLog, partitions: u32) -> anyhow::Result<Vec<String>> {
    let mut out = Vec::new();
    for p in 0..partitions {
        for (id, r) in &log.load(LogPartition(p)).await?.records {
            if r.state.is_prepare() {
                out.push(format!("partition {p} {}: {}", id.as_str(), r.state));
            }
        }
    }
    Ok(out)
}

/// Audits every record `log` loads for partitions `0..partitions` against the history (the
/// checks of [`audit_log`]), adding findings to `h.log_findings`.
pub async fn audit_records(
    log: &dyn TxnLog,
    partitions: u32,
    now_unix_ms: i64,
    quiescent_slack_ms: i64,
    h: &mut Record,
) -> anyhow::Result<()> {
    // the last transaction of each tid and the highest epoch issued per pid
    let mut last_txn: HashMap<&str, usize> = HashMap::new();
    for t in &h.txns {
        last_txn.insert(t.tid.as_str(), t.id);
    }
    let mut max_issued: HashMap<i64, i16> = HashMap::new();
    for is in &h.issues {
        let e = max_issued.entry(is.pid).or_insert(is.epoch);
        *e = (*e).max(is.epoch);
    }
    let mut findings: Vec<(&'static str, String)> = Vec::new();
    let mut checked = 0;
    for p in 0..partitions {
        // The codec refuses a record that is no persistable state
        // (`TxnRecord::check_persistable`): that is an I13 finding, not a harness error.
        let loaded = match log.load(LogPartition(p)).await {
            Ok(loaded) => loaded,
            Err(e @ LogError::Corrupt { .. }) => {
                findings.push(("I13", format!("partition {p} refused on load: {e}")));
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        for (id, r) in &loaded.records {
            checked += 1;
            let who = format!("partition {p} {}: {r:?}", id.as_str());
            if r.timeout_ms <= 0 {
                findings.push(("I13", format!("non-positive timeout: {who}")));
            }
            if r.state.is_prepare() {
                findings.push(("I11", format!("decision never completed: {who}")));
            }
            if r.state == TxnState::Ongoing
                && now_unix_ms - r.txn_start_ms > i64::from(r.timeout_ms) + quiescent_slack_ms
            {
                findings.push((
                    "I11",
                    format!("Ongoing past its timeout, not reaped: {who}"),
                ));
            }
            if matches!(r.state, TxnState::CompleteAbort | TxnState::PrepareAbort)
                && let Some(&t) = last_txn.get(id.as_str())
                && h.txns[t].outcome == Outcome::Committed
                && max_issued
                    .get(&r.producer_id.0)
                    .is_some_and(|&e| r.producer_epoch.0 <= e)
            {
                findings.push((
                    "I12",
                    format!(
                        "last transaction (txn {t}) was an acknowledged commit, log says {}: \
                         {who}",
                        r.state
                    ),
                ));
            }
        }
    }
    h.log_records_checked += checked;
    h.log_findings.extend(findings);
    Ok(())
}
