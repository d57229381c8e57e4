"""The planner: the captured launch list cut into segments, each one launch of the fused step.

Classes of segment (one generated kernel each, when they hold two launches or more):

* ``row``  -- block per row of the R-row batch: every launch computes row r of a row-shaped
  output from row r of the row-shaped buffers the segment wrote (elementwise ops, row
  broadcasts, ``activation @ W`` with W complete, per-row reductions); ``__syncthreads``
  between launches.
* ``tail`` -- one thread, launches in order: the one-element results (the loss chain,
  reductions to a scalar, the clip norm and scale).
* ``flat`` -- a grid-stride loop per launch, one thread handling element i of every launch:
  launches whose iteration i writes element i, reading buffers the segment wrote only at
  element i (the optimizer's elementwise chain, parameter-gradient copies, and independent
  matmuls/reductions over complete inputs).
* ``node`` -- anything else keeps its own per-node kernel (softmax rows, bmm, pad/concat
  pieces, a matmul reading a buffer its own segment wrote).

Launches are scheduled as a list: a ready launch (its producers and the readers of what it
overwrites already scheduled) joins the open segment when its class and hazards allow;
launches that depend only on leaves (transposed weights, the backward seed) go first.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from gtensor.kernels import Kind
from gtensor.ops.forms import Product

from .analysis import Buffer, Info, buffer, read_transposed, row_shaped, transpose_source

CLASSES = ("row", "tail", "flat", "node")


@dataclass
class Segment:
    """Launches that become one kernel (or stay one per-node launch)."""

    cls: str
    items: list[Info] = field(default_factory=list)
    cls_options: tuple[str, ...] = ()
    written: list[Buffer] = field(default_factory=list)
    whole_reads: list[Buffer] = field(default_factory=list)  # read across threads/rows

    @property
    def fused(self) -> bool:
        """Whether this segment becomes a generated kernel: two launches or more, or one that
        reads a dropped transpose in place (its recorded launch would read the dead copy; a
        matmul's own ta / tb flags its per-node kernel reads as they are)."""
        if self.cls == "node":
            return False
        return len(self.items) > 1 or any(info.reads_dropped for info in self.items)

    def _hits(self, b: Buffer, among: list[Buffer]) -> bool:
        return any(b.overlaps(w) for w in among)

    def accepts(self, info: Info, rows: int) -> bool:
        """Whether ``info`` may join this segment (class, and no cross-thread hazard)."""
        if self.cls == "node":
            return False
        if classes(info, rows)[0] != self.cls:
            return False  # each launch goes to its best class (row-local work stays per row)
        if self.cls == "tail":
            return True
        if any(self._hits(w, self.whole_reads) for w in info.written):
            return False  # would overwrite what another thread/row of the segment reads
        for param, b in info.reads:
            if not self._hits(b, self.written):
                continue
            local = (info.row_aligned(param, rows) if self.cls == "row" else info.aligned(param))
            if not local:
                return False
        return True

    def add(self, info: Info, rows: int) -> None:
        """Append ``info`` and record what it writes and reads across threads."""
        self.items.append(info)
        self.written.extend(info.written)
        for param, b in info.reads:
            local = (info.row_aligned(param, rows) if self.cls == "row" else info.aligned(param))
            if self.cls != "tail" and not local:
                self.whole_reads.append(b)


def classes(info: Info, rows: int) -> tuple[str, ...]:
    """The segment classes ``info`` fits, best first."""
    out = []
    if info.fusable and info.out.size == 1:
        out.append("tail")
    if rows > 1 and info.row_local(rows):
        out.append("row")
    if info.fusable and info.out_identity:
        out.append("flat")
    out.append("node")
    return tuple(out)


def choose_rows(infos: list[Info]) -> int:
    """The batch row count R: the leading dimension that makes the most launches row-local."""
    counts: Counter = Counter()
    for info in infos:
        if info.fusable and len(info.out.shape) >= 2 and info.out.shape[0] > 1:
            counts[info.out.shape[0]] += 1
    best, best_n = 0, 0
    for rows in sorted(counts, reverse=True):
        n = sum(info.row_local(rows) for info in infos)
        if n > best_n:
            best, best_n = rows, n
    return best


def dependencies(infos: list[Info]) -> list[set[int]]:
    """For each launch, the earlier launches it must follow (read-after-write,
    write-after-read, write-after-write on overlapping buffers), over every buffer each
    launch writes.

    Only launches touching one group of overlapping byte ranges can conflict: the accesses
    are grouped so (sorted by address, a group ends where no range reaches further), and
    launches are compared within each group, in launch order.
    """
    accesses = sorted((b.addr, b.addr + b.nbytes, j, write)
                      for j, info in enumerate(infos)
                      for write, bufs in ((False, [r for _, r in info.reads]), (True, info.written))
                      for b in bufs if b.nbytes > 0)
    deps: list[set[int]] = [set() for _ in infos]
    group: list[tuple[int, int, int, bool]] = []
    reach = None
    for acc in accesses:
        if group and acc[0] >= reach:
            _group_dependencies(group, deps)
            group = []
        reach = acc[1] if not group else max(reach, acc[1])
        group.append(acc)
    if group:
        _group_dependencies(group, deps)
    return deps


def _group_dependencies(group: list[tuple[int, int, int, bool]], deps: list[set[int]]) -> None:
    """Add to ``deps`` the conflicts among one group's accesses (start, end, launch, write):
    launch j follows an earlier i when a write of either overlaps an access of the other."""
    by_launch: dict[int, list[tuple[int, int, bool]]] = {}
    for start, end, j, write in group:
        by_launch.setdefault(j, []).append((start, end, write))
    launches = sorted(by_launch)
    for n, j in enumerate(launches):
        mine = by_launch[j]
        for i in launches[:n]:
            if i in deps[j]:
                continue
            if any((w1 or w2) and s1 < e2 and s2 < e1
                   for s1, e1, w1 in by_launch[i] for s2, e2, w2 in mine):
                deps[j].add(i)


def early(infos: list[Info], deps: list[set[int]], rows: int) -> list[bool]:
    """Launches computed from leaves only (through other such launches), none row-shaped,
    that feed row-local work (the backward seed, transposed weights): scheduled first so they
    never split a row segment."""
    producers = [[i for i in deps[j] if any(infos[i].writes_into(r) for _, r in info.reads)]
                 for j, info in enumerate(infos)]
    leafy: list[bool] = []
    for j, info in enumerate(infos):
        leafy.append(not any(row_shaped(w, rows) for w in info.written)
                     and all(leafy[i] for i in producers[j]))
    out = [False] * len(infos)
    for j in range(len(infos) - 1, -1, -1):
        for i in producers[j]:
            if leafy[i] and (out[j] or "row" in classes(infos[j], rows)):
                out[i] = True
    return out


class _Extents:
    """Byte ranges of accesses (launch index, owner, buffer), for overlap queries in one
    numpy pass each; an access's range can be replaced in place (a read redirected)."""

    def __init__(self, accesses: list[tuple[int, Any, Buffer]]) -> None:
        self.owners = [owner for _, owner, _ in accesses]
        self.index = np.array([i for i, _, _ in accesses], dtype=np.int64)
        self.start = np.array([b.addr for _, _, b in accesses], dtype=np.int64)
        self.end = np.array([b.addr + max(b.nbytes, 0) for _, _, b in accesses], dtype=np.int64)

    def overlapping(self, b: Buffer) -> np.ndarray:
        """The positions of the accesses sharing a byte with ``b`` (none when either is
        empty), in the order given."""
        if b.nbytes <= 0:
            return np.zeros(0, dtype=np.int64)
        return np.flatnonzero((self.start < b.addr + b.nbytes) & (b.addr < self.end)
                              & (self.start < self.end))

    def replace(self, k: int, b: Buffer) -> None:
        """Access ``k`` now covers ``b``."""
        self.start[k], self.end[k] = b.addr, b.addr + max(b.nbytes, 0)


def virtual_transposes(infos: list[Info], keep: Sequence[Buffer] = ()) -> list[Info]:
    """Drop transpose copies whose every reader is a matmul: each reader reads the source in
    place instead (the same values, so the same bits: ``gt_dot`` takes operand strides).

    A copy writing into one of the ``keep`` buffers (what is read outside this launch list: a
    node's value or gradient, which later phases and the user read) is never dropped.
    Readers and writers are found through byte-range indexes (``_Extents``), not a scan of
    every launch per copy (the tests hold it to that scan, the definition).
    """
    reads = _Extents([(r.index, (r, p), b) for r in infos for p, b in r.reads])
    writes = _Extents([(r.index, r, b) for r in infos for _, b in r.writes])
    kept = _Extents([(-1, None, b) for b in keep])
    dropped: set[int] = set()
    for info in infos:
        source = transpose_source(info)
        if source is None or any(len(kept.overlapping(w)) for _, w in info.writes):
            continue
        slots = [k for k in reads.overlapping(info.out) if reads.owners[k][0] is not info]
        readers = [reads.owners[k] for k in slots]
        last = max((r.index for r, _ in readers), default=info.index)
        src = buffer(source)
        hits = writes.index[writes.overlapping(src)]
        rewritten = bool(np.any((hits > info.index) & (hits <= last)))
        if not readers or rewritten or any(r.index < info.index or not isinstance(r.form, Product)
                                           or not r.fusable or p in r.transposed
                                           for r, p in readers):
            continue
        for k, (r, p) in zip(slots, readers):
            read_transposed(r, p, source)
            reads.replace(k, src)
        dropped.add(info.index)
    return [info for info in infos if info.index not in dropped]


def merge_tails(segments: list[Segment], deps: list[set[int]]) -> list[Segment]:
    """Move a tail segment's launches into the next tail segment when nothing in between
    depends on them (fewer launches: the loss's mean joins the optimizer's scalar chain)."""
    out = list(segments)
    k = 0
    while k < len(out):
        seg = out[k]
        if seg.cls in ("tail",) or (seg.cls == "node" and "tail" in seg.cls_options):
            later = next((j for j in range(k + 1, len(out)) if out[j].cls == "tail"), None)
            moved = {i.index for i in seg.items}
            between = [i for s in out[k + 1:later] for i in s.items] if later else []
            if later is not None and not any(deps[i.index] & moved for i in between):
                out[later].items[:0] = seg.items
                del out[k]
                continue
        k += 1
    return out


def plan(infos: list[Info], rows: int | None = None, alone: tuple[Kind, ...] = (),
         keep: Sequence[Buffer] = ()) -> tuple[list[Segment], int]:
    """Segments of ``infos`` in execution order, and the row count R used.

    ``alone`` names launch kinds (``Info.kind``, e.g. ``Kind.MATMUL``) that each get a segment of
    their own: the tests use it to check what a launch does when nothing fuses with it.
    ``keep``: buffers read outside ``infos`` (see ``virtual_transposes``).
    """
    rows = choose_rows(infos) if rows is None else rows
    infos = virtual_transposes(infos, keep)
    deps = dependencies(infos)  # again: a transposed read now reads the copy's source
    first = early(infos, deps, rows)
    done: set[int] = set()
    segments: list[Segment] = []
    current: Segment | None = None
    while len(done) < len(infos):
        ready = sorted((j for j in range(len(infos)) if j not in done and deps[j] <= done),
                       key=lambda j: (not first[j], j))
        pick = None
        if current is not None:
            pick = next((j for j in ready if infos[j].kind not in alone
                         and current.accepts(infos[j], rows)), None)
        if pick is None:
            pick = ready[0]
            current = Segment(classes(infos[pick], rows)[0])
            segments.append(current)
        current.add(infos[pick], rows)
        done.add(pick)
        if infos[pick].kind in alone:
            current = None
        elif current.cls == "node":
            current.cls_options = classes(infos[pick], rows)
            current = None
    by_index = [{infos[i].index for i in d} for d in deps]
    full = {info.index: d for info, d in zip(infos, by_index)}
    return merge_tails(segments, _Deps(full)), rows


class _Deps(dict):
    """Dependencies by original launch index (missing: none)."""

    def __getitem__(self, key: int) -> set[int]:
        return self.get(key, set())
