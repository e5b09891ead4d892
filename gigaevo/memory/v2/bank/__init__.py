"""The card bank shared between runs: cards, ``cards.json``, the store and its index."""
