"""swarmlog's built-in event schemas, installed as the package ``swarmlog.schema.builtin``.

This folder holds data, not code: ``<event_type>/v<N>.avsc`` and the upcasters beside
them (see README.md). This file only makes the folder a package, so that the wheel
carries it and the code finds it through the import system wherever swarmlog is
installed (``swarmlog.schema.builtin_schema_dir``). Avro tools ignore it.
"""
