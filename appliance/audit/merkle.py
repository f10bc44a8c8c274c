"""RFC 6962 Merkle tree hashing (leaf prefix 0x00, node prefix 0x01) and an append-only frontier."""

import hashlib


def leaf_hash(data: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


EMPTY_ROOT = hashlib.sha256(b"").digest()


def frontier_append(frontier: list[tuple[int, bytes]], leaf: bytes) -> list[tuple[int, bytes]]:
    """Add one leaf hash to a frontier of (subtree size, root) pairs, largest subtree first."""
    frontier = list(frontier)
    size, node = 1, leaf
    while frontier and frontier[-1][0] == size:
        left_size, left = frontier.pop()
        node = node_hash(left, node)
        size += left_size
    frontier.append((size, node))
    return frontier


def frontier_root(frontier: list[tuple[int, bytes]]) -> bytes:
    """The RFC 6962 tree head of the leaves the frontier summarises."""
    if not frontier:
        return EMPTY_ROOT
    root = frontier[-1][1]
    for _size, node in reversed(frontier[:-1]):
        root = node_hash(node, root)
    return root


def root_of(leaves: list[bytes]) -> bytes:
    """MTH(D[n]) of RFC 6962, section 2.1, over leaf hashes."""
    frontier: list[tuple[int, bytes]] = []
    for leaf in leaves:
        frontier = frontier_append(frontier, leaf)
    return frontier_root(frontier)


def frontier_to_json(frontier) -> list[list]:
    return [[size, node.hex()] for size, node in frontier]


def frontier_from_json(data) -> list[tuple[int, bytes]]:
    return [(int(size), bytes.fromhex(node)) for size, node in data or []]
