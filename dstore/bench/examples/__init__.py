"""Evaluation functions for ``dstore bench --evaluate MODULE:FUNCTION``, ready to copy.

``dstore.bench.examples.pyspacer:evaluate`` trains what CoralNet's pyspacer trains.
"""
