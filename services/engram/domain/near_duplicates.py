"""Near-duplicate documents (seed 000's deduplication): MinHash signatures of word shingles,
candidate pairs from locality-sensitive hashing, groups by estimated Jaccard similarity.
Pure: no I/O (datasketch is arithmetic on numpy arrays).

Only reports: a group comes with a merge suggestion (keep the longest, fold the others into
it), and nothing is ever merged without the operator's call. Dated records (daily logs,
archives) and documents shorter than MIN_WORDS are left out: their likeness is a template's,
not a repeat.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from datasketch import MinHash, MinHashLSH

# Words per shingle, permutations per signature, and the Jaccard similarity (of the shingle
# sets, as the signatures estimate it) from which two documents count as near-duplicates.
SHINGLE_WORDS = 3
PERMUTATIONS = 128
THRESHOLD = 0.7
MIN_WORDS = 8


@dataclass(frozen=True, slots=True)
class NearDuplicates:
    """Paths whose content is nearly the same, the lowest similarity of a pair linking them,
    and the suggested keeper (the longest)."""

    paths: tuple[str, ...]
    similarity: float
    keep: str


def signature(normalised: str) -> MinHash | None:
    """The MinHash of a document's normalised text (case folded), None when too short."""
    words = normalised.casefold().split()
    if len(words) < MIN_WORDS:
        return None
    shingles = {
        " ".join(words[i : i + SHINGLE_WORDS]) for i in range(len(words) - SHINGLE_WORDS + 1)
    }
    minhash = MinHash(num_perm=PERMUTATIONS, seed=31)
    minhash.update_batch([shingle.encode() for shingle in sorted(shingles)])
    return minhash


def near_duplicate_groups(
    signatures: Mapping[str, MinHash],
    sizes: Mapping[str, int],
    exact: Sequence[Sequence[str]] = (),
) -> list[NearDuplicates]:
    """Groups of paths at least THRESHOLD alike (linked pairwise), sorted by their first
    path; a group that only repeats an exact-duplicate group is left to that report."""
    index = MinHashLSH(threshold=THRESHOLD, num_perm=PERMUTATIONS)
    for path, minhash in signatures.items():
        index.insert(path, minhash)
    parent = {path: path for path in signatures}
    lowest: dict[str, float] = {}

    def root(path: str) -> str:
        while parent[path] != path:
            parent[path] = parent[parent[path]]
            path = parent[path]
        return path

    for path, minhash in signatures.items():
        for other in index.query(minhash):
            if other <= path:
                continue
            similarity = minhash.jaccard(signatures[other])
            if similarity < THRESHOLD:
                continue
            a, b = root(path), root(other)
            joined = min(a, b)
            parent[max(a, b)] = joined
            lowest[joined] = min(similarity, lowest.get(a, 1.0), lowest.get(b, 1.0))
    members: dict[str, list[str]] = {}
    for path in signatures:
        members.setdefault(root(path), []).append(path)
    exact_sets = {frozenset(group) for group in exact}
    groups = []
    for top, paths in members.items():
        if len(paths) < 2 or frozenset(paths) in exact_sets:
            continue
        ordered = tuple(sorted(paths))
        keep = max(ordered, key=lambda p: (sizes.get(p, 0), [-ord(c) for c in p]))
        groups.append(NearDuplicates(ordered, round(lowest.get(top, 1.0), 2), keep))
    return sorted(groups, key=lambda group: group.paths)


def near_duplicate_line(group: NearDuplicates) -> str:
    others = [path for path in group.paths if path != group.keep]
    them = "them" if len(others) > 1 else "it"
    return (
        f"{' ~ '.join(group.paths)} (similarity >= {group.similarity:.2f}): suggest merging "
        f"{', '.join(others)} into {group.keep}, then deleting {them} "
        "(not done: the operator's call)"
    )
