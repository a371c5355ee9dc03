//! `SledTxnLog`: the embedded, durable [`TxnLog`] on sled 0.34.7, with group commit.
//!
//! # Write path
//!
//! Every write (`claim`, `append`, `allocate_block`) is queued, in call order, to one writer
//! thread. The queue is not bounded: `append` must not block (see [`TxnLog::append`]), and its
//! callers bound it (the coordinator has at most one append in flight per transactional id). The writer takes up to [`SledConfig::max_batch`] queued requests and,
//! in queue order:
//!
//! 1. checks each request against the coordinator epochs it holds (loaded at open, updated only
//!    after a successful commit); claims pass through the same queue, so the fence is atomic;
//! 2. puts every accepted request into **one** sled `Batch` and applies it (atomic, also
//!    across a crash);
//! 3. calls `Db::flush()`, which writes sled's buffer to the `db` file (in
//!    [`SyncMode::OsBuffered`] followed by a waiting `sync_file_range`, sled's own flush);
//! 4. makes it durable for real: `fdatasync` on the `db` file, plus `fsync` of any file
//!    sled created since the last batch (blobs, snapshots) and of its directory
//!    ([`SyncMode::Fsync`], the default);
//! 5. only then resolves the callers.
//!
//! A failure in step 2, 3 or 4 **poisons** the log: the callers of that batch get
//! [`LogError::Io`], every later call gets [`LogError::Poisoned`]. Retrying an fsync whose
//! outcome is unknown is not safe; restart the process instead (open runs recovery).
//!
//! Reads (`load`) go straight to sled and see every applied batch.
//!
//! # Recovery read
//!
//! sled 0.34 keeps in memory every page it has read, whatever its cache size, until the
//! database is closed. A coordinator reads its whole log once at start and then only writes,
//! so with [`SledConfig::preload`] `open` reads every record on a short-lived database
//! handle (two scans per core over contiguous partition ranges), closes it, and opens the
//! database again for serving: the pages recovery read are given back, and the first `load`
//! of each partition takes its preloaded records. A partition written since (`append`) is read
//! from sled again.
//!
//! See `docs/durability.md`.
//!
//! Not for loom: sled and the writer thread do not run under a loom model; use
//! [`crate::MemTxnLog`] there.

use std::collections::{BTreeSet, HashMap};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use async_trait::async_trait;
use tokio::sync::{mpsc, oneshot};

use crate::codec;
use crate::log::next_epoch;
use crate::sync::{Arc, Mutex};
use crate::{
    Appending, CoordinatorEpoch, LoadedPartition, LogEntry, LogError, LogOp, LogPartition,
    ProducerId, ProducerIdBlock, TransactionalId, TxnLog, TxnRecord, append_failed,
};

/// How a committed batch is made durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SyncMode {
    /// `fdatasync`/`fsync` after every group flush, before anything is acknowledged. The
    /// default, and the only mode that meets the [`TxnLog`] durability obligation.
    #[default]
    Fsync,
    /// Only sled's `flush()` (`sync_file_range`): survives a process crash, **not** a power
    /// loss or kernel crash. For benchmark comparisons only.
    OsBuffered,
}

/// Configuration of a [`SledTxnLog`]: build with [`SledConfig::new`], then set fields.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SledConfig {
    /// Directory of the sled database (created if missing).
    pub path: PathBuf,
    /// Durability mode; default [`SyncMode::Fsync`].
    pub sync_mode: SyncMode,
    /// Most write requests coalesced into one batch, flush and fsync (default 512). `1` gives
    /// one fsync per request (no group commit), for comparison.
    pub max_batch: usize,
    /// How long `open` retries while the database's file lock is held (default 5 s). sled
    /// releases the lock of a dropped database only when its background work and deferred
    /// (epoch-based) destruction have finished, which can lag a `drop` by milliseconds; a
    /// lock held by another live process makes `open` fail after this long.
    pub lock_wait: Duration,
    /// Bytes of sled's page cache (`sled::Config::cache_capacity`; default
    /// [`SledConfig::DEFAULT_CACHE_BYTES`], 64 MiB; sled's own default is 1 GiB). The engine
    /// keeps every transactional id in memory and reads the log only at load, so a large cache
    /// only holds what recovery read: with 1M ids sled's 1 GiB default cost about 440 B per id.
    pub cache_capacity: u64,
    /// Read every record at `open` and serve each partition's first `load` from that read,
    /// then drop the pages it used (see [Recovery read](self#recovery-read)); default false.
    /// For a process that loads every partition of its log right after opening it, as the
    /// daemon does: records of a partition that is never loaded nor written stay in memory.
    pub preload: bool,
}

