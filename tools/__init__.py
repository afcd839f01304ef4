"""Programs no notebook imports: the headless notebook runner and execution on a TPU VM, Colab
or Kaggle. They run from a clone (`python -m tools.notebooks`, `python -m tools.remote`, or the
Makefile's targets) and are not part of the installed `shared` package.
"""
