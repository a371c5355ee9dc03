//! A minimal HTTP/1.1 responder for `GET /metrics` (Prometheus text format).

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::registry::Registry;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::shell::Metrics;

/// Serves `/metrics` until `shutdown` turns true. `refresh` runs before each scrape.
pub(crate) async fn serve_metrics(
    listener: TcpListener,
    registry: Arc<Registry>,
    refresh: impl Fn() + Send + Sync + 'static,
    mut shutdown: watch::Receiver<bool>,
) {
    let refresh = Arc::new(refresh);
    loop {
        let (mut stream, _) = tokio::select! {
            _ = shutdown.wait_for(|s| *s) => return,
            a = listener.accept() => match a {
                Ok(x) => x,
                Err(_) => continue,
            },
        };
        let (registry, refresh) = (registry.clone(), refresh.clone());
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
            let path = head.split_whitespace().nth(1).unwrap_or("");
            let (status, ctype, body) = if head.starts_with("GET ")
                && (path == "/metrics" || path.starts_with("/metrics?"))
            {
                refresh();
                (
                    "200 OK",
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    Metrics::encode(&registry),
                )
            } else {
                (
                    "404 Not Found",
                    "text/plain",
                    "not found; try /metrics\n".to_owned(),
                )
            };
            let resp = format!(
                "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(resp.as_bytes()).await;
            let _ = stream.shutdown().await;
        });
    }
}
