"""Which slice to rent for a whole job, and what a run costs in hours and dollars.

`budget` (roofline hours, an estimate at a named efficiency, the bill), `job` (a whole job's
size and least cost), `candidate` (one slice compiled at the batches that price it),
`cheapest` (every candidate ranked), `view` (the answer as text, table, figure), `jobs`
(notebook 08's jobs).
"""
