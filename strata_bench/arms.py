"""Arms: a name and either an engine command line (a fresh engine per run) or the URL of a running server.

`NAME=COMMAND` or `NAME=@URL`. Names become file names, so they are letters, digits, '_', '.', '-'.
The launcher appends `--host 127.0.0.1 --port P` to a command unless the command contains `{port}`.
One arm measures one server; two or more compare.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
_ENV_ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


class ArmError(ValueError):
    """A malformed --arm; the message quotes it."""


@dataclass(frozen=True)
class Arm:
    name: str
    command: str | None = None
    url: str | None = None

    def __post_init__(self) -> None:
        if not _NAME.match(self.name or ""):
            raise ArmError(f"arm name {self.name!r} must be letters, digits, '_', '.', '-' (it names files)")
        if (self.command is None) == (self.url is None):
            raise ArmError(f"arm {self.name!r} needs exactly one of a command or a URL")
        if self.command is not None and not self.command.strip():
            raise ArmError(f"arm {self.name!r}: the command is empty")
        if self.command is not None:
            try:
                shlex.split(self.command)
            except ValueError as exc:
                raise ArmError(f"arm {self.name!r}: cannot parse the command ({exc}): {self.command!r}") from None
        if self.url is not None:
            parsed = urlparse(self.url)
            if parsed.scheme not in ("http", "https") or not parsed.netloc:
                raise ArmError(
                    f"arm {self.name!r}: @{self.url} is not an http(s) URL; write NAME=@http://127.0.0.1:8000"
                )
            object.__setattr__(self, "url", self.url.rstrip("/"))

    @property
    def is_url(self) -> bool:
        return self.url is not None

    @property
    def label(self) -> str:
        """How messages name the arm: `arm 'a'`, or `arm 'a' (@http://...)` for a running server."""
        return f"arm {self.name!r}" + (f" (@{self.url})" if self.url else "")

    def env_assignments(self) -> dict[str, str]:
        """Variables set by a leading `env A=1 B=2` (or bare `A=1 cmd`): provenance, not execution."""
        if self.command is None:
            return {}
        words = shlex.split(self.command)
        if words and words[0] == "env":
            words = words[1:]
        out = {}
        for word in words:
            if not _ENV_ASSIGN.match(word):
                break
            key, value = word.split("=", 1)
            out[key] = value
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "command": self.command, "url": self.url, "env": self.env_assignments()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Arm":
        return cls(name=data["name"], command=data.get("command"), url=data.get("url"))


def parse_arm(text: str) -> Arm:
    if "=" not in text:
        hint = " (a running server is NAME=@URL)" if text.strip().startswith(("@", "http")) else ""
        raise ArmError(f"--arm {text!r}: expected NAME=COMMAND or NAME=@URL{hint}")
    name, rest = text.split("=", 1)
    name, rest = name.strip(), rest.strip()
    if not name:
        raise ArmError(f"--arm {text!r}: the name before '=' is empty")
    if rest.startswith("@"):
        return Arm(name=name, url=rest[1:].strip())
    return Arm(name=name, command=rest)


def parse_arms(texts: list[str] | tuple[str, ...]) -> list[Arm]:
    arms = [parse_arm(t) for t in texts]
    if not arms:
        raise ArmError(
            "give --arm NAME=COMMAND (an engine started per run) or --arm NAME=@URL (a running server); "
            "one arm measures one server, two or more compare"
        )
    names = [a.name for a in arms]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ArmError(f"arm names must be unique, repeated: {dupes}")
    return arms
