"""The course's small Python package: the TinyGPT model every exercise uses.

课程的公共 Python 包：所有练习共用的 TinyGPT 模型。
"""
from .model import Config, TinyGPT, Block

__all__ = ["Config", "TinyGPT", "Block"]
