//! SCRAM's four messages ([RFC 5802, section 7](https://www.rfc-editor.org/rfc/rfc5802#section-7)),
//! parsed strictly: Kafka's `ScramMessages` accepts the same messages from its own clients, and
//! this parser refuses what RFC 5802 says must fail (the `m=` extension, a client-final whose
//! channel binding is not its gs2 header).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

use super::super::crypto::is_printable;
use super::super::error::FailureReason;

type Result<T> = std::result::Result<T, FailureReason>;

/// A client-first message.
#[derive(Debug)]
pub(super) struct ClientFirst<'a> {
    /// `n,` [`a=` authzid] `,`, as sent (client-final's `c=` must be it).
    pub(super) gs2_header: &'a str,
    /// The decoded authorization id, if any.
    pub(super) authzid: Option<String>,
    /// The decoded user name.
    pub(super) username: String,
    /// The client's nonce.
    pub(super) nonce: &'a str,
    /// client-first-message-bare, as sent (part of the AuthMessage).
    pub(super) bare: &'a str,
    /// Kafka's `tokenauth=true` extension (delegation tokens).
    pub(super) token_auth: bool,
}

pub(super) fn parse_client_first(msg: &str) -> Result<ClientFirst<'_>> {
    let rest = match msg.strip_prefix("n,") {
        Some(rest) => rest,
        None if msg.starts_with("y,") || msg.starts_with("p=") => {
            return Err(FailureReason::ChannelBindingRequested);
        }
        None => {
            return Err(FailureReason::Malformed(
                "SCRAM client first message: gs2 header must start with n,",
            ));
        }
    };
    let (authzid, bare) = if let Some(after) = rest.strip_prefix("a=") {
        let Some(end) = after.find(',') else {
            return Err(FailureReason::Malformed(
                "SCRAM client first message: gs2 header not terminated",
            ));
        };
        (Some(decode_saslname(&after[..end])?), &after[end + 1..])
    } else if let Some(bare) = rest.strip_prefix(',') {
        (None, bare)
    } else {
        return Err(FailureReason::Malformed(
            "SCRAM client first message: invalid gs2 header",
        ));
    };
    let gs2_header = &msg[..msg.len() - bare.len()];

    let mut attrs = bare.split(',');
    let first = attrs.next().unwrap_or_default();
    if first.starts_with("m=") {
        return Err(FailureReason::MandatoryExtension);
    }
    let Some(name) = first.strip_prefix("n=") else {
        return Err(FailureReason::Malformed(
            "SCRAM client first message: expected n=",
        ));
    };
    let username = decode_saslname(name)?;
    let Some(nonce) = attrs.next().and_then(|a| a.strip_prefix("r=")) else {
        return Err(FailureReason::Malformed(
            "SCRAM client first message: expected r=",
        ));
    };
    if !is_printable(nonce) {
        return Err(FailureReason::Malformed(
            "SCRAM client first message: invalid nonce",
        ));
    }
    let mut token_auth = false;
    for attr in attrs {
        let (key, value) = parse_extension(attr)?;
        // Kafka's `ScramExtensions.tokenAuthenticated`: `Boolean.parseBoolean`.
        if key == "tokenauth" && value.eq_ignore_ascii_case("true") {
            token_auth = true;
        }
    }
    Ok(ClientFirst {
        gs2_header,
        authzid,
        username,
        nonce,
        bare,
        token_auth,
    })
}

/// A client-final message.
#[derive(Debug)]
pub(super) struct ClientFinal<'a> {
    /// The decoded `c=`.
    pub(super) channel_binding: Vec<u8>,
    /// The nonce.
    pub(super) nonce: &'a str,
    /// client-final-message-without-proof, as sent (part of the AuthMessage).
    pub(super) without_proof: &'a str,
    /// The decoded proof.
    pub(super) proof: Vec<u8>,
}

pub(super) fn parse_client_final(msg: &str) -> Result<ClientFinal<'_>> {
    let Some(at) = msg.rfind(",p=") else {
        return Err(FailureReason::Malformed(
            "SCRAM client final message: expected p= last",
        ));
    };
    let without_proof = &msg[..at];
    let proof = decode_base64(&msg[at + 3..], "SCRAM client final message: invalid proof")?;
    let mut attrs = without_proof.split(',');
    let Some(cb) = attrs.next().and_then(|a| a.strip_prefix("c=")) else {
        return Err(FailureReason::Malformed(
            "SCRAM client final message: expected c=",
        ));
    };
    let channel_binding = decode_base64(cb, "SCRAM client final message: invalid channel binding")?;
    let Some(nonce) = attrs.next().and_then(|a| a.strip_prefix("r=")) else {
        return Err(FailureReason::Malformed(
            "SCRAM client final message: expected r=",
        ));
    };
    if !is_printable(nonce) {
        return Err(FailureReason::Malformed(
            "SCRAM client final message: invalid nonce",
        ));
    }
    for attr in attrs {
        parse_extension(attr)?;
    }
    Ok(ClientFinal {
        channel_binding,
        nonce,
        without_proof,
        proof,
    })
}

