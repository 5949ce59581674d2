"""An SDK's credential for a handler: the live environment's, live; a placeholder on replay.

``ctx.credential(name)`` is how a handler hands an SDK built on a recorded client its key::

    gpt = openai.OpenAI(api_key=ctx.credential("OPENAI_API_KEY"), http_client=ctx.http())
    claude = anthropic.Anthropic(api_key=ctx.credential("ANTHROPIC_API_KEY"), http_client=ctx.http())

Why a ``ctx`` method, and not the SDK's own read of the environment: the official SDKs refuse to be
built without a key (``openai.OpenAI()``: "Missing credentials"; ``anthropic.Anthropic`` at its first
request), so a handler that lets the SDK read ``OPENAI_API_KEY`` replays only where the live key is
set — a replay in CI, on a laptop or in the chart's replay Job would need the production secret to
serve answers that are already in the log. The SDK's read cannot be changed per step (the
environment is the process's, shared by the agents of a ``swarmlog run``, which are threads); the
argument the handler passes can.

Why it is not recorded, and what that asks of the handler: the value only reaches the request's
credential headers, which are written ``<redacted>`` and never compared (:mod:`swarmlog.llm.compare`),
so live and replay may differ in it without changing what was asked. Recording it would put the
secret in the log. A handler must therefore not put it in its state or its messages: a replay
would see the placeholder there, and report the step as diverged.

Why the values are also scrubbed: every value handed out is given to the agent's recorded HTTP
(:mod:`swarmlog.llm.http`), which removes it from everything it records — URL, bodies, error text
— as it does a credential header's value. A tool that takes its key in a JSON body (some search APIs
do) leaves it in neither the log nor the mirror; and since the placeholder is scrubbed on replay as
the key was live, the two bodies compare equal.

Live, a variable that is not set (or empty) is a :class:`CredentialMissing`, naming it: the step fails
as any handler error does (recorded as ``handler.failed``), and the warning says what to set where.
Everywhere else a step runs — a replay, an agent rebuilding from the log after a restart, the debugger, the
simulator (which never calls the world) — it is the placeholder. So a step that failed live for want of the
variable does not fail on replay: replay reports it as diverged there (the live run recorded a failure where
the replayed step goes on), which is what happened — the live environment was incomplete.
"""

from __future__ import annotations

import logging
import os
import re

from ..errors import ConfigurationError
from .errors import CredentialMissing

__all__ = ["placeholder", "read_credential"]

logger = logging.getLogger(__name__)

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def placeholder(variable: str) -> str:
    """What ``ctx.credential(variable)`` gives on replay: never sent (replay sends nothing), long enough
    to be scrubbed like a key, and naming what it stands for should it ever show up."""
    return f"swarmlog-replay-placeholder-for-{variable}"


def read_credential(variable: str, *, agent: str, live: bool) -> str:
    """``variable``'s value from the environment when ``live``, else :func:`placeholder` (see the module).

    The read is the caller's to allow (the guard refuses a handler's own ``os.environ``)."""
    if not isinstance(variable, str) or not _NAME.match(variable):
        raise ConfigurationError(f"ctx.credential({variable!r}): name an environment variable, such as "
                                 f"'OPENAI_API_KEY'")
    if not live:
        return placeholder(variable)
    value = os.environ.get(variable)
    if not value:
        raise CredentialMissing(variable=variable, agent=agent)
    return value
