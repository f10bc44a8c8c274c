"""RFC 6962 hashing and proofs, checked against the certificate-transparency reference vectors
(the 8-leaf tree of the CT reference implementation's merkle_tree_test)."""

import random

import pytest

from appliance.audit import merkle
from appliance.audit.verify import level_root

LEAF_INPUTS = [bytes.fromhex(h) for h in (
    "", "00", "10", "2021", "3031", "40414243", "5051525354555657", "606162636465666768696a6b6c6d6e6f")]
ROOTS = [
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
]
# (leaf index, tree size, audit path), RFC 6962 section 2.1.1.
INCLUSION = [
    (0, 1, []),
    (0, 8, ["96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4"]),
    (5, 8, ["bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
            "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"]),
    (2, 3, ["fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125"]),
    (1, 5, ["6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b"]),
]
# (old size, new size, proof), RFC 6962 section 2.1.2.
CONSISTENCY = [
    (1, 1, []),
    (1, 8, ["96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4"]),
    (6, 8, ["0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
            "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"]),
    (2, 5, ["5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b"]),
]

LEAVES = [merkle.leaf_hash(data) for data in LEAF_INPUTS]
TREE = merkle.list_subtree_root(LEAVES)


def test_tree_heads_match_the_reference_for_every_size():
    for size, expected in enumerate(ROOTS):
        assert merkle.root_of(LEAVES[:size]).hex() == expected
        assert level_root(LEAVES[:size]).hex() == expected
        frontier = []
        for leaf in LEAVES[:size]:
            frontier = merkle.frontier_append(frontier, leaf)
        assert merkle.frontier_root(frontier).hex() == expected


def test_a_frontier_extended_in_blocks_matches_one_leaf_at_a_time():
    """Many leaves go in as whole perfect subtrees; any split of the same leaves gives the same
    frontier as appending them one by one, from any starting size."""
    rng = random.Random(6962)
    leaves = [merkle.leaf_hash(i.to_bytes(4, "big")) for i in range(1100)]
    for _ in range(40):
        cuts = sorted(rng.sample(range(1, len(leaves)), rng.randint(0, 12)))
        bulk, single = [], []
        for start, end in zip([0, *cuts], [*cuts, len(leaves)], strict=True):
            merkle.frontier_extend(bulk, leaves[start:end])
            for leaf in leaves[start:end]:
                single = merkle.frontier_append(single, leaf)
            assert bulk == single
        assert merkle.frontier_root(bulk) == merkle.root_of(leaves) == level_root(leaves)


@pytest.mark.parametrize(("index", "size", "path"), INCLUSION)
def test_inclusion_proofs_match_the_reference_and_verify(index, size, path):
    proof = merkle.inclusion_proof(index, size, TREE)
    assert [node.hex() for node in proof] == path
    root = bytes.fromhex(ROOTS[size])
    merkle.verify_inclusion(index, size, LEAVES[index], proof, root)
    with pytest.raises(merkle.ProofError):
        merkle.verify_inclusion(index, size, merkle.leaf_hash(b"forged"), proof, root)
    if proof:
        with pytest.raises(merkle.ProofError):
            merkle.verify_inclusion(index, size, LEAVES[index], proof[:-1], root)


@pytest.mark.parametrize(("old", "new", "path"), CONSISTENCY)
def test_consistency_proofs_match_the_reference_and_verify(old, new, path):
    proof = merkle.consistency_proof(old, new, TREE)
    assert [node.hex() for node in proof] == path
    old_root, new_root = bytes.fromhex(ROOTS[old]), bytes.fromhex(ROOTS[new])
    merkle.verify_consistency(old, new, old_root, new_root, proof)
    if old != new:
        with pytest.raises(merkle.ProofError):
            merkle.verify_consistency(old, new, bytes.fromhex(ROOTS[old - 1] if old > 1 else ROOTS[2]), new_root,
                                      proof)
        with pytest.raises(merkle.ProofError):
            merkle.verify_consistency(old, new, old_root, new_root, proof[:-1])


def test_proofs_of_every_shape_verify_and_a_pruned_prefix_gives_the_same_proofs():
    rng = random.Random(6962)
    leaves = [merkle.leaf_hash(bytes([i % 256, i // 256])) for i in range(70)]
    full = merkle.list_subtree_root(leaves)
    for size in range(1, 71):
        root = merkle.root_of(leaves[:size])
        assert level_root(leaves[:size]) == root
        for index in range(size):
            proof = merkle.inclusion_proof(index, size, full)
            merkle.verify_inclusion(index, size, leaves[index], proof, root)
            # Archived records leave only their frontier; a proof of a later record is the same.
            pruned = rng.randint(0, index)
            prefix = []
            merkle.frontier_extend(prefix, leaves[:pruned])
            tree = merkle.PrunedTree(prefix, leaves[pruned:size])
            assert merkle.inclusion_proof(index, size, tree) == proof
        for old in range(1, size + 1):
            proof = merkle.consistency_proof(old, size, full)
            merkle.verify_consistency(old, size, merkle.root_of(leaves[:old]), root, proof)
            pruned = rng.randint(0, old - 1)
            prefix = []
            merkle.frontier_extend(prefix, leaves[:pruned])
            assert merkle.consistency_proof(old, size, merkle.PrunedTree(prefix, leaves[pruned:size])) == proof


def test_a_pruned_tree_refuses_a_leaf_it_no_longer_has():
    prefix = []
    merkle.frontier_extend(prefix, LEAVES[:5])
    with pytest.raises(merkle.ProofError, match="archived"):
        merkle.inclusion_proof(2, 8, merkle.PrunedTree(prefix, LEAVES[5:]))
