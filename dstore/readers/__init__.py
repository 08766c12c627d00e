"""Readers for training frameworks: PyTorch (``dstore.to_torch``, extra ``torch``) and
tf.data (``dstore.to_tf_dataset``, extra ``tf``).

Nothing here is imported by ``import dstore``: ``dstore.readers.torch`` imports
torch, and the plan of who reads which records (``dstore.readers.plan``) is
shared by every framework.
"""
