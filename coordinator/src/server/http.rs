//! A minimal HTTP/1.1 responder for the operator endpoints of `--metrics-listen` (the daemon's,
//! and refbroker's):
//!
//! - `GET /metrics`: Prometheus text format;
//! - `GET /health`: 200 `ok` while the process runs (liveness);
//! - `GET /ready`: 200 `ready` once every log partition this daemon owns is loaded, else 503
//!   with one line saying what is missing (readiness).

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::registry::Registry;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::shell::Metrics;

/// The answer to one request head: status line, content type and body.
pub(crate) fn respond(
    head: &str,
    registry: &Registry,
    refresh: &dyn Fn(),
    ready: &dyn Fn() -> Result<(), String>,
) -> (&'static str, &'static str, String) {
    const TEXT: &str = "text/plain; charset=utf-8";
    let mut words = head.split_whitespace();
    let (method, target) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    if method != "GET" {
        return (
            "405 Method Not Allowed",
            TEXT,
            "only GET is served\n".to_owned(),
        );
    }
    match path {
        "/metrics" => {
            refresh();
            (
                "200 OK",
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                Metrics::encode(registry),
            )
        }
        "/health" => ("200 OK", TEXT, "ok\n".to_owned()),
        "/ready" => match ready() {
            Ok(()) => ("200 OK", TEXT, "ready\n".to_owned()),
            Err(why) => (
                "503 Service Unavailable",
                TEXT,
                format!("not ready: {why}\n"),
            ),
        },
        _ => (
            "404 Not Found",
            TEXT,
            "not found; try /metrics, /health or /ready\n".to_owned(),
        ),
    }
}

/// Serves `/metrics`, `/health` and `/ready` until `shutdown` turns true. `refresh` runs
/// before each scrape; `ready` answers `/ready` (`Err`: why not, one short line).
pub async fn serve_metrics(
    listener: TcpListener,
    registry: Arc<Registry>,
    refresh: impl Fn() + Send + Sync + 'static,
    ready: impl Fn() -> Result<(), String> + Send + Sync + 'static,
    mut shutdown: watch::Receiver<bool>,
) {
    let refresh = Arc::new(refresh);
    let ready = Arc::new(ready);
    loop {
        let (mut stream, _) = tokio::select! {
            _ = shutdown.wait_for(|s| *s) => return,
            a = listener.accept() => match a {
                Ok(x) => x,
                Err(_) => continue,
            },
        };
        let (registry, refresh, ready) = (registry.clone(), refresh.clone(), ready.clone());
        tokio::spawn(async move {
            let mut buf = vec![0u8; 4096];
            let mut n = 0;
            // Read the request head (bounded size and time).
            let read = tokio::time::timeout(Duration::from_secs(5), async {
                while n < buf.len() {
                    match stream.read(&mut buf[n..]).await {
                        Ok(0) | Err(_) => break,
                        Ok(k) => {
                            n += k;
                            if buf[..n].windows(4).any(|w| w == b"\r\n\r\n") {
                                break;
                            }
                        }
                    }
                }
            })
            .await;
            if read.is_err() {
                return;
            }
            let head = String::from_utf8_lossy(&buf[..n]);
            let (status, ctype, body) = respond(&head, &registry, &*refresh, &*ready);
            let resp = format!(
                "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(resp.as_bytes()).await;
            let _ = stream.shutdown().await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(path: &str, ready: Result<(), String>) -> (&'static str, String) {
        let registry = Registry::default();
        let head = format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n");
        let (status, _, body) = respond(&head, &registry, &|| {}, &|| ready.clone());
        (status, body)
    }

    #[test]
    fn health_ready_metrics_and_the_rest() {
        assert_eq!(get("/health", Err("x".into())), ("200 OK", "ok\n".into()));
        assert_eq!(get("/ready", Ok(())), ("200 OK", "ready\n".into()));
        let (status, body) = get("/ready", Err("loading 2 of 50 partitions: 3,7".into()));
        assert_eq!(status, "503 Service Unavailable");
        assert_eq!(body, "not ready: loading 2 of 50 partitions: 3,7\n");
        assert_eq!(get("/metrics?x=1", Ok(())).0, "200 OK");
        assert_eq!(get("/metricsx", Ok(())).0, "404 Not Found");
        let registry = Registry::default();
        let (status, _, _) = respond(
            "POST /ready HTTP/1.1\r\n\r\n",
            &registry,
            &|| {},
            &|| Ok(()),
        );
        assert_eq!(status, "405 Method Not Allowed");
    }
}