impl SledConfig {
    /// Defaults for a database in `path`.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            sync_mode: SyncMode::Fsync,
            max_batch: 512,
            lock_wait: Duration::from_secs(5),
            cache_capacity: Self::DEFAULT_CACHE_BYTES,
            preload: false,
        }
    }

    /// Default [`SledConfig::cache_capacity`]: 64 MiB.
    pub const DEFAULT_CACHE_BYTES: u64 = 64 * 1024 * 1024;
}

/// Group-commit counters of a [`SledTxnLog`] (monotonic since open).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct GroupCommitStats {
    /// Batches committed (one sled batch + flush + fsync each).
    pub batches: u64,
    /// Write requests (claims, appends, block allocations) committed in those batches.
    pub requests: u64,
    /// Write requests rejected by the writer (fenced, not claimed, invalid).
    pub rejected: u64,
    /// Largest number of requests in one batch.
    pub largest_batch: u64,
    /// `fdatasync`/`fsync` calls made.
    pub syncs: u64,
    /// Directory listings made to find files sled created (see `Writer::make_durable`).
    pub dir_listings: u64,
    /// Files sled created that the writer found and fsynced (blobs, snapshots).
    pub new_files: u64,
}

impl GroupCommitStats {
    /// Mean committed requests per batch (0 if none).
    pub fn mean_batch(&self) -> f64 {
        if self.batches == 0 {
            0.0
        } else {
            // Counters stay far below 2^53.
            #[allow(clippy::cast_precision_loss)]
            let r = self.requests as f64 / self.batches as f64;
            r
        }
    }
}

#[derive(Debug, Default)]
struct Shared {
    poisoned: Mutex<Option<String>>,
    // Plain counters under a mutex: the facade's atomics are std's own types, which clippy's
    // `disallowed_types` rejects even through the re-export.
    stats: Mutex<GroupCommitStats>,
    fail_next_sync: Mutex<bool>,
}

impl Shared {
    fn check_poisoned(&self) -> Result<(), LogError> {
        match &*self.poisoned.lock() {
            Some(reason) => Err(LogError::Poisoned {
                reason: reason.clone(),
            }),
            None => Ok(()),
        }
    }

    fn poison(&self, reason: String) {
        let mut p = self.poisoned.lock();
        if p.is_none() {
            tracing::error!(%reason, "transaction log poisoned");
            *p = Some(reason);
        }
    }
}

#[derive(Debug)]
enum Op {
    Claim(LogPartition, CoordinatorEpoch),
    ClaimNext(LogPartition),
    Append(LogPartition, CoordinatorEpoch, Vec<LogEntry>),
    Allocate(u32, ProducerId),
}

#[derive(Debug)]
enum Reply {
    Done,
    Epoch(CoordinatorEpoch),
    Block(ProducerIdBlock),
}

#[derive(Debug)]
struct Request {
    op: Op,
    reply: oneshot::Sender<Result<Reply, LogError>>,
}

/// The embedded durable [`TxnLog`] on sled; see the [module docs](self).
///
/// Dropping it (or [`SledTxnLog::shutdown`]) stops the writer after the queued requests and
/// releases the database.
#[derive(Debug)]
pub struct SledTxnLog {
    tree: sled::Tree,
    /// ACL bindings and SCRAM credentials ([`crate::security`]), tree `security`.
    security: sled::Tree,
    /// The `db` file to fdatasync after a security write ([`SyncMode::Fsync`]).
    db_file_path: Option<PathBuf>,
    /// Records read at open ([`SledConfig::preload`]) of the partitions not loaded nor written
    /// since.
    preloaded: Mutex<HashMap<LogPartition, Preloaded>>,
    shared: Arc<Shared>,
    tx: Mutex<Option<mpsc::UnboundedSender<Request>>>,
    writer: Mutex<Option<JoinHandle<()>>>,
}

const TREE: &[u8] = b"txn-log";
/// The tree of [`crate::security`]'s keys.
const SECURITY_TREE: &[u8] = b"security";

