//! Kafka's JAAS option syntax (`sasl.jaas.config`,
//! `listener.name.<listener>.<mechanism>.sasl.jaas.config`), as Kafka's
//! [`JaasConfig`](https://github.com/apache/kafka/blob/trunk/clients/src/main/java/org/apache/kafka/common/security/JaasConfig.java)
//! reads it with a `StreamTokenizer`:
//!
//! ```text
//! <login module class> <control flag> (<name>=<value>)* ;
//! ```
//!
//! Whitespace is any character up to space; values are words or quoted with `"` or `'`, with
//! the tokenizer's escapes (`\n`, `\t`, `\\`, `\"`, octal `\ooo`, ...); comments are `//` to the
//! end of the line and `/* */`. Stricter than Kafka: an unterminated quote or comment, a `/`
//! outside a comment (Kafka silently drops the rest of the line), a quoted module name or option
//! name, and an option given twice are errors. Errors name the place and the option, never a
//! value, since values are passwords.

use std::fmt;

use super::client::SaslClient;
use super::mechanism::Mechanism;
use super::plain::{PlainClient, PlainUsers};
use super::scram::ScramClient;

/// Kafka's PLAIN login module.
pub const PLAIN_LOGIN_MODULE: &str = "org.apache.kafka.common.security.plain.PlainLoginModule";
/// Kafka's SCRAM login module.
pub const SCRAM_LOGIN_MODULE: &str = "org.apache.kafka.common.security.scram.ScramLoginModule";

/// A JAAS login module's control flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ControlFlag {
    /// `required`.
    Required,
    /// `requisite`.
    Requisite,
    /// `sufficient`.
    Sufficient,
    /// `optional`.
    Optional,
}

impl ControlFlag {
    /// Case insensitive, as Kafka reads it.
    fn parse(word: &str) -> Option<Self> {
        [
            ("required", Self::Required),
            ("requisite", Self::Requisite),
            ("sufficient", Self::Sufficient),
            ("optional", Self::Optional),
        ]
        .into_iter()
        .find(|(name, _)| word.eq_ignore_ascii_case(name))
        .map(|(_, flag)| flag)
    }
}

/// One login module with its options. [`Debug`](fmt::Debug) shows option names, not values.
#[derive(Clone, PartialEq, Eq)]
pub struct JaasEntry {
    /// The login module's class name.
    pub login_module: String,
    /// The control flag.
    pub control_flag: ControlFlag,
    options: Vec<(String, String)>,
}

impl JaasEntry {
    /// The option's value.
    pub fn option(&self, name: &str) -> Option<&str> {
        self.options
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The options, in the order given.
    pub fn options(&self) -> impl Iterator<Item = (&str, &str)> {
        self.options.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }
}

impl fmt::Debug for JaasEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.options.iter().map(|(k, _)| k.as_str()).collect();
        f.debug_struct("JaasEntry")
            .field("login_module", &self.login_module)
            .field("control_flag", &self.control_flag)
            .field("options", &names)
            .finish()
    }
}

/// A parsed JAAS configuration: one or more login modules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JaasConfig {
    /// The login modules, in order.
    pub entries: Vec<JaasEntry>,
}

/// What is wrong with a JAAS configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum JaasErrorKind {
    /// Nothing but whitespace and comments.
    NoLoginModule,
    /// A login module's name is not a plain word.
    ExpectedLoginModule,
    /// The text ends after a login module's name.
    NoControlFlag,
    /// The control flag is not `required`, `requisite`, `sufficient` or `optional`.
    InvalidControlFlag,
    /// Neither an option name nor `;` where one of them must be.
    ExpectedOptionName,
    /// An option name (or a stray word) not followed by `=`.
    MissingEquals,
    /// `name=` without a value.
    ValueNotSpecified(String),
    /// An option given twice in one entry.
    DuplicateOption(String),
    /// The text ends before an entry's `;`.
    NotTerminated,
    /// A quoted value not closed on its line.
    UnterminatedQuote,
    /// A `/*` comment not closed.
    UnterminatedComment,
    /// A `/` that does not start a comment.
    StraySlash,
    /// Not exactly one login module where one is needed.
    ModuleCount(usize),
    /// Another login module than the one needed.
    WrongLoginModule {
        /// The module given.
        found: String,
        /// The module needed.
        expected: &'static str,
    },
    /// A `user_` option without a user name.
    EmptyUserName,
    /// `username` without `password` or the reverse.
    IncompleteClientCredentials,
    /// No `username` and `password`, which a client needs.
    MissingClientCredentials,
}

