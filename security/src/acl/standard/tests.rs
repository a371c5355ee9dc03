//! Tests of the standard authorizer: each rule, cases equivalent to those of Kafka's
//! `StandardAuthorizerTest`, `AuthorizerTest` and `BaseAuthorizerTest`, and a property test
//! against a naive reference that reads every ACL.

use super::*;
use crate::acl::{
    AccessControlEntry, AccessControlEntryFilter, ResourcePattern, ResourcePatternFilter,
    default_authorize_by_resource_type,
};
use AclOperation::{
    All, Alter, AlterConfigs, ClusterAction, Create, CreateTokens, Delete, Describe,
    DescribeConfigs, DescribeTokens, IdempotentWrite, Read, TwoPhaseCommit, Write,
};
use AclPermissionType::{Allow, Deny};
use AuthorizationResult::{Allowed, Denied};
use PatternType::{Literal, Prefixed};
use ResourceType::{Cluster, Group, Topic, TransactionalId};

const H1: &str = "192.168.1.1";
const H2: &str = "192.168.1.2";

fn acl(
    rt: ResourceType,
    name: &str,
    pt: PatternType,
    principal: &str,
    host: &str,
    op: AclOperation,
    perm: AclPermissionType,
) -> AclBinding {
    AclBinding::new(
        ResourcePattern::new(rt, name, pt),
        AccessControlEntry::new(principal, host, op, perm),
    )
}

fn authorizer_with(config: StandardAuthorizerConfig, acls: &[AclBinding]) -> StandardAuthorizer {
    let mut a = StandardAuthorizer::new(config);
    for r in a.create(acls) {
        r.unwrap();
    }
    a
}

fn authorizer(acls: &[AclBinding]) -> StandardAuthorizer {
    let config = StandardAuthorizerConfig {
        super_users: StandardAuthorizerConfig::parse_super_users("User:superman").unwrap(),
        ..Default::default()
    };
    authorizer_with(config, acls)
}

/// An authorizer with `allow.everyone.if.no.acl.found=true` (and no super users) over `acls`.
fn open_authorizer(acls: &[AclBinding]) -> StandardAuthorizer {
    let config = StandardAuthorizerConfig {
        allow_everyone_if_no_acl_found: true,
        ..Default::default()
    };
    authorizer_with(config, acls)
}

fn ctx(user: &str, host: &str) -> RequestContext {
    RequestContext::new(Principal::user(user), host)
}

fn check(
    a: &StandardAuthorizer,
    user: &str,
    host: &str,
    op: AclOperation,
    rt: ResourceType,
    name: &str,
) -> AuthorizationResult {
    let results = a.authorize(&ctx(user, host), &[Action::new(op, rt, name)]);
    assert_eq!(results.len(), 1);
    results[0]
}

/// Asserts `a`'s answers to `user` from `host` for `actions`, in order: `want[i]` for `actions[i]`.
fn assert_answers(
    a: &StandardAuthorizer,
    user: &str,
    host: &str,
    actions: &[Action],
    want: &[AuthorizationResult],
) {
    assert_eq!(
        a.authorize(&ctx(user, host), actions),
        want,
        "{user} from {host}"
    );
}

fn by_type(
    a: &StandardAuthorizer,
    user: &str,
    host: &str,
    op: AclOperation,
    rt: ResourceType,
) -> AuthorizationResult {
    let c = ctx(user, host);
    let fast = a.authorize_by_resource_type(&c, op, rt).unwrap();
    let default = default_authorize_by_resource_type(a, &c, op, rt).unwrap();
    assert_eq!(
        fast, default,
        "indexed and default authorize_by_resource_type disagree for {user}@{host} {op} {rt}"
    );
    fast
}

fn delete(a: &mut StandardAuthorizer, b: &AclBinding) {
    let removed = a.delete(&[b.to_filter()]);
    assert_eq!(removed, vec![Ok(vec![b.clone()])]);
}

#[test]
fn is_send_and_sync_and_an_authorizer_object() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<StandardAuthorizer>();
    let boxed: Box<dyn Authorizer> = Box::new(StandardAuthorizer::default());
    assert_eq!(boxed.describe(&AclBindingFilter::ANY), vec![]);
}

// ---- configuration -------------------------------------------------------------------------

#[test]
fn super_users_config_parses_like_kafka() {
    let parse = StandardAuthorizerConfig::parse_super_users;
    assert_eq!(parse(""), Ok(HashSet::new()));
    assert_eq!(parse(" "), Ok(HashSet::new()));
    let both: HashSet<Principal> = [Principal::user("bob"), Principal::user("alice")].into();
    assert_eq!(parse("User:bob;User:alice "), Ok(both.clone()));
    assert_eq!(parse(";  User:bob  ;  User:alice "), Ok(both));
    assert_eq!(parse("bob;:alice").unwrap_err().input, "bob");
    let f = StandardAuthorizerConfig::parse_allow_everyone_if_no_acl_found;
    assert!(f("true") && f(" TRUE ") && f("True"));
    assert!(!f("false") && !f("yes") && !f("") && !f("1"));
}

// ---- super users ---------------------------------------------------------------------------

#[test]
fn super_users_pass_whatever_the_acls() {
    let deny_all = |rt, name: &str| acl(rt, name, Literal, "User:*", "*", All, Deny);
    let a = authorizer(&[
        deny_all(Topic, "*"),
        deny_all(Cluster, "kafka-cluster"),
        deny_all(Group, "*"),
        deny_all(TransactionalId, "*"),
    ]);
    for op in AclOperation::VALUES {
        assert_eq!(
            check(&a, "superman", "10.0.0.1", *op, Topic, "t"),
            Allowed,
            "{op}"
        );
    }
    assert_eq!(
        check(
            &a,
            "superman",
            "10.0.0.1",
            ClusterAction,
            Cluster,
            "kafka-cluster"
        ),
        Allowed
    );
    assert_eq!(check(&a, "alice", "10.0.0.1", Read, Topic, "t"), Denied);
    // A principal of another type with the same name is not the super user.
    let c = RequestContext::new(Principal::new("Group", "superman"), "10.0.0.1");
    assert_eq!(a.authorize(&c, &[Action::new(Read, Topic, "t")]), [Denied]);
    for rt in [Topic, Cluster, Group, TransactionalId] {
        assert_eq!(
            by_type(&a, "superman", "10.0.0.1", Read, rt),
            Allowed,
            "{rt}"
        );
        assert_eq!(by_type(&a, "alice", "10.0.0.1", Read, rt), Denied, "{rt}");
    }
}

// ---- allow.everyone.if.no.acl.found ---------------------------------------------------------

