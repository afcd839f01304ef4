"""The command lines: `tpu-budget-lab QUESTION WORKLOAD ...` (`main`) and the flat
`python -m shared.plan WORKLOAD ...` (`shared.plan.__main__`), over the same flags (`flags`)
and the same printed verdicts and searches (`point_view`).
"""
