"""A decoder's routing in C (swarmlog.schema._route): built where it can be, and the same as the
Python path (``Decoder._route``, ``Decoder._route_by_envelope``) on every message — the same Route
or the same error — well-formed or mangled; the Python path is asked only for what C leaves to it.
"""

from __future__ import annotations

import random
import shutil
import sysconfig
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from swarmlog.log.protocol import H_AGENT, H_STEP, H_TO, H_TYPE, H_VERSION, Route
from swarmlog.schema import codec
from swarmlog.schema.codec import Decoder, Encoder
from swarmlog.schema.registry import SchemaRegistry

from ..conftest import cannot_run_here

_native = codec._native_route


class _Msg:
    def __init__(self, value: Any, headers: Any, offset: int = 7) -> None:
        self._value, self._headers, self._offset = value, headers, offset

    def value(self) -> Any:
        return self._value

    def headers(self) -> Any:
        return self._headers

    def offset(self) -> int:
        return self._offset


@pytest.fixture
def native() -> Any:
    if _native is None:
        cannot_run_here("swarmlog.schema._route is not built here")
    return _native


def _outcome(fn: Callable[[Any], Route], msg: Any) -> tuple[str, Any]:
    try:
        r = fn(msg)
    except Exception as exc:  # noqa: BLE001 - compared, type and text
        return ("error", (type(exc), str(exc)))
    assert type(r) is Route
    return ("route", tuple(r))


def _routers(registry: SchemaRegistry, native: Any) -> tuple[Decoder, Any, list[str]]:
    """A decoder, a C router over its tables whose hand-overs to the Python path are counted."""
    d = Decoder(registry)
    handed: list[str] = []

    def checked(m: Any) -> Route:
        handed.append("route")
        return d._route(m)

    def by_envelope(m: Any) -> Route:
        handed.append("envelope")
        return d._route_by_envelope(m)

    r = native.Router(d._kinds, checked, by_envelope, Route, (H_TYPE, H_VERSION, H_AGENT, H_TO, H_STEP))
    return d, r, handed


def _events(registry: SchemaRegistry) -> Iterator[tuple[bytes, list[tuple[str, bytes]]]]:
    """Values and the headers swarmlog's writers give them: short and long strings, with and
    without a recipient, runtime outputs with their step header, names beyond ASCII."""
    enc = Encoder(registry.latest("agent.message"))
    payload = {"kind": "hop", "body": "{}", "urgency": "normal"}
    for agent, to, event_id, step in [
        ("s0", "s4", "s0@12#0", b"12"),
        ("s0", None, "s0@3#1", b"3"),
        ("a" * 70, "b" * 200, "a" * 70 + "@123456789#4", b"123456789"),
        ("agënt", "tö", "agënt@0#0", b"0"),
        ("s3", "s4", "s3@" + "9" * 25 + "#2", b"9" * 25),  # beyond a long long: Python's own int parser
        ("s3", "s4", "s3@007#2", b"007"),
        ("s1", "s2", "s1-plain-id", None),
        ("s1", "s2", "s1@state40", None),
    ]:
        value = enc.encode_event(event_id, "run-1", agent, to, [1, 2], payload)
        headers = enc.headers(agent.encode(), None if to is None else to.encode())
        yield value, list(headers)
        if step is not None:
            yield value, [*headers, (H_STEP, step)]


def _mangled(value: bytes, headers: list[tuple[str, bytes]], rng: random.Random) -> Iterator[_Msg]:
    yield _Msg(value, headers)
    yield _Msg(value, None)
    yield _Msg(value, [])
    yield _Msg(None, headers)
    yield _Msg(value[:1], headers)
    for cut in range(len(value)):
        yield _Msg(value[:cut], headers)
    for _ in range(60):
        b = bytearray(value)
        for _ in range(rng.randint(1, 3)):
            b[rng.randrange(2, min(len(b), 40))] = rng.randrange(256)
        yield _Msg(bytes(b), headers)
    if headers:
        yield _Msg(value, headers[::-1])
        yield _Msg(value, headers[:-1])
        yield _Msg(value, [*headers, ("sl.other", b"x")])
        yield _Msg(value, [*headers, (H_STEP, b"99")])
        yield _Msg(value, [(k, v + b"x") if k == H_AGENT else (k, v) for k, v in headers])
        yield _Msg(value, [(k, v) for k, v in headers if k != H_TO])
        yield _Msg(value, [[k, v] for k, v in headers])  # lists, not tuples
        yield _Msg(value, [(k, bytearray(v)) for k, v in headers])
        yield _Msg(value, [(k, None) for k, _ in headers])
        yield _Msg(value, tuple(headers))


