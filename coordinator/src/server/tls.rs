//! TLS of the SSL and SASL_SSL listeners: rustls (ring provider) configured from Kafka's keys
//! (`ssl.keystore.location`, `ssl.truststore.location`, `ssl.client.auth`, PEM only), and the
//! principal of a client certificate as Kafka's `DefaultKafkaPrincipalBuilder` makes it:
//! `User:` and the subject's distinguished name in RFC 2253 form
//! ([Kafka: SSL authentication](https://kafka.apache.org/documentation/#security_ssl)).

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context as _, bail};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use security::Principal;
use tokio_rustls::TlsAcceptor;

use super::listeners::{SecurityProtocol, listener_key, prefixed_key};
use super::settings::Settings;

/// `ssl.client.auth`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    /// No client certificate asked for.
    None,
    /// Asked for; a client without one is `User:ANONYMOUS`.
    Requested,
    /// A client without a trusted certificate is refused.
    Required,
}

/// A listener's TLS: the acceptor and its client authentication.
pub(crate) struct TlsSetup {
    pub(crate) acceptor: TlsAcceptor,
}

fn read(path: &str, key: &str) -> anyhow::Result<Vec<u8>> {
    std::fs::read(Path::new(path)).with_context(|| format!("{key}: cannot read {path}"))
}

/// The certificates of a PEM file (`key` names the setting, for errors).
pub fn pem_certificates(path: &str, key: &str) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    let bytes = read(path, key)?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| anyhow::anyhow!("{key}: {path} is not valid PEM: {e}"))?;
    if certs.is_empty() {
        bail!("{key}: {path} holds no CERTIFICATE");
    }
    Ok(certs)
}

pub(crate) fn private_key(path: &str, key: &str) -> anyhow::Result<PrivateKeyDer<'static>> {
    let bytes = read(path, key)?;
    let text = String::from_utf8_lossy(&bytes);
    if text.contains("ENCRYPTED PRIVATE KEY") || text.contains("Proc-Type: 4,ENCRYPTED") {
        bail!(
            "{key}: the private key in {path} is encrypted; encrypted keys (ssl.key.password) are not supported: \
             decrypt it (openssl pkey -in KEY -out PLAIN_KEY) and protect the file instead"
        );
    }
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| match e {
        rustls_pki_types::pem::Error::NoItemsFound => anyhow::anyhow!(
            "{key}: {path} holds no PRIVATE KEY (PKCS#8, RSA or EC) beside its certificates"
        ),
        e => anyhow::anyhow!("{key}: {path} is not valid PEM: {e}"),
    })
}

impl TlsSetup {
    /// The TLS of listener `name` from its keys (`listener.name.<name>.ssl.*` first).
    pub(crate) fn new(
        settings: &Settings,
        name: &str,
        protocol: SecurityProtocol,
    ) -> anyhow::Result<Self> {
        let lower = name.to_ascii_lowercase();
        let key_name = |k: &str| {
            if prefixed_key(settings, name, k).is_some() {
                format!("listener.name.{lower}.{k}")
            } else {
                k.to_owned()
            }
        };
        let keystore_key = key_name("ssl.keystore.location");
        let Some(keystore) = listener_key(settings, name, "ssl.keystore.location") else {
            bail!(
                "listener {name} ({}) needs ssl.keystore.location (or listener.name.{lower}.ssl.keystore.location): \
                 a PEM file with the certificate chain and the private key",
                protocol.name()
            );
        };
        let chain = pem_certificates(keystore, &keystore_key)?;
        let key = private_key(keystore, &keystore_key)?;
        // KIP-684: a SASL_SSL listener asks for client certificates only when its own prefixed
        // key says so.
        let auth_value = match protocol {
            SecurityProtocol::SaslSsl => prefixed_key(settings, name, "ssl.client.auth"),
            _ => listener_key(settings, name, "ssl.client.auth"),
        };
        let client_auth = match auth_value.unwrap_or("none") {
            "required" => ClientAuth::Required,
            "requested" => ClientAuth::Requested,
            _ => ClientAuth::None,
        };
        // ring: builds with the C compiler alone (aws-lc-rs, whose provider has the
        // post-quantum key exchange rustls now prefers, needs cmake). The classical groups
        // (X25519, P-256, P-384) are what Kafka's JVM clients and librdkafka offer anyway.
        #[allow(deprecated)]
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .context("TLS protocol versions")?;
        let builder = if client_auth == ClientAuth::None {
            builder.with_no_client_auth()
        } else {
            let trust_key = key_name("ssl.truststore.location");
            let Some(truststore) = listener_key(settings, name, "ssl.truststore.location") else {
                bail!(
                    "listener {name}: {} needs ssl.truststore.location (or listener.name.{lower}.ssl.truststore.location): \
                     the CA certificates of the clients",
                    key_name("ssl.client.auth")
                );
            };
            let mut roots = RootCertStore::empty();
            for cert in pem_certificates(truststore, &trust_key)? {
                roots
                    .add(cert)
                    .map_err(|e| anyhow::anyhow!("{trust_key}: {truststore}: {e}"))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let verifier = if client_auth == ClientAuth::Requested {
                verifier.allow_unauthenticated()
            } else {
                verifier
            };
            builder.with_client_cert_verifier(
                verifier
                    .build()
                    .map_err(|e| anyhow::anyhow!("{trust_key}: {truststore}: {e}"))?,
            )
        };
        let config = builder
            .with_single_cert(chain, key)
            .map_err(|e| anyhow::anyhow!("{keystore_key}: {keystore}: {e}"))?;
        Ok(Self {
            acceptor: TlsAcceptor::from(Arc::new(config)),
        })
    }
}

/// The principal of a client certificate: `User:` and its subject in RFC 2253 form, as Java's
/// `X500Principal.getName()` writes it (last RDN first, `CN`, `OU`, `O`, `L`, `ST`, `C`,
/// `STREET`, `DC`, `UID` by keyword, other attributes as `OID=#hex`).
pub fn principal_of(cert: &CertificateDer<'_>) -> anyhow::Result<Principal> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert.as_ref())
        .map_err(|e| anyhow::anyhow!("unparsable certificate: {e}"))?;
    Ok(Principal::user(rfc2253(parsed.subject())))
}

fn keyword(oid: &str) -> Option<&'static str> {
    Some(match oid {
        "2.5.4.3" => "CN",
        "2.5.4.6" => "C",
        "2.5.4.7" => "L",
        "2.5.4.8" => "ST",
        "2.5.4.9" => "STREET",
        "2.5.4.10" => "O",
        "2.5.4.11" => "OU",
        "0.9.2342.19200300.100.1.25" => "DC",
        "0.9.2342.19200300.100.1.1" => "UID",
        _ => return None,
    })
}

