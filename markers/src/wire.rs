//! Kafka wire framing over tokio streams, shared by the marker transport, the daemon and the
//! reference broker.
//!
//! Frames are a 4-byte big-endian length followed by the message. Every length read from the
//! wire is checked before anything is allocated: the frame length against a configured maximum
//! (Kafka's `socket.request.max.bytes`), and message lengths by the patched `kafka-protocol`
//! decoders (see `vendor/kafka-protocol/PATCHED.md`). Nothing here panics on input.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, RequestHeader, RequestKind, ResponseHeader,
    ResponseKind,
};
use kafka_protocol::protocol::{
    Decodable, Encodable, HeaderVersion, Request, StrBytes, VersionRange,
    decode_request_header_from_buffer, encode_request_header_into_buffer,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Kafka's default `socket.request.max.bytes` (100 MiB).
pub const DEFAULT_MAX_FRAME_BYTES: usize = 100 * 1024 * 1024;

/// Failure to read or write one frame.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The stream failed.
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
    /// The peer announced a frame larger than allowed.
    #[error("frame of {len} bytes exceeds the limit of {max} bytes")]
    TooLarge {
        /// Announced length.
        len: i64,
        /// Configured limit.
        max: usize,
    },
    /// The peer closed the stream in the middle of a frame.
    #[error("connection closed in the middle of a frame")]
    Truncated,
    /// Where a frame's length should be, the peer sent the header of a TLS record (a
    /// handshake or an alert): one side speaks TLS and the other does not. A client without
    /// TLS reads a TLS listener's alert this way; a listener without TLS, a client's hello.
    #[error(
        "the peer speaks TLS on a connection without it (a TLS record where a Kafka frame \
         should start): use TLS on both sides (security.protocol SSL or SASL_SSL) or on neither"
    )]
    Tls,
}

/// Whether a frame prefix that announced an impossible length is the header of a TLS record:
/// content type handshake (22) or alert (21), then protocol major version 3.
fn is_tls_record(prefix: [u8; 4]) -> bool {
    matches!(prefix, [21 | 22, 3, ..])
}

/// Reads one frame. `Ok(None)` on a clean end of stream before any byte of a frame.
pub async fn read_frame<R: AsyncRead + Unpin>(
    reader: &mut R,
    max_bytes: usize,
) -> Result<Option<Bytes>, FrameError> {
    let mut len_buf = [0u8; 4];
    let mut read = 0;
    while read < 4 {
        let n = reader.read(&mut len_buf[read..]).await?;
        if n == 0 {
            return if read == 0 {
                Ok(None)
            } else {
                Err(FrameError::Truncated)
            };
        }
        read += n;
    }
    let len = i32::from_be_bytes(len_buf);
    let len_usize = match usize::try_from(len) {
        Ok(n) if n <= max_bytes => n,
        _ if is_tls_record(len_buf) => return Err(FrameError::Tls),
        _ => {
            return Err(FrameError::TooLarge {
                len: i64::from(len),
                max: max_bytes,
            });
        }
    };
    let mut body = BytesMut::zeroed(len_usize);
    match reader.read_exact(&mut body).await {
        Ok(_) => Ok(Some(body.freeze())),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Err(FrameError::Truncated),
        Err(e) => Err(e.into()),
    }
}

/// Frames up to this size are written by [`write_frame`] with their prefix in one write (one
/// `send` and one TCP segment on a `TCP_NODELAY` socket); larger ones are not copied.
const COALESCE_FRAME_BYTES: usize = 64 * 1024;

fn frame_len(len: usize) -> Result<i32, FrameError> {
    i32::try_from(len).map_err(|_| FrameError::TooLarge {
        len: i64::try_from(len).unwrap_or(i64::MAX),
        max: i32::MAX as usize,
    })
}

/// Writes `frame` (a message without its length prefix) with its length prefix: in one write
/// for frames up to 64 KiB (copied behind the prefix), in two above. For a response built by
/// this crate, [`encode_response_frame`] plus one `write_all` avoids the copy.
pub async fn write_frame<W: AsyncWrite + Unpin>(
    writer: &mut W,
    frame: &[u8],
) -> Result<(), FrameError> {
    let len = frame_len(frame.len())?;
    if frame.len() <= COALESCE_FRAME_BYTES {
        let mut buf = Vec::with_capacity(4 + frame.len());
        buf.extend_from_slice(&len.to_be_bytes());
        buf.extend_from_slice(frame);
        writer.write_all(&buf).await?;
    } else {
        writer.write_all(&len.to_be_bytes()).await?;
        writer.write_all(frame).await?;
    }
    Ok(())
}

