//! Connections by address for clients that talk to several nodes: one plain connection per
//! address, opened on first use, each call bounded by one timeout, and a connection whose call
//! failed or timed out dropped (the next call opens a new one).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use kafka_protocol::protocol::Request;

use crate::wire::{Conn, call_before, try_connect};

/// Decides whether the pool may connect to an address (`Err` says why not).
pub type AddressCheck = fn(SocketAddr) -> anyhow::Result<()>;

/// A pool of connections, one per address, each call (connect included) bounded by `timeout`.
#[derive(Debug)]
pub struct Pool {
    conns: HashMap<SocketAddr, Conn>,
    timeout: Duration,
    client_id: String,
    check: Option<AddressCheck>,
}

impl Pool {
    /// An empty pool whose requests carry `client_id`.
    pub fn new(client_id: &str, timeout: Duration) -> Self {
        Self {
            conns: HashMap::new(),
            timeout,
            client_id: client_id.to_owned(),
            check: None,
        }
    }

    /// This pool, refusing every call to an address `check` refuses.
    #[must_use]
    pub fn with_address_check(mut self, check: AddressCheck) -> Self {
        self.check = Some(check);
        self
    }

    /// Drops every connection.
    pub fn reset(&mut self) {
        self.conns.clear();
    }

    /// One request and its response, or why not; any failure drops the connection.
    pub async fn call<R: Request>(
        &mut self,
        addr: SocketAddr,
        req: &R,
        version: i16,
    ) -> Result<R::Response, String> {
        if let Some(check) = self.check {
            check(addr).map_err(|e| e.to_string())?;
        }
        let deadline = tokio::time::Instant::now() + self.timeout;
        let conn = match self.conns.entry(addr) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => {
                let c = tokio::time::timeout_at(deadline, try_connect(addr, &self.client_id))
                    .await
                    .map_err(|_| "connect timed out".to_owned())?
                    .map_err(|e| format!("connect: {e}"))?;
                e.insert(c)
            }
        };
        let answer = call_before(conn, req, version, deadline).await;
        if answer.is_err() {
            self.conns.remove(&addr);
        }
        answer.map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::ApiVersionsRequest;
    use tokio::net::TcpListener;

    #[tokio::test]
    async fn a_refused_address_is_not_connected_and_a_dead_peer_is_an_error() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let mut pool = Pool::new("pool-test", Duration::from_millis(300)).with_address_check(|a| {
            anyhow::ensure!(a.port() != 1, "port 1 refused");
            Ok(())
        });
        let refused = SocketAddr::from(([127, 0, 0, 1], 1));
        let err = pool
            .call(refused, &ApiVersionsRequest::default(), 0)
            .await
            .unwrap_err();
        assert!(err.contains("port 1 refused"), "{err}");
        // a peer that accepts and never answers: the call times out and is dropped
        let silent = tokio::spawn(async move {
            let (s, _) = listener.accept().await.expect("accept");
            tokio::time::sleep(Duration::from_secs(5)).await;
            drop(s);
        });
        let err = pool
            .call(addr, &ApiVersionsRequest::default(), 0)
            .await
            .unwrap_err();
        assert_eq!(err, "timed out");
        assert!(pool.conns.is_empty());
        silent.abort();
    }
}
