"""Certificates for the security tests, made with ``cryptography``: a CA, a server certificate for
127.0.0.1 and localhost, client certificates, as PEM files (the key encrypted or not) and PKCS12
stores, as a Kafka operator would have them."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from ipaddress import IPv4Address
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import NameOID

KEY_PASSWORD = "key-secret"
STORE_PASSWORD = "store-secret"


@dataclass
class Pki:
    dir: Path
    ca: Path  # the CA certificate (PEM): the trust store
    server: Path  # server key + chain, one unencrypted PEM
    server_encrypted: Path  # the same with the key encrypted with KEY_PASSWORD
    server_p12: Path  # PKCS12 store (STORE_PASSWORD)
    ca_p12: Path  # the CA as a PKCS12 trust store (STORE_PASSWORD)
    client_cert: Path  # a client certificate (CN=client-1,OU=eng,O=acme) and its key
    client_key: Path
    other_ca: Path  # a CA that signed nothing here


def _name(cn: str, ou: str | None = None, org: str = "acme") -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org)]
    if ou:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, ou))
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, cn))
    return x509.Name(attrs)


def _cert(subject: x509.Name, key: ec.EllipticCurvePrivateKey, issuer: x509.Name,
          issuer_key: ec.EllipticCurvePrivateKey, ca: bool = False, san: list[x509.GeneralName] | None = None
          ) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    b = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(key.public_key())
         .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
         .not_valid_after(now + datetime.timedelta(days=30))
         .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if san:
        b = b.add_extension(x509.SubjectAlternativeName(san), critical=False)
    return b.sign(issuer_key, hashes.SHA256())


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _key(key: ec.EllipticCurvePrivateKey, password: str | None = None) -> bytes:
    enc = (serialization.BestAvailableEncryption(password.encode()) if password else serialization.NoEncryption())
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, enc)


def make_pki(directory: Path) -> Pki:
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("Test CA")
    ca = _cert(ca_name, ca_key, ca_name, ca_key, ca=True)
    server_key = ec.generate_private_key(ec.SECP256R1())
    server = _cert(_name("localhost", "brokers"), server_key, ca_name, ca_key,
                   san=[x509.DNSName("localhost"), x509.IPAddress(IPv4Address("127.0.0.1"))])
    client_key = ec.generate_private_key(ec.SECP256R1())
    client = _cert(_name("client-1", "eng"), client_key, ca_name, ca_key)
    other_key = ec.generate_private_key(ec.SECP256R1())
    other = _cert(_name("Other CA"), other_key, _name("Other CA"), other_key, ca=True)
    p = Pki(directory, directory / "ca.pem", directory / "server.pem", directory / "server-encrypted.pem",
            directory / "server.p12", directory / "ca.p12", directory / "client.pem", directory / "client.key",
            directory / "other-ca.pem")
    p.ca.write_bytes(_pem(ca))
    p.server.write_bytes(_key(server_key) + _pem(server) + _pem(ca))
    p.server_encrypted.write_bytes(_key(server_key, KEY_PASSWORD) + _pem(server) + _pem(ca))
    p.server_p12.write_bytes(pkcs12.serialize_key_and_certificates(
        b"server", server_key, server, [ca], serialization.BestAvailableEncryption(STORE_PASSWORD.encode())))
    p.ca_p12.write_bytes(pkcs12.serialize_key_and_certificates(
        b"ca", None, None, [ca], serialization.BestAvailableEncryption(STORE_PASSWORD.encode())))
    p.client_cert.write_bytes(_pem(client))
    p.client_key.write_bytes(_key(client_key))
    p.other_ca.write_bytes(_pem(other))
    return p