#[test]
fn no_acl_found_default_applies_only_to_resources_without_any_acl() {
    let acls = [acl(
        Topic,
        "topic1",
        Literal,
        "User:Alice",
        "*",
        Read,
        Allow,
    )];
    let closed = authorizer(&acls);
    let open = open_authorizer(&acls);
    // topic1 has an ACL (for someone else): denied either way.
    assert_eq!(check(&closed, "Bob", H1, Read, Topic, "topic1"), Denied);
    assert_eq!(check(&open, "Bob", H1, Read, Topic, "topic1"), Denied);
    // Also for an operation no ACL mentions.
    assert_eq!(check(&open, "Bob", H1, Write, Topic, "topic1"), Denied);
    // topic2 has none: the default.
    assert_eq!(check(&closed, "Bob", H1, Read, Topic, "topic2"), Denied);
    assert_eq!(check(&open, "Bob", H1, Read, Topic, "topic2"), Allowed);
    // Nor does any group.
    assert_eq!(check(&open, "Bob", H1, Read, Group, "g"), Allowed);
    // Without any ACL at all.
    let empty_open = open_authorizer(&[]);
    assert_eq!(check(&empty_open, "alice", H1, Read, Topic, "t"), Allowed);
    assert_eq!(
        check(&authorizer(&[]), "alice", H1, Read, Topic, "t"),
        Denied
    );
    // A wildcard or prefixed ACL is an ACL on the resource too.
    let open_prefixed =
        open_authorizer(&[acl(Topic, "top", Prefixed, "User:Alice", "*", Read, Allow)]);
    assert_eq!(
        check(&open_prefixed, "Bob", H1, Read, Topic, "topic2"),
        Denied
    );
    assert_eq!(
        check(&open_prefixed, "Bob", H1, Read, Topic, "other"),
        Allowed
    );
    // Removing the last ACL of a resource brings the default back.
    let mut open = open;
    delete(&mut open, &acls[0]);
    assert_eq!(check(&open, "Bob", H1, Read, Topic, "topic1"), Allowed);
}

// ---- DENY wins ----------------------------------------------------------------------------

#[test]
fn deny_beats_allow_across_literal_prefixed_and_wildcard() {
    let allows = [
        acl(Topic, "foobar", Literal, "User:alice", "*", Read, Allow),
        acl(Topic, "foo", Prefixed, "User:alice", "*", Read, Allow),
        acl(Topic, "*", Literal, "User:alice", "*", Read, Allow),
        acl(Topic, "*", Literal, "User:*", "*", All, Allow),
    ];
    let denies = [
        acl(Topic, "foobar", Literal, "User:alice", "*", Read, Deny),
        acl(Topic, "foo", Prefixed, "User:alice", "*", Read, Deny),
        acl(Topic, "f", Prefixed, "User:*", "*", Read, Deny),
        acl(Topic, "*", Literal, "User:alice", "*", Read, Deny),
        acl(Topic, "*", Literal, "User:*", H1, All, Deny),
        acl(Topic, "foobar", Prefixed, "User:alice", "*", All, Deny),
    ];
    assert_eq!(
        check(&authorizer(&allows), "alice", H1, Read, Topic, "foobar"),
        Allowed
    );
    for deny in &denies {
        let mut acls = allows.to_vec();
        acls.push(deny.clone());
        assert_eq!(
            check(&authorizer(&acls), "alice", H1, Read, Topic, "foobar"),
            Denied,
            "{deny}"
        );
    }
}

#[test]
fn kafka_deny_precedence_with_operation_all() {
    let a = authorizer(&[
        acl(Topic, "foo", Literal, "User:alice", "*", All, Deny),
        acl(Topic, "foo", Prefixed, "User:alice", "*", Read, Allow),
        acl(Topic, "foo", Literal, "User:*", "*", All, Deny),
        acl(Topic, "foo", Prefixed, "User:*", "*", Describe, Allow),
    ]);
    let alice = [
        Action::new(Write, Topic, "foo"),
        Action::new(Read, Topic, "foo"),
        Action::new(Describe, Topic, "foo"),
        Action::new(Read, Topic, "foobar"),
    ];
    assert_answers(&a, "alice", H1, &alice, &[Denied, Denied, Denied, Allowed]);
    let bob = [
        Action::new(Describe, Topic, "foo"),
        Action::new(Read, Topic, "foo"),
        Action::new(Write, Topic, "foo"),
        Action::new(Describe, Topic, "foobaz"),
        Action::new(Read, Topic, "foobaz"),
    ];
    let want = [Denied, Denied, Denied, Allowed, Denied];
    assert_answers(&a, "bob", H1, &bob, &want);
}

// ---- operations ---------------------------------------------------------------------------

fn valid_ops() -> impl Iterator<Item = AclOperation> {
    AclOperation::VALUES
        .iter()
        .copied()
        .filter(|op| !matches!(op, AclOperation::Any | AclOperation::Unknown))
}

/// Every operation an ALL implies (ALLOW) or denies (DENY): all but ANY, UNKNOWN and ALL.
const ALL_COVERS: &[AclOperation] = &[
    Read,
    Write,
    Create,
    Delete,
    Alter,
    Describe,
    ClusterAction,
    DescribeConfigs,
    AlterConfigs,
    IdempotentWrite,
    CreateTokens,
    DescribeTokens,
    TwoPhaseCommit,
];

/// `perm` of `op` on the cluster for `User:alice` from any host.
fn alice_on_cluster(op: AclOperation, perm: AclPermissionType) -> AclBinding {
    acl(
        Cluster,
        "kafka-cluster",
        Literal,
        "User:alice",
        "*",
        op,
        perm,
    )
}

/// Asserts, for every valid operation, alice's answer on the cluster under `acls`: `hit`
/// for the operations in `covered`, the other answer for the rest.
fn assert_cluster_ops(acls: &[AclBinding], covered: &[AclOperation], hit: AuthorizationResult) {
    let a = authorizer(acls);
    let miss = if hit == Allowed { Denied } else { Allowed };
    for op in valid_ops() {
        let want = if covered.contains(&op) { hit } else { miss };
        assert_eq!(
            check(&a, "alice", H1, op, Cluster, "kafka-cluster"),
            want,
            "{acls:?} -> {op}"
        );
    }
}

#[test]
fn allow_implications_as_kafka() {
    let implied: [(AclOperation, &[AclOperation]); 6] = [
        (All, ALL_COVERS),
        (Read, &[Describe]),
        (Write, &[Describe]),
        (Delete, &[Describe]),
        (Alter, &[Describe]),
        (AlterConfigs, &[DescribeConfigs]),
    ];
    for (parent, allowed) in implied {
        let covered: Vec<AclOperation> = allowed.iter().copied().chain([parent]).collect();
        assert_cluster_ops(&[alice_on_cluster(parent, Allow)], &covered, Allowed);
    }
    // Nothing else implies anything.
    for parent in
        valid_ops().filter(|op| !matches!(op, All | Read | Write | Delete | Alter | AlterConfigs))
    {
        let a = authorizer(&[acl(Topic, "t", Literal, "User:alice", "*", parent, Allow)]);
        for op in valid_ops() {
            let want = if op == parent { Allowed } else { Denied };
            assert_eq!(
                check(&a, "alice", H1, op, Topic, "t"),
                want,
                "ALLOW {parent} -> {op}"
            );
        }
    }
}

