//! The Merkle tree over a manifest's host set (`docs/manifest-proofs.md`): RFC 9162 §2.1's
//! Merkle Tree Hash with SHA-256, leaves and interior nodes domain-separated, inclusion proofs
//! (§2.1.3) and absence proofs built from the two neighbours of a name in the sorted leaves.
//!
//! Pure and free of I/O. Hashes are raw 32-byte arrays here; on the wire they are lowercase hex.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::artifacts::HostSetEntry;
use crate::canonical::{self, CanonicalError};

/// A SHA-256 output.
pub type Hash = [u8; 32];

/// The most hashes an audit path is read with: a tree of 2^64 leaves needs 64.
pub const MAX_PATH: usize = 64;

/// Domain prefix of a leaf's hash (RFC 9162 §2.1.1).
const LEAF_PREFIX: u8 = 0x00;
/// Domain prefix of an interior node's hash.
const NODE_PREFIX: u8 = 0x01;

/// `SHA-256(0x00 ‖ leaf)`.
pub fn leaf_hash(leaf: &[u8]) -> Hash {
    let mut h = Sha256::new();
    h.update([LEAF_PREFIX]);
    h.update(leaf);
    h.finalize().into()
}

/// `SHA-256(0x01 ‖ left ‖ right)`.
pub fn node_hash(left: &Hash, right: &Hash) -> Hash {
    let mut h = Sha256::new();
    h.update([NODE_PREFIX]);
    h.update(left);
    h.update(right);
    h.finalize().into()
}

/// The hash of the empty tree, `SHA-256("")`.
pub fn empty_root() -> Hash {
    Sha256::digest([]).into()
}

/// A host-set entry's leaf bytes: its RFC 8785 canonical JSON.
pub fn entry_leaf(entry: &HostSetEntry) -> Result<Vec<u8>, CanonicalError> {
    canonical::to_vec_of(entry)
}

/// Every level of a tree, leaves first. A level's last node without a sibling is carried up
/// unchanged, which gives RFC 9162's hash (the split at the largest power of two below `n`)
/// bottom-up, in one pass and without recursion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tree {
    levels: Vec<Vec<Hash>>,
}

impl Tree {
    /// The tree over `leaves`' hashes, in order.
    pub fn from_leaf_hashes(leaves: Vec<Hash>) -> Tree {
        let mut levels = vec![leaves];
        while levels.last().is_some_and(|l| l.len() > 1) {
            let below = levels.last().map(Vec::as_slice).unwrap_or_default();
            let above: Vec<Hash> = below.chunks(2).map(|pair| if let [l, r] = pair { node_hash(l, r) } else { pair[0] }).collect();
            levels.push(above);
        }
        Tree { levels }
    }

    /// The tree over a host set's entries, in the order given.
    pub fn from_entries(entries: &[HostSetEntry]) -> Result<Tree, CanonicalError> {
        let leaves = entries.iter().map(|e| entry_leaf(e).map(|b| leaf_hash(&b))).collect::<Result<Vec<_>, _>>()?;
        Ok(Tree::from_leaf_hashes(leaves))
    }

    /// Number of leaves.
    pub fn size(&self) -> u64 {
        self.levels[0].len() as u64
    }

    /// The Merkle Tree Hash.
    pub fn root(&self) -> Hash {
        match self.levels.last() {
            Some(top) if top.len() == 1 => top[0],
            _ => empty_root(),
        }
    }

    /// The audit path of leaf `index` (RFC 9162 `PATH`), nearest sibling first; `None` past
    /// the last leaf.
    pub fn audit_path(&self, index: u64) -> Option<Vec<Hash>> {
        if index >= self.size() {
            return None;
        }
        let mut i = index as usize;
        let mut path = Vec::with_capacity(self.levels.len());
        for level in &self.levels[..self.levels.len() - 1] {
            // A node without a sibling was carried up: no hash on the path at this level.
            if let Some(sibling) = level.get(i ^ 1) {
                path.push(*sibling);
            }
            i >>= 1;
        }
        Some(path)
    }

    /// Bytes held: 32 per node.
    pub fn heap_bytes(&self) -> usize {
        self.levels.iter().map(|l| l.capacity() * 32).sum()
    }
}

/// Why a proof does not hold.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProofError {
    /// The leaf index is at or past the tree's size.
    #[error("leaf index {index} is not below the tree size {size}")]
    IndexOutOfRange {
        /// Claimed index.
        index: u64,
        /// Signed size.
        size: u64,
    },
    /// The audit path has more hashes than the index in that size needs.
    #[error("the audit path is longer than leaf {index} of a {size}-leaf tree needs")]
    PathTooLong {
        /// Claimed index.
        index: u64,
        /// Signed size.
        size: u64,
    },
    /// The audit path has fewer hashes than the index in that size needs.
    #[error("the audit path is shorter than leaf {index} of a {size}-leaf tree needs")]
    PathTooShort {
        /// Claimed index.
        index: u64,
        /// Signed size.
        size: u64,
    },
    /// The path leads to another root.
    #[error("the audit path leads to {computed}, not the signed root {expected}")]
    RootDiffers {
        /// What the leaf and path hash to.
        computed: String,
        /// The signed root.
        expected: String,
    },
    /// A hash on the wire that is not 64 lowercase hex digits.
    #[error("{what} is not a sha256 in lowercase hex")]
    BadHash {
        /// Which field.
        what: String,
    },
    /// The neighbours of an absence proof do not bracket the name.
    #[error("absence of {name:?}: {reason}")]
    NotAbsent {
        /// The name.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// An entry could not be canonicalised.
    #[error("entry: {0}")]
    Canonical(String),
}

