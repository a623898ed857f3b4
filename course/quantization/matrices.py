"""The matrices chapter 3 studies: Gaussian weights, with outlier columns, and inputs with salient channels."""

from __future__ import annotations

import torch


def gaussian_matrix(rows: int, cols: int, std: float = 0.02, seed: int = 0) -> torch.Tensor:
    """A (rows, cols) float32 matrix of N(0, std^2) weights, like a trained layer's bulk."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(rows, cols, generator=generator) * std


def outlier_matrix(
    rows: int = 256,
    cols: int = 512,
    n_outlier_cols: int = 4,
    magnitude: float = 20.0,
    std: float = 0.02,
    seed: int = 0,
) -> torch.Tensor:
    """Gaussian weights with a few outlier columns ``magnitude`` times larger than the rest.

    Outlier columns are what trained transformers show in a handful of feature dimensions; the
    columns are chosen with the same seed.
    """
    weight = gaussian_matrix(rows, cols, std, seed)
    generator = torch.Generator().manual_seed(seed + 1)
    columns = torch.randperm(cols, generator=generator)[:n_outlier_cols]
    weight[:, columns] *= magnitude
    return weight


def salient_inputs(
    tokens: int = 512, cols: int = 256, n_salient: int = 3, magnitude: float = 10.0, seed: int = 0
) -> torch.Tensor:
    """(tokens, cols) float32 inputs of N(0, 1) with ``n_salient`` channels ``magnitude`` times larger
    in every token: the activation outliers of large models that AWQ's salient channels are."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(tokens, cols, generator=generator)
    x[:, torch.randperm(cols, generator=generator)[:n_salient]] *= magnitude
    return x
