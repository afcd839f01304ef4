"""The largest batch that fits: locate, confirm, check (docs/search.md walks through one).

`max_batch` (the search itself), `locate` (step 1: where the first exact compile goes),
`lines` and `climb` (step 2, confirm: where each next exact compile aims), `phases` (GRPO: one
phase compiled alone), `meshes` (which meshes to ask and in what order), `result` and `words`
(what a search returns and its answer in words), `view` (the answer and its evidence as text),
`gap` (closing a stored search's gap later), `figure` (docs/search.md's figure, from a
committed search).
"""