/// RFC 9162 §2.1.3.2: whether `path` proves leaf hash `leaf` at `index` in a tree of `size`
/// leaves whose hash is `root`. The path's length must be exactly the one that index in that
/// size has, so a truncated or extended path is refused even where its hashes are genuine.
pub fn verify_inclusion(leaf: &Hash, index: u64, size: u64, path: &[Hash], root: &Hash) -> Result<(), ProofError> {
    if index >= size {
        return Err(ProofError::IndexOutOfRange { index, size });
    }
    let (mut fn_, mut sn) = (index, size - 1);
    let mut r = *leaf;
    for p in path {
        if sn == 0 {
            return Err(ProofError::PathTooLong { index, size });
        }
        if fn_ & 1 == 1 || fn_ == sn {
            r = node_hash(p, &r);
            if fn_ & 1 == 0 {
                while fn_ & 1 == 0 && fn_ != 0 {
                    fn_ >>= 1;
                    sn >>= 1;
                }
            }
        } else {
            r = node_hash(&r, p);
        }
        fn_ >>= 1;
        sn >>= 1;
    }
    if sn != 0 {
        return Err(ProofError::PathTooShort { index, size });
    }
    if r != *root {
        return Err(ProofError::RootDiffers { computed: hex::encode(r), expected: hex::encode(root) });
    }
    Ok(())
}

/// Parses a lowercase-hex sha256 read from the wire.
pub fn parse_hash(what: &str, hex_text: &str) -> Result<Hash, ProofError> {
    let bad = || ProofError::BadHash { what: what.to_owned() };
    if hex_text.len() != 64 || !hex_text.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        return Err(bad());
    }
    let mut out = [0u8; 32];
    hex::decode_to_slice(hex_text, &mut out).map_err(|_| bad())?;
    Ok(out)
}

/// One leaf with its place and audit path, as served: the entry, its index, the path in hex.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EntryProof {
    /// The host-set entry (its canonical JSON is the leaf).
    pub entry: HostSetEntry,
    /// Its 0-based position in the sorted host set.
    pub leaf_index: u64,
    /// The audit path, nearest sibling first, lowercase hex.
    pub path: Vec<String>,
}

impl EntryProof {
    /// The proof of leaf `index` of `entries` (whose tree is `tree`).
    pub fn of(tree: &Tree, entries: &[HostSetEntry], index: usize) -> Option<EntryProof> {
        let path = tree.audit_path(index as u64)?;
        Some(EntryProof { entry: entries.get(index)?.clone(), leaf_index: index as u64, path: path.iter().map(hex::encode).collect() })
    }

    /// Checks this proof against a signed `root` of `size` leaves.
    pub fn verify(&self, size: u64, root: &Hash) -> Result<(), ProofError> {
        if self.path.len() > MAX_PATH {
            return Err(ProofError::PathTooLong { index: self.leaf_index, size });
        }
        let path = self.path.iter().enumerate().map(|(i, h)| parse_hash(&format!("path[{i}]"), h)).collect::<Result<Vec<_>, _>>()?;
        let leaf = entry_leaf(&self.entry).map_err(|e| ProofError::Canonical(e.to_string()))?;
        verify_inclusion(&leaf_hash(&leaf), self.leaf_index, size, &path, root)
    }
}

/// That a name is not in the tree: the proven leaves on either side of where it would sort.
/// Neither side in a tree of no leaves; only `right` (leaf 0) before the first; only `left`
/// (the last leaf) after the last.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AbsenceProof {
    /// The greatest leaf below the name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub left: Option<EntryProof>,
    /// The smallest leaf above it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub right: Option<EntryProof>,
}

impl AbsenceProof {
    /// The absence proof of `name` in `entries` (sorted by hostname), or `None` when it is
    /// there.
    pub fn of(tree: &Tree, entries: &[HostSetEntry], name: &str) -> Option<AbsenceProof> {
        let at = match entries.binary_search_by(|e| e.hostname.as_str().cmp(name)) {
            Ok(_) => return None,
            Err(at) => at,
        };
        let left = at.checked_sub(1).and_then(|i| EntryProof::of(tree, entries, i));
        let right = EntryProof::of(tree, entries, at);
        Some(AbsenceProof { left, right })
    }

    /// Checks that `name` is in no leaf of the tree `root` of `size` leaves: each neighbour
    /// proven, the two adjacent (or the one at the edge), and their hostnames bracketing `name`.
    pub fn verify(&self, name: &str, size: u64, root: &Hash) -> Result<(), ProofError> {
        let not = |reason: &str| ProofError::NotAbsent { name: name.to_owned(), reason: reason.to_owned() };
        for side in [&self.left, &self.right].into_iter().flatten() {
            side.verify(size, root)?;
        }
        match (&self.left, &self.right) {
            (None, None) if size == 0 => Ok(()),
            (None, None) => Err(not("no neighbour given in a tree that has leaves")),
            (Some(l), Some(r)) if l.leaf_index.checked_add(1) != Some(r.leaf_index) => Err(not("the two neighbours are not adjacent")),
            (Some(l), _) if l.entry.hostname.as_str() >= name => Err(not("the left neighbour does not sort below it")),
            (_, Some(r)) if r.entry.hostname.as_str() <= name => Err(not("the right neighbour does not sort above it")),
            (None, Some(r)) if r.leaf_index != 0 => Err(not("with no left neighbour, the right one must be the first leaf")),
            (Some(l), None) if l.leaf_index.checked_add(1) != Some(size) => {
                Err(not("with no right neighbour, the left one must be the last leaf"))
            }
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
#[path = "merkle_tests.rs"]
mod tests;
