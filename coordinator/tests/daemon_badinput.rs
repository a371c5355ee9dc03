//! Hostile input against the running daemon: thousands of random and mutated frames (seeded,
//! bounded), the 14-byte huge-array frame, oversized frames and stalled clients; afterwards a
//! valid request is still answered and the process is alive.
#![cfg(feature = "daemon")]

mod daemon_support;

use std::path::Path;
use std::time::Duration;

use bytes::BytesMut;
use daemon_support::*;
use kafka_protocol::messages::{self as km, RequestHeader};
use kafka_protocol::protocol::{Encodable, encode_request_header_into_buffer};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use txn_log::rng::Rng;

fn valid_frames() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut push = |key: i16, v: i16, body: &dyn Fn(&mut BytesMut, i16)| {
        let mut b = BytesMut::new();
        let h = RequestHeader::default()
            .with_request_api_key(key)
            .with_request_api_version(v)
            .with_correlation_id(1)
            .with_client_id(Some(s("fuzz")));
        encode_request_header_into_buffer(&mut b, &h).expect("header");
        body(&mut b, v);
        out.push(b.to_vec());
    };
    for v in 0..=4 {
        push(22, v, &|b, v| {
            init_req(Some("fuzz-id"), 1000).encode(b, v).expect("init")
        });
        push(26, v, &|b, v| {
            end_req("fuzz-id", 0, 0, true).encode(b, v).expect("end")
        });
    }
    for v in 0..=3 {
        push(24, v, &|b, v| {
            add_req_v3("fuzz-id", 0, 0, &[("t", 0), ("u", 1)])
                .encode(b, v)
                .expect("add")
        });
        push(18, v, &|b, v| {
            km::ApiVersionsRequest::default()
                .encode(b, v)
                .expect("apiv")
        });
    }
    for v in [0i16, 1, 5, 9, 12] {
        push(3, v, &|b, v| {
            km::MetadataRequest::default().encode(b, v).expect("meta")
        });
    }
    push(65, 0, &|b, v| {
        km::DescribeTransactionsRequest::default()
            .with_transactional_ids(vec![km::TransactionalId(s("fuzz-id"))])
            .encode(b, v)
            .expect("describe")
    });
    push(66, 1, &|b, v| {
        km::ListTransactionsRequest::default()
            .encode(b, v)
            .expect("list")
    });
    push(10, 6, &|b, v| {
        km::FindCoordinatorRequest::default()
            .with_key_type(1)
            .with_coordinator_keys(vec![s("fuzz-id")])
            .encode(b, v)
            .expect("find")
    });
    out
}