/// The records of one partition as `load` returns them, ordered by id.
type PartitionRecords = Vec<(TransactionalId, TxnRecord)>;

/// What the recovery read found for one partition: its records, or its first corrupt one.
type Preloaded = Result<PartitionRecords, LogError>;

/// Most threads the recovery read uses.
const MAX_RECOVERY_READERS: usize = 8;

fn sled_err(e: sled::Error) -> LogError {
    match e {
        sled::Error::Io(e) => LogError::from(e),
        sled::Error::Corruption { at, .. } => LogError::Corrupt {
            partition: None,
            key: format!("sled storage at {at:?}"),
            reason: "sled detected corruption".into(),
        },
        other => LogError::from(std::io::Error::other(other.to_string())),
    }
}

/// Opens the sled database, retrying while its file lock is still held (see
/// [`SledConfig::lock_wait`]).
fn open_db(config: &SledConfig) -> Result<sled::Db, LogError> {
    let deadline = Instant::now() + config.lock_wait;
    loop {
        let result = sled::Config::new()
            .path(&config.path)
            // We flush explicitly after every batch; a background flusher only adds contention.
            .flush_every_ms(None)
            // With an fdatasync after every flush, sled's own waiting `sync_file_range` per
            // buffer write is a second disk round trip that the fdatasync makes redundant.
            .sync_file_range(config.sync_mode == SyncMode::OsBuffered)
            .cache_capacity(config.cache_capacity)
            .open();
        match result {
            Ok(db) => return Ok(db),
            Err(sled::Error::Io(e))
                if e.to_string().contains("could not acquire lock")
                    && Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => return Err(sled_err(e)),
        }
    }
}

impl SledTxnLog {
    /// Opens (or creates) the log in `path` with default settings. Blocking.
    pub fn open_path(path: impl Into<PathBuf>) -> Result<Self, LogError> {
        Self::open(SledConfig::new(path))
    }

    /// Opens (or creates) the log and runs recovery: verifies every coordinator epoch and the
    /// producer-id counter (a corrupt one fails the open with [`LogError::Corrupt`]); records
    /// are verified when loaded ([`TxnLog::load`]) or by [`SledTxnLog::verify_all`]. Blocking
    /// (file I/O); from async code call it inside `spawn_blocking`.
    pub fn open(config: SledConfig) -> Result<Self, LogError> {
        if config.max_batch == 0 {
            return Err(LogError::InvalidArgument(
                "max_batch must be positive".into(),
            ));
        }
        std::fs::create_dir_all(&config.path)?;
        let mut db = open_db(&config)?;
        let mut tree = db.open_tree(TREE).map_err(sled_err)?;

        let mut epochs = HashMap::new();
        for kv in tree.scan_prefix([codec::EPOCH_KEY_PREFIX]) {
            let (k, v) = kv.map_err(sled_err)?;
            let p = codec::parse_epoch_key(&k)?;
            epochs.insert(p, codec::decode_epoch(p, &k, &v)?);
        }
        let next_producer_id = match tree.get(codec::PRODUCER_ID_KEY).map_err(sled_err)? {
            Some(v) => codec::decode_next_producer_id(&v)?,
            None => 0,
        };
        let preloaded = if config.preload {
            let started = Instant::now();
            let last = epochs.keys().map(|p| p.0).max().unwrap_or(0);
            let records = read_all_records(&tree, last)?;
            let read_ms = started.elapsed().as_millis() as u64;
            // Close the handle that paged the whole log in, and serve from a fresh one.
            drop(tree);
            drop(db);
            db = open_db(&config)?;
            tree = db.open_tree(TREE).map_err(sled_err)?;
            tracing::info!(
                partitions = records.len(),
                ids = records
                    .values()
                    .map(|r| r.as_ref().map_or(0, Vec::len))
                    .sum::<usize>(),
                read_ms,
                reopen_ms = started.elapsed().as_millis() as u64 - read_ms,
                "transaction log read at open"
            );
            records
        } else {
            HashMap::new()
        };

        let security = db.open_tree(SECURITY_TREE).map_err(sled_err)?;
        let db_file = match config.sync_mode {
            SyncMode::Fsync => Some(File::open(config.path.join("db"))?),
            SyncMode::OsBuffered => None,
        };
        let shared = Arc::new(Shared::default());
        let mut writer = Writer {
            db,
            tree: tree.clone(),
            watched: [
                DirWatch::new(config.path.clone()),
                DirWatch::new(config.path.join("blobs")),
            ],
            db_file,
            known_files: BTreeSet::new(),
            epochs,
            next_producer_id,
            shared: shared.clone(),
            max_batch: config.max_batch,
        };
        // Whatever recovery or creation wrote, make it durable once, directory entries included
        // (also the data directory's own entry in its parent).
        writer.make_durable()?;
        if config.sync_mode == SyncMode::Fsync
            && let Some(parent) = std::fs::canonicalize(&config.path)?.parent()
        {
            File::open(parent)?.sync_all()?;
        }

        let (tx, rx) = mpsc::unbounded_channel();
        let handle = std::thread::Builder::new()
            .name("txn-log-writer".into())
            .spawn(move || writer.run(rx))?;
        Ok(Self {
            tree,
            security,
            db_file_path: (config.sync_mode == SyncMode::Fsync).then(|| config.path.join("db")),
            preloaded: Mutex::new(preloaded),
            shared,
            tx: Mutex::new(Some(tx)),
            writer: Mutex::new(Some(handle)),
        })
    }

