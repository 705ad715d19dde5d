"""A time limit on rendering a chat template: Jinja runs whatever loops a template's
author (or a client's messages through it) makes it run."""

from __future__ import annotations

import contextlib
import signal
import threading


class RenderTimeout(BaseException):
    """Raised inside a template render that ran past its budget.

    A BaseException, so that `except Exception` in template helpers cannot swallow it.
    """


@contextlib.contextmanager
def time_limit(seconds: float):
    """Interrupt pure-Python work (a Jinja render) after `seconds`, on the main thread only.

    The worker prepares prompts on its main thread for this reason: SIGALRM is the
    one way to stop a runaway loop inside a compiled template without killing the process.
    """
    if seconds <= 0 or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expired(signum, frame):
        raise RenderTimeout()

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
