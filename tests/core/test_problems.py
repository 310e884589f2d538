"""The one place pydantic's errors become what a user reads: the API's details.fields and a config line."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from handraise.core.problems import config_problem, dotted, field_problems, joined, message


class Inner(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: str


class Table(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(default="x", max_length=5)
    port: int = 0
    enabled: bool = True
    tags: list[str] = Field(default_factory=list, max_length=1)
    form_schema: dict[str, Any] | None = None
    hooks: list[Inner] = Field(default_factory=list)
    token: str = ""

    @field_validator("token")
    @classmethod
    def _no_spaces(cls, value: str) -> str:
        if " " in value:
            raise ValueError("must not contain spaces")
        return value


def refused(data: dict[str, Any]) -> ValidationError:
    with pytest.raises(ValidationError) as caught:
        Table.model_validate(data)
    return caught.value


@pytest.mark.parametrize(("data", "api", "config"), [
    ({"colour": 1}, "unknown field", "unknown key"),
    ({"hooks": [{}]}, "is required", "is required"),
    ({"name": "toolong"}, "String should have at most 5 characters", "must have at most 5 characters"),
    ({"port": "eighty"}, "Input should be a valid integer, unable to parse string as an integer",
     "must be a whole number"),
    ({"enabled": "perhaps"}, "Input should be a valid boolean, unable to interpret input", "must be true or false"),
    ({"tags": ["a", "b"]}, "List should have at most 1 item after validation, not 2",
     "must have at most 1 item after validation, not 2"),
    ({"token": "a secret value"}, "must not contain spaces", "must not contain spaces"),
])
def test_each_error_reads_as_the_api_and_a_config_file_say_it(data: dict[str, Any], api: str, config: str) -> None:
    (error,) = refused(data).errors()
    assert message(error) == api
    assert message(error, config=True) == config


def test_the_refused_value_is_never_repeated() -> None:
    error = refused({"token": "hunter2 hunter2", "port": "s3cr3t-port", "name": "longsecret"})
    said = joined(field_problems(error)) + " ".join(message(e, config=True) for e in error.errors())
    assert "hunter2" not in said and "s3cr3t" not in said and "longsecret" not in said


def test_fields_are_named_as_the_api_names_them() -> None:
    error = refused({"form_schema": 3, "hooks": [{"url": "u", "x": 1}], "colour": 1})
    fields = field_problems(error)
    assert fields == [
        {"field": "schema", "message": "Input should be a valid dictionary"},
        {"field": "hooks.0.x", "message": "unknown field"},
        {"field": "colour", "message": "unknown field"},
    ]
    assert joined(fields) == "schema: Input should be a valid dictionary; hooks.0.x: unknown field; colour: unknown field"


def test_a_refused_root_value_is_named_body() -> None:
    with pytest.raises(ValidationError) as caught:
        Table.model_validate("not an object")
    assert field_problems(caught.value) == [{"field": "(body)", "message": "Input should be a valid dictionary "
                                                                          "or instance of Table"}]


def test_a_config_problem_is_the_first_error_under_its_section() -> None:
    error = refused({"hooks": [{"url": "u"}, {"url": "v", "secret": 1}], "port": "x"})
    loc, said = config_problem(error, section=("webhooks", 0))
    assert dotted(loc) == "webhooks[0].port" and said == "must be a whole number"
    loc, said = config_problem(refused({"hooks": [{"url": "u"}, {"url": "v", "secret": 1}]}), section=("slack",))
    assert dotted(loc) == "slack.hooks[1].secret" and said == "unknown key"


def test_dotted_reads_as_toml() -> None:
    assert dotted(("webhooks", 0, "url")) == "webhooks[0].url"
    assert dotted(("server", "port")) == "server.port"
    assert dotted((0,)) == "[0]"
    assert dotted(()) == ""
