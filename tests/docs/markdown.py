"""Read fenced code blocks out of the Markdown documentation, for the docs tests."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs"

_FENCE = re.compile(r"^(?P<indent>[ ]*)(?P<fence>`{3,})(?P<info>[^`\n]*)$")
#: A block whose first line is ``# package/module.py`` is that file.
_FILE_COMMENT = re.compile(r"#\s*(?P<path>[A-Za-z_][\w/]*\.py)\b")


@dataclass(frozen=True)
class Block:
    lang: str
    code: str
    line: int  # 1-based line of the opening fence
    path: Path

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(DOCS.parent)}:{self.line}"

    @property
    def module_name(self) -> str | None:
        """``accounts/tasks.py`` → ``accounts.tasks`` when the block names its file."""
        first = self.code.lstrip("\n").splitlines()[0] if self.code.strip() else ""
        match = _FILE_COMMENT.match(first)
        if match is None:
            return None
        return match["path"].removesuffix(".py").replace("/", ".")


def blocks(path: Path) -> list[Block]:
    """Every fenced block of ``path`` in order (fences may be indented, e.g. in admonitions)."""
    found: list[Block] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        indent, fence = opening["indent"], opening["fence"]
        lang = opening["info"].strip().split(" ")[0] if opening["info"].strip() else ""
        body: list[str] = []
        j = i + 1
        while j < len(lines) and lines[j].strip() != fence:
            body.append(lines[j][len(indent) :] if lines[j].startswith(indent) else lines[j])
            j += 1
        if j == len(lines):
            raise AssertionError(f"{path}:{i + 1}: unclosed code fence")
        found.append(Block(lang, "\n".join(body) + "\n", i + 1, path))
        i = j + 1
    return found
