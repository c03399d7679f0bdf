"""Listener, JAAS and principal-mapping settings as Kafka reads them."""

from __future__ import annotations

import pytest

from gregor.config import BrokerConfig, ConfigError
from gregor.security.jaas import JaasError, parse_jaas
from gregor.security.principal import MappingRuleError, SslPrincipalMapper


def listeners(**kw: str):
    return BrokerConfig.from_mapping(kw).listeners()


def test_listeners_protocols_advertised_and_inter_broker():
    ls = listeners(**{"listeners": "INTERNAL://0.0.0.0:9093,EXTERNAL://:9094,PLAINTEXT://127.0.0.1:9092",
                      "advertised.listeners": "EXTERNAL://kafka.example.com:443",
                      "listener.security.protocol.map": "INTERNAL:SSL,EXTERNAL:SASL_SSL,PLAINTEXT:PLAINTEXT",
                      "inter.broker.listener.name": "INTERNAL"})
    assert [(x.name, x.protocol, x.host, x.port) for x in ls.bound] == [
        ("INTERNAL", "SSL", "0.0.0.0", 9093), ("EXTERNAL", "SASL_SSL", "", 9094),
        ("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 9092)]
    assert ls.advertised_named("EXTERNAL").host == "kafka.example.com" and ls.inter_broker == "INTERNAL"
    assert listeners(**{"listeners": "SASL_SSL://:1", "security.inter.broker.protocol": "SASL_SSL"}).inter_broker \
        == "SASL_SSL"


@pytest.mark.parametrize("settings, message", [
    ({"listeners": "A://:1"}, "no security protocol"),
    ({"listeners": "PLAINTEXT://:1,PLAINTEXT://:2"}, "twice"),
    ({"listeners": "PLAINTEXT://:1,SSL://:1"}, "its own port"),
    ({"listeners": "PLAINTEXT://:1", "advertised.listeners": "SSL://h:2"}, "not in listeners"),
    ({"listeners": "PLAINTEXT://:1,SSL://:2", "inter.broker.listener.name": "X"}, "not in listeners"),
    ({"listener.security.protocol.map": "A:TLS"}, "NAME:PROTOCOL"),
    ({"listener.name.ssl.num.partitions": "3"}, "cannot be set per listener"),
    ({"ssl.enabled.protocols": "TLSv1.1"}, "TLSv1.2"),
])
def test_bad_listener_settings(settings, message):
    with pytest.raises(ConfigError, match=message):
        BrokerConfig.from_mapping(settings)


def test_listener_prefixed_settings_win():
    c = BrokerConfig.from_mapping({"ssl.client.auth": "none", "listener.name.internal.ssl.client.auth": "required",
                                   "listener.name.external.scram-sha-256.sasl.jaas.config": "x required;"})
    from gregor.security.listeners import listener_setting

    assert listener_setting(c, "INTERNAL", "ssl.client.auth") == "required"
    assert listener_setting(c, "OTHER", "ssl.client.auth") == "none"
    assert listener_setting(c, "EXTERNAL", "scram-sha-256.sasl.jaas.config") == "x required;"


def test_jaas():
    (m,) = parse_jaas('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
                      'password="a\\"b" user_admin=bare;')
    assert m.flag == "required" and m.options == {"username": "admin", "password": 'a"b', "user_admin": "bare"}
    for bad in ("", "Module", "Module maybe a=1;", 'Module required a="1"'):
        with pytest.raises(JaasError):
            parse_jaas(bad)


def test_ssl_principal_mapping_rules_as_kafka():
    dn = "CN=client-1,OU=eng,O=acme"
    assert SslPrincipalMapper("DEFAULT").name(dn) == dn
    m = SslPrincipalMapper("RULE:^CN=(.*?),OU=(.*?),O=(.*)$/$1@$2/L, RULE:^.*$/other/, DEFAULT")
    assert m.name("CN=Client-1,OU=Eng,O=acme") == "client-1@eng"
    assert SslPrincipalMapper("RULE:^CN=([^,]+).*$/$1/U").name(dn) == "CLIENT-1"
    with pytest.raises(MappingRuleError):
        SslPrincipalMapper("RULE:^CN=x$/$1/").name(dn)  # no rule matches
    with pytest.raises(MappingRuleError):
        SslPrincipalMapper("RULE:nope")


def test_java_client_properties_as_librdkafka_takes_them():
    from gregor.security.librdkafka import ClientPropertiesError, librdkafka_config

    got = librdkafka_config({
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required username="u" '
                            'password="p";',
        "ssl.truststore.type": "PEM", "ssl.truststore.location": "/ca.pem", "ssl.keystore.type": "PEM",
        "ssl.keystore.location": "/me.pem", "ssl.key.password": "k"})
    assert got == {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "u",
                   "sasl.password": "p", "ssl.ca.location": "/ca.pem", "ssl.certificate.location": "/me.pem",
                   "ssl.key.location": "/me.pem", "ssl.key.password": "k"}
    oauth = librdkafka_config({"sasl.jaas.config": "org.apache.kafka.common.security.oauthbearer."
                               'OAuthBearerLoginModule required unsecuredLoginStringClaim_sub="carol";'})
    assert oauth == {"enable.sasl.oauthbearer.unsecure.jwt": "true", "sasl.oauthbearer.config": "principal=carol"}
    with pytest.raises(ClientPropertiesError):
        librdkafka_config({"ssl.truststore.type": "PKCS12", "ssl.truststore.location": "/x.p12"})


def test_certificate_subjects_as_java_writes_them(tmp_path):
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    from gregor.security.tls import certificate_subject

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COUNTRY_NAME, "DE"), x509.NameAttribute(NameOID.ORGANIZATION_NAME,
                                                                                        "acme, inc"),
                      x509.NameAttribute(NameOID.EMAIL_ADDRESS, "a@b.c"), x509.NameAttribute(NameOID.COMMON_NAME,
                                                                                              "client-1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(1).not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
            .sign(key, hashes.SHA256()))
    # Java: RFC 2253, most specific first, commas escaped, email by OID with its DER (IA5String, tag 0x16)
    assert certificate_subject(cert.public_bytes(serialization.Encoding.DER)) == \
        "CN=client-1,1.2.840.113549.1.9.1=#16056140622e63,O=acme\\, inc,C=DE"


def test_ipv6_hosts_as_java_writes_them():
    from types import SimpleNamespace

    from gregor.apis.authorization import host_of

    assert host_of(SimpleNamespace(client_host="::1")) == "0:0:0:0:0:0:0:1"
    assert host_of(SimpleNamespace(client_host="2001:db8::ff00:42:8329")) == "2001:db8:0:0:0:ff00:42:8329"
    assert host_of(SimpleNamespace(client_host="10.0.0.1")) == "10.0.0.1"
