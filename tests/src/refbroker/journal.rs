//! The broker's journal: one append-only file holding every partition's record batches in the
//! order they were appended, so that one fdatasync makes every partition durable at once.
//!
//! Each entry is `len: u32 | crc32c: u32 | partition: i32 | topic_len: u16 | topic | batch`
//! (big-endian; `len` counts the bytes after itself, the checksum covers everything after
//! itself). The batch is stored with the base offset the broker assigned, exactly as a Fetch
//! returns it.
//!
//! Durability is a group commit ([`Journal::sync_through`]): an append is encoded into the
//! journal's buffer at once, in order, and whoever needs it on disk (an acks=all Produce, a
//! WriteTxnMarkers request, an offset commit) asks the journal's committer thread for a
//! commit and waits: the thread writes everything buffered so far and fdatasyncs it, whatever
//! the partitions, then wakes every waiter at once. No file I/O runs on the runtime's worker
//! threads, commits are written in order by one thread, and an entry not yet committed is not
//! in the file (a crash loses it; it was never acknowledged as durable). With `--set
//! log.flush=none` ([`Flush::None`]) each entry is written to the file (the OS) at once and
//! nothing is fsync'd: written counts as durable (Kafka's default).
//!
//! On open the file is read entry by entry; a torn tail (an entry cut short by a crash, or
//! failing its checksum) is truncated away, as Kafka's log recovery does, and logged.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};

use bytes::Bytes;
use markers::participant::BatchHeader;
use tokio::sync::watch;
use txn_log::sync::Mutex;

use super::server::Tp;

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

/// Bytes before an entry's topic: `len`, `crc32c`, `partition`, `topic_len`.
const ENTRY_HEADER: usize = 4 + 4 + 4 + 2;

/// The batches found in the journal on open, per partition, in append order.
pub(crate) type Recovered = HashMap<Tp, Vec<Bytes>>;

/// The journal's end, under one lock so entries are laid out whole and in position order.
#[derive(Debug, Default)]
struct Tail {
    /// The journal's length, buffered entries included.
    end: u64,
    /// Entries appended since the last group commit started ([`Flush::Fsync`] only).
    buffered: Vec<u8>,
}

/// The broker's journal: appends from any task, group commits on its own thread.
#[derive(Debug)]
pub(crate) struct Journal {
    state: Arc<State>,
    /// Asks the committer thread for a group commit ([`Flush::Fsync`] only; `None` in
    /// [`Flush::None`], where nothing waits).
    wake: Option<SyncSender<()>>,
    /// Changes after every group commit (its value: the durable position).
    committed: watch::Receiver<u64>,
}

/// What the appenders and the committer thread share.
#[derive(Debug)]
struct State {
    path: PathBuf,
    file: File,
    flush: Flush,
    /// The journal's end and what of it the next group commit writes.
    tail: Mutex<Tail>,
    /// The length that is on disk (in [`Flush::None`]: written to the OS).
    durable: AtomicU64,
    /// Set after a failed write or fsync: what reached the file is unknown, so nothing more is
    /// appended or acknowledged (fail-stop; a restart recovers the valid prefix).
    poisoned: AtomicBool,
    /// Wakes the waiters of [`Journal::sync_through`] after each group commit.
    committed: watch::Sender<u64>,
    /// Unit tests: the next fdatasync fails.
    #[cfg(test)]
    fail_next_sync: AtomicBool,
}

fn poisoned_error() -> std::io::Error {
    std::io::Error::other("journal poisoned by an earlier failure")
}

/// Reads one entry at the start of `rest`: its partition, its batch and its whole length.
fn read_entry(rest: &Bytes) -> Result<(Tp, Bytes, usize), String> {
    if rest.len() < ENTRY_HEADER {
        return Err(format!(
            "{} bytes left, an entry header is {ENTRY_HEADER}",
            rest.len()
        ));
    }
    let word = |at: usize| [rest[at], rest[at + 1], rest[at + 2], rest[at + 3]];
    let len = u32::from_be_bytes(word(0)) as usize;
    let total = len + 4;
    if total < ENTRY_HEADER || rest.len() < total {
        return Err(format!("entry of {total} bytes, {} left", rest.len()));
    }
    let crc = u32::from_be_bytes(word(4));
    if crc32c::crc32c(&rest[8..total]) != crc {
        return Err("entry checksum mismatch".to_owned());
    }
    let partition = i32::from_be_bytes(word(8));
    let topic_len = usize::from(u16::from_be_bytes([rest[12], rest[13]]));
    let batch_at = ENTRY_HEADER + topic_len;
    if batch_at > total {
        return Err("topic longer than its entry".to_owned());
    }
    let topic = std::str::from_utf8(&rest[ENTRY_HEADER..batch_at])
        .map_err(|e| format!("topic name: {e}"))?
        .to_owned();
    let batch = rest.slice(batch_at..total);
    match BatchHeader::parse(&batch) {
        Ok((_, n)) if n == batch.len() => Ok(((topic, partition), batch, total)),
        Ok((_, n)) => Err(format!("batch of {n} bytes in {} bytes", batch.len())),
        Err(e) => Err(format!("batch: {e}")),
    }
}