    /// Group-commit counters.
    pub fn stats(&self) -> GroupCommitStats {
        *self.shared.stats.lock()
    }

    /// Whether an earlier durability failure poisoned the log.
    pub fn is_poisoned(&self) -> bool {
        self.shared.poisoned.lock().is_some()
    }

    /// Stops accepting requests, lets the writer finish what is queued, and waits for it.
    /// Later calls fail with [`LogError::Closed`]. Blocking; idempotent.
    pub fn shutdown(&self) {
        drop(self.tx.lock().take());
        let handle = self.writer.lock().take();
        if let Some(h) = handle
            && h.join().is_err()
        {
            tracing::error!("txn-log writer thread panicked");
        }
    }

    /// Makes the next durability step (fsync) of the writer fail, to exercise poisoning.
    #[cfg(feature = "testing")]
    pub fn fail_next_sync(&self) {
        *self.shared.fail_next_sync.lock() = true;
    }

    /// Verifies every stored value (records, epochs, producer-id counter). Returns the number
    /// of values checked, or the first corruption found.
    pub fn verify_all(&self) -> Result<usize, LogError> {
        self.shared.check_poisoned()?;
        let mut n = 0;
        for kv in self.tree.iter() {
            let (k, v) = kv.map_err(sled_err)?;
            codec::verify_entry(&k, &v)?;
            n += 1;
        }
        Ok(n)
    }

    /// Queues `op` for the writer (in call order); the receiver gets its answer.
    fn enqueue(&self, op: Op) -> Result<oneshot::Receiver<Result<Reply, LogError>>, LogError> {
        self.shared.check_poisoned()?;
        let (reply, rx) = oneshot::channel();
        let tx = self.tx.lock();
        let tx = tx.as_ref().ok_or(LogError::Closed)?;
        tx.send(Request { op, reply })
            .map_err(|_| LogError::Closed)?;
        Ok(rx)
    }

    async fn submit(&self, op: Op) -> Result<Reply, LogError> {
        let rx = self.enqueue(op)?;
        rx.await.map_err(|_| LogError::Closed)?
    }
}

/// A security read or write, on a blocking thread (sled and fsync block).
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, LogError> + Send + 'static,
) -> Result<T, LogError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| LogError::from(std::io::Error::other(e.to_string())))?
}

#[async_trait]
impl crate::SecurityStore for SledTxnLog {
    async fn load_security(&self) -> Result<crate::SecuritySnapshot, LogError> {
        let tree = self.security.clone();
        blocking(move || {
            crate::security::decode_snapshot(tree.iter().map(|kv| kv.map_err(sled_err)))
        })
        .await
    }

    async fn apply_security(&self, changes: &[crate::SecurityChange]) -> Result<(), LogError> {
        self.shared.check_poisoned()?;
        let mut batch = sled::Batch::default();
        for change in changes {
            match crate::security::encode_change(change)? {
                (k, Some(v)) => batch.insert(k, v),
                (k, None) => batch.remove(k),
            }
        }
        let (tree, path) = (self.security.clone(), self.db_file_path.clone());
        blocking(move || {
            tree.apply_batch(batch).map_err(sled_err)?;
            // Flushes sled's buffers (of every tree) to the `db` file, then makes that
            // durable as the writer does after a group commit.
            tree.flush().map_err(sled_err)?;
            if let Some(path) = path {
                File::open(path)?.sync_data()?;
            }
            Ok(())
        })
        .await
    }
}

