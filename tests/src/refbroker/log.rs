//! One partition's durable log: a single append-only segment file of raw v2 record batches
//! (exactly the bytes a Fetch returns, base offsets assigned by the broker), mirrored in memory
//! with an index of batch positions.
//!
//! Durability is a group commit ([`Durability`]): an append is written to the file (the OS)
//! under the partition lock, in offset order, and returns at once; whoever needs it on disk
//! (an acks=all Produce, a WriteTxnMarkers request, an offset commit) then awaits
//! [`Durability::sync_through`] without the lock. One fdatasync on a blocking thread covers
//! every append written before it started, so concurrent appends share it. The high
//! watermark only advances over [`Durability::durable_end`]. With `--set log.flush=none`
//! ([`Flush::None`]) nothing is fsync'd: written data counts as durable (Kafka's default).
//!
//! On open the file is scanned batch by batch; a torn tail (a batch cut short by a crash, or
//! failing its checksum) is truncated away, as Kafka's log recovery does.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

use bytes::{Bytes, BytesMut};
use markers::participant::BatchHeader;

/// Where one batch sits in the log.
#[derive(Debug, Clone, Copy)]
pub(crate) struct IndexEntry {
    pub(crate) base_offset: i64,
    pub(crate) last_offset: i64,
    pub(crate) max_timestamp_ms: i64,
    pub(crate) pos: usize,
    pub(crate) len: usize,
}

/// When appends are forced to disk (`--set log.flush=fsync|none`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Flush {
    /// acks=all appends, markers and offset commits are fdatasync'd (group commit) before
    /// they are answered; the high watermark covers only synced data.
    #[default]
    Fsync,
    /// No fsync: appends are written to the OS in order and count as durable at once
    /// (Kafka's default; crash-consistent up to what the OS wrote back).
    None,
}

impl Flush {
    /// Parses a `log.flush` value.
    pub(crate) fn parse(v: &str) -> Option<Self> {
        match v {
            "fsync" => Some(Self::Fsync),
            "none" => Some(Self::None),
            _ => None,
        }
    }
}

/// The durable end of one partition log and its group commit.
#[derive(Debug)]
pub(crate) struct Durability {
    path: PathBuf,
    file: Arc<File>,
    flush: Flush,
    /// The log end offset once the last write reached the OS (set under the partition lock).
    written: AtomicI64,
    /// The log end offset the last successful fdatasync covers (`written` in [`Flush::None`]).
    durable: AtomicI64,
    /// Set after a failed write or fsync: what reached the file is unknown, so nothing more is
    /// appended or acknowledged (fail-stop; a restart recovers the valid prefix).
    poisoned: AtomicBool,
    /// Held by the one caller running an fdatasync; those queued behind it usually find their
    /// data covered by it when they get the lock.
    syncing: tokio::sync::Mutex<()>,
    /// Unit tests: the next fdatasync fails.
    #[cfg(test)]
    fail_next_sync: AtomicBool,
}

fn poisoned_error() -> std::io::Error {
    std::io::Error::other("partition log poisoned by an earlier failure")
}

impl Durability {
    /// The log end offset that is on disk (or, in [`Flush::None`], written to the OS).
    pub(crate) fn durable_end(&self) -> i64 {
        self.durable.load(Ordering::Acquire)
    }

    /// Whether a write or fsync failed.
    pub(crate) fn is_poisoned(&self) -> bool {
        self.poisoned.load(Ordering::Acquire)
    }

    fn poison(&self, e: &std::io::Error) {
        tracing::error!(path = %self.path.display(), error = %e, "partition log write failed; poisoned");
        self.poisoned.store(true, Ordering::Release);
    }

    fn wrote(&self, end: i64) {
        self.written.store(end, Ordering::Release);
        if self.flush == Flush::None {
            self.durable.store(end, Ordering::Release);
        }
    }

