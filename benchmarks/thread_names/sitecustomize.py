"""Measurement aid only (``benchmarks/bench_wakeups.py`` puts this directory on PYTHONPATH):
give each Python thread an OS name (``/proc/PID/task/TID/comm``, via prctl PR_SET_NAME) so the
benchmark can tell the membership thread from others. Python 3.11 does not set it itself."""
import ctypes
import threading

_libc = ctypes.CDLL(None, use_errno=True)
_orig = threading.Thread._bootstrap_inner  # type: ignore[attr-defined]


def _named(self):
    try:
        name = self.name.replace("placement-", "")[:15].encode()
        _libc.prctl(15, ctypes.c_char_p(name), 0, 0, 0)  # PR_SET_NAME
    except Exception:
        pass
    _orig(self)


threading.Thread._bootstrap_inner = _named  # type: ignore[attr-defined]
