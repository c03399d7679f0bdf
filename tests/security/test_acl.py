"""Kafka's authorizer decision without a network (security/acl.py), checked against the rules of
Kafka's AclAuthorizer: super users, literal / wildcard / prefixed patterns, principals and
hosts with wildcards, DENY over ALLOW, the operations that imply DESCRIBE, no ACL at all."""

from __future__ import annotations

from gregor.security.acl import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    Authorizer,
    PatternType,
    ResourceType,
)

T, G, C = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
L, P = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
Op = AclOperation


def b(rt, name, pt, principal, op, perm=ALLOW, host="*") -> AclBinding:
    return AclBinding(rt, name, pt, principal, host, op, perm)


def authz(*bindings, super_users=(), open_if_none=False) -> Authorizer:
    a = Authorizer(super_users, open_if_none)
    a.update(bindings)
    return a


def test_literal_wildcard_prefixed_and_principals():
    a = authz(b(T, "orders", L, "User:alice", Op.READ), b(T, "*", L, "User:bob", Op.WRITE),
              b(T, "logs-", P, "User:*", Op.DESCRIBE))
    assert a.authorize("User:alice", "h", Op.READ, T, "orders")
    assert not a.authorize("User:alice", "h", Op.READ, T, "orders2")
    assert a.authorize("User:bob", "h", Op.WRITE, T, "anything")
    assert a.authorize("User:carol", "h", Op.DESCRIBE, T, "logs-app")
    assert not a.authorize("User:carol", "h", Op.READ, T, "logs-app")
    assert not a.authorize("User:carol", "h", Op.DESCRIBE, T, "log")


def test_deny_wins_and_all_matches_every_operation():
    a = authz(b(T, "*", L, "User:alice", Op.ALL), b(T, "secret", L, "User:alice", Op.READ, DENY),
              b(T, "vault-", P, "User:*", Op.ALL, DENY))
    assert a.authorize("User:alice", "h", Op.WRITE, T, "secret")
    assert not a.authorize("User:alice", "h", Op.READ, T, "secret")
    assert not a.authorize("User:alice", "h", Op.DESCRIBE, T, "vault-1")


def test_implied_describe_and_describe_configs():
    a = authz(b(T, "t", L, "User:a", Op.WRITE), b(G, "g", L, "User:a", Op.ALTER_CONFIGS))
    assert a.authorize("User:a", "h", Op.DESCRIBE, T, "t")
    assert not a.authorize("User:a", "h", Op.READ, T, "t")
    assert a.authorize("User:a", "h", Op.DESCRIBE_CONFIGS, G, "g")
    assert not a.authorize("User:a", "h", Op.DESCRIBE, G, "g")


def test_hosts_super_users_and_resources_without_acls():
    a = authz(b(T, "t", L, "User:a", Op.READ, host="10.0.0.1"), super_users={"User:root"})
    assert a.authorize("User:a", "10.0.0.1", Op.READ, T, "t") and not a.authorize("User:a", "10.0.0.2", Op.READ, T, "t")
    assert a.authorize("User:root", "x", Op.DELETE, T, "t")
    assert not a.authorize("User:a", "h", Op.READ, T, "other")  # no ACL names it: closed by default
    assert authz(b(T, "t", L, "User:a", Op.READ), open_if_none=True).authorize("User:z", "h", Op.READ, T, "other")
    # open_if_none does not open a resource some ACL names
    assert not authz(b(T, "t", L, "User:a", Op.READ), open_if_none=True).authorize("User:z", "h", Op.READ, T, "t")


def test_authorized_operations_bits_and_authorize_any():
    a = authz(b(T, "t", L, "User:a", Op.READ), b(T, "w-", P, "User:a", Op.WRITE))
    bits = a.authorized_operations("User:a", "h", T, "t")
    assert bits == (1 << Op.READ) | (1 << Op.DESCRIBE)
    assert a.authorize_any("User:a", "h", Op.WRITE, T) and not a.authorize_any("User:b", "h", Op.WRITE, T)
    assert not authz(b(T, "w-", P, "User:a", Op.WRITE), b(T, "*", L, "User:a", Op.WRITE, DENY)).authorize_any(
        "User:a", "h", Op.WRITE, T)


def test_filters_any_match_and_exact():
    lit, wild, pre = b(T, "orders", L, "User:a", Op.READ), b(T, "*", L, "User:b", Op.WRITE), \
        b(T, "ord", P, "User:c", Op.ALL)
    f = AclBindingFilter(T, "orders", PatternType.MATCH)
    assert [f.matches(x) for x in (lit, wild, pre)] == [True, True, True]
    f = AclBindingFilter(T, "orders", PatternType.ANY)
    assert [f.matches(x) for x in (lit, wild, pre)] == [True, False, False]
    f = AclBindingFilter(T, "ord", PatternType.PREFIXED, principal="User:c")
    assert [f.matches(x) for x in (lit, wild, pre)] == [False, False, True]
    assert AclBindingFilter(ResourceType.ANY, operation=Op.WRITE).matches(wild)


def test_authorize_any_as_kafkas_authorize_by_resource_type():
    # a prefixed DENY dominates an allowed literal it is a prefix of
    assert not authz(b(T, "foo", L, "User:a", Op.WRITE), b(T, "f", P, "User:a", Op.WRITE, DENY)).authorize_any(
        "User:a", "h", Op.WRITE, T)
    # allow.everyone.if.no.acl.found counts even when unrelated topics have ACLs
    assert authz(b(T, "other", L, "User:z", Op.READ), open_if_none=True).authorize_any("User:a", "h", Op.WRITE, T)
    assert authz(super_users={"User:root"}).authorize_any("User:root", "h", Op.WRITE, T)
    assert authz(b(T, "*", L, "User:a", Op.WRITE)).authorize_any("User:a", "h", Op.WRITE, T)


def test_invalid_bindings():
    assert b(C, "other", L, "User:a", Op.ALTER).invalid()
    assert b(T, "t", L, "alice", Op.READ).invalid()
    assert b(T, "t", PatternType.MATCH, "User:a", Op.READ).invalid()
    assert b(T, "t", L, "User:a", Op.READ).invalid() is None
