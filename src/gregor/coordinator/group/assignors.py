"""The server-side assignors live in :mod:`gregor.assignment.assignors` (shared with the CLI)."""

from gregor.assignment.assignors import (  # noqa: F401 - re-exported
    ASSIGNORS,
    Assignment,
    Assignor,
    GroupSpec,
    MemberSpec,
    RangeAssignor,
    TopicId,
    UniformAssignor,
    assignor,
)