def test_the_route_module_is_built_wherever_a_compiler_was_there_to_build_it(registry: SchemaRegistry) -> None:
    cc = (sysconfig.get_config_var("CC") or "").split()
    if not cc or shutil.which(cc[0]) is None:
        cannot_run_here("no C compiler: the Python path routes")
    assert _native is not None
    d = Decoder(registry)
    assert getattr(d.route, "__self__", None).__class__ is _native.Router  # the C router's, not the Python path
    assert getattr(d.envelope_route, "__self__", None).__class__ is _native.Router


def test_c_and_python_give_the_same_route_or_the_same_error_on_every_message(registry: SchemaRegistry,
                                                                              native: Any) -> None:
    rng = random.Random(14)
    d, r, _ = _routers(registry, native)
    seen = {"route": 0, "error": 0}
    for value, headers in _events(registry):
        for m in _mangled(value, headers, rng):
            for c_path, py_path in ((r.route, d._route), (r.envelope_route, d._route_by_envelope)):
                want = _outcome(py_path, m)
                assert _outcome(c_path, m) == want, (m.value(), m.headers())
                seen[want[0]] += 1
    assert seen["route"] > 500 and seen["error"] > 50  # both kinds of outcome were compared


def test_the_common_case_is_routed_in_c_and_only_the_rest_handed_to_python(registry: SchemaRegistry,
                                                                            native: Any) -> None:
    d, r, handed = _routers(registry, native)
    events = list(_events(registry))
    r.route(_Msg(*events[0]))
    assert handed == ["route"]  # a fingerprint not seen yet: Python learns its kind ...
    handed.clear()
    for value, headers in events:
        r.route(_Msg(value, headers))
        r.envelope_route(_Msg(value, headers))
    # ... and from then on C routes swarmlog's own messages, all but a digest-style id's step header.
    assert handed == []
    assert r.route(_Msg(events[0][0], events[0][1])) == Route("agent.message", "s0", "s4", None)
    assert r.route(_Msg(*events[1])) == Route("agent.message", "s0", "s4", 12)
    r.route(_Msg(events[0][0], events[0][1][::-1]))  # headers in another order: Python checks each
    r.envelope_route(_Msg(b"not avro", None))
    assert handed == ["route", "envelope"]


def test_a_lying_header_is_the_python_paths_error(registry: SchemaRegistry, native: Any) -> None:
    from swarmlog.errors import RoutingHeaderMismatch

    d = Decoder(registry)
    value, headers = next(_events(registry))
    lie = [(k, b"s9") if k == H_AGENT else (k, v) for k, v in headers]
    d.route(_Msg(value, headers))  # its fingerprint's kind learnt: the next one is C's to route
    with pytest.raises(RoutingHeaderMismatch) as caught:
        d.route(_Msg(value, lie, offset=41))
    assert caught.value.offset == 41 and caught.value.header == H_AGENT
    # The envelope alone routes it: a header cannot steer that reader.
    assert d.envelope_route(_Msg(value, lie)) == Route("agent.message", "s0", "s4", None)


def test_the_router_keeps_nothing_alive(registry: SchemaRegistry, native: Any) -> None:
    import gc
    import weakref

    d = Decoder(registry)
    ref = weakref.ref(d)
    value, headers = next(_events(registry))
    for _ in range(3):
        d.route(_Msg(value, headers))
    del d
    gc.collect()
    assert ref() is None  # decoder -> router -> the decoder's Python paths: a cycle the collector frees


def test_bad_arguments_are_refused_at_construction(native: Any) -> None:
    names = (H_TYPE, H_VERSION, H_AGENT, H_TO, H_STEP)
    with pytest.raises(TypeError):
        native.Router([], print, print, Route, names)
    with pytest.raises(TypeError, match="tuple subclass"):
        native.Router({}, print, print, dict, names)
    with pytest.raises(TypeError):
        native.Router({}, print, print, Route, names[:4])
