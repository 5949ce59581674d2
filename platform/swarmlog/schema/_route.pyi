"""Type stub of the C extension swarmlog.schema._route (_route.c): a decoder's routing, its common path."""

from collections.abc import Callable
from typing import Any

from ..log.protocol import Route

class Router:
    def __init__(self, kinds: dict[bytes, tuple[str, bytes, bytes]], route: Callable[[Any], Route],
                 envelope_route: Callable[[Any], Route], route_type: type[Route],
                 header_names: tuple[str, str, str, str, str]) -> None: ...
    def route(self, msg: Any, /) -> Route: ...
    def envelope_route(self, msg: Any, /) -> Route: ...
