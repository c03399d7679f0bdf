"""Share groups (KIP-932): the state of each share-partition (which records are acquired by whom,
acknowledged, archived, how often delivered) and, later, the share coordinator that persists it."""
