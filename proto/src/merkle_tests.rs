//! The tree against RFC 9162's recursive definitions, and the proof rules one by one.

use super::*;

/// RFC 9162 §2.1.1, as written: MTH over `leaves` (leaf hashes already taken).
fn reference_root(leaves: &[Hash]) -> Hash {
    match leaves.len() {
        0 => empty_root(),
        1 => leaves[0],
        n => {
            let k = split(n);
            node_hash(&reference_root(&leaves[..k]), &reference_root(&leaves[k..]))
        }
    }
}

/// RFC 9162 §2.1.3.1's `PATH(m, D[n])`.
fn reference_path(m: usize, leaves: &[Hash]) -> Vec<Hash> {
    let n = leaves.len();
    if n <= 1 {
        return Vec::new();
    }
    let k = split(n);
    if m < k {
        let mut p = reference_path(m, &leaves[..k]);
        p.push(reference_root(&leaves[k..]));
        p
    } else {
        let mut p = reference_path(m - k, &leaves[k..]);
        p.push(reference_root(&leaves[..k]));
        p
    }
}

/// The largest power of two below `n` (n > 1).
fn split(n: usize) -> usize {
    let mut k = 1;
    while k * 2 < n {
        k *= 2;
    }
    k
}

fn leaves(n: usize) -> Vec<Hash> {
    (0..n).map(|i| leaf_hash(format!("leaf {i}").as_bytes())).collect()
}

fn entries(names: &[&str]) -> Vec<HostSetEntry> {
    names.iter().map(|n| HostSetEntry { hostname: (*n).to_owned(), wave_index: 0, target_closure: format!("/nix/store/{n}") }).collect()
}

#[test]
fn the_tree_is_rfc_9162s_for_every_size_and_every_leaf() {
    for n in 0..=70 {
        let l = leaves(n);
        let tree = Tree::from_leaf_hashes(l.clone());
        assert_eq!(tree.root(), reference_root(&l), "root of {n}");
        for m in 0..n {
            let path = tree.audit_path(m as u64).expect("in range");
            assert_eq!(path, reference_path(m, &l), "path of {m} in {n}");
            verify_inclusion(&l[m], m as u64, n as u64, &path, &tree.root()).expect("verifies");
        }
        assert_eq!(tree.audit_path(n as u64), None);
    }
}