/// A decoded request frame.
#[derive(Debug, Clone)]
pub struct RequestFrame {
    /// The API of the request.
    pub api_key: ApiKey,
    /// The request header (correlation id, client id, version).
    pub header: RequestHeader,
    /// The request body.
    pub body: RequestKind,
}

impl RequestFrame {
    /// The request's API version.
    pub fn version(&self) -> i16 {
        self.header.request_api_version
    }
}

/// Why a request frame could not be decoded.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// Fewer than the 8 bytes every request header starts with.
    #[error("frame of {0} bytes is too short for a request header")]
    TooShort(usize),
    /// The API key is not one this peer serves.
    #[error("unsupported API key {api_key}")]
    UnknownApiKey {
        /// The raw API key.
        api_key: i16,
        /// The correlation id, to answer with.
        correlation_id: i32,
    },
    /// The API is known but not at this version. Answerable (KIP-511 for ApiVersions).
    #[error("unsupported version {version} of {api_key:?}")]
    UnsupportedVersion {
        /// The API.
        api_key: ApiKey,
        /// The requested version.
        version: i16,
        /// The correlation id, to answer with.
        correlation_id: i32,
    },
    /// The bytes do not form a valid message of the claimed API and version.
    #[error("malformed {api_key:?} v{version} request: {reason}")]
    Malformed {
        /// The API.
        api_key: ApiKey,
        /// The version.
        version: i16,
        /// What the decoder reported.
        reason: String,
    },
}

/// Decodes a request frame, accepting only APIs (and versions) for which `supported` returns a
/// range containing the version. Also refuses versions `kafka-protocol` cannot decode.
pub fn decode_request(
    mut frame: Bytes,
    supported: impl Fn(ApiKey) -> Option<VersionRange>,
) -> Result<RequestFrame, DecodeError> {
    if frame.len() < 8 {
        return Err(DecodeError::TooShort(frame.len()));
    }
    let raw_key = i16::from_be_bytes([frame[0], frame[1]]);
    let version = i16::from_be_bytes([frame[2], frame[3]]);
    let correlation_id = i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
    let Some(api_key) = ApiKey::try_from(raw_key)
        .ok()
        .filter(|k| supported(*k).is_some())
    else {
        return Err(DecodeError::UnknownApiKey {
            api_key: raw_key,
            correlation_id,
        });
    };
    let ours = supported(api_key).unwrap_or(VersionRange { min: 0, max: -1 });
    let codec = api_key.valid_versions();
    if version < ours.min.max(codec.min) || version > ours.max.min(codec.max) {
        return Err(DecodeError::UnsupportedVersion {
            api_key,
            version,
            correlation_id,
        });
    }
    let malformed = |e: anyhow::Error| DecodeError::Malformed {
        api_key,
        version,
        reason: e.to_string(),
    };
    let header = decode_request_header_from_buffer(&mut frame).map_err(malformed)?;
    let body = RequestKind::decode(api_key, &mut frame, version).map_err(malformed)?;
    Ok(RequestFrame {
        api_key,
        header,
        body,
    })
}

/// Encodes a response (header + body) for `api_key`/`version`, without the length prefix.
pub fn encode_response(
    api_key: ApiKey,
    version: i16,
    correlation_id: i32,
    body: &ResponseKind,
) -> anyhow::Result<Bytes> {
    let mut out = BytesMut::new();
    ResponseHeader::default()
        .with_correlation_id(correlation_id)
        .encode(&mut out, api_key.response_header_version(version))?;
    body.encode(&mut out, version)?;
    Ok(out.freeze())
}

/// Encodes a response like [`encode_response`], but as a whole frame: the 4-byte length prefix
/// and the message in one buffer, ready for a single `write_all` (no [`write_frame`] needed).
pub fn encode_response_frame(
    api_key: ApiKey,
    version: i16,
    correlation_id: i32,
    body: &ResponseKind,
) -> anyhow::Result<Bytes> {
    let mut out = BytesMut::with_capacity(128);
    out.put_i32(0);
    ResponseHeader::default()
        .with_correlation_id(correlation_id)
        .encode(&mut out, api_key.response_header_version(version))?;
    body.encode(&mut out, version)?;
    let len = frame_len(out.len() - 4)?;
    out[..4].copy_from_slice(&len.to_be_bytes());
    Ok(out.freeze())
}

