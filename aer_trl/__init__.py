"""aer_trl: Adaptive Entropy Regularization (AER) for GRPO, as a TRL extension."""

__version__ = "0.1.0"

from .callback import AERCallback
from .config import AERConfig
from .controller import AERController, difficulty_coefficients, group_accuracy, update_alpha
from .trainer import AERGRPOTrainer

__all__ = [
    "AERCallback",
    "AERConfig",
    "AERController",
    "AERGRPOTrainer",
    "difficulty_coefficients",
    "group_accuracy",
    "update_alpha",
    "__version__",
]
