"""tpu-budget-lab: the thin package the notebooks import.

Import direction (no cycles): notebooks -> plan -> train/gemma -> model/sizing/measure
-> attention/data/logits/hardware. Every module is small and owns one fact.
"""
