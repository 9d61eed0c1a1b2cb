"""Exception types of the placement package: each says what was wrong and what to do."""


class PlacementError(Exception):
    """Base class of every error raised by ``placement``."""


class InvalidMembershipError(PlacementError, ValueError):
    """A member id or weight is not acceptable (empty, duplicate, negative, NaN...)."""


class InvalidConfigError(PlacementError, ValueError):
    """Partition count, replica count, seed or capacity factor is out of range."""


class NoOwnerError(PlacementError, LookupError):
    """The membership has no member with positive weight, so nothing can own a partition."""


class SnapshotError(PlacementError, ValueError):
    """A serialised placement snapshot is malformed, from another format, or inconsistent."""
