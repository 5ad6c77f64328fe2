"""aer_trl: Adaptive Entropy Regularization (AER) for TRL's GRPO and RLOO trainers, as a TRL extension.

The top level loads lazily, as TRL's does: `import aer_trl` (and the pure math, `import aer_trl.core_algos`) imports
neither TRL nor transformers; each name below is imported from its module the first time it is used.
"""

from typing import TYPE_CHECKING

import lazy_loader

__version__ = "0.1.0"

__getattr__, __dir__, __all__ = lazy_loader.attach(
    __name__,
    submod_attrs={
        "config": ["AERGRPOConfig", "AERConfig"],
        "trainer": ["AERGRPOTrainer"],
        "rloo_trainer": ["AERRLOOTrainer"],
        "rloo_config": ["AERRLOOConfig"],
        "core_algos": ["AERController", "difficulty_coefficients"],
        "callbacks": ["AERCallback"],
        "methods": ["Method", "TokenBatch", "get_method", "register_method"],
        "rewards": ["math_accuracy_reward"],
        "evaluation.validation": ["PassAtKCallback"],
        "evaluation.harness": ["EvalArguments", "evaluate"],
    },
)

if TYPE_CHECKING:  # what the lazy names are, for type checkers and IDEs
    from .callbacks import AERCallback
    from .config import AERConfig, AERGRPOConfig
    from .core_algos import AERController, difficulty_coefficients
    from .evaluation.harness import EvalArguments, evaluate
    from .evaluation.validation import PassAtKCallback
    from .methods import Method, TokenBatch, get_method, register_method
    from .rewards import math_accuracy_reward
    from .rloo_config import AERRLOOConfig
    from .rloo_trainer import AERRLOOTrainer
    from .trainer import AERGRPOTrainer
