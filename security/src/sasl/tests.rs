//! Exchanges end to end: RFC 7677's test vector, our client against our server, the failures a
//! client can provoke, and random input to every step.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use proptest::prelude::*;

use super::*;

const RFC7677_CLIENT_NONCE: &str = "rOprNGfwEbeRWgbNEkqO";
const RFC7677_SERVER_NONCE: &str = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
const RFC7677_SALT: &str = "W22ZaJ0SNY7soEsUEjb6gQ==";
const RFC7677_CLIENT_FIRST: &str = "n,,n=user,r=rOprNGfwEbeRWgbNEkqO";
const RFC7677_SERVER_FIRST: &str =
    "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
const RFC7677_CLIENT_FINAL: &str = "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
const RFC7677_SERVER_FINAL: &str = "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=";

const GENERIC_256: &str = "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-256";
const GENERIC_512: &str = "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512";

type Store = HashMap<(String, ScramMechanism), ScramCredential>;

/// "user"/"pencil" with RFC 7677's salt, "alice"/"alice-secret" with a random one, for both
/// mechanisms (made once: PBKDF2 is slow without optimizations).
fn store() -> Arc<Store> {
    static STORE: OnceLock<Arc<Store>> = OnceLock::new();
    STORE
        .get_or_init(|| {
            let salt = STANDARD.decode(RFC7677_SALT).unwrap();
            let mut store = Store::new();
            for m in ScramMechanism::ALL {
                let user =
                    ScramCredential::from_password_and_salt(m, "pencil", &salt, 4096).unwrap();
                store.insert(("user".into(), m), user);
                let alice = ScramCredential::from_password(m, "alice-secret", 4096).unwrap();
                store.insert(("alice".into(), m), alice);
                let weak = ScramCredential {
                    iterations: 1024,
                    ..ScramCredential::from_password(m, "w", 4096).unwrap()
                };
                store.insert(("weak".into(), m), weak);
            }
            Arc::new(store)
        })
        .clone()
}

fn dummy_options() -> ScramServerOptions {
    ScramServerOptions::new(UnknownUserPolicy::DummyExchange {
        key: DummySaltKey::from_bytes([7; 32]),
        iterations: 4096,
    })
}

fn server(m: ScramMechanism) -> ScramServer {
    ScramServer::new(m, store(), dummy_options())
}

fn rfc_server() -> ScramServer {
    server(ScramMechanism::Sha256)
        .with_nonce_source(Box::new(FixedNonce(RFC7677_SERVER_NONCE.into())))
}

fn continue_bytes(step: Step) -> Vec<u8> {
    match step {
        Step::Continue(bytes) => bytes,
        Step::Done { .. } => panic!("done too early"),
    }
}

/// Runs our client against our server up to server-final: the server's answer to client-final.
fn exchange(
    m: ScramMechanism,
    user: &str,
    password: &str,
    mut s: ScramServer,
) -> Result<Step, SaslError> {
    let mut c = ScramClient::new(m, user, password);
    let server_first = continue_bytes(s.step(&c.client_first().unwrap())?);
    let client_final = c.client_final(&server_first).unwrap();
    s.step(&client_final)
}

#[test]
fn sasl_scram_rfc7677_server_vector() {
    let mut s = rfc_server();
    let first = s.step(RFC7677_CLIENT_FIRST.as_bytes()).unwrap();
    assert_eq!(
        first,
        Step::Continue(RFC7677_SERVER_FIRST.as_bytes().to_vec())
    );
    assert!(!s.is_complete());
    let last = s.step(RFC7677_CLIENT_FINAL.as_bytes()).unwrap();
    assert_eq!(
        last,
        Step::Done {
            principal_name: "user".into(),
            final_bytes: RFC7677_SERVER_FINAL.as_bytes().to_vec()
        }
    );
    assert!(s.is_complete());
    assert_eq!(
        s.step(b"again").unwrap_err(),
        SaslError::IllegalState {
            mechanism: Mechanism::ScramSha256,
            state: "COMPLETE"
        }
    );
}

