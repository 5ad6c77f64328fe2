"""Studies: experiments that drive the whole package (training, evaluation, reports) from above `training.py`.

- `demo`: the laptop lab, GRPO against AER on the toy model (`make demo`);
- `real_study`: the real-LLM study, SmolLM2-135M-Instruct over seeds (`make real`, docs/real_llm.md);
- `report`: the laptop lab's pass@k, figures and summaries.
"""
