"""Matrix-product kernels the engine picks over torch's defaults, shared by sampling and training.

See ``_onednn``: linear layers through oneDNN (half the time of ``F.linear`` or less on the AMD EPYC
boxes, the same values up to float rounding), with gradients; ``_reordered``: a frozen model's layers
on oneDNN-reordered weights that replace the plain ones (faster again, no extra memory).
"""

from envsuite.engine.kernels._onednn import (
    OneDnnLinear,
    onednn_available,
    onednn_fits,
    onednn_linear,
    reordered_weight,
    route_linears_through_onednn,
)
from envsuite.engine.kernels._reordered import (
    FusedPart,
    FusedProjections,
    ReorderedLinear,
    ReorderReport,
    reorder_frozen_linears,
    zero_filled_biases,
)

__all__ = [
    # linear layers through oneDNN
    "OneDnnLinear",
    "route_linears_through_onednn",
    # a frozen model on reordered weights (sampling engines)
    "FusedPart",
    "FusedProjections",
    "ReorderReport",
    "ReorderedLinear",
    "reorder_frozen_linears",
    "zero_filled_biases",
    # the products themselves
    "onednn_available",
    "onednn_fits",
    "onednn_linear",
    "reordered_weight",
]