impl Journal {
    /// Opens (or creates) the journal at `path` and returns the batches it holds. What is in
    /// the file at open counts as durable.
    pub(crate) fn open(path: &Path, flush: Flush) -> std::io::Result<(Arc<Self>, Recovered)> {
        let mut raw = Vec::new();
        if path.exists() {
            File::open(path)?.read_to_end(&mut raw)?;
        }
        let all = Bytes::from(raw);
        let mut recovered = Recovered::new();
        let mut pos = 0usize;
        while pos < all.len() {
            match read_entry(&all.slice(pos..)) {
                Ok((tp, batch, len)) => {
                    recovered.entry(tp).or_default().push(batch);
                    pos += len;
                }
                Err(e) => {
                    tracing::warn!(path = %path.display(), pos, dropped_bytes = all.len() - pos,
                        error = %e, "truncating torn journal tail");
                    break;
                }
            }
        }
        let mut file = OpenOptions::new()
            .create(true)
            .read(true)
            .write(true)
            .truncate(false)
            .open(path)?;
        let len = u64::try_from(pos).unwrap_or(u64::MAX);
        file.set_len(len)?;
        file.seek(SeekFrom::End(0))?;
        let (committed_tx, committed) = watch::channel(len);
        let state = Arc::new(State {
            path: path.to_owned(),
            file,
            flush,
            tail: Mutex::new(Tail {
                end: len,
                buffered: Vec::new(),
            }),
            durable: AtomicU64::new(len),
            poisoned: AtomicBool::new(false),
            committed: committed_tx,
            #[cfg(test)]
            fail_next_sync: AtomicBool::new(false),
        });
        let wake = match flush {
            Flush::None => None,
            Flush::Fsync => {
                // One pending request is enough: the commit it starts takes every entry
                // buffered before it.
                let (wake, requests) = std::sync::mpsc::sync_channel(1);
                let committer = Arc::clone(&state);
                std::thread::Builder::new()
                    .name("refbroker-journal".to_owned())
                    .spawn(move || committer.run_commits(&requests))?;
                Some(wake)
            }
        };
        let journal = Self {
            state,
            wake,
            committed,
        };
        Ok((Arc::new(journal), recovered))
    }

    /// The journal length that is on disk (or, in [`Flush::None`], written to the OS).
    pub(crate) fn durable_position(&self) -> u64 {
        self.state.durable_position()
    }

    /// Appends `batch` of partition `tp` with its base offset rewritten to `base_offset` (the
    /// batch checksum does not cover it): buffered for the next group commit, or in
    /// [`Flush::None`] written to the OS at once. Returns the journal position to
    /// [`Journal::sync_through`] for it to be durable.
    pub(crate) fn append(
        &self,
        (topic, partition): (&str, i32),
        batch: &[u8],
        base_offset: i64,
    ) -> std::io::Result<u64> {
        if self.state.is_poisoned() {
            return Err(poisoned_error());
        }
        if batch.len() < 8 {
            return Err(std::io::Error::other("batch shorter than its base offset"));
        }
        let topic_len = u16::try_from(topic.len())
            .map_err(|_| std::io::Error::other("topic name longer than 65535 bytes"))?;
        let total = ENTRY_HEADER + topic.len() + batch.len();
        let len = u32::try_from(total - 4)
            .map_err(|_| std::io::Error::other("batch too large for a journal entry"))?;
        let mut tail = self.state.tail.lock();
        let entry_at = tail.buffered.len();
        let entry = &mut tail.buffered;
        entry.extend_from_slice(&len.to_be_bytes());
        entry.extend_from_slice(&[0; 4]);
        entry.extend_from_slice(&partition.to_be_bytes());
        entry.extend_from_slice(&topic_len.to_be_bytes());
        entry.extend_from_slice(topic.as_bytes());
        let batch_at = entry.len();
        entry.extend_from_slice(batch);
        entry[batch_at..batch_at + 8].copy_from_slice(&base_offset.to_be_bytes());
        let crc = crc32c::crc32c(&entry[entry_at + 8..]);
        entry[entry_at + 4..entry_at + 8].copy_from_slice(&crc.to_be_bytes());
        if self.state.flush == Flush::None {
            let written = (&self.state.file).write_all(&tail.buffered);
            tail.buffered.clear();
            if let Err(e) = written {
                self.state.poison(&e);
                return Err(e);
            }
        }
        tail.end += u64::try_from(total).unwrap_or(u64::MAX);
        if self.state.flush == Flush::None {
            self.state.durable.store(tail.end, Ordering::Release);
        }
        Ok(tail.end)
    }

