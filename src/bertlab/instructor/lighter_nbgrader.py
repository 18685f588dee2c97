"""Two repeated costs of nbgrader's recording, paid once per ``bertlab autograde`` run instead.

``bertlab autograde`` records every verdict with nbgrader's own Autograde converter (so the
gradebook and the autograded notebooks are what ``nbgrader autograde`` leaves). Measured on a
class of 40 submissions, that recording took about 7 CPU-seconds of the main process, a core
taken from the judges when they run side by side; two things in it were the same work done over
and over:

- every ``Gradebook`` nbgrader opens (five or more per submission) makes a new SQLAlchemy engine,
  so every SQL statement is compiled again (its statement cache lives in the engine). One engine
  per database URL serves them all; each ``Gradebook`` still has its own session.
- every cell's nbgrader metadata is checked with ``jsonschema.validate``, which first checks the
  schema itself against JSON Schema's metaschema. The schema is nbgrader's and never changes, so
  it is checked once; each cell is still checked against it, with the same error raised.

Both apply to this process only, from :func:`install`; nothing nbgrader writes changes (the class
agreement test compares every grade with ``nbgrader autograde``'s).
"""

from __future__ import annotations

import functools
import json
import types

import jsonschema
import sqlalchemy


def install() -> None:
    """Make this process's nbgrader reuse its engines and its checked metadata schema."""
    import nbgrader.api
    import nbgrader.nbgraderformat.common

    nbgrader.api.create_engine = _one_engine_per_url
    nbgrader.nbgraderformat.common.jsonschema = _SCHEMA_CHECKED_ONCE


def _one_engine_per_url(url, **options):
    return _engine(url, json.dumps(options, sort_keys=True, default=str))


@functools.cache
def _engine(url, options: str):
    return sqlalchemy.create_engine(url, **json.loads(options))


@functools.cache
def _validator(schema_json: str):
    schema = json.loads(schema_json)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def _validate(instance, schema) -> None:
    """``jsonschema.validate`` without checking an already checked schema again."""
    error = jsonschema.exceptions.best_match(_validator(json.dumps(schema, sort_keys=True)).iter_errors(instance))
    if error is not None:
        raise error


# What nbgrader's metadata checks reach through their module's ``jsonschema`` name.
_SCHEMA_CHECKED_ONCE = types.SimpleNamespace(validate=_validate, ValidationError=jsonschema.ValidationError)