impl Drop for SledTxnLog {
    fn drop(&mut self) {
        self.shutdown();
    }
}

#[async_trait]
impl TxnLog for SledTxnLog {
    async fn claim(
        &self,
        partition: LogPartition,
        epoch: CoordinatorEpoch,
    ) -> Result<(), LogError> {
        self.submit(Op::Claim(partition, epoch)).await.map(|_| ())
    }

    fn append(
        &self,
        partition: LogPartition,
        epoch: CoordinatorEpoch,
        batch: Vec<LogEntry>,
    ) -> Appending {
        // The preloaded records are stale once the partition is written; freed outside the lock.
        let stale = self.preloaded.lock().remove(&partition);
        drop(stale);
        match self.enqueue(Op::Append(partition, epoch, batch)) {
            Ok(rx) => Box::pin(async move { rx.await.map_err(|_| LogError::Closed)?.map(|_| ()) }),
            Err(e) => append_failed(e),
        }
    }

    async fn load(&self, partition: LogPartition) -> Result<LoadedPartition, LogError> {
        self.shared.check_poisoned()?;
        if self.tx.lock().is_none() {
            return Err(LogError::Closed);
        }
        let epoch = self
            .tree
            .get(codec::epoch_key(partition))
            .map_err(sled_err)?;
        let preloaded = self.preloaded.lock().remove(&partition);
        if let Some(records) = preloaded {
            let records = records?;
            let none = std::iter::empty::<Result<(&[u8], &[u8]), LogError>>();
            let loaded = codec::decode_partition(partition, epoch.as_deref(), none)?;
            return Ok(LoadedPartition { records, ..loaded });
        }
        codec::decode_partition(
            partition,
            epoch.as_deref(),
            self.tree
                .scan_prefix(codec::record_prefix(partition))
                .map(|kv| kv.map_err(sled_err)),
        )
    }

    async fn claim_next(&self, partition: LogPartition) -> Result<CoordinatorEpoch, LogError> {
        match self.submit(Op::ClaimNext(partition)).await? {
            Reply::Epoch(e) => Ok(e),
            _ => Err(LogError::from(std::io::Error::other(
                "writer answered a claim without its epoch",
            ))),
        }
    }

    async fn allocate_block(
        &self,
        len: u32,
        floor: ProducerId,
    ) -> Result<ProducerIdBlock, LogError> {
        match self.submit(Op::Allocate(len, floor)).await? {
            Reply::Block(b) => Ok(b),
            _ => Err(LogError::from(std::io::Error::other(
                "writer answered a block allocation without a block",
            ))),
        }
    }
}

/// Reads and verifies every record in `tree`, on up to two threads per core, each scanning a
/// contiguous range of partitions; the last range is open-ended, so records of a partition
/// above `last_claimed` are read too.
fn read_all_records(
    tree: &sled::Tree,
    last_claimed: u32,
) -> Result<HashMap<LogPartition, Preloaded>, LogError> {
    // Two per core: a reader also waits for sled's page reads (pread).
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    let partitions = u64::from(last_claimed) + 1;
    let readers = u64::try_from((2 * cores).min(MAX_RECOVERY_READERS))
        .unwrap_or(1)
        .min(partitions);
    let per_reader = partitions.div_ceil(readers);
    // Range starts: the first takes every key of the record prefix (a short, corrupt key
    // included); the others start at a partition's prefix.
    let starts: Vec<Vec<u8>> = (0..readers)
        .map(|i| {
            if i == 0 {
                vec![codec::RECORD_KEY_PREFIX]
            } else {
                // i * per_reader < partitions <= 2^32.
                let first = u32::try_from(i * per_reader).unwrap_or(u32::MAX);
                codec::record_prefix(LogPartition(first)).to_vec()
            }
        })
        .collect();
    let end_of_records = vec![codec::RECORD_KEY_PREFIX + 1];
    std::thread::scope(|scope| {
        let readers: Vec<_> = starts
            .iter()
            .enumerate()
            .map(|(i, start)| {
                let end = starts.get(i + 1).unwrap_or(&end_of_records);
                scope.spawn(move || read_records(tree, start, end))
            })
            .collect();
        let mut all = HashMap::new();
        for reader in readers {
            let part = reader.join().map_err(|_| {
                LogError::from(std::io::Error::other("a recovery reader thread panicked"))
            })??;
            all.extend(part);
        }
        Ok(all)
    })
}