#[test]
fn deny_does_not_imply() {
    let denied: [(AclOperation, &[AclOperation]); 5] = [
        (All, ALL_COVERS),
        (Describe, &[]),
        (DescribeConfigs, &[]),
        (Read, &[]),
        (AlterConfigs, &[]),
    ];
    for (parent, also) in denied {
        let covered: Vec<AclOperation> = also.iter().copied().chain([parent]).collect();
        let acls = [alice_on_cluster(parent, Deny), alice_on_cluster(All, Allow)];
        assert_cluster_ops(&acls, &covered, Denied);
    }
}

#[test]
fn kafka_find_result_implication() {
    let foo = |op, perm| acl(Topic, "foo_", Prefixed, "User:bob", "*", op, perm);
    // bob's answer for `op` on topic `foo_bar` under `acls`.
    let bob_on_foo_bar =
        |acls: &[AclBinding], op| check(&authorizer(acls), "bob", H1, op, Topic, "foo_bar");
    for op in [Describe, Read, Write, Delete, Alter] {
        assert_eq!(bob_on_foo_bar(&[foo(op, Allow)], Describe), Allowed, "{op}");
    }
    assert_eq!(bob_on_foo_bar(&[foo(Create, Allow)], Describe), Denied);
    for op in [Read, Write, Delete, Alter] {
        // A DENY of READ does not deny DESCRIBE: with an ALLOW DESCRIBE beside it, allowed.
        let acls = [foo(op, Deny), foo(Describe, Allow)];
        assert_eq!(bob_on_foo_bar(&acls, Describe), Allowed, "{op}");
    }
    let acls = [foo(Describe, Deny), foo(All, Allow)];
    assert_eq!(bob_on_foo_bar(&acls, Describe), Denied);
    for op in [DescribeConfigs, AlterConfigs] {
        assert_eq!(bob_on_foo_bar(&[foo(op, Allow)], DescribeConfigs), Allowed);
    }
    let acls = [foo(AlterConfigs, Deny), foo(DescribeConfigs, Allow)];
    assert_eq!(bob_on_foo_bar(&acls, DescribeConfigs), Allowed);
    assert_eq!(bob_on_foo_bar(&acls, AlterConfigs), Denied);
}

#[test]
fn kafka_topic_acl_with_operation_all() {
    let a = authorizer(&[
        acl(Topic, "foo", Literal, "User:*", "*", All, Allow),
        acl(Topic, "bar", Prefixed, "User:alice", "*", All, Allow),
        acl(Topic, "baz", Literal, "User:bob", "*", All, Allow),
    ]);
    let run = |user, actions: [(AclOperation, &str); 3]| {
        let actions: Vec<Action> = actions
            .iter()
            .map(|(op, name)| Action::new(*op, Topic, *name))
            .collect();
        a.authorize(&ctx(user, H1), &actions)
    };
    assert_eq!(
        run(
            "alice",
            [(Write, "foo"), (DescribeConfigs, "bar"), (Describe, "baz")]
        ),
        [Allowed, Allowed, Denied]
    );
    assert_eq!(
        run("bob", [(Write, "foo"), (Read, "bar"), (Describe, "baz")]),
        [Allowed, Denied, Allowed]
    );
    assert_eq!(
        run("malory", [(Describe, "foo"), (Write, "bar"), (Read, "baz")]),
        [Allowed, Denied, Denied]
    );
}

// ---- principals and hosts -----------------------------------------------------------------

#[test]
fn wildcard_principal_and_host_vs_specific() {
    let a = authorizer(&[
        acl(Topic, "t", Literal, "User:*", "*", Read, Allow),
        acl(Topic, "u", Literal, "User:alice", H1, Read, Allow),
        acl(Topic, "g", Literal, "Group:*", "*", Read, Allow),
    ]);
    assert_eq!(check(&a, "anyone", H2, Read, Topic, "t"), Allowed);
    assert_eq!(check(&a, "alice", H1, Read, Topic, "u"), Allowed);
    assert_eq!(check(&a, "alice", H2, Read, Topic, "u"), Denied);
    assert_eq!(check(&a, "bob", H1, Read, Topic, "u"), Denied);
    // Only User:* is a wildcard.
    assert_eq!(check(&a, "alice", H1, Read, Topic, "g"), Denied);
    let group = RequestContext::new(Principal::new("Group", "*"), H1);
    assert_eq!(
        a.authorize(&group, &[Action::new(Read, Topic, "g")]),
        [Allowed]
    );
    // A principal of another type named like an ACL's user does not match it.
    let other_type = RequestContext::new(Principal::new("Service", "alice"), H1);
    assert_eq!(
        a.authorize(&other_type, &[Action::new(Read, Topic, "u")]),
        [Denied]
    );
    // Names and hosts compare exactly.
    assert_eq!(check(&a, "Alice", H1, Read, Topic, "u"), Denied);
    assert_eq!(check(&a, "alice", "192.168.1.10", Read, Topic, "u"), Denied);
}

#[test]
fn kafka_topic_acl() {
    let (u1, u2, u3) = ("User:alice", "User:rob", "User:batman");
    let a = authorizer(&[
        acl(Topic, "t", Literal, u1, H1, Read, Allow),
        acl(Topic, "t", Literal, u1, H2, Read, Allow),
        acl(Topic, "t", Literal, u1, H1, Read, Deny),
        acl(Topic, "t", Literal, u1, H1, Write, Allow),
        acl(Topic, "t", Literal, u1, "*", Describe, Allow),
        acl(Topic, "t", Literal, u2, "*", Read, Allow),
        acl(Topic, "t", Literal, u3, "*", Write, Allow),
    ]);
    assert_eq!(check(&a, "alice", H2, Read, Topic, "t"), Allowed);
    assert_eq!(check(&a, "alice", H1, Read, Topic, "t"), Denied);
    assert_eq!(check(&a, "alice", H1, Write, Topic, "t"), Allowed);
    assert_eq!(check(&a, "alice", H2, Write, Topic, "t"), Denied);
    assert_eq!(check(&a, "alice", H1, Describe, Topic, "t"), Allowed);
    assert_eq!(check(&a, "alice", H2, Describe, Topic, "t"), Allowed);
    assert_eq!(check(&a, "alice", H1, Alter, Topic, "t"), Denied);
    assert_eq!(check(&a, "alice", H2, Alter, Topic, "t"), Denied);
    assert_eq!(check(&a, "rob", H1, Describe, Topic, "t"), Allowed);
    assert_eq!(check(&a, "batman", H1, Describe, Topic, "t"), Allowed);
    assert_eq!(check(&a, "rob", H1, Read, Topic, "t"), Allowed);
    assert_eq!(check(&a, "batman", H1, Write, Topic, "t"), Allowed);
}

