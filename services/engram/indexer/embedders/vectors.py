"""Vector helpers shared by the embedders."""

from __future__ import annotations

import numpy as np

from engram.indexes.ports import Vectors


def l2_normalise(vectors: Vectors) -> Vectors:
    """Rows scaled to unit length, as float32 (an all-zero row stays zero)."""
    matrix = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=-1, keepdims=True)
    normalised: Vectors = (matrix / np.maximum(norms, 1e-12)).astype(np.float32, copy=False)
    return normalised