#[test]
fn sasl_scram_rfc7677_client_vector() {
    let mut c = ScramClient::new(ScramMechanism::Sha256, "user", "pencil")
        .with_nonce_source(Box::new(FixedNonce(RFC7677_CLIENT_NONCE.into())));
    assert_eq!(
        c.initial_response().unwrap(),
        RFC7677_CLIENT_FIRST.as_bytes()
    );
    assert_eq!(
        c.step(RFC7677_SERVER_FIRST.as_bytes()).unwrap().unwrap(),
        RFC7677_CLIENT_FINAL.as_bytes()
    );
    assert_eq!(c.step(RFC7677_SERVER_FINAL.as_bytes()).unwrap(), None);
    assert!(c.is_complete());
    assert_eq!(c.step(b"").unwrap_err(), SaslClientError::IllegalState);
}

#[test]
fn sasl_scram_client_rejects_a_wrong_server_signature() {
    let mut c = ScramClient::new(ScramMechanism::Sha256, "user", "pencil")
        .with_nonce_source(Box::new(FixedNonce(RFC7677_CLIENT_NONCE.into())));
    c.client_first().unwrap();
    c.client_final(RFC7677_SERVER_FIRST.as_bytes()).unwrap();
    let err = c
        .verify_server_final(b"v=7rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
        .unwrap_err();
    assert_eq!(err, SaslClientError::InvalidServerSignature);
    assert_eq!(
        err.to_string(),
        "Invalid server signature in server final message"
    );
    assert!(!c.is_complete());

    let client = || {
        let mut c = ScramClient::new(ScramMechanism::Sha256, "user", "pencil")
            .with_nonce_source(Box::new(FixedNonce(RFC7677_CLIENT_NONCE.into())));
        c.client_first().unwrap();
        c
    };
    let mut c = client();
    c.client_final(RFC7677_SERVER_FIRST.as_bytes()).unwrap();
    let err = c.verify_server_final(b"e=invalid-proof").unwrap_err();
    assert_eq!(
        err.to_string(),
        "Sasl authentication using SCRAM-SHA-256 failed with error: invalid-proof"
    );
    // The server's nonce must extend the client's.
    let err = client()
        .client_final(b"r=XOprNGfwEbeRWgbNEkqOabc,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
        .unwrap_err();
    assert_eq!(err, SaslClientError::NonceMismatch);
    let err = client()
        .client_final(b"r=rOprNGfwEbeRWgbNEkqO,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
        .unwrap_err();
    assert_eq!(err, SaslClientError::NonceMismatch);
    let err = client()
        .client_final(b"r=rOprNGfwEbeRWgbNEkqOx,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4095")
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Requested iterations 4095 is less than the minimum 4096 for SCRAM-SHA-256"
    );
    let err = client()
        .client_final(b"r=rOprNGfwEbeRWgbNEkqOx,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=100000000")
        .unwrap_err();
    assert!(matches!(
        err,
        SaslClientError::TooManyIterations {
            iterations: 100_000_000,
            ..
        }
    ));
}

#[test]
fn sasl_scram_round_trips_with_our_client() {
    for m in ScramMechanism::ALL {
        for (user, password) in [("user", "pencil"), ("alice", "alice-secret")] {
            let mut c = ScramClient::new(m, user, password);
            let mut s = server(m);
            let server_first = continue_bytes(s.step(&c.initial_response().unwrap()).unwrap());
            let client_final = c.step(&server_first).unwrap().unwrap();
            let Step::Done {
                principal_name,
                final_bytes,
            } = s.step(&client_final).unwrap()
            else {
                panic!()
            };
            assert_eq!(principal_name, user);
            assert_eq!(c.step(&final_bytes).unwrap(), None);
            assert!(c.is_complete() && s.is_complete());
        }
    }
}

#[test]
fn sasl_scram_user_names_with_escapes() {
    let mut store = Store::new();
    let name = "o=dd,name";
    let cred = ScramCredential::from_password_and_salt(ScramMechanism::Sha512, "pw", b"salt", 4096)
        .unwrap();
    store.insert((name.into(), ScramMechanism::Sha512), cred);
    let s = ScramServer::new(ScramMechanism::Sha512, Arc::new(store), dummy_options());
    let step = exchange(ScramMechanism::Sha512, name, "pw", s).unwrap();
    assert!(matches!(step, Step::Done { principal_name, .. } if principal_name == name));
}

fn assert_generic(err: &SaslError, m: ScramMechanism) {
    assert_eq!(err.error_code(), 58, "{err}");
    let expected = if m == ScramMechanism::Sha256 {
        GENERIC_256
    } else {
        GENERIC_512
    };
    assert_eq!(err.client_message(false), expected, "{err}");
}

#[test]
fn sasl_scram_wrong_password() {
    for m in ScramMechanism::ALL {
        let err = exchange(m, "alice", "alice-secreT", server(m)).unwrap_err();
        assert_eq!(err.reason(), Some(&FailureReason::InvalidProof));
        assert_generic(&err, m);
    }
    let err = exchange(
        ScramMechanism::Sha256,
        "alice",
        "x",
        server(ScramMechanism::Sha256),
    )
    .unwrap_err();
    assert_eq!(
        err.client_message(true),
        "Authentication failed during re-authentication due to invalid credentials with SASL mechanism SCRAM-SHA-256"
    );
    // The generic message names no cause.
    assert!(err.to_string().contains("Invalid client credentials"));
}

#[test]
fn sasl_scram_unknown_user_is_indistinguishable() {
    for m in ScramMechanism::ALL {
        let mut known = server(m).with_nonce_source(Box::new(FixedNonce("srv".into())));
        let mut unknown = server(m).with_nonce_source(Box::new(FixedNonce("srv".into())));
        let known_first = continue_bytes(known.step(b"n,,n=alice,r=cli").unwrap());
        let unknown_first = continue_bytes(unknown.step(b"n,,n=mallory,r=cli").unwrap());
        let shape = |first: &[u8]| {
            let text = std::str::from_utf8(first).unwrap().to_owned();
            let parts: Vec<String> = text.split(',').map(str::to_owned).collect();
            (
                parts[0].clone(),
                STANDARD.decode(&parts[1][2..]).unwrap().len(),
                parts[2].clone(),
            )
        };
        assert_eq!(shape(&known_first), shape(&unknown_first));
        // The same unknown user always gets the same salt; another one another salt.
        let again = continue_bytes(
            server(m)
                .with_nonce_source(Box::new(FixedNonce("srv".into())))
                .step(b"n,,n=mallory,r=cli")
                .unwrap(),
        );
        assert_eq!(again, unknown_first);
        let other = continue_bytes(
            server(m)
                .with_nonce_source(Box::new(FixedNonce("srv".into())))
                .step(b"n,,n=trudy,r=cli")
                .unwrap(),
        );
        assert_ne!(other, unknown_first);

        let wrong = exchange(m, "alice", "guess", server(m)).unwrap_err();
        let missing = exchange(m, "mallory", "guess", server(m)).unwrap_err();
        assert_eq!(missing.reason(), Some(&FailureReason::UnknownUser));
        assert_generic(&wrong, m);
        assert_generic(&missing, m);
        assert_eq!(
            (wrong.error_code(), wrong.client_message(false)),
            (missing.error_code(), missing.client_message(false))
        );
    }
}

#[test]
fn sasl_scram_unknown_user_fails_at_client_first_as_kafka() {
    let m = ScramMechanism::Sha256;
    let mut s = ScramServer::new(
        m,
        store(),
        ScramServerOptions::new(UnknownUserPolicy::FailAtClientFirst),
    );
    let err = s.step(b"n,,n=mallory,r=cli").unwrap_err();
    assert_eq!(err.reason(), Some(&FailureReason::UnknownUser));
    assert_eq!(
        err.reason().unwrap().to_string(),
        "Authentication failed: Invalid user credentials"
    );
    assert_generic(&err, m);
    assert_eq!(s.step(b"n,,n=alice,r=cli").unwrap_err().error_code(), 34);
    // Known users go through as usual.
    let s = ScramServer::new(
        m,
        store(),
        ScramServerOptions::new(UnknownUserPolicy::FailAtClientFirst),
    );
    assert!(exchange(m, "alice", "alice-secret", s).is_ok());
}

#[test]
fn sasl_scram_tampered_messages() {
    let proof_at = RFC7677_CLIENT_FINAL.find(",p=").unwrap() + 3;
    let mut tampered_proof = STANDARD.decode(&RFC7677_CLIENT_FINAL[proof_at..]).unwrap();
    tampered_proof[0] ^= 1;
    let cases = [
        // A flipped proof bit.
        (
            format!(
                "{},p={}",
                &RFC7677_CLIENT_FINAL[..proof_at - 3],
                STANDARD.encode(&tampered_proof)
            ),
            FailureReason::InvalidProof,
        ),
        // An extension added to client-final changes the AuthMessage: the proof no longer fits.
        (
            RFC7677_CLIENT_FINAL.replace(",p=", ",x=y,p="),
            FailureReason::InvalidProof,
        ),
        // Another nonce.
        (
            RFC7677_CLIENT_FINAL.replace("$k0", "$k1"),
            FailureReason::NonceMismatch,
        ),
        (
            RFC7677_CLIENT_FINAL.replace("%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0", ""),
            FailureReason::NonceMismatch,
        ),
        // A channel binding that is not the gs2 header ("y,," and "p=tls-unique,,").
        (
            RFC7677_CLIENT_FINAL.replace("c=biws", "c=eSws"),
            FailureReason::ChannelBindingMismatch,
        ),
        (
            RFC7677_CLIENT_FINAL.replace("c=biws", "c=cD10bHMtdW5pcXVlLCw="),
            FailureReason::ChannelBindingMismatch,
        ),
        // A proof of the other mechanism's length.
        (
            format!(
                "{},p={}",
                &RFC7677_CLIENT_FINAL[..proof_at - 3],
                STANDARD.encode([0u8; 64])
            ),
            FailureReason::Malformed("SCRAM client final message: proof of the wrong length"),
        ),
    ];
    for (client_final, reason) in cases {
        let mut s = rfc_server();
        s.step(RFC7677_CLIENT_FIRST.as_bytes()).unwrap();
        let err = s.step(client_final.as_bytes()).unwrap_err();
        assert_eq!(err.reason(), Some(&reason), "{client_final}");
        assert_generic(&err, ScramMechanism::Sha256);
        assert!(!s.is_complete());
        assert_eq!(
            s.step(RFC7677_CLIENT_FINAL.as_bytes()).unwrap_err(),
            SaslError::IllegalState {
                mechanism: Mechanism::ScramSha256,
                state: "FAILED"
            }
        );
    }
}

#[test]
fn sasl_scram_bad_client_first() {
    let m = ScramMechanism::Sha256;
    let cases: [(&[u8], FailureReason); 8] = [
        (b"y,,n=user,r=abc", FailureReason::ChannelBindingRequested),
        (
            b"p=tls-unique,,n=user,r=abc",
            FailureReason::ChannelBindingRequested,
        ),
        (b"n,,m=ext,n=user,r=abc", FailureReason::MandatoryExtension),
        (
            b"n,,n=user,r=abc,tokenauth=true",
            FailureReason::DelegationTokenUnsupported,
        ),
        (
            b"N,,n=user,r=abc",
            FailureReason::Malformed("SCRAM client first message: gs2 header must start with n,"),
        ),
        (
            b"n,,n=user,r=a\xffc",
            FailureReason::Malformed("SCRAM client first message: not UTF-8"),
        ),
        (
            b"n,,n=weak,r=abc",
            FailureReason::IterationsBelowMinimum {
                iterations: 1024,
                minimum: 4096,
            },
        ),
        (
            b"",
            FailureReason::Malformed("SCRAM client first message: gs2 header must start with n,"),
        ),
    ];
    for (token, reason) in cases {
        let err = server(m).step(token).unwrap_err();
        assert_eq!(err.reason(), Some(&reason), "{token:?}");
        assert_generic(&err, m);
    }
    // Unknown extensions are ignored, as Kafka ignores them.
    assert!(
        server(m)
            .step(b"n,,n=user,r=abc,foo=bar,tokenauth=false")
            .is_ok()
    );
}

#[test]
fn sasl_scram_authzid() {
    let m = ScramMechanism::Sha256;
    let mismatch = "Authentication failed: Client requested an authorization id that is different from username";
    for user in ["alice", "mallory"] {
        let err = server(m)
            .step(format!("n,a=admin,n={user},r=abc").as_bytes())
            .unwrap_err();
        assert_eq!(err.client_message(false), mismatch);
        assert_eq!(err.error_code(), 58);
    }
    // Kafka's order for FailAtClientFirst: an unknown user first.
    let mut s = ScramServer::new(
        m,
        store(),
        ScramServerOptions::new(UnknownUserPolicy::FailAtClientFirst),
    );
    assert_eq!(
        s.step(b"n,a=admin,n=mallory,r=abc").unwrap_err().reason(),
        Some(&FailureReason::UnknownUser)
    );
    // An authorization id equal to the user is fine, and part of client-final's channel binding.
    let mut s = rfc_server();
    let first = continue_bytes(s.step(b"n,a=user,n=user,r=rOprNGfwEbeRWgbNEkqO").unwrap());
    assert!(first.starts_with(b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"));
    // Its client-final must bind "n,a=user,", not "n,,".
    let err = s.step(RFC7677_CLIENT_FINAL.as_bytes()).unwrap_err();
    assert_eq!(err.reason(), Some(&FailureReason::ChannelBindingMismatch));
}

#[test]
fn sasl_scram_oversized_tokens() {
    let m = ScramMechanism::Sha512;
    let mut big = b"n,,n=user,r=".to_vec();
    big.resize(DEFAULT_MAX_TOKEN_LEN + 1, b'a');
    let err = server(m).step(&big).unwrap_err();
    assert!(
        matches!(err, SaslError::TokenTooLarge { len, max: DEFAULT_MAX_TOKEN_LEN, .. } if len == big.len())
    );
    assert_eq!(err.error_code(), 58);
    assert_eq!(
        err.client_message(false),
        "Failing SASL authentication due to invalid receive size"
    );
    // At the bound it is parsed (and here refused for its user).
    big.truncate(DEFAULT_MAX_TOKEN_LEN);
    assert!(server(m).step(&big).is_ok());
    // In client-final too; the exchange is then over.
    let mut s = server(m);
    s.step(b"n,,n=user,r=abc").unwrap();
    assert!(matches!(
        s.step(&vec![b'c'; 5000]).unwrap_err(),
        SaslError::TokenTooLarge { .. }
    ));
    assert_eq!(s.step(b"c=biws").unwrap_err().error_code(), 34);
    let options = ScramServerOptions {
        max_token_len: 8,
        ..dummy_options()
    };
    let err = ScramServer::new(m, store(), options)
        .step(b"n,,n=user,r=abc")
        .unwrap_err();
    assert!(matches!(err, SaslError::TokenTooLarge { max: 8, .. }));
}

#[test]
fn sasl_scram_store_failures() {
    struct Broken;
    impl CredentialStore for Broken {
        fn scram_credential(
            &self,
            _: &str,
            _: ScramMechanism,
        ) -> Result<Option<ScramCredential>, CredentialLookupError> {
            Err(CredentialLookupError("backend unavailable".into()))
        }
    }
    let m = ScramMechanism::Sha256;
    let err = ScramServer::new(m, Arc::new(Broken), dummy_options())
        .step(b"n,,n=user,r=abc")
        .unwrap_err();
    assert_eq!(
        err.reason(),
        Some(&FailureReason::CredentialUnavailable(
            "backend unavailable".into()
        ))
    );
    assert_generic(&err, m);
    // A SHA-512 credential handed out for SHA-256.
    let mut wrong = Store::new();
    let cred = store()[&("user".to_owned(), ScramMechanism::Sha512)].clone();
    wrong.insert(("user".into(), m), cred);
    let err = ScramServer::new(m, Arc::new(wrong), dummy_options())
        .step(b"n,,n=user,r=abc")
        .unwrap_err();
    assert_eq!(err.reason(), Some(&FailureReason::InvalidCredential));
}

#[test]
fn sasl_factory_runs_both_mechanisms() {
    let users: PlainUsers = [("admin", "admin-secret")].into_iter().collect();
    let f = SaslServerFactory::new(
        &Mechanism::ALL,
        Some(Arc::new(users)),
        Some(store()),
        dummy_options(),
    )
    .unwrap();
    let mut plain = f.server("PLAIN").unwrap();
    let step = plain
        .step(&PlainClient::new("admin", "admin-secret").token())
        .unwrap();
    assert!(matches!(step, Step::Done { principal_name, .. } if principal_name == "admin"));
    let creds = ClientCredentials::new("alice", "alice-secret");
    for m in Mechanism::ALL {
        let mut c = if m == Mechanism::Plain {
            ClientCredentials::new("admin", "admin-secret").client(m)
        } else {
            creds.client(m)
        };
        let mut s = f.server(m.name()).unwrap();
        let mut token = c.initial_response().unwrap();
        loop {
            match s.step(&token).unwrap() {
                Step::Continue(challenge) => token = c.step(&challenge).unwrap().unwrap(),
                Step::Done { final_bytes, .. } => {
                    assert_eq!(c.step(&final_bytes).unwrap(), None);
                    break;
                }
            }
        }
        assert!(c.is_complete() && s.is_complete(), "{m}");
    }
}

fn arb_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..300),
        // Near-valid messages: the grammar's characters in random order.
        "[nyp,=ar0-9a-zA-Z+/%$)\\x00]{0,80}".prop_map(String::into_bytes),
        "n,(a=[a-z=,23CD]{0,6})?,n=[a-z=,23CD]{0,6},r=[!-~]{0,12}(,[a-z]{1,3}=[!-~]{0,5}){0,3}"
            .prop_map(String::into_bytes),
    ]
}

fn arb_client_final() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..300),
        "c=[a-zA-Z0-9+/=]{0,8},r=[!-~]{0,40}(,[a-z]=[!-~]{0,5}){0,2},p=[a-zA-Z0-9+/=]{0,90}"
            .prop_map(String::into_bytes),
        "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj\\)hNlF\\$k0,p=[a-zA-Z0-9+/]{43}="
            .prop_map(String::into_bytes),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn sasl_random_bytes_never_panic_plain(token in arb_bytes(), second in arb_bytes()) {
        let users: PlainUsers = [("alice", "alice-secret")].into_iter().collect();
        let mut s = PlainServer::new(Arc::new(users));
        let first = s.step(&token);
        if let Err(e) = &first {
            prop_assert!(e.error_code() == 58);
            let _ = e.client_message(false);
        }
        prop_assert!(s.step(&second).is_err());
    }

    #[test]
    fn sasl_random_bytes_never_panic_scram_client_first(token in arb_bytes(), sha512 in any::<bool>()) {
        let m = if sha512 { ScramMechanism::Sha512 } else { ScramMechanism::Sha256 };
        let mut s = server(m);
        match s.step(&token) {
            Ok(Step::Continue(bytes)) => prop_assert!(std::str::from_utf8(&bytes).is_ok()),
            Ok(Step::Done { .. }) => prop_assert!(false, "done after client-first"),
            Err(e) => {
                prop_assert_eq!(e.error_code(), 58);
                let _ = (e.to_string(), e.client_message(false));
            }
        }
    }

    #[test]
    fn sasl_random_bytes_never_panic_scram_client_final(token in arb_client_final()) {
        let mut s = rfc_server();
        s.step(RFC7677_CLIENT_FIRST.as_bytes()).unwrap();
        if let Err(e) = s.step(&token) {
            prop_assert_eq!(e.error_code(), 58);
            let _ = (e.to_string(), e.client_message(false));
        } else {
            prop_assert!(token == RFC7677_CLIENT_FINAL.as_bytes());
        }
        prop_assert!(s.step(&token).is_err());
    }

    #[test]
    fn sasl_random_bytes_never_panic_scram_client(first in arb_bytes(), last in arb_bytes()) {
        let mut c = ScramClient::new(ScramMechanism::Sha256, "user", "pencil")
            .with_nonce_source(Box::new(FixedNonce(RFC7677_CLIENT_NONCE.into())));
        c.client_first().unwrap();
        let _ = c.client_final(&first);
        let mut c = ScramClient::new(ScramMechanism::Sha256, "user", "pencil")
            .with_nonce_source(Box::new(FixedNonce(RFC7677_CLIENT_NONCE.into())));
        c.client_first().unwrap();
        c.client_final(RFC7677_SERVER_FIRST.as_bytes()).unwrap();
        let _ = c.verify_server_final(&last);
        let mut p = PlainClient::new("a", "b");
        p.initial_response().unwrap();
        let _ = p.step(&last);
    }

    #[test]
    fn sasl_random_text_never_panics_jaas(text in "[a-z_=;'\"/*\\\\ \n.A-Z0-9]{0,60}") {
        let _ = JaasConfig::parse(&text).map(|c| c.entries.len());
        let _ = PlainJaasConfig::parse(&text).map_err(|e| e.to_string());
    }
}
