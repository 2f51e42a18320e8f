"""iclr26: one pipeline that regenerates the headline tables of 19 ICLR 2026 papers."""
import os as _os

__version__ = "0.1.0"

# Same seed, same numbers on every x86 machine: BLAS and torch pick their kernels by CPU, and an
# AVX-512 machine rounds float32 matmuls differently from an AVX2 one (tiny verdicts moved between
# machines). Every process of the pipeline imports this package before numpy or torch, so the
# AVX2 code path of each library is pinned here, before they load: MKL (torch's BLAS on x86),
# OpenBLAS (numpy's, scipy's), oneDNN and torch's own vectorised kernels. A value already in the
# environment is kept (e.g. a machine that must avoid a kernel), and provenance records all four.
PINNED_KERNELS = {
    "MKL_ENABLE_INSTRUCTIONS": "AVX2",
    "OPENBLAS_CORETYPE": "Haswell",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "ATEN_CPU_CAPABILITY": "avx2",
}
for _name, _value in PINNED_KERNELS.items():
    _os.environ.setdefault(_name, _value)
