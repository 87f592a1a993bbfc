"""torch_check: Kiln's outputs against PyTorch, judged with Kiln's own error measures and tolerances.

Modules: normalized (reads `kiln validate --normalized`, standard library only), tensors (Kiln's raw
encoding), ops (the graph in PyTorch, with magnitudes), compare (measure_error), __main__ (the command).
Importing the package imports nothing else, so normalized.py and its test run without PyTorch.
"""
