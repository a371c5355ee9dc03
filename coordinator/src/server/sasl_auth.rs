//! SASL authentication on SASL_PLAINTEXT and SASL_SSL listeners, as Kafka's
//! `SaslServerAuthenticator`
//! ([KIP-152](https://cwiki.apache.org/confluence/display/KAFKA/KIP-152+-+Improve+diagnostics+for+SASL+authentication+failures)):
//! until the client has authenticated, only ApiVersions, SaslHandshake (v1) and
//! SaslAuthenticate are answered; any other request closes the connection. A failed exchange
//! answers SASL_AUTHENTICATION_FAILED with Kafka's message, then closes.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use kafka_protocol::messages::{self as km, ApiKey, RequestKind, ResponseKind};
use kafka_protocol::protocol::StrBytes;
use markers::wire::{decode_request, encode_response_frame};
use security::Principal;
use security::sasl::{
    ILLEGAL_SASL_STATE, SaslServer, SaslServerFactory, Step, UNSUPPORTED_SASL_MECHANISM,
};

use super::listeners::Listener;
use super::protocol as p;
use crate::ErrorCode;

/// What the connection does with one frame before authentication.
#[derive(Debug)]
pub enum GateOut {
    /// An ApiVersions request before the exchange: answer it as any other request (the
    /// server's own ApiVersions, which lists SaslHandshake and SaslAuthenticate).
    Pass(Bytes),
    /// Send these bytes, read the next frame.
    Respond(Bytes),
    /// Send these bytes: the client is now `principal`.
    Authenticated(Bytes, Principal),
    /// Send these bytes, then close (a failed exchange), for this reason.
    RespondAndClose(Bytes, String),
    /// Close without an answer, for this reason.
    Close(String),
}

/// One connection's SASL exchange, shared by every server with SASL listeners (the daemon and
/// the test suite's reference broker).
pub struct Gate {
    factory: Arc<SaslServerFactory>,
    listener: Arc<Listener>,
    peer: SocketAddr,
    server: Option<Box<dyn SaslServer>>,
    done: bool,
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_owned())
}

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gate")
            .field("peer", &self.peer)
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

impl Gate {
    /// The exchange of a client connected from `peer` to `listener`, with its mechanisms.
    pub fn new(factory: Arc<SaslServerFactory>, listener: Arc<Listener>, peer: SocketAddr) -> Self {
        Self {
            factory,
            listener,
            peer,
            server: None,
            done: false,
        }
    }

    /// Whether the client has authenticated.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// The largest frame taken before authentication (`sasl.server.max.receive.size`).
    pub fn max_frame(&self) -> usize {
        self.listener.max_receive
    }

