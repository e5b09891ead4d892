"""Text embeddings for card retrieval: the role and the offline hashing embedder."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np


class Embedder(Protocol):
    """Turns texts into L2-normalised float32 vectors of a fixed dimension."""

    @property
    def dim(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...


class HashingEmbedder:
    """Offline, stateless embedder: scikit-learn's ``HashingVectorizer`` on word n-grams.

    Needs no fitting and no network, so every process sharing a bank embeds a
    card to the same vector. Cosine similarity is the inner product of the
    returned rows.

    Args:
        n_features: output dimension (hash buckets).
        ngram_range: word n-gram lengths hashed (unigrams and bigrams by default).
    """

    def __init__(self, n_features: int = 1024, ngram_range: tuple[int, int] = (1, 2)) -> None:
        self.n_features = n_features
        self.ngram_range = tuple(ngram_range)
        self._vectorizer: Any = None

    @property
    def dim(self) -> int:
        return int(self.n_features)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Vectors of ``texts``, shape ``(len(texts), dim)``, float32, rows of unit norm.

        An empty text maps to the zero vector.

        Raises:
            ValueError: ``n_features`` or ``ngram_range`` is unusable.
        """
        if self._vectorizer is None:
            self._vectorizer = self._build()
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        matrix = self._vectorizer.transform(list(texts))
        return np.ascontiguousarray(matrix.toarray(), dtype=np.float32)

    def _build(self) -> Any:
        from sklearn.feature_extraction.text import HashingVectorizer

        low, high = self.ngram_range
        if self.n_features < 8 or not 1 <= low <= high:
            raise ValueError("HashingEmbedder needs n_features >= 8 and 1 <= ngram_range[0] <= [1]")
        return HashingVectorizer(
            n_features=self.n_features,
            ngram_range=(low, high),
            alternate_sign=False,
            norm="l2",
            lowercase=True,
            token_pattern=r"(?u)\b\w+\b",
        )