/// A server-first message, as a client reads it.
#[derive(Debug)]
pub(super) struct ServerFirst<'a> {
    pub(super) nonce: &'a str,
    pub(super) salt: Vec<u8>,
    pub(super) iterations: u32,
}

pub(super) fn parse_server_first(msg: &str) -> Result<ServerFirst<'_>> {
    let mut attrs = msg.split(',');
    let first = attrs.next().unwrap_or_default();
    if first.starts_with("m=") {
        return Err(FailureReason::MandatoryExtension);
    }
    let Some(nonce) = first.strip_prefix("r=") else {
        return Err(FailureReason::Malformed(
            "SCRAM server first message: expected r=",
        ));
    };
    if !is_printable(nonce) {
        return Err(FailureReason::Malformed(
            "SCRAM server first message: invalid nonce",
        ));
    }
    let Some(salt) = attrs.next().and_then(|a| a.strip_prefix("s=")) else {
        return Err(FailureReason::Malformed(
            "SCRAM server first message: expected s=",
        ));
    };
    let salt = decode_salt(salt)?;
    let Some(iterations) = attrs.next().and_then(|a| a.strip_prefix("i=")) else {
        return Err(FailureReason::Malformed(
            "SCRAM server first message: expected i=",
        ));
    };
    let iterations = match iterations.parse::<u32>() {
        Ok(i) if i > 0 && iterations.bytes().all(|b| b.is_ascii_digit()) => i,
        _ => {
            return Err(FailureReason::Malformed(
                "SCRAM server first message: invalid iterations",
            ));
        }
    };
    for attr in attrs {
        parse_extension(attr)?;
    }
    Ok(ServerFirst {
        nonce,
        salt,
        iterations,
    })
}

/// A server-final message, as a client reads it.
#[derive(Debug)]
pub(super) enum ServerFinal<'a> {
    /// `e=`: the server's error.
    Error(&'a str),
    /// `v=`: the server's signature.
    Verifier(Vec<u8>),
}

pub(super) fn parse_server_final(msg: &str) -> Result<ServerFinal<'_>> {
    if let Some(error) = msg.strip_prefix("e=") {
        if error.is_empty() || error.contains([',', '=', '\0']) {
            return Err(FailureReason::Malformed(
                "SCRAM server final message: invalid error",
            ));
        }
        return Ok(ServerFinal::Error(error));
    }
    let mut attrs = msg.split(',');
    let Some(v) = attrs.next().and_then(|a| a.strip_prefix("v=")) else {
        return Err(FailureReason::Malformed(
            "SCRAM server final message: expected v= or e=",
        ));
    };
    let verifier = decode_base64(v, "SCRAM server final message: invalid verifier")?;
    for attr in attrs {
        parse_extension(attr)?;
    }
    Ok(ServerFinal::Verifier(verifier))
}

