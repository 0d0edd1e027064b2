"""The shell commands of README.md, docs/*.md and docs/measurements/*.md, as the docs test reads them.

`extract()` reads every fenced block tagged `bash` or `sh` and returns its commands: comment lines
dropped, `\\`-continued lines joined, a `for ... done` loop and a here-document (`<<'PY'` ... `PY`) kept whole.
A command's `key` is its normalised text (whitespace collapsed, a trailing `# comment` cut), the name the
tables of checks know it by (doc_checks.py). `untagged_command_blocks()` finds the blocks with no language tag
that hold commands, so no command hides from the test.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    *sorted((ROOT / "docs" / "measurements").glob("*.md")),
]
HEREDOC = re.compile(r"<<-?\s*(['\"]?)(\w+)\1")
COMMAND_START = re.compile(r"^(\.venv/bin/|strata-|python |bash |env |curl |STRATA_|for |tmp=)")


@dataclass(frozen=True)
class DocCommand:
    path: Path
    line: int
    text: str  # as written, continuations joined with newlines kept

    @property
    def key(self) -> str:
        return normalise(self.text)

    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


@dataclass
class Block:
    path: Path
    line: int
    tag: str
    lines: list[str] = field(default_factory=list)


def normalise(text: str) -> str:
    lines = []
    for line in text.splitlines():
        line = re.sub(r"\s+#\s.*$", "", line.rstrip("\\").strip()) if not line.lstrip().startswith("#") else ""
        if line:
            lines.append(line)
    return re.sub(r"\s+", " ", " ".join(lines)).strip()


def blocks(path: Path) -> list[Block]:
    out, current = [], None
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if line.startswith("```"):
            if current is None:
                current = Block(path, number + 1, line[3:].strip())
            else:
                out.append(current)
                current = None
        elif current is not None:
            current.lines.append(line)
    return out


def commands(block: Block) -> list[DocCommand]:
    found, pending, start, depth, heredoc = [], [], 0, 0, None
    for offset, line in enumerate(block.lines):
        stripped = line.strip()
        if heredoc is not None:  # inside a here-document: its lines are the command's, whatever they hold
            pending.append(line)
            if stripped != heredoc:
                continue
            heredoc = None
        else:
            if not pending and (not stripped or stripped.startswith("#")):
                continue
            if not pending:
                start = block.line + offset
            pending.append(line)
            if (match := HEREDOC.search(stripped)) is not None:
                heredoc = match.group(2)
                continue
            depth += len(re.findall(r"^(for|while|if)\b", stripped)) - len(re.findall(r"^(done|fi)\b", stripped))
        if stripped.endswith("\\") or depth > 0:
            continue
        found.append(DocCommand(block.path, start, "\n".join(pending)))
        pending, depth = [], 0
    return found


def extract() -> list[DocCommand]:
    return [c for path in DOCS for b in blocks(path) if b.tag in ("bash", "sh") for c in commands(b)]


def untagged_command_blocks() -> list[str]:
    """Blocks with no language tag that hold commands: tag them bash so the docs test sees them."""
    return [
        f"{b.path.relative_to(ROOT)}:{b.line}"
        for path in DOCS
        for b in blocks(path)
        if b.tag == "" and any(COMMAND_START.match(line.strip()) for line in b.lines)
    ]