#[test]
fn kafka_host_address_acl_validation() {
    let local = "127.0.0.1";
    let a = authorizer(&[
        acl(Topic, "foo", Literal, "User:alice", H1, Read, Deny),
        acl(Topic, "foo", Literal, "User:alice", "*", Read, Allow),
        acl(Topic, "bar", Literal, "User:bob", H2, Read, Allow),
        acl(Topic, "bar", Literal, "User:*", local, Describe, Allow),
    ]);
    let actions = [
        Action::new(Read, Topic, "foo"),
        Action::new(Read, Topic, "bar"),
        Action::new(Describe, Topic, "bar"),
    ];
    let cases = [
        ("alice", local, [Allowed, Denied, Allowed]),
        ("alice", H1, [Denied, Denied, Denied]),
        ("alice", H2, [Allowed, Denied, Denied]),
        ("bob", local, [Denied, Denied, Allowed]),
        ("bob", H1, [Denied, Denied, Denied]),
        ("bob", H2, [Denied, Allowed, Allowed]),
    ];
    for (user, host, want) in cases {
        assert_answers(&a, user, host, &actions, &want);
    }
}

#[test]
fn ipv6_hosts_compare_in_javas_uncompressed_form() {
    let a = authorizer(&[
        acl(
            Topic,
            "t",
            Literal,
            "User:alice",
            "0:0:0:0:0:0:0:1",
            Read,
            Allow,
        ),
        acl(Topic, "u", Literal, "User:alice", "::1", Read, Allow),
    ]);
    let c = RequestContext::from_ip(Principal::user("alice"), "::1".parse().unwrap());
    assert_eq!(
        a.authorize(
            &c,
            &[Action::new(Read, Topic, "t"), Action::new(Read, Topic, "u")]
        ),
        [Allowed, Denied]
    );
}

// ---- resource patterns --------------------------------------------------------------------

#[test]
fn prefixed_matching_boundaries() {
    let a = authorizer(&[acl(Topic, "ab", Prefixed, "User:alice", "*", Read, Allow)]);
    assert_eq!(check(&a, "alice", H1, Read, Topic, "abc"), Allowed);
    assert_eq!(check(&a, "alice", H1, Read, Topic, "ab"), Allowed);
    assert_eq!(check(&a, "alice", H1, Read, Topic, "a"), Denied);
    assert_eq!(check(&a, "alice", H1, Read, Topic, "xab"), Denied);
    assert_eq!(check(&a, "alice", H1, Read, Topic, ""), Denied);
    assert_eq!(check(&a, "alice", H1, Read, Topic, "aB"), Denied);
    assert_eq!(check(&a, "alice", H1, Read, Group, "abc"), Denied);
    // Literal names are whole names.
    let a = authorizer(&[acl(Topic, "ab", Literal, "User:alice", "*", Read, Allow)]);
    assert_eq!(check(&a, "alice", H1, Read, Topic, "abc"), Denied);
    assert_eq!(check(&a, "alice", H1, Read, Topic, "ab"), Allowed);
}

#[test]
fn kafka_prefix_acls() {
    let a = authorizer(&[
        acl(Topic, "fooa", Prefixed, "User:alice", "*", All, Allow),
        acl(Topic, "foobar", Literal, "User:bob", "*", All, Allow),
        acl(Topic, "f", Prefixed, "User:bob", "*", All, Allow),
    ]);
    let bob = [
        Action::new(Write, Topic, "foobarr"),
        Action::new(Read, Topic, "goobar"),
        Action::new(Read, Topic, "fooa"),
    ];
    assert_answers(&a, "bob", H1, &bob, &[Allowed, Denied, Allowed]);
    let alice = [
        Action::new(Describe, Topic, "fooa"),
        Action::new(Write, Topic, "bar"),
        Action::new(Read, Topic, "baz"),
    ];
    assert_answers(&a, "alice", H1, &alice, &[Allowed, Denied, Denied]);
}

#[test]
fn kafka_authorization_with_many_acls() {
    let a = authorizer(&[
        acl(Topic, "green2", Literal, "User:*", "*", Read, Allow),
        acl(Topic, "green", Prefixed, "User:bob", "*", Read, Allow),
        acl(Topic, "betamax4", Literal, "User:bob", "*", Read, Allow),
        acl(Topic, "betamax", Literal, "User:bob", "*", Read, Allow),
        acl(Topic, "beta", Prefixed, "User:*", "*", Read, Allow),
        acl(Topic, "alpha", Prefixed, "User:*", "*", Read, Allow),
        acl(Topic, "alp", Prefixed, "User:bob", "*", Read, Deny),
        acl(Group, "*", Literal, "User:bob", "*", Write, Allow),
        acl(Group, "wheel", Literal, "User:*", "*", Write, Deny),
    ]);
    let green_and_wheel = [
        Action::new(Read, Topic, "green1"),
        Action::new(Write, Group, "wheel"),
    ];
    assert_answers(&a, "bob", H1, &green_and_wheel, &[Allowed, Denied]);
    let alpha_arbitrary_ala = [
        Action::new(Read, Topic, "alpha"),
        Action::new(Write, Group, "arbitrary"),
        Action::new(Read, Topic, "ala"),
    ];
    let want = [Denied, Allowed, Denied];
    assert_answers(&a, "bob", H1, &alpha_arbitrary_ala, &want);
}

#[test]
fn kafka_authorize_with_prefixed_resource_among_unrelated_denies() {
    let deny = |name: &str, pt| acl(Topic, name, pt, "User:alice", "*", Read, Deny);
    let a = authorizer(&[
        deny("a_other", Literal),
        deny("a_other", Prefixed),
        deny("foo-0e0c9a1f", Prefixed),
        deny("foo-77b2", Prefixed),
        deny("foo-5d31-zzz", Prefixed),
        deny("fooo-ab12", Prefixed),
        deny("fo-99", Prefixed),
        deny("fop-12", Prefixed),
        deny("fon-34", Prefixed),
        deny("fon-", Prefixed),
        deny("z_other", Prefixed),
        deny("z_other", Literal),
        acl(Topic, "foo", Prefixed, "User:alice", "*", Read, Allow),
    ]);
    assert_eq!(check(&a, "alice", H1, Read, Topic, "foo-1234"), Allowed);
    assert_eq!(check(&a, "alice", H1, Read, Topic, "foo-77b2x"), Denied);
}

