"""RFC 6962 Merkle trees (leaf prefix 0x00, node prefix 0x01): tree heads, an append-only frontier,
inclusion and consistency proofs (RFC 6962 sections 2.1.1 and 2.1.2) and their verification
(the algorithms of RFC 9162 sections 2.1.3.2 and 2.1.4.2).

Proof generation asks a `subtree_root(start, end)` callable for MTH(D[start:end]), so the same code
serves an in-memory list of leaves and a log whose oldest records were archived (where the roots
of the archived part come from the tombstone's frontier).
"""

import hashlib
from collections.abc import Callable, Sequence

_sha256 = hashlib.sha256

EMPTY_ROOT = _sha256(b"").digest()


class ProofError(ValueError):
    """A proof that does not verify, or one asked for sizes that make no sense."""


def leaf_hash(data: bytes) -> bytes:
    return _sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return _sha256(b"\x01" + left + right).digest()


def frontier_append(frontier: list[tuple[int, bytes]], leaf: bytes) -> list[tuple[int, bytes]]:
    """Add one leaf hash to a frontier of (subtree size, root) pairs, largest subtree first."""
    frontier = list(frontier)
    _push(frontier, 1, leaf)
    return frontier


def frontier_extend(frontier: list[tuple[int, bytes]], leaves) -> None:
    """Append leaf hashes to a frontier in place (the hot path of writing and verifying).

    Many leaves go in as whole perfect subtrees: from the tree's current size, the largest block
    aligned to it that the leaves fill is one subtree of the final tree (RFC 6962 trees are
    left-full), hashed a level at a time, then pushed like a single leaf of that size."""
    leaves = leaves if isinstance(leaves, list) else list(leaves)
    count = len(leaves)
    size = sum(block for block, _node in frontier)
    done = 0
    while done < count:
        block = size & -size if size else 1 << 62
        while block > count - done:
            block >>= 1
        node = _perfect_root(leaves[done:done + block]) if block > 1 else leaves[done]
        _push(frontier, block, node)
        size += block
        done += block


def _perfect_root(level: list[bytes]) -> bytes:
    """Root of a perfect subtree (a power-of-two number of leaf hashes)."""
    sha256 = _sha256
    while len(level) > 1:
        level = [sha256(b"\x01" + a + b).digest() for a, b in zip(level[0::2], level[1::2], strict=True)]
    return level[0]


def frontier_push(frontier: list[tuple[int, bytes]], leaf: bytes) -> None:
    """Append one leaf hash to a frontier in place (a verifier walking records one at a time)."""
    _push(frontier, 1, leaf)


def _push(frontier: list[tuple[int, bytes]], size: int, node: bytes) -> None:
    while frontier and frontier[-1][0] == size:
        left_size, left = frontier.pop()
        node = _sha256(b"\x01" + left + node).digest()
        size += left_size
    frontier.append((size, node))


def frontier_size(frontier: list[tuple[int, bytes]]) -> int:
    return sum(size for size, _node in frontier)


def frontier_root(frontier: list[tuple[int, bytes]]) -> bytes:
    """The RFC 6962 tree head of the leaves the frontier summarises."""
    if not frontier:
        return EMPTY_ROOT
    root = frontier[-1][1]
    for _size, node in reversed(frontier[:-1]):
        root = node_hash(node, root)
    return root


def root_of(leaves: Sequence[bytes]) -> bytes:
    """MTH(D[n]) of RFC 6962, section 2.1, over leaf hashes."""
    frontier: list[tuple[int, bytes]] = []
    frontier_extend(frontier, leaves)
    return frontier_root(frontier)


def frontier_to_json(frontier) -> list[list]:
    return [[size, node.hex()] for size, node in frontier]


def frontier_from_json(data) -> list[tuple[int, bytes]]:
    return [(int(size), bytes.fromhex(node)) for size, node in data or []]


def _split(n: int) -> int:
    """The largest power of two smaller than n (n > 1)."""
    return 1 << ((n - 1).bit_length() - 1)


SubtreeRoot = Callable[[int, int], bytes]


def list_subtree_root(leaves: Sequence[bytes]) -> SubtreeRoot:
    """A `subtree_root` over an in-memory list of leaf hashes."""
    return lambda start, end: root_of(leaves[start:end])


def inclusion_proof(index: int, size: int, subtree_root: SubtreeRoot) -> list[bytes]:
    """PATH(m, D[n]) of RFC 6962 section 2.1.1 for the leaf at 0-based `index` in a tree of `size`."""
    if not 0 <= index < size:
        raise ProofError(f"leaf index {index} is outside a tree of size {size}")
    path: list[bytes] = []
    start, end = 0, size
    # Iterative descent; the RFC lists siblings from the leaf upwards, so collect and reverse.
    while end - start > 1:
        k = _split(end - start)
        if index < start + k:
            path.append(subtree_root(start + k, end))
            end = start + k
        else:
            path.append(subtree_root(start, start + k))
            start += k
    path.reverse()
    return path