/// RFC 5802's `saslname` to a user name: `=2C` is `,`, `=3D` is `=`, any other `=` is an error.
pub(super) fn decode_saslname(name: &str) -> Result<String> {
    if name.is_empty() {
        return Err(FailureReason::Malformed("SCRAM user name is empty"));
    }
    let mut out = String::with_capacity(name.len());
    let mut rest = name;
    while let Some(at) = rest.find(['=', '\0']) {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        if let Some(after) = tail.strip_prefix("=2C") {
            out.push(',');
            rest = after;
        } else if let Some(after) = tail.strip_prefix("=3D") {
            out.push('=');
            rest = after;
        } else {
            return Err(FailureReason::Malformed("SCRAM user name: invalid escape"));
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// A user name to RFC 5802's `saslname`.
pub(super) fn encode_saslname(name: &str) -> String {
    name.replace('=', "=3D").replace(',', "=2C")
}

/// An extension `key=value` (Kafka's `[A-Za-z]+=value`), value without NUL.
fn parse_extension(attr: &str) -> Result<(&str, &str)> {
    let Some((key, value)) = attr.split_once('=') else {
        return Err(FailureReason::Malformed("SCRAM extension without ="));
    };
    if key.is_empty()
        || !key.bytes().all(|b| b.is_ascii_alphabetic())
        || value.is_empty()
        || value.contains('\0')
    {
        return Err(FailureReason::Malformed(
            "SCRAM extension: invalid attribute",
        ));
    }
    Ok((key, value))
}

/// Base64 with padding, not empty (a salt may be: [`decode_salt`]).
fn decode_base64(text: &str, what: &'static str) -> Result<Vec<u8>> {
    match STANDARD.decode(text) {
        Ok(bytes) if !bytes.is_empty() => Ok(bytes),
        _ => Err(FailureReason::Malformed(what)),
    }
}

/// Base64 with padding, maybe empty (RFC 5802's `base64` rule allows it, as Kafka does).
fn decode_salt(text: &str) -> Result<Vec<u8>> {
    STANDARD
        .decode(text)
        .map_err(|_| FailureReason::Malformed("SCRAM server first message: invalid salt"))
}

pub(super) fn encode_base64(bytes: &[u8]) -> String {
    STANDARD.encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sasl_scram_client_first_parsing() {
        let m = parse_client_first("n,,n=user,r=fyko+d2lbbFgONRv9qkxdawL").unwrap();
        assert_eq!(
            (m.gs2_header, m.username.as_str(), m.nonce),
            ("n,,", "user", "fyko+d2lbbFgONRv9qkxdawL")
        );
        assert_eq!(
            (m.authzid, m.bare, m.token_auth),
            (None, "n=user,r=fyko+d2lbbFgONRv9qkxdawL", false)
        );
        let m =
            parse_client_first("n,a=us=2Cer,n=us=2Cer,r=abc,tokenauth=TRUE,foo=bar=baz").unwrap();
        assert_eq!(m.gs2_header, "n,a=us=2Cer,");
        assert_eq!(m.authzid.as_deref(), Some("us,er"));
        assert_eq!(m.username, "us,er");
        assert!(m.token_auth);
        assert!(
            !parse_client_first("n,,n=u,r=abc,tokenauth=false")
                .unwrap()
                .token_auth
        );

        let bad = |m: &str| parse_client_first(m).unwrap_err();
        assert_eq!(
            bad("y,,n=user,r=abc"),
            FailureReason::ChannelBindingRequested
        );
        assert_eq!(
            bad("p=tls-unique,,n=user,r=abc"),
            FailureReason::ChannelBindingRequested
        );
        assert_eq!(
            bad("n,,m=x,n=user,r=abc"),
            FailureReason::MandatoryExtension
        );
        for m in [
            "",
            "n",
            "n,",
            "n,,",
            "x,,n=user,r=abc",
            "n,a=user",
            "n,b=user,n=user,r=abc",
            "n,,n=,r=abc",
            "n,,n=user",
            "n,,n=user,r=",
            "n,,n=user,r=a b",
            "n,,n=us=2Der,r=abc",
            "n,,n=us=er,r=abc",
            "n,,r=abc,n=user",
            "n,,n=user,r=abc,",
            "n,,n=user,r=abc,x",
            "n,,n=user,r=abc,1=2",
            "n,,n=u\0,r=abc",
        ] {
            assert!(matches!(bad(m), FailureReason::Malformed(_)), "{m:?}");
        }
    }

    #[test]
    fn sasl_scram_client_final_parsing() {
        let m =
            parse_client_final("c=biws,r=abcdef,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
                .unwrap();
        assert_eq!(m.channel_binding, b"n,,");
        assert_eq!((m.nonce, m.without_proof), ("abcdef", "c=biws,r=abcdef"));
        assert_eq!(m.proof.len(), 32);
        for m in [
            "",
            "c=biws,r=abc",
            "c=biws,r=abc,p=",
            "c=biws,r=abc,p=****",
            "c=biws,r=abc,p=YQ",
            "c=bi,r=abc,p=YQ==",
            "r=abc,c=biws,p=YQ==",
            "c=biws,p=YQ==",
            "c=biws,r=abc,x,p=YQ==",
            "c=biws,r=abc,p=YQ==,e=1",
        ] {
            assert!(
                matches!(
                    parse_client_final(m).unwrap_err(),
                    FailureReason::Malformed(_)
                ),
                "{m:?}"
            );
        }
    }

    #[test]
    fn sasl_scram_server_messages_parsing() {
        let m = parse_server_first("r=abc,s=QSXCR+Q6sek8bf92,i=4096").unwrap();
        assert_eq!((m.nonce, m.iterations), ("abc", 4096));
        for m in [
            "",
            "r=abc,s=QSXCR+Q6sek8bf92",
            "r=abc,s=QSXCR+Q6sek8bf92,i=0",
            "r=abc,s=QSXCR+Q6sek8bf92,i=+1",
            "r=abc,s=QSXCR+Q6sek8bf92,i=99999999999",
            "r=abc,s=!,i=1",
            "s=QSXCR+Q6sek8bf92,r=abc,i=1",
        ] {
            assert!(parse_server_first(m).is_err(), "{m:?}");
        }
        assert_eq!(
            parse_server_first("m=x,r=abc,s=YQ==,i=1").unwrap_err(),
            FailureReason::MandatoryExtension
        );
        assert!(matches!(
            parse_server_final("e=invalid-proof").unwrap(),
            ServerFinal::Error("invalid-proof")
        ));
        assert!(
            matches!(parse_server_final("v=YQ==").unwrap(), ServerFinal::Verifier(v) if v == b"a")
        );
        for m in ["", "e=", "e=a,b", "v=", "v=Y", "x=YQ=="] {
            assert!(parse_server_final(m).is_err(), "{m:?}");
        }
    }

    #[test]
    fn sasl_scram_saslname_round_trip() {
        for name in ["user", "a,b", "a=b", "=,=2C", "ünïcødé"] {
            assert_eq!(decode_saslname(&encode_saslname(name)).unwrap(), name);
        }
        assert_eq!(encode_saslname("a=,b"), "a=3D=2Cb");
    }
}