    fn mechanism_label(&self) -> &'static str {
        self.server
            .as_ref()
            .map_or("none", |s| s.mechanism().name())
    }

    /// Answers one frame of a client that has not authenticated yet; `record` counts each
    /// SASL request's outcome (the server's request metrics).
    pub fn on_frame(&mut self, record: &dyn Fn(&'static str, ErrorCode), frame: Bytes) -> GateOut {
        if frame.len() >= 2
            && i16::from_be_bytes([frame[0], frame[1]]) == ApiKey::ApiVersions as i16
            && self.server.is_none()
        {
            return GateOut::Pass(frame);
        }
        let req = match decode_request(frame, p::supported) {
            Ok(r) => r,
            Err(e) => {
                let reason = format!("bad request during SASL authentication: {e}");
                self.fail(&reason);
                return GateOut::Close(reason);
            }
        };
        let (api, version, correlation_id) =
            (req.api_key, req.version(), req.header.correlation_id);
        let encode = |body: ResponseKind| {
            encode_response_frame(api, version, correlation_id, &body)
                .map_err(|e| format!("encoding {api:?} v{version}: {e}"))
        };
        let out = match (req.body, self.server.is_some()) {
            (RequestKind::SaslHandshake(r), false) => {
                if version == 0 {
                    let reason =
                        "SaslHandshake v0 (SASL tokens without SaslAuthenticate) is not supported"
                            .to_owned();
                    self.fail(&reason);
                    return GateOut::Close(reason);
                }
                let mechanisms = self.factory.enabled_names().into_iter().map(s).collect();
                match self.factory.server(r.mechanism.as_str()) {
                    Ok(server) => {
                        self.server = Some(server);
                        record("SaslHandshake", ErrorCode::NONE);
                        let body = km::SaslHandshakeResponse::default().with_mechanisms(mechanisms);
                        encode(ResponseKind::SaslHandshake(body)).map(GateOut::Respond)
                    }
                    Err(e) => {
                        record("SaslHandshake", ErrorCode(UNSUPPORTED_SASL_MECHANISM));
                        self.listener
                            .auth_failed(self.peer, "unsupported", &e.to_string());
                        let body = km::SaslHandshakeResponse::default()
                            .with_error_code(e.error_code())
                            .with_mechanisms(mechanisms);
                        encode(ResponseKind::SaslHandshake(body))
                            .map(|b| GateOut::RespondAndClose(b, e.to_string()))
                    }
                }
            }
            (RequestKind::SaslAuthenticate(r), true) => {
                let mechanism = self.mechanism_label();
                let Some(server) = self.server.as_mut() else {
                    return GateOut::Close("no SASL exchange".to_owned());
                };
                match server.step(&r.auth_bytes) {
                    Ok(Step::Continue(token)) => {
                        record("SaslAuthenticate", ErrorCode::NONE);
                        let body = km::SaslAuthenticateResponse::default()
                            .with_auth_bytes(Bytes::from(token));
                        encode(ResponseKind::SaslAuthenticate(body)).map(GateOut::Respond)
                    }
                    Ok(Step::Done {
                        principal_name,
                        final_bytes,
                    }) => {
                        record("SaslAuthenticate", ErrorCode::NONE);
                        self.done = true;
                        self.listener
                            .metrics
                            .count(self.listener.spec.name(), mechanism, true);
                        tracing::debug!(peer = %self.peer, mechanism, user = %principal_name, "SASL client authenticated");
                        // KIP-368 re-authentication is not offered: no session lifetime.
                        let body = km::SaslAuthenticateResponse::default()
                            .with_auth_bytes(Bytes::from(final_bytes))
                            .with_session_lifetime_ms(0);
                        encode(ResponseKind::SaslAuthenticate(body))
                            .map(|b| GateOut::Authenticated(b, Principal::user(principal_name)))
                    }
                    Err(e) => {
                        record("SaslAuthenticate", ErrorCode(e.error_code()));
                        self.listener
                            .auth_failed(self.peer, mechanism, &e.to_string());
                        let body = km::SaslAuthenticateResponse::default()
                            .with_error_code(e.error_code())
                            .with_error_message(Some(s(&e.client_message(false))));
                        encode(ResponseKind::SaslAuthenticate(body))
                            .map(|b| GateOut::RespondAndClose(b, e.to_string()))
                    }
                }
            }
            (other, handshaken) => {
                let state = if handshaken {
                    "SASL authentication"
                } else {
                    "SASL handshake"
                };
                let reason = format!(
                    "unexpected Kafka request of type {} during {state}",
                    p::api_name(api)
                );
                drop(other);
                self.fail(&reason);
                return GateOut::Close(reason);
            }
        };
        out.unwrap_or_else(GateOut::Close)
    }

    fn fail(&self, reason: &str) {
        self.listener
            .auth_failed(self.peer, self.mechanism_label(), reason);
    }
}

/// The answer to SaslHandshake or SaslAuthenticate outside an exchange (on a listener without
/// SASL, or after authentication): ILLEGAL_SASL_STATE, as Kafka's `KafkaApis` answers.
pub fn outside_exchange(body: &RequestKind) -> Option<ResponseKind> {
    Some(match body {
        RequestKind::SaslHandshake(_) => ResponseKind::SaslHandshake(
            km::SaslHandshakeResponse::default().with_error_code(ILLEGAL_SASL_STATE),
        ),
        RequestKind::SaslAuthenticate(_) => ResponseKind::SaslAuthenticate(
            km::SaslAuthenticateResponse::default()
                .with_error_code(ILLEGAL_SASL_STATE)
                .with_error_message(Some(s(
                    "SaslAuthenticate request received after successful authentication",
                ))),
        ),
        _ => return None,
    })
}
