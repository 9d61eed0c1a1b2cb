"""A work sink that freezes itself at an exact point of a job, for a test to ``kill -9`` it there.

    python tests/sink_stop_after.py N <python -m placement.service.work_sink flags>

It is ``placement.service.work_sink`` except that when a batch arrives after it has taken N batches, it stops
itself with SIGSTOP *before* taking that batch (no journal line, no answer). The test sees the
stop (``waitpid(WUNTRACED)``) and sends SIGKILL: a node killed mid-delivery, at a point chosen by
the test rather than by a sleep, with exactly N batches acknowledged.
"""

import os
import signal
import sys

from placement.service import work_sink as sink


def main() -> int:
    after = int(sys.argv[1])
    accept = sink.WorkLog.accept

    def accept_or_freeze(self, batch):
        if self.batches >= after:
            os.kill(os.getpid(), signal.SIGSTOP)
        return accept(self, batch)

    sink.WorkLog.accept = accept_or_freeze  # type: ignore[method-assign]  # the patch is the point
    return sink.main(sys.argv[2:])


if __name__ == "__main__":
    raise SystemExit(main())