#[test]
fn kafka_single_character_resource_acls() {
    let mut a = authorizer(&[acl(Topic, "f", Literal, "User:alice", "*", Read, Allow)]);
    assert_eq!(check(&a, "alice", H1, Read, Topic, "f"), Allowed);
    assert_eq!(check(&a, "alice", H1, Read, Topic, "foo"), Denied);
    a.create(&[acl(Topic, "_", Prefixed, "User:alice", "*", Read, Allow)]);
    assert_eq!(check(&a, "alice", H1, Read, Topic, "_foo"), Allowed);
    assert_eq!(check(&a, "alice", H1, Read, Topic, "_"), Allowed);
    assert_eq!(check(&a, "alice", H1, Read, Topic, "foo_"), Denied);
}

#[test]
fn wildcard_resource_matches_every_name_of_its_type() {
    let mut a = authorizer(&[acl(Topic, "*", Literal, "User:alice", H1, Read, Allow)]);
    assert_eq!(check(&a, "alice", H1, Read, Topic, "anything"), Allowed);
    assert_eq!(check(&a, "alice", H1, Read, Topic, "*"), Allowed);
    assert_eq!(check(&a, "alice", H1, Read, Group, "anything"), Denied);
    // Kafka's testWildCardAcls: a DENY on the wildcard beats an ALLOW on the topic.
    a.create(&[acl(Topic, "t", Literal, "User:alice", H1, Write, Allow)]);
    assert_eq!(check(&a, "alice", H1, Write, Topic, "t"), Allowed);
    a.create(&[acl(Topic, "*", Literal, "User:alice", H1, Write, Deny)]);
    assert_eq!(check(&a, "alice", H1, Write, Topic, "t"), Denied);
    // An empty resource name (never valid in an ACL) is still covered by the wildcard.
    let g = authorizer(&[]);
    assert_eq!(check(&g, "alice", H1, Read, Group, ""), Denied);
    let g = authorizer(&[acl(Group, "*", Literal, "User:alice", "*", Read, Allow)]);
    assert_eq!(check(&g, "alice", H1, Read, Group, ""), Allowed);
    // A prefixed `*` is only a prefix.
    let p = authorizer(&[acl(Topic, "*", Prefixed, "User:alice", "*", Read, Allow)]);
    assert_eq!(check(&p, "alice", H1, Read, Topic, "t"), Denied);
    assert_eq!(check(&p, "alice", H1, Read, Topic, "*t"), Allowed);
}

// ---- mutations ----------------------------------------------------------------------------

#[test]
fn create_is_idempotent_and_validates_each_binding() {
    let mut a = authorizer(&[]);
    let read = acl(Topic, "t", Literal, "User:alice", "*", Read, Allow);
    let bad = acl(Topic, "", Literal, "User:alice", "*", Read, Allow);
    let results = a.create(&[
        read.clone(),
        bad,
        read.clone(),
        acl(Topic, "t", Literal, "alice", "*", Read, Allow),
    ]);
    assert_eq!(results[0], Ok(CreateOutcome::Created));
    assert_eq!(results[1].as_ref().unwrap_err().code(), 42);
    assert_eq!(results[2], Ok(CreateOutcome::AlreadyExists));
    assert_eq!(results[3].as_ref().unwrap_err().code(), 42);
    assert_eq!(a.len(), 1);
    assert_eq!(
        a.create(std::slice::from_ref(&read)),
        [Ok(CreateOutcome::AlreadyExists)]
    );
    assert_eq!(
        a.describe(&AclBindingFilter::ANY),
        std::slice::from_ref(&read)
    );
    // Removing it once removes it (no hidden duplicate keeps allowing).
    delete(&mut a, &read);
    assert!(a.is_empty());
    assert_eq!(check(&a, "alice", H1, Read, Topic, "t"), Denied);
    assert!(
        a.indexes.is_empty(),
        "indexes are emptied with the last binding"
    );
}

#[test]
fn kafka_add_acls_on_literal_wildcard_and_prefixed_resources() {
    let (allow_read, allow_write, deny_read) = (
        AccessControlEntry::new("User:alice", "*", Read, Allow),
        AccessControlEntry::new("User:alice", "*", Write, Allow),
        AccessControlEntry::new("User:alice", "*", Read, Deny),
    );
    let patterns = [
        ResourcePattern::literal(Topic, "foo-1"),
        ResourcePattern::wildcard(Topic),
        ResourcePattern::prefixed(Topic, "foo-"),
    ];
    for pattern in &patterns {
        let mut a = authorizer(&[]);
        for e in [&allow_read, &allow_write, &allow_write, &deny_read] {
            a.create(&[AclBinding::new(pattern.clone(), e.clone())])[0]
                .clone()
                .unwrap();
        }
        for other in &patterns {
            let got: HashSet<AccessControlEntry> = a
                .describe(&AclBindingFilter::new(
                    other.to_filter(),
                    AccessControlEntryFilter::ANY,
                ))
                .into_iter()
                .map(|b| b.entry)
                .collect();
            let want: HashSet<AccessControlEntry> = if other == pattern {
                [allow_read.clone(), allow_write.clone(), deny_read.clone()].into()
            } else {
                HashSet::new()
            };
            assert_eq!(got, want, "{pattern} described as {other}");
        }
        // Delete one entry, then all of the pattern.
        let removed = a.delete(&[AclBinding::new(pattern.clone(), allow_read.clone()).to_filter()]);
        assert_eq!(removed[0].as_ref().unwrap().len(), 1);
        let left: Vec<_> = a
            .describe(&AclBindingFilter::ANY)
            .into_iter()
            .map(|b| b.entry)
            .collect();
        assert_eq!(left.len(), 2);
        assert!(!left.contains(&allow_read));
        a.delete(&[AclBindingFilter::new(
            pattern.to_filter(),
            AccessControlEntryFilter::ANY,
        )]);
        assert!(a.is_empty());
    }
}

