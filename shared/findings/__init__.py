"""What each notebook concludes from its numbers, one module a notebook topic: the plumbing that
picks this run's result or the committed one its Takeaway quotes, checks that they agree
(`report.agree`), and builds the tables the story shows, so a notebook calls it in one line.

    rollout   notebook 01      lora      02      logits    03 (both halves)
    pretrain  04               sweep     05      scaling   06      grpo      07
    which_slice 08

It sits at the top of the library (it may use the plan engine and every recipe; nothing in the
library imports it), which is why it is not inside the recipe packages themselves.
"""