/// Failure of a client call.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// Framing or the connection failed.
    #[error(transparent)]
    Frame(#[from] FrameError),
    /// The peer closed the connection before answering.
    #[error("connection closed before the response arrived")]
    Closed,
    /// Encoding the request or decoding the response failed.
    #[error("codec error: {0}")]
    Codec(String),
    /// The response carried another correlation id.
    #[error("response correlation id {got} does not match request {want}")]
    CorrelationMismatch {
        /// Expected.
        want: i32,
        /// Received.
        got: i32,
    },
}

/// A minimal Kafka client connection: one request at a time, in order.
#[derive(Debug)]
pub struct KafkaConnection<S> {
    stream: S,
    client_id: StrBytes,
    next_correlation_id: i32,
    max_frame_bytes: usize,
    /// The node's answer to [`KafkaConnection::api_versions`], once asked.
    api_versions: Option<ApiVersionsResponse>,
}

impl<S: AsyncRead + AsyncWrite + Unpin> KafkaConnection<S> {
    /// Wraps a connected stream.
    pub fn new(stream: S, client_id: &str) -> Self {
        Self {
            stream,
            client_id: StrBytes::from_string(client_id.to_owned()),
            next_correlation_id: 1,
            max_frame_bytes: DEFAULT_MAX_FRAME_BYTES,
            api_versions: None,
        }
    }

    /// The node's API versions: asked (ApiVersions v0, which every Kafka node answers) on the
    /// first call only; later calls on this connection return that answer without a request.
    /// A connector that asks during its handshake (TLS) thus spares its caller a second one.
    pub async fn api_versions(&mut self) -> Result<&ApiVersionsResponse, CallError> {
        if self.api_versions.is_none() {
            let answer = self.call(&ApiVersionsRequest::default(), 0).await?;
            self.api_versions = Some(answer);
        }
        Ok(self
            .api_versions
            .get_or_insert_with(ApiVersionsResponse::default))
    }

    /// Sends `request` at `version` and waits for its response.
    pub async fn call<R: Request>(
        &mut self,
        request: &R,
        version: i16,
    ) -> Result<R::Response, CallError> {
        let correlation_id = self.next_correlation_id;
        self.next_correlation_id = self.next_correlation_id.wrapping_add(1);
        let header = RequestHeader::default()
            .with_request_api_key(R::KEY)
            .with_request_api_version(version)
            .with_correlation_id(correlation_id)
            .with_client_id(Some(self.client_id.clone()));
        let mut buf = BytesMut::new();
        buf.put_i32(0);
        encode_request_header_into_buffer(&mut buf, &header)
            .map_err(|e| CallError::Codec(e.to_string()))?;
        request
            .encode(&mut buf, version)
            .map_err(|e| CallError::Codec(e.to_string()))?;
        let len = i32::try_from(buf.len() - 4)
            .map_err(|_| CallError::Codec("request too large".into()))?;
        buf[..4].copy_from_slice(&len.to_be_bytes());
        self.stream
            .write_all(&buf)
            .await
            .map_err(FrameError::from)?;
        self.stream.flush().await.map_err(FrameError::from)?;

        let mut frame = read_frame(&mut self.stream, self.max_frame_bytes)
            .await?
            .ok_or(CallError::Closed)?;
        let header = ResponseHeader::decode(&mut frame, R::Response::header_version(version))
            .map_err(|e| CallError::Codec(e.to_string()))?;
        if header.correlation_id != correlation_id {
            return Err(CallError::CorrelationMismatch {
                want: correlation_id,
                got: header.correlation_id,
            });
        }
        let response = R::Response::decode(&mut frame, version)
            .map_err(|e| CallError::Codec(e.to_string()))?;
        if frame.has_remaining() {
            tracing::debug!(extra = frame.remaining(), "response carried trailing bytes");
        }
        Ok(response)
    }

    /// The underlying stream, borrowed (e.g. to wait for the peer to close it between calls).
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.stream
    }

    /// The underlying stream.
    pub fn into_inner(self) -> S {
        self.stream
    }
}

