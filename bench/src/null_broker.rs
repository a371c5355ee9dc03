//! `--null-broker HOST:PORT`: the test kit's fake broker as a data broker that keeps nothing.
//! It leads every partition of one topic, acknowledges every Produce and every
//! WriteTxnMarkers at once and sends transaction clients to `--coordinator`: with it,
//! committed txn/s measure the coordinator, not a participant's fsyncs.
//!
//! With `--stats-listen HOST:PORT` it also tells, to each connection there, one line
//! `answered N cpu_s X`: the requests it answered and its process's CPU seconds so far. A run
//! given `--null-broker-stats` samples that line at both ends of its window, which gives the
//! floor of a server that only answers (CPU per request) beside the coordinator's CPU per
//! transaction, on the same machine in the same run.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use txn_testkit::fake_broker::{FakeBroker, FakeBrokerConfig};

use crate::stats;

/// Serves until the process is killed.
pub(crate) async fn serve(
    listen: &str,
    topic: &str,
    partitions: i32,
    coordinator: &str,
    stats_listen: Option<&str>,
) -> anyhow::Result<()> {
    let coordinator: SocketAddr = tokio::net::lookup_host(coordinator)
        .await
        .with_context(|| format!("--coordinator {coordinator}"))?
        .next()
        .with_context(|| format!("--coordinator {coordinator} has no address"))?;
    let broker = FakeBroker::start(
        listen,
        FakeBrokerConfig {
            topics: vec![(topic.to_owned(), partitions)],
            coordinator: Some(coordinator),
            ..FakeBrokerConfig::default()
        },
    )
    .await
    .with_context(|| format!("--null-broker {listen}"))?;
    let stats_listener = match stats_listen {
        Some(at) => Some(
            TcpListener::bind(at)
                .await
                .with_context(|| format!("--stats-listen {at}"))?,
        ),
        None => None,
    };
    if let Some(l) = &stats_listener {
        println!("null broker stats on {}", l.local_addr()?);
    }
    println!("null broker listening on {}", broker.addr());
    let Some(listener) = stats_listener else {
        std::future::pending::<()>().await;
        return Ok(());
    };
    loop {
        let (mut s, _) = listener.accept().await?;
        let cpu_s = stats::sample_pid(std::process::id()).map_or(0.0, |p| p.cpu_s);
        let line = format!("answered {} cpu_s {cpu_s}\n", broker.answered());
        // A reader that went away misses one sample; the broker keeps serving.
        let _ = s.write_all(line.as_bytes()).await;
    }
}

/// The null broker's counters at one instant.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct NullSample {
    answered: u64,
    cpu_s: f64,
}

impl NullSample {
    /// Reads one line from the null broker's `--stats-listen` address.
    pub(crate) async fn read(at: &str) -> anyhow::Result<Self> {
        let s = tokio::time::timeout(Duration::from_secs(5), TcpStream::connect(at))
            .await
            .with_context(|| format!("null broker stats {at}: connect timed out"))?
            .with_context(|| format!("null broker stats {at}"))?;
        let mut line = String::new();
        tokio::time::timeout(
            Duration::from_secs(5),
            BufReader::new(s).read_line(&mut line),
        )
        .await
        .with_context(|| format!("null broker stats {at}: no line"))??;
        Self::parse(&line).with_context(|| format!("null broker stats {at}: {line:?}"))
    }

    fn parse(line: &str) -> anyhow::Result<Self> {
        let f: Vec<&str> = line.split_whitespace().collect();
        let [.., "answered", n, "cpu_s", cpu] = f.as_slice() else {
            bail!("not `answered N cpu_s X`");
        };
        Ok(Self {
            answered: n.parse()?,
            cpu_s: cpu.parse()?,
        })
    }
}

/// The null broker over one measured window: the cost of answering a request and nothing more.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub(crate) struct NullBrokerUsage {
    /// Requests it answered inside the window (the run's Produce and Metadata, the
    /// coordinator's WriteTxnMarkers).
    pub(crate) requests: u64,
    /// Its process's CPU seconds inside the window.
    pub(crate) cpu_s: f64,
    /// CPU microseconds per answered request.
    pub(crate) cpu_us_per_request: f64,
}

impl NullBrokerUsage {
    /// The usage between samples `a` and `b`.
    pub(crate) fn between(a: NullSample, b: NullSample) -> Self {
        let requests = b.answered.saturating_sub(a.answered);
        let cpu_s = (b.cpu_s - a.cpu_s).max(0.0);
        #[allow(clippy::cast_precision_loss)]
        let cpu_us_per_request = if requests > 0 {
            cpu_s * 1e6 / requests as f64
        } else {
            0.0
        };
        Self {
            requests,
            cpu_s,
            cpu_us_per_request,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stats_line_parses_and_bad_ones_do_not() {
        let s = NullSample::parse("answered 42 cpu_s 1.5\n").expect("parse");
        assert_eq!(s.answered, 42);
        assert!((s.cpu_s - 1.5).abs() < 1e-9);
        assert!(NullSample::parse("answered x cpu_s 1").is_err());
        assert!(NullSample::parse("hello").is_err());
    }

    #[test]
    fn usage_is_cpu_per_request_inside_the_window() {
        let a = NullSample {
            answered: 100,
            cpu_s: 2.0,
        };
        let b = NullSample {
            answered: 1100,
            cpu_s: 2.05,
        };
        let u = NullBrokerUsage::between(a, b);
        assert_eq!(u.requests, 1000);
        assert!((u.cpu_us_per_request - 50.0).abs() < 1e-6);
        assert_eq!(NullBrokerUsage::between(b, b).cpu_us_per_request, 0.0);
    }
}
