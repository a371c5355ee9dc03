//! History checks over the client programs' events, after Jepsen's Kafka checker: aborted
//! reads, lost writes, duplicates, inconsistent offsets, order, and all-or-nothing visibility
//! of transactions whose outcome the client does not know.

use std::collections::BTreeMap;

use super::Json;

/// One record a consumer read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Partition.
    pub partition: i64,
    /// Offset.
    pub offset: i64,
    /// Value.
    pub value: String,
}

/// What a `consume` run read.
#[derive(Debug, Clone)]
pub struct ReadResult {
    /// Records in the order they were delivered.
    pub records: Vec<Record>,
    /// Whether every partition reached its end (LSO for read_committed).
    pub eof: bool,
    /// Whether the reader stopped at its deadline.
    pub timed_out: bool,
}

impl ReadResult {
    /// From a `consume` run's events.
    pub fn from_events(events: &[Json]) -> Self {
        let mut records = Vec::new();
        let mut eof = false;
        let mut timed_out = true;
        for e in events {
            match ev(e) {
                "record" => records.push(Record {
                    partition: int(e, "partition"),
                    offset: int(e, "offset"),
                    value: string(e, "value"),
                }),
                "done" => {
                    eof = e.get("eof").and_then(Json::as_bool).unwrap_or(false);
                    timed_out = e.get("timed_out").and_then(Json::as_bool).unwrap_or(true);
                }
                _ => {}
            }
        }
        Self {
            records,
            eof,
            timed_out,
        }
    }
}

/// The event name.
pub fn ev(e: &Json) -> &str {
    e.get("ev").and_then(Json::as_str).unwrap_or("")
}

/// An integer field (panics with the event if missing).
pub fn int(e: &Json, k: &str) -> i64 {
    e.get(k)
        .and_then(Json::as_i64)
        .unwrap_or_else(|| panic!("event without integer {k}: {e:?}"))
}

/// A string field (panics with the event if missing).
fn string(e: &Json, k: &str) -> String {
    e.get(k)
        .and_then(Json::as_str)
        .unwrap_or_else(|| panic!("event without string {k}: {e:?}"))
        .to_owned()
}

/// The array field `k` of event `e` (a panic naming the event if it has none).
fn array<'a>(e: &'a Json, k: &str) -> &'a [Json] {
    e.get(k)
        .and_then(Json::as_array)
        .unwrap_or_else(|| panic!("event without array {k}: {e:?}"))
}

/// `[[partition, value, offset?], ...]` of field `k`.
pub fn values(e: &Json, k: &str) -> Vec<(i64, String, Option<i64>)> {
    array(e, k)
        .iter()
        .map(|t| {
            let t = t
                .as_array()
                .unwrap_or_else(|| panic!("bad value tuple in {e:?}"));
            let p = t[0]
                .as_i64()
                .unwrap_or_else(|| panic!("bad partition in {e:?}"));
            let v = t[1]
                .as_str()
                .unwrap_or_else(|| panic!("bad value in {e:?}"))
                .to_owned();
            let o = t.get(2).and_then(Json::as_i64).filter(|o| *o >= 0);
            (p, v, o)
        })
        .collect()
}

/// `[[partition, offset], ...]` of field `k`, by partition.
pub fn offsets(e: &Json, k: &str) -> BTreeMap<i64, i64> {
    array(e, k)
        .iter()
        .map(|pair| {
            let pair = pair
                .as_array()
                .unwrap_or_else(|| panic!("bad offset pair in {e:?}"));
            (pair[0].as_i64().expect("p"), pair[1].as_i64().expect("o"))
        })
        .collect()
}

/// The end offset of each partition after the acknowledged `values` (all must have offsets).
fn end_offsets(values: &[(i64, String, Option<i64>)]) -> BTreeMap<i64, i64> {
    let mut end: BTreeMap<i64, i64> = BTreeMap::new();
    for (p, v, o) in values {
        let o = o.unwrap_or_else(|| panic!("{v} not acknowledged"));
        let e = end.entry(*p).or_default();
        *e = (*e).max(o + 1);
    }
    end
}

/// The values a seeding program reported in its `seeded` event, `per_partition` on each of
/// `partitions` partitions, each acknowledged at an offset, and the end offset of each partition
/// after them.
pub type Seeded = (Vec<(i64, String, Option<i64>)>, BTreeMap<i64, i64>);

/// The [`Seeded`] inputs of a seeding program's `events`.
pub fn seeded_inputs(events: &[Json], partitions: usize, per_partition: usize) -> Seeded {
    let seeded = events
        .iter()
        .find(|e| ev(e) == "seeded")
        .unwrap_or_else(|| panic!("no seeded event: {events:?}"));
    let inputs = values(seeded, "values");
    assert_eq!(inputs.len(), partitions * per_partition, "{inputs:?}");
    let end = end_offsets(&inputs);
    (inputs, end)
}

