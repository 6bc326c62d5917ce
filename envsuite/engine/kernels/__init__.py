"""Matrix-product kernels the engine picks over torch's defaults, shared by sampling and training.

See ``_onednn``: linear layers through oneDNN, with gradients (training); ``_products``: a frozen
layer's product on one weight layout with a kernel per row count (torch's ``F.linear``, oneDNN on the
plain or reordered weight, envsuite's native kernels: ``_native``); ``_calibration``: choosing among
them by measuring them on this machine (cached per CPU and library versions); ``_plan``: the choices
for one model; ``_first_use``: a plan at once on a new machine, the build and calibration in the
background; ``_reordered``: a frozen model's layers on the chosen layouts, in place of the plain ones
(no extra memory).
"""

from envsuite.engine._host import CpuIdentity, cpu_identity
from envsuite.engine.kernels._calibration import (
    CalibrationResult,
    Choice,
    MachineKey,
    ShapeTiming,
    cache_directory,
    calibrate,
    calibrated_timings,
    calibration_file,
    choose,
)
from envsuite.engine.kernels._first_use import SETUP_ENV, KernelSetup, kernel_plan, kernel_setup
from envsuite.engine.kernels._native import (
    InstructionSet,
    NativeKernels,
    instruction_set,
    native_kernels,
    native_kernels_built,
)
from envsuite.engine.kernels._onednn import (
    OneDnnLinear,
    onednn_available,
    onednn_fits,
    onednn_linear,
    reordered_weight,
    route_linears_through_onednn,
)
from envsuite.engine.kernels._plan import KernelPlan, ProductSite, WeightUse, product_sites
from envsuite.engine.kernels._preparation import Preparation
from envsuite.engine.kernels._products import (
    PATH_NAMES,
    ROW_BUCKETS,
    FrozenLinear,
    Layout,
    Product,
    ProductPath,
    bucket_index,
    lay_out,
    run_path,
    usable_paths,
)
from envsuite.engine.kernels._reordered import (
    FusedPart,
    FusedProjections,
    PanelEmbedding,
    ReorderReport,
    lay_out_frozen_linears,
    reorder_frozen_linears,
    zero_filled_biases,
)
from envsuite.engine.kernels._team_clock import CLOCK_ENV, TEAM_PHASES, TeamClock, read_team_clock

__all__ = [
    # linear layers through oneDNN (training and sampling)
    "OneDnnLinear",
    "route_linears_through_onednn",
    # a frozen layer's product: one layout, a kernel per row count
    "FrozenLinear",
    "Layout",
    "PATH_NAMES",
    "Product",
    "ProductPath",
    "ROW_BUCKETS",
    "bucket_index",
    "lay_out",
    "run_path",
    "usable_paths",
    # choosing by measurement, cached per machine
    "CalibrationResult",
    "Choice",
    "KernelPlan",
    "kernel_plan",
    "MachineKey",
    "ShapeTiming",
    "cache_directory",
    "calibrate",
    "calibration_file",
    "calibrated_timings",
    "choose",
    # first use on a machine: a plan at once, the build and calibration in the background
    "KernelSetup",
    "Preparation",
    "SETUP_ENV",
    "kernel_setup",
    # a frozen model on the chosen layouts (sampling engines)
    "FusedPart",
    "FusedProjections",
    "PanelEmbedding",
    "ProductSite",
    "WeightUse",
    "ReorderReport",
    "lay_out_frozen_linears",
    "product_sites",
    "reorder_frozen_linears",
    "zero_filled_biases",
    # envsuite's native CPU kernels (built on first use)
    "CpuIdentity",
    "InstructionSet",
    "NativeKernels",
    "cpu_identity",
    "instruction_set",
    "native_kernels",
    "native_kernels_built",
    # where the decode step's team of threads spends its time (a diagnostic)
    "CLOCK_ENV",
    "TEAM_PHASES",
    "TeamClock",
    "read_team_clock",
    # the products themselves
    "onednn_available",
    "onednn_fits",
    "onednn_linear",
    "reordered_weight",
]
