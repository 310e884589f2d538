"""The form-schema subset: refuse what humans cannot answer, validate answers, describe fields.

Every channel (hosted form, Telegram, Matrix, Slack) goes through this package, so a
value typed in chat and a value posted from a form meet the same checks and messages.
One module per concept: ``shapes`` (vocabulary and predicates), ``formats``,
``patterns`` (RE2), ``subset`` (``check_schema``), ``validation`` (``validate_answer``), ``fields``
(``fields``, ``describe_field``) and ``chat`` (``coerce_text``, ``parse_field_lines``).

Decisions worth knowing:

* ``format: time`` accepts a wall-clock time as a human means it (``14:30``,
  ``14:30:05``, what ``<input type=time>`` submits) as well as an RFC 3339
  ``full-time`` with an offset. ``date-time`` stays strict RFC 3339 (zone
  required), because an instant without a zone is ambiguous to the agent.
* ``email`` is checked more strictly than jsonschema's "contains an @", and
  ``uri`` must be an absolute URI (RFC 3986, via the format-nongpl extra) that
  is not ``javascript:``/``data:``/``vbscript:`` and, for http(s)/ftp, names a host.
* Messages never quote the submitted value: a sensitive answer must not leak
  through an error message.
* Kinds: "input" (any schema in the subset, or none for free text),
  "approval" (always ``APPROVAL_SCHEMA``), "choice" (a string enum or boolean,
  answered with buttons).
* Patterns are matched by RE2 (``patterns``), in time linear in the answer; the
  constructs RE2 lacks (backreferences, lookaround, atomic groups, possessive
  repetitions) and over-complex patterns are refused at create with the reason.
  A server checks long answers off the event loop (``validate_answer_off_loop``,
  ``check_schema_off_loop``), so no answer, default or chat reply stalls it.
* Coercion of chat text never raises: unreadable text stays text and the
  validator's message tells the human what is wrong.
* ``parse_field_lines``: a line ``name: value`` starts a field when ``name``
  matches a property name or title; a following line that does not start like
  ``key:`` continues the previous value (multi-line text). A ``key:`` line whose
  key is not a field is reported as an unknown field.
"""

from __future__ import annotations

from handraise.core.schema.chat import coerce_field, coerce_text, parse_field_lines
from handraise.core.schema.fields import FieldSpec, describe_field, fields
from handraise.core.schema.formats import FORMAT_CHECKER
from handraise.core.schema.shapes import (
    APPROVAL_SCHEMA,
    FORMATS,
    KINDS,
    MAX_FIELDS,
    MAX_SCHEMA_BYTES,
    WIDGETS,
)
from handraise.core.schema.subset import check_schema, check_schema_off_loop
from handraise.core.schema.validation import FieldError, validate_answer, validate_answer_off_loop

__all__ = [
    "APPROVAL_SCHEMA",
    "FORMAT_CHECKER",
    "FORMATS",
    "KINDS",
    "MAX_FIELDS",
    "MAX_SCHEMA_BYTES",
    "WIDGETS",
    "FieldError",
    "FieldSpec",
    "check_schema",
    "check_schema_off_loop",
    "coerce_field",
    "coerce_text",
    "describe_field",
    "fields",
    "parse_field_lines",
    "validate_answer",
    "validate_answer_off_loop",
]
