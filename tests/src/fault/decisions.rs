//! I10: each transaction is decided once, and COMPLETE_* is written only after every
//! participant acknowledged its marker.
//!
//! Two sources, both read after the run:
//!
//! - **the participants' logs**: every partition of the workload topic and W3's topics read in
//!   full with read_uncommitted ([`read_logs`]), control batches included. Per partition and
//!   producer id, a marker closes the data batches written since the previous marker of that
//!   producer (as `markers::participant` does), so every value gets the decision that closed
//!   it; values are matched per topic to the W1/W2/W5 or W3 transactions that wrote them.
//!   `__consumer_offsets` is not read: its Complete* partitions are counted, not judged.
//! - **the coordinator's transition trail**: the daemon logs one `txn_transition` event per
//!   persisted record (`coordinator::shell::TRANSITION_TARGET`; the sled log keeps only the
//!   latest record per id). [`parse_trail`] reads them back from its stderr.
//!
//! [`check`] then finds:
//!
//! - `I10 decided-twice`: the values of one client transaction closed by COMMIT on one
//!   partition and ABORT on another; under TV2 (every decision has its own epoch), markers
//!   of one (pid, epoch) with both results; or the coordinator persisting both decisions
//!   (Prepare* / Complete*) for one transaction, keyed by (id, pid, epoch) under TV2 and
//!   (id, pid, epoch, start time) under TV1, where the epoch stays across transactions.
//! - `I10 wrong-decision`: a value of an acknowledged commit closed by ABORT, or of a
//!   definitely aborted transaction closed by COMMIT.
//! - `I10 complete-before-ack`: a persisted Complete* whose Prepare* named a partition that,
//!   read in full, holds no marker of that (pid, epoch, result) appended between the
//!   transaction's start and the moment the Complete* append was issued. The marker's
//!   timestamp is the broker's wall clock when it appended it, before it answered; the
//!   daemon's times are its wall clock; both run on one machine. A Complete* issued after
//!   the partition's read began is not judged (its marker may lie past the high watermark
//!   the read stopped at); the harness stops the daemon before it reads, so a run has none.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{BrokerId, FetchRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::RecordBatchDecoder;
use txn_log::TxnState;

use super::checker::Anomaly;
use super::client::{ClusterView, loopback_pool};
use super::history::{Outcome, Record};

/// A COMMIT or ABORT control batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Marker {
    /// Offset in the partition.
    pub offset: i64,
    /// Producer id.
    pub pid: i64,
    /// Producer epoch the marker carries.
    pub epoch: i16,
    /// COMMIT (true) or ABORT.
    pub commit: bool,
    /// Coordinator epoch in the control record.
    pub coordinator_epoch: i32,
    /// The batch timestamp: the broker's wall clock (ms) when it appended the marker.
    pub timestamp_ms: i64,
}

/// One batch of a partition's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogItem {
    /// A transactional data batch.
    Data {
        /// Base offset.
        offset: i64,
        /// Producer id.
        pid: i64,
        /// Producer epoch.
        epoch: i16,
        /// Its values.
        values: Vec<String>,
    },
    /// A transaction marker.
    Marker(Marker),
}

/// A persisted coordinator record from the transition trail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    /// Transactional id.
    pub tid: String,
    /// Producer id of the record.
    pub pid: i64,
    /// Producer epoch of the record.
    pub epoch: i16,
    /// The persisted state.
    pub state: TxnState,
    /// Partitions of the transaction, as (topic, partition).
    pub partitions: Vec<(String, i32)>,
    /// Start of the transaction (ms since the Unix epoch, `-1` if none).
    pub txn_start_ms: i64,
    /// The client's transaction version.
    pub txn_version: u8,
    /// Wall clock (ms) when the append was handed to the log.
    pub issued_ms: i64,
    /// Wall clock (ms) when the log acknowledged it.
    pub durable_ms: i64,
}

/// What the I10 check reads: the logs of the workload topic and W3's topics, and the
/// coordinator's trail.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    /// The W1/W2/W5 topic (its values are those of `Record::txns`).
    pub topic: String,
    /// W3's (input, output) topics, when W3 ran (their values are those of `Record::w3`).
    pub w3_topics: Option<(String, String)>,
    /// Partitions read in full, as (topic, partition), in log order.
    pub logs: BTreeMap<(String, i32), Vec<LogItem>>,
    /// Partitions that could not be read in full, with the reason.
    pub unread: Vec<((String, i32), String)>,
    /// Wall clock (ms) when the read of each partition began: a Complete* issued later may
    /// have its markers past the high watermark that read stopped at.
    pub read_from_ms: BTreeMap<(String, i32), i64>,
    /// Persisted records, in the order the daemon logged them.
    pub transitions: Vec<Transition>,
    /// Trail lines that did not parse.
    pub unparsed: usize,
}