/// Reads and verifies the records with keys in `start..end`. A corrupt record is kept as its
/// partition's outcome, so that partition's `load` reports it as a read of sled would; a
/// failure that names no partition (sled's own, or a key that is not a record key) fails the
/// read.
fn read_records(
    tree: &sled::Tree,
    start: &[u8],
    end: &[u8],
) -> Result<HashMap<LogPartition, Preloaded>, LogError> {
    let mut out: HashMap<LogPartition, Preloaded> = HashMap::new();
    for kv in tree.range(start..end) {
        let (k, v) = kv.map_err(sled_err)?;
        match codec::decode_record_entry(&k, &v) {
            Ok((partition, id, record)) => {
                if let Ok(records) = out.entry(partition).or_insert_with(|| Ok(Vec::new())) {
                    records.push((id, record));
                }
            }
            Err(e) => match e {
                LogError::Corrupt {
                    partition: Some(partition),
                    ..
                } => {
                    let outcome = out.entry(partition).or_insert_with(|| Ok(Vec::new()));
                    if outcome.is_ok() {
                        *outcome = Err(e);
                    }
                }
                e => return Err(e),
            },
        }
    }
    Ok(out)
}

// ===== writer =====

/// How long after a directory's last change (its mtime) the writer keeps listing it on every
/// batch: more than the coarsest timestamp granularity of the file systems we run on (1 s on
/// ext3, 2 s on FAT; ext4/xfs/tmpfs use the kernel's coarse clock, a few ms).
const DIR_SETTLE: Duration = Duration::from_secs(5);

/// A directory listing is made at least this often, whatever the signal says (defence in
/// depth against a realtime clock stepped backwards).
const DIR_RELIST: Duration = Duration::from_secs(1);

/// What the writer knows about one directory sled may create files in.
#[derive(Debug)]
struct DirWatch {
    path: PathBuf,
    /// The directory's mtime read just before the last listing (`None`: never listed, or
    /// mtime unavailable).
    mtime: Option<SystemTime>,
    /// Wall-clock time just before the last listing.
    listed_at: SystemTime,
    /// Monotonic time of the last listing.
    listed: Option<Instant>,
}

impl DirWatch {
    fn new(path: PathBuf) -> Self {
        Self {
            path,
            mtime: None,
            listed_at: SystemTime::UNIX_EPOCH,
            listed: None,
        }
    }
}

struct Writer {
    db: sled::Db,
    tree: sled::Tree,
    /// The data directory and its `blobs` subdirectory.
    watched: [DirWatch; 2],
    /// Handle on sled's data file, for `fdatasync` (`None` in `OsBuffered` mode).
    db_file: Option<File>,
    /// Files already fsynced once (sled writes blobs and snapshots once, then never again).
    known_files: BTreeSet<PathBuf>,
    /// Committed coordinator epochs: the writer is the only one that changes them.
    epochs: HashMap<LogPartition, CoordinatorEpoch>,
    /// Committed producer-id high-water mark.
    next_producer_id: i64,
    shared: Arc<Shared>,
    max_batch: usize,
}

impl Writer {
    fn run(mut self, mut rx: mpsc::UnboundedReceiver<Request>) {
        let mut group = Vec::with_capacity(self.max_batch);
        while let Some(first) = rx.blocking_recv() {
            group.push(first);
            while group.len() < self.max_batch {
                match rx.try_recv() {
                    Ok(r) => group.push(r),
                    Err(_) => break,
                }
            }
            self.commit_group(&mut group);
        }
    }