impl fmt::Display for JaasErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoLoginModule => f.write_str("Login module not specified in JAAS config"),
            Self::ExpectedLoginModule => f.write_str("expected a login module class name in JAAS config"),
            Self::NoControlFlag => f.write_str("Login module control flag not specified in JAAS config"),
            Self::InvalidControlFlag => f.write_str(
                "Invalid login module control flag in JAAS config (expected required, requisite, sufficient or optional)",
            ),
            Self::ExpectedOptionName => f.write_str("expected an option name or ';' in JAAS config"),
            Self::MissingEquals => f.write_str("option name not followed by '=' and a value in JAAS config"),
            Self::ValueNotSpecified(key) => write!(f, "Value not specified for key '{key}' in JAAS config"),
            Self::DuplicateOption(key) => write!(f, "option '{key}' given twice in JAAS config"),
            Self::NotTerminated => f.write_str("JAAS config entry not terminated by semi-colon"),
            Self::UnterminatedQuote => f.write_str("quoted value not closed on its line in JAAS config"),
            Self::UnterminatedComment => f.write_str("comment /* not closed in JAAS config"),
            Self::StraySlash => f.write_str("'/' outside a quoted value or a comment (// or /* */) in JAAS config"),
            Self::ModuleCount(n) => write!(f, "JAAS config property contains {n} login modules, should be 1 module"),
            Self::WrongLoginModule { found, expected } => {
                write!(f, "JAAS config has login module {found}, expected {expected}")
            }
            Self::EmptyUserName => f.write_str("option 'user_' names no user in JAAS config"),
            Self::IncompleteClientCredentials => {
                f.write_str("options 'username' and 'password' must be given together in JAAS config")
            }
            Self::MissingClientCredentials => f.write_str("options 'username' and 'password' missing in JAAS config"),
        }
    }
}

/// A JAAS configuration that cannot be used: what, and where (1-based line and column, in
/// characters) when it is a syntax error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct JaasError {
    /// What is wrong.
    pub kind: JaasErrorKind,
    /// `(line, column)` of the offending token.
    pub position: Option<(usize, usize)>,
}

impl fmt::Display for JaasError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.position {
            Some((line, column)) => write!(f, "{} (line {line}, column {column})", self.kind),
            None => write!(f, "{}", self.kind),
        }
    }
}

