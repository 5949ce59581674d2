"""Replay tokens (:class:`TokenError`): a token that cannot be used. A token that does not match its log is
no error: ``verify`` reports it."""

from __future__ import annotations

from ._base import SwarmlogError

__all__ = ["TokenError", "InvalidToken", "SignatureUnchecked"]


class TokenError(SwarmlogError):
    """A replay token cannot be used (a token that does not match is no error: ``verify`` reports it)."""


class InvalidToken(TokenError):
    """A replay token that cannot be used: unreadable, of an unknown version, malformed, or badly signed."""

    def __init__(self, *, source: str, problem: str) -> None:
        self.source = source
        self.problem = problem
        super().__init__(f"replay token {source}: {problem}")


class SignatureUnchecked(InvalidToken):
    """A signed token, and no key to check its signature with: accepting it would accept a forgery."""

    def __init__(self, *, source: str) -> None:
        super().__init__(source=source, problem=(
            "it is signed, but SWARMLOG_TOKEN_KEY is not set, so its signature cannot be checked; "
            "a token whose contents were altered with the log would pass. Set SWARMLOG_TOKEN_KEY to the key "
            "that signed it, or pass --unchecked-signature to check the contents alone (which proves "
            "nothing about who made the token)"))
