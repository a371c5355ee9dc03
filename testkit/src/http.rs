//! A minimal HTTP/1.1 GET for the servers' `/metrics`, `/health` and `/ready` endpoints.

use std::fmt::Display;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// `GET path` on `addr` (`host:port`): (status code, body), or `None` without a whole answer
/// within 10 s.
pub async fn get(addr: impl Display, path: &str) -> Option<(u16, String)> {
    let addr = addr.to_string();
    let mut sock = tokio::net::TcpStream::connect(&addr).await.ok()?;
    sock.write_all(format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes())
        .await
        .ok()?;
    let mut out = String::new();
    tokio::time::timeout(Duration::from_secs(10), sock.read_to_string(&mut out))
        .await
        .ok()?
        .ok()?;
    let status = out.split_whitespace().nth(1)?.parse().ok()?;
    let body = out.split_once("\r\n\r\n").map(|(_, b)| b.to_owned())?;
    Some((status, body))
}
