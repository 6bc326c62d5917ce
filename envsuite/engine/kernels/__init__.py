"""Matrix-product kernels the engine picks over torch's defaults, shared by sampling and training.

See ``_onednn``: linear layers through oneDNN (half the time of ``F.linear`` or less on the AMD EPYC
boxes, the same values up to float rounding), with gradients.
"""

from envsuite.engine.kernels._onednn import (
    OneDnnLinear,
    onednn_available,
    onednn_fits,
    onednn_linear,
    reordered_weight,
    route_linears_through_onednn,
)

__all__ = [
    # linear layers through oneDNN
    "OneDnnLinear",
    "route_linears_through_onednn",
    # the products themselves
    "onednn_available",
    "onednn_fits",
    "onednn_linear",
    "reordered_weight",
]
