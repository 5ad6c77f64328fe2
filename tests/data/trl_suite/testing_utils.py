# Copyright 2026 The aer_trl authors.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
#
# A stand-in for TRL's tests/testing_utils.py (see test_grpo_trainer.py beside it).
import pytest
from trl.import_utils import is_aer_suite_probe_available, is_peft_available  # noqa: F401 (the second is shimmed)


class TrlTestCase:
    @pytest.fixture(autouse=True)
    def set_tmp_dir(self, tmp_path):
        self.tmp_dir = str(tmp_path)