impl From<JaasErrorKind> for JaasError {
    fn from(kind: JaasErrorKind) -> Self {
        Self {
            kind,
            position: None,
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Token<'a> {
    Word(&'a str),
    Quoted(String),
    Semicolon,
    Equals,
    End,
}

struct Lexer<'a> {
    text: &'a str,
    pos: usize,
}

const fn is_space(c: char) -> bool {
    c <= ' '
}

const fn is_word_char(c: char) -> bool {
    !is_space(c) && !matches!(c, ';' | '=' | '"' | '\'' | '/')
}

impl<'a> Lexer<'a> {
    fn error(&self, kind: JaasErrorKind, at: usize) -> JaasError {
        let before = &self.text[..at];
        let line = before.matches('\n').count() + 1;
        let column = before
            .rsplit('\n')
            .next()
            .unwrap_or_default()
            .chars()
            .count()
            + 1;
        JaasError {
            kind,
            position: Some((line, column)),
        }
    }

    /// The next token and its offset.
    fn next(&mut self) -> Result<(Token<'a>, usize), JaasError> {
        loop {
            let rest = &self.text[self.pos..];
            let Some(c) = rest.chars().next() else {
                return Ok((Token::End, self.pos));
            };
            if is_space(c) {
                self.pos += c.len_utf8();
            } else if rest.starts_with("//") {
                self.pos += rest.find(['\n', '\r']).unwrap_or(rest.len());
            } else if let Some(comment) = rest.strip_prefix("/*") {
                let Some(end) = comment.find("*/") else {
                    return Err(self.error(JaasErrorKind::UnterminatedComment, self.pos));
                };
                self.pos += end + 4;
            } else {
                break;
            }
        }
        let start = self.pos;
        let rest = &self.text[start..];
        let mut chars = rest.char_indices();
        let Some((_, c)) = chars.next() else {
            return Ok((Token::End, start));
        };
        let token = match c {
            ';' => {
                self.pos += 1;
                Token::Semicolon
            }
            '=' => {
                self.pos += 1;
                Token::Equals
            }
            '/' => return Err(self.error(JaasErrorKind::StraySlash, start)),
            '"' | '\'' => {
                let (value, len) = quoted(rest, c)
                    .ok_or_else(|| self.error(JaasErrorKind::UnterminatedQuote, start))?;
                self.pos += len;
                Token::Quoted(value)
            }
            _ => {
                let len = rest.find(|c| !is_word_char(c)).unwrap_or(rest.len());
                self.pos += len;
                Token::Word(&rest[..len])
            }
        };
        Ok((token, start))
    }
}

/// A quoted string at the start of `text` (which starts with `quote`): its value and its length
/// with the quotes, or `None` if it is not closed on its line. Escapes as Java's
/// `StreamTokenizer`'s.
fn quoted(text: &str, quote: char) -> Option<(String, usize)> {
    let mut out = String::new();
    let mut chars = text.char_indices().skip(1).peekable();
    while let Some((at, c)) = chars.next() {
        match c {
            c if c == quote => return Some((out, at + c.len_utf8())),
            '\n' | '\r' => return None,
            '\\' => {
                let (_, e) = chars.next()?;
                let unescaped = match e {
                    'a' => '\u{7}',
                    'b' => '\u{8}',
                    'f' => '\u{c}',
                    'n' => '\n',
                    'r' => '\r',
                    't' => '\t',
                    'v' => '\u{b}',
                    '0'..='7' => {
                        let first = e as u32 - '0' as u32;
                        let mut value = first;
                        let mut digits = 1;
                        let max_digits = if first <= 3 { 3 } else { 2 };
                        while digits < max_digits {
                            match chars.peek() {
                                Some(&(_, d @ '0'..='7')) => {
                                    value = value * 8 + (d as u32 - '0' as u32);
                                    digits += 1;
                                    chars.next();
                                }
                                _ => break,
                            }
                        }
                        char::from_u32(value)?
                    }
                    '\n' | '\r' => return None,
                    other => other,
                };
                out.push(unescaped);
            }
            c => out.push(c),
        }
    }
    None
}

impl JaasConfig {
    /// Parses a JAAS configuration of one or more login modules.
    pub fn parse(text: &str) -> Result<Self, JaasError> {
        let mut lexer = Lexer { text, pos: 0 };
        let mut entries = Vec::new();
        loop {
            let login_module = match lexer.next()? {
                (Token::End, _) => break,
                (Token::Word(word), _) => word.to_owned(),
                (_, at) => return Err(lexer.error(JaasErrorKind::ExpectedLoginModule, at)),
            };
            let control_flag = match lexer.next()? {
                (Token::End, at) => return Err(lexer.error(JaasErrorKind::NoControlFlag, at)),
                (Token::Word(word), at) => ControlFlag::parse(word)
                    .ok_or_else(|| lexer.error(JaasErrorKind::InvalidControlFlag, at))?,
                (_, at) => return Err(lexer.error(JaasErrorKind::InvalidControlFlag, at)),
            };
            let mut options: Vec<(String, String)> = Vec::new();
            loop {
                let (key, key_at) = match lexer.next()? {
                    (Token::Semicolon, _) => break,
                    (Token::End, at) => return Err(lexer.error(JaasErrorKind::NotTerminated, at)),
                    (Token::Word(key), at) => (key, at),
                    (_, at) => return Err(lexer.error(JaasErrorKind::ExpectedOptionName, at)),
                };
                // Only a word followed by `=` is known to be a name: a stray word may be part of
                // a password, and is not echoed.
                if lexer.next()?.0 != Token::Equals {
                    return Err(lexer.error(JaasErrorKind::MissingEquals, key_at));
                }
                let value = match lexer.next()? {
                    (Token::Word(value), _) => value.to_owned(),
                    (Token::Quoted(value), _) => value,
                    (_, at) => {
                        return Err(
                            lexer.error(JaasErrorKind::ValueNotSpecified(key.to_owned()), at)
                        );
                    }
                };
                if options.iter().any(|(k, _)| k == key) {
                    return Err(lexer.error(JaasErrorKind::DuplicateOption(key.to_owned()), key_at));
                }
                options.push((key.to_owned(), value));
            }
            entries.push(JaasEntry {
                login_module,
                control_flag,
                options,
            });
        }
        if entries.is_empty() {
            return Err(JaasErrorKind::NoLoginModule.into());
        }
        Ok(Self { entries })
    }

    /// The one entry of a `sasl.jaas.config` property, which must be `module`.
    fn single(text: &str, module: &'static str) -> Result<JaasEntry, JaasError> {
        let mut config = Self::parse(text)?;
        if config.entries.len() != 1 {
            return Err(JaasErrorKind::ModuleCount(config.entries.len()).into());
        }
        let entry = config.entries.remove(0);
        if entry.login_module != module {
            return Err(JaasErrorKind::WrongLoginModule {
                found: entry.login_module,
                expected: module,
            }
            .into());
        }
        Ok(entry)
    }
}

/// A user name and password for the daemon's own connections (a login module's `username` and
/// `password` options). [`Debug`](fmt::Debug) hides the password.
#[derive(Clone, PartialEq, Eq)]
pub struct ClientCredentials {
    /// The user name.
    pub username: String,
    password: String,
}

impl ClientCredentials {
    /// Credentials from their parts.
    pub fn new(username: impl Into<String>, password: impl Into<String>) -> Self {
        Self {
            username: username.into(),
            password: password.into(),
        }
    }

    /// The password.
    pub fn password(&self) -> &str {
        &self.password
    }

    /// Reads a client's `sasl.jaas.config` for `mechanism`: Kafka's `PlainLoginModule` for PLAIN,
    /// `ScramLoginModule` for SCRAM, with `username` and `password`.
    pub fn from_jaas(text: &str, mechanism: Mechanism) -> Result<Self, JaasError> {
        let module = if mechanism.scram().is_some() {
            SCRAM_LOGIN_MODULE
        } else {
            PLAIN_LOGIN_MODULE
        };
        let entry = JaasConfig::single(text, module)?;
        Self::from_entry(&entry)?.ok_or_else(|| JaasErrorKind::MissingClientCredentials.into())
    }

    fn from_entry(entry: &JaasEntry) -> Result<Option<Self>, JaasError> {
        match (entry.option("username"), entry.option("password")) {
            (Some(username), Some(password)) => Ok(Some(Self::new(username, password))),
            (None, None) => Ok(None),
            _ => Err(JaasErrorKind::IncompleteClientCredentials.into()),
        }
    }

    /// A client for `mechanism` with these credentials.
    pub fn client(&self, mechanism: Mechanism) -> Box<dyn SaslClient> {
        match mechanism.scram() {
            Some(scram) => Box::new(ScramClient::new(scram, &self.username, &self.password)),
            None => Box::new(PlainClient::new(&self.username, &self.password)),
        }
    }
}

impl fmt::Debug for ClientCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientCredentials")
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

/// A PLAIN listener's `sasl.jaas.config`, as Kafka's `PlainLoginModule` and
/// `PlainServerCallbackHandler` read it: `user_<name>="<password>"` options are the users, and
/// `username`/`password` the broker's own credentials for its outgoing connections.
#[derive(Debug, Clone)]
pub struct PlainJaasConfig {
    /// The users clients log in as.
    pub users: PlainUsers,
    /// The daemon's own credentials, if given.
    pub client: Option<ClientCredentials>,
}

impl PlainJaasConfig {
    /// Parses one `PlainLoginModule` entry. Options other than `user_*`, `username` and
    /// `password` are ignored, as Kafka ignores them.
    pub fn parse(text: &str) -> Result<Self, JaasError> {
        let entry = JaasConfig::single(text, PLAIN_LOGIN_MODULE)?;
        let mut users = PlainUsers::new();
        for (key, value) in entry.options() {
            if let Some(user) = key.strip_prefix("user_") {
                if user.is_empty() {
                    return Err(JaasErrorKind::EmptyUserName.into());
                }
                users.insert(user, value);
            }
        }
        let client = ClientCredentials::from_entry(&entry)?;
        Ok(Self { users, client })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KAFKA_DOC: &str = r#"org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";"#;

    #[test]
    fn sasl_jaas_kafka_example() {
        let c = PlainJaasConfig::parse(KAFKA_DOC).unwrap();
        assert_eq!(c.users.len(), 2);
        assert!(c.users.verify("admin", "admin-secret"));
        assert!(c.users.verify("alice", "alice-secret"));
        assert!(!c.users.verify("alice", "admin-secret"));
        let client = c.client.unwrap();
        assert_eq!(
            (client.username.as_str(), client.password()),
            ("admin", "admin-secret")
        );
        assert!(!format!("{client:?}").contains("admin-secret"));
        let entry = &JaasConfig::parse(KAFKA_DOC).unwrap().entries[0];
        assert_eq!(entry.control_flag, ControlFlag::Required);
        assert!(!format!("{entry:?}").contains("secret"));
    }

    #[test]
    fn sasl_jaas_quotes_escapes_comments() {
        let text = "  // the listener's users\n org.apache.kafka.common.security.plain.PlainLoginModule REQUIRED\n\
            /* a comment; with = and \" */ user_bob='single \"quoted\"' user_carol=\"a \\\"quoted\\\" \\\\ pass\\tword\\101\"\n\
            user_dave = bare-word.with:chars user_eve=\"semi;colon=equals/slash\" user_frank=\"\" user_gina=\"ünï\";";
        let c = PlainJaasConfig::parse(text).unwrap();
        let users: Vec<&str> = {
            let mut v: Vec<&str> = c.users.names().collect();
            v.sort_unstable();
            v
        };
        assert_eq!(users, ["bob", "carol", "dave", "eve", "frank", "gina"]);
        assert!(c.users.verify("bob", "single \"quoted\""));
        assert!(c.users.verify("carol", "a \"quoted\" \\ pass\twordA"));
        assert!(c.users.verify("dave", "bare-word.with:chars"));
        assert!(c.users.verify("eve", "semi;colon=equals/slash"));
        assert!(c.users.verify("gina", "ünï"));
        assert!(c.client.is_none());
    }

    #[test]
    fn sasl_jaas_several_entries_and_flags() {
        let c = JaasConfig::parse("a.B optional; c.D Sufficient k=v; e.F requisite;").unwrap();
        let flags: Vec<ControlFlag> = c.entries.iter().map(|e| e.control_flag).collect();
        assert_eq!(
            flags,
            [
                ControlFlag::Optional,
                ControlFlag::Sufficient,
                ControlFlag::Requisite
            ]
        );
        assert_eq!(c.entries[1].option("k"), Some("v"));
        let err = PlainJaasConfig::parse("a.B optional; c.D required;").unwrap_err();
        assert_eq!(
            err.to_string(),
            "JAAS config property contains 2 login modules, should be 1 module"
        );
        let err = PlainJaasConfig::parse(
            "org.apache.kafka.common.security.scram.ScramLoginModule required;",
        )
        .unwrap_err();
        assert!(matches!(err.kind, JaasErrorKind::WrongLoginModule { .. }));
        let scram = ClientCredentials::from_jaas(
            r#"org.apache.kafka.common.security.scram.ScramLoginModule required username="svc" password="pw";"#,
            Mechanism::ScramSha512,
        )
        .unwrap();
        assert_eq!(scram, ClientCredentials::new("svc", "pw"));
        assert_eq!(
            scram.client(Mechanism::ScramSha512).mechanism(),
            Mechanism::ScramSha512
        );
        assert_eq!(
            ClientCredentials::from_jaas(
                &KAFKA_DOC.replace("username=\"admin\" password=\"admin-secret\"", ""),
                Mechanism::Plain
            )
            .unwrap_err()
            .kind,
            JaasErrorKind::MissingClientCredentials
        );
    }

    #[test]
    fn sasl_jaas_malformed() {
        let m = PLAIN_LOGIN_MODULE;
        type Case = (String, JaasErrorKind, Option<(usize, usize)>);
        let cases: Vec<Case> = vec![
            ("".into(), JaasErrorKind::NoLoginModule, None),
            (
                "  /* only */ // comments".into(),
                JaasErrorKind::NoLoginModule,
                None,
            ),
            (m.into(), JaasErrorKind::NoControlFlag, Some((1, 56))),
            (
                format!("{m} mandatory;"),
                JaasErrorKind::InvalidControlFlag,
                Some((1, 57)),
            ),
            (
                format!("{m} \"required\";"),
                JaasErrorKind::InvalidControlFlag,
                Some((1, 57)),
            ),
            (
                format!("\"{m}\" required;"),
                JaasErrorKind::ExpectedLoginModule,
                Some((1, 1)),
            ),
            (
                format!("{m} required user_a=\"x\""),
                JaasErrorKind::NotTerminated,
                Some((1, 76)),
            ),
            (
                format!("{m} required user_a=;"),
                JaasErrorKind::ValueNotSpecified("user_a".into()),
                Some((1, 73)),
            ),
            (
                format!("{m} required user_a="),
                JaasErrorKind::ValueNotSpecified("user_a".into()),
                Some((1, 73)),
            ),
            (
                format!("{m} required\n  user_a secret;"),
                JaasErrorKind::MissingEquals,
                Some((2, 3)),
            ),
            (
                format!("{m} required password=two words;"),
                JaasErrorKind::MissingEquals,
                Some((1, 79)),
            ),
            (
                format!("{m} required \"user_a\"=x;"),
                JaasErrorKind::ExpectedOptionName,
                Some((1, 66)),
            ),
            (
                format!("{m} required =x;"),
                JaasErrorKind::ExpectedOptionName,
                Some((1, 66)),
            ),
            (
                format!("{m} required user_a=\"x;"),
                JaasErrorKind::UnterminatedQuote,
                Some((1, 73)),
            ),
            (
                format!("{m} required user_a=\"x\ny\";"),
                JaasErrorKind::UnterminatedQuote,
                Some((1, 73)),
            ),
            (
                format!("{m} required user_a=\"x\\"),
                JaasErrorKind::UnterminatedQuote,
                Some((1, 73)),
            ),
            (
                format!("{m} required /* user_a=x;"),
                JaasErrorKind::UnterminatedComment,
                Some((1, 66)),
            ),
            (
                format!("{m} required user_a=a/b;"),
                JaasErrorKind::StraySlash,
                Some((1, 74)),
            ),
            (
                format!("{m} required user_a=x user_a=y;"),
                JaasErrorKind::DuplicateOption("user_a".into()),
                Some((1, 75)),
            ),
            (
                format!("{m} required user_=x;"),
                JaasErrorKind::EmptyUserName,
                None,
            ),
            (
                format!("{m} required username=x;"),
                JaasErrorKind::IncompleteClientCredentials,
                None,
            ),
            (
                format!("{m} required password=x;"),
                JaasErrorKind::IncompleteClientCredentials,
                None,
            ),
        ];
        for (text, kind, position) in cases {
            let err = PlainJaasConfig::parse(&text).unwrap_err();
            assert_eq!(
                (&err.kind, err.position),
                (&kind, position),
                "{text:?}: {err}"
            );
            let message = err.to_string();
            for secret in ["secret", "words", "\"x"] {
                assert!(!message.contains(secret), "{message}");
            }
        }
    }
}