#[test]
fn kafka_acls_filter_and_delete_against_the_state_before_the_call() {
    let acl1 = acl(Topic, "foo-1", Literal, "User:alice", "*", Read, Allow);
    let acl2 = acl(
        Topic,
        "foo-1",
        Literal,
        "User:alice",
        "192.168.0.1",
        Write,
        Allow,
    );
    let acl3 = acl(Topic, "bar-1", Literal, "User:alice", "*", Describe, Allow);
    let acl4 = acl(Topic, "bar-", Prefixed, "User:*", "*", Read, Allow);
    let mut a = authorizer(&[acl1.clone(), acl2.clone(), acl3.clone(), acl4.clone()]);
    let set = |v: Vec<AclBinding>| v.into_iter().collect::<HashSet<_>>();
    assert_eq!(
        set(a.describe(&AclBindingFilter::ANY)),
        set(vec![acl1.clone(), acl2.clone(), acl3.clone(), acl4.clone()])
    );
    let any_entry =
        |p: ResourcePatternFilter| AclBindingFilter::new(p, AccessControlEntryFilter::ANY);
    assert_eq!(
        set(a.describe(&any_entry(acl1.pattern.to_filter()))),
        set(vec![acl1.clone(), acl2.clone()])
    );
    assert_eq!(
        set(a.describe(&any_entry(acl4.pattern.to_filter()))),
        set(vec![acl4.clone()])
    );
    let matching = any_entry(ResourcePatternFilter::new(
        ResourceType::Any,
        Some("bar-1".into()),
        PatternType::Match,
    ));
    assert_eq!(
        set(a.describe(&matching)),
        set(vec![acl3.clone(), acl4.clone()])
    );

    let filters = [
        matching,
        acl1.to_filter(),
        any_entry(acl3.pattern.to_filter()),
        any_entry(ResourcePatternFilter::new(
            Topic,
            Some("baz".into()),
            PatternType::Any,
        )),
    ];
    let results = a.delete(&filters);
    let results: Vec<HashSet<AclBinding>> = results.into_iter().map(|r| set(r.unwrap())).collect();
    assert_eq!(results[0], set(vec![acl3.clone(), acl4]));
    assert_eq!(results[1], set(vec![acl1]));
    // acl3 is listed under filters 0 and 2: both saw the bindings before the call.
    assert_eq!(results[2], set(vec![acl3]));
    assert_eq!(results[3], HashSet::new());
    assert_eq!(a.describe(&AclBindingFilter::ANY), [acl2]);
}

#[test]
fn describe_by_principal_is_an_exact_string_match() {
    let specific = acl(Topic, "t", Literal, "User:alice", "*", Write, Allow);
    let wildcard = acl(Topic, "t", Literal, "User:*", "*", Write, Allow);
    let by_principal = |p: &str| {
        AclBindingFilter::new(
            ResourcePatternFilter::ANY,
            AccessControlEntryFilter {
                principal: Some(p.into()),
                ..AccessControlEntryFilter::ANY
            },
        )
    };
    let a = authorizer(std::slice::from_ref(&specific));
    assert_eq!(a.describe(&by_principal("User:*")), []);
    assert_eq!(a.describe(&by_principal("User:alice")), [specific]);
    let a = authorizer(std::slice::from_ref(&wildcard));
    assert_eq!(a.describe(&by_principal("User:*")), [wildcard]);
    assert_eq!(a.describe(&by_principal("User:alice")), []);
}

#[test]
fn delete_rejects_unknown_filters_alone() {
    let b = acl(Topic, "t", Literal, "User:alice", "*", Read, Allow);
    let mut a = authorizer(std::slice::from_ref(&b));
    let mut unknown = AclBindingFilter::ANY;
    unknown.entry_filter.operation = AclOperation::Unknown;
    let results = a.delete(&[unknown, AclBindingFilter::ANY]);
    assert_eq!(results[0].as_ref().unwrap_err().code(), 42);
    assert_eq!(results[1], Ok(vec![b]));
    assert!(a.is_empty());
}

// ---- authorize_by_resource_type (Kafka's BaseAuthorizerTest cases) ---------------------------

#[test]
fn by_type_multiple_add_and_remove() {
    let deny_read = acl(Topic, "sb1-x", Literal, "User:user1", H1, Read, Deny);
    let allow_read = acl(Topic, "sb1-x", Literal, "User:user1", H1, Read, Allow);
    let mut a = authorizer(&[]);
    for _ in 0..3 {
        assert_eq!(by_type(&a, "user1", H1, Read, Topic), Denied);
        a.create(std::slice::from_ref(&allow_read));
        assert_eq!(by_type(&a, "user1", H1, Read, Topic), Allowed);
        for _ in 0..3 {
            a.create(std::slice::from_ref(&deny_read));
            assert_eq!(by_type(&a, "user1", H1, Read, Topic), Denied);
            delete(&mut a, &deny_read);
            a.create(std::slice::from_ref(&allow_read));
            assert_eq!(by_type(&a, "user1", H1, Read, Topic), Allowed);
        }
        delete(&mut a, &allow_read);
        assert_eq!(by_type(&a, "user1", H1, Read, Topic), Denied);
    }
}

#[test]
fn by_type_unrelated_deny_does_not_dominate_allow() {
    let r1 = |principal, host, op, perm| acl(Topic, "sb1-x", Literal, principal, host, op, perm);
    let a = authorizer(&[
        r1("User:user1", H1, Read, Deny),
        r1("User:user2", H1, Read, Deny),
        r1("User:user1", H2, Write, Deny),
        r1("User:user2", H2, Read, Deny),
        r1("User:user1", H2, Read, Allow),
        acl(Topic, "sb2-y", Literal, "User:user1", H2, Read, Deny),
        acl(Group, "s", Prefixed, "User:user1", H2, Read, Deny),
    ]);
    assert_eq!(by_type(&a, "user1", H1, Read, Topic), Denied);
    assert_eq!(by_type(&a, "user1", H1, Read, Group), Denied);
    assert_eq!(by_type(&a, "user1", H1, Read, TransactionalId), Denied);
    assert_eq!(by_type(&a, "user1", H1, Read, Cluster), Denied);
    assert_eq!(by_type(&a, "user1", H2, Read, Topic), Allowed);
}

#[test]
fn by_type_deny_takes_precedence() {
    let mut a = authorizer(&[acl(Topic, "sb1", Literal, "User:user1", H1, Write, Allow)]);
    assert_eq!(by_type(&a, "user1", H1, Write, Topic), Allowed);
    a.create(&[acl(Topic, "sb1", Literal, "User:user1", H1, Write, Deny)]);
    assert_eq!(by_type(&a, "user1", H1, Write, Topic), Denied);
}

#[test]
fn by_type_prefixed_deny_dominates() {
    let allow = |name: &str| acl(Group, name, Prefixed, "User:user1", H1, Read, Allow);
    let deny = |name: &str| acl(Group, name, Prefixed, "User:user1", H1, Read, Deny);
    let mut a = authorizer(&[allow("abcde")]);
    assert_eq!(by_type(&a, "user1", H1, Read, Group), Allowed);
    a.create(&[deny("abcd")]);
    assert_eq!(by_type(&a, "user1", H1, Read, Group), Denied);
    a.create(&[allow("abc")]);
    assert_eq!(by_type(&a, "user1", H1, Read, Group), Allowed);
    a.create(&[deny("a")]);
    assert_eq!(by_type(&a, "user1", H1, Read, Group), Denied);
    a.create(&[allow("ab")]);
    assert_eq!(by_type(&a, "user1", H1, Read, Group), Denied);
}

