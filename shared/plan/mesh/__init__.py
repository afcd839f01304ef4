"""Which ("fsdp", "tp") mesh a request compiles on, and what a mesh allows before compiling.

`choice` (the default mesh, the shapes a search compares, each one's least batch and ceiling),
`floor` (whether a request can fit a mesh at all, by arithmetic), `steps` (a search's requests
pinned to one mesh and its batch unit), `faster` (the meshes with more tp, while memory-bound).
"""