/// What [`check`] looked at.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counts {
    /// Markers read from the partitions.
    pub markers: usize,
    /// Markers per topic read.
    pub markers_by_topic: BTreeMap<String, usize>,
    /// Client transactions with at least one value closed by a marker.
    pub txns: usize,
    /// Coordinator transitions parsed from the trail.
    pub transitions: usize,
    /// Complete* records checked against the participants' markers.
    pub completes: usize,
    /// (Complete*, partition) pairs checked.
    pub complete_partitions: usize,
    /// Complete* records without a matching Prepare* in the trail (not checkable).
    pub unmatched_completes: usize,
    /// (Complete*, partition) pairs on partitions not read in full (`__consumer_offsets`'s,
    /// or unread ones): not judged.
    pub unjudged_partitions: usize,
    /// (Complete*, partition) pairs issued after the partition's read began: not judged (the
    /// harness stops the daemon before reading, so a run has none).
    pub decided_after_read: usize,
}

fn sb(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_owned())
}

/// Decodes the record batches of one fetch; returns the batches and the offset after them.
pub fn decode_items(records: &Bytes, from: i64) -> Result<(Vec<LogItem>, i64), String> {
    let mut buf = records.clone();
    let sets = RecordBatchDecoder::decode_all(&mut buf).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    let mut next = from;
    for set in sets {
        let (Some(first), Some(last)) = (set.records.first(), set.records.last()) else {
            continue;
        };
        next = next.max(last.offset + 1);
        if last.offset < from || !first.transactional {
            continue;
        }
        if first.control {
            let key = first.key.as_deref().unwrap_or_default();
            let value = first.value.as_deref().unwrap_or_default();
            let kind = (key.len() >= 4).then(|| i16::from_be_bytes([key[2], key[3]]));
            let coordinator_epoch = if value.len() >= 6 {
                i32::from_be_bytes([value[2], value[3], value[4], value[5]])
            } else {
                -1
            };
            if let Some(k @ (0 | 1)) = kind {
                out.push(LogItem::Marker(Marker {
                    offset: first.offset,
                    pid: first.producer_id,
                    epoch: first.producer_epoch,
                    commit: k == 1,
                    coordinator_epoch,
                    timestamp_ms: first.timestamp,
                }));
            }
            continue;
        }
        out.push(LogItem::Data {
            offset: first.offset,
            pid: first.producer_id,
            epoch: first.producer_epoch,
            values: set
                .records
                .iter()
                .map(|r| {
                    String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned()
                })
                .collect(),
        });
    }
    Ok((out, next))
}

