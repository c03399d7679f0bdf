"""Partition assignment for the consumer group protocol (KIP-848), pure: the server-side assignors
and operator steering. The group coordinator computes target assignments with them, and the CLI
(``gregor groups assign --dry-run``) computes the same target from what ConsumerGroupDescribe
shows, so the two never disagree. Nothing here touches the network or a broker's state."""
