//! One partition's durable log: a single append-only segment file of raw v2 record batches
//! (exactly the bytes a Fetch returns, base offsets assigned by the broker), mirrored in memory
//! with an index of batch positions.
//!
//! On open the file is scanned batch by batch; a torn tail (a batch cut short by a crash, or
//! failing its checksum) is truncated away, as Kafka's log recovery does.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

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

/// A partition log.
#[derive(Debug)]
pub(crate) struct PartitionLog {
    path: PathBuf,
    file: File,
    data: BytesMut,
    index: Vec<IndexEntry>,
    next_offset: i64,
    /// Set after a failed write or fsync: what reached the file is unknown, so nothing more is
    /// appended (fail-stop; a restart recovers the valid prefix).
    poisoned: bool,
}

impl PartitionLog {
    /// Opens (or creates) the segment at `path` and rebuilds the index.
    pub(crate) fn open(path: &Path) -> std::io::Result<Self> {
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
        Ok(Self {
            path: path.to_owned(),
            file,
            data,
            index,
            next_offset,
            poisoned: false,
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

    /// Appends one batch whose first 8 bytes are rewritten to `base_offset` (the checksum does
    /// not cover the base offset). `sync` forces it to disk before returning.
    pub(crate) fn append(
        &mut self,
        batch: &[u8],
        header: &BatchHeader,
        base_offset: i64,
        sync: bool,
    ) -> std::io::Result<()> {
        if self.poisoned {
            return Err(std::io::Error::other(
                "partition log poisoned by an earlier failure",
            ));
        }
        let mut owned = batch.to_vec();
        owned[..8].copy_from_slice(&base_offset.to_be_bytes());
        let written = self
            .file
            .write_all(&owned)
            .and_then(|()| if sync { self.file.sync_data() } else { Ok(()) });
        if let Err(e) = written {
            tracing::error!(path = %self.path.display(), error = %e, "partition log write failed; poisoned");
            self.poisoned = true;
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
