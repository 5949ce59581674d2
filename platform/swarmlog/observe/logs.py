"""What a command line's process writes to stderr: its log lines, chosen by ``-v``.

swarmlog's warnings always (a service's INFO too: what an operator reads of a pod); with ``-v`` its
progress (INFO) and librdkafka's own log lines; with ``-vv`` everything (DEBUG). Without ``-v`` no
librdkafka line is shown: what matters of them comes back as swarmlog's typed errors. A program that
configured logging itself (a test, a host embedding swarmlog) keeps its own.
"""

from __future__ import annotations

import logging
import sys

__all__ = ["VERBOSE_FLAGS", "VERBOSE_HELP", "configure_logging", "leading_verbosity"]

VERBOSE_FLAGS = {"-v": 1, "--verbose": 1, "-vv": 2, "-vvv": 3}
VERBOSE_HELP = "-v: progress and librdkafka's log lines on stderr; -vv: debug"
_handler: logging.Handler | None = None


def leading_verbosity(argv: list[str]) -> tuple[int, list[str]]:
    """``-v``/``-vv``/``--verbose`` before the command (``swarmlog -v dev up``), and the rest."""
    n = 0
    while argv and argv[0] in VERBOSE_FLAGS:
        n += VERBOSE_FLAGS[argv[0]]
        argv = argv[1:]
    return n, argv


def configure_logging(verbosity: int, *, service: bool = False) -> None:
    """What reaches stderr: warnings (a service's INFO too); ``-v`` INFO and librdkafka's lines; ``-vv`` DEBUG.

    A service (an agent's or the sink's pod, ``replay --publish``'s Job) logs its lifecycle without ``-v``:
    what an operator reads. In a program that configured logging itself (tests, a host), that one wins.
    """
    from ..kafka.config import LIBRDKAFKA_LOGGER

    global _handler
    root = logging.getLogger()
    if any(h is not _handler for h in root.handlers):
        return
    if _handler is None:
        _handler = logging.StreamHandler(sys.stderr)
        _handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root.addHandler(_handler)
    quiet = logging.INFO if service else logging.WARNING
    level = quiet if verbosity <= 0 else logging.INFO if verbosity == 1 else logging.DEBUG
    root.setLevel(logging.WARNING if verbosity <= 0 else level)
    for name in ("swarmlog", "swarmlog_connectors"):
        logging.getLogger(name).setLevel(level)
    # librdkafka's own lines (connection attempts, retries) are for debugging swarmlog's
    # Kafka side; what an operator must know of them comes back as a typed error.
    logging.getLogger(LIBRDKAFKA_LOGGER).setLevel(logging.CRITICAL + 1 if verbosity <= 0 else level)
