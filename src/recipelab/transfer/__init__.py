"""How a proxy's recipe becomes the target's: the export and the laws it applies.

- :mod:`~recipelab.transfer.export`: the winner at the target's full shape, its runner-up
  and the manifest;
- :mod:`~recipelab.transfer.steplaw`, :mod:`~recipelab.transfer.width`: the rate and batch
  carried to the target's size and tokens;
- :mod:`~recipelab.transfer.prediction`, :mod:`~recipelab.transfer.powerlaw`: the predicted
  curve and its band; :mod:`~recipelab.transfer.distance`: how far it extrapolates, beside
  what ``bench/transfer.py`` verified;
- :mod:`~recipelab.transfer.micro_batch`, :mod:`~recipelab.transfer.torchtitan`: the
  per-GPU batch, the sharding and the torchtitan config of the hand-off;
- :mod:`~recipelab.transfer.verify`: the cloud run against the prediction.

``report/`` keeps the pages and plots that show these. Entry points: :func:`write_export`
with :class:`ExportOptions`, :func:`predict` (a :class:`Prediction`) and :func:`split_batch`.
"""

from __future__ import annotations

from typing import Any

from recipelab.lazy import lazy_export

EXPORTS = {"ExportOptions": "recipelab.transfer.export", "write_export": "recipelab.transfer.export",
           "Prediction": "recipelab.transfer.prediction", "predict": "recipelab.transfer.prediction",
           "split_batch": "recipelab.transfer.micro_batch"}
__all__ = sorted(EXPORTS)


def __getattr__(name: str) -> Any:
    """The entry points, imported on first use."""
    return lazy_export(__name__, EXPORTS, name)