#[test]
fn by_type_wildcard_deny_dominates() {
    let entry = |pattern: ResourcePattern, perm| {
        AclBinding::new(
            pattern,
            AccessControlEntry::new("User:user1", H1, Write, perm),
        )
    };
    let mut a = authorizer(&[entry(ResourcePattern::prefixed(Group, "hello"), Allow)]);
    assert_eq!(by_type(&a, "user1", H1, Write, Group), Allowed);
    a.create(&[entry(ResourcePattern::wildcard(Group), Deny)]);
    assert_eq!(by_type(&a, "user1", H1, Write, Group), Denied);
    a.create(&[entry(ResourcePattern::wildcard(Group), Allow)]);
    assert_eq!(by_type(&a, "user1", H1, Write, Group), Denied);
    a.create(&[entry(ResourcePattern::literal(Group, "aloha"), Allow)]);
    assert_eq!(by_type(&a, "user1", H1, Write, Group), Denied);
}

#[test]
fn by_type_with_all_operation_ace() {
    let r = |op, perm| acl(Topic, "sb1", Literal, "User:user1", H1, op, perm);
    let mut a = authorizer(&[]);
    assert_eq!(by_type(&a, "user1", H1, Read, Topic), Denied);
    a.create(&[r(Write, Deny), r(All, Allow)]);
    assert_eq!(by_type(&a, "user1", H1, Read, Topic), Allowed);
    a.create(&[r(All, Deny)]);
    assert_eq!(by_type(&a, "user1", H1, Read, Topic), Denied);
}

#[test]
fn by_type_with_all_host_ace() {
    let r = |name: &str, host, perm| acl(Topic, name, Literal, "User:user1", host, Read, perm);
    let mut a = authorizer(&[]);
    assert_eq!(by_type(&a, "user1", H1, Read, Topic), Denied);
    a.create(&[r("sb1", H1, Allow)]);
    assert_eq!(by_type(&a, "user1", H1, Read, Topic), Allowed);
    a.create(&[r("sb1", "*", Deny)]);
    assert_eq!(by_type(&a, "user1", H1, Read, Topic), Denied);
    a.create(&[r("sb2", H1, Deny)]);
    assert_eq!(by_type(&a, "user1", H1, Read, Topic), Denied);
    assert_eq!(by_type(&a, "user1", H2, Read, Topic), Denied);
    a.create(&[r("sb2", "*", Allow)]);
    assert_eq!(by_type(&a, "user1", H2, Read, Topic), Allowed);
    a.create(&[r("sb2", "*", Deny)]);
    assert_eq!(by_type(&a, "user1", H2, Read, Topic), Denied);
}

#[test]
fn by_type_with_all_principal_ace() {
    let r = |name: &str, principal, perm| acl(Topic, name, Literal, principal, H1, Read, perm);
    let mut a = authorizer(&[]);
    assert_eq!(by_type(&a, "user1", H1, Read, Topic), Denied);
    a.create(&[r("sb1", "User:user1", Allow)]);
    assert_eq!(by_type(&a, "user1", H1, Read, Topic), Allowed);
    a.create(&[r("sb1", "User:*", Deny)]);
    assert_eq!(by_type(&a, "user1", H1, Read, Topic), Denied);
    a.create(&[r("sb2", "User:user1", Deny)]);
    assert_eq!(by_type(&a, "user1", H1, Read, Topic), Denied);
    assert_eq!(by_type(&a, "user2", H1, Read, Topic), Denied);
    a.create(&[r("sb2", "User:*", Allow)]);
    assert_eq!(by_type(&a, "user2", H1, Read, Topic), Allowed);
    a.create(&[r("sb2", "User:*", Deny)]);
    assert_eq!(by_type(&a, "user2", H1, Read, Topic), Denied);
}

#[test]
fn by_type_no_acl_found_override() {
    let a = open_authorizer(&[]);
    assert_eq!(by_type(&a, "alice", H1, Read, Topic), Allowed);
    assert_eq!(by_type(&a, "alice", H1, Write, Topic), Allowed);
}

#[test]
fn by_type_init_producer_id_write_on_any_topic() {
    // WRITE on topics `name` (`pattern`) for User:producer from any host.
    let producer_write =
        |name, pattern, perm| acl(Topic, name, pattern, "User:producer", "*", Write, perm);
    // InitProducerId without a transactional id: WRITE on some topic suffices.
    let a = authorizer(&[producer_write("orders-", Prefixed, Allow)]);
    assert_eq!(by_type(&a, "producer", H1, Write, Topic), Allowed);
    assert_eq!(by_type(&a, "producer", H1, Read, Topic), Denied);
    assert_eq!(by_type(&a, "consumer", H1, Write, Topic), Denied);
    // Shadowed by a DENY on a shorter prefix: no topic is writable.
    let a = authorizer(&[
        producer_write("orders-", Prefixed, Allow),
        producer_write("orders-eu", Literal, Allow),
        acl(Topic, "ord", Prefixed, "User:*", "*", Write, Deny),
    ]);
    assert_eq!(by_type(&a, "producer", H1, Write, Topic), Denied);
    // A literal DENY shadows the same literal only, not a prefix.
    let a = authorizer(&[
        producer_write("orders", Prefixed, Allow),
        producer_write("orders", Literal, Deny),
    ]);
    assert_eq!(by_type(&a, "producer", H1, Write, Topic), Allowed);
}

#[test]
fn by_type_quirks_of_kafkas_default_method() {
    // No implied operations in the scan: ALLOW READ on a topic is not "DESCRIBE on some
    // topic", although authorize() would allow DESCRIBE on that very topic.
    let a = authorizer(&[acl(Topic, "foo", Literal, "User:alice", "*", Read, Allow)]);
    assert_eq!(check(&a, "alice", H1, Describe, Topic, "foo"), Allowed);
    assert_eq!(by_type(&a, "alice", H1, Describe, Topic), Denied);
    // ...unless its pattern covers the probe name `hardcode`, which authorize() checks first.
    let a = authorizer(&[acl(Topic, "hard", Prefixed, "User:alice", "*", Read, Allow)]);
    assert_eq!(by_type(&a, "alice", H1, Describe, Topic), Allowed);
    // allow.everyone.if.no.acl.found allows when no ACL covers `hardcode`, even if every
    // ACL of the type denies the caller.
    let a = open_authorizer(&[acl(Topic, "foo", Literal, "User:alice", "*", Write, Deny)]);
    assert_eq!(by_type(&a, "alice", H1, Write, Topic), Allowed);
    let a = open_authorizer(&[acl(Topic, "*", Literal, "User:alice", "*", Write, Deny)]);
    assert_eq!(by_type(&a, "alice", H1, Write, Topic), Denied);
    // A DENY on the literal `*` settles it even with an ALLOW on `*` too.
    let a = authorizer(&[
        acl(Topic, "*", Literal, "User:alice", "*", Write, Allow),
        acl(Topic, "*", Literal, "User:alice", H1, Write, Deny),
    ]);
    assert_eq!(by_type(&a, "alice", H1, Write, Topic), Denied);
    assert_eq!(by_type(&a, "alice", H2, Write, Topic), Allowed);
}