    /// Returns once every offset below `end` (already written) is on disk: the first caller
    /// runs one fdatasync on a blocking thread for everything written so far; callers that
    /// arrive meanwhile wait for it and are usually covered by it. Fails if the log is (or
    /// becomes) poisoned.
    pub(crate) async fn sync_through(&self, end: i64) -> std::io::Result<()> {
        if self.is_poisoned() {
            return Err(poisoned_error());
        }
        if self.durable_end() >= end {
            return Ok(());
        }
        let _one_at_a_time = self.syncing.lock().await;
        if self.is_poisoned() {
            return Err(poisoned_error());
        }
        if self.durable_end() >= end {
            return Ok(());
        }
        let target = self.written.load(Ordering::Acquire);
        if target < end {
            return Err(std::io::Error::other(format!(
                "sync through {end} asked, but only {target} is written"
            )));
        }
        #[cfg(test)]
        let injected = self.fail_next_sync.swap(false, Ordering::AcqRel);
        #[cfg(not(test))]
        let injected = false;
        let synced = if injected {
            Err(std::io::Error::other("injected fdatasync failure"))
        } else {
            let file = Arc::clone(&self.file);
            tokio::task::spawn_blocking(move || file.sync_data())
                .await
                .unwrap_or_else(|e| Err(std::io::Error::other(e)))
        };
        if let Err(e) = synced {
            self.poison(&e);
            return Err(e);
        }
        self.durable.fetch_max(target, Ordering::AcqRel);
        Ok(())
    }
}

/// A partition log.
#[derive(Debug)]
pub(crate) struct PartitionLog {
    path: PathBuf,
    file: Arc<File>,
    data: BytesMut,
    index: Vec<IndexEntry>,
    next_offset: i64,
    durability: Arc<Durability>,
}

impl PartitionLog {
    /// Opens (or creates) the segment at `path` and rebuilds the index. What is on the file at
    /// open counts as durable.
    pub(crate) fn open(path: &Path, flush: Flush) -> std::io::Result<Self> {
        let mut raw = Vec::new();
        if path.exists() {
            File::open(path)?.read_to_end(&mut raw)?;
        }
        let all = Bytes::from(raw);
        let mut index = Vec::new();
        let mut pos = 0usize;
        let mut next_offset = 0i64;
        while pos < all.len() {
            let rest = all.slice(pos..);
            match BatchHeader::parse(&rest) {
                Ok((h, len)) => {
                    index.push(IndexEntry {
                        base_offset: h.base_offset,
                        last_offset: h.last_offset(),
                        max_timestamp_ms: h.max_timestamp_ms,
                        pos,
                        len,
                    });
                    next_offset = h.last_offset() + 1;
                    pos += len;
                }
                Err(e) => {
                    tracing::warn!(path = %path.display(), pos, error = %e, "truncating torn log tail");
                    break;
                }
            }
        }
        let file = OpenOptions::new()
            .create(true)
            .read(true)
            .write(true)
            .truncate(false)
            .open(path)?;
        file.set_len(u64::try_from(pos).unwrap_or(u64::MAX))?;
        let mut file = file;
        use std::io::Seek;
        file.seek(std::io::SeekFrom::End(0))?;
        let mut data = BytesMut::with_capacity(pos);
        data.extend_from_slice(&all[..pos]);
        let file = Arc::new(file);
        let durability = Arc::new(Durability {
            path: path.to_owned(),
            file: Arc::clone(&file),
            flush,
            written: AtomicI64::new(next_offset),
            durable: AtomicI64::new(next_offset),
            poisoned: AtomicBool::new(false),
            syncing: tokio::sync::Mutex::new(()),
            #[cfg(test)]
            fail_next_sync: AtomicBool::new(false),
        });
        Ok(Self {
            path: path.to_owned(),
            file,
            data,
            index,
            next_offset,
            durability,
        })
    }

