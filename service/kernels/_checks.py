"""Argument checks shared by the op implementations: a wrong dtype or shape fails with the op's name in the message."""

import torch


def require(condition: bool, op: str, message: str) -> None:
    if not condition:
        raise ValueError(f"{op}: {message}")


def require_dtype(tensor: torch.Tensor, dtypes: tuple[torch.dtype, ...], op: str, name: str) -> None:
    require(tensor.dtype in dtypes, op, f"{name} must be one of {dtypes}, got {tensor.dtype}")


INDEX_DTYPES = (torch.int32, torch.int64)
