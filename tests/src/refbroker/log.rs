//! One partition's log: its record batches (exactly the bytes a Fetch returns, base offsets
//! assigned by the broker) in memory with an index of batch positions, written through the
//! broker's [`Journal`], and which of its appends the journal's group commit has made durable.

use std::collections::VecDeque;
use std::sync::Arc;

use anyhow::Context;
use bytes::{Bytes, BytesMut};
use markers::participant::BatchHeader;

use super::journal::Journal;

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
    topic: String,
    partition: i32,
    journal: Arc<Journal>,
    data: BytesMut,
    index: Vec<IndexEntry>,
    next_offset: i64,
    /// Appends the journal may not have synced yet, oldest first: the journal position that
    /// covers each, and the log end offset after it.
    unsynced: VecDeque<(u64, i64)>,
    /// The log end offset below which everything is durable.
    durable_end: i64,
}

impl PartitionLog {
    /// The log of `topic`/`partition` from the batches the journal held for it on open (which
    /// count as durable). Fails if they do not follow one another offset by offset.
    pub(crate) fn recover(
        journal: Arc<Journal>,
        (topic, partition): (&str, i32),
        batches: Vec<Bytes>,
    ) -> anyhow::Result<Self> {
        let mut log = Self {
            topic: topic.to_owned(),
            partition,
            journal,
            data: BytesMut::with_capacity(batches.iter().map(Bytes::len).sum()),
            index: Vec::with_capacity(batches.len()),
            next_offset: 0,
            unsynced: VecDeque::new(),
            durable_end: 0,
        };
        for batch in batches {
            let (header, _) = BatchHeader::parse(&batch)
                .with_context(|| format!("journal batch at offset {}", log.next_offset))?;
            anyhow::ensure!(
                header.base_offset == log.next_offset,
                "journal batch with base offset {} where {} follows",
                header.base_offset,
                log.next_offset
            );
            log.push(&batch, &header, header.base_offset);
        }
        log.durable_end = log.next_offset;
        Ok(log)
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

    /// Appends one batch with its first 8 bytes rewritten to `base_offset` (the checksum does
    /// not cover the base offset): appended to the journal, not synced; the caller makes it
    /// durable with [`PartitionLog::sync_position`] and [`Journal::sync_through`].
    pub(crate) fn append(
        &mut self,
        batch: &[u8],
        header: &BatchHeader,
        base_offset: i64,
    ) -> std::io::Result<()> {
        let position = self
            .journal
            .append((&self.topic, self.partition), batch, base_offset)?;
        self.push(batch, header, base_offset);
        self.unsynced.push_back((position, self.next_offset));
        Ok(())
    }

    fn push(&mut self, batch: &[u8], header: &BatchHeader, base_offset: i64) {
        let pos = self.data.len();
        self.data.extend_from_slice(batch);
        self.data[pos..pos + 8].copy_from_slice(&base_offset.to_be_bytes());
        let last_offset = base_offset + i64::from(header.last_offset_delta);
        self.index.push(IndexEntry {
            base_offset,
            last_offset,
            max_timestamp_ms: header.max_timestamp_ms,
            pos,
            len: batch.len(),
        });
        self.next_offset = last_offset + 1;
    }

    /// The journal this log is written through.
    pub(crate) fn journal(&self) -> &Arc<Journal> {
        &self.journal
    }

    /// The journal position to sync through for every offset below `end` to be durable, or
    /// `None` if it is already. Durable ends fall on batch boundaries, so any `end` inside a
    /// batch asks for the whole batch. Fails if `end` is past the log end.
    pub(crate) fn sync_position(&self, end: i64) -> std::io::Result<Option<u64>> {
        if end > self.next_offset {
            return Err(std::io::Error::other(format!(
                "offsets below {end} asked durable, the log ends at {}",
                self.next_offset
            )));
        }
        Ok(self
            .unsynced
            .iter()
            .find(|&&(_, after)| after >= end)
            .map(|&(position, _)| position))
    }

    /// The log end offset below which everything is durable (what the journal's last group
    /// commit covers).
    pub(crate) fn durable_end(&mut self) -> i64 {
        let durable = self.journal.durable_position();
        while let Some(&(position, after)) = self.unsynced.front() {
            if position > durable {
                break;
            }
            self.durable_end = after;
            self.unsynced.pop_front();
        }
        self.durable_end
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::refbroker::journal::Flush;
    use crate::refbroker::journal::tests::batch;

    fn append(log: &mut PartitionLog) -> i64 {
        let b = batch();
        let (h, _) = BatchHeader::parse(&b).unwrap();
        let base = log.next_offset();
        log.append(&b, &h, base).unwrap();
        log.next_offset()
    }

    #[tokio::test]
    async fn appends_are_durable_once_the_journal_is_synced_past_them() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.log");
        let (journal, _) = Journal::open(&path, Flush::Fsync).unwrap();
        let mut a = PartitionLog::recover(Arc::clone(&journal), ("t", 0), Vec::new()).unwrap();
        let mut b = PartitionLog::recover(Arc::clone(&journal), ("t", 1), Vec::new()).unwrap();
        let first = append(&mut a);
        let other = append(&mut b);
        assert_eq!(
            (a.durable_end(), b.durable_end()),
            (0, 0),
            "written, not synced"
        );
        assert!(a.sync_position(first + 1).is_err(), "not written");
        // one sync for a's entry covers b's later one too: it syncs all that is written
        journal
            .sync_through(a.sync_position(first).unwrap().unwrap())
            .await
            .unwrap();
        assert_eq!((a.durable_end(), b.durable_end()), (first, other));
        assert_eq!(a.sync_position(first).unwrap(), None, "durable already");
        let end = append(&mut a);
        assert_eq!(a.durable_end(), first);
        journal
            .sync_through(a.sync_position(end).unwrap().unwrap())
            .await
            .unwrap();
        assert_eq!(a.durable_end(), end);
        drop((a, b, journal));
        let (journal, mut recovered) = Journal::open(&path, Flush::Fsync).unwrap();
        let batches = recovered.remove(&("t".to_owned(), 0)).unwrap();
        let mut a = PartitionLog::recover(journal, ("t", 0), batches).unwrap();
        assert_eq!((a.next_offset(), a.durable_end()), (end, end));
        assert_eq!(a.batches().count(), 2);
    }

    #[test]
    fn a_gap_in_the_recovered_offsets_is_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let (journal, _) = Journal::open(&dir.path().join("journal.log"), Flush::None).unwrap();
        let mut b = batch().to_vec();
        b[..8].copy_from_slice(&5i64.to_be_bytes());
        let err = PartitionLog::recover(journal, ("t", 0), vec![Bytes::from(b)]).unwrap_err();
        assert!(err.to_string().contains("base offset 5 where 0"), "{err}");
    }
}
