//! Principals as Kafka writes them in ACLs and in `super.users`: `Type:name`.
//!
//! Kafka: [`KafkaPrincipal`](https://github.com/apache/kafka/blob/4.1/clients/src/main/java/org/apache/kafka/common/security/auth/KafkaPrincipal.java),
//! parsed by `SecurityUtils.parseKafkaPrincipal`.

use std::fmt;
use std::str::FromStr;

/// An authenticated identity, as Kafka's `KafkaPrincipal`: a type and a name (`User:alice`).
///
/// Two principals are equal when both type and name are (case-sensitive). `Display` prints
/// `Type:name`; `FromStr` splits at the first `:`, so the name may itself contain colons
/// (`User:CN=a,O=b:c`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Principal {
    /// The principal type (`User`).
    pub kind: String,
    /// The name.
    pub name: String,
}

impl Principal {
    /// The principal type of users (`User`), the only type Kafka's own authenticators produce.
    pub const USER_TYPE: &'static str = "User";
    /// The name of the wildcard principal: an ACL for `User:*` applies to every principal.
    pub const WILDCARD_NAME: &'static str = "*";
    /// The wildcard principal as ACLs spell it.
    pub const WILDCARD: &'static str = "User:*";

    /// A principal of any type.
    pub fn new(kind: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            kind: kind.into(),
            name: name.into(),
        }
    }

    /// A `User` principal.
    pub fn user(name: impl Into<String>) -> Self {
        Self::new(Self::USER_TYPE, name)
    }

    /// `User:*`, which ACLs use to mean every principal.
    pub fn wildcard() -> Self {
        Self::user(Self::WILDCARD_NAME)
    }

    /// True for `User:*` (only that: `Group:*` is no wildcard, as in Kafka).
    pub fn is_wildcard(&self) -> bool {
        self.kind == Self::USER_TYPE && self.name == Self::WILDCARD_NAME
    }
}

impl fmt::Display for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.kind, self.name)
    }
}

/// A string that is not `Type:name` (no colon).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{input}` is not a principal: expected `Type:name`, e.g. `User:alice`")]
pub struct PrincipalParseError {
    /// The text that was parsed.
    pub input: String,
}

impl FromStr for Principal {
    type Err = PrincipalParseError;

    /// Splits at the first colon, as Kafka does: the type and the name may be empty
    /// (`:alice`, `User:`), but the colon must be there.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.split_once(':') {
            Some((kind, name)) => Ok(Self::new(kind, name)),
            None => Err(PrincipalParseError {
                input: s.to_owned(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints_type_colon_name() {
        let p: Principal = "User:alice".parse().unwrap();
        assert_eq!(p, Principal::user("alice"));
        assert_eq!(p.to_string(), "User:alice");
        let p: Principal = "User:CN=alice,O=acme:x".parse().unwrap();
        assert_eq!(p.kind, "User");
        assert_eq!(p.name, "CN=alice,O=acme:x");
        assert_eq!(p.to_string(), "User:CN=alice,O=acme:x");
        assert_eq!("Group:ops".parse(), Ok(Principal::new("Group", "ops")));
        // Kafka's split keeps empty parts.
        assert_eq!(":alice".parse(), Ok(Principal::new("", "alice")));
        assert_eq!("User:".parse(), Ok(Principal::new("User", "")));
    }

    #[test]
    fn rejects_strings_without_a_colon() {
        for s in ["", "alice", "User"] {
            assert_eq!(
                s.parse::<Principal>(),
                Err(PrincipalParseError { input: s.into() })
            );
        }
        let msg = "bob".parse::<Principal>().unwrap_err().to_string();
        assert!(msg.contains("`bob`"), "{msg}");
    }

    #[test]
    fn wildcard_is_user_star_only() {
        assert!(Principal::wildcard().is_wildcard());
        assert_eq!(Principal::wildcard().to_string(), Principal::WILDCARD);
        assert_eq!(Principal::WILDCARD.parse(), Ok(Principal::wildcard()));
        assert!(!Principal::new("Group", "*").is_wildcard());
        assert!(!Principal::new("user", "*").is_wildcard());
        assert!(!Principal::user("alice").is_wildcard());
    }
}
