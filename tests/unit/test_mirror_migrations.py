"""The mirror's migrations as a package ships them: numbered from 1, each number once, possibly with a
number left for a change still in flight; the schema is at N once every known version up to N is in."""

from __future__ import annotations

from swarmlog_connectors.postgres_migrations import SCHEMA_VERSION, complete_up_to, migrations


def test_migrations_are_numbered_from_one_each_number_once_and_the_newest_is_the_schema_version() -> None:
    versions = [m.version for m in migrations()]
    assert versions[0] == 1 and versions == sorted(set(versions))
    assert SCHEMA_VERSION == versions[-1]
    assert any(m.name == "sink_owners" and m.version == 7 for m in migrations())


def test_a_database_lacking_a_known_version_is_not_at_the_versions_after_it() -> None:
    known = [m.version for m in migrations()]
    assert complete_up_to(set()) == 0
    assert complete_up_to(set(known)) == SCHEMA_VERSION
    # One version missing (a migration that landed after the database was migrated): the schema
    # is only complete up to the one before it, so the sink asks for `mirror migrate` again.
    missing = known[len(known) // 2]
    assert complete_up_to(set(known) - {missing}) == known[known.index(missing) - 1]
    # A newer package migrated it further: the newest applied, which the sink warns about.
    assert complete_up_to({*known, SCHEMA_VERSION + 5}) == SCHEMA_VERSION + 5
