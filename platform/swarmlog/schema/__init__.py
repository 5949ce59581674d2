"""Event schemas: every event type in every version, the wire codec, and their evolution.

``registry`` loads ``schemas/<type>/v<N>.avsc``; ``codec`` frames events as Avro
single-object encoding and reads any version into the newest; ``upcasting`` holds the
``vN_to_vN1`` upcasters; ``compat`` and ``check`` are ``swarmlog schema check``.
"""

from .codec import Decoder, Encoder
from .registry import EventSchema, SchemaRegistry

__all__ = ["Decoder", "Encoder", "EventSchema", "SchemaRegistry"]