fn escape(value: &str, out: &mut String) {
    let chars: Vec<char> = value.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        let special = matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';')
            || (i == 0 && (c == '#' || c == ' '))
            || (i + 1 == chars.len() && c == ' ');
        if special {
            out.push('\\');
        }
        out.push(c);
    }
}

fn der_hex(any: &x509_parser::der_parser::asn1_rs::Any<'_>, out: &mut String) {
    use std::fmt::Write as _;
    let data: &[u8] = any.data;
    let _ = write!(out, "#{:02x}", u8::try_from(any.tag().0).unwrap_or(0));
    let len = data.len();
    if len < 0x80 {
        let _ = write!(out, "{len:02x}");
    } else {
        let bytes: Vec<u8> = len
            .to_be_bytes()
            .into_iter()
            .skip_while(|b| *b == 0)
            .collect();
        let _ = write!(out, "{:02x}", 0x80 | bytes.len());
        for b in bytes {
            let _ = write!(out, "{b:02x}");
        }
    }
    for b in data {
        let _ = write!(out, "{b:02x}");
    }
}

/// A name in RFC 2253 form.
pub(crate) fn rfc2253(name: &x509_parser::x509::X509Name<'_>) -> String {
    let rdns: Vec<_> = name.iter_rdn().collect();
    let mut out = String::new();
    for (i, rdn) in rdns.iter().rev().enumerate() {
        if i > 0 {
            out.push(',');
        }
        for (j, atv) in rdn.iter().enumerate() {
            if j > 0 {
                out.push('+');
            }
            let oid = atv.attr_type().to_id_string();
            match (keyword(&oid), atv.as_str()) {
                (Some(k), Ok(v)) => {
                    out.push_str(k);
                    out.push('=');
                    escape(v, &mut out);
                }
                _ => {
                    out.push_str(&oid);
                    out.push('=');
                    der_hex(atv.attr_value(), &mut out);
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use rcgen::{CertificateParams, DnType, KeyPair};

    use super::*;

    #[test]
    fn subject_in_rfc2253_form_as_kafka() {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.distinguished_name = rcgen::DistinguishedName::new();
        params.distinguished_name.push(DnType::CountryName, "SE");
        params
            .distinguished_name
            .push(DnType::OrganizationName, "example, inc");
        params
            .distinguished_name
            .push(DnType::OrganizationalUnitName, "eng");
        params.distinguished_name.push(DnType::CommonName, "alice");
        let key = KeyPair::generate().expect("key");
        let cert = params.self_signed(&key).expect("cert");
        let p = principal_of(cert.der()).expect("principal");
        assert_eq!(p.to_string(), r"User:CN=alice,OU=eng,O=example\, inc,C=SE");
    }
}