    /// Returns once the journal is on disk up to `position` (already appended): asks the
    /// committer thread for a group commit, which writes every entry buffered so far and
    /// fdatasyncs them, and waits for one that covers `position`; concurrent callers share it.
    /// Fails if the journal is (or becomes) poisoned.
    pub(crate) async fn sync_through(&self, position: u64) -> std::io::Result<()> {
        let state = &self.state;
        let covered = || state.is_poisoned() || state.durable_position() >= position;
        if !covered() {
            let end = state.tail.lock().end;
            if position > end {
                return Err(std::io::Error::other(format!(
                    "sync through {position} asked, but the journal ends at {end}"
                )));
            }
            if let Some(wake) = &self.wake
                && let Err(TrySendError::Disconnected(())) = wake.try_send(())
            {
                return Err(std::io::Error::other("journal committer stopped"));
            }
            let mut committed = self.committed.clone();
            if committed.wait_for(|_| covered()).await.is_err() {
                return Err(std::io::Error::other("journal committer stopped"));
            }
        }
        if state.durable_position() >= position {
            Ok(())
        } else {
            Err(poisoned_error())
        }
    }
}

impl State {
    fn durable_position(&self) -> u64 {
        self.durable.load(Ordering::Acquire)
    }

    fn is_poisoned(&self) -> bool {
        self.poisoned.load(Ordering::Acquire)
    }

    fn poison(&self, e: &std::io::Error) {
        tracing::error!(path = %self.path.display(), error = %e, "journal write failed; poisoned");
        self.poisoned.store(true, Ordering::Release);
    }