    /// Every batch, in order (for replay).
    pub(crate) fn batches(&self) -> impl Iterator<Item = Bytes> + '_ {
        self.index
            .iter()
            .map(|e| Bytes::copy_from_slice(&self.data[e.pos..e.pos + e.len]))
    }

    /// The offset the next batch gets (the log end offset).
    pub(crate) fn next_offset(&self) -> i64 {
        self.next_offset
    }

    /// The first offset in the log (no retention: always 0).
    pub(crate) fn log_start_offset(&self) -> i64 {
        0
    }

    /// The log's durability (shared: await [`Durability::sync_through`] without the
    /// partition lock).
    pub(crate) fn durability(&self) -> &Arc<Durability> {
        &self.durability
    }

    /// Appends one batch whose first 8 bytes are rewritten to `base_offset` (the checksum does
    /// not cover the base offset): written to the file (the OS), not synced; the caller makes
    /// it durable with [`Durability::sync_through`]`(next_offset())`.
    pub(crate) fn append(
        &mut self,
        batch: &[u8],
        header: &BatchHeader,
        base_offset: i64,
    ) -> std::io::Result<()> {
        if self.durability.is_poisoned() {
            return Err(poisoned_error());
        }
        let mut owned = batch.to_vec();
        owned[..8].copy_from_slice(&base_offset.to_be_bytes());
        if let Err(e) = (&*self.file).write_all(&owned) {
            self.durability.poison(&e);
            return Err(e);
        }
        let pos = self.data.len();
        self.data.extend_from_slice(&owned);
        let last_offset = base_offset + i64::from(header.last_offset_delta);
        self.index.push(IndexEntry {
            base_offset,
            last_offset,
            max_timestamp_ms: header.max_timestamp_ms,
            pos,
            len: owned.len(),
        });
        self.next_offset = last_offset + 1;
        self.durability.wrote(self.next_offset);
        Ok(())
    }

    /// Batches holding offsets in `[from, upto)`, starting with the batch that contains `from`,
    /// concatenated, stopping once `max_bytes` is reached (at least one batch is returned if any
    /// qualifies, as Kafka does so a consumer always progresses).
    /// Also returns the offset after the last batch served (`from` if none).
    pub(crate) fn read(&self, from: i64, upto: i64, max_bytes: usize) -> (Bytes, i64) {
        let start = self.index.partition_point(|e| e.last_offset < from);
        let mut out = BytesMut::new();
        let mut end = from;
        for e in &self.index[start..] {
            if e.base_offset >= upto {
                break;
            }
            if !out.is_empty() && out.len() + e.len > max_bytes {
                break;
            }
            out.extend_from_slice(&self.data[e.pos..e.pos + e.len]);
            end = e.last_offset + 1;
        }
        (out.freeze(), end)
    }

    /// The first offset whose batch has a timestamp at or after `ts` (`None` if none).
    pub(crate) fn offset_for_timestamp(&self, ts: i64) -> Option<(i64, i64)> {
        self.index
            .iter()
            .find(|e| e.max_timestamp_ms >= ts)
            .map(|e| (e.base_offset, e.max_timestamp_ms))
    }

    /// The segment's path.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::refbroker::offsets::{OffsetValue, encode_batch};

    fn batch() -> Bytes {
        let v = OffsetValue {
            offset: 1,
            leader_epoch: -1,
            metadata: None,
            commit_timestamp_ms: 0,
        };
        encode_batch(&[(("g".into(), "t".into(), 0), v)], None, 0).unwrap()
    }

    fn append(log: &mut PartitionLog) -> i64 {
        let b = batch();
        let (h, _) = BatchHeader::parse(&b).unwrap();
        let base = log.next_offset();
        log.append(&b, &h, base).unwrap();
        log.next_offset()
    }

    #[tokio::test]
    async fn appends_are_durable_only_after_a_sync_that_covers_them_all() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.log");
        let mut log = PartitionLog::open(&path, Flush::Fsync).unwrap();
        let d = Arc::clone(log.durability());
        let first = append(&mut log);
        let end = append(&mut log);
        assert_eq!(d.durable_end(), 0, "written, not synced");
        // Both waiters are covered by one sync (the second finds its data durable).
        let (a, b) = tokio::join!(d.sync_through(first), d.sync_through(end));
        a.unwrap();
        b.unwrap();
        assert_eq!(d.durable_end(), end);
        assert!(d.sync_through(end + 1).await.is_err(), "not written");
        drop(log);
        let reopened = PartitionLog::open(&path, Flush::Fsync).unwrap();
        assert_eq!(reopened.next_offset(), end);
        assert_eq!(reopened.durability().durable_end(), end);
    }

    #[tokio::test]
    async fn without_fsync_written_counts_as_durable() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = PartitionLog::open(&dir.path().join("p.log"), Flush::None).unwrap();
        let end = append(&mut log);
        assert_eq!(log.durability().durable_end(), end);
        log.durability().sync_through(end).await.unwrap();
    }

    #[tokio::test]
    async fn a_failed_sync_poisons_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = PartitionLog::open(&dir.path().join("p.log"), Flush::Fsync).unwrap();
        let d = Arc::clone(log.durability());
        let end = append(&mut log);
        d.fail_next_sync.store(true, Ordering::Release);
        assert!(d.sync_through(end).await.is_err());
        assert!(d.is_poisoned());
        assert_eq!(d.durable_end(), 0, "nothing acknowledged as durable");
        assert!(d.sync_through(end).await.is_err(), "a retry fails too");
        let b = batch();
        let (h, _) = BatchHeader::parse(&b).unwrap();
        assert!(log.append(&b, &h, end).is_err(), "no more appends");
    }
}
