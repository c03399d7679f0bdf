"""TLS contexts from Kafka's ``ssl.*`` settings (Python's ``ssl``; ``cryptography`` reads PKCS12
stores and decrypts keys), and the principal of a client certificate.

Server side (a listener of protocol SSL or SASL_SSL): the key store holds the broker's private key
and certificate chain, ``ssl.keystore.type`` PEM (``ssl.keystore.location``: one PEM file with the
key and the chain, the key encrypted with ``ssl.key.password`` or not; or inline with
``ssl.keystore.key`` and ``ssl.keystore.certificate.chain``) or PKCS12 (``ssl.keystore.password``).
The trust store (PEM or PKCS12, a file or ``ssl.truststore.certificates``) holds the CAs client
certificates are verified against when ``ssl.client.auth`` is requested or required.
``ssl.enabled.protocols``: TLSv1.2 and/or TLSv1.3; ``ssl.cipher.suites``: OpenSSL names for TLS 1.2.

Client side (a broker connecting to another, the command-line tools): the trust store verifies the
server (the system's CAs without one), ``ssl.endpoint.identification.algorithm=https`` checks the
host name, the key store is presented when the server asks for a client certificate.

Every problem is a TlsConfigError naming the key, raised when the context is built (at start)."""

from __future__ import annotations

import contextlib
import os
import ssl
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

Setting = Callable[[str], Any]  # key -> value (None: not set); the listener prefix already applied


class TlsConfigError(ValueError):
    pass


def _read(path: str, key: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as e:
        raise TlsConfigError(f"{key}={path}: cannot read it: {e.strerror}") from None


def _pkcs12(data: bytes, password: str | None, key: str) -> tuple[Any, Any, list[Any]]:
    from cryptography.hazmat.primitives.serialization import pkcs12

    try:
        return pkcs12.load_key_and_certificates(data, password.encode() if password else None)
    except ValueError as e:
        raise TlsConfigError(f"{key}: not a PKCS12 store this password opens ({e})") from None


def _pem_key_and_chain(setting: Setting) -> bytes | None:
    """The key store as one unencrypted PEM (private key, then the chain), or None when none is
    configured."""
    from cryptography.hazmat.primitives import serialization

    store_type = setting("ssl.keystore.type")
    location = setting("ssl.keystore.location")
    inline_key, inline_chain = setting("ssl.keystore.key"), setting("ssl.keystore.certificate.chain")
    key_password = setting("ssl.key.password")
    if location and (inline_key or inline_chain):
        raise TlsConfigError("set ssl.keystore.location or ssl.keystore.key with ssl.keystore.certificate.chain, "
                             "not both")
    if not location and not inline_key and not inline_chain:
        return None
    if store_type == "JKS":
        if location:
            raise TlsConfigError("ssl.keystore.type=JKS cannot be read by Gregor: convert the key store "
                                 "(keytool -importkeystore -deststoretype PKCS12) or use PEM files, and set "
                                 "ssl.keystore.type")
        store_type = "PEM"  # inline keys are PEM whatever the type says
    if store_type == "PKCS12":
        key, cert, extra = _pkcs12(_read(location, "ssl.keystore.location"),
                                   setting("ssl.keystore.password"), "ssl.keystore.location")
        if key is None or cert is None:
            raise TlsConfigError("ssl.keystore.location: the PKCS12 store holds no private key with a certificate")
        certs = [cert, *extra]
    else:
        if location:
            pem = _read(location, "ssl.keystore.location")
            key_pem, chain_pem = pem, pem
        else:
            if not inline_key or not inline_chain:
                raise TlsConfigError("ssl.keystore.key and ssl.keystore.certificate.chain go together")
            key_pem, chain_pem = inline_key.encode(), inline_chain.encode()
        from cryptography import x509

        try:
            key = serialization.load_pem_private_key(
                key_pem, key_password.encode() if key_password else None)
        except TypeError:
            raise TlsConfigError("the private key is encrypted: set ssl.key.password") from None
        except ValueError as e:
            raise TlsConfigError(f"the key store's private key cannot be read (wrong ssl.key.password, or no "
                                 f"PEM private key): {e}") from None
        try:
            certs = x509.load_pem_x509_certificates(chain_pem)
        except ValueError:
            raise TlsConfigError("the key store holds no PEM certificate") from None
    out = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    return out + b"".join(c.public_bytes(serialization.Encoding.PEM) for c in certs)


def _trusted(setting: Setting) -> bytes | None:
    """The trust store's certificates as PEM, or None when none is configured."""
    from cryptography.hazmat.primitives import serialization

    location, inline = setting("ssl.truststore.location"), setting("ssl.truststore.certificates")
    if location and inline:
        raise TlsConfigError("set ssl.truststore.location or ssl.truststore.certificates, not both")
    if inline:
        return str(inline).encode()
    if not location:
        return None
    store_type = setting("ssl.truststore.type")
    if store_type == "JKS":
        raise TlsConfigError("ssl.truststore.type=JKS cannot be read by Gregor: use PEM or PKCS12 and set "
                             "ssl.truststore.type")
    data = _read(location, "ssl.truststore.location")
    if store_type == "PKCS12":
        key, cert, extra = _pkcs12(data, setting("ssl.truststore.password"), "ssl.truststore.location")
        certs = [c for c in (cert, *extra) if c is not None]
        return b"".join(c.public_bytes(serialization.Encoding.PEM) for c in certs)
    return data


def _load_key_store(ctx: ssl.SSLContext, pem: bytes) -> None:
    # load_cert_chain reads files only: a private temporary file, removed at once
    fd, path = tempfile.mkstemp(prefix="gregor-keystore-", suffix=".pem")
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(pem)
        try:
            ctx.load_cert_chain(path)
        except ssl.SSLError as e:
            raise TlsConfigError(f"the key store's key does not match its certificate: {e}") from None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)


