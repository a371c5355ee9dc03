//! The fault proxy on its own: loopback only; holding one request class lets later
//! requests pass and still delivers the held one after its client left; dropped responses
//! close the connection after the request reached the server; blackhole and down.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, EndTxnRequest, RequestHeader, TransactionalId};
use kafka_protocol::protocol::{Encodable, StrBytes, encode_request_header_into_buffer};
use markers::wire::{read_frame, write_frame};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use txn_tests::fault::proxy::{FaultProxy, RequestClass, check_loopback};

/// A fake server: records (api key, correlation id) of each request and answers with the
/// correlation id and an empty body.
async fn server() -> (SocketAddr, mpsc::UnboundedReceiver<(i16, i32)>) {
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = l.local_addr().expect("addr");
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = l.accept().await else {
                return;
            };
            let tx = tx.clone();
            tokio::spawn(async move {
                while let Ok(Some(f)) = read_frame(&mut s, 1 << 20).await {
                    let key = i16::from_be_bytes([f[0], f[1]]);
                    let corr = i32::from_be_bytes([f[4], f[5], f[6], f[7]]);
                    let _ = tx.send((key, corr));
                    if write_frame(&mut s, &corr.to_be_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, rx)
}

fn request(key: ApiKey, corr: i32) -> Bytes {
    let mut b = BytesMut::new();
    let h = RequestHeader::default()
        .with_request_api_key(key as i16)
        .with_request_api_version(3)
        .with_correlation_id(corr)
        .with_client_id(Some(StrBytes::from_static_str("t")));
    encode_request_header_into_buffer(&mut b, &h).expect("header");
    if key == ApiKey::EndTxn {
        EndTxnRequest::default()
            .with_transactional_id(TransactionalId(StrBytes::from_static_str("x")))
            .with_committed(false)
            .encode(&mut b, 3)
            .expect("body");
    }
    b.freeze()
}

async fn send(proxy: SocketAddr, key: ApiKey, corr: i32) -> TcpStream {
    let mut s = TcpStream::connect(proxy).await.expect("connect");
    write_frame(&mut s, &request(key, corr))
        .await
        .expect("write");
    s
}

async fn answer(s: &mut TcpStream) -> Option<i32> {
    match tokio::time::timeout(Duration::from_millis(700), read_frame(s, 1024)).await {
        Ok(Ok(Some(f))) => Some(i32::from_be_bytes([f[0], f[1], f[2], f[3]])),
        _ => None,
    }
}

#[tokio::test]
async fn the_proxy_refuses_non_loopback_upstreams() {
    assert!(
        FaultProxy::start("10.1.2.3:9092".parse().expect("addr"))
            .await
            .is_err()
    );
    assert!(
        FaultProxy::start("[::1]:9092".parse().expect("addr"))
            .await
            .is_err()
    );
    assert!(check_loopback("127.0.0.2:1".parse().expect("addr")).is_ok());
}

#[tokio::test]
async fn a_held_end_txn_arrives_after_later_requests_even_when_its_client_left() {
    let (up, mut seen) = server().await;
    let proxy = FaultProxy::start(up).await.expect("proxy");
    proxy.hold(
        RequestClass::EndTxn { committed: false },
        Duration::from_millis(1500),
        1,
    );
    let mut held = send(proxy.addr(), ApiKey::EndTxn, 1).await;
    assert_eq!(answer(&mut held).await, None, "held, not answered yet");
    drop(held); // the client gives up
    let mut later = send(proxy.addr(), ApiKey::InitProducerId, 2).await;
    assert_eq!(answer(&mut later).await, Some(2));
    // a second EndTxn is not held (count 1)
    let mut again = send(proxy.addr(), ApiKey::EndTxn, 3).await;
    assert_eq!(answer(&mut again).await, Some(3));
    let mut order = Vec::new();
    for _ in 0..3 {
        let r = tokio::time::timeout(Duration::from_secs(3), seen.recv()).await;
        order.push(r.expect("delivered").expect("open"));
    }
    assert_eq!(
        order,
        vec![
            (ApiKey::InitProducerId as i16, 2),
            (ApiKey::EndTxn as i16, 3),
            (ApiKey::EndTxn as i16, 1)
        ]
    );
    assert_eq!(proxy.stats().held, 1);
}

#[tokio::test]
async fn dropped_responses_close_the_connection_after_the_request_arrived() {
    let (up, mut seen) = server().await;
    let proxy = FaultProxy::start(up).await.expect("proxy");
    proxy.drop_responses(ApiKey::Produce, 1);
    let mut s = send(proxy.addr(), ApiKey::Produce, 7).await;
    assert_eq!(answer(&mut s).await, None);
    assert_eq!(seen.recv().await, Some((ApiKey::Produce as i16, 7)));
    let mut s = send(proxy.addr(), ApiKey::Produce, 8).await;
    assert_eq!(answer(&mut s).await, Some(8), "only one response dropped");
    assert_eq!(proxy.stats().dropped_responses, 1);
}

#[tokio::test]
async fn blackhole_swallows_and_down_refuses() {
    let (up, mut seen) = server().await;
    let proxy = FaultProxy::start(up).await.expect("proxy");
    proxy.set_blackhole(true);
    let mut s = send(proxy.addr(), ApiKey::Metadata, 1).await;
    assert_eq!(answer(&mut s).await, None);
    assert!(seen.try_recv().is_err(), "nothing reached the server");
    proxy.heal();
    let mut s = send(proxy.addr(), ApiKey::Metadata, 2).await;
    assert_eq!(answer(&mut s).await, Some(2));
    proxy.set_down(true);
    let mut s = TcpStream::connect(proxy.addr()).await.expect("accepted");
    let _ = write_frame(&mut s, &request(ApiKey::Metadata, 3)).await;
    assert_eq!(answer(&mut s).await, None);
    proxy.set_down(false);
    let mut s = send(proxy.addr(), ApiKey::Metadata, 4).await;
    assert_eq!(answer(&mut s).await, Some(4));
}
