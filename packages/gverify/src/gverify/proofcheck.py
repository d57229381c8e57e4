"""The referee's check of a failed proof: does the trainer's answer the auditor kept really
fail against the commitment?

A verdict of phase ``proof`` carries the answer (``failure``): ``children`` (a node's
children that do not hash to it; the descent transcript from the root leads to it),
``leaf`` (a record or trace leaf whose membership proof does not lead to the root),
``state`` / ``batch`` (bytes that do not hash to a proved record's digest), ``array`` /
``graph`` (bytes that do not hash to a proved trace leaf's digest). The failure holds: the
ruling is against the trainer (``auditor``); it does not: for the ``trainer``. The answers
are as the auditor kept them; a deployment that must not trust the auditor's transcript has
the trainer sign its answers (docs/verify.md, "What each party must trust").
"""

from __future__ import annotations

from typing import Any

from . import canonical, merkle, wire


def _unverifiable(msg: str) -> Exception:
    from .referee import Unverifiable

    return Unverifiable(msg)


def _children(ref: Any, f: dict) -> dict:
    root, n = f.get("root"), f.get("leaves")
    if f.get("tree") == "steps" and (root != ref.com["root"] or n != ref.com["leaves"]):
        raise _unverifiable("the failed proof names another root than the commitment's")
    try:
        known = {(0, n): bytes.fromhex(root)}
        steps = f["transcript"]
        for at, s in enumerate(steps):
            lo, hi = s["lo"], s["hi"]
            parent = known.get((lo, hi))
            if parent is None or hi - lo < 2:
                raise _unverifiable(f"transcript step {at} asks for [{lo}, {hi}), which no "
                                    "earlier answer reached")
            left, right = bytes.fromhex(s["left"]), bytes.fromhex(s["right"])
            if merkle.node_hash(left, right) != parent:
                if at != len(steps) - 1:
                    raise _unverifiable("the transcript goes on past a failed answer")
                return {"ruling": "auditor",
                        "reason": f"the trainer's children of node [{lo}, {hi}) of its "
                                  f"{f['tree']} tree do not hash to the node: it contradicted "
                                  "its commitment"}
            mid = lo + merkle.split(hi - lo)
            known[(lo, mid)], known[(mid, hi)] = left, right
    except (KeyError, TypeError, ValueError) as e:
        raise _unverifiable(f"the failed proof's transcript is malformed ({e})") from None
    return {"ruling": "trainer", "reason": "every answer of the transcript verifies: the "
                                           "claimed failure does not hold"}


def _leaf(ref: Any, f: dict) -> dict:
    if f.get("tree") == "steps" and (f.get("root") != ref.com["root"]
                                     or f.get("leaves") != ref.com["leaves"]):
        raise _unverifiable("the failed proof names another root than the commitment's")
    try:
        ok = merkle.verify_path(f["index"], f["leaves"],
                                merkle.leaf_hash(canonical.json_bytes(f["leaf"])),
                                [bytes.fromhex(h) for h in f["path"]], bytes.fromhex(f["root"]))
    except (KeyError, TypeError, ValueError) as e:
        raise _unverifiable(f"the failed proof is malformed ({e})") from None
    if ok:
        return {"ruling": "trainer", "reason": f"{f['tree']} leaf {f['index']}'s proof verifies:"
                                               " the claimed failure does not hold"}
    return {"ruling": "auditor", "reason": f"the trainer's {f['tree']} leaf {f['index']} and its "
                                           "membership proof do not lead to the committed "
                                           "root: it contradicted its commitment"}


def _bytes_vs_record(ref: Any, f: dict, field: str) -> dict:
    k = f.get("step")
    rec = ref.record(k)
    data = ref.blob(f.get("blob"))
    try:
        ents = wire.unpack(data)
    except wire.WireError:
        return {"ruling": "auditor", "reason": f"the trainer's {field} of step {k} is not a "
                                               "well-formed message"}
    if canonical.entries_digest(ents) != rec[field]:
        return {"ruling": "auditor", "reason": f"the trainer's {field} of step {k} does not hash "
                                               f"to its record's {field} digest"}
    return {"ruling": "trainer", "reason": f"the {field} of step {k} hashes to its record: the "
                                           "claimed failure does not hold"}


def _bytes_vs_leaf(ref: Any, f: dict) -> dict:
    j = f.get("leaf")
    found = [leaf for _, (i, leaf) in ref.leaves().items() if i == j]
    if not found:
        raise _unverifiable(f"the verdict proves no trace leaf {j}")
    ref.anchor(ref.leaves())
    data = ref.blob(f.get("blob"))
    if f["kind"] == "graph":
        got = canonical.sha256(data)
    else:
        try:
            got = canonical.array_digest(wire.unpack_array(data))
        except wire.WireError:
            got = None
    if got != found[0].get("digest"):
        return {"ruling": "auditor", "reason": f"the trainer's {f['kind']} of trace leaf {j} "
                                               "does not hash to the leaf's digest"}
    return {"ruling": "trainer", "reason": f"the {f['kind']} of trace leaf {j} hashes to its "
                                           "leaf: the claimed failure does not hold"}


def check_failure(ref: Any, f: Any) -> dict:
    """The ruling on a failed proof ``f`` (the verdict's ``failure``)."""
    if not isinstance(f, dict):
        raise _unverifiable("the verdict of phase 'proof' carries no failure")
    kind = f.get("kind")
    if kind == "children":
        return _children(ref, f)
    if kind == "leaf":
        return _leaf(ref, f)
    if kind in ("state", "batch"):
        return _bytes_vs_record(ref, f, kind)
    if kind in ("array", "graph"):
        return _bytes_vs_leaf(ref, f)
    raise _unverifiable(f"the failed proof is of kind {kind!r}; expected children, leaf, state, "
                        "batch, array or graph")