#[test]
fn by_type_rejects_filter_arguments() {
    let a = authorizer(&[]);
    let c = ctx("alice", H1);
    assert!(
        a.authorize_by_resource_type(&c, Read, ResourceType::Any)
            .is_err()
    );
    assert!(
        a.authorize_by_resource_type(&c, Read, ResourceType::Unknown)
            .is_err()
    );
    assert!(
        a.authorize_by_resource_type(&c, AclOperation::Any, Topic)
            .is_err()
    );
    let err = a
        .authorize_by_resource_type(&c, AclOperation::Unknown, Topic)
        .unwrap_err();
    assert_eq!(err.code(), -1);
    assert!(default_authorize_by_resource_type(&a, &c, AclOperation::Any, Topic).is_err());
}

// ---- property test against a naive reference -------------------------------------------------

/// Kafka's rules read off every binding, with no index (O(n) per check).
fn reference_authorize(
    config: &StandardAuthorizerConfig,
    bindings: &[AclBinding],
    ctx: &RequestContext,
    action: &Action,
) -> AuthorizationResult {
    if config.super_users.contains(&ctx.principal) {
        return Allowed;
    }
    let applicable: Vec<&AclBinding> = bindings
        .iter()
        .filter(|b| b.pattern.resource_type == action.resource_type)
        .filter(|b| match b.pattern.pattern_type {
            Literal => b.pattern.name == action.resource_name || b.pattern.name == "*",
            Prefixed => action.resource_name.starts_with(&b.pattern.name),
            _ => false,
        })
        .collect();
    if applicable.is_empty() {
        return if config.allow_everyone_if_no_acl_found {
            Allowed
        } else {
            Denied
        };
    }
    let matching = |perm: AclPermissionType| {
        applicable.iter().any(|b| {
            let e = &b.entry;
            let principal: Principal = e.principal.parse().unwrap();
            let op_matches = e.operation == All
                || e.operation == action.operation
                || (perm == Allow
                    && ((action.operation == Describe
                        && [Read, Write, Delete, Alter].contains(&e.operation))
                        || (action.operation == DescribeConfigs && e.operation == AlterConfigs)));
            e.permission_type == perm
                && (principal == ctx.principal || e.principal == "User:*")
                && (e.host == "*" || e.host == ctx.client_host)
                && op_matches
        })
    };
    if matching(Deny) {
        Denied
    } else if matching(Allow) {
        Allowed
    } else {
        Denied
    }
}

mod property {
    use super::*;
    use proptest::prelude::*;

    const NAMES: &[&str] = &[
        "",
        "a",
        "ab",
        "abc",
        "abd",
        "b",
        "ba",
        "*",
        "é",
        "éa",
        "hard",
        "hardcode",
        "kafka-cluster",
    ];
    const USERS: &[&str] = &[
        "User:alice",
        "User:bob",
        "User:*",
        "Group:alice",
        "User:superman",
    ];
    const HOSTS: &[&str] = &["*", "10.0.0.1", "10.0.0.2"];
    const TYPES: &[ResourceType] = &[Topic, Group, Cluster, TransactionalId];
    const OPS: &[AclOperation] = &[
        All,
        Read,
        Write,
        Describe,
        Alter,
        AlterConfigs,
        DescribeConfigs,
        Delete,
        Create,
        IdempotentWrite,
    ];

    fn binding() -> impl Strategy<Value = AclBinding> {
        (
            prop::sample::select(TYPES),
            prop::sample::select(&NAMES[1..]),
            prop::sample::select(&[Literal, Prefixed][..]),
            prop::sample::select(USERS),
            prop::sample::select(HOSTS),
            prop::sample::select(OPS),
            prop::sample::select(&[Allow, Deny][..]),
        )
            .prop_map(|(rt, name, pt, principal, host, op, perm)| {
                let name = if rt == Cluster { "kafka-cluster" } else { name };
                acl(rt, name, pt, principal, host, op, perm)
            })
    }

    fn context() -> impl Strategy<Value = RequestContext> {
        (
            prop::sample::select(USERS),
            prop::sample::select(&HOSTS[1..]),
        )
            .prop_map(|(p, h)| RequestContext::new(p.parse().unwrap(), h))
    }

    fn action() -> impl Strategy<Value = Action> {
        let op = prop::sample::select(AclOperation::VALUES);
        let rt =
            prop::sample::select(&[Topic, Group, Cluster, TransactionalId, ResourceType::User][..]);
        let name = prop_oneof![
            prop::sample::select(NAMES).prop_map(String::from),
            "[abé*]{0,4}"
        ];
        (op, rt, name).prop_map(|(op, rt, name)| Action::new(op, rt, name))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// After random creates and deletes, the indexed authorizer answers as the naive
        /// reference does, authorize_by_resource_type's override as Kafka's default method
        /// does, and describe returns exactly the bindings kept.
        #[test]
        fn indexed_authorizer_agrees_with_naive_reference(
            created in prop::collection::vec(binding(), 0..40),
            deleted in prop::collection::vec(binding(), 0..10),
            allow_everyone in any::<bool>(),
            queries in prop::collection::vec((context(), action()), 1..40),
        ) {
            let config = StandardAuthorizerConfig {
                super_users: [Principal::user("superman")].into(),
                allow_everyone_if_no_acl_found: allow_everyone,
            };
            let mut a = StandardAuthorizer::new(config.clone());
            for r in a.create(&created) {
                prop_assert!(r.is_ok());
            }
            let filters: Vec<AclBindingFilter> = deleted.iter().map(AclBinding::to_filter).collect();
            a.delete(&filters);
            let mut kept: Vec<AclBinding> = created.iter().filter(|b| !deleted.contains(b)).cloned().collect();
            kept.sort();
            kept.dedup();
            prop_assert_eq!(&a.describe(&AclBindingFilter::ANY), &kept);

            for (ctx, action) in &queries {
                let want = reference_authorize(&config, &kept, ctx, action);
                prop_assert_eq!(a.authorize_action(ctx, action), want, "{:?} {:?}", ctx, action);
                if check_resource_type_args(action.operation, action.resource_type).is_ok() {
                    let fast = a.authorize_by_resource_type(ctx, action.operation, action.resource_type).unwrap();
                    let slow = default_authorize_by_resource_type(&a, ctx, action.operation, action.resource_type).unwrap();
                    prop_assert_eq!(fast, slow, "{:?} {:?}", ctx, action);
                }
            }

            // Deleting everything that is left empties the indexes.
            a.delete(&[AclBindingFilter::ANY]);
            prop_assert!(a.is_empty());
            prop_assert!(a.indexes.is_empty());
        }
    }
}
