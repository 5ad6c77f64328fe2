"""aer_trl: Adaptive Entropy Regularization (AER) for TRL's GRPO and RLOO trainers, as a TRL extension.

The package is the AER core (its top-level modules: the math, the methods, the configs, the core and the trainers'
adapters, the callbacks, metrics and card) and, apart, the application that runs recipes on it (`aer_trl.app`: the
command lines and runner, data, prompts, rewards, evaluation, GGUF, launch, file helpers); docs/design.md §0.

The top level loads lazily, as TRL's does: `import aer_trl` (and the pure math, `import aer_trl.core_algos`) imports
neither TRL nor transformers; each name below is imported from its module the first time it is used.
"""

from typing import TYPE_CHECKING

import lazy_loader

from . import _moved

__version__ = "0.1.0"
_moved.install()  # the application's old import paths (aer_trl.rewards, ...) still work, with a FutureWarning

__getattr__, __dir__, __all__ = lazy_loader.attach(
    __name__,
    submod_attrs={
        "config": ["AERGRPOConfig", "AERConfig"],
        "trainer": ["AERGRPOTrainer"],
        "rloo_trainer": ["AERRLOOTrainer"],
        "rloo_config": ["AERRLOOConfig"],
        "async_grpo_trainer": ["AERAsyncGRPOTrainer"],
        "async_grpo_config": ["AERAsyncGRPOConfig"],
        "core_algos": ["AERController", "difficulty_coefficients"],
        "callbacks": ["AERCallback"],
        "methods": ["Method", "TokenBatch", "get_method", "register_method"],
        "app.rewards": ["math_accuracy_reward"],
        "app.evaluation.validation": ["PassAtKCallback"],
        "app.evaluation.harness": ["EvalArguments", "evaluate"],
    },
)

if TYPE_CHECKING:  # what the lazy names are, for type checkers and IDEs
    from .app.evaluation.harness import EvalArguments, evaluate
    from .app.evaluation.validation import PassAtKCallback
    from .app.rewards import math_accuracy_reward
    from .async_grpo_config import AERAsyncGRPOConfig
    from .async_grpo_trainer import AERAsyncGRPOTrainer
    from .callbacks import AERCallback
    from .config import AERConfig, AERGRPOConfig
    from .core_algos import AERController, difficulty_coefficients
    from .methods import Method, TokenBatch, get_method, register_method
    from .rloo_config import AERRLOOConfig
    from .rloo_trainer import AERRLOOTrainer
    from .trainer import AERGRPOTrainer
