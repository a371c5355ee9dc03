//! Test certificates made with rcgen: a CA, leaves it signs, and the CA plus a server keystore
//! written to a directory. Shared by the TLS tests of this crate and of `coordinator/tests`
//! (which include this file by path).

#![allow(dead_code, unreachable_pub)] // each test binary uses part of it, as a private module

use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};

/// A self-signed test CA.
pub struct Ca {
    /// Its certificate (PEM), for truststores.
    pub pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl Ca {
    /// A new CA with common name `name`.
    pub fn new(name: &str) -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let key = KeyPair::generate().expect("key");
        let pem = params.self_signed(&key).expect("self-signed").pem();
        Self {
            pem,
            issuer: Issuer::new(params, key),
        }
    }

    /// A certificate for the subject alternative `names` and the subject `dn` (rcgen's
    /// default subject when empty), signed by this CA: (certificate PEM, key PEM).
    pub fn sign(&self, names: &[&str], dn: &[(DnType, &str)]) -> (String, String) {
        self.sign_params(Self::params(names, dn))
    }

    /// A keystore PEM (certificate, then its key) for `names` and `dn`, as [`Ca::sign`].
    pub fn keystore(&self, names: &[&str], dn: &[(DnType, &str)]) -> String {
        let (cert, key) = self.sign(names, dn);
        cert + &key
    }

    /// As [`Ca::keystore`], with a certificate valid only in 2000: expired.
    pub fn expired_keystore(&self, names: &[&str], dn: &[(DnType, &str)]) -> String {
        let mut params = Self::params(names, dn);
        params.not_before = rcgen::date_time_ymd(2000, 1, 1);
        params.not_after = rcgen::date_time_ymd(2001, 1, 1);
        let (cert, key) = self.sign_params(params);
        cert + &key
    }

    fn params(names: &[&str], dn: &[(DnType, &str)]) -> CertificateParams {
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let mut params = CertificateParams::new(names).expect("params");
        if !dn.is_empty() {
            params.distinguished_name = rcgen::DistinguishedName::new();
            for (t, v) in dn {
                params.distinguished_name.push(t.clone(), *v);
            }
        }
        params
    }

    fn sign_params(&self, params: CertificateParams) -> (String, String) {
        let key = KeyPair::generate().expect("key");
        let cert = params.signed_by(&key, &self.issuer).expect("signed");
        (cert.pem(), key.serialize_pem())
    }
}

/// Writes `text` at `path`; returns the path.
pub fn write(path: &Path, text: &str) -> PathBuf {
    std::fs::write(path, text).expect("write");
    path.to_owned()
}

/// Writes a new CA (`ca.pem`) and a keystore `keystore` (a certificate for 127.0.0.1 and
/// localhost, then its key) into `dir`; returns their paths.
pub fn ca_and_keystore(dir: &Path, keystore: &str) -> (PathBuf, PathBuf) {
    let ca = Ca::new("test CA");
    let ks = ca.keystore(&["127.0.0.1", "localhost"], &[]);
    (
        write(&dir.join("ca.pem"), &ca.pem),
        write(&dir.join(keystore), &ks),
    )
}