#[test]
fn the_empty_tree_hashes_the_empty_string() {
    assert_eq!(hex::encode(Tree::from_leaf_hashes(Vec::new()).root()), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

#[test]
fn a_truncated_or_extended_path_is_refused() {
    for n in [2usize, 5, 8, 13, 64, 65] {
        let l = leaves(n);
        let tree = Tree::from_leaf_hashes(l.clone());
        for m in 0..n {
            let path = tree.audit_path(m as u64).expect("path");
            let short = &path[..path.len() - 1];
            assert_eq!(
                verify_inclusion(&l[m], m as u64, n as u64, short, &tree.root()),
                Err(ProofError::PathTooShort { index: m as u64, size: n as u64 })
            );
            let mut long = path.clone();
            long.push(l[0]);
            assert!(verify_inclusion(&l[m], m as u64, n as u64, &long, &tree.root()).is_err(), "extended path of {m} in {n}");
        }
    }
}

#[test]
fn a_proof_for_another_index_or_size_is_refused() {
    let l = leaves(10);
    let tree = Tree::from_leaf_hashes(l.clone());
    let path = tree.audit_path(3).expect("path");
    assert!(verify_inclusion(&l[3], 4, 10, &path, &tree.root()).is_err());
    // A size whose shape gives that index another path length (the size is signed with the
    // root, so only the signed one is ever used).
    assert!(verify_inclusion(&l[3], 3, 8, &path, &tree.root()).is_err());
    assert!(verify_inclusion(&l[3], 3, 17, &path, &tree.root()).is_err());
    assert_eq!(verify_inclusion(&l[3], 10, 10, &path, &tree.root()), Err(ProofError::IndexOutOfRange { index: 10, size: 10 }));
}

#[test]
fn second_preimage_an_interior_node_as_a_leaf_is_refused() {
    // Without the 0x00/0x01 prefixes, the bytes left ‖ right of the node over leaves 0 and 1
    // would hash, as a "leaf" at index 0 of a half-height tree, to the same root.
    let l = leaves(4);
    let tree = Tree::from_leaf_hashes(l.clone());
    let mut forged = Vec::with_capacity(64);
    forged.extend_from_slice(&l[0]);
    forged.extend_from_slice(&l[1]);
    let right = node_hash(&l[2], &l[3]);
    let err = verify_inclusion(&leaf_hash(&forged), 0, 2, &[right], &tree.root()).expect_err("refused");
    assert!(matches!(err, ProofError::RootDiffers { .. }), "{err:?}");
    // The node itself, offered as a leaf's hash, passes only as the node it is.
    assert_eq!(node_hash(&l[0], &l[1]), tree.levels[1][0]);
}

#[test]
fn an_entry_proof_round_trips_and_binds_every_field() {
    let e = entries(&["a", "b", "c", "d", "e"]);
    let tree = Tree::from_entries(&e).expect("tree");
    for i in 0..e.len() {
        let proof = EntryProof::of(&tree, &e, i).expect("proof");
        proof.verify(5, &tree.root()).expect("verifies");
        let mut moved = proof.clone();
        moved.entry.wave_index = 1;
        assert!(matches!(moved.verify(5, &tree.root()), Err(ProofError::RootDiffers { .. })));
        let mut retargeted = proof.clone();
        retargeted.entry.target_closure.push('x');
        assert!(retargeted.verify(5, &tree.root()).is_err());
    }
}

#[test]
fn a_hash_that_is_not_lowercase_hex_is_refused() {
    let e = entries(&["a", "b"]);
    let tree = Tree::from_entries(&e).expect("tree");
    let mut proof = EntryProof::of(&tree, &e, 0).expect("proof");
    proof.path[0] = proof.path[0].to_uppercase();
    assert_eq!(proof.verify(2, &tree.root()), Err(ProofError::BadHash { what: "path[0]".to_owned() }));
}

#[test]
fn absence_is_proven_by_the_two_neighbours() {
    let e = entries(&["b", "d", "f"]);
    let tree = Tree::from_entries(&e).expect("tree");
    for name in ["a", "c", "e", "g"] {
        let proof = AbsenceProof::of(&tree, &e, name).expect("absent");
        proof.verify(name, 3, &tree.root()).expect("absence verifies");
    }
    assert_eq!(AbsenceProof::of(&tree, &e, "d"), None, "a member has no absence proof");
    let empty = Tree::from_entries(&[]).expect("tree");
    AbsenceProof { left: None, right: None }.verify("x", 0, &empty.root()).expect("nothing is in an empty tree");
}

#[test]
fn absence_of_a_member_cannot_be_faked() {
    let e = entries(&["b", "d", "f"]);
    let tree = Tree::from_entries(&e).expect("tree");
    let root = tree.root();
    // "d" is there: its neighbours b and f are not adjacent.
    let skip = AbsenceProof { left: EntryProof::of(&tree, &e, 0), right: EntryProof::of(&tree, &e, 2) };
    assert!(matches!(skip.verify("d", 3, &root), Err(ProofError::NotAbsent { .. })));
    // Adjacent, but not bracketing it.
    let wrong = AbsenceProof { left: EntryProof::of(&tree, &e, 0), right: EntryProof::of(&tree, &e, 1) };
    assert!(wrong.verify("d", 3, &root).is_err());
    // Only the first leaf, claimed as the right neighbour of a name after it.
    let edge = AbsenceProof { left: None, right: EntryProof::of(&tree, &e, 1) };
    assert!(edge.verify("c", 3, &root).is_err(), "the right neighbour alone must be leaf 0");
    let last = AbsenceProof { left: EntryProof::of(&tree, &e, 1), right: None };
    assert!(last.verify("e", 3, &root).is_err(), "the left neighbour alone must be the last leaf");
    assert!(AbsenceProof { left: None, right: None }.verify("d", 3, &root).is_err());
}
