"""How invalid settings are reported: each named with the variable that sets it, no secret shown.

pydantic's own messages repeat the input, which may be a password; :func:`describe_errors`
names the settings only, and :func:`redact` blanks any secret-looking value that still
reaches a message (from a validator or a parser).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import SecretStr, ValidationError

#: Field names whose values are never shown, whatever their type.
_SECRET_NAME = re.compile(r"password|secret|token|api_key|credential|private", re.IGNORECASE)


def env_name(loc: Sequence[str | int]) -> str:
    """The environment variable of a setting's path (``("kafka", "sasl_password")``)."""
    parts = [str(p) for p in itertools.takewhile(lambda p: isinstance(p, str), loc)]
    return "LOCKSTEP_" + "__".join(p.upper() for p in parts)


def describe_errors(exc: ValidationError) -> str:
    """One line naming each invalid setting (dotted path and variable), never its value.

    pydantic's own message repeats the input (``input_value``), which may hold a secret.
    """
    parts = []
    for error in exc.errors(include_input=False, include_url=False, include_context=False):
        loc = [p for p in error["loc"] if isinstance(p, str | int)]
        path = ".".join(str(p) for p in loc) or "settings"
        message = str(error["msg"]).removeprefix("Value error, ")
        # A validator's own message names the settings it is about; a type or range
        # error names the variable that sets the field.
        own = error["type"] == "value_error"
        env = f" ({env_name(loc)})" if loc and isinstance(loc[0], str) and not own else ""
        parts.append(f"{path}{env}: {message}")
    return " ".join("; ".join(parts).split())


def redact(message: str, overrides: Mapping[str, Any]) -> str:
    """``message`` with every secret-looking value of ``overrides`` replaced by ``***``.

    A second line of defence behind :func:`describe_errors`, for messages raised by a
    validator or a parser.
    """
    found: set[str] = set()

    def walk(value: Any, secret: bool) -> None:
        if isinstance(value, Mapping):
            for key, item in value.items():
                walk(item, secret or bool(_SECRET_NAME.search(str(key))))
        elif isinstance(value, SecretStr):
            found.add(value.get_secret_value())
        elif secret and isinstance(value, str):
            found.add(value)

    walk(overrides, False)
    # Short values would blank out ordinary words; they are not credentials anyway.
    for value in sorted((v for v in found if len(v) >= 4), key=len, reverse=True):
        message = message.replace(value, "***")
    return message
