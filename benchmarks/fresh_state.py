"""Where the nodes a benchmark starts keep their state: a directory of this run's.

Nodes keep their members files and witness records under ``$PLACEMENT_STATE_HOME`` (by default
the user's home). A benchmark's figures are those of a first start, as they always were: a run
must neither find the records of the run before (its joiners would take them for an earlier
cluster's and start as members that forgot their promises) nor leave its own in the user's
home. A ``PLACEMENT_STATE_HOME`` the user set is kept."""

from __future__ import annotations

import os
import tempfile


def fresh_state_home() -> str:
    """Set ``PLACEMENT_STATE_HOME`` (inherited by the processes started after) to a new
    directory unless it is set; the directory in use."""
    return os.environ.setdefault("PLACEMENT_STATE_HOME", tempfile.mkdtemp(prefix="placement-bench-state-"))