/// A byte stream to a Kafka node: plain TCP, or TLS over TCP, as a [`Connector`] made it.
pub trait KafkaStream: AsyncRead + AsyncWrite + Unpin + Send + Sync + std::fmt::Debug {}

impl<T: AsyncRead + AsyncWrite + Unpin + Send + Sync + std::fmt::Debug> KafkaStream for T {}

/// A connection whose stream type was chosen by a [`Connector`].
pub type BoxedConnection = KafkaConnection<Box<dyn KafkaStream>>;

/// Why [`Connector::connect`] gave no connection. Every variant is worth a retry later (the
/// node may come back, its certificate or the credential may be fixed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConnectError {
    /// TCP connect failed.
    #[error("connect to {addr}: {reason}")]
    Network {
        /// `host:port`.
        addr: String,
        /// Why.
        reason: String,
    },
    /// The TLS handshake failed (untrusted or wrong certificate, plaintext peer, ...).
    #[error("TLS handshake with {addr} failed: {reason}")]
    Tls {
        /// `host:port`.
        addr: String,
        /// Why.
        reason: String,
    },
    /// SASL authentication failed (or the node does not enable the mechanism).
    #[error("SASL authentication to {addr} failed: {reason}")]
    Authentication {
        /// `host:port`.
        addr: String,
        /// Why, with the node's message.
        reason: String,
    },
    /// Connect and handshakes did not finish in time.
    #[error("connect to {addr}: no connection within {after:?} ({stage})")]
    TimedOut {
        /// `host:port`.
        addr: String,
        /// The bound.
        after: std::time::Duration,
        /// What was under way.
        stage: &'static str,
    },
}

/// Opens client connections to Kafka nodes: TCP, then whatever the security protocol needs
/// (TLS handshake, SASL authentication) before the connection is handed out. The marker
/// writer, the leader resolver and the daemon's broker client take one; [`PlaintextConnector`]
/// is plain TCP, the daemon's TLS/SASL connector lives in the coordinator crate.
#[async_trait::async_trait]
pub trait Connector: Send + Sync + std::fmt::Debug {
    /// A ready connection to `host:port` whose requests carry `client_id`.
    async fn connect(
        &self,
        host: &str,
        port: u16,
        client_id: &str,
    ) -> Result<BoxedConnection, ConnectError>;
}

/// Plain TCP (`security.protocol=PLAINTEXT`), with `TCP_NODELAY`.
#[derive(Debug, Clone, Copy, Default)]
pub struct PlaintextConnector;

