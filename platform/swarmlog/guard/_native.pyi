"""Type stub of the C extension swarmlog.guard._native (_native.c): the guard's profile hook, its common path."""

from collections.abc import Callable
from typing import Any

_Table = dict[Any, Any]  # the same dict objects as the Python hook's, of their own types

def bind(hook: Callable[..., object], functions: _Table, by_type: _Table, codes: _Table, /) -> None: ...
def bound() -> tuple[Callable[..., object], _Table, _Table, _Table] | None: ...
def install() -> None: ...