    /// The committer thread: for each request, one group commit of everything buffered, then
    /// every waiter is woken. Ends when the journal is dropped or poisoned (and then says so
    /// to the waiters, also if it ends by a panic).
    fn run_commits(&self, requests: &Receiver<()>) {
        struct WakeWaitersOnExit<'a>(&'a State);
        impl Drop for WakeWaitersOnExit<'_> {
            fn drop(&mut self) {
                if std::thread::panicking() {
                    self.0
                        .poison(&std::io::Error::other("journal committer panicked"));
                }
                self.0.committed.send_modify(|_| {});
            }
        }
        let _on_exit = WakeWaitersOnExit(self);
        while requests.recv().is_ok() && !self.is_poisoned() {
            let (entries, target) = {
                let mut tail = self.tail.lock();
                (std::mem::take(&mut tail.buffered), tail.end)
            };
            if target <= self.durable_position() {
                continue;
            }
            match self.write_and_sync(&entries) {
                Ok(()) => self.durable.store(target, Ordering::Release),
                Err(e) => self.poison(&e),
            }
            self.committed.send_replace(self.durable_position());
        }
    }

    fn write_and_sync(&self, entries: &[u8]) -> std::io::Result<()> {
        #[cfg(test)]
        if self.fail_next_sync.swap(false, Ordering::AcqRel) {
            return Err(std::io::Error::other("injected fdatasync failure"));
        }
        (&self.file).write_all(entries)?;
        self.file.sync_data()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::task::{Context, Waker};

    use super::*;
    use crate::refbroker::offsets::{OffsetValue, encode_batch};

    /// A small valid v2 batch (one offset commit).
    pub(crate) fn batch() -> Bytes {
        let v = OffsetValue {
            offset: 1,
            leader_epoch: -1,
            metadata: None,
            commit_timestamp_ms: 0,
        };
        encode_batch(&[(("g".into(), "t".into(), 0), v)], None, 0).unwrap()
    }

    #[tokio::test]
    async fn entries_are_durable_only_after_a_sync_that_covers_them_all() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.log");
        let (j, recovered) = Journal::open(&path, Flush::Fsync).unwrap();
        assert!(recovered.is_empty());
        let first = j.append(("a", 0), &batch(), 0).unwrap();
        let end = j.append(("b", 3), &batch(), 7).unwrap();
        assert_eq!(j.durable_position(), 0, "appended, not synced");
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            0,
            "buffered until the group commit"
        );
        // Both waiters are covered by one sync (the second finds its entry durable).
        let (x, y) = tokio::join!(j.sync_through(first), j.sync_through(end));
        x.unwrap();
        y.unwrap();
        assert_eq!(j.durable_position(), end);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), end);
        assert!(j.sync_through(end + 1).await.is_err(), "not appended");
        drop(j);
        let (reopened, recovered) = Journal::open(&path, Flush::Fsync).unwrap();
        assert_eq!(reopened.durable_position(), end);
        let b = &recovered[&("b".to_owned(), 3)];
        assert_eq!(b.len(), 1);
        assert_eq!(BatchHeader::parse(&b[0]).unwrap().0.base_offset, 7);
        assert_eq!(recovered[&("a".to_owned(), 0)].len(), 1);
    }

    #[tokio::test]
    async fn a_waiter_that_gives_up_stops_nothing_and_commits_stay_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.log");
        let (j, _) = Journal::open(&path, Flush::Fsync).unwrap();
        let first = j.append(("a", 0), &batch(), 0).unwrap();
        {
            // asks for a commit (polled once), then is dropped before it is answered
            let mut waiting = std::pin::pin!(j.sync_through(first));
            let mut cx = Context::from_waker(Waker::noop());
            assert!(waiting.as_mut().poll(&mut cx).is_pending());
        }
        let end = j.append(("a", 0), &batch(), 1).unwrap();
        j.sync_through(end).await.unwrap();
        drop(j);
        let (_, recovered) = Journal::open(&path, Flush::Fsync).unwrap();
        let bases: Vec<i64> = recovered[&("a".to_owned(), 0)]
            .iter()
            .map(|b| BatchHeader::parse(b).unwrap().0.base_offset)
            .collect();
        assert_eq!(bases, [0, 1]);
    }

    #[tokio::test]
    async fn without_fsync_written_counts_as_durable() {
        let dir = tempfile::tempdir().unwrap();
        let (j, _) = Journal::open(&dir.path().join("journal.log"), Flush::None).unwrap();
        let end = j.append(("a", 0), &batch(), 0).unwrap();
        assert_eq!(j.durable_position(), end);
        j.sync_through(end).await.unwrap();
    }

    #[tokio::test]
    async fn a_failed_sync_poisons_the_journal() {
        let dir = tempfile::tempdir().unwrap();
        let (j, _) = Journal::open(&dir.path().join("journal.log"), Flush::Fsync).unwrap();
        let end = j.append(("a", 0), &batch(), 0).unwrap();
        j.state.fail_next_sync.store(true, Ordering::Release);
        assert!(j.sync_through(end).await.is_err());
        assert!(j.state.is_poisoned());
        assert_eq!(j.durable_position(), 0, "nothing acknowledged as durable");
        assert!(j.sync_through(end).await.is_err(), "a retry fails too");
        assert!(j.append(("a", 0), &batch(), 1).is_err(), "no more appends");
    }

    #[test]
    fn bad_appends_are_refused_without_touching_the_journal() {
        let dir = tempfile::tempdir().unwrap();
        let (j, _) = Journal::open(&dir.path().join("journal.log"), Flush::None).unwrap();
        assert!(
            j.append(("a", 0), &[0; 7], 0).is_err(),
            "shorter than a base offset"
        );
        let long_topic = "t".repeat(70_000);
        assert!(j.append((&long_topic, 0), &batch(), 0).is_err());
        assert!(!j.state.is_poisoned());
        assert_eq!(
            j.append(("a", 0), &batch(), 0).unwrap(),
            j.durable_position()
        );
    }

    #[test]
    fn a_torn_or_corrupt_tail_is_truncated_and_the_prefix_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.log");
        let (j, _) = Journal::open(&path, Flush::None).unwrap();
        let kept = j.append(("a", 0), &batch(), 0).unwrap();
        let end = j.append(("a", 0), &batch(), 1).unwrap();
        drop(j);
        let whole = std::fs::read(&path).unwrap();
        let cut = usize::try_from(kept).unwrap();
        for damaged in [
            // a crash in the middle of the second entry
            whole[..cut + 10].to_vec(),
            // one flipped byte in the second entry's batch
            {
                let mut w = whole.clone();
                let last = usize::try_from(end).unwrap() - 1;
                w[last] ^= 1;
                w
            },
        ] {
            std::fs::write(&path, &damaged).unwrap();
            let (j, recovered) = Journal::open(&path, Flush::None).unwrap();
            assert_eq!(j.durable_position(), kept);
            assert_eq!(recovered[&("a".to_owned(), 0)].len(), 1);
            assert_eq!(std::fs::metadata(&path).unwrap().len(), kept, "truncated");
            let next = j.append(("a", 0), &batch(), 1).unwrap();
            assert_eq!(next, end, "appends continue after the kept prefix");
        }
    }
}