/// Reads every partition of each view's topic from offset 0 to its high watermark with
/// read_uncommitted (Fetch v11, isolation level 0), control batches included.
pub async fn read_logs(views: &[&ClusterView], within: Duration) -> Observed {
    let mut pool = loopback_pool("i10-reader", Duration::from_millis(1500));
    let mut obs = Observed::default();
    let end = Instant::now() + within;
    for view in views {
        for (&p, &addr) in &view.leaders {
            let mut items = Vec::new();
            let mut pos = 0i64;
            let mut hw = None;
            let read_from = unix_ms();
            let mut last_err = String::new();
            while hw.is_none_or(|hw| pos < hw) && Instant::now() < end {
                let req = FetchRequest::default()
                    .with_replica_id(BrokerId(-1))
                    .with_max_wait_ms(0)
                    .with_min_bytes(0)
                    .with_max_bytes(8 << 20)
                    .with_isolation_level(0)
                    .with_topics(vec![
                        FetchTopic::default()
                            .with_topic(TopicName(sb(&view.topic)))
                            .with_partitions(vec![
                                FetchPartition::default()
                                    .with_partition(p)
                                    .with_fetch_offset(pos)
                                    .with_partition_max_bytes(8 << 20),
                            ]),
                    ]);
                let part = match pool.call(addr, &req, 11).await {
                    Ok(r) => r
                        .responses
                        .into_iter()
                        .next()
                        .and_then(|t| t.partitions.into_iter().next()),
                    Err(e) => {
                        last_err = e;
                        None
                    }
                };
                let Some(part) = part.filter(|part| part.error_code == 0) else {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                };
                let h = *hw.get_or_insert(part.high_watermark);
                match decode_items(&part.records.unwrap_or_default(), pos) {
                    Ok((batch, next)) if next > pos || pos >= h => {
                        items.extend(batch);
                        pos = next;
                    }
                    Ok(_) => {
                        last_err = format!("no progress at offset {pos} below {h}");
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                    Err(e) => {
                        last_err = e;
                        break;
                    }
                }
            }
            if hw.is_some_and(|hw| pos >= hw) {
                obs.logs.insert((view.topic.clone(), p), items);
                obs.read_from_ms.insert((view.topic.clone(), p), read_from);
            } else {
                obs.unread.push(((view.topic.clone(), p), last_err));
            }
        }
    }
    obs
}

fn unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

fn parse_state(s: &str) -> Option<TxnState> {
    TxnState::ALL.into_iter().find(|st| st.name() == s)
}

/// Splits `key=value key="quoted \" value" ...` into pairs.
fn fields(s: &str) -> HashMap<&str, String> {
    let mut out = HashMap::new();
    let mut rest = s.trim_start();
    while let Some(eq) = rest.find('=') {
        let key = rest[..eq].trim();
        let after = &rest[eq + 1..];
        let (value, tail) = if let Some(q) = after.strip_prefix('"') {
            let mut v = String::new();
            let mut chars = q.char_indices();
            let mut end = q.len();
            while let Some((i, c)) = chars.next() {
                match c {
                    '\\' => {
                        if let Some((_, n)) = chars.next() {
                            v.push(n);
                        }
                    }
                    '"' => {
                        end = i + 1;
                        break;
                    }
                    c => v.push(c),
                }
            }
            (v, &q[end..])
        } else {
            let end = after.find(' ').unwrap_or(after.len());
            (after[..end].to_owned(), &after[end..])
        };
        out.insert(key, value);
        rest = tail.trim_start();
    }
    out
}

/// Parses the `txn_transition` events of a daemon's stderr (plain `tracing-subscriber`
/// format). Returns the transitions in order and the number of trail lines that did not
/// parse. Tombstones are skipped.
pub fn parse_trail(text: &str) -> (Vec<Transition>, usize) {
    let marker = format!(" {}: persisted ", coordinator::shell::TRANSITION_TARGET);
    let mut out = Vec::new();
    let mut bad = 0;
    for line in text.lines() {
        let Some(at) = line.find(&marker) else {
            continue;
        };
        let f = fields(&line[at + marker.len()..]);
        if f.get("state").map(String::as_str) == Some("Tombstone") {
            continue;
        }
        let t = (|| {
            let partitions = f
                .get("partitions")?
                .split(',')
                .filter(|s| !s.is_empty())
                .map(|tp| {
                    let (t, p) = tp.rsplit_once(':')?;
                    Some((t.to_owned(), p.parse().ok()?))
                })
                .collect::<Option<Vec<_>>>()?;
            Some(Transition {
                tid: f.get("transactional_id")?.clone(),
                pid: f.get("producer_id")?.parse().ok()?,
                epoch: f.get("producer_epoch")?.parse().ok()?,
                state: parse_state(f.get("state")?)?,
                partitions,
                txn_start_ms: f.get("txn_start_ms")?.parse().ok()?,
                txn_version: f.get("txn_version")?.parse().ok()?,
                issued_ms: f.get("issued_ms")?.parse().ok()?,
                durable_ms: f.get("durable_ms")?.parse().ok()?,
            })
        })();
        match t {
            Some(t) => out.push(t),
            None => bad += 1,
        }
    }
    (out, bad)
}

/// Reads the trail from the daemon's stderr file (one run's daemon only).
pub fn load_trail(path: &Path, obs: &mut Observed) -> std::io::Result<()> {
    let bytes = std::fs::read(path)?;
    let (t, bad) = parse_trail(&String::from_utf8_lossy(&bytes));
    obs.transitions = t;
    obs.unparsed = bad;
    Ok(())
}

/// Reads the trails of several daemons sharing one log (cluster mode) and merges them in the
/// order the records became durable (`durable_ms`, then file order): a Complete* written by
/// the daemon that took a partition over follows the Prepare* its previous owner wrote.
pub fn load_trails(paths: &[std::path::PathBuf], obs: &mut Observed) -> std::io::Result<()> {
    let mut all = Vec::new();
    let mut bad = 0;
    for path in paths {
        let bytes = std::fs::read(path)?;
        let (t, b) = parse_trail(&String::from_utf8_lossy(&bytes));
        all.extend(t);
        bad += b;
    }
    all.sort_by_key(|t| t.durable_ms);
    obs.transitions = all;
    obs.unparsed = bad;
    Ok(())
}

fn is_commit(s: TxnState) -> bool {
    matches!(s, TxnState::PrepareCommit | TxnState::CompleteCommit)
}

/// The last markers of `pid` in a partition's log, for an anomaly's description.
fn markers_of(items: &[LogItem], pid: i64) -> String {
    let all: Vec<String> = items
        .iter()
        .filter_map(|i| match i {
            LogItem::Marker(m) if m.pid == pid => Some(format!(
                "{} epoch {} at offset {} ({} ms)",
                decision(m.commit),
                m.epoch,
                m.offset,
                m.timestamp_ms
            )),
            _ => None,
        })
        .collect();
    let skip = all.len().saturating_sub(4);
    if all.is_empty() {
        "none".to_owned()
    } else {
        all[skip..].join(", ")
    }
}

fn decision(commit: bool) -> &'static str {
    if commit { "COMMIT" } else { "ABORT" }
}