    fn commit_group(&mut self, group: &mut Vec<Request>) {
        if let Err(e) = self.shared.check_poisoned() {
            for r in group.drain(..) {
                let _ = r.reply.send(Err(e.clone()));
            }
            return;
        }
        let mut epochs: HashMap<LogPartition, CoordinatorEpoch> = HashMap::new();
        let mut next_pid = self.next_producer_id;
        let mut batch = sled::Batch::default();
        // (reply, outcome); `Ok` outcomes are only sent if the commit succeeds.
        let mut outcomes = Vec::with_capacity(group.len());
        let mut accepted = 0u64;
        for req in group.drain(..) {
            let outcome = self.stage(req.op, &mut epochs, &mut next_pid, &mut batch);
            if outcome.is_ok() {
                accepted += 1;
            }
            outcomes.push((req.reply, outcome));
        }
        let rejected = u64::try_from(outcomes.len()).unwrap_or(u64::MAX) - accepted;
        self.shared.stats.lock().rejected += rejected;

        if accepted > 0 {
            if let Err(e) = self.commit(batch) {
                self.shared.poison(format!("commit failed: {e}"));
                for (reply, outcome) in outcomes {
                    let _ = reply.send(outcome.and(Err(e.clone())));
                }
                return;
            }
            self.epochs.extend(epochs);
            self.next_producer_id = next_pid;
            let mut stats = self.shared.stats.lock();
            stats.batches += 1;
            stats.requests += accepted;
            stats.largest_batch = stats.largest_batch.max(accepted);
        }
        for (reply, outcome) in outcomes {
            let _ = reply.send(outcome);
        }
    }

    /// Checks `op` against the committed state plus what this group already staged, and adds
    /// its writes to `batch` if accepted. Nothing is staged for a rejected op.
    fn stage(
        &self,
        op: Op,
        epochs: &mut HashMap<LogPartition, CoordinatorEpoch>,
        next_pid: &mut i64,
        batch: &mut sled::Batch,
    ) -> Result<Reply, LogError> {
        let current = |p: &LogPartition, staged: &HashMap<_, _>| {
            staged.get(p).or_else(|| self.epochs.get(p)).copied()
        };
        match op {
            Op::Claim(p, e) => {
                if let Some(c) = current(&p, epochs)
                    && e < c
                {
                    return Err(LogError::Fenced {
                        partition: p,
                        current: c,
                    });
                }
                let key = codec::epoch_key(p);
                batch.insert(&key[..], codec::encode_epoch(&key, e)?);
                epochs.insert(p, e);
                Ok(Reply::Done)
            }
            Op::ClaimNext(p) => {
                // Staged claims of this group count: two in one group get distinct epochs.
                let e = next_epoch(p, current(&p, epochs))?;
                let key = codec::epoch_key(p);
                batch.insert(&key[..], codec::encode_epoch(&key, e)?);
                epochs.insert(p, e);
                Ok(Reply::Epoch(e))
            }
            Op::Append(p, e, entries) => {
                match current(&p, epochs) {
                    Some(c) if e < c => {
                        return Err(LogError::Fenced {
                            partition: p,
                            current: c,
                        });
                    }
                    Some(c) if e == c => {}
                    _ => {
                        return Err(LogError::NotClaimed {
                            partition: p,
                            epoch: e,
                        });
                    }
                }
                // Encode everything first so that a bad entry rejects the whole append.
                let mut writes = Vec::with_capacity(entries.len());
                for entry in &entries {
                    let key = codec::record_key(p, &entry.id);
                    let value = match &entry.op {
                        LogOp::Upsert(r) => Some(codec::encode_record(&key, r)?),
                        LogOp::Tombstone => None,
                    };
                    writes.push((key, value));
                }
                for (k, v) in writes {
                    match v {
                        Some(v) => batch.insert(k, v),
                        None => batch.remove(k),
                    }
                }
                Ok(Reply::Done)
            }
            Op::Allocate(len, floor) => {
                if len == 0 {
                    return Err(LogError::InvalidArgument(
                        "producer id block length must be positive".into(),
                    ));
                }
                let first = (*next_pid).max(floor.0);
                let next = first.checked_add(i64::from(len)).ok_or_else(|| {
                    LogError::InvalidArgument("producer id space exhausted".into())
                })?;
                batch.insert(
                    codec::PRODUCER_ID_KEY,
                    codec::encode_next_producer_id(next)?,
                );
                *next_pid = next;
                Ok(Reply::Block(ProducerIdBlock {
                    first: ProducerId(first),
                    len,
                }))
            }
        }
    }

