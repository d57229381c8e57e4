"""gdemos: the demo ladder - runnable programs trained through gtape, each checked by an oracle.

``gdemos ae`` runs rung 1 (an autoencoder); ``gdemos ladder`` runs every rung with a verdict.
"""

from __future__ import annotations

from .ae import AEConfig, AEResult, train
from .ladder import RUNGS, Verdict, run_ladder

__version__ = "0.1.0"
__all__ = ["AEConfig", "AEResult", "RUNGS", "Verdict", "__version__", "run_ladder", "train"]
