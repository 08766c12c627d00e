"""Readers for training frameworks: PyTorch (``dstore.to_torch``, extra ``torch``).

Nothing here is imported by ``import dstore``: ``dstore.readers.torch`` imports
torch, and the plan of who reads which records (``dstore.readers.plan``) is
shared by every framework.
"""
