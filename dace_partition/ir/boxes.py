"""Boxes: a block as ``(start, count)`` per dimension, and the arithmetic on them that distributions, moves
and solvers share (how many elements two blocks share, every pair of P blocks at once), and the cutting and
joining of a whole array's tiles that layouts and ``run``'s ranks share.

NumPy only: ``runtime/_plain_worker.py`` loads this file by path on ranks that import neither DaCe nor the
package."""
import numpy as np


def volume(count) -> int:
    n = 1
    for c in count:
        n *= c
    return n


def intersection(a, b) -> int:
    """Elements two (start, count) boxes share."""
    n = 1
    for s1, c1, s2, c2 in zip(a[0], a[1], b[0], b[1]):
        n *= max(0, min(s1 + c1, s2 + c2) - max(s1, s2))
    return n


def overlaps(src, dst) -> np.ndarray:
    """``M[q, me]``: elements rank ``q``'s box in ``src`` shares with rank ``me``'s box in ``dst`` (lists of
    (start, count) boxes, one per rank). One array operation per dimension instead of a Python loop over
    every pair of ranks: pricing a move on P ranks touches P^2 pairs, which took seconds per move at
    P = 256 and minutes per search at P = 1024."""
    if not src or not dst:
        return np.zeros((len(src), len(dst)), dtype=np.int64)
    s0 = np.array([b[0] for b in src], dtype=np.int64).reshape(len(src), -1)
    s1 = s0 + np.array([b[1] for b in src], dtype=np.int64).reshape(len(src), -1)
    d0 = np.array([b[0] for b in dst], dtype=np.int64).reshape(len(dst), -1)
    d1 = d0 + np.array([b[1] for b in dst], dtype=np.int64).reshape(len(dst), -1)
    m = np.ones((len(src), len(dst)), dtype=np.int64)
    for k in range(s0.shape[1]):
        m *= np.maximum(0, np.minimum(s1[:, k, None], d1[None, :, k]) - np.maximum(s0[:, k, None], d0[None, :, k]))
    return m


def any_overlap(boxes) -> bool:
    """Whether two of ``boxes`` share an element (empty boxes share none)."""
    boxes = [b for b in boxes if all(c > 0 for c in b[1])]
    shared = overlaps(boxes, boxes)  # every pair at once
    np.fill_diagonal(shared, 0)
    return bool(shared.any())


def boxes_cover(src, dst) -> bool:
    """Whether the union of the ``src`` boxes holds every element of every ``dst`` box: each ``dst`` box
    inside one ``src`` box, or (where the ``src`` boxes are disjoint) inside their union. Every pair at
    once: a Python loop over the P^2 pairs took seconds per call at P = 256."""
    src = [x for x in dict.fromkeys(src) if volume(x[1]) > 0]  # replicas hold the same box
    if not dst:
        return True
    if not src:
        return all(volume(b[1]) == 0 for b in dst)
    need = np.array([volume(b[1]) for b in dst], dtype=np.int64)
    shared = overlaps(src, dst)
    whole = (shared == need[None, :]).any(axis=0)
    if not any_overlap(src):
        whole |= shared.sum(axis=0) == need
    return bool(whole.all())


def from_others(m: np.ndarray, senders=None) -> np.ndarray:
    """Per destination rank, the elements it gets from other ranks (``senders``: which ranks send) under
    the overlap matrix ``m`` of :func:`overlaps`."""
    m = m.copy()
    np.fill_diagonal(m, 0)
    if senders is not None:
        m[~np.asarray(senders, dtype=bool), :] = 0
    return m.sum(axis=0)


def contains(outer, inner) -> bool:
    """Whether the (start, count) box ``outer`` holds all of ``inner`` (an empty ``inner`` always)."""
    return intersection(outer, inner) == volume(inner[1])


def _index(starts, counts):
    return tuple(slice(s, s + c) for s, c in zip(starts, counts))


def _at_origin(counts):
    return tuple(slice(0, c) for c in counts)


def tile(whole, box, local_shape, dtype) -> np.ndarray:
    """A rank's tile of ``whole``: its ``box`` (None: the rank holds nothing) at the tile's origin, the rest
    of ``local_shape`` zero (uneven tiles are padded)."""
    out = np.zeros(tuple(local_shape), dtype=np.dtype(dtype))
    if box is not None:
        part = np.asarray(whole)[_index(*box)]
        out[_at_origin(part.shape)] = part
    return out


def join(tiles, boxes, shape, dtype) -> np.ndarray:
    """The whole array of ``shape`` from every rank's tile (``tiles[r]`` holds ``boxes[r]`` at its origin;
    a None box or tile contributes nothing; replicas must agree)."""
    out = np.zeros(tuple(shape), dtype=np.dtype(dtype))
    for box, t in zip(boxes, tiles):
        if box is not None and t is not None:
            out[_index(*box)] = np.asarray(t)[_at_origin(box[1])]
    return out
