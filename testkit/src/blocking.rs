//! Blocking calls for tests on plain threads (the e2e harness's readiness probe and lookups):
//! the kit's connection driven by a runtime of its own, on a thread of its own, so that a
//! caller inside a tokio runtime can use them too.

use std::net::SocketAddr;
use std::time::Duration;

use kafka_protocol::protocol::Request;
use tokio::time::Instant;

use crate::wire::{call_before, try_connect};

/// One request to `addr` as client `client_id` on a fresh connection, answered within
/// `timeout` (the connect included); what went wrong as text.
pub fn call<R>(
    addr: SocketAddr,
    client_id: &str,
    req: &R,
    version: i16,
    timeout: Duration,
) -> Result<R::Response, String>
where
    R: Request + Sync,
    R::Response: Send,
{
    std::thread::scope(|s| {
        s.spawn(|| {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| format!("runtime: {e}"))?;
            rt.block_on(async {
                let deadline = Instant::now() + timeout;
                let mut conn = tokio::time::timeout_at(deadline, try_connect(addr, client_id))
                    .await
                    .map_err(|_| format!("connect to {addr} timed out"))?
                    .map_err(|e| format!("connect to {addr}: {e}"))?;
                call_before(&mut conn, req, version, deadline)
                    .await
                    .map_err(|e| format!("{:?} v{version} to {addr}: {e}", R::KEY))
            })
        })
        .join()
        .unwrap_or_else(|_| Err(format!("the call to {addr} panicked")))
    })
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::ApiVersionsRequest;

    use super::*;
    use crate::fake_broker::{FakeBroker, FakeBrokerConfig};

    /// From inside a runtime (the broker's) as from a plain thread: the answer, and an error,
    /// not a hang or a panic, where nothing listens.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_call_is_answered_inside_a_runtime_and_a_closed_port_is_an_error() {
        let broker = FakeBroker::start("127.0.0.1:0", FakeBrokerConfig::default())
            .await
            .expect("fake broker");
        let r = call(
            broker.addr(),
            "blocking-test",
            &ApiVersionsRequest::default(),
            3,
            Duration::from_secs(5),
        )
        .expect("ApiVersions");
        assert_eq!(r.error_code, 0);
        assert!(!r.api_keys.is_empty());

        let closed = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port");
        let err = call(
            closed,
            "blocking-test",
            &ApiVersionsRequest::default(),
            3,
            Duration::from_secs(5),
        )
        .unwrap_err();
        assert!(err.contains(&closed.to_string()), "{err}");
    }
}
