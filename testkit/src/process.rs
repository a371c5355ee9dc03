//! A child process's stdout as lines, and the announcement of a server that starts: the daemon
//! and refbroker print `NAME listening on ADDR` (their first listener) once they serve, then
//! `NAME listening on LISTENER://ADDR` for each listener, right after.

use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

/// How long a server's named-listener lines may lag behind the line before them.
const LISTENER_LINES_GAP: Duration = Duration::from_millis(200);

/// The lines a child prints, read on a thread of their own that drains the pipe to its end
/// (the child never blocks on a full pipe, also once nobody reads the lines).
#[derive(Debug)]
pub struct StdoutLines {
    lines: Receiver<String>,
}

/// A server's announcement that it serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listening {
    /// The first listener's address (`PREFIX ADDR`).
    pub addr: SocketAddr,
    /// The lines printed before it.
    pub before: Vec<String>,
}

/// Each listener of a server by name (`PREFIX NAME://ADDR`), in the order printed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Listeners(pub Vec<(String, SocketAddr)>);

impl Listeners {
    /// The address of the listener named `name`.
    pub fn get(&self, name: &str) -> Option<SocketAddr> {
        self.0.iter().find(|(n, _)| n == name).map(|&(_, a)| a)
    }
}

impl StdoutLines {
    /// Starts reading `out` (a child's stdout) line by line.
    pub fn read(out: impl Read + Send + 'static) -> Self {
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            let mut reading = true;
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if reading && tx.send(line).is_err() {
                    reading = false; // nobody reads: keep draining
                }
            }
        });
        Self { lines }
    }

    /// The next line, waiting up to `timeout`: `Disconnected` once the child closed its stdout
    /// and every line was read.
    pub fn next(&self, timeout: Duration) -> Result<String, RecvTimeoutError> {
        self.lines.recv_timeout(timeout)
    }

    /// Waits up to `startup` for the line `PREFIX ADDR` (for example `"txn-coordinator
    /// listening on "`).
    pub fn listening(&self, prefix: &str, startup: Duration) -> anyhow::Result<Listening> {
        let deadline = Instant::now() + startup;
        let mut before = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = match self.next(left) {
                Ok(line) => line,
                Err(RecvTimeoutError::Timeout) => {
                    anyhow::bail!("no {prefix:?} line within {startup:?}; before it: {before:?}")
                }
                Err(RecvTimeoutError::Disconnected) => {
                    anyhow::bail!("stdout closed before a {prefix:?} line; before it: {before:?}")
                }
            };
            match line.strip_prefix(prefix) {
                Some(rest) if !rest.contains("://") => {
                    let addr = parse(rest)?;
                    return Ok(Listening { addr, before });
                }
                _ => before.push(line),
            }
        }
    }

    /// After [`listening`](Self::listening): the `PREFIX NAME://ADDR` lines printed right after
    /// it (each within 200 ms of the one before).
    pub fn listeners(&self, prefix: &str) -> anyhow::Result<Listeners> {
        let mut listeners = Vec::new();
        while let Ok(line) = self.next(LISTENER_LINES_GAP) {
            let Some((name, at)) = line
                .strip_prefix(prefix)
                .and_then(|rest| rest.split_once("://"))
            else {
                break;
            };
            listeners.push((name.to_owned(), parse(at)?));
        }
        Ok(Listeners(listeners))
    }
}

fn parse(addr: &str) -> anyhow::Result<SocketAddr> {
    addr.trim()
        .parse()
        .map_err(|e| anyhow::anyhow!("announced address {addr:?}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_listener_then_each_named_one_and_the_lines_before() {
        let out = "metrics on http://127.0.0.1:9\n\
                   x listening on 127.0.0.1:1\n\
                   x listening on PLAINTEXT://127.0.0.1:1\n\
                   x listening on SSL://127.0.0.1:2\n\
                   something else\n";
        let lines = StdoutLines::read(std::io::Cursor::new(out));
        let l = lines
            .listening("x listening on ", Duration::from_secs(5))
            .expect("announced");
        assert_eq!(l.addr, "127.0.0.1:1".parse().expect("addr"));
        assert_eq!(l.before, vec!["metrics on http://127.0.0.1:9"]);
        let named = lines.listeners("x listening on ").expect("listeners");
        assert_eq!(named.get("SSL"), Some("127.0.0.1:2".parse().expect("addr")));
        assert_eq!(named.0.len(), 2);
        assert_eq!(
            lines.next(Duration::from_secs(5)),
            Err(RecvTimeoutError::Disconnected)
        );
    }

    #[test]
    fn no_announcement_is_an_error() {
        let lines = StdoutLines::read(std::io::Cursor::new("starting\n"));
        let err = lines
            .listening("x listening on ", Duration::from_secs(5))
            .expect_err("closed first");
        assert!(err.to_string().contains("starting"), "{err}");
    }
}