/// What a value's visibility must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Must {
    /// Acknowledged committed: must be read, exactly once.
    Present,
    /// Aborted, fenced or timed out: must never be read.
    Absent,
    /// Outcome unknown to the client: all values of its transaction or none.
    Either,
}

/// One written value and what must hold for it.
#[derive(Debug, Clone)]
pub struct Expected {
    /// The transaction it belongs to (for all-or-nothing).
    pub txn: String,
    /// Partition it was written to.
    pub partition: i64,
    /// Offset the producer's acknowledgement gave, if any.
    pub offset: Option<i64>,
    /// Visibility rule.
    pub must: Must,
}

/// The expected history: values in production order.
#[derive(Debug, Clone, Default)]
pub struct Expect {
    order: Vec<String>,
    by_value: BTreeMap<String, Expected>,
}

impl Expect {
    /// Adds one value (in production order).
    pub fn add(&mut self, value: &str, e: Expected) {
        assert!(
            self.by_value.insert(value.to_owned(), e).is_none(),
            "value {value} written twice: the client programs must use unique values"
        );
        self.order.push(value.to_owned());
    }

    /// Adds every value of a transaction.
    pub fn add_txn(&mut self, txn: &str, vals: &[(i64, String, Option<i64>)], must: Must) {
        for (p, v, o) in vals {
            self.add(
                v,
                Expected {
                    txn: txn.to_owned(),
                    partition: *p,
                    offset: *o,
                    must,
                },
            );
        }
    }

    /// The values that must be present.
    pub fn present(&self) -> usize {
        self.by_value
            .values()
            .filter(|e| e.must == Must::Present)
            .count()
    }

    /// Checks a read against the history; returns every violation found.
    pub fn check(&self, what: &str, read: &ReadResult) -> Vec<String> {
        let mut bad = Vec::new();
        if !read.eof || read.timed_out {
            bad.push(format!(
                "{what}: the reader did not reach the end of every partition (eof={}, timed_out={})",
                read.eof, read.timed_out
            ));
        }
        let index: BTreeMap<&str, usize> = self
            .order
            .iter()
            .enumerate()
            .map(|(i, v)| (v.as_str(), i))
            .collect();
        let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
        let mut last_per_partition: BTreeMap<i64, (i64, usize, &str)> = BTreeMap::new();
        let mut offsets: BTreeMap<(i64, i64), &str> = BTreeMap::new();
        for r in &read.records {
            *seen.entry(r.value.as_str()).or_default() += 1;
            if let Some(prev) = offsets.insert((r.partition, r.offset), r.value.as_str())
                && prev != r.value
            {
                bad.push(format!(
                    "{what}: inconsistent offsets: partition {} offset {} holds {prev} and {}",
                    r.partition, r.offset, r.value
                ));
            }
            let Some(e) = self.by_value.get(&r.value) else {
                bad.push(format!(
                    "{what}: read a value nobody wrote: {} at {}/{}",
                    r.value, r.partition, r.offset
                ));
                continue;
            };
            if e.must == Must::Absent {
                bad.push(format!(
                    "{what}: aborted read (G1a): {} of txn {} at {}/{}",
                    r.value, e.txn, r.partition, r.offset
                ));
            }
            if e.partition != r.partition {
                bad.push(format!(
                    "{what}: {} was written to partition {} but read from {}",
                    r.value, e.partition, r.partition
                ));
            }
            if let Some(o) = e.offset
                && o != r.offset
            {
                bad.push(format!(
                    "{what}: {} was acknowledged at offset {o} but read at offset {}",
                    r.value, r.offset
                ));
            }
            let i = index[r.value.as_str()];
            if let Some((lo, li, lv)) = last_per_partition.get(&r.partition) {
                if r.offset <= *lo {
                    bad.push(format!(
                        "{what}: partition {} went backwards: {lv}@{lo} then {}@{}",
                        r.partition, r.value, r.offset
                    ));
                }
                if i < *li {
                    bad.push(format!(
                        "{what}: partition {} out of production order: {lv} before {}",
                        r.partition, r.value
                    ));
                }
            }
            last_per_partition.insert(r.partition, (r.offset, i, r.value.as_str()));
        }
        for (v, n) in &seen {
            if *n > 1 {
                bad.push(format!("{what}: duplicate: {v} read {n} times"));
            }
        }
        let mut txn_seen: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
        for v in &self.order {
            let e = &self.by_value[v];
            let read_it = seen.contains_key(v.as_str());
            if e.must == Must::Present && !read_it {
                bad.push(format!(
                    "{what}: lost write: committed {v} (txn {}, partition {}) was never read",
                    e.txn, e.partition
                ));
            }
            if e.must == Must::Either {
                let s = txn_seen.entry(e.txn.as_str()).or_default();
                s.0 += 1;
                if read_it {
                    s.1 += 1;
                }
            }
        }
        for (txn, (all, read_n)) in txn_seen {
            if read_n != 0 && read_n != all {
                bad.push(format!(
                    "{what}: txn {txn} (outcome unknown) is partly visible: {read_n} of {all} values"
                ));
            }
        }
        bad
    }
}

