"""The long run: Phase 3's cloud pretraining run (``recipelab pretrain``).

It trains exactly the exported recipe through the trainer's one training core
(:mod:`recipelab.trainer.core`) and adds, around it and never inside it, what a billed
multi-GPU run needs: torchrun/DDP, checkpoints, the budget contract, a spike rehearsal,
metrics, plots and MLflow.

Entry points: :func:`~recipelab.longrun.run.run_pretrain` with a
:class:`~recipelab.longrun.pretrain_config.PretrainConfig`.
"""

from recipelab.longrun.pretrain_config import PretrainConfig, PretrainResult
from recipelab.longrun.run import run_pretrain

__all__ = ["PretrainConfig", "PretrainResult", "run_pretrain"]