def consistency_proof(old_size: int, new_size: int, subtree_root: SubtreeRoot) -> list[bytes]:
    """PROOF(m, D[n]) of RFC 6962 section 2.1.2."""
    if not 0 < old_size <= new_size:
        raise ProofError(f"no consistency proof from size {old_size} to size {new_size}")

    def subproof(m: int, start: int, end: int, complete: bool) -> list[bytes]:
        n = end - start
        if m == n:
            return [] if complete else [subtree_root(start, end)]
        k = _split(n)
        if m <= k:
            return subproof(m, start, start + k, complete) + [subtree_root(start + k, end)]
        return subproof(m - k, start + k, end, False) + [subtree_root(start, start + k)]

    return subproof(old_size, 0, new_size, True)


def root_from_inclusion_proof(index: int, size: int, leaf: bytes, proof: Sequence[bytes]) -> bytes:
    """RFC 9162 section 2.1.3.2: the root a leaf and its audit path lead to."""
    if not 0 <= index < size:
        raise ProofError(f"leaf index {index} is outside a tree of size {size}")
    fn, sn = index, size - 1
    result = leaf
    for sibling in proof:
        if sn == 0:
            raise ProofError("inclusion proof is longer than the tree is deep")
        if fn & 1 or fn == sn:
            result = node_hash(sibling, result)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            result = node_hash(result, sibling)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise ProofError("inclusion proof is shorter than the tree is deep")
    return result


def verify_inclusion(index: int, size: int, leaf: bytes, proof: Sequence[bytes], root: bytes) -> None:
    if root_from_inclusion_proof(index, size, leaf, proof) != root:
        raise ProofError(f"inclusion proof of leaf {index} does not lead to the tree head of size {size}")


def verify_consistency(old_size: int, new_size: int, old_root: bytes, new_root: bytes,
                       proof: Sequence[bytes]) -> None:
    """RFC 9162 section 2.1.4.2: raises ProofError unless the proof shows the tree of `old_size`
    with `old_root` is a prefix of the tree of `new_size` with `new_root`."""
    if not 0 < old_size <= new_size:
        raise ProofError(f"no consistency proof from size {old_size} to size {new_size}")
    if old_size == new_size:
        if proof:
            raise ProofError("a consistency proof between equal sizes must be empty")
        if old_root != new_root:
            raise ProofError(f"two different tree heads for the same size {old_size}")
        return
    if not proof:
        raise ProofError("empty consistency proof")
    proof = list(proof)
    if old_size & (old_size - 1) == 0:  # a power of two: the old root is a node of the new tree
        proof.insert(0, old_root)
    fn, sn = old_size - 1, new_size - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = proof[0]
    for c in proof[1:]:
        if sn == 0:
            raise ProofError("consistency proof is longer than needed")
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise ProofError("consistency proof is shorter than needed")
    if fr != old_root:
        raise ProofError(f"consistency proof does not lead to the tree head of size {old_size}")
    if sr != new_root:
        raise ProofError(f"consistency proof does not lead to the tree head of size {new_size}")


class PrunedTree:
    """Subtree roots of a log whose first `pruned_size` leaves are gone, known only through the
    frontier they left (archived records leave their frontier in the signed tombstone).

    Every subtree an inclusion or consistency proof needs is either a frontier block, or lies after
    the pruned part, or straddles it; a straddling subtree splits, as RFC 6962 splits any tree, into
    frontier blocks and subtrees of the remaining leaves.
    """

    def __init__(self, prefix_frontier: list[tuple[int, bytes]], leaves: Sequence[bytes]):
        self.pruned_size = frontier_size(prefix_frontier)
        self.leaves = leaves
        self.size = self.pruned_size + len(leaves)
        self._blocks: dict[tuple[int, int], bytes] = {}
        start = 0
        for block_size, node in prefix_frontier:
            self._blocks[(start, start + block_size)] = node
            start += block_size

    def __call__(self, start: int, end: int) -> bytes:
        if not 0 <= start < end <= self.size:
            raise ProofError(f"subtree [{start}, {end}) is outside a tree of size {self.size}")
        known = self._blocks.get((start, end))
        if known is not None:
            return known
        if start >= self.pruned_size:
            offset = self.pruned_size
            return root_of(self.leaves[start - offset:end - offset])
        if end - start == 1:
            raise ProofError(f"leaf {start} was archived and is not part of any archived subtree root")
        k = _split(end - start)
        return node_hash(self(start, start + k), self(start + k, end))
