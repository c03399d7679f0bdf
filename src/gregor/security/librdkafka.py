"""Kafka's Java client security properties as librdkafka takes them, for the parts of Gregor that
connect with confluent-kafka (the Spark connector, the lag report): Spark users write
``kafka.sasl.jaas.config`` and ``kafka.ssl.truststore.location`` as for Spark's own Kafka source.

- ``sasl.jaas.config`` (PLAIN or SCRAM login module): its ``username``/``password`` become
  ``sasl.username``/``sasl.password``; an OAUTHBEARER entry's unsecured-JWT options become
  librdkafka's unsecured JWT (development only);
- ``ssl.truststore.location`` (PEM) becomes ``ssl.ca.location``; a PEM key store
  (``ssl.keystore.type=PEM``) becomes ``ssl.certificate.location`` and ``ssl.key.location``
  (PKCS12 key stores keep their names, which librdkafka shares);
- ``ssl.truststore.type``, ``ssl.keystore.type`` are dropped; the rest passes through (librdkafka
  shares ``security.protocol``, ``sasl.mechanism``, ``ssl.key.password``,
  ``ssl.keystore.password``, ``ssl.endpoint.identification.algorithm``)."""

from __future__ import annotations

from collections.abc import Mapping

from gregor.security.jaas import OAUTHBEARER_MODULE, JaasError, parse_jaas


class ClientPropertiesError(ValueError):
    pass


def librdkafka_config(props: Mapping[str, str]) -> dict[str, str]:
    out = dict(props)
    jaas = out.pop("sasl.jaas.config", None)
    if jaas:
        try:
            modules = parse_jaas(jaas)
        except JaasError as e:
            raise ClientPropertiesError(str(e)) from None
        for m in modules:
            if m.name == OAUTHBEARER_MODULE:  # Kafka's unsecured login options
                out["enable.sasl.oauthbearer.unsecure.jwt"] = "true"
                config = [f"principal={m.options.get('unsecuredLoginStringClaim_sub', '')}"]
                if "unsecuredLoginLifetimeSeconds" in m.options:
                    config.append(f"lifeSeconds={m.options['unsecuredLoginLifetimeSeconds']}")
                out["sasl.oauthbearer.config"] = " ".join(config)
            elif "username" in m.options:
                out["sasl.username"] = m.options["username"]
                out["sasl.password"] = m.options.get("password", "")
    store_type = out.pop("ssl.truststore.type", "PEM").upper()
    truststore = out.pop("ssl.truststore.location", None)
    if truststore:
        if store_type != "PEM":
            raise ClientPropertiesError("ssl.truststore.type must be PEM here (librdkafka reads PEM CA files)")
        out["ssl.ca.location"] = truststore
    if out.pop("ssl.keystore.type", "").upper() == "PEM" and "ssl.keystore.location" in out:
        pem = out.pop("ssl.keystore.location")
        out["ssl.certificate.location"] = pem
        out["ssl.key.location"] = pem
    out.pop("ssl.truststore.password", None)
    return out