    fn commit(&mut self, batch: sled::Batch) -> Result<(), LogError> {
        self.tree.apply_batch(batch).map_err(sled_err)?;
        self.db.flush().map_err(sled_err)?;
        self.make_durable()
    }

    /// The real durability step after sled's `flush()` (which at most issues `sync_file_range`).
    fn make_durable(&mut self) -> Result<(), LogError> {
        let Some(db_file) = &self.db_file else {
            return Ok(());
        };
        if std::mem::take(&mut *self.shared.fail_next_sync.lock()) {
            return Err(LogError::from(std::io::Error::other(
                "injected fsync failure",
            )));
        }
        db_file.sync_data()?;
        self.shared.stats.lock().syncs += 1;
        for i in 0..self.watched.len() {
            self.sync_new_files_if_changed(i)?;
        }
        Ok(())
    }

    /// Runs [`Writer::sync_new_files`] on watched directory `i` unless it cannot have a new
    /// entry since its last listing.
    ///
    /// Listing both directories (getdents64 + an open per entry) on every batch cost about 1% of
    /// the daemon's CPU, while sled creates a file (a blob, a snapshot) rarely. Creating, renaming
    /// or deleting an entry updates the directory's mtime, which one `statx` reads. The listing
    /// is skipped only if
    ///
    /// 1. the mtime equals the one read just *before* the last listing, and
    /// 2. that listing started more than [`DIR_SETTLE`] after that mtime.
    ///
    /// Why that is enough: an entry created before the last listing started was seen by it. One
    /// created after it started (wall-clock time `t >= listed_at`) stamps the directory with a
    /// time of at least `listed_at - g` (the file system's timestamp granularity `g`, or the
    /// kernel's coarse-clock lag, both below [`DIR_SETTLE`]), which by (2) is later than the
    /// remembered mtime, so (1) fails and the directory is listed before this batch is acked.
    /// While a directory changed recently (2) fails and it is listed on every batch, as before.
    /// No mtime (unsupported, or the directory does not exist yet: its creation changes the
    /// parent's mtime) means: list. Independently, each directory is listed at least every
    /// [`DIR_RELIST`].
    fn sync_new_files_if_changed(&mut self, i: usize) -> Result<(), LogError> {
        let w = &self.watched[i];
        let mtime = match std::fs::metadata(&w.path) {
            Ok(m) => m.modified().ok(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        let settled = match (mtime, w.mtime) {
            (Some(now), Some(then)) => {
                now == then
                    && w.listed_at
                        .duration_since(then)
                        .is_ok_and(|d| d > DIR_SETTLE)
            }
            _ => false,
        };
        let recent = w.listed.is_some_and(|at| at.elapsed() < DIR_RELIST);
        if settled && recent {
            return Ok(());
        }
        let listed_at = SystemTime::now();
        let path = w.path.clone();
        self.sync_new_files(&path)?;
        let w = &mut self.watched[i];
        w.mtime = mtime;
        w.listed_at = listed_at;
        w.listed = Some(Instant::now());
        Ok(())
    }

    /// Fsyncs the files of `dir` not seen before, then `dir` itself if any were new.
    fn sync_new_files(&mut self, dir: &Path) -> Result<(), LogError> {
        let entries = match std::fs::read_dir(dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        self.shared.stats.lock().dir_listings += 1;
        let mut new = false;
        let mut seen = BTreeSet::new();
        for entry in entries {
            let entry = entry?;
            let path = entry.path();
            seen.insert(path.clone());
            if !entry.file_type()?.is_file() || self.known_files.contains(&path) {
                continue;
            }
            // A snapshot being generated is fsynced by sled itself and renamed when done.
            if path.extension().is_some_and(|e| e == "generating") {
                continue;
            }
            match File::open(&path) {
                Ok(f) => f.sync_all()?,
                // sled may delete an old blob or snapshot between listing and opening.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e.into()),
            }
            {
                let mut stats = self.shared.stats.lock();
                stats.syncs += 1;
                stats.new_files += 1;
            }
            self.known_files.insert(path);
            new = true;
        }
        // Forget files sled deleted (old blobs and snapshots).
        self.known_files
            .retain(|p| p.parent() != Some(dir) || seen.contains(p));
        if new {
            File::open(dir)?.sync_all()?;
            self.shared.stats.lock().syncs += 1;
        }
        Ok(())
    }
}