fn mutate(rng: &mut Rng, seeds: &[Vec<u8>]) -> Vec<u8> {
    match rng.index(5) {
        // Pure noise of random length (short frames, unknown keys, garbage headers).
        0 => (0..rng.index(64)).map(|_| rng.next_u64() as u8).collect(),
        // A valid frame with bytes flipped.
        1 | 2 => {
            let mut f = seeds[rng.index(seeds.len())].clone();
            for _ in 0..=rng.index(4) {
                let i = rng.index(f.len());
                f[i] = rng.next_u64() as u8;
            }
            f
        }
        // A valid frame truncated.
        3 => {
            let f = &seeds[rng.index(seeds.len())];
            f[..rng.index(f.len())].to_vec()
        }
        // A valid header followed by huge claimed lengths.
        _ => {
            let f = &seeds[rng.index(seeds.len())];
            let mut g = f[..f.len().min(10)].to_vec();
            g.extend_from_slice(&[0x7f, 0xff, 0xff, 0xff, 0x7f, 0xff]);
            g
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_bad_frames_then_a_valid_request_is_answered() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut d = Daemon::start(
        dir.path(),
        &[
            "--set",
            "transaction.state.log.num.partitions=3",
            "--set",
            "socket.request.max.bytes=65536",
        ],
    );
    let addr = d.addr;

    // A stalled client: half a frame, then nothing. It must not delay anyone else.
    let mut stalled = TcpStream::connect(addr).await.expect("connect");
    stalled
        .write_all(&[0, 0, 0, 100, 0, 22])
        .await
        .expect("write");

    // The 14-byte Metadata v0 frame claiming i32::MAX topics (kafka-protocol 0.18.0 aborted).
    let huge = [
        0x00, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0xff, 0xff, 0x7f, 0xff, 0xff, 0xff,
    ];
    assert!(
        roundtrip_raw(addr, &huge).await.is_none(),
        "connection closed, nothing answered"
    );

    // An oversized frame (above socket.request.max.bytes): refused, connection closed.
    let mut big = TcpStream::connect(addr).await.expect("connect");
    big.write_all(&(10_000_000i32).to_be_bytes())
        .await
        .expect("write");
    let mut buf = [0u8; 16];
    let n = tokio::time::timeout(
        Duration::from_secs(30),
        tokio::io::AsyncReadExt::read(&mut big, &mut buf),
    )
    .await
    .expect("closed promptly")
    .unwrap_or(0);
    assert_eq!(n, 0, "oversized frame must close the connection");

    let seeds = valid_frames();
    let mut rng = Rng::new(0x5eed_1234_abcd_0001);
    let mut answered = 0usize;
    let mut closed = 0usize;
    // Batches of frames on a few connections at once; each connection sends until closed.
    for round in 0..60 {
        let mut tasks = Vec::new();
        for _ in 0..8 {
            let frames: Vec<Vec<u8>> = (0..8).map(|_| mutate(&mut rng, &seeds)).collect();
            tasks.push(tokio::spawn(async move {
                let mut sock = TcpStream::connect(addr).await.expect("connect");
                let (mut ok, mut shut) = (0, 0);
                for f in frames {
                    if markers::wire::write_frame(&mut sock, &f).await.is_err() {
                        shut += 1;
                        break;
                    }
                    match tokio::time::timeout(
                        Duration::from_secs(30),
                        markers::wire::read_frame(&mut sock, 1 << 24),
                    )
                    .await
                    {
                        Ok(Ok(Some(_))) => ok += 1,
                        _ => {
                            shut += 1;
                            break;
                        }
                    }
                }
                (ok, shut)
            }));
        }
        for t in tasks {
            let (ok, shut) = t.await.expect("client task");
            answered += ok;
            closed += shut;
        }
        assert!(
            d.is_running(),
            "daemon died in round {round}; stderr:\n{}",
            d.stderr()
        );
    }
    // 60 * 8 * 8 = 3840 frames were generated (some not sent after a close).
    assert!(
        answered + closed >= 480,
        "answered {answered}, closed {closed}"
    );
    assert!(
        closed > 0 && answered > 0,
        "answered {answered}, closed {closed}"
    );

    // A valid request is still answered, while the stalled client still hangs on.
    let mut c = d.conn().await;
    let (pid, _) = init_ok(&mut c, "after-fuzz", 60_000).await;
    assert!(pid >= 0);
    assert!(d.is_running());
    drop(stalled);
    assert!(
        d.stderr().contains("closing connection"),
        "bad input is logged"
    );
}

/// A daemon over `dir` with two transaction log partitions and `--set setting`.
fn daemon_on_two_partitions(dir: &Path, setting: &str) -> Daemon {
    Daemon::start(
        dir,
        &[
            "--set",
            "transaction.state.log.num.partitions=2",
            "--set",
            setting,
        ],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_max_connections_are_closed_and_others_keep_working() {
    let dir = tempfile::tempdir().expect("tmp");
    let d = daemon_on_two_partitions(dir.path(), "max.connections=2");
    let mut a = d.conn().await;
    let mut b = d.conn().await;
    // Both admitted connections are served.
    a.call(&km::ApiVersionsRequest::default(), 3)
        .await
        .expect("a");
    b.call(&km::ApiVersionsRequest::default(), 3)
        .await
        .expect("b");
    // A third one is closed without an answer.
    let mut third = d.conn().await;
    assert!(
        third
            .call(&km::ApiVersionsRequest::default(), 3)
            .await
            .is_err()
    );
    // Closing one admits the next.
    drop(a);
    let mut admitted = false;
    for _ in 0..100 {
        let mut c = d.conn().await;
        if c.call(&km::ApiVersionsRequest::default(), 3).await.is_ok() {
            admitted = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(admitted, "a freed slot is reused");
    b.call(&km::ApiVersionsRequest::default(), 3)
        .await
        .expect("b still served");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_are_closed_and_busy_ones_are_not() {
    let dir = tempfile::tempdir().expect("tmp");
    let d = daemon_on_two_partitions(dir.path(), "connections.max.idle.ms=300");
    // A connection whose requests come more often than the idle time stays open past it.
    let mut busy = d.conn().await;
    for _ in 0..12 {
        busy.call(&km::ApiVersionsRequest::default(), 3)
            .await
            .expect("a connection in use is not idle");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut idle = TcpStream::connect(d.addr).await.expect("connect");
    let mut buf = [0u8; 1];
    // Bounded: the server closes an idle connection (read returns 0) well within this.
    let n = tokio::time::timeout(
        Duration::from_secs(30),
        tokio::io::AsyncReadExt::read(&mut idle, &mut buf),
    )
    .await
    .expect("closed by the server")
    .unwrap_or(0);
    assert_eq!(n, 0);
    let mut c = d.conn().await;
    c.call(&km::ApiVersionsRequest::default(), 3)
        .await
        .expect("a busy connection is served");
}

/// A stdout nobody reads (the script that started the daemon took its address line and closed
/// the pipe) does not stop the daemon: here the pipe is closed before the daemon prints at all,
/// so every address line fails to print, and the daemon still serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_stdout_does_not_stop_the_daemon() {
    let port = txn_testkit::wire::free_port();
    let dir = tempfile::tempdir().expect("tmp");
    let mut child = std::process::Command::new(BIN)
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .arg("--data-dir")
        .arg(dir.path())
        .args(["--set", "transaction.state.log.num.partitions=2"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn txn-coordinator");
    drop(child.stdout.take());
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().expect("addr");
    let mut answered = None;
    for _ in 0..200 {
        if let Ok(mut c) = txn_testkit::wire::try_connect(addr, "closed-stdout").await
            && let Ok(r) = c.call(&init_req(Some("closed-stdout"), 60_000), 4).await
        {
            answered = Some(r.error_code);
            if r.error_code == 0 {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let alive = child.try_wait().expect("try_wait").is_none();
    let _ = child.kill();
    let _ = child.wait();
    assert!(alive, "the daemon exited once its stdout was closed");
    assert_eq!(answered, Some(0), "InitProducerId answered");
}