#[async_trait::async_trait]
impl Connector for PlaintextConnector {
    async fn connect(
        &self,
        host: &str,
        port: u16,
        client_id: &str,
    ) -> Result<BoxedConnection, ConnectError> {
        let stream = tokio::net::TcpStream::connect((host, port))
            .await
            .map_err(|e| ConnectError::Network {
                addr: format!("{host}:{port}"),
                reason: e.to_string(),
            })?;
        let _ = stream.set_nodelay(true);
        Ok(KafkaConnection::new(Box::new(stream), client_id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::{
        InitProducerIdRequest, InitProducerIdResponse, MetadataRequest, ProducerId,
    };

    fn all(_: ApiKey) -> Option<VersionRange> {
        Some(VersionRange {
            min: 0,
            max: i16::MAX,
        })
    }

    /// Metadata v0, null client id, topics count = i32::MAX: 0.18.0 unpatched aborts the process.
    #[test]
    fn tiny_frame_claiming_huge_array_is_rejected() {
        let frame = Bytes::from_static(&[
            0x00, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0xff, 0xff, 0x7f, 0xff, 0xff, 0xff,
        ]);
        let err = decode_request(frame, all).expect_err("must not decode");
        assert!(
            matches!(
                err,
                DecodeError::Malformed {
                    api_key: ApiKey::Metadata,
                    ..
                }
            ),
            "{err:?}"
        );
    }

    /// WriteTxnMarkers v2 (KIP-1228, vendored patch): `TransactionVersion` travels at v2 only;
    /// at v1 it is left out (the field is ignorable) and decodes as 0.
    #[test]
    fn write_txn_markers_v2_carries_the_transaction_version_and_v1_ignores_it() {
        use kafka_protocol::messages::write_txn_markers_request::{
            WritableTxnMarker, WritableTxnMarkerTopic,
        };
        use kafka_protocol::messages::{TopicName, WriteTxnMarkersRequest};
        let request = |tv: i8| {
            WriteTxnMarkersRequest::default().with_markers(vec![
                WritableTxnMarker::default()
                    .with_producer_id(ProducerId(42))
                    .with_producer_epoch(7)
                    .with_transaction_result(true)
                    .with_coordinator_epoch(3)
                    .with_transaction_version(tv)
                    .with_topics(vec![
                        WritableTxnMarkerTopic::default()
                            .with_name(TopicName(StrBytes::from_static_str("t")))
                            .with_partition_indexes(vec![0, 5]),
                    ]),
            ])
        };
        let frame_of = |r: &WriteTxnMarkersRequest, version: i16| {
            let mut buf = BytesMut::new();
            let header = RequestHeader::default()
                .with_request_api_key(ApiKey::WriteTxnMarkers as i16)
                .with_request_api_version(version)
                .with_correlation_id(9);
            encode_request_header_into_buffer(&mut buf, &header).expect("header");
            r.encode(&mut buf, version).expect("body");
            assert_eq!(r.compute_size(version).expect("size"), {
                let mut body = BytesMut::new();
                r.encode(&mut body, version).expect("body");
                body.len()
            });
            buf.freeze()
        };
        let decoded = |frame: Bytes| match decode_request(frame, all).expect("decodes").body {
            RequestKind::WriteTxnMarkers(r) => r,
            other => panic!("{other:?}"),
        };
        let tv2 = request(2);
        let v2 = frame_of(&tv2, 2);
        let v1 = frame_of(&tv2, 1);
        assert_eq!(v2.len(), v1.len() + 1, "one int8 more at v2");
        let back = decoded(v2);
        assert_eq!(back, tv2);
        assert_eq!(back.markers[0].transaction_version, 2);
        let back = decoded(v1);
        assert_eq!(back.markers[0].transaction_version, 0);
        assert_eq!(back, request(0));
        // Versions outside 1-2 are refused, on both sides.
        assert!(tv2.encode(&mut BytesMut::new(), 3).is_err());
        assert_eq!(
            ApiKey::WriteTxnMarkers.valid_versions(),
            VersionRange { min: 1, max: 2 }
        );
        // The answer's body is the same at v1 and v2.
        use kafka_protocol::messages::WriteTxnMarkersResponse;
        let answer = WriteTxnMarkersResponse::default();
        for version in [1, 2] {
            let mut b = BytesMut::new();
            answer.encode(&mut b, version).expect("encode");
            let back = WriteTxnMarkersResponse::decode(&mut b.freeze(), version).expect("decode");
            assert_eq!(back, answer);
        }
    }

    /// InitProducerId v6 (KIP-939, vendored patch): `Enable2Pc` and `KeepPreparedTxn` travel at
    /// v6 only, a v5 encoder refuses them, and the answer carries the ongoing pair at v6.
    #[test]
    fn init_producer_id_v6_carries_the_two_phase_commit_flags() {
        use kafka_protocol::messages::{
            InitProducerIdRequest, InitProducerIdResponse, TransactionalId,
        };
        let request = InitProducerIdRequest::default()
            .with_transactional_id(Some(TransactionalId(StrBytes::from_static_str("t"))))
            .with_transaction_timeout_ms(60_000)
            .with_enable_2_pc(true)
            .with_keep_prepared_txn(true);
        let mut frame = BytesMut::new();
        let header = RequestHeader::default()
            .with_request_api_key(ApiKey::InitProducerId as i16)
            .with_request_api_version(6)
            .with_correlation_id(4);
        encode_request_header_into_buffer(&mut frame, &header).expect("header");
        request.encode(&mut frame, 6).expect("body");
        match decode_request(frame.freeze(), all).expect("decodes").body {
            RequestKind::InitProducerId(back) => assert_eq!(back, request),
            other => panic!("{other:?}"),
        }
        // Below v6 the flags do not exist: a set flag is refused, unset ones leave them out.
        assert!(request.encode(&mut BytesMut::new(), 5).is_err());
        let plain = request
            .clone()
            .with_enable_2_pc(false)
            .with_keep_prepared_txn(false);
        let (mut v5, mut v6) = (BytesMut::new(), BytesMut::new());
        plain.encode(&mut v5, 5).expect("v5");
        plain.encode(&mut v6, 6).expect("v6");
        assert_eq!(v6.len(), v5.len() + 2, "two booleans more at v6");
        assert_eq!(
            InitProducerIdRequest::decode(&mut v5.freeze(), 5).expect("decode"),
            plain
        );
        assert!(request.encode(&mut BytesMut::new(), 7).is_err());
        let answer = InitProducerIdResponse::default()
            .with_producer_id(ProducerId(8))
            .with_producer_epoch(2)
            .with_ongoing_txn_producer_id(ProducerId(8))
            .with_ongoing_txn_producer_epoch(1);
        let mut b = BytesMut::new();
        answer.encode(&mut b, 6).expect("encode");
        assert_eq!(
            InitProducerIdResponse::decode(&mut b.freeze(), 6).expect("decode"),
            answer
        );
    }

    #[test]
    fn short_and_unknown_frames_are_typed_errors() {
        assert!(matches!(
            decode_request(Bytes::from_static(&[0, 3]), all),
            Err(DecodeError::TooShort(2))
        ));
        let unknown = Bytes::from_static(&[0x7f, 0x00, 0, 0, 0, 0, 0, 9]);
        assert!(matches!(
            decode_request(unknown, all),
            Err(DecodeError::UnknownApiKey {
                api_key: 0x7f00,
                correlation_id: 9
            })
        ));
        let only_metadata =
            |k: ApiKey| (k == ApiKey::Metadata).then_some(VersionRange { min: 0, max: 12 });
        let v99 = Bytes::from_static(&[0, 3, 0, 99, 0, 0, 0, 5, 0xff, 0xff]);
        assert!(matches!(
            decode_request(v99, only_metadata),
            Err(DecodeError::UnsupportedVersion {
                api_key: ApiKey::Metadata,
                version: 99,
                correlation_id: 5
            })
        ));
    }

    #[test]
    fn request_round_trips_through_frames() {
        let mut buf = BytesMut::new();
        let header = RequestHeader::default()
            .with_request_api_key(ApiKey::Metadata as i16)
            .with_request_api_version(12)
            .with_correlation_id(42);
        encode_request_header_into_buffer(&mut buf, &header).expect("header");
        MetadataRequest::default()
            .encode(&mut buf, 12)
            .expect("body");
        let frame = decode_request(buf.freeze(), all).expect("decodes");
        assert_eq!(frame.header.correlation_id, 42);
        assert!(matches!(frame.body, RequestKind::Metadata(_)));
    }

    /// A connection to a one-shot server that answers the first request with what `answer`
    /// returns for it, then reports whether anything more arrived on the connection.
    async fn answer_one(
        answer: impl FnOnce(&RequestFrame) -> ResponseKind + Send + 'static,
    ) -> (
        KafkaConnection<tokio::net::TcpStream>,
        tokio::task::JoinHandle<bool>,
    ) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let server = tokio::spawn(async move {
            let (mut sock, _) = listener.accept().await.expect("accept");
            let frame = read_frame(&mut sock, 1024)
                .await
                .expect("read")
                .expect("frame");
            let req = decode_request(frame, all).expect("decode");
            let resp = answer(&req);
            let out = encode_response(req.api_key, req.version(), req.header.correlation_id, &resp)
                .expect("encode");
            write_frame(&mut sock, &out).await.expect("write");
            read_frame(&mut sock, 1024).await.expect("read").is_some()
        });
        let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
        (KafkaConnection::new(stream, "test"), server)
    }

    #[tokio::test]
    async fn client_call_round_trips_over_a_socket() {
        let (mut conn, server) = answer_one(|_| {
            ResponseKind::InitProducerId(
                InitProducerIdResponse::default().with_producer_id(ProducerId(7)),
            )
        })
        .await;
        let resp = conn
            .call(&InitProducerIdRequest::default(), 4)
            .await
            .expect("call");
        assert_eq!(resp.producer_id, ProducerId(7));
        drop(conn);
        server.await.expect("server");
    }

    /// ApiVersions is asked on the first `api_versions` call only: the server answers one
    /// request, and the connection closes after it (a second request would find it closed).
    #[tokio::test]
    async fn api_versions_are_asked_once_per_connection() {
        let (mut conn, server) = answer_one(|req| {
            assert_eq!(req.api_key, ApiKey::ApiVersions);
            ResponseKind::ApiVersions(ApiVersionsResponse::default().with_error_code(35))
        })
        .await;
        assert_eq!(conn.api_versions().await.expect("first").error_code, 35);
        assert_eq!(conn.api_versions().await.expect("second").error_code, 35);
        drop(conn);
        assert!(
            !server.await.expect("server"),
            "a second ApiVersions was sent"
        );
    }

    #[tokio::test]
    async fn oversized_frame_is_refused_before_allocation() {
        let mut input: &[u8] = &[0x7f, 0xff, 0xff, 0xff, 1, 2, 3];
        assert!(matches!(
            read_frame(&mut input, 1024).await,
            Err(FrameError::TooLarge { .. })
        ));
        let mut negative: &[u8] = &[0xff, 0xff, 0xff, 0xff];
        assert!(matches!(
            read_frame(&mut negative, 1024).await,
            Err(FrameError::TooLarge { .. })
        ));
        let mut truncated: &[u8] = &[0, 0, 0, 9, 1];
        assert!(matches!(
            read_frame(&mut truncated, 1024).await,
            Err(FrameError::Truncated)
        ));
        let mut empty: &[u8] = &[];
        assert!(matches!(read_frame(&mut empty, 1024).await, Ok(None)));
    }

    /// A TLS listener's alert read by a client without TLS (`15 03 03 00 02 ..`: the 352518912
    /// bytes a length prefix would make of it), and a client's hello read by a listener
    /// without TLS, are named as TLS; another impossible length stays one.
    #[tokio::test]
    async fn a_tls_record_where_a_frame_starts_is_named() {
        let mut alert: &[u8] = &[0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x46];
        let err = read_frame(&mut alert, DEFAULT_MAX_FRAME_BYTES)
            .await
            .expect_err("not a frame");
        assert!(matches!(err, FrameError::Tls), "{err:?}");
        assert!(err.to_string().contains("speaks TLS"), "{err}");
        let mut hello: &[u8] = &[0x16, 0x03, 0x01, 0x02, 0x00, 0x01];
        assert!(matches!(
            read_frame(&mut hello, DEFAULT_MAX_FRAME_BYTES).await,
            Err(FrameError::Tls)
        ));
        let mut other: &[u8] = &[0x7e, 0x03, 0x03, 0x00];
        assert!(matches!(
            read_frame(&mut other, DEFAULT_MAX_FRAME_BYTES).await,
            Err(FrameError::TooLarge { .. })
        ));
    }

    /// A writer that records each `poll_write` call.
    #[derive(Default)]
    struct Writes(Vec<Vec<u8>>);

    impl AsyncWrite for Writes {
        fn poll_write(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &[u8],
        ) -> std::task::Poll<std::io::Result<usize>> {
            self.0.push(buf.to_vec());
            std::task::Poll::Ready(Ok(buf.len()))
        }
        fn poll_flush(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }
        fn poll_shutdown(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn a_response_frame_is_one_buffer_and_one_write() {
        let resp = ResponseKind::InitProducerId(
            InitProducerIdResponse::default().with_producer_id(ProducerId(7)),
        );
        let body = encode_response(ApiKey::InitProducerId, 4, 9, &resp).expect("encode");
        let framed =
            encode_response_frame(ApiKey::InitProducerId, 4, 9, &resp).expect("encode frame");
        let mut w = Writes::default();
        write_frame(&mut w, &body).await.expect("write");
        assert_eq!(w.0.len(), 1, "one write for a small frame");
        assert_eq!(
            w.0[0],
            framed.to_vec(),
            "same bytes as encode_response_frame"
        );
        let mut r: &[u8] = &framed;
        let back = read_frame(&mut r, 1024)
            .await
            .expect("read")
            .expect("frame");
        assert_eq!(back, body);

        let big = vec![7u8; COALESCE_FRAME_BYTES + 1];
        let mut w = Writes::default();
        write_frame(&mut w, &big).await.expect("write");
        let joined: Vec<u8> = w.0.concat();
        assert_eq!(joined.len(), 4 + big.len());
        let mut r: &[u8] = &joined;
        let back = read_frame(&mut r, big.len())
            .await
            .expect("read")
            .expect("frame");
        assert_eq!(&back[..], &big[..]);
    }
}