/// Panics with every violation and the read, if there are any.
pub fn assert_clean(violations: &[String], read: &ReadResult) {
    if !violations.is_empty() {
        let records: Vec<String> = read
            .records
            .iter()
            .map(|r| format!("  {}/{} {}", r.partition, r.offset, r.value))
            .collect();
        panic!(
            "history check failed:\n{}\nrecords read:\n{}",
            violations.join("\n"),
            records.join("\n")
        );
    }
}

/// What a producer's `commit` and `abort` events say its topic must hold.
pub struct Outcomes {
    /// For read_committed: committed records present, aborted ones absent.
    pub committed: Expect,
    /// For read_uncommitted: every record present.
    pub all: Expect,
    /// `C` or `A` per transaction ended, in order.
    pub sequence: String,
}

impl Outcomes {
    /// The outcomes of `events`, each transaction named by `txn` of its event.
    pub fn of(events: &[Json], txn: impl Fn(&Json) -> String) -> Self {
        let mut out = Self {
            committed: Expect::default(),
            all: Expect::default(),
            sequence: String::new(),
        };
        for e in events {
            let (must, letter) = match ev(e) {
                "commit" => (Must::Present, 'C'),
                "abort" => (Must::Absent, 'A'),
                _ => continue,
            };
            let name = txn(e);
            out.committed.add_txn(&name, &values(e, "values"), must);
            out.all.add_txn(&name, &values(e, "values"), Must::Present);
            out.sequence.push(letter);
        }
        out
    }
}

/// What the events of a producer stream (`txns` of lr.py or kp.py) promise about the topic:
/// each transaction named by its event and first value (`commit-<value>`), and how many ended
/// each way.
pub struct Stream {
    /// Committed transactions present, aborted and abandoned ones absent, ambiguous ones whole
    /// or absent.
    pub expect: Expect,
    /// Transactions whose commit succeeded.
    pub commits: usize,
    /// Transactions the producer aborted.
    pub aborts: usize,
    /// kp.py: a transaction left without asking for its commit; the next instance's
    /// InitProducerId aborts it.
    pub abandoned: usize,
    /// kp.py: a commit that may have been sent: all or nothing.
    pub ambiguous: usize,
}

impl Stream {
    /// The promises of `events`.
    pub fn of<'a>(events: impl IntoIterator<Item = &'a Json>) -> Self {
        let mut stream = Self {
            expect: Expect::default(),
            commits: 0,
            aborts: 0,
            abandoned: 0,
            ambiguous: 0,
        };
        for e in events {
            let (must, count) = match ev(e) {
                "commit" => (Must::Present, &mut stream.commits),
                "abort" => (Must::Absent, &mut stream.aborts),
                "abandoned" => (Must::Absent, &mut stream.abandoned),
                "ambiguous" => (Must::Either, &mut stream.ambiguous),
                _ => continue,
            };
            *count += 1;
            let vals = values(e, "values");
            let txn = format!("{}-{}", ev(e), vals[0].1);
            stream.expect.add_txn(&txn, &vals, must);
        }
        stream
    }
}

/// The times (`t`, s since the Unix epoch) of the commits in `events` after `after`.
pub fn commits_after(events: &[Json], after: f64) -> Vec<f64> {
    events
        .iter()
        .filter(|e| ev(e) == "commit")
        .filter_map(|e| e.get("t").and_then(Json::as_f64))
        .filter(|t| *t > after)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::{Expect, Expected, Must, ReadResult, Record};

    #[test]
    fn checker_flags_each_anomaly() {
        let mut x = Expect::default();
        let c = |p, o| Expected {
            txn: "t0".into(),
            partition: p,
            offset: Some(o),
            must: Must::Present,
        };
        x.add("a", c(0, 0));
        x.add("b", c(0, 1));
        x.add(
            "z",
            Expected {
                txn: "t1".into(),
                partition: 0,
                offset: Some(2),
                must: Must::Absent,
            },
        );
        let rec = |p, o, v: &str| Record {
            partition: p,
            offset: o,
            value: v.into(),
        };
        let ok = ReadResult {
            records: vec![rec(0, 0, "a"), rec(0, 1, "b")],
            eof: true,
            timed_out: false,
        };
        assert!(x.check("ok", &ok).is_empty());
        let bad = ReadResult {
            records: vec![rec(0, 1, "b"), rec(0, 1, "b"), rec(0, 2, "z")],
            eof: true,
            timed_out: false,
        };
        let v = x.check("bad", &bad).join("\n");
        assert!(v.contains("lost write"), "{v}");
        assert!(v.contains("duplicate"), "{v}");
        assert!(v.contains("aborted read"), "{v}");
        assert!(v.contains("went backwards"), "{v}");
        let stuck = ReadResult {
            records: vec![rec(0, 0, "a")],
            eof: false,
            timed_out: true,
        };
        assert!(
            x.check("stuck", &stuck)
                .join("\n")
                .contains("did not reach the end")
        );
    }
}