/// Checks I10 against a run's record; returns the anomalies and what was checked.
pub fn check(h: &Record) -> (Vec<(Anomaly, String)>, Counts) {
    let obs = &h.decisions;
    let mut found = Vec::new();
    let mut n = Counts {
        transitions: obs.transitions.len(),
        ..Counts::default()
    };

    // Participants: which marker closed each value, keyed by (topic, value).
    let mut closed: HashMap<(&str, &str), (i32, Marker)> = HashMap::new();
    // A marker with its (topic, partition).
    type Placed<'a> = (&'a str, i32, Marker);
    let mut by_pe: BTreeMap<(i64, i16), Vec<Placed<'_>>> = BTreeMap::new();
    // The markers of each (topic, partition, pid, epoch, result) in timestamp order (log order
    // among equal timestamps): the Complete* check below looks up the first one at or after a
    // transaction's start, instead of scanning the partition's whole log for every Complete*.
    type MarkerKey<'a> = (&'a str, i32, i64, i16, bool);
    let mut markers_by_key: HashMap<MarkerKey<'_>, Vec<&Marker>> = HashMap::new();
    for ((topic, p), items) in &obs.logs {
        let p = *p;
        let mut open: HashMap<i64, Vec<&str>> = HashMap::new();
        for item in items {
            match item {
                LogItem::Data { pid, values, .. } => {
                    open.entry(*pid)
                        .or_default()
                        .extend(values.iter().map(String::as_str));
                }
                LogItem::Marker(m) => {
                    n.markers += 1;
                    *n.markers_by_topic.entry(topic.clone()).or_default() += 1;
                    by_pe
                        .entry((m.pid, m.epoch))
                        .or_default()
                        .push((topic, p, *m));
                    markers_by_key
                        .entry((topic, p, m.pid, m.epoch, m.commit))
                        .or_default()
                        .push(m);
                    for v in open.remove(&m.pid).unwrap_or_default() {
                        closed.insert((topic, v), (p, *m));
                    }
                }
            }
        }
    }
    for ms in markers_by_key.values_mut() {
        ms.sort_by_key(|m| m.timestamp_ms);
    }
    // W1/W2/W5 values are on the workload topic, W3's on its input and output topics.
    let (w3_in, w3_out) = obs
        .w3_topics
        .as_ref()
        .map_or(("", ""), |(i, o)| (i.as_str(), o.as_str()));
    let txns = (h.txns.iter().map(|t| (obs.topic.as_str(), t)))
        .chain(h.w3.inputs.iter().map(|t| (w3_in, t)))
        .chain(h.w3.transforms.iter().map(|t| (w3_out, &t.txn)));
    for (topic, t) in txns {
        let got: Vec<(i32, &str, Marker)> = t
            .writes
            .iter()
            .filter_map(|(_, v)| {
                closed
                    .get(&(topic, v.as_str()))
                    .map(|(p, m)| (*p, v.as_str(), *m))
            })
            .collect();
        if got.is_empty() {
            continue;
        }
        n.txns += 1;
        let show = |commit: bool| -> Vec<String> {
            got.iter()
                .filter(|(_, _, m)| m.commit == commit)
                .map(|(p, v, m)| format!("{v:?} on {topic}-{p} by the marker at {}", m.offset))
                .collect()
        };
        let (commits, aborts) = (show(true), show(false));
        let who = format!(
            "txn {} ({} pid {} epoch {}, {:?})",
            t.id, t.tid, t.pid, t.epoch, t.outcome
        );
        if !commits.is_empty() && !aborts.is_empty() {
            found.push((
                Anomaly::DecidedTwice,
                format!("{who}: COMMIT closed {commits:?}, ABORT closed {aborts:?}"),
            ));
        }
        if t.outcome == Outcome::Committed && !aborts.is_empty() {
            found.push((
                Anomaly::WrongDecision,
                format!("{who}: acknowledged commit, but ABORT closed {aborts:?}"),
            ));
        }
        if t.outcome == Outcome::Aborted && !commits.is_empty() {
            found.push((
                Anomaly::WrongDecision,
                format!("{who}: definitely not committed, but COMMIT closed {commits:?}"),
            ));
        }
    }

    // Under TV2 a (pid, epoch) names one decision: its markers must agree.
    let tv2: BTreeSet<(i64, i16)> = obs
        .transitions
        .iter()
        .filter(|t| t.state.is_prepare() && t.txn_version >= 2)
        .map(|t| (t.pid, t.epoch))
        .collect();
    for (pe, ms) in &by_pe {
        if tv2.contains(pe)
            && ms.iter().any(|(_, _, m)| m.commit)
            && ms.iter().any(|(_, _, m)| !m.commit)
        {
            let list: Vec<String> = ms
                .iter()
                .map(|(t, p, m)| format!("{} on {t}-{p} at {}", decision(m.commit), m.offset))
                .collect();
            found.push((
                Anomaly::DecidedTwice,
                format!("TV2 pid {} epoch {}: markers {list:?}", pe.0, pe.1),
            ));
        }
    }

    // Wall-clock times as offsets into the run, to place them among the faults.
    let at = |ms: i64| -> String {
        if h.start_unix_ms > 0 {
            format!(" (+{:.3} s)", (ms - h.start_unix_ms) as f64 / 1000.0)
        } else {
            String::new()
        }
    };
    // Coordinator: one decision per transaction; Complete* only after every marker.
    type Key<'a> = (&'a str, i64, i16, i64);
    let mut decided: BTreeMap<Key<'_>, Vec<&Transition>> = BTreeMap::new();
    let mut last_prepare: HashMap<&str, &Transition> = HashMap::new();
    let key = |t: &Transition| -> (i64, i16, i64) {
        // TV1 keeps the epoch across transactions: the start time tells them apart.
        let start = if t.txn_version >= 2 {
            0
        } else {
            t.txn_start_ms
        };
        (t.pid, t.epoch, start)
    };
    for t in &obs.transitions {
        let (prepare, commit) = match t.state {
            TxnState::PrepareCommit => (t, true),
            TxnState::PrepareAbort => (t, false),
            TxnState::CompleteCommit | TxnState::CompleteAbort => {
                let commit = t.state == TxnState::CompleteCommit;
                match last_prepare.get(t.tid.as_str()) {
                    Some(p) if p.txn_start_ms == t.txn_start_ms => (*p, commit),
                    _ => {
                        n.unmatched_completes += 1;
                        continue;
                    }
                }
            }
            _ => continue,
        };
        if t.state.is_prepare() {
            last_prepare.insert(t.tid.as_str(), t);
        }
        let (pid, epoch, start) = key(prepare);
        let earlier = decided
            .entry((t.tid.as_str(), pid, epoch, start))
            .or_default();
        if let Some(other) = earlier.iter().find(|o| is_commit(o.state) != commit) {
            found.push((
                Anomaly::DecidedTwice,
                format!(
                    "{} pid {pid} epoch {epoch} (started {} ms): the coordinator persisted {} \
                     (issued at {} ms) after {} (issued at {} ms)",
                    t.tid, prepare.txn_start_ms, t.state, t.issued_ms, other.state, other.issued_ms
                ),
            ));
        }
        earlier.push(t);
        if t.state.is_prepare() {
            continue;
        }
        n.completes += 1;
        for (topic, p) in &prepare.partitions {
            let tp = (topic.clone(), *p);
            let Some(items) = obs.logs.get(&tp) else {
                n.unjudged_partitions += 1;
                continue;
            };
            let read_from = obs.read_from_ms.get(&tp).copied();
            if read_from.is_some_and(|r| t.issued_ms >= r) {
                n.decided_after_read += 1;
                continue;
            }
            n.complete_partitions += 1;
            let first = markers_by_key
                .get(&(topic.as_str(), *p, prepare.pid, prepare.epoch, commit))
                .and_then(|ms| {
                    let from = ms.partition_point(|m| m.timestamp_ms < prepare.txn_start_ms);
                    ms.get(from).copied()
                });
            let what = || {
                format!(
                    "{} pid {pid} epoch {epoch}: {} issued at {} ms{} (durable at {} ms; {} \
                     issued at {} ms{}, transaction started at {} ms{})",
                    t.tid,
                    t.state,
                    t.issued_ms,
                    at(t.issued_ms),
                    t.durable_ms,
                    prepare.state,
                    prepare.issued_ms,
                    at(prepare.issued_ms),
                    prepare.txn_start_ms,
                    at(prepare.txn_start_ms),
                )
            };
            match first {
                None => found.push((
                    Anomaly::CompleteBeforeAck,
                    format!(
                        "{}, but {topic}-{p} holds no {} marker (read from {} ms{}); \
                         markers of pid {pid} there: {}",
                        what(),
                        decision(commit),
                        read_from.unwrap_or(-1),
                        read_from.map(at).unwrap_or_default(),
                        markers_of(items, pid)
                    ),
                )),
                Some(m) if m.timestamp_ms > t.issued_ms => found.push((
                    Anomaly::CompleteBeforeAck,
                    format!(
                        "{}, but the {} marker on {topic}-{p} (offset {}) was appended at \
                         {} ms",
                        what(),
                        decision(commit),
                        m.offset,
                        m.timestamp_ms
                    ),
                )),
                Some(_) => {}
            }
        }
    }
    (found, n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fault::history::TxnOp;

    const T0: i64 = 1_000_000;

    fn fq(p: i32) -> (String, i32) {
        ("fq".to_owned(), p)
    }

    fn data(offset: i64, pid: i64, v: &str) -> LogItem {
        LogItem::Data {
            offset,
            pid,
            epoch: 0,
            values: vec![v.to_owned()],
        }
    }

    fn marker(offset: i64, pid: i64, epoch: i16, commit: bool, ts: i64) -> LogItem {
        LogItem::Marker(Marker {
            offset,
            pid,
            epoch,
            commit,
            coordinator_epoch: 0,
            timestamp_ms: ts,
        })
    }

    fn txn(id: usize, pid: i64, outcome: Outcome, writes: &[(i32, &str)]) -> TxnOp {
        TxnOp {
            id,
            process: 0,
            tid: format!("t{pid}"),
            pid,
            epoch: 0,
            writes: writes.iter().map(|(p, v)| (*p, (*v).to_owned())).collect(),
            outcome,
            invoke_ms: 0,
            complete_ms: 1,
            note: String::new(),
        }
    }

    fn tr(tid: &str, state: TxnState, epoch: i16, parts: &[i32], issued: i64) -> Transition {
        Transition {
            tid: tid.to_owned(),
            pid: 7,
            epoch,
            state,
            partitions: parts.iter().map(|p| ("fq".to_owned(), *p)).collect(),
            txn_start_ms: T0,
            txn_version: 2,
            issued_ms: issued,
            durable_ms: issued + 2,
        }
    }

    /// pid 7 commits {a on 0, b on 1} at epoch 1 (markers at T0+10), then aborts {c on 0}
    /// at epoch 2; the coordinator trail says the same.
    fn base() -> Record {
        let mut h = Record {
            txns: vec![
                txn(0, 7, Outcome::Committed, &[(0, "a"), (1, "b")]),
                txn(1, 7, Outcome::Aborted, &[(0, "c")]),
            ],
            ..Record::default()
        };
        h.decisions.topic = "fq".into();
        logs(&mut h, 1, 2);
        h.decisions.transitions = vec![
            tr("t7", TxnState::PrepareCommit, 1, &[0, 1], T0 + 5),
            tr("t7", TxnState::CompleteCommit, 1, &[], T0 + 12),
            Transition {
                txn_start_ms: T0 + 20,
                ..tr("t7", TxnState::PrepareAbort, 2, &[0], T0 + 25)
            },
            Transition {
                txn_start_ms: T0 + 20,
                ..tr("t7", TxnState::CompleteAbort, 2, &[], T0 + 31)
            },
        ];
        h
    }

    /// The partition logs of `base`'s two transactions: "a" and "b" committed at
    /// `commit_epoch` on partitions 0 and 1, "c" aborted at `abort_epoch` on partition 0.
    fn logs(h: &mut Record, commit_epoch: i16, abort_epoch: i16) {
        h.decisions.logs.insert(
            fq(0),
            vec![
                data(0, 7, "a"),
                marker(1, 7, commit_epoch, true, T0 + 10),
                data(2, 7, "c"),
                marker(3, 7, abort_epoch, false, T0 + 30),
            ],
        );
        h.decisions.logs.insert(
            fq(1),
            vec![data(0, 7, "b"), marker(1, 7, commit_epoch, true, T0 + 11)],
        );
    }

    fn count(found: &[(Anomaly, String)], a: Anomaly) -> usize {
        found.iter().filter(|(x, _)| *x == a).count()
    }

    #[test]
    fn a_consistent_run_is_clean() {
        let (found, n) = check(&base());
        assert!(found.is_empty(), "{found:?}");
        assert_eq!(n.markers, 3);
        assert_eq!(n.txns, 2);
        assert_eq!((n.completes, n.complete_partitions), (2, 3));
        assert_eq!(n.unmatched_completes, 0);
    }

    #[test]
    fn a_transaction_committed_on_one_partition_and_aborted_on_another_is_found() {
        let mut h = base();
        h.decisions.logs.insert(
            fq(1),
            vec![data(0, 7, "b"), marker(1, 7, 1, false, T0 + 11)],
        );
        let (found, _) = check(&h);
        // the values disagree, the TV2 (pid, epoch) markers disagree, the commit was told to
        // the client, and partition 1 lacks the COMMIT marker the CompleteCommit needs
        assert_eq!(count(&found, Anomaly::DecidedTwice), 2, "{found:?}");
        assert_eq!(count(&found, Anomaly::WrongDecision), 1, "{found:?}");
        assert_eq!(count(&found, Anomaly::CompleteBeforeAck), 1, "{found:?}");
    }

    #[test]
    fn tv1_reuses_epochs_and_values_still_get_their_own_marker() {
        // TV1: both transactions at epoch 0, one committed, the next aborted: clean
        let mut h = base();
        for t in &mut h.decisions.transitions {
            t.epoch = 0;
            t.txn_version = 1;
        }
        logs(&mut h, 0, 0);
        let (found, n) = check(&h);
        assert!(found.is_empty(), "{found:?}");
        assert_eq!(n.completes, 2);
        // the aborted transaction's value closed by a COMMIT: wrong decision
        h.decisions.logs.get_mut(&fq(0)).expect("p0")[3] = marker(3, 7, 0, true, T0 + 30);
        let (found, _) = check(&h);
        assert_eq!(count(&found, Anomaly::WrongDecision), 1, "{found:?}");
        // ... and the CompleteAbort has no ABORT marker after its start
        assert_eq!(count(&found, Anomaly::CompleteBeforeAck), 1, "{found:?}");
        assert_eq!(count(&found, Anomaly::DecidedTwice), 0, "{found:?}");
    }

    #[test]
    fn a_complete_issued_before_a_marker_was_appended_is_found() {
        let mut h = base();
        // partition 1 appended its COMMIT marker after the CompleteCommit was issued
        h.decisions
            .logs
            .insert(fq(1), vec![data(0, 7, "b"), marker(1, 7, 1, true, T0 + 13)]);
        let (found, _) = check(&h);
        assert_eq!(count(&found, Anomaly::CompleteBeforeAck), 1, "{found:?}");
        assert_eq!(found.len(), 1, "{found:?}");
        // a marker of the same pid, epoch and result from before the transaction started (an
        // earlier TV1 transaction's) does not count for it
        let mut h = base();
        h.decisions.logs.insert(
            fq(1),
            vec![
                marker(0, 7, 1, true, T0 - 5),
                data(1, 7, "b"),
                marker(2, 7, 1, true, T0 + 13),
            ],
        );
        let (found, _) = check(&h);
        assert_eq!(count(&found, Anomaly::CompleteBeforeAck), 1, "{found:?}");
        assert_eq!(found.len(), 1, "{found:?}");
        // a marker retried later does not hide an early one
        let mut h = base();
        h.decisions
            .logs
            .get_mut(&fq(1))
            .expect("p1")
            .push(marker(2, 7, 1, true, T0 + 50));
        assert!(check(&h).0.is_empty());
        // a partition not read in full is not judged
        let mut h = base();
        h.decisions.logs.remove(&fq(1));
        let (found, n) = check(&h);
        assert!(found.is_empty(), "{found:?}");
        assert_eq!(n.complete_partitions, 2);
    }

    #[test]
    fn a_coordinator_that_persists_both_decisions_is_found() {
        let mut h = base();
        // the reaper's abort lands at the epoch the commit already prepared
        h.decisions
            .transitions
            .insert(1, tr("t7", TxnState::PrepareAbort, 1, &[0, 1], T0 + 6));
        let (found, _) = check(&h);
        assert!(count(&found, Anomaly::DecidedTwice) >= 1, "{found:?}");
        // a Complete of the other kind than its Prepare
        let mut h = base();
        h.decisions.transitions[1].state = TxnState::CompleteAbort;
        let (found, _) = check(&h);
        assert_eq!(count(&found, Anomaly::DecidedTwice), 1, "{found:?}");
        // a Complete without its Prepare in the trail is counted, not judged
        let mut h = base();
        h.decisions.transitions.remove(0);
        let (found, n) = check(&h);
        assert!(found.is_empty(), "{found:?}");
        assert_eq!(n.unmatched_completes, 1);
    }

    #[test]
    fn w3_topics_are_judged_and_consumer_offsets_counted_unjudged() {
        // pid 8 (W3 input producer) commits "s0" on w3-in 0; the same value on w3-out is
        // of another transaction (pid 9, a transformer) that aborted
        let mut h = base();
        h.decisions.w3_topics = Some(("w3-in".into(), "w3-out".into()));
        h.w3.inputs = vec![txn(0, 8, Outcome::Committed, &[(0, "s0")])];
        h.w3.transforms = vec![crate::fault::history::TransformOp {
            txn: txn(0, 9, Outcome::Aborted, &[(0, "s0")]),
            partition: 0,
            from: 0,
            to: 1,
            inputs: vec![(0, "s0".into())],
        }];
        h.decisions.logs.insert(
            ("w3-in".into(), 0),
            vec![data(0, 8, "s0"), marker(1, 8, 0, true, T0 + 40)],
        );
        h.decisions.logs.insert(
            ("w3-out".into(), 0),
            vec![data(0, 9, "s0"), marker(1, 9, 0, false, T0 + 41)],
        );
        h.decisions.transitions.extend([
            Transition {
                pid: 8,
                partitions: vec![("w3-in".into(), 0)],
                ..tr("t8", TxnState::PrepareCommit, 0, &[], T0 + 35)
            },
            Transition {
                pid: 8,
                ..tr("t8", TxnState::CompleteCommit, 0, &[], T0 + 42)
            },
            Transition {
                pid: 9,
                partitions: vec![("w3-out".into(), 0), ("__consumer_offsets".into(), 3)],
                ..tr("t9", TxnState::PrepareAbort, 0, &[], T0 + 36)
            },
            Transition {
                pid: 9,
                ..tr("t9", TxnState::CompleteAbort, 0, &[], T0 + 43)
            },
        ]);
        let (found, n) = check(&h);
        assert!(found.is_empty(), "{found:?}");
        assert_eq!(n.txns, 4);
        assert_eq!(n.markers_by_topic.get("w3-out"), Some(&1));
        assert_eq!((n.completes, n.complete_partitions), (4, 5));
        assert_eq!(n.unjudged_partitions, 1);
        // the committed input closed by ABORT on w3-in: wrong decision, and the
        // CompleteCommit has no COMMIT marker there
        h.decisions.logs.insert(
            ("w3-in".into(), 0),
            vec![data(0, 8, "s0"), marker(1, 8, 0, false, T0 + 40)],
        );
        let (found, _) = check(&h);
        assert_eq!(count(&found, Anomaly::WrongDecision), 1, "{found:?}");
        assert_eq!(count(&found, Anomaly::CompleteBeforeAck), 1, "{found:?}");
        assert_eq!(found.len(), 2, "{found:?}");
    }

    /// The I10 false alarm of `fault_late_decision`: a decision made after a partition's read began is not judged from that read
    /// (its markers may lie past the high watermark the read stopped at); one made before
    /// still is.
    #[test]
    fn a_complete_issued_after_the_read_began_is_not_judged() {
        let mut h = base();
        h.decisions.transitions.extend([
            Transition {
                txn_start_ms: T0 + 40,
                ..tr("t7", TxnState::PrepareAbort, 3, &[1], T0 + 45)
            },
            Transition {
                txn_start_ms: T0 + 40,
                ..tr("t7", TxnState::CompleteAbort, 3, &[], T0 + 60)
            },
        ]);
        // fq-1 has no ABORT marker of epoch 3: without read times, that is the anomaly
        let (found, _) = check(&h);
        assert_eq!(count(&found, Anomaly::CompleteBeforeAck), 1, "{found:?}");
        assert!(
            found[0]
                .1
                .contains("markers of pid 7 there: COMMIT epoch 1")
        );
        // fq-1 was read from T0 + 50, before the CompleteAbort was issued: not judged
        h.decisions.read_from_ms.insert(fq(0), T0 + 50);
        h.decisions.read_from_ms.insert(fq(1), T0 + 50);
        let (found, n) = check(&h);
        assert!(found.is_empty(), "{found:?}");
        assert_eq!((n.completes, n.complete_partitions), (3, 3));
        assert_eq!(n.decided_after_read, 1);
        // read from before the first CompleteCommit: that one is not judged either, and a
        // missing marker it needed goes unseen, as it must
        h.decisions.read_from_ms.insert(fq(1), T0 + 12);
        h.decisions.logs.insert(fq(1), vec![data(0, 7, "b")]);
        let (found, n) = check(&h);
        assert!(found.is_empty(), "{found:?}");
        assert_eq!(n.decided_after_read, 2);
        // ... but read from just after the CompleteCommit was issued, it is judged
        h.decisions.read_from_ms.insert(fq(1), T0 + 13);
        let (found, _) = check(&h);
        assert_eq!(count(&found, Anomaly::CompleteBeforeAck), 1, "{found:?}");
    }

    #[test]
    fn the_checker_reports_the_i10_classes() {
        let r = crate::fault::checker::check(&base());
        assert!(r.is_valid(), "{r}");
        assert_eq!((r.i10.markers, r.i10.completes), (3, 2));
        let mut h = base();
        h.decisions
            .logs
            .insert(fq(1), vec![data(0, 7, "b"), marker(1, 7, 1, true, T0 + 13)]);
        let r = crate::fault::checker::check(&h);
        assert_eq!(r.count(Anomaly::CompleteBeforeAck), 1, "{r}");
        assert!(r.to_string().contains("I10 complete-before-ack: 1"), "{r}");
    }

    #[test]
    fn fetched_batches_decode_into_data_and_markers() {
        use markers::participant::ControlBatch;
        use txn_log::{CoordinatorEpoch, ProducerEpoch, ProducerId, TxnResult};
        let values = ["x".to_owned(), "y".to_owned()];
        let mut log = Vec::new();
        log.extend_from_slice(&txn_testkit::wire::record_batch(
            Some((5, 3, 0)),
            true,
            &values,
        ));
        let control = ControlBatch {
            producer_id: ProducerId(5),
            producer_epoch: ProducerEpoch(4),
            coordinator_epoch: CoordinatorEpoch(9),
            result: TxnResult::Commit,
            base_offset: 2,
            partition_leader_epoch: 0,
            timestamp_ms: 123,
        };
        log.extend_from_slice(&control.encode().expect("encodes"));
        // an idempotent (non-transactional) batch is skipped
        log.extend_from_slice(&txn_testkit::wire::record_batch(
            Some((6, 0, 0)),
            false,
            &values,
        ));
        let (items, next) = decode_items(&Bytes::from(log), 0).expect("decodes");
        assert_eq!(
            items,
            [
                LogItem::Data {
                    offset: 0,
                    pid: 5,
                    epoch: 3,
                    values: values.to_vec()
                },
                LogItem::Marker(Marker {
                    offset: 2,
                    pid: 5,
                    epoch: 4,
                    commit: true,
                    coordinator_epoch: 9,
                    timestamp_ms: 123,
                }),
            ]
        );
        assert_eq!(next, 3);
    }

    #[test]
    fn the_trail_parses_the_daemon_format() {
        let text = "2026-12-03T09:40:00.123456Z  INFO txn_coordinator: listening\n\
            2026-12-03T09:40:01.000001Z DEBUG log_partition{partition=3}: txn_transition: \
            persisted transactional_id=\"w1-0\" producer_id=1000 producer_epoch=4 \
            state=PrepareCommit partitions=fq:0,fq:5 txn_start_ms=17 txn_version=2 \
            coordinator_epoch=1 issued_ms=20 durable_ms=23\n\
            2026-12-03T09:40:01.000002Z DEBUG log_partition{partition=3}: txn_transition: \
            persisted transactional_id=\"a \\\"b\\\"\" producer_id=1 producer_epoch=0 \
            state=Empty partitions= txn_start_ms=-1 txn_version=2 coordinator_epoch=1 \
            issued_ms=21 durable_ms=24\n\
            2026-12-03T09:40:01.000003Z DEBUG log_partition{partition=3}: txn_transition: \
            persisted transactional_id=\"gone\" state=Tombstone coordinator_epoch=1 \
            issued_ms=21 durable_ms=24\n\
            x txn_transition: persisted transactional_id=\"w1-0\" state=Bogus\n";
        let (t, bad) = parse_trail(text);
        assert_eq!(bad, 1);
        assert_eq!(t.len(), 2);
        assert_eq!(
            t[0],
            Transition {
                tid: "w1-0".into(),
                pid: 1000,
                epoch: 4,
                state: TxnState::PrepareCommit,
                partitions: vec![("fq".into(), 0), ("fq".into(), 5)],
                txn_start_ms: 17,
                txn_version: 2,
                issued_ms: 20,
                durable_ms: 23,
            }
        );
        assert_eq!(t[1].tid, "a \"b\"");
        assert!(t[1].partitions.is_empty());
    }
}