def _versions(ctx: ssl.SSLContext, setting: Setting) -> None:
    enabled = setting("ssl.enabled.protocols") or ("TLSv1.2", "TLSv1.3")
    versions = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
    chosen = sorted(versions[v] for v in enabled)
    ctx.minimum_version, ctx.maximum_version = chosen[0], chosen[-1]
    ciphers = setting("ssl.cipher.suites")
    if ciphers:
        try:
            ctx.set_ciphers(":".join(ciphers))
        except ssl.SSLError:
            raise TlsConfigError(f"ssl.cipher.suites: none of {', '.join(ciphers)} is known to OpenSSL") from None


def server_context(setting: Setting) -> ssl.SSLContext:
    """The context of a TLS listener (``setting`` reads the listener's keys)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _versions(ctx, setting)
    pem = _pem_key_and_chain(setting)
    if pem is None:
        raise TlsConfigError("a TLS listener needs a key store: set ssl.keystore.location (PEM or PKCS12, with "
                             "ssl.keystore.type) or ssl.keystore.key and ssl.keystore.certificate.chain")
    _load_key_store(ctx, pem)
    auth = setting("ssl.client.auth") or "none"
    trusted = _trusted(setting)
    if auth != "none":
        if trusted is None:
            raise TlsConfigError(f"ssl.client.auth={auth} needs a trust store to verify client certificates: set "
                                 "ssl.truststore.location or ssl.truststore.certificates")
        ctx.verify_mode = ssl.CERT_REQUIRED if auth == "required" else ssl.CERT_OPTIONAL
        try:
            ctx.load_verify_locations(cadata=trusted.decode())
        except (ssl.SSLError, ValueError) as e:
            raise TlsConfigError(f"the trust store holds no usable certificate: {e}") from None
    return ctx


def client_context(setting: Setting) -> ssl.SSLContext:
    """The context a client (a broker connecting to another, a tool) opens TLS connections with."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _versions(ctx, setting)
    trusted = _trusted(setting)
    if trusted is None:
        ctx.load_default_certs()
    else:
        try:
            ctx.load_verify_locations(cadata=trusted.decode())
        except (ssl.SSLError, ValueError) as e:
            raise TlsConfigError(f"the trust store holds no usable certificate: {e}") from None
    ctx.check_hostname = (setting("ssl.endpoint.identification.algorithm") or "") .lower() == "https"
    ctx.verify_mode = ssl.CERT_REQUIRED
    pem = _pem_key_and_chain(setting)
    if pem is not None:
        _load_key_store(ctx, pem)
    return ctx


# the attribute types Java's X500Principal.getName() (RFC 2253) writes by keyword; any other is
# written as its OID and the hex of its DER value (``1.2.840.113549.1.9.1=#16...``)
_RFC2253_KEYWORDS = {"2.5.4.3": "CN", "2.5.4.6": "C", "2.5.4.7": "L", "2.5.4.8": "ST", "2.5.4.10": "O",
                     "2.5.4.11": "OU", "2.5.4.9": "STREET", "0.9.2342.19200300.100.1.25": "DC",
                     "0.9.2342.19200300.100.1.1": "UID"}


def _escape(value: str) -> str:
    out = []
    for i, ch in enumerate(value):
        if ch in ',+"\\<>;' or (ch == "#" and i == 0) or (ch == " " and i in (0, len(value) - 1)):
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)


def _der_value(attr: Any) -> bytes:
    """The DER TLV of an attribute's value: its ASN.1 string type's tag, length, bytes."""
    tag = int(attr._type.value)
    value = attr.value
    raw = value.encode("utf-16-be") if tag == 30 else value.encode("utf-8") if isinstance(value, str) else value
    n = len(raw)
    length = bytes([n]) if n < 128 else bytes([0x80 | ((n.bit_length() + 7) // 8)]) + n.to_bytes(
        (n.bit_length() + 7) // 8, "big")
    return bytes([tag]) + length + raw


def certificate_subject(der: bytes) -> str:
    """The subject distinguished name of a DER certificate as Java's X500Principal.getName()
    writes it, which is what Kafka's principals, ``super.users`` and mapping rules are written
    against (RFC 2253: the most specific RDN first, ``CN=client,OU=eng,O=acme``; types without a
    keyword as ``OID=#<hex of the DER value>``)."""
    from cryptography import x509

    rdns = []
    for rdn in reversed(list(x509.load_der_x509_certificate(der).subject.rdns)):
        parts = []
        for attr in rdn:
            oid = attr.oid.dotted_string
            keyword = _RFC2253_KEYWORDS.get(oid)
            if keyword is not None and isinstance(attr.value, str):
                parts.append(f"{keyword}={_escape(attr.value)}")
            else:
                parts.append(f"{oid}=#{_der_value(attr).hex()}")
        rdns.append("+".join(parts))
    return ",".join(rdns)
