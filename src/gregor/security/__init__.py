"""Security: listeners and their protocols, TLS, SASL, principals (docs/security.md).

Pure of the broker's internals (it imports config and protocol only), so the broker, its
inter-broker clients and the command-line tools share it."""
