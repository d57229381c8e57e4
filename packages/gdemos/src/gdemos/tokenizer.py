"""Tokenizers for the rung-3 model: ``tokenizer.json`` through ``tokenizers``, or raw bytes."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol


class Tokenizer(Protocol):
    """What the rung needs from a tokenizer."""

    name: str

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``."""

    def decode(self, ids: list[int]) -> str:
        """Text of token ids."""


class ByteTokenizer:
    """UTF-8 bytes as token ids (0..255): the fallback when there is no tokenizer.json."""

    name = "bytes"

    def encode(self, text: str) -> list[int]:
        """The UTF-8 bytes of ``text``."""
        return list(text.encode("utf-8"))

    def decode(self, ids: list[int]) -> str:
        """UTF-8 text of byte ids (invalid sequences become U+FFFD)."""
        return bytes(int(i) for i in ids).decode("utf-8", errors="replace")


class JsonTokenizer:
    """A ``tokenizer.json`` read by the ``tokenizers`` package (no special tokens added)."""

    name = "tokenizer.json"

    def __init__(self, path: Path) -> None:
        from tokenizers import Tokenizer as _Tok

        self._tok = _Tok.from_file(str(path))
        self.path = Path(path)

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``."""
        return list(self._tok.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: list[int]) -> str:
        """Text of token ids."""
        return self._tok.decode([int(i) for i in ids], skip_special_tokens=False)


def load_tokenizer(directory: Path) -> Tokenizer:
    """``directory/tokenizer.json`` when it exists and ``tokenizers`` is installed, else bytes."""
    path = Path(directory) / "tokenizer.json"
    if path.exists():
        try:
            return JsonTokenizer(path)
        except ImportError:
            pass
    return ByteTokenizer()
